/*
 * fsm.h - a task's state machine (DESIGN.md "The state machine").
 *
 * orch_fsm_step is pure: (state, input) -> (state, actions). It reads no
 * clock, store or socket; the caller (orch.c) persists the new state with
 * the actions' records in one store batch, then runs the actions. So a
 * task's whole lifecycle can be tested, replayed and resumed from its state
 * alone.
 *
 * Candidates and jobs are numbered per task: candidate n is "c<n>", job n is
 * "<task id>-j<n>". A job's number is what an input names, so an input for a
 * job the machine no longer awaits is recognised and ignored.
 */
#ifndef ORCH_FSM_H
#define ORCH_FSM_H

#include <stdbool.h>
#include <stdint.h>

#include "kclaw.pb-c.h"

enum orch_state {
	ORCH_ST_SUBMITTED,
	ORCH_ST_SEEDING,      /* awaiting the Generator's k seeds */
	ORCH_ST_REVIEW_SEEDS, /* awaiting the seeds' evaluations */
	ORCH_ST_DIAGNOSE,     /* awaiting the Diagnoser */
	ORCH_ST_REPAIR,       /* awaiting the Repairer */
	ORCH_ST_REVIEW,       /* awaiting the evaluation of a new candidate */
	ORCH_ST_FEATURES,     /* awaiting the Feature Extractor on the base */
	ORCH_ST_RETRIEVE,     /* awaiting long-term memory retrieval */
	ORCH_ST_PLAN,         /* awaiting the Planner */
	ORCH_ST_OPTIMIZE,     /* awaiting the Optimizer */
	ORCH_ST_DONE,
	ORCH_ST_FAILED,
	ORCH_ST_CANCELLED,
	ORCH_ST_COUNT
};

enum orch_input_kind {
	ORCH_IN_START,
	ORCH_IN_SEEDS,      /* Generator reply: n candidates */
	ORCH_IN_EVALUATED,  /* evaluation result of candidate cand */
	ORCH_IN_DIAGNOSED,  /* Diagnoser reply */
	ORCH_IN_CANDIDATE,  /* Repairer or Optimizer reply: n candidates */
	ORCH_IN_FEATURES,   /* Feature Extractor reply */
	ORCH_IN_RETRIEVED,  /* long-term memory answered */
	ORCH_IN_PLANNED,    /* Planner reply */
	ORCH_IN_JOB_FAILED, /* a job failed for good (retries spent) */
	ORCH_IN_CANCEL,
	ORCH_IN_TICK, /* time passes: deadlines */
	ORCH_IN_COUNT
};

/* Why a task stopped. */
enum orch_stop {
	ORCH_STOP_NONE,
	ORCH_STOP_ROUNDS,      /* round budget spent */
	ORCH_STOP_TOKENS,      /* token budget spent */
	ORCH_STOP_DEADLINE,    /* wall-time budget spent */
	ORCH_STOP_TARGET,      /* target speedup reached */
	ORCH_STOP_CANCELLED,   /* by a user */
	ORCH_STOP_NO_CORRECT,  /* repairs exhausted without a correct kernel */
	ORCH_STOP_NO_DEVICE,   /* the sandbox has no GPU */
	ORCH_STOP_JOB_FAILED,  /* an agent or evaluation failed for good */
	ORCH_STOP_NO_CANDIDATE /* an agent answered without a candidate */
};

/* Every parameter a task may set (TaskSpec.params and .budget). */
typedef struct {
	uint32_t seeds;       /* k seeds, 1..ORCH_MAX_SEEDS */
	uint32_t max_rounds;  /* optimize and repair rounds */
	uint32_t max_repairs; /* repair attempts per chain */
	uint32_t spare;       /* keeps the layout free of padding */
	double rt;            /* relative promotion threshold */
	double at;            /* absolute promotion threshold, ms */
	double target_speedup;
	uint64_t token_budget; /* 0: unlimited */
	uint64_t deadline_ms;  /* unix ms; 0: none */
} orch_params;

#define ORCH_MAX_SEEDS 16

enum orch_origin { ORCH_ORIGIN_SEED, ORCH_ORIGIN_REPAIR, ORCH_ORIGIN_OPT };

/*
 * The whole state of one task's machine; fixed size and free of padding,
 * stored as bytes (TaskRecord.fsm) and compared with memcmp.
 */
