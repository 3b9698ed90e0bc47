/*
 * sched.c - work by pull: jobs queued per role, workers held until there
 * is a job for them, deadlines, bounded retries, fair share between tasks
 * and one evaluation at a time per GPU.
 *
 * A job's content is built from the store when it is handed out, so a job
 * re-issued after a crash or a dead worker carries exactly what the first
 * issue did (same id, same replay key).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kc_err.h"
#include "kc_log.h"
#include "kc_util.h"
#include "blobs.h"
#include "orch_int.h"

uint32_t
orch_job_retries(const orch *o, const struct orch_task *t)
{
	return t->job_retries ? t->job_retries : o->opt.job_retries;
}

uint32_t
orch_job_timeout_ms(const orch *o, const struct orch_job *j)
{
	if (j->role == KCLAW__ROLE__SANDBOX)
		return j->task->eval_timeout_ms ? j->task->eval_timeout_ms
		                                : o->opt.eval_timeout_ms;
	return j->task->agent_timeout_ms ? j->task->agent_timeout_ms
	                                 : o->opt.role_timeout_ms[j->role];
}

/* How long a job waits before retry `attempt` (1, 2, ...). */
static uint64_t
orch_job_backoff_ms(const orch *o, uint32_t attempt)
{
	uint64_t ms = o->opt.retry_backoff_ms;

	for (uint32_t i = 1; i < attempt && ms < o->opt.retry_backoff_max_ms;
	     i++)
		ms *= 2;
	return ms < o->opt.retry_backoff_max_ms ? ms
	                                        : o->opt.retry_backoff_max_ms;
}

void
orch_job_id(const struct orch_task *t, uint32_t n, char *out, size_t sz)
{
	snprintf(out, sz, "%s-j%u", t->id, n);
}

static void
orch_job_key_delete(orch *o, struct orch_job *j)
{
	char id[64];

	orch_job_id(j->task, j->n, id, sizeof(id));
	store_batch_delete(o->batch, STORE_CF_JOBS, id, strlen(id));
	o->staged++;
}

int
orch_job_new(orch *o, struct orch_task *t, const orch_action *a, bool stage)
{
	struct orch_job *j = calloc(1, sizeof(*j));

	if (j == NULL)
		return KC_ENOMEM;
	j->task = t;
	j->n = a->job;
	j->role = a->role;
	j->cand = a->cand;
	j->count = a->count;
	j->key_n = a->key_n;
	j->device = -1;
	j->host[0] = '\0';
	j->tnext = t->jobs;
	t->jobs = j;
	if (stage) {
		orch_job_rec rec = {ORCH_JOB_MAGIC, a->job, a->role, a->cand,
		    a->count, a->key_n};
		char id[64];
		int rv;
		orch_job_id(t, j->n, id, sizeof(id));
		if ((rv = store_batch_put(o->batch, STORE_CF_JOBS, id,
		         strlen(id), &rec, sizeof(rec))) != 0)
			return rv;
		o->staged++;
		if (o->nto_queue == o->capto_queue) {
			size_t cap = o->capto_queue ? o->capto_queue * 2 : 64;
			struct orch_job **q =
			    realloc(o->to_queue, cap * sizeof(*q));
			if (q == NULL)
				return KC_ENOMEM;
			o->to_queue = q;
			o->capto_queue = cap;
		}
		o->to_queue[o->nto_queue++] = j;
		j->state = ORCH_JOB_QUEUED;
		j->qprev = j->qnext = j; /* not linked yet */
		return 0;
	}
	orch_job_enqueue(o, j);
	return 0;
}

/* ---- lists: queued jobs per role (qhead), running ones (rhead); a job
 * is on one of them and the same links serve both ---- */

static void
orch_list_unlink(
    struct orch_job **head, struct orch_job **tail, struct orch_job *j)
{
	if (j->qprev)
		j->qprev->qnext = j->qnext;
	else
		*head = j->qnext;
	if (j->qnext)
		j->qnext->qprev = j->qprev;
	else if (tail)
		*tail = j->qprev;
	j->qprev = j->qnext = NULL;
}

static void
orch_job_unlist(orch *o, struct orch_job *j)
{
	if (j->qprev == j && j->qnext == j) { /* staged, not yet queued */
		for (size_t i = 0; i < o->nto_queue; i++)
			if (o->to_queue[i] == j) {
				o->to_queue[i] = o->to_queue[--o->nto_queue];
				break;
			}
		j->qprev = j->qnext = NULL;
		return;
	}
	if (j->state == ORCH_JOB_QUEUED) {
		orch_list_unlink(&o->qhead[j->role], &o->qtail[j->role], j);
	} else {
		orch_list_unlink(&o->rhead[j->role], NULL, j);
		j->task->running--;
	}
}

void
orch_job_enqueue(orch *o, struct orch_job *j)
{
	j->state = ORCH_JOB_QUEUED;
	j->enq_seq = ++o->enq_seq;
	j->qnext = NULL;
	j->qprev = o->qtail[j->role];
	if (o->qtail[j->role])
		o->qtail[j->role]->qnext = j;
	else
		o->qhead[j->role] = j;
	o->qtail[j->role] = j;
}

