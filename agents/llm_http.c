/*
 * llm_http.c - the OpenAI-compatible chat-completions provider (libcurl).
 *
 * One call is up to max_tries tries. A try that fails transiently (429,
 * 408, 5xx, a connection error, a timeout, a body that is not a
 * chat-completions reply, e.g. cut off by a proxy) is retried after an
 * exponential backoff with jitter, or after the server's Retry-After on a
 * 429; any other HTTP error (400, 401, 404, ...) is final at once, since
 * repeating the same request cannot fix it. The error after the last try
 * names the server, the model, the number of tries and the last failure.
 */
#include <cjson/cJSON.h>
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

typedef struct {
	llm_config cfg;
	char url[KC_URL_MAX + 32];
	CURL *curl;
	unsigned seed;
} llm_http;

/* The outcome of one try. */
typedef struct {
	bool retry;      /* transient: another try may succeed */
	long status;     /* HTTP status, 0 when none came */
	long wait_ms;    /* the server's Retry-After, -1 when absent */
	char what[1024]; /* what went wrong, for the final error */
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

static char *
llm_http_body(const llm_http *h, const llm_request *req)
{
	cJSON *root, *msgs;
	char *text = NULL;

	if ((root = cJSON_CreateObject()) == NULL)
		return NULL;
	if (cJSON_AddStringToObject(root, "model", h->cfg.model) == NULL ||
	    (msgs = llm_messages_json(req)) == NULL)
		goto out;
	if (!cJSON_AddItemToObject(root, "messages", msgs)) {
		cJSON_Delete(msgs);
		goto out;
	}
	if (cJSON_AddNumberToObject(root, "temperature", h->cfg.temperature) ==
	        NULL ||
	    cJSON_AddNumberToObject(root, "max_tokens", h->cfg.max_tokens) ==
	        NULL ||
	    cJSON_AddFalseToObject(root, "stream") == NULL)
		goto out;
	text = cJSON_PrintUnformatted(root);
out:
	cJSON_Delete(root);
	return text;
}

/* The server's own error text, e.g. {"error":{"message":"..."}}, bounded. */
static void
llm_http_server_error(const kc_str *body, char *dst, size_t n)
{
	const cJSON *e, *msg;
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
	cJSON_Delete(root);
}

/*
 * Reads a chat-completions reply into resp. Anything unreadable is a
 * retryable failure: a complete reply from a healthy server always parses.
 */
static int
llm_http_parse(const kc_str *body, llm_response *resp, llm_try *t)
{
	const cJSON *choices, *c0, *msg, *content, *usage, *v;
	cJSON *root;

	root = cJSON_ParseWithLength(body->buf ? body->buf : "", body->len);
	if (root == NULL) {
		t->retry = true;
		snprintf(t->what, sizeof(t->what),
		    "the reply body (%zu bytes) is not valid JSON (cut off?)",
		    body->len);
		return KC_EPROTO;
	}
	choices = cJSON_GetObjectItemCaseSensitive(root, "choices");
	c0 = cJSON_IsArray(choices) ? cJSON_GetArrayItem(choices, 0) : NULL;
	msg = cJSON_GetObjectItemCaseSensitive(c0, "message");
	content = cJSON_GetObjectItemCaseSensitive(msg, "content");
	if (!cJSON_IsString(content)) {
		cJSON_Delete(root);
		t->retry = true;
		snprintf(t->what, sizeof(t->what),
		    "the reply has no choices[0].message.content string; is "
		    "this an OpenAI-compatible chat-completions endpoint?");
		return KC_EPROTO;
	}
	resp->content = strdup(content->valuestring);
	v = cJSON_GetObjectItemCaseSensitive(c0, "finish_reason");
	resp->finish_reason = strdup(cJSON_IsString(v) ? v->valuestring : "");
	v = cJSON_GetObjectItemCaseSensitive(root, "id");
	if (cJSON_IsString(v) && v->valuestring[0] != '\0') {
		resp->exchange_id = strdup(v->valuestring);
	} else {
		char id[17];
		kc_new_id(id);
		resp->exchange_id = strdup(id);
	}
	usage = cJSON_GetObjectItemCaseSensitive(root, "usage");
	v = cJSON_GetObjectItemCaseSensitive(usage, "prompt_tokens");
	if (cJSON_IsNumber(v) && v->valuedouble > 0)
		resp->prompt_tokens = (uint64_t)v->valuedouble;
	v = cJSON_GetObjectItemCaseSensitive(usage, "completion_tokens");
	if (cJSON_IsNumber(v) && v->valuedouble > 0)
		resp->completion_tokens = (uint64_t)v->valuedouble;
	cJSON_Delete(root);
	if (resp->content == NULL || resp->finish_reason == NULL ||
	    resp->exchange_id == NULL) {
		llm_response_free(resp);
		return KC_ENOMEM;
	}
	return 0;
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

static int
llm_http_try(llm_http *h, const llm_request *req, const char *body_json,
    struct curl_slist *headers, unsigned timeout_ms, llm_response *resp,
    llm_try *t)
{
	char errbuf[CURL_ERROR_SIZE] = "", server[512];
	curl_off_t retry_after = 0;
	kc_str body = {0};
	CURLcode cc;
	CURL *c = h->curl;
	int rv;

	t->retry = false;
	t->status = 0;
	t->wait_ms = -1;
	t->what[0] = '\0';
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
		snprintf(t->what, sizeof(t->what), "%s%s (%s)",
		    cc == CURLE_OPERATION_TIMEDOUT
		        ? "no complete reply in time: "
		        : "",
		    curl_easy_strerror(cc), errbuf[0] ? errbuf : "no detail");
		kc_str_free(&body);
		return cc == CURLE_OPERATION_TIMEDOUT ? KC_ETIMEDOUT : KC_EHTTP;
	}
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &t->status);
	if (t->status != 200) {
		llm_http_server_error(&body, server, sizeof(server));
		t->retry =
		    t->status == 429 || t->status == 408 || t->status >= 500;
		if (t->status == 429 &&
		    curl_easy_getinfo(c, CURLINFO_RETRY_AFTER, &retry_after) ==
		        CURLE_OK &&
		    retry_after > 0)
			t->wait_ms = (long)retry_after * 1000;
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
		kc_str_free(&body);
		return KC_EHTTP;
	}
	rv = llm_http_parse(&body, resp, t);
	kc_str_free(&body);
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

static int
llm_http_chat(void *state, const llm_request *req, llm_response *resp)
{
	llm_http *h = state;
	struct curl_slist *headers = NULL, *nh;
	char *body_json, *auth = NULL;
	uint64_t t0 = kc_mono_ns();
	unsigned try_no;
	llm_try t = {0};
	bool late = false;
	int rv = KC_EHTTP;

	if ((body_json = llm_http_body(h, req)) == NULL)
		return KC_ENOMEM;
	nh = curl_slist_append(headers, "Content-Type: application/json");
	if (nh != NULL)
		headers = nh;
	if (nh != NULL && h->cfg.api_key[0] != '\0') {
		size_t n = strlen(h->cfg.api_key) + 32;
		if ((auth = malloc(n)) != NULL) {
			snprintf(auth, n, "Authorization: Bearer %s",
			    h->cfg.api_key);
			nh = curl_slist_append(headers, auth);
			if (nh != NULL)
				headers = nh;
			memset(auth, 0, n);
			free(auth);
		}
		if (auth == NULL || nh == NULL)
			nh = NULL;
	}
	if (nh == NULL) {
		curl_slist_free_all(headers);
		cJSON_free(body_json);
		return KC_ENOMEM;
	}

	for (try_no = 0; try_no < h->cfg.max_tries; try_no++) {
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
		if (rv == 0 || rv == KC_ENOMEM || rv == KC_ECANCELED ||
		    !t.retry)
			break;
		if (try_no + 1 < h->cfg.max_tries) {
			unsigned wait = llm_http_backoff(h, try_no);
			if (t.wait_ms >= 0)
				wait = (unsigned)(t.wait_ms <
				            (long)h->cfg.retry_after_max_ms
				        ? t.wait_ms
				        : (long)h->cfg.retry_after_max_ms);
			KC_WARN("llm: try %u of %u to %s failed: %s; retrying "
			        "in %u ms",
			    try_no + 1, h->cfg.max_tries, h->url, t.what, wait);
			if (req->deadline_ms != 0 &&
			    kc_now_ms() + wait > req->deadline_ms)
				wait = (unsigned)(req->deadline_ms > kc_now_ms()
				        ? req->deadline_ms - kc_now_ms()
				        : 0);
			llm_http_wait(req, wait);
			if (llm_cancelled(req)) {
				rv = KC_ECANCELED;
				break;
			}
		}
	}
	/* The header list holds the key: wipe it before freeing. */
	for (nh = headers; nh != NULL; nh = nh->next)
		memset(nh->data, 0, strlen(nh->data));
	curl_slist_free_all(headers);
	cJSON_free(body_json);
	if (rv == 0) {
		resp->retries = try_no;
		resp->latency_ms = (double)(kc_mono_ns() - t0) / 1e6;
		return 0;
	}
	if (rv == KC_ENOMEM)
		return rv;
	if (late)
		return kc_seterr(KC_ETIMEDOUT,
		    "LLM call to %s stopped after %u tries: the job's deadline "
		    "passed%s%s",
		    h->url, try_no, try_no ? "; last failure: " : "",
		    try_no ? t.what : "");
	if (rv == KC_ECANCELED)
		return kc_seterr(rv,
		    "LLM call to %s cancelled after %u tries: the task was "
		    "cancelled or the service is shutting down",
		    h->url, try_no + 1);
	if (!t.retry)
		return kc_seterr(rv,
		    "LLM call to %s (model %s) failed: %s; not retried, since "
		    "the same request would fail again",
		    h->url, h->cfg.model, t.what);
	return kc_seterr(rv,
	    "LLM call to %s (model %s) failed after %u tries: %s; check "
	    "that the server is up and reachable, or raise "
	    "KCLAW_LLM_MAX_TRIES / KCLAW_LLM_TIMEOUT_MS",
	    h->url, h->cfg.model, try_no, t.what);
}

static const llm_provider_ops llm_http_ops = {
    .name = "http",
    .chat = llm_http_chat,
    .close = llm_http_close,
};

int
llm_http_open(llm_client **out, const llm_config *cfg)
{
	const char *base = cfg->base_url;
	size_t blen = strlen(base);
	llm_http *h;

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
	while (blen > 0 && base[blen - 1] == '/')
		blen--;
	/* A base URL that already names the endpoint is taken as it is. */
	if (blen >= 17 &&
	    strncmp(base + blen - 17, "/chat/completions", 17) == 0)
		snprintf(h->url, sizeof(h->url), "%.*s", (int)blen, base);
	else
		snprintf(h->url, sizeof(h->url), "%.*s/chat/completions",
		    (int)blen, base);
	h->seed = (unsigned)(kc_mono_ns() ^ (uint64_t)getpid());
	if ((h->curl = curl_easy_init()) == NULL) {
		llm_http_close(h);
		return kc_seterr(KC_EHTTP, "curl_easy_init failed");
	}
	return llm_client_new(out, &llm_http_ops, h);
}
