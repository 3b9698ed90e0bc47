/*
 * cli_kernelbench.c - `kclaw kernelbench KB_DIR`: optimise a KernelBench
 * checkout's problems through the service and report as the field does
 * (docs/kernelbench.md).
 *
 * The run, in order:
 *   plan      every problem file of the levels asked (KB_DIR/level<N>/ files,
 *             or KB_DIR/KernelBench/level<N>/), filtered by --problems, each
 *             with a task id derived from its source and the run's settings
 *             (rounds, tolerance, precision): the same command gives the same
 *             ids, so a second run resumes the first (the orchestrator takes
 *             a known id as an idempotent resubmission);
 *   service   the deployment of the home, started (`kclaw up --detach`)
 *             unless one answers;
 *   convert   the problems that have neither a task nor a bundle under
 *             OUT/bundles, by one long-lived converter process ($KCLAW_PYTHON
 *             running kb2bundle.py --batch, or --converter's script: JSON
 *             lines, kb2bundle's batch()), so PyTorch is imported once;
 *   submit    each bundle as soon as it exists, with the run's settings;
 *   watch     per level done, failed, running and an ETA (a bar on a
 *             terminal, a line per change otherwise) until every task ended;
 *   report    the per-level report (tools/cli/report.h) on stdout and into
 *             OUT/report.txt and OUT/report.json, the run into OUT/run.json.
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bundle.h"
#include "cli.h"
#include "client.h"
#include "kc_err.h"
#include "kc_util.h"
#include "report.h"

#define KB_MAX_LEVELS 8
#define KB_ID_LEN 16

enum kb_phase {
	KB_PLANNED,   /* nothing done yet */
	KB_FAILED_UP, /* never became a task (conversion or submit failed) */
	KB_SUBMITTED, /* a task of the service */
};

typedef struct {
	char rel[320];       /* "level1/19_ReLU.py" */
	char path[PATH_MAX]; /* the problem file */
	char name[160];      /* the task name, as kb2bundle makes it */
	char bundle[PATH_MAX];
	char id[KB_ID_LEN + 1];
	unsigned level;
	enum kb_phase phase;
	char state[16];  /* the task's last state seen */
	char error[512]; /* why it never became a task */
	bool final;      /* DONE, FAILED or CANCELLED */
	bool ended_here; /* it ended while this run watched */
	bool converted;  /* converted by this run */
} kb_problem;

typedef struct {
	char kb_dir[PATH_MAX];
	char out[PATH_MAX];
	char home[PATH_MAX];
	char converter[PATH_MAX]; /* the batch converter's script */
	const char *glob;         /* --problems */
	unsigned levels[KB_MAX_LEVELS];
	size_t nlevels;
	uint32_t rounds;       /* 0: the bundle's */
	double tolerance;      /* 0: the bundle's */
	const char *precision; /* "strict", "warn", "loose" */
	unsigned agents, gpus, timeout_s;
	bool json, keep, dry_run, started, tty, compare;
	kb_problem *p;
	size_t n;
	FILE *progress;
	uint64_t t0, watch_ms; /* when watching began */
	double convert_s;      /* first conversion to last */
	size_t nconverted, nconvert_failed;
	/* The converter process. */
	pid_t conv_pid;
	FILE *conv_in, *conv_out;
	char conv_torch[64];
	/* What the progress printed last, per level. */
	char last_line[KB_MAX_LEVELS + 1][160];
	size_t drawn; /* lines of the bar on the terminal */
} kb_run;

static volatile sig_atomic_t kb_stop;

static void
kb_on_signal(int sig)
{
	(void)sig;
	kb_stop = 1;
}

static void
kb_usage(FILE *f)
{
	fprintf(f,
	    "usage: kclaw kernelbench KB_DIR [--levels 1,2,3] [--problems "
	    "GLOB] [--rounds N]\n"
	    "                         [--tolerance T] [--precision "
	    "strict|warn|loose]\n"
	    "                         [--out DIR] [--home DIR] [--agents N] "
	    "[--gpus N]\n"
	    "                         [--timeout-s N] [--converter FILE] "
	    "[--dry-run] [--json]\n"
	    "                         [--compare] [--keep]\n\n"
	    "Optimises the problems of a KernelBench checkout (KB_DIR holds "
	    "level1/, level2/,\nlevel3/, or KernelBench/level1/ ...) through "
	    "the service of the home: converts\nthem in one Python process "
	    "($KCLAW_PYTHON, default python3, running kb2bundle's\nbatch "
	    "mode; it needs PyTorch), submits each with a task id made from "
	    "its source and\nthe settings below, shows per level done, "
	    "failed, running and an ETA, and prints\nthe per-level report, "
	    "which it also writes to DIR/report.txt and DIR/report.json.\n"
	    "The same command again (after a kill, or `kclaw up --stop`) "
	    "resumes: the tasks\nit finds are not submitted again, the "
	    "bundles it finds are not converted again.\n\n"
	    "  --levels L,...    the levels (default 1,2,3)\n"
	    "  --problems GLOB   only the problems whose file "
	    "(\"19_ReLU.py\"), path\n"
	    "                    (\"level1/19_ReLU.py\") or task name "
	    "(\"L1_19_ReLU\") matches\n"
	    "  --rounds N        every task's round budget (default: the "
	    "bundle's, 15)\n"
	    "  --tolerance T     atol = rtol = max_rel_norm = T (default: "
	    "the bundle's, 1e-2)\n"
	    "  --precision P     strict: lower precision than the task's "
	    "fails; warn (default):\n"
	    "                    it passes with a warning; loose: it passes\n"
	    "  --out DIR         bundles, report and run.json (default "
	    "./kernelbench-out)\n"
	    "  --agents N, --gpus N   for the `kclaw up` this command starts\n"
	    "  --timeout-s N     stop waiting after N seconds (the tasks go "
	    "on; run again)\n"
	    "  --converter FILE  the batch converter script (default: "
	    "kb2bundle.py under\n"
	    "                    share/kclaw/kernelbench; $KCLAW_KB2BUNDLE)\n"
	    "  --dry-run         print the plan (problems, task ids, what "
	    "would be converted)\n"
	    "  --json            the report as JSON on stdout; progress on "
	    "stderr\n"
	    "  --compare         published figures beside the report "
	    "(kclaw report --compare)\n"
	    "  --keep            leave a service this command started "
	    "running\n\n"
	    "Exit codes: 0 every task ended (failed ones included); 1 nothing "
	    "ran, a task is\nstill running (interrupted, --timeout-s) or the "
	    "converter cannot work (no\nPyTorch); 2 usage; 3 KB_DIR or its "
	    "levels not found; 4 the service did not\nstart.\n");
}

