/*
 * llm.c - the client seam, configuration and the helpers every provider
 * shares (request hash, recording names). See llm.h.
 */
#include "llm.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kc_err.h"
#include "kc_util.h"

#define LLM_OPENAI_BASE_URL "https://api.openai.com/v1"
#define LLM_ANTHROPIC_BASE_URL "https://api.anthropic.com"

struct llm_client {
	const llm_provider_ops *ops;
	void *state;
};

void
llm_response_free(llm_response *r)
{
	if (r == NULL)
		return;
	free(r->content);
	free(r->exchange_id);
	free(r->finish_reason);
	memset(r, 0, sizeof(*r));
}

/* ------------------------------------------------------- configuration */

void
llm_config_default(llm_config *c)
{
	memset(c, 0, sizeof(*c));
	kc_strlcpy(c->base_url, LLM_OPENAI_BASE_URL, sizeof(c->base_url));
	c->temperature = 0.7;
	c->top_p = -1;
	c->seed = -1;
	c->max_tokens = 8192;
	c->max_tokens_cap = 32768;
	kc_strlcpy(c->api_version, "2024-10-21", sizeof(c->api_version));
	kc_strlcpy(
	    c->anthropic_version, "2023-06-01", sizeof(c->anthropic_version));
	c->timeout_ms = 300000;
	c->max_tries = 5;
	c->backoff_ms = 1000;
	c->backoff_max_ms = 30000;
	c->retry_after_max_ms = 120000;
}

/* ------------------------------------------------------------ profiles */

void
llm_profile_for(const char *model, llm_profile *out)
{
	static const char *const reasoning[] = {"gpt-5*", "o1*", "o3*", "o4*"};
	const char *name = strrchr(model, '/');
	size_t i;

	name = name != NULL ? name + 1 : model;
	memset(out, 0, sizeof(*out));
	/* Claude models: the Messages API takes temperature and top_p (no
	 * seed, no response_format); reasoning_effort asks for thinking. */
	if (fnmatch("claude*", name, FNM_CASEFOLD) == 0) {
		out->temperature = true;
		out->top_p = true;
		out->reasoning_effort = true;
		out->context_window = 200000;
		kc_strlcpy(out->name, "anthropic", sizeof(out->name));
		return;
	}
	for (i = 0; i < KC_ARRAY_LEN(reasoning); i++) {
		if (fnmatch(reasoning[i], name, FNM_CASEFOLD) == 0) {
			/* gpt-5-chat-* is the non-reasoning chat model. */
			if (strncasecmp(name, "gpt-5-chat", 10) == 0)
				break;
			out->max_completion_tokens = true;
			out->reasoning_effort = true;
			out->seed = true;
			out->response_format = true;
			kc_strlcpy(
			    out->name, "openai-reasoning", sizeof(out->name));
			return;
		}
	}
	out->temperature = true;
	out->top_p = true;
	out->seed = true;
	out->response_format = true;
	kc_strlcpy(out->name, "classic", sizeof(out->name));
}

static int
llm_profile_bool(const cJSON *o, const char *key, const char *where, bool *dst)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	if (v == NULL)
		return 0;
	if (!cJSON_IsBool(v))
		return kc_seterr(KC_EINVAL,
		    "\"llm\".\"profiles\".\"%s\".\"%s\" must be true or false",
		    where, key);
	*dst = cJSON_IsTrue(v);
	return 0;
}

