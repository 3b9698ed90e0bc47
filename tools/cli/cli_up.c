/*
 * cli_up.c - `kclaw up`: start and supervise a deployment on this host
 * (orchestrator/supervisor.h), in the foreground or detached.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cJSON.h>
#include <curl/curl.h>

#include "cli.h"
#include "client.h"
#include "kc_err.h"
#include "kc_log.h"
#include "kc_util.h"
#include "llm.h"
#include "supervisor.h"

static volatile sig_atomic_t up_stop;

static void
up_on_signal(int sig)
{
	(void)sig;
	up_stop = 1;
}

static void
up_usage(FILE *f)
{
	fprintf(f,
	    "usage: kclaw up [--detach] [--agents N] [--role-agents "
	    "ROLE=N,...] [--gpus N]\n                [--replay DIR] [--home "
	    "DIR]\n"
	    "       kclaw up --stop [--home DIR]\n\n"
	    "Starts the orchestrator (kclawd), the agent processes (N per "
	    "role, default 1)\nand one sandbox per visible GPU (one anyway "
	    "without a GPU: tasks then fail\nsaying so), on ipc:// addresses "
	    "in DIR/run (kclaw.json or KCLAW_*_URL may\nmake them tcp://). A "
	    "process that dies is restarted with exponential backoff\nand a "
	    "PROCESS_RESTARTED event. SIGINT or SIGTERM stop everything "
	    "cleanly.\n\n"
	    "  --detach        run in the background (log: DIR/run/up.log); "
	    "returns once\n                  the orchestrator answers\n"
	    "  --stop          stop a detached deployment and wait for it\n"
	    "  --agents N      agent processes per role\n"
	    "  --role-agents   per role, e.g. planner=2,generator=3 (also "
	    "kclaw.json\n                  \"up\": {\"agents\": {...}})\n"
	    "  --gpus N        sandboxes to start instead of one per GPU "
	    "found\n"
	    "  --replay DIR    the agents answer from the LLM recordings in "
	    "DIR "
	    "(e.g. the\n                  shipped share/kclaw/examples/"
	    "recordings) instead of a model\n\n"
	    "The agents need a model (KCLAW_LLM_MODEL and KCLAW_LLM_BASE_URL, "
	    "or \"llm\" in\nkclaw.json; docs/agents.md) or recordings "
	    "(--replay DIR, or KCLAW_LLM_REPLAY);\nwithout either, up refuses "
	    "to start. --detach prints where the dashboard is\nand what will "
	    "not work here (no GPU, no model).\n\n"
	    "`kclaw status` shows the processes and the tasks. Exit codes: 0 "
	    "ok, 1 failure\n(nothing for the agents to answer with, the "
	    "service did not come up), 2 usage,\n3 (--stop) not running.\n");
}

static void
up_pid_path(const kc_config *cfg, char *path, size_t n)
{
	snprintf(path, n, "%s/up.pid", cfg->run_dir);
}

/* The pid of a running supervisor of this home, or 0. */
static pid_t
up_running(const kc_config *cfg)
{
	char path[KC_PATH_MAX], *text;
	size_t len;
	pid_t pid = 0;

	up_pid_path(cfg, path, sizeof(path));
	if (kc_read_file(path, 64, &text, &len) == 0) {
		pid = (pid_t)atoi(text);
		free(text);
		if (pid > 0 && kill(pid, 0) != 0)
			pid = 0;
	}
	kc_clearerr();
	return pid;
}

static int
up_stop_running(const kc_config *cfg)
{
	pid_t pid = up_running(cfg);

	if (pid == 0) {
		fprintf(stderr, "kclaw up --stop: no deployment runs in %s\n",
		    cfg->home);
		return CLI_NOT_FOUND;
	}
	kill(pid, SIGTERM);
	for (int i = 0; i < 300 && kill(pid, 0) == 0; i++)
		kc_sleep_ms(50);
	if (kill(pid, 0) == 0) {
		fprintf(stderr,
		    "kclaw up --stop: the supervisor (pid %d) did "
		    "not stop within 15 s\n",
		    (int)pid);
		return CLI_FAIL;
	}
	printf("stopped\n");
	return CLI_OK;
}

