/*
 * cli_main.c - `kclaw main`: the README's main job (docs/mainjob.md).
 *
 * On a host with an NVIDIA GPU it starts a deployment (`kclaw up
 * --detach`) under a fresh home, submits the shipped examples, streams one
 * line per notable event until every task has ended, prints the report
 * (tools/cli/report.h) and stops the deployment. The agents answer from the
 * recordings under examples/recordings unless an LLM is configured
 * (KCLAW_LLM_MODEL, or "llm" in kclaw.json), or KCLAW_LLM_REPLAY names
 * other recordings. --live insists on the configured model; --record DIR
 * writes its exchanges and the task list (DIR/main.json), so that
 * `kclaw main --recordings DIR` replays the run.
 *
 * Without a GPU it says so in one sentence and exits 1; with --no-gpu-ok
 * it still starts the deployment, prints its health, stops it and exits 0,
 * so `tools/dev.sh main` shows a working service on any machine.
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bundle.h"
#include "cli.h"
#include "client.h"
#include "kc_err.h"
#include "kc_util.h"
#include "llm.h"
#include "report.h"

#define MAIN_MAX_TASKS 64

typedef struct {
	char bundle[128]; /* folder name under the examples */
	uint32_t rounds;  /* round budget; 0: the bundle's */
	char id[64];      /* the task's id once submitted */
	char name[128];   /* the task's name */
	char state[16];   /* the last state seen */
	bool final;
	Kclaw__TaskSpec *spec;   /* loaded before the service starts */
	Kclaw__Budget budget;    /* when the bundle sets none */
	Kclaw__FsmParams params; /* likewise */
} main_task;

typedef struct {
	char examples[PATH_MAX];
	char recordings[PATH_MAX];
	double explore_share; /* the manifest's; -1: none */
	char home[PATH_MAX];
	char llm[PATH_MAX + 64]; /* who answers: "recordings DIR", "model M" */
	char record[PATH_MAX];   /* --record: the recording folder */
	char model[128];         /* the model, when one answers */
	const char *manifest;    /* --manifest: the tasks and rounds */
	bool live;               /* --live: the configured model, or nothing */
	main_task tasks[MAIN_MAX_TASKS];
	size_t ntasks;
	uint32_t rounds; /* --rounds */
	unsigned agents; /* --agents; 0: kclaw up's default */
	unsigned timeout_s;
	bool json, keep, skip_gpu_check, no_gpu_ok, started;
	uint64_t t0;
	FILE *progress; /* stdout, or stderr with --json */
} main_job;

static volatile sig_atomic_t main_stop;

static void
main_on_signal(int sig)
{
	(void)sig;
	main_stop = 1;
}

static void
main_usage(FILE *f)
{
	fprintf(f,
	    "usage: kclaw main [TASK ...] [--home DIR] [--examples DIR] "
	    "[--recordings DIR]\n"
	    "                  [--live] [--record DIR] [--manifest FILE]\n"
	    "                  [--rounds N] [--agents N] [--timeout-s N] "
	    "[--json] [--keep]\n"
	    "                  [--no-gpu-ok] [--skip-gpu-check]\n\n"
	    "The main job: starts the service under a fresh home (or DIR), "
	    "submits the\nshipped examples (or the TASKs named), prints one "
	    "line per notable event\nuntil every task has ended, prints the "
	    "report and stops the service.\n\n"
	    "The agents answer from the recordings (DIR/recordings of the "
	    "examples, with\nthe round budget main.json gives each task) "
	    "unless an LLM is configured:\nKCLAW_LLM_MODEL (with "
	    "KCLAW_LLM_BASE_URL, KCLAW_LLM_API_KEY) or \"llm\" in\n"
	    "kclaw.json; the bundles' own budgets apply then. KCLAW_LLM_REPLAY "
	    "names other\nrecordings.\n\n"
	    "  --examples DIR   the bundles (default: the examples/ beside "
	    "the binaries)\n"
	    "  --live           the configured model answers, never "
	    "recordings (an error\n                   when no model is "
	    "configured)\n"
	    "  --record DIR     write the model's exchanges and the tasks "
	    "(main.json) to\n                   the new folder DIR; `kclaw "
	    "main --recordings DIR` replays them\n"
	    "  --manifest FILE  the tasks and round budgets of a main.json "
	    "(a recording's)\n"
	    "  --rounds N       every task's round budget\n"
	    "  --agents N       agent processes per role\n"
	    "  --timeout-s N    give up waiting after N seconds (default: "
	    "none)\n"
	    "  --json           the report as JSON on stdout; progress on "
	    "stderr\n"
	    "  --keep           leave the service running\n"
	    "  --no-gpu-ok      without a GPU: start the service, print its "
	    "health, stop it\n                   and exit 0\n"
	    "  --skip-gpu-check run even when this process sees no GPU (the "
	    "sandboxes\n                   decide; e.g. KCLAW_SANDBOX_BIN "
	    "names another)\n\n"
	    "Exit codes: 0 every task DONE; 1 a task did not end DONE, no GPU "
	    "or a bundle\nthat does not load; 2 usage; 3 an unknown example, "
	    "examples or recordings\nfolder; 4 the service did not start.\n");
}

