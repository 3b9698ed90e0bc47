/*
 * bus_gate.c - the accept gate in front of NNG's listeners. See
 * bus_gate.h for what it guarantees and docs/DESIGN.md for why.
 */
#include "bus_gate.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nng/nng.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "kc_err.h"
#include "kc_log.h"
#include "kc_util.h"

#define GATE_BUF (16u << 10) /* relay buffer per direction */
#define GATE_LINK_MS 5000    /* NNG must answer a relayed connection */
#define GATE_CLOSE_MS 2000   /* a refused peer may read its refusal */
#define GATE_TICK_MS 100

/* ---------------------------------------------------------- framing */

/* One direction of a relay: bytes read from src wait in in[], are
 * re-framed into out[] and written to dst. pre[] (the peer's header and
 * first request, on the way to NNG) goes out before out[]. */
struct gate_dir {
	uint8_t in[GATE_BUF];
	size_t inlen;
	uint8_t out[GATE_BUF];
	size_t outoff, outlen;
	uint8_t *pre;
	size_t preoff, prelen;
	uint8_t h[9];  /* the frame header being read */
	size_t hgot;   /* of ihl bytes */
	bool emitted;  /* its rewritten header is in out[] */
	uint64_t left; /* payload bytes of the frame still to move */
	size_t ihl, ohl;
	uint64_t max;
};

static uint64_t
gate_be64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

static void
gate_put64(uint8_t *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--) {
		p[i] = (uint8_t)v;
		v >>= 8;
	}
}

/* Reads a frame header's length; -1 on a frame ipc does not know or one
 * over the limit. */
static int
gate_frame_len(const uint8_t *h, size_t hl, uint64_t max, uint64_t *len)
{
	if (hl == 9 && h[0] != 1)
		return -1;
	*len = gate_be64(h + hl - 8);
	return *len > max ? -1 : 0;
}

/* Moves what in[] holds into out[], frame by frame; -1 on a bad frame. */
static int
gate_xfer(struct gate_dir *d)
{
	size_t i = 0;

	if (d->outoff == d->outlen)
		d->outoff = d->outlen = 0;
	else if (d->outoff > 0 && d->outlen > GATE_BUF / 2) {
		memmove(d->out, d->out + d->outoff, d->outlen - d->outoff);
		d->outlen -= d->outoff;
		d->outoff = 0;
	}
	while (i < d->inlen || (d->hgot == d->ihl && !d->emitted)) {
		if (d->hgot < d->ihl) {
			size_t n = d->ihl - d->hgot;
			if (n > d->inlen - i)
				n = d->inlen - i;
			memcpy(d->h + d->hgot, d->in + i, n);
			d->hgot += n;
			i += n;
			if (d->hgot < d->ihl)
				break;
			if (gate_frame_len(d->h, d->ihl, d->max, &d->left) != 0)
				return -1;
		}
		if (!d->emitted) {
			if (GATE_BUF - d->outlen < d->ohl)
				break;
			if (d->ohl == 9)
				d->out[d->outlen++] = 1;
			gate_put64(d->out + d->outlen, d->left);
			d->outlen += 8;
			d->emitted = true;
		}
		size_t n =
		    d->left < d->inlen - i ? (size_t)d->left : d->inlen - i;
		if (n > GATE_BUF - d->outlen)
			n = GATE_BUF - d->outlen;
		memcpy(d->out + d->outlen, d->in + i, n);
		d->outlen += n;
		i += n;
		d->left -= n;
		if (d->left == 0) {
			d->hgot = 0;
			d->emitted = false;
		} else if (n == 0)
			break;
	}
	memmove(d->in, d->in + i, d->inlen - i);
	d->inlen -= i;
	return 0;
}

static bool
gate_dir_pending(const struct gate_dir *d)
{
	return d->preoff < d->prelen || d->outoff < d->outlen;
}

/* Writes what is pending to fd; -1 when the connection broke. */
static int
gate_dir_write(struct gate_dir *d, int fd)
{
	while (gate_dir_pending(d)) {
		const uint8_t *p;
		size_t n;
		ssize_t w;
		if (d->preoff < d->prelen) {
			p = d->pre + d->preoff;
			n = d->prelen - d->preoff;
		} else {
			p = d->out + d->outoff;
			n = d->outlen - d->outoff;
		}
		w = send(fd, p, n, MSG_NOSIGNAL);
		if (w < 0)
			return errno == EAGAIN || errno == EINTR ? 0 : -1;
		if (d->preoff < d->prelen) {
			d->preoff += (size_t)w;
			if (d->preoff == d->prelen) {
				free(d->pre);
				d->pre = NULL;
				d->preoff = d->prelen = 0;
			}
		} else
			d->outoff += (size_t)w;
	}
	return 0;
}

