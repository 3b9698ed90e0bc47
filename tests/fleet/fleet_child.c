/*
 * fleet_child.c - the sandbox child of the multi-host test (the test
 * double at the process boundary, run by the real kclaw-sandbox with
 * --child). Before it answers, it checks what a GPU child would read:
 * every tensor of a `tensors` reference must be a file of this host's own
 * home ($FLEET_HOME), fetched by the sandbox, whose SHA-256 is the
 * TensorData's blob. Then it answers the candidate as the test double does
 * ("KC:ok:<ms>" OK at that median, "KC:compile", "KC:wrong"); a
 * reference-only request (the task's reference check) is OK. With
 * $FLEET_SLOW set, a task whose name starts with "slow" never finishes (the
 * host is then cut off mid-job). Each evaluation appends a line to
 * $FLEET_LOG: "EVAL <task> <host> <n blobs verified>" or "BAD <why>".
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kc_err.h"
#include "kc_util.h"
#include "sandbox.h"
#include "spec_check.h"

static void fc_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void
fc_log(const char *fmt, ...)
{
	const char *path = getenv("FLEET_LOG");
	va_list ap;
	FILE *f;

	if (path == NULL || (f = fopen(path, "a")) == NULL)
		return;
	va_start(ap, fmt);
	vfprintf(f, fmt, ap);
	va_end(ap);
	fclose(f);
}

static int
fc_init(void **state, const sbx_child_config *cfg, Kclaw__EvalResult *ready)
{
	(void)cfg;
	*state = NULL;
	sbx_result_set(&ready->device_name, "fleet GPU");
	sbx_result_set(&ready->arch, "sm_90");
	return 0;
}

/* 0 when td is a verified file of this host's home; else why not. */
static int
fc_check(const Kclaw__TensorData *td, char *why, size_t n)
{
	const char *home = getenv("FLEET_HOME");
	char *data, hash[65];
	size_t len;

	if (td->blob == NULL || strlen(td->blob) != 64)
		return snprintf(why, n, "tensor %s has no blob", td->name), -1;
	if (td->path == NULL || td->path[0] == '\0')
		return snprintf(why, n, "tensor %s has no path", td->name), -1;
	if (home != NULL && strncmp(td->path, home, strlen(home)) != 0)
		return snprintf(why, n, "tensor %s: %s is not in %s", td->name,
		           td->path, home),
		       -1;
	if (kc_read_file(td->path, (size_t)1 << 31, &data, &len) != 0)
		return snprintf(
		           why, n, "tensor %s: %s", td->name, kc_lasterr()),
		       -1;
	kc_sha256_hex(data, len, hash);
	free(data);
	if (strcmp(hash, td->blob) != 0)
		return snprintf(why, n, "tensor %s: %s hashes to %s", td->name,
		           td->path, hash),
		       -1;
	return 0;
}

static void
fc_evaluate(void *state, const Kclaw__EvalRequest *req, Kclaw__EvalResult *res,
    int *fatal)
{
	const Kclaw__TaskSpec *t = req->task;
	const char *src = req->candidate ? req->candidate->source : "";
	const char *host = getenv("KCLAW_WORKER_HOST");
	char why[600];
	size_t nblobs = 0;

	(void)state;
	(void)fatal;
	if (t == NULL) {
		sbx_result_status(
		    res, KCLAW__EVAL_STATUS__INTERNAL_ERROR, "no task");
		return;
	}
	if (t->reference != NULL &&
	    t->reference->kind == KCLAW__REFERENCE__KIND__TENSORS) {
		for (size_t s = 0; s < t->reference->n_sets; s++) {
			const Kclaw__TensorSet *set = t->reference->sets[s];
			for (size_t i = 0; i < set->n_inputs + set->n_expected;
			     i++) {
				const Kclaw__TensorData *td = i < set->n_inputs
				    ? set->inputs[i]
				    : set->expected[i - set->n_inputs];
				if (fc_check(td, why, sizeof(why)) != 0) {
					fc_log("BAD %s: %s\n", t->name, why);
					sbx_result_status(res,
					    KCLAW__EVAL_STATUS__INTERNAL_ERROR,
					    "fleet child: %s", why);
					return;
				}
				nblobs++;
			}
		}
	}
	if (getenv("FLEET_SLOW") != NULL && strncmp(t->name, "slow", 4) == 0) {
		fc_log("SLOW %s %s %zu\n", t->name, host ? host : "?", nblobs);
		for (;;)
			pause();
	}
	fc_log("EVAL %s %s %zu\n", t->name, host ? host : "?", nblobs);
	res->reference_ms = t->reference && t->reference->baseline_ms > 0
	    ? t->reference->baseline_ms
	    : 4.0;
	if (req->options && req->options->reference_only) {
		/* The task's reference check: the reference alone. */
		res->output_variation = 0.5;
		for (size_t i = 0; i < t->n_tensors; i++)
			if (t->tensors[i]->kind == KCLAW__TENSOR_KIND__OUTPUT)
				kc_result_add_variation(res,
				    t->tensors[i]->name, 1, 0.5, t->tolerance);
		sbx_result_status(res, KCLAW__EVAL_STATUS__OK,
		    "reference only (fleet child)");
	} else if (strncmp(src, "KC:ok:", 6) == 0) {
		sbx_result_status(res, KCLAW__EVAL_STATUS__OK, "%s", "");
		res->timing = malloc(sizeof(*res->timing));
		kclaw__timing__init(res->timing);
		res->timing->median_ms = atof(src + 6);
		res->speedup = res->reference_ms / res->timing->median_ms;
	} else if (strcmp(src, "KC:compile") == 0) {
		sbx_result_status(res, KCLAW__EVAL_STATUS__COMPILE_ERROR,
		    "error: expected ';'");
	} else {
		sbx_result_status(res, KCLAW__EVAL_STATUS__WRONG_RESULT,
		    "output y[3] = 1.0, expected 2.0");
	}
}

static const sbx_backend fc_backend = {
    .name = "fleet",
    .init = fc_init,
    .evaluate = fc_evaluate,
};

int
main(int argc, char **argv)
{
	return sbx_child_main(&fc_backend, argc, argv);
}
