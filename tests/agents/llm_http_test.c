/*
 * llm_http_test.c - the HTTP provider against the scripted OpenAI-compatible
 * test server: the request it sends, retries on 429 (Retry-After), 5xx,
 * hangs and cut-off bodies, no retries on other 4xx, the error after the
 * last try, and configuration from kclaw.json, files and the environment.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent_testlib.h"
#include "kc_err.h"
#include "kc_test.h"
#include "kc_util.h"
#include "llm.h"

static kt_llm_server srv;

static const llm_message msgs[] = {
    {"system", "You are a test."},
    {"user", "Say \"hi\"\nplease."},
};
static const llm_request req = {
    msgs, 2, "t/planner/0", 0, NULL, 0, 0, NULL, NULL};

static llm_client *
open_client(unsigned timeout_ms)
{
	llm_client *c;
	llm_config cfg;

	kt_llm_config(&cfg, &srv);
	cfg.timeout_ms = timeout_ms;
	KT_OK(llm_http_open(&c, &cfg));
	return c;
}

static void
test_normal_reply(void)
{
	llm_client *c = open_client(2000);
	llm_response r;
	const cJSON *e, *body, *m;
	cJSON *log;

	kt_llm_script(&srv, kt_reply("hello there"), NULL);
	KT_OK(llm_chat(c, &req, &r));
	KT_EQ_STR(r.content, "hello there");
	KT_EQ_STR(r.finish_reason, "stop");
	KT_EQ_STR(r.exchange_id, "chatcmpl-test-0");
	KT_EQ_INT(r.prompt_tokens, 100);
	KT_EQ_INT(r.completion_tokens, strlen("hello there") / 4);
	KT_EQ_INT(r.retries, 0);
	KT_ASSERT(r.latency_ms > 0);
	llm_response_free(&r);

	log = kt_llm_log(&srv);
	KT_EQ_INT(cJSON_GetArraySize(log), 1);
	e = cJSON_GetArrayItem(log, 0);
	KT_EQ_STR(cJSON_GetObjectItem(e, "path")->valuestring,
	    "/v1/chat/completions");
	KT_EQ_STR(cJSON_GetObjectItem(e, "authorization")->valuestring,
	    "Bearer " KT_TEST_KEY);
	body = cJSON_GetObjectItem(e, "body");
	KT_EQ_STR(
	    cJSON_GetObjectItem(body, "model")->valuestring, "test-model");
	KT_ASSERT(
	    cJSON_GetObjectItem(body, "temperature")->valuedouble == 0.25);
	KT_EQ_INT(cJSON_GetObjectItem(body, "max_tokens")->valueint, 1234);
	m = cJSON_GetArrayItem(cJSON_GetObjectItem(body, "messages"), 1);
	KT_EQ_STR(cJSON_GetObjectItem(m, "role")->valuestring, "user");
	KT_EQ_STR(cJSON_GetObjectItem(m, "content")->valuestring,
	    "Say \"hi\"\nplease.");
	cJSON_Delete(log);
	llm_close(c);
}

static void
test_429_honours_retry_after(void)
{
	llm_client *c = open_client(2000);
	llm_response r;
	uint64_t t0 = kc_mono_ms(), dt;
	cJSON *log;

	kt_llm_script(&srv, kt_status(429, "1"), kt_reply("after wait"), NULL);
	KT_OK(llm_chat(c, &req, &r));
	dt = kc_mono_ms() - t0;
	KT_EQ_STR(r.content, "after wait");
	KT_EQ_INT(r.retries, 1);
	/* The backoff alone is at most 100 ms: only Retry-After waits 1 s. */
	if (dt < 950)
		KT_FAIL("retried after %llu ms, before Retry-After: 1",
		    (unsigned long long)dt);
	KT_ASSERT(r.latency_ms >= 950);
	log = kt_llm_log(&srv);
	KT_EQ_INT(cJSON_GetArraySize(log), 2);
	cJSON_Delete(log);
	llm_response_free(&r);
	llm_close(c);
}

static void
test_5xx_retried(void)
{
	llm_client *c = open_client(2000);
	llm_response r;

	kt_llm_script(&srv, kt_status(500, NULL), kt_status(503, NULL),
	    kt_reply("third time"), NULL);
	KT_OK(llm_chat(c, &req, &r));
	KT_EQ_STR(r.content, "third time");
	KT_EQ_INT(r.retries, 2);
	llm_response_free(&r);
	llm_close(c);
}

static void
test_error_after_last_try(void)
{
	llm_client *c = open_client(2000);
	llm_response r;
	cJSON *log;
	int rv;

	kt_llm_script(&srv, kt_status(500, NULL), kt_status(500, NULL),
	    kt_status(502, NULL), kt_reply("never reached"), NULL);
	rv = llm_chat(c, &req, &r);
	KT_EQ_INT(rv, KC_EHTTP);
	KT_CONTAINS(kc_lasterr(), "after 3 tries");
	KT_CONTAINS(kc_lasterr(), "HTTP 502");
	/* Answered before, the last try a 502: the provider is
	 * unavailable. */
	KT_ASSERT(r.unavailable);
	KT_CONTAINS(kc_lasterr(), "scripted failure");
	KT_CONTAINS(kc_lasterr(), srv.base_url);
	KT_ASSERT(strstr(kc_lasterr(), KT_TEST_KEY) == NULL);
	KT_ASSERT(r.content == NULL);
	log = kt_llm_log(&srv);
	KT_EQ_INT(cJSON_GetArraySize(log), 3);
	cJSON_Delete(log);
	llm_close(c);
}

