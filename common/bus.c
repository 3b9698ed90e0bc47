/*
 * bus.c - events, request/response with contexts, over NNG. See bus.h.
 */
#include "bus.h"
#include "bus_gate.h"
#include "bus_sp.h"

#include <nng/nng.h>
#include <nng/protocol/pubsub0/pub.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/supplemental/util/platform.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kc_err.h"
#include "kc_log.h"
#include "kc_util.h"

int
bus_err(int nrv, const char *what, const char *url)
{
	return kc_seterr(nrv == NNG_ETIMEDOUT ? KC_ETIMEDOUT
	        : nrv == NNG_ECLOSED          ? KC_ECLOSED
	        : nrv == NNG_ENOMEM           ? KC_ENOMEM
	                                      : KC_EBUS,
	    "bus: %s %s: %s", what, url ? url : "", nng_strerror(nrv));
}

/*
 * Listens on url. On ipc:// and tcp:// the accept gate stands in front
 * (bus_gate.h): NNG listens on the gate's private ipc:// path and never
 * sees a peer before it proved itself. ipc:// sockets are created
 * owner-only so that other users of the host cannot talk to kclaw's
 * processes.
 */
static int
bus_listen(
    nng_socket sock, const char *url, const bus_gate_opts *go, bus_gate **gate)
{
	char priv[300];
	nng_listener l;
	int nrv, rv;

	*gate = NULL;
	/* Every socket an outsider can reach goes through the gate; NNG's
	 * other transports (ws://, tls+tcp://, ...) would bypass it. */
	if (go != NULL && !bus_gate_handles(url) &&
	    strncmp(url, "inproc://", 9) != 0)
		return kc_seterr(KC_EINVAL,
		    "bus: cannot listen on %s: kclaw listens on ipc://PATH, "
		    "tcp://HOST:PORT, tcp4:// or tcp6:// only (its accept gate "
		    "guards those); use one of them",
		    url);
	if (go != NULL && bus_gate_handles(url)) {
		if ((rv = bus_gate_open(gate, go, priv, sizeof(priv))) != 0)
			return rv;
		url = priv;
	}
	if ((nrv = nng_listener_create(&l, sock, url)) != 0 ||
	    (strncmp(url, "ipc://", 6) == 0 &&
	        (nrv = nng_listener_set_int(
	             l, NNG_OPT_IPC_PERMISSIONS, 0600)) != 0) ||
	    (nrv = nng_listener_start(l, 0)) != 0) {
		rv = bus_err(nrv, "cannot listen on", url);
		bus_gate_close(*gate);
		*gate = NULL;
		return rv;
	}
	if (*gate != NULL && (rv = bus_gate_start(*gate)) != 0) {
		bus_gate_close(*gate);
		*gate = NULL;
		return rv;
	}
	return 0;
}

int
bus_dial(nng_socket sock, const char *url)
{
	int nrv;

	/* NNG_FLAG_NONBLOCK: the peer may not be up yet; NNG redials. */
	if ((nrv = nng_dial(sock, url, NULL, NNG_FLAG_NONBLOCK)) != 0)
		return bus_err(nrv, "cannot dial", url);
	return 0;
}

void
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
	nng_mtx *mtx;
	bus_gate *gate;
	bool gated; /* set before listening, read by the pipe callback */
	unsigned npipes;
	unsigned refused; /* subscribers turned away since the last warning */
};

/* Counts subscribers; one beyond BUS_MAX_SUBSCRIBERS is closed. A pipe
 * closed in ADD_PRE still gets its REM_POST, so the count stays right. */
static void
bus_pub_pipe_cb(nng_pipe pipe, nng_pipe_ev ev, void *arg)
{
	bus_pub *p = arg;
	bool warn = false;

	nng_mtx_lock(p->mtx);
	if (ev == NNG_PIPE_EV_ADD_PRE) {
		/* Behind a gate, which caps subscribers itself, this is a
		 * backstop with room for closed pipes not yet reaped. */
		if (++p->npipes > (p->gated ? 2u : 1u) * BUS_MAX_SUBSCRIBERS) {
			warn = p->refused++ == 0;
			nng_pipe_close(pipe);
		}
	} else if (p->npipes > 0) {
		p->npipes--;
	}
	nng_mtx_unlock(p->mtx);
	if (warn)
		KC_WARN("bus: more than %d subscribers to the events; "
		        "closing the newest",
		    BUS_MAX_SUBSCRIBERS);
}