/* Waits until the orchestrator answers (or the child gave up). */
static int
up_wait_ready(const kc_config *cfg, pid_t child)
{
	Kclaw__HealthRequest req = KCLAW__HEALTH_REQUEST__INIT;

	for (int i = 0; i < 60; i++) {
		ProtobufCMessage *resp;
		orch_client c;
		int rv;
		if (waitpid(child, NULL, WNOHANG) == child)
			break;
		if (orch_client_open(&c, cfg) != 0) {
			kc_sleep_ms(250); /* kclawd is not listening yet */
			continue;
		}
		rv = kc_api_call(c.bus, "Health", &req.base, cfg->token, 250,
		    &kclaw__health_response__descriptor, &resp);
		orch_client_close(&c);
		if (rv == 0) {
			protobuf_c_message_free_unpacked(resp, NULL);
			return 0;
		}
	}
	return kc_seterr(KC_ETIMEDOUT,
	    "the orchestrator did not come up; see %s/up.log and "
	    "%s/kclawd.log",
	    cfg->run_dir, cfg->run_dir);
}

static int
up_supervise(const sup_options *opt)
{
	char path[KC_PATH_MAX], text[32];
	struct sigaction sa;
	int rv;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = up_on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	up_pid_path(&opt->cfg, path, sizeof(path));
	snprintf(text, sizeof(text), "%d\n", (int)getpid());
	if ((rv = kc_write_file(path, text, strlen(text))) != 0)
		return rv;
	rv = sup_run(opt, &up_stop);
	unlink(path);
	return rv;
}

/* Whether opt starts kclaw's own agents (not another program's, through
 * KCLAW_AGENT_BIN, and not none). */
static bool
up_starts_agents(const sup_options *opt)
{
	const char *base = strrchr(opt->agent_bin, '/');
	unsigned n = 0;

	for (int r = 1; r <= 6; r++)
		n += opt->agents[r];
	base = base ? base + 1 : opt->agent_bin;
	return n > 0 && strcmp(base, "kclaw-agent") == 0;
}

/* How long up waits for the model endpoint to list its models. */
#define UP_PROBE_MS 3000

static size_t
up_probe_write(char *ptr, size_t size, size_t nmemb, void *arg)
{
	kc_str *body = arg;

	/* A model list is small; a huge answer is not one. */
	if (body->len + size * nmemb > (1u << 20))
		return 0;
	return kc_str_appendn(body, ptr, size * nmemb) == 0 ? size * nmemb : 0;
}

/* What a 200 of GET /models says of lc's model, into msg. */
static void
up_probe_models(const llm_config *lc, const char *url, const kc_str *body,
    char *msg, size_t n)
{
	cJSON *root =
	    cJSON_ParseWithLength(body->buf ? body->buf : "", body->len);
	const cJSON *it, *id;
	char seen[256] = "";
	size_t nseen = 0;

	cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(root, "data"))
	{
		id = cJSON_GetObjectItemCaseSensitive(it, "id");
		if (!cJSON_IsString(id))
			continue;
		if (strcmp(id->valuestring, lc->model) == 0) {
			snprintf(msg, n, "model: %s answers and lists %s", url,
			    lc->model);
			goto out;
		}
		if (nseen++ < 5)
			snprintf(seen + strlen(seen),
			    sizeof(seen) - strlen(seen), "%s%s",
			    nseen > 1 ? ", " : "", id->valuestring);
	}
	snprintf(msg, n,
	    "warning: %s answers but does not list model %s (it lists %s%s); "
	    "check KCLAW_LLM_MODEL or \"llm\".\"model\" (up goes on)",
	    url, lc->model, nseen ? seen : "no models",
	    nseen > 5 ? ", ..." : "");
out:
	cJSON_Delete(root);
}

/*
 * Asks the model endpoint for its models with the configured key (GET
 * <base>/models; Anthropic's API at <base>/v1/models), so that a wrong
 * URL, a refused key or an unknown model is said at start-up rather than
 * by the first job. A warning, never a refusal: the endpoint may come up
 * later, and the agents retry.
 */
