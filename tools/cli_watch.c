/*
 * cli_watch.c - `kclaw watch [TASK_ID]`: the event log, then live events.
 *
 * It first reads what the log holds (Events since --since), then follows
 * the PUB stream; a gap in the sequence numbers (PUB drops messages) is
 * filled from the log, so no event is missed or shown twice. It follows
 * every event (filtering here) so that gaps show for one task too.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "client.h"
#include "kc_err.h"
#include "pbjson.h"

static volatile sig_atomic_t watch_stop;

static void
watch_on_signal(int sig)
{
	(void)sig;
	watch_stop = 1;
}

static void
watch_usage(FILE *f)
{
	fprintf(f,
	    "usage: kclaw watch [TASK_ID] [--since SEQ] [--json] [--no-follow]"
	    " [--home DIR]\n\n"
	    "Shows the events of one task or of all, from the event log and "
	    "then live,\nuntil the task ends (or Ctrl-C). --json prints one "
	    "JSON object per line\n(kclaw.Event). --no-follow stops after the "
	    "log.\n");
}

static const char *
watch_kind(Kclaw__EventKind k)
{
	const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(
	    &kclaw__event_kind__descriptor, k);

	return v ? v->name : "?";
}

static void
watch_print(const Kclaw__Event *ev, bool json)
{
	if (json) {
		char *s = kc_pb_to_json_text(&ev->base);
		printf("%s\n", s ? s : "null");
		free(s);
	} else {
		time_t t = (time_t)(ev->time_unix_ms / 1000);
		struct tm tm;
		gmtime_r(&t, &tm);
		printf("%6llu %02d:%02d:%02d %-16s %-17s %-12s r%-3u %s\n",
		    (unsigned long long)ev->seq, tm.tm_hour, tm.tm_min,
		    tm.tm_sec, *ev->task_id ? ev->task_id : ev->process,
		    watch_kind(ev->kind), ev->state, ev->round, ev->detail);
	}
	fflush(stdout);
}

static bool
watch_ends(const Kclaw__Event *ev, const char *task)
{
	return task && strcmp(ev->task_id, task) == 0 &&
	    (ev->kind == KCLAW__EVENT_KIND__TASK_FINISHED ||
	        ev->kind == KCLAW__EVENT_KIND__TASK_CANCELLED);
}

/* Prints the log's events after *seq; true when the task ended. */
static int
watch_catch_up(
    orch_client *c, const char *task, bool json, uint64_t *seq, bool *ended)
{
	for (;;) {
		Kclaw__EventsRequest req = KCLAW__EVENTS_REQUEST__INIT;
		Kclaw__EventsResponse *resp;
		int rv;
		req.since_seq = *seq;
		req.task_id = (char *)(task ? task : "");
		req.limit = 1000;
		if ((rv = orch_client_call(c, "Events", &req.base,
		         &kclaw__events_response__descriptor,
		         (ProtobufCMessage **)&resp)) != 0)
			return rv;
		for (size_t i = 0; i < resp->n_events; i++) {
			watch_print(resp->events[i], json);
			*ended |= watch_ends(resp->events[i], task);
		}
		if (resp->n_events)
			*seq = resp->events[resp->n_events - 1]->seq;
		if (resp->n_events < 1000 || *ended) {
			/* Nothing after the last shown event for this
			 * filter: continue from the log's end. */
			if (resp->last_seq > *seq)
				*seq = resp->last_seq;
			kclaw__events_response__free_unpacked(resp, NULL);
			return 0;
		}
		kclaw__events_response__free_unpacked(resp, NULL);
	}
}

int
cli_watch(int argc, char **argv)
{
	const char *task = NULL;
	bool json = false, follow = true, ended = false;
	uint64_t seq = 0;
	kc_config cfg;
	orch_client c;
	bus_sub *sub = NULL;
	int rv, code = CLI_OK;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--help") == 0 ||
		    strcmp(argv[i], "-h") == 0) {
			watch_usage(stdout);
			return CLI_OK;
		} else if (strcmp(argv[i], "--json") == 0) {
			json = true;
		} else if (strcmp(argv[i], "--no-follow") == 0) {
			follow = false;
		} else if (strcmp(argv[i], "--since") == 0 && i + 1 < argc) {
			seq = strtoull(argv[++i], NULL, 10);
		} else if (strcmp(argv[i], "--home") == 0 && i + 1 < argc) {
			i++;
		} else if (argv[i][0] != '-' && task == NULL) {
			task = argv[i];
		} else {
			fprintf(stderr,
			    "kclaw watch: unknown argument '%s'\n\n", argv[i]);
			watch_usage(stderr);
			return CLI_USAGE;
		}
	}
	if ((rv = cli_config(argc, argv, &cfg)) != 0 ||
	    (rv = orch_client_open(&c, &cfg)) != 0)
		return cli_fail("watch", rv);
	signal(SIGINT, watch_on_signal);
	signal(SIGTERM, watch_on_signal);
	/* Subscribe before reading the log so nothing falls in between; to
	 * everything, so that a gap in the sequence shows whatever the
	 * filter. */
	if (follow &&
	    ((rv = bus_sub_open(&sub, cfg.events_url, 0)) != 0 ||
	        (rv = bus_sub_subscribe(sub, "")) != 0)) {
		code = cli_fail("watch", rv);
		goto out;
	}
	if ((rv = watch_catch_up(&c, task, json, &seq, &ended)) != 0) {
		code = cli_fail("watch", rv);
		goto out;
	}
	while (follow && !ended && !watch_stop) {
		char *topic;
		void *data;
		size_t len;
		Kclaw__Event *ev;
		rv = bus_sub_recv(sub, 500, &topic, &data, &len);
		if (rv == KC_ETIMEDOUT)
			continue;
		if (rv != 0)
			break;
		ev = kclaw__event__unpack(NULL, len, data);
		free(topic);
		free(data);
		if (ev == NULL)
			continue;
		if (ev->seq > seq + 1) {
			/* A gap: PUB dropped some; the log has them. */
			kclaw__event__free_unpacked(ev, NULL);
			if ((rv = watch_catch_up(
			         &c, task, json, &seq, &ended)) != 0) {
				code = cli_fail("watch", rv);
				break;
			}
			continue;
		}
		if (ev->seq > seq) {
			if (task == NULL || strcmp(ev->task_id, task) == 0)
				watch_print(ev, json);
			seq = ev->seq;
			ended |= watch_ends(ev, task);
		}
		kclaw__event__free_unpacked(ev, NULL);
	}
out:
	bus_sub_close(sub);
	orch_client_close(&c);
	return code;
}
