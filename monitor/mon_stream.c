/*
 * mon_stream.c - GET /api/events/stream?since=N[&task=ID]: the event log
 * from sequence N on, then live events, as Server-Sent Events (one
 * `id: SEQ` and `data: EVENT-JSON` per event, in the convention of `kclaw
 * --json`). A client that reconnects sends Last-Event-ID (browsers do) or
 * since=, and misses nothing: every event comes from the orchestrator's
 * log (the Events rpc), the live ones too; the PUB socket only says when
 * to ask again.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api.h"
#include "kc_err.h"
#include "kc_log.h"
#include "kc_util.h"
#include "monitor_int.h"
#include "pbjson.h"

/* A comment line after this long without events, so that a client that
 * went away is noticed (the write fails) and proxies keep the stream. */
#define MON_STREAM_KEEPALIVE_MS 15000
/* The log is asked again at least this often (a lost PUB message). */
#define MON_STREAM_POLL_MS 1000

struct mon_stream {
	mon *m;
	struct mon_conn *c;
	bus_client *api;
	uint64_t since;
	char task[80];
};

/* Waits until the monitor has seen an event after seq, for at most ms. */
static void
mon_stream_wait(mon *m, uint64_t seq, int ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&m->mu);
	while (!m->stop && m->m.last_seq <= seq)
		if (pthread_cond_timedwait(&m->ev_cv, &m->mu, &ts) == ETIMEDOUT)
			break;
	pthread_mutex_unlock(&m->mu);
}

/* Sends one batch from the log; *n is how many events it held. */
static int
mon_stream_batch(struct mon_stream *st, uint64_t *log_last, size_t *n)
{
	Kclaw__EventsRequest req = KCLAW__EVENTS_REQUEST__INIT;
	Kclaw__EventsResponse *resp;
	kc_str s = {0};
	int rv;

	req.since_seq = st->since;
	req.limit = 500;
	if (st->task[0] != '\0')
		req.task_id = st->task;
	if ((rv = kc_api_call(st->api, "Events", &req.base, st->m->token,
	         MON_API_TIMEOUT_MS, &kclaw__events_response__descriptor,
	         (ProtobufCMessage **)&resp)) != 0)
		return rv;
	for (size_t i = 0; i < resp->n_events; i++) {
		char *j = kc_pb_to_json_public_text(&resp->events[i]->base);
		if (j == NULL)
			continue;
		kc_str_printf(&s, "id: %llu\ndata: %s\n\n",
		    (unsigned long long)resp->events[i]->seq, j);
		free(j);
		if (resp->events[i]->seq > st->since)
			st->since = resp->events[i]->seq;
	}
	*n = resp->n_events;
	*log_last = resp->last_seq;
	kclaw__events_response__free_unpacked(resp, NULL);
	rv = s.buf ? mon_conn_write(st->c, s.buf, s.len) : 0;
	kc_str_free(&s);
	return rv == 0 ? 0 : KC_ECLOSED;
}

static void *
mon_stream_main(void *arg)
{
	struct mon_stream *st = arg;
	mon *m = st->m;
	static const char head[] =
	    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
	    "Cache-Control: no-store\r\nConnection: close\r\n\r\n"
	    "retry: 1000\n\n";
	uint64_t seen = st->since;
	int idle_ms = 0;

	if (mon_conn_write(st->c, head, sizeof(head) - 1) != 0)
		goto out;
	while (!m->stop) {
		uint64_t log_last = 0;
		size_t n = 0;
		int rv = mon_stream_batch(st, &log_last, &n);
		if (rv == KC_ECLOSED)
			break;
		if (rv != 0) {
			/* The orchestrator is restarting: say so, go on. */
			char *e = mon_error_json(502, kc_lasterr());
			kc_str s = {0};
			kc_str_printf(
			    &s, "event: error\ndata: %s\n\n", e ? e : "{}");
			free(e);
			kc_clearerr();
			rv = s.buf ? mon_conn_write(st->c, s.buf, s.len) : 0;
			kc_str_free(&s);
			if (rv != 0)
				break;
			mon_stream_wait(m, UINT64_MAX, MON_STREAM_POLL_MS);
			continue;
		}
		if (n > 0) {
			idle_ms = 0;
			continue; /* more may follow at once */
		}
		/* Nothing of this task up to the log's last: what the
		 * monitor sees next is news. */
		if (log_last > seen)
			seen = log_last;
		if (st->since > seen)
			seen = st->since;
		if (idle_ms >= MON_STREAM_KEEPALIVE_MS) {
			if (mon_conn_write(st->c, ": keepalive\n\n", 13) != 0)
				break;
			idle_ms = 0;
		}
		mon_stream_wait(m, seen, MON_STREAM_POLL_MS);
		idle_ms += MON_STREAM_POLL_MS;
	}
out:
	bus_client_close(st->api);
	mon_conn_end(st->c);
	pthread_mutex_lock(&m->mu);
	m->nstreams--;
	pthread_mutex_unlock(&m->mu);
	free(st);
	mon_thread_done(m);
	return NULL;
}

void
mon_stream_start(mon *m, nng_aio *aio, const char *uri)
{
	nng_http_req *req = nng_aio_get_input(aio, 0);
	const char *last = nng_http_req_get_header(req, "Last-Event-ID");
	struct mon_stream *st;
	char buf[32];
	bool full;

	if ((st = calloc(1, sizeof(*st))) == NULL) {
		mon_http_error(aio, 500, "out of memory");
		return;
	}
	st->m = m;
	if (mon_query(uri, "since", buf, sizeof(buf)))
		st->since = strtoull(buf, NULL, 10);
	if (last != NULL && *last != '\0')
		st->since = strtoull(last, NULL, 10);
	if (mon_query(uri, "task", st->task, sizeof(st->task)) &&
	    !mon_valid_id(st->task)) {
		free(st);
		mon_http_error(aio, 400, "bad task id");
		return;
	}
	pthread_mutex_lock(&m->mu);
	full = m->nstreams >= MON_MAX_STREAMS;
	if (!full)
		m->nstreams++;
	pthread_mutex_unlock(&m->mu);
	if (full) {
		free(st);
		mon_http_error(aio, 503,
		    "too many event streams open (16); close one, or poll "
		    "/api/events?since=N");
		return;
	}
	if (bus_client_open(&st->api, m->api_url, 0) != 0 ||
	    mon_conn_take(m, aio, &st->c) != 0) {
		char msg[512];
		snprintf(msg, sizeof(msg), "cannot stream: %s", kc_lasterr());
		bus_client_close(st->api);
		mon_http_error(aio, 502, msg);
		goto fail;
	}
	if (mon_thread_spawn(m, mon_stream_main, st) != 0) {
		bus_client_close(st->api);
		mon_conn_end(st->c);
		goto fail;
	}
	return;
fail:
	pthread_mutex_lock(&m->mu);
	m->nstreams--;
	pthread_mutex_unlock(&m->mu);
	free(st);
}
