/*
 * bus.c - events, request/response with contexts, over NNG. See bus.h.
 */
#include "bus.h"

#include <nng/nng.h>
#include <nng/protocol/pubsub0/pub.h>
#include <nng/protocol/pubsub0/sub.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/util/platform.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kc_err.h"
#include "kc_log.h"

static int
bus_err(int nrv, const char *what, const char *url)
{
	return kc_seterr(nrv == NNG_ETIMEDOUT ? KC_ETIMEDOUT
	        : nrv == NNG_ECLOSED          ? KC_ECLOSED
	        : nrv == NNG_ENOMEM           ? KC_ENOMEM
	                                      : KC_EBUS,
	    "bus: %s %s: %s", what, url ? url : "", nng_strerror(nrv));
}

/*
 * Listens on url. ipc:// sockets are created owner-only so that other users
 * of the host cannot talk to kclaw's processes.
 */
static int
bus_listen(nng_socket sock, const char *url)
{
	nng_listener l;
	int nrv;

	if ((nrv = nng_listener_create(&l, sock, url)) != 0)
		return bus_err(nrv, "cannot listen on", url);
	if (strncmp(url, "ipc://", 6) == 0 &&
	    (nrv = nng_listener_set_int(l, NNG_OPT_IPC_PERMISSIONS, 0600)) != 0)
		return bus_err(nrv, "cannot restrict permissions of", url);
	if ((nrv = nng_listener_start(l, 0)) != 0)
		return bus_err(nrv, "cannot listen on", url);
	return 0;
}

static int
bus_dial(nng_socket sock, const char *url)
{
	int nrv;

	/* NNG_FLAG_NONBLOCK: the peer may not be up yet; NNG redials. */
	if ((nrv = nng_dial(sock, url, NULL, NNG_FLAG_NONBLOCK)) != 0)
		return bus_err(nrv, "cannot dial", url);
	return 0;
}

static void
bus_limits(nng_socket sock, size_t max_msg)
{
	nng_socket_set_size(
	    sock, NNG_OPT_RECVMAXSZ, max_msg ? max_msg : BUS_DEFAULT_MAX_MSG);
	/* Reconnect quickly after a peer restarts, but back off to 1 s. */
	nng_socket_set_ms(sock, NNG_OPT_RECONNMINT, 20);
	nng_socket_set_ms(sock, NNG_OPT_RECONNMAXT, 1000);
}

/* ------------------------------------------------------------- events */

struct bus_pub {
	nng_socket sock;
};

int
bus_pub_open(bus_pub **out, const char *url)
{
	bus_pub *p;
	int nrv, rv;

	if ((p = calloc(1, sizeof(*p))) == NULL)
		return KC_ENOMEM;
	if ((nrv = nng_pub0_open(&p->sock)) != 0) {
		free(p);
		return bus_err(nrv, "cannot open PUB for", url);
	}
	bus_limits(p->sock, 0);
	/* Deep queues: a monitor busy for a moment should not lose events
	 * (it could recover them from the log, but need not). */
	nng_socket_set_int(p->sock, NNG_OPT_SENDBUF, 1024);
	if ((rv = bus_listen(p->sock, url)) != 0) {
		nng_close(p->sock);
		free(p);
		return rv;
	}
	*out = p;
	return 0;
}

int
bus_pub_send(bus_pub *p, const char *topic, const void *data, size_t len)
{
	size_t tl = strlen(topic);
	nng_msg *m;
	int nrv;

	if ((nrv = nng_msg_alloc(&m, tl + 1 + len)) != 0)
		return bus_err(nrv, "cannot allocate event", topic);
	memcpy(nng_msg_body(m), topic, tl + 1);
	if (len > 0)
		memcpy((char *)nng_msg_body(m) + tl + 1, data, len);
	/* nng_sendmsg takes m only on success. */
	if ((nrv = nng_sendmsg(p->sock, m, NNG_FLAG_NONBLOCK)) != 0) {
		nng_msg_free(m);
		return bus_err(nrv, "cannot publish", topic);
	}
	return 0;
}

void
bus_pub_close(bus_pub *p)
{
	if (p == NULL)
		return;
	nng_close(p->sock);
	free(p);
}

struct bus_sub {
	nng_socket sock;
};

int
bus_sub_open(bus_sub **out, const char *url, size_t max_msg)
{
	bus_sub *s;
	int nrv, rv;

	if ((s = calloc(1, sizeof(*s))) == NULL)
		return KC_ENOMEM;
	if ((nrv = nng_sub0_open(&s->sock)) != 0) {
		free(s);
		return bus_err(nrv, "cannot open SUB for", url);
	}
	bus_limits(s->sock, max_msg);
	nng_socket_set_int(s->sock, NNG_OPT_RECVBUF, 1024);
	if ((rv = bus_dial(s->sock, url)) != 0) {
		nng_close(s->sock);
		free(s);
		return rv;
	}
	*out = s;
	return 0;
}

