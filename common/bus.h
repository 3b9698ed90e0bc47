/*
 * bus.h - kclaw's three messaging patterns over NNG (DESIGN.md "Processes").
 *
 *  - Events: bus_pub (listens) and bus_sub (dials). A message is the topic,
 *    one NUL byte, then the payload (an encoded kclaw.Event), so a
 *    prefix subscription filters on topic prefixes ("task.<id>.").
 *    PUB/SUB drops messages; subscribers recover gaps from the event log.
 *  - Request/response with one context per waiting peer: bus_server
 *    (REP, listens) and bus_client (REQ, dials; on ipc:// and tcp:// it
 *    speaks SP itself, bus_req.c says why). Used both for work by pull
 *    (a worker's request is held until there is a job for it) and for the
 *    API. The server's callback runs on an NNG thread and must not block: it
 *    only hands the bus_call to its owner, who replies later from any thread.
 *
 * Every listening socket has a receive size limit and a cap on
 * connections, and a reply send has a timeout; ipc:// listeners are
 * created owner-only (0600). All functions return 0 or a negative KC_E*
 * code with detail in kc_lasterr().
 */
#ifndef KC_BUS_H
#define KC_BUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BUS_DEFAULT_MAX_MSG (64u << 20) /* 64 MiB: tensors travel as blobs */

/*
 * Limits of every listener (docs/security.md "Connections"). On ipc://
 * and tcp:// kclaw's own accept gate stands in front of NNG (bus_gate.h,
 * docs/DESIGN.md "The accept gate"): a connection first has
 * BUS_PRE_MS to send its 8-byte SP header (at most BUS_MAX_PRE_CONNS such
 * connections, BUS_MAX_PRE_PER_PEER of one peer); on a server it then has
 * BUS_NEW_CONN_MS to send a whole first request that proves it (its
 * token, when the server was opened with a proof function; at most
 * BUS_MAX_NEW_CONNS of them, BUS_MAX_NEW_PER_PEER of one peer, and their
 * first requests buffered at once within BUS_NEW_BUFFERED x max_msg
 * bytes). A newcomer over a cap evicts the oldest unproven connection of
 * its own peer, or else of the peer holding the most: it is never refused.
 * The per-peer caps leave room for a host's whole fleet reconnecting at
 * once over tcp:// (one address, one peer: 100 workers), since the gate
 * accepts a burst before it reads any header; an outsider's idle
 * connections still cannot lock anyone out, they are evicted.
 * A request that fails its proof is answered with the proof's refusal and
 * its connection closed at once; NNG never sees it. At most BUS_MAX_CONNS
 * connections are relayed to a server, BUS_MAX_SUBSCRIBERS to a
 * publisher (BUS_MAX_SUBSCRIBERS_PER_PEER of one peer).
 * A reply the peer's connection does not take within BUS_SEND_MS (it does
 * not read) closes that connection, so one peer cannot hold the contexts
 * that serve everyone.
 */
#define BUS_MAX_CONNS 256
#define BUS_MAX_PRE_CONNS 192
#define BUS_MAX_PRE_PER_PEER 128
#define BUS_PRE_MS 2000
#define BUS_MAX_NEW_CONNS 192
#define BUS_MAX_NEW_PER_PEER 128
#define BUS_NEW_BUFFERED 4
#define BUS_NEW_CONN_MS 10000
#define BUS_SEND_MS 5000
#define BUS_MAX_SUBSCRIBERS 256 /* per bus_pub; each queues 1024 events */
#define BUS_MAX_SUBSCRIBERS_PER_PEER 64

/*
 * A server's proof of a connection's first request (req: its body, len
 * bytes, without NNG's REQ header), run on the gate's thread: 0 when it
 * is authentic; otherwise nonzero, and *refusal (malloc'd, *rlen bytes;
 * may stay NULL) is the reply the peer gets before its connection closes.
 * Must not block.
 */
typedef int (*bus_proof_fn)(
    void *arg, const void *req, size_t len, void **refusal, size_t *rlen);

/* What a listener reports in Health. */
typedef struct bus_listener_stats {
	char url[256];
	bool gated;   /* kclaw's accept gate stands in front of NNG */
	bool healthy; /* NNG took the last connection the gate relayed */
	unsigned pre, unproven, relayed; /* connections now, by class */
	uint64_t accepted, evicted, refused, link_timeouts;
	uint64_t last_link_ms; /* how long NNG took to answer the last one */
} bus_listener_stats;

/*
 * The folder for the private ipc:// sockets behind tcp:// listeners
 * (kclawd's run folder); an ipc:// listener's private socket sits beside
 * its public one. Unset or absent: a fresh owner-only folder in $TMPDIR.
 */
void bus_set_private_dir(const char *dir);

/* ---- events ---- */

typedef struct bus_pub bus_pub;
typedef struct bus_sub bus_sub;

int bus_pub_open(bus_pub **out, const char *url);
/* Copies topic and data; never blocks (a slow subscriber loses messages). */
int bus_pub_send(bus_pub *p, const char *topic, const void *data, size_t len);
void bus_pub_close(bus_pub *p);

/*
 * Dials url and redials (while bus_sub_recv waits) when the publisher is
 * absent or went away; never fails on an absent publisher. On ipc:// and
 * tcp:// kclaw speaks SUB itself (bus_sub.c says why: NNG 1.5.2's
 * nng_close can hang on a SUB that is receiving). One thread at a time.
 */
