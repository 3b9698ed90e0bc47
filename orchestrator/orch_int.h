/*
 * orch_int.h - what orch.c (loop, transitions, records), sched.c (jobs and
 * workers) and orch_api.c (requests) share inside the orchestrator.
 */
#ifndef ORCH_INT_H
#define ORCH_INT_H

#include <nng/nng.h>
#include <nng/supplemental/util/platform.h>
#include <stdbool.h>

#include "api.h"
#include "bus.h"
#include "kclaw.pb-c.h"
#include "orch.h"

#define ORCH_ID_LEN 16
#define ORCH_NROLES 8
#define ORCH_MAX_PROCS 256

struct orch_task;

enum orch_job_state { ORCH_JOB_QUEUED, ORCH_JOB_RUNNING };

/* A job in flight: queued for a worker of its role, or running on one. Its
 * descriptor (orch_job_rec) is in STORE_CF_JOBS until it is answered; its
 * content is built from the store when it is handed out. */
struct orch_job {
	struct orch_task *task;
	uint32_t n; /* job number within the task */
	Kclaw__Role role;
	uint32_t cand;  /* the candidate it is about */
	uint32_t count; /* generator: seeds */
	uint32_t key_n; /* replay key number */
	uint32_t attempt;
	/* Its model provider unavailable since (0: not), and how many waits
	 * for it so far (orch_job_outage). */
	uint64_t outage_since_mono;
	uint32_t outage_waits;
	enum orch_job_state state;
	uint64_t enq_seq;       /* queue order */
	uint64_t deadline_mono; /* running: when it is given up */
	uint64_t ready_mono;    /* queued after a failure: not before */
	char worker[96];
	uint32_t worker_pid;
	/* The GPU it runs on: a device of a host (two sandboxes of one
	 * device number on different hosts are different GPUs). */
	int device;
	char host[64];
	struct orch_job *tnext;         /* the task's jobs */
	struct orch_job *qprev, *qnext; /* the role's queue */
};

/* The descriptor of a job as stored (fixed layout, no padding). */
typedef struct {
	uint32_t magic;
	uint32_t n, role, cand, count, key_n;
} orch_job_rec;

#define ORCH_JOB_MAGIC 0x4b434a31u /* "KCJ1" */

/* Job 0 of a task is its reference check: a reference-only evaluation
 * outside the state machine (whose jobs are numbered from 1), so it
 * changes none of the machine's numbers or rounds. */
#define ORCH_REFCHECK_JOB 0u

/* LLM usage of one role in a task (TaskRecord.usage): every reply's,
 * failed ones included. */
struct orch_usage {
	uint64_t prompt, completion, reasoning, cached, cache_write;
	uint32_t calls, failed_calls;
	char model[128]; /* the first model that answered this role */
};

struct orch_task {
	char id[ORCH_ID_LEN + 1];
	char *name;
	orch_fsm fsm;
	uint64_t created_ms, finished_ms;
	uint32_t running;   /* its jobs running now: fair share */
	uint64_t batch_gen; /* the batch its last transition went into, + 1 */
	const char *why; /* during JOB_FAILED, IMPORT_FAILED, MODEL_UNFIT: what
	                    failed */
	uint64_t served; /* when it last got a worker: round robin */
	/* The task's own job retries and timeouts (FsmParams), else the
	 * orchestrator's. */
	uint32_t job_retries, agent_timeout_ms, eval_timeout_ms;
	struct orch_job *jobs;
	struct orch_task *hnext; /* hash chain */
	char *detail; /* TaskRecord.state_detail (malloc'd; NULL: none) */
	struct orch_usage usage[ORCH_NROLES];
	/* The best kernel's evaluation: torch.compile's time, the speedup
	 * over it (0: unknown). */
	double compile_ms, compile_speedup;
	/* TaskRecord.reference_check (NULL: none scheduled); an unpacked
	 * message, freed with kclaw__reference_check__free_unpacked. */
	Kclaw__ReferenceCheck *refcheck;
	/* TaskRecord.last_agent_error (malloc'd; NULL: none) and when. */
	char *agent_error;
	uint64_t agent_error_ms;
};

/* A worker waiting for a job (its request is held). */
struct orch_waiter {
	bus_call *call;
	Kclaw__Role role;
	int device;
	char host[64];
	uint64_t expires_mono;
	char worker[96];
	uint32_t pid;
	struct orch_waiter *next;
};