int
bus_sub_subscribe(bus_sub *s, const char *prefix)
{
	int nrv = nng_socket_set(
	    s->sock, NNG_OPT_SUB_SUBSCRIBE, prefix, strlen(prefix));

	return nrv ? bus_err(nrv, "cannot subscribe to", prefix) : 0;
}

int
bus_sub_recv(bus_sub *s, int timeout_ms, char **topic, void **data, size_t *len)
{
	nng_msg *m;
	size_t n, tl;
	const char *body;
	int nrv;

	nng_socket_set_ms(s->sock, NNG_OPT_RECVTIMEO,
	    timeout_ms < 0 ? NNG_DURATION_INFINITE : timeout_ms);
	if ((nrv = nng_recvmsg(s->sock, &m, 0)) != 0)
		return nrv == NNG_ETIMEDOUT ? KC_ETIMEDOUT
		                            : bus_err(nrv, "receive", "events");
	body = nng_msg_body(m);
	n = nng_msg_len(m);
	tl = strnlen(body, n);
	if (tl == n) {
		nng_msg_free(m);
		return kc_seterr(KC_EPROTO, "bus: event without a topic");
	}
	*topic = strndup(body, tl);
	*len = n - tl - 1;
	*data = malloc(*len + 1);
	if (*topic == NULL || *data == NULL) {
		free(*topic);
		free(*data);
		nng_msg_free(m);
		return KC_ENOMEM;
	}
	memcpy(*data, body + tl + 1, *len);
	((char *)*data)[*len] = '\0';
	nng_msg_free(m);
	return 0;
}

void
bus_sub_close(bus_sub *s)
{
	if (s == NULL)
		return;
	nng_close(s->sock);
	free(s);
}

/* ---------------------------------------------------- request/response */

enum bus_call_state { BUS_CALL_RECV, BUS_CALL_HELD, BUS_CALL_SEND };

/* One context of the server: receives a request, is held by the owner
 * until it replies, sends the reply, then receives again. */
struct bus_call {
	bus_server *srv;
	nng_ctx ctx;
	nng_aio *aio;
	nng_msg *req;
	enum bus_call_state state;
};

struct bus_server {
	nng_socket sock;
	bus_request_fn fn;
	void *arg;
	unsigned nctx;
	struct bus_call *calls;
	nng_mtx *mtx;
	bool closing;
	char url[256];
};

static void
bus_call_recv(struct bus_call *c)
{
	c->state = BUS_CALL_RECV;
	nng_ctx_recv(c->ctx, c->aio);
}

static void
bus_call_cb(void *arg)
{
	struct bus_call *c = arg;
	bus_server *s = c->srv;
	int nrv = nng_aio_result(c->aio);
	bool closing;

	nng_mtx_lock(s->mtx);
	closing = s->closing;
	nng_mtx_unlock(s->mtx);

	switch (c->state) {
	case BUS_CALL_RECV:
		if (nrv != 0) {
			if (nrv == NNG_ECLOSED || nrv == NNG_ECANCELED ||
			    closing)
				return;
			/* A broken request (e.g. over the size limit);
			 * keep serving. */
			KC_WARN("bus: receive on %s: %s", s->url,
			    nng_strerror(nrv));
			bus_call_recv(c);
			return;
		}
		c->req = nng_aio_get_msg(c->aio);
		c->state = BUS_CALL_HELD;
		s->fn(s->arg, c);
		return;
	case BUS_CALL_SEND:
		if (nrv != 0) {
			nng_msg_free(nng_aio_get_msg(c->aio));
			if (nrv == NNG_ECLOSED || closing)
				return;
		}
		bus_call_recv(c);
		return;
	case BUS_CALL_HELD: return;
	}
}

int
bus_server_open(bus_server **out, const char *url, unsigned nctx,
    size_t max_msg, bus_request_fn fn, void *arg)
{
	bus_server *s;
	int nrv, rv = 0;

	if (nctx == 0 || fn == NULL)
		return kc_seterr(KC_EINVAL,
		    "bus: server needs contexts and a "
		    "callback");
	if ((s = calloc(1, sizeof(*s))) == NULL ||
	    (s->calls = calloc(nctx, sizeof(*s->calls))) == NULL) {
		free(s);
		return KC_ENOMEM;
	}
	snprintf(s->url, sizeof(s->url), "%s", url);
	s->fn = fn;
	s->arg = arg;
	if ((nrv = nng_mtx_alloc(&s->mtx)) != 0 ||
	    (nrv = nng_rep0_open(&s->sock)) != 0) {
		rv = bus_err(nrv, "cannot open REP for", url);
		if (s->mtx)
			nng_mtx_free(s->mtx);
		free(s->calls);
		free(s);
		return rv;
	}
	bus_limits(s->sock, max_msg);
	for (unsigned i = 0; i < nctx; i++) {
		struct bus_call *c = &s->calls[i];
		c->srv = s;
		if ((nrv = nng_ctx_open(&c->ctx, s->sock)) != 0 ||
		    (nrv = nng_aio_alloc(&c->aio, bus_call_cb, c)) != 0) {
			rv = bus_err(nrv, "cannot open context for", url);
			break;
		}
		s->nctx++;
	}
	if (rv == 0)
		rv = bus_listen(s->sock, url);
	if (rv != 0) {
		bus_server_close(s);
		return rv;
	}
	for (unsigned i = 0; i < s->nctx; i++)
		bus_call_recv(&s->calls[i]);
	*out = s;
	return 0;
}

