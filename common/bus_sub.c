/*
 * bus_sub.c - the events subscriber (bus.h). On ipc:// and tcp:// kclaw
 * speaks SP's SUB side itself over a plain socket; other transports
 * (inproc://) use NNG's SUB.
 *
 * Why not NNG on ipc:// and tcp://: NNG 1.5.2 can hang for good in
 * nng_close of a SUB socket whose connection is receiving at that moment.
 * Closing a pipe aborts the transport's read only while one waits in the
 * poller. When a read has just completed (a frame header, its body still
 * to come) and its callback has not run yet, the abort finds nothing to
 * cancel, the transport's close then stops the read's aio, and the
 * callback's next read returns at once without ever completing
 * (nni_aio_begin fails): the protocol's receive stays queued in the
 * transport, sub0_pipe_stop waits for it in nni_aio_stop, the reaper
 * thread waits there for ever, and so does nng_close. A publisher sends
 * without pause, so a subscriber that closes while events flow (kclaw
 * watch when its task finishes, bus_test's subscribers) runs this race
 * each time; on a loaded host about one bus_test in forty hung in a
 * subscriber's nng_close. Here closing is close(2), and the publisher's
 * gate sees the end of the stream.
 *
 * A bus_sub is used by one thread at a time. It dials in bus_sub_open and
 * redials (20 ms, doubling to 1 s, as bus.c sets NNG's dialers) while
 * bus_sub_recv waits; what a publisher sends while nobody reads waits in
 * the socket's buffers and the publisher's queue, which drops the excess.
 */
#include "bus.h"
#include "bus_gate.h"
#include "bus_sp.h"

#include <errno.h>
#include <nng/nng.h>
#include <nng/protocol/pubsub0/sub.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kc_err.h"
#include "kc_util.h"

#define SUB_BUF (64u << 10) /* the read buffer it shrinks back to */
#define SUB_OPEN_MS 200     /* bus_sub_open waits for a tcp connection */

struct bus_sub {
	bool nng; /* not ipc:// or tcp://: NNG's SUB */
	nng_socket sock;
	bus_sp_addr addr;
	char url[256];
	int fd;         /* -1 while down */
	bool connected; /* connect(2) finished and our header is out */
	uint8_t peer[8];
	size_t pgot; /* of the publisher's header */
	uint8_t *in;
	size_t inoff, inlen, incap; /* a frame starts at in + inoff */
	uint64_t max;
	char **pre; /* subscribed prefixes */
	size_t npre;
	int backoff_ms;
	uint64_t retry_at;
};

/* ------------------------------------------------------- connection */

static void
sub_down(bus_sub *s)
{
	if (s->fd >= 0)
		close(s->fd);
	s->fd = -1;
	s->connected = false;
	s->pgot = 0;
	s->inoff = s->inlen = 0;
	bus_sp_backoff(&s->backoff_ms, &s->retry_at);
}

/* Sends our SP header. */
static void
sub_hello(bus_sub *s)
{
	if (!bus_sp_hello(s->fd, BUS_SP_SUB)) {
		sub_down(s);
		return;
	}
	s->connected = true;
}

/* Starts a connection; on failure the next try waits for its backoff. */
static void
sub_dial(bus_sub *s)
{
	int rv = bus_sp_connect(&s->addr, &s->fd);

	if (rv == 0)
		sub_hello(s);
	else if (rv < 0)
		sub_down(s);
}

/* A connect(2) in progress finished: refused, or ours. */
static void
sub_finish_dial(bus_sub *s)
{
	if (!bus_sp_finished(s->fd))
		sub_down(s);
	else
		sub_hello(s);
}

/* Whether a prefix we subscribed to begins body. */
static bool
sub_matches(const bus_sub *s, const uint8_t *body, size_t len)
{
	for (size_t i = 0; i < s->npre; i++) {
		size_t pl = strlen(s->pre[i]);
		if (pl <= len && memcmp(s->pre[i], body, pl) == 0)
			return true;
	}
	return false;
}

/*
 * Takes the next subscribed message out of the read buffer: 1 with it in
 * the out-parameters, 0 when none is complete yet (a bad or oversized
 * frame drops the connection, as NNG does), or a negative error.
 */
