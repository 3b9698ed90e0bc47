/*
 * monitor.c - dashboard, HTTP API in JSON, live events over WebSocket,
 * Prometheus metrics. See monitor.h.
 */
#include "monitor.h"
#include "monitor_int.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <nng/nng.h>
#include <nng/protocol/pubsub0/pub.h>
#include <nng/supplemental/http/http.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "api.h"
#include "bus.h"
#include "client.h"
#include "export/export.h"
#include "kc_err.h"
#include "kc_log.h"
#include "kc_util.h"
#include "monitor_assets.h"
#include "pbjson.h"
#include "report.h"

/* Upper bounds (seconds) of the evaluation duration histogram's buckets. */
static const double mon_lat_buckets[MON_NBUCKETS] = {
    0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};

struct mon_task {
	char id[40];
	char state[32];
};

/* ------------------------------------------------------------ metrics */

static struct mon_task *
mon_task_slot(struct mon_metrics *mm, const char *id)
{
	for (size_t i = 0; i < mm->ntasks; i++)
		if (strcmp(mm->tasks[i].id, id) == 0)
			return &mm->tasks[i];
	if (mm->ntasks == mm->cap_tasks) {
		size_t cap = mm->cap_tasks ? mm->cap_tasks * 2 : 64;
		void *n = realloc(mm->tasks, cap * sizeof(*mm->tasks));
		if (n == NULL)
			return NULL;
		mm->tasks = n;
		mm->cap_tasks = cap;
	}
	struct mon_task *t = &mm->tasks[mm->ntasks++];
	memset(t, 0, sizeof(*t));
	kc_strlcpy(t->id, id, sizeof(t->id));
	return t;
}

/* Folds one event into the metrics; called with mu held. */
static void
mon_account(struct mon_metrics *mm, const Kclaw__Event *e)
{
	if (e->kind < MON_NKINDS)
		mm->events[e->kind]++;
	if (e->seq > mm->last_seq)
		mm->last_seq = e->seq;
	if (e->task_id != NULL && *e->task_id != '\0' && e->state != NULL &&
	    *e->state != '\0') {
		struct mon_task *t = mon_task_slot(mm, e->task_id);
		if (t != NULL)
			kc_strlcpy(t->state, e->state, sizeof(t->state));
	}
	switch (e->kind) {
	case KCLAW__EVENT_KIND__ROUND_FINISHED: mm->rounds++; break;
	case KCLAW__EVENT_KIND__EVAL_FINISHED:
		if ((unsigned)e->eval_status < MON_NSTATUS)
			mm->evals[e->eval_status]++;
		/* EVAL_FINISHED carries the evaluation's wall time in ms
		 * (and the kernel's median in value). */
		for (size_t b = 0; b < MON_NBUCKETS; b++)
			if (e->latency_ms / 1000 <= mon_lat_buckets[b])
				mm->lat_bucket[b]++;
		mm->lat_count++;
		mm->lat_sum += e->latency_ms / 1000;
		break;
	case KCLAW__EVENT_KIND__AGENT_REPLIED:
		/* value: the job's LLM time in ms. */
		if ((unsigned)e->role < MON_NROLES) {
			mm->llm_replies[e->role]++;
			mm->llm_seconds[e->role] += e->value / 1000;
		}
		break;
	case KCLAW__EVENT_KIND__PROCESS_RESTARTED: {
		const char *name = e->process && *e->process ? e->process : "?";
		size_t i;
		for (i = 0; i < mm->nprocs; i++)
			if (strcmp(mm->procs[i].name, name) == 0)
				break;
		if (i == mm->nprocs && mm->nprocs < KC_ARRAY_LEN(mm->procs))
			kc_strlcpy(mm->procs[mm->nprocs++].name, name,
			    sizeof(mm->procs[0].name));
		if (i < mm->nprocs)
			mm->procs[i].restarts++;
		break;
	}
	default: break;
	}
}

static const char *
mon_enum_name(const ProtobufCEnumDescriptor *d, int v, char *buf, size_t n)
{
	const ProtobufCEnumValue *ev =
	    protobuf_c_enum_descriptor_get_value(d, v);

	snprintf(buf, n, "%s", ev ? ev->name : "UNKNOWN");
	for (char *p = buf; *p; p++)
		*p = (char)tolower((unsigned char)*p);
	return buf;
}

/* A label value, escaped as the text format wants (\\, \", \n). */
static void
mon_label(kc_str *s, const char *v)
{
	for (; *v; v++) {
		if (*v == '\\' || *v == '"')
			kc_str_printf(s, "\\%c", *v);
		else if (*v == '\n')
			kc_str_append(s, "\\n");
		else
			kc_str_appendn(s, v, 1);
	}
}

/* A metric family's HELP and TYPE lines: every sample of the family follows
 * at once, before the next family's. */