/* An input that came from an NNG thread, the importer or the loop itself. */
enum orch_msg_kind {
	ORCH_MSG_API,
	ORCH_MSG_WORK,
	ORCH_MSG_RETRIEVED,
	ORCH_MSG_IMPORT_PROGRESS, /* text: where the import stands */
	ORCH_MSG_IMPORTED         /* spec (blobs set), or text: why not */
};
struct orch_msg {
	enum orch_msg_kind kind;
	bus_call *call;
	struct orch_task *task; /* RETRIEVED, IMPORT_* */
	uint32_t job;
	Kclaw__CandidateRecord *retrieved; /* methods in a record */
	char *signature;
	Kclaw__TaskSpec *spec; /* IMPORTED */
	char *text;            /* IMPORT_PROGRESS, IMPORTED (failed) */
	struct orch_msg *next;
};

struct orch_importer;

/* An API call answered once the cycle's batch is committed. */
struct orch_reply {
	bus_call *call;
	uint64_t request_id;
	Kclaw__ApiCode code;
	char *error;
	uint8_t *payload;
	size_t plen;
	struct orch_reply *next;
};

struct orch {
	orch_options opt;
	store *db;
	bus_server *api, *work;
	bus_pub *pub;
	uint64_t started_mono;

	/* Inputs from NNG threads. */
	nng_mtx *mtx;
	nng_cv *cv;
	struct orch_msg *in_head, *in_tail;
	volatile int stopping;
	int wake_fd[2]; /* orch_stop writes here (signal safe) */

	/* Tasks. */
	struct orch_task **buckets;
	size_t nbuckets, ntasks, nactive;
	struct orch_task **all; /* in creation order */
	size_t nall, capall;

	/* Scheduling. */
	struct orch_job *qhead[ORCH_NROLES], *qtail[ORCH_NROLES];
	struct orch_job *rhead[ORCH_NROLES]; /* running */
	struct orch_waiter *waiters[ORCH_NROLES];
	uint32_t nwaiting;
	uint64_t enq_seq;
	bool draining; /* the deployment stops: workers are told to exit */
	uint64_t serve_seq;

	/* The cycle in progress. */
	store_batch *batch;
	unsigned staged;                        /* records in batch */
	uint64_t batch_gen;                     /* batches committed */
	struct orch_msg *loop_head, *loop_tail; /* inputs for the next cycle */
	struct orch_reply *replies, **replies_tail;
	Kclaw__Event **pending_events; /* published after the commit */
	size_t npending, cappending;
	struct orch_job **to_queue; /* queued after the commit */
	size_t nto_queue, capto_queue;
	struct orch_msg *to_retrieve; /* retrievals after the commit */
	struct orch_task **to_import; /* imports after the commit */
	size_t nto_import, capto_import;
	struct orch_importer *importer;
	struct orch_blob_server *blobsrv; /* the Blob rpc (blobs.c) */
	struct orch_upload *upload;       /* the PutBlob rpc (upload.c) */

	uint64_t last_seq;      /* the last event's, maybe not committed yet */
	uint64_t committed_seq; /* the last event in the store */
	uint64_t last_tick_mono;
	orch_counters counters;

	/* The supervisor's view of the processes (Health, status). */
	Kclaw__ProcessInfo procs[ORCH_MAX_PROCS];
	char proc_names[ORCH_MAX_PROCS][64];
	char proc_errors[ORCH_MAX_PROCS][256]; /* ProcessInfo.last_error */
	size_t nprocs;
};

/* ---- orch.c ---- */
struct orch_task *orch_task_find(orch *o, const char *id);
/* Feeds in to task's machine inside the cycle's batch; reply/eval/recs
 * are the data that came with it (may be NULL). */
int orch_task_input(orch *o, struct orch_task *t, const orch_input *in,
    const Kclaw__AgentReply *reply, const Kclaw__EvalResult *eval,
    const struct orch_msg *retrieved);
/* Records an event in the cycle's batch (takes ev); published after the
 * commit. */
int orch_event(orch *o, Kclaw__Event *ev);
int orch_task_record(orch *o, const struct orch_task *t, Kclaw__TaskRecord *rec,
    char **error_out);