static void
up_probe_model(const llm_config *lc)
{
	char url[KC_URL_MAX + 16], errbuf[CURL_ERROR_SIZE] = "";
	char msg[KC_URL_MAX + 512], *auth = NULL;
	const char *base =
	    *lc->base_url ? lc->base_url : "https://api.openai.com/v1";
	struct curl_slist *headers = NULL, *nh;
	kc_str body = {0};
	long status = 0;
	size_t blen = strlen(base), an;
	CURLcode cc;
	CURL *c;

	if (lc->api == LLM_API_AZURE) {
		printf("model: %s not probed (Azure lists deployments "
		       "elsewhere)\n",
		    base);
		return;
	}
	while (blen > 0 && base[blen - 1] == '/')
		blen--;
	if (lc->api == LLM_API_ANTHROPIC &&
	    (blen < 3 || strncmp(base + blen - 3, "/v1", 3) != 0))
		snprintf(url, sizeof(url), "%.*s/v1/models", (int)blen, base);
	else
		snprintf(url, sizeof(url), "%.*s/models", (int)blen, base);
	if ((c = curl_easy_init()) == NULL)
		return;
	an = strlen(lc->api_key) + 32;
	if (*lc->api_key && (auth = malloc(an)) != NULL) {
		if (lc->api == LLM_API_ANTHROPIC)
			snprintf(auth, an, "x-api-key: %s", lc->api_key);
		else
			snprintf(
			    auth, an, "Authorization: Bearer %s", lc->api_key);
		if ((nh = curl_slist_append(headers, auth)) != NULL)
			headers = nh;
		memset(auth, 0, an);
		free(auth);
	}
	if (lc->api == LLM_API_ANTHROPIC) {
		char ver[64];
		snprintf(ver, sizeof(ver), "anthropic-version: %s",
		    lc->anthropic_version);
		if ((nh = curl_slist_append(headers, ver)) != NULL)
			headers = nh;
	}
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, up_probe_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)UP_PROBE_MS);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_USERAGENT, "kclaw-up");
	if ((cc = curl_easy_perform(c)) != CURLE_OK) {
		snprintf(msg, sizeof(msg),
		    "warning: the model endpoint %s did not answer (%s); check "
		    "KCLAW_LLM_BASE_URL or \"llm\".\"base_url\" and that the "
		    "server runs (up goes on; the agents retry)",
		    url, *errbuf ? errbuf : curl_easy_strerror(cc));
		goto out;
	}
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	if (status == 401 || status == 403)
		snprintf(msg, sizeof(msg),
		    "warning: the model endpoint %s refused the key (HTTP "
		    "%ld); set KCLAW_LLM_API_KEY (or KCLAW_LLM_API_KEY_FILE, "
		    "or \"llm\".\"api_key\") to a key it accepts (up goes "
		    "on; every model call will fail until then)",
		    url, status);
	else if (status == 200)
		up_probe_models(lc, url, &body, msg, sizeof(msg));
	else
		snprintf(msg, sizeof(msg),
		    "warning: the model endpoint %s answered HTTP %ld to GET "
		    "(it may not list models; up goes on)",
		    url, status);
out:
	printf("%s\n", msg);
	fflush(stdout);
	kc_str_free(&body);
	for (nh = headers; nh != NULL; nh = nh->next)
		memset(nh->data, 0, strlen(nh->data));
	curl_slist_free_all(headers);
	curl_easy_cleanup(c);
}

/*
 * Who answers the agents: a model or recordings, into who. Refuses (with
 * how to configure either) when neither is configured, as the agents
 * would only crash-loop.
 */
static int
up_check_llm(const kc_config *cfg, const sup_options *opt, char *who, size_t n,
    bool *model)
{
	char rec[KC_PATH_MAX];
	llm_config lc;
	struct stat st;
	int rv;

	*model = false;
	snprintf(who, n, "agents: none of kclaw's own");
	if (!up_starts_agents(opt))
		return 0;
	if ((rv = llm_config_load(&lc, cfg)) != 0)
		return rv;
	if (*lc.replay_dir) {
		if (stat(lc.replay_dir, &st) != 0 || !S_ISDIR(st.st_mode))
			return kc_seterr(KC_ENOENT,
			    "the LLM recordings folder %s (KCLAW_LLM_REPLAY, "
			    "--replay or \"llm\".\"replay\") does not exist",
			    lc.replay_dir);
		snprintf(who, n,
		    "agents: answer from the recordings in %s (no model)",
		    lc.replay_dir);
		return 0;
	}
	if (*lc.model) {
		*model = true;
		snprintf(who, n, "agents: model %s at %s", lc.model,
		    *lc.base_url ? lc.base_url : "the default endpoint");
		up_probe_model(&lc);
		return 0;
	}
	if (kc_share_dir("examples", rec, sizeof(rec)) != 0) {
		kc_clearerr();
		snprintf(rec, sizeof(rec), "share/kclaw/examples");
	}
	return kc_seterr(KC_EINVAL,
	    "no LLM model configured and no recordings to replay, so the "
	    "agents could not answer; set KCLAW_LLM_MODEL and "
	    "KCLAW_LLM_BASE_URL (and KCLAW_LLM_API_KEY, or \"llm\" in "
	    "%s; docs/agents.md), or give --replay DIR to answer from "
	    "recordings (the shipped ones: --replay %s/recordings)",
	    cfg->config_path, rec);
}

