/*
 * bus_req.c - the request client (bus.h's bus_client). On ipc:// and
 * tcp:// kclaw speaks SP's REQ side itself over a plain socket, as
 * bus_sub.c does SUB; other transports (inproc://) use NNG's REQ.
 *
 * Why not NNG on ipc:// and tcp://: NNG 1.5.2 can hang for good in
 * nng_close of a REQ socket as well as a SUB one (bus_sub.c says how).
 * sec_test's bad-input group sends a request over the API's limit, the
 * server drops the connection while it is being written, and the client's
 * nng_close then waited for ever with NNG's reaper thread stuck in a
 * pipe's stop: once in 73 runs under load, a 60 s ctest timeout. A worker
 * closes and reopens its client after a call that timed out
 * (kc_worker_reopen), so there the hang would wedge the worker. Here
 * closing is close(2).
 *
 * A call waits for a connection (dialled at the first call, then kept;
 * redialled after 20 ms, doubling to 1 s, as bus.c sets NNG's dialers),
 * sends the request (a 4-byte id with its top bit set, then the body),
 * and reads frames until the reply with its id; a reply to an earlier
 * call that timed out is skipped. A connection that breaks before the
 * reply (the server restarted, or its accept gate hung up) is dialled
 * again and the request sent once more; a second break fails the call.
 * A reply over the client's limit drops the connection, as NNG does.
 * Calls on one client are serialised.
 */
#include "bus.h"
#include "bus_gate.h"
#include "bus_sp.h"

#include <errno.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kc_err.h"
#include "kc_util.h"

#define REQ_BUF (64u << 10) /* the read buffer it shrinks back to */

struct bus_client {
	bool nng; /* not ipc:// or tcp://: NNG's REQ */
	nng_socket sock;
	pthread_mutex_t mu;
	char url[256];
	bus_sp_addr addr;
	int fd;         /* -1 while down */
	bool connected; /* connect(2) finished and our header is out */
	bool peer_ok;   /* the server's header read and checked */
	uint8_t *in;
	size_t inlen, incap;
	uint64_t max; /* the largest reply body */
	uint32_t id;  /* the last request's */
	int backoff_ms;
	uint64_t retry_at;
};

/* ------------------------------------------------------- connection */

/* Gives back what a large reply grew the read buffer to, once it is
 * empty, so an idle client holds REQ_BUF. */
static void
req_shrink(bus_client *c)
{
	uint8_t *p;

	if (c->inlen > 0 || c->incap <= REQ_BUF ||
	    (p = realloc(c->in, REQ_BUF)) == NULL)
		return;
	c->in = p;
	c->incap = REQ_BUF;
}

static void
req_down(bus_client *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->connected = c->peer_ok = false;
	c->inlen = 0;
	req_shrink(c);
	bus_sp_backoff(&c->backoff_ms, &c->retry_at);
}

/* Sends our SP header. */
static void
req_hello(bus_client *c)
{
	if (!bus_sp_hello(c->fd, BUS_SP_REQ))
		req_down(c);
	else
		c->connected = true;
}

/* Milliseconds to wait from now until deadline, at most a minute. */
static int
req_wait_ms(uint64_t now, uint64_t deadline)
{
	return deadline == UINT64_MAX ? 60000
	    : deadline <= now         ? 0
	    : deadline - now > 60000  ? 60000
	                              : (int)(deadline - now);
}

/* Waits for events on the connection until deadline: 1 ready, 0 timed
 * out. */
static int
req_poll(bus_client *c, short events, uint64_t deadline)
{
	for (;;) {
		struct pollfd pfd = {.fd = c->fd, .events = events};
		uint64_t now = kc_mono_ms();
		int rv;
		if (now >= deadline)
			return 0;
		rv = poll(&pfd, 1, req_wait_ms(now, deadline));
		if (rv > 0)
			return 1;
		if (rv < 0 && errno != EINTR)
			return 0;
	}
}

/* A connection with our header out, by deadline: 0 or KC_ETIMEDOUT. */
static int
req_connect(bus_client *c, uint64_t deadline)
{
	while (!c->connected) {
		uint64_t now = kc_mono_ms();
		int rv;
		if (c->fd < 0 && now < c->retry_at) {
			uint64_t until =
			    c->retry_at < deadline ? c->retry_at : deadline;
			if (now >= deadline)
				break;
			poll(NULL, 0, req_wait_ms(now, until));
			continue;
		}
		if (c->fd < 0) {
			if ((rv = bus_sp_connect(&c->addr, &c->fd)) == 0)
				req_hello(c);
			else if (rv < 0)
				req_down(c);
			continue;
		}
		if (!req_poll(c, POLLOUT, deadline)) {
			req_down(c);
			break;
		}
		if (bus_sp_finished(c->fd))
			req_hello(c);
		else
			req_down(c);
	}
	return c->connected ? 0
	                    : kc_seterr(KC_ETIMEDOUT,
	                          "bus: no connection to %s in time", c->url);
}