/* Reads into in[]; 1 at end of stream, -1 on an error. */
static int
gate_dir_read(struct gate_dir *d, int fd)
{
	ssize_t r;

	if (d->inlen == GATE_BUF)
		return 0;
	r = recv(fd, d->in + d->inlen, GATE_BUF - d->inlen, 0);
	if (r == 0)
		return 1;
	if (r < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -1;
	d->inlen += (size_t)r;
	return 0;
}

/* ------------------------------------------------------ connections */

enum gate_state {
	GATE_PRE,     /* reading the peer's SP header */
	GATE_NEW,     /* reading the peer's first request */
	GATE_LINKING, /* waiting for the private listener's backlog */
	GATE_LINK,    /* relaying; NNG's header not back yet */
	GATE_RELAY,   /* relaying */
	GATE_CLOSING, /* sending a refusal, then closing */
	GATE_ZOMBIE,  /* peer gone; the private side waits for NNG's header */
	GATE_DEAD,
};

enum gate_class { GATE_C_NONE, GATE_C_PRE, GATE_C_NEW, GATE_C_RELAYED };

struct gate_key {
	uint8_t b[17];
};

struct gate_conn {
	int fd, nfd;
	enum gate_state st;
	struct gate_key key;
	uint64_t since, seq;
	uint32_t ev, nev; /* epoll interest now */
	uint8_t hdr[8];
	size_t hgot;
	uint8_t nhdr[8];
	size_t ngot;
	uint64_t reserved; /* first-request bytes counted against the budget */
	uint8_t *first;    /* peer header + ipc header + first request */
	uint64_t flen, fgot;
	uint8_t *rbuf; /* the refusal being sent (CLOSING) */
	size_t rlen, roff;
	uint64_t written;           /* when the refusal was all written */
	bool shut;                  /* the end of the stream was sent */
	struct gate_dir *up, *down; /* peer -> NNG, NNG -> peer */
};

struct bus_gate {
	bus_gate_opts o;
	char url[256];
	char pub_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char priv_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char tmpdir[256]; /* made for a tcp gate's private path */
	bool tcp;
	int lfd, ep, wake[2];
	pthread_t thr;
	bool started;
	struct gate_conn **c;
	size_t nc, cap;
	uint64_t seq, reserved;
	pthread_mutex_t mtx; /* lim, st, stop */
	bus_gate_limits lim; /* set by any thread */
	bus_gate_limits cur; /* the gate thread's copy */
	bus_listener_stats st;
	bool stop, link_ok;
};

static enum gate_class
gate_class_of(enum gate_state s)
{
	switch (s) {
	case GATE_PRE:
	case GATE_CLOSING: return GATE_C_PRE;
	case GATE_NEW: return GATE_C_NEW;
	case GATE_LINKING:
	case GATE_LINK:
	case GATE_RELAY: return GATE_C_RELAYED;
	default: return GATE_C_NONE;
	}
}

static void
gate_interest(bus_gate *g, struct gate_conn *c)
{
	uint32_t ev = 0, nev = 0;
	struct epoll_event e;

	switch (c->st) {
	case GATE_PRE:
	case GATE_NEW: ev = EPOLLIN; break;
	case GATE_CLOSING: ev = c->roff < c->rlen ? EPOLLOUT : EPOLLIN; break;
	case GATE_LINKING: break;
	case GATE_LINK:
		/* Nothing more from the peer until NNG answered. */
		nev = EPOLLIN;
		if (gate_dir_pending(c->up))
			nev |= EPOLLOUT;
		if (gate_dir_pending(c->down))
			ev |= EPOLLOUT;
		break;
	case GATE_RELAY:
		if (c->up->inlen < GATE_BUF)
			ev |= EPOLLIN;
		if (gate_dir_pending(c->down))
			ev |= EPOLLOUT;
		if (c->down->inlen < GATE_BUF)
			nev |= EPOLLIN;
		if (gate_dir_pending(c->up))
			nev |= EPOLLOUT;
		break;
	case GATE_ZOMBIE: nev = EPOLLIN; break;
	case GATE_DEAD: return;
	}
	if (c->fd >= 0 && ev != c->ev) {
		e.events = ev;
		e.data.u64 = (uint64_t)(uintptr_t)c;
		epoll_ctl(g->ep, EPOLL_CTL_MOD, c->fd, &e);
		c->ev = ev;
	}
	if (c->nfd >= 0 && nev != c->nev) {
		e.events = nev;
		e.data.u64 = (uint64_t)(uintptr_t)c | 1;
		epoll_ctl(g->ep, EPOLL_CTL_MOD, c->nfd, &e);
		c->nev = nev;
	}
}

static void
gate_close_fd(bus_gate *g, int *fd)
{
	if (*fd >= 0) {
		epoll_ctl(g->ep, EPOLL_CTL_DEL, *fd, NULL);
		close(*fd);
		*fd = -1;
	}
}

static void
gate_unreserve(bus_gate *g, struct gate_conn *c)
{
	g->reserved -= c->reserved;
	c->reserved = 0;
}

/*
 * Ends a connection. The private side stays open until NNG's header came
 * back: closing it during NNG's handshake is what loses NNG 1.5.2's
 * listener.
 */
static void
gate_end(bus_gate *g, struct gate_conn *c)
{
	gate_close_fd(g, &c->fd);
	gate_unreserve(g, c);
	free(c->first);
	c->first = NULL;
	free(c->rbuf);
	c->rbuf = NULL;
	if (c->nfd >= 0 && c->ngot < 8) {
		c->st = GATE_ZOMBIE;
		c->since = kc_mono_ms();
		gate_interest(g, c);
		return;
	}
	gate_close_fd(g, &c->nfd);
	c->st = GATE_DEAD;
}

static struct gate_dir *
gate_dir_new(size_t ihl, size_t ohl, uint64_t max)
{
	struct gate_dir *d = calloc(1, sizeof(*d));

	if (d != NULL) {
		d->ihl = ihl;
		d->ohl = ohl;
		d->max = max;
	}
	return d;
}

/* ------------------------------------------------------- admission */

static unsigned
gate_cap(const bus_gate *g, enum gate_class k, bool per_peer)
{
	switch (k) {
	case GATE_C_PRE: return per_peer ? g->cur.pre_per_peer : g->cur.max_pre;
	case GATE_C_NEW: return per_peer ? g->cur.new_per_peer : g->cur.max_new;
	case GATE_C_RELAYED:
		return per_peer ? g->cur.relayed_per_peer : g->cur.max_relayed;
	default: return 0;
	}
}

/*
 * Makes room in class k for a newcomer of peer key (bus_gate.h says
 * whom it evicts); false when the newcomer must be refused instead.
 */
static bool
gate_make_room(bus_gate *g, enum gate_class k, const struct gate_key *key,
    const struct gate_conn *self)
{
	unsigned total = 0, mine = 0, best = 0;
	struct gate_conn *victim = NULL, *own = NULL;
	const struct gate_key *big = NULL;

	for (size_t i = 0; i < g->nc; i++) {
		struct gate_conn *c = g->c[i];
		if (c == self || gate_class_of(c->st) != k)
			continue;
		total++;
		if (memcmp(&c->key, key, sizeof(*key)) == 0) {
			mine++;
			if (own == NULL ||
			    (k == GATE_C_RELAYED ? c->seq > own->seq
			                         : c->seq < own->seq))
				own = c;
		}
	}
	if (mine >= gate_cap(g, k, true)) {
		if (k == GATE_C_RELAYED)
			return false;
		victim = own;
	} else if (total >= gate_cap(g, k, false)) {
		/* The peer holding the most gives one up. */
		for (size_t i = 0; i < g->nc; i++) {
			struct gate_conn *c = g->c[i];
			unsigned n = 0;
			if (c == self || gate_class_of(c->st) != k)
				continue;
			for (size_t j = 0; j < g->nc; j++)
				if (g->c[j] != self &&
				    gate_class_of(g->c[j]->st) == k &&
				    memcmp(&g->c[j]->key, &c->key,
				        sizeof(c->key)) == 0)
					n++;
			if (n > best) {
				best = n;
				big = &c->key;
			}
		}
		for (size_t i = 0; big && i < g->nc; i++) {
			struct gate_conn *c = g->c[i];
			if (c == self || gate_class_of(c->st) != k ||
			    memcmp(&c->key, big, sizeof(*big)) != 0)
				continue;
			if (victim == NULL ||
			    (k == GATE_C_RELAYED ? c->seq > victim->seq
			                         : c->seq < victim->seq))
				victim = c;
		}
	}
	if (victim != NULL) {
		gate_end(g, victim);
		pthread_mutex_lock(&g->mtx);
		g->st.evicted++;
		pthread_mutex_unlock(&g->mtx);
	}
	return true;
}

static void
gate_peer_key(bus_gate *g, int fd, struct gate_key *key)
{
	memset(key, 0, sizeof(*key));
	if (!g->tcp) {
		struct ucred cr;
		socklen_t l = sizeof(cr);
		key->b[0] = 'p';
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &l) == 0)
			memcpy(key->b + 1, &cr.pid, sizeof(cr.pid));
		return;
	}
	struct sockaddr_storage ss;
	socklen_t l = sizeof(ss);
	key->b[0] = 'i';
	if (getpeername(fd, (struct sockaddr *)&ss, &l) != 0)
		return;
	if (ss.ss_family == AF_INET)
		memcpy(key->b + 1, &((struct sockaddr_in *)&ss)->sin_addr, 4);
	else if (ss.ss_family == AF_INET6)
		memcpy(
		    key->b + 1, &((struct sockaddr_in6 *)&ss)->sin6_addr, 16);
}