void
bus_server_close(bus_server *s)
{
	if (s == NULL)
		return;
	nng_mtx_lock(s->mtx);
	s->closing = true;
	nng_mtx_unlock(s->mtx);
	for (unsigned i = 0; i < s->nctx; i++)
		nng_aio_stop(s->calls[i].aio);
	nng_close(s->sock);
	for (unsigned i = 0; i < s->nctx; i++) {
		struct bus_call *c = &s->calls[i];
		if (c->state == BUS_CALL_HELD && c->req != NULL)
			nng_msg_free(c->req);
		nng_aio_free(c->aio);
		nng_ctx_close(c->ctx);
	}
	nng_mtx_free(s->mtx);
	free(s->calls);
	free(s);
}

const void *
bus_call_data(const bus_call *c, size_t *len)
{
	*len = nng_msg_len(c->req);
	return nng_msg_body(c->req);
}

int
bus_call_reply(bus_call *c, const void *data, size_t len)
{
	nng_msg *m;
	int nrv;

	/* Reuse the request's message: it already carries the REP header
	 * routing the reply back to the right peer. */
	m = c->req;
	c->req = NULL;
	nng_msg_clear(m);
	if ((nrv = nng_msg_append(m, data, len)) != 0) {
		nng_msg_free(m);
		bus_call_recv(c);
		return bus_err(nrv, "cannot build reply on", c->srv->url);
	}
	c->state = BUS_CALL_SEND;
	nng_aio_set_msg(c->aio, m);
	nng_ctx_send(c->ctx, c->aio);
	return 0;
}

void
bus_call_drop(bus_call *c)
{
	nng_msg_free(c->req);
	c->req = NULL;
	bus_call_recv(c);
}

struct bus_client {
	nng_socket sock;
	char url[256];
};

int
bus_client_open(bus_client **out, const char *url, size_t max_msg)
{
	bus_client *c;
	int nrv, rv;

	if ((c = calloc(1, sizeof(*c))) == NULL)
		return KC_ENOMEM;
	snprintf(c->url, sizeof(c->url), "%s", url);
	if ((nrv = nng_req0_open(&c->sock)) != 0) {
		free(c);
		return bus_err(nrv, "cannot open REQ for", url);
	}
	bus_limits(c->sock, max_msg);
	/* The server may hold a request for a long time (work by pull); the
	 * request is resent only when its connection breaks. */
	nng_socket_set_ms(
	    c->sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
	if ((rv = bus_dial(c->sock, url)) != 0) {
		nng_close(c->sock);
		free(c);
		return rv;
	}
	*out = c;
	return 0;
}

int
bus_client_call(bus_client *c, const void *req, size_t len, int timeout_ms,
    void **reply, size_t *rlen)
{
	nng_msg *m;
	int nrv;
	nng_duration to = timeout_ms < 0 ? NNG_DURATION_INFINITE : timeout_ms;

	nng_socket_set_ms(c->sock, NNG_OPT_SENDTIMEO, to);
	nng_socket_set_ms(c->sock, NNG_OPT_RECVTIMEO, to);
	if ((nrv = nng_msg_alloc(&m, len)) != 0)
		return bus_err(nrv, "cannot allocate request for", c->url);
	if (len > 0)
		memcpy(nng_msg_body(m), req, len);
	if ((nrv = nng_sendmsg(c->sock, m, 0)) != 0) {
		nng_msg_free(m);
		return bus_err(nrv, "cannot send request to", c->url);
	}
	if ((nrv = nng_recvmsg(c->sock, &m, 0)) != 0)
		return bus_err(nrv, "no reply from", c->url);
	*rlen = nng_msg_len(m);
	if ((*reply = malloc(*rlen + 1)) == NULL) {
		nng_msg_free(m);
		return KC_ENOMEM;
	}
	memcpy(*reply, nng_msg_body(m), *rlen);
	((char *)*reply)[*rlen] = '\0';
	nng_msg_free(m);
	return 0;
}

void
bus_client_close(bus_client *c)
{
	if (c == NULL)
		return;
	nng_close(c->sock);
	free(c);
}
