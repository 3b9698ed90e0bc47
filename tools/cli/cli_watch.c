/*
 * cli_watch.c - `kclaw watch [TASK_ID]`: a live view of the tasks, or the
 * event log then live events (--log, --json, or when stdout is not a
 * terminal).
 *
 * It first reads what the log holds (Events since --since), then follows
 * the PUB stream; a gap in the sequence numbers (PUB drops messages) is
 * filled from the log, so no event is missed or shown twice. It follows
 * every event (filtering here) so that gaps show for one task too.
 */
#include <signal.h>
#include <sys/ioctl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "client.h"
#include "kc_err.h"
#include "kc_util.h"
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
	    "usage: kclaw watch [TASK_ID] [--view|--log] [--since SEQ] [--json]"
	    " [--no-follow]\n                   [--home DIR]\n\n"
	    "On a terminal: a live view of one task or all (state, round and "
	    "budget bars,\nbase and best speedup, last evaluation, tokens, "
	    "process health), redrawn as\nevents arrive. --log (the default "
	    "when stdout is not a terminal) prints the\nevents instead, from "
	    "the event log and then live, until the task ends (or\nCtrl-C). "
	    "--json prints one JSON object per line (kclaw.Event) for other\n"
	    "programs. --no-follow stops after the log. Missed live events are "
	    "fetched\nfrom the event log by sequence number.\n");
}

static const char *
watch_kind(Kclaw__EventKind k)
{
	const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(
	    &kclaw__event_kind__descriptor, k);

	return v ? v->name : "?";
}

static struct watch_view *watch_view_on;
static void watch_view_note(struct watch_view *v, const Kclaw__Event *ev);

