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
static const llm_request req = {msgs, 2, "t/planner/0", 0, NULL, 0};

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
	log = kt_llm_log(&srv);
	KT_EQ_INT(cJSON_GetArraySize(log), 1);
	cJSON_Delete(log);

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
	kt_llm_stop(&srv);
	return 0;
}
