/*
 * worker.h - the worker side of work by pull (DESIGN.md "Processes").
 *
 * A worker (agent or sandbox) dials the orchestrator's work address with a
 * REQ socket and asks for a job of its role; the orchestrator holds the
 * request until it has one (long poll) or answers with an empty WorkReply
 * after its poll interval. The next request carries the previous job's
 * result. A worker killed mid-job simply never answers: the orchestrator's
 * deadline re-issues the job to another worker.
 */
#ifndef KC_WORKER_H
#define KC_WORKER_H

#include <stdint.h>

#include "kclaw.pb-c.h"

typedef struct kc_worker kc_worker;

/* The host a worker names itself by (its GPUs are this host's):
 * KCLAW_WORKER_HOST where set (hostnames need not be unique), else the
 * hostname, else "localhost". */
void kc_worker_host(char *buf, size_t n);

/* worker_id may be NULL (one is made from host, role and pid). */
int kc_worker_open(kc_worker **out, const char *work_url, Kclaw__Role role,
    int device, const char *worker_id, const char *token);
void kc_worker_close(kc_worker *w);
const char *kc_worker_id(const kc_worker *w);

/*
 * Sends the previous job's result (agent_reply or eval_result, both may be
 * NULL) and waits up to wait_ms (-1: as long as the orchestrator holds
 * the request, but at most 15 s) for the next job. Returns:
 *   0            *job is set (free with kclaw__work_reply__free_unpacked);
 *                a job has a non-empty job_id, an idle reply has none
 *   KC_ETIMEDOUT no answer at all within the wait, or the orchestrator went
 *                away mid-call (either way the socket is reopened); the
 *                result, if any, must be sent again with the next call
 *   KC_ECANCELED the orchestrator told this worker to shut down
 *   KC_EPERM     the orchestrator refused this worker (bad token)
 */
int kc_worker_next(kc_worker *w, const Kclaw__AgentReply *agent_reply,
    const Kclaw__EvalResult *eval_result, int wait_ms, Kclaw__WorkReply **job);

/*
 * The Blob rpc: up to length bytes of the blob `hash` from offset, within
 * timeout_ms. *out (free with kclaw__blob_chunk__free_unpacked) has the
 * blob's total size. KC_EPERM: bad token; KC_ENOENT: the orchestrator has
 * no such blob; KC_EINVAL: the request was wrong (its message says how);
 * KC_ETIMEDOUT: no answer (the socket is reopened; ask again). Between
 * jobs only: a worker has one call at a time.
 */
/*
 * Tells the orchestrator, during a job, that its model calls fail and are
 * retried (WorkRequest.progress); answered at once. Mid-job only, in the
 * thread that runs the job: a worker has one call at a time. Errors as
 * kc_worker_blob's; a lost word is harmless (the next one, or the job's
 * result, says it again).
 */
int kc_worker_progress(
    kc_worker *w, const Kclaw__AgentProgress *progress, int timeout_ms);

int kc_worker_blob(kc_worker *w, const char *hash, uint64_t offset,
    uint32_t length, int timeout_ms, Kclaw__BlobChunk **out);

#endif
