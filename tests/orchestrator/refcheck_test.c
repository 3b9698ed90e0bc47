/*
 * refcheck_test.c - a task's reference check (docs/orchestrator.md "The
 * reference check"): the real kclawd schedules one reference-only
 * evaluation per task when it starts seeding, as the task's first sandbox
 * job; a scripted sandbox (kc-double, refcheck= in the task's script)
 * answers it. Every output's variation and what the tolerance admits
 * (EvalResult.output_variations) and the degenerate outputs reach the
 * task's record, a REFERENCE_CHECKED event (a warning) and `kclaw status`
 * (and --json); from an older sandbox without those figures the
 * degenerate outputs are named with their variation unknown; a failed check
 * (retried, or not) never fails the task; a check interrupted by a killed
 * kclawd is run once after the restart, and never again once answered.
 */
#include "harness.h"

static pid_t kclawd;
static pid_t workers[8];

static void
start(const char *name, const char *orch_json)
{
	h_setup(name, orch_json);
	kclawd = h_kclawd();
	h_wait_up();
}

static void
stop(int nworkers)
{
	for (int i = 0; i < nworkers; i++)
		h_kill(workers[i], SIGTERM);
	h_kill(kclawd, SIGTERM);
	h_teardown();
}

/* One seed, one round: the script's outcomes, and refcheck= for the
 * reference check. */
static Kclaw__TaskSpec *
spec1(const char *name, const char *script)
{
	static Kclaw__FsmParams p;
	Kclaw__TaskSpec *spec = h_spec(name, script, 1);

	kclaw__fsm_params__init(&p);
	p.seeds = 1;
	spec->params = &p;
	return spec;
}

/* How many of the task's events are of kind k (and, when detail is not
 * NULL, hold it). */
static unsigned
count_events(const char *id, Kclaw__EventKind k, const char *detail)
{
	Kclaw__EventsResponse *ev = h_events(id, 0);
	unsigned n = 0;

	for (size_t i = 0; i < ev->n_events; i++)
		n += ev->events[i]->kind == k &&
		    (detail == NULL || strstr(ev->events[i]->detail, detail));
	kclaw__events_response__free_unpacked(ev, NULL);
	return n;
}

/* A command's stdout (the kclaw CLI against this home). */
static char *
run_cli(const char *args)
{
	char cmd[1024], buf[4096];
	kc_str s = {0};
	FILE *p;
	size_t n;

	snprintf(cmd, sizeof(cmd), "'%s/kclaw' --home '%s' %s",
	    getenv("KCLAW_BIN") ? getenv("KCLAW_BIN") : ".", h_home, args);
	KT_ASSERT((p = popen(cmd, "r")) != NULL);
	while ((n = fread(buf, 1, sizeof(buf) - 1, p)) > 0) {
		buf[n] = '\0';
		kc_str_append(&s, buf);
	}
	pclose(p);
	return kc_str_take(&s);
}

/* Degenerate outputs are named at submit: in the record, the event, the
 * status; the check is the task's first evaluation and changes nothing the
 * state machine decides. */