static void
test_hang_times_out_then_retries(void)
{
	llm_client *c = open_client(400);
	llm_response r;
	uint64_t t0 = kc_mono_ms(), dt;

	kt_llm_script(
	    &srv, kt_hang(3.0, "too late"), kt_reply("in time"), NULL);
	KT_OK(llm_chat(c, &req, &r));
	dt = kc_mono_ms() - t0;
	KT_EQ_STR(r.content, "in time");
	KT_EQ_INT(r.retries, 1);
	KT_ASSERT(dt >= 400 && dt < 2500);
	llm_response_free(&r);

	kt_llm_script(&srv, kt_hang(3.0, "x"), kt_hang(3.0, "x"),
	    kt_hang(3.0, "x"), NULL);
	KT_EQ_INT(llm_chat(c, &req, &r), KC_ETIMEDOUT);
	KT_CONTAINS(kc_lasterr(), "no complete reply in time");
	KT_CONTAINS(kc_lasterr(), "after 3 tries");
	llm_close(c);
}

static void
test_truncated_json(void)
{
	static const char *cut =
	    "{\"id\":\"x\",\"choices\":[{\"message\":{\"content\":\"hel";
	llm_client *c = open_client(2000);
	llm_response r;

	kt_llm_script(&srv, kt_raw(200, cut), kt_reply("whole"), NULL);
	KT_OK(llm_chat(c, &req, &r));
	KT_EQ_STR(r.content, "whole");
	KT_EQ_INT(r.retries, 1);
	llm_response_free(&r);

	kt_llm_script(&srv, kt_raw(200, cut), kt_raw(200, cut),
	    kt_raw(200, "{\"choices\": []}"), NULL);
	KT_EQ_INT(llm_chat(c, &req, &r), KC_EPROTO);
	KT_CONTAINS(kc_lasterr(), "no choices[0].message.content");
	llm_close(c);
}

static void
test_4xx_not_retried(void)
{
	llm_client *c = open_client(2000);
	llm_response r;
	cJSON *log;

	kt_llm_script(&srv, kt_status(400, NULL), kt_reply("unused"), NULL);
	KT_EQ_INT(llm_chat(c, &req, &r), KC_EHTTP);
	KT_CONTAINS(kc_lasterr(), "HTTP 400");
	KT_CONTAINS(kc_lasterr(), "not retried");
	KT_ASSERT(!r.unavailable); /* this request's own failure */
	log = kt_llm_log(&srv);
	KT_EQ_INT(cJSON_GetArraySize(log), 1);
	cJSON_Delete(log);

	/* OpenAI's spent quota is a 429 that waiting does not end. */
	{
		cJSON *quota = cJSON_CreateObject();
		cJSON_AddNumberToObject(quota, "status", 429);
		cJSON_AddStringToObject(quota, "raw",
		    "{\"error\": {\"message\": \"You exceeded your current "
		    "quota\", \"type\": \"insufficient_quota\", \"code\": "
		    "\"insufficient_quota\"}}");
		kt_llm_script(&srv, quota, kt_reply("unused"), NULL);
		KT_EQ_INT(llm_chat(c, &req, &r), KC_EHTTP);
		KT_CONTAINS(
		    kc_lasterr(), "HTTP 429 (You exceeded your current");
		KT_CONTAINS(kc_lasterr(), "quota is reached");
		KT_CONTAINS(kc_lasterr(), "not retried");
		log = kt_llm_log(&srv);
		KT_EQ_INT(cJSON_GetArraySize(log), 1);
		cJSON_Delete(log);
	}

	kt_llm_script(&srv, kt_status(401, NULL), NULL);
	KT_EQ_INT(llm_chat(c, &req, &r), KC_EHTTP);
	KT_CONTAINS(kc_lasterr(), "HTTP 401");
	KT_CONTAINS(kc_lasterr(), "KCLAW_LLM_API_KEY");
	KT_ASSERT(strstr(kc_lasterr(), KT_TEST_KEY) == NULL);
	llm_close(c);
}