static void
gate_accept(bus_gate *g)
{
	for (int n = 0; n < 64; n++) {
		struct gate_conn *c;
		struct epoll_event e;
		int fd =
		    accept4(g->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE) {
				pthread_mutex_lock(&g->mtx);
				bool warn = g->st.refused++ % 1000 == 0;
				pthread_mutex_unlock(&g->mtx);
				if (warn)
					KC_WARN("bus: %s: out of file "
					        "descriptors; a connection "
					        "waits",
					    g->url);
			}
			return;
		}
		if (g->nc == g->cap) {
			size_t nc = g->cap ? g->cap * 2 : 64;
			struct gate_conn **p = realloc(g->c, nc * sizeof(*p));
			if (p == NULL) {
				close(fd);
				return;
			}
			g->c = p;
			g->cap = nc;
		}
		if ((c = calloc(1, sizeof(*c))) == NULL) {
			close(fd);
			return;
		}
		if (g->tcp) {
			int one = 1;
			setsockopt(
			    fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		}
		c->fd = fd;
		c->nfd = -1;
		c->st = GATE_PRE;
		c->since = kc_mono_ms();
		c->seq = ++g->seq;
		gate_peer_key(g, fd, &c->key);
		gate_make_room(g, GATE_C_PRE, &c->key, NULL);
		g->c[g->nc++] = c;
		e.events = EPOLLIN;
		e.data.u64 = (uint64_t)(uintptr_t)c;
		epoll_ctl(g->ep, EPOLL_CTL_ADD, fd, &e);
		c->ev = EPOLLIN;
		pthread_mutex_lock(&g->mtx);
		g->st.accepted++;
		pthread_mutex_unlock(&g->mtx);
	}
}