int
llm_profile_apply(llm_profile *p, const char *model, const cJSON *profiles)
{
	static const char *const known[] = {"temperature", "top_p",
	    "max_completion_tokens", "reasoning_effort", "seed",
	    "response_format", "context_window"};
	const cJSON *e, *k, *v;
	size_t i;
	int rv;

	if (profiles == NULL)
		return 0;
	if (!cJSON_IsObject(profiles))
		return kc_seterr(KC_EINVAL,
		    "\"llm\".\"profiles\" must be an object of model-name "
		    "globs, e.g. {\"gpt-oss*\": {\"temperature\": false}}");
	cJSON_ArrayForEach(e, profiles)
	{
		if (!cJSON_IsObject(e))
			return kc_seterr(KC_EINVAL,
			    "\"llm\".\"profiles\".\"%s\" must be an object",
			    e->string);
		cJSON_ArrayForEach(k, e)
		{
			for (i = 0; i < KC_ARRAY_LEN(known); i++)
				if (strcmp(k->string, known[i]) == 0)
					break;
			if (i == KC_ARRAY_LEN(known))
				return kc_seterr(KC_EINVAL,
				    "\"llm\".\"profiles\".\"%s\": unknown "
				    "field "
				    "\"%s\"; known: temperature, top_p, "
				    "max_completion_tokens, reasoning_effort, "
				    "seed, response_format (true/false), "
				    "context_window (tokens)",
				    e->string, k->string);
		}
		if (fnmatch(e->string, model, FNM_CASEFOLD) != 0)
			continue;
		if ((rv = llm_profile_bool(
		         e, "temperature", e->string, &p->temperature)) != 0 ||
		    (rv = llm_profile_bool(e, "top_p", e->string, &p->top_p)) !=
		        0 ||
		    (rv = llm_profile_bool(e, "max_completion_tokens",
		         e->string, &p->max_completion_tokens)) != 0 ||
		    (rv = llm_profile_bool(e, "reasoning_effort", e->string,
		         &p->reasoning_effort)) != 0 ||
		    (rv = llm_profile_bool(e, "seed", e->string, &p->seed)) !=
		        0 ||
		    (rv = llm_profile_bool(e, "response_format", e->string,
		         &p->response_format)) != 0)
			return rv;
		v = cJSON_GetObjectItemCaseSensitive(e, "context_window");
		if (v != NULL) {
			if (!cJSON_IsNumber(v) || v->valuedouble < 0 ||
			    v->valuedouble > 1e9)
				return kc_seterr(KC_EINVAL,
				    "\"llm\".\"profiles\".\"%s\"."
				    "\"context_window\" must be a number of "
				    "tokens",
				    e->string);
			p->context_window = (unsigned)v->valuedouble;
		}
		snprintf(p->name, sizeof(p->name), "%.31s", e->string);
		return 0;
	}
	return 0;
}

unsigned
llm_estimate_tokens(size_t bytes)
{
	return (unsigned)((bytes * 2 + 6) / 7);
}

/* The API style a base URL implies when "api" is not configured. */
static llm_api
llm_api_guess(const char *url)
{
	if (strstr(url, ".openai.azure.com") != NULL ||
	    strstr(url, ".cognitiveservices.azure.com") != NULL ||
	    strstr(url, "/openai/deployments/") != NULL)
		return LLM_API_AZURE;
	if (strstr(url, ":11434") != NULL)
		return LLM_API_OLLAMA;
	if (strstr(url, "://api.anthropic.com") != NULL)
		return LLM_API_ANTHROPIC;
	return LLM_API_OPENAI;
}

const char *
llm_api_name(llm_api api)
{
	switch (api) {
	case LLM_API_AZURE: return "azure";
	case LLM_API_OLLAMA: return "ollama";
	case LLM_API_ANTHROPIC: return "anthropic";
	default: return "openai";
	}
}

static int
llm_api_parse(const char *v, llm_api *out)
{
	if (strcmp(v, "openai") == 0)
		*out = LLM_API_OPENAI;
	else if (strcmp(v, "azure") == 0)
		*out = LLM_API_AZURE;
	else if (strcmp(v, "ollama") == 0)
		*out = LLM_API_OLLAMA;
	else if (strcmp(v, "anthropic") == 0)
		*out = LLM_API_ANTHROPIC;
	else
		return kc_seterr(KC_EINVAL,
		    "LLM api '%s' is unknown (the provider setting); use "
		    "openai (any "
		    "OpenAI-compatible server), azure, ollama or anthropic",
		    v);
	return 0;
}

/* Reads a key file: the first line, surrounding white space removed. */
static int
llm_read_key_file(const char *path, char *dst, size_t n)
{
	char *text = NULL, *s, *e;
	size_t len;
	int rv;

	if ((rv = kc_read_file(path, 64 << 10, &text, &len)) != 0)
		return kc_seterr(rv,
		    "cannot read the LLM API key file %s (%s); fix "
		    "KCLAW_LLM_API_KEY_FILE or \"llm\".\"api_key_file\"",
		    path, kc_strerror(rv));
	for (s = text; *s != '\0' && isspace((unsigned char)*s); s++)
		;
	for (e = s; *e != '\0' && *e != '\n' && *e != '\r'; e++)
		;
	while (e > s && isspace((unsigned char)e[-1]))
		e--;
	*e = '\0';
	if (!kc_strlcpy(dst, s, n)) {
		free(text);
		return kc_seterr(
		    KC_EINVAL, "the API key in %s is too long", path);
	}
	free(text);
	return 0;
}