static void
mon_family(kc_str *s, const char *name, const char *type, const char *help)
{
	kc_str_printf(
	    s, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* The LLM roles: every Role but the sandbox. */
static bool
mon_llm_role(int r)
{
	return r > KCLAW__ROLE__ROLE_UNSPECIFIED && r < MON_NROLES &&
	    r != KCLAW__ROLE__SANDBOX &&
	    protobuf_c_enum_descriptor_get_value(&kclaw__role__descriptor, r) !=
	    NULL;
}

/* The cost of one role's usage in a record: false when its model has no
 * price. */
static bool
mon_role_cost(const mon *m, const Kclaw__RoleUsage *u, double *usd)
{
	const kc_price *p = kc_config_price(&m->cfg, u->model);

	*usd = p
	    ? kc_price_usd(p, u->prompt_tokens, u->completion_tokens,
	          u->reasoning_tokens, u->cached_tokens, u->cache_write_tokens)
	    : 0;
	return p != NULL;
}

/*
 * Sums the usage of every task record (List); on the HTTP thread, which
 * owns http_api. Counters must not go down: a series keeps the larger of
 * its old and new value (a List that failed keeps the old ones).
 */
static void
mon_usage_refresh(mon *m)
{
	Kclaw__ListRequest lr = KCLAW__LIST_REQUEST__INIT;
	Kclaw__ListResponse *list;
	struct mon_usage u[MON_NROLES];
	bool priced[MON_NROLES];

	if (kc_api_call(m->http_api, "List", &lr.base, m->token,
	        MON_API_TIMEOUT_MS, &kclaw__list_response__descriptor,
	        (ProtobufCMessage **)&list) != 0) {
		kc_clearerr();
		return;
	}
	memset(u, 0, sizeof(u));
	memset(priced, 0, sizeof(priced));
	for (size_t i = 0; i < list->n_tasks; i++)
		for (size_t k = 0; k < list->tasks[i]->n_usage; k++) {
			const Kclaw__RoleUsage *ru = list->tasks[i]->usage[k];
			struct mon_usage *x;
			double usd;
			if (!mon_llm_role(ru->role))
				continue;
			x = &u[ru->role];
			x->prompt += ru->prompt_tokens;
			x->completion += ru->completion_tokens;
			x->reasoning += ru->reasoning_tokens;
			x->cached += ru->cached_tokens;
			x->calls += ru->calls;
			x->failed_calls += ru->failed_calls;
			if (mon_role_cost(m, ru, &usd)) {
				x->usd += usd;
				priced[ru->role] = true;
			}
		}
	kclaw__list_response__free_unpacked(list, NULL);
	pthread_mutex_lock(&m->mu);
	for (int r = 0; r < MON_NROLES; r++) {
		struct mon_usage *o = &m->usage[r];
#define MON_MAX(f) o->f = u[r].f > o->f ? u[r].f : o->f
		MON_MAX(prompt);
		MON_MAX(completion);
		MON_MAX(reasoning);
		MON_MAX(cached);
		MON_MAX(calls);
		MON_MAX(failed_calls);
		MON_MAX(usd);
#undef MON_MAX
		m->priced[r] |= priced[r];
	}
	m->usage_known = true;
	pthread_mutex_unlock(&m->mu);
}

char *
mon_metrics_text(mon *m)
{
	struct mon_metrics *mm = &m->m;
	char name[64];
	kc_str s = {0};
	int npriced = 0;

	mon_usage_refresh(m);
	pthread_mutex_lock(&m->mu);
	mon_family(&s, "kclaw_tasks", "gauge", "Tasks by state.");
	/* Count tasks per distinct state. */
	for (size_t i = 0; i < mm->ntasks; i++) {
		bool seen = false;
		for (size_t j = 0; j < i && !seen; j++)
			seen =
			    strcmp(mm->tasks[j].state, mm->tasks[i].state) == 0;
		if (seen || mm->tasks[i].state[0] == '\0')
			continue;
		size_t n = 0;
		for (size_t j = i; j < mm->ntasks; j++)
			n +=
			    strcmp(mm->tasks[j].state, mm->tasks[i].state) == 0;
		kc_str_append(&s, "kclaw_tasks{state=\"");
		mon_label(&s, mm->tasks[i].state);
		kc_str_printf(&s, "\"} %zu\n", n);
	}
	mon_family(&s, "kclaw_rounds_total", "counter", "Rounds finished.");
	kc_str_printf(
	    &s, "kclaw_rounds_total %llu\n", (unsigned long long)mm->rounds);
	mon_family(
	    &s, "kclaw_evaluations_total", "counter", "Evaluations by status.");
	for (int st = 1; st < MON_NSTATUS; st++)
		if (protobuf_c_enum_descriptor_get_value(
		        &kclaw__eval_status__descriptor, st) != NULL)
			kc_str_printf(&s,
			    "kclaw_evaluations_total{status=\"%s\"} %llu\n",
			    mon_enum_name(&kclaw__eval_status__descriptor, st,
			        name, sizeof(name)),
			    (unsigned long long)mm->evals[st]);
	/* Buckets are cumulative: each counts every evaluation at most its
	 * bound (mon_account adds one to every bucket it fits). */
	mon_family(&s, "kclaw_evaluation_duration_seconds", "histogram",
	    "Evaluation wall time (compile, verify, time) in seconds.");
	for (size_t b = 0; b < MON_NBUCKETS; b++)
		kc_str_printf(&s,
		    "kclaw_evaluation_duration_seconds_bucket{le=\"%g\"} "
		    "%llu\n",
		    mon_lat_buckets[b], (unsigned long long)mm->lat_bucket[b]);
	kc_str_printf(&s,
	    "kclaw_evaluation_duration_seconds_bucket{le=\"+Inf\"} %llu\n"
	    "kclaw_evaluation_duration_seconds_sum %.6f\n"
	    "kclaw_evaluation_duration_seconds_count %llu\n",
	    (unsigned long long)mm->lat_count, mm->lat_sum,
	    (unsigned long long)mm->lat_count);
	mon_family(&s, "kclaw_agent_llm_duration_seconds", "summary",
	    "Time an agent job spent in LLM calls (retries included), in "
	    "seconds, by role; _count is the jobs that replied.");
	for (int r = 1; r < MON_NROLES; r++) {
		if (!mon_llm_role(r))
			continue;
		mon_enum_name(&kclaw__role__descriptor, r, name, sizeof(name));
		kc_str_printf(&s,
		    "kclaw_agent_llm_duration_seconds_sum{role=\"%s\"} %.6f\n"
		    "kclaw_agent_llm_duration_seconds_count{role=\"%s\"} "
		    "%llu\n",
		    name, mm->llm_seconds[r], name,
		    (unsigned long long)mm->llm_replies[r]);
	}
	if (m->usage_known) {
		static const char *const kinds[] = {
		    "prompt", "completion", "reasoning", "cached"};
		mon_family(&s, "kclaw_llm_calls_total", "counter",
		    "LLM calls by agent role, failed and re-asked ones "
		    "included (over the task records).");
		for (int r = 1; r < MON_NROLES; r++)
			if (mon_llm_role(r))
				kc_str_printf(&s,
				    "kclaw_llm_calls_total{role=\"%s\"} %llu\n",
				    mon_enum_name(&kclaw__role__descriptor, r,
				        name, sizeof(name)),
				    (unsigned long long)m->usage[r].calls);
		mon_family(&s, "kclaw_llm_failed_calls_total", "counter",
		    "LLM calls that failed, by agent role.");
		for (int r = 1; r < MON_NROLES; r++)
			if (mon_llm_role(r))
				kc_str_printf(&s,
				    "kclaw_llm_failed_calls_total{role=\"%s\"} "
				    "%llu\n",
				    mon_enum_name(&kclaw__role__descriptor, r,
				        name, sizeof(name)),
				    (unsigned long long)m->usage[r]
				        .failed_calls);
		mon_family(&s, "kclaw_tokens_total", "counter",
		    "LLM tokens by agent role and kind (reasoning tokens are "
		    "part of completion, cached part of prompt).");
		for (int r = 1; r < MON_NROLES; r++) {
			const struct mon_usage *u = &m->usage[r];
			const uint64_t v[] = {
			    u->prompt, u->completion, u->reasoning, u->cached};
			if (!mon_llm_role(r))
				continue;
			mon_enum_name(
			    &kclaw__role__descriptor, r, name, sizeof(name));
			for (size_t k = 0; k < KC_ARRAY_LEN(kinds); k++)
				kc_str_printf(&s,
				    "kclaw_tokens_total{role=\"%s\",kind=\"%"
				    "s\"}"
				    " %llu\n",
				    name, kinds[k], (unsigned long long)v[k]);
		}
		for (int r = 1; r < MON_NROLES; r++)
			npriced += m->priced[r];
		if (npriced > 0) {
			mon_family(&s, "kclaw_cost_usd_total", "counter",
			    "Cost of the LLM tokens in USD at kclaw.json's "
			    "prices, by agent role (models without a price "
			    "count nothing).");
			for (int r = 1; r < MON_NROLES; r++)
				if (mon_llm_role(r) && m->priced[r])
					kc_str_printf(&s,
					    "kclaw_cost_usd_total{role=\"%s\"} "
					    "%.6f\n",
					    mon_enum_name(
					        &kclaw__role__descriptor, r,
					        name, sizeof(name)),
					    m->usage[r].usd);
		}
	}
	if (mm->nprocs > 0) {
		mon_family(&s, "kclaw_process_restarts_total", "counter",
		    "Processes restarted by the supervisor.");
		for (size_t i = 0; i < mm->nprocs; i++) {
			kc_str_append(
			    &s, "kclaw_process_restarts_total{process=\"");
			mon_label(&s, mm->procs[i].name);
			kc_str_printf(&s, "\"} %llu\n",
			    (unsigned long long)mm->procs[i].restarts);
		}
	}
	mon_family(&s, "kclaw_events_total", "counter", "Events by kind.");
	for (int k = 1; k < MON_NKINDS; k++)
		if (protobuf_c_enum_descriptor_get_value(
		        &kclaw__event_kind__descriptor, k) != NULL)
			kc_str_printf(&s,
			    "kclaw_events_total{kind=\"%s\"} %llu\n",
			    mon_enum_name(&kclaw__event_kind__descriptor, k,
			        name, sizeof(name)),
			    (unsigned long long)mm->events[k]);
	mon_family(&s, "kclaw_last_event_seq", "gauge",
	    "Highest event sequence seen.");
	kc_str_printf(&s, "kclaw_last_event_seq %llu\n",
	    (unsigned long long)mm->last_seq);
	mon_family(&s, "kclaw_event_gaps_recovered_total", "counter",
	    "Event gaps filled from the event log.");
	kc_str_printf(&s, "kclaw_event_gaps_recovered_total %llu\n",
	    (unsigned long long)mm->gaps_recovered);
	pthread_mutex_unlock(&m->mu);
	return kc_str_take(&s);
}

/* ------------------------------------------------------------- events */

/* Accounts for one event and forwards it to WebSocket subscribers. */
static void
mon_event(mon *m, const Kclaw__Event *e)
{
	char *json;

	pthread_mutex_lock(&m->mu);
	if (e->seq != 0 && e->seq <= m->m.last_seq) {
		pthread_mutex_unlock(&m->mu);
		return; /* already seen (catch-up overlaps live events) */
	}
	mon_account(&m->m, e);
	pthread_cond_broadcast(&m->ev_cv);
	pthread_mutex_unlock(&m->mu);
	if (m->ws_open &&
	    (json = kc_pb_to_json_public_text(&e->base)) != NULL) {
		nng_msg *msg;
		if (nng_msg_alloc(&msg, 0) == 0) {
			nng_msg_append(msg, json, strlen(json));
			if (nng_sendmsg(m->ws_pub, msg, NNG_FLAG_NONBLOCK) != 0)
				nng_msg_free(msg);
		}
		free(json);
	}
}

/* Fetches every logged event after the last one seen. */
static int
mon_catch_up(mon *m)
{
	for (;;) {
		Kclaw__EventsRequest req = KCLAW__EVENTS_REQUEST__INIT;
		Kclaw__EventsResponse *resp;
		int rv;

		pthread_mutex_lock(&m->mu);
		req.since_seq = m->m.last_seq;
		pthread_mutex_unlock(&m->mu);
		req.limit = 1000;
		rv = kc_api_call(m->api, "Events", &req.base, m->token,
		    MON_API_TIMEOUT_MS, &kclaw__events_response__descriptor,
		    (ProtobufCMessage **)&resp);
		if (rv != 0)
			return rv;
		size_t n = resp->n_events;
		for (size_t i = 0; i < n; i++)
			mon_event(m, resp->events[i]);
		kclaw__events_response__free_unpacked(resp, NULL);
		if (n == 0)
			return 0;
	}
}

static void *
mon_event_main(void *arg)
{
	mon *m = arg;
	bool synced = false;
	uint64_t beat = kc_mono_ms();

	while (!m->stop) {
		char *topic;
		void *data;
		size_t len;

		/* A quiet WebSocket still carries a message now and then, or
		 * the connection guard takes it for an idle connection. */
		if (m->ws_open && kc_mono_ms() - beat >= MON_WS_BEAT_MS) {
			static const char ka[] = "{\"keepalive\":true}";
			nng_msg *msg;
			beat = kc_mono_ms();
			if (nng_msg_alloc(&msg, 0) == 0) {
				nng_msg_append(msg, ka, sizeof(ka) - 1);
				if (nng_sendmsg(
				        m->ws_pub, msg, NNG_FLAG_NONBLOCK) != 0)
					nng_msg_free(msg);
			}
		}

		if (!synced) {
			synced = mon_catch_up(m) == 0;
			if (!synced)
				kc_sleep_ms(500);
		}
		if (bus_sub_recv(m->sub, 300, &topic, &data, &len) != 0)
			continue;
		Kclaw__Event *e = kclaw__event__unpack(NULL, len, data);
		free(topic);
		free(data);
		if (e == NULL)
			continue;
		pthread_mutex_lock(&m->mu);
		bool gap = synced && e->seq > m->m.last_seq + 1;
		pthread_mutex_unlock(&m->mu);
		if (gap && mon_catch_up(m) == 0) {
			pthread_mutex_lock(&m->mu);
			m->m.gaps_recovered++;
			pthread_mutex_unlock(&m->mu);
		}
		mon_event(m, e);
		kclaw__event__free_unpacked(e, NULL);
	}
	return NULL;
}

/* --------------------------------------------------------------- HTTP */

/* A response with extra headers hdrs (name, value pairs, NULL-ended; may
 * be NULL). */
static void
mon_http_reply(nng_aio *aio, uint16_t status, const char *ctype,
    const void *body, size_t len, const char *const *hdrs)
{
	nng_http_res *res;

	if (nng_http_res_alloc(&res) != 0) {
		nng_aio_finish(aio, NNG_ENOMEM);
		return;
	}
	nng_http_res_set_status(res, status);
	nng_http_res_set_header(res, "Content-Type", ctype);
	nng_http_res_set_header(res, "Cache-Control", "no-store");
	for (size_t i = 0; hdrs != NULL && hdrs[i] != NULL; i += 2)
		nng_http_res_set_header(res, hdrs[i], hdrs[i + 1]);
	/* NNG leaves Content-Length out of an empty body, and a client
	 * would wait for the connection to close. */
	if (len == 0)
		nng_http_res_set_header(res, "Content-Length", "0");
	else
		nng_http_res_copy_data(res, body, len);
	nng_aio_set_output(aio, 0, res);
	nng_aio_finish(aio, 0);
}

void
mon_http_respond_n(nng_aio *aio, uint16_t status, const char *ctype,
    const void *body, size_t len, const char *file)
{
	char disp[160];
	const char *hdrs[] = {"Content-Disposition", disp, NULL};

	snprintf(disp, sizeof(disp), "attachment; filename=\"%s\"",
	    file ? file : "");
	mon_http_reply(aio, status, ctype, body, len, file ? hdrs : NULL);
}

static void
mon_http_respond(
    nng_aio *aio, uint16_t status, const char *ctype, const char *body)
{
	mon_http_respond_n(aio, status, ctype, body, strlen(body), NULL);
}

/*
 * Whether a Host header names this dashboard: its port, and as host an IP
 * literal, localhost or the host name it was started on. A DNS-rebinding
 * page reaches 127.0.0.1 under its own domain name, which is none of
 * those, so it cannot read specs or sources through the visitor's browser.
 */
static bool
mon_host_ok(const mon *m, const char *host)
{
	char name[256];
	const char *port, *end;
	struct in6_addr a6;
	struct in_addr a4;
	size_t n;

	if (host == NULL || *host == '\0')
		return false;
	if (host[0] == '[') {
		if ((end = strchr(host, ']')) == NULL)
			return false;
		n = (size_t)(end - host - 1);
		port = end[1] == ':' ? end + 2 : end[1] == '\0' ? NULL : "";
		host++;
	} else {
		end = strrchr(host, ':');
		n = end ? (size_t)(end - host) : strlen(host);
		port = end ? end + 1 : NULL;
	}
	if (n == 0 || n >= sizeof(name))
		return false;
	memcpy(name, host, n);
	name[n] = '\0';
	if (port ? strcmp(port, m->port) != 0 : strcmp(m->port, "80") != 0)
		return false;
	return strcasecmp(name, "localhost") == 0 ||
	    strcasecmp(name, m->host) == 0 ||
	    inet_pton(AF_INET, name, &a4) == 1 ||
	    inet_pton(AF_INET6, name, &a6) == 1;
}

/* A browser's Origin, when it sends one, must be this page's own. */
static bool
mon_origin_ok(const char *origin, const char *host)
{
	return origin == NULL ||
	    (strncasecmp(origin, "http://", 7) == 0 &&
	        strcasecmp(origin + 7, host) == 0);
}

static bool
mon_req_ok(const mon *m, nng_http_req *req)
{
	const char *host = nng_http_req_get_header(req, "Host");

	return mon_host_ok(m, host) &&
	    mon_origin_ok(nng_http_req_get_header(req, "Origin"), host);
}

/* The CLI's exit codes (docs/cli.md), by name, as the error documents of
 * `kclaw --json` give them. */
static const char *
mon_err_code(uint16_t status, int *exit_code)
{
	switch (status) {
	case 400:
	case 405:
	case 411:
	case 413: *exit_code = 2; return "usage";
	case 404: *exit_code = 3; return "not_found";
	case 502:
	case 503:
	case 504: *exit_code = 4; return "unreachable";
	case 501: *exit_code = 5; return "not_implemented";
	default: *exit_code = 1; return "failed";
	}
}

char *
mon_error_json(uint16_t status, const char *msg)
{
	cJSON *j = cJSON_CreateObject(), *e;
	int code;
	char *t;

	e = cJSON_AddObjectToObject(j, "error");
	cJSON_AddStringToObject(e, "code", mon_err_code(status, &code));
	cJSON_AddNumberToObject(e, "exit", code);
	cJSON_AddStringToObject(e, "message", msg);
	t = cJSON_PrintUnformatted(j);
	cJSON_Delete(j);
	return t;
}

void
mon_http_error_h(
    nng_aio *aio, uint16_t status, const char *msg, const char *const *hdrs)
{
	char *t = mon_error_json(status, msg);

	mon_http_reply(aio, status, "application/json", t ? t : "{}",
	    t ? strlen(t) : 2, hdrs);
	free(t);
}

void
mon_http_error(nng_aio *aio, uint16_t status, const char *msg)
{
	mon_http_error_h(aio, status, msg, NULL);
}

uint16_t
mon_err_status(int rv)
{
	switch (rv) {
	case KC_ENOENT: return 404;
	case KC_EINVAL: return 400;
	case KC_EPERM: return 403;
	case KC_ENOTSUP: return 501;
	case KC_ENOMEM: return 500;
	case KC_ETIMEDOUT: return 504;
	default: return 502;
	}
}

static int
mon_hex(char c)
{
	return c >= '0' && c <= '9' ? c - '0'
	    : c >= 'a' && c <= 'f'  ? c - 'a' + 10
	    : c >= 'A' && c <= 'F'  ? c - 'A' + 10
	                            : -1;
}

/* Percent-decodes s[0..n) ('+' is a space, as forms send it) into out. */
static void
mon_urldecode(const char *s, size_t n, char *out, size_t cap)
{
	size_t o = 0;

	for (size_t i = 0; i < n && o + 1 < cap; i++) {
		if (s[i] == '%' && i + 2 < n + 0 && mon_hex(s[i + 1]) >= 0 &&
		    mon_hex(s[i + 2]) >= 0) {
			out[o++] =
			    (char)(mon_hex(s[i + 1]) * 16 + mon_hex(s[i + 2]));
			i += 2;
		} else {
			out[o++] = s[i] == '+' ? ' ' : s[i];
		}
	}
	out[o] = '\0';
}

/* "name=value" in a form or query string q (without its '?'). */
static bool
mon_form_get(const char *q, const char *name, char *out, size_t n)
{
	size_t nl = strlen(name);

	while (q != NULL && *q != '\0') {
		size_t len = strcspn(q, "&");
		if (strncmp(q, name, nl) == 0 && q[nl] == '=') {
			mon_urldecode(q + nl + 1, len - nl - 1, out, n);
			return true;
		}
		q = q[len] ? q + len + 1 : NULL;
	}
	return false;
}

bool
mon_query(const char *uri, const char *name, char *out, size_t n)
{
	const char *q = strchr(uri, '?');

	return q != NULL && mon_form_get(q + 1, name, out, n);
}

bool
mon_valid_id(const char *id)
{
	size_t n = strlen(id);

	if (n == 0 || n > 64)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)id[i]) && id[i] != '-' &&
		    id[i] != '_')
			return false;
	return true;
}

