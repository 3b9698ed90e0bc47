/*
 * llm_record_test.c - recording exchanges through the real HTTP path and
 * replaying them: file names by replay key and re-ask, identical replies on
 * replay, strict matching by request hash, hand-written .txt recordings, a
 * clear error for an unrecorded request, and no API key in any recording.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "agent_testlib.h"
#include "kc_err.h"
#include "kc_test.h"
#include "kc_util.h"
#include "llm.h"

static kt_llm_server srv;
static char dir[256];

static llm_message msgs[] = {
    {"system", "You are a test."},
    {"user", "Write a kernel."},
};

static void
expect_file(const char *rel)
{
	char path[600], *text = NULL;
	size_t len;

	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	KT_OK(kc_read_file(path, 1 << 20, &text, &len));
	if (strstr(text, KT_TEST_KEY) != NULL)
		KT_FAIL("recording %s holds the API key", path);
	KT_CONTAINS(text, "\"format\":\t\"kclaw-llm-exchange/1\"");
	free(text);
}

static void
test_record(void)
{
	llm_request a = {
	    msgs, 2, "vec add/generator/0", 0, NULL, 0, 0, NULL, NULL};
	llm_request b = {
	    msgs, 2, "vec add/generator/0", 1, NULL, 0, 0, NULL, NULL};
	llm_request h = {msgs, 2, NULL, 0, NULL, 0, 0, NULL, NULL};
	char hash[65], name[256];
	llm_client *http, *c;
	llm_config cfg;
	llm_response r;

	kt_llm_config(&cfg, &srv);
	KT_OK(llm_http_open(&http, &cfg));
	KT_OK(llm_record_open(&c, http, dir, &cfg));
	KT_EQ_STR(llm_provider_name(c), "record");
	kt_llm_script(&srv, kt_status(500, NULL), kt_reply("first ```cuda"),
	    kt_reply("second"), kt_reply("by hash"), NULL);
	KT_OK(llm_chat(c, &a, &r));
	KT_EQ_STR(r.content, "first ```cuda");
	KT_EQ_STR(r.exchange_id, "vec_add/generator/0");
	KT_EQ_INT(r.retries, 1);
	llm_response_free(&r);
	KT_OK(llm_chat(c, &b, &r));
	KT_EQ_STR(r.exchange_id, "vec_add/generator/0.reask1");
	llm_response_free(&r);
	KT_OK(llm_chat(c, &h, &r));
	KT_OK(llm_request_hash(&h, hash));
	snprintf(name, sizeof(name), "by-hash/%s", hash);
	KT_EQ_STR(r.exchange_id, name);
	llm_response_free(&r);
	llm_close(c);

	expect_file("vec_add/generator/0.json");
	expect_file("vec_add/generator/0.reask1.json");
	snprintf(name, sizeof(name), "by-hash/%s.json", hash);
	expect_file(name);
}

static void
test_replay_identical(void)
{
	llm_request a = {
	    msgs, 2, "vec add/generator/0", 0, NULL, 0, 0, NULL, NULL};
	llm_request b = {
	    msgs, 2, "vec add/generator/0", 1, NULL, 0, 0, NULL, NULL};
	llm_request h = {msgs, 2, NULL, 0, NULL, 0, 0, NULL, NULL};
	llm_response r1, r2;
	llm_client *c;
	llm_config cfg;
	cJSON *log;

	/* Record one more exchange to compare field by field. */
	kt_llm_config(&cfg, &srv);
	{
		llm_request k = {
		    msgs, 2, "cmp/planner/7", 0, NULL, 0, 0, NULL, NULL};
		llm_client *http, *rec;
		KT_OK(llm_http_open(&http, &cfg));
		KT_OK(llm_record_open(&rec, http, dir, &cfg));
		kt_llm_script(&srv, kt_reply("plan text"), NULL);
		KT_OK(llm_chat(rec, &k, &r1));
		llm_close(rec);
		KT_OK(llm_replay_open(&c, dir, true));
		KT_OK(llm_chat(c, &k, &r2));
		KT_EQ_STR(r2.content, r1.content);
		KT_EQ_STR(r2.exchange_id, r1.exchange_id);
		KT_EQ_STR(r2.finish_reason, r1.finish_reason);
		KT_EQ_INT(r2.prompt_tokens, r1.prompt_tokens);
		KT_EQ_INT(r2.completion_tokens, r1.completion_tokens);
		KT_EQ_INT(r2.retries, r1.retries);
		KT_ASSERT(r2.latency_ms == r1.latency_ms);
		llm_response_free(&r1);
		llm_response_free(&r2);
		llm_close(c);
	}

	/* Replay never touches the network. */
	kt_llm_script(&srv, NULL);
	KT_OK(llm_replay_open(&c, dir, false));
	KT_EQ_STR(llm_provider_name(c), "replay");
	KT_OK(llm_chat(c, &a, &r1));
	KT_EQ_STR(r1.content, "first ```cuda");
	KT_EQ_INT(r1.retries, 1);
	KT_OK(llm_chat(c, &a, &r2));
	KT_EQ_STR(r2.content, r1.content);
	KT_ASSERT(r2.latency_ms == r1.latency_ms);
	llm_response_free(&r1);
	llm_response_free(&r2);
	KT_OK(llm_chat(c, &b, &r1));
	KT_EQ_STR(r1.content, "second");
	llm_response_free(&r1);
	KT_OK(llm_chat(c, &h, &r1));
	KT_EQ_STR(r1.content, "by hash");
	llm_response_free(&r1);
	log = kt_llm_log(&srv);
	KT_EQ_INT(cJSON_GetArraySize(log), 0);
	cJSON_Delete(log);
	llm_close(c);
}