static int
llm_parse_uint(const char *name, const char *v, unsigned *out)
{
	char *end;
	unsigned long x;

	errno = 0;
	x = strtoul(v, &end, 10);
	if (errno != 0 || end == v || *end != '\0' || x > 0xffffffffUL)
		return kc_seterr(KC_EINVAL,
		    "%s='%s' is not a non-negative integer", name, v);
	*out = (unsigned)x;
	return 0;
}

static int
llm_parse_double(const char *name, const char *v, double *out)
{
	char *end;

	errno = 0;
	*out = strtod(v, &end);
	if (errno != 0 || end == v || *end != '\0')
		return kc_seterr(KC_EINVAL, "%s='%s' is not a number", name, v);
	return 0;
}

static void
llm_json_str(const cJSON *o, const char *key, char *dst, size_t n)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	if (cJSON_IsString(v) && v->valuestring != NULL)
		kc_strlcpy(dst, v->valuestring, n);
}

static void
llm_json_uint(const cJSON *o, const char *key, unsigned *dst)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	if (cJSON_IsNumber(v) && v->valuedouble >= 0)
		*dst = (unsigned)v->valuedouble;
}

static int
llm_config_json(
    llm_config *c, const kc_config *kc, bool *api_set, cJSON **profiles)
{
	char *text = NULL, key_file[KC_PATH_MAX] = "", api[16] = "";
	const cJSON *o, *v;
	cJSON *root;
	size_t len;
	int rv;

	rv = kc_read_file(kc->config_path, 1 << 20, &text, &len);
	if (rv == KC_ENOENT) {
		kc_clearerr();
		return 0;
	}
	if (rv != 0)
		return rv;
	root = cJSON_ParseWithLength(text, len);
	free(text);
	if (root == NULL)
		return kc_seterr(
		    KC_EINVAL, "%s is not valid JSON; fix it", kc->config_path);
	o = cJSON_GetObjectItemCaseSensitive(root, "llm");
	if (o != NULL && !cJSON_IsObject(o)) {
		cJSON_Delete(root);
		return kc_seterr(KC_EINVAL,
		    "%s: \"llm\" must be an object such as {\"model\": "
		    "\"...\"}",
		    kc->config_path);
	}
	if (o != NULL) {
		llm_json_str(o, "base_url", c->base_url, sizeof(c->base_url));
		llm_json_str(o, "model", c->model, sizeof(c->model));
		llm_json_str(o, "api_key", c->api_key, sizeof(c->api_key));
		llm_json_str(o, "api_key_file", key_file, sizeof(key_file));
		llm_json_str(o, "record", c->record_dir, sizeof(c->record_dir));
		llm_json_str(o, "replay", c->replay_dir, sizeof(c->replay_dir));
		/* "provider" names the same choice as "api". */
		llm_json_str(o, "provider", api, sizeof(api));
		llm_json_str(o, "api", api, sizeof(api));
		llm_json_str(o, "anthropic_version", c->anthropic_version,
		    sizeof(c->anthropic_version));
		llm_json_str(
		    o, "api_version", c->api_version, sizeof(c->api_version));
		llm_json_str(o, "reasoning_effort", c->reasoning_effort,
		    sizeof(c->reasoning_effort));
		llm_json_str(o, "response_format", c->response_format,
		    sizeof(c->response_format));
		v = cJSON_GetObjectItemCaseSensitive(o, "temperature");
		if (cJSON_IsNumber(v))
			c->temperature = v->valuedouble;
		v = cJSON_GetObjectItemCaseSensitive(o, "top_p");
		if (cJSON_IsNumber(v))
			c->top_p = v->valuedouble;
		v = cJSON_GetObjectItemCaseSensitive(o, "seed");
		if (cJSON_IsNumber(v))
			c->seed = (long long)v->valuedouble;
		llm_json_uint(o, "max_tokens", &c->max_tokens);
		llm_json_uint(o, "max_tokens_cap", &c->max_tokens_cap);
		llm_json_uint(o, "context_window", &c->profile.context_window);
		llm_json_uint(o, "timeout_ms", &c->timeout_ms);
		llm_json_uint(o, "max_tries", &c->max_tries);
		llm_json_uint(o, "backoff_ms", &c->backoff_ms);
		v = cJSON_GetObjectItemCaseSensitive(o, "replay_strict");
		if (cJSON_IsBool(v))
			c->replay_strict = cJSON_IsTrue(v);
		v = cJSON_GetObjectItemCaseSensitive(o, "profiles");
		if (v != NULL &&
		    (*profiles = cJSON_Duplicate(v, true)) == NULL) {
			cJSON_Delete(root);
			return KC_ENOMEM;
		}
	}
	cJSON_Delete(root);
	if (api[0] != '\0') {
		if ((rv = llm_api_parse(api, &c->api)) != 0)
			return rv;
		*api_set = true;
	}
	if (key_file[0] != '\0')
		return llm_read_key_file(
		    key_file, c->api_key, sizeof(c->api_key));
	return 0;
}

