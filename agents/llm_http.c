/*
 * llm_http.c - the HTTP providers over libcurl: the OpenAI-compatible
 * chat-completions API (provider "http") and Anthropic's Messages API
 * (provider "anthropic"). They share the client, the retries and the
 * window; what differs (URL, key header, request body, reply) is chosen by
 * the API style, each in a section of its own below.
 *
 * One call is up to max_tries tries. A try that fails transiently (429,
 * 408, 5xx, a connection error, a timeout, a body that is not a
 * chat-completions reply, e.g. cut off by a proxy) is retried after an
 * exponential backoff with jitter, or after the server's Retry-After on a
 * 429; any other HTTP error (400, 401, 404, ...) is final at once, since
 * repeating the same request cannot fix it. The error after the last try
 * names the server, the model, the number of tries and the last failure.
 *
 * What is sent follows the model's profile (llm_profile): a 400 whose error
 * names an optional parameter that was sent (max_tokens for a reasoning
 * model, a temperature it does not take, ...) drops that parameter (or
 * switches max_tokens and max_completion_tokens) and sends the request
 * again at once, logged, and the client remembers it for later calls.
 * Azure OpenAI gets its deployments URL and api-key header, Ollama its
 * options.num_ctx. When the context window is known (configured, or read
 * from vLLM's /v1/models max_model_len or Ollama's /api/show) a prompt that
 * does not fit is refused before it is sent and the reply's limit is
 * lowered to what is left. A reply from Ollama whose prompt_tokens are far
 * below what was sent means the server cut the prompt to its context: the
 * call fails at once with the fix, since every retry would be cut too.
 *
 * Anthropic: POST <base>/v1/messages with x-api-key and anthropic-version,
 * the system messages as the top-level "system" blocks, max_tokens always
 * sent, cache_control {"type": "ephemeral"} on the system block and on the
 * stable part of the first user message (before LLM_CACHE_BREAK), thinking
 * and redacted_thinking blocks kept out of the answer, stop_reason
 * max_tokens reported as the finish reason "length" (a cut reply), and
 * usage input_tokens + cache_creation_input_tokens + cache_read_input_tokens
 * as the prompt's tokens. 429, 529 and other 5xx are retried, after the
 * server's retry-after when it sends one; a 429 for a reached spend limit
 * is final.
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kc_err.h"
#include "kc_log.h"
#include "kc_util.h"
#include "llm.h"

#define LLM_HTTP_MAX_BODY (32u << 20)
#define LLM_HTTP_URL_MAX (KC_URL_MAX + 256)
/* The least room a reply must have in the context window. */
#define LLM_MIN_REPLY_TOKENS 1024u

/* Optional request parameters, as bits of a mask. */
enum {
	LLM_P_TEMPERATURE = 1 << 0,
	LLM_P_TOP_P = 1 << 1,
	LLM_P_LIMIT = 1 << 2, /* max_tokens or max_completion_tokens */
	LLM_P_REASONING_EFFORT = 1 << 3,
	LLM_P_SEED = 1 << 4,
	LLM_P_RESPONSE_FORMAT = 1 << 5,
	LLM_P_OPTIONS = 1 << 6, /* Ollama's options.num_ctx */
};

/* A reply's prompt tokens below this share of the bytes sent / 4 (and a
 * prompt of at least LLM_CUT_MIN_TOKENS by that estimate) mean the server
 * cut the prompt: no tokenizer packs code and prose 6.7 bytes a token. */
#define LLM_CUT_PERCENT 60u
#define LLM_CUT_MIN_TOKENS 1024u

/* The least thinking budget Anthropic takes; reasoning_effort low, medium
 * and high ask for 1, 4 and 16 times it (at most half of max_tokens). */
#define LLM_THINK_MIN 1024u

typedef struct {
	llm_config cfg;
	char url[LLM_HTTP_URL_MAX];
	char info_url[LLM_HTTP_URL_MAX]; /* /v1/models or Ollama's /api/show */
	CURL *curl;
	unsigned seed;
	unsigned dropped;  /* LLM_P_* the server refused: never sent again */
	unsigned switched; /* LLM_P_LIMIT once its field name was switched */
	bool probed;       /* the server was asked for the window */
	unsigned window;   /* the context window in tokens; 0 = unknown */
	bool anthropic;    /* the Messages API, not chat completions */
	bool answered;     /* a try got an HTTP answer (any status) once */
} llm_http;

/* The outcome of one try. */
typedef struct {
	bool retry; /* transient: another try may succeed */
	/* The provider's own unavailability, whatever was asked: no
	 * connection, or 429 (rate), 502, 503, 504, 529 (overloaded). Not a
	 * 500 or a timeout, which a request can cause. */
	bool outage;
	long status;     /* HTTP status, 0 when none came */
	long wait_ms;    /* the server's Retry-After, -1 when absent */
	char what[1024]; /* what went wrong, for the final error */
	char param[64];  /* a 400's error.param, if any */
	char emsg[512];  /* a 400's error.message (or body) */
	bool ollama;     /* the reply came from Ollama (fp_ollama) */
} llm_try;

static pthread_once_t llm_http_once = PTHREAD_ONCE_INIT;
static CURLcode llm_http_global_rv;

