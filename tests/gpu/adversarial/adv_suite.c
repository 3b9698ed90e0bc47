/*
 * adv_suite.c - the adversarial-kernel suite: candidates that try to cheat
 * the Reviewer, each with the outcome the sandbox must give it
 * (tests/gpu/adversarial/README.md lists the tricks and what catches them).
 *
 *   sbx_adversarial [--compile-only] [--only NAME] [DIR]
 *
 * DIR (default $KCLAW_SRC/tests/gpu/adversarial) holds tasks/<task>/ (task
 * bundles) and cases/<case>/ with kernel.cu, plan.json and `expect`:
 *
 *   task vec                      the task bundle the case runs against
 *   status WRONG_RESULT [...]     the statuses it may get on a GPU
 *   text poison                   in the message, fault name or mismatch note
 *   speedup_max 2                 when OK: not faster than 2x the reference
 *   compile PLAN_ERROR            status with --compile-only (default OK)
 *   timeout_ms 8000               the evaluation's deadline (default 60000)
 *   why ... / catch ...           for people
 *
 * On a GPU one kclaw-sandbox serves every case, and after each the task's
 * own reference must still evaluate OK (the sandbox keeps serving). With
 * --compile-only (CI, no GPU) every case is compiled for sm_90 and its plan
 * checked, which pins the compile and plan layers' answers. A JSON line per
 * case goes to $KCLAW_ADV_LOG when set.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bundle.h"
#include "kc_err.h"
#include "kc_test.h"
#include "kc_util.h"
#include "pbjson.h"
#include "sandbox.h"
#include "sandbox_client.h"

#define ADV_MAX_CASES 256
#define ADV_MAX_TASKS 16
#define ADV_MAX_STATUS 4
#define ADV_ITERATIONS 20

typedef struct {
	char name[128];
	Kclaw__TaskSpec *spec;
	char *ref_src, *ref_plan;
} adv_task;

typedef struct {
	char name[128];
	char task[128];
	Kclaw__EvalStatus want[ADV_MAX_STATUS];
	int nwant;
	Kclaw__EvalStatus want_compile;
	char text[256];
	double speedup_max;
	unsigned timeout_ms;
	char *src, *plan;
} adv_case;

static const char *dir;
static adv_task tasks[ADV_MAX_TASKS];
static int ntasks;
static sbx_session *sess;
static FILE *adv_log;
static int compile_only;

static char *
slurp(const char *d, const char *name)
{
	char path[1024], *data = NULL;
	size_t len;

	snprintf(path, sizeof(path), "%s/%s", d, name);
	KT_OK(kc_read_file(path, 1 << 20, &data, &len));
	return data;
}

static int
status_parse(const char *s, Kclaw__EvalStatus *out)
{
	for (int v = 0; v <= KCLAW__EVAL_STATUS__CANCELLED; v++)
		if (strcmp(sbx_status_name((Kclaw__EvalStatus)v), s) == 0) {
			*out = (Kclaw__EvalStatus)v;
			return 0;
		}
	return -1;
}

static adv_task *
task_get(const char *name)
{
	char d[1024];
	adv_task *t;

	for (int i = 0; i < ntasks; i++)
		if (strcmp(tasks[i].name, name) == 0)
			return &tasks[i];
	KT_ASSERT(ntasks < ADV_MAX_TASKS);
	t = &tasks[ntasks++];
	snprintf(t->name, sizeof(t->name), "%s", name);
	snprintf(d, sizeof(d), "%s/tasks/%s", dir, name);
	if (kc_bundle_load(d, &t->spec) != 0)
		KT_FAIL("task %s: %s", d, kc_lasterr());
	t->ref_src = slurp(d, "reference.cu");
	t->ref_plan = slurp(d, "reference.plan.json");
	return t;
}

/* Reads cases/<name>/expect; a line it does not know fails the suite, so a
 * typo cannot turn an expectation off. */