/*
 * After start-up, the processes that died already (a crash loop starts at
 * once): watched for UP_SETTLE_MS, then one warning each with the last
 * error line of its log. Returns how many.
 */
#define UP_SETTLE_MS 1200

static int
up_check_processes(const kc_config *cfg)
{
	Kclaw__HealthRequest req = KCLAW__HEALTH_REQUEST__INIT;
	Kclaw__HealthResponse *h = NULL;
	uint64_t end = kc_mono_ms() + UP_SETTLE_MS;
	orch_client c;
	int n = 0;

	if (orch_client_open(&c, cfg) != 0) {
		kc_clearerr();
		return 0;
	}
	while (kc_mono_ms() < end) {
		kc_sleep_ms(200);
		if (h != NULL)
			kclaw__health_response__free_unpacked(h, NULL);
		h = NULL;
		if (orch_client_call(&c, "Health", &req.base,
		        &kclaw__health_response__descriptor,
		        (ProtobufCMessage **)&h) != 0) {
			kc_clearerr();
			h = NULL;
		}
	}
	orch_client_close(&c);
	for (size_t i = 0; h != NULL && i < h->n_processes; i++) {
		const Kclaw__ProcessInfo *p = h->processes[i];
		if (p->restarts == 0 && strcmp(p->state, "running") == 0)
			continue;
		printf("  warning: %s %s (restarted %u times)%s%s; its log: "
		       "%s/%s.log\n",
		    p->name,
		    strcmp(p->state, "running") == 0 ? "died since start-up"
		                                     : "is crash-looping",
		    p->restarts, *p->last_error ? ": " : "", p->last_error,
		    cfg->run_dir, p->name);
		n++;
	}
	if (h != NULL)
		kclaw__health_response__free_unpacked(h, NULL);
	return n;
}

/* What `up --detach` says once the service answers: the dashboard, who
 * answers the agents, and what will not work on this host. */
static void
up_summary(const kc_config *cfg, pid_t pid, const char *who, bool model)
{
	char why[256];

	printf("kclaw up: running in the background (supervisor pid %d); "
	       "`kclaw status` shows it, `kclaw up --stop` stops it\n",
	    (int)pid);
	if (*cfg->http_url)
		printf("  dashboard: %s/ (metrics: %s/metrics)\n",
		    cfg->http_url, cfg->http_url);
	else
		printf("  dashboard: off; KCLAW_HTTP_URL=http://127.0.0.1:8470 "
		       "(or \"http_url\" in kclaw.json) serves it\n");
	printf("  %s\n", who);
	printf("  log: %s/up.log, one log per process in %s\n", cfg->run_dir,
	    cfg->run_dir);
	if (!cli_have_gpu(why, sizeof(why)))
		printf("  warning: no GPU here (%s): evaluations answer "
		       "NO_DEVICE and tasks fail saying so; `kclaw eval "
		       "--compile-only` works without one\n",
		    why);
	if (!model && strstr(who, "recordings") != NULL)
		printf("  warning: no LLM model configured: only tasks the "
		       "recordings cover get answers (set KCLAW_LLM_MODEL and "
		       "KCLAW_LLM_BASE_URL for a model)\n");
	fflush(stdout);
	if (up_check_processes(cfg) > 0)
		printf("  `kclaw status` shows them; `kclaw up --stop` stops "
		       "the deployment\n");
}