static void
llm_http_global_init(void)
{
	llm_http_global_rv = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static size_t
llm_http_write(char *ptr, size_t size, size_t nmemb, void *arg)
{
	kc_str *body = arg;
	size_t n = size * nmemb;

	/* Returning less than n makes libcurl fail the transfer. */
	if (body->len + n > LLM_HTTP_MAX_BODY ||
	    kc_str_appendn(body, ptr, n) != 0)
		return 0;
	return n;
}

static void
llm_http_close(void *state)
{
	llm_http *h = state;

	if (h == NULL)
		return;
	if (h->curl != NULL)
		curl_easy_cleanup(h->curl);
	/* The key must not linger in freed memory. */
	memset(h->cfg.api_key, 0, sizeof(h->cfg.api_key));
	free(h);
}

/* The parameters a request of h sends (LLM_P_* bits). */
static unsigned
llm_http_sent(const llm_http *h)
{
	const llm_profile *p = &h->cfg.profile;
	unsigned m = LLM_P_LIMIT;

	if (p->reasoning_effort && h->cfg.reasoning_effort[0] != '\0')
		m |= LLM_P_REASONING_EFFORT;
	/* Anthropic's thinking takes no temperature but its default. */
	if (p->temperature &&
	    !(h->anthropic && (m & LLM_P_REASONING_EFFORT) &&
	        !(h->dropped & LLM_P_REASONING_EFFORT)))
		m |= LLM_P_TEMPERATURE;
	if (p->top_p && h->cfg.top_p >= 0)
		m |= LLM_P_TOP_P;
	if (h->anthropic)
		return m & ~h->dropped &
		    (LLM_P_LIMIT | LLM_P_TEMPERATURE | LLM_P_TOP_P |
		        LLM_P_REASONING_EFFORT);
	if (p->seed && h->cfg.seed >= 0)
		m |= LLM_P_SEED;
	if (p->response_format && h->cfg.response_format[0] != '\0')
		m |= LLM_P_RESPONSE_FORMAT;
	if (h->cfg.api == LLM_API_OLLAMA)
		m |= LLM_P_OPTIONS;
	return m & ~h->dropped;
}

static const char *
llm_http_limit_name(const llm_http *h)
{
	return h->cfg.profile.max_completion_tokens && !h->anthropic
	    ? "max_completion_tokens"
	    : "max_tokens";
}

static char *llm_anth_body(
    const llm_http *h, const llm_request *req, unsigned limit);

/* The sampling parameters the profile sends (temperature, top_p), as both
 * APIs name them; -1 when out of memory. */
static int
llm_http_sampling(const llm_http *h, unsigned sent, cJSON *root)
{
	if ((sent & LLM_P_TEMPERATURE) &&
	    cJSON_AddNumberToObject(root, "temperature", h->cfg.temperature) ==
	        NULL)
		return -1;
	if ((sent & LLM_P_TOP_P) &&
	    cJSON_AddNumberToObject(root, "top_p", h->cfg.top_p) == NULL)
		return -1;
	return 0;
}

/* The request body: the messages and the parameters the profile sends;
 * limit is the reply's token limit, num_ctx Ollama's window (0: none). */
static char *
llm_http_body(
    const llm_http *h, const llm_request *req, unsigned limit, unsigned num_ctx)
{
	unsigned sent = llm_http_sent(h);
	cJSON *root, *msgs, *o;
	char *text = NULL;

	if (h->anthropic)
		return llm_anth_body(h, req, limit);
	if ((root = cJSON_CreateObject()) == NULL)
		return NULL;
	if (cJSON_AddStringToObject(root, "model", h->cfg.model) == NULL ||
	    (msgs = llm_messages_json(req)) == NULL)
		goto out;
	if (!cJSON_AddItemToObject(root, "messages", msgs)) {
		cJSON_Delete(msgs);
		goto out;
	}
	if (llm_http_sampling(h, sent, root) != 0)
		goto out;
	if ((sent & LLM_P_LIMIT) &&
	    cJSON_AddNumberToObject(root, llm_http_limit_name(h), limit) ==
	        NULL)
		goto out;
	if ((sent & LLM_P_REASONING_EFFORT) &&
	    cJSON_AddStringToObject(
	        root, "reasoning_effort", h->cfg.reasoning_effort) == NULL)
		goto out;
	if ((sent & LLM_P_SEED) &&
	    cJSON_AddNumberToObject(root, "seed", (double)h->cfg.seed) == NULL)
		goto out;
	if ((sent & LLM_P_RESPONSE_FORMAT) &&
	    ((o = cJSON_AddObjectToObject(root, "response_format")) == NULL ||
	        cJSON_AddStringToObject(o, "type", h->cfg.response_format) ==
	            NULL))
		goto out;
	if ((sent & LLM_P_OPTIONS) && num_ctx > 0 &&
	    ((o = cJSON_AddObjectToObject(root, "options")) == NULL ||
	        cJSON_AddNumberToObject(o, "num_ctx", num_ctx) == NULL))
		goto out;
	if (cJSON_AddFalseToObject(root, "stream") == NULL)
		goto out;
	text = cJSON_PrintUnformatted(root);
out:
	cJSON_Delete(root);
	return text;
}

/* The server's own error text, e.g. {"error":{"message":"..."}}, bounded,
 * and the parameter it names (error.param), if any. */
static void
llm_http_server_error(const kc_str *body, char *dst, size_t n, llm_try *t)
{
	const cJSON *e, *msg, *param;
	cJSON *root;

	dst[0] = '\0';
	if (body->len == 0)
		return;
	root = cJSON_ParseWithLength(body->buf, body->len);
	e = cJSON_GetObjectItemCaseSensitive(root, "error");
	msg = cJSON_IsObject(e) ? cJSON_GetObjectItemCaseSensitive(e, "message")
	                        : e;
	if (cJSON_IsString(msg))
		snprintf(dst, n, "%.300s", msg->valuestring);
	else
		snprintf(dst, n, "%.300s", body->buf);
	snprintf(t->emsg, sizeof(t->emsg), "%s", dst);
	param = cJSON_GetObjectItemCaseSensitive(e, "param");
	if (cJSON_IsString(param))
		snprintf(t->param, sizeof(t->param), "%s", param->valuestring);
	cJSON_Delete(root);
}

static uint64_t
llm_http_count(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsNumber(v) && v->valuedouble > 0
	    ? (uint64_t)v->valuedouble
	    : 0;
}

/* Adds a reply's usage to resp: prompt and completion tokens, reasoning
 * (completion_tokens_details.reasoning_tokens) and cached prompt tokens
 * (prompt_tokens_details.cached_tokens, DeepSeek's prompt_cache_hit_tokens).
 */
static void
llm_http_usage(const cJSON *root, llm_response *resp)
{
	const cJSON *u = cJSON_GetObjectItemCaseSensitive(root, "usage");
	uint64_t cached;

	resp->prompt_tokens += llm_http_count(u, "prompt_tokens");
	resp->completion_tokens += llm_http_count(u, "completion_tokens");
	resp->reasoning_tokens += llm_http_count(
	    cJSON_GetObjectItemCaseSensitive(u, "completion_tokens_details"),
	    "reasoning_tokens");
	cached = llm_http_count(
	    cJSON_GetObjectItemCaseSensitive(u, "prompt_tokens_details"),
	    "cached_tokens");
	if (cached == 0)
		cached = llm_http_count(u, "prompt_cache_hit_tokens");
	resp->cached_tokens += cached;
}

static int llm_anth_parse(const kc_str *body, llm_response *resp, llm_try *t);

/* message.content as text: a string, or the text parts of an array of
 * content parts (some gateways); NULL when it is neither. */
static char *
llm_http_content(const cJSON *content)
{
	const cJSON *part, *t;
	kc_str s = {0};

	if (cJSON_IsString(content))
		return strdup(content->valuestring);
	if (!cJSON_IsArray(content))
		return NULL;
	cJSON_ArrayForEach(part, content)
	{
		t = cJSON_GetObjectItemCaseSensitive(part, "text");
		if (cJSON_IsString(t) &&
		    kc_str_append(&s, t->valuestring) != 0) {
			kc_str_free(&s);
			return NULL;
		}
	}
	if (s.buf == NULL)
		return strdup("");
	return kc_str_take(&s);
}

/* The end of a parsed reply, whichever API: the exchange's id (the
 * reply's, else a new one), the document freed, KC_ENOMEM when a field
 * could not be copied. */
static int
llm_http_reply_done(cJSON *root, llm_response *resp)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "id");

	if (cJSON_IsString(v) && v->valuestring[0] != '\0') {
		resp->exchange_id = strdup(v->valuestring);
	} else {
		char id[17];
		kc_new_id(id);
		resp->exchange_id = strdup(id);
	}
	cJSON_Delete(root);
	if (resp->content == NULL || resp->finish_reason == NULL ||
	    resp->exchange_id == NULL)
		return KC_ENOMEM;
	return 0;
}