static void
orch_job_run(orch *o, struct orch_job *j)
{
	orch_list_unlink(&o->qhead[j->role], &o->qtail[j->role], j);
	j->state = ORCH_JOB_RUNNING;
	j->qprev = NULL;
	j->qnext = o->rhead[j->role];
	if (j->qnext)
		j->qnext->qprev = j;
	o->rhead[j->role] = j;
	j->task->running++;
}

/* Back to the queue (a retry or a re-issue). */
static void
orch_job_requeue(orch *o, struct orch_job *j)
{
	orch_job_unlist(o, j);
	j->worker[0] = '\0';
	j->worker_pid = 0;
	j->device = -1;
	j->host[0] = '\0';
	j->ready_mono = 0;
	orch_job_enqueue(o, j);
}

/* Removes j from its task and lists and frees it (its store record is
 * deleted in the batch). */
static void
orch_job_forget(orch *o, struct orch_job *j)
{
	struct orch_job **p;

	orch_job_unlist(o, j);
	orch_job_key_delete(o, j);
	for (p = &j->task->jobs; *p; p = &(*p)->tnext)
		if (*p == j) {
			*p = j->tnext;
			break;
		}
	free(j);
}

void
orch_jobs_drop(orch *o, struct orch_task *t)
{
	while (t->jobs)
		orch_job_forget(o, t->jobs);
}

/* ------------------------------------------------------ retries */

static void
orch_job_event(
    orch *o, struct orch_job *j, Kclaw__EventKind kind, const char *detail)
{
	Kclaw__Event *ev = malloc(sizeof(*ev));
	char jid[64];

	if (ev == NULL)
		return;
	kclaw__event__init(ev);
	orch_job_id(j->task, j->n, jid, sizeof(jid));
	ev->kind = kind;
	ev->task_id = strdup(j->task->id);
	ev->state = strdup(orch_state_name(j->task->fsm.state));
	ev->round = j->task->fsm.round;
	ev->role = j->role;
	ev->detail = strdup(detail);
	ev->job_id = strdup(jid);
	ev->process = strdup(j->worker);
	ev->candidate_id = strdup("");
	if (j->cand) {
		char cid[48];
		snprintf(cid, sizeof(cid), "%s-c%04u", j->task->id, j->cand);
		free(ev->candidate_id);
		ev->candidate_id = strdup(cid);
	}
	orch_event(o, ev);
}

/* A job's end, told to its task's machine with why (the task's error
 * should the machine stop on it). */
static void
orch_task_tell(
    orch *o, struct orch_task *t, const orch_input *in, const char *why)
{
	t->why = why;
	if (orch_task_input(o, t, in, NULL, NULL, NULL) != 0)
		KC_ERROR("task %s: %s", t->id, kc_lasterr());
	t->why = NULL;
}

/* A job failed (the worker said so, or missed its deadline): retry it
 * after a backoff while attempts are left, else tell the task's machine,
 * which records a failed round (or, while seeding, a missing seed). */
static void
orch_job_failed(orch *o, struct orch_job *j, const char *why)
{
	char text[512];

	uint32_t retries = orch_job_retries(o, j->task);

	if (j->attempt < retries) {
		uint64_t wait = orch_job_backoff_ms(o, j->attempt + 1);
		j->attempt++;
		o->counters.retries++;
		snprintf(text, sizeof(text),
		    "%s job retried in %.1f s (attempt %u of %u): %s",
		    orch_role_name(j->role), (double)wait / 1000,
		    j->attempt + 1, retries + 1, why);
		orch_job_event(o, j, KCLAW__EVENT_KIND__JOB_RETRIED, text);
		orch_job_requeue(o, j);
		j->ready_mono = kc_mono_ms() + wait;
		return;
	}
	{
		struct orch_task *t = j->task;
		orch_input in = {.kind = ORCH_IN_JOB_FAILED, .job = j->n};
		Kclaw__Role role = j->role;
		bool refcheck = j->n == ORCH_REFCHECK_JOB;
		orch_job_forget(o, j);
		snprintf(text, sizeof(text), "%s job failed %u times: %s",
		    orch_role_name(role), retries + 1, why);
		if (refcheck) { /* informational: the machine goes on */
			orch_refcheck_done(o, t, NULL, text);
			return;
		}
		orch_task_tell(o, t, &in, text);
	}
}

/* The job's model provider is unavailable (every try of the agent's call
 * failed transiently): the job waits for it, at the retry backoff and
 * without spending an attempt, while the outage is younger than
 * model_outage_ms; then it fails like any other. Returns whether it
 * waits. */
static bool
orch_job_outage(orch *o, struct orch_job *j, const char *why)
{
	uint64_t now = kc_mono_ms(), wait;
	char text[512];

	if (j->outage_since_mono == 0)
		j->outage_since_mono = now;
	if (now - j->outage_since_mono >= o->opt.model_outage_ms)
		return false;
	wait = orch_job_backoff_ms(o, ++j->outage_waits);
	snprintf(text, sizeof(text),
	    "%s job waits %.1f s for the model provider (unavailable for "
	    "%.0f s; its attempts are kept): %s",
	    orch_role_name(j->role), (double)wait / 1000,
	    (double)(now - j->outage_since_mono) / 1000, why);
	o->counters.retries++;
	orch_job_event(o, j, KCLAW__EVENT_KIND__JOB_RETRIED, text);
	orch_job_requeue(o, j);
	j->ready_mono = now + wait;
	return true;
}

