/*
 * bus.h - kclaw's three messaging patterns over NNG (DESIGN.md "Processes").
 *
 *  - Events: bus_pub (listens) and bus_sub (dials). A message is the topic,
 *    one NUL byte, then the payload (an encoded kclaw.Event), so NNG's
 *    prefix subscription filters on topic prefixes ("task.<id>.").
 *    PUB/SUB drops messages; subscribers recover gaps from the event log.
 *  - Request/response with one context per waiting peer: bus_server
 *    (REP, listens) and bus_client (REQ, dials). Used both for work by pull
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

#include <stddef.h>
#include <stdint.h>

#define BUS_DEFAULT_MAX_MSG (64u << 20) /* 64 MiB: tensors travel as blobs */

/*
 * Limits of every bus_server (docs/security.md "Connections"). NNG buffers
 * a message whole before kclaw sees it, so a connection whose peer has not
 * proved itself may be holding up to max_msg bytes: at most
 * BUS_MAX_NEW_CONNS such connections at once, each closed BUS_NEW_CONN_MS
 * after it opened unless proved by then; memory for them stays below
 * BUS_MAX_NEW_CONNS * max_msg. A connection is proved by its first whole
 * request, or, on a server opened with BUS_PROVE_BY_HANDLER, only when the
 * handler says a request of it was authentic (bus_call_prove): a request
 * with a wrong token then leaves its connection counted and on the clock.
 * A reply the peer's connection does not take within BUS_SEND_MS (it does
 * not read) closes that connection, so one peer cannot hold the contexts
 * that serve everyone.
 */
#define BUS_MAX_CONNS 256
#define BUS_MAX_NEW_CONNS 4
#define BUS_NEW_CONN_MS 10000
#define BUS_SEND_MS 5000
#define BUS_MAX_SUBSCRIBERS 256 /* per bus_pub; each queues 1024 events */

/* ---- events ---- */

typedef struct bus_pub bus_pub;
typedef struct bus_sub bus_sub;

int bus_pub_open(bus_pub **out, const char *url);
/* Copies topic and data; never blocks (a slow subscriber loses messages). */
int bus_pub_send(bus_pub *p, const char *topic, const void *data, size_t len);
void bus_pub_close(bus_pub *p);

/* Dials url and keeps redialling in the background; never fails on an
 * absent publisher. */
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
/* Stops receiving, aborts held calls (their replies become no-ops), frees. */
void bus_server_close(bus_server *s);

/* A zero field keeps the default (the BUS_* constants above). */
typedef struct bus_server_limits {
	unsigned max_conns;     /* open connections, at most BUS_MAX_CONNS */
	unsigned max_new_conns; /* of them, not yet proved */
	int new_ms;             /* a connection must be proved within */
	int send_ms; /* the peer's connection must take a reply within */
} bus_server_limits;

/* Changes the limits of a running server (tests use short ones). */
int bus_server_set_limits(bus_server *s, const bus_server_limits *l);

/* How many connections are open, and how many of them are not proved. */
void bus_server_counts(bus_server *s, unsigned *open, unsigned *unproven);

/* The request's bytes, valid until the call is replied to or dropped. */
const void *bus_call_data(const bus_call *c, size_t *len);
/* Sends the reply (copied) and frees the call; safe from any thread. */
int bus_call_reply(bus_call *c, const void *data, size_t len);
/* Frees the call without replying (the client times out or retries). */
void bus_call_drop(bus_call *c);
/*
 * Marks the connection the request came on as proved: it leaves the capped
 * set of new connections and their deadline. The handler of a
 * BUS_PROVE_BY_HANDLER server calls it once the request is authentic (its
 * token matched); before replying or dropping. Safe from any thread; a
 * no-op when the connection is gone or already proved.
 */
void bus_call_prove(bus_call *c);

typedef struct bus_client bus_client;

/* Dials url (in the background; the first call waits for the connection). */
int bus_client_open(bus_client **out, const char *url, size_t max_msg);
/*
 * Sends req and waits up to timeout_ms (-1: forever) for the reply. If the
 * connection breaks while the call waits (the server restarted), NNG 1.5
 * does not resend: the call fails with KC_EBUS ("Connection reset") and
 * the caller sends again. A client whose server restarted many times may
 * stop redialling (seen with NNG 1.5.2 over ipc://): long-lived callers
 * reopen the client after a failure (kc_worker does). On success *reply is
 * malloc'd (caller frees). One call at a time per client.
 */
int bus_client_call(bus_client *c, const void *req, size_t len, int timeout_ms,
    void **reply, size_t *rlen);
void bus_client_close(bus_client *c);

#endif
