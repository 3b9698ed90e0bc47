/*
 * orch_api.c - the API of `service Kclaw` (proto/kclaw.proto): one handler per
 * rpc. Answers wait for the cycle's commit, so a Submit is only
 * acknowledged once the task is durable. A bad request is refused with a
 * message that says what is wrong, before anything changes.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blobs.h"
#include "bundle.h"
#include "kc_err.h"
#include "kc_log.h"
#include "kc_util.h"
#include "spec_check.h"
#include "orch_int.h"
#include "security.h"

#ifndef KCLAW_VERSION
#define KCLAW_VERSION "0.0.0"
#endif

#define ORCH_EVENTS_DEFAULT 1000
#define ORCH_EVENTS_MAX 10000

void
orch_api_answer(orch *o, bus_call *call, uint64_t request_id,
    Kclaw__ApiCode code, const char *error, const ProtobufCMessage *payload)
{
	struct orch_reply *r = calloc(1, sizeof(*r));

	if (r == NULL) {
		bus_call_drop(call);
		return;
	}
	r->call = call;
	r->request_id = request_id;
	r->code = code;
	r->error = error ? strdup(error) : NULL;
	if (payload && kc_pb_pack(payload, &r->payload, &r->plen) != 0) {
		r->code = KCLAW__API_CODE__API_INTERNAL;
		free(r->error);
		r->error = strdup("out of memory while answering");
	}
	*o->replies_tail = r;
	o->replies_tail = &r->next;
}

static Kclaw__ApiCode
orch_api_code(int err)
{
	switch (err) {
	case KC_EINVAL: return KCLAW__API_CODE__API_BAD_REQUEST;
	/* A size limit: the request named something too large. */
	case KC_ENOSPC: return KCLAW__API_CODE__API_BAD_REQUEST;
	case KC_ENOENT: return KCLAW__API_CODE__API_NOT_FOUND;
	case KC_EEXIST: return KCLAW__API_CODE__API_CONFLICT;
	case KC_EPERM: return KCLAW__API_CODE__API_UNAUTHORIZED;
	case KC_ENOTSUP: return KCLAW__API_CODE__API_UNKNOWN_METHOD;
	default: return KCLAW__API_CODE__API_INTERNAL;
	}
}

/* Unpacks the request's payload; NULL (answered) when it does not decode. */
static ProtobufCMessage *
orch_api_req(orch *o, bus_call *call, const Kclaw__ApiRequest *env,
    const ProtobufCMessageDescriptor *d)
{
	ProtobufCMessage *m = protobuf_c_message_unpack(
	    d, NULL, env->payload.len, env->payload.data);
	char text[200];

	if (m == NULL) {
		snprintf(text, sizeof(text),
		    "%s: the payload is not a %s; encode the request message "
		    "of this rpc (see proto/kclaw.proto)",
		    env->method, d->name);
		orch_api_answer(o, call, env->request_id,
		    KCLAW__API_CODE__API_BAD_REQUEST, text, NULL);
	}
	return m;
}

static struct orch_task *
orch_api_task(
    orch *o, bus_call *call, const Kclaw__ApiRequest *env, const char *id)
{
	struct orch_task *t = id && *id ? orch_task_find(o, id) : NULL;
	char text[160];

	if (t == NULL) {
		snprintf(text, sizeof(text),
		    "no task '%.40s'; `kclaw status` lists the tasks",
		    id ? id : "");
		orch_api_answer(o, call, env->request_id,
		    id && *id ? KCLAW__API_CODE__API_NOT_FOUND
		              : KCLAW__API_CODE__API_BAD_REQUEST,
		    id && *id ? text : "task_id is required", NULL);
	}
	return t;
}

/* Every blob the spec names by hash (uploaded with PutBlob) must be in the
 * store: a stat of its cache file each, so the loop does not wait. */
