/*
 * sandbox_client.h - drives a private kclaw-sandbox for one or more
 * evaluations, acting as its orchestrator: the sandbox is started on a
 * fresh ipc:// address, pulls each job from here like it would from kclawd,
 * and is told to shut down at the end. Used by `kclaw eval`, the GPU test
 * suite and the benchmark.
 */
#ifndef SBX_SANDBOX_CLIENT_H
#define SBX_SANDBOX_CLIENT_H

#include <stdio.h>
#include <sys/types.h>

#include "kclaw.pb-c.h"

typedef struct {
	const char *sandbox_bin; /* NULL: $KCLAW_BIN/kclaw-sandbox, else the
	                            one beside this executable */
	const char *child_path;  /* NULL: the sandbox's default child */
	int device;
	const char *arch;       /* --arch for the sandbox, or NULL */
	const char *home;       /* --home for the sandbox (its compile cache) */
	const char *events_url; /* --events-url (control events), or NULL */
	int start_timeout_ms;   /* default 60000 */
} sbx_client_opts;

typedef struct sbx_session sbx_session;

/* Starts the sandbox; it is ready once it asks for its first job. */
int sbx_session_open(sbx_session **out, const sbx_client_opts *o);
/*
 * Hands req to the sandbox and waits up to timeout_ms for its result (the
 * sandbox enforces the request's own deadline; this one only guards
 * against a sandbox that stopped answering). A job_id is set when req has
 * none. On success *res is the sandbox's result (free with
 * kclaw__eval_result__free_unpacked).
 */
int sbx_session_eval(sbx_session *s, Kclaw__EvalRequest *req, int timeout_ms,
    Kclaw__EvalResult **res);
pid_t sbx_session_pid(const sbx_session *s);
/* Tells the sandbox to stop, waits for it (kills it after a while). */
void sbx_session_close(sbx_session *s);

/* Prints a result for people: status, message, mismatch, timing, kernels,
 * metrics, compile log on errors. */
void sbx_result_print(FILE *f, const Kclaw__EvalResult *r);

#endif