static void
test_degenerate_named(void)
{
	char id[32], args[128], *out;
	Kclaw__StatusResponse *s;
	Kclaw__EventsResponse *ev;
	const Kclaw__ReferenceCheck *rc;
	const Kclaw__Event *checked = NULL;
	bool first_eval_seen = false;

	start("refcheck", "\"poll_ms\": 300");
	h_doubles(workers, 1, "0");
	KT_OK(h_submit(spec1("degen",
	                   "seeds=ok:2.0;opt=1.0;ref=4.0;"
	                   "refcheck=outputs:y@3e-9/z@0.25"),
	    NULL, id));
	s = h_wait_final(id, 20000);
	/* The machine's course is the one without a check. */
	KT_EQ_STR(s->task->state, "DONE");
	KT_EQ_INT(s->task->round, 1);
	KT_ASSERT(s->task->best_ms == 1.0);
	KT_ASSERT(s->task->speedup == 4.0);
	rc = s->task->reference_check;
	KT_ASSERT(rc != NULL);
	KT_EQ_INT(rc->state, KCLAW__REFERENCE_CHECK_STATE__CHECK_DONE);
	KT_EQ_INT(rc->status, KCLAW__EVAL_STATUS__OK);
	KT_ASSERT(rc->reference_ms == 4.0);
	KT_ASSERT(rc->output_variation == 3e-9);
	KT_EQ_STR(rc->device_name, "double GPU");
	/* Asked without torch.compile; the evaluation's wall time and
	 * metrics kept. */
	KT_ASSERT(rc->torch_compile_ms == 0);
	KT_ASSERT(rc->wall_ms == 12.5);
	KT_EQ_INT(rc->n_metrics, 1);
	KT_EQ_STR(rc->metrics[0]->name, "sandbox.load_ms");
	KT_ASSERT(rc->metrics[0]->value == 3.0);
	/* Every output's figures, as the sandbox sent them. */
	KT_EQ_INT(rc->n_output_variations, 2);
	KT_EQ_STR(rc->output_variations[0]->name, "y");
	KT_ASSERT(rc->output_variations[0]->variation == 3e-9);
	KT_ASSERT(rc->output_variations[0]->admits == 1e-5);
	KT_ASSERT(rc->output_variations[0]->degenerate);
	KT_ASSERT(rc->output_variations[0]->measured);
	KT_EQ_STR(rc->output_variations[1]->name, "z");
	KT_ASSERT(rc->output_variations[1]->variation == 0.25);
	KT_ASSERT(rc->output_variations[1]->admits == 1e-5);
	KT_ASSERT(!rc->output_variations[1]->degenerate);
	KT_ASSERT(rc->output_variations[1]->measured);
	/* The degenerate one, its figures from those. */
	KT_EQ_INT(rc->n_degenerate, 1);
	KT_EQ_STR(rc->degenerate[0]->name, "y");
	KT_ASSERT(rc->degenerate[0]->variation == 3e-9);
	KT_ASSERT(rc->degenerate[0]->admits == 1e-5); /* no tolerance: rtol */
	KT_ASSERT(!rc->degenerate[0]->variation_unknown);
	KT_EQ_INT(rc->n_warnings, 1);
	KT_CONTAINS(rc->warnings[0], "output 'y' changes by only 3e-09");
	kclaw__status_response__free_unpacked(s, NULL);

	/* One REFERENCE_CHECKED, the warning in its detail; the check was
	 * the task's first evaluation. */
	ev = h_events(id, 0);
	for (size_t i = 0; i < ev->n_events; i++) {
		const Kclaw__Event *e = ev->events[i];
		if (e->kind == KCLAW__EVENT_KIND__REFERENCE_CHECKED) {
			KT_ASSERT(checked == NULL);
			checked = e;
		}
		if (e->kind == KCLAW__EVENT_KIND__EVAL_STARTED &&
		    !first_eval_seen) {
			KT_CONTAINS(e->detail, "(reference check)");
			first_eval_seen = true;
		}
		/* Never counted as a candidate's evaluation. */
		if (e->kind == KCLAW__EVENT_KIND__EVAL_FINISHED)
			KT_ASSERT(strstr(e->job_id, "-j0") == NULL);
	}
	KT_ASSERT(checked != NULL && first_eval_seen);
	KT_EQ_STR(checked->detail,
	    "warning: degenerate outputs: y (varies 3e-09 between input sets; "
	    "tolerance admits 1e-05): a constant could pass; tighten the "
	    "tolerance or widen the inputs");
	KT_EQ_INT(checked->eval_status, KCLAW__EVAL_STATUS__OK);
	KT_ASSERT(checked->value == 4.0);
	KT_CONTAINS(checked->job_id, "-j0");
	kclaw__events_response__free_unpacked(ev, NULL);
	KT_EQ_INT(count_events(id, KCLAW__EVENT_KIND__EVAL_FINISHED, NULL), 2);
	KT_EQ_INT(h_check_rounds(id), 1);

	/* Where the user looks: kclaw status, its JSON, the event log. */
	snprintf(args, sizeof(args), "status %s", id);
	out = run_cli(args);
	KT_CONTAINS(out,
	    "  warning    degenerate outputs: y (varies 3e-09 between input "
	    "sets; tolerance admits 1e-05): a constant could pass; tighten "
	    "the tolerance or widen the inputs\n");
	KT_CONTAINS(out,
	    "  check      reference 4.0000 ms; outputs vary by "
	    "3e-09 between input sets\n"
	    "  output     y: varies 3e-09 between input sets; tolerance "
	    "admits 1e-05 (degenerate)\n"
	    "  output     z: varies 0.25 between input sets; tolerance "
	    "admits 1e-05\n");
	free(out);
	snprintf(args, sizeof(args), "status %s --json", id);
	out = run_cli(args);
	KT_CONTAINS(out,
	    "\"reference_check\":{\"state\":\"check_done\","
	    "\"status\":\"ok\"");
	KT_CONTAINS(out,
	    "\"degenerate\":[{\"name\":\"y\",\"variation\":3e-09,"
	    "\"admits\":1e-05,\"variation_unknown\":false}]");
	KT_CONTAINS(out,
	    "\"output_variations\":[{\"name\":\"y\",\"variation\":3e-09,"
	    "\"admits\":1e-05,\"degenerate\":true,\"measured\":true},"
	    "{\"name\":\"z\",\"variation\":0.25,\"admits\":1e-05,"
	    "\"degenerate\":false,\"measured\":true}]");
	free(out);
	snprintf(args, sizeof(args), "watch %s --no-follow", id);
	out = run_cli(args);
	KT_CONTAINS(out, "warning: degenerate outputs: y");
	free(out);
	stop(7);
}