static int
orch_api_blobs_check(orch *o, const Kclaw__TaskSpec *spec)
{
	char dir[KC_PATH_MAX + 16];

	snprintf(dir, sizeof(dir), "%s/blobs", o->opt.cfg.run_dir);
	return orch_blobs_check_stored(o->db, dir, (Kclaw__TaskSpec *)spec);
}

/* ------------------------------------------------------------ handlers */

static void
api_submit(orch *o, bus_call *call, const Kclaw__ApiRequest *env)
{
	Kclaw__SubmitRequest *req = (Kclaw__SubmitRequest *)orch_api_req(
	    o, call, env, &kclaw__submit_request__descriptor);
	Kclaw__SubmitResponse resp = KCLAW__SUBMIT_RESPONSE__INIT;
	Kclaw__TaskSpec *loaded = NULL;
	const Kclaw__TaskSpec *spec;
	/* Every file of the bundle is held to the roots, task.json too. */
	kc_path_rule rule = {.allow = orch_data_rule, .arg = &o->opt.cfg};
	char id[ORCH_ID_LEN + 1], real[PATH_MAX];
	int rv;

	if (req == NULL)
		return;
	kc_clearerr();
	spec = req->spec;
	if (req->bundle_dir && *req->bundle_dir) {
		if (spec != NULL) {
			rv = kc_seterr(KC_EINVAL,
			    "give either bundle_dir or spec, not both");
			goto out;
		}
		/* A request may come from anyone who can reach the API:
		 * it may only make kclawd read folders inside the allowed
		 * roots. */
		if ((rv = orch_bundle_dir_check(&o->opt.cfg, req->bundle_dir,
		         real, sizeof(real))) != 0 ||
		    (rv = kc_bundle_load_rule(real, &rule, &loaded)) != 0)
			goto out;
		spec = loaded;
	}
	if (spec == NULL) {
		rv = kc_seterr(KC_EINVAL,
		    "Submit needs bundle_dir (a task bundle folder the "
		    "orchestrator can read) or spec");
		goto out;
	}
	/* Validation happens before anything is staged: a refusal changes
	 * nothing. A spec sent directly is checked like a bundle. */
	if (!loaded && (rv = kc_spec_check(spec)) != 0)
		goto out;
	/* Tensor files enter the store by content, so the task no longer
	 * needs its bundle folder; that is work in proportion to the task's
	 * size, done off the loop while the task is IMPORTING: Submit
	 * answers at once. */
	if ((rv = orch_spec_paths_check(&o->opt.cfg, spec)) == 0 &&
	    (rv = orch_api_blobs_check(o, spec)) == 0)
		rv = orch_submit(o, spec, req->task_id, id);
out:
	if (rv == 0) {
		resp.task_id = id;
		orch_api_answer(o, call, env->request_id,
		    KCLAW__API_CODE__API_OK, NULL, &resp.base);
	} else {
		orch_api_answer(o, call, env->request_id, orch_api_code(rv),
		    kc_lasterr(), NULL);
	}
	if (loaded)
		kclaw__task_spec__free_unpacked(loaded, NULL);
	kclaw__submit_request__free_unpacked(req, NULL);
}

static void
api_cancel(orch *o, bus_call *call, const Kclaw__ApiRequest *env)
{
	Kclaw__CancelRequest *req = (Kclaw__CancelRequest *)orch_api_req(
	    o, call, env, &kclaw__cancel_request__descriptor);
	Kclaw__CancelResponse resp = KCLAW__CANCEL_RESPONSE__INIT;
	struct orch_task *t;
	char text[160];

	if (req == NULL)
		return;
	if ((t = orch_api_task(o, call, env, req->task_id)) == NULL)
		goto out;
	if (orch_state_final(t->fsm.state) &&
	    t->fsm.state != ORCH_ST_CANCELLED) {
		snprintf(text, sizeof(text),
		    "task %s is already %s; there is nothing to cancel", t->id,
		    orch_state_name(t->fsm.state));
		orch_api_answer(o, call, env->request_id,
		    KCLAW__API_CODE__API_CONFLICT, text, NULL);
		goto out;
	}
	if (t->fsm.state != ORCH_ST_CANCELLED && orch_cancel(o, t) != 0) {
		orch_api_answer(o, call, env->request_id,
		    KCLAW__API_CODE__API_INTERNAL, kc_lasterr(), NULL);
		goto out;
	}
	resp.state = (char *)orch_state_name(t->fsm.state);
	orch_api_answer(o, call, env->request_id, KCLAW__API_CODE__API_OK, NULL,
	    &resp.base);
out:
	kclaw__cancel_request__free_unpacked(req, NULL);
}