/*
 * Reads a chat-completions reply into resp. Anything unreadable is a
 * retryable failure: a complete reply from a healthy server always parses.
 * The reasoning (message.reasoning_content, as vLLM, SGLang and DeepSeek
 * send it, or message.reasoning, as OpenRouter and Ollama do) is never
 * part of the content; a reply with reasoning but no content (all of the
 * limit spent reasoning) is an empty answer, not a broken reply.
 */
static int
llm_http_parse(const kc_str *body, llm_response *resp, llm_try *t)
{
	const cJSON *choices, *c0, *msg, *content, *reasoning, *v;
	const char *finish;
	cJSON *root;

	root = cJSON_ParseWithLength(body->buf ? body->buf : "", body->len);
	if (root == NULL) {
		t->retry = true;
		snprintf(t->what, sizeof(t->what),
		    "the reply body (%zu bytes) is not valid JSON (cut off?)",
		    body->len);
		return KC_EPROTO;
	}
	v = cJSON_GetObjectItemCaseSensitive(root, "system_fingerprint");
	t->ollama =
	    cJSON_IsString(v) && strcmp(v->valuestring, "fp_ollama") == 0;
	llm_http_usage(root, resp);
	choices = cJSON_GetObjectItemCaseSensitive(root, "choices");
	c0 = cJSON_IsArray(choices) ? cJSON_GetArrayItem(choices, 0) : NULL;
	msg = cJSON_GetObjectItemCaseSensitive(c0, "message");
	content = cJSON_GetObjectItemCaseSensitive(msg, "content");
	reasoning = cJSON_GetObjectItemCaseSensitive(msg, "reasoning_content");
	if (!cJSON_IsString(reasoning))
		reasoning = cJSON_GetObjectItemCaseSensitive(msg, "reasoning");
	v = cJSON_GetObjectItemCaseSensitive(c0, "finish_reason");
	finish = cJSON_IsString(v) ? v->valuestring : "";
	if (!cJSON_IsString(content) && !cJSON_IsArray(content) &&
	    (msg == NULL ||
	        (!cJSON_IsString(reasoning) &&
	            strcmp(finish, "length") != 0))) {
		cJSON_Delete(root);
		t->retry = true;
		snprintf(t->what, sizeof(t->what),
		    "the reply has no choices[0].message.content string; is "
		    "this an OpenAI-compatible chat-completions endpoint?");
		return KC_EPROTO;
	}
	resp->content = llm_http_content(content);
	if (resp->content == NULL && !cJSON_IsArray(content))
		resp->content = strdup("");
	resp->reasoning_bytes =
	    cJSON_IsString(reasoning) ? strlen(reasoning->valuestring) : 0;
	resp->finish_reason = strdup(finish);
	return llm_http_reply_done(root, resp);
}

/* libcurl's progress callback: a non-zero return aborts the transfer. */
static int
llm_http_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow,
    curl_off_t ultotal, curl_off_t ulnow)
{
	const atomic_int *cancel = arg;

	(void)dltotal;
	(void)dlnow;
	(void)ultotal;
	(void)ulnow;
	return cancel != NULL && atomic_load(cancel) != 0;
}

static bool
llm_cancelled(const llm_request *req)
{
	return req->cancel != NULL && atomic_load(req->cancel) != 0;
}

/* Sleeps ms, in slices, so a cancellation ends the wait early. */
static void
llm_http_wait(const llm_request *req, unsigned ms)
{
	uint64_t until = kc_mono_ms() + ms;
	uint64_t now;

	while (!llm_cancelled(req) && (now = kc_mono_ms()) < until)
		kc_sleep_ms(until - now < 50 ? (uint32_t)(until - now) : 50);
}

static bool
llm_http_transient(CURLcode cc)
{
	switch (cc) {
	case CURLE_OPERATION_TIMEDOUT:
	case CURLE_COULDNT_CONNECT:
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM: return true;
	default: return false;
	}
}

static size_t llm_http_prompt_bytes(const llm_request *req);

/*
 * Ollama's OpenAI endpoint cuts a prompt longer than the model's context
 * (2048 or 4096 tokens unless the server is told otherwise) without a
 * word, and options.num_ctx does not reach it there: the reply then
 * answers a fragment of the prompt. Its prompt_tokens give it away. The
 * call fails at once, not retried (the same prompt is cut again), with
 * the fix.
 */
static int
llm_http_cut_prompt(const llm_http *h, const llm_request *req, uint64_t counted,
    llm_response *resp, llm_try *t)
{
	uint64_t sent = llm_http_prompt_bytes(req) / 4;

	if (counted == 0 || sent < LLM_CUT_MIN_TOKENS ||
	    counted * 100 >= sent * LLM_CUT_PERCENT)
		return 0;
	free(resp->content);
	free(resp->finish_reason);
	free(resp->exchange_id);
	resp->content = resp->finish_reason = resp->exchange_id = NULL;
	t->retry = false;
	snprintf(t->what, sizeof(t->what),
	    "the server counted %llu prompt tokens of a prompt of about %llu "
	    "(its bytes / 4): it cut the prompt to its context window, so the "
	    "model answered a fragment of it. Ollama does this silently at "
	    "its default context; give the model a larger one: start the "
	    "server with OLLAMA_CONTEXT_LENGTH=32768 (or more; `ollama serve`) "
	    "or create the model with `PARAMETER num_ctx 32768` in its "
	    "Modelfile, and set \"llm\".\"context_window\" (or "
	    "KCLAW_LLM_CONTEXT_WINDOW) to the same number",
	    (unsigned long long)counted, (unsigned long long)sent);
	KC_ERROR("llm: %s (model %s): %s", h->url, h->cfg.model, t->what);
	return KC_ENOSPC;
}