int bus_sub_open(bus_sub **out, const char *url, size_t max_msg);
/* Subscribes to a topic prefix; "" receives everything. */
int bus_sub_subscribe(bus_sub *s, const char *prefix);
/*
 * Waits up to timeout_ms (-1: forever) for the next message. On success
 * *topic and *data are malloc'd (caller frees both); *data has *len bytes.
 * KC_ETIMEDOUT when nothing came.
 */
int bus_sub_recv(
    bus_sub *s, int timeout_ms, char **topic, void **data, size_t *len);
void bus_sub_close(bus_sub *s);

/* ---- request/response ---- */

typedef struct bus_server bus_server;
typedef struct bus_call bus_call;

/*
 * Called on an NNG thread for each request; must not block. The callee owns
 * call until it passes it to bus_call_reply or bus_call_drop, exactly once.
 */
typedef void (*bus_request_fn)(void *arg, bus_call *call);

/*
 * Listens on url with nctx contexts, i.e. at most nctx requests held at
 * once (more wait in NNG's queue). Requests larger than max_msg bytes are
 * refused by NNG (the connection is dropped). A connection's first whole
 * request proves it (bus.h's limits above).
 */
int bus_server_open(bus_server **out, const char *url, unsigned nctx,
    size_t max_msg, bus_request_fn fn, void *arg);

/* Flags of bus_server_open_flags. */
enum {
	/* A connection is proved only by bus_call_prove (after the handler
	 * checked the request's token), not by delivering a request. */
	BUS_PROVE_BY_HANDLER = 1u << 0,
};

/* bus_server_open with flags (BUS_PROVE_BY_HANDLER). */
int bus_server_open_flags(bus_server **out, const char *url, unsigned nctx,
    size_t max_msg, unsigned flags, bus_request_fn fn, void *arg);
/* bus_server_open_flags whose gate proves each connection's first request
 * with proof (bus_proof_fn) before NNG sees it. */
int bus_server_open_proof(bus_server **out, const char *url, unsigned nctx,
    size_t max_msg, unsigned flags, bus_proof_fn proof, void *proof_arg,
    bus_request_fn fn, void *arg);
/* Stops receiving, aborts held calls (their replies become no-ops), frees. */
void bus_server_close(bus_server *s);

/* A zero field keeps the default (the BUS_* constants above). */
typedef struct bus_server_limits {
	unsigned max_conns;     /* open connections, at most BUS_MAX_CONNS */
	unsigned max_new_conns; /* of them, not yet proved */
	int new_ms;             /* a connection must be proved within */
	int send_ms; /* the peer's connection must take a reply within */
	unsigned new_per_peer, max_pre, pre_per_peer; /* the gate's */
	int pre_ms;
} bus_server_limits;

/* Changes the limits of a running server (tests use short ones). */
int bus_server_set_limits(bus_server *s, const bus_server_limits *l);

/* How many connections are open, and how many of them are not proved
 * (in the gate: before their header or first request; in NNG: before
 * bus_call_prove). */
void bus_server_counts(bus_server *s, unsigned *open, unsigned *unproven);
/* The listener's state for Health. */
void bus_server_stats(bus_server *s, bus_listener_stats *st);
void bus_pub_stats(bus_pub *p, bus_listener_stats *st);

/* The request's bytes, valid until the call is replied to or dropped. */
const void *bus_call_data(const bus_call *c, size_t *len);
/* Sends the reply (copied) and frees the call; safe from any thread. */
int bus_call_reply(bus_call *c, const void *data, size_t len);
/* Frees the call without replying (the client times out or retries). */
void bus_call_drop(bus_call *c);
/* Whether the connection the request came on is still open: a request
 * held for later (a worker's wait for work) whose peer hung up or died
 * can take no reply. Safe from any thread. */
bool bus_call_connected(const bus_call *c);
/*
 * Marks the connection the request came on as proved: it leaves the capped
 * set of new connections and their deadline. The handler of a
 * BUS_PROVE_BY_HANDLER server calls it once the request is authentic (its
 * token matched); before replying or dropping. Safe from any thread; a
 * no-op when the connection is gone or already proved.
 */
void bus_call_prove(bus_call *c);
/*
 * Marks the request as failing its proof: once its reply is sent (or the
 * call dropped) its connection is closed, at once and once, so it holds
 * no context. Call before replying.
 */
void bus_call_reject(bus_call *c);

typedef struct bus_client bus_client;

/* A client of url; it dials at its first call (NNG's, on inproc://, in
 * the background), which waits for the connection. */
int bus_client_open(bus_client **out, const char *url, size_t max_msg);
/*
 * Sends req and waits up to timeout_ms (-1: forever) for the reply. If the
 * connection breaks while the call waits (the server restarted, or its
 * gate hung up), the request is sent once more on a new connection; a
 * second break fails the call with KC_EBUS and the caller sends again.
 * KC_ETIMEDOUT when no reply came in time. On success *reply is malloc'd
 * (caller frees). Calls on one client are serialised.
 */
int bus_client_call(bus_client *c, const void *req, size_t len, int timeout_ms,
    void **reply, size_t *rlen);
void bus_client_close(bus_client *c);

#endif