static void
case_load(adv_case *c, const char *name)
{
	char d[1024], *text, *line, *save = NULL;

	memset(c, 0, sizeof(*c));
	snprintf(c->name, sizeof(c->name), "%s", name);
	c->want_compile = KCLAW__EVAL_STATUS__OK;
	snprintf(d, sizeof(d), "%s/cases/%s", dir, name);
	c->src = slurp(d, "kernel.cu");
	c->plan = slurp(d, "plan.json");
	text = slurp(d, "expect");
	for (line = strtok_r(text, "\n", &save); line != NULL;
	     line = strtok_r(NULL, "\n", &save)) {
		char *arg = strchr(line, ' '), *tok, *s2 = NULL;
		if (line[0] == '\0' || line[0] == '#')
			continue;
		if (arg == NULL)
			KT_FAIL("%s/expect: '%s' has no value", name, line);
		*arg++ = '\0';
		if (strcmp(line, "task") == 0) {
			snprintf(c->task, sizeof(c->task), "%s", arg);
		} else if (strcmp(line, "status") == 0) {
			for (tok = strtok_r(arg, " ", &s2); tok != NULL;
			     tok = strtok_r(NULL, " ", &s2)) {
				KT_ASSERT(c->nwant < ADV_MAX_STATUS);
				if (status_parse(tok, &c->want[c->nwant++]) !=
				    0)
					KT_FAIL("%s/expect: no status '%s'",
					    name, tok);
			}
		} else if (strcmp(line, "compile") == 0) {
			if (status_parse(arg, &c->want_compile) != 0)
				KT_FAIL("%s/expect: no status '%s'", name, arg);
		} else if (strcmp(line, "text") == 0) {
			snprintf(c->text, sizeof(c->text), "%s", arg);
		} else if (strcmp(line, "speedup_max") == 0) {
			c->speedup_max = atof(arg);
		} else if (strcmp(line, "timeout_ms") == 0) {
			c->timeout_ms = (unsigned)atoi(arg);
		} else if (strcmp(line, "why") != 0 &&
		    strcmp(line, "catch") != 0) {
			KT_FAIL("%s/expect: unknown key '%s'", name, line);
		}
	}
	free(text);
	if (c->task[0] == '\0' || c->nwant == 0)
		KT_FAIL("%s/expect needs 'task' and 'status'", name);
}

static Kclaw__EvalResult *
eval(const char *src, const char *plan, Kclaw__TaskSpec *task,
    unsigned timeout_ms)
{
	Kclaw__EvalRequest req = KCLAW__EVAL_REQUEST__INIT;
	Kclaw__Candidate c = KCLAW__CANDIDATE__INIT;
	Kclaw__EvalOptions o = KCLAW__EVAL_OPTIONS__INIT;
	Kclaw__EvalResult *r = NULL;

	c.source = (char *)src;
	c.plan_json = (char *)plan;
	o.timeout_ms = timeout_ms ? timeout_ms : 60000;
	/* KCLAW_ADV_ADAPTIVE=1: the sandbox's default (adaptive) timing, which
	 * times plans under 10 us back to back: the same cases through that
	 * path. */
	o.iterations = getenv("KCLAW_ADV_ADAPTIVE") != NULL &&
	        strcmp(getenv("KCLAW_ADV_ADAPTIVE"), "1") == 0
	    ? 0
	    : ADV_ITERATIONS;
	o.compile_only = compile_only;
	if (compile_only)
		o.arch = "sm_90";
	req.task = task;
	req.candidate = &c;
	req.options = &o;
	KT_OK(sbx_session_eval(sess, &req, 180000, &r));
	free(req.job_id);
	return r;
}

static int
has_text(const Kclaw__EvalResult *r, const char *want)
{
	if (want[0] == '\0' || (r->message && strstr(r->message, want)) ||
	    (r->fault_name && strstr(r->fault_name, want)) ||
	    (r->mismatch && r->mismatch->note &&
	        strstr(r->mismatch->note, want)))
		return 1;
	/* A warning the reviewer attached (lower precision, nondeterminism). */
	for (size_t i = 0; i < r->n_warnings; i++)
		if (strstr(r->warnings[i], want) != NULL)
			return 1;
	return 0;
}

