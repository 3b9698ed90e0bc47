/*
 * kc_config.h - where a kclaw deployment lives and how its processes find
 * each other.
 *
 * Home folder: $KCLAW_HOME, else ./.kclaw (a deployment per working folder,
 * like git). Inside it: run/ (ipc sockets, pid files, mode 0700), db/ (the
 * RocksDB store), recordings/, and kclaw.json (optional configuration).
 * Each address defaults to ipc:// in run/ and can be overridden by the
 * environment (KCLAW_API_URL, KCLAW_EVENTS_URL, KCLAW_WORK_URL) or by
 * kclaw.json ("api_url", ...), e.g. with tcp://host:port for a fleet.
 * KCLAW_HTTP_URL / "http_url" (e.g. http://127.0.0.1:8470) makes kclawd
 * serve the dashboard, its JSON API and /metrics there.
 */
#ifndef KC_CONFIG_H
#define KC_CONFIG_H

#include <stdint.h>

#define KC_PATH_MAX 1024
#define KC_URL_MAX 512

typedef struct {
	char home[KC_PATH_MAX];
	char run_dir[KC_PATH_MAX];
	char db_dir[KC_PATH_MAX];
	char api_url[KC_URL_MAX];    /* orchestrator REP: the API */
	char events_url[KC_URL_MAX]; /* orchestrator PUB: events */
	char work_url[KC_URL_MAX];   /* orchestrator REP: work by pull */
	char token[128];             /* shared secret for tcp:// (optional) */
	char http_url[KC_URL_MAX];   /* dashboard + metrics; "" = none */
	char config_path[KC_PATH_MAX];
} kc_config;

/* Fills cfg from defaults, kclaw.json, then the environment. home may be
 * NULL (use $KCLAW_HOME or ./.kclaw). Does not create anything. */
int kc_config_load(kc_config *cfg, const char *home);
/* Creates home, run/ and db/ with owner-only permissions. */
int kc_config_prepare(const kc_config *cfg);

#endif
