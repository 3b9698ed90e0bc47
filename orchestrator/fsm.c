/*
 * fsm.c - the task state machine. See fsm.h; the table below is the whole
 * lifecycle, each row's function what happens on that transition.
 */
#include "fsm.h"

#include <string.h>

#define ORCH_ANY_ACTIVE ORCH_ST_COUNT /* a row that applies while active */

typedef void (*fsm_fn)(orch_fsm *f, const orch_input *in, orch_actions *a);

static void fsm_seed(orch_fsm *f, const orch_input *in, orch_actions *a);
static void fsm_review_seeds(
    orch_fsm *f, const orch_input *in, orch_actions *a);
static void fsm_seed_done(orch_fsm *f, const orch_input *in, orch_actions *a);
static void fsm_repair(orch_fsm *f, const orch_input *in, orch_actions *a);
static void fsm_review(orch_fsm *f, const orch_input *in, orch_actions *a);
static void fsm_reviewed(orch_fsm *f, const orch_input *in, orch_actions *a);
static void fsm_retrieve(orch_fsm *f, const orch_input *in, orch_actions *a);
static void fsm_plan(orch_fsm *f, const orch_input *in, orch_actions *a);
static void fsm_optimize(orch_fsm *f, const orch_input *in, orch_actions *a);
static void fsm_job_failed(orch_fsm *f, const orch_input *in, orch_actions *a);
static void fsm_cancel(orch_fsm *f, const orch_input *in, orch_actions *a);
static void fsm_tick(orch_fsm *f, const orch_input *in, orch_actions *a);

/* clang-format off */
static const struct fsm_row {
	uint32_t state;
	enum orch_input_kind input;
	fsm_fn fn; /* -> the states it may lead to */
} fsm_table[] = {
	{ORCH_ST_SUBMITTED,    ORCH_IN_START,      fsm_seed},         /* SEEDING */
	{ORCH_ST_SEEDING,      ORCH_IN_SEEDS,      fsm_review_seeds}, /* REVIEW_SEEDS FAILED */
	{ORCH_ST_REVIEW_SEEDS, ORCH_IN_EVALUATED,  fsm_seed_done},    /* (same) FEATURES DIAGNOSE FAILED */
	{ORCH_ST_DIAGNOSE,     ORCH_IN_DIAGNOSED,  fsm_repair},       /* REPAIR */
	{ORCH_ST_REPAIR,       ORCH_IN_CANDIDATE,  fsm_review},       /* REVIEW DONE FAILED */
	{ORCH_ST_REVIEW,       ORCH_IN_EVALUATED,  fsm_reviewed},     /* FEATURES PLAN DIAGNOSE DONE FAILED */
	{ORCH_ST_FEATURES,     ORCH_IN_FEATURES,   fsm_retrieve},     /* RETRIEVE */
	{ORCH_ST_RETRIEVE,     ORCH_IN_RETRIEVED,  fsm_plan},         /* PLAN */
	{ORCH_ST_PLAN,         ORCH_IN_PLANNED,    fsm_optimize},     /* OPTIMIZE */
	{ORCH_ST_OPTIMIZE,     ORCH_IN_CANDIDATE,  fsm_review},       /* REVIEW DONE FAILED */
	{ORCH_ANY_ACTIVE,      ORCH_IN_JOB_FAILED, fsm_job_failed},   /* (seeds go on) DONE FAILED */
	{ORCH_ANY_ACTIVE,      ORCH_IN_CANCEL,     fsm_cancel},       /* CANCELLED */
	{ORCH_ANY_ACTIVE,      ORCH_IN_TICK,       fsm_tick},         /* (same) DONE FAILED */
};
/* clang-format on */

/* ------------------------------------------------------------ helpers */

static orch_action *
fsm_act(orch_actions *a, enum orch_action_kind kind)
{
	orch_action *x = &a->a[a->n++];

	memset(x, 0, sizeof(*x));
	x->kind = kind;
	return x;
}

static void
fsm_event(orch_actions *a, Kclaw__EventKind ev, uint32_t cand, double value)
{
	orch_action *x = fsm_act(a, ORCH_ACT_EVENT);

	x->event = ev;
	x->cand = cand;
	x->value = value;
}

/* Awaits exactly one new job and returns its number. */
static uint32_t
fsm_await1(orch_fsm *f)
{
	f->await_first = f->next_job++;
	f->await_n = 1;
	f->await_done = 0;
	return f->await_first;
}