static int
llm_http_try(llm_http *h, const llm_request *req, const char *body_json,
    struct curl_slist *headers, unsigned timeout_ms, llm_response *resp,
    llm_try *t)
{
	char errbuf[CURL_ERROR_SIZE] = "", server[512];
	curl_off_t retry_after = 0;
	kc_str body = {0};
	uint64_t prompt0;
	CURLcode cc;
	CURL *c = h->curl;
	int rv;

	t->retry = false;
	t->outage = false;
	t->status = 0;
	t->wait_ms = -1;
	t->what[0] = '\0';
	t->param[0] = '\0';
	t->emsg[0] = '\0';
	t->ollama = false;
	curl_easy_reset(c);
	curl_easy_setopt(c, CURLOPT_URL, h->url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, body_json);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, llm_http_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
	    (long)(timeout_ms < 10000 ? timeout_ms : 10000));
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_USERAGENT, "kclaw-agent");
	curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, "");
	curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, llm_http_progress);
	curl_easy_setopt(c, CURLOPT_XFERINFODATA, (void *)req->cancel);

	cc = curl_easy_perform(c);
	if (cc == CURLE_ABORTED_BY_CALLBACK) {
		snprintf(t->what, sizeof(t->what), "cancelled");
		kc_str_free(&body);
		return KC_ECANCELED;
	}
	if (cc != CURLE_OK) {
		t->retry = llm_http_transient(cc);
		t->outage = cc == CURLE_COULDNT_CONNECT ||
		    cc == CURLE_COULDNT_RESOLVE_HOST ||
		    cc == CURLE_COULDNT_RESOLVE_PROXY ||
		    cc == CURLE_SSL_CONNECT_ERROR || cc == CURLE_GOT_NOTHING ||
		    cc == CURLE_SEND_ERROR || cc == CURLE_RECV_ERROR;
		snprintf(t->what, sizeof(t->what), "%s%s (%s)%s",
		    cc == CURLE_OPERATION_TIMEDOUT
		        ? "no complete reply in time: "
		        : "",
		    curl_easy_strerror(cc), errbuf[0] ? errbuf : "no detail",
		    cc == CURLE_COULDNT_CONNECT ||
		            cc == CURLE_COULDNT_RESOLVE_HOST
		        ? "; check that the LLM server runs and that "
		          "KCLAW_LLM_BASE_URL names it"
		        : "");
		kc_str_free(&body);
		return cc == CURLE_OPERATION_TIMEDOUT ? KC_ETIMEDOUT : KC_EHTTP;
	}
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &t->status);
	if (t->status > 0)
		h->answered = true;
	if (t->status != 200) {
		llm_http_server_error(&body, server, sizeof(server), t);
		t->retry =
		    t->status == 429 || t->status == 408 || t->status >= 500;
		/* Honoured wherever a retried status carries it (429, and
		 * Anthropic's 529 or a 503). */
		if (t->retry &&
		    curl_easy_getinfo(c, CURLINFO_RETRY_AFTER, &retry_after) ==
		        CURLE_OK &&
		    retry_after > 0)
			t->wait_ms = (long)retry_after * 1000;
		/* A spent budget is no rate limit: waiting does not end it
		 * (Anthropic's enforced_spend_limit_reached, OpenAI's
		 * insufficient_quota). */
		if (t->status == 429 && body.buf != NULL &&
		    (strstr(body.buf, "spend_limit") != NULL ||
		        strstr(body.buf, "insufficient_quota") != NULL)) {
			t->retry = false;
			snprintf(server + strlen(server),
			    sizeof(server) - strlen(server),
			    "; the account's spend limit or quota is reached: "
			    "raise it with the provider");
		}
		t->outage = t->retry &&
		    (t->status == 429 || t->status == 502 || t->status == 503 ||
		        t->status == 504 || t->status == 529);
		snprintf(t->what, sizeof(t->what), "HTTP %ld%s%s%s", t->status,
		    server[0] ? " (" : "", server, server[0] ? ")" : "");
		if (t->status == 401 || t->status == 403)
			snprintf(t->what + strlen(t->what),
			    sizeof(t->what) - strlen(t->what),
			    "; check the API key (KCLAW_LLM_API_KEY or "
			    "KCLAW_LLM_API_KEY_FILE)");
		else if (t->status == 404)
			snprintf(t->what + strlen(t->what),
			    sizeof(t->what) - strlen(t->what),
			    "; check KCLAW_LLM_BASE_URL and KCLAW_LLM_MODEL");
		else if (t->status == 429 && t->retry)
			snprintf(t->what + strlen(t->what),
			    sizeof(t->what) - strlen(t->what),
			    "; the provider limits this key's rate: fewer "
			    "agents per role, or a higher limit with the "
			    "provider, avoid the waits");
		else if (t->status >= 500)
			snprintf(t->what + strlen(t->what),
			    sizeof(t->what) - strlen(t->what),
			    "; the provider is failing or overloaded: if it "
			    "lasts, check its status page or use another "
			    "endpoint (KCLAW_LLM_BASE_URL)");
		kc_str_free(&body);
		return KC_EHTTP;
	}
	prompt0 = resp->prompt_tokens;
	rv = h->anthropic ? llm_anth_parse(&body, resp, t)
	                  : llm_http_parse(&body, resp, t);
	kc_str_free(&body);
	if (rv == 0 && !h->anthropic &&
	    (h->cfg.api == LLM_API_OLLAMA || t->ollama))
		rv = llm_http_cut_prompt(
		    h, req, resp->prompt_tokens - prompt0, resp, t);
	return rv;
}

/* Exponential backoff with equal jitter: half fixed, half random. */
static unsigned
llm_http_backoff(llm_http *h, unsigned try_no)
{
	uint64_t d = (uint64_t)h->cfg.backoff_ms << (try_no < 20 ? try_no : 20);

	if (d > h->cfg.backoff_max_ms)
		d = h->cfg.backoff_max_ms;
	if (d < 2)
		return (unsigned)d;
	return (unsigned)(d / 2 + (uint64_t)rand_r(&h->seed) % (d / 2 + 1));
}

/* The key header of h's API style, wiped and freed by
 * llm_http_free_headers; NULL when out of memory. */
static struct curl_slist *
llm_http_headers(const llm_http *h)
{
	struct curl_slist *headers = NULL, *nh;
	char *auth;
	size_t n;

	nh = curl_slist_append(headers, "Content-Type: application/json");
	if (nh == NULL)
		return NULL;
	headers = nh;
	if (h->cfg.api_key[0] == '\0')
		return headers;
	if (h->anthropic) {
		char ver[64];
		snprintf(ver, sizeof(ver), "anthropic-version: %s",
		    h->cfg.anthropic_version);
		if ((nh = curl_slist_append(headers, ver)) == NULL) {
			curl_slist_free_all(headers);
			return NULL;
		}
		headers = nh;
	}
	n = strlen(h->cfg.api_key) + 32;
	if ((auth = malloc(n)) == NULL) {
		curl_slist_free_all(headers);
		return NULL;
	}
	if (h->cfg.api == LLM_API_AZURE)
		snprintf(auth, n, "api-key: %s", h->cfg.api_key);
	else if (h->anthropic)
		snprintf(auth, n, "x-api-key: %s", h->cfg.api_key);
	else
		snprintf(auth, n, "Authorization: Bearer %s", h->cfg.api_key);
	nh = curl_slist_append(headers, auth);
	memset(auth, 0, n);
	free(auth);
	if (nh == NULL) {
		curl_slist_free_all(headers);
		return NULL;
	}
	return nh;
}

/* The header list holds the key: wipe it before freeing. */
static void
llm_http_free_headers(struct curl_slist *headers)
{
	struct curl_slist *nh;

	for (nh = headers; nh != NULL; nh = nh->next)
		memset(nh->data, 0, strlen(nh->data));
	curl_slist_free_all(headers);
}

/* The window in an answer of vLLM's /v1/models (data[].max_model_len of
 * the model) or Ollama's /api/show (model_info.<arch>.context_length). */
static unsigned
llm_http_window_of(const llm_http *h, const cJSON *root)
{
	const cJSON *it, *id, *v;
	size_t n;

	cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(root, "data"))
	{
		id = cJSON_GetObjectItemCaseSensitive(it, "id");
		v = cJSON_GetObjectItemCaseSensitive(it, "max_model_len");
		if (cJSON_IsString(id) &&
		    strcmp(id->valuestring, h->cfg.model) == 0 &&
		    cJSON_IsNumber(v) && v->valuedouble >= 1)
			return (unsigned)v->valuedouble;
	}
	cJSON_ArrayForEach(
	    it, cJSON_GetObjectItemCaseSensitive(root, "model_info"))
	{
		n = strlen(it->string);
		if (n > 15 &&
		    strcmp(it->string + n - 15, ".context_length") == 0 &&
		    cJSON_IsNumber(it) && it->valuedouble >= 1)
			return (unsigned)it->valuedouble;
	}
	return 0;
}

