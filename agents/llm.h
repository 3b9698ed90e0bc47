/*
 * llm.h - the LLM client: one chat-completions call behind a seam.
 *
 * A client is a table of provider operations (STYLE.md: seams are function
 * tables). Four providers exist:
 *  - http: the OpenAI-compatible POST <base_url>/chat/completions over
 *    libcurl (hosted models, Azure OpenAI, vLLM, SGLang, llama.cpp, Ollama,
 *    gateways), with retries and exponential backoff plus jitter on 429
 *    (honouring Retry-After), 5xx, connection errors, timeouts and
 *    unreadable bodies; the parameters sent follow the model's profile,
 *    and one the server refuses with a 400 is dropped and the request
 *    sent again;
 *  - anthropic: Anthropic's Messages API, POST <base_url>/v1/messages
 *    (x-api-key and anthropic-version headers, the system prompt apart,
 *    cache_control on the stable prefix, thinking blocks kept out of the
 *    answer, stop_reason max_tokens as a cut reply, cache tokens counted),
 *    over the same libcurl client and retries as http;
 *  - record: wraps another client and writes every exchange to a recording
 *    folder;
 *  - replay: answers from a recording folder; a request without a recorded
 *    answer is an error, never a guess.
 * The recording format is documented in docs/agents.md.
 *
 * The API key is a secret: it goes into the Authorization (or api-key,
 * x-api-key) header and nowhere else (no log line, no error text, no
 * recording).
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

/*
 * A line of its own in a message that splits it into a stable part (before
 * it: the same bytes on every call of a role in a task) and a varying part.
 * A provider that caches by explicit breakpoints (anthropic) puts one at
 * the end of the stable part; every provider removes the line itself, so a
 * model never sees it and an automatic prefix cache (OpenAI, vLLM) gets
 * the same bytes either way.
 */
#define LLM_CACHE_BREAK "<!-- kclaw:cache-break -->"

/* A failed try that will be retried (llm_request.on_retry). */
typedef struct {
	unsigned try_no;    /* the try that failed, from 1 */
	unsigned max_tries; /* tries per call, the first included */
	long status;        /* HTTP status, 0 when none came */
	unsigned wait_ms;   /* until the next try */
	const char *what;   /* what failed, the server's message and what to
	                       do; never the key */
} llm_retry;

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
	/* The reply's token limit for this call; 0 = the configured one.
	 * Raised by the runtime after a reply was cut off at the limit. */
	unsigned max_tokens;
	/* When not NULL, called (in the caller's thread, before the wait)
	 * after each failed try that is retried: so the failure is said while
	 * the call goes on, not only when it ends. */
	void (*on_retry)(void *arg, const llm_retry *r);
	void *on_retry_arg;
} llm_request;

/*
 * Every string is malloc'd and owned by the response; llm_response_free.
 * A call that fails still fills the counters (tokens the server reported
 * for failed tries, latency, retries), so failed calls are counted too.
 */
typedef struct {
	/* The answer without the reasoning: a reply's reasoning_content or
	 * reasoning field is never part of it. */
	char *content;
	char *exchange_id;   /* recording name, or the provider's id */
	char *finish_reason; /* "stop", "length" (cut off at the limit), ... */
	uint64_t prompt_tokens;
	uint64_t completion_tokens;
	uint64_t reasoning_tokens; /* of completion_tokens */
	uint64_t cached_tokens;    /* of prompt_tokens: read from a cache */
	uint64_t
	    cache_write_tokens; /* of prompt_tokens: written to a cache
	                           (Anthropic's cache_creation_input_tokens,
	                           priced above plain input) */
	double latency_ms;      /* the whole call, retries and waits included */
	unsigned retries;
	unsigned dropped_params; /* parameters refused by a 400 and dropped */
	size_t reasoning_bytes;  /* length of the reasoning field, if any */
	/* A failed call whose tries failed for the provider's own reasons
	 * (no connection, 429, 502, 503, 504, 529; the last one such), from
	 * a provider that answered this client before: it is down or
	 * overloaded, which says nothing about this request. */
	bool unavailable;
} llm_response;

void llm_response_free(llm_response *r);

/*
 * Which optional request parameters are sent: a profile chosen by the model
 * name (llm_profile_for), overridden by kclaw.json "llm"."profiles".
 */
typedef struct {
	bool temperature;
	bool top_p;
	bool max_completion_tokens; /* the limit as max_completion_tokens, not
	                               max_tokens (OpenAI reasoning models) */
	bool reasoning_effort;
	bool seed;
	bool response_format;
	unsigned context_window; /* tokens; 0 = unknown */
	char name[32];           /* "openai-reasoning", "classic", ... */
} llm_profile;

/* How the endpoint is addressed: URL shape, key header, extra fields. */
typedef enum {
	LLM_API_OPENAI = 0, /* OpenAI-compatible: Authorization: Bearer */
	LLM_API_AZURE,      /* Azure OpenAI: api-key header, deployments URL */
	LLM_API_OLLAMA,     /* Ollama's /v1: options.num_ctx is sent */
	LLM_API_ANTHROPIC,  /* Anthropic's Messages API: x-api-key header */
} llm_api;

/* The API style's name in kclaw.json and KCLAW_LLM_API / _PROVIDER. */
const char *llm_api_name(llm_api api);

