/*
 * kclawd.c - the orchestrator daemon: `kclawd [--home DIR]`.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kc_err.h"
#include "kc_log.h"
#include "orch.h"

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
	    "usage: kclawd [--home DIR]\n\n"
	    "The kclaw orchestrator: task state machines, scheduler, API "
	    "and events.\nIt listens on the API, events and work addresses "
	    "of the deployment in DIR\n($KCLAW_HOME, else ./.kclaw) and "
	    "resumes every unfinished task found in its\nstore. SIGINT or "
	    "SIGTERM stop it cleanly. `kclaw up` starts and supervises it.\n");
}

int
main(int argc, char **argv)
{
	const char *home = NULL;
	kc_config cfg;
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
		fprintf(stderr, "kclawd: unknown argument '%s'\n\n", argv[i]);
		kclawd_usage(stderr);
		return 2;
	}
	if ((rv = kc_config_load(&cfg, home)) != 0 ||
	    (rv = orch_options_load(&opt, &cfg)) != 0) {
		fprintf(stderr, "kclawd: %s\n", kc_lasterr());
		return 1;
	}
	if ((rv = orch_open(&kclawd_orch, &opt)) != 0) {
		fprintf(stderr, "kclawd: cannot start: %s\n",
		    *kc_lasterr() ? kc_lasterr() : kc_strerror(rv));
		return 1;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = kclawd_on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	KC_INFO("listening: api %s, events %s, work %s; memory: %s",
	    cfg.api_url, cfg.events_url, cfg.work_url, opt.memory->name);
	rv = orch_run(kclawd_orch);
	orch_close(kclawd_orch);
	KC_INFO("stopped");
	return rv == 0 ? 0 : 1;
}