/* The task's record as the API shows it: with its spec when asked. */
static int
orch_api_record(orch *o, struct orch_task *t, bool with_spec,
    Kclaw__TaskRecord *rec, Kclaw__TaskSpec **spec)
{
	void *val;
	size_t len;
	char *err = NULL;
	Kclaw__TaskRecord *stored;
	int rv;

	/* The stored record has the error text of the last transition. */
	if (store_get(
	        o->db, STORE_CF_TASKS, t->id, strlen(t->id), &val, &len) == 0) {
		if ((stored = kclaw__task_record__unpack(NULL, len, val))) {
			err = strdup(stored->error ? stored->error : "");
			kclaw__task_record__free_unpacked(stored, NULL);
		}
		free(val);
	}
	rv = orch_task_record(o, t, rec, &err);
	free(err);
	*spec = NULL;
	if (rv == 0 && with_spec && orch_spec_get(o, t->id, spec) == 0)
		rec->spec = *spec;
	return rv;
}

static void
orch_api_record_free(Kclaw__TaskRecord *rec, Kclaw__TaskSpec *spec)
{
	rec->spec = NULL;
	orch_task_record_free(rec);
	if (spec)
		kclaw__task_spec__free_unpacked(spec, NULL);
}

static void
api_status(orch *o, bus_call *call, const Kclaw__ApiRequest *env)
{
	Kclaw__StatusRequest *req = (Kclaw__StatusRequest *)orch_api_req(
	    o, call, env, &kclaw__status_request__descriptor);
	Kclaw__StatusResponse resp = KCLAW__STATUS_RESPONSE__INIT;
	Kclaw__TaskRecord rec;
	Kclaw__TaskSpec *spec;
	struct orch_task *t;

	if (req == NULL)
		return;
	if ((t = orch_api_task(o, call, env, req->task_id)) != NULL) {
		orch_api_record(o, t, true, &rec, &spec);
		resp.task = &rec;
		orch_api_answer(o, call, env->request_id,
		    KCLAW__API_CODE__API_OK, NULL, &resp.base);
		orch_api_record_free(&rec, spec);
	}
	kclaw__status_request__free_unpacked(req, NULL);
}