static int
sub_take(bus_sub *s, char **topic, void **data, size_t *len)
{
	while (s->pgot < 8 && s->inoff < s->inlen)
		s->peer[s->pgot++] = s->in[s->inoff++];
	if (s->pgot < 8)
		return 0;
	if (!bus_sp_is_peer(s->peer, BUS_SP_PUB)) {
		sub_down(s);
		return 0;
	}
	s->backoff_ms = BUS_SP_RETRY_MIN_MS;
	for (;;) {
		const uint8_t *f = s->in + s->inoff;
		size_t avail = s->inlen - s->inoff;
		uint64_t fl = 0;
		int got = bus_sp_frame_len(s->addr.tcp, f, avail, &fl);
		size_t hl = (size_t)got;
		if (got == 0)
			return 0;
		if (got < 0 || fl > s->max) {
			sub_down(s);
			return 0;
		}
		if (avail < hl + fl) {
			/* Room for the whole frame, from the buffer's start. */
			if (hl + fl > s->incap - s->inoff) {
				memmove(s->in, f, avail);
				s->inoff = 0;
				s->inlen = avail;
			}
			if (hl + fl > s->incap) {
				uint8_t *p = realloc(s->in, hl + fl);
				if (p == NULL) {
					sub_down(s);
					return KC_ENOMEM;
				}
				s->in = p;
				s->incap = hl + fl;
			}
			return 0;
		}
		s->inoff += hl + fl;
		const char *body = (const char *)f + hl;
		if (!sub_matches(s, (const uint8_t *)body, (size_t)fl))
			continue;
		size_t tl = strnlen(body, (size_t)fl);
		if (tl == fl)
			return kc_seterr(
			    KC_EPROTO, "bus: event without a topic");
		*topic = strndup(body, tl);
		*len = (size_t)fl - tl - 1;
		*data = malloc(*len + 1);
		if (*topic == NULL || *data == NULL) {
			free(*topic);
			free(*data);
			return KC_ENOMEM;
		}
		memcpy(*data, body + tl + 1, *len);
		((char *)*data)[*len] = '\0';
		return 1;
	}
}

/* Reads what the socket holds; the end of the stream or an error drops
 * the connection. */
static void
sub_read(bus_sub *s)
{
	ssize_t r;

	if (s->inoff == s->inlen) {
		s->inoff = s->inlen = 0;
		if (s->incap > SUB_BUF) {
			uint8_t *p = realloc(s->in, SUB_BUF);
			if (p != NULL) {
				s->in = p;
				s->incap = SUB_BUF;
			}
		}
	} else if (s->inlen == s->incap) {
		memmove(s->in, s->in + s->inoff, s->inlen - s->inoff);
		s->inlen -= s->inoff;
		s->inoff = 0;
	}
	if (s->inlen == s->incap)
		return; /* sub_take makes room for a whole frame */
	r = recv(s->fd, s->in + s->inlen, s->incap - s->inlen, 0);
	if (r > 0)
		s->inlen += (size_t)r;
	else if (r == 0 || (errno != EAGAIN && errno != EINTR))
		sub_down(s);
}

/* ------------------------------------------------------------- API */

static int
sub_open_nng(bus_sub *s, const char *url, size_t max_msg)
{
	int nrv;

	if ((nrv = nng_sub0_open(&s->sock)) != 0)
		return kc_seterr(KC_EBUS, "bus: cannot open SUB for %s: %s",
		    url, nng_strerror(nrv));
	nng_socket_set_size(s->sock, NNG_OPT_RECVMAXSZ,
	    max_msg ? max_msg : BUS_DEFAULT_MAX_MSG);
	nng_socket_set_ms(s->sock, NNG_OPT_RECONNMINT, BUS_SP_RETRY_MIN_MS);
	nng_socket_set_ms(s->sock, NNG_OPT_RECONNMAXT, BUS_SP_RETRY_MAX_MS);
	nng_socket_set_int(s->sock, NNG_OPT_RECVBUF, 1024);
	/* NNG_FLAG_NONBLOCK: the publisher may not be up yet. */
	if ((nrv = nng_dial(s->sock, url, NULL, NNG_FLAG_NONBLOCK)) != 0) {
		nng_close(s->sock);
		return kc_seterr(
		    KC_EBUS, "bus: cannot dial %s: %s", url, nng_strerror(nrv));
	}
	return 0;
}