/* ----------------------------------------------------- authentication */

/* a == b, in a time that depends on their lengths only. */
static bool
mon_secret_equal(const char *a, const char *b)
{
	size_t na = strlen(a), nb = strlen(b);
	unsigned char d = na != nb;

	for (size_t i = 0; i < na; i++)
		d |= (unsigned char)(a[i] ^ b[i % (nb ? nb : 1)]);
	return d == 0 && nb > 0;
}

/*
 * Whether a request may see the dashboard: always without a token; with
 * one, an `Authorization: Bearer TOKEN` header (scripts, Prometheus) or
 * the session cookie the login page sets. The cookie holds a hash of the
 * token, not the token, so it does not open the NNG API.
 */
static bool
mon_auth_headers(const mon *m, const char *authz, const char *cookie)
{
	const char *p;
	char val[80];
	size_t n;

	if (m->token[0] == '\0')
		return true;
	if (authz != NULL && strncasecmp(authz, "Bearer ", 7) == 0 &&
	    mon_secret_equal(authz + 7, m->token))
		return true;
	for (p = cookie; p != NULL && *p != '\0';) {
		while (*p == ' ' || *p == ';')
			p++;
		n = strcspn(p, ";");
		if (strncmp(p, "kclaw_session=", 14) == 0 &&
		    n - 14 < sizeof(val)) {
			memcpy(val, p + 14, n - 14);
			val[n - 14] = '\0';
			if (mon_secret_equal(val, m->session))
				return true;
		}
		p += n;
	}
	return false;
}

