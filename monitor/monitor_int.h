/*
 * monitor_int.h - what the monitor's files share (monitor.c: metrics,
 * routing, authentication, the JSON API; mon_upload.c: bundles uploaded as
 * tar archives; mon_stream.c: events as a Server-Sent Events stream).
 */
#ifndef KC_MONITOR_INT_H
#define KC_MONITOR_INT_H

#include <nng/nng.h>
#include <nng/supplemental/http/http.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bus.h"
#include "kc_config.h"
#include "monitor.h"

#define MON_API_TIMEOUT_MS 5000
#define MON_NBUCKETS 12 /* the evaluation duration histogram's buckets */
#define MON_NROLES 8
#define MON_NSTATUS 16
#define MON_NKINDS 32
/* A bundle upload's archive: at most this many bytes, staged on disk. */
#define MON_UPLOAD_MAX ((uint64_t)1 << 30)
/* Uploads and event streams served at once (each holds a thread and a
 * connection); one more is answered 503. */
#define MON_MAX_UPLOADS 2
#define MON_MAX_STREAMS 16
/* The connection guard (mon_guard.c): how often it looks, how long a
 * connection may take to send its first request's headers, how long one
 * may send and receive nothing, how many may wait for their first request
 * and how many there may be in all. */
#define MON_GUARD_MS 200
#define MON_HEADER_MS 10000
#define MON_IDLE_MS 60000
#define MON_MAX_PENDING 64
#define MON_MAX_CONNS 256
#define MON_WS_BEAT_MS 20000 /* a WebSocket keepalive message */
/* A hijacked connection (upload, stream) that takes no bytes, or sends
 * none while its body is read, for this long is closed. */
#define MON_IO_TIMEOUT_MS 10000

/* A connection taken over from NNG's HTTP server, which no longer sees it:
 * mon_stop closes those still open. */
struct mon_conn {
	nng_http_conn *conn;
	nng_aio *aio; /* every read and write; mon_stop aborts it */
	nng_http_req *req;
	struct mon_conn *next;
	mon *m;
	bool done;
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
	struct mon_proc {
		char name[64];
		uint64_t restarts;
	} procs[64];
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
	char api_url[512];
	nng_socket ws_pub;
	bool ws_open;
	bus_sub *sub;
	nng_http_server *http;
	char token[128];
	char session[65];         /* the login cookie's value (mon_auth) */
	char host[256], port[16]; /* the address served, for Host checks */
	struct mon_asset {
		mon *m;
		const unsigned char *data;
		size_t len;
		const char *ctype;
	} assets[3];

	pthread_t event_thread, http_thread, guard_thread;
	bool threads_started, guard_started;
	uint64_t guard_closed; /* connections the guard shut down */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_cond_t ev_cv;   /* broadcast on every new event (streams) */
	pthread_cond_t conn_cv; /* a hijacked connection's thread ended */
	bool stop;
	nng_aio **queue; /* HTTP requests waiting for the HTTP thread */
	size_t nqueue, cap_queue;
	struct mon_conn *conns; /* hijacked, with mu */
	int nuploads, nstreams, nthreads;

	struct mon_metrics m;
	kc_config cfg; /* prices (kclaw.json), token */
	struct mon_usage usage[MON_NROLES];
	bool usage_known, priced[MON_NROLES];
};

/* A response of len bytes; a download (attachment named file) when file is
 * not NULL. */
void mon_http_respond_n(nng_aio *aio, uint16_t status, const char *ctype,
    const void *body, size_t len, const char *file);
/* An error as the CLI's --json prints it: {"error": {"code", "exit",
 * "message"}}, the code from the HTTP status (mon_err_code). */
void mon_http_error(nng_aio *aio, uint16_t status, const char *msg);
/* The same with extra headers hdrs (name, value pairs, NULL-ended). */
void mon_http_error_h(
    nng_aio *aio, uint16_t status, const char *msg, const char *const *hdrs);
/* The same document, malloc'd (caller frees). */
char *mon_error_json(uint16_t status, const char *msg);
/* The HTTP status for a kclaw error code of an API call. */
uint16_t mon_err_status(int rv);
/* Reads "name=value" from the query string of uri into out (decoded). */
bool mon_query(const char *uri, const char *name, char *out, size_t n);
/* Task ids travel in paths: accept only what ids are made of. */
bool mon_valid_id(const char *id);

/*
 * Takes the request's connection from NNG's server (nng_http_hijack) and
 * finishes aio; on success *out is the connection record, in m->conns,
 * for mon_conn_end. The caller then writes the whole response itself.
 */
int mon_conn_take(mon *m, nng_aio *aio, struct mon_conn **out);
/* Writes len bytes to c, at most MON_IO_TIMEOUT_MS; 0 or an NNG error. */
int mon_conn_write(struct mon_conn *c, const void *data, size_t len);
/* Reads at most cap bytes (at least one) into buf, at most
 * MON_IO_TIMEOUT_MS; *got is the count. 0 or an NNG error. */
int mon_conn_read(struct mon_conn *c, void *buf, size_t cap, size_t *got);
/* Writes a whole HTTP/1.1 response (with Connection: close). */
int mon_conn_respond(
    struct mon_conn *c, uint16_t status, const char *ctype, const char *body);
/* Closes c and forgets it (its thread is ending). */
void mon_conn_end(struct mon_conn *c);

/* Runs fn(arg) on a detached thread that mon_stop waits for; the thread
 * calls mon_thread_done(m) last. */
int mon_thread_spawn(mon *m, void *(*fn)(void *), void *arg);
void mon_thread_done(mon *m);

/* The connection guard's thread: started once the server serves,
 * stopped (joined) after m->stop is set. */
int mon_guard_start(mon *m);
void mon_guard_stop(mon *m);

/* POST /api/tasks: on an NNG thread, after the Host and token checks. */
void mon_upload_start(mon *m, nng_aio *aio);
/* GET /api/events/stream: on the HTTP thread. */
void mon_stream_start(mon *m, nng_aio *aio, const char *uri);

#endif