int
bus_pub_open(bus_pub **out, const char *url)
{
	bus_pub *p;
	int nrv, rv;

	if ((p = calloc(1, sizeof(*p))) == NULL)
		return KC_ENOMEM;
	if ((nrv = nng_mtx_alloc(&p->mtx)) != 0) {
		free(p);
		return bus_err(nrv, "cannot open PUB for", url);
	}
	if ((nrv = nng_pub0_open(&p->sock)) != 0) {
		nng_mtx_free(p->mtx);
		free(p);
		return bus_err(nrv, "cannot open PUB for", url);
	}
	bus_limits(p->sock, 0);
	/* Subscribers never send: whatever a peer writes to a PUB socket is
	 * discarded, so it must not be buffered up to the 64 MiB default. */
	nng_socket_set_size(p->sock, NNG_OPT_RECVMAXSZ, 64);
	/* Deep queues: a monitor busy for a moment should not lose events
	 * (it could recover them from the log, but need not). */
	nng_socket_set_int(p->sock, NNG_OPT_SENDBUF, 1024);
	/* Each subscriber holds a queue of up to 1024 events: cap them. */
	nng_pipe_notify(p->sock, NNG_PIPE_EV_ADD_PRE, bus_pub_pipe_cb, p);
	nng_pipe_notify(p->sock, NNG_PIPE_EV_REM_POST, bus_pub_pipe_cb, p);
	bus_gate_opts go = {.url = url, .proto = 0x20, .max_msg = 64};
	p->gated = bus_gate_handles(url);
	if ((rv = bus_listen(p->sock, url, &go, &p->gate)) != 0) {
		nng_close(p->sock);
		nng_mtx_free(p->mtx);
		free(p);
		return rv;
	}
	if (p->gate != NULL) {
		bus_gate_limits gl = {.max_relayed = BUS_MAX_SUBSCRIBERS,
		    .relayed_per_peer = BUS_MAX_SUBSCRIBERS_PER_PEER};
		bus_gate_set_limits(p->gate, &gl);
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
	bus_gate_close(p->gate);
	nng_close(p->sock);
	nng_mtx_free(p->mtx);
	free(p);
}

void
bus_pub_stats(bus_pub *p, bus_listener_stats *st)
{
	memset(st, 0, sizeof(*st));
	if (p->gate != NULL) {
		bus_gate_stats(p->gate, st);
		return;
	}
	st->healthy = true;
	nng_mtx_lock(p->mtx);
	st->relayed = p->npipes;
	nng_mtx_unlock(p->mtx);
}

/* The subscriber, bus_sub, is kclaw's own: common/bus_sub.c. */

/* ---------------------------------------------------- request/response */

enum bus_call_state { BUS_CALL_RECV, BUS_CALL_HELD, BUS_CALL_SEND };

/* One context of the server: receives a request, is held by the owner
 * until it replies, sends the reply, then receives again. */
struct bus_call {
	bus_server *srv;
	nng_ctx ctx;
	nng_aio *aio;
	nng_msg *req;
	nng_pipe pipe; /* the connection the request came on */
	enum bus_call_state state;
	bool reject; /* close the connection once the reply is out */
};

/* A connection of the server. NEW until proved (by its first whole
 * request, or with BUS_PROVE_BY_HANDLER by bus_call_prove): until then NNG
 * may be buffering a message of up to max_msg bytes from a peer that has
 * proved nothing, so NEW ones are few and short-lived. */
struct bus_conn {
	uint32_t id;
	nng_pipe pipe;
	uint64_t since_ms;
	bool active;
};

struct bus_server {
	nng_socket sock;
	bus_request_fn fn;
	void *arg;
	unsigned nctx;
	unsigned flags; /* BUS_PROVE_BY_HANDLER */
	bus_gate *gate;
	bool gated;  /* set before listening, read by the pipe callback */
	bool proved; /* the gate proves every connection's first request */
	struct bus_call *calls;
	nng_mtx *mtx;
	bool closing;
	bus_server_limits lim;
	struct bus_conn *conns; /* 2 x BUS_MAX_CONNS of them */
	unsigned nconns, nnew;
	unsigned refused, stalled; /* since the last warning of each */
	nng_aio *reaper;
	char url[256];
};

/* Under s->mtx: appends to out[] the NEW connections past their deadline
 * (at most max); the caller closes them after unlocking, since closing a
 * pipe runs its REM_POST callback, which takes s->mtx. */
static unsigned
bus_conn_expired(bus_server *s, nng_pipe *out, unsigned max)
{
	uint64_t now = kc_mono_ms();
	unsigned n = 0;

	for (unsigned i = 0; i < s->nconns && n < max; i++) {
		struct bus_conn *k = &s->conns[i];
		if (!k->active &&
		    now - k->since_ms >= (uint64_t)s->lim.new_ms) {
			out[n++] = k->pipe;
			k->since_ms = now; /* closed once, not at every pass */
		}
	}
	return n;
}

static struct bus_conn *
bus_conn_find(bus_server *s, uint32_t id)
{
	for (unsigned i = 0; i < s->nconns; i++)
		if (s->conns[i].id == id)
			return &s->conns[i];
	return NULL;
}

/*
 * Counts connections. Without a gate (inproc://) a connection is admitted
 * while fewer than max_conns are open and fewer than max_new are not yet
 * proved, and closed otherwise (the peer's NNG redials). Behind a gate,
 * which has capped and proved them already, none is refused short of a
 * backstop with room for closed pipes not yet reaped. A pipe closed in
 * ADD_PRE still gets REM_POST. Other pipes are never closed from here:
 * the reaper does that.
 */
static void
bus_server_pipe_cb(nng_pipe pipe, nng_pipe_ev ev, void *arg)
{
	bus_server *s = arg;
	unsigned nconns = 0, nnew = 0, cap;
	bool refuse = false, warn = false;
	struct bus_conn *k;

	nng_mtx_lock(s->mtx);
	if (ev == NNG_PIPE_EV_ADD_PRE) {
		cap = s->gated ? 2 * BUS_MAX_CONNS : s->lim.max_conns;
		if (s->nconns >= cap ||
		    (!s->gated && s->nnew >= s->lim.max_new_conns)) {
			refuse = true;
			warn = s->refused++ % 1000 == 0;
			nconns = s->nconns;
			nnew = s->nnew;
		} else {
			k = &s->conns[s->nconns++];
			k->id = (uint32_t)nng_pipe_id(pipe);
			k->pipe = pipe;
			k->since_ms = kc_mono_ms();
			k->active = s->proved;
			if (!k->active)
				s->nnew++;
		}
	} else if ((k = bus_conn_find(s, (uint32_t)nng_pipe_id(pipe))) !=
	    NULL) {
		if (!k->active)
			s->nnew--;
		*k = s->conns[--s->nconns];
	}
	nng_mtx_unlock(s->mtx);
	if (refuse) {
		nng_pipe_close(pipe);
		if (warn)
			KC_WARN("bus: %s: connection refused (%u open, %u of "
			        "them not proved yet; limits %u and "
			        "%u)",
			    s->url, nconns, nnew, s->lim.max_conns,
			    s->lim.max_new_conns);
	}
}

/* Every quarter second: closes NEW connections past their deadline, so a
 * peer that sends part of a large message and stops frees its buffer. */
static void
bus_server_reap_cb(void *arg)
{
	bus_server *s = arg;
	nng_pipe old[16];
	unsigned n;

	if (nng_aio_result(s->reaper) != 0)
		return;
	nng_mtx_lock(s->mtx);
	if (s->closing) {
		nng_mtx_unlock(s->mtx);
		return;
	}
	n = bus_conn_expired(s, old, KC_ARRAY_LEN(old));
	nng_mtx_unlock(s->mtx);
	for (unsigned i = 0; i < n; i++)
		nng_pipe_close(old[i]);
	nng_sleep_aio(250, s->reaper);
}

static void
bus_call_recv(struct bus_call *c)
{
	c->state = BUS_CALL_RECV;
	/* A context may wait for a request as long as it takes. */
	nng_aio_set_timeout(c->aio, NNG_DURATION_INFINITE);
	nng_ctx_recv(c->ctx, c->aio);
}

static void
bus_call_cb(void *arg)
{
	struct bus_call *c = arg;
	bus_server *s = c->srv;
	int nrv = nng_aio_result(c->aio);
	bool closing, warn = false;

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
		c->pipe = nng_msg_get_pipe(c->req);
		c->reject = false;
		if ((s->flags & BUS_PROVE_BY_HANDLER) == 0)
			bus_call_prove(c);
		c->state = BUS_CALL_HELD;
		s->fn(s->arg, c);
		return;
	case BUS_CALL_SEND:
		if (c->reject) {
			/* Failed its proof: the connection goes now. */
			c->reject = false;
			nng_pipe_close(c->pipe);
		}
		if (nrv != 0) {
			nng_msg_free(nng_aio_get_msg(c->aio));
			if (nrv == NNG_ECLOSED || closing)
				return;
			if (nrv == NNG_ETIMEDOUT) {
				/* The peer does not read its replies: it
				 * would hold every context that answers it.
				 * Drop it; that also completes the sends
				 * queued behind this one. */
				nng_mtx_lock(s->mtx);
				warn = s->stalled++ % 1000 == 0;
				nng_mtx_unlock(s->mtx);
				if (warn)
					KC_WARN("bus: %s: a peer took no reply "
					        "within %d ms; closing its "
					        "connection",
					    s->url, s->lim.send_ms);
				nng_pipe_close(c->pipe);
			}
		}
		bus_call_recv(c);
		return;
	case BUS_CALL_HELD: return;
	}
}