/* An agent's failure that every job of the task would meet (the model's
 * context window cannot hold its prompts): no retry; the task stops at
 * once, the agent's error as the task's error and in last_agent_error. */
static void
orch_model_unfit(orch *o, struct orch_job *j, const char *why)
{
	struct orch_task *t = j->task;
	orch_input in = {.kind = ORCH_IN_MODEL_UNFIT};
	char text[1024];

	snprintf(text, sizeof(text), "%s job failed, not retried: %s",
	    orch_role_name(j->role), why && *why ? why : "the agent failed");
	orch_job_forget(o, j);
	orch_task_tell(o, t, &in, text);
}

/* ------------------------------------------------------ results */

static struct orch_job *
orch_job_lookup(orch *o, const char *job_id)
{
	const char *dash = strrchr(job_id, '-');
	char tid[ORCH_ID_LEN + 1];
	struct orch_task *t;
	struct orch_job *j;
	unsigned long n;
	char *end;

	if (dash == NULL || dash - job_id > ORCH_ID_LEN || dash[1] != 'j')
		return NULL;
	memcpy(tid, job_id, dash - job_id);
	tid[dash - job_id] = '\0';
	n = strtoul(dash + 2, &end, 10);
	if (*end != '\0' || (t = orch_task_find(o, tid)) == NULL)
		return NULL;
	for (j = t->jobs; j; j = j->tnext)
		if (j->n == n)
			return j;
	return NULL;
}

/* The longest agent error kept: a worker's text, bounded. */
#define ORCH_AGENT_ERROR_MAX 4096

/* The task's last agent error (TaskRecord.last_agent_error); NULL
 * clears it. */
static void
orch_agent_error(struct orch_task *t, Kclaw__Role role, const char *error)
{
	const char *name = orch_role_name(role);
	char *e = NULL;
	size_t n;

	if (error != NULL) {
		n = strlen(name) + strnlen(error, ORCH_AGENT_ERROR_MAX) + 3;
		if ((e = malloc(n)) == NULL)
			return;
		snprintf(e, n, "%s: %s", name, error);
	}
	free(t->agent_error);
	t->agent_error = e;
	t->agent_error_ms = e != NULL ? kc_now_ms() : 0;
}

/* A running job's model calls fail and are retried (WorkRequest.progress):
 * said at once in the task's status and as an event. */
static void
orch_agent_progress(orch *o, const Kclaw__WorkRequest *req)
{
	const Kclaw__AgentProgress *p = req->progress;
	struct orch_job *j = orch_job_lookup(o, p->job_id ? p->job_id : "");

	/* Only the worker that runs the job speaks for it. */
	if (j == NULL || j->role != p->role || j->state != ORCH_JOB_RUNNING ||
	    strcmp(j->worker, req->worker_id) != 0)
		return;
	orch_agent_error(
	    j->task, j->role, p->error && *p->error ? p->error : "retrying");
	orch_job_event(o, j, KCLAW__EVENT_KIND__AGENT_RETRYING,
	    j->task->agent_error ? j->task->agent_error : "");
}

static void
orch_agent_result(orch *o, const Kclaw__AgentReply *r)
{
	struct orch_job *j = orch_job_lookup(o, r->job_id);
	struct orch_task *t;
	orch_input in = {0};
	const char *missing = NULL;

	if (j == NULL || j->role != r->role) {
		o->counters.dropped_replies++;
		KC_DEBUG("late reply for job %s dropped", r->job_id);
		return;
	}
	orch_agent_error(j->task, j->role,
	    r->ok                       ? NULL
	        : r->error && *r->error ? r->error
	                                : "the agent failed");
	orch_task_usage(o, j->task, r);
	if (!r->ok && r->stop_task) {
		orch_model_unfit(o, j, r->error);
		return;
	}
	if (!r->ok && r->model_unavailable &&
	    orch_job_outage(o, j, r->error ? r->error : "no reply"))
		return;
	if (!r->ok) {
		orch_job_failed(o, j,
		    r->error && *r->error ? r->error : "the agent failed");
		return;
	}
	switch (r->role) {
	case KCLAW__ROLE__GENERATOR: in.kind = ORCH_IN_SEEDS; break;
	case KCLAW__ROLE__FEATURE: in.kind = ORCH_IN_FEATURES; break;
	case KCLAW__ROLE__PLANNER:
		in.kind = ORCH_IN_PLANNED;
		missing = r->plan ? NULL : "the Planner's reply has no plan";
		break;
	case KCLAW__ROLE__DIAGNOSER:
		in.kind = ORCH_IN_DIAGNOSED;
		missing = r->diagnosis
		    ? NULL
		    : "the Diagnoser's reply has no diagnosis";
		break;
	default: in.kind = ORCH_IN_CANDIDATE; break;
	}
	for (size_t i = 0; i < r->n_candidates && !missing; i++)
		if (r->candidates[i]->source == NULL ||
		    r->candidates[i]->plan_json == NULL)
			missing = "a candidate without source or plan";
	if (missing) {
		orch_job_failed(o, j, missing);
		return;
	}
	in.job = j->n;
	in.n = (uint32_t)r->n_candidates;
	t = j->task;
	orch_job_forget(o, j);
	if (orch_task_input(o, t, &in, r, NULL, NULL) != 0)
		KC_ERROR("task %s: %s", t->id, kc_lasterr());
}

