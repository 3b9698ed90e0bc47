/*
 * supervisor.h - `kclaw up`: starts a single-host deployment (kclawd, the
 * agent processes, one sandbox per visible GPU), restarts any process that
 * dies with exponential backoff, reports its process table and the
 * PROCESS_* events to kclawd (rpc Supervise), and stops everything cleanly.
 */
#ifndef ORCH_SUPERVISOR_H
#define ORCH_SUPERVISOR_H

#include <signal.h>
#include <stdint.h>

#include "kc_config.h"

#define SUP_NROLES 8

typedef struct {
	kc_config cfg;
	/* The binaries; defaults: kclawd, kclaw-agent and kclaw-sandbox
	 * beside the running program, or $KCLAW_ORCH_BIN, $KCLAW_AGENT_BIN,
	 * $KCLAW_SANDBOX_BIN. */
	char orch_bin[KC_PATH_MAX];
	char agent_bin[KC_PATH_MAX];
	char sandbox_bin[KC_PATH_MAX];
	unsigned agents[SUP_NROLES]; /* processes per Kclaw__Role (1..6) */
	int gpus;                    /* sandboxes: one per GPU, at least 1 */
	uint32_t backoff_min_ms, backoff_max_ms;
	/* The watchdog: kclawd is asked for Health every health_interval_ms
	 * (KCLAW_UP_HEALTH_MS, "up"."health_interval_ms"; default 5000) and
	 * killed and restarted after health_misses (KCLAW_UP_HEALTH_MISSES,
	 * "up"."health_misses"; default 3) unanswered or unhealthy ones in
	 * a row; 0 turns it off. */
	uint32_t health_interval_ms, health_misses;
} sup_options;

/* Defaults, then kclaw.json's "up": {"agents": {"planner": 2, ...}}. */
int sup_options_load(sup_options *opt, const kc_config *cfg);
/* Sets the count of one role by name ("all" sets every agent role). */
int sup_set_agents(sup_options *opt, const char *role, unsigned n);

/* GPUs visible on this host without touching libcuda:
 * /proc/driver/nvidia/gpus, else `nvidia-smi -L`; 0 when none. */
int sup_gpu_count(void);

/*
 * Runs the deployment until *stop becomes non-zero (a signal handler sets
 * it), then stops every process: SIGTERM, and SIGKILL after a grace time.
 * Returns 0, or an error when kclawd could not be started at all.
 */
int sup_run(const sup_options *opt, volatile sig_atomic_t *stop);

#endif