/* A sandbox older than per-output figures names degenerate outputs only:
 * the check says their variation is unknown, and the number in its
 * warning's text (for people) is not read back. */
static void
test_old_sandbox_names_only(void)
{
	char id[32], args[128], *out;
	Kclaw__StatusResponse *s;
	const Kclaw__ReferenceCheck *rc;
	const char *text =
	    "warning: degenerate outputs: y (variation unknown: the sandbox "
	    "reports none per output; tolerance admits 1e-05): a constant "
	    "could pass; tighten the tolerance or widen the inputs";

	start("refcheck-old", "\"poll_ms\": 300");
	h_doubles(workers, 1, "0");
	KT_OK(h_submit(spec1("old",
	                   "seeds=ok:2.0;opt=1.0;ref=4.0;"
	                   "refcheck=old:outputs:y@3e-9/z@0.25"),
	    NULL, id));
	s = h_wait_final(id, 20000);
	KT_EQ_STR(s->task->state, "DONE");
	rc = s->task->reference_check;
	KT_ASSERT(rc != NULL);
	KT_EQ_INT(rc->state, KCLAW__REFERENCE_CHECK_STATE__CHECK_DONE);
	KT_EQ_INT(rc->n_output_variations, 0);
	KT_ASSERT(rc->output_variation == 3e-9);
	KT_EQ_INT(rc->n_degenerate, 1);
	KT_EQ_STR(rc->degenerate[0]->name, "y");
	KT_ASSERT(rc->degenerate[0]->variation_unknown);
	KT_ASSERT(rc->degenerate[0]->variation == 0);
	KT_ASSERT(rc->degenerate[0]->admits == 1e-5); /* the task's */
	KT_EQ_INT(rc->n_warnings, 1);
	KT_CONTAINS(rc->warnings[0], "output 'y' changes by only 3e-09");
	kclaw__status_response__free_unpacked(s, NULL);
	KT_EQ_INT(
	    count_events(id, KCLAW__EVENT_KIND__REFERENCE_CHECKED, text), 1);

	snprintf(args, sizeof(args), "status %s", id);
	out = run_cli(args);
	KT_CONTAINS(out, text + strlen("warning: "));
	KT_ASSERT(strstr(out, "  output     ") == NULL);
	free(out);
	snprintf(args, sizeof(args), "status %s --json", id);
	out = run_cli(args);
	KT_CONTAINS(out,
	    "\"degenerate\":[{\"name\":\"y\",\"variation\":null,"
	    "\"admits\":1e-05,\"variation_unknown\":true}]");
	KT_CONTAINS(out, "\"output_variations\":[]");
	free(out);
	stop(7);
}

