#include "kc_config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kc_err.h"
#include "kc_util.h"

static void
kc_config_str(const cJSON *root, const char *key, char *dst, size_t n)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);

	if (cJSON_IsString(v) && v->valuestring != NULL)
		kc_strlcpy(dst, v->valuestring, n);
}

static void
kc_config_env(const char *name, char *dst, size_t n)
{
	const char *v = getenv(name);

	if (v != NULL && *v != '\0')
		kc_strlcpy(dst, v, n);
}

/* A size in bytes (a whole number >= 1 MiB), when v is present. */
static int
kc_config_bytes(kc_config *cfg, const cJSON *v, const char *what)
{
	if (v == NULL)
		return 0;
	if (!cJSON_IsNumber(v) || v->valuedouble < (1 << 20) ||
	    v->valuedouble > 9e18 ||
	    v->valuedouble != (double)(uint64_t)v->valuedouble)
		return kc_seterr(KC_EINVAL,
		    "%s must be a whole number of bytes, at least 1048576 "
		    "(1 MiB), e.g. 17179869184 for 16 GiB (in %s or the "
		    "environment)",
		    what, cfg->config_path);
	cfg->blob_cache_bytes = (uint64_t)v->valuedouble;
	return 0;
}

/* One price's field: absent is def, else a number >= 0 (USD per million
 * tokens). */
static int
kc_config_rate(const kc_config *cfg, const cJSON *entry, const char *glob,
    const char *key, double def, double *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(entry, key);

	*out = def;
	if (v == NULL && def >= 0)
		return 0;
	if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0) ||
	    !isfinite(v->valuedouble))
		return kc_seterr(KC_EINVAL,
		    "%s: prices[\"%s\"].%s must be a number >= 0 (USD per "
		    "million tokens)%s; fix it",
		    cfg->config_path, glob, key,
		    def < 0 ? ", and prompt and completion are required" : "");
	*out = v->valuedouble;
	return 0;
}

/* kclaw.json's "prices": {"<model glob>": {"prompt": ..., ...}, ...}. */
static int
kc_config_prices(kc_config *cfg, const cJSON *root)
{
	const cJSON *prices = cJSON_GetObjectItemCaseSensitive(root, "prices");
	const cJSON *e;
	int rv;

	if (prices == NULL)
		return 0;
	if (!cJSON_IsObject(prices))
		return kc_seterr(KC_EINVAL,
		    "%s: \"prices\" must be an object {\"<model glob>\": "
		    "{\"prompt\": USD, \"completion\": USD, ...}} (per "
		    "million tokens); fix it",
		    cfg->config_path);
	cJSON_ArrayForEach(e, prices)
	{
		kc_price *p = &cfg->prices[cfg->nprices];
		if (cfg->nprices == KC_PRICES_MAX)
			return kc_seterr(KC_EINVAL,
			    "%s: more than %d prices; merge some with globs",
			    cfg->config_path, KC_PRICES_MAX);
		if (!cJSON_IsObject(e) ||
		    !kc_strlcpy(p->model, e->string, sizeof(p->model)))
			return kc_seterr(KC_EINVAL,
			    "%s: prices[\"%.64s\"] must be an object with "
			    "prompt and completion, under a model glob of "
			    "at most %zu characters; fix it",
			    cfg->config_path, e->string, sizeof(p->model) - 1);
		if ((rv = kc_config_rate(
		         cfg, e, p->model, "prompt", -1, &p->prompt)) != 0 ||
		    (rv = kc_config_rate(cfg, e, p->model, "completion", -1,
		         &p->completion)) != 0 ||
		    (rv = kc_config_rate(cfg, e, p->model, "cached_prompt",
		         p->prompt, &p->cached_prompt)) != 0 ||
		    (rv = kc_config_rate(cfg, e, p->model, "reasoning",
		         p->completion, &p->reasoning)) != 0 ||
		    (rv = kc_config_rate(cfg, e, p->model, "cache_write",
		         1.25 * p->prompt, &p->cache_write)) != 0)
			return rv;
		cfg->nprices++;
	}
	return 0;
}

const kc_price *
kc_config_price(const kc_config *cfg, const char *model)
{
	if (model == NULL || *model == '\0')
		return NULL;
	for (unsigned i = 0; i < cfg->nprices; i++)
		if (fnmatch(cfg->prices[i].model, model, 0) == 0)
			return &cfg->prices[i];
	return NULL;
}

double
kc_price_usd(const kc_price *p, uint64_t prompt, uint64_t completion,
    uint64_t reasoning, uint64_t cached, uint64_t cache_write)
{
	if (cached > prompt)
		cached = prompt;
	if (cache_write > prompt - cached)
		cache_write = prompt - cached;
	if (reasoning > completion)
		reasoning = completion;
	return ((double)(prompt - cached - cache_write) * p->prompt +
	           (double)cached * p->cached_prompt +
	           (double)cache_write * p->cache_write +
	           (double)(completion - reasoning) * p->completion +
	           (double)reasoning * p->reasoning) /
	    1e6;
}