/* ------------------------------------------------------------ the tasks */

bool
cli_is_dir(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The examples folder: --examples, $KCLAW_EXAMPLES, the installed
 * share/kclaw/examples (kc_share_dir), else beside the binaries (a packed
 * folder: bin/../examples). */
static int
main_find_examples(main_job *m, const char *given)
{
	char exe[PATH_MAX], cand[PATH_MAX + 32], *slash;
	const char *env = getenv("KCLAW_EXAMPLES");
	ssize_t len;

	if (given == NULL && env != NULL && *env)
		given = env;
	if (given != NULL) {
		if (realpath(given, m->examples) == NULL ||
		    !cli_is_dir(m->examples))
			return kc_seterr(KC_ENOENT,
			    "the examples folder %s does not exist", given);
		return 0;
	}
	if (kc_share_dir("examples", cand, sizeof(cand)) == 0 &&
	    realpath(cand, m->examples) != NULL)
		return 0;
	kc_clearerr();
	if ((len = readlink("/proc/self/exe", exe, sizeof(exe) - 1)) > 0) {
		exe[len] = '\0';
		if ((slash = strrchr(exe, '/')) != NULL)
			*slash = '\0';
		const char *up[] = {"/../examples", "/../../examples"};
		for (size_t i = 0; i < 2; i++) {
			snprintf(cand, sizeof(cand), "%s%s", exe, up[i]);
			if (cli_is_dir(cand) &&
			    realpath(cand, m->examples) != NULL)
				return 0;
		}
	}
	if (cli_is_dir("examples") && realpath("examples", m->examples))
		return 0;
	return kc_seterr(KC_ENOENT,
	    "cannot find the shipped examples; give --examples DIR or set "
	    "KCLAW_EXAMPLES");
}

static int
main_add_task(main_job *m, const char *bundle, uint32_t rounds)
{
	main_task *t;

	if (m->ntasks >= MAIN_MAX_TASKS)
		return kc_seterr(
		    KC_ENOSPC, "more than %d tasks", MAIN_MAX_TASKS);
	t = &m->tasks[m->ntasks++];
	memset(t, 0, sizeof(*t));
	snprintf(t->bundle, sizeof(t->bundle), "%s", bundle);
	t->rounds = rounds;
	return 0;
}

/* The task list of the recordings' main.json: bundles and the round
 * budget their replies cover. */
static int
main_read_manifest(main_job *m, const char *path, bool use_rounds)
{
	char *text;
	size_t len;
	cJSON *root, *tasks, *t;
	int rv;

	if ((rv = kc_read_file(path, 1 << 20, &text, &len)) != 0)
		return rv;
	root = cJSON_Parse(text);
	free(text);
	tasks = root ? cJSON_GetObjectItem(root, "tasks") : NULL;
	if (root && use_rounds &&
	    cJSON_IsNumber(cJSON_GetObjectItem(root, "explore_share"))) {
		double v =
		    cJSON_GetObjectItem(root, "explore_share")->valuedouble;
		if (!(v >= 0 && v <= 1)) {
			cJSON_Delete(root);
			return kc_seterr(KC_EINVAL,
			    "%s: explore_share is %g; give a share of rounds "
			    "from 0 to 1",
			    path, v);
		}
		m->explore_share = v;
	}
	if (!cJSON_IsArray(tasks)) {
		cJSON_Delete(root);
		return kc_seterr(KC_EINVAL,
		    "%s: expected {\"tasks\": [{\"bundle\", \"rounds\"}, ...]}",
		    path);
	}
	cJSON_ArrayForEach(t, tasks)
	{
		cJSON *b = cJSON_GetObjectItem(t, "bundle");
		cJSON *r = cJSON_GetObjectItem(t, "rounds");
		if (!cJSON_IsString(b) || !*b->valuestring ||
		    strchr(b->valuestring, '/')) {
			rv = kc_seterr(KC_EINVAL,
			    "%s: a task without a \"bundle\" folder name",
			    path);
			break;
		}
		if ((rv = main_add_task(m, b->valuestring,
		         use_rounds && cJSON_IsNumber(r) && r->valuedouble > 0
		             ? (uint32_t)r->valuedouble
		             : 0)) != 0)
			break;
	}
	cJSON_Delete(root);
	return rv;
}

static int
main_cmp_task(const void *a, const void *b)
{
	return strcmp(
	    ((const main_task *)a)->bundle, ((const main_task *)b)->bundle);
}

/* Every folder of the examples with a task.json, by name. */
static int
main_scan_examples(main_job *m)
{
	DIR *d = opendir(m->examples);
	struct dirent *e;
	char path[PATH_MAX + 300];
	int rv = 0;

	if (d == NULL)
		return kc_seterr(KC_ENOENT, "cannot read %s", m->examples);
	while (rv == 0 && (e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s/task.json", m->examples,
		    e->d_name);
		if (access(path, R_OK) == 0)
			rv = main_add_task(m, e->d_name, 0);
	}
	closedir(d);
	qsort(m->tasks, m->ntasks, sizeof(m->tasks[0]), main_cmp_task);
	return rv;
}

/* Keeps only the tasks named on the command line. */
static int
main_select(main_job *m, char **names, size_t n)
{
	size_t k = 0;

	if (n == 0)
		return 0;
	for (size_t j = 0; j < n; j++) {
		bool found = false;
		for (size_t i = 0; i < m->ntasks && !found; i++)
			found = strcmp(m->tasks[i].bundle, names[j]) == 0;
		if (!found)
			return kc_seterr(KC_ENOENT,
			    "no example '%s' in %s (or not in its recordings)",
			    names[j], m->examples);
	}
	for (size_t i = 0; i < m->ntasks; i++)
		for (size_t j = 0; j < n; j++)
			if (strcmp(m->tasks[i].bundle, names[j]) == 0) {
				m->tasks[k++] = m->tasks[i];
				break;
			}
	m->ntasks = k;
	return 0;
}

/*
 * Who answers the agents, and which tasks run: a configured model (the
 * bundles' budgets), other recordings named by KCLAW_LLM_REPLAY, or the
 * shipped recordings (their main.json's tasks and rounds). The agents
 * inherit the environment set here through `kclaw up`.
 */
static int
main_plan(main_job *m, const kc_config *cfg, const char *recordings)
{
	llm_config lc;
	char manifest[PATH_MAX + 32], path[PATH_MAX + 32];
	int rv;

	if (m->live && getenv("KCLAW_LLM_REPLAY") != NULL) {
		/* --live: the agents must not replay what the environment
		 * names. */
		unsetenv("KCLAW_LLM_REPLAY");
	}
	if ((rv = llm_config_load(&lc, cfg)) != 0)
		return rv;
	if (m->live && (!*lc.model || *lc.replay_dir))
		return kc_seterr(KC_EINVAL, "--live needs a model: %s",
		    *lc.model ? "kclaw.json's \"llm\" sets \"replay\"; remove "
		                "it"
		              : "set KCLAW_LLM_MODEL (with KCLAW_LLM_BASE_URL "
		                "and KCLAW_LLM_API_KEY) or \"llm\" in "
		                "kclaw.json (docs/agents.md)");
	if (recordings == NULL && !*lc.replay_dir && *lc.model) {
		snprintf(m->llm, sizeof(m->llm), "model %s at %s", lc.model,
		    lc.base_url);
		snprintf(m->model, sizeof(m->model), "%s", lc.model);
		if (m->manifest != NULL)
			return main_read_manifest(m, m->manifest, true);
		return main_scan_examples(m);
	}
	if (*m->record)
		return kc_seterr(KC_EINVAL,
		    "--record records a model's replies, and the agents answer "
		    "from recordings here (--recordings or KCLAW_LLM_REPLAY); "
		    "configure a model (docs/agents.md) or give --live");
	if (recordings == NULL && *lc.replay_dir)
		recordings = lc.replay_dir;
	if (recordings == NULL) {
		snprintf(path, sizeof(path), "%s/recordings", m->examples);
		recordings = path;
	}
	if (realpath(recordings, m->recordings) == NULL ||
	    !cli_is_dir(m->recordings))
		return kc_seterr(KC_ENOENT,
		    "no recordings at %s and no LLM configured: set "
		    "KCLAW_LLM_MODEL (and KCLAW_LLM_BASE_URL) or give "
		    "--recordings DIR",
		    recordings);
	setenv("KCLAW_LLM_REPLAY", m->recordings, 1);
	snprintf(m->llm, sizeof(m->llm), "recordings %s", m->recordings);
	snprintf(manifest, sizeof(manifest), "%s/main.json", m->recordings);
	if (m->manifest != NULL)
		return main_read_manifest(m, m->manifest, true);
	if (access(manifest, R_OK) == 0)
		return main_read_manifest(m, manifest, true);
	return main_scan_examples(m);
}

/* Where the agents' templates and the expert knowledge are when they were
 * packed beside the examples (tools: tests/mainjob/pack-main.sh). */
static void
main_packed_env(const main_job *m)
{
	char root[PATH_MAX], path[PATH_MAX + 32], *slash;

	snprintf(root, sizeof(root), "%s", m->examples);
	if ((slash = strrchr(root, '/')) == NULL)
		return;
	*slash = '\0';
	snprintf(path, sizeof(path), "%s/agents/prompts", root);
	if (getenv("KCLAW_PROMPTS_DIR") == NULL && cli_is_dir(path))
		setenv("KCLAW_PROMPTS_DIR", path, 1);
	snprintf(path, sizeof(path), "%s/store/knowledge", root);
	if (getenv("KCLAW_KNOWLEDGE") == NULL && cli_is_dir(path))
		setenv("KCLAW_KNOWLEDGE", path, 1);
}

/* ---------------------------------------------------------- the service */

/* Runs this binary with args; its stdout goes to /dev/null. */
int
cli_self(const char *const *args)
{
	char exe[PATH_MAX];
	const char *argv[16];
	ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	size_t n = 0;
	pid_t pid;
	int status;

	if (len <= 0)
		return kc_seterr(KC_EIO, "cannot find this program's path");
	exe[len] = '\0';
	argv[n++] = "kclaw";
	for (; args[n - 1] && n < 15; n++)
		argv[n] = args[n - 1];
	argv[n] = NULL;
	fflush(NULL);
	if ((pid = fork()) < 0)
		return kc_seterr(KC_EIO, "fork: %s", strerror(errno));
	if (pid == 0) {
		int fd = open("/dev/null", O_WRONLY);
		if (fd >= 0) {
			dup2(fd, 1);
			close(fd);
		}
		execv(exe, (char *const *)argv);
		_exit(127);
	}
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

int
cli_health(orch_client *c, Kclaw__HealthResponse **h)
{
	Kclaw__HealthRequest req = KCLAW__HEALTH_REQUEST__INIT;

	return orch_client_call(c, "Health", &req.base,
	    &kclaw__health_response__descriptor, (ProtobufCMessage **)h);
}

static void
main_print_health(const main_job *m, const Kclaw__HealthResponse *h)
{
	fprintf(m->progress,
	    "kclaw main: service up in %s (kclaw %s, uptime %.1f s, store "
	    "%s)\n",
	    m->home, h->version, (double)h->uptime_ms / 1000, h->store_path);
	for (size_t i = 0; i < h->n_processes; i++) {
		const Kclaw__ProcessInfo *p = h->processes[i];
		fprintf(m->progress, "  %-18s pid %-7u %-10s restarts %u\n",
		    p->name, p->pid, p->state, p->restarts);
	}
	fflush(m->progress);
}

/* Starts the deployment, unless one already answers in the home, and
 * opens c on it (the caller closes c after a success). */
int
cli_service_open(const char *home, const kc_config *cfg, orch_client *c,
    unsigned agents, unsigned gpus, const char *who, FILE *progress,
    bool *started)
{
	Kclaw__HealthResponse *h = NULL;
	char na[16], ng[16];
	const char *args[12];
	size_t n = 0;
	int code;

	*started = false;
	if (orch_client_open(c, cfg) == 0) {
		if (cli_health(c, &h) == 0) {
			kclaw__health_response__free_unpacked(h, NULL);
			fprintf(progress,
			    "%s: using the service already running in %s\n",
			    who, home);
			return 0;
		}
		orch_client_close(c);
	}
	kc_clearerr();
	args[n++] = "--home";
	args[n++] = home;
	args[n++] = "up";
	args[n++] = "--detach";
	if (agents) {
		snprintf(na, sizeof(na), "%u", agents);
		args[n++] = "--agents";
		args[n++] = na;
	}
	if (gpus) {
		snprintf(ng, sizeof(ng), "%u", gpus);
		args[n++] = "--gpus";
		args[n++] = ng;
	}
	args[n] = NULL;
	if ((code = cli_self(args)) != 0)
		return kc_seterr(KC_ETIMEDOUT,
		    "`kclaw up` failed (exit %d); see %s/run/up.log", code,
		    home);
	*started = true;
	return orch_client_open(c, cfg);
}

static int
main_start(main_job *m, const kc_config *cfg, orch_client *c)
{
	Kclaw__HealthResponse *h = NULL;
	int rv;

	if ((rv = cli_service_open(m->home, cfg, c, m->agents, 0, "kclaw main",
	         m->progress, &m->started)) != 0)
		return rv;
	if (!m->started) {
		if (*m->record || m->live)
			fprintf(m->progress,
			    "kclaw main: its agents answer as they were "
			    "started; --live and --record reach only a "
			    "service this command starts\n");
		return 0;
	}
	/* The supervisor registers its processes shortly after kclawd
	 * answers; wait for them so the health shows the whole deployment. */
	for (int i = 0; i < 40; i++) {
		if ((rv = cli_health(c, &h)) != 0) {
			orch_client_close(c);
			return rv;
		}
		if (h->n_processes > 1 || i == 39)
			break;
		kclaw__health_response__free_unpacked(h, NULL);
		h = NULL;
		kc_sleep_ms(100);
	}
	main_print_health(m, h);
	kclaw__health_response__free_unpacked(h, NULL);
	return 0;
}

void
cli_service_stop(const char *home, const char *who, FILE *progress)
{
	const char *args[] = {"--home", home, "up", "--stop", NULL};

	if (cli_self(args) == 0)
		fprintf(progress, "%s: service stopped\n", who);
	else
		fprintf(progress,
		    "%s: the service did not stop cleanly; see %s/run/up.log\n",
		    who, home);
}

static void
main_shutdown(main_job *m)
{
	if (m->started && !m->keep)
		cli_service_stop(m->home, "kclaw main", m->progress);
}

/* -------------------------------------------------------- submit, watch */

/* Loads and checks every bundle (before anything starts), with the round
 * budget the recordings cover or --rounds gives. */
static int
main_load(main_job *m)
{
	for (size_t i = 0; i < m->ntasks; i++) {
		main_task *t = &m->tasks[i];
		uint32_t rounds = m->rounds ? m->rounds : t->rounds;
		char dir[PATH_MAX + 160], why[512];
		int rv;
		snprintf(dir, sizeof(dir), "%s/%s", m->examples, t->bundle);
		if ((rv = kc_bundle_load(dir, &t->spec)) != 0) {
			snprintf(why, sizeof(why), "%s", kc_lasterr());
			return kc_seterr(rv, "example %s: %s", t->bundle, why);
		}
		if (rounds) {
			if (t->spec->budget == NULL) {
				kclaw__budget__init(&t->budget);
				t->spec->budget = &t->budget;
			}
			t->spec->budget->rounds = rounds;
		}
		/* The manifest's exploration share: the shipped recordings'
		 * Planner replies were written by hand, not chosen from what
		 * this GPU's retrieval offers, so every round explores and
		 * each recorded choice stands (docs/orchestrator.md
		 * "Screening"); a recording of a live run says nothing and
		 * replays with the share it ran with. */
		if (m->explore_share >= 0) {
			if (t->spec->params == NULL) {
				kclaw__fsm_params__init(&t->params);
				t->spec->params = &t->params;
			}
			t->spec->params->explore_share =
			    m->explore_share > 0 ? m->explore_share : -1;
		}
		snprintf(t->name, sizeof(t->name), "%s", t->spec->name);
	}
	return 0;
}

static void
main_unload(main_job *m)
{
	for (size_t i = 0; i < m->ntasks; i++) {
		main_task *t = &m->tasks[i];
		if (t->spec == NULL)
			continue;
		if (t->spec->budget == &t->budget)
			t->spec->budget = NULL;
		if (t->spec->params == &t->params)
			t->spec->params = NULL;
		kclaw__task_spec__free_unpacked(t->spec, NULL);
		t->spec = NULL;
	}
}

static int
main_submit(orch_client *c, main_task *t)
{
	Kclaw__SubmitRequest req = KCLAW__SUBMIT_REQUEST__INIT;
	Kclaw__SubmitResponse *resp;
	char why[512];
	int rv;

	req.spec = t->spec;
	req.task_id = "";
	if ((rv = orch_client_call(c, "Submit", &req.base,
	         &kclaw__submit_response__descriptor,
	         (ProtobufCMessage **)&resp)) != 0) {
		snprintf(why, sizeof(why), "%s", kc_lasterr());
		return kc_seterr(rv, "submitting %s: %s", t->bundle, why);
	}
	snprintf(t->id, sizeof(t->id), "%s", resp->task_id);
	kclaw__submit_response__free_unpacked(resp, NULL);
	return 0;
}

static main_task *
main_task_of(main_job *m, const char *id)
{
	for (size_t i = 0; i < m->ntasks; i++)
		if (strcmp(m->tasks[i].id, id) == 0)
			return &m->tasks[i];
	return NULL;
}

/* "c0004" of "<task id>-c0004". */
static const char *
main_cand(const Kclaw__Event *ev)
{
	const char *dash = strrchr(ev->candidate_id, '-');

	return dash ? dash + 1 : ev->candidate_id;
}

/* One line per notable event of our tasks (and process trouble). */
static void
main_print_event(main_job *m, const Kclaw__Event *ev)
{
	main_task *t = *ev->task_id ? main_task_of(m, ev->task_id) : NULL;
	double at = (double)(kc_mono_ms() - m->t0) / 1000;
	const char *who = t ? t->name : ev->process;
	char what[400];

	if (*ev->task_id && t == NULL)
		return; /* another task of a shared deployment */
	switch (ev->kind) {
	case KCLAW__EVENT_KIND__TASK_SUBMITTED:
		snprintf(what, sizeof(what), "submitted as %s", ev->task_id);
		break;
	case KCLAW__EVENT_KIND__STATE_CHANGED:
		snprintf(what, sizeof(what), "%s", ev->detail);
		break;
	case KCLAW__EVENT_KIND__AGENT_REPLIED:
		/* Replayed replies cost nothing; a model's show their tokens
		 * and latency. */
		if (ev->tokens == 0)
			return;
		snprintf(what, sizeof(what), "%s", ev->detail);
		break;
	case KCLAW__EVENT_KIND__EVAL_FINISHED:
		snprintf(what, sizeof(what), "evaluated %s: %.160s",
		    main_cand(ev), ev->detail);
		break;
	case KCLAW__EVENT_KIND__BASE_PROMOTED:
		snprintf(what, sizeof(what), "new base %s (%.4f ms)",
		    main_cand(ev), ev->value);
		break;
	case KCLAW__EVENT_KIND__ROUND_FINISHED:
	case KCLAW__EVENT_KIND__TASK_FINISHED:
	case KCLAW__EVENT_KIND__TASK_CANCELLED:
		snprintf(what, sizeof(what), "%s", ev->detail);
		break;
	case KCLAW__EVENT_KIND__JOB_RETRIED:
	case KCLAW__EVENT_KIND__REFERENCE_CHECKED: /* degenerate outputs */
	case KCLAW__EVENT_KIND__PROCESS_CRASHED:
	case KCLAW__EVENT_KIND__PROCESS_RESTARTED:
		snprintf(what, sizeof(what), "%s", ev->detail);
		break;
	default: return;
	}
	fprintf(m->progress, "[%7.1fs] %-17s %s\n", at, who, what);
	fflush(m->progress);
	if (t &&
	    (ev->kind == KCLAW__EVENT_KIND__TASK_FINISHED ||
	        ev->kind == KCLAW__EVENT_KIND__TASK_CANCELLED))
		t->final = true;
}

static size_t
main_unfinished(const main_job *m)
{
	size_t n = 0;

	for (size_t i = 0; i < m->ntasks; i++)
		n += m->tasks[i].id[0] && !m->tasks[i].final;
	return n;
}

/* Asks each unfinished task's state (all with all): the event log is the
 * stream, this guards against waiting forever on a task that ended unseen
 * and gives the final states. */
static void
main_poll_states(main_job *m, orch_client *c, bool all)
{
	for (size_t i = 0; i < m->ntasks; i++) {
		Kclaw__StatusRequest req = KCLAW__STATUS_REQUEST__INIT;
		Kclaw__StatusResponse *resp;
		main_task *t = &m->tasks[i];
		if (!t->id[0] || (t->final && !all))
			continue;
		req.task_id = t->id;
		if (orch_client_call(c, "Status", &req.base,
		        &kclaw__status_response__descriptor,
		        (ProtobufCMessage **)&resp) != 0)
			continue;
		const char *s = resp->task->state;
		snprintf(t->state, sizeof(t->state), "%s", s);
		t->final = strcmp(s, "DONE") == 0 || strcmp(s, "FAILED") == 0 ||
		    strcmp(s, "CANCELLED") == 0;
		kclaw__status_response__free_unpacked(resp, NULL);
	}
}

/* Streams events from since until every task ended (or a stop). */
static int
main_watch(main_job *m, orch_client *c, uint64_t since)
{
	uint64_t last_poll = kc_mono_ms();
	int rv;

	while (main_unfinished(m) > 0 && !main_stop) {
		Kclaw__EventsRequest req = KCLAW__EVENTS_REQUEST__INIT;
		Kclaw__EventsResponse *resp;
		req.since_seq = since;
		req.limit = 500;
		if ((rv = orch_client_call(c, "Events", &req.base,
		         &kclaw__events_response__descriptor,
		         (ProtobufCMessage **)&resp)) != 0)
			return rv;
		for (size_t i = 0; i < resp->n_events; i++) {
			main_print_event(m, resp->events[i]);
			since = resp->events[i]->seq;
		}
		bool more = resp->n_events == 500;
		kclaw__events_response__free_unpacked(resp, NULL);
		if (kc_mono_ms() - last_poll > 2000) {
			main_poll_states(m, c, false);
			last_poll = kc_mono_ms();
		}
		if (m->timeout_s &&
		    kc_mono_ms() - m->t0 > (uint64_t)m->timeout_s * 1000)
			return kc_seterr(KC_ETIMEDOUT,
			    "%zu task(s) still running after %u s "
			    "(--timeout-s)",
			    main_unfinished(m), m->timeout_s);
		if (!more)
			kc_sleep_ms(200);
	}
	return 0;
}

static uint64_t
main_last_seq(orch_client *c)
{
	Kclaw__HealthResponse *h;
	uint64_t seq = 0;

	if (cli_health(c, &h) == 0) {
		seq = h->last_seq;
		kclaw__health_response__free_unpacked(h, NULL);
	}
	return seq;
}

/* ------------------------------------------------------------ record */

/* --record DIR: a new (or empty) folder the agents write every exchange
 * to (KCLAW_LLM_RECORD, inherited through `kclaw up`). */
static int
main_record_prepare(main_job *m)
{
	char path[PATH_MAX];
	DIR *d;
	struct dirent *e;
	bool empty = true;
	int rv;

	if (!*m->record)
		return 0;
	if ((rv = kc_mkdirs(m->record, 0700)) != 0)
		return kc_seterr(
		    rv, "cannot create the recording folder %s", m->record);
	if (realpath(m->record, path) == NULL || (d = opendir(path)) == NULL)
		return kc_seterr(
		    KC_EIO, "cannot open the recording folder %s", m->record);
	while (empty && (e = readdir(d)) != NULL)
		empty =
		    strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
	closedir(d);
	if (!empty)
		return kc_seterr(KC_EEXIST,
		    "the recording folder %s is not empty; give a new one, so "
		    "that it holds this run only",
		    path);
	snprintf(m->record, sizeof(m->record), "%s", path);
	setenv("KCLAW_LLM_RECORD", m->record, 1);
	return 0;
}

/* DIR/main.json: the tasks and the round budgets they ran with, which
 * `kclaw main --recordings DIR` reads (format of examples/recordings). */
static int
main_record_manifest(const main_job *m)
{
	char path[PATH_MAX + 16], doc[512];
	cJSON *root = cJSON_CreateObject(), *tasks;
	int rv = KC_ENOMEM;

	snprintf(doc, sizeof(doc),
	    "The tasks of a live `kclaw main` with model %s, with their "
	    "round budgets; the replies are the recorded exchanges beside "
	    "this file. Replay: kclaw main --recordings <this folder>.",
	    m->model);
	if (root == NULL ||
	    cJSON_AddStringToObject(root, "format", "kclaw-main/1") == NULL ||
	    cJSON_AddStringToObject(root, "doc", doc) == NULL ||
	    cJSON_AddStringToObject(root, "model", m->model) == NULL ||
	    (tasks = cJSON_AddArrayToObject(root, "tasks")) == NULL)
		goto out;
	for (size_t i = 0; i < m->ntasks; i++) {
		const main_task *t = &m->tasks[i];
		cJSON *o = cJSON_CreateObject();
		if (o == NULL || !cJSON_AddItemToArray(tasks, o) ||
		    cJSON_AddStringToObject(o, "bundle", t->bundle) == NULL)
			goto out;
		if (t->spec->budget != NULL && t->spec->budget->rounds &&
		    cJSON_AddNumberToObject(
		        o, "rounds", t->spec->budget->rounds) == NULL)
			goto out;
	}
	snprintf(path, sizeof(path), "%s/main.json", m->record);
	if ((rv = kc_write_json(path, root)) != 0)
		rv = kc_seterr(rv, "cannot write %s", path);
out:
	cJSON_Delete(root);
	return rv;
}

/* --------------------------------------------------------------- main */

static int
main_parse(main_job *m, int argc, char **argv, const char **examples,
    const char **recordings, char **names, size_t *nnames)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		char *end;
		if (strcmp(a, "--json") == 0) {
			m->json = true;
		} else if (strcmp(a, "--keep") == 0) {
			m->keep = true;
		} else if (strcmp(a, "--no-gpu-ok") == 0) {
			m->no_gpu_ok = true;
		} else if (strcmp(a, "--skip-gpu-check") == 0) {
			m->skip_gpu_check = true;
		} else if (strcmp(a, "--live") == 0) {
			m->live = true;
		} else if (strcmp(a, "--record") == 0 && v && *v) {
			snprintf(m->record, sizeof(m->record), "%s", argv[++i]);
		} else if (strcmp(a, "--manifest") == 0 && v && *v) {
			m->manifest = argv[++i];
		} else if (strcmp(a, "--home") == 0 && v) {
			i++;
		} else if (strcmp(a, "--examples") == 0 && v) {
			*examples = argv[++i];
		} else if (strcmp(a, "--recordings") == 0 && v) {
			*recordings = argv[++i];
		} else if ((strcmp(a, "--rounds") == 0 ||
		               strcmp(a, "--agents") == 0 ||
		               strcmp(a, "--timeout-s") == 0) &&
		    v) {
			unsigned long n = strtoul(v, &end, 10);
			if (*end || !*v || n > 100000) {
				fprintf(stderr,
				    "kclaw main: %s takes a number, not '%s'\n",
				    a, v);
				return CLI_USAGE;
			}
			if (strcmp(a, "--rounds") == 0)
				m->rounds = (uint32_t)n;
			else if (strcmp(a, "--agents") == 0)
				m->agents = (unsigned)n;
			else
				m->timeout_s = (unsigned)n;
			i++;
		} else if (a[0] != '-' && *nnames < MAIN_MAX_TASKS) {
			names[(*nnames)++] = argv[i];
		} else {
			fprintf(
			    stderr, "kclaw main: unknown argument '%s'\n\n", a);
			main_usage(stderr);
			return CLI_USAGE;
		}
	}
	if (m->live && *recordings != NULL) {
		fprintf(stderr,
		    "kclaw main: --live asks the configured model and "
		    "--recordings replays; give one of them\n");
		return CLI_USAGE;
	}
	return CLI_OK;
}

