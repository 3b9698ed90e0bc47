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

/* Renders the system and first user message of a job. */
static int
agent_first_messages(const agent_ctx *ctx, const agent_role *role,
    const Kclaw__AgentJob *job, agent_vars *vars, agent_conv *conv)
{
	char file[64], *text;
	int rv;

	if ((rv = agent_job_vars(job, vars)) != 0 ||
	    (rv = agent_vars_set(vars, "role", role->name)) != 0 ||
	    (rv = agent_vars_set(vars, "role_title", role->title)) != 0 ||
	    (rv = agent_vars_set(vars, "error", "")) != 0 ||
	    (rv = agent_vars_set(vars, "rule_features", "")) != 0 ||
	    (rv = role->prepare(job, vars)) != 0)
		return rv;
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

static void
agent_usage_add(Kclaw__Usage *u, const llm_response *resp)
{
	u->prompt_tokens += resp->prompt_tokens;
	u->completion_tokens += resp->completion_tokens;
	u->latency_ms += resp->latency_ms;
	u->retries += resp->retries;
	u->calls++;
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
	llm_response resp;
	kc_str err = {0};
	unsigned ask;
	char *text;
	int rv = 0;

	for (ask = 0; ask < max; ask++) {
		llm_request req = {
		    conv->m, conv->n, key, ask, ctx->cancel, ctx->deadline_ms};
		if (ctx->cancel != NULL && atomic_load(ctx->cancel) != 0) {
			rv = agent_fail(r,
			    "task %s was cancelled or the service is shutting "
			    "down; the job was stopped",
			    job->task_id);
			break;
		}
		if ((rv = llm_chat(ctx->llm, &req, &resp)) != 0) {
			if (rv == KC_ENOMEM)
				break;
			rv = agent_fail(
			    r, "the LLM call failed: %s", kc_lasterr());
			break;
		}
		agent_usage_add(r->usage, &resp);
		if ((rv = agent_pb_setstr(&r->exchange_id, resp.exchange_id)) !=
		    0) {
			llm_response_free(&resp);
			break;
		}
		err.len = 0;
		if (err.buf != NULL)
			err.buf[0] = '\0';
		rv = role->accept(job, agent_reply_body(resp.content),
		    ask + 1 == max, r, &err);
		if (rv == 0) {
			r->ok = true;
			llm_response_free(&resp);
			break;
		}
		if (rv == KC_ENOMEM) {
			llm_response_free(&resp);
			break;
		}
		KC_WARN("job %s: reply %u of the %s is not usable: %s",
		    job->job_id, ask + 1, role->name, err.buf ? err.buf : "");
		if (ask + 1 == max) {
			rv = agent_fail(r,
			    "the model's reply was not usable %u times; last "
			    "problem: %s",
			    max, err.buf ? err.buf : "");
			llm_response_free(&resp);
			break;
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
	rv = agent_converse(ctx, role, job, &vars, &conv, r);
	KC_INFO("job %s (%s, %s): %s after %u call(s), %llu+%llu tokens, "
	        "%.0f ms%s%s",
	    job->job_id, role->name, job->replay_key, r->ok ? "ok" : "failed",
	    r->usage->calls, (unsigned long long)r->usage->prompt_tokens,
	    (unsigned long long)r->usage->completion_tokens,
	    r->usage->latency_ms, r->ok ? "" : ": ", r->ok ? "" : r->error);
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

int
agent_serve(const agent_ctx *ctx0, const agent_role *role, kc_worker *w,
    agent_watch *watch)
{
	agent_ctx ctx1 = *ctx0, *ctx = &ctx1;
	Kclaw__AgentReply *prev = NULL;
	Kclaw__WorkReply *job;
	int rv;

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