static void
api_list(orch *o, bus_call *call, const Kclaw__ApiRequest *env)
{
	Kclaw__ListRequest *req = (Kclaw__ListRequest *)orch_api_req(
	    o, call, env, &kclaw__list_request__descriptor);
	Kclaw__ListResponse resp = KCLAW__LIST_RESPONSE__INIT;
	Kclaw__TaskRecord *recs = NULL, **ptrs = NULL;
	size_t n = 0, limit;

	if (req == NULL)
		return;
	if (req->state && *req->state) {
		bool known = strcmp(req->state, "active") == 0;
		for (uint32_t s = 0; s < ORCH_ST_COUNT && !known; s++)
			known = strcmp(req->state, orch_state_name(s)) == 0;
		if (!known) {
			orch_api_answer(o, call, env->request_id,
			    KCLAW__API_CODE__API_BAD_REQUEST,
			    "unknown state filter: use active, SEEDING, ..., "
			    "DONE, FAILED or CANCELLED",
			    NULL);
			goto out;
		}
	}
	limit = req->limit ? req->limit : o->nall;
	recs = calloc(o->nall + 1, sizeof(*recs));
	ptrs = calloc(o->nall + 1, sizeof(*ptrs));
	if (recs == NULL || ptrs == NULL) {
		orch_api_answer(o, call, env->request_id,
		    KCLAW__API_CODE__API_INTERNAL, "out of memory", NULL);
		goto out;
	}
	/* Newest first. */
	for (size_t i = o->nall; i-- > 0 && n < limit;) {
		struct orch_task *t = o->all[i];
		Kclaw__TaskSpec *nospec;
		if (req->state && *req->state &&
		    (strcmp(req->state, "active") == 0
		            ? orch_state_final(t->fsm.state)
		            : strcmp(req->state,
		                  orch_state_name(t->fsm.state)) != 0))
			continue;
		/* With the stored error: the list says why a task ended. */
		orch_api_record(o, t, false, &recs[n], &nospec);
		/* Lists carry names, not whole specs. */
		recs[n].spec = malloc(sizeof(Kclaw__TaskSpec));
		if (recs[n].spec) {
			kclaw__task_spec__init(recs[n].spec);
			recs[n].spec->name = t->name;
		}
		ptrs[n] = &recs[n];
		n++;
	}
	resp.tasks = ptrs;
	resp.n_tasks = n;
	orch_api_answer(o, call, env->request_id, KCLAW__API_CODE__API_OK, NULL,
	    &resp.base);
	for (size_t i = 0; i < n; i++) {
		free(recs[i].spec);
		recs[i].spec = NULL;
		orch_task_record_free(&recs[i]);
	}
out:
	free(recs);
	free(ptrs);
	kclaw__list_request__free_unpacked(req, NULL);
}

struct orch_hist {
	Kclaw__CandidateRecord **recs;
	size_t n, cap;
};

static int
orch_hist_add(
    void *arg, const void *key, size_t klen, const void *val, size_t vlen)
{
	struct orch_hist *h = arg;
	Kclaw__CandidateRecord *r;

	(void)key;
	(void)klen;
	if ((r = kclaw__candidate_record__unpack(NULL, vlen, val)) == NULL)
		return 0;
	if (h->n == h->cap) {
		size_t cap = h->cap ? h->cap * 2 : 16;
		void *p = realloc(h->recs, cap * sizeof(*h->recs));
		if (p == NULL) {
			kclaw__candidate_record__free_unpacked(r, NULL);
			return KC_ENOMEM;
		}
		h->recs = p;
		h->cap = cap;
	}
	h->recs[h->n++] = r;
	return 0;
}

static void
api_result(orch *o, bus_call *call, const Kclaw__ApiRequest *env)
{
	Kclaw__ResultRequest *req = (Kclaw__ResultRequest *)orch_api_req(
	    o, call, env, &kclaw__result_request__descriptor);
	Kclaw__ResultResponse resp = KCLAW__RESULT_RESPONSE__INIT;
	Kclaw__TaskRecord rec;
	Kclaw__TaskSpec *spec;
	struct orch_hist h = {0};
	struct orch_task *t;
	char prefix[32];

	if (req == NULL)
		return;
	if ((t = orch_api_task(o, call, env, req->task_id)) == NULL)
		goto out;
	orch_api_record(o, t, true, &rec, &spec);
	snprintf(prefix, sizeof(prefix), "%s/", t->id);
	store_scan(o->db, STORE_CF_CANDIDATES, prefix, strlen(prefix), NULL, 0,
	    orch_hist_add, &h);
	for (size_t i = 0; i < h.n; i++)
		if (t->fsm.best && h.recs[i]->candidate &&
		    strcmp(h.recs[i]->candidate->id, rec.best_id) == 0)
			resp.best = h.recs[i];
	resp.task = &rec;
	resp.history = h.recs;
	resp.n_history = h.n;
	orch_api_answer(o, call, env->request_id, KCLAW__API_CODE__API_OK, NULL,
	    &resp.base);
	orch_api_record_free(&rec, spec);
	for (size_t i = 0; i < h.n; i++)
		kclaw__candidate_record__free_unpacked(h.recs[i], NULL);
	free(h.recs);
out:
	kclaw__result_request__free_unpacked(req, NULL);
}