/*
 * Learns the context window once: the configured one, else what the
 * server says (vLLM, SGLang: GET /v1/models; Ollama: POST /api/show). A
 * server that does not say (OpenAI, llama.cpp, an error) leaves it unknown.
 */
static void
llm_http_probe(llm_http *h)
{
	char errbuf[CURL_ERROR_SIZE] = "", *post = NULL;
	struct curl_slist *headers;
	kc_str body = {0};
	long status = 0;
	cJSON *root;
	CURL *c = h->curl;

	if (h->probed)
		return;
	h->probed = true;
	h->window = h->cfg.profile.context_window;
	if (h->window > 0 || h->info_url[0] == '\0')
		return;
	if ((headers = llm_http_headers(h)) == NULL)
		return;
	curl_easy_reset(c);
	curl_easy_setopt(c, CURLOPT_URL, h->info_url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
	if (h->cfg.api == LLM_API_OLLAMA) {
		cJSON *o = cJSON_CreateObject();
		if (o != NULL &&
		    cJSON_AddStringToObject(o, "model", h->cfg.model) != NULL)
			post = cJSON_PrintUnformatted(o);
		cJSON_Delete(o);
		if (post == NULL)
			goto out;
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, post);
	}
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, llm_http_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS,
	    (long)(h->cfg.timeout_ms < 5000 ? h->cfg.timeout_ms : 5000));
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_USERAGENT, "kclaw-agent");
	if (curl_easy_perform(c) == CURLE_OK) {
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
		if (status == 200 &&
		    (root = cJSON_ParseWithLength(
		         body.buf ? body.buf : "", body.len)) != NULL) {
			h->window = llm_http_window_of(h, root);
			cJSON_Delete(root);
		}
	}
	if (h->window > 0)
		KC_INFO("llm: %s says model %s has a context window of %u "
		        "tokens",
		    h->info_url, h->cfg.model, h->window);
out:
	cJSON_free(post);
	kc_str_free(&body);
	llm_http_free_headers(headers);
}

static void
llm_http_limits(void *state, llm_limits *out)
{
	llm_http *h = state;

	llm_http_probe(h);
	out->context_window = h->window;
	out->max_tokens = h->cfg.max_tokens;
	out->max_tokens_cap = h->cfg.max_tokens_cap;
}

/* The optional parameters by name; the limit's name depends on the
 * profile (llm_http_limit_name). */
static const struct {
	unsigned bit;
	const char *name;
} llm_http_params[] = {
    {LLM_P_TEMPERATURE, "temperature"},
    {LLM_P_TOP_P, "top_p"},
    {LLM_P_REASONING_EFFORT, "reasoning_effort"},
    {LLM_P_SEED, "seed"},
    {LLM_P_RESPONSE_FORMAT, "response_format"},
    {LLM_P_OPTIONS, "options"},
    {LLM_P_OPTIONS, "num_ctx"},
    {LLM_P_REASONING_EFFORT, "thinking"},
};

/* Where word w first appears in s as a whole word (not part of a longer
 * identifier), or NULL. */
static const char *
llm_http_word(const char *s, const char *w)
{
	size_t n = strlen(w);
	const char *p;

	for (p = strstr(s, w); p != NULL; p = strstr(p + 1, w)) {
		bool before =
		    p > s && (isalnum((unsigned char)p[-1]) || p[-1] == '_');
		bool after = isalnum((unsigned char)p[n]) || p[n] == '_';
		if (!before && !after)
			return p;
	}
	return NULL;
}

/*
 * The optional parameter a 400 refuses, as an LLM_P_* bit (0: none): the
 * error's "param" when it names one that was sent, else the sent parameter
 * the error message names first. *name is its name.
 */
static unsigned
llm_http_refused(const llm_http *h, const llm_try *t, const char **name)
{
	unsigned sent = llm_http_sent(h), bit = 0;
	const char *best = NULL, *p, *n;
	size_t i;

	for (i = 0; i <= KC_ARRAY_LEN(llm_http_params); i++) {
		unsigned b = i < KC_ARRAY_LEN(llm_http_params)
		    ? llm_http_params[i].bit
		    : LLM_P_LIMIT;
		n = i < KC_ARRAY_LEN(llm_http_params) ? llm_http_params[i].name
		                                      : llm_http_limit_name(h);
		if (!(sent & b))
			continue;
		/* Anthropic requires max_tokens, and names the effort
		 * "thinking"; the others know no "thinking". */
		if (h->anthropic
		        ? b == LLM_P_LIMIT || strcmp(n, "reasoning_effort") == 0
		        : strcmp(n, "thinking") == 0)
			continue;
		if (t->param[0] != '\0') {
			if (strcmp(t->param, n) == 0) {
				*name = n;
				return b;
			}
			continue;
		}
		if ((p = llm_http_word(t->emsg, n)) != NULL &&
		    (best == NULL || p < best)) {
			best = p;
			bit = b;
			*name = n;
		}
	}
	return bit;
}

/* Stops sending a refused parameter; the token limit is first sent under
 * its other name when the server's message names it. */
static void
llm_http_fix(llm_http *h, unsigned bit, const char *name, const llm_try *t)
{
	const char *other = h->cfg.profile.max_completion_tokens
	    ? "max_tokens"
	    : "max_completion_tokens";

	if (bit == LLM_P_LIMIT && !(h->switched & LLM_P_LIMIT) &&
	    llm_http_word(t->emsg, other) != NULL) {
		h->switched |= LLM_P_LIMIT;
		h->cfg.profile.max_completion_tokens =
		    !h->cfg.profile.max_completion_tokens;
		KC_WARN("llm: %s (model %s) refused '%s' (HTTP 400: %s); "
		        "sending the limit as '%s' from now on",
		    h->url, h->cfg.model, name, t->emsg, other);
		return;
	}
	h->dropped |= bit;
	KC_WARN("llm: %s (model %s) refused the parameter '%s' (HTTP 400: "
	        "%s); sending the request again without it, and so from now "
	        "on",
	    h->url, h->cfg.model, name, t->emsg);
}

static size_t
llm_http_prompt_bytes(const llm_request *req)
{
	size_t i, n = 0;

	/* Each message costs a few tokens of framing besides its text. */
	for (i = 0; i < req->nmessages; i++)
		n += strlen(req->messages[i].content) + 16;
	return n;
}

/*
 * The reply's limit and Ollama's num_ctx for a request, fitted to the
 * context window when it is known; KC_ENOSPC when the prompt leaves no
 * room for a reply.
 */
