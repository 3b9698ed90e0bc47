/*
 * fsm_test.c - walks every row of the task state machine's table, the
 * inputs it must ignore, and every way a task stops.
 */
#include <string.h>

#include "fsm.h"
#include "kc_err.h"
#include "kc_test.h"

#define OK KCLAW__EVAL_STATUS__OK
#define WRONG KCLAW__EVAL_STATUS__WRONG_RESULT
#define COMPILE KCLAW__EVAL_STATUS__COMPILE_ERROR
#define NODEV KCLAW__EVAL_STATUS__NO_DEVICE

static orch_actions acts;

static orch_fsm
fsm_new(uint32_t seeds, uint32_t rounds)
{
	orch_params p;
	orch_fsm f;

	orch_params_default(&p);
	p.seeds = seeds;
	p.max_rounds = rounds;
	orch_fsm_init(&f, &p);
	return f;
}

/* Applies an input that must change the machine. */
static void
step(orch_fsm *f, orch_input in)
{
	orch_fsm next;

	if (!orch_fsm_step(f, &in, &next, &acts))
		KT_FAIL("input %s ignored in %s", orch_input_name(in.kind),
		    orch_state_name(f->state));
	*f = next;
}

/* Applies an input that must be ignored. */
static void
ignored(const orch_fsm *f, orch_input in)
{
	orch_fsm next;

	if (orch_fsm_step(f, &in, &next, &acts))
		KT_FAIL("input %s (job %u) applied in %s",
		    orch_input_name(in.kind), in.job,
		    orch_state_name(f->state));
}

static const orch_action *
find(enum orch_action_kind kind, int nth)
{
	for (unsigned i = 0; i < acts.n; i++)
		if (acts.a[i].kind == kind && nth-- == 0)
			return &acts.a[i];
	return NULL;
}

static const orch_action *
find_event(Kclaw__EventKind ev)
{
	for (unsigned i = 0; i < acts.n; i++)
		if (acts.a[i].kind == ORCH_ACT_EVENT && acts.a[i].event == ev)
			return &acts.a[i];
	return NULL;
}

static orch_input
in_job(enum orch_input_kind kind, uint32_t job)
{
	orch_input in = {.kind = kind, .job = job};
	return in;
}

static orch_input
in_n(enum orch_input_kind kind, uint32_t job, uint32_t n)
{
	orch_input in = {.kind = kind, .job = job, .n = n, .tokens = 100};
	return in;
}

static orch_input
in_eval(uint32_t job, Kclaw__EvalStatus st, double ms)
{
	orch_input in = {.kind = ORCH_IN_EVALUATED,
	    .job = job,
	    .status = st,
	    .ms = ms,
	    .ref_ms = 4.0};
	return in;
}

/* The job number of the one agent or eval action just issued. */
static uint32_t
issued(enum orch_action_kind kind, Kclaw__Role role)
{
	const orch_action *x = find(kind, 0);

	KT_ASSERT(x != NULL);
	KT_EQ_INT(x->role, role);
	return x->job;
}