/* Whether a correct kernel can have a tune candidate: its plan has a
 * launch configuration or tunables the sandbox can sweep, and it is no
 * tune candidate itself. */
static uint32_t
orch_tunable(orch *o, const struct orch_task *t, uint32_t cand)
{
	Kclaw__CandidateRecord *r = NULL;
	char *plan = NULL;
	uint32_t yes = 0;

	if (orch_cand_get(o, t->id, cand, &r) != 0) {
		kc_clearerr();
		return 0;
	}
	if (r->candidate && strcmp(r->candidate->origin, "tune") != 0 &&
	    orch_tune_plan(r->candidate->plan_json, &plan) == 0 && plan)
		yes = 1;
	free(plan);
	kclaw__candidate_record__free_unpacked(r, NULL);
	return yes;
}

static void
orch_eval_result(orch *o, const Kclaw__EvalResult *r)
{
	struct orch_job *j = orch_job_lookup(o, r->job_id);
	struct orch_task *t;
	orch_input in = {.kind = ORCH_IN_EVALUATED};

	if (j == NULL || j->role != KCLAW__ROLE__SANDBOX) {
		o->counters.dropped_replies++;
		KC_DEBUG("late result for job %s dropped", r->job_id);
		return;
	}
	if (r->status == KCLAW__EVAL_STATUS__INTERNAL_ERROR ||
	    r->status == KCLAW__EVAL_STATUS__CANCELLED ||
	    r->status == KCLAW__EVAL_STATUS__EVAL_STATUS_UNSPECIFIED) {
		char why[300];
		snprintf(why, sizeof(why), "sandbox: %s: %.200s",
		    orch_eval_status_name(r->status),
		    r->message ? r->message : "");
		orch_job_failed(o, j, why);
		return;
	}
	if (j->n == ORCH_REFCHECK_JOB) {
		t = j->task;
		orch_job_forget(o, j);
		orch_refcheck_done(o, t, r, NULL);
		return;
	}
	in.job = j->n;
	in.cand = j->cand;
	in.status = r->status;
	in.ms = r->timing ? r->timing->median_ms : 0;
	in.ref_ms = r->reference_ms > 0 ? r->reference_ms
	    : r->baseline               ? r->baseline->median_ms
	                                : 0;
	in.sol = r->sol_fraction;
	if (in.status == KCLAW__EVAL_STATUS__OK && !(in.ms > 0)) {
		orch_job_failed(o, j, "sandbox: OK without a timing");
		return;
	}
	t = j->task;
	if (t->fsm.tune_job && j->n == t->fsm.tune_job)
		in.kind = ORCH_IN_TUNED;
	else if (in.status == KCLAW__EVAL_STATUS__OK)
		in.tunable = orch_tunable(o, t, j->cand);
	orch_job_forget(o, j);
	if (orch_task_input(o, t, &in, NULL, r, NULL) != 0)
		KC_ERROR("task %s: %s", t->id, kc_lasterr());
}

/* ------------------------------------------------------ workers */

static void
orch_work_refuse(bus_call *call, const char *error)
{
	Kclaw__WorkReply wr = KCLAW__WORK_REPLY__INIT;

	wr.error = (char *)error;
	kc_call_reply_msg(call, &wr.base);
}

/* A worker asks again without the result of the job it was running: it
 * lost it (restarted, or gave up waiting). Likewise a sandbox asking for
 * a GPU on which another sandbox ran a job: that one is gone. */
static void
orch_reissue_lost(orch *o, const Kclaw__WorkRequest *req)
{
	struct orch_job *j, *next;

	for (j = o->rhead[req->role]; j; j = next) {
		next = j->qnext;
		if (strcmp(j->worker, req->worker_id) == 0 ||
		    (req->role == KCLAW__ROLE__SANDBOX &&
		        j->device == req->device &&
		        strcmp(j->host, req->host ? req->host : "") == 0)) {
			KC_INFO("job of %s re-issued: worker %s asks for new "
			        "work",
			    j->task->id, req->worker_id);
			orch_job_requeue(o, j);
		}
	}
}

/* Unlinks the waiting worker at *p and drops its held request unanswered
 * (its peer has gone, or asked again). */
static void
orch_waiter_drop(orch *o, struct orch_waiter **p)
{
	struct orch_waiter *w = *p;

	*p = w->next;
	bus_call_drop(w->call);
	o->nwaiting--;
	free(w);
}