static int
llm_http_fit(
    llm_http *h, const llm_request *req, unsigned *limit, unsigned *num_ctx)
{
	unsigned prompt = llm_estimate_tokens(llm_http_prompt_bytes(req));
	unsigned want = req->max_tokens ? req->max_tokens : h->cfg.max_tokens;
	unsigned min_reply =
	    want < LLM_MIN_REPLY_TOKENS ? want : LLM_MIN_REPLY_TOKENS;
	uint64_t need;

	llm_http_probe(h);
	*limit = want;
	*num_ctx = 0;
	if (h->window > 0) {
		if (min_reply > h->window / 4)
			min_reply = h->window / 4;
		if ((uint64_t)prompt + min_reply > h->window)
			return kc_seterr(KC_ENOSPC,
			    "the prompt (about %u tokens, estimated at 3.5 "
			    "bytes per token) does not fit the context window "
			    "of model %s (%u tokens) with room for a reply of "
			    "at least %u tokens; raise the window "
			    "(\"llm\".\"context_window\", the server's "
			    "max_model_len or num_ctx) or shorten the prompt",
			    prompt, h->cfg.model, h->window, min_reply);
		if ((uint64_t)prompt + want > h->window)
			*limit = h->window - prompt;
	}
	if (h->cfg.api == LLM_API_OLLAMA) {
		/* Ollama cuts a prompt longer than num_ctx silently: ask for
		 * what this request needs, rounded up, within the window. */
		need = ((uint64_t)prompt + *limit + 2047) / 2048 * 2048;
		if (h->window > 0 && need > h->window)
			need = h->window;
		*num_ctx = (unsigned)(need > 0xffffffffu ? 0xffffffffu : need);
	}
	return 0;
}

static int
llm_http_chat(void *state, const llm_request *req, llm_response *resp)
{
	llm_http *h = state;
	struct curl_slist *headers;
	char *body_json;
	const char *pname = NULL;
	uint64_t t0 = kc_mono_ns();
	unsigned tries = 0, fixes = 0, limit, num_ctx, bit;
	llm_try t = {0};
	bool late = false, cancelled = false;
	int rv = KC_EHTTP;

	if ((rv = llm_http_fit(h, req, &limit, &num_ctx)) != 0)
		return rv;
	if ((body_json = llm_http_body(h, req, limit, num_ctx)) == NULL)
		return KC_ENOMEM;
	if ((headers = llm_http_headers(h)) == NULL) {
		cJSON_free(body_json);
		return KC_ENOMEM;
	}
	rv = KC_EHTTP;
	while (tries < h->cfg.max_tries) {
		unsigned timeout = h->cfg.timeout_ms;
		if (req->deadline_ms != 0) {
			uint64_t now = kc_now_ms();
			if (now >= req->deadline_ms) {
				late = true;
				break;
			}
			if (req->deadline_ms - now < timeout)
				timeout = (unsigned)(req->deadline_ms - now);
		}
		rv =
		    llm_http_try(h, req, body_json, headers, timeout, resp, &t);
		if (rv == 0 || rv == KC_ENOMEM || rv == KC_ECANCELED) {
			cancelled = rv == KC_ECANCELED;
			break;
		}
		/* A refused parameter: send again at once without it. */
		if (t.status == 400 && fixes < 8 &&
		    (bit = llm_http_refused(h, &t, &pname)) != 0) {
			llm_http_fix(h, bit, pname, &t);
			fixes++;
			resp->dropped_params++;
			cJSON_free(body_json);
			if ((body_json = llm_http_body(
			         h, req, limit, num_ctx)) == NULL) {
				rv = KC_ENOMEM;
				break;
			}
			continue;
		}
		tries++;
		if (!t.retry)
			break;
		if (tries < h->cfg.max_tries) {
			unsigned wait = llm_http_backoff(h, tries - 1);
			if (t.wait_ms >= 0)
				wait = (unsigned)(t.wait_ms <
				            (long)h->cfg.retry_after_max_ms
				        ? t.wait_ms
				        : (long)h->cfg.retry_after_max_ms);
			KC_WARN("llm: try %u of %u to %s failed: %s; retrying "
			        "in %u ms",
			    tries, h->cfg.max_tries, h->url, t.what, wait);
			if (req->on_retry != NULL) {
				llm_retry info = {tries, h->cfg.max_tries,
				    t.status, wait, t.what};
				req->on_retry(req->on_retry_arg, &info);
			}
			if (req->deadline_ms != 0 &&
			    kc_now_ms() + wait > req->deadline_ms)
				wait = (unsigned)(req->deadline_ms > kc_now_ms()
				        ? req->deadline_ms - kc_now_ms()
				        : 0);
			llm_http_wait(req, wait);
			if (llm_cancelled(req)) {
				rv = KC_ECANCELED;
				cancelled = true;
				tries--;
				break;
			}
		}
	}
	llm_http_free_headers(headers);
	cJSON_free(body_json);
	resp->retries = rv == 0 ? tries : (tries > 0 ? tries - 1 : 0);
	resp->latency_ms = (double)(kc_mono_ns() - t0) / 1e6;
	if (rv == 0 || rv == KC_ENOMEM)
		return rv;
	if (late)
		return kc_seterr(KC_ETIMEDOUT,
		    "LLM call to %s stopped after %u tries: the job's deadline "
		    "passed%s%s",
		    h->url, tries, tries ? "; last failure: " : "",
		    tries ? t.what : "");
	if (cancelled)
		return kc_seterr(KC_ECANCELED,
		    "LLM call to %s cancelled after %u tries: the task was "
		    "cancelled or the service is shutting down",
		    h->url, tries + 1);
	if (!t.retry)
		return kc_seterr(rv,
		    "LLM call to %s (model %s) failed: %s; not retried, since "
		    "the same request would fail again",
		    h->url, h->cfg.model, t.what);
	/* An outage of a provider that answered before; one that never did
	 * is more likely misconfigured (the URL, the port): said at once. */
	resp->unavailable = t.outage && h->answered;
	return kc_seterr(rv,
	    "LLM call to %s (model %s) failed after %u tries: %s; check "
	    "that the server is up and reachable, or raise "
	    "KCLAW_LLM_MAX_TRIES / KCLAW_LLM_TIMEOUT_MS",
	    h->url, h->cfg.model, tries, t.what);
}

static const llm_provider_ops llm_http_ops = {
    .name = "http",
    .chat = llm_http_chat,
    .close = llm_http_close,
    .limits = llm_http_limits,
};

/* The same client speaking the Messages API (h->anthropic). */
static const llm_provider_ops llm_anth_ops = {
    .name = "anthropic",
    .chat = llm_http_chat,
    .close = llm_http_close,
    .limits = llm_http_limits,
};

/* ------------------------------------------------- Anthropic Messages */

/* <base>/v1/messages: a base of https://api.anthropic.com, one ending in
 * /v1, or the endpoint itself. No window probe: the API tells none. */
static int
llm_anth_url(llm_http *h, const char *base, size_t blen, const char *q)
{
	kc_str u = {0};
	int rv;

	rv = kc_str_appendn(&u, base, blen);
	if (rv == 0 &&
	    !(blen >= 12 && strncmp(base + blen - 12, "/v1/messages", 12) == 0))
		rv = kc_str_append(&u,
		    blen >= 3 && strncmp(base + blen - 3, "/v1", 3) == 0
		        ? "/messages"
		        : "/v1/messages");
	if (rv == 0 && q != NULL)
		rv = kc_str_append(&u, q);
	if (rv == 0 && !kc_strlcpy(h->url, u.buf, sizeof(h->url)))
		rv =
		    kc_seterr(KC_EINVAL, "LLM base URL '%s' is too long", base);
	h->info_url[0] = '\0';
	kc_str_free(&u);
	return rv;
}

