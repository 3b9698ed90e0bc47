/*
 * bus_sp.h - what kclaw's own SP peers share (bus_sub.c's SUB, bus_req.c's
 * REQ): an ipc:// or tcp:// address, a non-blocking connection to it, and
 * the frame header of each transport. Internal to common/.
 */
#ifndef KC_BUS_SP_H
#define KC_BUS_SP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <nng/nng.h>
#include <sys/un.h>

typedef struct {
	bool tcp;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char host[256], port[16];
} bus_sp_addr;

/* Parses an ipc:// or tcp://HOST:PORT url; 0 or KC_EINVAL (said why). */
int bus_sp_parse(bus_sp_addr *a, const char *url);
/*
 * Starts a non-blocking connection to a: 0 connected, 1 in progress (*fd
 * set either way; poll it for POLLOUT, then bus_sp_finished), -1 not
 * there (no descriptor).
 */
int bus_sp_connect(const bus_sp_addr *a, int *fd);
/* Whether a connection in progress on fd finished well. */
bool bus_sp_finished(int fd);
/* A frame's header for a body of len bytes: 9 bytes on ipc:// (a 1 then
 * the length), 8 on tcp://; returns its size. */
size_t bus_sp_frame_header(bool tcp, uint64_t len, uint8_t out[9]);

/* bus.c's NNG helpers: an NNG error as kclaw's (said), a dial that NNG
 * retries, a socket's receive limit and redial backoff (20 ms to 1 s). */
int bus_err(int nrv, const char *what, const char *url);
int bus_dial(nng_socket sock, const char *url);
void bus_limits(nng_socket sock, size_t max_msg);

#endif
