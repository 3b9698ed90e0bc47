/*
 * agent.h - the agent runtime shared by the six roles (DESIGN.md "Agents").
 *
 * A job (kclaw.AgentJob) becomes a reply (kclaw.AgentReply) like this:
 * render the role's prompt templates from the prompts folder (read per job,
 * so they can be edited while workers run), call the LLM, parse and
 * validate the reply, and when it is malformed ask again with the parse
 * error, at most max_asks times in all. The reply carries the result, the
 * id of the exchange that gave it and the tokens and latency of all calls.
 *
 * Roles are a table (agent_role); each knows its prompt file, what extra
 * variables it adds and how it validates a reply.
 */
#ifndef AGENT_H
#define AGENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "kc_util.h"
#include "kclaw.pb-c.h"
#include "llm.h"
#include "worker.h"

#define AGENT_DEFAULT_MAX_ASKS 3

typedef struct {
	llm_client *llm;
	const char *prompts_dir;
	unsigned max_asks; /* asks per job, the first included; 0 = default */
	/* May be NULL; when set, the job in flight stops (see agent_watch). */
	const atomic_int *cancel;
	/* The job's deadline (WorkReply.deadline_unix_ms); 0 = none. */
	uint64_t deadline_ms;
	/* The configured model's name, reported with the usage; may be NULL. */
	const char *model;
	/* May be NULL; called in the job's thread when a model call fails
	 * and is retried, so the orchestrator hears of it at once (agent_serve
	 * sends it as WorkRequest.progress). */
	void (*progress)(void *arg, const Kclaw__AgentProgress *p);
	void *progress_arg;
} agent_ctx;

/* ---- template variables ---- */

typedef struct {
	char *name;
	char *value;
} agent_var;

typedef struct {
	agent_var *v;
	size_t n;
	size_t cap;
} agent_vars;

/* Sets (copies) name = value, replacing an earlier value. */
int agent_vars_set(agent_vars *vars, const char *name, const char *value);
/* Takes value (malloc'd), also on failure. */
int agent_vars_take(agent_vars *vars, const char *name, char *value);
const char *agent_vars_get(const agent_vars *vars, const char *name);
void agent_vars_free(agent_vars *vars);

/*
 * Renders a template: {{name}} is replaced by the variable's value,
 * {{#name}}...{{/name}} keeps its body only when the value is not empty and
 * {{^name}}...{{/name}} only when it is. An unknown name is an error that
 * names the template (`where`) and the variable, so a typo in an edited
 * template is caught at once. *out is malloc'd (caller frees).
 */
int agent_render(
    const char *tmpl, const agent_vars *vars, const char *where, char **out);
/* Reads prompts_dir/<file> and renders it. */
int agent_render_file(const char *prompts_dir, const char *file,
    const agent_vars *vars, char **out);

/* The variables every role's template may use, from the job. */
int agent_job_vars(const Kclaw__AgentJob *job, agent_vars *vars);

/* ---- reply parsing ---- */

/*
 * The part of a reply to parse: after a leading <think>...</think> section
 * that reasoning models (served by vLLM, SGLang, llama.cpp, Ollama) put
 * before the answer, where drafts of code would be mistaken for it.
 */
const char *agent_reply_body(const char *content);

typedef struct {
	char lang[32]; /* the word after the opening fence, lower case */
	char *body;    /* malloc'd */
	unsigned line; /* line of the opening fence, from 1 */
} agent_block;

/*
 * Splits a reply into its fenced ``` blocks. A block that is opened and
 * never closed (a reply cut off by max_tokens) is an error. Free with
 * agent_blocks_free.
 */
int agent_parse_blocks(
    const char *text, agent_block **blocks, size_t *n, kc_str *err);
void agent_blocks_free(agent_block *blocks, size_t n);

/*
 * The JSON object of a reply: its first ```json block, else the whole reply
 * when it is a JSON object. *out is the parsed object (cJSON_Delete it).
 */
struct cJSON;
int agent_parse_json(const char *text, struct cJSON **out, kc_str *err);

/* A copy of a source with its comments blanked (caller frees). */
char *agent_strip_comments(const char *source);

/* Names of the extern "C" __global__ kernels a source defines. */
int agent_kernel_names(const char *source, char ***names, size_t *n);
void agent_names_free(char **names, size_t n);