static bool
mon_authed(const mon *m, nng_http_req *req)
{
	return mon_auth_headers(m,
	    nng_http_req_get_header(req, "Authorization"),
	    nng_http_req_get_header(req, "Cookie"));
}

static const char mon_login_page[] =
    "<!doctype html><html><head><meta charset=\"utf-8\"><title>kclaw "
    "login</title><style>body{font:15px system-ui,sans-serif;margin:4em "
    "auto;max-width:28em}input{font:inherit;width:100%%;margin:.4em 0;"
    "padding:.4em}</style></head><body><h1>kclaw</h1><p>This dashboard "
    "asks for the deployment's token (<code>token</code> in kclaw.json, "
    "or <code>KCLAW_TOKEN</code>).</p>%s<form method=\"post\" "
    "action=\"/login\"><input type=\"password\" name=\"token\" "
    "autocomplete=\"current-password\" autofocus placeholder=\"token\">"
    "<input type=\"submit\" value=\"Log in\"></form></body></html>";

static void
mon_login_form(nng_aio *aio, uint16_t status, const char *note)
{
	char page[2048];

	snprintf(page, sizeof(page), mon_login_page, note);
	mon_http_reply(
	    aio, status, "text/html; charset=utf-8", page, strlen(page), NULL);
}

/*
 * GET /login: the form. POST /login with the token (a form field `token`,
 * or JSON {"token": ...}): the session cookie, and back to the dashboard.
 * POST /logout: the cookie cleared.
 */
static void
mon_login(mon *m, nng_aio *aio, nng_http_req *req, bool logout)
{
	const char *method = nng_http_req_get_method(req);
	char cookie[160], token[160] = "", *body = NULL;
	void *data;
	size_t len;
	const char *hdrs[] = {"Set-Cookie", cookie, "Location", "/", NULL};

	if (logout) {
		if (strcmp(method, "POST") != 0) {
			mon_http_error(aio, 405, "POST /logout");
			return;
		}
		snprintf(cookie, sizeof(cookie),
		    "kclaw_session=; Path=/; Max-Age=0; HttpOnly; "
		    "SameSite=Strict");
		hdrs[3] = "/login";
		mon_http_reply(aio, 303, "text/plain", "", 0, hdrs);
		return;
	}
	if (strcmp(method, "GET") == 0) {
		if (m->token[0] == '\0') {
			snprintf(cookie, sizeof(cookie), "kclaw_session=");
			mon_http_reply(aio, 303, "text/plain", "", 0, hdrs + 2);
			return;
		}
		mon_login_form(aio, 200, "");
		return;
	}
	if (strcmp(method, "POST") != 0) {
		mon_http_error(aio, 405, "GET or POST /login");
		return;
	}
	nng_http_req_get_data(req, &data, &len);
	if ((body = malloc(len + 1)) == NULL) {
		nng_aio_finish(aio, NNG_ENOMEM);
		return;
	}
	memcpy(body, data, len);
	body[len] = '\0';
	if (len > 0 && body[0] == '{') {
		cJSON *j = cJSON_Parse(body);
		cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "token");
		if (cJSON_IsString(t))
			kc_strlcpy(token, t->valuestring, sizeof(token));
		cJSON_Delete(j);
	} else {
		mon_form_get(body, "token", token, sizeof(token));
	}
	free(body);
	if (m->token[0] != '\0' && !mon_secret_equal(token, m->token)) {
		KC_WARN("dashboard: a login with a wrong token");
		mon_login_form(aio, 401,
		    "<p><b>That is not the deployment's token.</b></p>");
		return;
	}
	snprintf(cookie, sizeof(cookie),
	    "kclaw_session=%s; Path=/; HttpOnly; SameSite=Strict", m->session);
	mon_http_reply(aio, 303, "text/plain", "", 0, hdrs);
}

/* A request without the token: a browser's page goes to the login form;
 * everything else is told 401 in JSON (text for /metrics). */
static void
mon_refuse_unauthed(nng_aio *aio, const char *path)
{
	static const char *const www[] = {
	    "WWW-Authenticate", "Bearer realm=\"kclaw\"", NULL};
	static const char *const login[] = {"Location", "/login", NULL};
	static const char msg[] =
	    "this dashboard asks for the deployment's token: log in at "
	    "/login, or send the header 'Authorization: Bearer TOKEN'";

	if (strcmp(path, "/") == 0 || strncmp(path, "/task", 5) == 0)
		mon_http_reply(aio, 303, "text/plain", "", 0, login);
	else if (strcmp(path, "/metrics") == 0)
		mon_http_reply(aio, 401, "text/plain; charset=utf-8", msg,
		    sizeof(msg) - 1, www);
	else
		mon_http_error_h(aio, 401, msg, www);
}

/* ------------------------------------------------------------ the API */

/* Adds "cost_usd" to a task record's JSON and to each of its usage
 * entries: the USD at the configured prices, null where a model has no
 * price (the task's: null unless every entry is priced). */
static void
mon_json_cost(const mon *m, cJSON *j, const Kclaw__TaskRecord *rec)
{
	cJSON *usage = cJSON_GetObjectItemCaseSensitive(j, "usage");
	bool all = rec->n_usage > 0;
	double total = 0, usd;

	for (size_t i = 0; i < rec->n_usage; i++) {
		bool priced = mon_role_cost(m, rec->usage[i], &usd);
		cJSON *u = cJSON_GetArrayItem(usage, (int)i);
		all &= priced;
		total += usd;
		if (u != NULL)
			cJSON_AddItemToObject(u, "cost_usd",
			    priced ? cJSON_CreateNumber(usd)
			           : cJSON_CreateNull());
	}
	cJSON_AddItemToObject(j, "cost_usd",
	    all ? cJSON_CreateNumber(total) : cJSON_CreateNull());
}

/* An API answer as JSON text in the convention of `kclaw --json`
 * (kc_pb_to_json_public), with the cost in every task record. */