/* The environment's part of llm_config_load; api_set tells whether an
 * API style was configured. */
static int
llm_config_env(llm_config *c, bool *api_set)
{
	unsigned window = 0;
	const char *v;
	int rv;

	if ((v = getenv("KCLAW_LLM_PROVIDER")) != NULL && *v != '\0') {
		if ((rv = llm_api_parse(v, &c->api)) != 0)
			return rv;
		*api_set = true;
	}
	if ((v = getenv("KCLAW_LLM_API")) != NULL && *v != '\0') {
		if ((rv = llm_api_parse(v, &c->api)) != 0)
			return rv;
		*api_set = true;
	}
	if ((v = getenv("KCLAW_LLM_REASONING_EFFORT")) != NULL &&
	    !kc_strlcpy(c->reasoning_effort, v, sizeof(c->reasoning_effort)))
		return kc_seterr(KC_EINVAL,
		    "KCLAW_LLM_REASONING_EFFORT='%s' is too long", v);
	if ((v = getenv("KCLAW_LLM_CONTEXT_WINDOW")) != NULL && *v != '\0') {
		if ((rv = llm_parse_uint(
		         "KCLAW_LLM_CONTEXT_WINDOW", v, &window)) != 0)
			return rv;
		c->profile.context_window = window;
	}
	return 0;
}

