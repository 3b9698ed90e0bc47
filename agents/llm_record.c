/*
 * llm_record.c - recordings of LLM exchanges: the record provider (wraps
 * another client and writes each exchange) and the replay provider (answers
 * from a recording). Format: docs/agents.md, "Recordings".
 *
 * One exchange is one file named by llm_recording_name: <name>.json (what the
 * record provider writes) or, written by hand, <name>.txt holding just the
 * reply's text. Replay looks the request up by its replay key and re-ask
 * number; with strict matching the recorded request hash must also equal the
 * request's, so a changed prompt is caught instead of answered.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kc_err.h"
#include "kc_util.h"
#include "llm.h"

#define LLM_RECORDING_FORMAT "kclaw-llm-exchange/1"
#define LLM_RECORDING_MAX (64u << 20)

typedef struct {
	llm_client *inner;
	char dir[KC_PATH_MAX];
	char model[128];
	double temperature;
	unsigned max_tokens;
} llm_recorder;

typedef struct {
	char dir[KC_PATH_MAX];
	bool strict;
	llm_limits limits; /* the configured ones: a replay asks as the
	                      recorded run did */
} llm_replayer;

/* ------------------------------------------------------------- record */

static void
llm_record_close(void *state)
{
	llm_recorder *r = state;

	if (r == NULL)
		return;
	llm_close(r->inner);
	free(r);
}

static cJSON *
llm_record_json(const llm_recorder *r, const llm_request *req, const char *hash,
    const llm_response *resp)
{
	cJSON *root, *rq, *msgs, *rs;

	if ((root = cJSON_CreateObject()) == NULL)
		return NULL;
	if (cJSON_AddStringToObject(root, "format", LLM_RECORDING_FORMAT) ==
	        NULL ||
	    cJSON_AddStringToObject(root, "key", req->key ? req->key : "") ==
	        NULL ||
	    cJSON_AddNumberToObject(root, "attempt", req->attempt) == NULL ||
	    cJSON_AddStringToObject(root, "request_sha256", hash) == NULL ||
	    (rq = cJSON_AddObjectToObject(root, "request")) == NULL ||
	    cJSON_AddStringToObject(rq, "model", r->model) == NULL ||
	    cJSON_AddNumberToObject(rq, "temperature", r->temperature) ==
	        NULL ||
	    cJSON_AddNumberToObject(rq, "max_tokens",
	        req->max_tokens ? req->max_tokens : r->max_tokens) == NULL ||
	    (msgs = llm_messages_json(req)) == NULL)
		goto fail;
	if (!cJSON_AddItemToObject(rq, "messages", msgs)) {
		cJSON_Delete(msgs);
		goto fail;
	}
	if ((rs = cJSON_AddObjectToObject(root, "response")) == NULL ||
	    cJSON_AddStringToObject(rs, "content", resp->content) == NULL ||
	    cJSON_AddStringToObject(rs, "finish_reason",
	        resp->finish_reason ? resp->finish_reason : "") == NULL ||
	    cJSON_AddStringToObject(rs, "provider_id",
	        resp->exchange_id ? resp->exchange_id : "") == NULL ||
	    cJSON_AddNumberToObject(
	        rs, "prompt_tokens", (double)resp->prompt_tokens) == NULL ||
	    cJSON_AddNumberToObject(rs, "completion_tokens",
	        (double)resp->completion_tokens) == NULL ||
	    cJSON_AddNumberToObject(rs, "reasoning_tokens",
	        (double)resp->reasoning_tokens) == NULL ||
	    cJSON_AddNumberToObject(
	        rs, "cached_tokens", (double)resp->cached_tokens) == NULL ||
	    cJSON_AddNumberToObject(rs, "cache_write_tokens",
	        (double)resp->cache_write_tokens) == NULL ||
	    cJSON_AddNumberToObject(
	        rs, "dropped_params", resp->dropped_params) == NULL ||
	    cJSON_AddNumberToObject(rs, "latency_ms", resp->latency_ms) ==
	        NULL ||
	    cJSON_AddNumberToObject(rs, "retries", resp->retries) == NULL)
		goto fail;
	return root;
fail:
	cJSON_Delete(root);
	return NULL;
}

/* Creates the folders of dir/name (name may hold '/'). */
static int
llm_record_mkdirs(const char *dir, const char *name)
{
	char path[KC_PATH_MAX * 2];
	char *slash;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if ((slash = strrchr(path, '/')) == NULL)
		return 0;
	*slash = '\0';
	return kc_mkdirs(path, 0700);
}