int
kc_config_load(kc_config *cfg, const char *home)
{
	char *text = NULL;
	size_t len;
	int rv;

	memset(cfg, 0, sizeof(*cfg));
	if (home == NULL)
		home = getenv("KCLAW_HOME");
	if (home == NULL || *home == '\0')
		home = ".kclaw";
	if (!kc_strlcpy(cfg->home, home, sizeof(cfg->home)))
		return kc_seterr(KC_EINVAL, "KCLAW_HOME is too long");
	snprintf(cfg->run_dir, sizeof(cfg->run_dir), "%s/run", cfg->home);
	snprintf(cfg->db_dir, sizeof(cfg->db_dir), "%s/db", cfg->home);
	snprintf(cfg->config_path, sizeof(cfg->config_path), "%s/kclaw.json",
	    cfg->home);
	snprintf(cfg->api_url, sizeof(cfg->api_url), "ipc://%s/api.ipc",
	    cfg->run_dir);
	snprintf(cfg->events_url, sizeof(cfg->events_url),
	    "ipc://%s/events.ipc", cfg->run_dir);
	snprintf(cfg->work_url, sizeof(cfg->work_url), "ipc://%s/work.ipc",
	    cfg->run_dir);

	cfg->blob_cache_bytes = KC_BLOB_CACHE_DEFAULT;
	rv = kc_read_file(cfg->config_path, 1 << 20, &text, &len);
	if (rv == 0) {
		cJSON *root = cJSON_ParseWithLength(text, len);
		if (root == NULL || !cJSON_IsObject(root)) {
			cJSON_Delete(root);
			free(text);
			return kc_seterr(KC_EINVAL,
			    "%s is not a JSON object; fix or remove it",
			    cfg->config_path);
		}
		kc_config_str(
		    root, "api_url", cfg->api_url, sizeof(cfg->api_url));
		kc_config_str(root, "events_url", cfg->events_url,
		    sizeof(cfg->events_url));
		kc_config_str(
		    root, "work_url", cfg->work_url, sizeof(cfg->work_url));
		kc_config_str(root, "token", cfg->token, sizeof(cfg->token));
		kc_config_str(
		    root, "http_url", cfg->http_url, sizeof(cfg->http_url));
		rv = kc_config_prices(cfg, root);
		if (rv == 0)
			rv = kc_config_bytes(cfg,
			    cJSON_GetObjectItemCaseSensitive(
			        root, "blob_cache_bytes"),
			    "\"blob_cache_bytes\"");
		cJSON_Delete(root);
		free(text);
		if (rv != 0)
			return rv;
	} else if (rv != KC_ENOENT) {
		return rv;
	}
	kc_clearerr();
	kc_config_env("KCLAW_API_URL", cfg->api_url, sizeof(cfg->api_url));
	kc_config_env(
	    "KCLAW_EVENTS_URL", cfg->events_url, sizeof(cfg->events_url));
	kc_config_env("KCLAW_WORK_URL", cfg->work_url, sizeof(cfg->work_url));
	kc_config_env("KCLAW_TOKEN", cfg->token, sizeof(cfg->token));
	kc_config_env("KCLAW_HTTP_URL", cfg->http_url, sizeof(cfg->http_url));
	if (getenv("KCLAW_BLOB_CACHE_BYTES") &&
	    *getenv("KCLAW_BLOB_CACHE_BYTES")) {
		cJSON *n = cJSON_Parse(getenv("KCLAW_BLOB_CACHE_BYTES"));
		cJSON bad = {.type = cJSON_NULL};
		rv = kc_config_bytes(
		    cfg, n ? n : &bad, "KCLAW_BLOB_CACHE_BYTES");
		cJSON_Delete(n);
		if (rv != 0)
			return rv;
	}
	return 0;
}

int
kc_config_prepare(const kc_config *cfg)
{
	int rv;

	if ((rv = kc_mkdirs(cfg->home, 0700)) != 0 ||
	    (rv = kc_mkdirs(cfg->run_dir, 0700)) != 0 ||
	    (rv = kc_mkdirs(cfg->db_dir, 0700)) != 0)
		return rv;
	/* mkdir leaves an existing folder as it was: run/ holds the ipc
	 * sockets, and only their owner may even look them up. */
	if (chmod(cfg->run_dir, 0700) != 0)
		return kc_seterr(KC_EIO, "cannot make %s owner-only: %s",
		    cfg->run_dir, strerror(errno));
	return 0;
}
