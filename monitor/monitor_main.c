/*
 * monitor_main.c - kclaw-monitor: the dashboard and metrics as a process of
 * their own, for fleets where the orchestrator runs elsewhere.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "kc_config.h"
#include "kc_err.h"
#include "kc_log.h"
#include "monitor.h"

static volatile sig_atomic_t mon_main_stop;

static void
mon_main_signal(int sig)
{
	(void)sig;
	mon_main_stop = 1;
}

int
main(int argc, char **argv)
{
	const char *http = "http://127.0.0.1:8470", *home = NULL;
	kc_config cfg;
	mon *m;
	int rv;

	kc_log_init("kclaw-monitor");
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--http") == 0 && i + 1 < argc) {
			http = argv[++i];
		} else if (strcmp(argv[i], "--home") == 0 && i + 1 < argc) {
			home = argv[++i];
		} else {
			fprintf(stderr,
			    "usage: kclaw-monitor [--http http://HOST:PORT] "
			    "[--home DIR]\n\nServes the dashboard (/), the "
			    "JSON "
			    "API (/api/...), live events (ws://HOST:PORT/ws) "
			    "and Prometheus metrics (/metrics).\n");
			return strcmp(argv[i], "--help") == 0 ? 0 : 2;
		}
	}
	if ((rv = kc_config_load(&cfg, home)) != 0) {
		fprintf(stderr, "kclaw-monitor: %s\n", kc_lasterr());
		return 1;
	}
	mon_opts o = {.http_url = http,
	    .api_url = cfg.api_url,
	    .events_url = cfg.events_url,
	    .token = cfg.token,
	    .config = &cfg};
	if ((rv = mon_start(&m, &o)) != 0) {
		fprintf(stderr, "kclaw-monitor: %s\n", kc_lasterr());
		return 1;
	}
	signal(SIGINT, mon_main_signal);
	signal(SIGTERM, mon_main_signal);
	KC_INFO("dashboard on %s (orchestrator API %s)", http, cfg.api_url);
	while (!mon_main_stop)
		pause();
	mon_stop(m);
	return 0;
}
