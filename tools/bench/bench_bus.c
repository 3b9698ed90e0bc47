/*
 * bench_bus.c - figures for the bus: request/response round trips (the API
 * and work by pull) and event throughput, over ipc:// and tcp://127.0.0.1.
 * A program that prints figures, not a test: `kclaw-bench-bus [--json]`.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "bus.h"
#include "kc_err.h"
#include "kc_util.h"

static void
echo_cb(void *arg, bus_call *call)
{
	size_t len;
	const void *d = bus_call_data(call, &len);

	(void)arg;
	/* The echo server replies at once: it measures the bus alone. */
	bus_call_reply(call, d, len);
}

static int
cmpd(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Receives one event within ms; true if one came. */
static bool
recv_one(bus_sub *s, int ms)
{
	char *topic;
	void *data;
	size_t len;

	if (bus_sub_recv(s, ms, &topic, &data, &len) != 0)
		return false;
	free(topic);
	free(data);
	return true;
}

static void
bench_reqrep(
    const char *label, const char *url, size_t size, int n, bench_table *t)
{
	bus_server *srv;
	bus_client *cl;
	char *msg = calloc(1, size);
	double *lat = calloc((size_t)n, sizeof(double));

	if (bus_server_open(&srv, url, 8, 64u << 20, echo_cb, NULL) != 0 ||
	    bus_client_open(&cl, url, 64u << 20) != 0) {
		fprintf(stderr, "bench_bus: %s\n", kc_lasterr());
		exit(1);
	}
	for (int i = -50; i < n; i++) {
		void *rep;
		size_t rlen;
		uint64_t t0 = kc_mono_ns();
		if (bus_client_call(cl, msg, size, 5000, &rep, &rlen) != 0) {
			fprintf(stderr, "bench_bus: %s\n", kc_lasterr());
			exit(1);
		}
		free(rep);
		if (i >= 0)
			lat[i] = (double)(kc_mono_ns() - t0) / 1e3;
	}
	qsort(lat, (size_t)n, sizeof(double), cmpd);
	char name[128];
	snprintf(
	    name, sizeof(name), "bus %s round trip, %zu B, p50", label, size);
	/* Small messages are the API and events; 1 MiB is a large request. */
	double target = size <= 4096 ? 500 : 5000;
	char tt[32];
	snprintf(tt, sizeof(tt), "< %.0f us", target);
	bench_row(t, "bus", name, lat[n / 2], "us", tt, lat[n / 2] < target);
	snprintf(
	    name, sizeof(name), "bus %s round trip, %zu B, p99", label, size);
	bench_row(t, "bus", name, lat[n * 99 / 100], "us", "", -1);
	bus_client_close(cl);
	bus_server_close(srv);
	free(msg);
	free(lat);
}

static void
bench_pubsub(const char *label, const char *url, bench_table *t)
{
	bus_pub *p;
	bus_sub *s;
	char ev[200] = {0};
	int sent = 0, got = 0;

	if (bus_pub_open(&p, url) != 0 || bus_sub_open(&s, url, 0) != 0 ||
	    bus_sub_subscribe(s, "") != 0) {
		fprintf(stderr, "bench_bus: %s\n", kc_lasterr());
		exit(1);
	}
	/* Wait for the subscription to reach the publisher. */
	do
		bus_pub_send(p, "warm", ev, sizeof(ev));
	while (!recv_one(s, 20));
	while (recv_one(s, 50))
		;
	uint64_t t0 = kc_mono_ns();
	/* Paced in bursts the subscriber can keep up with, as real event
	 * streams are: what is measured is delivered events per second. */
	for (int burst = 0; burst < 200; burst++) {
		for (int i = 0; i < 100; i++, sent++)
			bus_pub_send(p, "task.x.state", ev, sizeof(ev));
		while (recv_one(s, got + 50 < sent ? 100 : 1))
			got++;
	}
	double secs = (double)(kc_mono_ns() - t0) / 1e9;
	char name[128];
	snprintf(name, sizeof(name), "events %s delivered (200 B)", label);
	bench_row(t, "bus", name, got / secs, "events/s", ">= 20000/s",
	    got / secs >= 20000);
	snprintf(name, sizeof(name), "events %s lost under burst", label);
	bench_row(t, "bus", name, 100.0 * (sent - got) / sent, "%",
	    "recovered from log", -1);
	bus_sub_close(s);
	bus_pub_close(p);
}

int
main(int argc, char **argv)
{
	char dir[] = "/tmp/kc-bench-bus-XXXXXX", url[256];
	bench_table t;

	bench_init(&t, argc, argv);
	if (mkdtemp(dir) == NULL)
		return 1;
	snprintf(url, sizeof(url), "ipc://%s/a.ipc", dir);
	bench_reqrep("ipc", url, 256, 5000, &t);
	snprintf(url, sizeof(url), "ipc://%s/b.ipc", dir);
	bench_reqrep("ipc", url, 1 << 20, 200, &t);
	snprintf(
	    url, sizeof(url), "tcp://127.0.0.1:%d", 30000 + getpid() % 20000);
	bench_reqrep("tcp", url, 256, 5000, &t);
	snprintf(url, sizeof(url), "ipc://%s/e.ipc", dir);
	bench_pubsub("ipc", url, &t);
	snprintf(url, sizeof(url), "rm -rf %s", dir);
	if (system(url) != 0)
		return 1;
	bench_print(&t);
	return 0;
}