typedef struct {
	char base_url[KC_URL_MAX]; /* e.g. https://api.openai.com/v1 */
	char model[128];
	char api_key[1024];   /* secret */
	llm_api api;          /* "api" in kclaw.json; guessed from the URL */
	char api_version[32]; /* Azure's api-version when the URL has none */
	char anthropic_version[32]; /* the anthropic-version header */
	llm_profile profile;        /* resolved for model by llm_config_load */
	double temperature;
	double top_p;              /* < 0: not sent */
	long long seed;            /* < 0: not sent */
	char reasoning_effort[16]; /* "" (not sent), low, medium, high, ... */
	char response_format[16];  /* "" (not sent) or "json_object" */
	unsigned max_tokens;
	unsigned max_tokens_cap; /* the highest limit a cut-off reply gets */
	unsigned timeout_ms;     /* per try */
	unsigned max_tries;      /* tries per call, the first included */
	unsigned backoff_ms;     /* first backoff; doubles per try */
	unsigned backoff_max_ms; /* cap of one backoff */
	unsigned retry_after_max_ms; /* cap of an honoured Retry-After */
	char record_dir[KC_PATH_MAX];
	char replay_dir[KC_PATH_MAX];
	bool replay_strict; /* replay also requires the same request hash */
} llm_config;

/* Defaults only (no model: one must be configured for the http provider). */
void llm_config_default(llm_config *c);

/*
 * The built-in profile for a model name (a provider prefix such as
 * "openai/" is ignored): OpenAI reasoning models (gpt-5*, o1*, o3*, o4*)
 * take max_completion_tokens and reasoning_effort and no temperature or
 * top_p; every other model gets the classic parameters.
 */
void llm_profile_for(const char *model, llm_profile *out);

/*
 * Applies the "profiles" object of kclaw.json's "llm" section: each key is
 * a glob over model names ("gpt-oss*"), each value overrides the fields it
 * names ({"temperature": false, "context_window": 131072}); the first key
 * that matches wins. Returns KC_EINVAL (with kc_seterr) on a bad value.
 */
int llm_profile_apply(llm_profile *p, const char *model, const cJSON *profiles);

/* The prompt tokens of a text, estimated at 3.5 bytes per token. */
unsigned llm_estimate_tokens(size_t bytes);

/*
 * Defaults, then the "llm" object of kclaw.json (kc may be NULL), then the
 * environment: KCLAW_LLM_BASE_URL, KCLAW_LLM_MODEL, KCLAW_LLM_API_KEY,
 * KCLAW_LLM_API_KEY_FILE, KCLAW_LLM_API (or KCLAW_LLM_PROVIDER; "provider"
 * in kclaw.json: openai, azure, ollama, anthropic), KCLAW_LLM_TEMPERATURE,
 * KCLAW_LLM_MAX_TOKENS, KCLAW_LLM_CONTEXT_WINDOW,
 * KCLAW_LLM_REASONING_EFFORT,
 * KCLAW_LLM_TIMEOUT_MS, KCLAW_LLM_MAX_TRIES, KCLAW_LLM_BACKOFF_MS,
 * KCLAW_LLM_RECORD, KCLAW_LLM_REPLAY, KCLAW_LLM_REPLAY_STRICT.
 */
int llm_config_load(llm_config *c, const kc_config *kc);

/* What the model can take: the context window and the reply's limit. */
typedef struct {
	unsigned context_window; /* tokens; 0 = unknown */
	unsigned max_tokens;     /* the configured reply limit; 0 = unknown */
	unsigned max_tokens_cap; /* the highest limit a re-ask may ask for */
} llm_limits;

typedef struct llm_provider_ops {
	const char *name;
	/* Fills resp (the caller frees it, also on failure: it then holds the
	 * counters of the failed tries); errors via kc_seterr. */
	int (*chat)(void *state, const llm_request *req, llm_response *resp);
	void (*close)(void *state);
	/* May be NULL (nothing known). May ask the server (vLLM's
	 * /v1/models max_model_len), once. */
	void (*limits)(void *state, llm_limits *out);
} llm_provider_ops;

typedef struct llm_client llm_client;

/* A client over any provider table; takes state (closed by llm_close). */
int llm_client_new(llm_client **out, const llm_provider_ops *ops, void *state);

/* The http provider, or the anthropic one when cfg->api says so. */
int llm_http_open(llm_client **out, const llm_config *cfg);
/* Takes inner (also on failure). cfg gives the model and sampling settings
 * written beside each exchange. */
int llm_record_open(llm_client **out, llm_client *inner, const char *dir,
    const llm_config *cfg);
int llm_replay_open(llm_client **out, const char *dir, bool strict);
/* Replay that reports limits (the configured ones, so that a replayed job
 * re-asks a cut-off reply as the recorded run did); limits may be NULL. */
int llm_replay_open_limits(
    llm_client **out, const char *dir, bool strict, const llm_limits *limits);

/* The client the configuration asks for: replay, else http (recorded when
 * record_dir is set). */
int llm_open(llm_client **out, const llm_config *cfg);

const char *llm_provider_name(const llm_client *c);
/* resp is filled also on failure (counters only): free it either way. */
int llm_chat(llm_client *c, const llm_request *req, llm_response *resp);
/* The model's limits as far as the provider knows them (zeros if not). */
void llm_get_limits(llm_client *c, llm_limits *out);
void llm_close(llm_client *c);

/* The request's messages as a new JSON array, [{"role":...,"content":...},
 * ...], LLM_CACHE_BREAK lines left out (the caller deletes it); NULL when
 * out of memory. */
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
