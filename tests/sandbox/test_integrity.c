/*
 * test_integrity.c - the reviewer's rules that need no GPU
 * (gpu-sandbox/integrity.h), on PTX that NVRTC really produced.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compile.h"
#include "integrity.h"
#include "kc_err.h"
#include "kc_test.h"

/* A candidate that memoises in module state: the sandbox must find every
 * variable that survives a launch, with whether it has loaded contents. */
static void
test_globals_found_in_real_ptx(void)
{
	const char *src =
	    "__device__ float memo[4096];\n"
	    "__device__ int runs;\n"
	    "__device__ int table[4] = {1, 2, 3, 4};\n"
	    "__constant__ float scale_c[2] = {1.f, 2.f};\n"
	    "extern \"C\" __global__ void k(const float *x, float *y, int n) "
	    "{\n"
	    "  static __device__ unsigned hidden;\n"
	    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
	    "  if (i == 0) { runs++; hidden++; }\n"
	    "  if (i < n) { y[i] = x[i] * table[i & 3] * scale_c[0];"
	    " memo[i & 4095] = y[i]; }\n"
	    "}\n";
	sbx_compiled c;
	sbx_ptx_global *g;
	size_t n;
	int memo = -1, runs = -1, table = -1, hidden = -1;

	KT_OK(sbx_compile(src, "sm_90", NULL, &c));
	KT_OK(sbx_ptx_globals(c.ptx, &g, &n));
	for (size_t i = 0; i < n; i++) {
		if (strcmp(g[i].name, "memo") == 0)
			memo = g[i].initialised;
		else if (strcmp(g[i].name, "runs") == 0)
			runs = g[i].initialised;
		else if (strcmp(g[i].name, "table") == 0)
			table = g[i].initialised;
		else if (strstr(g[i].name, "hidden") != NULL)
			hidden = g[i].initialised;
		/* __constant__ memory cannot be written by a kernel. */
		KT_ASSERT(strcmp(g[i].name, "scale_c") != 0);
	}
	KT_EQ_INT(memo, 0);
	KT_EQ_INT(runs, 0);
	KT_EQ_INT(table, 1);
	KT_EQ_INT(hidden, 0);
	sbx_ptx_globals_free(g, n);
	KT_ASSERT(sbx_ptx_refusal(c.ptx) == NULL);
	sbx_compiled_free(&c);
}

static void
test_heap_and_printf_refused(void)
{
	const char *heap = "extern \"C\" __global__ void k(float *y) {\n"
	                   "  float *p = (float *)malloc(64);\n"
	                   "  if (p) { p[0] = 1; y[0] = p[0]; free(p); }\n"
	                   "}\n";
	const char *newed = "extern \"C\" __global__ void k(float *y) {\n"
	                    "  float *p = new float[4]; p[0] = 2; y[0] = p[0];"
	                    " delete[] p;\n"
	                    "}\n";
	const char *pr = "extern \"C\" __global__ void k(float *y) {\n"
	                 "  printf(\"%f\\n\", y[0]);\n"
	                 "}\n";
	sbx_compiled c;

	KT_OK(sbx_compile(heap, "sm_90", NULL, &c));
	KT_ASSERT(sbx_ptx_refusal(c.ptx) != NULL);
	KT_CONTAINS(sbx_ptx_refusal(c.ptx), "device heap");
	sbx_compiled_free(&c);
	KT_OK(sbx_compile(newed, "sm_90", NULL, &c));
	KT_ASSERT(sbx_ptx_refusal(c.ptx) != NULL);
	sbx_compiled_free(&c);
	KT_OK(sbx_compile(pr, "sm_90", NULL, &c));
	KT_CONTAINS(sbx_ptx_refusal(c.ptx), "printf");
	sbx_compiled_free(&c);
}