/* ------------------------------------------------------------ the plan */

/* kb2bundle.task_name: the file's stem with every character other than
 * letters, digits, '_', '.', '-' made '_', leading dots dropped, prefixed
 * L<level>_. */
static void
kb_task_name(const char *file, unsigned level, char *out, size_t n)
{
	char stem[160];
	const char *s = file;
	size_t len = strlen(file), k = 0;

	if (len > 3 && strcmp(file + len - 3, ".py") == 0)
		len -= 3;
	while (len > 0 && *s == '.') {
		s++;
		len--;
	}
	for (size_t i = 0; i < len && k + 1 < sizeof(stem); i++) {
		unsigned char c = (unsigned char)s[i];
		stem[k++] = isalnum(c) || c == '_' || c == '.' || c == '-'
		    ? (char)c
		    : '_';
	}
	stem[k] = '\0';
	snprintf(out, n, "L%u_%.120s", level, k ? stem : "problem");
}

/* The problem number ("19" of "19_ReLU.py"), for KernelBench's order. */
static unsigned long
kb_number(const char *file)
{
	return isdigit((unsigned char)file[0]) ? strtoul(file, NULL, 10)
	                                       : ULONG_MAX;
}

static int
kb_cmp_problem(const void *a, const void *b)
{
	const kb_problem *x = a, *y = b;
	const char *fx = strchr(x->rel, '/') + 1, *fy = strchr(y->rel, '/') + 1;
	unsigned long nx = kb_number(fx), ny = kb_number(fy);

	if (x->level != y->level)
		return x->level < y->level ? -1 : 1;
	if (nx != ny)
		return nx < ny ? -1 : 1;
	return strcmp(fx, fy);
}

static bool
kb_selected(
    const kb_run *r, const char *rel, const char *file, const char *name)
{
	return r->glob == NULL || fnmatch(r->glob, file, 0) == 0 ||
	    fnmatch(r->glob, rel, 0) == 0 || fnmatch(r->glob, name, 0) == 0;
}

/* The task id: "kb" and 14 hex digits of the SHA-256 of the problem's
 * name, source and the settings that change what the task does. */
static int
kb_task_id(const kb_run *r, kb_problem *p)
{
	kc_sha256_ctx h;
	char *src, hex[65], settings[160];
	size_t len;
	int rv;

	if ((rv = kc_read_file(p->path, 64 << 20, &src, &len)) != 0)
		return kc_seterr(rv, "cannot read %s", p->path);
	snprintf(settings, sizeof(settings),
	    "rounds=%u tolerance=%.17g precision=%s", r->rounds, r->tolerance,
	    r->precision);
	kc_sha256_init(&h);
	kc_sha256_update(&h, "kclaw-kernelbench/1\n", 20);
	kc_sha256_update(&h, p->name, strlen(p->name) + 1);
	kc_sha256_update(&h, src, len);
	kc_sha256_update(&h, "\n", 1);
	kc_sha256_update(&h, settings, strlen(settings));
	kc_sha256_final_hex(&h, hex);
	free(src);
	snprintf(p->id, sizeof(p->id), "kb%.14s", hex);
	return 0;
}

static int
kb_add(kb_run *r, unsigned level, const char *dir, const char *file)
{
	kb_problem *grown, *p;

	if ((grown = realloc(r->p, (r->n + 1) * sizeof(*grown))) == NULL)
		return KC_ENOMEM;
	r->p = grown;
	p = &r->p[r->n];
	memset(p, 0, sizeof(*p));
	p->level = level;
	snprintf(p->rel, sizeof(p->rel), "level%u/%.300s", level, file);
	snprintf(p->path, sizeof(p->path), "%.3800s/%.255s", dir, file);
	kb_task_name(file, level, p->name, sizeof(p->name));
	if (!kb_selected(r, p->rel, file, p->name))
		return 0;
	snprintf(p->bundle, sizeof(p->bundle), "%.3800s/bundles/%s", r->out,
	    p->name);
	r->n++;
	return kb_task_id(r, p);
}

