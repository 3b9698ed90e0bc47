/*
 * sandbox_bench.c - kclaw-sandbox-bench: the sandbox's own costs, measured on a
 * GPU through a real kclaw-sandbox (as the orchestrator would drive it):
 *
 *  - compile time: a fresh source (cold) and the same again (cache hit);
 *  - evaluation overhead for an elementwise task of N elements (default
 *    64M): round-trip wall time minus the kernels' own time (every run of
 *    the candidate and of the reference, as the sandbox counts them, at
 *    their median time);
 *  - fault-to-ready: from the result of a faulting candidate to the result
 *    of the next (tiny) evaluation, which the spare child takes at once.
 *
 *   kclaw-sandbox-bench [--elements N] [--runs R] [--home DIR]
 *                       [--iterations N]   (default: adaptive timing)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "kc_err.h"
#include "kc_util.h"
#include "sandbox.h"
#include "sandbox_client.h"

static const char bench_ref_src[] =
    "extern \"C\" __global__ void mul(const float *x, const float *w,"
    " float *y, long long n) {\n"
    "  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
    "  if (i < n) y[i] = x[i] * w[i];\n"
    "}\n";

static const char bench_cand_src[] =
    "extern \"C\" __global__ void mul4(const float4 *x, const float4 *w,"
    " float4 *y, long long n4) {\n"
    "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;"
    " i < n4; i += (long long)gridDim.x * blockDim.x) {\n"
    "    float4 a = x[i], b = w[i];\n"
    "    y[i] = make_float4(a.x * b.x, a.y * b.y, a.z * b.z, a.w * b.w);\n"
    "  }\n"
    "}\n";

static const char bench_fault_src[] =
    "extern \"C\" __global__ void mul(const float *x, const float *w,"
    " float *y, long long n) {\n"
    "  float *bad = (float *)0x10;\n"
    "  bad[threadIdx.x] = x[0] * w[0];\n"
    "}\n";

typedef struct {
	Kclaw__TaskSpec task;
	Kclaw__TensorSpec t[3];
	Kclaw__TensorSpec *tp[3];
	Kclaw__InitSpec init[2];
	int64_t shape[1];
	Kclaw__Tolerance tol;
	Kclaw__Reference ref;
	Kclaw__Candidate refc;
	char ref_plan[512];
} bench_task;

static void
bench_make_task(bench_task *b, long long n)
{
	static char x[] = "x", w[] = "w", y[] = "y", name[] = "bench_mul";

	kclaw__task_spec__init(&b->task);
	b->shape[0] = n;
	for (int i = 0; i < 3; i++) {
		kclaw__tensor_spec__init(&b->t[i]);
		b->t[i].dtype = KCLAW__DTYPE__F32;
		b->t[i].n_shape = 1;
		b->t[i].shape = b->shape;
		b->tp[i] = &b->t[i];
	}
	kclaw__init_spec__init(&b->init[0]);
	kclaw__init_spec__init(&b->init[1]);
	b->init[0].dist = KCLAW__DISTRIBUTION__NORMAL;
	b->init[0].scale = 1;
	b->init[1].dist = KCLAW__DISTRIBUTION__UNIFORM;
	b->init[1].low = -1;
	b->init[1].high = 1;
	b->t[0].name = x;
	b->t[0].kind = KCLAW__TENSOR_KIND__INPUT;
	b->t[0].init = &b->init[0];
	b->t[1].name = w;
	b->t[1].kind = KCLAW__TENSOR_KIND__PARAMETER;
	b->t[1].init = &b->init[1];
	b->t[2].name = y;
	b->t[2].kind = KCLAW__TENSOR_KIND__OUTPUT;
	b->task.name = name;
	b->task.n_tensors = 3;
	b->task.tensors = b->tp;
	b->task.seed = 1;
	b->task.trials = 3;
	kclaw__tolerance__init(&b->tol);
	b->tol.atol = 1e-6;
	b->tol.rtol = 1e-6;
	b->tol.max_rel_norm = 1e-6;
	b->task.tolerance = &b->tol;
	kclaw__candidate__init(&b->refc);
	b->refc.source = (char *)bench_ref_src;
	snprintf(b->ref_plan, sizeof(b->ref_plan),
	    "{\"steps\":[{\"kernel\":\"mul\",\"grid\":[%lld,1,1],"
	    "\"block\":[256,1,1],\"args\":[\"x\",\"w\",\"y\",{\"i64\":%lld}]}]"
	    "}",
	    (n + 255) / 256, n);
	b->refc.plan_json = b->ref_plan;
	kclaw__reference__init(&b->ref);
	b->ref.kind = KCLAW__REFERENCE__KIND__CUDA;
	b->ref.cuda = &b->refc;
	b->task.reference = &b->ref;
}

static int
bench_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double
bench_median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), bench_cmp);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* One evaluation; returns its round-trip ms, or -1. */
static double
bench_eval(sbx_session *s, Kclaw__TaskSpec *task, const char *src,
    const char *plan, Kclaw__EvalOptions *o, Kclaw__EvalResult **res)
{
	Kclaw__EvalRequest req = KCLAW__EVAL_REQUEST__INIT;
	Kclaw__Candidate c = KCLAW__CANDIDATE__INIT;
	uint64_t t0;
	int rv;

	c.source = (char *)src;
	c.plan_json = (char *)plan;
	req.task = task;
	req.candidate = &c;
	req.options = o;
	t0 = kc_mono_ns();
	rv = sbx_session_eval(s, &req, 600000, res);
	free(req.job_id);
	if (rv != 0) {
		fprintf(stderr, "bench: %s\n", kc_lasterr());
		return -1;
	}
	return (double)(kc_mono_ns() - t0) / 1e6;
}