struct orch_evscan {
	const char *task_id;
	size_t limit;
	Kclaw__EventsResponse *resp;
	size_t cap;
};

static int
orch_events_add(
    void *arg, const void *key, size_t klen, const void *val, size_t vlen)
{
	struct orch_evscan *s = arg;
	Kclaw__Event *ev;

	(void)key;
	(void)klen;
	if ((ev = kclaw__event__unpack(NULL, vlen, val)) == NULL)
		return 0;
	if (s->task_id && strcmp(ev->task_id, s->task_id) != 0) {
		kclaw__event__free_unpacked(ev, NULL);
		return 0;
	}
	if (s->resp->n_events == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 64;
		void *p = realloc(s->resp->events, cap * sizeof(ev));
		if (p == NULL) {
			kclaw__event__free_unpacked(ev, NULL);
			return KC_ENOMEM;
		}
		s->resp->events = p;
		s->cap = cap;
	}
	s->resp->events[s->resp->n_events++] = ev;
	return s->resp->n_events >= s->limit ? 1 : 0;
}

static void
api_events(orch *o, bus_call *call, const Kclaw__ApiRequest *env)
{
	Kclaw__EventsRequest *req = (Kclaw__EventsRequest *)orch_api_req(
	    o, call, env, &kclaw__events_request__descriptor);
	Kclaw__EventsResponse resp = KCLAW__EVENTS_RESPONSE__INIT;
	struct orch_evscan s = {0};
	uint8_t start[8];

	if (req == NULL)
		return;
	if (req->task_id && *req->task_id &&
	    orch_api_task(o, call, env, req->task_id) == NULL)
		goto out;
	s.task_id = req->task_id && *req->task_id ? req->task_id : NULL;
	s.limit = req->limit ? req->limit : ORCH_EVENTS_DEFAULT;
	if (s.limit > ORCH_EVENTS_MAX)
		s.limit = ORCH_EVENTS_MAX;
	s.resp = &resp;
	store_key_u64(start, req->since_seq + 1);
	/* Only committed events: a caller that continues from last_seq must
	 * not skip events of this cycle that are published after it. */
	if (req->since_seq < o->committed_seq)
		store_scan(o->db, STORE_CF_EVENTS, NULL, 0, start,
		    sizeof(start), orch_events_add, &s);
	resp.last_seq = o->committed_seq;
	orch_api_answer(o, call, env->request_id, KCLAW__API_CODE__API_OK, NULL,
	    &resp.base);
	for (size_t i = 0; i < resp.n_events; i++)
		kclaw__event__free_unpacked(resp.events[i], NULL);
	free(resp.events);
out:
	kclaw__events_request__free_unpacked(req, NULL);
}