/* SUBMITTED -> SEEDING -> REVIEW_SEEDS -> FEATURES with seed 2 correct. */
static orch_fsm
fsm_to_features(void)
{
	orch_fsm f = fsm_new(3, 15);
	uint32_t gen, e1;

	step(&f, (orch_input){.kind = ORCH_IN_START});
	KT_EQ_INT(f.state, ORCH_ST_SEEDING);
	gen = issued(ORCH_ACT_AGENT, KCLAW__ROLE__GENERATOR);
	KT_EQ_INT(find(ORCH_ACT_AGENT, 0)->count, 3);
	KT_ASSERT(find_event(KCLAW__EVENT_KIND__STATE_CHANGED) != NULL);

	step(&f, in_n(ORCH_IN_SEEDS, gen, 3));
	KT_EQ_INT(f.state, ORCH_ST_REVIEW_SEEDS);
	KT_EQ_INT(f.tokens, 100);
	KT_ASSERT(find(ORCH_ACT_EVAL, 2) != NULL);
	KT_ASSERT(find(ORCH_ACT_EVAL, 3) == NULL);
	e1 = find(ORCH_ACT_EVAL, 0)->job;
	KT_EQ_INT(find(ORCH_ACT_EVAL, 1)->cand, 2);

	/* Out of order; a repeated result is ignored. */
	step(&f, in_eval(e1 + 2, OK, 3.0));
	KT_EQ_INT(f.state, ORCH_ST_REVIEW_SEEDS);
	KT_EQ_INT(acts.n, 0);
	ignored(&f, in_eval(e1 + 2, OK, 1.0));
	step(&f, in_eval(e1, WRONG, 0));
	step(&f, in_eval(e1 + 1, OK, 2.0));
	KT_EQ_INT(f.state, ORCH_ST_FEATURES);
	KT_EQ_INT(f.base, 2);
	KT_EQ_INT(f.best, 2);
	KT_ASSERT(f.base_ms == 2.0 && f.ref_ms == 4.0);
	KT_EQ_INT(find_event(KCLAW__EVENT_KIND__BASE_PROMOTED)->cand, 2);
	KT_EQ_INT(find(ORCH_ACT_AGENT, 0)->cand, 2);
	issued(ORCH_ACT_AGENT, KCLAW__ROLE__FEATURE);
	return f;
}

/* FEATURES -> RETRIEVE -> PLAN -> OPTIMIZE -> REVIEW. */
static uint32_t
fsm_optimize_round(orch_fsm *f)
{
	uint32_t j;

	KT_EQ_INT(f->state, ORCH_ST_FEATURES);
	j = issued(ORCH_ACT_AGENT, KCLAW__ROLE__FEATURE);
	step(f, in_n(ORCH_IN_FEATURES, j, 0));
	KT_EQ_INT(f->state, ORCH_ST_RETRIEVE);
	j = find(ORCH_ACT_RETRIEVE, 0)->job;
	KT_EQ_INT(find(ORCH_ACT_RETRIEVE, 0)->cand, f->base);
	step(f, in_job(ORCH_IN_RETRIEVED, j));
	KT_EQ_INT(f->state, ORCH_ST_PLAN);
	j = issued(ORCH_ACT_AGENT, KCLAW__ROLE__PLANNER);
	step(f, in_n(ORCH_IN_PLANNED, j, 0));
	KT_EQ_INT(f->state, ORCH_ST_OPTIMIZE);
	j = issued(ORCH_ACT_AGENT, KCLAW__ROLE__OPTIMIZER);
	step(f, in_n(ORCH_IN_CANDIDATE, j, 1));
	KT_EQ_INT(f->state, ORCH_ST_REVIEW);
	KT_EQ_INT(f->origin, ORCH_ORIGIN_OPT);
	return issued(ORCH_ACT_EVAL, KCLAW__ROLE__SANDBOX);
}

static void
test_optimize_promote_and_keep(void)
{
	orch_fsm f = fsm_to_features();
	const orch_action *r;
	uint32_t e;

	/* 2.0 -> 1.0 ms: 50% faster, promoted. */
	e = fsm_optimize_round(&f);
	step(&f, in_eval(e, OK, 1.0));
	KT_EQ_INT(f.round, 1);
	KT_EQ_INT(f.state, ORCH_ST_FEATURES);
	KT_EQ_INT(f.base, f.cur);
	KT_ASSERT(find_event(KCLAW__EVENT_KIND__ROUND_FINISHED) != NULL);
	KT_ASSERT(find_event(KCLAW__EVENT_KIND__BASE_PROMOTED) != NULL);
	r = find(ORCH_ACT_RECORD, 0);
	KT_EQ_INT(r->origin, ORCH_ORIGIN_OPT);
	KT_EQ_INT(r->aux, 2); /* attempt on the old base */
	KT_ASSERT(r->value == 2.0);

	/* 1.0 -> 0.9 ms: faster (best) but under both thresholds: the base
	 * stays and the Planner is asked again. */
	e = fsm_optimize_round(&f);
	step(&f, in_eval(e, OK, 0.9));
	KT_EQ_INT(f.state, ORCH_ST_PLAN);
	KT_EQ_INT(f.best, f.cur);
	KT_ASSERT(f.base != f.best);
	KT_ASSERT(find_event(KCLAW__EVENT_KIND__BASE_PROMOTED) == NULL);
	issued(ORCH_ACT_AGENT, KCLAW__ROLE__PLANNER);
}