int
llm_config_load(llm_config *c, const kc_config *kc)
{
	cJSON *profiles = NULL;
	unsigned window;
	bool api_set = false;
	const char *v;
	int rv;

	llm_config_default(c);
	if (kc != NULL &&
	    (rv = llm_config_json(c, kc, &api_set, &profiles)) != 0) {
		cJSON_Delete(profiles);
		return rv;
	}
	if ((rv = llm_config_env(c, &api_set)) != 0) {
		cJSON_Delete(profiles);
		return rv;
	}
	if ((v = getenv("KCLAW_LLM_BASE_URL")) != NULL && *v != '\0')
		kc_strlcpy(c->base_url, v, sizeof(c->base_url));
	if ((v = getenv("KCLAW_LLM_MODEL")) != NULL && *v != '\0')
		kc_strlcpy(c->model, v, sizeof(c->model));
	if ((v = getenv("KCLAW_LLM_API_KEY_FILE")) != NULL && *v != '\0' &&
	    (rv = llm_read_key_file(v, c->api_key, sizeof(c->api_key))) != 0)
		return rv;
	if ((v = getenv("KCLAW_LLM_API_KEY")) != NULL && *v != '\0' &&
	    !kc_strlcpy(c->api_key, v, sizeof(c->api_key)))
		return kc_seterr(KC_EINVAL, "KCLAW_LLM_API_KEY is too long");
	if ((v = getenv("KCLAW_LLM_TEMPERATURE")) != NULL && *v != '\0' &&
	    (rv = llm_parse_double(
	         "KCLAW_LLM_TEMPERATURE", v, &c->temperature)) != 0)
		return rv;
	if ((v = getenv("KCLAW_LLM_MAX_TOKENS")) != NULL && *v != '\0' &&
	    (rv = llm_parse_uint("KCLAW_LLM_MAX_TOKENS", v, &c->max_tokens)) !=
	        0)
		return rv;
	if ((v = getenv("KCLAW_LLM_TIMEOUT_MS")) != NULL && *v != '\0' &&
	    (rv = llm_parse_uint("KCLAW_LLM_TIMEOUT_MS", v, &c->timeout_ms)) !=
	        0)
		return rv;
	if ((v = getenv("KCLAW_LLM_MAX_TRIES")) != NULL && *v != '\0' &&
	    (rv = llm_parse_uint("KCLAW_LLM_MAX_TRIES", v, &c->max_tries)) != 0)
		return rv;
	if ((v = getenv("KCLAW_LLM_BACKOFF_MS")) != NULL && *v != '\0' &&
	    (rv = llm_parse_uint("KCLAW_LLM_BACKOFF_MS", v, &c->backoff_ms)) !=
	        0)
		return rv;
	if ((v = getenv("KCLAW_LLM_RECORD")) != NULL && *v != '\0')
		kc_strlcpy(c->record_dir, v, sizeof(c->record_dir));
	if ((v = getenv("KCLAW_LLM_REPLAY")) != NULL && *v != '\0')
		kc_strlcpy(c->replay_dir, v, sizeof(c->replay_dir));
	if ((v = getenv("KCLAW_LLM_REPLAY_STRICT")) != NULL && *v != '\0')
		c->replay_strict = strcmp(v, "0") != 0;
	if (c->max_tries == 0)
		c->max_tries = 1;
	if (c->timeout_ms == 0) {
		cJSON_Delete(profiles);
		return kc_seterr(KC_EINVAL,
		    "the LLM timeout must be positive (KCLAW_LLM_TIMEOUT_MS)");
	}
	if (!api_set)
		c->api = llm_api_guess(c->base_url);
	/* Anthropic chosen by name with no base URL of its own: its API. */
	if (c->api == LLM_API_ANTHROPIC &&
	    strcmp(c->base_url, LLM_OPENAI_BASE_URL) == 0)
		kc_strlcpy(
		    c->base_url, LLM_ANTHROPIC_BASE_URL, sizeof(c->base_url));
	/* The built-in profile, the configured window, then the overrides. */
	window = c->profile.context_window;
	llm_profile_for(c->model, &c->profile);
	if (window > 0)
		c->profile.context_window = window;
	rv = llm_profile_apply(&c->profile, c->model, profiles);
	cJSON_Delete(profiles);
	if (c->max_tokens_cap < c->max_tokens)
		c->max_tokens_cap = c->max_tokens;
	return rv;
}

/* -------------------------------------------------------------- client */

int
llm_client_new(llm_client **out, const llm_provider_ops *ops, void *state)
{
	llm_client *c;

	if ((c = calloc(1, sizeof(*c))) == NULL) {
		ops->close(state);
		return KC_ENOMEM;
	}
	c->ops = ops;
	c->state = state;
	*out = c;
	return 0;
}

int
llm_open(llm_client **out, const llm_config *cfg)
{
	llm_client *http;
	int rv;

	if (cfg->replay_dir[0] != '\0') {
		llm_limits lim = {cfg->profile.context_window, cfg->max_tokens,
		    cfg->max_tokens_cap};
		return llm_replay_open_limits(
		    out, cfg->replay_dir, cfg->replay_strict, &lim);
	}
	if ((rv = llm_http_open(&http, cfg)) != 0)
		return rv;
	if (cfg->record_dir[0] == '\0') {
		*out = http;
		return 0;
	}
	return llm_record_open(out, http, cfg->record_dir, cfg);
}

const char *
llm_provider_name(const llm_client *c)
{
	return c->ops->name;
}

int
llm_chat(llm_client *c, const llm_request *req, llm_response *resp)
{
	memset(resp, 0, sizeof(*resp));
	if (req->nmessages == 0)
		return kc_seterr(KC_EINVAL, "an LLM request needs a message");
	return c->ops->chat(c->state, req, resp);
}

void
llm_get_limits(llm_client *c, llm_limits *out)
{
	memset(out, 0, sizeof(*out));
	if (c->ops->limits != NULL)
		c->ops->limits(c->state, out);
}

