/*
 * monitor.h - the web dashboard and the Prometheus metrics endpoint.
 *
 * A monitor is an event consumer like any other: it subscribes to the
 * orchestrator's events, catches up from the event log over the API at
 * start and on every sequence gap, aggregates metrics from the events, and
 * serves over NNG's HTTP server:
 *
 *   GET /                 the dashboard (HTML + JS embedded in the binary)
 *   GET /api/health       Health        GET /api/tasks       List
 *   GET /api/tasks/ID     Status        GET /api/result/ID   Result
 *   (task records carry "cost_usd" at config's prices, null if unpriced)
 *   GET /api/result/ID/kernel.cu, .../plan.json, .../kernel.tar
 *                         the best kernel (the tuned configuration where
 *                         it has tunables) as downloads
 *   GET /task/ID          the dashboard's page of one task (the same page)
 *   GET /api/events?since=N[&task=ID][&limit=N]              Events
 *   GET /metrics          Prometheus text format (docs/dashboard.md lists
 *                         the families)
 *   ws://HOST:PORT/ws     live events as JSON text, over NNG's WebSocket
 *                         transport (a PUB socket; browsers connect with
 *                         the subprotocol "pub.sp.nanomsg.org")
 *
 * HTTP callbacks run on NNG's threads and must not block: they queue the
 * request to the monitor's own thread, which makes the API call and
 * finishes the request.
 */
#ifndef KC_MONITOR_H
#define KC_MONITOR_H

#include "kc_config.h"

typedef struct mon mon;

typedef struct {
	const char *http_url;   /* e.g. "http://127.0.0.1:8470" */
	const char *api_url;    /* the orchestrator's API */
	const char *events_url; /* the orchestrator's PUB */
	const char *token;      /* API token, may be NULL */
	/* kclaw.json's prices, for the cost in /metrics and the API's
	 * "cost_usd"; may be NULL (no cost shown). */
	const kc_config *config;
} mon_opts;

int mon_start(mon **out, const mon_opts *opts);
void mon_stop(mon *m);

/* The metrics so far in Prometheus text format; malloc'd, caller frees. */
char *mon_metrics_text(mon *m);

#endif
