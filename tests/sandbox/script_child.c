/*
 * script_child.c - a sandbox child whose "GPU" follows a script: the test
 * double at the process boundary (gpu-sandbox's backend seam). The first
 * word of the candidate's source says what to do:
 *
 *   ok           answer OK (message "pid N since T, started alone|as a
 *                spare, measured at start|when idle|in an evaluation":
 *                its pid, the CLOCK_MONOTONIC ms it started at, how, and
 *                when it measured its device, so tests see replacements,
 *                when they started, whether the sandbox told them they
 *                were alone and when it asked them to measure)
 *   crash        die of SIGABRT mid-evaluation
 *   hang         never answer
 *   fault NAME   answer RUNTIME_FAULT with fault NAME, then exit (as the
 *                real child does after a kernel fault)
 *   exit N       exit with status N without answering
 *
 * A reference-only request (no candidate) is OK ("reference only
 * (scripted)", a baseline of 1 ms) with every output's variation rule
 * figures, as the real child reports them (EvalResult.output_variations,
 * gpu-sandbox/checks.c ev_note_degenerate): an output whose name starts with
 * "flat" varies by 1e-9 (degenerate under any tolerance: named, with the
 * real child's warning), any other by 0.5.
 *
 * With SBX_SCRIPT_NODEV=1 in the environment it starts without a device.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "integrity.h"
#include "kc_err.h"
#include "kc_util.h"
#include "sandbox.h"
#include "spec_check.h"

static uint64_t started_ms;
static int started_alone;
/* When it measured its "device", as the real child does: as it started
 * (alone), when its parent asked (an idle sandbox), or in its first
 * evaluation. */
static const char *measured;

static int
script_init(void **state, const sbx_child_config *cfg, Kclaw__EvalResult *ready)
{
	*state = NULL;
	started_ms = kc_mono_ms();
	started_alone = cfg->alone;
	measured = cfg->alone ? "at start" : NULL;
	if (getenv("SBX_SCRIPT_NODEV") != NULL)
		return kc_seterr(KC_ENODEV, "scripted: no GPU here");
	sbx_result_set(&ready->device_name, "scripted GPU");
	sbx_result_set(&ready->arch, "sm_90");
	return 0;
}

/* A reference-only answer's variation figures (the file's comment). */
static void
script_variation(const Kclaw__TaskSpec *task, Kclaw__EvalResult *res)
{
	for (size_t t = 0; task && t < task->n_tensors; t++) {
		const Kclaw__TensorSpec *ts = task->tensors[t];
		double var = strncmp(ts->name, "flat", 4) == 0 ? 1e-9 : 0.5;
		char **v;
		if (ts->kind != KCLAW__TENSOR_KIND__OUTPUT)
			continue;
		kc_result_add_variation(res, ts->name, 1, var, task->tolerance);
		if (res->output_variation == 0 || var < res->output_variation)
			res->output_variation = var;
		if (!sbx_output_degenerate(var, task->tolerance) ||
		    (v = realloc(res->degenerate,
		         (res->n_degenerate + 1) * sizeof(*v))) == NULL)
			continue;
		res->degenerate = v;
		if ((v[res->n_degenerate] = strdup(ts->name)) != NULL)
			res->n_degenerate++;
		v = realloc(res->warnings, (res->n_warnings + 1) * sizeof(*v));
		if (v == NULL)
			continue;
		res->warnings = v;
		if (asprintf(&v[res->n_warnings],
		        "degenerate task: output '%s' changes by only %.3g "
		        "(relative) between two input sets, less than the "
		        "tolerance admits",
		        ts->name, var) >= 0)
			res->n_warnings++;
	}
}

static void
script_evaluate(void *state, const Kclaw__EvalRequest *req,
    Kclaw__EvalResult *res, int *fatal)
{
	const char *src = req->candidate ? req->candidate->source : "";
	char name[64];

	(void)state;
	if (req->options && req->options->reference_only) {
		res->reference_ms = 1.0;
		script_variation(req->task, res);
		sbx_result_status(res, KCLAW__EVAL_STATUS__OK,
		    "reference only (scripted): baseline 1.0000 ms%s",
		    res->n_degenerate ? "; DEGENERATE (see warnings)" : "");
	} else if (strncmp(src, "ok", 2) == 0) {
		if (measured == NULL)
			measured = "in an evaluation";
		sbx_result_status(res, KCLAW__EVAL_STATUS__OK,
		    "pid %d since %llu, started %s, measured %s", (int)getpid(),
		    (unsigned long long)started_ms,
		    started_alone ? "alone" : "as a spare", measured);
	} else if (strncmp(src, "crash", 5) == 0) {
		abort();
	} else if (strncmp(src, "hang", 4) == 0) {
		for (;;)
			pause();
	} else if (sscanf(src, "fault %63s", name) == 1) {
		sbx_result_set(&res->fault_name, "%s", name);
		sbx_result_status(res, KCLAW__EVAL_STATUS__RUNTIME_FAULT,
		    "scripted fault %s", name);
		*fatal = 1;
	} else if (strncmp(src, "exit ", 5) == 0) {
		_exit(atoi(src + 5));
	} else {
		sbx_result_status(res, KCLAW__EVAL_STATUS__INTERNAL_ERROR,
		    "script: unknown command");
	}
}

static void
script_measure(void *state, Kclaw__EvalResult *res)
{
	(void)state;
	(void)res;
	if (measured == NULL)
		measured = "when idle";
}

static const sbx_backend script_backend = {
    .name = "script",
    .init = script_init,
    .evaluate = script_evaluate,
    .measure = script_measure,
};

int
main(int argc, char **argv)
{
	return sbx_child_main(&script_backend, argc, argv);
}