/* The home: --home or KCLAW_HOME, else a fresh one, so the report covers
 * this run only. */
static void
main_bundle_root(const main_job *m)
{
	const char *roots = getenv("KCLAW_BUNDLE_ROOTS");
	char buf[PATH_MAX * 2];

	if (roots != NULL && *roots != '\0') {
		snprintf(buf, sizeof(buf), "%s:%s", roots, m->examples);
		setenv("KCLAW_BUNDLE_ROOTS", buf, 1);
	} else {
		setenv("KCLAW_BUNDLE_ROOTS", m->examples, 1);
	}
}

static int
main_home(main_job *m, int argc, char **argv, kc_config *cfg)
{
	bool given = getenv("KCLAW_HOME") != NULL;
	int rv;

	for (int i = 1; i + 1 < argc; i++)
		given |= strcmp(argv[i], "--home") == 0;
	if (!given) {
		char tmpl[] = "/tmp/kclaw-main.XXXXXX";
		if (mkdtemp(tmpl) == NULL)
			return kc_seterr(KC_EIO,
			    "cannot create a home under /tmp: %s",
			    strerror(errno));
		setenv("KCLAW_HOME", tmpl, 1);
	}
	if ((rv = cli_config(argc, argv, cfg)) != 0)
		return rv;
	if (realpath(cfg->home, m->home) == NULL)
		snprintf(m->home, sizeof(m->home), "%s", cfg->home);
	setenv("KCLAW_HOME", m->home, 1);
	return kc_config_prepare(cfg);
}