static char *
mon_api_json(const mon *m, const ProtobufCMessage *resp)
{
	cJSON *j = kc_pb_to_json_public(resp), *t;
	char *text;

	if (j == NULL)
		return NULL;
	if (resp->descriptor == &kclaw__list_response__descriptor) {
		const Kclaw__ListResponse *l =
		    (const Kclaw__ListResponse *)resp;
		cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "tasks");
		for (size_t i = 0; i < l->n_tasks; i++)
			if ((t = cJSON_GetArrayItem(arr, (int)i)) != NULL)
				mon_json_cost(m, t, l->tasks[i]);
	} else if (resp->descriptor == &kclaw__status_response__descriptor ||
	    resp->descriptor == &kclaw__result_response__descriptor) {
		/* Both start with their TaskRecord task. */
		const Kclaw__TaskRecord *rec =
		    resp->descriptor == &kclaw__status_response__descriptor
		    ? ((const Kclaw__StatusResponse *)resp)->task
		    : ((const Kclaw__ResultResponse *)resp)->task;
		if (rec != NULL &&
		    (t = cJSON_GetObjectItemCaseSensitive(j, "task")) != NULL &&
		    cJSON_IsObject(t))
			mon_json_cost(m, t, rec);
	}
	text = cJSON_PrintUnformatted(j);
	cJSON_Delete(j);
	return text;
}

/* One file of a ustar archive: header, data, padding to 512 bytes. */
static void
mon_tar_add(
    kc_str *s, const char *name, const char *data, size_t n, uint64_t mtime)
{
	unsigned char h[512];
	unsigned sum = 0;
	static const char zero[512];

	memset(h, 0, sizeof(h));
	snprintf((char *)h, 100, "%s", name);
	memcpy(h + 100, "0000644", 8);
	memcpy(h + 108, "0000000", 8);
	memcpy(h + 116, "0000000", 8);
	snprintf((char *)h + 124, 12, "%011llo", (unsigned long long)n);
	snprintf((char *)h + 136, 12, "%011llo", (unsigned long long)mtime);
	memset(h + 148, ' ', 8);
	h[156] = '0';
	memcpy(h + 257, "ustar", 6);
	memcpy(h + 263, "00", 2);
	snprintf((char *)h + 265, 32, "kclaw");
	snprintf((char *)h + 297, 32, "kclaw");
	for (size_t i = 0; i < sizeof(h); i++)
		sum += h[i];
	snprintf((char *)h + 148, 8, "%06o", sum);
	h[155] = ' ';
	kc_str_appendn(s, (const char *)h, sizeof(h));
	kc_str_appendn(s, data, n);
	if (n % 512)
		kc_str_appendn(s, zero, 512 - n % 512);
}

/* The files `kclaw result --out` writes (tools/export/export.h), which
 * /api/result/ID/FILE serves one by one and kernel.tar all together. */
static const char *const mon_export_files[] = {"kernel.cu", "plan.json",
    "result.json", "history.json", "launcher.h", "launcher.c", "main.c",
    "model_new.py", "README.md"};

static const char *
mon_export_ctype(const char *file)
{
	size_t n = strlen(file);

	if (n > 5 && strcmp(file + n - 5, ".json") == 0)
		return "application/json";
	if (n > 3 && strcmp(file + n - 3, ".md") == 0)
		return "text/markdown; charset=utf-8";
	return "text/plain; charset=utf-8";
}

/*
 * The best kernel of a Result as one of the export's files, or as
 * kernel.tar: every file in a folder kclaw-ID/, the same files as `kclaw
 * result ID --out DIR` writes (the exporter writes them into a private
 * temporary folder, removed afterwards).
 */
static void
mon_download(nng_aio *aio, const Kclaw__ResultResponse *r, const char *file)
{
	const char *id = r->task && r->task->id ? r->task->id : "task";
	uint64_t mtime = r->task ? r->task->finished_unix_ms / 1000 : 0;
	char dir[] = "/tmp/kclaw-export-XXXXXX", path[512], name[200];
	bool tar = strcmp(file, "kernel.tar") == 0;
	kc_str s = {0};
	static const char end[1024];
	int rv;

	if (r->best == NULL || r->best->candidate == NULL) {
		mon_http_error(aio, 404,
		    "the task has no correct kernel (yet): nothing to "
		    "download");
		return;
	}
	if (mkdtemp(dir) == NULL) {
		mon_http_error(aio, 500, "cannot make a temporary folder");
		return;
	}
	if ((rv = kc_export_result(dir, r)) != 0) {
		mon_http_error(aio, mon_err_status(rv), kc_lasterr());
		goto out;
	}
	for (size_t i = 0; i < KC_ARRAY_LEN(mon_export_files); i++) {
		const char *f = mon_export_files[i];
		char *data;
		size_t len;
		if (!tar && strcmp(f, file) != 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, f);
		if (kc_read_file(path, (size_t)64 << 20, &data, &len) != 0) {
			kc_clearerr();
			continue; /* not written for this kernel */
		}
		if (tar) {
			snprintf(name, sizeof(name), "kclaw-%s/%s", id, f);
			mon_tar_add(&s, name, data, len, mtime);
		} else {
			snprintf(name, sizeof(name), "kclaw-%s-%s", id, f);
			mon_http_respond_n(
			    aio, 200, mon_export_ctype(f), data, len, name);
		}
		free(data);
		if (!tar)
			goto out;
	}
	if (!tar) {
		mon_http_error(aio, 404, "the export has no such file");
		goto out;
	}
	kc_str_appendn(&s, end, sizeof(end));
	if (s.buf == NULL) {
		mon_http_error(aio, 500, "out of memory");
		goto out;
	}
	snprintf(name, sizeof(name), "kclaw-%s.tar", id);
	mon_http_respond_n(aio, 200, "application/x-tar", s.buf, s.len, name);
out:
	kc_str_free(&s);
	for (size_t i = 0; i < KC_ARRAY_LEN(mon_export_files); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, mon_export_files[i]);
		unlink(path);
	}
	rmdir(dir);
}

/* GET /api/report?tasks=ID,ID&by=level: `kclaw report --json` (the same
 * code, tools/cli/cli_report.c). */
static void
mon_report(mon *m, nng_aio *aio, const char *uri)
{
	char list[2048] = "", by[16] = "", *ids[64], *save = NULL, *text = NULL;
	orch_client c;
	size_t n = 0, len = 0;
	FILE *f;
	int rv;

	mon_query(uri, "tasks", list, sizeof(list));
	mon_query(uri, "by", by, sizeof(by));
	if (by[0] != '\0' && strcmp(by, "level") != 0) {
		mon_http_error(aio, 400, "by= takes only 'level'");
		return;
	}
	for (char *t = strtok_r(list, ",", &save); t != NULL;
	     t = strtok_r(NULL, ",", &save)) {
		if (!mon_valid_id(t) || n == KC_ARRAY_LEN(ids)) {
			mon_http_error(aio, 400,
			    "tasks= takes at most 64 task ids, "
			    "comma-separated");
			return;
		}
		ids[n++] = t;
	}
	memset(&c, 0, sizeof(c));
	c.cfg = m->cfg;
	c.bus = m->http_api;
	if ((f = open_memstream(&text, &len)) == NULL) {
		mon_http_error(aio, 500, "out of memory");
		return;
	}
	rv = cli_report_print_by(&c, ids, n, true, by[0] != '\0', f);
	fclose(f);
	if (rv != 0)
		mon_http_error(aio, mon_err_status(rv), kc_lasterr());
	else
		mon_http_respond_n(
		    aio, 200, "application/json", text, len, NULL);
	free(text);
}

/*
 * The paths and methods served, as docs/openapi.json describes them
 * (tests/monitor/openapi_test.py compares the two): {id} is a task id,
 * {file} one of the export's files.
 */
enum mon_op {
	MON_PAGE,
	MON_SCRIPT,
	MON_TASK_PAGE,
	MON_LOGIN_FORM,
	MON_LOGIN,
	MON_LOGOUT,
	MON_METRICS,
	MON_WS,
	MON_HEALTH,
	MON_LIST,
	MON_SUBMIT,
	MON_STATUS,
	MON_CANCEL,
	MON_RESULT,
	MON_RESULT_FILE,
	MON_REPORT,
	MON_EVENTS,
	MON_EVENTS_STREAM,
};

