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
#include <stddef.h>
#include <stdint.h>

#include "kclaw.pb-c.h"

enum orch_state {
	ORCH_ST_SUBMITTED,
	ORCH_ST_SEEDING,      /* awaiting the k Generators */
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
	/* Its tensor files enter the store (off the loop). Appended: stored
	 * states keep their numbers. */
	ORCH_ST_IMPORTING,
	/* A wave: K Planners, Optimizers and evaluations of one round. */
	ORCH_ST_WAVE,
	ORCH_ST_COUNT
};

enum orch_input_kind {
	ORCH_IN_START,
	ORCH_IN_SEEDS,      /* a Generator's reply: its first candidate */
	ORCH_IN_EVALUATED,  /* evaluation result of candidate cand */
	ORCH_IN_DIAGNOSED,  /* Diagnoser reply */
	ORCH_IN_CANDIDATE,  /* Repairer or Optimizer reply: n candidates */
	ORCH_IN_FEATURES,   /* Feature Extractor reply */
	ORCH_IN_RETRIEVED,  /* long-term memory answered */
	ORCH_IN_PLANNED,    /* Planner reply */
	ORCH_IN_JOB_FAILED, /* a job failed for good (retries spent) */
	ORCH_IN_CANCEL,
	ORCH_IN_TICK,          /* time passes: deadlines */
	ORCH_IN_IMPORT,        /* instead of START: the tensors are imported */
	ORCH_IN_IMPORTED,      /* the import finished */
	ORCH_IN_IMPORT_FAILED, /* the import failed (why: the caller's) */
	ORCH_IN_TUNED,         /* the tune candidate's sweep (job tune_job) */
	ORCH_IN_MODEL_UNFIT,   /* an agent: the model cannot take the task */
	ORCH_IN_COUNT
};

/* Why a task stopped. */
enum orch_stop {
	ORCH_STOP_NONE,
	ORCH_STOP_ROUNDS,       /* round budget spent */
	ORCH_STOP_TOKENS,       /* token budget spent */
	ORCH_STOP_DEADLINE,     /* wall-time budget spent */
	ORCH_STOP_TARGET,       /* target speedup reached */
	ORCH_STOP_CANCELLED,    /* by a user */
	ORCH_STOP_NO_CORRECT,   /* repairs exhausted without a correct kernel */
	ORCH_STOP_NO_DEVICE,    /* the sandbox has no GPU */
	ORCH_STOP_JOB_FAILED,   /* every Generator or seed evaluation failed */
	ORCH_STOP_NO_CANDIDATE, /* no Generator answered with a candidate */
	ORCH_STOP_IMPORT_FAILED, /* the task's tensors could not be imported */
	ORCH_STOP_SOL,           /* the best is within sol_stop of light */
	ORCH_STOP_MODEL_UNFIT    /* the model cannot take the task's prompts */
};

/* Every parameter a task may set (TaskSpec.params and .budget). */
typedef struct {
	uint32_t seeds;       /* k seeds: k Generator jobs, 1..ORCH_MAX_SEEDS */
	uint32_t max_rounds;  /* optimize and repair rounds */
	uint32_t max_repairs; /* repair attempts per chain */
	/* Duplicate answers in a row that spend no round (their earlier
	 * result is reused); the next one spends a round like any other. */
	uint32_t max_duplicates;
	double rt; /* promote when base_ms / ms >= 1 + rt */
	double at; /* or when speedup - the base's speedup >= at */
	double target_speedup;
	uint64_t token_budget; /* 0: unlimited */
	uint64_t deadline_ms;  /* unix ms; 0: none */
	/* Binding screening: the share of rounds whose Planner may choose a
	 * method outside the retrieved ones (orch_fsm_explores); 0: none. */
	double explore_share;
	/* Stop when the best kernel's sol_fraction >= sol_stop; 0: never. */
	double sol_stop;
	/* K candidates per optimisation round (a wave): K Planners on the
	 * top K retrieved methods, each Optimizer as its plan arrives, each
	 * evaluation as its kernel arrives; 1..ORCH_MAX_WAVE. */
	uint32_t candidates_per_round;
	/* 1: a correct kernel gets a tune candidate, swept by the sandbox
	 * between rounds (ORCH_ACT_TUNE); 0: none. */
	uint32_t tune;
} orch_params;

#define ORCH_EXPLORE_SHARE_DEFAULT 0.2
#define ORCH_SOL_STOP_DEFAULT 0.9
/* One candidate per round unless a task or kclaw.json asks for more
 * (docs/orchestrator.md "Candidates in parallel" says why). */
#define ORCH_CANDIDATES_PER_ROUND_DEFAULT 1

#define ORCH_MAX_SEEDS 16
#define ORCH_MAX_WAVE 8
/* Tune candidates are numbered from here (c9000, c9001, ...), so that
 * the model's candidates keep the numbers they have without tuning (a
 * recorded session's candidate ids stay what they were). */
#define ORCH_TUNE_CAND_FIRST 9000u

