/*
 * notify.c - sd_notify's protocol in a few lines: kclawd tells systemd it
 * is ready, and keeps its watchdog fed only while a Health call through
 * its own API listener is answered with every listener healthy. A wedged
 * loop or a lost listener thus stops the datagrams, and systemd restarts
 * kclawd after WatchdogSec.
 */
#include "notify.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "api.h"
#include "kc_err.h"
#include "kc_log.h"
#include "kc_util.h"

struct orch_notify {
	const kc_config *cfg;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	uint64_t every_ms;
	bool watchdog;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stop;
};

int
orch_notify_send(const char *path, const char *text)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	size_t n = strlen(path);
	socklen_t len;
	int fd, rv = 0;

	if (n == 0 || n >= sizeof(sa.sun_path))
		return kc_seterr(KC_EINVAL,
		    "NOTIFY_SOCKET=%s: not a socket "
		    "path",
		    path);
	memcpy(sa.sun_path, path, n);
	/* An abstract socket ("@name") has a NUL where the '@' is. */
	if (path[0] == '@')
		sa.sun_path[0] = '\0';
	len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
	if ((fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0)
		return kc_seterr(KC_EIO, "notify socket: %s", strerror(errno));
	if (sendto(fd, text, strlen(text), MSG_NOSIGNAL, (struct sockaddr *)&sa,
	        len) < 0)
		rv = kc_seterr(KC_EIO, "notify %s: %s", path, strerror(errno));
	close(fd);
	return rv;
}

/* Whether kclawd answers Health with every listener healthy. */
static bool
orch_notify_healthy(orch_notify *n, bus_client **c)
{
	Kclaw__HealthRequest req = KCLAW__HEALTH_REQUEST__INIT;
	Kclaw__HealthResponse *h = NULL;
	bool ok = true;

	if (*c == NULL && bus_client_open(c, n->cfg->api_url, 0) != 0) {
		kc_clearerr();
		return false;
	}
	if (kc_api_call(*c, "Health", &req.base, n->cfg->token,
	        (unsigned)(n->every_ms < 1000 ? 1000 : n->every_ms),
	        &kclaw__health_response__descriptor,
	        (ProtobufCMessage **)&h) != 0) {
		kc_clearerr();
		/* Dial afresh next time: the dialer may be stuck. */
		bus_client_close(*c);
		*c = NULL;
		return false;
	}
	for (size_t i = 0; i < h->n_listeners; i++)
		if (!h->listeners[i]->healthy)
			ok = false;
	kclaw__health_response__free_unpacked(h, NULL);
	return ok;
}

static void *
orch_notify_main(void *arg)
{
	orch_notify *n = arg;
	bus_client *c = NULL;
	bool ready = false;

	pthread_mutex_lock(&n->lock);
	while (!n->stop) {
		pthread_mutex_unlock(&n->lock);
		if (orch_notify_healthy(n, &c)) {
			if (!ready &&
			    orch_notify_send(n->path,
			        "READY=1\n"
			        "STATUS=serving") == 0)
				ready = true;
			if (n->watchdog)
				orch_notify_send(n->path, "WATCHDOG=1");
		}
		pthread_mutex_lock(&n->lock);
		if (!n->stop) {
			struct timespec ts;
			uint64_t ns;
			clock_gettime(CLOCK_MONOTONIC, &ts);
			ns = (uint64_t)ts.tv_nsec + n->every_ms * 1000000ull;
			ts.tv_sec += (time_t)(ns / 1000000000ull);
			ts.tv_nsec = (long)(ns % 1000000000ull);
			pthread_cond_timedwait(&n->cond, &n->lock, &ts);
		}
	}
	pthread_mutex_unlock(&n->lock);
	bus_client_close(c);
	return NULL;
}

int
orch_notify_start(orch_notify **out, const kc_config *cfg)
{
	const char *path = getenv("NOTIFY_SOCKET");
	const char *usec = getenv("WATCHDOG_USEC");
	const char *wpid = getenv("WATCHDOG_PID");
	pthread_condattr_t ca;
	orch_notify *n;

	*out = NULL;
	if (path == NULL || *path == '\0')
		return 0;
	if (strlen(path) >= sizeof(n->path))
		return kc_seterr(KC_EINVAL, "NOTIFY_SOCKET=%s: too long", path);
	if ((n = calloc(1, sizeof(*n))) == NULL)
		return KC_ENOMEM;
	n->cfg = cfg;
	kc_strlcpy(n->path, path, sizeof(n->path));
	n->every_ms = 1000;
	/* The watchdog is this process's when WATCHDOG_PID is unset or
	 * names it; pinged at half its period, as sd_watchdog_enabled says. */
	if (usec != NULL && strtoull(usec, NULL, 10) > 0 &&
	    (wpid == NULL || strtol(wpid, NULL, 10) == (long)getpid())) {
		n->watchdog = true;
		n->every_ms = strtoull(usec, NULL, 10) / 2000;
		if (n->every_ms < 10)
			n->every_ms = 10;
	}
	pthread_mutex_init(&n->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&n->cond, &ca);
	pthread_condattr_destroy(&ca);
	if (pthread_create(&n->thread, NULL, orch_notify_main, n) != 0) {
		pthread_cond_destroy(&n->cond);
		pthread_mutex_destroy(&n->lock);
		free(n);
		return kc_seterr(KC_EIO, "notify thread: %s", strerror(errno));
	}
	KC_INFO("systemd notify on %s%s", path,
	    n->watchdog ? " with the watchdog" : "");
	*out = n;
	return 0;
}

void
orch_notify_stop(orch_notify *n)
{
	if (n == NULL)
		return;
	pthread_mutex_lock(&n->lock);
	n->stop = true;
	pthread_cond_signal(&n->cond);
	pthread_mutex_unlock(&n->lock);
	pthread_join(n->thread, NULL);
	orch_notify_send(n->path, "STOPPING=1");
	pthread_cond_destroy(&n->cond);
	pthread_mutex_destroy(&n->lock);
	free(n);
}