int
bus_server_set_limits(bus_server *s, const bus_server_limits *l)
{
	bus_server_limits n = {
	    .max_conns = l->max_conns ? l->max_conns : BUS_MAX_CONNS,
	    .max_new_conns =
	        l->max_new_conns ? l->max_new_conns : BUS_MAX_NEW_CONNS,
	    .new_ms = l->new_ms > 0 ? l->new_ms : BUS_NEW_CONN_MS,
	    .send_ms = l->send_ms > 0 ? l->send_ms : BUS_SEND_MS};

	if (n.max_conns > BUS_MAX_CONNS || n.max_new_conns > n.max_conns)
		return kc_seterr(KC_EINVAL,
		    "bus: %s: at most %u connections, of which at most "
		    "all are new",
		    s->url, BUS_MAX_CONNS);
	nng_mtx_lock(s->mtx);
	s->lim = n;
	nng_mtx_unlock(s->mtx);
	if (s->gate != NULL) {
		bus_gate_limits gl = {.max_relayed = l->max_conns,
		    .max_new = l->max_new_conns,
		    .new_per_peer = l->new_per_peer,
		    .max_pre = l->max_pre,
		    .pre_per_peer = l->pre_per_peer,
		    .pre_ms = l->pre_ms,
		    .new_ms = l->new_ms};
		bus_gate_set_limits(s->gate, &gl);
	}
	return 0;
}