void
orch_work_call(orch *o, bus_call *call)
{
	const void *data;
	size_t len;
	Kclaw__WorkRequest *req;
	struct orch_waiter *w;

	data = bus_call_data(call, &len);
	if ((req = kclaw__work_request__unpack(NULL, len, data)) == NULL) {
		orch_work_refuse(call,
		    "the work request did not decode; is the worker the same "
		    "version as the orchestrator?");
		return;
	}
	if (kc_call_authorize(
	        call, data, len, KC_WORK_TOKEN_FIELD, o->opt.cfg.token) != 0) {
		orch_work_refuse(call, KC_TOKEN_REFUSED_WORK);
		goto out;
	}
	if (req->role <= KCLAW__ROLE__ROLE_UNSPECIFIED ||
	    req->role >= ORCH_NROLES || req->worker_id == NULL ||
	    !*req->worker_id) {
		orch_work_refuse(call,
		    "the work request needs a worker_id and a role "
		    "(generator..repairer, or sandbox)");
		goto out;
	}
	/* Word from a job still running: no result, no request for work. */
	if (req->progress != NULL) {
		Kclaw__WorkReply wr = KCLAW__WORK_REPLY__INIT;
		orch_agent_progress(o, req);
		kc_call_reply_msg(call, &wr.base);
		goto out;
	}
	if (req->agent_reply && req->agent_reply->job_id &&
	    *req->agent_reply->job_id)
		orch_agent_result(o, req->agent_reply);
	else if (req->eval_result && req->eval_result->job_id &&
	    *req->eval_result->job_id)
		orch_eval_result(o, req->eval_result);
	if (o->draining) {
		Kclaw__WorkReply wr = KCLAW__WORK_REPLY__INIT;
		wr.shutdown = true;
		kc_call_reply_msg(call, &wr.base);
		goto out;
	}
	orch_reissue_lost(o, req);
	/* A worker that asks again gave up its earlier request: NNG would
	 * discard an answer to it. */
	for (int r = 1; r < ORCH_NROLES; r++) {
		struct orch_waiter **p = &o->waiters[r];
		while (*p) {
			if (strcmp((*p)->worker, req->worker_id) != 0) {
				p = &(*p)->next;
				continue;
			}
			orch_waiter_drop(o, p);
		}
	}
	if ((w = calloc(1, sizeof(*w))) == NULL) {
		bus_call_drop(call);
		goto out;
	}
	w->call = call;
	w->role = req->role;
	w->device = req->device;
	kc_strlcpy(w->host, req->host ? req->host : "", sizeof(w->host));
	w->pid = req->pid;
	w->expires_mono = kc_mono_ms() + o->opt.poll_ms;
	kc_strlcpy(w->worker, req->worker_id, sizeof(w->worker));
	/* FIFO: the longest-waiting worker is served first. */
	{
		struct orch_waiter **p = &o->waiters[req->role];
		while (*p)
			p = &(*p)->next;
		*p = w;
	}
	o->nwaiting++;
out:
	kclaw__work_request__free_unpacked(req, NULL);
}

void
orch_sched_timers(orch *o)
{
	uint64_t now = kc_mono_ms();

	for (int r = 1; r < ORCH_NROLES; r++) {
		struct orch_job *j, *next;
		struct orch_waiter **p = &o->waiters[r];
		for (j = o->rhead[r]; j; j = next) {
			next = j->qnext;
			if (now >= j->deadline_mono) {
				char why[200];
				snprintf(why, sizeof(why),
				    "no answer from worker %s within its "
				    "deadline (it died or hangs)",
				    j->worker);
				orch_job_failed(o, j, why);
			}
		}
		while (*p) {
			struct orch_waiter *w = *p;
			if (now < w->expires_mono) {
				p = &w->next;
				continue;
			}
			*p = w->next;
			{
				Kclaw__WorkReply wr = KCLAW__WORK_REPLY__INIT;
				kc_call_reply_msg(w->call, &wr.base);
			}
			o->nwaiting--;
			free(w);
		}
	}
}

void
orch_sched_drain(orch *o)
{
	o->draining = true;
	for (int r = 1; r < ORCH_NROLES; r++)
		while (o->waiters[r]) {
			struct orch_waiter *w = o->waiters[r];
			Kclaw__WorkReply wr = KCLAW__WORK_REPLY__INIT;
			o->waiters[r] = w->next;
			wr.shutdown = true;
			kc_call_reply_msg(w->call, &wr.base);
			o->nwaiting--;
			free(w);
		}
}

/* Whether a worker of worker_host runs on host ("": any host). */
static bool
orch_on_host(const char *worker_host, const char *host)
{
	return !*host || strcmp(worker_host, host) == 0;
}

/* A supervised process died (PROCESS_CRASHED): its jobs go back to the
 * queue, and its requests for work still waiting are dropped. A worker
 * killed while it waited for work leaves its request here; the next job
 * of its role would go to that request (FIFO: it waited longest), its
 * answer to a closed pipe, and the task would wait out the job's deadline
 * (minutes) for a worker that no longer exists. */
