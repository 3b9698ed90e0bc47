/*
 * kclawd.c - the orchestrator daemon: `kclawd [--home DIR]`.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kc_err.h"
#include "kc_util.h"
#include "kc_log.h"
#include "monitor.h"
#include "notify.h"
#include "orch.h"
#include "security.h"

static orch *kclawd_orch;

static void
kclawd_on_signal(int sig)
{
	(void)sig;
	if (kclawd_orch)
		orch_stop(kclawd_orch);
}

static void
kclawd_usage(FILE *f)
{
	fprintf(f,
	    "usage: kclawd [--home DIR] [--http http://HOST:PORT]\n\n"
	    "The kclaw orchestrator: task state machines, scheduler, API "
	    "and events.\nIt listens on the API, events and work addresses "
	    "of the deployment in DIR\n($KCLAW_HOME, else ./.kclaw) and "
	    "resumes every unfinished task found in its\nstore. SIGINT or "
	    "SIGTERM stop it cleanly. `kclaw up` starts and supervises it.\n"
	    "--http (or KCLAW_HTTP_URL, or \"http_url\" in kclaw.json) "
	    "also serves the\ndashboard, its JSON API, live events "
	    "(ws://HOST:PORT/ws) and /metrics.\n");
}

int
main(int argc, char **argv)
{
	const char *home = NULL, *http = NULL;
	kc_config cfg;
	mon *dashboard = NULL;
	orch_notify *notify = NULL;
	orch_options opt;
	struct sigaction sa;
	int rv;

	kc_log_init("kclawd");
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--help") == 0 ||
		    strcmp(argv[i], "-h") == 0) {
			kclawd_usage(stdout);
			return 0;
		}
		if (strcmp(argv[i], "--home") == 0 && i + 1 < argc) {
			home = argv[++i];
			continue;
		}
		if (strcmp(argv[i], "--http") == 0 && i + 1 < argc) {
			http = argv[++i];
			continue;
		}
		fprintf(stderr, "kclawd: unknown argument '%s'\n\n", argv[i]);
		kclawd_usage(stderr);
		return 2;
	}
	if ((rv = kc_config_load(&cfg, home)) != 0 ||
	    (rv = orch_options_load(&opt, &cfg)) != 0) {
		fprintf(stderr, "kclawd: %s\n", kc_lasterr());
		return 1;
	}
	if (http != NULL)
		kc_strlcpy(cfg.http_url, http, sizeof(cfg.http_url));
	/* tcp:// without a token, or a dashboard off loopback: refuse to
	 * start rather than serve strangers (docs/security.md). */
	if ((rv = orch_security_check(&cfg)) != 0) {
		fprintf(stderr, "kclawd: %s\n", kc_lasterr());
		return 1;
	}
	if ((rv = orch_open(&kclawd_orch, &opt)) != 0) {
		fprintf(stderr, "kclawd: cannot start: %s\n",
		    *kc_lasterr() ? kc_lasterr() : kc_strerror(rv));
		return 1;
	}
	if (cfg.http_url[0] != '\0') {
		/*
		 * The dashboard is an API client of this very process, on its
		 * own threads: it never touches the loop's state, so the loop
		 * stays single-threaded.
		 */
		mon_opts mo = {.http_url = cfg.http_url,
		    .api_url = cfg.api_url,
		    .events_url = cfg.events_url,
		    .token = cfg.token,
		    .config = &cfg};
		if ((rv = mon_start(&dashboard, &mo)) != 0) {
			fprintf(
			    stderr, "kclawd: dashboard: %s\n", kc_lasterr());
			orch_close(kclawd_orch);
			return 1;
		}
		KC_INFO("dashboard on %s", cfg.http_url);
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = kclawd_on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	KC_INFO("listening: api %s, events %s, work %s; memory: %s",
	    cfg.api_url, cfg.events_url, cfg.work_url, opt.memory->name);
	/* systemd's Type=notify and WatchdogSec=: fed only while kclawd
	 * answers its own Health (notify.c). */
	if (orch_notify_start(&notify, &cfg) != 0)
		KC_WARN("kclawd: %s", kc_lasterr());
	rv = orch_run(kclawd_orch);
	orch_notify_stop(notify);
	mon_stop(dashboard);
	orch_close(kclawd_orch);
	KC_INFO("stopped");
	return rv == 0 ? 0 : 1;
}