void
bus_server_counts(bus_server *s, unsigned *open, unsigned *unproven)
{
	bus_listener_stats st;

	nng_mtx_lock(s->mtx);
	*open = s->nconns;
	*unproven = s->nnew;
	nng_mtx_unlock(s->mtx);
	if (s->gate != NULL) {
		bus_gate_stats(s->gate, &st);
		*open = st.pre + st.unproven + st.relayed;
		*unproven += st.pre + st.unproven;
	}
}

void
bus_server_stats(bus_server *s, bus_listener_stats *st)
{
	memset(st, 0, sizeof(*st));
	if (s->gate != NULL)
		bus_gate_stats(s->gate, st);
	else {
		kc_strlcpy(st->url, s->url, sizeof(st->url));
		st->healthy = true;
	}
	nng_mtx_lock(s->mtx);
	st->unproven += s->nnew;
	if (s->gate == NULL)
		st->relayed = s->nconns - s->nnew;
	nng_mtx_unlock(s->mtx);
}

int
bus_server_open(bus_server **out, const char *url, unsigned nctx,
    size_t max_msg, bus_request_fn fn, void *arg)
{
	return bus_server_open_flags(out, url, nctx, max_msg, 0, fn, arg);
}

int
bus_server_open_flags(bus_server **out, const char *url, unsigned nctx,
    size_t max_msg, unsigned flags, bus_request_fn fn, void *arg)
{
	return bus_server_open_proof(
	    out, url, nctx, max_msg, flags, NULL, NULL, fn, arg);
}

