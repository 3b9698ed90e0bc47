/*
 * orch.h - kclawd's core: the tasks' state machines driven by one loop,
 * their store records, the scheduler of work by pull, the API and the
 * events (DESIGN.md "Processes", "The state machine", "API and events").
 *
 * One thread runs orch_run. NNG's callbacks only queue the calls they
 * receive; the loop takes every queued input, applies the transitions,
 * commits all of them in one synced store batch, and only then runs their
 * actions (replies, dispatches, publications). A restarted orchestrator
 * loads every unfinished task and re-queues its in-flight jobs.
 */
#ifndef ORCH_H
#define ORCH_H

#include <stdint.h>

#include "fsm.h"
#include "kc_config.h"
#include "store.h"

typedef struct orch orch;

/* A seed's strategy, one line (orch_memory_ops.seed_strategies). */
#define ORCH_STRATEGY_MAX 400

/*
 * Short-term and long-term memory as the orchestrator uses them: a seam,
 * so the state machine's effects do not depend on how memory is kept.
 * orch_memory_basic() is the orchestrator's own (records and bounded
 * renderings; no long-term retrieval), orch_memory_kc() the memories of
 * store/memory.h when they are built.
 */
typedef struct {
	int kind; /* 1: a repair step, 2: an optimisation attempt */
	uint32_t round;
	const char *kernel_id; /* the failing kernel (repair), new one (opt) */
	const char *status;    /* EvalStatus name of the kernel's review */
	const char *failure;   /* what failed */
	const char *diagnosis;
	const char *fix;
	const char *result_id; /* repair: the repaired kernel */
	const char *outcome;
	int passed;          /* repair: the chain ends here */
	const char *base_id; /* opt: the base */
	const char *method;
	const char *plan;
	double speedup; /* opt: over the base; 0 when it failed */
	double ms;
} orch_memory_record;

/* What retrieval knows beyond the base kernel: the task (its tolerance
 * decides whether lower precision may be offered) and the GPU. */
typedef struct {
	const Kclaw__TaskSpec *task; /* may be NULL */
	uint32_t sm_count;           /* 0: unknown */
} orch_retrieve_ctx;

typedef struct {
	const char *name;
	/* Ranked methods for a base kernel (its record holds its evaluation
	 * and features). *recs is a malloc'd array of unpacked messages, each
	 * freed with kclaw__recommendation__free_unpacked; *signature is
	 * malloc'd (may be ""). */
	int (*retrieve)(void *arg, store *s, const Kclaw__CandidateRecord *base,
	    const orch_retrieve_ctx *ctx, Kclaw__Recommendation ***recs,
	    size_t *n, char **signature);
	/* Puts one short-term record into b, committed with its transition. */
	int (*record)(void *arg, store *s, store_batch *b, const char *task_id,
	    const orch_memory_record *r);
	/* Bounded renderings for the Diagnoser and the Planner (malloc'd). */
	int (*repair_chain)(void *arg, store *s, const char *task_id,
	    size_t max_bytes, char **out);
	int (*opt_history)(void *arg, store *s, const char *task_id,
	    const char *base_id, size_t max_bytes, char **out);
	/* Learns from one optimisation attempt (into b); may be NULL. */
	int (*learn)(void *arg, store *s, store_batch *b, const char *signature,
	    const char *method, const char *attempt_id, int correct,
	    double speedup);
	/* Answers the API's Memory rpc: *resp is malloc'd (freed with
	 * kclaw__memory_response__free_unpacked). May be NULL
	 * (API_UNKNOWN_METHOD). */
	int (*query)(void *arg, store *s, const Kclaw__MemoryRequest *req,
	    Kclaw__MemoryResponse **resp);
	/* The lessons of other tasks shown to the Planner of base_id, kept
	 * when its methods were retrieved: *lines is one malloc'd block (a
	 * single free), *n 0 when there are none. May be NULL. */
	int (*lessons)(void *arg, store *s, const char *task_id,
	    const char *base_id, char ***lines, size_t *n);
	/* Appended. Strategies for the k seeds of a task, each of its own
	 * method family, best first, into out[0..*n) (*n <= k); the
	 * orchestrator completes a short list with its own. May be NULL. */
	int (*seed_strategies)(void *arg, store *s, const Kclaw__TaskSpec *task,
	    uint32_t k, char (*out)[ORCH_STRATEGY_MAX], size_t *n);
	/* The best kernel of the solved task most similar to task (by the
	 * task's feature vector, orch_task_vector), other than task_id: *best
	 * malloc'd (kclaw__candidate__free_unpacked), *from the task's name
	 * (malloc'd); *best NULL when none. May be NULL. */
	int (*warm_start)(void *arg, store *s, const char *task_id,
	    const Kclaw__TaskSpec *task, Kclaw__Candidate **best, char **from);
	/* Keeps a finished task's best kernel with its feature vector, for
	 * warm_start (into b, committed with the transition). May be NULL. */
	int (*solved)(void *arg, store *s, store_batch *b, const char *task_id,
	    const Kclaw__TaskSpec *task, const Kclaw__Candidate *best,
	    double speedup);
} orch_memory_ops;

