/*
 * cli_status.c - `kclaw status [TASK_ID] [--json]`: the deployment's
 * processes and tasks, or one task.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_args.h"
#include "client.h"
#include "kc_err.h"
#include "kc_util.h"
#include "pbjson.h"
#include "report.h"

/* Tasks of a list whose reason is read from the event log, at most (one
 * events query each). */
#define STATUS_WHY_MAX 20

static void
status_usage(FILE *f)
{
	fprintf(f,
	    "usage: kclaw status [TASK_ID] [--json] [--home DIR]\n\n"
	    "Shows the orchestrator, the processes `kclaw up` supervises and "
	    "the tasks\n(newest first), or one task in detail; a task that "
	    "ended says why (for a\nfailed job: which one, and what it "
	    "said), and the command that shows its\nevents. --json prints "
	    "one JSON document:\n{\"health\": HealthResponse, \"tasks\": "
	    "[TaskRecord]} or the TaskRecord (its error\nholds the reason in "
	    "full).\nExit codes: 0 ok, 3 no such task, 4 no orchestrator "
	    "running.\n");
}

/* "1.2345 ms", or "–" for what was never measured (0.0000 ms would read
 * as a measurement). */
static const char *
status_ms(double ms, char *buf, size_t n)
{
	if (ms > 0)
		snprintf(buf, n, "%.4f ms", ms);
	else
		snprintf(buf, n, "\u2013");
	return buf;
}

static double
status_speedup(const Kclaw__TaskRecord *t)
{
	return t->best_ms > 0 && t->reference_ms > 0
	    ? t->reference_ms / t->best_ms
	    : 0;
}

/* The task's reference check (TaskRecord.reference_check): what a
 * reference-only evaluation measured before any kernel, and above all the
 * outputs a constant could pass on. */
static void
status_refcheck(const Kclaw__ReferenceCheck *rc)
{
	if (rc == NULL)
		return;
	switch (rc->state) {
	case KCLAW__REFERENCE_CHECK_STATE__CHECK_PENDING:
		printf("  check      reference check pending (a reference-only "
		       "evaluation)\n");
		break;
	case KCLAW__REFERENCE_CHECK_STATE__CHECK_DONE:
		printf("  check      reference %.4f ms", rc->reference_ms);
		if (rc->torch_compile_ms > 0)
			printf(", torch.compile %.4f ms", rc->torch_compile_ms);
		printf("; outputs vary by %.3g between input sets\n",
		    rc->output_variation);
		break;
	case KCLAW__REFERENCE_CHECK_STATE__CHECK_FAILED: {
		const ProtobufCEnumValue *v =
		    protobuf_c_enum_descriptor_get_value(
		        &kclaw__eval_status__descriptor, rc->status);
		printf(
		    "  check      reference check failed (the task goes on)%s%s"
		    "%s%s\n",
		    v && rc->status ? ": " : "", v && rc->status ? v->name : "",
		    rc->message && *rc->message ? ": " : "",
		    rc->message ? rc->message : "");
		break;
	}
	default: break;
	}
	/* Each output's own figures (none from an older sandbox). */
	for (size_t i = 0; i < rc->n_output_variations; i++) {
		const Kclaw__OutputVariation *v = rc->output_variations[i];
		if (!v->measured)
			printf("  output     %s: variation not measured (one "
			       "input set)\n",
			    v->name);
		else
			printf(
			    "  output     %s: varies %.3g between input sets; "
			    "tolerance admits %.3g%s\n",
			    v->name, v->variation, v->admits,
			    v->degenerate ? " (degenerate)" : "");
	}
	if (rc->n_degenerate == 0)
		return;
	printf("  warning    degenerate outputs: ");
	for (size_t i = 0; i < rc->n_degenerate; i++) {
		const Kclaw__DegenerateOutput *d = rc->degenerate[i];
		if (d->variation_unknown)
			printf("%s%s (variation unknown: the sandbox reports "
			       "none per output; tolerance admits %.3g)",
			    i ? ", " : "", d->name, d->admits);
		else
			printf("%s%s (varies %.3g between input sets; "
			       "tolerance admits %.3g)",
			    i ? ", " : "", d->name, d->variation, d->admits);
	}
	printf(": a constant could pass; tighten the tolerance or widen the "
	       "inputs\n");
}