void
llm_close(llm_client *c)
{
	if (c == NULL)
		return;
	c->ops->close(c->state);
	free(c);
}

/* ------------------------------------------------------------- helpers */

/* A message's text without its LLM_CACHE_BREAK lines (malloc'd). */
static char *
llm_without_cache_break(const char *text)
{
	size_t n = strlen(LLM_CACHE_BREAK);
	const char *p = text, *m;
	kc_str s = {0};

	while ((m = strstr(p, LLM_CACHE_BREAK)) != NULL) {
		if (kc_str_appendn(&s, p, (size_t)(m - p)) != 0) {
			kc_str_free(&s);
			return NULL;
		}
		p = m + n;
		if (*p == '\n')
			p++;
	}
	if (kc_str_append(&s, p) != 0) {
		kc_str_free(&s);
		return NULL;
	}
	return s.buf != NULL ? kc_str_take(&s) : strdup("");
}

cJSON *
llm_messages_json(const llm_request *req)
{
	cJSON *arr, *m;
	char *text;

	if ((arr = cJSON_CreateArray()) == NULL)
		return NULL;
	for (size_t i = 0; i < req->nmessages; i++) {
		const char *c = req->messages[i].content;
		text = strstr(c, LLM_CACHE_BREAK) != NULL
		    ? llm_without_cache_break(c)
		    : NULL;
		if ((m = cJSON_CreateObject()) == NULL ||
		    !cJSON_AddItemToArray(arr, m) ||
		    cJSON_AddStringToObject(m, "role", req->messages[i].role) ==
		        NULL ||
		    (text == NULL && c != NULL &&
		        strstr(c, LLM_CACHE_BREAK) != NULL) ||
		    cJSON_AddStringToObject(m, "content", text ? text : c) ==
		        NULL) {
			free(text);
			cJSON_Delete(arr);
			return NULL;
		}
		free(text);
	}
	return arr;
}

int
llm_request_hash(const llm_request *req, char out[65])
{
	cJSON *arr;
	char *text;

	if ((arr = llm_messages_json(req)) == NULL)
		return KC_ENOMEM;
	text = cJSON_PrintUnformatted(arr);
	cJSON_Delete(arr);
	if (text == NULL)
		return KC_ENOMEM;
	kc_sha256_hex(text, strlen(text), out);
	cJSON_free(text);
	return 0;
}

int
llm_recording_name(const llm_request *req, char *out, size_t n)
{
	kc_str s = {0};
	const char *p, *start;
	char hash[65];
	size_t i, clen;
	int rv;

	if (req->key == NULL || req->key[0] == '\0') {
		if ((rv = llm_request_hash(req, hash)) != 0)
			return rv;
		snprintf(out, n, "by-hash/%s", hash);
		return 0;
	}
	for (p = req->key;;) {
		start = p;
		while (*p != '\0' && *p != '/')
			p++;
		clen = (size_t)(p - start);
		if (clen == 0 || (clen == 1 && start[0] == '.') ||
		    (clen == 2 && start[0] == '.' && start[1] == '.')) {
			kc_str_free(&s);
			return kc_seterr(KC_EINVAL,
			    "replay key '%s' has an empty, '.' or '..' part; "
			    "use \"<task>/<role>/<n>\"",
			    req->key);
		}
		if (s.len > 0 && (rv = kc_str_append(&s, "/")) != 0)
			goto fail;
		for (i = 0; i < clen; i++) {
			char ch = start[i];
			if (!isalnum((unsigned char)ch) && ch != '.' &&
			    ch != '_' && ch != '-')
				ch = '_';
			if ((rv = kc_str_appendn(&s, &ch, 1)) != 0)
				goto fail;
		}
		if (*p == '\0')
			break;
		p++;
	}
	if (req->attempt > 0 &&
	    (rv = kc_str_printf(&s, ".reask%u", req->attempt)) != 0)
		goto fail;
	if (!kc_strlcpy(out, s.buf, n)) {
		kc_str_free(&s);
		return kc_seterr(
		    KC_ENOSPC, "replay key '%s' is too long", req->key);
	}
	kc_str_free(&s);
	return 0;
fail:
	kc_str_free(&s);
	return rv;
}