/* ------------------------------------------------------------- a call */

/* Writes the whole frame: 0, 1 when the connection broke, or
 * KC_ETIMEDOUT (the connection dropped: half a frame is on it). */
static int
req_send(bus_client *c, const uint8_t *frame, size_t len, uint64_t deadline)
{
	size_t off = 0;

	while (off < len) {
		ssize_t n = send(c->fd, frame + off, len - off, MSG_NOSIGNAL);
		if (n > 0) {
			off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
			return 1;
		if (!req_poll(c, POLLOUT, deadline)) {
			req_down(c);
			return kc_seterr(KC_ETIMEDOUT,
			    "bus: cannot send request to %s in time", c->url);
		}
	}
	return 0;
}

/* Drops the first n bytes read. */
static void
req_consume(bus_client *c, size_t n)
{
	memmove(c->in, c->in + n, c->inlen - n);
	c->inlen -= n;
}

/*
 * Takes what the read buffer holds: the server's header, then frames
 * until the reply to id. 1 with the reply in *reply, 0 when more is
 * needed (*need: how many bytes in all), 2 when the connection is bad
 * (a wrong header, a frame over the limit), or KC_ENOMEM.
 */
static int
req_take(bus_client *c, uint32_t id, void **reply, size_t *rlen, size_t *need)
{
	if (!c->peer_ok) {
		if (c->inlen < 8) {
			*need = 8;
			return 0;
		}
		if (!bus_sp_is_peer(c->in, BUS_SP_REP))
			return 2;
		req_consume(c, 8);
		c->peer_ok = true;
		c->backoff_ms = BUS_SP_RETRY_MIN_MS;
	}
	for (;;) {
		uint64_t fl = 0;
		uint32_t rid = 0;
		int got = bus_sp_frame_len(c->addr.tcp, c->in, c->inlen, &fl);
		size_t hl = (size_t)got;
		if (got == 0) {
			*need = c->addr.tcp ? 8 : 9;
			return 0;
		}
		if (got < 0 || fl < 4 || fl - 4 > c->max)
			return 2;
		if (c->inlen < hl + fl) {
			*need = hl + (size_t)fl;
			return 0;
		}
		for (size_t i = 0; i < 4; i++)
			rid = rid << 8 | c->in[hl + i];
		if (rid != id) {
			req_consume(c, hl + (size_t)fl);
			continue;
		}
		*rlen = (size_t)fl - 4;
		if ((*reply = malloc(*rlen + 1)) == NULL)
			return KC_ENOMEM;
		memcpy(*reply, c->in + hl + 4, *rlen);
		((char *)*reply)[*rlen] = '\0';
		req_consume(c, hl + (size_t)fl);
		return 1;
	}
}

/* Reads until the reply to id: 0, 1 when the connection broke or went
 * bad, KC_ETIMEDOUT (the connection kept: a late reply is skipped), or
 * KC_ENOMEM. */
static int
req_await(
    bus_client *c, uint32_t id, uint64_t deadline, void **reply, size_t *rlen)
{
	for (;;) {
		size_t need = 0;
		ssize_t n;
		int rv = req_take(c, id, reply, rlen, &need);
		if (rv == 1)
			return 0;
		if (rv == 2)
			return 1;
		if (rv < 0)
			return rv;
		if (need > c->incap) {
			uint8_t *p = realloc(c->in, need);
			if (p == NULL)
				return KC_ENOMEM;
			c->in = p;
			c->incap = need;
		}
		if (!req_poll(c, POLLIN, deadline))
			return kc_seterr(KC_ETIMEDOUT,
			    "bus: no reply from %s in time", c->url);
		n = recv(c->fd, c->in + c->inlen, c->incap - c->inlen, 0);
		if (n > 0)
			c->inlen += (size_t)n;
		else if (n == 0 ||
		    (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
			return 1;
	}
}

static int
req_call(bus_client *c, const void *req, size_t len, int timeout_ms,
    void **reply, size_t *rlen)
{
	uint64_t deadline =
	    timeout_ms < 0 ? UINT64_MAX : kc_mono_ms() + (uint64_t)timeout_ms;
	uint8_t *frame;
	size_t hl, flen;
	uint32_t id = ++c->id | 0x80000000u;
	int rv;

	if ((frame = malloc(9 + 4 + len)) == NULL)
		return KC_ENOMEM;
	hl = bus_sp_frame_header(c->addr.tcp, (uint64_t)len + 4, frame);
	for (size_t i = 0; i < 4; i++)
		frame[hl + i] = (uint8_t)(id >> (24 - 8 * i));
	if (len > 0)
		memcpy(frame + hl + 4, req, len);
	flen = hl + 4 + len;
	for (int breaks = 0;;) {
		if ((rv = req_connect(c, deadline)) != 0)
			break;
		rv = req_send(c, frame, flen, deadline);
		if (rv == 0)
			rv = req_await(c, id, deadline, reply, rlen);
		if (rv != 1)
			break;
		req_down(c);
		if (++breaks == 2) {
			rv = kc_seterr(KC_EBUS,
			    "bus: no reply from %s: the connection broke "
			    "twice before the reply",
			    c->url);
			break;
		}
		/* Redial at once: the server may be back already. */
		c->retry_at = 0;
	}
	free(frame);
	req_shrink(c);
	return rv;
}

/* ------------------------------------------------------------- NNG's REQ */

static int
req_open_nng(bus_client *c, const char *url, size_t max_msg)
{
	int nrv, rv;

	if ((nrv = nng_req0_open(&c->sock)) != 0)
		return bus_err(nrv, "cannot open REQ for", url);
	bus_limits(c->sock, max_msg);
	/* The server may hold a request for a long time (work by pull); the
	 * request is resent only when its connection breaks. */
	nng_socket_set_ms(
	    c->sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
	if ((rv = bus_dial(c->sock, url)) != 0)
		nng_close(c->sock);
	return rv;
}

static int
req_call_nng(bus_client *c, const void *req, size_t len, int timeout_ms,
    void **reply, size_t *rlen)
{
	nng_msg *m;
	int nrv;
	nng_duration to = timeout_ms < 0 ? NNG_DURATION_INFINITE : timeout_ms;

	nng_socket_set_ms(c->sock, NNG_OPT_SENDTIMEO, to);
	nng_socket_set_ms(c->sock, NNG_OPT_RECVTIMEO, to);
	/* A connection reset before the reply is asked once more. */
	for (int attempt = 0;; attempt++) {
		nng_msg *q;
		if ((nrv = nng_msg_alloc(&q, len)) != 0)
			return bus_err(
			    nrv, "cannot allocate request for", c->url);
		if (len > 0)
			memcpy(nng_msg_body(q), req, len);
		if ((nrv = nng_sendmsg(c->sock, q, 0)) != 0) {
			nng_msg_free(q);
			return bus_err(nrv, "cannot send request to", c->url);
		}
		if ((nrv = nng_recvmsg(c->sock, &m, 0)) == 0)
			break;
		if (nrv != NNG_ECONNRESET || attempt > 0)
			return bus_err(nrv, "no reply from", c->url);
	}
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

/* ------------------------------------------------------------- API */

int
bus_client_open(bus_client **out, const char *url, size_t max_msg)
{
	bus_client *c;
	int rv;

	if ((c = calloc(1, sizeof(*c))) == NULL)
		return KC_ENOMEM;
	c->fd = -1;
	kc_strlcpy(c->url, url, sizeof(c->url));
	if (!bus_gate_handles(url)) {
		c->nng = true;
		rv = req_open_nng(c, url, max_msg);
	} else if ((rv = bus_sp_parse(&c->addr, url)) == 0) {
		c->max = max_msg ? max_msg : BUS_DEFAULT_MAX_MSG;
		c->backoff_ms = BUS_SP_RETRY_MIN_MS;
		if ((c->in = malloc(REQ_BUF)) == NULL)
			rv = KC_ENOMEM;
		c->incap = REQ_BUF;
	}
	if (rv != 0) {
		free(c->in);
		free(c);
		return rv;
	}
	pthread_mutex_init(&c->mu, NULL);
	*out = c;
	return 0;
}

int
bus_client_call(bus_client *c, const void *req, size_t len, int timeout_ms,
    void **reply, size_t *rlen)
{
	int rv;

	*reply = NULL;
	*rlen = 0;
	pthread_mutex_lock(&c->mu);
	rv = c->nng ? req_call_nng(c, req, len, timeout_ms, reply, rlen)
	            : req_call(c, req, len, timeout_ms, reply, rlen);
	pthread_mutex_unlock(&c->mu);
	return rv;
}

void
bus_client_close(bus_client *c)
{
	if (c == NULL)
		return;
	if (c->nng)
		nng_close(c->sock);
	if (c->fd >= 0)
		close(c->fd);
	pthread_mutex_destroy(&c->mu);
	free(c->in);
	free(c);
}