static void
test_precision_scan(void)
{
	Kclaw__TensorSpec x = KCLAW__TENSOR_SPEC__INIT,
	                  y = KCLAW__TENSOR_SPEC__INIT;
	Kclaw__TensorSpec *ts[2] = {&x, &y};
	Kclaw__TaskSpec task = KCLAW__TASK_SPEC__INIT;
	sbx_plan plan = {0};
	sbx_step step = {0};
	char what[256];

	x.dtype = y.dtype = KCLAW__DTYPE__F32;
	task.tensors = ts;
	task.n_tensors = 2;
	KT_EQ_INT(
	    sbx_precision_scan("#include <cuda_bf16.h>\n"
	                       "__global__ void k(float *y) {"
	                       " __nv_bfloat16 h = __float2bfloat16(y[0]);"
	                       " y[0] = __bfloat162float(h); }",
	        NULL, &task, what, sizeof(what)),
	    1);
	KT_CONTAINS(what, "__nv_bfloat16");
	/* Words in comments and ordinary names are not lower precision. */
	KT_EQ_INT(sbx_precision_scan("// no __half here\n/* nor tf32 */\n"
	                             "__global__ void k(float *y) { int half ="
	                             " 2; y[half] = 1; }",
	              NULL, &task, what, sizeof(what)),
	    0);
	step.kind = SBX_STEP_MATMUL;
	step.mm.dtype = KCLAW__DTYPE__F32;
	step.mm.tf32 = 1;
	plan.steps = &step;
	plan.nsteps = 1;
	KT_EQ_INT(sbx_precision_scan("", &plan, &task, what, sizeof(what)), 1);
	KT_CONTAINS(what, "tf32");
	/* A bf16 task may use bf16. */
	x.dtype = KCLAW__DTYPE__BF16;
	KT_EQ_INT(sbx_precision_scan(
	              "__nv_bfloat16 a;", NULL, &task, what, sizeof(what)),
	    0);
}

static void
test_speed_of_light(void)
{
	/* 256 MiB in, 256 MiB out at 3 TB/s (3e9 bytes per ms). */
	double mb = 256.0 * 1048576, bw = 3e9;
	double sol = sbx_speed_of_light_ms(mb, mb, 0, bw, 0);

	KT_ASSERT(sol > (mb + mb / 4) / (1.25 * bw) * 0.999);
	KT_ASSERT(sol < (mb + mb / 4) / (1.25 * bw) * 1.001);
	/* The compute bound wins when it is larger. */
	KT_ASSERT(sbx_speed_of_light_ms(0, 4, 1e12, bw, 1e9) == 1000);
	KT_ASSERT(sbx_speed_of_light_ms(0, 0, 0, 0, 0) == 0);
}

/*
 * The honest roofline on known sizes: KernelBench 19_ReLU moves 12.9 GB
 * (6.45 GB read, 6.45 GB written) in 3.23 ms at a measured copy bandwidth
 * of 4.0 TB/s: at the roofline, where the loose speed of light reads 50 %.
 */
static void
test_roofline(void)
{
	double half = 6.45e9, bw = 4.0e9, median = 3.23, rd = 4.64e9;
	/* One operation per element at an H200's f32 peak (132 SMs, 1.98 GHz,
	 * 256 per SM per clock): far below the memory time. */
	double peak = 132 * 1980000.0 * SBX_OPS_F32;
	double roof = sbx_roofline_ms(half, half, half / 4, bw, 0, peak);
	double sol = sbx_speed_of_light_ms(half, half, half / 4, bw, peak);

	KT_ASSERT(fabs(roof - 3.225) < 1e-9);
	KT_ASSERT(roof / median >= 0.95 && roof / median <= 1);
	KT_ASSERT(sol / median < 0.55);
	/* A read bandwidth above the copy's changes nothing for a copy: its
	 * writes take what the copy's reads saved. */
	KT_ASSERT(
	    fabs(sbx_roofline_ms(half, half, 0, bw, rd, peak) - 3.225) < 1e-9);
	/* A loss reading two 1 GB tensors and writing 4 bytes: the reads at
	 * the read bandwidth (0.431 ms), not at the copy's (0.5 ms, which a
	 * kernel at the read rate beats by 16 %). */
	KT_ASSERT(fabs(sbx_roofline_ms(2e9, 4, 0, bw, rd, peak) -
	              (2e9 / rd + 4 * (2 / bw - 1 / rd))) < 1e-12);
	KT_ASSERT(
	    fabs(sbx_roofline_ms(2e9, 0, 0, bw, rd, peak) - 0.431034) < 1e-6);
	/* A write-mostly kernel: writes at 1/(2/copy - 1/read), below the
	 * copy's rate. A read bandwidth below the copy's is taken as the
	 * copy's. */
	KT_ASSERT(fabs(sbx_roofline_ms(0, 1e9, 0, bw, rd, peak) -
	              1e9 * (2 / bw - 1 / rd)) < 1e-9);
	KT_ASSERT(sbx_roofline_ms(4e9, 0, 0, bw, 1e9, peak) == 1);
	/* Compute-bound: the FLOPs at the precision's peak win. */
	KT_ASSERT(sbx_roofline_ms(4, 4, 1e12, bw, rd, 1e9) == 1000);
	KT_ASSERT(sbx_roofline_ms(0, 0, 0, 0, 0, 0) == 0);
}

