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

/* Upper bounds (ms) of the evaluation latency histogram's buckets. */
static const double mon_lat_buckets[] = {
    10, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 120000};
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
	uint64_t llm_calls[MON_NROLES];
	uint64_t llm_tokens[MON_NROLES];
	double llm_latency_sum[MON_NROLES];
	struct mon_task *tasks;
	size_t ntasks, cap_tasks;
	struct mon_proc procs[64];
	size_t nprocs;
	uint64_t last_seq;
	uint64_t gaps_recovered;
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
	} assets[2];

	pthread_t event_thread, http_thread;
	bool threads_started;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stop;
	nng_aio **queue; /* HTTP requests waiting for the HTTP thread */
	size_t nqueue, cap_queue;

	struct mon_metrics m;
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
			if (e->latency_ms <= mon_lat_buckets[b])
				mm->lat_bucket[b]++;
		mm->lat_count++;
		mm->lat_sum += e->latency_ms;
		break;
	case KCLAW__EVENT_KIND__AGENT_REPLIED:
		if ((unsigned)e->role < MON_NROLES) {
			mm->llm_calls[e->role]++;
			mm->llm_tokens[e->role] += e->tokens;
			mm->llm_latency_sum[e->role] += e->value;
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

char *
mon_metrics_text(mon *m)
{
	struct mon_metrics *mm = &m->m;
	char name[64];
	kc_str s = {0};

	pthread_mutex_lock(&m->mu);
	kc_str_append(&s,
	    "# HELP kclaw_tasks Tasks by state.\n"
	    "# TYPE kclaw_tasks gauge\n");
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
		kc_str_printf(&s, "kclaw_tasks{state=\"%s\"} %zu\n",
		    mm->tasks[i].state, n);
	}
	kc_str_printf(&s,
	    "# HELP kclaw_rounds_total Rounds finished.\n"
	    "# TYPE kclaw_rounds_total counter\n"
	    "kclaw_rounds_total %llu\n",
	    (unsigned long long)mm->rounds);
	kc_str_append(&s,
	    "# HELP kclaw_evaluations_total Evaluations by "
	    "status.\n# TYPE kclaw_evaluations_total counter\n");
	for (int st = 1; st < MON_NSTATUS; st++)
		if (protobuf_c_enum_descriptor_get_value(
		        &kclaw__eval_status__descriptor, st) != NULL)
			kc_str_printf(&s,
			    "kclaw_evaluations_total{status=\"%s\"} %llu\n",
			    mon_enum_name(&kclaw__eval_status__descriptor, st,
			        name, sizeof(name)),
			    (unsigned long long)mm->evals[st]);
	kc_str_append(&s,
	    "# HELP kclaw_evaluation_latency_ms Evaluation "
	    "wall time.\n"
	    "# TYPE kclaw_evaluation_latency_ms histogram\n");
	for (size_t b = 0; b < MON_NBUCKETS; b++)
		kc_str_printf(&s,
		    "kclaw_evaluation_latency_ms_bucket{le=\"%g\"} %llu\n",
		    mon_lat_buckets[b], (unsigned long long)mm->lat_bucket[b]);
	kc_str_printf(&s,
	    "kclaw_evaluation_latency_ms_bucket{le=\"+Inf\"} %llu\n"
	    "kclaw_evaluation_latency_ms_sum %g\n"
	    "kclaw_evaluation_latency_ms_count %llu\n",
	    (unsigned long long)mm->lat_count, mm->lat_sum,
	    (unsigned long long)mm->lat_count);
	kc_str_append(&s,
	    "# HELP kclaw_llm_calls_total LLM calls by agent role.\n"
	    "# TYPE kclaw_llm_calls_total counter\n"
	    "# HELP kclaw_llm_tokens_total LLM tokens by agent role.\n"
	    "# TYPE kclaw_llm_tokens_total counter\n"
	    "# HELP kclaw_llm_latency_ms_sum LLM latency by agent role.\n"
	    "# TYPE kclaw_llm_latency_ms_sum counter\n");
	for (int r = 1; r < MON_NROLES; r++) {
		if (r == KCLAW__ROLE__SANDBOX)
			continue;
		mon_enum_name(&kclaw__role__descriptor, r, name, sizeof(name));
		kc_str_printf(&s,
		    "kclaw_llm_calls_total{role=\"%s\"} %llu\n"
		    "kclaw_llm_tokens_total{role=\"%s\"} %llu\n"
		    "kclaw_llm_latency_ms_sum{role=\"%s\"} %g\n",
		    name, (unsigned long long)mm->llm_calls[r], name,
		    (unsigned long long)mm->llm_tokens[r], name,
		    mm->llm_latency_sum[r]);
	}
	kc_str_append(&s,
	    "# HELP kclaw_process_restarts_total Processes "
	    "restarted by the supervisor.\n"
	    "# TYPE kclaw_process_restarts_total counter\n");
	for (size_t i = 0; i < mm->nprocs; i++)
		kc_str_printf(&s,
		    "kclaw_process_restarts_total{process=\"%s\"} %llu\n",
		    mm->procs[i].name,
		    (unsigned long long)mm->procs[i].restarts);
	kc_str_append(&s,
	    "# HELP kclaw_events_total Events by kind.\n"
	    "# TYPE kclaw_events_total counter\n");
	for (int k = 1; k < MON_NKINDS; k++)
		if (protobuf_c_enum_descriptor_get_value(
		        &kclaw__event_kind__descriptor, k) != NULL)
			kc_str_printf(&s,
			    "kclaw_events_total{kind=\"%s\"} %llu\n",
			    mon_enum_name(&kclaw__event_kind__descriptor, k,
			        name, sizeof(name)),
			    (unsigned long long)mm->events[k]);
	kc_str_printf(&s,
	    "# HELP kclaw_last_event_seq Highest event sequence seen.\n"
	    "# TYPE kclaw_last_event_seq gauge\n"
	    "kclaw_last_event_seq %llu\n"
	    "# HELP kclaw_event_gaps_recovered_total Event gaps filled from "
	    "the event log.\n"
	    "# TYPE kclaw_event_gaps_recovered_total counter\n"
	    "kclaw_event_gaps_recovered_total %llu\n",
	    (unsigned long long)mm->last_seq,
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

static void
mon_http_respond(
    nng_aio *aio, uint16_t status, const char *ctype, const char *body)
{
	nng_http_res *res;

	if (nng_http_res_alloc(&res) != 0) {
		nng_aio_finish(aio, NNG_ENOMEM);
		return;
	}
	nng_http_res_set_status(res, status);
	nng_http_res_set_header(res, "Content-Type", ctype);
	nng_http_res_set_header(res, "Cache-Control", "no-store");
	nng_http_res_copy_data(res, body, strlen(body));
	nng_aio_set_output(aio, 0, res);
	nng_aio_finish(aio, 0);
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

static void
mon_http_api(mon *m, nng_aio *aio, const char *uri)
{
	char path[256], id[80] = "", buf[32];
	const char *method;
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
	} else if (sscanf(path, "/api/result/%79s", id) == 1) {
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
	char *t = kc_pb_to_json_text(resp);
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

static int
mon_add_static(mon *m, const char *path, const unsigned char *data, size_t len,
    const char *ctype)
{
	struct mon_asset *a = &m->assets[path[1] != '\0'];
	nng_http_handler *h;
	int nrv;

	*a = (struct mon_asset){m, data, len, ctype};
	if ((nrv = nng_http_handler_alloc(&h, path, mon_static_cb)) != 0)
		return nrv;
	nng_http_handler_set_data(h, a, NULL);
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
	if ((nrv = mon_add_static(m, "/", mon_asset_index_html,
	         mon_asset_index_html_len, "text/html; charset=utf-8")) != 0 ||
	    (nrv = mon_add_static(m, "/app.js", mon_asset_app_js,
	         mon_asset_app_js_len, "text/javascript; charset=utf-8")) !=
	        0 ||
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
	if (m->http != NULL) {
		nng_http_server_stop(m->http);
		nng_http_server_release(m->http);
	}
	if (m->ws_open)
		nng_close(m->ws_pub);
	bus_sub_close(m->sub);
	bus_client_close(m->api);
	bus_client_close(m->http_api);
	free(m->queue);
	free(m->m.tasks);
	pthread_cond_destroy(&m->cv);
	pthread_mutex_destroy(&m->mu);
	free(m);
}
