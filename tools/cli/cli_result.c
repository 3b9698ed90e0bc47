/*
 * cli_result.c - `kclaw result TASK_ID`: the best kernel, its plan, its
 * measurements and the whole history.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_args.h"
#include "client.h"
#include "export/export.h"
#include "kc_err.h"
#include "kc_util.h"
#include "pbjson.h"

static void
result_usage(FILE *f)
{
	fprintf(f,
	    "usage: kclaw result TASK_ID [--json] [--out DIR] [--home DIR]\n\n"
	    "Shows the task's best kernel (source, launch plan, timing) and "
	    "every candidate\nit tried. --json prints the ResultResponse.\n\n"
	    "--out DIR writes the best kernel for use elsewhere:\n"
	    "  kernel.cu, plan.json   the candidate (`kclaw eval TASK DIR` "
	    "accepts it)\n"
	    "  result.json            its measurements, and the tensors "
	    "(shapes, dtypes)\n"
	    "                         it was verified for\n"
	    "  history.json           every candidate: status, time, "
	    "speedup, round, origin\n"
	    "  launcher.h, launcher.c a standalone C launcher (NVRTC, CUDA "
	    "driver API,\n"
	    "                         cuBLASLt), main.c an example\n"
	    "  model_new.py           ModelNew, a PyTorch module with the "
	    "task's interface\n"
	    "  README.md              how to build and use them\n\n"
	    "Exit codes: 0 ok, 1 the task has no correct kernel (yet), 3 no "
	    "such task.\n");
}

static const char *
result_status(const Kclaw__EvalResult *e)
{
	const ProtobufCEnumValue *v;

	if (e == NULL)
		return "-";
	v = protobuf_c_enum_descriptor_get_value(
	    &kclaw__eval_status__descriptor, e->status);
	return v ? v->name : "?";
}

int
cli_result(int argc, char **argv)
{
	const char *task = NULL, *out = NULL;
	bool json = false;
	Kclaw__ResultRequest req = KCLAW__RESULT_REQUEST__INIT;
	Kclaw__ResultResponse *r;
	kc_config cfg;
	orch_client c;
	int rv, code = CLI_OK;
	const cli_opt opts[] = {{"--json", &json, NULL}, {"--out", NULL, &out}};

	if ((rv = cli_args(argc, argv, opts, CLI_NOPTS(opts), &task,
	         "which task? (`kclaw status` lists them)", result_usage)) !=
	    CLI_ARGS_GO)
		return rv;
	if ((rv = cli_config(argc, argv, &cfg)) != 0 ||
	    (rv = orch_client_open(&c, &cfg)) != 0)
		return cli_fail("result", rv);
	req.task_id = (char *)task;
	rv = orch_client_call(&c, "Result", &req.base,
	    &kclaw__result_response__descriptor, (ProtobufCMessage **)&r);
	if (rv == 0 && r->task != NULL)
		cli_task_why_fill(&c, r->task);
	orch_client_close(&c);
	if (rv != 0)
		return cli_fail("result", rv);
	if (json) {
		char *s = kc_pb_to_json_public_text(&r->base);
		cli_json_print(stdout, s);
		free(s);
	} else {
		const Kclaw__TaskRecord *t = r->task;
		printf("task %s (%s): %s, round %u, reference %.4f ms\n", t->id,
		    t->spec ? t->spec->name : "", t->state, t->round,
		    t->reference_ms);
		if (t->error && *t->error)
			printf("  why: %s\n  events: kclaw watch %s --log "
			       "--no-follow\n",
			    t->error, t->id);
		if (r->best) {
			const Kclaw__Candidate *b = r->best->candidate;
			const Kclaw__Timing *tm =
			    r->best->eval ? r->best->eval->timing : NULL;
			printf("\nbest %s (%s%s%s): median %.4f ms, min %.4f, "
			       "stddev %.4f, %.3fx\n",
			    b->id, b->origin, *b->method ? ", " : "", b->method,
			    tm ? tm->median_ms : 0, tm ? tm->min_ms : 0,
			    tm ? tm->stddev_ms : 0,
			    tm && tm->median_ms > 0 && t->reference_ms > 0
			        ? t->reference_ms / tm->median_ms
			        : 0);
			printf("\nplan: %s\n\n%s\n", b->plan_json, b->source);
		}
		printf("\n%-24s %-10s %-24s %-14s %10s  %s\n", "CANDIDATE",
		    "ORIGIN", "PARENT", "STATUS", "MEDIAN ms", "METHOD");
		for (size_t i = 0; i < r->n_history; i++) {
			const Kclaw__CandidateRecord *h = r->history[i];
			printf("%-24s %-10s %-24s %-14s %10.4f  %s\n",
			    h->candidate->id, h->candidate->origin,
			    *h->candidate->parent_id ? h->candidate->parent_id
			                             : "-",
			    result_status(h->eval),
			    h->eval && h->eval->timing
			        ? h->eval->timing->median_ms
			        : 0,
			    h->candidate->method);
		}
	}
	if (out && r->best && (rv = kc_export_result(out, r)) != 0)
		code = cli_fail("result", rv);
	else if (out && r->best)
		fprintf(stderr,
		    "kclaw result: wrote %s/{kernel.cu, plan.json, "
		    "result.json, history.json, launcher.h, launcher.c, "
		    "main.c, model_new.py, README.md}\n",
		    out);
	else if (r->best == NULL)
		code = CLI_FAIL;
	if (out && r->best == NULL)
		fprintf(stderr,
		    "kclaw result: task %s has no correct kernel "
		    "to write\n",
		    task);
	kclaw__result_response__free_unpacked(r, NULL);
	return code;
}