static const struct mon_route {
	const char *method, *path;
	enum mon_op op;
} mon_routes[] = {
    {"GET", "/", MON_PAGE},
    {"GET", "/app.js", MON_SCRIPT},
    {"GET", "/task/{id}", MON_TASK_PAGE},
    {"GET", "/login", MON_LOGIN_FORM},
    {"POST", "/login", MON_LOGIN},
    {"POST", "/logout", MON_LOGOUT},
    {"GET", "/metrics", MON_METRICS},
    {"GET", "/ws", MON_WS},
    {"GET", "/api/health", MON_HEALTH},
    {"GET", "/api/tasks", MON_LIST},
    {"POST", "/api/tasks", MON_SUBMIT},
    {"GET", "/api/tasks/{id}", MON_STATUS},
    {"POST", "/api/tasks/{id}/cancel", MON_CANCEL},
    {"GET", "/api/result/{id}", MON_RESULT},
    {"GET", "/api/result/{id}/{file}", MON_RESULT_FILE},
    {"GET", "/api/report", MON_REPORT},
    {"GET", "/api/events", MON_EVENTS},
    {"GET", "/api/events/stream", MON_EVENTS_STREAM},
};

/* Whether path fits the template t; {id} and {file} go to id and file. */
static bool
mon_route_match(const char *t, const char *path, char *id, char *file)
{
	while (*t != '\0') {
		if (*t == '{') {
			bool is_id = strncmp(t, "{id}", 4) == 0;
			size_t n = strcspn(path, "/");
			char *out = is_id ? id : file;
			if (n == 0 || n >= 80)
				return false;
			memcpy(out, path, n);
			out[n] = '\0';
			path += n;
			t += is_id ? 4 : 6;
			continue;
		}
		if (*t++ != *path++)
			return false;
	}
	return *path == '\0';
}

static void
mon_api_call(mon *m, nng_aio *aio, enum mon_op op, const char *id,
    const char *file, const char *uri)
{
	const char *method;
	ProtobufCMessage *req, *resp = NULL;
	const ProtobufCMessageDescriptor *rd;
	Kclaw__HealthRequest hr = KCLAW__HEALTH_REQUEST__INIT;
	Kclaw__ListRequest lr = KCLAW__LIST_REQUEST__INIT;
	Kclaw__StatusRequest sr = KCLAW__STATUS_REQUEST__INIT;
	Kclaw__CancelRequest cr = KCLAW__CANCEL_REQUEST__INIT;
	Kclaw__ResultRequest rr = KCLAW__RESULT_REQUEST__INIT;
	Kclaw__EventsRequest er = KCLAW__EVENTS_REQUEST__INIT;
	char buf[32], task[80] = "", state[32] = "";
	int rv;

	switch (op) {
	case MON_HEALTH:
		method = "Health", req = &hr.base;
		rd = &kclaw__health_response__descriptor;
		break;
	case MON_LIST:
		method = "List", req = &lr.base;
		rd = &kclaw__list_response__descriptor;
		if (mon_query(uri, "state", state, sizeof(state)))
			lr.state = kc_json_upper(state);
		if (mon_query(uri, "limit", buf, sizeof(buf)))
			lr.limit = (uint32_t)strtoul(buf, NULL, 10);
		break;
	case MON_STATUS:
		method = "Status", req = &sr.base, sr.task_id = (char *)id;
		rd = &kclaw__status_response__descriptor;
		break;
	case MON_CANCEL:
		method = "Cancel", req = &cr.base, cr.task_id = (char *)id;
		rd = &kclaw__cancel_response__descriptor;
		break;
	case MON_RESULT:
	case MON_RESULT_FILE:
		method = "Result", req = &rr.base, rr.task_id = (char *)id;
		rd = &kclaw__result_response__descriptor;
		break;
	case MON_EVENTS:
		method = "Events", req = &er.base;
		rd = &kclaw__events_response__descriptor;
		if (mon_query(uri, "since", buf, sizeof(buf)))
			er.since_seq = strtoull(buf, NULL, 10);
		if (mon_query(uri, "limit", buf, sizeof(buf)))
			er.limit = (uint32_t)strtoul(buf, NULL, 10);
		if (mon_query(uri, "task", task, sizeof(task))) {
			if (!mon_valid_id(task)) {
				mon_http_error(aio, 400, "bad task id");
				return;
			}
			er.task_id = task;
		}
		break;
	default: mon_http_error(aio, 500, "not an API call"); return;
	}
	rv = kc_api_call(
	    m->http_api, method, req, m->token, MON_API_TIMEOUT_MS, rd, &resp);
	if (rv != 0) {
		mon_http_error(aio, mon_err_status(rv), kc_lasterr());
		return;
	}
	if (op == MON_RESULT_FILE) {
		mon_download(aio, (const Kclaw__ResultResponse *)resp, file);
		protobuf_c_message_free_unpacked(resp, NULL);
		return;
	}
	char *t = mon_api_json(m, resp);
	protobuf_c_message_free_unpacked(resp, NULL);
	if (t == NULL) {
		mon_http_error(aio, 500, "out of memory");
		return;
	}
	mon_http_respond(aio, 200, "application/json", t);
	free(t);
}

/* Routes one authenticated request of /api/ or /metrics; on the HTTP
 * thread. */
static void
mon_http_api(mon *m, nng_aio *aio, nng_http_req *req, const char *uri)
{
	const char *method = nng_http_req_get_method(req);
	char path[256], id[80] = "", file[80] = "", allow[64] = "";
	const struct mon_route *r = NULL;

	snprintf(path, sizeof(path), "%.*s", (int)strcspn(uri, "?"), uri);
	for (size_t i = 0; i < KC_ARRAY_LEN(mon_routes); i++) {
		const struct mon_route *x = &mon_routes[i];
		if (strncmp(x->path, "/api/", 5) != 0 &&
		    strcmp(x->path, "/metrics") != 0)
			continue;
		if (!mon_route_match(x->path, path, id, file))
			continue;
		if (strcmp(x->method, method) == 0)
			r = x;
		else
			snprintf(allow + strlen(allow),
			    sizeof(allow) - strlen(allow), "%s%s",
			    allow[0] ? ", " : "", x->method);
	}
	if (r == NULL && allow[0] != '\0') {
		const char *hdrs[] = {"Allow", allow, NULL};
		char msg[128];
		snprintf(msg, sizeof(msg), "%s takes %s", path, allow);
		mon_http_error_h(aio, 405, msg, hdrs);
		return;
	}
	if (r == NULL) {
		mon_http_error(aio, 404,
		    "no such API path; docs/api.md lists them (/api/health, "
		    "/api/tasks, /api/events, ...)");
		return;
	}
	if (id[0] != '\0' && !mon_valid_id(id)) {
		mon_http_error(
		    aio, 400, "bad task id: 1-64 letters, digits, '-' or '_'");
		return;
	}
	if (r->op == MON_RESULT_FILE) {
		bool known = strcmp(file, "kernel.tar") == 0;
		for (size_t i = 0; i < KC_ARRAY_LEN(mon_export_files); i++)
			known |= strcmp(file, mon_export_files[i]) == 0;
		if (!known) {
			mon_http_error(aio, 404,
			    "no such download: use /api/result/ID/kernel.tar "
			    "or one of its files (kernel.cu, plan.json, "
			    "result.json, history.json, launcher.h, "
			    "launcher.c, main.c, model_new.py, README.md)");
			return;
		}
	}
	switch (r->op) {
	case MON_METRICS: {
		char *t = mon_metrics_text(m);
		mon_http_respond(aio, 200,
		    "text/plain; version=0.0.4; charset=utf-8", t ? t : "");
		free(t);
		break;
	}
	case MON_REPORT: mon_report(m, aio, uri); break;
	case MON_EVENTS_STREAM: mon_stream_start(m, aio, uri); break;
	case MON_SUBMIT:
		/* Served by its own handler, before any body is read. */
		mon_http_error(aio, 500, "submit took the wrong handler");
		break;
	default: mon_api_call(m, aio, r->op, id, file, uri); break;
	}
}

static void *
mon_http_main(void *arg)
{
	mon *m = arg;

	pthread_mutex_lock(&m->mu);
	for (;;) {
		while (!m->stop && m->nqueue == 0)
			pthread_cond_wait(&m->cv, &m->mu);
		if (m->nqueue == 0 && m->stop)
			break;
		nng_aio *aio = m->queue[0];
		memmove(m->queue, m->queue + 1,
		    (m->nqueue - 1) * sizeof(*m->queue));
		m->nqueue--;
		pthread_mutex_unlock(&m->mu);
		nng_http_req *req = nng_aio_get_input(aio, 0);
		const char *uri = nng_http_req_get_uri(req);
		if (m->stop)
			mon_http_error(aio, 503, "shutting down");
		else
			mon_http_api(m, aio, req, uri);
		pthread_mutex_lock(&m->mu);
	}
	pthread_mutex_unlock(&m->mu);
	return NULL;
}

static const char mon_bad_host[] =
    "Host or Origin is not this dashboard's; open it as "
    "http://127.0.0.1:PORT/ (or the host it serves)";