/* Every problem of the levels asked, in KernelBench's order. */
static int
kb_plan(kb_run *r)
{
	char dir[PATH_MAX + 40];
	bool nested = false;
	int rv = 0;

	snprintf(dir, sizeof(dir), "%s/KernelBench/level%u", r->kb_dir,
	    r->levels[0]);
	nested = cli_is_dir(dir);
	for (size_t l = 0; l < r->nlevels && rv == 0; l++) {
		DIR *d;
		struct dirent *e;
		snprintf(dir, sizeof(dir), "%s%s/level%u", r->kb_dir,
		    nested ? "/KernelBench" : "", r->levels[l]);
		if ((d = opendir(dir)) == NULL)
			return kc_seterr(KC_ENOENT,
			    "%s has no level%u/ (nor KernelBench/level%u/); "
			    "give KB_DIR as a KernelBench checkout",
			    r->kb_dir, r->levels[l], r->levels[l]);
		while (rv == 0 && (e = readdir(d)) != NULL) {
			size_t len = strlen(e->d_name);
			if (e->d_name[0] == '.' || e->d_name[0] == '_' ||
			    len < 4 || strcmp(e->d_name + len - 3, ".py") != 0)
				continue;
			rv = kb_add(r, r->levels[l], dir, e->d_name);
		}
		closedir(d);
	}
	if (rv == 0)
		qsort(r->p, r->n, sizeof(*r->p), kb_cmp_problem);
	return rv;
}

/* A bundle this run (or an earlier one) converted from the same source:
 * task.json there and model.py identical to the problem file. */
static bool
kb_bundle_ready(const kb_problem *p)
{
	char path[PATH_MAX + 16], *a = NULL, *b = NULL;
	size_t la = 0, lb = 0;
	bool same;

	snprintf(path, sizeof(path), "%s/task.json", p->bundle);
	if (access(path, R_OK) != 0)
		return false;
	snprintf(path, sizeof(path), "%s/model.py", p->bundle);
	same = kc_read_file(path, 64 << 20, &a, &la) == 0 &&
	    kc_read_file(p->path, 64 << 20, &b, &lb) == 0 && la == lb &&
	    memcmp(a, b, la) == 0;
	free(a);
	free(b);
	kc_clearerr();
	return same;
}

/* ------------------------------------------------------ the converter */

static int
kb_find_converter(kb_run *r, const char *given)
{
	const char *env = getenv("KCLAW_KB2BUNDLE");
	char cand[PATH_MAX], file[PATH_MAX + 16];

	if (given == NULL && env != NULL && *env)
		given = env;
	if (given != NULL) {
		if (realpath(given, r->converter) == NULL)
			return kc_seterr(KC_ENOENT,
			    "the converter %s does not exist", given);
		return 0;
	}
	if (kc_share_dir("kernelbench", cand, sizeof(cand)) == 0) {
		snprintf(file, sizeof(file), "%s/kb2bundle.py", cand);
		if (realpath(file, r->converter) != NULL)
			return 0;
	}
	kc_clearerr();
	return kc_seterr(KC_ENOENT,
	    "cannot find kb2bundle.py under share/kclaw/kernelbench beside "
	    "this kclaw; give --converter FILE or set KCLAW_KB2BUNDLE");
}

/* Starts the converter and reads its first line: ready, or why not. */
static int
kb_conv_start(kb_run *r)
{
	const char *py = getenv("KCLAW_PYTHON");
	int in[2], out[2], logfd;
	char logpath[PATH_MAX + 16], *line = NULL;
	size_t cap = 0;
	cJSON *o;
	int rv = 0;

	if (py == NULL || *py == '\0')
		py = "python3";
	snprintf(logpath, sizeof(logpath), "%s/convert.log", r->out);
	if ((logfd = open(
	         logpath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) < 0)
		return kc_seterr(
		    KC_EIO, "cannot open %s: %s", logpath, strerror(errno));
	if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) {
		close(logfd);
		return kc_seterr(KC_EIO, "pipe: %s", strerror(errno));
	}
	fflush(NULL);
	if ((r->conv_pid = fork()) < 0) {
		close(logfd);
		return kc_seterr(KC_EIO, "fork: %s", strerror(errno));
	}
	if (r->conv_pid == 0) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		dup2(logfd, 2);
		execlp(py, py, r->converter, "--batch", (char *)NULL);
		fprintf(stderr, "kclaw kernelbench: cannot run %s: %s\n", py,
		    strerror(errno));
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	close(logfd);
	r->conv_in = fdopen(in[1], "w");
	r->conv_out = fdopen(out[0], "r");
	if (r->conv_in == NULL || r->conv_out == NULL)
		return kc_seterr(KC_ENOMEM, "fdopen");
	if (getline(&line, &cap, r->conv_out) <= 0) {
		free(line);
		return kc_seterr(KC_EIO,
		    "the converter (%s %s --batch) exited without a word; see "
		    "%s",
		    py, r->converter, logpath);
	}
	o = cJSON_Parse(line);
	free(line);
	if (!cJSON_IsTrue(cJSON_GetObjectItem(o, "ready"))) {
		cJSON *why = cJSON_GetObjectItem(o, "error");
		rv = kc_seterr(KC_ENODEV,
		    "the converter (%s) cannot convert: %s", r->converter,
		    cJSON_IsString(why) ? why->valuestring
		                        : "it did not say it was ready");
	} else if (cJSON_IsString(cJSON_GetObjectItem(o, "torch"))) {
		snprintf(r->conv_torch, sizeof(r->conv_torch), "%s",
		    cJSON_GetObjectItem(o, "torch")->valuestring);
	}
	cJSON_Delete(o);
	return rv;
}

