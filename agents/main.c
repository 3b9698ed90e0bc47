/*
 * kclaw-agent - one agent worker process of one role. It pulls jobs from
 * the orchestrator's work address until told to shut down; it holds no
 * state between jobs, so it may be killed at any moment (the orchestrator
 * re-issues the job it held).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent.h"
#include "bundle.h"
#include "kc_config.h"
#include "kc_err.h"
#include "kc_log.h"
#include "llm.h"
#include "worker.h"

static void
usage(FILE *f)
{
	fprintf(f,
	    "usage: kclaw-agent --role ROLE [--work-url URL] [--home DIR] "
	    "[--id ID] [--prompts DIR]\n"
	    "       kclaw-agent --check-recording DIR [--bundle TASK_DIR]\n"
	    "  ROLE: generator, feature, planner, optimizer, diagnoser, "
	    "repairer\n"
	    "  The LLM is configured by KCLAW_LLM_BASE_URL, KCLAW_LLM_MODEL, "
	    "KCLAW_LLM_API_KEY(_FILE),\n"
	    "  KCLAW_LLM_PROVIDER (openai, azure, ollama, anthropic; "
	    "guessed from the URL),\n"
	    "  KCLAW_LLM_CONTEXT_WINDOW, KCLAW_LLM_REASONING_EFFORT,\n"
	    "  KCLAW_LLM_RECORD=dir, KCLAW_LLM_REPLAY=dir or the \"llm\" "
	    "object of kclaw.json (docs/agents.md).\n"
	    "  --check-recording validates every reply of a recording "
	    "folder as its role would\n"
	    "  (tensor names against the task bundle, when given); exit 1 "
	    "if any fails.\n");
}

static int
check_recording(const char *dir, const char *bundle)
{
	Kclaw__TaskSpec *task = NULL;
	unsigned files, bad;

	if (bundle != NULL && kc_bundle_load(bundle, &task) != 0) {
		fprintf(stderr, "kclaw-agent: %s\n", kc_lasterr());
		return 1;
	}
	if (agent_check_recording(dir, task, stdout, &files, &bad) != 0) {
		fprintf(stderr, "kclaw-agent: %s\n", kc_lasterr());
		bad = 1;
	} else if (files == 0) {
		fprintf(stderr,
		    "kclaw-agent: no recordings (<task>/<role>/<n>.json or "
		    ".txt) under %s\n",
		    dir);
		bad = 1;
	} else {
		printf("%u of %u replies usable\n", files - bad, files);
	}
	if (task != NULL)
		kclaw__task_spec__free_unpacked(task, NULL);
	return bad == 0 ? 0 : 1;
}

int
main(int argc, char **argv)
{
	const char *role_name = NULL, *work_url = NULL, *home = NULL;
	const char *id = NULL, *prompts = NULL, *v;
	const char *check = NULL, *bundle = NULL;
	const agent_role *role;
	agent_ctx ctx = {0};
	char logname[64], path[KC_PATH_MAX + 32], installed[KC_PATH_MAX + 32];
	llm_config lcfg;
	kc_config cfg;
	kc_worker *w = NULL;
	agent_watch *watch = NULL;
	struct stat st;
	int i, rv;

	for (i = 1; i < argc; i++) {
		const char **dst = NULL;
		if (strcmp(argv[i], "--help") == 0 ||
		    strcmp(argv[i], "-h") == 0) {
			usage(stdout);
			return 0;
		}
		if (strcmp(argv[i], "--role") == 0)
			dst = &role_name;
		else if (strcmp(argv[i], "--work-url") == 0)
			dst = &work_url;
		else if (strcmp(argv[i], "--home") == 0)
			dst = &home;
		else if (strcmp(argv[i], "--id") == 0)
			dst = &id;
		else if (strcmp(argv[i], "--prompts") == 0)
			dst = &prompts;
		else if (strcmp(argv[i], "--check-recording") == 0)
			dst = &check;
		else if (strcmp(argv[i], "--bundle") == 0)
			dst = &bundle;
		if (dst == NULL || i + 1 >= argc) {
			fprintf(stderr, "kclaw-agent: %s '%s'\n",
			    dst ? "missing value for" : "unknown argument",
			    argv[i]);
			usage(stderr);
			return 2;
		}
		*dst = argv[++i];
	}
	if (check != NULL)
		return check_recording(check, bundle);
	if (role_name == NULL ||
	    (role = agent_role_by_name(role_name)) == NULL) {
		fprintf(stderr, "kclaw-agent: %s\n",
		    role_name ? "unknown role" : "--role is required");
		usage(stderr);
		return 2;
	}
	snprintf(logname, sizeof(logname), "agent-%s", role->name);
	kc_log_init(logname);

	if ((rv = kc_config_load(&cfg, home)) != 0 ||
	    (rv = llm_config_load(&lcfg, &cfg)) != 0) {
		KC_ERROR("configuration: %s", kc_lasterr());
		return 1;
	}
	if (work_url == NULL)
		work_url = cfg.work_url;
	if (prompts == NULL && (v = getenv("KCLAW_PROMPTS_DIR")) != NULL &&
	    *v != '\0')
		prompts = v;
	if (prompts == NULL) {
		/* The installed templates (<prefix>/share/kclaw/prompts; a
		 * build tree links its share/kclaw to the sources). */
		if (kc_share_dir("prompts", installed, sizeof(installed)) !=
		    0) {
			KC_ERROR("no prompt templates: %s; or pass --prompts "
			         "DIR or set KCLAW_PROMPTS_DIR",
			    kc_lasterr());
			return 1;
		}
		prompts = installed;
	}
	snprintf(path, sizeof(path), "%s/system.md", prompts);
	if (stat(path, &st) != 0) {
		KC_ERROR("no prompt templates in %s (%s is missing); pass "
		         "--prompts DIR or set KCLAW_PROMPTS_DIR",
		    prompts, path);
		return 1;
	}
	ctx.prompts_dir = prompts;
	if ((v = getenv("KCLAW_AGENT_MAX_ASKS")) != NULL && *v != '\0')
		ctx.max_asks = (unsigned)strtoul(v, NULL, 10);

	/* The configured model names the usage (a replay of a recording
	 * made with it reports the same). */
	ctx.model = lcfg.model;
	if ((rv = llm_open(&ctx.llm, &lcfg)) != 0) {
		KC_ERROR("LLM client: %s", kc_lasterr());
		return 1;
	}
	if ((rv = kc_worker_open(
	         &w, work_url, role->role, -1, id, cfg.token)) != 0) {
		KC_ERROR("cannot reach the orchestrator at %s: %s", work_url,
		    kc_lasterr());
		llm_close(ctx.llm);
		return 1;
	}
	/* Without events a job still ends; it just cannot be stopped early. */
	if (agent_watch_open(&watch, cfg.events_url) != 0)
		KC_WARN("no control events from %s (%s); cancelled tasks' jobs "
		        "run to their end",
		    cfg.events_url, kc_lasterr());
	KC_INFO("%s %s serving %s (LLM: %s%s%s, api %s, parameter profile "
	        "%s)",
	    logname, kc_worker_id(w), work_url, llm_provider_name(ctx.llm),
	    lcfg.replay_dir[0] ? " from " : " ",
	    lcfg.replay_dir[0] ? lcfg.replay_dir : lcfg.model,
	    llm_api_name(lcfg.api), lcfg.profile.name);
	rv = agent_serve(&ctx, role, w, watch);
	if (rv != 0)
		KC_ERROR("stopped: %s", kc_lasterr());
	agent_watch_close(watch);
	kc_worker_close(w);
	llm_close(ctx.llm);
	return rv == 0 ? 0 : 1;
}