int
main(int argc, char **argv)
{
	long long n = 64ll << 20;
	int runs = 5;
	unsigned iters = 0; /* 0: the sandbox's adaptive timing */
	sbx_client_opts co = {0};
	sbx_session *s = NULL;
	bench_task bt, small;
	Kclaw__EvalOptions o = KCLAW__EVAL_OPTIONS__INIT;
	Kclaw__EvalResult *r = NULL;
	char plan[512], src[1024], small_plan[512];
	double over[64], f2r[64], f2r_eval[64], cold = 0, warm = 0, wall;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--elements") == 0)
			n = atoll(argv[i + 1]);
		else if (strcmp(argv[i], "--runs") == 0)
			runs = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--home") == 0)
			co.home = argv[i + 1];
		else if (strcmp(argv[i], "--iterations") == 0)
			iters = (unsigned)atoi(argv[i + 1]);
	}
	if (runs < 1 || runs > 64 || n < 1024) {
		fprintf(stderr, "bench: --runs 1..64, --elements >= 1024\n");
		return 2;
	}
	bench_make_task(&bt, n);
	bench_make_task(&small, 4096);
	snprintf(plan, sizeof(plan),
	    "{\"steps\":[{\"kernel\":\"mul4\",\"grid\":[%d,1,1],"
	    "\"block\":[256,1,1],\"args\":[\"x\",\"w\",\"y\",{\"i64\":%lld}]}]"
	    "}",
	    132 * 8, n / 4);
	snprintf(small_plan, sizeof(small_plan), "%s", small.ref_plan);
	if (sbx_session_open(&s, &co) != 0) {
		fprintf(stderr, "bench: %s\n", kc_lasterr());
		return 1;
	}

	/* Compile: a source never seen (a nonce defeats the cache), then the
	 * same source again. */
	snprintf(src, sizeof(src), "// nonce %llu\n%s",
	    (unsigned long long)kc_now_ms(), bench_cand_src);
	o.compile_only = 1;
	if (bench_eval(s, &bt.task, src, plan, &o, &r) < 0)
		return 1;
	cold = r->compile_ms;
	printf("device: %s (%s)\n", r->device_name, r->arch);
	kclaw__eval_result__free_unpacked(r, NULL);
	if (bench_eval(s, &bt.task, src, plan, &o, &r) < 0)
		return 1;
	warm = r->compile_ms;
	kclaw__eval_result__free_unpacked(r, NULL);
	o.compile_only = 0;

	/* Overhead: the first full run warms allocations and caches. */
	o.iterations = iters;
	for (int i = 0; i <= runs; i++) {
		double kernels, cruns, rruns;
		if ((wall = bench_eval(
		         s, &bt.task, bench_cand_src, plan, &o, &r)) < 0)
			return 1;
		if (r->status != KCLAW__EVAL_STATUS__OK || r->timing == NULL ||
		    r->baseline == NULL) {
			fprintf(stderr, "bench: evaluation not OK: %s\n",
			    r->message);
			return 1;
		}
		/* Every run of either, as the sandbox counted them (warm-up,
		 * verification, timed, and the reference's checks of every
		 * timed run), at its median time. */
		cruns = kc_eval_metric(r, "sandbox.candidate_runs");
		rruns = kc_eval_metric(r, "sandbox.reference_runs");
		if (cruns <= 0 || rruns <= 0) {
			fprintf(stderr,
			    "bench: the sandbox did not count its "
			    "runs (an older child?)\n");
			return 1;
		}
		kernels = cruns * r->timing->median_ms +
		    rruns * r->baseline->median_ms;
		if (i > 0)
			over[i - 1] = wall - kernels;
		printf("run %d: wall %.1f ms, kernels %.1f ms (candidate "
		       "%.4f ms x %.0f runs, reference %.4f ms x %.0f runs; "
		       "%u timed), overhead %.1f ms\n",
		    i, wall, kernels, r->timing->median_ms, cruns,
		    r->baseline->median_ms, rruns, r->timing->iterations,
		    wall - kernels);
		for (size_t m = 0; m < r->n_metrics; m++)
			printf("  %s %.1f %s\n", r->metrics[m]->name,
			    r->metrics[m]->value, r->metrics[m]->unit);
		kclaw__eval_result__free_unpacked(r, NULL);
	}

	/* Fault to ready, faults a second and a half apart (the spare child
	 * that takes over needs about 0.2 s to be ready again). */
	o.iterations = 1;
	o.warmup = 1;
	o.trials = 1;
	for (int i = 0; i < runs; i++) {
		uint64_t t0;
		kc_sleep_ms(1500);
		if (bench_eval(s, &small.task, bench_fault_src, small_plan, &o,
		        &r) < 0)
			return 1;
		if (r->status != KCLAW__EVAL_STATUS__RUNTIME_FAULT) {
			fprintf(stderr, "bench: the faulting kernel got %s\n",
			    sbx_status_name(r->status));
			return 1;
		}
		kclaw__eval_result__free_unpacked(r, NULL);
		t0 = kc_mono_ns();
		if (bench_eval(
		        s, &small.task, bench_ref_src, small_plan, &o, &r) < 0)
			return 1;
		f2r[i] = (double)(kc_mono_ns() - t0) / 1e6;
		f2r_eval[i] = f2r[i] - r->wall_ms;
		printf("fault %d: next result after %.1f ms (%s; its own "
		       "evaluation %.1f ms)\n",
		    i, f2r[i], sbx_status_name(r->status), r->wall_ms);
		kclaw__eval_result__free_unpacked(r, NULL);
	}
	sbx_session_close(s);

	printf("\nsummary (%d runs)\n", runs);
	printf("compile (cold, NVRTC): %.1f ms; cached: %.1f ms\n", cold, warm);
	printf("evaluation overhead, %lld elements, %s: median %.1f ms\n", n,
	    iters ? "fixed iterations" : "adaptive timing",
	    bench_median(over, runs));
	printf("fault to next result: median %.1f ms; to ready (minus that "
	       "evaluation's own time): median %.1f ms\n",
	    bench_median(f2r, runs), bench_median(f2r_eval, runs));
	return 0;
}