static void
test_absolute_threshold(void)
{
	orch_fsm f = fsm_to_features();
	uint32_t e = fsm_optimize_round(&f);

	/* 2.0 -> 1.65 ms: 17.5% (< rt) but 0.35 ms (>= at): promoted. */
	step(&f, in_eval(e, OK, 1.65));
	KT_EQ_INT(f.base, f.cur);
	KT_EQ_INT(f.state, ORCH_ST_FEATURES);
}

static void
test_repair_chain(void)
{
	orch_fsm f = fsm_to_features();
	uint32_t e, j, failing;

	/* A broken optimized kernel starts a repair chain. */
	e = fsm_optimize_round(&f);
	failing = f.cur;
	step(&f, in_eval(e, COMPILE, 0));
	KT_EQ_INT(f.state, ORCH_ST_DIAGNOSE);
	KT_EQ_INT(f.chain, failing);
	KT_EQ_INT(find(ORCH_ACT_AGENT, 0)->cand, failing);
	j = issued(ORCH_ACT_AGENT, KCLAW__ROLE__DIAGNOSER);
	for (uint32_t attempt = 0; attempt < 3; attempt++) {
		step(&f, in_n(ORCH_IN_DIAGNOSED, j, 0));
		KT_EQ_INT(f.state, ORCH_ST_REPAIR);
		j = issued(ORCH_ACT_AGENT, KCLAW__ROLE__REPAIRER);
		step(&f, in_n(ORCH_IN_CANDIDATE, j, 1));
		KT_EQ_INT(f.state, ORCH_ST_REVIEW);
		KT_EQ_INT(f.origin, ORCH_ORIGIN_REPAIR);
		e = issued(ORCH_ACT_EVAL, KCLAW__ROLE__SANDBOX);
		step(&f, in_eval(e, WRONG, 0));
		KT_EQ_INT(find(ORCH_ACT_RECORD, 0)->origin, ORCH_ORIGIN_REPAIR);
		KT_EQ_INT(find(ORCH_ACT_RECORD, 0)->aux, failing);
		if (attempt < 2) {
			KT_EQ_INT(f.state, ORCH_ST_DIAGNOSE);
			j = issued(ORCH_ACT_AGENT, KCLAW__ROLE__DIAGNOSER);
		}
	}
	/* Three failed repairs: the chain is given up, the base stays. */
	KT_EQ_INT(f.state, ORCH_ST_PLAN);
	KT_EQ_INT(f.round, 4);
	KT_EQ_INT(f.base, 2);
}