/*
 * Checks a candidate against the contract of DESIGN.md "Candidates" as far
 * as it can be checked without a compiler: extern "C" __global__ kernels, no
 * host code, only toolkit headers; the plan valid against the task's
 * tensors (kc_plan_check), every kernel step naming a kernel of the source,
 * grid and block of 1-3 positive integers, typed scalars of a known type.
 * On failure err says what is wrong, for the model to fix.
 */
int agent_check_candidate(const Kclaw__TaskSpec *task, const char *source,
    const char *plan_json, kc_str *err);

/*
 * Reads up to max candidates from a reply: each is a ```cuda (or ```cpp,
 * ```c++, ```cu) block followed by a ```json plan block. Candidates are
 * checked with agent_check_candidate. *out is an array of *n new Candidates
 * (free each with kclaw__candidate__free_unpacked, then the array).
 */
int agent_parse_candidates(const Kclaw__TaskSpec *task, const char *text,
    size_t max, Kclaw__Candidate ***out, size_t *n, kc_str *err);

/* ---- static features ---- */

/*
 * Features of a source found by rules (source "rule"): shared-memory
 * tiling, vector loads and stores, tensor-core instructions, loops over K,
 * atomics, warp shuffles, bounds checks, number of kernels, ...; from the
 * plan (steps, scratch) and, when given, the evaluation (registers, spills).
 * Appends to *feats (n_feats entries), each a new Feature.
 */
int agent_rule_features(const char *source, const char *plan_json,
    const Kclaw__EvalResult *eval, Kclaw__Feature ***feats, size_t *n_feats);

/* ---- roles and the runtime ---- */

typedef struct agent_role {
	Kclaw__Role role;
	const char *name;  /* --role and the prompt file <name>.md */
	const char *title; /* "Planner" */
	/* Adds role-specific template variables. */
	int (*prepare)(const Kclaw__AgentJob *job, agent_vars *vars);
	/*
	 * Validates a reply and fills the result into reply. KC_EINVAL with
	 * err set when the reply is malformed (the model is asked again);
	 * last is true on the last ask.
	 */
	int (*accept)(const Kclaw__AgentJob *job, const char *text, bool last,
	    Kclaw__AgentReply *reply, kc_str *err);
} agent_role;

const agent_role *agent_role_by_name(const char *name);
const agent_role *agent_role_by_id(Kclaw__Role role);

/*
 * Handles one job. Never fails because of the job or the model: such
 * failures become reply->ok = false with the error text. Returns KC_ENOMEM
 * only. *reply is new (free with kclaw__agent_reply__free_unpacked).
 */
int agent_handle(const agent_ctx *ctx, const Kclaw__AgentJob *job,
    Kclaw__AgentReply **reply);

/*
 * Checks every reply of a recording folder offline, as its role's runtime
 * would (the role is the folder above each file: <task>/<role>/<n>.json or
 * .txt). task may be NULL (tensor names are then not checked). Prints one
 * line per file to out; *bad counts the failures.
 */
int agent_check_recording(const char *dir, const Kclaw__TaskSpec *task,
    FILE *out, unsigned *files, unsigned *bad);

/* ---- control events ---- */

/*
 * Watches the orchestrator's events (DESIGN.md "Processes": agents
 * subscribe to control events) on a thread of its own: when the task of
 * the job in flight is cancelled ("task.<id>.task_cancelled") or the
 * service shuts down ("system.shutdown"), it raises the flag that
 * agent_watch_flag returns, so the LLM call stops instead of running to
 * its deadline.
 */
typedef struct agent_watch agent_watch;

int agent_watch_open(agent_watch **out, const char *events_url);
void agent_watch_close(agent_watch *w);
/* The job in flight belongs to task_id; lowers the flag. */
void agent_watch_begin(agent_watch *w, const char *task_id);
void agent_watch_end(agent_watch *w);
const atomic_int *agent_watch_flag(agent_watch *w);

/*
 * Serves jobs for role from w until the orchestrator says shut down
 * (returns 0) or refuses the worker (KC_EPERM). watch may be NULL.
 */
int agent_serve(const agent_ctx *ctx, const agent_role *role, kc_worker *w,
    agent_watch *watch);

/* Sets a string field of a protobuf-c message being built: frees the old
 * value unless it is the empty default. */
int agent_pb_setstr(char **field, const char *value);

#endif