static void
fsm_agent(orch_fsm *f, orch_actions *a, Kclaw__Role role, uint32_t cand)
{
	orch_action *x = fsm_act(a, ORCH_ACT_AGENT);

	x->role = role;
	x->cand = cand;
	x->job = fsm_await1(f);
	x->key_n = f->role_jobs[role]++;
	x->count = role == KCLAW__ROLE__GENERATOR ? f->p.seeds : 0;
}

static void
fsm_eval(orch_fsm *f, orch_actions *a, uint32_t job, uint32_t cand)
{
	orch_action *x = fsm_act(a, ORCH_ACT_EVAL);

	x->role = KCLAW__ROLE__SANDBOX;
	x->job = job;
	x->cand = cand;
	x->key_n = f->role_jobs[KCLAW__ROLE__SANDBOX]++;
}

static double
fsm_speedup(const orch_fsm *f)
{
	return f->best && f->ref_ms > 0 && f->best_ms > 0
	    ? f->ref_ms / f->best_ms
	    : 0;
}

/* Ends the task: DONE when it has a correct kernel, unless cancelled. */
static void
fsm_finish(orch_fsm *f, orch_actions *a, enum orch_stop why)
{
	f->stop = why;
	f->state = why == ORCH_STOP_CANCELLED ? ORCH_ST_CANCELLED
	    : f->best                         ? ORCH_ST_DONE
	                                      : ORCH_ST_FAILED;
	f->await_n = 0;
	f->await_done = 0;
	fsm_act(a, ORCH_ACT_DROP_JOBS);
	fsm_event(a,
	    why == ORCH_STOP_CANCELLED ? KCLAW__EVENT_KIND__TASK_CANCELLED
	                               : KCLAW__EVENT_KIND__TASK_FINISHED,
	    f->best, fsm_speedup(f));
}

static enum orch_stop
fsm_budget_spent(const orch_fsm *f)
{
	if (f->p.target_speedup > 0 && fsm_speedup(f) >= f->p.target_speedup)
		return ORCH_STOP_TARGET;
	if (f->round >= f->p.max_rounds)
		return ORCH_STOP_ROUNDS;
	if (f->p.token_budget && f->tokens >= f->p.token_budget)
		return ORCH_STOP_TOKENS;
	return ORCH_STOP_NONE;
}

/* Starts the next step (FEATURES, PLAN or DIAGNOSE) unless a budget says
 * stop. */
static void
fsm_next(orch_fsm *f, orch_actions *a, enum orch_state to)
{
	enum orch_stop why = fsm_budget_spent(f);

	if (why != ORCH_STOP_NONE) {
		fsm_finish(f, a, why);
		return;
	}
	f->state = to;
	switch (to) {
	case ORCH_ST_FEATURES:
		fsm_agent(f, a, KCLAW__ROLE__FEATURE, f->base);
		break;
	case ORCH_ST_PLAN:
		fsm_agent(f, a, KCLAW__ROLE__PLANNER, f->base);
		break;
	default: fsm_agent(f, a, KCLAW__ROLE__DIAGNOSER, f->cur); break;
	}
}

static void
fsm_best(orch_fsm *f, uint32_t cand, double ms)
{
	if (f->best == 0 || ms < f->best_ms ||
	    (ms == f->best_ms && cand < f->best)) {
		f->best = cand;
		f->best_ms = ms;
	}
}

static void
fsm_promote(orch_fsm *f, orch_actions *a, uint32_t cand, double ms)
{
	f->base = cand;
	f->base_ms = ms;
	fsm_event(a, KCLAW__EVENT_KIND__BASE_PROMOTED, cand, ms);
}

/* How promising a failed seed is to repair: it got further. */
static uint32_t
fsm_repair_rank(Kclaw__EvalStatus st)
{
	switch (st) {
	case KCLAW__EVAL_STATUS__WRONG_RESULT: return 5;
	case KCLAW__EVAL_STATUS__RUNTIME_FAULT: return 4;
	case KCLAW__EVAL_STATUS__TIMEOUT:
	case KCLAW__EVAL_STATUS__LAUNCH_ERROR: return 3;
	case KCLAW__EVAL_STATUS__PLAN_ERROR: return 2;
	case KCLAW__EVAL_STATUS__COMPILE_ERROR: return 1;
	default: return 0; /* not the candidate's fault: nothing to repair */
	}
}