static void
test_repair_works_second_time_without_base(void)
{
	orch_fsm f = fsm_new(2, 15);
	uint32_t j, e;

	step(&f, (orch_input){.kind = ORCH_IN_START});
	step(&f, in_n(ORCH_IN_SEEDS, find(ORCH_ACT_AGENT, 0)->job, 2));
	e = find(ORCH_ACT_EVAL, 0)->job;
	step(&f, in_eval(e, COMPILE, 0));
	step(&f, in_eval(e + 1, WRONG, 0));
	/* No correct seed: repair the most promising (it ran). */
	KT_EQ_INT(f.state, ORCH_ST_DIAGNOSE);
	KT_EQ_INT(f.cur, 2);
	j = issued(ORCH_ACT_AGENT, KCLAW__ROLE__DIAGNOSER);
	step(&f, in_n(ORCH_IN_DIAGNOSED, j, 0));
	j = issued(ORCH_ACT_AGENT, KCLAW__ROLE__REPAIRER);
	step(&f, in_n(ORCH_IN_CANDIDATE, j, 1));
	step(
	    &f, in_eval(issued(ORCH_ACT_EVAL, KCLAW__ROLE__SANDBOX), WRONG, 0));
	j = issued(ORCH_ACT_AGENT, KCLAW__ROLE__DIAGNOSER);
	step(&f, in_n(ORCH_IN_DIAGNOSED, j, 0));
	j = issued(ORCH_ACT_AGENT, KCLAW__ROLE__REPAIRER);
	KT_EQ_INT(find(ORCH_ACT_AGENT, 0)->key_n, 1); /* replay key n */
	step(&f, in_n(ORCH_IN_CANDIDATE, j, 1));
	step(&f, in_eval(issued(ORCH_ACT_EVAL, KCLAW__ROLE__SANDBOX), OK, 3.0));
	/* The first correct kernel becomes the base. */
	KT_EQ_INT(f.state, ORCH_ST_FEATURES);
	KT_EQ_INT(f.base, f.cur);
	KT_EQ_INT(f.round, 2);
}

static void
test_no_correct_kernel(void)
{
	orch_fsm f = fsm_new(1, 15);
	uint32_t j;

	f.p.max_repairs = 1;
	step(&f, (orch_input){.kind = ORCH_IN_START});
	step(&f, in_n(ORCH_IN_SEEDS, find(ORCH_ACT_AGENT, 0)->job, 1));
	step(&f, in_eval(find(ORCH_ACT_EVAL, 0)->job, WRONG, 0));
	j = issued(ORCH_ACT_AGENT, KCLAW__ROLE__DIAGNOSER);
	step(&f, in_n(ORCH_IN_DIAGNOSED, j, 0));
	j = issued(ORCH_ACT_AGENT, KCLAW__ROLE__REPAIRER);
	step(&f, in_n(ORCH_IN_CANDIDATE, j, 1));
	step(
	    &f, in_eval(issued(ORCH_ACT_EVAL, KCLAW__ROLE__SANDBOX), WRONG, 0));
	KT_EQ_INT(f.state, ORCH_ST_FAILED);
	KT_EQ_INT(f.stop, ORCH_STOP_NO_CORRECT);
	KT_ASSERT(find(ORCH_ACT_DROP_JOBS, 0) != NULL);
	KT_ASSERT(find_event(KCLAW__EVENT_KIND__TASK_FINISHED) != NULL);
	KT_CONTAINS(orch_stop_text(f.stop), "max_repairs");
}

static void
test_no_device(void)
{
	orch_fsm f = fsm_new(2, 15);
	uint32_t e;

	step(&f, (orch_input){.kind = ORCH_IN_START});
	step(&f, in_n(ORCH_IN_SEEDS, find(ORCH_ACT_AGENT, 0)->job, 2));
	e = find(ORCH_ACT_EVAL, 0)->job;
	step(&f, in_eval(e, NODEV, 0));
	step(&f, in_eval(e + 1, NODEV, 0));
	KT_EQ_INT(f.state, ORCH_ST_FAILED);
	KT_EQ_INT(f.stop, ORCH_STOP_NO_DEVICE);
	KT_CONTAINS(orch_stop_text(f.stop), "GPU");
}

static void
test_no_seeds(void)
{
	orch_fsm f = fsm_new(3, 15);

	step(&f, (orch_input){.kind = ORCH_IN_START});
	step(&f, in_n(ORCH_IN_SEEDS, find(ORCH_ACT_AGENT, 0)->job, 0));
	KT_EQ_INT(f.state, ORCH_ST_FAILED);
	KT_EQ_INT(f.stop, ORCH_STOP_NO_CANDIDATE);
}