int
cli_up(int argc, char **argv)
{
	bool detach = false, stop = false, model = false;
	char who[KC_PATH_MAX + 128], replay[KC_PATH_MAX];
	kc_config cfg;
	sup_options opt;
	pid_t pid;
	int rv;

	if (cli_wants_help(argc, argv)) {
		up_usage(stdout);
		return CLI_OK;
	}
	if ((rv = cli_config(argc, argv, &cfg)) != 0 ||
	    (rv = sup_options_load(&opt, &cfg)) != 0)
		return cli_fail("up", rv);
	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		char *end;
		if (strcmp(argv[i], "--detach") == 0) {
			detach = true;
		} else if (strcmp(argv[i], "--stop") == 0) {
			stop = true;
		} else if (strcmp(argv[i], "--home") == 0 && v) {
			i++;
		} else if (strcmp(argv[i], "--agents") == 0 && v) {
			unsigned long n = strtoul(v, &end, 10);
			if (*end || n > 64) {
				fprintf(stderr,
				    "kclaw up: --agents takes a "
				    "number 0..64\n");
				return CLI_USAGE;
			}
			sup_set_agents(&opt, "all", (unsigned)n);
			i++;
		} else if (strcmp(argv[i], "--role-agents") == 0 && v) {
			char *list = strdup(v), *tok, *save = NULL;
			for (tok = strtok_r(list, ",", &save); tok;
			     tok = strtok_r(NULL, ",", &save)) {
				char *eq = strchr(tok, '=');
				unsigned long n =
				    eq ? strtoul(eq + 1, &end, 10) : 0;
				if (eq == NULL || *end || n > 64) {
					fprintf(stderr,
					    "kclaw up: --role-agents takes "
					    "ROLE=N,... (N 0..64), not '%s'\n",
					    tok);
					free(list);
					return CLI_USAGE;
				}
				*eq = '\0';
				if (sup_set_agents(&opt, tok, (unsigned)n) !=
				    0) {
					free(list);
					return cli_fail("up", KC_EINVAL);
				}
			}
			free(list);
			i++;
		} else if (strcmp(argv[i], "--replay") == 0 && v) {
			struct stat st;
			if (realpath(v, replay) == NULL ||
			    stat(replay, &st) != 0 || !S_ISDIR(st.st_mode)) {
				fprintf(stderr,
				    "kclaw up: --replay %s: no such folder; "
				    "give "
				    "a folder of LLM recordings (e.g. "
				    "share/kclaw/examples/recordings)\n",
				    v);
				return CLI_NOT_FOUND;
			}
			/* The agents inherit it. */
			setenv("KCLAW_LLM_REPLAY", replay, 1);
			i++;
		} else if (strcmp(argv[i], "--gpus") == 0 && v) {
			long n = strtol(v, &end, 10);
			if (*end || n < 0 || n > 64) {
				fprintf(stderr,
				    "kclaw up: --gpus takes a "
				    "number 0..64\n");
				return CLI_USAGE;
			}
			opt.gpus = (int)n;
			i++;
		} else {
			fprintf(stderr, "kclaw up: unknown argument '%s'\n\n",
			    argv[i]);
			up_usage(stderr);
			return CLI_USAGE;
		}
	}
	if (stop)
		return up_stop_running(&cfg);
	if ((pid = up_running(&cfg)) != 0) {
		fprintf(stderr,
		    "kclaw up: a deployment already runs in %s "
		    "(supervisor pid %d); stop it with `kclaw up "
		    "--stop`\n",
		    cfg.home, (int)pid);
		return CLI_FAIL;
	}
	if ((rv = up_check_llm(&cfg, &opt, who, sizeof(who), &model)) != 0) {
		rv = cli_fail("up", rv);
		return rv == CLI_USAGE ? CLI_FAIL : rv;
	}
	if ((rv = kc_config_prepare(&cfg)) != 0)
		return cli_fail("up", rv);
	kc_log_init("kclaw-up");
	if (!detach) {
		rv = up_supervise(&opt);
		return rv == 0 ? CLI_OK : cli_fail("up", rv);
	}
	if ((pid = fork()) < 0)
		return cli_fail(
		    "up", kc_seterr(KC_EIO, "fork: %s", strerror(errno)));
	if (pid == 0) {
		char log[KC_PATH_MAX];
		int fd;
		setsid();
		snprintf(log, sizeof(log), "%s/up.log", cfg.run_dir);
		fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
			close(fd);
		}
		fd = open("/dev/null", O_RDONLY);
		if (fd >= 0) {
			dup2(fd, 0);
			close(fd);
		}
		_exit(up_supervise(&opt) == 0 ? 0 : 1);
	}
	if ((rv = up_wait_ready(&cfg, pid)) != 0) {
		cli_fail("up", rv);
		/* Do not leave a deployment behind that cannot start. */
		kill(pid, SIGTERM);
		waitpid(pid, NULL, 0);
		return CLI_FAIL;
	}
	up_summary(&cfg, pid, who, model);
	return CLI_OK;
}