enum orch_origin {
	ORCH_ORIGIN_SEED,
	ORCH_ORIGIN_REPAIR,
	ORCH_ORIGIN_OPT,
	ORCH_ORIGIN_TUNE /* the sandbox's sweep of a correct kernel */
};

/* Reference times kept for their median (a ring of the latest). */
#define ORCH_REF_SAMPLES 16

/*
 * The whole state of one task's machine; fixed size and free of padding,
 * stored as bytes (TaskRecord.fsm) and compared with memcmp.
 *
 * Seeding awaits k Generator jobs (job await_first + i gives seed
 * candidate seed_first + i), then the seeds' evaluations (job await_first
 * + i evaluates seed i), so numbers never depend on the order in which
 * answers arrive.
 *
 * A candidate's speedup is the reference's time measured in the same
 * evaluation over the candidate's, or, when an evaluation did not time
 * the reference, the median of the reference's times over the task.
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
	uint32_t seed_got;     /* seeds a Generator answered with: bitmask */
	uint32_t seed_tried;   /* seeds whose repair chain ran: bitmask */
	uint32_t no_device;    /* seeds the sandbox had no GPU for */
	uint32_t base, best;   /* candidate numbers; 0: none */
	uint32_t cur;          /* the candidate under review, or failing */
	uint32_t origin;       /* enum orch_origin of cur */
	uint32_t chain;        /* first failing kernel of the repair chain */
	uint32_t chain_origin; /* enum orch_origin of chain */
	uint32_t chain_round;  /* the round that recorded chain's failure */
	uint32_t repairs;
	uint32_t dups;          /* duplicate answers in a row */
	uint32_t failed_rounds; /* rounds whose agent job failed for good */
	uint32_t reused;        /* evaluations saved by duplicates */
	uint32_t stop;          /* enum orch_stop */
	uint32_t ref_n;         /* reference times seen (ref_ring) */
	uint32_t gen_failed;    /* Generator jobs failed for good: bitmask */
	uint8_t seed_rank[ORCH_MAX_SEEDS]; /* failed seeds: how promising */
	uint64_t tokens;                   /* LLM tokens spent */
	double base_ms, base_speedup;
	double best_ms, best_speedup, best_ref_ms;
	double ref_ring[ORCH_REF_SAMPLES];
	double best_sol; /* sol_fraction of best; 0: unknown */
	/* The wave under way (ORCH_ST_WAVE): wave_k slots; slot i's Planner
	 * is job wave_job + i, its Optimizer wave_job + k + i, its
	 * evaluation wave_job + 2k + i, its kernel candidate wave_cand + i;
	 * wave_st[i] its outcome (0 while pending), with its time, the
	 * reference's time of its evaluation and its sol_fraction. */
	uint32_t waves; /* waves started */
	uint32_t wave_k, wave_job, wave_cand;
	/* Replay keys of the slots' Optimizer and evaluation jobs, taken at
	 * the wave's start: slot i's are these + i, whatever order the plans
	 * arrive in. */
	uint32_t wave_opt_key, wave_eval_key;
	uint32_t wave_st[ORCH_MAX_WAVE];
	double wave_ms[ORCH_MAX_WAVE], wave_ref[ORCH_MAX_WAVE];
	double wave_sol[ORCH_MAX_WAVE];
	/* The tune candidate (ORCH_ACT_TUNE): tune_cand sweeps the launch
	 * configuration and declared tunables of tune_of as job tune_job (0
	 * once its result is in: tune_st, its time, the reference's time and
	 * its sol_fraction), taken into the next judgement as a candidate of
	 * that round; tune_cand is 0 when none is pending. tunable: which
	 * slots (seeds, or a wave's) can be tuned. */
	uint32_t tune_job, tune_cand, tune_of, tune_st;
	uint32_t tunes;         /* tune candidates made */
	uint32_t tune_promoted; /* of them promoted to base */
	uint32_t tunable;
	uint32_t best_tuned; /* best is a tune candidate */
	double tune_ms, tune_ref, tune_sol;
} orch_fsm;

_Static_assert(sizeof(orch_fsm) ==
        80 + 34 * 4 + ORCH_MAX_SEEDS + 8 + (6 + ORCH_REF_SAMPLES) * 8 + 14 * 4 +
            3 * 8 + ORCH_MAX_WAVE * (4 + 3 * 8),
    "orch_fsm must have no padding");

#define ORCH_FSM_MAGIC 0x4b434634u /* "KCF4" */
/* The previous layouts, which orch_fsm_load migrates: KCF3 had no
 * candidates_per_round (and its pad) in orch_params and ended at
 * best_sol; KCF2 also lacked orch_params' explore_share and sol_stop and
 * best_sol. */
#define ORCH_FSM_MAGIC_KCF3 0x4b434633u
#define ORCH_FSM_KCF3_SIZE (offsetof(orch_fsm, waves) - 2 * sizeof(uint32_t))
#define ORCH_FSM_MAGIC_KCF2 0x4b434632u
#define ORCH_FSM_KCF2_SIZE (ORCH_FSM_KCF3_SIZE - 3 * sizeof(double))

