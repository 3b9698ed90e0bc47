/*
 * result_export_helper.c - runs the exporter of `kclaw result --out`
 * (tools/export) without an orchestrator, on a bundle and a candidate
 * folder, with made-up measurements:
 *
 *   kc-export-test BUNDLE_DIR CANDIDATE_DIR OUT_DIR
 *
 * So result_test.sh can check the launcher and model_new.py of real
 * kernels and plans (scratch, matmul steps, scalars) that the test
 * doubles' candidates do not have.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bundle.h"
#include "export.h"
#include "kc_err.h"

int
main(int argc, char **argv)
{
	Kclaw__ResultResponse r = KCLAW__RESULT_RESPONSE__INIT;
	Kclaw__TaskRecord t = KCLAW__TASK_RECORD__INIT;
	Kclaw__CandidateRecord best = KCLAW__CANDIDATE_RECORD__INIT;
	Kclaw__CandidateRecord failed = KCLAW__CANDIDATE_RECORD__INIT;
	Kclaw__Candidate bad = KCLAW__CANDIDATE__INIT;
	Kclaw__EvalResult e = KCLAW__EVAL_RESULT__INIT;
	Kclaw__EvalResult fe = KCLAW__EVAL_RESULT__INIT;
	Kclaw__Timing tm = KCLAW__TIMING__INIT, base = KCLAW__TIMING__INIT;
	Kclaw__CandidateRecord *hist[2];
	Kclaw__TaskSpec *spec = NULL;
	Kclaw__Candidate *c = NULL, saved;
	char *warn[] = {"lower precision than the task's tensors: f16"};
	int rv;

	if (argc != 4) {
		fprintf(stderr,
		    "usage: kc-export-test BUNDLE_DIR CANDIDATE_DIR OUT\n");
		return 2;
	}
	if ((rv = kc_bundle_load(argv[1], &spec)) != 0 ||
	    (rv = kc_candidate_load(argv[2], &c)) != 0) {
		fprintf(stderr, "%s\n", kc_lasterr());
		return 1;
	}
	saved = *c;
	c->id = "c-best";
	c->origin = "optimizer";
	c->method = "tiling";
	c->parent_id = "c-seed";
	c->round = 4;
	tm.median_ms = 0.5;
	tm.mean_ms = 0.51;
	tm.min_ms = 0.49;
	tm.max_ms = 0.6;
	tm.stddev_ms = 0.01;
	tm.iterations = 50;
	tm.l2_flushed = 1;
	tm.spot_checks = 2;
	base = tm;
	base.median_ms = 2.0;
	e.status = KCLAW__EVAL_STATUS__OK;
	e.timing = &tm;
	e.baseline = &base;
	e.reference_ms = 2.0;
	e.speedup = 4.0;
	e.max_abs_err = 1.5e-6;
	e.max_rel_err = 2e-6;
	e.rel_norm = 3e-7;
	e.device_name = "NVIDIA H200";
	e.arch = "sm_90";
	e.warnings = warn;
	e.n_warnings = 1;
	best.candidate = c;
	best.eval = &e;
	bad.id = "c-seed";
	bad.origin = "generator";
	bad.source = "";
	bad.plan_json = "{}";
	fe.status = KCLAW__EVAL_STATUS__WRONG_RESULT;
	fe.message = "y[3]: expected 1, got 2";
	failed.candidate = &bad;
	failed.eval = &fe;
	hist[0] = &failed;
	hist[1] = &best;
	t.id = "t-export";
	t.spec = spec;
	t.state = "DONE";
	t.round = 5;
	t.reference_ms = 2.0;
	r.task = &t;
	r.best = &best;
	r.history = hist;
	r.n_history = 2;
	if ((rv = kc_export_result(argv[3], &r)) != 0) {
		fprintf(stderr, "kc_export_result: %s\n", kc_lasterr());
		return 1;
	}
	*c = saved; /* the loader's own strings, to free */
	kclaw__candidate__free_unpacked(c, NULL);
	kclaw__task_spec__free_unpacked(spec, NULL);
	return 0;
}
