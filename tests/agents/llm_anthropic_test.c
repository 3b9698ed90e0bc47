/*
 * llm_anthropic_test.c - the anthropic provider (Anthropic's Messages API)
 * against the scripted test server's /v1/messages mode, and Ollama's
 * silent prompt cut against its emulation: the request sent (path,
 * x-api-key and anthropic-version headers, the system prompt apart,
 * max_tokens, cache_control on the stable prefix, the cache-break line
 * never sent), thinking blocks kept out of the answer, stop_reason
 * max_tokens as a cut reply, cache tokens counted and priced, retries on
 * 529 and 429 honouring retry-after with each failure said through
 * on_retry, final 401 and spend-limit 429, the key in no log, error or
 * recording, selection by provider setting and URL; and a cut Ollama
 * prompt failing at once with the fix.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent_testlib.h"
#include "kc_config.h"
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
open_anthropic(const char *effort)
{
	llm_client *c;
	llm_config cfg;

	kt_llm_config(&cfg, &srv);
	cfg.api = LLM_API_ANTHROPIC;
	kc_strlcpy(cfg.model, "claude-test", sizeof(cfg.model));
	if (effort != NULL)
		kc_strlcpy(
		    cfg.reasoning_effort, effort, sizeof(cfg.reasoning_effort));
	KT_OK(llm_http_open(&c, &cfg));
	return c;
}

/* A Messages action: text, with the optional fields given. */
static cJSON *
anth_reply(const char *content, const char *thinking, const char *stop)
{
	cJSON *a = kt_reply(content);

	if (thinking != NULL) {
		cJSON_AddStringToObject(a, "thinking", thinking);
		cJSON_AddStringToObject(a, "redacted_thinking", "EncRyPtEd==");
	}
	if (stop != NULL)
		cJSON_AddStringToObject(a, "stop_reason", stop);
	return a;
}

static cJSON *
anth_error(int status, const char *retry_after, const char *message)
{
	cJSON *a = cJSON_CreateObject();

	cJSON_AddNumberToObject(a, "status", status);
	cJSON_AddStringToObject(a, "error", message);
	if (retry_after != NULL)
		cJSON_AddStringToObject(cJSON_AddObjectToObject(a, "headers"),
		    "retry-after", retry_after);
	return a;
}

