/*
 * agent.c - the runtime: one job through prompt, LLM, validation and
 * bounded re-asks, and the pull loop of a worker process. See agent.h.
 */
#include "agent.h"

#include <protobuf-c/protobuf-c.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kc_err.h"
#include "kc_log.h"

int
agent_pb_setstr(char **field, const char *value)
{
	char *v = strdup(value ? value : "");

	if (v == NULL)
		return KC_ENOMEM;
	if (*field != NULL && *field != (char *)protobuf_c_empty_string)
		free(*field);
	*field = v;
	return 0;
}

/* The conversation of one job: messages and the strings they point to. */
typedef struct {
	llm_message *m;
	char **owned;
	size_t n;
} agent_conv;

static int
agent_conv_add(agent_conv *c, const char *role, char *content)
{
	llm_message *m;
	char **o;

	if (content == NULL)
		return KC_ENOMEM;
	m = realloc(c->m, (c->n + 1) * sizeof(*m));
	if (m != NULL)
		c->m = m;
	o = realloc(c->owned, (c->n + 1) * sizeof(*o));
	if (o != NULL)
		c->owned = o;
	if (m == NULL || o == NULL) {
		free(content);
		return KC_ENOMEM;
	}
	c->m[c->n].role = role;
	c->m[c->n].content = content;
	c->owned[c->n++] = content;
	return 0;
}

static void
agent_conv_free(agent_conv *c)
{
	size_t i;

	for (i = 0; i < c->n; i++)
		free(c->owned[i]);
	free(c->owned);
	free(c->m);
}