int
bus_sub_open(bus_sub **out, const char *url, size_t max_msg)
{
	bus_sub *s;
	int rv;

	if ((s = calloc(1, sizeof(*s))) == NULL)
		return KC_ENOMEM;
	s->fd = -1;
	kc_strlcpy(s->url, url, sizeof(s->url));
	if (!bus_gate_handles(url)) {
		s->nng = true;
		if ((rv = sub_open_nng(s, url, max_msg)) != 0) {
			free(s);
			return rv;
		}
		*out = s;
		return 0;
	}
	s->max = max_msg ? max_msg : BUS_DEFAULT_MAX_MSG;
	s->backoff_ms = BUS_SP_RETRY_MIN_MS;
	if ((rv = bus_sp_parse(&s->addr, url)) != 0) {
		free(s);
		return rv;
	}
	if ((s->in = malloc(SUB_BUF)) == NULL) {
		free(s);
		return KC_ENOMEM;
	}
	s->incap = SUB_BUF;
	sub_dial(s);
	/* A tcp connection in progress gets a moment to finish, so that our
	 * header is out (the publisher's gate waits BUS_PRE_MS for it) and
	 * events wait in the socket for a caller that reads later. */
	if (s->fd >= 0 && !s->connected) {
		struct pollfd pfd = {.fd = s->fd, .events = POLLOUT};
		if (poll(&pfd, 1, SUB_OPEN_MS) > 0)
			sub_finish_dial(s);
	}
	*out = s;
	return 0;
}

int
bus_sub_subscribe(bus_sub *s, const char *prefix)
{
	char **p, *dup;
	int nrv;

	if (s->nng) {
		nrv = nng_socket_set(
		    s->sock, NNG_OPT_SUB_SUBSCRIBE, prefix, strlen(prefix));
		return nrv
		    ? kc_seterr(KC_EBUS, "bus: cannot subscribe to %s: %s",
		          prefix, nng_strerror(nrv))
		    : 0;
	}
	if ((dup = strdup(prefix)) == NULL)
		return KC_ENOMEM;
	if ((p = realloc(s->pre, (s->npre + 1) * sizeof(*p))) == NULL) {
		free(dup);
		return KC_ENOMEM;
	}
	s->pre = p;
	s->pre[s->npre++] = dup;
	return 0;
}

static int
sub_recv_nng(bus_sub *s, int timeout_ms, char **topic, void **data, size_t *len)
{
	nng_msg *m;
	size_t n, tl;
	const char *body;
	int nrv;

	nng_socket_set_ms(s->sock, NNG_OPT_RECVTIMEO,
	    timeout_ms < 0 ? NNG_DURATION_INFINITE : timeout_ms);
	if ((nrv = nng_recvmsg(s->sock, &m, 0)) != 0)
		return nrv == NNG_ETIMEDOUT
		    ? KC_ETIMEDOUT
		    : kc_seterr(KC_EBUS, "bus: receive events: %s",
		          nng_strerror(nrv));
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

int
bus_sub_recv(bus_sub *s, int timeout_ms, char **topic, void **data, size_t *len)
{
	uint64_t deadline;
	bool polled = false;

	if (s->nng)
		return sub_recv_nng(s, timeout_ms, topic, data, len);
	deadline =
	    timeout_ms < 0 ? UINT64_MAX : kc_mono_ms() + (uint64_t)timeout_ms;
	for (;;) {
		struct pollfd pfd = {.fd = s->fd};
		uint64_t now, until;
		int rv, wait;
		if (s->connected && (rv = sub_take(s, topic, data, len)) != 0)
			return rv < 0 ? rv : 0;
		now = kc_mono_ms();
		if (s->fd < 0 && now >= s->retry_at) {
			sub_dial(s);
			continue;
		}
		/* A zero timeout still reads what has arrived. */
		if (now >= deadline && polled)
			return KC_ETIMEDOUT;
		until = s->fd < 0 && s->retry_at < deadline ? s->retry_at
		                                            : deadline;
		wait = until == UINT64_MAX ? -1
		    : until <= now         ? 0
		    : until - now > 60000  ? 60000
		                           : (int)(until - now);
		pfd.events = s->connected ? POLLIN : POLLOUT;
		rv = poll(&pfd, 1, wait);
		polled = true;
		if (rv < 0 && errno != EINTR)
			return kc_seterr(KC_EBUS,
			    "bus: receive events from %s: %s", s->url,
			    strerror(errno));
		if (rv <= 0 || s->fd < 0)
			continue;
		if (s->connected) {
			sub_read(s);
			continue;
		}
		sub_finish_dial(s);
	}
}

void
bus_sub_close(bus_sub *s)
{
	if (s == NULL)
		return;
	if (s->nng)
		nng_close(s->sock);
	if (s->fd >= 0)
		close(s->fd);
	for (size_t i = 0; i < s->npre; i++)
		free(s->pre[i]);
	free(s->pre);
	free(s->in);
	free(s);
}