void orch_task_record_free(Kclaw__TaskRecord *rec);
int orch_submit(orch *o, const Kclaw__TaskSpec *spec, const char *task_id,
    char out_id[ORCH_ID_LEN + 1]);
int orch_cancel(orch *o, struct orch_task *t);
/* Candidate "c<n>" of a task: store key and record. */
void orch_cand_id(uint32_t n, char out[16]);
int orch_cand_get(
    orch *o, const char *task_id, uint32_t n, Kclaw__CandidateRecord **out);
int orch_spec_get(orch *o, const char *task_id, Kclaw__TaskSpec **out);
/* TASKS keys "<id>/plan", "<id>/diag", "<id>/sig": scratch records. */
int orch_task_aux_get(
    orch *o, const char *task_id, const char *what, void **val, size_t *len);
/* The same record unpacked as d's message; NULL if absent or unreadable. */
ProtobufCMessage *orch_task_aux_msg(orch *o, const char *task_id,
    const char *what, const ProtobufCMessageDescriptor *d);
const char *orch_eval_status_name(Kclaw__EvalStatus st);
/* Queues an input for the loop (takes m); safe from any thread. */
void orch_post(orch *o, struct orch_msg *m);
/* Adds an agent reply's usage, failed or not, to its task's role (and
 * stages the task's record): TaskRecord.usage and .tokens, and the token
 * budget on the machine's next input. */
void orch_task_usage(orch *o, struct orch_task *t, const Kclaw__AgentReply *r);
/* The reference check's answer: the sandbox's result (r), or why it
 * failed for good (r NULL). Records it with the task and publishes
 * REFERENCE_CHECKED; the task's machine is not involved. */
void orch_refcheck_done(
    orch *o, struct orch_task *t, const Kclaw__EvalResult *r, const char *why);

/* ---- sched.c ---- */
uint32_t orch_job_retries(const orch *o, const struct orch_task *t);
uint32_t orch_job_timeout_ms(const orch *o, const struct orch_job *j);
/* A new job for an action (queued after the commit). */
/* The plan of a correct kernel's tune candidate (tune.c): *out malloc'd,
 * or NULL when the plan has nothing the sandbox could sweep. */
int orch_tune_plan(const char *plan_json, char **out);
/* The task aux key of the plan a Planner job gives or an Optimizer job
 * applies: "plan", or "plan.<slot>" in a wave. */
void orch_plan_key(const orch_fsm *f, uint32_t job, char *key, size_t sz);
int orch_job_new(
    orch *o, struct orch_task *t, const orch_action *a, bool stage);
void orch_job_id(const struct orch_task *t, uint32_t n, char *out, size_t sz);
/* Forgets every job of t (in the batch too). */
void orch_jobs_drop(orch *o, struct orch_task *t);
void orch_job_enqueue(orch *o, struct orch_job *j);
void orch_work_call(orch *o, bus_call *call);
/* Deadlines of running jobs and held workers. */
void orch_sched_timers(orch *o);
/* Hands queued jobs to waiting workers. */
void orch_dispatch(orch *o);
/* The deployment is stopping (`kclaw up` said so): every waiting worker,
 * and each one that asks from now on, is told to exit. Results are still
 * taken. */
void orch_sched_drain(orch *o);
/* A process the supervisor saw die: re-queue its jobs now. */
/* Process pid of host (a supervisor's; "": any host's) died. */
void orch_sched_process_died(orch *o, uint32_t pid, const char *host);
void orch_sched_close(orch *o);

/* ---- import.c: tensors into the store, off the loop ---- */
int orch_import_open(orch *o);
/* Stops the importer (an import in progress is abandoned: a restart does
 * it again). */
void orch_import_close(orch *o);
/* Imports t's stored spec; the loop gets IMPORT_PROGRESS and IMPORTED
 * inputs. Only once the spec is committed. */
int orch_import_queue(orch *o, struct orch_task *t);
/* t no longer waits for its import (cancelled, out of time). */
void orch_import_cancel(orch *o, struct orch_task *t);

/* ---- orch_api.c ---- */
void orch_api_call(orch *o, bus_call *call);
/* Queues an API answer for after the commit; takes payload (malloc'd). */
void orch_api_answer(orch *o, bus_call *call, uint64_t request_id,
    Kclaw__ApiCode code, const char *error, const ProtobufCMessage *payload);

#endif
