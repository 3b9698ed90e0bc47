/*
 * mon_guard.c - caps and deadlines for the HTTP server's connections.
 *
 * NNG 1.5.2's HTTP server accepts every connection and waits for its
 * headers forever: 1,000 connections that send half a request hold 1,000
 * file descriptors, in the table RocksDB needs too. It offers no hook at
 * accept and no timeout, so a thread watches from outside: every
 * MON_GUARD_MS it lists this process's TCP sockets on the served port
 * (/proc/self/fd, getsockname) and reads the kernel's view of each
 * (TCP_INFO). It shuts down (shutdown(2), which NNG sees as the peer
 * leaving and answers by closing the descriptor):
 *
 *  - a connection that was never answered (no byte of ours acknowledged:
 *    its first request's headers have not arrived) MON_HEADER_MS after it
 *    was first seen; and the oldest of those beyond MON_MAX_PENDING;
 *  - a connection on which nothing was sent or received for MON_IDLE_MS
 *    (streams send a keepalive every 15 s, the WebSocket every 20 s);
 *  - beyond MON_MAX_CONNS connections in all, the unanswered ones first,
 *    then those idle longest.
 *
 * A descriptor is re-checked (same socket inode, same port) right before
 * its shutdown, and shutdown never closes it, so a descriptor NNG has
 * just reused cannot be closed under it.
 */
#include <dirent.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#include "kc_err.h"

#include "kc_log.h"
#include "kc_util.h"
#include "monitor_int.h"

struct mon_guard_conn {
	int fd;
	ino_t ino;
	uint64_t first_ms; /* when first seen */
	uint64_t idle_ms;  /* since data last went either way */
	bool answered;
	bool seen;
};

static uint64_t
mon_guard_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Whether fd is an accepted TCP connection on port (not the listener);
 * its inode in *ino. */
static bool
mon_guard_is_conn(int fd, int port, ino_t *ino)
{
	struct sockaddr_storage sa;
	socklen_t sl = sizeof(sa);
	int type = 0, acc = 1;
	socklen_t n = sizeof(int);
	struct stat st;
	int p;

	if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode))
		return false;
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &n) != 0 ||
	    type != SOCK_STREAM)
		return false;
	n = sizeof(int);
	if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &n) != 0 || acc)
		return false;
	if (getsockname(fd, (struct sockaddr *)&sa, &sl) != 0)
		return false;
	if (sa.ss_family == AF_INET)
		p = ntohs(((struct sockaddr_in *)&sa)->sin_port);
	else if (sa.ss_family == AF_INET6)
		p = ntohs(((struct sockaddr_in6 *)&sa)->sin6_port);
	else
		return false;
	*ino = st.st_ino;
	return p == port;
}

/* Shuts c down if its descriptor is still the socket seen. */
static void
mon_guard_shut(
    const struct mon_guard_conn *c, int port, const char *why, uint64_t *count)
{
	ino_t ino;

	if (!mon_guard_is_conn(c->fd, port, &ino) || ino != c->ino)
		return;
	shutdown(c->fd, SHUT_RDWR);
	if ((*count)++ % 100 == 0)
		KC_WARN("dashboard: closed a connection (%s)", why);
}

static int
mon_guard_cmp(const void *a, const void *b)
{
	const struct mon_guard_conn *x = a, *y = b;

	/* Victims first: unanswered before answered, then the oldest
	 * (unanswered) or idlest (answered). */
	if (x->answered != y->answered)
		return x->answered ? 1 : -1;
	if (!x->answered)
		return x->first_ms < y->first_ms ? -1
		                                 : x->first_ms > y->first_ms;
	return x->idle_ms > y->idle_ms ? -1 : x->idle_ms < y->idle_ms;
}