static const char *
str_of(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItem(o, key);

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool
has_cache_control(const cJSON *block)
{
	const cJSON *cc = cJSON_GetObjectItem(block, "cache_control");

	return cc != NULL && str_of(cc, "type") != NULL &&
	    strcmp(str_of(cc, "type"), "ephemeral") == 0;
}

static void
test_call(void)
{
	llm_client *c = open_anthropic(NULL);
	const cJSON *e, *body, *sys, *m0, *blk;
	llm_response r;
	cJSON *log;

	KT_EQ_STR(llm_provider_name(c), "anthropic");
	kt_llm_script(&srv, anth_reply("hello there", NULL, NULL), NULL);
	KT_OK(llm_chat(c, &req, &r));
	KT_EQ_STR(r.content, "hello there");
	KT_EQ_STR(r.finish_reason, "stop");
	KT_EQ_STR(r.exchange_id, "msg_test_0");
	KT_EQ_INT(r.retries, 0);
	KT_EQ_INT(r.completion_tokens, strlen("hello there") / 4);
	llm_response_free(&r);

	log = kt_llm_log(&srv);
	KT_EQ_INT(cJSON_GetArraySize(log), 1);
	e = cJSON_GetArrayItem(log, 0);
	KT_EQ_STR(str_of(e, "path"), "/v1/messages");
	KT_EQ_STR(str_of(e, "x-api-key"), KT_TEST_KEY);
	KT_EQ_STR(str_of(e, "anthropic-version"), "2023-06-01");
	KT_ASSERT(str_of(e, "authorization") == NULL);
	body = cJSON_GetObjectItem(e, "body");
	KT_EQ_STR(str_of(body, "model"), "claude-test");
	KT_EQ_INT(cJSON_GetObjectItem(body, "max_tokens")->valueint, 1234);
	KT_ASSERT(
	    cJSON_GetObjectItem(body, "temperature")->valuedouble == 0.25);
	KT_ASSERT(cJSON_GetObjectItem(body, "seed") == NULL);
	KT_ASSERT(cJSON_GetObjectItem(body, "stream") == NULL);
	KT_ASSERT(cJSON_GetObjectItem(body, "thinking") == NULL);
	/* The system prompt apart, as a block with the cache breakpoint. */
	sys = cJSON_GetObjectItem(body, "system");
	KT_EQ_INT(cJSON_GetArraySize(sys), 1);
	KT_EQ_STR(
	    str_of(cJSON_GetArrayItem(sys, 0), "text"), "You are a test.");
	KT_ASSERT(has_cache_control(cJSON_GetArrayItem(sys, 0)));
	KT_EQ_INT(cJSON_GetArraySize(cJSON_GetObjectItem(body, "messages")), 1);
	m0 = cJSON_GetArrayItem(cJSON_GetObjectItem(body, "messages"), 0);
	KT_EQ_STR(str_of(m0, "role"), "user");
	blk = cJSON_GetArrayItem(cJSON_GetObjectItem(m0, "content"), 0);
	KT_EQ_STR(str_of(blk, "text"), "Say \"hi\"\nplease.");
	/* No stable part marked: the varying message is not cached. */
	KT_ASSERT(!has_cache_control(blk));
	cJSON_Delete(log);
	llm_close(c);
}

/* A conversation (a re-ask) alternates user and assistant; thinking
 * blocks are reasoning, never the answer; reasoning_effort asks for
 * thinking with a budget within max_tokens and no temperature. */
static void
test_thinking(void)
{
	static const llm_message conv[] = {
	    {"system", "You are a test."},
	    {"user", "first ask"},
	    {"assistant", "a bad answer"},
	    {"user", "again, please"},
	};
	llm_request r4 = req;
	llm_client *c = open_anthropic("medium");
	const cJSON *body, *ms, *th;
	llm_response r;
	cJSON *log;

	r4.messages = conv;
	r4.nmessages = 4;
	r4.max_tokens = 16000;
	kt_llm_script(&srv,
	    anth_reply("```cuda\nthe answer\n```",
	        "```cuda\na draft that must not be parsed\n```", NULL),
	    NULL);
	KT_OK(llm_chat(c, &r4, &r));
	KT_EQ_STR(r.content, "```cuda\nthe answer\n```");
	KT_ASSERT(strstr(r.content, "draft") == NULL);
	KT_ASSERT(strstr(r.content, "EncRyPtEd") == NULL);
	KT_EQ_INT(r.reasoning_bytes,
	    strlen("```cuda\na draft that must not be parsed\n```") +
	        strlen("EncRyPtEd=="));
	llm_response_free(&r);
	log = kt_llm_log(&srv);
	body = cJSON_GetObjectItem(cJSON_GetArrayItem(log, 0), "body");
	ms = cJSON_GetObjectItem(body, "messages");
	KT_EQ_INT(cJSON_GetArraySize(ms), 3);
	KT_EQ_STR(str_of(cJSON_GetArrayItem(ms, 1), "role"), "assistant");
	KT_EQ_STR(str_of(cJSON_GetArrayItem(ms, 2), "role"), "user");
	th = cJSON_GetObjectItem(body, "thinking");
	KT_EQ_STR(str_of(th, "type"), "enabled");
	KT_EQ_INT(cJSON_GetObjectItem(th, "budget_tokens")->valueint, 4096);
	KT_EQ_INT(cJSON_GetObjectItem(body, "max_tokens")->valueint, 16000);
	KT_ASSERT(cJSON_GetObjectItem(body, "temperature") == NULL);
	cJSON_Delete(log);
	llm_close(c);
}

/* stop_reason max_tokens is a cut reply: finish_reason "length", as a
 * cut chat-completions reply, which the runtime asks again. */
static void
test_cut_reply(void)
{
	llm_client *c = open_anthropic(NULL);
	llm_response r;

	kt_llm_script(
	    &srv, anth_reply("```cuda\nhalf a ker", NULL, "max_tokens"), NULL);
	KT_OK(llm_chat(c, &req, &r));
	KT_EQ_STR(r.finish_reason, "length");
	KT_EQ_STR(r.content, "```cuda\nhalf a ker");
	llm_response_free(&r);
	kt_llm_script(&srv, anth_reply("done", NULL, "stop_sequence"), NULL);
	KT_OK(llm_chat(c, &req, &r));
	KT_EQ_STR(r.finish_reason, "stop");
	llm_response_free(&r);
	llm_close(c);
}

/* The stable part of the first user message (before the cache-break
 * line) gets the second breakpoint; the server's cache writes it on the
 * first call and reads it on the next, and the counts are priced. */
static void
test_cache(void)
{
	static char stable[6001], user1[7000], user2[7000];
	llm_message m[2] = {{"system", "You are the Planner of a cache test."},
	    {"user", user1}};
	llm_request r2 = req;
	llm_client *c = open_anthropic(NULL);
	const cJSON *body, *blocks;
	llm_response r;
	uint64_t sys_tokens, stable_tokens, usd_n;
	kc_price price = {"claude*", 3.0, 15.0, 0.3, 15.0, 3.75};
	cJSON *log;
	double usd;

	memset(stable, 's', 6000);
	snprintf(
	    user1, sizeof(user1), "%s\n" LLM_CACHE_BREAK "\nround 1", stable);
	snprintf(
	    user2, sizeof(user2), "%s\n" LLM_CACHE_BREAK "\nround 2", stable);
	r2.messages = m;
	kt_llm_script(&srv, kt_reply("one"), kt_reply("two"), NULL);
	KT_OK(llm_chat(c, &r2, &r));
	sys_tokens = strlen(m[0].content) / 4;
	stable_tokens = (strlen(m[0].content) + 6001) / 4;
	KT_EQ_INT(r.cache_write_tokens, stable_tokens);
	KT_EQ_INT(r.cached_tokens, 0);
	KT_EQ_INT(r.prompt_tokens,
	    (strlen(m[0].content) + 6001 + strlen("round 1")) / 4);
	llm_response_free(&r);
	m[1].content = user2;
	KT_OK(llm_chat(c, &r2, &r));
	KT_EQ_INT(r.cached_tokens, stable_tokens);
	KT_EQ_INT(r.cache_write_tokens, 0);
	KT_ASSERT(r.prompt_tokens > r.cached_tokens);
	(void)sys_tokens;

	/* Priced: read at cached_prompt, written at cache_write. */
	usd = kc_price_usd(
	    &price, 1000000, 1000000, 0, 200000, 300000); /* of 1M prompt */
	usd_n = (uint64_t)(usd * 1000 + 0.5);
	/* 0.5M plain x 3 + 0.2M x 0.3 + 0.3M x 3.75 + 1M x 15 */
	KT_EQ_INT(usd_n, 1500 + 60 + 1125 + 15000);
	llm_response_free(&r);

	log = kt_llm_log(&srv);
	body = cJSON_GetObjectItem(cJSON_GetArrayItem(log, 0), "body");
	blocks = cJSON_GetObjectItem(
	    cJSON_GetArrayItem(cJSON_GetObjectItem(body, "messages"), 0),
	    "content");
	KT_EQ_INT(cJSON_GetArraySize(blocks), 2);
	KT_ASSERT(has_cache_control(cJSON_GetArrayItem(blocks, 0)));
	KT_ASSERT(!has_cache_control(cJSON_GetArrayItem(blocks, 1)));
	KT_EQ_STR(str_of(cJSON_GetArrayItem(blocks, 1), "text"), "round 1");
	KT_ASSERT(strstr(str_of(cJSON_GetArrayItem(blocks, 0), "text"),
	              "kclaw:cache-break") == NULL);
	cJSON_Delete(log);
	llm_close(c);
}

/* The cache-break line reaches no model: the OpenAI-compatible body has
 * the message without it. */
static void
test_cache_break_removed_for_openai(void)
{
	llm_message m[2] = {{"system", "sys"},
	    {"user", "stable part\n" LLM_CACHE_BREAK "\nvarying part"}};
	llm_request r2 = req;
	llm_config cfg;
	llm_client *c;
	llm_response r;
	const cJSON *body;
	cJSON *log;

	r2.messages = m;
	kt_llm_config(&cfg, &srv);
	KT_OK(llm_http_open(&c, &cfg));
	kt_llm_script(&srv, kt_reply("ok"), NULL);
	KT_OK(llm_chat(c, &r2, &r));
	llm_response_free(&r);
	log = kt_llm_log(&srv);
	body = cJSON_GetObjectItem(cJSON_GetArrayItem(log, 0), "body");
	KT_EQ_STR(
	    str_of(cJSON_GetArrayItem(cJSON_GetObjectItem(body, "messages"), 1),
	        "content"),
	    "stable part\nvarying part");
	cJSON_Delete(log);
	llm_close(c);
}

static unsigned nretries;
static long retry_status[8];
static char retry_what[8][1024];

static void
on_retry(void *arg, const llm_retry *rt)
{
	(void)arg;
	if (nretries < 8) {
		retry_status[nretries] = rt->status;
		snprintf(retry_what[nretries], sizeof(retry_what[0]), "%s",
		    rt->what);
	}
	nretries++;
}

/* 529 and 429 are retried after retry-after; each failed try is said at
 * once through on_retry; 401 and a spent budget are final. */
static void
test_retries(void)
{
	llm_client *c = open_anthropic(NULL);
	llm_request r2 = req;
	llm_response r;
	uint64_t t0, dt;
	cJSON *log;

	r2.on_retry = on_retry;
	nretries = 0;
	kt_llm_script(&srv, anth_error(529, "1", "Overloaded"),
	    anth_error(429, NULL, "Number of request tokens has exceeded"),
	    anth_reply("at last", NULL, NULL), NULL);
	t0 = kc_mono_ms();
	KT_OK(llm_chat(c, &r2, &r));
	dt = kc_mono_ms() - t0;
	KT_EQ_STR(r.content, "at last");
	KT_EQ_INT(r.retries, 2);
	/* The backoff alone is at most 100 ms: only retry-after waits 1 s. */
	if (dt < 950)
		KT_FAIL("retried after %llu ms, before retry-after: 1",
		    (unsigned long long)dt);
	llm_response_free(&r);
	KT_EQ_INT(nretries, 2);
	KT_EQ_INT(retry_status[0], 529);
	KT_CONTAINS(retry_what[0], "HTTP 529 (Overloaded)");
	KT_CONTAINS(retry_what[0], "overloaded");
	KT_EQ_INT(retry_status[1], 429);
	KT_CONTAINS(retry_what[1], "limits this key's rate");
	KT_ASSERT(strstr(retry_what[0], KT_TEST_KEY) == NULL);

	nretries = 0;
	kt_llm_script(&srv,
	    anth_error(429, NULL,
	        "You have reached your specified API usage limits "
	        "(enforced_spend_limit_reached)"),
	    anth_reply("never", NULL, NULL), NULL);
	KT_EQ_INT(llm_chat(c, &r2, &r), KC_EHTTP);
	KT_CONTAINS(kc_lasterr(), "spend limit or quota");
	KT_CONTAINS(kc_lasterr(), "not retried");
	KT_EQ_INT(nretries, 0);
	log = kt_llm_log(&srv);
	KT_EQ_INT(cJSON_GetArraySize(log), 1);
	cJSON_Delete(log);
	llm_close(c);

	/* A wrong key: the server's 401, not retried, the key not said. */
	{
		cJSON *opts = cJSON_CreateObject();
		cJSON_AddStringToObject(opts, "anthropic_key", "sk-ant-other");
		c = open_anthropic(NULL);
		kt_llm_script_with(
		    &srv, opts, anth_reply("never", NULL, NULL), NULL);
		KT_EQ_INT(llm_chat(c, &r2, &r), KC_EHTTP);
		KT_CONTAINS(kc_lasterr(), "HTTP 401 (invalid x-api-key)");
		KT_CONTAINS(kc_lasterr(), "KCLAW_LLM_API_KEY");
		KT_ASSERT(strstr(kc_lasterr(), KT_TEST_KEY) == NULL);
		KT_EQ_INT(nretries, 0);
		llm_close(c);
	}
}

/* The key goes into x-api-key only: no log line (failures logged
 * included), no recording file. */
static void
test_key_never_logged(void)
{
	char dir[256], logpath[512], cmd[700], *text;
	llm_client *c, *rc;
	llm_config cfg;
	llm_response r;
	size_t len;
	int fd, saved;

	kt_tmpdir(dir, "kt-anthkey");
	snprintf(logpath, sizeof(logpath), "%s/stderr.log", dir);
	fflush(stderr);
	saved = dup(2);
	fd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	KT_ASSERT(fd >= 0 && saved >= 0);
	dup2(fd, 2);
	close(fd);
	setenv("KCLAW_LOG", "debug", 1);
	kt_llm_config(&cfg, &srv);
	cfg.api = LLM_API_ANTHROPIC;
	kc_strlcpy(cfg.model, "claude-test", sizeof(cfg.model));
	KT_OK(llm_http_open(&c, &cfg));
	KT_OK(llm_record_open(&rc, c, dir, &cfg));
	kt_llm_script(&srv, anth_error(529, NULL, "Overloaded"),
	    anth_reply("recorded", "thought", NULL), NULL);
	KT_OK(llm_chat(rc, &req, &r));
	KT_EQ_STR(r.content, "recorded");
	llm_response_free(&r);
	llm_close(rc);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	KT_OK(kc_read_file(logpath, 1 << 20, &text, &len));
	KT_CONTAINS(text, "HTTP 529");
	KT_ASSERT(strstr(text, KT_TEST_KEY) == NULL);
	free(text);
	unlink(logpath);
	/* Every file of the recording, whatever its name. */
	snprintf(cmd, sizeof(cmd), "grep -rq '%s' '%s'", KT_TEST_KEY, dir);
	KT_ASSERT(WEXITSTATUS(system(cmd)) == 1);
	snprintf(cmd, sizeof(cmd), "grep -rq 'recorded' '%s'", dir);
	KT_ASSERT(WEXITSTATUS(system(cmd)) == 0);
	kt_rmtree(dir);
}

/* KCLAW_LLM_PROVIDER, "llm": {"provider": ...} and api.anthropic.com
 * choose the Messages API; the provider alone gets Anthropic's URL. */
static void
test_selection(void)
{
	char dir[256], path[512];
	static const char *json =
	    "{\"llm\": {\"provider\": \"anthropic\", \"model\": "
	    "\"claude-sonnet-4-5\"}}";
	llm_config cfg;
	kc_config kc;

	kt_tmpdir(dir, "kt-anthsel");
	snprintf(path, sizeof(path), "%s/kclaw.json", dir);
	KT_OK(kc_write_file(path, json, strlen(json)));
	unsetenv("KCLAW_LLM_BASE_URL");
	unsetenv("KCLAW_LLM_MODEL");
	unsetenv("KCLAW_LLM_API");
	unsetenv("KCLAW_LLM_PROVIDER");
	KT_OK(kc_config_load(&kc, dir));
	KT_OK(llm_config_load(&cfg, &kc));
	KT_EQ_INT(cfg.api, LLM_API_ANTHROPIC);
	KT_EQ_STR(cfg.base_url, "https://api.anthropic.com");
	KT_EQ_STR(cfg.profile.name, "anthropic");
	KT_EQ_INT(cfg.profile.context_window, 200000);

	KT_OK(llm_config_load(&cfg, NULL));
	KT_EQ_INT(cfg.api, LLM_API_OPENAI);
	setenv("KCLAW_LLM_PROVIDER", "anthropic", 1);
	KT_OK(llm_config_load(&cfg, NULL));
	KT_EQ_INT(cfg.api, LLM_API_ANTHROPIC);
	KT_EQ_STR(llm_api_name(cfg.api), "anthropic");
	unsetenv("KCLAW_LLM_PROVIDER");
	setenv("KCLAW_LLM_BASE_URL", "https://api.anthropic.com/v1", 1);
	KT_OK(llm_config_load(&cfg, NULL));
	KT_EQ_INT(cfg.api, LLM_API_ANTHROPIC);
	unsetenv("KCLAW_LLM_BASE_URL");
	setenv("KCLAW_LLM_PROVIDER", "bedrock", 1);
	KT_EQ_INT(llm_config_load(&cfg, NULL), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "anthropic");
	unsetenv("KCLAW_LLM_PROVIDER");
	kt_rmtree(dir);
}

/* An action of the Ollama emulation: the prompt cut to `cut` tokens. */
static cJSON *
ollama_cut(int cut, const char *content)
{
	cJSON *a = kt_reply(content);

	cJSON_AddNumberToObject(a, "ollama_cut", cut);
	return a;
}

/* Ollama cuts a long prompt to its context without a word: the call
 * fails at once, not retried, with the fix; a prompt that fits, or one
 * too short for the estimate to matter, is answered. */
static void
test_ollama_cut(void)
{
	static char big[18557];
	llm_message m[2] = {{"system", "s"}, {"user", big}};
	llm_request r2 = req;
	llm_config cfg;
	llm_client *c;
	llm_response r;
	cJSON *log;

	memset(big, 'x', sizeof(big) - 1);
	r2.messages = m;
	kt_llm_config(&cfg, &srv);
	KT_OK(llm_http_open(&c, &cfg));
	/* 18556 bytes, about 4639 tokens; the server kept 2050. */
	kt_llm_script(&srv, ollama_cut(2050, "an answer to a fragment"),
	    kt_reply("never"), NULL);
	KT_EQ_INT(llm_chat(c, &r2, &r), KC_ENOSPC);
	KT_ASSERT(r.content == NULL);
	KT_EQ_INT(r.prompt_tokens, 2050);
	KT_CONTAINS(kc_lasterr(), "counted 2050 prompt tokens");
	KT_CONTAINS(kc_lasterr(), "OLLAMA_CONTEXT_LENGTH");
	KT_CONTAINS(kc_lasterr(), "num_ctx");
	KT_CONTAINS(kc_lasterr(), "not retried");
	llm_response_free(&r);
	log = kt_llm_log(&srv);
	KT_EQ_INT(cJSON_GetArraySize(log), 1);
	cJSON_Delete(log);

	/* The whole prompt counted: answered. */
	kt_llm_script(&srv, ollama_cut(8192, "a whole answer"), NULL);
	KT_OK(llm_chat(c, &r2, &r));
	KT_EQ_STR(r.content, "a whole answer");
	llm_response_free(&r);
	/* A short prompt: the estimate is too rough to judge. */
	kt_llm_script(&srv, ollama_cut(2, "short"), NULL);
	KT_OK(llm_chat(c, &req, &r));
	KT_EQ_STR(r.content, "short");
	llm_response_free(&r);
	llm_close(c);
}

int
main(void)
{
	kt_llm_start(&srv);
	fprintf(stderr, "-- test_call\n");
	test_call();
	fprintf(stderr, "-- test_thinking\n");
	test_thinking();
	fprintf(stderr, "-- test_cut_reply\n");
	test_cut_reply();
	fprintf(stderr, "-- test_cache\n");
	test_cache();
	fprintf(stderr, "-- test_cache_break_removed_for_openai\n");
	test_cache_break_removed_for_openai();
	fprintf(stderr, "-- test_retries\n");
	test_retries();
	fprintf(stderr, "-- test_key_never_logged\n");
	test_key_never_logged();
	fprintf(stderr, "-- test_selection\n");
	test_selection();
	fprintf(stderr, "-- test_ollama_cut\n");
	test_ollama_cut();
	kt_llm_stop(&srv);
	return 0;
}