static void
status_task(const kc_config *cfg, const Kclaw__TaskRecord *t)
{
	printf("task %s (%s)\n", t->id,
	    t->spec && t->spec->name ? t->spec->name : "");
	printf("  state      %s\n", t->state);
	/* What the state is doing (IMPORTING: the files and bytes so far). */
	if (t->state_detail && *t->state_detail)
		printf("  detail     %s\n", t->state_detail);
	printf("  round      %u\n", t->round);
	char m1[32], m2[32];
	printf("  reference  %s\n", status_ms(t->reference_ms, m1, sizeof(m1)));
	printf("  base       %s  %s\n", *t->base_id ? t->base_id : "\u2013",
	    status_ms(t->base_ms, m1, sizeof(m1)));
	if (status_speedup(t) > 0)
		snprintf(m2, sizeof(m2), "%.3fx", status_speedup(t));
	else
		snprintf(m2, sizeof(m2), "\u2013");
	printf("  best       %s  %s  %s\n", *t->best_id ? t->best_id : "\u2013",
	    status_ms(t->best_ms, m1, sizeof(m1)), m2);
	printf("  tokens     %llu\n", (unsigned long long)t->tokens);
	status_refcheck(t->reference_check);
	if (t->n_usage) {
		printf("  usage\n");
		cli_usage_print(stdout, cfg, t->usage, t->n_usage, "    ");
	}
	/* A job whose model calls fail says so while it is retried, not
	 * only once its retries are spent. */
	if (t->last_agent_error && *t->last_agent_error) {
		uint64_t now = kc_now_ms();
		uint64_t at = t->last_agent_error_unix_ms;
		printf("  agent      %s", t->last_agent_error);
		if (at > 0 && now >= at)
			printf(" (%llu s ago)",
			    (unsigned long long)((now - at) / 1000));
		printf("\n");
	}
	if (t->error && *t->error) {
		printf("  why        %s\n", t->error);
		printf(
		    "  events     kclaw watch %s --log --no-follow\n", t->id);
	}
}

/*
 * The supervised processes, and for each one that crash-loops (or waits to
 * be restarted) why it died: the last error line of its log and where the
 * log is.
 */
static void
status_processes(const kc_config *cfg, const Kclaw__HealthResponse *h)
{
	size_t looping = 0;

	printf("\n%-24s %-8s %-13s %8s  %s\n", "PROCESS", "PID", "STATE",
	    "RESTARTS", "LAST ERROR");
	for (size_t i = 0; i < h->n_processes; i++) {
		const Kclaw__ProcessInfo *p = h->processes[i];
		bool down = strcmp(p->state, "running") != 0;
		printf("%-24s %-8u %-13s %8u  %s\n", p->name, p->pid, p->state,
		    p->restarts,
		    down && p->last_error && *p->last_error ? p->last_error
		                                            : "");
		looping += strcmp(p->state, "crash-looping") == 0;
	}
	for (size_t i = 0; i < h->n_processes; i++) {
		const Kclaw__ProcessInfo *p = h->processes[i];
		if (strcmp(p->state, "crash-looping") != 0)
			continue;
		printf(
		    "\nwarning: %s is crash-looping (restarted %u times)%s%s;"
		    " its log: %s/%s.log\n",
		    p->name, p->restarts,
		    p->last_error && *p->last_error ? ": " : "",
		    p->last_error ? p->last_error : "", cfg->run_dir, p->name);
	}
	if (looping)
		printf(
		    "`kclaw up --stop`, fix what the log says, then `kclaw up "
		    "--detach` again.\n");
}

/* The variation of item i of array name in o set to null (not known). */
static void
status_null_variation(cJSON *o, const char *name, int i)
{
	cJSON *a = cJSON_GetObjectItemCaseSensitive(o, name);
	cJSON *v = cJSON_IsArray(a) ? cJSON_GetArrayItem(a, i) : NULL;

	if (cJSON_IsObject(v))
		cJSON_ReplaceItemInObjectCaseSensitive(
		    v, "variation", cJSON_CreateNull());
}

/* In the reference check's JSON (o), a variation not known is null, not
 * 0: the smallest when not measured (pending, failed), an output's when
 * not measured, a degenerate one's from a sandbox that sent none. */
static void
status_refcheck_nulls(const Kclaw__ReferenceCheck *rc, cJSON *o)
{
	if (rc == NULL || !cJSON_IsObject(o))
		return;
	if (rc->state != KCLAW__REFERENCE_CHECK_STATE__CHECK_DONE)
		cJSON_ReplaceItemInObjectCaseSensitive(
		    o, "output_variation", cJSON_CreateNull());
	for (size_t i = 0; i < rc->n_output_variations; i++)
		if (!rc->output_variations[i]->measured)
			status_null_variation(o, "output_variations", (int)i);
	for (size_t i = 0; i < rc->n_degenerate; i++)
		if (rc->degenerate[i]->variation_unknown)
			status_null_variation(o, "degenerate", (int)i);
}