/* On an NNG thread: never blocks, only queues. */
static void
mon_http_cb(nng_aio *aio)
{
	nng_http_handler *h = nng_aio_get_input(aio, 1);
	nng_http_req *req = nng_aio_get_input(aio, 0);
	mon *m = nng_http_handler_get_data(h);
	const char *uri = nng_http_req_get_uri(req);

	if (!mon_req_ok(m, req)) {
		mon_http_error(aio, 403, mon_bad_host);
		return;
	}
	if (strncmp(uri, "/login", 6) == 0 || strncmp(uri, "/logout", 7) == 0) {
		mon_login(m, aio, req, strncmp(uri, "/logout", 7) == 0);
		return;
	}
	if (!mon_authed(m, req)) {
		mon_refuse_unauthed(aio, uri);
		return;
	}
	pthread_mutex_lock(&m->mu);
	if (m->stop || m->nqueue >= 256) {
		pthread_mutex_unlock(&m->mu);
		nng_aio_finish(aio, NNG_ECLOSED);
		return;
	}
	if (m->nqueue == m->cap_queue) {
		size_t cap = m->cap_queue ? m->cap_queue * 2 : 16;
		void *n = realloc(m->queue, cap * sizeof(*m->queue));
		if (n == NULL) {
			pthread_mutex_unlock(&m->mu);
			nng_aio_finish(aio, NNG_ENOMEM);
			return;
		}
		m->queue = n;
		m->cap_queue = cap;
	}
	m->queue[m->nqueue++] = aio;
	pthread_cond_signal(&m->cv);
	pthread_mutex_unlock(&m->mu);
}

/* POST /api/tasks: the token is checked on the headers, before a byte of
 * the archive is read (mon_upload_start reads it). */
static void
mon_submit_cb(nng_aio *aio)
{
	nng_http_handler *h = nng_aio_get_input(aio, 1);
	nng_http_req *req = nng_aio_get_input(aio, 0);
	mon *m = nng_http_handler_get_data(h);
	static const char *const close_hdr[] = {"Connection", "close", NULL};

	if (!mon_req_ok(m, req)) {
		mon_http_error_h(aio, 403, mon_bad_host, close_hdr);
		return;
	}
	if (!mon_authed(m, req)) {
		static const char *const hdrs[] = {"WWW-Authenticate",
		    "Bearer realm=\"kclaw\"", "Connection", "close", NULL};
		mon_http_error_h(aio, 401,
		    "submitting asks for the deployment's token: send the "
		    "header 'Authorization: Bearer TOKEN'",
		    hdrs);
		return;
	}
	mon_upload_start(m, aio);
}

static int
mon_add_handler(mon *m, const char *path, const char *method, bool tree,
    void (*cb)(nng_aio *), size_t maxbody)
{
	nng_http_handler *h;
	int nrv;

	if ((nrv = nng_http_handler_alloc(&h, path, cb)) != 0)
		return nrv;
	nng_http_handler_set_data(h, m, NULL);
	nng_http_handler_set_method(h, method);
	nng_http_handler_collect_body(h, maxbody > 0, maxbody);
	if (tree)
		nng_http_handler_set_tree(h);
	if ((nrv = nng_http_server_add_handler(m->http, h)) != 0)
		nng_http_handler_free(h);
	return nrv;
}

/* The embedded page and script, behind the same Host and token checks. */
static void
mon_static_cb(nng_aio *aio)
{
	const struct mon_asset *a =
	    nng_http_handler_get_data(nng_aio_get_input(aio, 1));
	nng_http_req *req = nng_aio_get_input(aio, 0);
	nng_http_res *res;

	if (!mon_req_ok(a->m, req)) {
		mon_http_error(aio, 403, mon_bad_host);
		return;
	}
	if (!mon_authed(a->m, req)) {
		mon_refuse_unauthed(aio, nng_http_req_get_uri(req));
		return;
	}
	if (nng_http_res_alloc(&res) != 0) {
		nng_aio_finish(aio, NNG_ENOMEM);
		return;
	}
	nng_http_res_set_header(res, "Content-Type", a->ctype);
	nng_http_res_set_header(res, "Cache-Control", "no-store");
	nng_http_res_copy_data(res, a->data, a->len);
	nng_aio_set_output(aio, 0, res);
	nng_aio_finish(aio, 0);
}

/* Serves data at path (and below it where tree: /task/ID is the page). */
static int
mon_add_static(mon *m, int slot, const char *path, bool tree,
    const unsigned char *data, size_t len, const char *ctype)
{
	struct mon_asset *a = &m->assets[slot];
	nng_http_handler *h;
	int nrv;

	*a = (struct mon_asset){m, data, len, ctype};
	if ((nrv = nng_http_handler_alloc(&h, path, mon_static_cb)) != 0)
		return nrv;
	nng_http_handler_set_data(h, a, NULL);
	if (tree)
		nng_http_handler_set_tree(h);
	if ((nrv = nng_http_server_add_handler(m->http, h)) != 0)
		nng_http_handler_free(h);
	return nrv;
}

/* A WebSocket upgrade passes the same Host, Origin and token checks: a
 * page of another site may open ws://127.0.0.1:PORT/ws, but its Origin
 * says so; a browser sends the login's cookie with the upgrade. */
static void
mon_ws_pipe_cb(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	mon *m = arg;
	char *host = NULL, *origin = NULL, *authz = NULL, *cookie = NULL;

	(void)ev;
	nng_pipe_get_string(p, NNG_OPT_WS_REQUEST_HEADER "Host", &host);
	nng_pipe_get_string(p, NNG_OPT_WS_REQUEST_HEADER "Origin", &origin);
	nng_pipe_get_string(
	    p, NNG_OPT_WS_REQUEST_HEADER "Authorization", &authz);
	nng_pipe_get_string(p, NNG_OPT_WS_REQUEST_HEADER "Cookie", &cookie);
	if (!mon_host_ok(m, host) || !mon_origin_ok(origin, host) ||
	    !mon_auth_headers(m, authz, cookie))
		nng_pipe_close(p);
	nng_strfree(host);
	nng_strfree(origin);
	nng_strfree(authz);
	nng_strfree(cookie);
}

static int
mon_http_start(mon *m, const char *http_url)
{
	nng_url *url;
	char ws[512];
	int nrv;

	if ((nrv = nng_url_parse(&url, http_url)) != 0)
		return kc_seterr(KC_EINVAL,
		    "monitor: bad HTTP address '%s' "
		    "(use http://HOST:PORT)",
		    http_url);
	if (url->u_userinfo != NULL) {
		nng_url_free(url);
		return kc_seterr(KC_EINVAL,
		    "monitor: HTTP address '%s' has user info before '@'; "
		    "give http://HOST:PORT",
		    http_url);
	}
	snprintf(m->host, sizeof(m->host), "%s", url->u_hostname);
	snprintf(m->port, sizeof(m->port), "%s", url->u_port);
	nrv = nng_http_server_hold(&m->http, url);
	snprintf(ws, sizeof(ws), "ws://%s:%s/ws", url->u_hostname, url->u_port);
	nng_url_free(url);
	if (nrv != 0)
		return kc_seterr(KC_EBUS, "monitor: HTTP server on %s: %s",
		    http_url, nng_strerror(nrv));
	/* Bodies: the login's form is small, API requests other than a
	 * submit carry none; a submit's archive is streamed to disk after
	 * the token was checked (mon_upload.c). */
	if ((nrv = mon_add_static(m, 0, "/", false, mon_asset_index_html,
	         mon_asset_index_html_len, "text/html; charset=utf-8")) != 0 ||
	    (nrv = mon_add_static(m, 1, "/app.js", false, mon_asset_app_js,
	         mon_asset_app_js_len, "text/javascript; charset=utf-8")) !=
	        0 ||
	    (nrv = mon_add_static(m, 2, "/task", true, mon_asset_index_html,
	         mon_asset_index_html_len, "text/html; charset=utf-8")) != 0 ||
	    (nrv = mon_add_handler(m, "/api", NULL, true, mon_http_cb, 4096)) !=
	        0 ||
	    (nrv = mon_add_handler(
	         m, "/api/tasks", "POST", false, mon_submit_cb, 0)) != 0 ||
	    (nrv = mon_add_handler(
	         m, "/metrics", "GET", false, mon_http_cb, 4096)) != 0 ||
	    (nrv = mon_add_handler(
	         m, "/login", NULL, false, mon_http_cb, 4096)) != 0 ||
	    (nrv = mon_add_handler(
	         m, "/logout", NULL, false, mon_http_cb, 4096)) != 0)
		return kc_seterr(
		    KC_EBUS, "monitor: handlers: %s", nng_strerror(nrv));
	/* The WebSocket PUB shares the HTTP server's port: NNG finds the
	 * held server by address. */
	if ((nrv = nng_pub0_open(&m->ws_pub)) != 0)
		return kc_seterr(
		    KC_EBUS, "monitor: PUB: %s", nng_strerror(nrv));
	m->ws_open = true;
	nng_pipe_notify(m->ws_pub, NNG_PIPE_EV_ADD_PRE, mon_ws_pipe_cb, m);
	if ((nrv = nng_listen(m->ws_pub, ws, NULL, 0)) != 0)
		return kc_seterr(KC_EBUS, "monitor: WebSocket %s: %s", ws,
		    nng_strerror(nrv));
	if ((nrv = nng_http_server_start(m->http)) != 0)
		return kc_seterr(KC_EBUS, "monitor: cannot serve %s: %s",
		    http_url, nng_strerror(nrv));
	return 0;
}

