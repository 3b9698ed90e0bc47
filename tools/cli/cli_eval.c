/*
 * cli_eval.c - `kclaw eval TASK_DIR [CANDIDATE_DIR]`: one evaluation through
 * a private sandbox (gpu-sandbox/sandbox_client.h), printed for people or
 * as JSON. Without CANDIDATE_DIR the task's own `cuda` reference is the
 * candidate (e.g. `kclaw eval --compile-only --arch sm_90 TASK_DIR`).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bundle.h"
#include "cli.h"
#include "kc_config.h"
#include "kc_err.h"
#include "pbjson.h"
#include "sandbox.h"
#include "sandbox_client.h"

static void
eval_usage(FILE *f)
{
	fprintf(f,
	    "usage: kclaw eval TASK_DIR [CANDIDATE_DIR] [--json] "
	    "[--compile-only] [--arch sm_XX]\n"
	    "                  [--profile] [--iterations N] [--warmup N] "
	    "[--trials N]\n"
	    "                  [--timeout-ms N] [--no-l2-flush] "
	    "[--no-compile-baseline]\n"
	    "                  [--trace-timing] [--device N] [--home DIR]\n\n"
	    "Compiles, verifies and times the candidate (kernel.cu + "
	    "plan.json) against the task\nin a private sandbox, and prints "
	    "the result. Without CANDIDATE_DIR the task's\nreference is "
	    "evaluated alone: its baselines (eager and torch.compile for a\n"
	    "torch task) and how much each output varies between input "
	    "sets, against\nwhat the tolerance admits, with degenerate "
	    "outputs named. --compile-only needs\nno GPU (give --arch); "
	    "without a candidate it compiles a cuda reference.\n\n"
	    "Exit codes: 0 the result is OK; 1 the candidate was evaluated "
	    "and is not OK\n(compile error, wrong result, ...) or the sandbox "
	    "failed; 2 usage, or a task.json\nor plan.json that does not "
	    "parse; 3 a task or candidate folder, kernel.cu or\nplan.json "
	    "that does not exist. docs/cli.md lists the errors.\n");
}

static int
eval_uint(const char *opt, const char *v, unsigned *out)
{
	char *end;
	unsigned long n = strtoul(v, &end, 10);

	if (*v == '\0' || *end != '\0' || n > 1000000) {
		fprintf(stderr, "kclaw eval: %s needs a number, not '%s'\n",
		    opt, v);
		return -1;
	}
	*out = (unsigned)n;
	return 0;
}

int
cli_eval(int argc, char **argv)
{
	Kclaw__EvalOptions opts = KCLAW__EVAL_OPTIONS__INIT;
	Kclaw__EvalRequest req = KCLAW__EVAL_REQUEST__INIT;
	sbx_client_opts co = {0};
	const char *dirs[2] = {NULL, NULL};
	Kclaw__TaskSpec *task = NULL;
	Kclaw__Candidate *cand = NULL;
	Kclaw__EvalResult *res = NULL;
	sbx_session *s = NULL;
	kc_config cfg;
	unsigned timeout = 0, device = 0;
	int json = 0, ndirs = 0, rv, code = CLI_FAIL;

	if (cli_wants_help(argc, argv)) {
		eval_usage(stdout);
		return CLI_OK;
	}
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(a, "--json") == 0) {
			json = 1;
		} else if (strcmp(a, "--compile-only") == 0) {
			opts.compile_only = 1;
		} else if (strcmp(a, "--profile") == 0) {
			opts.profile = 1;
		} else if (strcmp(a, "--trace-timing") == 0) {
			opts.trace_timing = 1;
		} else if (strcmp(a, "--no-l2-flush") == 0) {
			opts.no_l2_flush = 1;
		} else if (strcmp(a, "--no-compile-baseline") == 0) {
			opts.no_compile_baseline = 1;
		} else if (v != NULL && strcmp(a, "--arch") == 0) {
			opts.arch = (char *)v;
			i++;
		} else if (v != NULL && strcmp(a, "--home") == 0) {
			co.home = v;
			i++;
		} else if (v != NULL && strcmp(a, "--iterations") == 0) {
			if (eval_uint(a, v, &opts.iterations) != 0)
				return CLI_USAGE;
			i++;
		} else if (v != NULL && strcmp(a, "--warmup") == 0) {
			if (eval_uint(a, v, &opts.warmup) != 0)
				return CLI_USAGE;
			i++;
		} else if (v != NULL && strcmp(a, "--trials") == 0) {
			if (eval_uint(a, v, &opts.trials) != 0)
				return CLI_USAGE;
			i++;
		} else if (v != NULL && strcmp(a, "--timeout-ms") == 0) {
			if (eval_uint(a, v, &timeout) != 0)
				return CLI_USAGE;
			i++;
		} else if (v != NULL && strcmp(a, "--device") == 0) {
			if (eval_uint(a, v, &device) != 0)
				return CLI_USAGE;
			i++;
		} else if (a[0] == '-') {
			fprintf(stderr, "kclaw eval: unknown option '%s'\n", a);
			eval_usage(stderr);
			return CLI_USAGE;
		} else if (ndirs < 2) {
			dirs[ndirs++] = a;
		} else {
			fprintf(stderr, "kclaw eval: too many arguments\n");
			return CLI_USAGE;
		}
	}
	if (ndirs == 0) {
		eval_usage(stderr);
		return CLI_USAGE;
	}
	if ((rv = kc_bundle_load(dirs[0], &task)) != 0) {
		code = cli_fail("eval", rv);
		if (rv == KC_ENOENT)
			fprintf(stderr,
			    "kclaw eval: TASK_DIR is a task bundle folder "
			    "(task.json, "
			    "docs/bundle.md), e.g. examples/softmax_rows\n");
		return code;
	}
	if (ndirs == 2) {
		if ((rv = kc_candidate_load(dirs[1], &cand)) != 0) {
			code = cli_fail("eval", rv);
			if (rv == KC_ENOENT)
				fprintf(stderr,
				    "kclaw eval: CANDIDATE_DIR is a folder "
				    "with "
				    "kernel.cu and plan.json (docs/plan.md), "
				    "e.g. "
				    "examples/softmax_rows/candidates/2\n");
			goto out;
		}
		req.candidate = cand;
	} else if (!opts.compile_only) {
		/* No candidate: the reference alone, its baselines and how
		 * much its outputs vary (degenerate outputs are named). */
		opts.reference_only = 1;
	} else if (task->reference != NULL && task->reference->cuda != NULL) {
		req.candidate = task->reference->cuda;
	} else {
		fprintf(stderr,
		    "kclaw eval: --compile-only without a candidate compiles "
		    "the task's CUDA reference, and the reference of %s is "
		    "not CUDA code; run `kclaw eval %s CANDIDATE_DIR` (a "
		    "folder with kernel.cu and plan.json), or leave out "
		    "--compile-only to evaluate the reference alone\n",
		    dirs[0], dirs[0]);
		code = CLI_USAGE;
		goto out;
	}
	opts.timeout_ms = timeout;
	req.task = task;
	req.options = &opts;
	co.device = (int)device;
	/* A torch task's reference process stays warm between evaluations,
	 * on a socket in the home's run/ (docs/torchref.md "Warm process"). */
	if (getenv("KCLAW_TORCHREF_WARM") == NULL &&
	    kc_config_load(&cfg, co.home) == 0)
		setenv("KCLAW_TORCHREF_WARM", cfg.run_dir, 0);
	if ((rv = sbx_session_open(&s, &co)) != 0) {
		code = cli_fail("eval", rv);
		goto out;
	}
	rv = sbx_session_eval(
	    s, &req, (timeout ? (int)timeout : 600000) + 60000, &res);
	if (rv != 0) {
		code = cli_fail("eval", rv);
		goto out;
	}
	if (json) {
		char *text = kc_pb_to_json_public_text(&res->base);
		cli_json_print(stdout, text);
		free(text);
	} else {
		sbx_result_print(stdout, res);
	}
	code = res->status == KCLAW__EVAL_STATUS__OK ? CLI_OK : CLI_FAIL;
out:
	sbx_session_close(s);
	if (res != NULL)
		kclaw__eval_result__free_unpacked(res, NULL);
	/* The client sets job_id when it sends; until then it is protobuf-c's
	 * static empty string, which must not be freed. */
	if (req.job_id != protobuf_c_empty_string)
		free(req.job_id);
	if (cand != NULL)
		kclaw__candidate__free_unpacked(cand, NULL);
	if (task != NULL)
		kclaw__task_spec__free_unpacked(task, NULL);
	return code;
}
