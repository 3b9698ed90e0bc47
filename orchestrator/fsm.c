/*
 * fsm.c - the task state machine. See fsm.h; the table below is the whole
 * lifecycle, each row's function what happens on that transition.
 */
#include "fsm.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#define ORCH_ANY_ACTIVE ORCH_ST_COUNT /* a row that applies while active */

typedef void (*fsm_fn)(orch_fsm *f, const orch_input *in, orch_actions *a);

static void fsm_seed(orch_fsm *f, const orch_input *in, orch_actions *a);
static void fsm_import(orch_fsm *f, const orch_input *in, orch_actions *a);
static void fsm_import_failed(
    orch_fsm *f, const orch_input *in, orch_actions *a);
static void fsm_seed_reply(orch_fsm *f, const orch_input *in, orch_actions *a);
static void fsm_seed_done(orch_fsm *f, const orch_input *in, orch_actions *a);
static void fsm_repair(orch_fsm *f, const orch_input *in, orch_actions *a);
static void fsm_review(orch_fsm *f, const orch_input *in, orch_actions *a);
static void fsm_reviewed(orch_fsm *f, const orch_input *in, orch_actions *a);
static void fsm_retrieve(orch_fsm *f, const orch_input *in, orch_actions *a);
static void fsm_plan(orch_fsm *f, const orch_input *in, orch_actions *a);
static void fsm_optimize(orch_fsm *f, const orch_input *in, orch_actions *a);
static void fsm_wave_planned(
    orch_fsm *f, const orch_input *in, orch_actions *a);
static void fsm_wave_candidate(
    orch_fsm *f, const orch_input *in, orch_actions *a);
static void fsm_wave_evaluated(
    orch_fsm *f, const orch_input *in, orch_actions *a);
static void fsm_job_failed(orch_fsm *f, const orch_input *in, orch_actions *a);
static void fsm_cancel(orch_fsm *f, const orch_input *in, orch_actions *a);
static void fsm_model_unfit(orch_fsm *f, const orch_input *in, orch_actions *a);
static void fsm_tick(orch_fsm *f, const orch_input *in, orch_actions *a);
static void fsm_tuned(orch_fsm *f, const orch_input *in, orch_actions *a);
static void fsm_wave_start(orch_fsm *f, orch_actions *a);