/* A check that fails is informational: retried like any evaluation when
 * the sandbox failed, not when the reference did, and the task seeds and
 * optimises as it would have. An orchestrator set to "reference_check": 0
 * schedules none. */
static void
test_failed_check_goes_on(void)
{
	char a[32], b[32], c[32], args[128], *out;
	Kclaw__StatusResponse *s;
	const Kclaw__ReferenceCheck *rc;

	start("refcheck-fail",
	    "\"poll_ms\": 300, \"job_retries\": 1, \"retry_backoff_ms\": 10");
	/* The agents answer after 1 s: the check and its retry are done
	 * before the task can end (a task that ends first marks its check
	 * "not run: the task ended first"). */
	h_doubles_paced(workers, 1, "1000", "0");
	KT_OK(h_submit(
	    spec1("sbxfail", "seeds=ok:2.0;opt=1.0;ref=4.0;refcheck=fail"),
	    NULL, a));
	KT_OK(h_submit(
	    spec1("reffault", "seeds=ok:2.0;opt=1.0;ref=4.0;refcheck=fault"),
	    NULL, b));
	s = h_wait_final(a, 20000);
	KT_EQ_STR(s->task->state, "DONE");
	KT_EQ_INT(s->task->round, 1);
	KT_ASSERT(s->task->best_ms == 1.0);
	rc = s->task->reference_check;
	KT_ASSERT(rc != NULL);
	KT_EQ_INT(rc->state, KCLAW__REFERENCE_CHECK_STATE__CHECK_FAILED);
	KT_EQ_INT(rc->status, KCLAW__EVAL_STATUS__INTERNAL_ERROR);
	KT_CONTAINS(rc->message,
	    "sandbox job failed 2 times: sandbox: "
	    "INTERNAL_ERROR: scripted sandbox failure");
	kclaw__status_response__free_unpacked(s, NULL);
	KT_EQ_INT(count_events(a, KCLAW__EVENT_KIND__JOB_RETRIED, NULL), 1);
	KT_EQ_INT(count_events(a, KCLAW__EVENT_KIND__REFERENCE_CHECKED,
	              "reference check failed (the task goes on): "
	              "INTERNAL_ERROR: sandbox job failed 2 times"),
	    1);
	snprintf(args, sizeof(args), "status %s", a);
	out = run_cli(args);
	KT_CONTAINS(out,
	    "  check      reference check failed (the task goes "
	    "on): INTERNAL_ERROR: sandbox job failed 2 times");
	KT_ASSERT(strstr(out, "degenerate") == NULL);
	free(out);
	snprintf(args, sizeof(args), "status %s --json", a);
	out = run_cli(args);
	KT_CONTAINS(out, "\"state\":\"check_failed\"");
	KT_CONTAINS(out, "\"output_variation\":null");
	free(out);

	s = h_wait_final(b, 20000);
	KT_EQ_STR(s->task->state, "DONE");
	KT_ASSERT(s->task->best_ms == 1.0);
	rc = s->task->reference_check;
	KT_ASSERT(rc != NULL);
	KT_EQ_INT(rc->state, KCLAW__REFERENCE_CHECK_STATE__CHECK_FAILED);
	KT_EQ_INT(rc->status, KCLAW__EVAL_STATUS__RUNTIME_FAULT);
	KT_CONTAINS(rc->message, "the reference faulted");
	kclaw__status_response__free_unpacked(s, NULL);
	KT_EQ_INT(count_events(b, KCLAW__EVENT_KIND__JOB_RETRIED, NULL), 0);
	stop(7);

	start("refcheck-off", "\"poll_ms\": 300, \"reference_check\": 0");
	h_doubles(workers, 1, "0");
	KT_OK(h_submit(spec1("off", "seeds=ok:2.0;opt=1.0;ref=4.0"), NULL, c));
	s = h_wait_final(c, 20000);
	KT_EQ_STR(s->task->state, "DONE");
	KT_ASSERT(s->task->reference_check == NULL);
	kclaw__status_response__free_unpacked(s, NULL);
	KT_EQ_INT(
	    count_events(c, KCLAW__EVENT_KIND__REFERENCE_CHECKED, NULL), 0);
	KT_EQ_INT(count_events(
	              c, KCLAW__EVENT_KIND__EVAL_STARTED, "(reference check)"),
	    0);
	stop(7);
}

