/*
 * callq.h - requests served off the loop: a bounded queue of held bus
 * calls and the threads that take them (the Blob rpc's and the uploads').
 *
 * orch_callq_post never blocks: a call that finds the queue full (or the
 * queue stopping) is dropped, and its client's call times out and asks
 * again. Each thread takes one call at a time and hands it to `serve`,
 * which must reply to it or drop it. With tick_ms > 0, `tick` runs after
 * every call and at least every tick_ms while the queue is idle (on one
 * thread only when there is one thread: the uploads' idle timeout).
 */
#ifndef ORCH_CALLQ_H
#define ORCH_CALLQ_H

#include "bus.h"

typedef struct orch_callq orch_callq;

typedef struct orch_callq_ops {
	void (*serve)(void *arg, bus_call *call);
	void (*tick)(void *arg); /* may be NULL */
	void *arg;
} orch_callq_ops;

/* Starts nthreads threads; at most max calls wait. `what` names the
 * queue in errors. */
int orch_callq_open(orch_callq **out, const char *what, unsigned nthreads,
    unsigned max, int tick_ms, const orch_callq_ops *ops);
void orch_callq_post(orch_callq *q, bus_call *call);
/* Stops the threads (a call being served is finished) and drops the
 * waiting calls; safe to call twice. */
void orch_callq_stop(orch_callq *q);
void orch_callq_close(orch_callq *q);

#endif
