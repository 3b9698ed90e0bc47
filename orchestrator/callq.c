/*
 * callq.c - requests served off the loop (callq.h).
 */
#include "callq.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

#include "kc_err.h"

#define CALLQ_MAX_THREADS 16

struct callq_item {
	bus_call *call;
	struct callq_item *next;
};

struct orch_callq {
	orch_callq_ops ops;
	unsigned max, nq;
	int tick_ms;
	pthread_mutex_t mtx;
	pthread_cond_t cv;
	struct callq_item *head, *tail;
	bool stopping;
	pthread_t threads[CALLQ_MAX_THREADS];
	unsigned nthreads;
};

static void *
callq_thread(void *arg)
{
	orch_callq *q = arg;

	for (;;) {
		struct callq_item *it;
		struct timespec ts;

		pthread_mutex_lock(&q->mtx);
		while (q->head == NULL && !q->stopping) {
			if (q->tick_ms <= 0) {
				pthread_cond_wait(&q->cv, &q->mtx);
				continue;
			}
			clock_gettime(CLOCK_MONOTONIC, &ts);
			ts.tv_sec += q->tick_ms / 1000;
			ts.tv_nsec += (long)(q->tick_ms % 1000) * 1000000L;
			if (ts.tv_nsec >= 1000000000L) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000L;
			}
			pthread_cond_timedwait(&q->cv, &q->mtx, &ts);
			break; /* the tick is due */
		}
		if (q->stopping) {
			pthread_mutex_unlock(&q->mtx);
			return NULL;
		}
		it = q->head;
		if (it != NULL) {
			if ((q->head = it->next) == NULL)
				q->tail = NULL;
			q->nq--;
		}
		pthread_mutex_unlock(&q->mtx);
		if (it != NULL) {
			q->ops.serve(q->ops.arg, it->call);
			free(it);
		}
		if (q->tick_ms > 0 && q->ops.tick != NULL)
			q->ops.tick(q->ops.arg);
	}
}

int
orch_callq_open(orch_callq **out, const char *what, unsigned nthreads,
    unsigned max, int tick_ms, const orch_callq_ops *ops)
{
	pthread_condattr_t ca;
	orch_callq *q;

	if (nthreads == 0 || nthreads > CALLQ_MAX_THREADS)
		return kc_seterr(KC_EINVAL, "%s: %u threads asked (1 to %d)",
		    what, nthreads, CALLQ_MAX_THREADS);
	if ((q = calloc(1, sizeof(*q))) == NULL)
		return KC_ENOMEM;
	q->ops = *ops;
	q->max = max;
	q->tick_ms = tick_ms;
	pthread_mutex_init(&q->mtx, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&q->cv, &ca);
	pthread_condattr_destroy(&ca);
	for (unsigned i = 0; i < nthreads; i++) {
		if (pthread_create(&q->threads[i], NULL, callq_thread, q) !=
		    0) {
			orch_callq_close(q);
			return kc_seterr(
			    KC_ENOMEM, "%s: cannot start a thread", what);
		}
		q->nthreads++;
	}
	*out = q;
	return 0;
}

void
orch_callq_post(orch_callq *q, bus_call *call)
{
	struct callq_item *it = NULL;

	pthread_mutex_lock(&q->mtx);
	if (!q->stopping && q->nq < q->max &&
	    (it = malloc(sizeof(*it))) != NULL) {
		it->call = call;
		it->next = NULL;
		if (q->tail)
			q->tail->next = it;
		else
			q->head = it;
		q->tail = it;
		q->nq++;
		pthread_cond_signal(&q->cv);
	}
	pthread_mutex_unlock(&q->mtx);
	/* Full: the client's call times out and it asks again. */
	if (it == NULL)
		bus_call_drop(call);
}

void
orch_callq_stop(orch_callq *q)
{
	struct callq_item *it, *next;

	if (q == NULL)
		return;
	pthread_mutex_lock(&q->mtx);
	q->stopping = true;
	pthread_cond_broadcast(&q->cv);
	it = q->head;
	q->head = q->tail = NULL;
	q->nq = 0;
	pthread_mutex_unlock(&q->mtx);
	for (unsigned i = 0; i < q->nthreads; i++)
		pthread_join(q->threads[i], NULL);
	q->nthreads = 0;
	for (; it; it = next) {
		next = it->next;
		bus_call_drop(it->call);
		free(it);
	}
}

void
orch_callq_close(orch_callq *q)
{
	if (q == NULL)
		return;
	orch_callq_stop(q);
	pthread_mutex_destroy(&q->mtx);
	pthread_cond_destroy(&q->cv);
	free(q);
}
