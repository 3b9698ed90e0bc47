/*
 * frame.c - length-prefixed protobuf frames between parent and child.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kc_err.h"
#include "kc_util.h"
#include "sandbox.h"

static int
frame_write_all(int fd, const uint8_t *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return kc_seterr(KC_ECLOSED, "pipe closed: %s",
			    w < 0 ? strerror(errno) : "short write");
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

int
sbx_frame_write(int fd, const ProtobufCMessage *m)
{
	size_t len = protobuf_c_message_get_packed_size(m);
	uint8_t *buf = malloc(len + 4);
	int rv;

	if (buf == NULL)
		return KC_ENOMEM;
	buf[0] = (uint8_t)len;
	buf[1] = (uint8_t)(len >> 8);
	buf[2] = (uint8_t)(len >> 16);
	buf[3] = (uint8_t)(len >> 24);
	protobuf_c_message_pack(m, buf + 4);
	rv = frame_write_all(fd, buf, len + 4);
	free(buf);
	return rv;
}

/* Reads exactly n bytes before the deadline (mono ms; 0 = none). */
static int
frame_read_all(int fd, uint8_t *p, size_t n, uint64_t deadline)
{
	while (n > 0) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		int wait = -1, r;
		ssize_t got;

		if (deadline != 0) {
			uint64_t now = kc_mono_ms();
			if (now >= deadline)
				return KC_ETIMEDOUT;
			wait = (int)(deadline - now);
		}
		r = poll(&pfd, 1, wait);
		if (r < 0 && errno == EINTR)
			continue;
		if (r == 0)
			return KC_ETIMEDOUT;
		got = read(fd, p, n);
		if (got < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (got <= 0)
			return KC_ECLOSED;
		p += got;
		n -= (size_t)got;
	}
	return 0;
}

int
sbx_frame_read(int fd, int timeout_ms, void **buf, size_t *len)
{
	uint64_t deadline =
	    timeout_ms < 0 ? 0 : kc_mono_ms() + (uint64_t)timeout_ms;
	uint8_t hdr[4];
	uint8_t *b;
	size_t n;
	int rv;

	if ((rv = frame_read_all(fd, hdr, 4, deadline)) != 0)
		return rv;
	n = (size_t)hdr[0] | (size_t)hdr[1] << 8 | (size_t)hdr[2] << 16 |
	    (size_t)hdr[3] << 24;
	if (n > SBX_FRAME_MAX)
		return kc_seterr(
		    KC_EPROTO, "frame of %zu bytes is too large", n);
	if ((b = malloc(n ? n : 1)) == NULL)
		return KC_ENOMEM;
	if ((rv = frame_read_all(fd, b, n, deadline)) != 0) {
		free(b);
		return rv;
	}
	*buf = b;
	*len = n;
	return 0;
}