/* ------------------------------------------------------------ steps */

/* Connects to NNG's private listener and writes the peer's header (and
 * first request) at once; stays LINKING while the backlog is full. */
static void
gate_connect(bus_gate *g, struct gate_conn *c)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct epoll_event e;
	int fd;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", g->priv_path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 &&
	    errno != EINPROGRESS) {
		int err = errno;
		close(fd);
		/* EAGAIN: the backlog is full; the tick tries again. */
		if (err != EAGAIN)
			gate_end(g, c);
		return;
	}
	c->nfd = fd;
	c->st = GATE_LINK;
	c->since = kc_mono_ms();
	e.events = EPOLLIN;
	e.data.u64 = (uint64_t)(uintptr_t)c | 1;
	epoll_ctl(g->ep, EPOLL_CTL_ADD, fd, &e);
	c->nev = e.events;
	/* A fresh unix socket takes the 8 header bytes whole: NNG never
	 * waits for a header that the gate would cut off. */
	if (gate_dir_write(c->up, fd) != 0)
		gate_end(g, c);
}

/* Queues the peer's header and first request for NNG, then connects. */
static void
gate_link(bus_gate *g, struct gate_conn *c)
{
	if (c->up == NULL) {
		c->up = gate_dir_new(g->tcp ? 8 : 9, 9, g->o.max_msg);
		c->down = gate_dir_new(9, g->tcp ? 8 : 9, UINT64_MAX);
		if (c->up == NULL || c->down == NULL) {
			gate_end(g, c);
			return;
		}
	}
	if (c->first == NULL) {
		/* No first request (a subscriber): the header alone. */
		if ((c->first = malloc(8)) == NULL) {
			gate_end(g, c);
			return;
		}
		memcpy(c->first, c->hdr, 8);
		c->up->prelen = 8;
	} else
		c->up->prelen = 17 + c->flen;
	c->up->pre = c->first;
	c->up->preoff = 0;
	c->first = NULL;
	gate_unreserve(g, c);
	c->st = GATE_LINKING;
	gate_connect(g, c);
}

/* A REP peer's first whole request: proved, it is relayed; refused, the
 * peer gets the refusal and the connection ends. */
static void
gate_first_done(bus_gate *g, struct gate_conn *c)
{
	uint8_t *body = c->first + 17;
	size_t bt = 0, len = (size_t)c->flen;
	void *refusal = NULL;
	size_t rl = 0;
	int rv = 0;

	/* The REQ header: 4-byte words up to the one with its top bit set
	 * (the request id), as NNG's REP reads it. */
	for (size_t w = 0; w + 4 <= len && w < 4 * 8; w += 4)
		if (body[w] & 0x80) {
			bt = w + 4;
			break;
		}
	if (bt == 0) {
		gate_end(g, c);
		return;
	}
	if (g->o.proof != NULL)
		rv = g->o.proof(
		    g->o.proof_arg, body + bt, len - bt, &refusal, &rl);
	if (rv == 0) {
		free(refusal);
		if (!gate_make_room(g, GATE_C_RELAYED, &c->key, c)) {
			gate_end(g, c);
			return;
		}
		gate_link(g, c);
		return;
	}
	pthread_mutex_lock(&g->mtx);
	g->st.refused++;
	pthread_mutex_unlock(&g->mtx);
	size_t ohl = g->tcp ? 8 : 9;
	c->rlen = ohl + bt + (refusal ? rl : 0);
	if ((c->rbuf = malloc(c->rlen)) == NULL) {
		free(refusal);
		gate_end(g, c);
		return;
	}
	if (ohl == 9)
		c->rbuf[0] = 1;
	gate_put64(c->rbuf + ohl - 8, c->rlen - ohl);
	memcpy(c->rbuf + ohl, body, bt);
	if (refusal)
		memcpy(c->rbuf + ohl + bt, refusal, rl);
	free(refusal);
	free(c->first);
	c->first = NULL;
	gate_unreserve(g, c);
	c->roff = 0;
	c->st = GATE_CLOSING;
	c->since = kc_mono_ms();
}