static void
fsm_start_chain(orch_fsm *f, orch_actions *a, uint32_t failing)
{
	f->cur = failing;
	f->chain = failing;
	f->repairs = 0;
	fsm_next(f, a, ORCH_ST_DIAGNOSE);
}

/* ------------------------------------------------------- transitions */

static void
fsm_seed(orch_fsm *f, const orch_input *in, orch_actions *a)
{
	(void)in;
	f->state = ORCH_ST_SEEDING;
	fsm_agent(f, a, KCLAW__ROLE__GENERATOR, 0);
}

static void
fsm_review_seeds(orch_fsm *f, const orch_input *in, orch_actions *a)
{
	uint32_t n = in->n < f->p.seeds ? in->n : f->p.seeds;

	if (n == 0) {
		fsm_finish(f, a, ORCH_STOP_NO_CANDIDATE);
		return;
	}
	f->state = ORCH_ST_REVIEW_SEEDS;
	f->seed_first = f->next_cand;
	f->next_cand += n;
	f->await_first = f->next_job;
	f->await_n = n;
	f->await_done = 0;
	f->next_job += n;
	f->seed_best = 0;
	f->promising = 0;
	f->promising_rank = 0;
	f->no_device = 0;
	for (uint32_t i = 0; i < n; i++)
		fsm_eval(f, a, f->await_first + i, f->seed_first + i);
}

static void
fsm_seed_done(orch_fsm *f, const orch_input *in, orch_actions *a)
{
	uint32_t i = in->job - f->await_first, cand = f->seed_first + i;
	uint32_t rank = fsm_repair_rank(in->status);

	f->await_done |= 1u << i;
	if (in->ref_ms > 0)
		f->ref_ms = in->ref_ms;
	if (in->status == KCLAW__EVAL_STATUS__OK) {
		fsm_best(f, cand, in->ms);
		/* Ties go to the lower number: the outcome must not depend
		 * on the order in which results arrive. */
		if (f->seed_best == 0 || in->ms < f->seed_best_ms ||
		    (in->ms == f->seed_best_ms && cand < f->seed_best)) {
			f->seed_best = cand;
			f->seed_best_ms = in->ms;
		}
	} else if (rank > f->promising_rank ||
	    (rank && rank == f->promising_rank && cand < f->promising)) {
		f->promising = cand;
		f->promising_rank = rank;
	}
	if (in->status == KCLAW__EVAL_STATUS__NO_DEVICE)
		f->no_device++;
	if (f->await_done != (1u << f->await_n) - 1)
		return; /* more seeds to review */
	if (f->seed_best) {
		fsm_promote(f, a, f->seed_best, f->seed_best_ms);
		fsm_next(f, a, ORCH_ST_FEATURES);
	} else if (f->promising) {
		f->origin = ORCH_ORIGIN_SEED;
		fsm_start_chain(f, a, f->promising);
	} else {
		fsm_finish(f, a,
		    f->no_device == f->await_n ? ORCH_STOP_NO_DEVICE
		                               : ORCH_STOP_JOB_FAILED);
	}
}

static void
fsm_repair(orch_fsm *f, const orch_input *in, orch_actions *a)
{
	(void)in;
	f->state = ORCH_ST_REPAIR;
	fsm_agent(f, a, KCLAW__ROLE__REPAIRER, f->cur);
}

/* A Repairer or Optimizer answered with a kernel: review it. */
static void
fsm_review(orch_fsm *f, const orch_input *in, orch_actions *a)
{
	if (in->n == 0) {
		fsm_finish(f, a, ORCH_STOP_NO_CANDIDATE);
		return;
	}
	f->origin =
	    f->state == ORCH_ST_REPAIR ? ORCH_ORIGIN_REPAIR : ORCH_ORIGIN_OPT;
	f->cur = f->next_cand++;
	f->state = ORCH_ST_REVIEW;
	fsm_eval(f, a, fsm_await1(f), f->cur);
}

