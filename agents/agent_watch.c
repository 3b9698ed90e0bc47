/*
 * agent_watch.c - control events for a worker: a thread subscribed to the
 * orchestrator's events raises a flag when the task of the job in flight is
 * cancelled or the service shuts down. See agent.h.
 *
 * PUB/SUB may drop the event; then the job runs to its end or deadline, as
 * it would without a watcher, and the orchestrator drops the late result.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "bus.h"
#include "kc_err.h"
#include "kc_log.h"

#define AGENT_WATCH_POLL_MS 200

struct agent_watch {
	bus_sub *sub;
	pthread_t thread;
	pthread_mutex_t mu;
	char task_id[128]; /* the job in flight's task; "" when idle */
	atomic_int flag;
	atomic_int stop;
};

/* "task.<id>.task_cancelled" for the current task, or "system.shutdown". */
static void
agent_watch_topic(agent_watch *w, const char *topic)
{
	static const char suffix[] = ".task_cancelled";
	size_t n = strlen(topic), s = sizeof(suffix) - 1, idlen;

	if (strcmp(topic, "system.shutdown") == 0) {
		atomic_store(&w->flag, 1);
		return;
	}
	if (strncmp(topic, "task.", 5) != 0 || n <= 5 + s ||
	    strcmp(topic + n - s, suffix) != 0)
		return;
	idlen = n - 5 - s;
	pthread_mutex_lock(&w->mu);
	if (w->task_id[0] != '\0' && strlen(w->task_id) == idlen &&
	    strncmp(topic + 5, w->task_id, idlen) == 0) {
		atomic_store(&w->flag, 1);
		KC_INFO("task %s was cancelled: stopping its job", w->task_id);
	}
	pthread_mutex_unlock(&w->mu);
}

static void *
agent_watch_main(void *arg)
{
	agent_watch *w = arg;
	char *topic;
	void *data;
	size_t len;

	while (!atomic_load(&w->stop)) {
		if (bus_sub_recv(
		        w->sub, AGENT_WATCH_POLL_MS, &topic, &data, &len) != 0)
			continue;
		agent_watch_topic(w, topic);
		free(topic);
		free(data);
	}
	return NULL;
}

int
agent_watch_open(agent_watch **out, const char *events_url)
{
	agent_watch *w;
	int rv;

	if ((w = calloc(1, sizeof(*w))) == NULL)
		return KC_ENOMEM;
	pthread_mutex_init(&w->mu, NULL);
	if ((rv = bus_sub_open(&w->sub, events_url, 0)) != 0 ||
	    (rv = bus_sub_subscribe(w->sub, "task.")) != 0 ||
	    (rv = bus_sub_subscribe(w->sub, "system.shutdown")) != 0)
		goto fail;
	if (pthread_create(&w->thread, NULL, agent_watch_main, w) != 0) {
		rv = kc_seterr(KC_EINTERNAL, "cannot start the events thread");
		goto fail;
	}
	*out = w;
	return 0;
fail:
	if (w->sub != NULL)
		bus_sub_close(w->sub);
	pthread_mutex_destroy(&w->mu);
	free(w);
	return rv;
}

void
agent_watch_close(agent_watch *w)
{
	if (w == NULL)
		return;
	atomic_store(&w->stop, 1);
	pthread_join(w->thread, NULL);
	bus_sub_close(w->sub);
	pthread_mutex_destroy(&w->mu);
	free(w);
}

void
agent_watch_begin(agent_watch *w, const char *task_id)
{
	pthread_mutex_lock(&w->mu);
	kc_strlcpy(w->task_id, task_id ? task_id : "", sizeof(w->task_id));
	atomic_store(&w->flag, 0);
	pthread_mutex_unlock(&w->mu);
}

void
agent_watch_end(agent_watch *w)
{
	pthread_mutex_lock(&w->mu);
	w->task_id[0] = '\0';
	atomic_store(&w->flag, 0);
	pthread_mutex_unlock(&w->mu);
}

const atomic_int *
agent_watch_flag(agent_watch *w)
{
	return &w->flag;
}