/* The peak is the precision's the candidate computes in. */
static void
test_precision_ops(void)
{
	Kclaw__TensorSpec x = KCLAW__TENSOR_SPEC__INIT,
	                  y = KCLAW__TENSOR_SPEC__INIT;
	Kclaw__TensorSpec *ts[2] = {&x, &y};
	Kclaw__TaskSpec task = KCLAW__TASK_SPEC__INIT;

	x.dtype = y.dtype = KCLAW__DTYPE__F32;
	task.tensors = ts;
	task.n_tensors = 2;
	KT_ASSERT(sbx_precision_ops("y = x;", NULL, &task) == SBX_OPS_F32);
	KT_ASSERT(sbx_precision_ops("__half h;", NULL, &task) == SBX_OPS_16);
	KT_ASSERT(sbx_precision_ops("wmma::precision::tf32 t;", NULL, &task) ==
	    SBX_OPS_TF32);
	KT_ASSERT(
	    sbx_precision_ops("__nv_fp8_e4m3 q;", NULL, &task) == SBX_OPS_FP8);
	KT_ASSERT(sbx_precision_ops(NULL, NULL, NULL) == SBX_OPS_FP8);
	/* A bf16 task computes in 16 bits whatever its source says. */
	x.dtype = y.dtype = KCLAW__DTYPE__BF16;
	KT_ASSERT(sbx_precision_ops("y = x;", NULL, &task) == SBX_OPS_16);
}

static void
test_variation_rule(void)
{
	Kclaw__Tolerance tol = KCLAW__TOLERANCE__INIT;

	/* An honest kernel: error far below the output's variation. */
	KT_EQ_INT(sbx_error_small_vs_variation(1e-6, 0.5), 1);
	/* A constant: its error is the variation itself. */
	KT_EQ_INT(sbx_error_small_vs_variation(0.9e-2, 1e-2), 0);
	/* Rounding noise below the floor passes whatever the variation. */
	KT_EQ_INT(sbx_error_small_vs_variation(5e-7, 1e-7), 1);
	KT_EQ_INT(sbx_error_small_vs_variation(0.0 / 0.0, 1), 0);
	tol.rtol = 1e-2;
	KT_EQ_INT(sbx_output_degenerate(1e-3, &tol), 1);
	KT_EQ_INT(sbx_output_degenerate(0.3, &tol), 0);
}

/* A timed sample less the events' cost around a launch: the figures of
 * the H200 (cost 0.0024 ms, an empty kernel 0.0006 ms). */
static void
test_sample_less_launch_cost(void)
{
	const double cost = 0.0024, floor_ms = 0.0006, eps = 1e-12;

	/* A single 30 us run: its events say 32.4 us. */
	KT_ASSERT(fabs(sbx_sample_ms(0.0324, 1, cost, floor_ms) - 0.030) < eps);
	/* Sixteen runs back to back share one cost. */
	KT_ASSERT(
	    fabs(sbx_sample_ms(0.0824, 16, cost, floor_ms) - 0.005) < eps);
	/* A run that does nothing is no faster than an empty launch. */
	KT_ASSERT(sbx_sample_ms(0.0025, 1, cost, floor_ms) == floor_ms);
	/* Never above the raw time (events shorter than the floor). */
	KT_ASSERT(sbx_sample_ms(0.0004, 1, cost, floor_ms) == 0.0004);
	/* No calibration: the raw time per run. */
	KT_ASSERT(sbx_sample_ms(0.032, 2, 0, 0) == 0.016);
	KT_ASSERT(sbx_sample_ms(1, 0, cost, floor_ms) == 0);
}