void
orch_sched_process_died(orch *o, uint32_t pid, const char *host)
{
	if (pid == 0)
		return;
	for (int r = 1; r < ORCH_NROLES; r++) {
		struct orch_job *j, *next;
		struct orch_waiter **p = &o->waiters[r];
		for (j = o->rhead[r]; j; j = next) {
			next = j->qnext;
			if (j->worker_pid == pid && orch_on_host(j->host, host))
				orch_job_requeue(o, j);
		}
		while (*p) {
			struct orch_waiter *w = *p;
			if (w->pid != pid || !orch_on_host(w->host, host)) {
				p = &w->next;
				continue;
			}
			KC_INFO("a waiting request of worker %s dropped: its "
			        "process %u died",
			    w->worker, pid);
			orch_waiter_drop(o, p);
		}
	}
}

/* ------------------------------------------------------ job content */

/* Strategies for seeds when the memory has none (or too few): one family
 * each, the simplest first, so the first seed is the likeliest correct. */
static const char *const orch_seed_fallback[] = {
    "a simple coalesced kernel (memory family): one output element or row "
    "per thread, threadIdx.x along the contiguous dimension",
    "shared-memory tiling (reuse family): stage what a block reuses in "
    "shared memory, synchronise, compute from it",
    "vector loads and stores (bandwidth family): float4/half2 accesses with "
    "a grid-stride loop and a scalar tail",
    "warp primitives (warp family): __shfl_*_sync reductions, one warp per "
    "row or tile, no shared-memory round trips",
    "thread coarsening (compute family): several outputs per thread held in "
    "registers, the inner loops unrolled",
    "one fused pass (launch family): every step in a single kernel, each "
    "input read once and each output written once",
    "a persistent kernel (parallelism family): one block per SM looping "
    "over work items",
    "asynchronous copies (latency family): cp.async double buffering so "
    "loads overlap computation",
};

/*
 * What seeds a Generator job: its index among the task's k seeds (the
 * Generator's job number in the task), a strategy of its own (the
 * memory's, completed by orch_seed_fallback) and the other seeds'
 * strategies, which it must not repeat; the last of several seeds adapts
 * the best kernel of the most similar solved task, when there is one.
 * strat and avoid are the caller's (they live until the job is packed).
 */
static int
orch_build_seed(orch *o, struct orch_job *j, const Kclaw__TaskSpec *spec,
    Kclaw__AgentJob *aj, char (*strat)[ORCH_STRATEGY_MAX], char **avoid)
{
	const orch_memory_ops *m = o->opt.memory;
	uint32_t k = j->task->fsm.p.seeds, i;
	size_t n = 0, f = 0;
	int rv = 0;

	if (k == 0 || k > ORCH_MAX_SEEDS)
		k = k ? ORCH_MAX_SEEDS : 1;
	i = j->key_n % k;
	if (m->seed_strategies &&
	    (rv = m->seed_strategies(
	         o->opt.memory_arg, o->db, spec, k, strat, &n)) != 0) {
		KC_WARN("task %s: no seed strategies from memory (%s)",
		    j->task->id, kc_lasterr());
		kc_clearerr();
		n = 0;
	}
	for (; n < k; n++, f++)
		snprintf(strat[n], ORCH_STRATEGY_MAX, "%s",
		    orch_seed_fallback[f % KC_ARRAY_LEN(orch_seed_fallback)]);
	if (k > 1 && i == k - 1 && m->warm_start) {
		Kclaw__Candidate *w = NULL;
		char *from = NULL;
		if (m->warm_start(o->opt.memory_arg, o->db, j->task->id, spec,
		        &w, &from) != 0) {
			KC_WARN("task %s: no warm start (%s)", j->task->id,
			    kc_lasterr());
			kc_clearerr();
		}
		if (w != NULL &&
		    (from != NULL || (from = strdup("")) != NULL)) {
			aj->warm_start = w; /* freed by orch_build_job */
			aj->warm_task = from;
			snprintf(strat[i], ORCH_STRATEGY_MAX,
			    "adapt the best kernel of the similar solved task "
			    "%s (shown below) to this task",
			    from);
		} else {
			if (w)
				kclaw__candidate__free_unpacked(w, NULL);
			free(from);
		}
	}
	aj->seed_index = i;
	aj->seeds = k;
	aj->strategy = strat[i];
	aj->avoid = avoid;
	for (uint32_t x = 0; x < k; x++)
		if (x != i)
			avoid[aj->n_avoid++] = strat[x];
	return rv;
}