static void
kb_conv_stop(kb_run *r)
{
	int status;

	if (r->conv_in)
		fclose(r->conv_in);
	if (r->conv_out)
		fclose(r->conv_out);
	r->conv_in = r->conv_out = NULL;
	if (r->conv_pid > 0)
		while (waitpid(r->conv_pid, &status, 0) < 0 && errno == EINTR)
			;
	r->conv_pid = 0;
}

/* One problem through the converter; p->error says why it failed. */
static int
kb_convert(kb_run *r, kb_problem *p)
{
	cJSON *req = cJSON_CreateObject(), *ans = NULL, *ok, *why;
	char *text, *line = NULL;
	size_t cap = 0;
	int rv = 0;

	if (r->conv_in == NULL) {
		snprintf(p->error, sizeof(p->error),
		    "not converted: the converter is gone");
		return KC_EIO;
	}
	cJSON_AddStringToObject(req, "problem", p->path);
	cJSON_AddStringToObject(req, "out", p->bundle);
	text = cJSON_PrintUnformatted(req);
	cJSON_Delete(req);
	if (text == NULL)
		return KC_ENOMEM;
	if (fprintf(r->conv_in, "%s\n", text) < 0 || fflush(r->conv_in) != 0 ||
	    getline(&line, &cap, r->conv_out) <= 0) {
		snprintf(p->error, sizeof(p->error),
		    "not converted: the converter exited (see %s/convert.log)",
		    r->out);
		free(text);
		free(line);
		kb_conv_stop(r);
		return KC_EIO;
	}
	free(text);
	ans = cJSON_Parse(line);
	free(line);
	ok = cJSON_GetObjectItem(ans, "ok");
	if (!cJSON_IsTrue(ok)) {
		why = cJSON_GetObjectItem(ans, "error");
		snprintf(p->error, sizeof(p->error), "not converted: %s",
		    cJSON_IsString(why) ? why->valuestring
		                        : "the converter's answer is not JSON");
		rv = KC_EINVAL;
	}
	cJSON_Delete(ans);
	return rv;
}

/* ----------------------------------------------------------- service */

/* Opens c on the home's service, starting one when none answers. */
static int
kb_start(kb_run *r, const kc_config *cfg, orch_client *c)
{
	int rv = cli_service_open(r->home, cfg, c, r->agents, r->gpus,
	    "kclaw kernelbench", r->progress, &r->started);

	if (rv == 0 && r->started)
		fprintf(r->progress,
		    "kclaw kernelbench: service started in %s\n", r->home);
	return rv;
}

static void
kb_shutdown(kb_run *r)
{
	if (r->started && !r->keep)
		cli_service_stop(r->home, "kclaw kernelbench", r->progress);
}

static bool
kb_final_state(const char *s)
{
	return strcmp(s, "DONE") == 0 || strcmp(s, "FAILED") == 0 ||
	    strcmp(s, "CANCELLED") == 0;
}

static kb_problem *
kb_by_id(kb_run *r, const char *id)
{
	for (size_t i = 0; i < r->n; i++)
		if (strcmp(r->p[i].id, id) == 0)
			return &r->p[i];
	return NULL;
}

/* Every task of the service that is one of ours: its state (and that it
 * exists, so it is neither converted nor submitted again). */
static int
kb_refresh(kb_run *r, orch_client *c)
{
	Kclaw__ListRequest req = KCLAW__LIST_REQUEST__INIT;
	Kclaw__ListResponse *resp;
	int rv;

	if ((rv = orch_client_call(c, "List", &req.base,
	         &kclaw__list_response__descriptor,
	         (ProtobufCMessage **)&resp)) != 0)
		return rv;
	for (size_t i = 0; i < resp->n_tasks; i++) {
		const Kclaw__TaskRecord *t = resp->tasks[i];
		kb_problem *p = kb_by_id(r, t->id);
		if (p == NULL)
			continue;
		p->phase = KB_SUBMITTED;
		snprintf(p->state, sizeof(p->state), "%s", t->state);
		if (!p->final && kb_final_state(t->state)) {
			p->final = true;
			p->ended_here = r->watch_ms != 0;
		}
	}
	kclaw__list_response__free_unpacked(resp, NULL);
	return 0;
}

/* Submits p's bundle under its id with the run's settings. */
static int
kb_submit(kb_run *r, orch_client *c, kb_problem *p)
{
	Kclaw__SubmitRequest req = KCLAW__SUBMIT_REQUEST__INIT;
	Kclaw__SubmitResponse *resp;
	Kclaw__TaskSpec *spec = NULL;
	Kclaw__Budget budget = KCLAW__BUDGET__INIT, *had_budget;
	Kclaw__Tolerance tol = KCLAW__TOLERANCE__INIT, *had_tol;
	char *had_prec;
	int rv;

	if ((rv = kc_bundle_load(p->bundle, &spec)) != 0) {
		snprintf(p->error, sizeof(p->error), "bundle %s: %s", p->bundle,
		    kc_lasterr());
		return rv;
	}
	had_budget = spec->budget;
	had_tol = spec->tolerance;
	had_prec = spec->precision;
	if (r->rounds) {
		if (spec->budget == NULL)
			spec->budget = &budget;
		spec->budget->rounds = r->rounds;
	}
	if (r->tolerance > 0) {
		tol.atol = tol.rtol = tol.max_rel_norm = r->tolerance;
		spec->tolerance = &tol;
	}
	spec->precision = (char *)r->precision;
	req.spec = spec;
	req.task_id = p->id;
	rv = orch_client_call(c, "Submit", &req.base,
	    &kclaw__submit_response__descriptor, (ProtobufCMessage **)&resp);
	if (rv == 0) {
		p->phase = KB_SUBMITTED;
		snprintf(p->state, sizeof(p->state), "SUBMITTED");
		kclaw__submit_response__free_unpacked(resp, NULL);
	} else {
		snprintf(p->error, sizeof(p->error), "not submitted: %s",
		    kc_lasterr());
	}
	if (spec->budget == &budget)
		spec->budget = had_budget;
	spec->tolerance = had_tol;
	spec->precision = had_prec;
	kclaw__task_spec__free_unpacked(spec, NULL);
	return rv;
}