/* NEW: reads the first request, header then body, into c->first. */
static void
gate_step_new(bus_gate *g, struct gate_conn *c)
{
	struct gate_dir *d = c->up;
	int r = gate_dir_read(d, c->fd);
	size_t i = 0;

	if (r != 0) {
		gate_end(g, c);
		return;
	}
	while (i < d->inlen && c->st == GATE_NEW) {
		if (d->hgot < d->ihl) {
			size_t n = d->ihl - d->hgot;
			if (n > d->inlen - i)
				n = d->inlen - i;
			memcpy(d->h + d->hgot, d->in + i, n);
			d->hgot += n;
			i += n;
			if (d->hgot < d->ihl)
				break;
			if (gate_frame_len(d->h, d->ihl, d->max, &c->flen) !=
			    0) {
				gate_end(g, c);
				return;
			}
			/* The budget of buffered first requests: the
			 * oldest holder gives way. */
			while (g->reserved + c->flen > g->cur.new_bytes) {
				struct gate_conn *v = NULL;
				for (size_t k = 0; k < g->nc; k++)
					if (g->c[k] != c &&
					    g->c[k]->reserved > 0 &&
					    (v == NULL ||
					        g->c[k]->seq < v->seq))
						v = g->c[k];
				if (v == NULL)
					break;
				gate_end(g, v);
				pthread_mutex_lock(&g->mtx);
				g->st.evicted++;
				pthread_mutex_unlock(&g->mtx);
			}
			c->reserved = c->flen;
			g->reserved += c->flen;
			if ((c->first = malloc(17 + c->flen)) == NULL) {
				gate_end(g, c);
				return;
			}
			memcpy(c->first, c->hdr, 8);
			c->first[8] = 1;
			gate_put64(c->first + 9, c->flen);
			c->fgot = 0;
		}
		size_t n = c->flen - c->fgot < d->inlen - i
		    ? (size_t)(c->flen - c->fgot)
		    : d->inlen - i;
		memcpy(c->first + 17 + c->fgot, d->in + i, n);
		c->fgot += n;
		i += n;
		if (c->fgot == c->flen) {
			d->hgot = 0;
			memmove(d->in, d->in + i, d->inlen - i);
			d->inlen -= i;
			i = 0;
			gate_first_done(g, c);
			return;
		}
	}
	memmove(d->in, d->in + i, d->inlen - i);
	d->inlen -= i;
}

/* PRE: the peer's 8-byte header, checked, then ours. */
static void
gate_step_pre(bus_gate *g, struct gate_conn *c)
{
	static const uint8_t sp[4] = {0, 'S', 'P', 0};
	uint8_t mine[8] = {0, 'S', 'P', 0, (uint8_t)(g->o.proto >> 8),
	    (uint8_t)g->o.proto, 0, 0};
	uint16_t peer = (uint16_t)(g->o.proto ^ 1);
	ssize_t r = recv(c->fd, c->hdr + c->hgot, 8 - c->hgot, 0);

	if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
		gate_end(g, c);
		return;
	}
	if (r < 0)
		return;
	c->hgot += (size_t)r;
	if (c->hgot < 8)
		return;
	/* REQ 0x30 talks to REP 0x31, SUB 0x21 to PUB 0x20. */
	if (memcmp(c->hdr, sp, 4) != 0 || c->hdr[4] != (peer >> 8) ||
	    c->hdr[5] != (uint8_t)peer || c->hdr[6] != 0 || c->hdr[7] != 0 ||
	    send(c->fd, mine, 8, MSG_NOSIGNAL) != 8) {
		gate_end(g, c);
		return;
	}
	if (!g->o.first_msg) {
		if (!gate_make_room(g, GATE_C_RELAYED, &c->key, c)) {
			gate_end(g, c);
			return;
		}
		gate_link(g, c);
		return;
	}
	c->up = gate_dir_new(g->tcp ? 8 : 9, 9, g->o.max_msg);
	c->down = gate_dir_new(9, g->tcp ? 8 : 9, UINT64_MAX);
	if (c->up == NULL || c->down == NULL) {
		gate_end(g, c);
		return;
	}
	gate_make_room(g, GATE_C_NEW, &c->key, c);
	c->st = GATE_NEW;
	c->since = kc_mono_ms();
}

/* LINK and RELAY: moves bytes both ways. */
static void
gate_step_relay(bus_gate *g, struct gate_conn *c)
{
	int r;

	if (c->st == GATE_LINK) {
		ssize_t n = recv(c->nfd, c->nhdr + c->ngot, 8 - c->ngot, 0);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
			c->ngot = 8;
			gate_end(g, c);
			return;
		}
		if (n > 0 && (c->ngot += (size_t)n) == 8) {
			pthread_mutex_lock(&g->mtx);
			g->st.last_link_ms = kc_mono_ms() - c->since;
			pthread_mutex_unlock(&g->mtx);
			c->st = GATE_RELAY;
			g->link_ok = true;
		}
	}
	for (int round = 0; round < 4; round++) {
		if (gate_dir_write(c->up, c->nfd) != 0 ||
		    gate_dir_write(c->down, c->fd) != 0)
			goto broke;
		if (c->st != GATE_RELAY)
			break;
		if ((r = gate_dir_read(c->up, c->fd)) != 0 ||
		    (r = gate_dir_read(c->down, c->nfd)) != 0)
			goto broke;
		if (gate_xfer(c->up) != 0 || gate_xfer(c->down) != 0)
			goto broke;
		if (!gate_dir_pending(c->up) && !gate_dir_pending(c->down))
			break;
	}
	return;
broke:
	gate_end(g, c);
}

/*
 * CLOSING: writes the refusal, then drains what the peer sends. The end
 * of the stream follows only once the peer has the refusal (gate_tick):
 * NNG's poller takes a hang-up that arrives together with data for an
 * error and drops the data, so a refusal followed at once by the end
 * would reach an NNG client as "Connection reset".
 */
static void
gate_step_closing(bus_gate *g, struct gate_conn *c)
{
	char sink[512];

	while (c->roff < c->rlen) {
		ssize_t w = send(
		    c->fd, c->rbuf + c->roff, c->rlen - c->roff, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno != EAGAIN && errno != EINTR)
				gate_end(g, c);
			return;
		}
		c->roff += (size_t)w;
		if (c->roff == c->rlen)
			c->written = kc_mono_ms();
	}
	for (;;) {
		ssize_t r = recv(c->fd, sink, sizeof(sink), 0);
		if (r > 0)
			continue;
		if (r < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		gate_end(g, c);
		return;
	}
}