int
bus_server_open_proof(bus_server **out, const char *url, unsigned nctx,
    size_t max_msg, unsigned flags, bus_proof_fn proof, void *proof_arg,
    bus_request_fn fn, void *arg)
{
	bus_server *s;
	int nrv, rv = 0;

	if (nctx == 0 || fn == NULL)
		return kc_seterr(KC_EINVAL,
		    "bus: server needs contexts and a "
		    "callback");
	if ((s = calloc(1, sizeof(*s))) == NULL ||
	    (s->calls = calloc(nctx, sizeof(*s->calls))) == NULL ||
	    (s->conns = calloc(2 * BUS_MAX_CONNS, sizeof(*s->conns))) == NULL) {
		if (s)
			free(s->calls);
		free(s);
		return KC_ENOMEM;
	}
	snprintf(s->url, sizeof(s->url), "%s", url);
	s->flags = flags;
	s->fn = fn;
	s->arg = arg;
	s->lim = (bus_server_limits){.max_conns = BUS_MAX_CONNS,
	    .max_new_conns = BUS_MAX_NEW_CONNS,
	    .new_ms = BUS_NEW_CONN_MS,
	    .send_ms = BUS_SEND_MS};
	if ((nrv = nng_mtx_alloc(&s->mtx)) != 0 ||
	    (nrv = nng_aio_alloc(&s->reaper, bus_server_reap_cb, s)) != 0 ||
	    (nrv = nng_rep0_open(&s->sock)) != 0) {
		rv = bus_err(nrv, "cannot open REP for", url);
		if (s->reaper)
			nng_aio_free(s->reaper);
		if (s->mtx)
			nng_mtx_free(s->mtx);
		free(s->conns);
		free(s->calls);
		free(s);
		return rv;
	}
	bus_limits(s->sock, max_msg);
	s->gated = bus_gate_handles(url);
	/* Proved by the gate: by a proof function, or (without
	 * BUS_PROVE_BY_HANDLER) by any whole first request. */
	s->proved =
	    s->gated && (proof != NULL || (flags & BUS_PROVE_BY_HANDLER) == 0);
	nng_pipe_notify(s->sock, NNG_PIPE_EV_ADD_PRE, bus_server_pipe_cb, s);
	nng_pipe_notify(s->sock, NNG_PIPE_EV_REM_POST, bus_server_pipe_cb, s);
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
	if (rv == 0) {
		bus_gate_opts go = {.url = url,
		    .proto = 0x31,
		    .max_msg = max_msg ? max_msg : BUS_DEFAULT_MAX_MSG,
		    .first_msg = true,
		    .proof = proof,
		    .proof_arg = proof_arg};
		rv = bus_listen(s->sock, url, &go, &s->gate);
	}
	if (rv != 0) {
		bus_server_close(s);
		return rv;
	}
	for (unsigned i = 0; i < s->nctx; i++)
		bus_call_recv(&s->calls[i]);
	nng_sleep_aio(250, s->reaper);
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
	bus_gate_close(s->gate);
	nng_aio_stop(s->reaper);
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
	nng_aio_free(s->reaper);
	nng_mtx_free(s->mtx);
	free(s->conns);
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
	/* The send waits only while the peer's connection is still busy
	 * with an earlier reply, i.e. when the peer does not read. */
	nng_aio_set_timeout(c->aio, c->srv->lim.send_ms);
	nng_ctx_send(c->ctx, c->aio);
	return 0;
}

void
bus_call_prove(bus_call *c)
{
	bus_server *s = c->srv;
	struct bus_conn *k;

	nng_mtx_lock(s->mtx);
	k = bus_conn_find(s, (uint32_t)nng_pipe_id(c->pipe));
	if (k != NULL && !k->active) {
		k->active = true;
		s->nnew--;
	}
	nng_mtx_unlock(s->mtx);
}

void
bus_call_reject(bus_call *c)
{
	c->reject = true;
}

bool
bus_call_connected(const bus_call *c)
{
	bool open;

	nng_mtx_lock(c->srv->mtx);
	open = bus_conn_find(c->srv, (uint32_t)nng_pipe_id(c->pipe)) != NULL;
	nng_mtx_unlock(c->srv->mtx);
	return open;
}

void
bus_call_drop(bus_call *c)
{
	nng_msg_free(c->req);
	c->req = NULL;
	if (c->reject) {
		c->reject = false;
		nng_pipe_close(c->pipe);
	}
	bus_call_recv(c);
}
