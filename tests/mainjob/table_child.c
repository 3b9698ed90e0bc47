/*
 * table_child.c - a sandbox child whose "GPU" answers from a table: the
 * test double at the process boundary (gpu-sandbox's backend seam, run by
 * the real kclaw-sandbox with --child). The table, named by
 * $MAINJOB_TABLE, has one line per kernel source:
 *
 *   <sha256 of the source without surrounding white space> <STATUS> <ms>
 *
 * STATUS is an EvalStatus name (OK, COMPILE_ERROR, WRONG_RESULT, ...); ms
 * the median time of an OK kernel. The task's reference is looked up the
 * same way for the baseline (a `tensors` reference gives its recorded
 * baseline_ms), so speedups follow from the table alone. A
 * source missing from the table is INTERNAL_ERROR (the sandbox's own
 * failure), which a test notices as retried jobs. A profile, when asked
 * for, reports a memory-bound kernel under the real sandbox's metric
 * names, so the retrieval the recordings were written for (no profile:
 * docs/mainjob.md) changes in CI as it would on a GPU. A reference-only
 * request (the orchestrator's reference check of a task) is OK with the
 * reference's time as its baseline and outputs that vary (0.5 between input
 * sets), as the shipped examples' do.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kc_err.h"
#include "kc_util.h"
#include "sandbox.h"
#include "spec_check.h"

typedef struct {
	char key[65];
	Kclaw__EvalStatus status;
	double ms;
} tc_entry;

typedef struct {
	tc_entry *v;
	size_t n;
} tc_table;

static Kclaw__EvalStatus
tc_status(const char *name)
{
	const ProtobufCEnumValue *v =
	    protobuf_c_enum_descriptor_get_value_by_name(
	        &kclaw__eval_status__descriptor, name);

	return v ? (Kclaw__EvalStatus)v->value
	         : KCLAW__EVAL_STATUS__EVAL_STATUS_UNSPECIFIED;
}

static int
tc_init(void **state, const sbx_child_config *cfg, Kclaw__EvalResult *ready)
{
	const char *path = getenv("MAINJOB_TABLE");
	tc_table *t;
	FILE *f;
	char key[65], status[64];
	double ms;

	(void)cfg;
	if ((t = calloc(1, sizeof(*t))) == NULL)
		return KC_ENOMEM;
	*state = t;
	if (path == NULL || (f = fopen(path, "r")) == NULL)
		return kc_seterr(KC_ENODEV, "table child: no $MAINJOB_TABLE");
	while (fscanf(f, "%64s %63s %lf", key, status, &ms) == 3) {
		tc_entry *nv = realloc(t->v, (t->n + 1) * sizeof(*nv));
		if (nv == NULL)
			break;
		t->v = nv;
		snprintf(t->v[t->n].key, sizeof(t->v[t->n].key), "%s", key);
		t->v[t->n].status = tc_status(status);
		t->v[t->n].ms = ms;
		t->n++;
	}
	fclose(f);
	sbx_result_set(&ready->device_name, "table GPU");
	sbx_result_set(&ready->arch, "sm_90");
	return 0;
}

static const tc_entry *
tc_find(const tc_table *t, const char *src)
{
	size_t len;
	char hex[65];

	if (src == NULL)
		return NULL;
	while (isspace((unsigned char)*src))
		src++;
	for (len = strlen(src); len > 0 && isspace((unsigned char)src[len - 1]);
	     len--)
		;
	kc_sha256_hex(src, len, hex);
	for (size_t i = 0; i < t->n; i++)
		if (strcmp(t->v[i].key, hex) == 0)
			return &t->v[i];
	return NULL;
}

static Kclaw__Timing *
tc_timing(double ms)
{
	Kclaw__Timing *t = malloc(sizeof(*t));

	if (t != NULL) {
		kclaw__timing__init(t);
		t->median_ms = t->mean_ms = t->min_ms = t->max_ms = ms;
		t->iterations = 50;
		t->l2_flushed = true;
	}
	return t;
}

static void
tc_evaluate(void *state, const Kclaw__EvalRequest *req, Kclaw__EvalResult *res,
    int *fatal)
{
	const tc_table *t = state;
	const Kclaw__TaskSpec *task = req->task;
	const tc_entry *e =
	    tc_find(t, req->candidate ? req->candidate->source : NULL);
	const tc_entry *ref = NULL;
	double ref_ms = 0;

	(void)fatal;
	if (task && task->reference && task->reference->cuda)
		ref = tc_find(t, task->reference->cuda->source);
	if (ref)
		ref_ms = ref->ms;
	else if (task && task->reference)
		ref_ms = task->reference->baseline_ms;
	if (req->options && req->options->reference_only) {
		if (ref_ms > 0) {
			res->baseline = tc_timing(ref_ms);
			res->reference_ms = ref_ms;
		}
		res->output_variation = 0.5;
		for (size_t i = 0; task && i < task->n_tensors; i++)
			if (task->tensors[i]->kind ==
			    KCLAW__TENSOR_KIND__OUTPUT)
				kc_result_add_variation(res,
				    task->tensors[i]->name, 1, 0.5,
				    task->tolerance);
		sbx_result_status(res, KCLAW__EVAL_STATUS__OK,
		    "reference only (table): baseline %.4f ms; outputs change "
		    "by 0.5 (relative) between two input sets of one "
		    "distribution",
		    ref_ms);
		return;
	}
	if (e == NULL) {
		sbx_result_status(res, KCLAW__EVAL_STATUS__INTERNAL_ERROR,
		    "table child: this source is not in the table");
		return;
	}
	switch (e->status) {
	case KCLAW__EVAL_STATUS__OK:
		res->timing = tc_timing(e->ms);
		if (ref_ms > 0) {
			res->baseline = tc_timing(ref_ms);
			res->reference_ms = ref_ms;
			res->speedup = ref_ms / e->ms;
		}
		sbx_result_status(res, KCLAW__EVAL_STATUS__OK,
		    "correct in 3 trials; median %.4f ms", e->ms);
		if (req->options && req->options->profile) {
			sbx_result_add_metric(res, "dram_throughput", 75, "%");
			sbx_result_add_metric(res, "sm_throughput", 35, "%");
			sbx_result_add_metric(
			    res, "achieved_occupancy", 60, "%");
			res->counters_available = 1;
		}
		break;
	case KCLAW__EVAL_STATUS__COMPILE_ERROR:
		sbx_result_set(&res->compile_log,
		    "kernel.cu(7): error: class \"uint3\" has no member \"w\"");
		sbx_result_status(res, e->status,
		    "NVRTC: class \"uint3\" has no member \"w\"");
		break;
	default:
		sbx_result_status(res, e->status, "table child: scripted %s",
		    protobuf_c_enum_descriptor_get_value(
		        &kclaw__eval_status__descriptor, e->status)
		        ->name);
		break;
	}
}

static void
tc_fini(void *state)
{
	tc_table *t = state;

	if (t) {
		free(t->v);
		free(t);
	}
}

static const sbx_backend tc_backend = {
    .name = "table",
    .init = tc_init,
    .evaluate = tc_evaluate,
    .fini = tc_fini,
};

int
main(int argc, char **argv)
{
	return sbx_child_main(&tc_backend, argc, argv);
}