/* ----------------------------------------------------------- progress */

typedef struct {
	size_t total, done, failed, running, waiting, ended_here;
} kb_count;

static void
kb_count_level(const kb_run *r, unsigned level, kb_count *k)
{
	memset(k, 0, sizeof(*k));
	for (size_t i = 0; i < r->n; i++) {
		const kb_problem *p = &r->p[i];
		if (level && p->level != level)
			continue;
		k->total++;
		if (p->phase == KB_FAILED_UP)
			k->failed++;
		else if (p->phase == KB_PLANNED)
			k->waiting++;
		else if (!p->final)
			k->running++;
		else if (strcmp(p->state, "DONE") == 0)
			k->done++;
		else
			k->failed++;
		k->ended_here += p->ended_here;
	}
}

/* The ETA of what is left of a set at the rate tasks ended in this run
 * (every level shares the service, so the rate is the run's): "-" before
 * the first task ended here. */
static void
kb_eta(const kb_run *r, const kb_count *k, const kb_count *all, char *buf,
    size_t n)
{
	size_t left = k->total - k->done - k->failed;
	double elapsed, s;

	if (left == 0) {
		snprintf(buf, n, "0s");
		return;
	}
	if (all->ended_here == 0 || r->watch_ms == 0) {
		snprintf(buf, n, "-");
		return;
	}
	elapsed = (double)(kc_mono_ms() - r->watch_ms) / 1000;
	s = elapsed / (double)all->ended_here * (double)left;
	if (s >= 3600)
		snprintf(
		    buf, n, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
	else if (s >= 60)
		snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)s % 60);
	else
		snprintf(buf, n, "%ds", (int)s + 1);
}

static void
kb_level_line(const kb_run *r, size_t l, char *buf, size_t n, bool bar)
{
	kb_count k, all;
	char eta[32], b[24];
	const char *label = "all";
	char lv[16];

	kb_count_level(r, l < r->nlevels ? r->levels[l] : 0, &k);
	kb_count_level(r, 0, &all);
	if (l < r->nlevels) {
		snprintf(lv, sizeof(lv), "L%u", r->levels[l]);
		label = lv;
	}
	kb_eta(r, &k, &all, eta, sizeof(eta));
	if (bar) {
		size_t w = 20,
		       fill = k.total ? (k.done + k.failed) * w / k.total : w;
		for (size_t i = 0; i < w; i++)
			b[i] = i < fill ? '#' : '.';
		b[w] = '\0';
		snprintf(buf, n,
		    "%-4s [%s] %3zu/%-3zu done %zu failed %zu running %zu eta "
		    "%s",
		    label, b, k.done + k.failed, k.total, k.done, k.failed,
		    k.running, eta);
	} else {
		snprintf(buf, n,
		    "kernelbench: %s %zu/%zu ended: done %zu, failed %zu, "
		    "running %zu, eta %s",
		    label, k.done + k.failed, k.total, k.done, k.failed,
		    k.running, eta);
	}
}

/* The progress: on a terminal a bar per level redrawn in place; else a
 * line per level whose counts changed (the ETA alone changes nothing). */
static void
kb_progress(kb_run *r, bool force)
{
	char line[160];
	size_t nl = r->nlevels + (r->nlevels > 1);

	if (r->tty) {
		if (r->drawn)
			fprintf(r->progress, "\033[%zuA", r->drawn);
		for (size_t l = 0; l < nl; l++) {
			kb_level_line(r, l, line, sizeof(line), true);
			fprintf(r->progress, "\r\033[K%s\n", line);
		}
		r->drawn = nl;
		fflush(r->progress);
		return;
	}
	for (size_t l = 0; l < nl; l++) {
		char key[160];
		kb_level_line(r, l, line, sizeof(line), false);
		/* Changes are the counts: the line without its ETA. */
		snprintf(key, sizeof(key), "%s", line);
		if (strstr(key, ", eta ") != NULL)
			*strstr(key, ", eta ") = '\0';
		if (!force && strcmp(key, r->last_line[l]) == 0)
			continue;
		snprintf(r->last_line[l], sizeof(r->last_line[l]), "%s", key);
		fprintf(r->progress, "%s\n", line);
	}
	fflush(r->progress);
}

/* ------------------------------------------------------------- the run */

static size_t
kb_unfinished(const kb_run *r)
{
	size_t n = 0;

	for (size_t i = 0; i < r->n; i++)
		n += r->p[i].phase == KB_SUBMITTED && !r->p[i].final;
	return n;
}

static int
kb_timed_out(const kb_run *r)
{
	return r->timeout_s &&
	    kc_mono_ms() - r->t0 > (uint64_t)r->timeout_s * 1000;
}

/* Converts what has neither a task nor a bundle and submits what has a
 * bundle and no task, one problem at a time, so tasks run while the rest
 * converts. */