/* Whether the peer has taken everything written to fd (for a unix
 * socket: read it; for tcp: acknowledged it). */
static bool
gate_taken(int fd)
{
	int n = 0;

	return ioctl(fd, SIOCOUTQ, &n) != 0 || n == 0;
}

static void
gate_step(bus_gate *g, struct gate_conn *c)
{
	switch (c->st) {
	case GATE_PRE: gate_step_pre(g, c); break;
	case GATE_NEW: gate_step_new(g, c); break;
	case GATE_LINK:
	case GATE_RELAY: gate_step_relay(g, c); break;
	case GATE_CLOSING: gate_step_closing(g, c); break;
	case GATE_ZOMBIE: {
		ssize_t n = recv(c->nfd, c->nhdr + c->ngot, 8 - c->ngot, 0);
		if (n > 0)
			c->ngot += (size_t)n;
		if (n == 0 || c->ngot == 8 ||
		    (n < 0 && errno != EAGAIN && errno != EINTR)) {
			c->ngot = 8;
			gate_end(g, c);
		}
		break;
	}
	default: break;
	}
	if (c->st != GATE_DEAD)
		gate_interest(g, c);
}

/* Deadlines, retries of a full backlog, and the dead swept away. */
static void
gate_tick(bus_gate *g)
{
	uint64_t now = kc_mono_ms();
	unsigned pre = 0, nw = 0, rel = 0;
	size_t k = 0;

	for (size_t i = 0; i < g->nc; i++) {
		struct gate_conn *c = g->c[i];
		uint64_t age = now - c->since;
		switch (c->st) {
		case GATE_PRE:
			if (age >= (uint64_t)g->cur.pre_ms)
				gate_end(g, c);
			break;
		case GATE_NEW:
			if (age >= (uint64_t)g->cur.new_ms)
				gate_end(g, c);
			break;
		case GATE_CLOSING:
			/* The end once the peer took the refusal and had a
			 * moment to read it. */
			if (!c->shut && c->written > 0 &&
			    ((now - c->written >= 20 && gate_taken(c->fd)) ||
			        now - c->written >= GATE_CLOSE_MS / 2)) {
				shutdown(c->fd, SHUT_WR);
				c->shut = true;
			}
			if (age >= GATE_CLOSE_MS)
				gate_end(g, c);
			break;
		case GATE_LINKING: gate_connect(g, c); break;
		case GATE_LINK:
		case GATE_ZOMBIE:
			if (age >= GATE_LINK_MS) {
				pthread_mutex_lock(&g->mtx);
				g->st.link_timeouts++;
				g->link_ok = false;
				pthread_mutex_unlock(&g->mtx);
				KC_ERROR("bus: %s: NNG's listener took no "
				         "connection within %d ms; it may be "
				         "lost (Health says so)",
				    g->url, GATE_LINK_MS);
				c->ngot = 8;
				gate_end(g, c);
			}
			break;
		default: break;
		}
	}
	for (size_t i = 0; i < g->nc; i++) {
		struct gate_conn *c = g->c[i];
		switch (gate_class_of(c->st)) {
		case GATE_C_PRE: pre++; break;
		case GATE_C_NEW: nw++; break;
		case GATE_C_RELAYED: rel++; break;
		default: break;
		}
		if (c->st == GATE_DEAD) {
			free(c->up ? c->up->pre : NULL);
			free(c->up);
			free(c->down);
			free(c);
			continue;
		}
		g->c[k++] = c;
	}
	g->nc = k;
	pthread_mutex_lock(&g->mtx);
	g->st.pre = pre;
	g->st.unproven = nw;
	g->st.relayed = rel;
	pthread_mutex_unlock(&g->mtx);
}

static void *
gate_main(void *arg)
{
	bus_gate *g = arg;
	struct epoll_event ev[64];
	uint64_t last = 0;

	for (;;) {
		int n = epoll_wait(g->ep, ev, KC_ARRAY_LEN(ev), GATE_TICK_MS);
		bool stop;
		pthread_mutex_lock(&g->mtx);
		stop = g->stop;
		g->cur = g->lim;
		pthread_mutex_unlock(&g->mtx);
		if (stop)
			break;
		for (int i = 0; i < n; i++) {
			uint64_t d = ev[i].data.u64;
			if (d == 0)
				gate_accept(g);
			else if (d == 2) {
				char b[16];
				(void)!read(g->wake[0], b, sizeof(b));
			} else {
				struct gate_conn *c =
				    (struct gate_conn *)(uintptr_t)(d & ~1ull);
				/* A peer that hangs up while its connection
				 * waits for NNG reads nothing more. */
				if ((d & 1) == 0 &&
				    (ev[i].events & (EPOLLHUP | EPOLLERR)) &&
				    (c->st == GATE_LINKING ||
				        c->st == GATE_LINK))
					gate_end(g, c);
				else if (c->st != GATE_DEAD)
					gate_step(g, c);
			}
		}
		/* Sweeping frees connections: only between batches. */
		if (n == 0 || kc_mono_ms() - last >= GATE_TICK_MS) {
			gate_tick(g);
			last = kc_mono_ms();
		}
	}
	return NULL;
}

/* ------------------------------------------------------------ setup */

/* The address family a tcp://, tcp4:// or tcp6:// URL asks for; -1 for
 * any other. */