/* The adaptive timing's stopping rule (timing.c, and the reference's
 * baseline by torchref_measure.py's copy of it). */
static void
test_median_settled(void)
{
	double ten[10] = {3.2257, 3.2280, 3.2290, 3.2300, 3.2304, 3.2306,
	    3.2310, 3.2315, 3.2320, 3.9721};
	double two_slow[10] = {3.2257, 3.2280, 3.2290, 3.2300, 3.2304, 3.2306,
	    3.2310, 3.2315, 3.9000, 3.9721};
	double fast_one[10] = {2.5000, 3.2280, 3.2290, 3.2300, 3.2304, 3.2306,
	    3.2310, 3.2315, 3.2320, 3.2330};
	double twenty[20];

	/* One slow run of ten (the largest): the 2nd and 9th bound the
	 * median, so it is settled; as with one fast run. */
	KT_ASSERT(sbx_median_settled(ten, 10, 0.01));
	KT_ASSERT(sbx_median_settled(fast_one, 10, 0.01));
	/* Two slow runs of ten: the 9th is one of them. */
	KT_ASSERT(!sbx_median_settled(two_slow, 10, 0.01));
	/* Twenty runs: the 6th and 15th; five slow ones are outside them,
	 * six are not. */
	for (int i = 0; i < 20; i++)
		twenty[i] = i < 15 ? 1.0 + i * 1e-4 : 2.0;
	KT_ASSERT(sbx_median_settled(twenty, 20, 0.01));
	twenty[14] = 2.0;
	KT_ASSERT(!sbx_median_settled(twenty, 20, 0.01));
	/* Too few to say anything, and a spread over ci. */
	KT_ASSERT(!sbx_median_settled(ten, 1, 0.01));
	KT_ASSERT(!sbx_median_settled(ten, 10, 0.0001));
}

/* The events' cost measured on a plan's own runs (timing.c
 * ev_plan_calibrate): the mean of the runs within a launch's slack of
 * their median, within [0, the child's + a slack per launch]. */
static void
test_plan_cost(void)
{
	/* sum_reduce's two launches on the H200, every other run 0.3 us
	 * more: the mean, where the median is one group's. */
	double two[5] = {0.0024, 0.0027, 0.0024, 0.0027, 0.0024};
	/* One run interrupted (20 us): left out, the mean of the rest. */
	double hit[4] = {0.0025, 0.0225, 0.0026, 0.0027};
	double high[3] = {0.5, 0.4, 0.6};
	double low[3] = {-0.001, -0.002, 0.0001};
	double nan_run[1] = {NAN};

	KT_ASSERT(fabs(sbx_plan_cost(two, 5, 0.0030, 2) - 0.00252) < 1e-12);
	/* Sorted in place. */
	KT_ASSERT(two[0] == 0.0024 && two[4] == 0.0027);
	KT_ASSERT(fabs(sbx_plan_cost(hit, 4, 0.0030, 2) - 0.0026) < 1e-12);
	/* A cost that is a share of the work is not the events': capped at
	 * the child's plus the slack per launch. */
	KT_ASSERT(fabs(sbx_plan_cost(high, 3, 0.0030, 2) -
	              (0.0030 + 2 * SBX_PLAN_COST_SLACK_MS)) < 1e-12);
	/* Never below 0; a NaN is 0; nothing measured: the child's. */
	KT_ASSERT(sbx_plan_cost(low, 3, 0.0030, 1) == 0);
	KT_ASSERT(sbx_plan_cost(nan_run, 1, 0.0030, 1) == 0);
	KT_ASSERT(sbx_plan_cost(NULL, 0, 0.0030, 1) == 0.0030);
}

int
main(void)
{
	KT_RUN(test_globals_found_in_real_ptx);
	KT_RUN(test_heap_and_printf_refused);
	KT_RUN(test_precision_scan);
	KT_RUN(test_speed_of_light);
	KT_RUN(test_roofline);
	KT_RUN(test_precision_ops);
	KT_RUN(test_variation_rule);
	KT_RUN(test_sample_less_launch_cost);
	KT_RUN(test_median_settled);
	KT_RUN(test_plan_cost);
	return 0;
}