static void
watch_print(const Kclaw__Event *ev, bool json)
{
	if (watch_view_on != NULL) {
		watch_view_note(watch_view_on, ev);
		return;
	}
	if (json) {
		char *s = kc_pb_to_json_public_text(&ev->base);
		cli_json_print(stdout, s);
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

/* ----------------------------------------------------------- live view */

/* The last evaluation seen per task: the view's "last eval" column. */
struct watch_last {
	char task[40];
	Kclaw__EvalStatus status;
	double ms;
};

struct watch_view {
	struct watch_last last[256];
	size_t nlast;
	uint64_t seq;
	uint64_t drawn_ms;
	bool dirty;
};

static void
watch_view_note(struct watch_view *v, const Kclaw__Event *ev)
{
	v->dirty = true;
	if (ev->seq > v->seq)
		v->seq = ev->seq;
	if (ev->kind != KCLAW__EVENT_KIND__EVAL_FINISHED || !*ev->task_id)
		return;
	size_t i;
	for (i = 0; i < v->nlast; i++)
		if (strcmp(v->last[i].task, ev->task_id) == 0)
			break;
	if (i == v->nlast) {
		if (v->nlast == KC_ARRAY_LEN(v->last))
			return;
		snprintf(v->last[v->nlast++].task, sizeof(v->last[0].task),
		    "%s", ev->task_id);
	}
	v->last[i].status = ev->eval_status;
	v->last[i].ms = ev->value;
}

/* The terminal's width (80 when it does not say). */
static int
watch_columns(void)
{
	struct winsize ws;

	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
		return ws.ws_col;
	return 80;
}

/* "[#####-----]" for done out of total (total 0: unlimited). */
static void
watch_bar(char *buf, size_t n, double done, double total)
{
	enum { W = 10 };
	char bar[W + 1];
	int fill = total > 0 ? (int)(W * (done > total ? 1 : done / total)) : 0;

	for (int i = 0; i < W; i++)
		bar[i] = total <= 0 ? '.' : i < fill ? '#' : '-';
	bar[W] = '\0';
	snprintf(buf, n, "[%s]", bar);
}

static void
watch_view_draw(orch_client *c, struct watch_view *v, const char *task)
{
	Kclaw__ListRequest lr = KCLAW__LIST_REQUEST__INIT;
	Kclaw__HealthRequest hr = KCLAW__HEALTH_REQUEST__INIT;
	Kclaw__ListResponse *list = NULL;
	Kclaw__HealthResponse *health = NULL;
	unsigned running = 0, down = 0, restarts = 0;

	if (orch_client_call(c, "List", &lr.base,
	        &kclaw__list_response__descriptor,
	        (ProtobufCMessage **)&list) != 0 ||
	    orch_client_call(c, "Health", &hr.base,
	        &kclaw__health_response__descriptor,
	        (ProtobufCMessage **)&health) != 0) {
		printf(
		    "\033[H\033[2Jkclaw watch: %s (retrying)\n", kc_lasterr());
		fflush(stdout);
		goto out;
	}
	for (size_t i = 0; i < health->n_processes; i++) {
		const Kclaw__ProcessInfo *p = health->processes[i];
		if (strcmp(p->state, "running") == 0)
			running++;
		else
			down++;
		restarts += p->restarts;
	}
	printf("\033[H\033[2J");
	printf("kclaw watch  %u active / %u tasks  seq %llu  processes: %u "
	       "running, %u down, %u restarts  (Ctrl-C to quit)\n\n",
	    health->tasks_active, health->tasks_total,
	    (unsigned long long)health->last_seq, running, down, restarts);
	/* Fit the terminal: TOKENS and BASE only where there is room, the
	 * name cut short otherwise, the last column cut to what is left (a
	 * wrapped row breaks the view). */
	int cols = watch_columns();
	bool wide = cols >= 130;
	int lastw = cols - (wide ? 106 : 71) - 1;
	if (lastw < 8)
		lastw = 8;
	if (wide)
		printf("%-16s %-18s %-12s %-18s %-20s %7s %7s  %s\n", "TASK",
		    "NAME", "STATE", "ROUNDS", "TOKENS", "BASE", "BEST",
		    "LAST EVAL");
	else
		printf("%-16s %-12s %-12s %-18s %7s  %s\n", "TASK", "NAME",
		    "STATE", "ROUNDS", "BEST", "LAST EVAL");
	for (size_t i = 0; i < list->n_tasks; i++) {
		const Kclaw__TaskRecord *t = list->tasks[i];
		const Kclaw__Budget *b = t->spec ? t->spec->budget : NULL;
		char rb[16], tb[16], rounds[40], tokens[48], last[48] = "-";
		/* The budgets in effect (the orchestrator's defaults where
		 * the spec sets none); an older kclawd sends only the spec. */
		double rounds_max = t->max_rounds ? t->max_rounds
		    : b && b->rounds              ? b->rounds
		                                  : 0;
		double tokens_max = t->token_budget ? (double)t->token_budget
		    : b                             ? (double)b->tokens
		                                    : 0;
		if (task != NULL && strcmp(t->id, task) != 0)
			continue;
		watch_bar(rb, sizeof(rb), t->round, rounds_max);
		if (rounds_max > 0)
			snprintf(rounds, sizeof(rounds), "%s %u/%.0f", rb,
			    t->round, rounds_max);
		else
			snprintf(
			    rounds, sizeof(rounds), "%s %u/?", rb, t->round);
		watch_bar(tb, sizeof(tb), (double)t->tokens, tokens_max);
		if (tokens_max > 0)
			snprintf(tokens, sizeof(tokens), "%s %llu", tb,
			    (unsigned long long)t->tokens);
		else
			snprintf(tokens, sizeof(tokens), "%llu",
			    (unsigned long long)t->tokens);
		for (size_t k = 0; k < v->nlast; k++)
			if (strcmp(v->last[k].task, t->id) == 0) {
				const ProtobufCEnumValue *ev =
				    protobuf_c_enum_descriptor_get_value(
				        &kclaw__eval_status__descriptor,
				        v->last[k].status);
				/* A reused evaluation carries no status of
				 * its own: the candidate's earlier one. */
				const char *st = v->last[k].status ==
				        KCLAW__EVAL_STATUS__EVAL_STATUS_UNSPECIFIED
				    ? "reused"
				    : ev ? ev->name
				         : "?";
				if (v->last[k].ms > 0)
					snprintf(last, sizeof(last),
					    "%s %.4g ms", st, v->last[k].ms);
				else
					snprintf(last, sizeof(last), "%s", st);
			}
		char base[16] = "\u2013", best[16] = "\u2013";
		if (t->reference_ms > 0 && t->base_ms > 0)
			snprintf(base, sizeof(base), "%.2fx",
			    t->reference_ms / t->base_ms);
		if (t->reference_ms > 0 && t->best_ms > 0)
			snprintf(best, sizeof(best), "%.2fx",
			    t->reference_ms / t->best_ms);
		if (wide)
			printf(
			    "%-16.16s %-18.18s %-12.12s %-18s %-20s %7s %7s  "
			    "%.*s\n",
			    t->id,
			    t->spec && t->spec->name ? t->spec->name : "",
			    t->state, rounds, tokens, base, best, lastw, last);
		else
			printf("%-16.16s %-12.12s %-12.12s %-18s %7s  %.*s\n",
			    t->id,
			    t->spec && t->spec->name ? t->spec->name : "",
			    t->state, rounds, best, lastw, last);
		/* A job's model calls failing while it is retried: the
		 * agent's error on a row of its own, cut to the terminal. */
		if (t->last_agent_error && *t->last_agent_error)
			printf("  ! %.*s\n", cols > 5 ? cols - 5 : 8,
			    t->last_agent_error);
	}
	if (down > 0) {
		printf("\n");
		for (size_t i = 0; i < health->n_processes; i++) {
			const Kclaw__ProcessInfo *p = health->processes[i];
			if (strcmp(p->state, "running") != 0)
				printf("process %s: %s (restarts %u)\n",
				    p->name, p->state, p->restarts);
		}
	}
	fflush(stdout);
out:
	if (list)
		kclaw__list_response__free_unpacked(list, NULL);
	if (health)
		kclaw__health_response__free_unpacked(health, NULL);
	v->dirty = false;
	v->drawn_ms = kc_mono_ms();
}

int
cli_watch(int argc, char **argv)
{
	const char *task = NULL;
	bool json = false, follow = true, ended = false;
	uint64_t caught_ms = 0;
	int mode = 0; /* 1: view, -1: log, 0: by the terminal */
	struct watch_view *view = NULL;
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
			cli_json_stream();
		} else if (strcmp(argv[i], "--view") == 0) {
			mode = 1;
		} else if (strcmp(argv[i], "--log") == 0) {
			mode = -1;
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
	if (mode == 0)
		mode = !json && follow && isatty(STDOUT_FILENO) ? 1 : -1;
	if (mode == 1 && !json) {
		if ((view = calloc(1, sizeof(*view))) == NULL) {
			code = cli_fail("watch", KC_ENOMEM);
			goto out;
		}
		watch_view_on = view;
	}
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
	caught_ms = kc_mono_ms();
	while (follow && !ended && !watch_stop) {
		char *topic;
		void *data;
		size_t len;
		Kclaw__Event *ev;
		/* The view redraws at most 4 times a second, and once a
		 * second regardless (process health changes without events). */
		if (view != NULL &&
		    ((view->dirty && kc_mono_ms() - view->drawn_ms >= 250) ||
		        kc_mono_ms() - view->drawn_ms >= 1000))
			watch_view_draw(&c, view, task);
		rv = bus_sub_recv(sub, view ? 250 : 500, &topic, &data, &len);
		if (rv == KC_ETIMEDOUT) {
			/* Quiet: read the log again once a second. A SUB
			 * socket connects in the background, so an event
			 * published before it was connected (the task's last,
			 * say) would otherwise never arrive, and no later one
			 * would show the gap. */
			if (kc_mono_ms() - caught_ms >= 1000) {
				caught_ms = kc_mono_ms();
				if ((rv = watch_catch_up(
				         &c, task, json, &seq, &ended)) != 0) {
					code = cli_fail("watch", rv);
					break;
				}
			}
			continue;
		}
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
	if (view != NULL)
		watch_view_draw(&c, view, task); /* the final state */
out:
	watch_view_on = NULL;
	free(view);
	bus_sub_close(sub);
	orch_client_close(&c);
	return code;
}