/* The TaskRecord as JSON, its usage priced (report.h's cli_usage_json). */
static cJSON *
status_task_obj(const kc_config *cfg, const Kclaw__TaskRecord *t)
{
	cJSON *o = kc_pb_to_json_public(&t->base);

	if (o == NULL)
		return NULL;
	status_refcheck_nulls(t->reference_check,
	    cJSON_GetObjectItemCaseSensitive(o, "reference_check"));
	cJSON_DeleteItemFromObjectCaseSensitive(o, "usage");
	if (cli_usage_json(o, cfg, t->usage, t->n_usage) != 0) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

static int
status_task_json(const kc_config *cfg, const Kclaw__TaskRecord *t)
{
	cJSON *o = status_task_obj(cfg, t);

	return o ? cli_json_print_obj(stdout, o) : KC_ENOMEM;
}

int
cli_status(int argc, char **argv)
{
	const char *task = NULL;
	bool json = false;
	kc_config cfg;
	orch_client c;
	int rv, code = CLI_OK;
	const cli_opt opts[] = {{"--json", &json, NULL}};

	if ((rv = cli_args(argc, argv, opts, CLI_NOPTS(opts), &task, NULL,
	         status_usage)) != CLI_ARGS_GO)
		return rv;
	if ((rv = cli_config(argc, argv, &cfg)) != 0 ||
	    (rv = orch_client_open(&c, &cfg)) != 0)
		return cli_fail("status", rv);
	if (task) {
		Kclaw__StatusRequest req = KCLAW__STATUS_REQUEST__INIT;
		Kclaw__StatusResponse *resp;
		req.task_id = (char *)task;
		rv = orch_client_call(&c, "Status", &req.base,
		    &kclaw__status_response__descriptor,
		    (ProtobufCMessage **)&resp);
		if (rv != 0) {
			code = cli_fail("status", rv);
		} else {
			cli_task_why_fill(&c, resp->task);
			if (json) {
				rv = status_task_json(&cfg, resp->task);
				if (rv != 0)
					code = cli_fail("status", rv);
			} else {
				status_task(&cfg, resp->task);
			}
			kclaw__status_response__free_unpacked(resp, NULL);
		}
	} else {
		Kclaw__HealthRequest hreq = KCLAW__HEALTH_REQUEST__INIT;
		Kclaw__ListRequest lreq = KCLAW__LIST_REQUEST__INIT;
		Kclaw__HealthResponse *h = NULL;
		Kclaw__ListResponse *l = NULL;
		bool failed = false;
		if ((rv = orch_client_call(&c, "Health", &hreq.base,
		         &kclaw__health_response__descriptor,
		         (ProtobufCMessage **)&h)) != 0 ||
		    (rv = orch_client_call(&c, "List", &lreq.base,
		         &kclaw__list_response__descriptor,
		         (ProtobufCMessage **)&l)) != 0) {
			code = cli_fail("status", rv);
		} else if (json) {
			for (size_t i = 0; i < l->n_tasks; i++)
				cli_task_why_fill(
				    i < STATUS_WHY_MAX ? &c : NULL,
				    l->tasks[i]);
			cJSON *root = cJSON_CreateObject(), *arr;
			cJSON_AddItemToObject(
			    root, "health", kc_pb_to_json_public(&h->base));
			arr = cJSON_AddArrayToObject(root, "tasks");
			for (size_t i = 0; i < l->n_tasks; i++)
				cJSON_AddItemToArray(
				    arr, status_task_obj(&cfg, l->tasks[i]));
			if ((rv = cli_json_print_obj(stdout, root)) != 0)
				code = cli_fail("status", rv);
		} else {
			printf("orchestrator %s: up %llu s, %u active of %u "
			       "tasks, last event %llu, %u workers waiting\n",
			    h->version,
			    (unsigned long long)(h->uptime_ms / 1000),
			    h->tasks_active, h->tasks_total,
			    (unsigned long long)h->last_seq,
			    h->workers_waiting);
			if (h->n_processes)
				status_processes(&cfg, h);
			printf("\n%-18s %-20s %-13s %5s %10s %8s  %s\n", "TASK",
			    "NAME", "STATE", "ROUND", "BEST ms", "SPEEDUP",
			    "WHY");
			for (size_t i = 0; i < l->n_tasks; i++) {
				Kclaw__TaskRecord *t = l->tasks[i];
				cli_task_why_fill(
				    i < STATUS_WHY_MAX ? &c : NULL, t);
				printf("%-18s %-20.20s %-13s %5u %10.4f "
				       "%7.3fx  %s\n",
				    t->id, t->spec ? t->spec->name : "",
				    t->state, t->round, t->best_ms,
				    status_speedup(t),
				    t->error ? t->error : "");
				failed |= strcmp(t->state, "FAILED") == 0;
			}
			if (failed)
				printf("\n`kclaw status TASK` shows one task, "
				       "`kclaw watch TASK --log --no-follow` "
				       "its events.\n");
		}
		if (h)
			kclaw__health_response__free_unpacked(h, NULL);
		if (l)
			kclaw__list_response__free_unpacked(l, NULL);
	}
	orch_client_close(&c);
	return code;
}