static int
main_no_gpu(main_job *m, const kc_config *cfg, const char *why)
{
	orch_client c;
	int rv;

	if (!m->no_gpu_ok) {
		fprintf(stderr,
		    "kclaw main: no NVIDIA GPU on this machine (%s), and the "
		    "main job compiles, verifies and times kernels on one; run "
		    "it on a host with an NVIDIA GPU and driver.\n",
		    why);
		return CLI_FAIL;
	}
	if ((rv = main_start(m, cfg, &c)) != 0)
		return cli_fail("main", rv);
	orch_client_close(&c);
	main_shutdown(m);
	printf("kclaw main: no NVIDIA GPU on this machine (%s), so the "
	       "service was started, checked and stopped, and no kernel was "
	       "optimised.\n",
	    why);
	return CLI_OK;
}

int
cli_main_job(int argc, char **argv)
{
	static main_job m;
	const char *examples = NULL, *recordings = NULL;
	char *names[MAIN_MAX_TASKS], why[256];
	size_t nnames = 0;
	kc_config cfg;
	orch_client c;
	bool gpu = true;
	int rv, code;

	if (cli_wants_help(argc, argv)) {
		main_usage(stdout);
		return CLI_OK;
	}
	memset(&m, 0, sizeof(m));
	m.progress = stdout;
	m.explore_share = -1;
	if ((code = main_parse(&m, argc, argv, &examples, &recordings, names,
	         &nnames)) != CLI_OK)
		return code;
	if (m.json)
		m.progress = cli_stderr_raw();
	m.t0 = kc_mono_ms();
	why[0] = '\0';
	if (!m.skip_gpu_check)
		gpu = cli_have_gpu(why, sizeof(why));
	if (!gpu && !m.no_gpu_ok)
		return main_no_gpu(&m, NULL, why);
	if ((rv = main_home(&m, argc, argv, &cfg)) != 0)
		return cli_fail("main", rv);
	signal(SIGINT, main_on_signal);
	signal(SIGTERM, main_on_signal);
	if ((rv = main_find_examples(&m, examples)) != 0 ||
	    (rv = main_plan(&m, &cfg, recordings)) != 0 ||
	    (rv = main_select(&m, names, nnames)) != 0)
		return cli_fail("main", rv);
	if (gpu && (rv = main_record_prepare(&m)) != 0)
		return cli_fail("main", rv);
	main_packed_env(&m);
	/* The bundles' .npy files travel as paths, which the service reads
	 * only inside its allowed roots (docs/security.md): the examples
	 * folder is one, wherever kclaw main runs from. */
	main_bundle_root(&m);
	if (!gpu)
		return main_no_gpu(&m, &cfg, why);
	if (m.ntasks == 0) {
		fprintf(
		    stderr, "kclaw main: no task bundles in %s\n", m.examples);
		return CLI_FAIL;
	}
	if ((rv = main_load(&m)) != 0) {
		main_unload(&m);
		code = cli_fail("main", rv);
		return code == CLI_USAGE ? CLI_FAIL : code; /* the bundle's */
	}
	if (*m.record && (rv = main_record_manifest(&m)) != 0) {
		main_unload(&m);
		return cli_fail("main", rv);
	}
	fprintf(m.progress,
	    "kclaw main: %zu task(s) from %s; agents answer "
	    "from %s%s%s\n",
	    m.ntasks, m.examples, m.llm, *m.record ? "; recording to " : "",
	    m.record);
	if ((rv = main_start(&m, &cfg, &c)) != 0) {
		main_unload(&m);
		return cli_fail("main", rv);
	}
	uint64_t since = main_last_seq(&c);
	for (size_t i = 0; i < m.ntasks && rv == 0; i++)
		rv = main_submit(&c, &m.tasks[i]);
	if (rv == 0)
		rv = main_watch(&m, &c, since);
	if (rv == 0 && main_stop)
		rv = kc_seterr(KC_ECANCELED,
		    "interrupted; the report covers the tasks as they are");
	code = rv == 0 ? CLI_OK : cli_fail("main", rv);
	if (rv == 0 || rv == KC_ECANCELED || rv == KC_ETIMEDOUT) {
		char *ids[MAIN_MAX_TASKS];
		size_t n = 0;
		for (size_t i = 0; i < m.ntasks; i++)
			if (m.tasks[i].id[0])
				ids[n++] = m.tasks[i].id;
		fprintf(m.progress, "\n");
		if (n &&
		    (rv = cli_report_print(&c, ids, n, m.json, stdout)) != 0)
			code = cli_fail("main", rv);
	}
	main_poll_states(&m, &c, true);
	orch_client_close(&c);
	main_shutdown(&m);
	main_unload(&m);
	for (size_t i = 0; i < m.ntasks && code == CLI_OK; i++)
		if (strcmp(m.tasks[i].state, "DONE") != 0)
			code = CLI_FAIL;
	fprintf(m.progress,
	    "kclaw main: home %s (logs in run/, store in "
	    "db/)\n",
	    m.home);
	return code;
}