const orch_memory_ops *orch_memory_basic(void);
/* store/memory.h behind the seam (orchestrator/memory_kc.c). */
const orch_memory_ops *orch_memory_kc(void);

typedef struct {
	kc_config cfg;        /* addresses, store folder, token */
	orch_params defaults; /* the state machine's defaults */
	uint32_t job_retries; /* attempts per job beyond the first */
	/* A failed job waits retry_backoff_ms before its first retry, twice
	 * as long before each next one, at most retry_backoff_max_ms. */
	uint32_t retry_backoff_ms, retry_backoff_max_ms;
	/* An agent job whose model provider is unavailable (every try of its
	 * call failed transiently, AgentReply.model_unavailable) waits for
	 * the provider this long in all, retried at the backoff, before it
	 * counts as a failed attempt; 0: it counts at once. */
	uint32_t model_outage_ms;
	uint32_t role_timeout_ms[8]; /* agent jobs' deadline by Kclaw__Role */
	uint32_t eval_timeout_ms;
	uint32_t poll_ms;      /* an idle worker's empty answer after this */
	uint32_t render_bytes; /* bound of a rendered short-term memory */
	uint64_t wall_seconds; /* default wall-time budget; 0: none */
	/* Evaluations ask for CUPTI metrics (1, the default): long-term
	 * retrieval reads them; 0 saves the profiling passes. */
	uint32_t profile;
	/* The GPU's streaming multiprocessors for retrieval's rules, when
	 * evaluations do not report them (a metric named sm_count); 0:
	 * unknown. */
	uint32_t sm_count;
	/* One reference-only evaluation per task when it starts seeding
	 * (1, the default; docs/orchestrator.md "The reference check"). */
	uint32_t reference_check;
	/* Uploads (PutBlob, upload.h): one untouched this long is removed;
	 * the declared sizes of unfinished ones, in all, at most. */
	uint32_t upload_idle_ms;
	uint64_t upload_staged_bytes;
	const orch_memory_ops *memory;
	void *memory_arg;
} orch_options;

/*
 * Defaults, then kclaw.json's "orchestrator" object: seeds, rounds,
 * max_repairs, rt, at, max_duplicates, tokens, wall_seconds,
 * target_speedup (the task defaults), job_retries, retry_backoff_ms,
 * retry_backoff_max_ms, model_outage_ms, agent_timeout_ms (every agent
 * role), role_timeout_ms
 * ({"generator": ms, ...}), eval_timeout_ms, poll_ms, render_bytes,
 * profile, sm_count, reference_check, upload_idle_ms, upload_staged_bytes.
 * A task's params and budget override them.
 */
int orch_options_load(orch_options *opt, const kc_config *cfg);

/* Opens the store, listens on the API, events and work addresses, and
 * loads every task (resuming the unfinished ones). */
int orch_open(orch **out, const orch_options *opt);
/* Runs the loop until orch_stop. */
int orch_run(orch *o);
/* Asks the loop to stop; safe from a signal handler. */
void orch_stop(orch *o);
void orch_close(orch *o);

/* Counters for tests and the benchmark. */
typedef struct {
	uint64_t transitions;
	uint64_t commits;         /* synced */
	uint64_t dropped_replies; /* for jobs no longer awaited */
	uint64_t retries;
	uint32_t tasks_active;
	uint32_t tasks_total;
} orch_counters;
void orch_get_counters(orch *o, orch_counters *c);

#endif