static int
orch_build_agent(orch *o, struct orch_job *j, Kclaw__TaskSpec *spec,
    Kclaw__AgentJob *aj, Kclaw__CandidateRecord **cand, char **text)
{
	struct orch_task *t = j->task;
	const orch_memory_ops *m = o->opt.memory;
	int rv = 0;

	aj->task = spec;
	aj->count = j->count;
	aj->attempt = j->attempt;
	aj->round = t->fsm.round;
	if (j->role == KCLAW__ROLE__GENERATOR)
		return 0;
	if ((rv = orch_cand_get(o, t->id, j->cand, cand)) != 0)
		return rv;
	switch (j->role) {
	case KCLAW__ROLE__FEATURE:
	case KCLAW__ROLE__PLANNER:
	case KCLAW__ROLE__OPTIMIZER:
		aj->base_kernel = (*cand)->candidate;
		aj->base_eval = (*cand)->eval;
		if (j->role == KCLAW__ROLE__PLANNER) {
			char base[48];
			snprintf(
			    base, sizeof(base), "%s-c%04u", t->id, j->cand);
			aj->features = (*cand)->features;
			aj->n_features = (*cand)->n_features;
			aj->methods = (*cand)->methods;
			aj->n_methods = (*cand)->n_methods;
			rv = m->opt_history(o->opt.memory_arg, o->db, t->id,
			    base, o->opt.render_bytes, text);
			aj->opt_history = *text;
			/* Lessons of other tasks (freed by orch_build_job). */
			if (rv == 0 && m->lessons)
				rv = m->lessons(o->opt.memory_arg, o->db, t->id,
				    base, &aj->lessons, &aj->n_lessons);
		}
		break;
	default:
		aj->failing = (*cand)->candidate;
		aj->failure = (*cand)->eval;
		if (j->role == KCLAW__ROLE__DIAGNOSER) {
			rv = m->repair_chain(o->opt.memory_arg, o->db, t->id,
			    o->opt.render_bytes, text);
			aj->repair_chain = *text;
		}
		break;
	}
	return rv;
}

/* The WorkReply for job j, packed. */
static int
orch_build_job(orch *o, struct orch_job *j, uint8_t **buf, size_t *len)
{
	struct orch_task *t = j->task;
	Kclaw__WorkReply wr = KCLAW__WORK_REPLY__INIT;
	Kclaw__AgentJob aj = KCLAW__AGENT_JOB__INIT;
	Kclaw__EvalRequest er = KCLAW__EVAL_REQUEST__INIT;
	Kclaw__EvalOptions eo = KCLAW__EVAL_OPTIONS__INIT;
	Kclaw__TaskSpec *spec = NULL;
	Kclaw__CandidateRecord *cand = NULL;
	Kclaw__OptPlan *plan = NULL;
	Kclaw__Diagnosis *diag = NULL;
	char jid[64], key[200], *text = NULL;
	char strat[ORCH_MAX_SEEDS][ORCH_STRATEGY_MAX], *avoid[ORCH_MAX_SEEDS];
	uint32_t timeout = orch_job_timeout_ms(o, j);
	int rv;

	orch_job_id(t, j->n, jid, sizeof(jid));
	if ((rv = orch_spec_get(o, t->id, &spec)) != 0)
		goto out;
	wr.job_id = jid;
	wr.deadline_unix_ms = kc_now_ms() + timeout;
	if (j->role == KCLAW__ROLE__SANDBOX) {
		char blobs[KC_PATH_MAX];
		bool refcheck = j->n == ORCH_REFCHECK_JOB;
		snprintf(blobs, sizeof(blobs), "%s/blobs", o->opt.cfg.run_dir);
		if ((!refcheck &&
		        (rv = orch_cand_get(o, t->id, j->cand, &cand)) != 0) ||
		    (rv = orch_blobs_materialize(o->db, blobs, spec)) != 0)
			goto out;
		er.job_id = jid;
		er.task_id = t->id;
		er.task = spec;
		/* The reference check: no candidate, the reference alone. */
		er.candidate = refcheck ? NULL : cand->candidate;
		eo.reference_only = refcheck;
		/* The check is about the reference's outputs; torch.compile
		 * is timed (and cached) with the first candidate instead. */
		eo.no_compile_baseline = refcheck;
		eo.time_baseline = true;
		eo.profile = !refcheck && o->opt.profile != 0;
		eo.trials = spec->trials;
		eo.timeout_ms = timeout;
		er.options = &eo;
		wr.eval = &er;
	} else {
		aj.job_id = jid;
		aj.task_id = t->id;
		aj.role = j->role;
		snprintf(key, sizeof(key), "%s/%s/%u", t->name,
		    orch_role_name(j->role), j->key_n);
		aj.replay_key = key;
		if ((rv = orch_build_agent(o, j, spec, &aj, &cand, &text)) != 0)
			goto out;
		if (j->role == KCLAW__ROLE__GENERATOR &&
		    (rv = orch_build_seed(o, j, spec, &aj, strat, avoid)) != 0)
			goto out;
		/* Binding screening: whether this round's Planner may leave
		 * the retrieved methods (the state decides: PLAN awaits it). */
		if (j->role == KCLAW__ROLE__PLANNER)
			aj.explore = orch_fsm_explores(&t->fsm);
		if (j->role == KCLAW__ROLE__OPTIMIZER) {
			char pk[24];
			orch_plan_key(&t->fsm, j->n, pk, sizeof(pk));
			aj.plan = plan = (Kclaw__OptPlan *)orch_task_aux_msg(
			    o, t->id, pk, &kclaw__opt_plan__descriptor);
		}
		/* A wave's Planner i plans the i-th retrieved method, so its
		 * K candidates try K methods. */
		if (j->role == KCLAW__ROLE__PLANNER && aj.n_methods > 0 &&
		    orch_fsm_wave_slot(&t->fsm, j->n, false) >= 0)
			aj.assigned_method =
			    aj.methods[(size_t)orch_fsm_wave_slot(
			                   &t->fsm, j->n, false) %
			          aj.n_methods]
			        ->method;
		if (j->role == KCLAW__ROLE__REPAIRER)
			aj.diagnosis = diag =
			    (Kclaw__Diagnosis *)orch_task_aux_msg(o, t->id,
			        "diag", &kclaw__diagnosis__descriptor);
		wr.agent = &aj;
	}
	rv = kc_pb_pack(&wr.base, buf, len);
out:
	if (spec)
		kclaw__task_spec__free_unpacked(spec, NULL);
	if (cand)
		kclaw__candidate_record__free_unpacked(cand, NULL);
	if (plan)
		kclaw__opt_plan__free_unpacked(plan, NULL);
	if (diag)
		kclaw__diagnosis__free_unpacked(diag, NULL);
	free(aj.lessons);    /* one block: orch_memory_ops.lessons */
	if (aj.warm_start) { /* orch_build_seed's */
		kclaw__candidate__free_unpacked(aj.warm_start, NULL);
		free(aj.warm_task);
	}
	free(text);
	return rv;
}