/* Whether text has something besides white space (the API refuses an
 * empty or blank text block). */
static bool
llm_anth_blank(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!isspace((unsigned char)s[i]))
			return false;
	return true;
}

/* Appends {"type": "text", "text": s[0..n)} to blocks, with cache_control
 * when cache is set; a blank text is left out. */
static int
llm_anth_block(cJSON *blocks, const char *s, size_t n, bool cache)
{
	cJSON *b, *cc;
	char *text;

	if (llm_anth_blank(s, n))
		return 0;
	if ((text = strndup(s, n)) == NULL)
		return KC_ENOMEM;
	if ((b = cJSON_CreateObject()) == NULL ||
	    !cJSON_AddItemToArray(blocks, b) ||
	    cJSON_AddStringToObject(b, "type", "text") == NULL ||
	    cJSON_AddStringToObject(b, "text", text) == NULL ||
	    (cache &&
	        ((cc = cJSON_AddObjectToObject(b, "cache_control")) == NULL ||
	            cJSON_AddStringToObject(cc, "type", "ephemeral") ==
	                NULL))) {
		free(text);
		return KC_ENOMEM;
	}
	free(text);
	return 0;
}

/*
 * A message's text as blocks. With cache set, the stable part (before
 * LLM_CACHE_BREAK; the whole text when it has none and whole is set) ends
 * in a cache breakpoint. The marker's line never reaches the model.
 */
static int
llm_anth_blocks(cJSON *blocks, const char *text, bool cache, bool whole)
{
	const char *mark = strstr(text, LLM_CACHE_BREAK), *rest;
	int rv;

	if (mark == NULL)
		return llm_anth_block(
		    blocks, text, strlen(text), cache && whole);
	rest = mark + strlen(LLM_CACHE_BREAK);
	if (*rest == '\n')
		rest++;
	if ((rv = llm_anth_block(blocks, text, (size_t)(mark - text), cache)) !=
	    0)
		return rv;
	/* A second marker is no breakpoint of ours: its line goes too. */
	return llm_anth_blocks(blocks, rest, false, false);
}

/*
 * The Messages API body: the system messages as the "system" blocks (one
 * cache breakpoint at their end), the rest as alternating user and
 * assistant messages (consecutive ones of a role merged), the first user
 * message's stable part ending in the second breakpoint.
 */
static char *
llm_anth_body(const llm_http *h, const llm_request *req, unsigned limit)
{
	unsigned sent = llm_http_sent(h);
	cJSON *root, *system, *msgs, *m = NULL, *content = NULL, *o;
	const char *last_role = "";
	char *text = NULL;
	bool first_user = true;
	size_t i, nsys = 0;

	if ((root = cJSON_CreateObject()) == NULL)
		return NULL;
	if (cJSON_AddStringToObject(root, "model", h->cfg.model) == NULL ||
	    cJSON_AddNumberToObject(root, "max_tokens", limit) == NULL ||
	    (system = cJSON_CreateArray()) == NULL)
		goto out;
	for (i = 0; i < req->nmessages; i++)
		if (strcmp(req->messages[i].role, "system") == 0)
			nsys = i + 1;
	for (i = 0; i < req->nmessages; i++) {
		const llm_message *e = &req->messages[i];
		if (strcmp(e->role, "system") == 0) {
			/* The breakpoint goes on the last system block. */
			if (llm_anth_blocks(
			        system, e->content, i + 1 == nsys, true) != 0) {
				cJSON_Delete(system);
				goto out;
			}
		}
	}
	if (cJSON_GetArraySize(system) > 0) {
		if (!cJSON_AddItemToObject(root, "system", system)) {
			cJSON_Delete(system);
			goto out;
		}
	} else {
		cJSON_Delete(system);
	}
	if ((msgs = cJSON_AddArrayToObject(root, "messages")) == NULL)
		goto out;
	for (i = 0; i < req->nmessages; i++) {
		const llm_message *e = &req->messages[i];
		bool user = strcmp(e->role, "user") == 0;
		if (strcmp(e->role, "system") == 0)
			continue;
		if (strcmp(e->role, last_role) != 0) {
			if ((m = cJSON_CreateObject()) == NULL ||
			    !cJSON_AddItemToArray(msgs, m) ||
			    cJSON_AddStringToObject(m, "role",
			        user ? "user" : "assistant") == NULL ||
			    (content = cJSON_AddArrayToObject(m, "content")) ==
			        NULL)
				goto out;
			last_role = e->role;
		}
		if (llm_anth_blocks(
		        content, e->content, user && first_user, false) != 0)
			goto out;
		if (user)
			first_user = false;
	}
	if (llm_http_sampling(h, sent, root) != 0)
		goto out;
	if (sent & LLM_P_REASONING_EFFORT) {
		/* The budget must leave the answer room within max_tokens. */
		const char *e = h->cfg.reasoning_effort;
		unsigned budget =
		    strcmp(e, "low") == 0 || strcmp(e, "minimal") == 0
		    ? LLM_THINK_MIN
		    : strcmp(e, "medium") == 0 ? 4 * LLM_THINK_MIN
		                               : 16 * LLM_THINK_MIN;
		if (budget > limit / 2)
			budget = limit / 2;
		if (budget >= LLM_THINK_MIN &&
		    ((o = cJSON_AddObjectToObject(root, "thinking")) == NULL ||
		        cJSON_AddStringToObject(o, "type", "enabled") == NULL ||
		        cJSON_AddNumberToObject(o, "budget_tokens", budget) ==
		            NULL))
			goto out;
	}
	text = cJSON_PrintUnformatted(root);
out:
	cJSON_Delete(root);
	return text;
}

/* Adds a Messages reply's usage: input_tokens are the tokens after the
 * last cache breakpoint only, so the prompt is all three counts. */
static void
llm_anth_usage(const cJSON *root, llm_response *resp)
{
	const cJSON *u = cJSON_GetObjectItemCaseSensitive(root, "usage");
	uint64_t written = llm_http_count(u, "cache_creation_input_tokens");
	uint64_t read = llm_http_count(u, "cache_read_input_tokens");

	resp->prompt_tokens +=
	    llm_http_count(u, "input_tokens") + written + read;
	resp->completion_tokens += llm_http_count(u, "output_tokens");
	resp->cached_tokens += read;
	resp->cache_write_tokens += written;
}

/*
 * Reads a Messages reply: the answer is its text blocks; thinking and
 * redacted_thinking blocks are reasoning (their size is reported, their
 * text never part of the answer). stop_reason max_tokens is the finish
 * reason "length", as a cut chat-completions reply's, so the runtime asks
 * again with a higher limit; end_turn and stop_sequence are "stop".
 */