static void
fsm_reviewed(orch_fsm *f, const orch_input *in, orch_actions *a)
{
	bool ok = in->status == KCLAW__EVAL_STATUS__OK;
	orch_action *r;

	if (in->ref_ms > 0)
		f->ref_ms = in->ref_ms;
	f->round++;
	r = fsm_act(a, ORCH_ACT_RECORD);
	r->origin = f->origin;
	r->cand = f->cur;
	r->aux = f->origin == ORCH_ORIGIN_REPAIR ? f->chain : f->base;
	r->status = in->status;
	r->value = ok && f->base_ms > 0 ? f->base_ms / in->ms : 0;
	fsm_event(
	    a, KCLAW__EVENT_KIND__ROUND_FINISHED, f->cur, ok ? in->ms : 0);
	if (in->status == KCLAW__EVAL_STATUS__NO_DEVICE) {
		fsm_finish(f, a, ORCH_STOP_NO_DEVICE);
	} else if (fsm_repair_rank(in->status) == 0 && !ok) {
		fsm_finish(f, a, ORCH_STOP_JOB_FAILED);
	} else if (ok) {
		fsm_best(f, f->cur, in->ms);
		f->chain = 0;
		if (f->base == 0 || f->base_ms - in->ms >= f->p.at ||
		    (f->base_ms - in->ms) / f->base_ms >= f->p.rt) {
			fsm_promote(f, a, f->cur, in->ms);
			fsm_next(f, a, ORCH_ST_FEATURES);
		} else {
			fsm_next(f, a, ORCH_ST_PLAN);
		}
	} else if (f->origin != ORCH_ORIGIN_REPAIR) {
		fsm_start_chain(f, a, f->cur);
	} else if (++f->repairs < f->p.max_repairs) {
		fsm_next(f, a, ORCH_ST_DIAGNOSE);
	} else if (f->base) {
		f->chain = 0;
		fsm_next(f, a, ORCH_ST_PLAN); /* give up this chain */
	} else {
		fsm_finish(f, a, ORCH_STOP_NO_CORRECT);
	}
}

static void
fsm_retrieve(orch_fsm *f, const orch_input *in, orch_actions *a)
{
	orch_action *x = fsm_act(a, ORCH_ACT_RETRIEVE);

	(void)in;
	f->state = ORCH_ST_RETRIEVE;
	x->job = fsm_await1(f);
	x->cand = f->base;
}

static void
fsm_plan(orch_fsm *f, const orch_input *in, orch_actions *a)
{
	(void)in;
	f->state = ORCH_ST_PLAN;
	fsm_agent(f, a, KCLAW__ROLE__PLANNER, f->base);
}

static void
fsm_optimize(orch_fsm *f, const orch_input *in, orch_actions *a)
{
	(void)in;
	f->state = ORCH_ST_OPTIMIZE;
	fsm_agent(f, a, KCLAW__ROLE__OPTIMIZER, f->base);
}

static void
fsm_job_failed(orch_fsm *f, const orch_input *in, orch_actions *a)
{
	orch_input failed = *in;

	if (f->state == ORCH_ST_REVIEW_SEEDS) {
		/* One seed's evaluation failing does not sink the others. */
		failed.status = KCLAW__EVAL_STATUS__INTERNAL_ERROR;
		fsm_seed_done(f, &failed, a);
		return;
	}
	fsm_finish(f, a, ORCH_STOP_JOB_FAILED);
}

static void
fsm_cancel(orch_fsm *f, const orch_input *in, orch_actions *a)
{
	(void)in;
	fsm_finish(f, a, ORCH_STOP_CANCELLED);
}

static void
fsm_tick(orch_fsm *f, const orch_input *in, orch_actions *a)
{
	if (f->p.deadline_ms && in->now_ms >= f->p.deadline_ms)
		fsm_finish(f, a, ORCH_STOP_DEADLINE);
}

/* ------------------------------------------------------------ the step */

static bool
fsm_has_job(enum orch_input_kind k)
{
	return k != ORCH_IN_START && k != ORCH_IN_CANCEL && k != ORCH_IN_TICK;
}

bool
orch_fsm_step(
    const orch_fsm *f, const orch_input *in, orch_fsm *next, orch_actions *acts)
{
	const struct fsm_row *row = NULL;
	bool active = !orch_state_final(f->state);

	for (size_t i = 0; i < sizeof(fsm_table) / sizeof(fsm_table[0]); i++)
		if (fsm_table[i].input == in->kind &&
		    (fsm_table[i].state == f->state ||
		        (fsm_table[i].state == ORCH_ANY_ACTIVE && active &&
		            f->state != ORCH_ST_SUBMITTED))) {
			row = &fsm_table[i];
			break;
		}
	if (row == NULL)
		return false;
	if (fsm_has_job(in->kind) &&
	    (in->job < f->await_first ||
	        in->job - f->await_first >= f->await_n ||
	        (f->await_done & 1u << (in->job - f->await_first))))
		return false; /* a job this machine no longer awaits */
	*next = *f;
	acts->n = 0;
	next->tokens += in->tokens;
	row->fn(next, in, acts);
	if (acts->n == 0 && memcmp(next, f, sizeof(*f)) == 0)
		return false; /* e.g. a tick before the deadline */
	if (next->state != f->state)
		fsm_event(acts, KCLAW__EVENT_KIND__STATE_CHANGED, next->cur, 0);
	return true;
}