/* One scan: updates the table (*tab, *n) and shuts what the rules say. */
static void
mon_guard_scan(
    mon *m, int port, struct mon_guard_conn **tab, size_t *n, size_t *cap)
{
	uint64_t now = mon_guard_now_ms();
	size_t pending = 0, excess_pending, excess;
	struct dirent *e;
	DIR *d;

	if ((d = opendir("/proc/self/fd")) == NULL)
		return;
	for (size_t i = 0; i < *n; i++)
		(*tab)[i].seen = false;
	while ((e = readdir(d)) != NULL) {
		int fd = atoi(e->d_name);
		struct tcp_info ti;
		socklen_t tl = sizeof(ti);
		ino_t ino;
		size_t i;
		if (e->d_name[0] < '0' || e->d_name[0] > '9' || fd == dirfd(d))
			continue;
		if (!mon_guard_is_conn(fd, port, &ino))
			continue;
		memset(&ti, 0, sizeof(ti));
		if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) != 0)
			continue;
		for (i = 0; i < *n; i++)
			if ((*tab)[i].fd == fd && (*tab)[i].ino == ino)
				break;
		if (i == *n) {
			if (*n == *cap) {
				size_t nc = *cap ? *cap * 2 : 256;
				void *t = realloc(*tab, nc * sizeof(**tab));
				if (t == NULL)
					continue;
				*tab = t;
				*cap = nc;
			}
			(*tab)[(*n)++] = (struct mon_guard_conn){
			    .fd = fd, .ino = ino, .first_ms = now};
		}
		struct mon_guard_conn *c = &(*tab)[i];
		c->seen = true;
		c->answered = ti.tcpi_bytes_acked > 0;
		c->idle_ms = ti.tcpi_last_data_sent < ti.tcpi_last_data_recv
		    ? ti.tcpi_last_data_sent
		    : ti.tcpi_last_data_recv;
	}
	closedir(d);
	/* Forget what is gone. */
	for (size_t i = 0; i < *n;)
		if (!(*tab)[i].seen)
			(*tab)[i] = (*tab)[--*n];
		else
			i++;
	if (*n > 1)
		qsort(*tab, *n, sizeof(**tab), mon_guard_cmp);
	for (size_t i = 0; i < *n; i++)
		pending += !(*tab)[i].answered;
	excess_pending =
	    pending > MON_MAX_PENDING ? pending - MON_MAX_PENDING : 0;
	excess = *n > MON_MAX_CONNS ? *n - MON_MAX_CONNS : 0;
	for (size_t i = 0; i < *n; i++) {
		struct mon_guard_conn *c = &(*tab)[i];
		const char *why = NULL;
		if (!c->answered && now - c->first_ms > MON_HEADER_MS)
			why = "no request within the header deadline";
		else if (!c->answered && excess_pending > 0)
			why = "too many connections without a request";
		else if (c->answered && c->idle_ms > MON_IDLE_MS)
			why = "idle";
		else if (excess > 0)
			why = "too many connections";
		if (why == NULL)
			continue;
		mon_guard_shut(c, port, why, &m->guard_closed);
		if (!c->answered && excess_pending > 0)
			excess_pending--;
		if (excess > 0)
			excess--;
	}
}

static void *
mon_guard_main(void *arg)
{
	mon *m = arg;
	int port = atoi(m->port);
	struct mon_guard_conn *tab = NULL;
	size_t n = 0, cap = 0;

	for (;;) {
		kc_sleep_ms(MON_GUARD_MS);
		pthread_mutex_lock(&m->mu);
		bool stop = m->stop;
		pthread_mutex_unlock(&m->mu);
		if (stop)
			break;
		mon_guard_scan(m, port, &tab, &n, &cap);
	}
	free(tab);
	return NULL;
}

int
mon_guard_start(mon *m)
{
	if (pthread_create(&m->guard_thread, NULL, mon_guard_main, m) != 0)
		return kc_seterr(KC_ENOMEM, "monitor: cannot start threads");
	m->guard_started = true;
	return 0;
}

void
mon_guard_stop(mon *m)
{
	if (m->guard_started)
		pthread_join(m->guard_thread, NULL);
	m->guard_started = false;
}
