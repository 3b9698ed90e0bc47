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
 *
 * "prices" (kclaw.json only) prices LLM tokens for the reports, in USD per
 * million tokens, per model-name glob (fnmatch; the first that matches
 * wins, in file order):
 *   "prices": {"gpt-5*": {"prompt": 1.25, "completion": 10,
 *              "cached_prompt": 0.125, "reasoning": 10}}
 * cached_prompt defaults to prompt, reasoning to completion, cache_write
 * (prompt tokens written to a provider's cache, Anthropic's
 * cache_creation_input_tokens) to 1.25 x prompt, Anthropic's 5-minute rate.
 */
#ifndef KC_CONFIG_H
#define KC_CONFIG_H

#include <stdint.h>

#define KC_PATH_MAX 1024
#define KC_URL_MAX 512
#define KC_PRICES_MAX 32
#define KC_BLOB_CACHE_DEFAULT ((uint64_t)16 << 30) /* 16 GiB */

/* USD per million tokens of the models whose name matches the glob. */
typedef struct {
	char model[128];
	double prompt, completion, cached_prompt, reasoning, cache_write;
} kc_price;

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
	/* A worker's cache of fetched blobs (<home>/cache/blobs): its bound in
	 * bytes, "blob_cache_bytes" / KCLAW_BLOB_CACHE_BYTES. */
	uint64_t blob_cache_bytes;
	kc_price prices[KC_PRICES_MAX]; /* kclaw.json's "prices" */
	unsigned nprices;
} kc_config;

/* Fills cfg from defaults, kclaw.json, then the environment. home may be
 * NULL (use $KCLAW_HOME or ./.kclaw). Does not create anything. */
int kc_config_load(kc_config *cfg, const char *home);
/* The price of model: the first of cfg's prices whose glob matches it, or
 * NULL when none does (or model is NULL or empty). Points into cfg. */
const kc_price *kc_config_price(const kc_config *cfg, const char *model);
/* The USD cost of tokens at price p: cached (of prompt) at cached_prompt,
 * cache_write (of prompt) at cache_write, reasoning (of completion) at
 * reasoning, the rest at prompt and completion. */
double kc_price_usd(const kc_price *p, uint64_t prompt, uint64_t completion,
    uint64_t reasoning, uint64_t cached, uint64_t cache_write);
/* Creates home, run/ and db/ with owner-only permissions. */
int kc_config_prepare(const kc_config *cfg);

#endif