/* ------------------------------------------------ hijacked connections */

int
mon_conn_take(mon *m, nng_aio *aio, struct mon_conn **out)
{
	struct mon_conn *c;

	if ((c = calloc(1, sizeof(*c))) == NULL)
		return KC_ENOMEM;
	if (nng_aio_alloc(&c->aio, NULL, NULL) != 0) {
		free(c);
		return KC_ENOMEM;
	}
	c->m = m;
	c->conn = nng_aio_get_input(aio, 2);
	c->req = nng_aio_get_input(aio, 0);
	nng_http_hijack(c->conn);
	pthread_mutex_lock(&m->mu);
	c->next = m->conns;
	m->conns = c;
	pthread_mutex_unlock(&m->mu);
	/* No response: the server lets go of the connection. */
	nng_aio_finish(aio, 0);
	*out = c;
	return 0;
}

int
mon_conn_write(struct mon_conn *c, const void *data, size_t len)
{
	nng_iov iov = {.iov_buf = (void *)data, .iov_len = len};

	if (len == 0)
		return 0;
	nng_aio_set_iov(c->aio, 1, &iov);
	nng_aio_set_timeout(c->aio, MON_IO_TIMEOUT_MS);
	nng_http_conn_write_all(c->conn, c->aio);
	nng_aio_wait(c->aio);
	return nng_aio_result(c->aio);
}

int
mon_conn_read(struct mon_conn *c, void *buf, size_t cap, size_t *got)
{
	nng_iov iov = {.iov_buf = buf, .iov_len = cap};
	int nrv;

	nng_aio_set_iov(c->aio, 1, &iov);
	nng_aio_set_timeout(c->aio, MON_IO_TIMEOUT_MS);
	nng_http_conn_read(c->conn, c->aio);
	nng_aio_wait(c->aio);
	if ((nrv = nng_aio_result(c->aio)) != 0)
		return nrv;
	*got = nng_aio_count(c->aio);
	return 0;
}

int
mon_conn_respond(
    struct mon_conn *c, uint16_t status, const char *ctype, const char *body)
{
	char head[256];
	int n, nrv;

	n = snprintf(head, sizeof(head),
	    "HTTP/1.1 %u %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
	    "Cache-Control: no-store\r\nConnection: close\r\n\r\n",
	    status, status < 300 ? "OK" : "Error", ctype, strlen(body));
	if ((nrv = mon_conn_write(c, head, (size_t)n)) != 0)
		return nrv;
	return mon_conn_write(c, body, strlen(body));
}

void
mon_conn_end(struct mon_conn *c)
{
	mon *m = c->m;

	pthread_mutex_lock(&m->mu);
	for (struct mon_conn **p = &m->conns; *p != NULL; p = &(*p)->next)
		if (*p == c) {
			*p = c->next;
			break;
		}
	pthread_mutex_unlock(&m->mu);
	nng_aio_free(c->aio);
	nng_http_conn_close(c->conn);
	nng_http_req_free(c->req);
	free(c);
}

/* A thread that serves a hijacked connection starts and ends through
 * these, so mon_stop can wait for every one. */
int
mon_thread_spawn(mon *m, void *(*fn)(void *), void *arg)
{
	pthread_t t;

	pthread_mutex_lock(&m->mu);
	m->nthreads++;
	pthread_mutex_unlock(&m->mu);
	if (pthread_create(&t, NULL, fn, arg) != 0) {
		mon_thread_done(m);
		return KC_ENOMEM;
	}
	pthread_detach(t);
	return 0;
}

void
mon_thread_done(mon *m)
{
	pthread_mutex_lock(&m->mu);
	m->nthreads--;
	pthread_cond_broadcast(&m->conn_cv);
	pthread_mutex_unlock(&m->mu);
}

/* ------------------------------------------------------------- start */

int
mon_start(mon **out, const mon_opts *o)
{
	mon *m;
	int rv;

	if ((m = calloc(1, sizeof(*m))) == NULL)
		return KC_ENOMEM;
	pthread_mutex_init(&m->mu, NULL);
	pthread_cond_init(&m->cv, NULL);
	pthread_cond_init(&m->ev_cv, NULL);
	pthread_cond_init(&m->conn_cv, NULL);
	kc_strlcpy(m->token, o->token ? o->token : "", sizeof(m->token));
	kc_strlcpy(m->api_url, o->api_url, sizeof(m->api_url));
	if (o->config != NULL)
		m->cfg = *o->config;
	kc_strlcpy(m->cfg.token, m->token, sizeof(m->cfg.token));
	/* The login cookie: a hash of the token, so it cannot be replayed
	 * as the NNG API's token. */
	{
		kc_str s = {0};
		kc_str_printf(&s, "kclaw-dashboard-session\n%s", m->token);
		kc_sha256_hex(s.buf ? s.buf : "", s.len, m->session);
		kc_str_free(&s);
	}
	if ((rv = bus_client_open(&m->api, o->api_url, 0)) != 0 ||
	    (rv = bus_client_open(&m->http_api, o->api_url, 0)) != 0 ||
	    (rv = bus_sub_open(&m->sub, o->events_url, 0)) != 0 ||
	    (rv = bus_sub_subscribe(m->sub, "")) != 0 ||
	    (rv = mon_http_start(m, o->http_url)) != 0 ||
	    (rv = mon_guard_start(m)) != 0) {
		mon_stop(m);
		return rv;
	}
	if (pthread_create(&m->event_thread, NULL, mon_event_main, m) != 0)
		goto thread_fail;
	if (pthread_create(&m->http_thread, NULL, mon_http_main, m) != 0) {
		m->stop = true;
		pthread_join(m->event_thread, NULL);
		goto thread_fail;
	}
	m->threads_started = true;
	*out = m;
	return 0;
thread_fail:
	mon_stop(m);
	return kc_seterr(KC_ENOMEM, "monitor: cannot start threads");
}

void
mon_stop(mon *m)
{
	if (m == NULL)
		return;
	pthread_mutex_lock(&m->mu);
	m->stop = true;
	pthread_cond_broadcast(&m->cv);
	pthread_cond_broadcast(&m->ev_cv);
	/* Uploads and streams end at their next read or write. */
	for (struct mon_conn *c = m->conns; c != NULL; c = c->next)
		nng_aio_abort(c->aio, NNG_ECLOSED);
	while (m->nthreads > 0) {
		pthread_cond_wait(&m->conn_cv, &m->mu);
		for (struct mon_conn *c = m->conns; c != NULL; c = c->next)
			nng_aio_abort(c->aio, NNG_ECLOSED);
	}
	pthread_mutex_unlock(&m->mu);
	mon_guard_stop(m);
	/* The HTTP thread answers what is queued before it exits; only then
	 * may the server go. */
	if (m->threads_started) {
		pthread_join(m->event_thread, NULL);
		pthread_join(m->http_thread, NULL);
	}
	/* The WebSocket listener shares the HTTP server (and holds it): it
	 * is closed first. Stopping the server under it first made the close
	 * wait forever, now and then (sec_hostile hung at kclawd's exit). */
	if (m->ws_open)
		nng_close(m->ws_pub);
	if (m->http != NULL) {
		nng_http_server_stop(m->http);
		nng_http_server_release(m->http);
	}
	bus_sub_close(m->sub);
	bus_client_close(m->api);
	bus_client_close(m->http_api);
	free(m->queue);
	free(m->m.tasks);
	pthread_cond_destroy(&m->cv);
	pthread_cond_destroy(&m->ev_cv);
	pthread_cond_destroy(&m->conn_cv);
	pthread_mutex_destroy(&m->mu);
	free(m);
}