/* clang-format off */
static const struct fsm_row {
	uint32_t state;
	enum orch_input_kind input;
	fsm_fn fn; /* -> the states it may lead to */
} fsm_table[] = {
	{ORCH_ST_SUBMITTED,    ORCH_IN_START,      fsm_seed},         /* SEEDING: k Generator jobs */
	{ORCH_ST_SUBMITTED,    ORCH_IN_IMPORT,     fsm_import},       /* IMPORTING: tensors to the store */
	{ORCH_ST_IMPORTING,    ORCH_IN_IMPORTED,   fsm_seed},         /* SEEDING: k Generator jobs */
	{ORCH_ST_IMPORTING,    ORCH_IN_IMPORT_FAILED, fsm_import_failed}, /* FAILED */
	{ORCH_ST_SEEDING,      ORCH_IN_SEEDS,      fsm_seed_reply},   /* (same) REVIEW_SEEDS FAILED */
	{ORCH_ST_REVIEW_SEEDS, ORCH_IN_EVALUATED,  fsm_seed_done},    /* (same) FEATURES DIAGNOSE FAILED */
	{ORCH_ST_DIAGNOSE,     ORCH_IN_DIAGNOSED,  fsm_repair},       /* REPAIR */
	{ORCH_ST_REPAIR,       ORCH_IN_CANDIDATE,  fsm_review},       /* REVIEW, or reused: as REVIEW's */
	{ORCH_ST_REVIEW,       ORCH_IN_EVALUATED,  fsm_reviewed},     /* FEATURES PLAN DIAGNOSE DONE FAILED */
	{ORCH_ST_FEATURES,     ORCH_IN_FEATURES,   fsm_retrieve},     /* RETRIEVE */
	{ORCH_ST_RETRIEVE,     ORCH_IN_RETRIEVED,  fsm_plan},         /* PLAN */
	{ORCH_ST_PLAN,         ORCH_IN_PLANNED,    fsm_optimize},     /* OPTIMIZE */
	{ORCH_ST_OPTIMIZE,     ORCH_IN_CANDIDATE,  fsm_review},       /* REVIEW, or reused: as REVIEW's */
	{ORCH_ST_WAVE,         ORCH_IN_PLANNED,    fsm_wave_planned},   /* (same): that slot's Optimizer */
	{ORCH_ST_WAVE,         ORCH_IN_CANDIDATE,  fsm_wave_candidate}, /* (same): its evaluation, or reused */
	{ORCH_ST_WAVE,         ORCH_IN_EVALUATED,  fsm_wave_evaluated}, /* (same) FEATURES WAVE DIAGNOSE DONE FAILED */
	{ORCH_ANY_ACTIVE,      ORCH_IN_JOB_FAILED, fsm_job_failed},   /* seeding goes on; a failed round */
	{ORCH_ANY_ACTIVE,      ORCH_IN_CANCEL,     fsm_cancel},       /* CANCELLED */
	{ORCH_ANY_ACTIVE,      ORCH_IN_MODEL_UNFIT, fsm_model_unfit}, /* DONE FAILED: every job would fail so */
	{ORCH_ANY_ACTIVE,      ORCH_IN_TICK,       fsm_tick},         /* (same) DONE FAILED */
	{ORCH_ANY_ACTIVE,      ORCH_IN_TUNED,      fsm_tuned},        /* (same): judged with the next round */
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

static orch_action *
fsm_event(orch_actions *a, Kclaw__EventKind ev, uint32_t cand, double value)
{
	orch_action *x = fsm_act(a, ORCH_ACT_EVENT);

	x->event = ev;
	x->cand = cand;
	x->value = value;
	return x;
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
fsm_agent_job(
    orch_fsm *f, orch_actions *a, Kclaw__Role role, uint32_t cand, uint32_t job)
{
	orch_action *x = fsm_act(a, ORCH_ACT_AGENT);

	x->role = role;
	x->cand = cand;
	x->job = job;
	x->key_n = f->role_jobs[role]++;
	x->count = role == KCLAW__ROLE__GENERATOR ? 1 : 0;
}

static void
fsm_agent(orch_fsm *f, orch_actions *a, Kclaw__Role role, uint32_t cand)
{
	fsm_agent_job(f, a, role, cand, fsm_await1(f));
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

static uint32_t
fsm_bit(uint32_t i)
{
	return 1u << i;
}

/* Keeps one measurement of the reference for the task's median. */
static void
fsm_ref_sample(orch_fsm *f, double ref_ms)
{
	if (ref_ms > 0) {
		f->ref_ring[f->ref_n % ORCH_REF_SAMPLES] = ref_ms;
		f->ref_n++;
	}
}

/* A correct result's speedup: over the reference timed in the same
 * evaluation, else over the task's median reference; 0 when unknown. */
static double
fsm_result_speedup(const orch_fsm *f, double ms, double ref_ms)
{
	double med;

	if (!(ms > 0))
		return 0;
	if (ref_ms > 0)
		return ref_ms / ms;
	med = orch_fsm_ref_median(f);
	return med > 0 ? med / ms : 0;
}

/* Tolerance of the threshold comparisons: 1.3 / 1.0 >= 1 + 0.3 must hold
 * in floating point. */
#define FSM_EPS 1e-9

/* The best kernel: the highest speedup (each over its own evaluation's
 * reference), by time where a speedup is unknown; ties to the lower
 * number, so the outcome never depends on the order of answers. */
static void
fsm_best(orch_fsm *f, uint32_t cand, double ms, double sp, double sol)
{
	bool better;

	if (f->best == 0)
		better = true;
	else if (sp > 0 && f->best_speedup > 0)
		better = sp > f->best_speedup ||
		    (sp == f->best_speedup && cand < f->best);
	else
		better =
		    ms < f->best_ms || (ms == f->best_ms && cand < f->best);
	if (better) {
		f->best_tuned = 0; /* fsm_tuned sets it for its own */
		f->best = cand;
		f->best_ms = ms;
		f->best_speedup = sp;
		f->best_ref_ms = sp > 0 ? sp * ms : 0;
		f->best_sol = sol > 0 ? sol : 0;
	}
}

/*
 * The paper's promotion: the new kernel is at least 1 + rt times as fast
 * as the base (base_ms / ms >= 1.3 for rt 0.3), or its speedup over the
 * reference exceeds the base's by at least at (in speedup units).
 */
static bool
fsm_promotes(const orch_fsm *f, double ms, double sp)
{
	if (f->base == 0)
		return true;
	if (f->base_ms / ms >= 1 + f->p.rt - FSM_EPS)
		return true;
	return sp > 0 && f->base_speedup > 0 &&
	    sp - f->base_speedup >= f->p.at - FSM_EPS;
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
	    f->best, f->best_speedup);
}

static enum orch_stop
fsm_budget_spent(const orch_fsm *f)
{
	if (f->p.target_speedup > 0 && f->best_speedup >= f->p.target_speedup)
		return ORCH_STOP_TARGET;
	/* Near the speed of light little is left to gain: the bound is a
	 * lower one (docs/plan.md), so a fraction of 0.9 is at least 0.9 of
	 * what the GPU allows. */
	if (f->p.sol_stop > 0 && f->best_sol >= f->p.sol_stop - FSM_EPS)
		return ORCH_STOP_SOL;
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
		if (f->p.candidates_per_round > 1)
			fsm_wave_start(f, a);
		else
			fsm_agent(f, a, KCLAW__ROLE__PLANNER, f->base);
		break;
	default: fsm_agent(f, a, KCLAW__ROLE__DIAGNOSER, f->cur); break;
	}
}

static void
fsm_promote(orch_fsm *f, orch_actions *a, uint32_t cand, double ms, double sp)
{
	f->base = cand;
	f->base_ms = ms;
	f->base_speedup = sp;
	fsm_event(a, KCLAW__EVENT_KIND__BASE_PROMOTED, cand, ms);
}

/*
 * The GPU works while the model thinks: the task's new best kernel gets a
 * tune candidate (its launch configuration and declared tunables swept by
 * the sandbox), sent now, beside the next agent job, one at a time. Its
 * result is kept (fsm_tuned) and judged with the next round's kernel. A
 * kernel slower than the best gets none: on the H200 the sweeps of seeds
 * and middling repairs never paid (docs/benchmarks.md, the TUNE=1 run).
 */
static void
fsm_tune(orch_fsm *f, orch_actions *a, uint32_t of)
{
	orch_action *x;

	if (!f->p.tune || f->tune_job != 0 || f->tune_cand != 0)
		return; /* off, one in flight, or one back and not judged */
	f->tune_job = f->next_job++;
	f->tune_cand = ORCH_TUNE_CAND_FIRST + f->tunes;
	f->tune_of = of;
	f->tune_st = 0;
	f->tunes++;
	x = fsm_act(a, ORCH_ACT_TUNE);
	x->role = KCLAW__ROLE__SANDBOX;
	x->job = f->tune_job;
	x->cand = f->tune_cand;
	x->aux = of;
	x->key_n = f->role_jobs[KCLAW__ROLE__SANDBOX]++;
}

/* A tune result that is back joins the round's pick (cand, ms, sp) as a
 * candidate of its own: the better of the two is the pick. Returns the
 * tune candidate taken (0: none back). */
static uint32_t
fsm_tune_take(orch_fsm *f, uint32_t *cand, double *ms, double *sp)
{
	uint32_t t = f->tune_cand;
	double tsp;

	if (t == 0 || f->tune_job != 0)
		return 0;
	f->tune_cand = 0;
	if (f->tune_st != KCLAW__EVAL_STATUS__OK)
		return 0;
	tsp = fsm_result_speedup(f, f->tune_ms, f->tune_ref);
	if (*cand == 0 || (tsp > 0 && *sp > 0 ? tsp > *sp : f->tune_ms < *ms)) {
		*cand = t;
		*ms = f->tune_ms;
		*sp = tsp;
	}
	return t;
}

/* Promotes pick (cand, ms, sp) when the rule says so, counting a tune
 * candidate's promotion; then FEATURES for the new base, else PLAN. */
static void
fsm_promote_or_plan(orch_fsm *f, orch_actions *a, uint32_t cand, double ms,
    double sp, uint32_t tuned)
{
	if (fsm_promotes(f, ms, sp)) {
		if (tuned && cand == tuned)
			f->tune_promoted++;
		fsm_promote(f, a, cand, ms, sp);
		fsm_next(f, a, ORCH_ST_FEATURES);
	} else {
		fsm_next(f, a, ORCH_ST_PLAN);
	}
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

/* A repair chain on failing, which failed as origin and, for an
 * optimisation attempt, was recorded under round (0: not recorded). */
static void
fsm_start_chain(orch_fsm *f, orch_actions *a, uint32_t failing,
    enum orch_origin origin, uint32_t round)
{
	f->cur = failing;
	f->chain = failing;
	f->chain_origin = origin;
	f->chain_round = round;
	f->repairs = 0;
	fsm_next(f, a, ORCH_ST_DIAGNOSE);
}

/* The most promising failed seed whose chain has not run (0: none). */
static uint32_t
fsm_next_seed(const orch_fsm *f)
{
	uint32_t pick = 0, rank = 0;

	for (uint32_t i = 0; i < f->p.seeds; i++)
		if (!(f->seed_tried & fsm_bit(i)) && f->seed_rank[i] > rank) {
			pick = f->seed_first + i;
			rank = f->seed_rank[i];
		}
	return pick;
}

static void
fsm_seed_chain(orch_fsm *f, orch_actions *a, uint32_t seed)
{
	f->seed_tried |= fsm_bit(seed - f->seed_first);
	f->origin = ORCH_ORIGIN_SEED;
	fsm_start_chain(f, a, seed, ORCH_ORIGIN_SEED, 0);
}

/* A repair attempt of the chain failed: the next attempt, or the chain
 * is given up: back to the base, or the next seed when none exists. */
static void
fsm_repair_failed(orch_fsm *f, orch_actions *a)
{
	uint32_t seed;

	if (++f->repairs < f->p.max_repairs) {
		fsm_next(f, a, ORCH_ST_DIAGNOSE);
	} else if (f->base) {
		f->chain = 0;
		fsm_next(f, a, ORCH_ST_PLAN);
	} else if ((seed = fsm_next_seed(f)) != 0) {
		fsm_seed_chain(f, a, seed);
	} else {
		fsm_finish(f, a, ORCH_STOP_NO_CORRECT);
	}
}

/* ------------------------------------------------------- transitions */

/* k independent Generator jobs, each for one seed: Generator i is job
 * await_first + i and its seed candidate seed_first + i. */
static void
fsm_seed(orch_fsm *f, const orch_input *in, orch_actions *a)
{
	uint32_t k = f->p.seeds;

	(void)in;
	f->state = ORCH_ST_SEEDING;
	f->seed_first = f->next_cand;
	f->next_cand += k;
	f->await_first = f->next_job;
	f->await_n = k;
	f->await_done = 0;
	f->next_job += k;
	for (uint32_t i = 0; i < k; i++)
		fsm_agent_job(
		    f, a, KCLAW__ROLE__GENERATOR, 0, f->await_first + i);
}

/* The task names tensor files (or inline tensors): they enter the store
 * by content, off the loop, before the task seeds. */
static void
fsm_import(orch_fsm *f, const orch_input *in, orch_actions *a)
{
	(void)in;
	f->state = ORCH_ST_IMPORTING;
	fsm_act(a, ORCH_ACT_IMPORT);
}

static void
fsm_import_failed(orch_fsm *f, const orch_input *in, orch_actions *a)
{
	(void)in;
	fsm_finish(f, a, ORCH_STOP_IMPORT_FAILED);
}

/* Every Generator answered: evaluate the seeds they gave, all at once
 * (the evaluation of seed i is job await_first + i). Waiting for every
 * Generator keeps the task's course independent of the order of answers.
 * No seed at all fails the task: only seeding can. */
static void
fsm_seeds_review(orch_fsm *f, orch_actions *a)
{
	uint32_t k = f->p.seeds, gens = (uint32_t)((1ull << k) - 1);

	if (f->seed_got == 0) {
		fsm_finish(f, a,
		    f->gen_failed == gens ? ORCH_STOP_JOB_FAILED
		                          : ORCH_STOP_NO_CANDIDATE);
		return;
	}
	f->state = ORCH_ST_REVIEW_SEEDS;
	f->await_first = f->next_job;
	f->await_n = k;
	f->await_done = gens & ~f->seed_got; /* nothing to evaluate */
	f->next_job += k;
	for (uint32_t i = 0; i < k; i++)
		if (f->seed_got & fsm_bit(i))
			fsm_eval(f, a, f->await_first + i, f->seed_first + i);
}

/* Generator i answered (n candidates: the first is seed i) or failed for
 * good (n 0, failed). */
static void
fsm_seed_answer(
    orch_fsm *f, orch_actions *a, uint32_t i, uint32_t n, bool failed)
{
	uint32_t gens = (uint32_t)((1ull << f->p.seeds) - 1);

	f->await_done |= fsm_bit(i);
	if (n > 0)
		f->seed_got |= fsm_bit(i);
	if (failed)
		f->gen_failed |= fsm_bit(i);
	if (f->await_done == gens)
		fsm_seeds_review(f, a);
}

static void
fsm_seed_reply(orch_fsm *f, const orch_input *in, orch_actions *a)
{
	fsm_seed_answer(f, a, in->job - f->await_first, in->n, false);
}

/* Seed i's evaluation: once all are in, the best correct seed becomes the
 * base; else the most promising is repaired. */
static void
fsm_seed_result(orch_fsm *f, orch_actions *a, uint32_t i, Kclaw__EvalStatus st,
    double ms, double ref_ms, double sol, bool tunable)
{
	uint32_t gens = (uint32_t)((1ull << f->p.seeds) - 1), seed;
	uint32_t got = (uint32_t)__builtin_popcount(f->seed_got);

	f->await_done |= fsm_bit(i);
	fsm_ref_sample(f, ref_ms);
	if (st == KCLAW__EVAL_STATUS__OK)
		fsm_best(f, f->seed_first + i, ms,
		    fsm_result_speedup(f, ms, ref_ms), sol);
	if (st == KCLAW__EVAL_STATUS__OK && tunable)
		f->tunable |= fsm_bit(i);
	else
		f->seed_rank[i] = (uint8_t)fsm_repair_rank(st);
	if (st == KCLAW__EVAL_STATUS__NO_DEVICE)
		f->no_device++;
	if (f->await_done != gens)
		return; /* more seeds to review */
	if (f->best) {
		fsm_promote(f, a, f->best, f->best_ms, f->best_speedup);
		if (f->tunable & fsm_bit(f->best - f->seed_first))
			fsm_tune(f, a, f->best);
		fsm_next(f, a, ORCH_ST_FEATURES);
	} else if ((seed = fsm_next_seed(f)) != 0) {
		fsm_seed_chain(f, a, seed);
	} else {
		fsm_finish(f, a,
		    f->no_device == got ? ORCH_STOP_NO_DEVICE
		                        : ORCH_STOP_JOB_FAILED);
	}
}

static void
fsm_seed_done(orch_fsm *f, const orch_input *in, orch_actions *a)
{
	fsm_seed_result(f, a, in->job - f->await_first, in->status, in->ms,
	    in->ref_ms, in->sol, in->tunable != 0);
}

static void
fsm_repair(orch_fsm *f, const orch_input *in, orch_actions *a)
{
	(void)in;
	f->state = ORCH_ST_REPAIR;
	fsm_agent(f, a, KCLAW__ROLE__REPAIRER, f->cur);
}

/*
 * The outcome of the candidate under review (cur), evaluated or reused.
 * spend: the round counts (an evaluated kernel, or a duplicate past
 * max_duplicates); a free duplicate leaves no round and no record.
 */
static void
fsm_judge(orch_fsm *f, orch_actions *a, Kclaw__EvalStatus st, double ms,
    double ref_ms, double sol, bool spend, bool tunable)
{
	bool ok = st == KCLAW__EVAL_STATUS__OK;
	double sp = ok ? fsm_result_speedup(f, ms, ref_ms) : 0;
	orch_action *r;

	if (spend) {
		f->round++;
		r = fsm_act(a, ORCH_ACT_RECORD);
		r->origin = f->origin;
		r->cand = f->cur;
		r->aux = f->origin == ORCH_ORIGIN_REPAIR ? f->chain : f->base;
		r->round = f->round;
		r->status = st;
		r->value = ok && f->base_ms > 0 ? f->base_ms / ms : 0;
		fsm_event(
		    a, KCLAW__EVENT_KIND__ROUND_FINISHED, f->cur, ok ? ms : 0)
		    ->status = st;
	}
	if (st == KCLAW__EVAL_STATUS__NO_DEVICE) {
		fsm_finish(f, a, ORCH_STOP_NO_DEVICE);
	} else if (ok) {
		if (f->origin == ORCH_ORIGIN_REPAIR &&
		    f->chain_origin == ORCH_ORIGIN_OPT && f->chain_round) {
			/* The failed attempt, recorded again with the outcome
			 * of its repair. */
			r = fsm_act(a, ORCH_ACT_RECORD);
			r->origin = ORCH_ORIGIN_OPT;
			r->cand = f->cur;
			r->aux = f->base;
			r->round = f->chain_round;
			r->repaired = f->chain;
			r->status = st;
			r->value = f->base_ms > 0 ? f->base_ms / ms : 0;
		}
		uint32_t pick = f->cur, tuned;
		fsm_best(f, f->cur, ms, sp, sol);
		f->chain = 0;
		tuned = fsm_tune_take(f, &pick, &ms, &sp);
		if (tunable && f->best == f->cur)
			fsm_tune(f, a,
			    f->cur); /* only a new best is worth a sweep */
		fsm_promote_or_plan(f, a, pick, ms, sp, tuned);
	} else if (f->origin != ORCH_ORIGIN_REPAIR) {
		fsm_start_chain(
		    f, a, f->cur, ORCH_ORIGIN_OPT, spend ? f->round : 0);
	} else if (spend) {
		fsm_repair_failed(f, a);
	} else {
		fsm_next(f, a, ORCH_ST_DIAGNOSE);
	}
}

/* A round that produced nothing to judge: its agent job or evaluation
 * failed for good, or the agent answered without a candidate. The round
 * counts as failed and the task goes on: a repair chain with its next
 * attempt, otherwise a new plan for the base. */
static void
fsm_round_failed(orch_fsm *f, orch_actions *a)
{
	bool chain = f->state == ORCH_ST_DIAGNOSE ||
	    f->state == ORCH_ST_REPAIR ||
	    (f->state == ORCH_ST_REVIEW && f->origin == ORCH_ORIGIN_REPAIR);

	f->round++;
	f->failed_rounds++;
	fsm_event(a, KCLAW__EVENT_KIND__ROUND_FINISHED,
	    f->state == ORCH_ST_REVIEW ? f->cur : 0, 0)
	    ->status = KCLAW__EVAL_STATUS__INTERNAL_ERROR;
	if (chain)
		fsm_repair_failed(f, a);
	else
		fsm_next(f, a, ORCH_ST_PLAN);
}

/* A Repairer or Optimizer answered: review its kernel, or reuse the
 * result of an identical earlier one. */
static void
fsm_review(orch_fsm *f, const orch_input *in, orch_actions *a)
{
	bool spend;

	if (in->n == 0) {
		fsm_round_failed(f, a);
		return;
	}
	f->origin =
	    f->state == ORCH_ST_REPAIR ? ORCH_ORIGIN_REPAIR : ORCH_ORIGIN_OPT;
	f->cur = f->next_cand++;
	if (in->reuse == 0) {
		f->dups = 0;
		f->state = ORCH_ST_REVIEW;
		fsm_eval(f, a, fsm_await1(f), f->cur);
		return;
	}
	spend = f->dups >= f->p.max_duplicates;
	if (!spend)
		f->dups++;
	f->reused++;
	f->await_n = 0;
	f->await_done = 0;
	fsm_event(a, KCLAW__EVENT_KIND__EVAL_FINISHED, f->cur,
	    in->status == KCLAW__EVAL_STATUS__OK ? in->ms : 0)
	    ->aux = in->reuse;
	f->state = ORCH_ST_REVIEW;
	fsm_judge(f, a, in->status, in->ms, in->ref_ms, in->sol, spend, false);
}

static void
fsm_reviewed(orch_fsm *f, const orch_input *in, orch_actions *a)
{
	fsm_ref_sample(f, in->ref_ms);
	fsm_judge(f, a, in->status, in->ms, in->ref_ms, in->sol, true,
	    in->tunable != 0);
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
	if (f->p.candidates_per_round > 1) {
		fsm_wave_start(f, a);
		return;
	}
	f->state = ORCH_ST_PLAN;
	fsm_agent(f, a, KCLAW__ROLE__PLANNER, f->base);
}

/* --------------------------------------------------------------- waves */

/* A slot whose round produced no kernel to judge (a job failed for good,
 * or the Optimizer answered without one). */
#define FSM_WAVE_NONE 0xffffffffu

/*
 * A wave: K candidates of one round at once. Its 3K job numbers and K
 * candidate numbers are taken now (slot i: Planner wave_job + i,
 * Optimizer + k, evaluation + 2k), so nothing depends on the order of
 * answers; the K Planners go out now, each slot's Optimizer when its plan
 * arrives, its evaluation when its kernel does. A wave never spends more
 * rounds than the budget has left, nor, by the task's rate, more tokens.
 */
static void
fsm_wave_start(orch_fsm *f, orch_actions *a)
{
	uint32_t k = f->p.candidates_per_round,
	         left = f->p.max_rounds - f->round;

	if (k > left)
		k = left;
	/* Under a token budget, no more candidates than the tokens left pay
	 * for at the task's rate so far (its tokens over its rounds and
	 * seeds), so a wave overshoots the budget by less than a round. */
	if (f->p.token_budget && f->tokens < f->p.token_budget) {
		uint64_t per = f->tokens / (f->round + f->p.seeds);
		uint64_t can =
		    per ? (f->p.token_budget - f->tokens + per - 1) / per : k;
		if (can < k)
			k = (uint32_t)can;
	}
	f->state = ORCH_ST_WAVE;
	f->waves++;
	f->wave_k = k;
	f->wave_job = f->next_job;
	f->next_job += 3 * k;
	f->wave_cand = f->next_cand;
	f->next_cand += k;
	f->wave_opt_key = f->role_jobs[KCLAW__ROLE__OPTIMIZER];
	f->role_jobs[KCLAW__ROLE__OPTIMIZER] += k;
	f->wave_eval_key = f->role_jobs[KCLAW__ROLE__SANDBOX];
	f->role_jobs[KCLAW__ROLE__SANDBOX] += k;
	f->await_first = f->wave_job;
	f->await_n = 3 * k;
	f->await_done = 0;
	memset(f->wave_st, 0, sizeof(f->wave_st));
	memset(f->wave_ms, 0, sizeof(f->wave_ms));
	memset(f->wave_ref, 0, sizeof(f->wave_ref));
	memset(f->wave_sol, 0, sizeof(f->wave_sol));
	f->tunable = 0;
	for (uint32_t i = 0; i < k; i++)
		fsm_agent_job(
		    f, a, KCLAW__ROLE__PLANNER, f->base, f->wave_job + i);
}

/* The phase (0 Planner, 1 Optimizer, 2 evaluation) and slot of a job of
 * the wave; false when it is not one of phase want. */
static bool
fsm_wave_job(const orch_fsm *f, uint32_t job, uint32_t want, uint32_t *slot)
{
	uint32_t off = job - f->wave_job;

	if (job < f->wave_job || off >= 3 * f->wave_k ||
	    off / f->wave_k != want)
		return false;
	*slot = off % f->wave_k;
	return true;
}

/*
 * The round's judgement, once every slot has its outcome: each slot is a
 * round of its own (recorded as an attempt on the base, in slot order);
 * the best correct kernel of the wave is promoted under the paper's rule,
 * else the next wave plans on the same base; a wave without a correct
 * kernel repairs its most promising failure.
 */
static void
fsm_wave_judge(orch_fsm *f, orch_actions *a)
{
	uint32_t pick = 0, fail = 0, fail_rank = 0, fail_round = 0;
	double pick_ms = 0, pick_sp = 0;
	bool nodev = false;

	for (uint32_t i = 0; i < f->wave_k; i++) {
		uint32_t st = f->wave_st[i], cand = f->wave_cand + i;
		double ms = f->wave_ms[i], sp;
		orch_action *r, *ev;
		f->round++;
		if (st == FSM_WAVE_NONE) {
			f->failed_rounds++;
			ev = fsm_event(
			    a, KCLAW__EVENT_KIND__ROUND_FINISHED, 0, 0);
			ev->status = KCLAW__EVAL_STATUS__INTERNAL_ERROR;
			ev->round = f->round;
			continue;
		}
		sp = st == KCLAW__EVAL_STATUS__OK
		    ? fsm_result_speedup(f, ms, f->wave_ref[i])
		    : 0;
		r = fsm_act(a, ORCH_ACT_RECORD);
		r->origin = ORCH_ORIGIN_OPT;
		r->cand = cand;
		r->aux = f->base;
		r->round = f->round;
		r->status = (Kclaw__EvalStatus)st;
		r->value =
		    st == KCLAW__EVAL_STATUS__OK && f->base_ms > 0 && ms > 0
		    ? f->base_ms / ms
		    : 0;
		ev = fsm_event(a, KCLAW__EVENT_KIND__ROUND_FINISHED, cand,
		    st == KCLAW__EVAL_STATUS__OK ? ms : 0);
		ev->status = (Kclaw__EvalStatus)st;
		ev->round = f->round;
		if (st == KCLAW__EVAL_STATUS__NO_DEVICE) {
			nodev = true;
		} else if (st == KCLAW__EVAL_STATUS__OK) {
			fsm_best(f, cand, ms, sp, f->wave_sol[i]);
			if (pick == 0 ||
			    (sp > 0 && pick_sp > 0 ? sp > pick_sp
			                           : ms < pick_ms)) {
				pick = cand;
				pick_ms = ms;
				pick_sp = sp;
			}
		} else if (fsm_repair_rank((Kclaw__EvalStatus)st) > fail_rank) {
			fail = cand;
			fail_rank = fsm_repair_rank((Kclaw__EvalStatus)st);
			fail_round = f->round;
		}
	}
	f->await_n = 0;
	f->await_done = 0;
	if (nodev) {
		fsm_finish(f, a, ORCH_STOP_NO_DEVICE);
	} else if (pick) {
		uint32_t best = pick, tuned;
		f->cur = pick;
		f->origin = ORCH_ORIGIN_OPT;
		f->chain = 0;
		tuned = fsm_tune_take(f, &pick, &pick_ms, &pick_sp);
		if (f->tunable & fsm_bit(best - f->wave_cand))
			fsm_tune(f, a, best);
		fsm_promote_or_plan(f, a, pick, pick_ms, pick_sp, tuned);
	} else if (fail) {
		f->origin = ORCH_ORIGIN_OPT;
		fsm_start_chain(f, a, fail, ORCH_ORIGIN_OPT, fail_round);
	} else {
		fsm_next(f, a, ORCH_ST_PLAN);
	}
}

/* Slot i's outcome (FSM_WAVE_NONE: no kernel); every job of the slot is
 * done. The wave is judged when its last slot is. */
static void
fsm_wave_result(orch_fsm *f, orch_actions *a, uint32_t i, uint32_t st,
    double ms, double ref_ms, double sol)
{
	uint32_t k = f->wave_k, all = (uint32_t)((1ull << (3 * k)) - 1);

	f->await_done |= fsm_bit(i) | fsm_bit(k + i) | fsm_bit(2 * k + i);
	f->wave_st[i] = st;
	f->wave_ms[i] = ms;
	f->wave_ref[i] = ref_ms;
	f->wave_sol[i] = sol;
	if (f->await_done == all)
		fsm_wave_judge(f, a);
}

static void
fsm_wave_planned(orch_fsm *f, const orch_input *in, orch_actions *a)
{
	uint32_t i;

	if (!fsm_wave_job(f, in->job, 0, &i))
		return;
	f->await_done |= fsm_bit(i);
	fsm_agent_job(
	    f, a, KCLAW__ROLE__OPTIMIZER, f->base, f->wave_job + f->wave_k + i);
	f->role_jobs[KCLAW__ROLE__OPTIMIZER]--; /* the wave took its keys */
	a->a[a->n - 1].key_n = f->wave_opt_key + i;
}

static void
fsm_wave_candidate(orch_fsm *f, const orch_input *in, orch_actions *a)
{
	uint32_t i;

	if (!fsm_wave_job(f, in->job, 1, &i))
		return;
	f->await_done |= fsm_bit(f->wave_k + i);
	if (in->n == 0) {
		fsm_wave_result(f, a, i, FSM_WAVE_NONE, 0, 0, 0);
	} else if (in->reuse) {
		f->reused++;
		fsm_event(a, KCLAW__EVENT_KIND__EVAL_FINISHED, f->wave_cand + i,
		    in->status == KCLAW__EVAL_STATUS__OK ? in->ms : 0)
		    ->aux = in->reuse;
		fsm_wave_result(
		    f, a, i, in->status, in->ms, in->ref_ms, in->sol);
	} else {
		fsm_eval(
		    f, a, f->wave_job + 2 * f->wave_k + i, f->wave_cand + i);
		f->role_jobs[KCLAW__ROLE__SANDBOX]--; /* the wave took its keys
		                                       */
		a->a[a->n - 1].key_n = f->wave_eval_key + i;
	}
}

static void
fsm_wave_evaluated(orch_fsm *f, const orch_input *in, orch_actions *a)
{
	uint32_t i;

	if (!fsm_wave_job(f, in->job, 2, &i))
		return;
	if (in->tunable)
		f->tunable |= fsm_bit(i);
	fsm_ref_sample(f, in->ref_ms);
	fsm_wave_result(f, a, i, in->status, in->ms, in->ref_ms, in->sol);
}

static void
fsm_optimize(orch_fsm *f, const orch_input *in, orch_actions *a)
{
	(void)in;
	f->state = ORCH_ST_OPTIMIZE;
	fsm_agent(f, a, KCLAW__ROLE__OPTIMIZER, f->base);
}

/* A job failed for good (its retries spent). During seeding one
 * Generator or one seed's evaluation failing does not sink the others;
 * later it costs the round, never the task. */
static void
fsm_job_failed(orch_fsm *f, const orch_input *in, orch_actions *a)
{
	uint32_t i = in->job - f->await_first;

	if (f->tune_job && in->job == f->tune_job) {
		/* The sweep failed for good: no tune this time. */
		f->tune_job = 0;
		f->tune_cand = 0;
		return;
	}

	if (f->state == ORCH_ST_SEEDING) {
		fsm_seed_answer(f, a, i, 0, true);
		return;
	}
	if (f->state == ORCH_ST_REVIEW_SEEDS) {
		fsm_seed_result(f, a, i, KCLAW__EVAL_STATUS__INTERNAL_ERROR, 0,
		    0, 0, false);
		return;
	}
	if (f->state == ORCH_ST_WAVE) {
		/* That slot's round: no kernel to judge, or, its evaluation
		 * failing, one that cannot be judged. */
		fsm_wave_result(f, a, i % f->wave_k, FSM_WAVE_NONE, 0, 0, 0);
		return;
	}
	fsm_round_failed(f, a);
}

/* The tune candidate's sweep: kept for the next judgement; a correct
 * one may already be the task's best. */
static void
fsm_tuned(orch_fsm *f, const orch_input *in, orch_actions *a)
{
	(void)a;
	f->tune_job = 0;
	f->tune_st = in->status;
	f->tune_ms = in->ms;
	f->tune_ref = in->ref_ms;
	f->tune_sol = in->sol;
	fsm_ref_sample(f, in->ref_ms);
	if (in->status == KCLAW__EVAL_STATUS__OK) {
		fsm_best(f, f->tune_cand, in->ms,
		    fsm_result_speedup(f, in->ms, in->ref_ms), in->sol);
		if (f->best == f->tune_cand)
			f->best_tuned = 1;
	} else {
		f->tune_cand = 0;
	}
}

static void
fsm_cancel(orch_fsm *f, const orch_input *in, orch_actions *a)
{
	(void)in;
	fsm_finish(f, a, ORCH_STOP_CANCELLED);
}

/* An agent found that the model cannot take this task's prompts (its
 * context window): every later job would fail the same way, so the task
 * stops now, keeping a best kernel it already has. */
static void
fsm_model_unfit(orch_fsm *f, const orch_input *in, orch_actions *a)
{
	(void)in;
	fsm_finish(f, a, ORCH_STOP_MODEL_UNFIT);
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
	return k != ORCH_IN_START && k != ORCH_IN_CANCEL && k != ORCH_IN_TICK &&
	    k != ORCH_IN_IMPORT && k != ORCH_IN_IMPORTED &&
	    k != ORCH_IN_IMPORT_FAILED && k != ORCH_IN_MODEL_UNFIT;
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
	if (in->kind == ORCH_IN_TUNED ||
	    (in->kind == ORCH_IN_JOB_FAILED && f->tune_job &&
	        in->job == f->tune_job)) {
		if (f->tune_job == 0 || in->job != f->tune_job)
			return false; /* no sweep awaited, or another one */
	} else if (fsm_has_job(in->kind) &&
	    (in->job < f->await_first ||
	        in->job - f->await_first >= f->await_n ||
	        (f->await_done & 1u << (in->job - f->await_first)))) {
		return false; /* a job this machine no longer awaits */
	}
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
	if (f->state == ORCH_ST_IMPORTING)
		fsm_act(acts, ORCH_ACT_IMPORT); /* done again from the start */
	if (f->state == ORCH_ST_RETRIEVE) {
		orch_action *x = fsm_act(acts, ORCH_ACT_RETRIEVE);
		x->job = f->await_first;
		x->cand = f->base;
	}
}

bool
orch_fsm_explores(const orch_fsm *f)
{
	double r = (double)f->round + 1, s = f->p.explore_share;

	if (!(s > 0))
		return false;
	return floor(r * s + FSM_EPS) > floor((r - 1) * s + FSM_EPS);
}

/* KCF3's orch_params lacked candidates_per_round and its pad (8 bytes)
 * and the machine ended at best_sol; KCF2's params also lacked
 * explore_share and sol_stop (16 bytes), and it had no best_sol. */
#define FSM_KCF3_PARAMS (sizeof(orch_params) - 2 * sizeof(uint32_t))
#define FSM_KCF2_PARAMS (FSM_KCF3_PARAMS - 2 * sizeof(double))

bool
orch_fsm_load(
    const void *data, size_t len, const orch_params *defaults, orch_fsm *f)
{
	const unsigned char *b = data;
	size_t head = offsetof(orch_fsm, p);
	uint32_t magic;

	if (len < sizeof(magic))
		return false;
	memcpy(&magic, b, sizeof(magic));
	if (magic == ORCH_FSM_MAGIC && len == sizeof(*f)) {
		memcpy(f, b, sizeof(*f));
		return true;
	}
	if (magic == ORCH_FSM_MAGIC_KCF3 && len == ORCH_FSM_KCF3_SIZE)
		head += FSM_KCF3_PARAMS;
	else if (magic == ORCH_FSM_MAGIC_KCF2 && len == ORCH_FSM_KCF2_SIZE)
		head += FSM_KCF2_PARAMS;
	else
		return false;
	memset(f, 0, sizeof(*f));
	memcpy(f, b, head);
	memcpy(&f->round, b + head, len - head);
	f->magic = ORCH_FSM_MAGIC;
	if (magic == ORCH_FSM_MAGIC_KCF2) {
		f->p.explore_share = defaults->explore_share;
		f->p.sol_stop = defaults->sol_stop;
		f->best_sol = 0; /* unknown until a new best */
	}
	/* A task under way keeps one candidate per round (its jobs were
	 * numbered so) and no tuning. */
	f->p.candidates_per_round = 1;
	f->p.tune = 0;
	return true;
}

_Static_assert(
    offsetof(orch_fsm, round) == offsetof(orch_fsm, p) + sizeof(orch_params),
    "orch_fsm_load: the fields after p follow it directly");
_Static_assert(
    offsetof(orch_fsm, best_sol) + sizeof(double) == offsetof(orch_fsm, waves),
    "orch_fsm_load: the wave follows best_sol");

int
orch_fsm_wave_slot(const orch_fsm *f, uint32_t n, bool by_cand)
{
	uint32_t first = by_cand ? f->wave_cand : f->wave_job;
	uint32_t span = by_cand ? f->wave_k : 3 * f->wave_k;

	if (f->state != ORCH_ST_WAVE || f->wave_k == 0 || n < first ||
	    n - first >= span)
		return -1;
	return (int)((n - first) % f->wave_k);
}

uint32_t
orch_fsm_cand_of(const orch_fsm *f, uint32_t job)
{
	int slot = orch_fsm_wave_slot(f, job, false);

	return slot >= 0 ? f->wave_cand + (uint32_t)slot : f->next_cand;
}

double
orch_fsm_ref_median(const orch_fsm *f)
{
	double v[ORCH_REF_SAMPLES];
	uint32_t n = f->ref_n < ORCH_REF_SAMPLES ? f->ref_n : ORCH_REF_SAMPLES;

	if (n == 0)
		return 0;
	memcpy(v, f->ref_ring, n * sizeof(v[0]));
	for (uint32_t i = 1; i < n; i++)
		for (uint32_t j = i; j > 0 && v[j - 1] > v[j]; j--) {
			double t = v[j];
			v[j] = v[j - 1];
			v[j - 1] = t;
		}
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* ---------------------------------------------------------- parameters */

void
orch_params_default(orch_params *p)
{
	memset(p, 0, sizeof(*p));
	p->seeds = 3;
	p->max_rounds = 15;
	p->max_repairs = 3;
	p->max_duplicates = 3;
	p->rt = 0.3;
	p->at = 0.3;
	p->explore_share = ORCH_EXPLORE_SHARE_DEFAULT;
	p->sol_stop = ORCH_SOL_STOP_DEFAULT;
	p->candidates_per_round = ORCH_CANDIDATES_PER_ROUND_DEFAULT;
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
	if (!(f->p.explore_share >= 0))
		f->p.explore_share = 0;
	if (f->p.explore_share > 1)
		f->p.explore_share = 1;
	if (!(f->p.sol_stop >= 0))
		f->p.sol_stop = 0;
	if (f->p.candidates_per_round == 0)
		f->p.candidates_per_round = 1;
	if (f->p.candidates_per_round > ORCH_MAX_WAVE)
		f->p.candidates_per_round = ORCH_MAX_WAVE;
	f->p.tune = f->p.tune ? 1 : 0;
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
	    "RETRIEVE", "PLAN", "OPTIMIZE", "DONE", "FAILED", "CANCELLED",
	    "IMPORTING", "WAVE"};

	return state < ORCH_ST_COUNT ? names[state] : "UNKNOWN";
}

const char *
orch_input_name(enum orch_input_kind kind)
{
	static const char *names[ORCH_IN_COUNT] = {"START", "SEEDS",
	    "EVALUATED", "DIAGNOSED", "CANDIDATE", "FEATURES", "RETRIEVED",
	    "PLANNED", "JOB_FAILED", "CANCEL", "TICK", "IMPORT", "IMPORTED",
	    "IMPORT_FAILED", "TUNED", "MODEL_UNFIT"};

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
		return "no seed: every Generator job, or every seed's "
		       "evaluation, failed after its retries (see the task's "
		       "events)";
	case ORCH_STOP_NO_CANDIDATE:
		return "no seed: every Generator answered without a "
		       "candidate";
	case ORCH_STOP_IMPORT_FAILED:
		return "import failed: the task's tensors could not be read "
		       "into the store; fix the bundle and submit it again";
	case ORCH_STOP_SOL:
		return "near the speed of light: the best kernel reached "
		       "params.sol_stop of the fastest the GPU allows";
	case ORCH_STOP_MODEL_UNFIT:
		return "the model cannot take this task's prompts: its context "
		       "window is too small (the task's agent error says what "
		       "to set); every job would fail the same way";
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