static void
test_budgets(void)
{
	orch_fsm f = fsm_to_features();
	uint32_t e;

	/* Rounds. */
	f.p.max_rounds = 1;
	e = fsm_optimize_round(&f);
	step(&f, in_eval(e, OK, 1.9));
	KT_EQ_INT(f.state, ORCH_ST_DONE);
	KT_EQ_INT(f.stop, ORCH_STOP_ROUNDS);
	KT_ASSERT(find_event(KCLAW__EVENT_KIND__TASK_FINISHED)->value > 2.0);

	/* Tokens: the seeds' reply alone spent the budget. */
	f = fsm_to_features();
	f.p.token_budget = 100;
	e = fsm_optimize_round(&f);
	step(&f, in_eval(e, OK, 1.9));
	KT_EQ_INT(f.state, ORCH_ST_DONE);
	KT_EQ_INT(f.stop, ORCH_STOP_TOKENS);

	/* Target speedup: reference 4.0 ms, 1.0 ms is 4x. */
	f = fsm_to_features();
	f.p.target_speedup = 3.5;
	e = fsm_optimize_round(&f);
	step(&f, in_eval(e, OK, 1.0));
	KT_EQ_INT(f.state, ORCH_ST_DONE);
	KT_EQ_INT(f.stop, ORCH_STOP_TARGET);

	/* Deadline: a tick before it changes nothing, one after ends. */
	f = fsm_to_features();
	f.p.deadline_ms = 1000;
	ignored(&f, (orch_input){.kind = ORCH_IN_TICK, .now_ms = 999});
	step(&f, (orch_input){.kind = ORCH_IN_TICK, .now_ms = 1000});
	KT_EQ_INT(f.state, ORCH_ST_DONE);
	KT_EQ_INT(f.stop, ORCH_STOP_DEADLINE);
	f = fsm_new(3, 15);
	f.p.deadline_ms = 1000;
	step(&f, (orch_input){.kind = ORCH_IN_START});
	step(&f, (orch_input){.kind = ORCH_IN_TICK, .now_ms = 5000});
	KT_EQ_INT(f.state, ORCH_ST_FAILED);
}

static void
test_cancel_everywhere(void)
{
	orch_fsm f = fsm_new(3, 15);
	uint32_t j;

	ignored(&f, (orch_input){.kind = ORCH_IN_CANCEL});
	step(&f, (orch_input){.kind = ORCH_IN_START});
	j = find(ORCH_ACT_AGENT, 0)->job;
	step(&f, (orch_input){.kind = ORCH_IN_CANCEL});
	KT_EQ_INT(f.state, ORCH_ST_CANCELLED);
	KT_EQ_INT(f.stop, ORCH_STOP_CANCELLED);
	KT_ASSERT(find(ORCH_ACT_DROP_JOBS, 0) != NULL);
	KT_ASSERT(find_event(KCLAW__EVENT_KIND__TASK_CANCELLED) != NULL);
	/* Final: nothing applies any more, not even the awaited reply. */
	ignored(&f, (orch_input){.kind = ORCH_IN_CANCEL});
	ignored(&f, in_n(ORCH_IN_SEEDS, j, 3));
	ignored(&f, (orch_input){.kind = ORCH_IN_TICK, .now_ms = ~0ull});

	f = fsm_to_features();
	step(&f, (orch_input){.kind = ORCH_IN_CANCEL});
	KT_EQ_INT(f.state, ORCH_ST_CANCELLED);
}