static void
test_replay_keyed_vs_strict(void)
{
	llm_message changed[] = {
	    {"system", "You are a test."},
	    {"user", "Write a kernel. Measured: 1.234 ms"},
	};
	llm_request k = {
	    changed, 2, "vec add/generator/0", 0, NULL, 0, 0, NULL, NULL};
	llm_request unrec = {
	    msgs, 2, "vec add/generator/9", 0, NULL, 0, 0, NULL, NULL};
	llm_client *c;
	llm_response r;

	/* By key, a prompt with other measured numbers still replays. */
	KT_OK(llm_replay_open(&c, dir, false));
	KT_OK(llm_chat(c, &k, &r));
	KT_EQ_STR(r.content, "first ```cuda");
	llm_response_free(&r);
	KT_EQ_INT(llm_chat(c, &unrec, &r), KC_ENOENT);
	KT_CONTAINS(kc_lasterr(), "vec add/generator/9");
	KT_CONTAINS(kc_lasterr(), "vec_add/generator/9.json");
	KT_ASSERT(r.content == NULL);
	llm_close(c);

	KT_OK(llm_replay_open(&c, dir, true));
	KT_EQ_INT(llm_chat(c, &k, &r), KC_ENOENT);
	KT_CONTAINS(kc_lasterr(), "strict replay");
	KT_CONTAINS(kc_lasterr(), "prompt changed");
	llm_close(c);
}

static void
test_hand_written(void)
{
	llm_request k = {msgs, 2, "hand/planner/0", 0, NULL, 0, 0, NULL, NULL};
	llm_request k1 = {msgs, 2, "hand/planner/0", 1, NULL, 0, 0, NULL, NULL};
	char path[600];
	static const char *json = "{\"response\": {\"content\": \"from json\", "
	                          "\"prompt_tokens\": 5}}";
	llm_client *c;
	llm_response r;

	snprintf(path, sizeof(path), "%s/hand/planner", dir);
	KT_OK(kc_mkdirs(path, 0700));
	snprintf(path, sizeof(path), "%s/hand/planner/0.txt", dir);
	KT_OK(kc_write_file(path, "```json\n{\"method\": \"x\"}\n```\n", 29));
	snprintf(path, sizeof(path), "%s/hand/planner/0.reask1.json", dir);
	KT_OK(kc_write_file(path, json, strlen(json)));
	KT_OK(llm_replay_open(&c, dir, false));
	KT_OK(llm_chat(c, &k, &r));
	KT_EQ_STR(r.content, "```json\n{\"method\": \"x\"}\n```\n");
	KT_EQ_STR(r.exchange_id, "hand/planner/0");
	KT_EQ_INT(r.prompt_tokens, 0);
	llm_response_free(&r);
	KT_OK(llm_chat(c, &k1, &r));
	KT_EQ_STR(r.content, "from json");
	KT_EQ_INT(r.prompt_tokens, 5);
	llm_response_free(&r);
	llm_close(c);

	KT_OK(llm_replay_open(&c, dir, true));
	KT_EQ_INT(llm_chat(c, &k, &r), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "plain text");
	llm_close(c);

	snprintf(path, sizeof(path), "%s/hand/planner/0.reask1.json", dir);
	KT_OK(kc_write_file(path, "{\"response\": {}}", 16));
	KT_OK(llm_replay_open(&c, dir, false));
	KT_EQ_INT(llm_chat(c, &k1, &r), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "\"content\"");
	llm_close(c);
}

