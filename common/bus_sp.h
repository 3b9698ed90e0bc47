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
/* The header at p (avail bytes): its size with the body's length in *len,
 * 0 when it is not all there, -1 when it is not one. */
int bus_sp_frame_len(bool tcp, const uint8_t *p, size_t avail, uint64_t *len);

/* SP's protocol numbers, and the 8-byte header each side sends first. */
enum {
	BUS_SP_REQ = 0x30,
	BUS_SP_REP = 0x31,
	BUS_SP_PUB = 0x20,
	BUS_SP_SUB = 0x21
};
/* Sends our header on a fresh connection (it takes 8 bytes whole). */
bool bus_sp_hello(int fd, uint8_t proto);
/* Whether hdr is a peer's header for protocol proto. */
bool bus_sp_is_peer(const uint8_t hdr[8], uint8_t proto);

/* The redial backoff of kclaw's own peers, as bus_limits sets NNG's: the
 * next try at *retry_at, then twice as long, 20 ms up to 1 s. */
#define BUS_SP_RETRY_MIN_MS 20
#define BUS_SP_RETRY_MAX_MS 1000
void bus_sp_backoff(int *backoff_ms, uint64_t *retry_at);

/* bus.c's NNG helpers: an NNG error as kclaw's (said), a dial that NNG
 * retries, a socket's receive limit and redial backoff (20 ms to 1 s). */
int bus_err(int nrv, const char *what, const char *url);
int bus_dial(nng_socket sock, const char *url);
void bus_limits(nng_socket sock, size_t max_msg);

#endif