/* Runs one case; returns 1 when it got what it must. */
static int
case_run(const adv_case *c)
{
	adv_task *t = task_get(c->task);
	uint64_t t0 = kc_mono_ns();
	Kclaw__EvalResult *r, *after;
	char why[256] = "";
	int ok = 0;
	char *json;

	r = eval(c->src, c->plan, t->spec, c->timeout_ms);
	if (compile_only) {
		ok = r->status == c->want_compile;
		if (!ok)
			snprintf(why, sizeof(why), "want %s",
			    sbx_status_name(c->want_compile));
	} else {
		for (int i = 0; i < c->nwant; i++)
			ok = ok || r->status == c->want[i];
		if (!ok)
			snprintf(why, sizeof(why), "want %s%s",
			    sbx_status_name(c->want[0]),
			    c->nwant > 1 ? " or another listed" : "");
		else if (r->status == c->want[0] && !has_text(r, c->text)) {
			ok = 0;
			snprintf(
			    why, sizeof(why), "no '%s' in the result", c->text);
		} else if (r->status == KCLAW__EVAL_STATUS__OK &&
		    c->speedup_max > 0 &&
		    !(r->speedup > 0 && r->speedup <= c->speedup_max)) {
			ok = 0;
			snprintf(why, sizeof(why),
			    "speedup %.2f over the limit %.2f: the timed runs "
			    "skipped work",
			    r->speedup, c->speedup_max);
		}
	}
	fprintf(stderr, "%-28s %-14s %6.2fx %6.0f ms  %s%s%s\n", c->name,
	    sbx_status_name(r->status), r->speedup,
	    (double)(kc_mono_ns() - t0) / 1e6,
	    ok ? "" : "<-- UNEXPECTED: ", why, ok ? "" : "");
	if (!ok || getenv("KCLAW_ADV_VERBOSE"))
		fprintf(stderr, "    %s%s%s\n",
		    r->fault_name ? r->fault_name : "",
		    r->fault_name && *r->fault_name ? " " : "",
		    r->message ? r->message : "");
	if (adv_log != NULL && (json = kc_pb_to_json_text(&r->base)) != NULL) {
		fprintf(adv_log,
		    "{\"case\":\"%s\",\"pass\":%s,\"compile_only\":%s,"
		    "\"result\":%s}\n",
		    c->name, ok ? "true" : "false",
		    compile_only ? "true" : "false", json);
		fflush(adv_log);
		free(json);
	}
	kclaw__eval_result__free_unpacked(r, NULL);
	if (compile_only)
		return ok;

	/* The sandbox keeps serving: the task's reference is still OK. */
	after = eval(t->ref_src, t->ref_plan, t->spec, 0);
	if (after->status != KCLAW__EVAL_STATUS__OK) {
		fprintf(stderr, "    after %s: %s %s   <-- NOT SERVING\n",
		    c->name, sbx_status_name(after->status), after->message);
		ok = 0;
	}
	kclaw__eval_result__free_unpacked(after, NULL);
	return ok;
}

static int
name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int
main(int argc, char **argv)
{
	sbx_client_opts co = {0};
	const char *only = NULL, *log = getenv("KCLAW_ADV_LOG");
	char cases_dir[1024], *names[ADV_MAX_CASES], srcdir[1024];
	int n = 0, failures = 0, ran = 0;
	struct dirent *de;
	DIR *dp;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--compile-only") == 0)
			compile_only = 1;
		else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc)
			only = argv[++i];
		else if (argv[i][0] != '-')
			dir = argv[i];
		else
			KT_FAIL("usage: %s [--compile-only] [--only CASE] "
			        "[DIR]",
			    argv[0]);
	}
	if (dir == NULL) {
		const char *src = getenv("KCLAW_SRC");
		if (src == NULL)
			KT_FAIL("name the suite's folder or set KCLAW_SRC");
		snprintf(
		    srcdir, sizeof(srcdir), "%s/tests/gpu/adversarial", src);
		dir = srcdir;
	}
	snprintf(cases_dir, sizeof(cases_dir), "%s/cases", dir);
	if ((dp = opendir(cases_dir)) == NULL)
		KT_FAIL("cannot open %s", cases_dir);
	while ((de = readdir(dp)) != NULL && n < ADV_MAX_CASES)
		if (de->d_name[0] != '.')
			names[n++] = strdup(de->d_name);
	closedir(dp);
	qsort(names, (size_t)n, sizeof(*names), name_cmp);
	if (log != NULL)
		adv_log = fopen(log, "a");
	if (compile_only)
		co.arch = "sm_90";
	KT_OK(sbx_session_open(&sess, &co));
	for (int i = 0; i < n; i++) {
		adv_case c;
		if (only != NULL && strcmp(only, names[i]) != 0)
			continue;
		case_load(&c, names[i]);
		ran++;
		if (!case_run(&c))
			failures++;
		free(c.src);
		free(c.plan);
	}
	sbx_session_close(sess);
	if (adv_log != NULL)
		fclose(adv_log);
	for (int i = 0; i < ntasks; i++) {
		kclaw__task_spec__free_unpacked(tasks[i].spec, NULL);
		free(tasks[i].ref_src);
		free(tasks[i].ref_plan);
	}
	for (int i = 0; i < n; i++)
		free(names[i]);
	if (ran == 0)
		KT_FAIL("no case ran (%s)", only ? only : cases_dir);
	if (failures > 0)
		KT_FAIL("%d of %d adversarial case(s) did not get what they "
		        "must",
		    failures, ran);
	fprintf(stderr, "all %d adversarial cases as expected%s\n", ran,
	    compile_only ? " (compile-only)" : "");
	return 0;
}