static int agent_fail(Kclaw__AgentReply *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Marks the reply failed with a message for the orchestrator's events. */
static int
agent_fail(Kclaw__AgentReply *r, const char *fmt, ...)
{
	char msg[4096];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	r->ok = false;
	return agent_pb_setstr(&r->error, msg);
}

/* Renders the system and first user message of a job from its vars. */
static int
agent_render_messages(const agent_ctx *ctx, const agent_role *role,
    agent_vars *vars, agent_conv *conv)
{
	char file[64], *text;
	int rv;

	if ((rv = agent_render_file(
	         ctx->prompts_dir, "contract.md", vars, &text)) != 0 ||
	    (rv = agent_vars_take(vars, "contract", text)) != 0)
		return rv;
	if ((rv = agent_render_file(
	         ctx->prompts_dir, "system.md", vars, &text)) != 0 ||
	    (rv = agent_conv_add(conv, "system", text)) != 0)
		return rv;
	snprintf(file, sizeof(file), "%s.md", role->name);
	if ((rv = agent_render_file(ctx->prompts_dir, file, vars, &text)) !=
	        0 ||
	    (rv = agent_conv_add(conv, "user", text)) != 0)
		return rv;
	return 0;
}

/* The variables of a job, then its first messages. */
static int
agent_first_messages(const agent_ctx *ctx, const agent_role *role,
    const Kclaw__AgentJob *job, agent_vars *vars, agent_conv *conv)
{
	int rv;

	if ((rv = agent_job_vars(job, vars)) != 0 ||
	    (rv = agent_vars_set(vars, "role", role->name)) != 0 ||
	    (rv = agent_vars_set(vars, "role_title", role->title)) != 0 ||
	    (rv = agent_vars_set(vars, "error", "")) != 0 ||
	    (rv = agent_vars_set(vars, "rule_features", "")) != 0 ||
	    (rv = role->prepare(job, vars)) != 0)
		return rv;
	return agent_render_messages(ctx, role, vars, conv);
}

/* The prompt tokens of a conversation, estimated as the HTTP client does
 * (llm_estimate_tokens over the texts plus a little framing each). */
static unsigned
agent_conv_tokens(const agent_conv *c)
{
	size_t i, n = 0;

	for (i = 0; i < c->n; i++)
		n += strlen(c->m[i].content) + 16;
	return llm_estimate_tokens(n);
}

/* The memories a prompt may lose to fit a context window, and which end
 * of each to keep: the latest history, the best-ranked methods. */
static const struct {
	const char *name;
	bool keep_tail;
} agent_memories[] = {
    {"opt_history", true},
    {"repair_chain", true},
    {"methods", false},
};

/* Halves the longest memory at a line boundary (empties a short one);
 * false when every memory is already empty. */
static int
agent_shrink_memory(agent_vars *vars, bool *shrunk)
{
	const char *v, *best = NULL, *name = NULL, *cut;
	size_t i, len, blen = 0, keep;
	bool tail = false;
	kc_str s = {0};
	int rv;

	*shrunk = false;
	for (i = 0; i < KC_ARRAY_LEN(agent_memories); i++) {
		v = agent_vars_get(vars, agent_memories[i].name);
		if (v != NULL && (len = strlen(v)) > blen) {
			best = v;
			blen = len;
			name = agent_memories[i].name;
			tail = agent_memories[i].keep_tail;
		}
	}
	if (best == NULL)
		return 0;
	*shrunk = true;
	if (blen < 256)
		return agent_vars_set(vars, name, "");
	keep = blen / 2;
	if (tail) {
		cut = best + blen - keep;
		while (*cut != '\0' && cut[-1] != '\n')
			cut++;
		rv = kc_str_printf(&s,
		    "(earlier entries left out to fit the model's context "
		    "window)\n%s",
		    cut);
	} else {
		cut = best + keep;
		while (cut > best && cut[-1] != '\n')
			cut--;
		rv = kc_str_appendn(&s, best, (size_t)(cut - best));
		if (rv == 0)
			rv = kc_str_append(&s,
			    "(further entries left out to fit the model's "
			    "context window)\n");
	}
	if (rv != 0) {
		kc_str_free(&s);
		return rv;
	}
	return agent_vars_take(vars, name, kc_str_take(&s));
}

/*
 * Fits the first messages into the model's context window, when it is
 * known, keeping room for the reply (the configured limit, at most a
 * quarter of the window): the rendered memories are shortened first; a
 * prompt that still does not fit fails the job (reply->ok = false).
 */
static int
agent_fit_prompt(const agent_ctx *ctx, const agent_role *role,
    const Kclaw__AgentJob *job, agent_vars *vars, agent_conv *conv,
    Kclaw__AgentReply *r)
{
	unsigned reserve, budget, tokens = agent_conv_tokens(conv), first;
	llm_limits lim;
	bool shrunk = true;
	int rv, rounds = 0;

	llm_get_limits(ctx->llm, &lim);
	if (lim.context_window == 0)
		return 0;
	reserve = lim.context_window / 4;
	if (lim.max_tokens > 0 && lim.max_tokens < reserve)
		reserve = lim.max_tokens;
	budget = lim.context_window - reserve;
	first = tokens;
	while (tokens > budget && shrunk && rounds++ < 32) {
		if ((rv = agent_shrink_memory(vars, &shrunk)) != 0)
			return rv;
		if (!shrunk)
			break;
		agent_conv_free(conv);
		memset(conv, 0, sizeof(*conv));
		if ((rv = agent_render_messages(ctx, role, vars, conv)) != 0)
			return rv;
		tokens = agent_conv_tokens(conv);
	}
	if (tokens <= budget) {
		if (tokens != first)
			KC_WARN("job %s: the %s prompt of about %u tokens was "
			        "cut to %u by shortening its memories, to fit "
			        "a context window of %u tokens",
			    job->job_id, role->name, first, tokens,
			    lim.context_window);
		return 0;
	}
	rv = agent_fail(r,
	    "the %s prompt needs about %u tokens (estimated at 3.5 bytes per "
	    "token) even with its memories left out, but the model's context "
	    "window is %u tokens, %u of them kept for the reply; raise the "
	    "window (\"llm\".\"context_window\", the server's max_model_len "
	    "or num_ctx), lower max_tokens, or shorten the task's description "
	    "and reference",
	    role->title, tokens, lim.context_window, reserve);
	r->stop_task = true;
	return rv == 0 ? KC_ENOSPC : rv;
}

/* Adds one call's counters; a failed call counts too. */
static void
agent_usage_add(Kclaw__Usage *u, const llm_response *resp, bool failed)
{
	u->prompt_tokens += resp->prompt_tokens;
	u->completion_tokens += resp->completion_tokens;
	u->reasoning_tokens += resp->reasoning_tokens;
	u->cached_tokens += resp->cached_tokens;
	u->cache_write_tokens += resp->cache_write_tokens;
	u->latency_ms += resp->latency_ms;
	u->retries += resp->retries;
	u->dropped_params += resp->dropped_params;
	u->calls++;
	if (failed)
		u->failed_calls++;
}

/*
 * A reply cut off at its token limit (finish_reason "length") is asked
 * again: first with the limit doubled (up to the cap), then, or when the
 * limit cannot be raised, with a request to be shorter. At most this many
 * such re-asks per job, besides those for malformed replies.
 */
#define AGENT_MAX_TRUNCATED 2

static bool
agent_truncated(const llm_response *resp)
{
	return resp->finish_reason != NULL &&
	    strcmp(resp->finish_reason, "length") == 0;
}

/* What a failed, retried model call of a job tells the orchestrator. */
typedef struct {
	const agent_ctx *ctx;
	const agent_role *role;
	const Kclaw__AgentJob *job;
} agent_retry_arg;

static void
agent_on_retry(void *arg, const llm_retry *rt)
{
	const agent_retry_arg *a = arg;
	Kclaw__AgentProgress p = KCLAW__AGENT_PROGRESS__INIT;
	char error[1400];

	snprintf(error, sizeof(error),
	    "model call try %u of %u failed: %s; retrying in %.1f s",
	    rt->try_no, rt->max_tries, rt->what, (double)rt->wait_ms / 1000);
	p.job_id = a->job->job_id;
	p.role = a->role->role;
	p.error = error;
	p.http_status = rt->status > 0 ? (uint32_t)rt->status : 0;
	p.failed_try = rt->try_no;
	p.max_tries = rt->max_tries;
	p.retry_in_ms = rt->wait_ms;
	a->ctx->progress(a->ctx->progress_arg, &p);
}

/* Asks until a reply is valid or max_asks is reached. */
static int
agent_converse(const agent_ctx *ctx, const agent_role *role,
    const Kclaw__AgentJob *job, agent_vars *vars, agent_conv *conv,
    Kclaw__AgentReply *r)
{
	unsigned max = ctx->max_asks ? ctx->max_asks : AGENT_DEFAULT_MAX_ASKS;
	const char *key =
	    job->replay_key && job->replay_key[0] ? job->replay_key : NULL;
	unsigned bad = 0, cut = 0, attempt = 0, limit = 0;
	llm_response resp;
	llm_limits lim;
	agent_retry_arg rarg = {ctx, role, job};
	kc_str err = {0};
	char *text;
	int rv = 0;

	llm_get_limits(ctx->llm, &lim);
	while (bad < max) {
		llm_request req = {conv->m, conv->n, key, attempt, ctx->cancel,
		    ctx->deadline_ms, limit,
		    ctx->progress != NULL ? agent_on_retry : NULL, &rarg};
		if (ctx->cancel != NULL && atomic_load(ctx->cancel) != 0) {
			rv = agent_fail(r,
			    "task %s was cancelled or the service is shutting "
			    "down; the job was stopped",
			    job->task_id);
			break;
		}
		rv = llm_chat(ctx->llm, &req, &resp);
		agent_usage_add(r->usage, &resp, rv != 0);
		if (rv != 0 && rv != KC_ENOMEM && r->plan != NULL) {
			/* The Planner's screening ask went unanswered (a
			 * replay recorded without screening, a failed call):
			 * the plan bound to the retrieved methods stands. */
			KC_WARN("job %s: the %s's screening ask got no answer "
			        "(%s); its plan is bound to %s",
			    job->job_id, role->name, kc_lasterr(),
			    r->plan->method);
			kc_clearerr();
			llm_response_free(&resp);
			/* A replay's calls are the exchanges it has: a
			 * lookup that finds none is no call. */
			if (rv == KC_ENOENT &&
			    strcmp(llm_provider_name(ctx->llm), "replay") ==
			        0) {
				r->usage->calls--;
				r->usage->failed_calls--;
			}
			r->ok = true;
			rv = 0;
			break;
		}
		if (rv != 0) {
			bool unavailable = resp.unavailable;
			llm_response_free(&resp);
			if (rv == KC_ENOMEM)
				break;
			/* The server cut the prompt to its context: so it
			 * will every prompt of the task. */
			r->stop_task = rv == KC_ENOSPC;
			r->model_unavailable = unavailable;
			rv = agent_fail(
			    r, "the LLM call failed: %s", kc_lasterr());
			break;
		}
		if ((rv = agent_pb_setstr(&r->exchange_id, resp.exchange_id)) !=
		    0) {
			llm_response_free(&resp);
			break;
		}
		attempt++;
		err.len = 0;
		if (err.buf != NULL)
			err.buf[0] = '\0';
		if (agent_truncated(&resp) && cut < AGENT_MAX_TRUNCATED) {
			unsigned cur = limit ? limit : lim.max_tokens;
			r->usage->truncated++;
			/* With the limits unknown (a replay), the recorded run
			 * raised the limit: a replay must ask as it did. */
			if (cut++ == 0 &&
			    (cur == 0 || cur < lim.max_tokens_cap)) {
				limit = cur == 0 ? 0
				    : cur * 2 < lim.max_tokens_cap
				    ? cur * 2
				    : lim.max_tokens_cap;
				KC_WARN(
				    "job %s: reply %u of the %s was cut off "
				    "at its token limit (%u); asking again "
				    "with a limit of %u",
				    job->job_id, attempt, role->name, cur,
				    limit);
				llm_response_free(&resp);
				continue;
			}
			KC_WARN("job %s: reply %u of the %s was cut off at its "
			        "token limit (%u) again; asking for a shorter "
			        "reply",
			    job->job_id, attempt, role->name, cur);
			kc_str_printf(&err,
			    "your reply was cut off at the token limit (%u "
			    "tokens) before it was complete; answer again, "
			    "much shorter: think briefly, no explanations or "
			    "comments beyond what is needed, only the blocks "
			    "asked for",
			    cur);
		} else {
			rv = role->accept(job, agent_reply_body(resp.content),
			    bad + 1 == max, r, &err);
			if (rv == 0) {
				r->ok = true;
				llm_response_free(&resp);
				break;
			}
			if (rv == KC_ENOMEM) {
				llm_response_free(&resp);
				break;
			}
			rv = 0;
			KC_WARN("job %s: reply %u of the %s is not usable: %s",
			    job->job_id, attempt, role->name,
			    err.buf ? err.buf : "");
			if (++bad == max) {
				rv = agent_fail(r,
				    "the model's reply was not usable %u "
				    "times; last problem: %s",
				    max, err.buf ? err.buf : "");
				llm_response_free(&resp);
				break;
			}
		}
		rv = agent_conv_add(conv, "assistant", resp.content);
		resp.content = NULL;
		llm_response_free(&resp);
		if (rv != 0 ||
		    (rv = agent_vars_set(
		         vars, "error", err.buf ? err.buf : "")) != 0 ||
		    (rv = agent_render_file(
		         ctx->prompts_dir, "reask.md", vars, &text)) != 0 ||
		    (rv = agent_conv_add(conv, "user", text)) != 0)
			break;
	}
	kc_str_free(&err);
	return rv;
}

int
agent_handle(
    const agent_ctx *ctx, const Kclaw__AgentJob *job, Kclaw__AgentReply **out)
{
	const agent_role *role = agent_role_by_id(job->role);
	Kclaw__AgentReply *r;
	agent_vars vars = {0};
	agent_conv conv = {0};
	int rv;

	if ((r = malloc(sizeof(*r))) == NULL)
		return KC_ENOMEM;
	kclaw__agent_reply__init(r);
	if ((r->usage = malloc(sizeof(*r->usage))) == NULL) {
		free(r);
		return KC_ENOMEM;
	}
	kclaw__usage__init(r->usage);
	if (ctx->model != NULL && ctx->model[0] != '\0' &&
	    (r->usage->model = strdup(ctx->model)) == NULL) {
		kclaw__agent_reply__free_unpacked(r, NULL);
		return KC_ENOMEM;
	}
	r->role = job->role;
	if ((rv = agent_pb_setstr(&r->job_id, job->job_id)) != 0)
		goto out;
	if (role == NULL) {
		rv = agent_fail(r,
		    "job %s has role %d, which is not an agent role",
		    job->job_id, (int)job->role);
		goto out;
	}
	rv = agent_first_messages(ctx, role, job, &vars, &conv);
	if (rv == KC_ENOMEM)
		goto out;
	if (rv != 0) {
		rv = agent_fail(r, "%s", kc_lasterr());
		goto out;
	}
	rv = agent_fit_prompt(ctx, role, job, &vars, &conv, r);
	if (rv == KC_ENOSPC) {
		rv = 0;
		KC_WARN("job %s (%s): %s", job->job_id, role->name, r->error);
		goto out;
	}
	if (rv != 0) {
		if (rv != KC_ENOMEM)
			rv = agent_fail(r, "%s", kc_lasterr());
		goto out;
	}
	rv = agent_converse(ctx, role, job, &vars, &conv, r);
	KC_INFO("job %s (%s, %s): %s after %u call(s), %llu+%llu tokens "
	        "(%llu reasoning, %llu cached), %.0f ms%s%s",
	    job->job_id, role->name, job->replay_key, r->ok ? "ok" : "failed",
	    r->usage->calls, (unsigned long long)r->usage->prompt_tokens,
	    (unsigned long long)r->usage->completion_tokens,
	    (unsigned long long)r->usage->reasoning_tokens,
	    (unsigned long long)r->usage->cached_tokens, r->usage->latency_ms,
	    r->ok ? "" : ": ", r->ok ? "" : r->error);
out:
	agent_vars_free(&vars);
	agent_conv_free(&conv);
	if (rv != 0) {
		kclaw__agent_reply__free_unpacked(r, NULL);
		return rv;
	}
	*out = r;
	return 0;
}

/* agent_ctx.progress of a worker: the word goes out on its work socket,
 * briefly (a lost one is said again by the next, or by the result). */
static void
agent_send_progress(void *arg, const Kclaw__AgentProgress *p)
{
	if (kc_worker_progress(arg, p, 2000) != 0) {
		KC_DEBUG("job %s: progress not delivered: %s", p->job_id,
		    kc_lasterr());
		kc_clearerr();
	}
}

int
agent_serve(const agent_ctx *ctx0, const agent_role *role, kc_worker *w,
    agent_watch *watch)
{
	agent_ctx ctx1 = *ctx0, *ctx = &ctx1;
	Kclaw__AgentReply *prev = NULL;
	Kclaw__WorkReply *job;
	int rv;

	if (ctx->progress == NULL) {
		ctx->progress = agent_send_progress;
		ctx->progress_arg = w;
	}
	for (;;) {
		rv = kc_worker_next(w, prev, NULL, -1, &job);
		if (rv == KC_ETIMEDOUT || rv == KC_EPROTO || rv == KC_EBUS) {
			/* Keep prev: it goes out again with the next request.
			 */
			KC_WARN(
			    "work request failed: %s; retrying", kc_lasterr());
			kc_sleep_ms(500);
			continue;
		}
		if (prev != NULL)
			kclaw__agent_reply__free_unpacked(prev, NULL);
		prev = NULL;
		if (rv == KC_ECANCELED) {
			KC_INFO("the orchestrator asked this %s to shut down",
			    role->name);
			return 0;
		}
		if (rv != 0)
			return rv;
		if (job->job_id == NULL || job->job_id[0] == '\0' ||
		    job->agent == NULL) {
			kclaw__work_reply__free_unpacked(job, NULL);
			continue;
		}
		ctx->deadline_ms = job->deadline_unix_ms;
		if (watch != NULL) {
			agent_watch_begin(watch, job->agent->task_id);
			ctx->cancel = agent_watch_flag(watch);
		}
		if (job->agent->role != role->role) {
			/* Answer anyway so the orchestrator can re-route. */
			Kclaw__AgentJob wrong = *job->agent;
			wrong.role = KCLAW__ROLE__ROLE_UNSPECIFIED;
			rv = agent_handle(ctx, &wrong, &prev);
			if (rv == 0)
				rv = agent_fail(prev,
				    "this worker serves the %s role; the job "
				    "is "
				    "for role %d",
				    role->name, (int)job->agent->role);
		} else {
			rv = agent_handle(ctx, job->agent, &prev);
		}
		if (watch != NULL)
			agent_watch_end(watch);
		if (rv == 0 &&
		    (prev->job_id == NULL || prev->job_id[0] == '\0'))
			rv = agent_pb_setstr(&prev->job_id, job->job_id);
		if (rv == 0)
			prev->role = job->agent->role;
		kclaw__work_reply__free_unpacked(job, NULL);
		if (rv != 0) {
			if (prev != NULL)
				kclaw__agent_reply__free_unpacked(prev, NULL);
			return rv;
		}
	}
}