static void
test_connection_refused(void)
{
	struct sockaddr_in a = {0};
	socklen_t alen = sizeof(a);
	llm_config cfg;
	llm_client *c;
	llm_response r;
	int fd;

	/* A port that was free a moment ago and has no listener now. */
	fd = socket(AF_INET, SOCK_STREAM, 0);
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	KT_ASSERT(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
	KT_ASSERT(getsockname(fd, (struct sockaddr *)&a, &alen) == 0);
	close(fd);
	kt_llm_config(&cfg, &srv);
	snprintf(cfg.base_url, sizeof(cfg.base_url), "http://127.0.0.1:%d/v1",
	    ntohs(a.sin_port));
	KT_OK(llm_http_open(&c, &cfg));
	KT_EQ_INT(llm_chat(c, &req, &r), KC_EHTTP);
	KT_CONTAINS(kc_lasterr(), "after 3 tries");
	KT_CONTAINS(kc_lasterr(), "connect");
	/* Never answered: more likely a wrong URL than an outage. */
	KT_ASSERT(!r.unavailable);
	llm_close(c);
}

static void
test_config(void)
{
	char dir[256], path[512];
	llm_config cfg;
	kc_config kc;
	llm_client *c;
	static const char *json =
	    "{\"llm\": {\"base_url\": \"http://example.invalid/v1\", "
	    "\"model\": \"from-json\", \"temperature\": 0.1, \"max_tokens\": "
	    "77, "
	    "\"api_key_file\": \"%s/key\"}}";
	char text[1024];

	kt_tmpdir(dir, "kt-llmcfg");
	snprintf(path, sizeof(path), "%s/key", dir);
	KT_OK(kc_write_file(path, "  sk-from-file \n", 16));
	snprintf(text, sizeof(text), json, dir);
	snprintf(path, sizeof(path), "%s/kclaw.json", dir);
	KT_OK(kc_write_file(path, text, strlen(text)));
	unsetenv("KCLAW_LLM_MODEL");
	unsetenv("KCLAW_LLM_API_KEY");
	KT_OK(kc_config_load(&kc, dir));
	KT_OK(llm_config_load(&cfg, &kc));
	KT_EQ_STR(cfg.base_url, "http://example.invalid/v1");
	KT_EQ_STR(cfg.model, "from-json");
	KT_EQ_STR(cfg.api_key, "sk-from-file");
	KT_EQ_INT(cfg.max_tokens, 77);
	KT_ASSERT(cfg.temperature == 0.1);

	setenv("KCLAW_LLM_MODEL", "from-env", 1);
	setenv("KCLAW_LLM_API_KEY", "sk-from-env", 1);
	setenv("KCLAW_LLM_TIMEOUT_MS", "250", 1);
	setenv("KCLAW_LLM_REPLAY", dir, 1);
	KT_OK(llm_config_load(&cfg, &kc));
	KT_EQ_STR(cfg.model, "from-env");
	KT_EQ_STR(cfg.api_key, "sk-from-env");
	KT_EQ_INT(cfg.timeout_ms, 250);
	KT_EQ_STR(cfg.replay_dir, dir);
	KT_OK(llm_open(&c, &cfg));
	KT_EQ_STR(llm_provider_name(c), "replay");
	llm_close(c);

	setenv("KCLAW_LLM_MAX_TOKENS", "lots", 1);
	KT_EQ_INT(llm_config_load(&cfg, &kc), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "KCLAW_LLM_MAX_TOKENS='lots'");
	unsetenv("KCLAW_LLM_MAX_TOKENS");
	setenv("KCLAW_LLM_API_KEY_FILE", "/nonexistent/key", 1);
	KT_EQ_INT(llm_config_load(&cfg, &kc), KC_ENOENT);
	KT_CONTAINS(kc_lasterr(), "/nonexistent/key");
	unsetenv("KCLAW_LLM_API_KEY_FILE");
	unsetenv("KCLAW_LLM_REPLAY");
	unsetenv("KCLAW_LLM_TIMEOUT_MS");

	llm_config_default(&cfg);
	KT_EQ_INT(llm_http_open(&c, &cfg), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "KCLAW_LLM_MODEL");
	kc_strlcpy(cfg.model, "m", sizeof(cfg.model));
	kc_strlcpy(cfg.base_url, "ftp://x", sizeof(cfg.base_url));
	KT_EQ_INT(llm_http_open(&c, &cfg), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "ftp://x");
	kt_rmtree(dir);
}

static atomic_int cancel_flag;

static void *
cancel_later(void *arg)
{
	(void)arg;
	kc_sleep_ms(300);
	atomic_store(&cancel_flag, 1);
	return NULL;
}

/* A cancelled task stops the call in flight and the wait for a retry. */
static void
test_cancel(void)
{
	llm_client *c = open_client(5000);
	llm_request r2 = req;
	llm_response r;
	pthread_t th;
	uint64_t t0;

	r2.cancel = &cancel_flag;
	kt_llm_script(&srv, kt_hang(4.0, "late"), NULL);
	atomic_store(&cancel_flag, 0);
	t0 = kc_mono_ms();
	pthread_create(&th, NULL, cancel_later, NULL);
	KT_EQ_INT(llm_chat(c, &r2, &r), KC_ECANCELED);
	pthread_join(th, NULL);
	KT_ASSERT(kc_mono_ms() - t0 < 2000);
	KT_CONTAINS(kc_lasterr(), "cancelled");

	kt_llm_script(&srv, kt_status(429, "5"), kt_reply("never"), NULL);
	atomic_store(&cancel_flag, 0);
	t0 = kc_mono_ms();
	pthread_create(&th, NULL, cancel_later, NULL);
	KT_EQ_INT(llm_chat(c, &r2, &r), KC_ECANCELED);
	pthread_join(th, NULL);
	KT_ASSERT(kc_mono_ms() - t0 < 2000);
	llm_close(c);
}

/* No try starts, and none runs, past the job's deadline. */
static void
test_deadline(void)
{
	llm_client *c = open_client(5000);
	llm_request r2 = req;
	llm_response r;
	uint64_t t0 = kc_mono_ms(), dt;
	cJSON *log;

	r2.deadline_ms = kc_now_ms() + 700;
	kt_llm_script(&srv, kt_status(500, NULL), kt_hang(4.0, "late"),
	    kt_reply("never"), NULL);
	KT_EQ_INT(llm_chat(c, &r2, &r), KC_ETIMEDOUT);
	dt = kc_mono_ms() - t0;
	KT_ASSERT(dt >= 600 && dt < 1500);
	KT_CONTAINS(kc_lasterr(), "deadline");
	log = kt_llm_log(&srv);
	KT_EQ_INT(cJSON_GetArraySize(log), 2);
	cJSON_Delete(log);

	r2.deadline_ms = kc_now_ms() - 1;
	kt_llm_script(&srv, kt_reply("never"), NULL);
	KT_EQ_INT(llm_chat(c, &r2, &r), KC_ETIMEDOUT);
	KT_CONTAINS(kc_lasterr(), "stopped after 0 tries: the job's deadline");
	log = kt_llm_log(&srv);
	KT_EQ_INT(cJSON_GetArraySize(log), 0);
	cJSON_Delete(log);
	llm_close(c);
}

/* ---------------------------------------------- provider behaviours */

static cJSON *
body_of(cJSON *log, int n)
{
	return cJSON_GetObjectItem(cJSON_GetArrayItem(log, n), "body");
}

static llm_client *
open_model(const char *model, const char *effort)
{
	llm_client *c;
	llm_config cfg;

	kt_llm_config(&cfg, &srv);
	kc_strlcpy(cfg.model, model, sizeof(cfg.model));
	if (effort != NULL)
		kc_strlcpy(
		    cfg.reasoning_effort, effort, sizeof(cfg.reasoning_effort));
	KT_OK(llm_http_open(&c, &cfg));
	return c;
}

/* The options of an OpenAI reasoning model's 400s (as the API words them). */
static cJSON *
reasoning_refusals(bool with_param)
{
	cJSON *o = cJSON_CreateObject(), *r;

	r = cJSON_AddObjectToObject(o, "refuse");
	cJSON_AddStringToObject(r, "max_tokens",
	    "Unsupported parameter: 'max_tokens' is not supported with this "
	    "model. Use 'max_completion_tokens' instead.");
	cJSON_AddStringToObject(r, "temperature",
	    "Unsupported value: 'temperature' does not support 0.25 with this "
	    "model. Only the default (1) value is supported.");
	if (!with_param)
		cJSON_AddFalseToObject(o, "refuse_param_field");
	return o;
}

static void
test_profiles(void)
{
	static const char *const reasoning[] = {"gpt-5", "gpt-5-mini", "o1",
	    "o3-mini", "o4-mini", "openai/o3", "GPT-5.1"};
	static const char *const classic[] = {"gpt-4o", "gpt-4.1-mini",
	    "gpt-5-chat-latest", "qwen3-32b", "llama3.1:8b", "omni"};
	llm_profile p;
	size_t i;

	for (i = 0; i < KC_ARRAY_LEN(reasoning); i++) {
		llm_profile_for(reasoning[i], &p);
		if (!p.max_completion_tokens || p.temperature || p.top_p ||
		    !p.reasoning_effort)
			KT_FAIL("%s: not the reasoning profile", reasoning[i]);
	}
	for (i = 0; i < KC_ARRAY_LEN(classic); i++) {
		llm_profile_for(classic[i], &p);
		if (p.max_completion_tokens || !p.temperature ||
		    p.reasoning_effort)
			KT_FAIL("%s: not the classic profile", classic[i]);
	}
}

/* A reasoning model's request carries what it takes, so it is not
 * refused: max_completion_tokens and reasoning_effort, no temperature. */
static void
test_reasoning_model_request(void)
{
	llm_client *c = open_model("o3-mini", "high");
	llm_response r;
	cJSON *log, *b;

	kt_llm_script_with(
	    &srv, reasoning_refusals(true), kt_reply("fine"), NULL);
	KT_OK(llm_chat(c, &req, &r));
	KT_EQ_STR(r.content, "fine");
	KT_EQ_INT(r.dropped_params, 0);
	llm_response_free(&r);
	log = kt_llm_log(&srv);
	KT_EQ_INT(cJSON_GetArraySize(log), 1);
	b = body_of(log, 0);
	KT_EQ_INT(
	    cJSON_GetObjectItem(b, "max_completion_tokens")->valueint, 1234);
	KT_EQ_STR(
	    cJSON_GetObjectItem(b, "reasoning_effort")->valuestring, "high");
	KT_ASSERT(cJSON_GetObjectItem(b, "max_tokens") == NULL);
	KT_ASSERT(cJSON_GetObjectItem(b, "temperature") == NULL);
	KT_ASSERT(cJSON_GetObjectItem(b, "top_p") == NULL);
	cJSON_Delete(log);
	llm_close(c);

	/* A classic model gets no reasoning_effort even when configured. */
	c = open_model("gpt-4o", "high");
	kt_llm_script(&srv, kt_reply("ok"), NULL);
	KT_OK(llm_chat(c, &req, &r));
	llm_response_free(&r);
	log = kt_llm_log(&srv);
	b = body_of(log, 0);
	KT_ASSERT(cJSON_GetObjectItem(b, "reasoning_effort") == NULL);
	KT_EQ_INT(cJSON_GetObjectItem(b, "max_tokens")->valueint, 1234);
	KT_ASSERT(cJSON_GetObjectItem(b, "temperature")->valuedouble == 0.25);
	cJSON_Delete(log);
	llm_close(c);
}

/* A model whose name the profiles do not know refuses temperature: the
 * parameter named by error.param is dropped, the request sent again at
 * once, and later calls of the client do without it. */
static void
test_refused_temperature_dropped(void)
{
	llm_client *c = open_model("my-reasoner", NULL);
	cJSON *opts = cJSON_CreateObject(), *log;
	llm_response r;

	cJSON_AddStringToObject(cJSON_AddObjectToObject(opts, "refuse"),
	    "temperature",
	    "Unsupported value: 'temperature' does not support 0.25 with this "
	    "model. Only the default (1) value is supported.");
	kt_llm_script_with(&srv, opts, kt_reply("one"), kt_reply("two"), NULL);
	KT_OK(llm_chat(c, &req, &r));
	KT_EQ_STR(r.content, "one");
	KT_EQ_INT(r.dropped_params, 1);
	KT_EQ_INT(r.retries, 0);
	llm_response_free(&r);
	log = kt_llm_log(&srv);
	KT_EQ_INT(cJSON_GetArraySize(log), 2);
	KT_ASSERT(cJSON_GetObjectItem(body_of(log, 0), "temperature") != NULL);
	KT_ASSERT(cJSON_GetObjectItem(body_of(log, 1), "temperature") == NULL);
	KT_EQ_INT(
	    cJSON_GetObjectItem(body_of(log, 1), "max_tokens")->valueint, 1234);
	cJSON_Delete(log);

	KT_OK(llm_chat(c, &req, &r));
	KT_EQ_STR(r.content, "two");
	KT_EQ_INT(r.dropped_params, 0);
	llm_response_free(&r);
	log = kt_llm_log(&srv);
	KT_EQ_INT(cJSON_GetArraySize(log), 3);
	KT_ASSERT(cJSON_GetObjectItem(body_of(log, 2), "temperature") == NULL);
	cJSON_Delete(log);
	llm_close(c);
}

/* Refusals named only in the message: max_tokens is sent again as
 * max_completion_tokens (the message says so), then temperature dropped. */
static void
test_refused_by_message(void)
{
	llm_client *c = open_model("my-reasoner", NULL);
	llm_response r;
	cJSON *log, *b;

	kt_llm_script_with(
	    &srv, reasoning_refusals(false), kt_reply("at last"), NULL);
	KT_OK(llm_chat(c, &req, &r));
	KT_EQ_STR(r.content, "at last");
	KT_EQ_INT(r.dropped_params, 2);
	llm_response_free(&r);
	log = kt_llm_log(&srv);
	KT_EQ_INT(cJSON_GetArraySize(log), 3);
	b = body_of(log, 1);
	KT_ASSERT(cJSON_GetObjectItem(b, "max_tokens") == NULL);
	KT_EQ_INT(
	    cJSON_GetObjectItem(b, "max_completion_tokens")->valueint, 1234);
	KT_ASSERT(cJSON_GetObjectItem(b, "temperature") != NULL);
	b = body_of(log, 2);
	KT_ASSERT(cJSON_GetObjectItem(b, "max_tokens") == NULL);
	KT_ASSERT(cJSON_GetObjectItem(b, "temperature") == NULL);
	KT_EQ_INT(
	    cJSON_GetObjectItem(b, "max_completion_tokens")->valueint, 1234);
	cJSON_Delete(log);
	llm_close(c);
}

/* A 400 that names no parameter that was sent stays final (one request). */
static void
test_refused_unknown_param_final(void)
{
	llm_client *c = open_model("my-reasoner", NULL);
	cJSON *opts = cJSON_CreateObject(), *log;
	llm_response r;

	cJSON_AddStringToObject(cJSON_AddObjectToObject(opts, "refuse"),
	    "messages", "Invalid 'messages': too many");
	kt_llm_script_with(&srv, opts, kt_reply("never"), NULL);
	KT_EQ_INT(llm_chat(c, &req, &r), KC_EHTTP);
	KT_CONTAINS(kc_lasterr(), "HTTP 400");
	KT_CONTAINS(kc_lasterr(), "not retried");
	KT_ASSERT(!r.unavailable); /* this request's own failure */
	KT_EQ_INT(r.dropped_params, 0);
	llm_response_free(&r);
	log = kt_llm_log(&srv);
	KT_EQ_INT(cJSON_GetArraySize(log), 1);
	cJSON_Delete(log);
	llm_close(c);
}

/* Reasoning in its own field never becomes the content; a reply that
 * spent its limit reasoning (null content, "length") is an empty answer. */
static void
test_reasoning_fields(void)
{
	llm_client *c = open_client(2000);
	cJSON *a1 = kt_reply("the answer"), *a2 = cJSON_CreateObject();
	cJSON *a3 = kt_reply("also an answer");
	llm_response r;

	cJSON_AddStringToObject(
	    a1, "reasoning_content", "```cuda\ndraft\n```\nmore thoughts");
	cJSON_AddNullToObject(a2, "content");
	cJSON_AddStringToObject(a2, "reasoning_content", "still thinking");
	cJSON_AddStringToObject(a2, "finish_reason", "length");
	cJSON_AddStringToObject(a3, "reasoning", "openrouter-style thoughts");
	kt_llm_script(&srv, a1, a2, a3, NULL);
	KT_OK(llm_chat(c, &req, &r));
	KT_EQ_STR(r.content, "the answer");
	KT_EQ_INT(
	    r.reasoning_bytes, strlen("```cuda\ndraft\n```\nmore thoughts"));
	llm_response_free(&r);
	KT_OK(llm_chat(c, &req, &r));
	KT_EQ_STR(r.content, "");
	KT_EQ_STR(r.finish_reason, "length");
	KT_EQ_INT(r.retries, 0);
	llm_response_free(&r);
	KT_OK(llm_chat(c, &req, &r));
	KT_EQ_STR(r.content, "also an answer");
	KT_EQ_INT(r.reasoning_bytes, strlen("openrouter-style thoughts"));
	llm_response_free(&r);
	llm_close(c);
}

static cJSON *
usage_reply(
    const char *content, int prompt, int completion, int reasoning, int cached)
{
	cJSON *a = kt_reply(content);
	cJSON *u = cJSON_AddObjectToObject(a, "usage");

	cJSON_AddNumberToObject(u, "prompt_tokens", prompt);
	cJSON_AddNumberToObject(u, "completion_tokens", completion);
	cJSON_AddNumberToObject(u, "total_tokens", prompt + completion);
	cJSON_AddNumberToObject(
	    cJSON_AddObjectToObject(u, "completion_tokens_details"),
	    "reasoning_tokens", reasoning);
	cJSON_AddNumberToObject(
	    cJSON_AddObjectToObject(u, "prompt_tokens_details"),
	    "cached_tokens", cached);
	return a;
}

/* Usage with reasoning and cached tokens; failed tries count too. */
static void
test_usage_details(void)
{
	static const char *no_content =
	    "{\"choices\": [], \"usage\": {\"prompt_tokens\": 7, "
	    "\"completion_tokens\": 3}}";
	llm_client *c = open_client(2000);
	llm_response r;

	kt_llm_script(&srv, usage_reply("x", 1000, 500, 320, 768), NULL);
	KT_OK(llm_chat(c, &req, &r));
	KT_EQ_INT(r.prompt_tokens, 1000);
	KT_EQ_INT(r.completion_tokens, 500);
	KT_EQ_INT(r.reasoning_tokens, 320);
	KT_EQ_INT(r.cached_tokens, 768);
	llm_response_free(&r);

	kt_llm_script(&srv, kt_raw(200, no_content), kt_raw(200, no_content),
	    kt_raw(200, no_content), NULL);
	KT_EQ_INT(llm_chat(c, &req, &r), KC_EPROTO);
	KT_ASSERT(r.content == NULL);
	KT_EQ_INT(r.prompt_tokens, 21);
	KT_EQ_INT(r.completion_tokens, 9);
	KT_EQ_INT(r.retries, 2);
	KT_ASSERT(r.latency_ms > 0);
	llm_response_free(&r);
	llm_close(c);
}

/* Azure OpenAI: /chat/completions goes before ?api-version=..., the key
 * goes into api-key (no Authorization header). */
static void
test_azure(void)
{
	llm_config cfg;
	llm_client *c;
	llm_response r;
	cJSON *log, *e;

	kt_llm_config(&cfg, &srv);
	snprintf(cfg.base_url, sizeof(cfg.base_url),
	    "http://127.0.0.1:%d/openai/deployments/"
	    "dep1?api-version=2025-01-01",
	    srv.port);
	cfg.api = LLM_API_AZURE;
	KT_OK(llm_http_open(&c, &cfg));
	kt_llm_script(&srv, kt_reply("from azure"), NULL);
	KT_OK(llm_chat(c, &req, &r));
	KT_EQ_STR(r.content, "from azure");
	llm_response_free(&r);
	llm_close(c);
	log = kt_llm_log(&srv);
	e = cJSON_GetArrayItem(log, 0);
	KT_EQ_STR(cJSON_GetObjectItem(e, "path")->valuestring,
	    "/openai/deployments/dep1/chat/completions");
	KT_EQ_STR(cJSON_GetObjectItem(e, "query")->valuestring,
	    "api-version=2025-01-01");
	KT_EQ_STR(cJSON_GetObjectItem(e, "api-key")->valuestring, KT_TEST_KEY);
	KT_ASSERT(cJSON_IsNull(cJSON_GetObjectItem(e, "authorization")));
	cJSON_Delete(log);

	/* The resource's URL alone: the model names the deployment and the
	 * default api-version is added. */
	snprintf(cfg.base_url, sizeof(cfg.base_url), "http://127.0.0.1:%d/",
	    srv.port);
	kc_strlcpy(cfg.model, "dep2", sizeof(cfg.model));
	KT_OK(llm_http_open(&c, &cfg));
	kt_llm_script(&srv, kt_reply("again"), NULL);
	KT_OK(llm_chat(c, &req, &r));
	llm_response_free(&r);
	llm_close(c);
	log = kt_llm_log(&srv);
	e = cJSON_GetArrayItem(log, 0);
	KT_EQ_STR(cJSON_GetObjectItem(e, "path")->valuestring,
	    "/openai/deployments/dep2/chat/completions");
	KT_EQ_STR(cJSON_GetObjectItem(e, "query")->valuestring,
	    "api-version=2024-10-21");
	cJSON_Delete(log);
}

/* vLLM tells the window in /v1/models: the reply's limit is lowered to
 * what the prompt leaves, and a prompt that does not fit is never sent. */
static void
test_window_from_vllm(void)
{
	cJSON *opts = cJSON_CreateObject(), *m, *log;
	llm_message big[2] = {{"system", "s"}, {"user", NULL}};
	llm_request breq = {big, 2, "t/planner/0", 0, NULL, 0, 0, NULL, NULL};
	llm_client *c = open_client(2000);
	llm_limits lim;
	llm_response r;
	char *text;
	int n;

	m = cJSON_CreateObject();
	cJSON_AddStringToObject(m, "id", "test-model");
	cJSON_AddNumberToObject(m, "max_model_len", 1000);
	cJSON_AddItemToArray(cJSON_AddArrayToObject(opts, "models"), m);
	kt_llm_script_with(&srv, opts, kt_reply("short"), NULL);
	llm_get_limits(c, &lim);
	KT_EQ_INT(lim.context_window, 1000);
	KT_EQ_INT(lim.max_tokens, 1234);
	KT_OK(llm_chat(c, &req, &r));
	llm_response_free(&r);
	log = kt_llm_log(&srv);
	/* 15 + 16 bytes of text and 16 of framing each. */
	n = cJSON_GetObjectItem(body_of(log, 0), "max_tokens")->valueint;
	KT_EQ_INT(n, 1000 - (int)llm_estimate_tokens(15 + 16 + 32));
	cJSON_Delete(log);

	text = malloc(4001);
	memset(text, 'x', 4000);
	text[4000] = '\0';
	big[1].content = text;
	KT_EQ_INT(llm_chat(c, &breq, &r), KC_ENOSPC);
	KT_CONTAINS(kc_lasterr(), "does not fit the context window");
	KT_CONTAINS(kc_lasterr(), "(1000 tokens)");
	llm_response_free(&r);
	log = kt_llm_log(&srv);
	KT_EQ_INT(cJSON_GetArraySize(log), 1);
	cJSON_Delete(log);
	free(text);
	llm_close(c);
}

/* Ollama: the window from /api/show, and options.num_ctx sent so that the
 * server does not cut the prompt to its default context. */
static void
test_ollama_num_ctx(void)
{
	cJSON *opts = cJSON_CreateObject(), *log, *o;
	llm_config cfg;
	llm_client *c;
	llm_limits lim;
	llm_response r;

	cJSON_AddNumberToObject(cJSON_AddObjectToObject(opts, "model_info"),
	    "qwen3.context_length", 40960);
	kt_llm_config(&cfg, &srv);
	cfg.api = LLM_API_OLLAMA;
	KT_OK(llm_http_open(&c, &cfg));
	kt_llm_script_with(&srv, opts, kt_reply("from ollama"), NULL);
	KT_OK(llm_chat(c, &req, &r));
	llm_response_free(&r);
	llm_get_limits(c, &lim);
	KT_EQ_INT(lim.context_window, 40960);
	log = kt_llm_log(&srv);
	o = cJSON_GetObjectItem(body_of(log, 0), "options");
	/* 18 prompt tokens + 1234 for the reply, rounded up to 2048. */
	KT_EQ_INT(cJSON_GetObjectItem(o, "num_ctx")->valueint, 2048);
	cJSON_Delete(log);
	llm_close(c);

	/* A configured window wins over the server's and caps num_ctx. */
	cfg.profile.context_window = 1500;
	KT_OK(llm_http_open(&c, &cfg));
	kt_llm_script(&srv, kt_reply("again"), NULL);
	KT_OK(llm_chat(c, &req, &r));
	llm_response_free(&r);
	log = kt_llm_log(&srv);
	o = cJSON_GetObjectItem(body_of(log, 0), "options");
	KT_EQ_INT(cJSON_GetObjectItem(o, "num_ctx")->valueint, 1500);
	KT_EQ_INT(
	    cJSON_GetObjectItem(body_of(log, 0), "max_tokens")->valueint, 1234);
	cJSON_Delete(log);
	llm_close(c);
}

/* Profiles and provider settings from kclaw.json. */
static void
test_profile_config(void)
{
	static const char *json =
	    "{\"llm\": {\"base_url\": \"https://r.example/v1\", \"model\": "
	    "\"my-reasoner-7b\", \"api\": \"azure\", \"reasoning_effort\": "
	    "\"low\", \"max_tokens_cap\": 20000, \"profiles\": {\"gpt-*\": "
	    "{\"seed\": false}, \"my-reasoner*\": {\"temperature\": false, "
	    "\"max_completion_tokens\": true, \"reasoning_effort\": true, "
	    "\"context_window\": 65536}}}}";
	char dir[256], path[512];
	llm_config cfg;
	kc_config kc;

	unsetenv("KCLAW_LLM_MODEL");
	unsetenv("KCLAW_LLM_API_KEY");
	kt_tmpdir(dir, "kt-llmprof");
	snprintf(path, sizeof(path), "%s/kclaw.json", dir);
	KT_OK(kc_write_file(path, json, strlen(json)));
	KT_OK(kc_config_load(&kc, dir));
	KT_OK(llm_config_load(&cfg, &kc));
	KT_EQ_INT(cfg.api, LLM_API_AZURE);
	KT_EQ_STR(cfg.reasoning_effort, "low");
	KT_EQ_INT(cfg.max_tokens_cap, 20000);
	KT_ASSERT(!cfg.profile.temperature);
	KT_ASSERT(cfg.profile.max_completion_tokens);
	KT_ASSERT(cfg.profile.reasoning_effort);
	KT_ASSERT(cfg.profile.seed);
	KT_EQ_INT(cfg.profile.context_window, 65536);
	KT_EQ_STR(cfg.profile.name, "my-reasoner*");

	setenv("KCLAW_LLM_MODEL", "gpt-5", 1);
	setenv("KCLAW_LLM_CONTEXT_WINDOW", "400000", 1);
	KT_OK(llm_config_load(&cfg, &kc));
	KT_EQ_STR(cfg.profile.name, "gpt-*");
	KT_ASSERT(cfg.profile.max_completion_tokens);
	KT_ASSERT(!cfg.profile.seed);
	KT_EQ_INT(cfg.profile.context_window, 400000);
	unsetenv("KCLAW_LLM_MODEL");
	unsetenv("KCLAW_LLM_CONTEXT_WINDOW");

	json = "{\"llm\": {\"model\": \"m\", \"profiles\": {\"m\": "
	       "{\"temprature\": false}}}}";
	KT_OK(kc_write_file(path, json, strlen(json)));
	KT_EQ_INT(llm_config_load(&cfg, &kc), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "unknown field \"temprature\"");
	json = "{\"llm\": {\"model\": \"m\", \"api\": \"bedrock\"}}";
	KT_OK(kc_write_file(path, json, strlen(json)));
	KT_EQ_INT(llm_config_load(&cfg, &kc), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "api 'bedrock' is unknown");

	/* The API style follows the URL when not configured. */
	json = "{\"llm\": {\"model\": \"m\", \"base_url\": "
	       "\"https://x.openai.azure.com/openai/deployments/m\"}}";
	KT_OK(kc_write_file(path, json, strlen(json)));
	KT_OK(llm_config_load(&cfg, &kc));
	KT_EQ_INT(cfg.api, LLM_API_AZURE);
	json = "{\"llm\": {\"model\": \"m\", \"base_url\": "
	       "\"http://gpu1:11434/v1\"}}";
	KT_OK(kc_write_file(path, json, strlen(json)));
	KT_OK(llm_config_load(&cfg, &kc));
	KT_EQ_INT(cfg.api, LLM_API_OLLAMA);
	kt_rmtree(dir);
}

int
main(void)
{
	kt_llm_start(&srv);
	KT_RUN(test_normal_reply);
	KT_RUN(test_429_honours_retry_after);
	KT_RUN(test_5xx_retried);
	KT_RUN(test_error_after_last_try);
	KT_RUN(test_hang_times_out_then_retries);
	KT_RUN(test_truncated_json);
	KT_RUN(test_4xx_not_retried);
	KT_RUN(test_connection_refused);
	KT_RUN(test_config);
	KT_RUN(test_cancel);
	KT_RUN(test_deadline);
	KT_RUN(test_profiles);
	KT_RUN(test_reasoning_model_request);
	KT_RUN(test_refused_temperature_dropped);
	KT_RUN(test_refused_by_message);
	KT_RUN(test_refused_unknown_param_final);
	KT_RUN(test_reasoning_fields);
	KT_RUN(test_usage_details);
	KT_RUN(test_azure);
	KT_RUN(test_window_from_vllm);
	KT_RUN(test_ollama_num_ctx);
	KT_RUN(test_profile_config);
	kt_llm_stop(&srv);
	return 0;
}