static int
gate_tcp_family(const char *url)
{
	if (strncmp(url, "tcp://", 6) == 0)
		return AF_UNSPEC;
	if (strncmp(url, "tcp4://", 7) == 0)
		return AF_INET;
	if (strncmp(url, "tcp6://", 7) == 0)
		return AF_INET6;
	return -1;
}

bool
bus_gate_handles(const char *url)
{
	return strncmp(url, "ipc://", 6) == 0 || gate_tcp_family(url) >= 0;
}

/* Whether a unix socket at path answers (a live listener owns it). */
static bool
gate_path_live(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	bool live;

	if (fd < 0)
		return true;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	live = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	close(fd);
	return live;
}

static int
gate_listen_ipc(bus_gate *g)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};

	if (strlen(g->pub_path) >= sizeof(sa.sun_path))
		return kc_seterr(KC_EINVAL,
		    "bus: %s: the path is longer than a unix socket allows "
		    "(%zu bytes); use a shorter home",
		    g->url, sizeof(sa.sun_path) - 1);
	memcpy(sa.sun_path, g->pub_path, strlen(g->pub_path) + 1);
	g->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (g->lfd < 0)
		return kc_seterr(KC_EBUS, "bus: cannot listen on %s: %s",
		    g->url, strerror(errno));
	if (bind(g->lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		/* A socket file left by a process that is gone is stale. */
		if (errno != EADDRINUSE || gate_path_live(g->pub_path))
			return kc_seterr(KC_EBUS,
			    "bus: cannot listen on %s: %s", g->url,
			    errno == EADDRINUSE ? "another process listens "
			                          "there"
			                        : strerror(errno));
		unlink(g->pub_path);
		if (bind(g->lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
			return kc_seterr(KC_EBUS,
			    "bus: cannot listen on %s: %s", g->url,
			    strerror(errno));
	}
	/* Owner-only, like the folder it is in. */
	if (chmod(g->pub_path, 0600) != 0 || listen(g->lfd, 512) != 0)
		return kc_seterr(KC_EBUS, "bus: cannot listen on %s: %s",
		    g->url, strerror(errno));
	return 0;
}

static int
gate_listen_tcp(bus_gate *g)
{
	struct addrinfo hints = {.ai_family = gate_tcp_family(g->url),
	    .ai_socktype = SOCK_STREAM,
	    .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
	struct addrinfo *ai = NULL;
	nng_url *u = NULL;
	const char *host;
	int one = 1, rv = 0, e;

	if (nng_url_parse(&u, g->url) != 0 || u->u_port == NULL ||
	    u->u_port[0] == '\0')
		return kc_seterr(
		    KC_EINVAL, "bus: %s is not tcp://HOST:PORT", g->url);
	host = u->u_hostname;
	if (host == NULL || host[0] == '\0' || strcmp(host, "*") == 0)
		host = NULL;
	if ((e = getaddrinfo(host, u->u_port, &hints, &ai)) != 0) {
		rv = kc_seterr(
		    KC_EINVAL, "bus: %s: %s", g->url, gai_strerror(e));
		goto out;
	}
	g->lfd = socket(
	    ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (g->lfd < 0 ||
	    setsockopt(g->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) !=
	        0 ||
	    /* tcp6:// is IPv6 alone, as NNG's own tcp6 transport. */
	    (hints.ai_family == AF_INET6 &&
	        setsockopt(g->lfd, IPPROTO_IPV6, IPV6_V6ONLY, &one,
	            sizeof(one)) != 0) ||
	    bind(g->lfd, ai->ai_addr, ai->ai_addrlen) != 0 ||
	    listen(g->lfd, 512) != 0)
		rv = kc_seterr(KC_EBUS, "bus: cannot listen on %s: %s", g->url,
		    strerror(errno));
out:
	if (ai)
		freeaddrinfo(ai);
	nng_url_free(u);
	return rv;
}

static char bus_gate_dir[256];

void
bus_set_private_dir(const char *dir)
{
	kc_strlcpy(bus_gate_dir, dir ? dir : "", sizeof(bus_gate_dir));
}

int
bus_gate_open(bus_gate **out, const bus_gate_opts *o, char *priv, size_t n)
{
	static unsigned serial;
	bus_gate *g;
	char dir[256];
	int rv;

	if ((g = calloc(1, sizeof(*g))) == NULL)
		return KC_ENOMEM;
	g->o = *o;
	g->lfd = g->ep = g->wake[0] = g->wake[1] = -1;
	g->link_ok = true;
	pthread_mutex_init(&g->mtx, NULL);
	kc_strlcpy(g->url, o->url, sizeof(g->url));
	kc_strlcpy(g->st.url, o->url, sizeof(g->st.url));
	g->st.gated = true;
	g->tcp = gate_tcp_family(o->url) >= 0;
	g->cur = g->lim = (bus_gate_limits){.max_relayed = BUS_MAX_CONNS,
	    .relayed_per_peer = BUS_MAX_CONNS,
	    .max_pre = BUS_MAX_PRE_CONNS,
	    .pre_per_peer = BUS_MAX_PRE_PER_PEER,
	    .max_new = BUS_MAX_NEW_CONNS,
	    .new_per_peer = BUS_MAX_NEW_PER_PEER,
	    .new_bytes = (uint64_t)BUS_NEW_BUFFERED * o->max_msg,
	    .pre_ms = BUS_PRE_MS,
	    .new_ms = BUS_NEW_CONN_MS};
	if (g->tcp) {
		rv = gate_listen_tcp(g);
		/* NNG's side lives in the run folder, or a folder of our
		 * own. */
		if (bus_gate_dir[0] != '\0' && access(bus_gate_dir, W_OK) == 0)
			kc_strlcpy(dir, bus_gate_dir, sizeof(dir));
		else {
			const char *t = getenv("TMPDIR");
			snprintf(g->tmpdir, sizeof(g->tmpdir),
			    "%s/kclaw-gate-XXXXXX", t && *t ? t : "/tmp");
			if (rv == 0 && mkdtemp(g->tmpdir) == NULL)
				rv = kc_seterr(KC_EIO,
				    "bus: %s: cannot make a private folder "
				    "%s: %s",
				    o->url, g->tmpdir, strerror(errno));
			kc_strlcpy(dir, g->tmpdir, sizeof(dir));
			if (rv != 0)
				g->tmpdir[0] = '\0';
		}
	} else {
		char *slash;
		kc_strlcpy(g->pub_path, o->url + 6, sizeof(g->pub_path));
		kc_strlcpy(dir, g->pub_path, sizeof(dir));
		if ((slash = strrchr(dir, '/')) != NULL)
			*slash = '\0';
		else
			snprintf(dir, sizeof(dir), ".");
		rv = gate_listen_ipc(g);
	}
	if (rv == 0) {
		snprintf(g->priv_path, sizeof(g->priv_path), "%s/.nng.%d.%u",
		    dir, (int)getpid(),
		    __atomic_add_fetch(&serial, 1, __ATOMIC_RELAXED));
		unlink(g->priv_path);
		if (strlen(dir) + 24 >= sizeof(g->priv_path))
			rv = kc_seterr(KC_EINVAL,
			    "bus: %s: the folder %s is too long for a unix "
			    "socket",
			    o->url, dir);
	}
	if (rv == 0 &&
	    ((g->ep = epoll_create1(EPOLL_CLOEXEC)) < 0 ||
	        pipe2(g->wake, O_NONBLOCK | O_CLOEXEC) != 0))
		rv = kc_seterr(KC_EBUS, "bus: %s: %s", o->url, strerror(errno));
	if (rv != 0) {
		bus_gate_close(g);
		return rv;
	}
	snprintf(priv, n, "ipc://%s", g->priv_path);
	*out = g;
	return 0;
}

int
bus_gate_start(bus_gate *g)
{
	struct epoll_event e = {.events = EPOLLIN, .data.u64 = 0};

	epoll_ctl(g->ep, EPOLL_CTL_ADD, g->lfd, &e);
	e.data.u64 = 2;
	epoll_ctl(g->ep, EPOLL_CTL_ADD, g->wake[0], &e);
	if (pthread_create(&g->thr, NULL, gate_main, g) != 0)
		return kc_seterr(
		    KC_ENOMEM, "bus: %s: no thread for its gate", g->url);
	g->started = true;
	return 0;
}

void
bus_gate_close(bus_gate *g)
{
	if (g == NULL)
		return;
	if (g->started) {
		pthread_mutex_lock(&g->mtx);
		g->stop = true;
		pthread_mutex_unlock(&g->mtx);
		(void)!write(g->wake[1], "x", 1);
		pthread_join(g->thr, NULL);
	}
	for (size_t i = 0; i < g->nc; i++) {
		struct gate_conn *c = g->c[i];
		if (c->fd >= 0)
			close(c->fd);
		if (c->nfd >= 0)
			close(c->nfd);
		free(c->first);
		free(c->rbuf);
		free(c->up ? c->up->pre : NULL);
		free(c->up);
		free(c->down);
		free(c);
	}
	free(g->c);
	if (g->lfd >= 0) {
		close(g->lfd);
		if (!g->tcp && g->pub_path[0] != '\0')
			unlink(g->pub_path);
	}
	if (g->priv_path[0] != '\0')
		unlink(g->priv_path);
	if (g->tmpdir[0] != '\0')
		rmdir(g->tmpdir);
	if (g->ep >= 0)
		close(g->ep);
	if (g->wake[0] >= 0) {
		close(g->wake[0]);
		close(g->wake[1]);
	}
	pthread_mutex_destroy(&g->mtx);
	free(g);
}

void
bus_gate_set_limits(bus_gate *g, const bus_gate_limits *l)
{
	pthread_mutex_lock(&g->mtx);
#define GATE_SET(f)                                                            \
	if (l->f)                                                              \
		g->lim.f = l->f;
	GATE_SET(max_relayed)
	GATE_SET(relayed_per_peer)
	GATE_SET(max_pre)
	GATE_SET(pre_per_peer)
	GATE_SET(max_new)
	GATE_SET(new_per_peer)
	GATE_SET(new_bytes)
	GATE_SET(pre_ms)
	GATE_SET(new_ms)
#undef GATE_SET
	pthread_mutex_unlock(&g->mtx);
}

void
bus_gate_stats(bus_gate *g, bus_listener_stats *st)
{
	pthread_mutex_lock(&g->mtx);
	*st = g->st;
	/* A lost listener never links again; a slow one recovers. */
	st->healthy = g->link_ok;
	pthread_mutex_unlock(&g->mtx);
}
