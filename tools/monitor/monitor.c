/*
 * monitor.c - dashboard, HTTP API in JSON, live events over WebSocket,
 * Prometheus metrics. See monitor.h.
 */
#include "monitor.h"

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

#include "api.h"
#include "bus.h"
#include "kc_err.h"
#include "kc_log.h"
#include "kc_util.h"
#include "monitor_assets.h"
#include "pbjson.h"

#define MON_API_TIMEOUT_MS 5000

/* Upper bounds (seconds) of the evaluation duration histogram's buckets. */
static const double mon_lat_buckets[] = {
    0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
#define MON_NBUCKETS (sizeof(mon_lat_buckets) / sizeof(mon_lat_buckets[0]))
#define MON_NROLES 8
#define MON_NSTATUS 16
#define MON_NKINDS 32

struct mon_task {
	char id[40];
	char state[32];
};

struct mon_proc {
	char name[64];
	uint64_t restarts;
};

struct mon_metrics {
	uint64_t events[MON_NKINDS];
	uint64_t rounds;
	uint64_t evals[MON_NSTATUS];
	uint64_t lat_bucket[MON_NBUCKETS];
	uint64_t lat_count;
	double lat_sum;
	uint64_t llm_replies[MON_NROLES];
	double llm_seconds[MON_NROLES];
	struct mon_task *tasks;
	size_t ntasks, cap_tasks;
	struct mon_proc procs[64];
	size_t nprocs;
	uint64_t last_seq;
	uint64_t gaps_recovered;
};

/* LLM usage per role summed over the task records (failed and re-asked
 * calls included), as of the last List that answered. */
struct mon_usage {
	uint64_t prompt, completion, reasoning, cached;
	uint64_t calls, failed_calls;
	double usd; /* of the calls whose model has a price */
};

struct mon {
	bus_client *api;      /* used by the event thread */
	bus_client *http_api; /* used by the HTTP thread */
	bus_sub *sub;
	nng_socket ws_pub;
	bool ws_open;
	nng_http_server *http;
	char token[128];
	char host[256], port[16]; /* the address served, for Host checks */
	struct mon_asset {
		mon *m;
		const unsigned char *data;
		size_t len;
		const char *ctype;
	} assets[3];

	pthread_t event_thread, http_thread;
	bool threads_started;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stop;
	nng_aio **queue; /* HTTP requests waiting for the HTTP thread */
	size_t nqueue, cap_queue;

	struct mon_metrics m;
	kc_config cfg; /* prices (kclaw.json) */
	struct mon_usage usage[MON_NROLES];
	bool usage_known, priced[MON_NROLES];
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
	pthread_mutex_unlock(&m->mu);
	if (m->ws_open && (json = kc_pb_to_json_text(&e->base)) != NULL) {
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

	while (!m->stop) {
		char *topic;
		void *data;
		size_t len;

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

/* A response of len bytes; a download (attachment named file) when file is
 * not NULL. */
static void
mon_http_respond_n(nng_aio *aio, uint16_t status, const char *ctype,
    const void *body, size_t len, const char *file)
{
	nng_http_res *res;
	char disp[160];

	if (nng_http_res_alloc(&res) != 0) {
		nng_aio_finish(aio, NNG_ENOMEM);
		return;
	}
	nng_http_res_set_status(res, status);
	nng_http_res_set_header(res, "Content-Type", ctype);
	nng_http_res_set_header(res, "Cache-Control", "no-store");
	if (file != NULL) {
		snprintf(
		    disp, sizeof(disp), "attachment; filename=\"%s\"", file);
		nng_http_res_set_header(res, "Content-Disposition", disp);
	}
	nng_http_res_copy_data(res, body, len);
	nng_aio_set_output(aio, 0, res);
	nng_aio_finish(aio, 0);
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

static void
mon_http_error(nng_aio *aio, uint16_t status, const char *msg)
{
	cJSON *j = cJSON_CreateObject();
	char *t;

	cJSON_AddStringToObject(j, "error", msg);
	t = cJSON_PrintUnformatted(j);
	mon_http_respond(aio, status, "application/json", t ? t : "{}");
	free(t);
	cJSON_Delete(j);
}

/* Reads "name=value" from the query string of uri into out. */
static bool
mon_query(const char *uri, const char *name, char *out, size_t n)
{
	const char *q = strchr(uri, '?');
	size_t nl = strlen(name);

	while (q != NULL) {
		q++;
		if (strncmp(q, name, nl) == 0 && q[nl] == '=') {
			size_t i = 0;
			q += nl + 1;
			while (q[i] && q[i] != '&' && i + 1 < n) {
				out[i] = q[i];
				i++;
			}
			out[i] = '\0';
			return true;
		}
		q = strchr(q, '&');
	}
	return false;
}

/* Task ids travel in paths: accept only what ids are made of. */
static bool
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

/* An API answer as JSON text, with the cost in every task record. */
static char *
mon_api_json(const mon *m, const ProtobufCMessage *resp)
{
	cJSON *j = kc_pb_to_json(resp), *t;
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
		    (t = cJSON_GetObjectItemCaseSensitive(j, "task")) != NULL)
			mon_json_cost(m, t, rec);
	}
	text = cJSON_PrintUnformatted(j);
	cJSON_Delete(j);
	return text;
}

/* One file of a ustar archive: header, data, padding to 512 bytes. */
static void
mon_tar_add(kc_str *s, const char *name, const char *data, uint64_t mtime)
{
	unsigned char h[512];
	size_t n = strlen(data);
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

/* The best kernel of a Result as kernel.cu, plan.json or a tar of both in
 * a folder kclaw-ID/. */
static void
mon_download(nng_aio *aio, const Kclaw__ResultResponse *r, const char *file)
{
	const Kclaw__CandidateRecord *b = r->best;
	const char *id = r->task && r->task->id ? r->task->id : "task";
	const char *source, *plan;
	char name[160];

	if (b == NULL || b->candidate == NULL) {
		mon_http_error(aio, 404,
		    "the task has no correct kernel (yet): nothing to "
		    "download");
		return;
	}
	/* A candidate with tunables was measured in its tuned configuration:
	 * that source and plan are the ones verified (as kclaw result
	 * --out writes them). */
	source = b->candidate->source ? b->candidate->source : "";
	plan = b->candidate->plan_json ? b->candidate->plan_json : "";
	if (b->eval && b->eval->tuned_source && *b->eval->tuned_source &&
	    b->eval->tuned_plan && *b->eval->tuned_plan) {
		source = b->eval->tuned_source;
		plan = b->eval->tuned_plan;
	}
	if (strcmp(file, "kernel.cu") == 0) {
		snprintf(name, sizeof(name), "kclaw-%s-kernel.cu", id);
		mon_http_respond_n(aio, 200, "text/plain; charset=utf-8",
		    source, strlen(source), name);
	} else if (strcmp(file, "plan.json") == 0) {
		snprintf(name, sizeof(name), "kclaw-%s-plan.json", id);
		mon_http_respond_n(
		    aio, 200, "application/json", plan, strlen(plan), name);
	} else {
		kc_str s = {0};
		static const char end[1024];
		uint64_t mtime = r->task ? r->task->finished_unix_ms / 1000 : 0;
		snprintf(name, sizeof(name), "kclaw-%s/kernel.cu", id);
		mon_tar_add(&s, name, source, mtime);
		snprintf(name, sizeof(name), "kclaw-%s/plan.json", id);
		mon_tar_add(&s, name, plan, mtime);
		kc_str_appendn(&s, end, sizeof(end));
		if (s.buf == NULL) {
			mon_http_error(aio, 500, "out of memory");
			return;
		}
		snprintf(name, sizeof(name), "kclaw-%s.tar", id);
		mon_http_respond_n(
		    aio, 200, "application/x-tar", s.buf, s.len, name);
		kc_str_free(&s);
	}
}

static void
mon_http_api(mon *m, nng_aio *aio, const char *uri)
{
	char path[256], id[80] = "", buf[32];
	const char *method, *file = NULL;
	ProtobufCMessage *req, *resp = NULL;
	const ProtobufCMessageDescriptor *rd;
	Kclaw__HealthRequest hr = KCLAW__HEALTH_REQUEST__INIT;
	Kclaw__ListRequest lr = KCLAW__LIST_REQUEST__INIT;
	Kclaw__StatusRequest sr = KCLAW__STATUS_REQUEST__INIT;
	Kclaw__ResultRequest rr = KCLAW__RESULT_REQUEST__INIT;
	Kclaw__EventsRequest er = KCLAW__EVENTS_REQUEST__INIT;
	int rv;

	snprintf(path, sizeof(path), "%.*s", (int)strcspn(uri, "?"), uri);
	if (strcmp(path, "/api/health") == 0) {
		method = "Health", req = &hr.base;
		rd = &kclaw__health_response__descriptor;
	} else if (strcmp(path, "/api/tasks") == 0) {
		method = "List", req = &lr.base;
		rd = &kclaw__list_response__descriptor;
	} else if (sscanf(path, "/api/tasks/%79s", id) == 1) {
		method = "Status", req = &sr.base, sr.task_id = id;
		rd = &kclaw__status_response__descriptor;
	} else if (strncmp(path, "/api/result/", 12) == 0 && path[12] != '\0') {
		/* /api/result/ID or /api/result/ID/FILE (a download) */
		const char *p = path + 12, *slash = strchr(p, '/');
		size_t n = slash ? (size_t)(slash - p) : strlen(p);
		snprintf(id, sizeof(id), "%.*s", (int)(n < 79 ? n : 79), p);
		if (n >= sizeof(id))
			id[0] = '!'; /* too long: refused below */
		if (slash != NULL) {
			file = slash + 1;
			if (strcmp(file, "kernel.cu") != 0 &&
			    strcmp(file, "plan.json") != 0 &&
			    strcmp(file, "kernel.tar") != 0) {
				mon_http_error(aio, 404,
				    "no such download: use "
				    "/api/result/ID/kernel.cu, plan.json or "
				    "kernel.tar");
				return;
			}
		}
		method = "Result", req = &rr.base, rr.task_id = id;
		rd = &kclaw__result_response__descriptor;
	} else if (strcmp(path, "/api/events") == 0) {
		method = "Events", req = &er.base;
		rd = &kclaw__events_response__descriptor;
		if (mon_query(uri, "since", buf, sizeof(buf)))
			er.since_seq = strtoull(buf, NULL, 10);
		if (mon_query(uri, "limit", buf, sizeof(buf)))
			er.limit = (uint32_t)strtoul(buf, NULL, 10);
		if (mon_query(uri, "task", id, sizeof(id)))
			er.task_id = id;
	} else {
		mon_http_error(aio, 404,
		    "no such API path; see /api/health, "
		    "/api/tasks, /api/events");
		return;
	}
	if (id[0] != '\0' && !mon_valid_id(id)) {
		mon_http_error(aio, 400, "bad task id");
		return;
	}
	rv = kc_api_call(
	    m->http_api, method, req, m->token, MON_API_TIMEOUT_MS, rd, &resp);
	if (rv != 0) {
		mon_http_error(aio,
		    rv == KC_ENOENT       ? 404
		        : rv == KC_EINVAL ? 400
		                          : 502,
		    kc_lasterr());
		return;
	}
	if (file != NULL) {
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
		if (m->stop) {
			mon_http_error(aio, 503, "shutting down");
		} else if (strncmp(uri, "/metrics", 8) == 0) {
			char *t = mon_metrics_text(m);
			mon_http_respond(aio, 200,
			    "text/plain; version=0.0.4; charset=utf-8",
			    t ? t : "");
			free(t);
		} else {
			mon_http_api(m, aio, uri);
		}
		pthread_mutex_lock(&m->mu);
	}
	pthread_mutex_unlock(&m->mu);
	return NULL;
}

/* On an NNG thread: never blocks, only queues. */
static void
mon_http_cb(nng_aio *aio)
{
	nng_http_handler *h = nng_aio_get_input(aio, 1);
	mon *m = nng_http_handler_get_data(h);

	if (!mon_req_ok(m, nng_aio_get_input(aio, 0))) {
		mon_http_error(aio, 403,
		    "Host or Origin is not this dashboard's; open it as "
		    "http://127.0.0.1:PORT/ (or the host it serves)");
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

static int
mon_add_handler(mon *m, const char *path, bool tree)
{
	nng_http_handler *h;
	int nrv;

	if ((nrv = nng_http_handler_alloc(&h, path, mon_http_cb)) != 0)
		return nrv;
	nng_http_handler_set_data(h, m, NULL);
	if (tree)
		nng_http_handler_set_tree(h);
	if ((nrv = nng_http_server_add_handler(m->http, h)) != 0)
		nng_http_handler_free(h);
	return nrv;
}

/* The embedded page and script, behind the same Host check. */
static void
mon_static_cb(nng_aio *aio)
{
	const struct mon_asset *a =
	    nng_http_handler_get_data(nng_aio_get_input(aio, 1));
	nng_http_res *res;

	if (!mon_req_ok(a->m, nng_aio_get_input(aio, 0))) {
		mon_http_error(aio, 403,
		    "Host or Origin is not this dashboard's; open it as "
		    "http://127.0.0.1:PORT/ (or the host it serves)");
		return;
	}
	if (nng_http_res_alloc(&res) != 0) {
		nng_aio_finish(aio, NNG_ENOMEM);
		return;
	}
	nng_http_res_set_header(res, "Content-Type", a->ctype);
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

/* A WebSocket upgrade passes the same Host and Origin checks: a page of
 * another site may open ws://127.0.0.1:PORT/ws, but its Origin says so. */
static void
mon_ws_pipe_cb(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	mon *m = arg;
	char *host = NULL, *origin = NULL;

	(void)ev;
	nng_pipe_get_string(p, NNG_OPT_WS_REQUEST_HEADER "Host", &host);
	nng_pipe_get_string(p, NNG_OPT_WS_REQUEST_HEADER "Origin", &origin);
	if (!mon_host_ok(m, host) || !mon_origin_ok(origin, host))
		nng_pipe_close(p);
	nng_strfree(host);
	nng_strfree(origin);
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
	if ((nrv = mon_add_static(m, 0, "/", false, mon_asset_index_html,
	         mon_asset_index_html_len, "text/html; charset=utf-8")) != 0 ||
	    (nrv = mon_add_static(m, 1, "/app.js", false, mon_asset_app_js,
	         mon_asset_app_js_len, "text/javascript; charset=utf-8")) !=
	        0 ||
	    (nrv = mon_add_static(m, 2, "/task", true, mon_asset_index_html,
	         mon_asset_index_html_len, "text/html; charset=utf-8")) != 0 ||
	    (nrv = mon_add_handler(m, "/api", true)) != 0 ||
	    (nrv = mon_add_handler(m, "/metrics", false)) != 0)
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

int
mon_start(mon **out, const mon_opts *o)
{
	mon *m;
	int rv;

	if ((m = calloc(1, sizeof(*m))) == NULL)
		return KC_ENOMEM;
	pthread_mutex_init(&m->mu, NULL);
	pthread_cond_init(&m->cv, NULL);
	kc_strlcpy(m->token, o->token ? o->token : "", sizeof(m->token));
	if (o->config != NULL)
		m->cfg = *o->config;
	if ((rv = bus_client_open(&m->api, o->api_url, 0)) != 0 ||
	    (rv = bus_client_open(&m->http_api, o->api_url, 0)) != 0 ||
	    (rv = bus_sub_open(&m->sub, o->events_url, 0)) != 0 ||
	    (rv = bus_sub_subscribe(m->sub, "")) != 0 ||
	    (rv = mon_http_start(m, o->http_url)) != 0) {
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
	pthread_mutex_unlock(&m->mu);
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
	pthread_mutex_destroy(&m->mu);
	free(m);
}