static int
llm_record_chat(void *state, const llm_request *req, llm_response *resp)
{
	llm_recorder *r = state;
	char name[KC_PATH_MAX], path[KC_PATH_MAX * 2], hash[65], *text;
	cJSON *root;
	int rv;

	if ((rv = llm_recording_name(req, name, sizeof(name))) != 0 ||
	    (rv = llm_request_hash(req, hash)) != 0)
		return rv;
	if ((rv = llm_chat(r->inner, req, resp)) != 0)
		return rv;
	/*
	 * Round the latency to what the JSON file keeps, so that the reply
	 * of a recorded run and of its replay are byte-identical.
	 */
	resp->latency_ms = (double)(int64_t)(resp->latency_ms * 1000) / 1000;
	if ((root = llm_record_json(r, req, hash, resp)) == NULL) {
		llm_response_free(resp);
		return KC_ENOMEM;
	}
	text = cJSON_Print(root);
	cJSON_Delete(root);
	if (text == NULL) {
		llm_response_free(resp);
		return KC_ENOMEM;
	}
	snprintf(path, sizeof(path), "%s/%s.json", r->dir, name);
	if ((rv = llm_record_mkdirs(r->dir, name)) != 0 ||
	    (rv = kc_write_file(path, text, strlen(text))) != 0) {
		cJSON_free(text);
		llm_response_free(resp);
		return kc_seterr(rv,
		    "cannot write the LLM recording %s: %s; check the "
		    "recording folder (KCLAW_LLM_RECORD)",
		    path, kc_lasterr());
	}
	cJSON_free(text);
	free(resp->exchange_id);
	if ((resp->exchange_id = strdup(name)) == NULL) {
		llm_response_free(resp);
		return KC_ENOMEM;
	}
	return 0;
}

static void
llm_record_limits(void *state, llm_limits *out)
{
	llm_recorder *r = state;

	llm_get_limits(r->inner, out);
}

static const llm_provider_ops llm_record_ops = {
    .name = "record",
    .chat = llm_record_chat,
    .close = llm_record_close,
    .limits = llm_record_limits,
};

int
llm_record_open(
    llm_client **out, llm_client *inner, const char *dir, const llm_config *cfg)
{
	llm_recorder *r;
	int rv;

	if ((rv = kc_mkdirs(dir, 0700)) != 0) {
		llm_close(inner);
		return kc_seterr(rv,
		    "cannot create the LLM recording folder %s: %s", dir,
		    kc_lasterr());
	}
	if ((r = calloc(1, sizeof(*r))) == NULL) {
		llm_close(inner);
		return KC_ENOMEM;
	}
	r->inner = inner;
	if (!kc_strlcpy(r->dir, dir, sizeof(r->dir))) {
		llm_record_close(r);
		return kc_seterr(KC_EINVAL, "recording folder path too long");
	}
	kc_strlcpy(r->model, cfg->model, sizeof(r->model));
	r->temperature = cfg->temperature;
	r->max_tokens = cfg->max_tokens;
	return llm_client_new(out, &llm_record_ops, r);
}

/* ------------------------------------------------------------- replay */

static void
llm_replay_close(void *state)
{
	free(state);
}

static uint64_t
llm_replay_u64(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsNumber(v) && v->valuedouble > 0
	    ? (uint64_t)v->valuedouble
	    : 0;
}