typedef struct {
	enum orch_input_kind kind;
	uint32_t job;    /* the job this answers (not START, CANCEL, TICK) */
	uint32_t n;      /* SEEDS, CANDIDATE: candidates in the reply */
	uint64_t tokens; /* agent replies: tokens spent */
	uint32_t cand;   /* EVALUATED: which candidate */
	/* CANDIDATE: the earlier candidate with the same source and plan
	 * that has an evaluation (0: none); status, ms and ref_ms are then
	 * its result, reused instead of a new evaluation. */
	uint32_t reuse;
	Kclaw__EvalStatus status; /* EVALUATED */
	double ms;                /* EVALUATED: median time */
	double ref_ms; /* EVALUATED: the reference's median in the same
	                * evaluation; 0 when it was not timed */
	double sol;    /* EVALUATED (and a reuse): its sol_fraction */
	/* EVALUATED: the orchestrator can make a tune candidate of this
	 * kernel (orch_tune_plan found something to sweep). */
	uint32_t tunable;
	uint64_t now_ms; /* TICK */
} orch_input;

enum orch_action_kind {
	ORCH_ACT_AGENT,     /* issue job `job` to role for candidate cand */
	ORCH_ACT_EVAL,      /* issue evaluation job `job` of candidate cand */
	ORCH_ACT_RETRIEVE,  /* query long-term memory for candidate cand */
	ORCH_ACT_EVENT,     /* publish event kind (cand, value) */
	ORCH_ACT_RECORD,    /* short-term memory: cand's outcome (see below) */
	ORCH_ACT_DROP_JOBS, /* forget every job of the task */
	ORCH_ACT_IMPORT,    /* import the task's tensors (IMPORTED when done) */
	/* Make candidate cand, the tune of candidate aux (its source, its
	 * plan's launch configuration declared tunable), and evaluate it as
	 * job (TUNED when done). */
	ORCH_ACT_TUNE
};

/*
 * ORCH_ACT_RECORD: origin says which record: REPAIR is a step of the
 * repair chain `aux` (cand is the fix), OPT an optimization attempt on base
 * `aux` (cand is the new kernel); status and value (speedup over the base)
 * are the outcome. round is the round it is recorded under. An attempt
 * that failed and was then repaired is recorded again under its own round
 * with the repaired outcome: then repaired is the failed attempt and cand
 * the repaired kernel.
 *
 * ORCH_EVENT EVAL_FINISHED (from the machine): cand reused the evaluation
 * of candidate aux. ROUND_FINISHED of a wave: round is the slot's round
 * (0 elsewhere: the machine's round).
 */
typedef struct {
	enum orch_action_kind kind;
	Kclaw__Role role;
	Kclaw__EventKind event;
	uint32_t job;
	uint32_t cand;
	uint32_t aux;
	uint32_t count;    /* generator: seeds asked for */
	uint32_t key_n;    /* replay key: this role's job number in the task */
	uint32_t origin;   /* RECORD */
	uint32_t round;    /* RECORD */
	uint32_t repaired; /* RECORD */
	Kclaw__EvalStatus status;
	double value;
} orch_action;

#define ORCH_MAX_ACTIONS (3 * ORCH_MAX_WAVE + 2 * ORCH_MAX_SEEDS + 8)

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

/*
 * A stored machine (TaskRecord.fsm) into *f: this layout, or the previous
 * one (KCF2), whose task gets the screening and speed-of-light parameters
 * of defaults. false: neither (another version, or not a machine).
 */
bool orch_fsm_load(
    const void *data, size_t len, const orch_params *defaults, orch_fsm *f);

/*
 * Whether the Planner of the coming round (round + 1) may explore: a
 * method outside the retrieved ones. Round r explores when
 * floor(r * explore_share) > floor((r - 1) * explore_share): one round in
 * 1 / share, the first at round ceil(1 / share) (0.2: rounds 5, 10, 15).
 * A function of the state alone, so a replay or a restart decides alike.
 */
bool orch_fsm_explores(const orch_fsm *f);

/* The slot of a job (or candidate, by_cand) of the wave under way, or -1
 * when the machine is in no wave or the number is not the wave's. */
int orch_fsm_wave_slot(const orch_fsm *f, uint32_t n, bool by_cand);

/* The number an Optimizer's or Repairer's kernel (a CANDIDATE input for
 * job) gets: its wave slot's, else the next candidate number. */
uint32_t orch_fsm_cand_of(const orch_fsm *f, uint32_t job);

/* What a resumed task must redo that is not a job (RETRIEVE, IMPORT). */
void orch_fsm_resume(const orch_fsm *f, orch_actions *acts);

/* The median of the reference's times the task has seen; 0: none. */
double orch_fsm_ref_median(const orch_fsm *f);

bool orch_state_final(uint32_t state);
const char *orch_state_name(uint32_t state);
const char *orch_input_name(enum orch_input_kind kind);
const char *orch_stop_text(uint32_t stop);
/* "generator", ...; the role names of `kclaw-agent --role`. */
const char *orch_role_name(Kclaw__Role role);
/* KCLAW__ROLE__ROLE_UNSPECIFIED when name is unknown. */
Kclaw__Role orch_role_parse(const char *name);

#endif