static int
kb_feed(kb_run *r, orch_client *c)
{
	uint64_t conv_t0 = 0, last = kc_mono_ms();
	int rv = 0;

	for (size_t i = 0; i < r->n && !kb_stop && !kb_timed_out(r); i++) {
		kb_problem *p = &r->p[i];
		if (p->phase != KB_PLANNED)
			continue;
		if (!kb_bundle_ready(p)) {
			if (conv_t0 == 0)
				conv_t0 = kc_mono_ms();
			if (kb_convert(r, p) != 0) {
				p->phase = KB_FAILED_UP;
				r->nconvert_failed++;
				kc_clearerr();
				continue;
			}
			p->converted = true;
			r->nconverted++;
		}
		if ((rv = kb_submit(r, c, p)) != 0) {
			/* The service gone: stop here (the next run resumes);
			 * anything else is this problem's. */
			if (rv == KC_ETIMEDOUT || rv == KC_ECLOSED ||
			    rv == KC_EBUS)
				return kc_seterr(rv, "%s", p->error);
			p->phase = KB_FAILED_UP;
			kc_clearerr();
			rv = 0;
		}
		if (kc_mono_ms() - last >= 1000) {
			if (kb_refresh(r, c) == 0)
				kb_progress(r, false);
			kc_clearerr();
			last = kc_mono_ms();
		}
	}
	kb_conv_stop(r);
	if (conv_t0) {
		r->convert_s = (double)(kc_mono_ms() - conv_t0) / 1000;
		fprintf(r->progress,
		    "kclaw kernelbench: converted %zu problem(s) in %.1f s in "
		    "one process, %zu failed\n",
		    r->nconverted, r->convert_s, r->nconvert_failed);
	}
	return rv;
}

static int
kb_watch(kb_run *r, orch_client *c)
{
	int rv;

	kb_progress(r, true);
	while (kb_unfinished(r) > 0 && !kb_stop) {
		if (kb_timed_out(r))
			return kc_seterr(KC_ETIMEDOUT,
			    "%zu task(s) still running after %u s "
			    "(--timeout-s); they go on: run the same command "
			    "again to resume",
			    kb_unfinished(r), r->timeout_s);
		kc_sleep_ms(r->tty ? 500 : 250);
		if ((rv = kb_refresh(r, c)) != 0)
			return rv;
		kb_progress(r, false);
	}
	if (kb_stop)
		return kc_seterr(KC_ECANCELED,
		    "interrupted; the tasks go on in the service: run the "
		    "same command again to resume");
	return 0;
}

/* OUT/run.json: every problem, its id, state and why it never ran. */
static int
kb_write_run(const kb_run *r)
{
	cJSON *root = cJSON_CreateObject(), *arr;
	char path[PATH_MAX + 16];
	int rv = KC_ENOMEM;

	if (root == NULL ||
	    cJSON_AddStringToObject(root, "kb_dir", r->kb_dir) == NULL ||
	    cJSON_AddStringToObject(root, "precision", r->precision) == NULL ||
	    cJSON_AddNumberToObject(root, "rounds", r->rounds) == NULL ||
	    cJSON_AddNumberToObject(root, "tolerance", r->tolerance) == NULL ||
	    cJSON_AddNumberToObject(root, "converted", (double)r->nconverted) ==
	        NULL ||
	    cJSON_AddNumberToObject(
	        root, "convert_failed", (double)r->nconvert_failed) == NULL ||
	    cJSON_AddNumberToObject(root, "convert_s", r->convert_s) == NULL ||
	    (arr = cJSON_AddArrayToObject(root, "problems")) == NULL)
		goto out;
	for (size_t i = 0; i < r->n; i++) {
		const kb_problem *p = &r->p[i];
		cJSON *o = cJSON_CreateObject();
		if (o == NULL || !cJSON_AddItemToArray(arr, o))
			goto out;
		cJSON_AddStringToObject(o, "problem", p->rel);
		cJSON_AddStringToObject(o, "name", p->name);
		cJSON_AddNumberToObject(o, "level", p->level);
		cJSON_AddStringToObject(o, "task_id", p->id);
		cli_json_enum(o, "state",
		    p->phase == KB_FAILED_UP     ? "NOT_RUN"
		        : p->phase == KB_PLANNED ? "PLANNED"
		                                 : p->state);
		cli_json_str(o, "error", p->error);
	}
	snprintf(path, sizeof(path), "%s/run.json", r->out);
	if ((rv = kc_write_json(path, root)) != 0)
		rv = kc_seterr(rv, "cannot write %s", path);
out:
	cJSON_Delete(root);
	return rv;
}

/* The report on stdout and into OUT/report.txt and OUT/report.json. */
static int
kb_report(kb_run *r, orch_client *c)
{
	char **ids, path[PATH_MAX + 16];
	size_t n = 0;
	cli_report_opts o = {.by_level = true, .compare = r->compare};
	FILE *f;
	int rv = 0;

	if ((ids = calloc(r->n + 1, sizeof(*ids))) == NULL)
		return KC_ENOMEM;
	for (size_t i = 0; i < r->n; i++)
		if (r->p[i].phase == KB_SUBMITTED)
			ids[n++] = r->p[i].id;
	for (size_t i = 0; i < r->n; i++)
		if (r->p[i].phase == KB_FAILED_UP)
			o.not_run++;
	for (int k = 0; k < 2 && rv == 0 && n > 0; k++) {
		snprintf(path, sizeof(path), "%s/report.%s", r->out,
		    k ? "json" : "txt");
		if ((f = fopen(path, "w")) == NULL) {
			rv = kc_seterr(KC_EIO, "cannot write %s: %s", path,
			    strerror(errno));
			break;
		}
		o.json = k == 1;
		rv = cli_report_print_opts(c, ids, n, &o, f);
		if (fclose(f) != 0 && rv == 0)
			rv = kc_seterr(KC_EIO, "cannot write %s", path);
	}
	if (rv == 0 && n > 0) {
		o.json = r->json;
		fprintf(r->progress, "\n");
		rv = cli_report_print_opts(c, ids, n, &o, stdout);
	}
	free(ids);
	return rv;
}

