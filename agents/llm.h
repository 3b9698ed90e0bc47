/*
 * llm.h - the LLM client: one chat-completions call behind a seam.
 *
 * A client is a table of provider operations (STYLE.md: seams are function
 * tables). Three providers exist:
 *  - http: the OpenAI-compatible POST <base_url>/chat/completions over
 *    libcurl (hosted models, vLLM, SGLang, llama.cpp, Ollama), with retries
 *    and exponential backoff plus jitter on 429 (honouring Retry-After), 5xx,
 *    connection errors, timeouts and unreadable bodies;
 *  - record: wraps another client and writes every exchange to a recording
 *    folder;
 *  - replay: answers from a recording folder; a request without a recorded
 *    answer is an error, never a guess.
 * The recording format is documented in docs/agents.md.
 *
 * The API key is a secret: it goes into the Authorization header and nowhere
 * else (no log line, no error text, no recording).
 */
#ifndef LLM_H
#define LLM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "kc_config.h"

typedef struct {
	const char *role; /* "system", "user" or "assistant" */
	const char *content;
} llm_message;

typedef struct {
	const llm_message *messages;
	size_t nmessages;
	/*
	 * Replay key ("<task name>/<role>/<n>", AgentJob.replay_key) and the
	 * number of the re-ask within it (0 = the first ask). With no key,
	 * recordings are keyed by the request's hash.
	 */
	const char *key;
	unsigned attempt;
	/* When not NULL and set, the call stops at once (KC_ECANCELED):
	 * the task was cancelled or the service is shutting down. */
	const atomic_int *cancel;
	/* Wall-clock ms (kc_now_ms) after which no try starts and a try in
	 * flight stops: the orchestrator's deadline for the job; 0 = none. */
	uint64_t deadline_ms;
} llm_request;

/* Every string is malloc'd and owned by the response; llm_response_free. */
typedef struct {
	char *content;
	char *exchange_id; /* recording name, or the provider's id */
	char *finish_reason;
	uint64_t prompt_tokens;
	uint64_t completion_tokens;
	double latency_ms; /* the whole call, retries and waits included */
	unsigned retries;
} llm_response;

void llm_response_free(llm_response *r);

typedef struct {
	char base_url[KC_URL_MAX]; /* e.g. https://api.openai.com/v1 */
	char model[128];
	char api_key[1024]; /* secret */
	double temperature;
	unsigned max_tokens;
	unsigned timeout_ms;         /* per try */
	unsigned max_tries;          /* tries per call, the first included */
	unsigned backoff_ms;         /* first backoff; doubles per try */
	unsigned backoff_max_ms;     /* cap of one backoff */
	unsigned retry_after_max_ms; /* cap of an honoured Retry-After */
	char record_dir[KC_PATH_MAX];
	char replay_dir[KC_PATH_MAX];
	bool replay_strict; /* replay also requires the same request hash */
} llm_config;

/* Defaults only (no model: one must be configured for the http provider). */
void llm_config_default(llm_config *c);

/*
 * Defaults, then the "llm" object of kclaw.json (kc may be NULL), then the
 * environment: KCLAW_LLM_BASE_URL, KCLAW_LLM_MODEL, KCLAW_LLM_API_KEY,
 * KCLAW_LLM_API_KEY_FILE, KCLAW_LLM_TEMPERATURE, KCLAW_LLM_MAX_TOKENS,
 * KCLAW_LLM_TIMEOUT_MS, KCLAW_LLM_MAX_TRIES, KCLAW_LLM_BACKOFF_MS,
 * KCLAW_LLM_RECORD, KCLAW_LLM_REPLAY, KCLAW_LLM_REPLAY_STRICT.
 */
int llm_config_load(llm_config *c, const kc_config *kc);

typedef struct llm_provider_ops {
	const char *name;
	/* Fills resp on success (the caller frees it); errors via kc_seterr. */
	int (*chat)(void *state, const llm_request *req, llm_response *resp);
	void (*close)(void *state);
} llm_provider_ops;

typedef struct llm_client llm_client;

/* A client over any provider table; takes state (closed by llm_close). */
int llm_client_new(llm_client **out, const llm_provider_ops *ops, void *state);

int llm_http_open(llm_client **out, const llm_config *cfg);
/* Takes inner (also on failure). cfg gives the model and sampling settings
 * written beside each exchange. */
int llm_record_open(llm_client **out, llm_client *inner, const char *dir,
    const llm_config *cfg);
int llm_replay_open(llm_client **out, const char *dir, bool strict);

/* The client the configuration asks for: replay, else http (recorded when
 * record_dir is set). */
int llm_open(llm_client **out, const llm_config *cfg);

const char *llm_provider_name(const llm_client *c);
int llm_chat(llm_client *c, const llm_request *req, llm_response *resp);
void llm_close(llm_client *c);

/* The request's messages as a new JSON array, [{"role":...,"content":...},
 * ...] (the caller deletes it); NULL when out of memory. */
cJSON *llm_messages_json(const llm_request *req);

/* SHA-256 (hex) of the request's messages as compact JSON,
 * [{"role":...,"content":...},...]: the strict replay match. */
int llm_request_hash(const llm_request *req, char out[65]);

/*
 * The recording file name of a request, relative to the recording folder
 * and without extension: "<key>" for the first ask, "<key>.reask<n>" for a
 * re-ask, "by-hash/<sha256>" without a key. Key components are kept to
 * [A-Za-z0-9._-] (others become '_'); "." and ".." components are refused.
 */
int llm_recording_name(const llm_request *req, char *out, size_t n);

#endif