static void
api_health(orch *o, bus_call *call, const Kclaw__ApiRequest *env)
{
	Kclaw__HealthResponse resp = KCLAW__HEALTH_RESPONSE__INIT;
	Kclaw__ProcessInfo *procs[ORCH_MAX_PROCS];

	resp.version = KCLAW_VERSION;
	resp.uptime_ms = kc_mono_ms() - o->started_mono;
	resp.last_seq = o->committed_seq;
	resp.tasks_active = (uint32_t)o->nactive;
	resp.tasks_total = (uint32_t)o->ntasks;
	resp.workers_waiting = o->nwaiting;
	resp.store_path = o->opt.cfg.db_dir;
	for (size_t i = 0; i < o->nprocs; i++)
		procs[i] = &o->procs[i];
	resp.processes = procs;
	resp.n_processes = o->nprocs;
	/* The listeners as their gates see them, and the queues. */
	{
		static const char *names[] = {"api", "work", "events"};
		Kclaw__ListenerHealth lh[3], *lp[3];
		bus_listener_stats st[3];
		bus_server_stats(o->api, &st[0]);
		bus_server_stats(o->work, &st[1]);
		bus_pub_stats(o->pub, &st[2]);
		for (int i = 0; i < 3; i++) {
			kclaw__listener_health__init(&lh[i]);
			lh[i].name = (char *)names[i];
			lh[i].url = i == 0 ? o->opt.cfg.api_url
			    : i == 1       ? o->opt.cfg.work_url
			                   : o->opt.cfg.events_url;
			lh[i].healthy = st[i].healthy;
			lh[i].gated = st[i].gated;
			lh[i].pre_handshake = st[i].pre;
			lh[i].unproven = st[i].unproven;
			lh[i].connections = st[i].relayed;
			lh[i].accepted = st[i].accepted;
			lh[i].evicted = st[i].evicted;
			lh[i].refused = st[i].refused;
			lh[i].link_timeouts = st[i].link_timeouts;
			lh[i].last_link_ms = st[i].last_link_ms;
			lp[i] = &lh[i];
		}
		resp.listeners = lp;
		resp.n_listeners = 3;
		for (int r = 0; r < ORCH_NROLES; r++) {
			uint32_t q = 0;
			for (struct orch_job *j = o->qhead[r]; j; j = j->qnext)
				q++;
			for (struct orch_job *j = o->rhead[r]; j; j = j->qnext)
				resp.jobs_running++;
			resp.jobs_queued += q;
			if (q > 0 && o->waiters[r] == NULL)
				resp.roles_starved++;
		}
		orch_api_answer(o, call, env->request_id,
		    KCLAW__API_CODE__API_OK, NULL, &resp.base);
	}
}

/* The supervisor's process table and PROCESS_* events. */
static void
api_supervise(orch *o, bus_call *call, const Kclaw__ApiRequest *env)
{
	Kclaw__SuperviseRequest *req = (Kclaw__SuperviseRequest *)orch_api_req(
	    o, call, env, &kclaw__supervise_request__descriptor);
	Kclaw__SuperviseResponse resp = KCLAW__SUPERVISE_RESPONSE__INIT;

	if (req == NULL)
		return;
	if (req->n_processes > ORCH_MAX_PROCS) {
		orch_api_answer(o, call, env->request_id,
		    KCLAW__API_CODE__API_BAD_REQUEST,
		    "too many processes in one Supervise request", NULL);
		goto out;
	}
	o->nprocs = req->n_processes;
	for (size_t i = 0; i < req->n_processes; i++) {
		o->procs[i] = *req->processes[i];
		o->procs[i].base.unknown_fields = NULL;
		o->procs[i].base.n_unknown_fields = 0;
		kc_strlcpy(o->proc_names[i],
		    req->processes[i]->name ? req->processes[i]->name : "",
		    sizeof(o->proc_names[i]));
		o->procs[i].name = o->proc_names[i];
		o->procs[i].state = (char *)(strcmp(req->processes[i]->state,
		                                 "running") == 0
		        ? "running"
		        : strcmp(req->processes[i]->state, "restarting") == 0
		        ? "restarting"
		        : strcmp(req->processes[i]->state, "crash-looping") == 0
		        ? "crash-looping"
		        : "stopped");
		kc_strlcpy(o->proc_errors[i],
		    req->processes[i]->last_error
		        ? req->processes[i]->last_error
		        : "",
		    sizeof(o->proc_errors[i]));
		o->procs[i].last_error = o->proc_errors[i];
	}
	for (size_t i = 0; i < req->n_events; i++) {
		const Kclaw__Event *in = req->events[i];
		Kclaw__Event *ev;
		if (in->kind != KCLAW__EVENT_KIND__PROCESS_CRASHED &&
		    in->kind != KCLAW__EVENT_KIND__PROCESS_RESTARTED &&
		    in->kind != KCLAW__EVENT_KIND__PROCESS_STARTED &&
		    in->kind != KCLAW__EVENT_KIND__SHUTDOWN)
			continue;
		if (in->kind == KCLAW__EVENT_KIND__PROCESS_CRASHED)
			orch_sched_process_died(
			    o, (uint32_t)in->value, req->host ? req->host : "");
		if (in->kind == KCLAW__EVENT_KIND__SHUTDOWN)
			orch_sched_drain(o);
		if ((ev = malloc(sizeof(*ev))) == NULL)
			break;
		kclaw__event__init(ev);
		ev->kind = in->kind;
		ev->role = in->role;
		ev->value = in->value;
		ev->task_id = strdup("");
		ev->state = strdup("");
		ev->candidate_id = strdup("");
		ev->job_id = strdup("");
		ev->process = strdup(in->process ? in->process : "");
		ev->detail = strdup(in->detail ? in->detail : "");
		orch_event(o, ev);
	}
	resp.last_seq = o->last_seq;
	orch_api_answer(o, call, env->request_id, KCLAW__API_CODE__API_OK, NULL,
	    &resp.base);
out:
	kclaw__supervise_request__free_unpacked(req, NULL);
}