static void
kb_print_plan(const kb_run *r)
{
	size_t convert = 0;

	printf("%-6s %-16s %-9s %s\n", "level", "task id", "bundle", "problem");
	for (size_t i = 0; i < r->n; i++) {
		bool ready = kb_bundle_ready(&r->p[i]);
		convert += !ready;
		printf("L%-5u %-16s %-9s %s\n", r->p[i].level, r->p[i].id,
		    ready ? "converted" : "missing", r->p[i].rel);
	}
	printf("%zu problem(s); %zu to convert unless the service already "
	       "has their tasks; rounds %s, tolerance %s, precision %s\n",
	    r->n, convert, r->rounds ? "set" : "the bundles'",
	    r->tolerance > 0 ? "set" : "the bundles'", r->precision);
}

/* --levels "1,2,3". */
static int
kb_parse_levels(kb_run *r, const char *v)
{
	const char *p = v;
	char *end;

	r->nlevels = 0;
	while (*p) {
		unsigned long l = strtoul(p, &end, 10);
		if (end == p || l < 1 || l > 99 || r->nlevels >= KB_MAX_LEVELS)
			return CLI_USAGE;
		for (size_t i = 0; i < r->nlevels; i++)
			if (r->levels[i] == l)
				return CLI_USAGE;
		r->levels[r->nlevels++] = (unsigned)l;
		if (*end == ',')
			end++;
		else if (*end != '\0')
			return CLI_USAGE;
		p = end;
	}
	return r->nlevels ? CLI_OK : CLI_USAGE;
}

static int
kb_bad(const char *what, const char *v)
{
	fprintf(stderr, "kclaw kernelbench: %s, not '%s'\n\n", what, v);
	kb_usage(stderr);
	return CLI_USAGE;
}

static int
kb_parse(kb_run *r, int argc, char **argv, const char **kb_dir,
    const char **out, const char **converter)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		char *end;
		if (strcmp(a, "--json") == 0) {
			r->json = true;
		} else if (strcmp(a, "--keep") == 0) {
			r->keep = true;
		} else if (strcmp(a, "--dry-run") == 0) {
			r->dry_run = true;
		} else if (strcmp(a, "--compare") == 0) {
			r->compare = true;
		} else if (v == NULL && a[0] == '-') {
			return kb_bad("an option without its value", a);
		} else if (strcmp(a, "--home") == 0) {
			i++;
		} else if (strcmp(a, "--levels") == 0) {
			if (kb_parse_levels(r, v) != CLI_OK)
				return kb_bad("--levels takes distinct levels "
				              "such as 1,2,3",
				    v);
			i++;
		} else if (strcmp(a, "--problems") == 0) {
			r->glob = argv[++i];
		} else if (strcmp(a, "--out") == 0) {
			*out = argv[++i];
		} else if (strcmp(a, "--converter") == 0) {
			*converter = argv[++i];
		} else if (strcmp(a, "--precision") == 0) {
			if (strcmp(v, "strict") != 0 &&
			    strcmp(v, "warn") != 0 && strcmp(v, "loose") != 0)
				return kb_bad(
				    "--precision takes strict, warn or loose",
				    v);
			r->precision = argv[++i];
		} else if (strcmp(a, "--tolerance") == 0) {
			r->tolerance = strtod(v, &end);
			if (*end || !*v || !(r->tolerance > 0) ||
			    r->tolerance >= 1)
				return kb_bad(
				    "--tolerance takes a number in (0, 1)", v);
			i++;
		} else if (strcmp(a, "--rounds") == 0 ||
		    strcmp(a, "--agents") == 0 || strcmp(a, "--gpus") == 0 ||
		    strcmp(a, "--timeout-s") == 0) {
			unsigned long n = strtoul(v, &end, 10);
			if (*end || !*v || n > 1000000)
				return kb_bad("a number", v);
			if (strcmp(a, "--rounds") == 0)
				r->rounds = (uint32_t)n;
			else if (strcmp(a, "--agents") == 0)
				r->agents = (unsigned)n;
			else if (strcmp(a, "--gpus") == 0)
				r->gpus = (unsigned)n;
			else
				r->timeout_s = (unsigned)n;
			i++;
		} else if (a[0] != '-' && *kb_dir == NULL) {
			*kb_dir = a;
		} else {
			return kb_bad("an unknown argument", a);
		}
	}
	if (*kb_dir == NULL) {
		fprintf(stderr,
		    "kclaw kernelbench: give KB_DIR, a KernelBench "
		    "checkout\n\n");
		kb_usage(stderr);
		return CLI_USAGE;
	}
	return CLI_OK;
}

/* KB_DIR, OUT (created) and the home, as absolute paths. */
static int
kb_paths(kb_run *r, const char *kb_dir, const char *out, kc_config *cfg,
    int argc, char **argv)
{
	int rv;

	if (realpath(kb_dir, r->kb_dir) == NULL || !cli_is_dir(r->kb_dir))
		return kc_seterr(KC_ENOENT,
		    "KB_DIR %s is not a folder; give a KernelBench checkout",
		    kb_dir);
	if ((rv = kc_mkdirs(out, 0755)) != 0 || realpath(out, r->out) == NULL)
		return kc_seterr(rv ? rv : KC_EIO,
		    "cannot create the output folder %s", out);
	if ((rv = cli_config(argc, argv, cfg)) != 0)
		return rv;
	if (realpath(cfg->home, r->home) == NULL)
		snprintf(r->home, sizeof(r->home), "%s", cfg->home);
	setenv("KCLAW_HOME", r->home, 1);
	return 0;
}