/* The check pending while kclawd is killed: the restarted one runs it once;
 * once answered, no restart runs it again. */
static void
test_resumed_once(void)
{
	char id[32];
	Kclaw__StatusResponse *s;
	bool pending = false;

	start("refcheck-kill", "\"poll_ms\": 300");
	/* No sandbox yet: the check waits in the queue. */
	KT_OK(h_submit(
	    spec1("resume", "seeds=ok:2.0;opt=1.0;ref=4.0"), NULL, id));
	for (int i = 0; i < 200 && !pending; i++) {
		s = h_status(id);
		pending = s && s->task->reference_check &&
		    s->task->reference_check->state ==
		        KCLAW__REFERENCE_CHECK_STATE__CHECK_PENDING &&
		    strcmp(s->task->state, "SEEDING") == 0;
		if (s)
			kclaw__status_response__free_unpacked(s, NULL);
		if (!pending)
			kc_sleep_ms(20);
	}
	KT_ASSERT(pending);
	h_kill(kclawd, SIGKILL);
	kclawd = h_kclawd();
	bus_client_close(h_api);
	KT_OK(bus_client_open(&h_api, h_cfg.api_url, 0));
	h_wait_up();
	s = h_status(id);
	KT_ASSERT(s->task->reference_check != NULL);
	KT_EQ_INT(s->task->reference_check->state,
	    KCLAW__REFERENCE_CHECK_STATE__CHECK_PENDING);
	kclaw__status_response__free_unpacked(s, NULL);
	h_doubles(workers, 1, "0");
	s = h_wait_final(id, 20000);
	KT_EQ_STR(s->task->state, "DONE");
	KT_EQ_INT(s->task->reference_check->state,
	    KCLAW__REFERENCE_CHECK_STATE__CHECK_DONE);
	KT_ASSERT(s->task->reference_check->output_variation == 0.5);
	kclaw__status_response__free_unpacked(s, NULL);
	KT_EQ_INT(
	    count_events(id, KCLAW__EVENT_KIND__REFERENCE_CHECKED, NULL), 1);
	KT_EQ_INT(count_events(
	              id, KCLAW__EVENT_KIND__EVAL_STARTED, "(reference check)"),
	    1);

	/* Answered: a restart keeps the record and schedules nothing. */
	h_kill(kclawd, SIGTERM);
	kclawd = h_kclawd();
	bus_client_close(h_api);
	KT_OK(bus_client_open(&h_api, h_cfg.api_url, 0));
	h_wait_up();
	kc_sleep_ms(700); /* the sandbox double asks again within poll_ms */
	s = h_status(id);
	KT_ASSERT(s->task->reference_check != NULL);
	KT_EQ_INT(s->task->reference_check->state,
	    KCLAW__REFERENCE_CHECK_STATE__CHECK_DONE);
	KT_ASSERT(s->task->reference_check->reference_ms == 4.0);
	kclaw__status_response__free_unpacked(s, NULL);
	KT_EQ_INT(count_events(
	              id, KCLAW__EVENT_KIND__EVAL_STARTED, "(reference check)"),
	    1);
	stop(7);
}

int
main(void)
{
	signal(SIGPIPE, SIG_IGN);
	KT_RUN(test_degenerate_named);
	KT_RUN(test_old_sandbox_names_only);
	KT_RUN(test_failed_check_goes_on);
	KT_RUN(test_resumed_once);
	return 0;
}