static void
test_names(void)
{
	llm_request r = {
	    msgs, 2, "my task!/planner/3", 2, NULL, 0, 0, NULL, NULL};
	char name[256];

	KT_OK(llm_recording_name(&r, name, sizeof(name)));
	KT_EQ_STR(name, "my_task_/planner/3.reask2");
	r.key = "../etc/3";
	KT_EQ_INT(llm_recording_name(&r, name, sizeof(name)), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "'..'");
	r.key = "a//b";
	KT_EQ_INT(llm_recording_name(&r, name, sizeof(name)), KC_EINVAL);

	{
		llm_client *c;
		KT_EQ_INT(llm_replay_open(&c, "/nonexistent/recording", false),
		    KC_ENOENT);
		KT_CONTAINS(kc_lasterr(), "/nonexistent/recording");
	}
}

/* Reasoning and cached tokens, the finish reason and the dropped
 * parameters are recorded and replayed; a replay reports the configured
 * limits, so a cut-off reply is re-asked as in the recorded run. */
static void
test_usage_recorded(void)
{
	llm_request k = {msgs, 2, "use/planner/0", 0, NULL, 0, 0, NULL, NULL};
	cJSON *a = kt_reply("cut"), *u, *opts = cJSON_CreateObject();
	llm_client *http, *c;
	llm_config cfg;
	llm_limits lim;
	llm_response r;

	u = cJSON_AddObjectToObject(a, "usage");
	cJSON_AddNumberToObject(u, "prompt_tokens", 900);
	cJSON_AddNumberToObject(u, "completion_tokens", 400);
	cJSON_AddNumberToObject(
	    cJSON_AddObjectToObject(u, "completion_tokens_details"),
	    "reasoning_tokens", 250);
	cJSON_AddNumberToObject(
	    cJSON_AddObjectToObject(u, "prompt_tokens_details"),
	    "cached_tokens", 512);
	cJSON_AddStringToObject(a, "finish_reason", "length");
	cJSON_AddStringToObject(cJSON_AddObjectToObject(opts, "refuse"), "seed",
	    "Unsupported parameter: 'seed'");
	kt_llm_config(&cfg, &srv);
	cfg.seed = 7;
	KT_OK(llm_http_open(&http, &cfg));
	KT_OK(llm_record_open(&c, http, dir, &cfg));
	kt_llm_script_with(&srv, opts, a, NULL);
	KT_OK(llm_chat(c, &k, &r));
	KT_EQ_INT(r.dropped_params, 1);
	llm_response_free(&r);
	llm_close(c);

	cfg.max_tokens_cap = 5000;
	kc_strlcpy(cfg.replay_dir, dir, sizeof(cfg.replay_dir));
	KT_OK(llm_open(&c, &cfg));
	KT_EQ_STR(llm_provider_name(c), "replay");
	KT_OK(llm_chat(c, &k, &r));
	KT_EQ_STR(r.content, "cut");
	KT_EQ_STR(r.finish_reason, "length");
	KT_EQ_INT(r.prompt_tokens, 900);
	KT_EQ_INT(r.completion_tokens, 400);
	KT_EQ_INT(r.reasoning_tokens, 250);
	KT_EQ_INT(r.cached_tokens, 512);
	KT_EQ_INT(r.dropped_params, 1);
	llm_response_free(&r);
	llm_get_limits(c, &lim);
	KT_EQ_INT(lim.max_tokens, 1234);
	KT_EQ_INT(lim.max_tokens_cap, 5000);
	llm_close(c);
}

int
main(void)
{
	kt_llm_start(&srv);
	kt_tmpdir(dir, "kt-rec");
	KT_RUN(test_record);
	KT_RUN(test_replay_identical);
	KT_RUN(test_replay_keyed_vs_strict);
	KT_RUN(test_hand_written);
	KT_RUN(test_names);
	KT_RUN(test_usage_recorded);
	kt_rmtree(dir);
	kt_llm_stop(&srv);
	return 0;
}