/* ------------------------------------------------------ dispatch */

/* One evaluation per GPU: a GPU is a device number of a host. */
static bool
orch_device_busy(orch *o, const char *host, int device)
{
	for (struct orch_job *j = o->rhead[KCLAW__ROLE__SANDBOX]; j;
	     j = j->qnext)
		if (j->device == device && strcmp(j->host, host) == 0)
			return true;
	return false;
}

/* Fair share: the queued job whose task has the fewest jobs running, then
 * the task served longest ago (round robin), then the oldest job. A job
 * waiting out its retry backoff is not ready. */
static struct orch_job *
orch_pick(orch *o, Kclaw__Role role)
{
	struct orch_job *best = NULL;
	uint64_t now = kc_mono_ms();

	for (struct orch_job *j = o->qhead[role]; j; j = j->qnext)
		if (j->ready_mono > now)
			continue;
		else if (best == NULL ||
		    j->task->running < best->task->running ||
		    (j->task->running == best->task->running &&
		        j->task->served < best->task->served))
			best = j;
	return best;
}

void
orch_dispatch(orch *o)
{
	for (int r = 1; r < ORCH_NROLES; r++) {
		struct orch_waiter **p = &o->waiters[r];
		while (*p && o->qhead[r]) {
			struct orch_waiter *w = *p;
			struct orch_job *j;
			uint8_t *buf;
			size_t len;
			char text[200];

			if (r == KCLAW__ROLE__SANDBOX &&
			    orch_device_busy(o, w->host, w->device)) {
				p = &w->next;
				continue;
			}
			/* A worker that died or hung up while it waited
			 * (one on another host, which no supervisor here
			 * reports) would take the job to a closed pipe. */
			if (!bus_call_connected(w->call)) {
				KC_INFO("a waiting request of worker %s "
				        "dropped: its connection is closed",
				    w->worker);
				orch_waiter_drop(o, p);
				continue;
			}
			if ((j = orch_pick(o, (Kclaw__Role)r)) == NULL)
				break; /* every queued job waits out a backoff
				        */
			if (orch_build_job(o, j, &buf, &len) != 0) {
				KC_ERROR("job of task %s cannot be built: %s",
				    j->task->id, kc_lasterr());
				orch_job_run(o, j);
				orch_job_failed(o, j, kc_lasterr());
				continue;
			}
			*p = w->next;
			o->nwaiting--;
			orch_job_run(o, j);
			j->task->served = ++o->serve_seq;
			kc_strlcpy(j->worker, w->worker, sizeof(j->worker));
			j->worker_pid = w->pid;
			j->device = w->device;
			kc_strlcpy(j->host, w->host, sizeof(j->host));
			j->deadline_mono =
			    kc_mono_ms() + orch_job_timeout_ms(o, j);
			bus_call_reply(w->call, buf, len);
			free(buf);
			free(w);
			snprintf(text, sizeof(text), "%s job%s to %s%s",
			    orch_role_name(j->role),
			    r == KCLAW__ROLE__SANDBOX &&
			            j->n == ORCH_REFCHECK_JOB
			        ? " (reference check)"
			        : "",
			    j->worker, j->attempt ? " (retry)" : "");
			orch_job_event(o, j,
			    r == KCLAW__ROLE__SANDBOX
			        ? KCLAW__EVENT_KIND__EVAL_STARTED
			        : KCLAW__EVENT_KIND__AGENT_CALLED,
			    text);
		}
	}
}

void
orch_sched_close(orch *o)
{
	for (int r = 0; r < ORCH_NROLES; r++) {
		while (o->waiters[r]) {
			struct orch_waiter *w = o->waiters[r];
			o->waiters[r] = w->next;
			free(w);
		}
		o->rhead[r] = NULL;
	}
	for (size_t i = 0; i < o->nall; i++)
		while (o->all[i]->jobs) {
			struct orch_job *j = o->all[i]->jobs;
			o->all[i]->jobs = j->tnext;
			free(j);
		}
}
