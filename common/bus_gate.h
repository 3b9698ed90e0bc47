/*
 * bus_gate.h - kclaw's own accept gate in front of every ipc:// and tcp://
 * listener of a bus_server or bus_pub (internal to common/bus.c, and
 * bus_sub.c asks bus_gate_handles; see docs/DESIGN.md "The accept gate").
 *
 * NNG 1.5.2 loses an ipc:// listener for good when a peer hangs up during
 * the SP handshake (nanomsg/nng#1518), and it buffers a whole message from
 * a peer that has proved nothing. So NNG listens only on a private ipc://
 * path (owner-only, in the public socket's folder or the process's run
 * folder), and one thread per gate owns the public socket: it accepts,
 * reads and checks the peer's 8-byte SP header itself under a short
 * deadline, answers with the server's header, and on a REP server also
 * reads the peer's first whole request and has it proved (its token)
 * before NNG sees anything. Only then does it connect to NNG's private
 * listener, hand it the peer's header and first request in one write, and
 * relay bytes both ways, re-framing tcp's 8-byte frame headers to ipc's 9.
 * The gate never closes a private connection before NNG's own header came
 * back, so NNG never sees a peer hang up during its handshake.
 *
 * Connections are counted in three classes, each capped in total and per
 * peer (a unix peer is its process, a tcp peer its address): not yet
 * through the SP header (or being refused), not yet proved, and relayed.
 * A newcomer is admitted by evicting the oldest of its own peer when that
 * peer is at its cap, else the oldest of the peer holding the most; the
 * relayed class evicts the newest of the biggest peer instead (its long-
 * lived members are workers) and refuses a peer over its own cap.
 */
#ifndef KC_BUS_GATE_H
#define KC_BUS_GATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bus.h"

typedef struct bus_gate bus_gate;

typedef struct bus_gate_opts {
	const char *url;    /* public: ipc://PATH or tcp://HOST:PORT */
	uint16_t proto;     /* the server's SP protocol (REP 0x31, PUB 0x20) */
	uint64_t max_msg;   /* largest frame a peer may send */
	bool first_msg;     /* a peer proves itself by a whole first request */
	bus_proof_fn proof; /* with first_msg; NULL: any request proves */
	void *proof_arg;
} bus_gate_opts;

/* Whether url is a transport the gate serves (ipc:// and tcp://). */
bool bus_gate_handles(const char *url);

/*
 * Binds the public socket of o->url and picks the private path; *priv
 * (n bytes) gets the ipc:// URL NNG must listen on before bus_gate_start.
 */
int bus_gate_open(bus_gate **out, const bus_gate_opts *o, char *priv, size_t n);
/* Starts accepting (after NNG listens on the private URL). */
int bus_gate_start(bus_gate *g);
/* Stops the thread, closes every connection, unlinks both paths. */
void bus_gate_close(bus_gate *g);

/* Limits; a zero field keeps the current value. */
typedef struct bus_gate_limits {
	unsigned max_relayed, relayed_per_peer;
	unsigned max_pre, pre_per_peer;
	unsigned max_new, new_per_peer;
	uint64_t new_bytes; /* first requests buffered at once, in bytes */
	int pre_ms, new_ms;
} bus_gate_limits;
void bus_gate_set_limits(bus_gate *g, const bus_gate_limits *l);

void bus_gate_stats(bus_gate *g, bus_listener_stats *st);

#endif