void
orch_fsm_resume(const orch_fsm *f, orch_actions *acts)
{
	acts->n = 0;
	if (f->state == ORCH_ST_RETRIEVE) {
		orch_action *x = fsm_act(acts, ORCH_ACT_RETRIEVE);
		x->job = f->await_first;
		x->cand = f->base;
	}
}

/* ---------------------------------------------------------- parameters */

void
orch_params_default(orch_params *p)
{
	memset(p, 0, sizeof(*p));
	p->seeds = 3;
	p->max_rounds = 15;
	p->max_repairs = 3;
	p->rt = 0.3;
	p->at = 0.3;
}

void
orch_fsm_init(orch_fsm *f, const orch_params *p)
{
	memset(f, 0, sizeof(*f));
	f->magic = ORCH_FSM_MAGIC;
	f->state = ORCH_ST_SUBMITTED;
	f->p = *p;
	if (f->p.seeds == 0)
		f->p.seeds = 1;
	if (f->p.seeds > ORCH_MAX_SEEDS)
		f->p.seeds = ORCH_MAX_SEEDS;
	if (f->p.max_repairs == 0)
		f->p.max_repairs = 1;
	f->next_cand = 1;
	f->next_job = 1;
}

/* --------------------------------------------------------------- names */

bool
orch_state_final(uint32_t state)
{
	return state == ORCH_ST_DONE || state == ORCH_ST_FAILED ||
	    state == ORCH_ST_CANCELLED;
}

const char *
orch_state_name(uint32_t state)
{
	static const char *names[ORCH_ST_COUNT] = {"SUBMITTED", "SEEDING",
	    "REVIEW_SEEDS", "DIAGNOSE", "REPAIR", "REVIEW", "FEATURES",
	    "RETRIEVE", "PLAN", "OPTIMIZE", "DONE", "FAILED", "CANCELLED"};

	return state < ORCH_ST_COUNT ? names[state] : "UNKNOWN";
}

const char *
orch_input_name(enum orch_input_kind kind)
{
	static const char *names[ORCH_IN_COUNT] = {"START", "SEEDS",
	    "EVALUATED", "DIAGNOSED", "CANDIDATE", "FEATURES", "RETRIEVED",
	    "PLANNED", "JOB_FAILED", "CANCEL", "TICK"};

	return (unsigned)kind < ORCH_IN_COUNT ? names[kind] : "UNKNOWN";
}

const char *
orch_stop_text(uint32_t stop)
{
	switch (stop) {
	case ORCH_STOP_ROUNDS: return "round budget spent";
	case ORCH_STOP_TOKENS: return "token budget spent";
	case ORCH_STOP_DEADLINE: return "wall-time budget spent";
	case ORCH_STOP_TARGET: return "target speedup reached";
	case ORCH_STOP_CANCELLED: return "cancelled";
	case ORCH_STOP_NO_CORRECT:
		return "no correct kernel: the repair chain ran out of "
		       "attempts (raise params.max_repairs)";
	case ORCH_STOP_NO_DEVICE:
		return "no GPU: the sandbox answered NO_DEVICE; run kclaw on a "
		       "host with an NVIDIA GPU and driver";
	case ORCH_STOP_JOB_FAILED:
		return "a job failed after its retries (see the task's "
		       "events)";
	case ORCH_STOP_NO_CANDIDATE:
		return "an agent answered without a candidate";
	default: return "";
	}
}

static const char *const orch_role_names[] = {"", "generator", "feature",
    "planner", "optimizer", "diagnoser", "repairer", "sandbox"};

const char *
orch_role_name(Kclaw__Role role)
{
	return (unsigned)role < 8 ? orch_role_names[role] : "";
}

Kclaw__Role
orch_role_parse(const char *name)
{
	for (unsigned i = 1; i < 8; i++)
		if (strcmp(name, orch_role_names[i]) == 0)
			return (Kclaw__Role)i;
	return KCLAW__ROLE__ROLE_UNSPECIFIED;
}