int
cli_kernelbench(int argc, char **argv)
{
	static kb_run r;
	const char *kb_dir = NULL, *out = "kernelbench-out", *converter = NULL;
	kc_config cfg;
	orch_client c;
	bool open = false;
	int rv, code;

	if (cli_wants_help(argc, argv)) {
		kb_usage(stdout);
		return CLI_OK;
	}
	memset(&r, 0, sizeof(r));
	r.precision = "warn";
	r.levels[0] = 1;
	r.levels[1] = 2;
	r.levels[2] = 3;
	r.nlevels = 3;
	r.progress = stdout;
	r.t0 = kc_mono_ms();
	if ((code = kb_parse(&r, argc, argv, &kb_dir, &out, &converter)) !=
	    CLI_OK)
		return code;
	if (r.json)
		r.progress = cli_stderr_raw();
	r.tty = isatty(fileno(r.progress)) && getenv("TERM") != NULL &&
	    strcmp(getenv("TERM"), "dumb") != 0;
	if ((rv = kb_paths(&r, kb_dir, out, &cfg, argc, argv)) != 0 ||
	    (rv = kb_plan(&r)) != 0) {
		code = cli_fail("kernelbench", rv);
		goto out;
	}
	if (r.dry_run) {
		kb_print_plan(&r);
		code = CLI_OK;
		goto out;
	}
	if (r.n == 0) {
		fprintf(stderr,
		    "kclaw kernelbench: no problem of level(s) %s matches%s%s; "
		    "nothing ran\n",
		    r.nlevels == 3 ? "1-3" : "asked", r.glob ? " " : "",
		    r.glob ? r.glob : "");
		code = CLI_FAIL;
		goto out;
	}
	if ((rv = kb_find_converter(&r, converter)) != 0) {
		code = cli_fail("kernelbench", rv);
		goto out;
	}
	signal(SIGINT, kb_on_signal);
	signal(SIGTERM, kb_on_signal);
	fprintf(r.progress,
	    "kclaw kernelbench: %zu problem(s) from %s; out %s\n", r.n,
	    r.kb_dir, r.out);
	/* The converter first, so that a machine without PyTorch is told
	 * before anything starts; none when every bundle exists. */
	for (size_t i = 0; i < r.n; i++)
		if (!kb_bundle_ready(&r.p[i])) {
			if ((rv = kb_conv_start(&r)) != 0) {
				code = cli_fail("kernelbench", rv);
				if (rv == KC_ENODEV || rv == KC_EIO)
					code = CLI_FAIL;
				goto out;
			}
			fprintf(r.progress,
			    "kclaw kernelbench: converter ready (%s, PyTorch "
			    "%s)\n",
			    r.converter, *r.conv_torch ? r.conv_torch : "?");
			break;
		}
	if ((rv = kc_config_prepare(&cfg)) != 0 ||
	    (rv = kb_start(&r, &cfg, &c)) != 0) {
		code = cli_fail("kernelbench", rv);
		goto out;
	}
	open = true;
	if ((rv = kb_refresh(&r, &c)) == 0) {
		/* The ETA's rate counts the tasks that end from here on. */
		r.watch_ms = kc_mono_ms();
		kb_count k;
		kb_count_level(&r, 0, &k);
		if (k.total - k.waiting > 0)
			fprintf(r.progress,
			    "kclaw kernelbench: resuming: %zu of %zu "
			    "problem(s) are tasks already (%zu ended)\n",
			    k.total - k.waiting, k.total, k.done + k.failed);
		rv = kb_feed(&r, &c);
	}
	if (rv == 0)
		rv = kb_watch(&r, &c);
	code = rv == 0 ? CLI_OK : cli_fail("kernelbench", rv);
	if (rv == 0 || rv == KC_ECANCELED || rv == KC_ETIMEDOUT) {
		int wr;
		kc_clearerr();
		if (kb_refresh(&r, &c) == 0)
			kb_progress(&r, false);
		if ((wr = kb_write_run(&r)) != 0 ||
		    (wr = kb_report(&r, &c)) != 0)
			code = cli_fail("kernelbench", wr);
	}
	if (code == CLI_OK) {
		size_t ran = 0, left = 0;
		for (size_t i = 0; i < r.n; i++) {
			ran += r.p[i].phase == KB_SUBMITTED;
			left += r.p[i].phase == KB_PLANNED;
		}
		if (left > 0) {
			fprintf(stderr,
			    "kclaw kernelbench: %zu problem(s) not submitted "
			    "yet "
			    "(--timeout-s); run the same command again to "
			    "resume\n",
			    left);
			code = CLI_FAIL;
		}
		if (ran == 0) {
			fprintf(stderr,
			    "kclaw kernelbench: nothing ran: no problem became "
			    "a task (%s/run.json says why)\n",
			    r.out);
			code = CLI_FAIL;
		}
	}
out:
	if (r.conv_pid)
		kb_conv_stop(&r);
	if (open) {
		orch_client_close(&c);
		kb_shutdown(&r);
	}
	free(r.p);
	r.p = NULL;
	return code;
}