static int
llm_anth_parse(const kc_str *body, llm_response *resp, llm_try *t)
{
	const cJSON *content, *b, *type, *v;
	const char *stop;
	kc_str s = {0};
	cJSON *root;

	root = cJSON_ParseWithLength(body->buf ? body->buf : "", body->len);
	if (root == NULL) {
		t->retry = true;
		snprintf(t->what, sizeof(t->what),
		    "the reply body (%zu bytes) is not valid JSON (cut off?)",
		    body->len);
		return KC_EPROTO;
	}
	llm_anth_usage(root, resp);
	content = cJSON_GetObjectItemCaseSensitive(root, "content");
	if (!cJSON_IsArray(content)) {
		cJSON_Delete(root);
		t->retry = true;
		snprintf(t->what, sizeof(t->what),
		    "the reply has no content array; is this Anthropic's "
		    "Messages API (POST .../v1/messages)?");
		return KC_EPROTO;
	}
	cJSON_ArrayForEach(b, content)
	{
		type = cJSON_GetObjectItemCaseSensitive(b, "type");
		if (!cJSON_IsString(type))
			continue;
		if (strcmp(type->valuestring, "text") == 0) {
			v = cJSON_GetObjectItemCaseSensitive(b, "text");
			if (cJSON_IsString(v) &&
			    kc_str_append(&s, v->valuestring) != 0)
				goto nomem;
		} else if (strcmp(type->valuestring, "thinking") == 0 ||
		    strcmp(type->valuestring, "redacted_thinking") == 0) {
			v = cJSON_GetObjectItemCaseSensitive(b, "thinking");
			if (!cJSON_IsString(v))
				v = cJSON_GetObjectItemCaseSensitive(b, "data");
			if (cJSON_IsString(v))
				resp->reasoning_bytes += strlen(v->valuestring);
		}
	}
	v = cJSON_GetObjectItemCaseSensitive(root, "stop_reason");
	stop = cJSON_IsString(v) ? v->valuestring : "";
	if (strcmp(stop, "max_tokens") == 0)
		stop = "length";
	else if (strcmp(stop, "end_turn") == 0 ||
	    strcmp(stop, "stop_sequence") == 0)
		stop = "stop";
	resp->content = s.buf != NULL ? kc_str_take(&s) : strdup("");
	resp->finish_reason = strdup(stop);
	return llm_http_reply_done(root, resp);
nomem:
	kc_str_free(&s);
	cJSON_Delete(root);
	return KC_ENOMEM;
}

/*
 * The endpoint's URL from the base URL: /chat/completions goes before a
 * query string (Azure's ?api-version=...), not after it; Azure also gets
 * its deployments path (the model names the deployment) and api-version
 * when the base URL has none. info is where the window is asked for.
 */
static int llm_anth_url(
    llm_http *h, const char *base, size_t blen, const char *q);

static int
llm_http_urls(llm_http *h)
{
	const llm_config *cfg = &h->cfg;
	const char *base = cfg->base_url, *q = strchr(base, '?');
	size_t blen = q != NULL ? (size_t)(q - base) : strlen(base);
	kc_str u = {0}, info = {0};
	bool azure = cfg->api == LLM_API_AZURE, endpoint;
	int rv = 0;

	while (blen > 0 && base[blen - 1] == '/')
		blen--;
	if (h->anthropic)
		return llm_anth_url(h, base, blen, q);
	/* A base URL that already names the endpoint is taken as it is. */
	endpoint = blen >= 17 &&
	    strncmp(base + blen - 17, "/chat/completions", 17) == 0;
	rv = kc_str_appendn(&u, base, blen);
	if (rv == 0 && azure && !endpoint && strstr(u.buf, "/openai/") == NULL)
		rv = kc_str_printf(&u, "/openai/deployments/%s", cfg->model);
	if (rv == 0 && !endpoint) {
		if (cfg->api == LLM_API_OLLAMA) {
			size_t n = u.len;
			if (n >= 3 && strcmp(u.buf + n - 3, "/v1") == 0)
				n -= 3;
			rv = kc_str_appendn(&info, u.buf, n);
			if (rv == 0)
				rv = kc_str_append(&info, "/api/show");
		} else if (!azure) {
			rv = kc_str_printf(&info, "%s/models", u.buf);
		}
		if (rv == 0)
			rv = kc_str_append(&u, "/chat/completions");
	}
	if (rv == 0 && q != NULL)
		rv = kc_str_append(&u, q);
	if (rv == 0 && azure &&
	    (q == NULL || strstr(q, "api-version=") == NULL) &&
	    strstr(u.buf, "/openai/v1/") == NULL)
		rv = kc_str_printf(&u, "%sapi-version=%s",
		    q != NULL ? "&" : "?", cfg->api_version);
	if (rv == 0 &&
	    (!kc_strlcpy(h->url, u.buf, sizeof(h->url)) ||
	        !kc_strlcpy(h->info_url, info.buf ? info.buf : "",
	            sizeof(h->info_url))))
		rv =
		    kc_seterr(KC_EINVAL, "LLM base URL '%s' is too long", base);
	kc_str_free(&u);
	kc_str_free(&info);
	return rv;
}

int
llm_http_open(llm_client **out, const llm_config *cfg)
{
	const char *base = cfg->base_url;
	llm_http *h;
	int rv;

	pthread_once(&llm_http_once, llm_http_global_init);
	if (llm_http_global_rv != CURLE_OK)
		return kc_seterr(KC_EHTTP, "libcurl did not initialise: %s",
		    curl_easy_strerror(llm_http_global_rv));
	if (cfg->model[0] == '\0')
		return kc_seterr(KC_EINVAL,
		    "no LLM model configured; set KCLAW_LLM_MODEL or "
		    "\"llm\": {\"model\": \"...\"} in kclaw.json");
	if (strncmp(base, "http://", 7) != 0 &&
	    strncmp(base, "https://", 8) != 0)
		return kc_seterr(KC_EINVAL,
		    "LLM base URL '%s' is not http:// or https://; set "
		    "KCLAW_LLM_BASE_URL, e.g. http://127.0.0.1:8000/v1",
		    base);
	if ((h = calloc(1, sizeof(*h))) == NULL)
		return KC_ENOMEM;
	h->cfg = *cfg;
	h->anthropic = cfg->api == LLM_API_ANTHROPIC;
	if (h->cfg.anthropic_version[0] == '\0')
		kc_strlcpy(h->cfg.anthropic_version, "2023-06-01",
		    sizeof(h->cfg.anthropic_version));
	/* A configuration built without llm_config_load gets the built-in
	 * profile of its model. */
	if (h->cfg.profile.name[0] == '\0') {
		unsigned window = h->cfg.profile.context_window;
		llm_profile_for(h->cfg.model, &h->cfg.profile);
		if (window > 0)
			h->cfg.profile.context_window = window;
	}
	if ((rv = llm_http_urls(h)) != 0) {
		llm_http_close(h);
		return rv;
	}
	h->seed = (unsigned)(kc_mono_ns() ^ (uint64_t)getpid());
	if ((h->curl = curl_easy_init()) == NULL) {
		llm_http_close(h);
		return kc_seterr(KC_EHTTP, "curl_easy_init failed");
	}
	return llm_client_new(
	    out, h->anthropic ? &llm_anth_ops : &llm_http_ops, h);
}