static void
api_memory(orch *o, bus_call *call, const Kclaw__ApiRequest *env)
{
	Kclaw__MemoryRequest *req;
	Kclaw__MemoryResponse *resp = NULL;
	int rv;

	if (o->opt.memory->query == NULL) {
		orch_api_answer(o, call, env->request_id,
		    KCLAW__API_CODE__API_UNKNOWN_METHOD,
		    "Memory: this orchestrator runs without long-term memory "
		    "queries; use `kclaw memory` on a stopped deployment",
		    NULL);
		return;
	}
	req = (Kclaw__MemoryRequest *)orch_api_req(
	    o, call, env, &kclaw__memory_request__descriptor);
	if (req == NULL)
		return;
	kc_clearerr();
	rv = o->opt.memory->query(o->opt.memory_arg, o->db, req, &resp);
	if (rv == 0)
		orch_api_answer(o, call, env->request_id,
		    KCLAW__API_CODE__API_OK, NULL, &resp->base);
	else
		orch_api_answer(o, call, env->request_id, orch_api_code(rv),
		    kc_lasterr(), NULL);
	if (resp)
		kclaw__memory_response__free_unpacked(resp, NULL);
	kclaw__memory_request__free_unpacked(req, NULL);
}

static const struct {
	const char *method;
	void (*fn)(orch *, bus_call *, const Kclaw__ApiRequest *);
} orch_api_methods[] = {
    {"Submit", api_submit},
    {"Cancel", api_cancel},
    {"Status", api_status},
    {"List", api_list},
    {"Result", api_result},
    {"Events", api_events},
    {"Health", api_health},
    {"Supervise", api_supervise},
    {"Memory", api_memory},
};

void
orch_api_call(orch *o, bus_call *call)
{
	Kclaw__ApiRequest *env;
	const void *data;
	size_t len;
	char text[200];

	data = bus_call_data(call, &len);
	if ((env = kclaw__api_request__unpack(NULL, len, data)) == NULL) {
		orch_api_answer(o, call, 0, KCLAW__API_CODE__API_BAD_REQUEST,
		    "the request is not a kclaw.ApiRequest; see "
		    "proto/kclaw.proto",
		    NULL);
		return;
	}
	if (kc_call_authorize(
	        call, data, len, KC_API_TOKEN_FIELD, o->opt.cfg.token) != 0) {
		orch_api_answer(o, call, env->request_id,
		    KCLAW__API_CODE__API_UNAUTHORIZED, KC_TOKEN_REFUSED_API,
		    NULL);
		goto out;
	}
	for (size_t i = 0; i < KC_ARRAY_LEN(orch_api_methods); i++)
		if (strcmp(env->method, orch_api_methods[i].method) == 0) {
			orch_api_methods[i].fn(o, call, env);
			goto out;
		}
	snprintf(text, sizeof(text),
	    "unknown method '%.40s': this orchestrator answers Submit, "
	    "PutBlob, Cancel, Status, List, Result, Events, Health, Memory",
	    env->method);
	orch_api_answer(o, call, env->request_id,
	    KCLAW__API_CODE__API_UNKNOWN_METHOD, text, NULL);
out:
	kclaw__api_request__free_unpacked(env, NULL);
}