typedef struct {
	uint32_t magic; /* ORCH_FSM_MAGIC: the layout's version */
	uint32_t state;
	orch_params p;
	uint32_t round;        /* finished optimize and repair rounds */
	uint32_t next_cand;    /* the next candidate number */
	uint32_t next_job;     /* the next job number */
	uint32_t role_jobs[8]; /* jobs issued per Kclaw__Role: replay keys */
	/* Awaited jobs: await_first .. await_first + await_n - 1. */
	uint32_t await_first, await_n, await_done; /* done: bitmask */
	uint32_t seed_first;                       /* seeds' candidates */
	uint32_t seed_best, promising, promising_rank, no_device;
	uint32_t base, best; /* candidate numbers; 0: none */
	uint32_t cur;        /* the candidate under review, or failing */
	uint32_t origin;     /* enum orch_origin of cur */
	uint32_t chain;      /* first failing kernel of the repair chain */
	uint32_t repairs;
	uint32_t stop; /* enum orch_stop */
	uint32_t spare;
	uint64_t tokens; /* LLM tokens spent */
	double seed_best_ms, base_ms, best_ms, ref_ms;
} orch_fsm;

_Static_assert(
    sizeof(orch_fsm) == 64 + 28 * 4 + 5 * 8, "orch_fsm must have no padding");

#define ORCH_FSM_MAGIC 0x4b434631u /* "KCF1" */

typedef struct {
	enum orch_input_kind kind;
	uint32_t job;    /* the job this answers (not START, CANCEL, TICK) */
	uint32_t n;      /* SEEDS, CANDIDATE: candidates in the reply */
	uint64_t tokens; /* agent replies: tokens spent */
	uint32_t cand;   /* EVALUATED: which candidate */
	Kclaw__EvalStatus status; /* EVALUATED */
	double ms;                /* EVALUATED: median time */
	double ref_ms;            /* EVALUATED: the reference's median time */
	uint64_t now_ms;          /* TICK */
} orch_input;

enum orch_action_kind {
	ORCH_ACT_AGENT,    /* issue job `job` to role for candidate cand */
	ORCH_ACT_EVAL,     /* issue evaluation job `job` of candidate cand */
	ORCH_ACT_RETRIEVE, /* query long-term memory for candidate cand */
	ORCH_ACT_EVENT,    /* publish event kind (cand, value) */
	ORCH_ACT_RECORD,   /* short-term memory: cand's outcome (see below) */
	ORCH_ACT_DROP_JOBS /* forget every job of the task */
};

/*
 * ORCH_ACT_RECORD: origin says which record: REPAIR is a step of the
 * repair chain `aux` (cand is the fix), OPT an optimization attempt on base
 * `aux` (cand is the new kernel); status and value (speedup over the base)
 * are the outcome.
 */
typedef struct {
	enum orch_action_kind kind;
	Kclaw__Role role;
	Kclaw__EventKind event;
	uint32_t job;
	uint32_t cand;
	uint32_t aux;
	uint32_t count;  /* generator: seeds asked for */
	uint32_t key_n;  /* replay key: this role's job number in the task */
	uint32_t origin; /* RECORD */
	Kclaw__EvalStatus status;
	double value;
} orch_action;

#define ORCH_MAX_ACTIONS (ORCH_MAX_SEEDS + 8)

typedef struct {
	unsigned n;
	orch_action a[ORCH_MAX_ACTIONS];
} orch_actions;

/* Fills params with the defaults of DESIGN.md. */
void orch_params_default(orch_params *p);
/* A new machine in SUBMITTED with params p (values are clamped). */
void orch_fsm_init(orch_fsm *f, const orch_params *p);

/*
 * The transition function. Returns true if the input changed the machine
 * (then *next and *acts hold the new state and what to do), false if the
 * input does not apply (a late reply, an input for another state): the
 * caller persists and does nothing.
 */
bool orch_fsm_step(const orch_fsm *f, const orch_input *in, orch_fsm *next,
    orch_actions *acts);

/* What a resumed task must redo that is not a job (RETRIEVE). */
void orch_fsm_resume(const orch_fsm *f, orch_actions *acts);

bool orch_state_final(uint32_t state);
const char *orch_state_name(uint32_t state);
const char *orch_input_name(enum orch_input_kind kind);
const char *orch_stop_text(uint32_t stop);
/* "generator", ...; the role names of `kclaw-agent --role`. */
const char *orch_role_name(Kclaw__Role role);
/* KCLAW__ROLE__ROLE_UNSPECIFIED when name is unknown. */
Kclaw__Role orch_role_parse(const char *name);

#endif