static void
test_job_failed(void)
{
	orch_fsm f = fsm_new(2, 15);
	uint32_t e, j;

	/* A seed's evaluation failing for good: the other seed decides. */
	step(&f, (orch_input){.kind = ORCH_IN_START});
	step(&f, in_n(ORCH_IN_SEEDS, find(ORCH_ACT_AGENT, 0)->job, 2));
	e = find(ORCH_ACT_EVAL, 0)->job;
	step(&f, in_job(ORCH_IN_JOB_FAILED, e));
	KT_EQ_INT(f.state, ORCH_ST_REVIEW_SEEDS);
	step(&f, in_eval(e + 1, OK, 1.0));
	KT_EQ_INT(f.state, ORCH_ST_FEATURES);

	/* An agent failing for good with a correct kernel: DONE. */
	j = issued(ORCH_ACT_AGENT, KCLAW__ROLE__FEATURE);
	ignored(&f, in_job(ORCH_IN_JOB_FAILED, j + 7));
	step(&f, in_job(ORCH_IN_JOB_FAILED, j));
	KT_EQ_INT(f.state, ORCH_ST_DONE);
	KT_EQ_INT(f.stop, ORCH_STOP_JOB_FAILED);

	/* Without one: FAILED. */
	f = fsm_new(2, 15);
	step(&f, (orch_input){.kind = ORCH_IN_START});
	step(&f, in_job(ORCH_IN_JOB_FAILED, find(ORCH_ACT_AGENT, 0)->job));
	KT_EQ_INT(f.state, ORCH_ST_FAILED);
}

static void
test_ignored_inputs(void)
{
	orch_fsm f = fsm_to_features();
	uint32_t j = issued(ORCH_ACT_AGENT, KCLAW__ROLE__FEATURE);

	/* Wrong kind for the state, a stale job, START twice. */
	ignored(&f, in_n(ORCH_IN_PLANNED, j, 0));
	ignored(&f, in_n(ORCH_IN_FEATURES, j - 1, 0));
	ignored(&f, (orch_input){.kind = ORCH_IN_START});
	ignored(&f, in_eval(j, OK, 1.0));
}

static void
test_resume_and_replay_keys(void)
{
	orch_fsm f = fsm_to_features();
	uint32_t j = issued(ORCH_ACT_AGENT, KCLAW__ROLE__FEATURE);
	orch_fsm g;

	orch_fsm_resume(&f, &acts);
	KT_EQ_INT(acts.n, 0);
	step(&f, in_n(ORCH_IN_FEATURES, j, 0));
	g = f;
	orch_fsm_resume(&g, &acts);
	KT_EQ_INT(acts.n, 1);
	KT_EQ_INT(acts.a[0].kind, ORCH_ACT_RETRIEVE);
	KT_EQ_INT(acts.a[0].job, f.await_first);
	KT_EQ_INT(f.role_jobs[KCLAW__ROLE__GENERATOR], 1);
	KT_EQ_INT(f.role_jobs[KCLAW__ROLE__SANDBOX], 3);
	KT_EQ_INT(f.role_jobs[KCLAW__ROLE__FEATURE], 1);
}

static void
test_names(void)
{
	KT_EQ_STR(orch_state_name(ORCH_ST_REVIEW_SEEDS), "REVIEW_SEEDS");
	KT_EQ_STR(orch_state_name(99), "UNKNOWN");
	KT_EQ_INT(orch_role_parse("planner"), KCLAW__ROLE__PLANNER);
	KT_EQ_INT(orch_role_parse("nobody"), KCLAW__ROLE__ROLE_UNSPECIFIED);
	KT_EQ_STR(orch_role_name(KCLAW__ROLE__REPAIRER), "repairer");
}

int
main(void)
{
	KT_RUN(test_optimize_promote_and_keep);
	KT_RUN(test_absolute_threshold);
	KT_RUN(test_repair_chain);
	KT_RUN(test_repair_works_second_time_without_base);
	KT_RUN(test_no_correct_kernel);
	KT_RUN(test_no_device);
	KT_RUN(test_no_seeds);
	KT_RUN(test_budgets);
	KT_RUN(test_cancel_everywhere);
	KT_RUN(test_job_failed);
	KT_RUN(test_ignored_inputs);
	KT_RUN(test_resume_and_replay_keys);
	KT_RUN(test_names);
	return 0;
}
