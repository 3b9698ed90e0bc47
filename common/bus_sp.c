/*
 * bus_sp.c - the address, the connection and the frame header of kclaw's
 * own SP peers (bus_sp.h).
 */
#include "bus_sp.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nng/nng.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kc_err.h"
#include "kc_util.h"

int
bus_sp_parse(bus_sp_addr *a, const char *url)
{
	nng_url *u = NULL;
	int rv = 0;

	memset(a, 0, sizeof(*a));
	if (strncmp(url, "ipc://", 6) == 0) {
		if (strlen(url + 6) == 0 || strlen(url + 6) >= sizeof(a->path))
			return kc_seterr(KC_EINVAL,
			    "bus: cannot dial %s: not a unix socket path "
			    "(at most %zu bytes)",
			    url, sizeof(a->path) - 1);
		kc_strlcpy(a->path, url + 6, sizeof(a->path));
		return 0;
	}
	a->tcp = true;
	if (nng_url_parse(&u, url) != 0 || u->u_hostname == NULL ||
	    u->u_hostname[0] == '\0' || u->u_port == NULL ||
	    u->u_port[0] == '\0' || strlen(u->u_hostname) >= sizeof(a->host) ||
	    strlen(u->u_port) >= sizeof(a->port))
		rv = kc_seterr(
		    KC_EINVAL, "bus: cannot dial %s: not tcp://HOST:PORT", url);
	else {
		kc_strlcpy(a->host, u->u_hostname, sizeof(a->host));
		kc_strlcpy(a->port, u->u_port, sizeof(a->port));
	}
	nng_url_free(u);
	return rv;
}

int
bus_sp_connect(const bus_sp_addr *a, int *fd)
{
	int rv, err;

	*fd = -1;
	if (!a->tcp) {
		struct sockaddr_un sa = {.sun_family = AF_UNIX};
		memcpy(sa.sun_path, a->path, strlen(a->path) + 1);
		*fd = socket(
		    AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (*fd < 0)
			return -1;
		rv = connect(*fd, (struct sockaddr *)&sa, sizeof(sa));
		err = errno;
	} else {
		struct addrinfo hints = {
		    .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
		struct addrinfo *ai = NULL;
		int one = 1;
		if (getaddrinfo(a->host, a->port, &hints, &ai) != 0)
			return -1;
		*fd = socket(ai->ai_family,
		    SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (*fd < 0) {
			freeaddrinfo(ai);
			return -1;
		}
		setsockopt(*fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		rv = connect(*fd, ai->ai_addr, ai->ai_addrlen);
		err = errno;
		freeaddrinfo(ai);
	}
	if (rv == 0)
		return 0;
	if (err == EINPROGRESS)
		return 1;
	/* Not there yet, or its backlog is full. */
	close(*fd);
	*fd = -1;
	return -1;
}

bool
bus_sp_finished(int fd)
{
	int err = 0;
	socklen_t el = sizeof(err);

	return getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0;
}

bool
bus_sp_hello(int fd, uint8_t proto)
{
	const uint8_t hello[8] = {0, 'S', 'P', 0, 0x00, proto, 0, 0};

	return send(fd, hello, sizeof(hello), MSG_NOSIGNAL) == sizeof(hello);
}

bool
bus_sp_is_peer(const uint8_t hdr[8], uint8_t proto)
{
	const uint8_t want[8] = {0, 'S', 'P', 0, 0x00, proto, 0, 0};

	return memcmp(hdr, want, sizeof(want)) == 0;
}

void
bus_sp_backoff(int *backoff_ms, uint64_t *retry_at)
{
	*retry_at = kc_mono_ms() + (uint64_t)*backoff_ms;
	*backoff_ms = *backoff_ms * 2 > BUS_SP_RETRY_MAX_MS
	    ? BUS_SP_RETRY_MAX_MS
	    : *backoff_ms * 2;
}

int
bus_sp_frame_len(bool tcp, const uint8_t *p, size_t avail, uint64_t *len)
{
	size_t hl = tcp ? 8 : 9;

	if (avail < hl)
		return 0;
	if (!tcp && p[0] != 1)
		return -1;
	*len = 0;
	for (size_t i = hl - 8; i < hl; i++)
		*len = *len << 8 | p[i];
	return (int)hl;
}

size_t
bus_sp_frame_header(bool tcp, uint64_t len, uint8_t out[9])
{
	size_t at = 0;

	if (!tcp)
		out[at++] = 1;
	for (int i = 7; i >= 0; i--)
		out[at++] = (uint8_t)(len >> (8 * i));
	return at;
}