static int
llm_replay_json(const llm_replayer *p, const char *path, const char *text,
    size_t len, const char *hash, llm_response *resp)
{
	const cJSON *rs, *content, *v;
	cJSON *root;

	if ((root = cJSON_ParseWithLength(text, len)) == NULL ||
	    !cJSON_IsObject(root)) {
		cJSON_Delete(root);
		return kc_seterr(KC_EINVAL,
		    "recording %s is not a JSON object; fix it (format in "
		    "docs/agents.md)",
		    path);
	}
	rs = cJSON_GetObjectItemCaseSensitive(root, "response");
	content = cJSON_GetObjectItemCaseSensitive(rs, "content");
	if (!cJSON_IsString(content)) {
		cJSON_Delete(root);
		return kc_seterr(KC_EINVAL,
		    "recording %s has no \"response\": {\"content\": "
		    "\"...\"} string; add the reply's text there",
		    path);
	}
	if (p->strict) {
		v = cJSON_GetObjectItemCaseSensitive(root, "request_sha256");
		if (!cJSON_IsString(v) || strcmp(v->valuestring, hash) != 0) {
			int rv = kc_seterr(KC_ENOENT,
			    "strict replay: recording %s was made for request "
			    "%.16s..., this request is %.16s...; the prompt "
			    "changed since it was recorded (record again, or "
			    "replay without KCLAW_LLM_REPLAY_STRICT)",
			    path, cJSON_IsString(v) ? v->valuestring : "(none)",
			    hash);
			cJSON_Delete(root);
			return rv;
		}
	}
	resp->content = strdup(content->valuestring);
	v = cJSON_GetObjectItemCaseSensitive(rs, "finish_reason");
	resp->finish_reason =
	    strdup(cJSON_IsString(v) ? v->valuestring : "stop");
	resp->prompt_tokens = llm_replay_u64(rs, "prompt_tokens");
	resp->completion_tokens = llm_replay_u64(rs, "completion_tokens");
	resp->reasoning_tokens = llm_replay_u64(rs, "reasoning_tokens");
	resp->cached_tokens = llm_replay_u64(rs, "cached_tokens");
	resp->cache_write_tokens = llm_replay_u64(rs, "cache_write_tokens");
	resp->dropped_params = (unsigned)llm_replay_u64(rs, "dropped_params");
	resp->retries = (unsigned)llm_replay_u64(rs, "retries");
	v = cJSON_GetObjectItemCaseSensitive(rs, "latency_ms");
	resp->latency_ms = cJSON_IsNumber(v) ? v->valuedouble : 0;
	cJSON_Delete(root);
	if (resp->content == NULL || resp->finish_reason == NULL)
		return KC_ENOMEM;
	return 0;
}

static int
llm_replay_chat(void *state, const llm_request *req, llm_response *resp)
{
	llm_replayer *p = state;
	char name[KC_PATH_MAX], path[KC_PATH_MAX * 2], hash[65], *text = NULL;
	size_t len;
	int rv;

	if ((rv = llm_recording_name(req, name, sizeof(name))) != 0 ||
	    (rv = llm_request_hash(req, hash)) != 0)
		return rv;
	snprintf(path, sizeof(path), "%s/%s.json", p->dir, name);
	rv = kc_read_file(path, LLM_RECORDING_MAX, &text, &len);
	if (rv == 0) {
		rv = llm_replay_json(p, path, text, len, hash, resp);
	} else if (rv == KC_ENOENT) {
		snprintf(path, sizeof(path), "%s/%s.txt", p->dir, name);
		rv = kc_read_file(path, LLM_RECORDING_MAX, &text, &len);
		if (rv == KC_ENOENT)
			return kc_seterr(KC_ENOENT,
			    "replay: no recorded reply for %s%s%s (re-ask %u): "
			    "neither %s/%s.json nor .txt exists; record it "
			    "with KCLAW_LLM_RECORD=<dir> or write it by hand "
			    "(docs/agents.md)",
			    req->key ? "key '" : "request ",
			    req->key ? req->key : hash, req->key ? "'" : "",
			    req->attempt, p->dir, name);
		if (rv == 0 && p->strict)
			rv = kc_seterr(KC_EINVAL,
			    "strict replay needs a .json recording with "
			    "request_sha256, but %s is plain text",
			    path);
		if (rv == 0) {
			resp->content = text;
			text = NULL;
			resp->finish_reason = strdup("stop");
			if (resp->finish_reason == NULL)
				rv = KC_ENOMEM;
		}
	}
	free(text);
	if (rv == 0 && (resp->exchange_id = strdup(name)) == NULL)
		rv = KC_ENOMEM;
	if (rv != 0)
		llm_response_free(resp);
	return rv;
}

static void
llm_replay_limits(void *state, llm_limits *out)
{
	const llm_replayer *p = state;

	*out = p->limits;
}

static const llm_provider_ops llm_replay_ops = {
    .name = "replay",
    .chat = llm_replay_chat,
    .close = llm_replay_close,
    .limits = llm_replay_limits,
};

int
llm_replay_open(llm_client **out, const char *dir, bool strict)
{
	return llm_replay_open_limits(out, dir, strict, NULL);
}

int
llm_replay_open_limits(
    llm_client **out, const char *dir, bool strict, const llm_limits *limits)
{
	llm_replayer *p;
	struct stat st;

	if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
		return kc_seterr(KC_ENOENT,
		    "replay folder %s does not exist; set KCLAW_LLM_REPLAY to "
		    "a recording folder",
		    dir);
	if ((p = calloc(1, sizeof(*p))) == NULL)
		return KC_ENOMEM;
	if (!kc_strlcpy(p->dir, dir, sizeof(p->dir))) {
		free(p);
		return kc_seterr(KC_EINVAL, "replay folder path too long");
	}
	p->strict = strict;
	if (limits != NULL)
		p->limits = *limits;
	return llm_client_new(out, &llm_replay_ops, p);
}
