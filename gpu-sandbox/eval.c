/*
 * eval.c - the CUDA backend: compile, load, check the plan, verify, time
 * and profile one candidate (DESIGN.md "The reviewer", steps 1-6).
 *
 * Order of an evaluation, and why:
 *  1. compile (NVRTC, cached) and read the kernels' resources;
 *  2. load the module, check the plan against the kernels and the device;
 *  3. make every trial's inputs on the device (own generator kernels, so a
 *     64M-element task costs milliseconds, not seconds), keep them in
 *     "stash" buffers, and compute every trial's expected outputs (the
 *     `cuda` reference run here, or the `tensors` reference's .npy files);
 *     the expected outputs then live only in host pages that are made
 *     inaccessible (PROT_NONE) whenever the candidate runs, and the device
 *     buffers the reference wrote are poisoned again;
 *  4. per trial: copy the trial's inputs in, poison outputs and scratch
 *     with NaN (all-ones bytes), hash inputs and parameters, run, hash
 *     again, copy the outputs out and compare on the host;
 *  5. time: warm-up, then N iterations each between two events, the L2
 *     flushed and the next trial's inputs copied in before each (outside
 *     the events), some iterations' outputs checked again;
 *  6. profile on request; time the `cuda` reference the same way.
 * A sticky CUDA error (a kernel fault) ends the evaluation with
 * RUNTIME_FAULT and *fatal set: the child exits and a fresh one starts.
 */
#include <cuda.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include "bundle.h"
#include "compile.h"
#include "cu.h"
#include "gpu.h"
#include "integrity.h"
#include "kc_err.h"
#include "kc_log.h"
#include "kc_util.h"
#include "npy.h"
#include "plan.h"
#include "sandbox.h"
#include "spec_check.h"
#include "torchref.h"
#include "verify.h"

#define EV_MAX_TRIALS 16
/* Tensors a task may have (a Level 3 model has hundreds of parameters). */
#define EV_MAX_TENSORS 1024
#define EV_MAX_ITERS 2000
/* A torch task's output larger than this is not copied aside for the
 * determinism check (hashes instead; docs/torchref.md "Memory"). */
#define EV_HELD_MAX (256u << 20)
#define EV_DEFAULT_WARMUP 3
#define EV_DEFAULT_TRIALS 3
/* Timing without an explicit iteration count is adaptive (docs/plan.md
 * "Timing"): at least EV_ADAPT_MIN runs, then batches of EV_ADAPT_BATCH
 * until the median's 95 % confidence interval is within EV_ADAPT_CI of
 * it, at most EV_ADAPT_MAX runs or EV_ADAPT_BUDGET_MS of wall time. */
#define EV_ADAPT_MIN 10
#define EV_ADAPT_BATCH 10
#define EV_ADAPT_MAX 200
#define EV_ADAPT_CI 0.01
#define EV_ADAPT_BUDGET_MS 3000
/* Plans faster than EV_SHORT_MS (after the first runs) are timed in
 * back-to-back batches of EV_BATCH_RUNS runs, each on input and output
 * buffers of its own (at most EV_BATCH_BYTES of them), so the launch
 * latency is not in every figure; every run is still checked. */
#define EV_SHORT_MS 0.010
/* Profiled runs (CUPTI activity records), for the span's median. */
#define EV_PROFILE_RUNS 9
/* Empty runs that measure the events' cost around a launch. */
#define EV_CALIB_RUNS 15
/* The longest a timed run's hold waits for the host (ev_hold). */
#define EV_HOLD_MAX_NS 20000000ull
#define EV_BATCH_RUNS 16
#define EV_BATCH_BYTES ((size_t)512 << 20)
/* Per timed run and output: the device comparison's two sums, its bad and
 * NaN counts and its largest absolute and relative errors (kc_compare),
 * read once after each batch of timed runs. */
#define EV_CHK_SLOT 48
#define EV_CHK_OUTS 64
#define EV_LT_WORKSPACE (32u << 20)
#define EV_MAX_NPY ((size_t)8 << 30)
#define EV_HUGE ((size_t)2 << 20)

/* Distribution codes of the generator kernels (helpers_cu.c). */
enum {
	GEN_NORMAL = 1,
	GEN_UNIFORM = 2,
	GEN_STUDENT_T = 3,
	GEN_ZEROS = 4,
	GEN_ONES = 5,
	GEN_ARANGE = 6,
	GEN_RANDINT = 7,
	GEN_SPARSE = 8, /* normal, three quarters of it zeros */
	GEN_SKEWED = 9  /* |normal|, a tenth of the signs flipped */
};
/* Distinct input distributions an evaluation cycles through. Trials 0 and
 * 1 both use the task's own (their outputs' difference is how much the
 * output varies with the inputs alone: the variation rule); trial k > 1
 * uses variant k - 1, timed run i variant i (mod EV_VARIANTS). */
#define EV_VARIANTS 7
#define EV_MIN_TRIALS 4

static unsigned
ev_variant(unsigned trial)
{
	return trial < 2 ? 0 : (trial - 1) % EV_VARIANTS;
}

typedef struct {
	sbx_cu cu;
	int have_device;
	char nodev_reason[512];
	int device;
	CUdevice dev;
	CUcontext ctx;
	CUstream stream;
	sbx_limits lim;
	int sms, max_threads_sm, l2_bytes;
	char name[256];
	char arch[16];
	char cache_dir[1024];
	char arch_override[16];
	CUmodule helpers;
	CUfunction gen[9]; /* by Kclaw__DType */
	CUfunction hash, poison_count, compare, flush_read, hold, probe, mark,
	    mark_end;
	/* The hold's flag (ev_hold): [0] the last run released, [1] the
	 * holds that gave up waiting; host memory the device reads. NULL
	 * where it could not be had: runs are then timed without a hold. */
	volatile uint32_t *hold_flag;
	CUdeviceptr hold_dev;
	uint32_t hold_seq;
	/* acc: the spot checks' sums (2 doubles) and counts (2), then the
	 * poison count of the timed runs. */
	CUdeviceptr flush, hash_out, lt_work, acc;
	/* Every timed run's comparison, [iteration][output] (EV_CHK_SLOT
	 * bytes each). */
	CUdeviceptr chk;
	/* Measured at start-up: the device's copy bandwidth and its peak
	 * arithmetic rate, for the speed of light. */
	double bw_bytes_per_ms, peak_flops_per_ms;
	/* Measured at start-up (gpu_calibrate): the events' own time around
	 * one launch, taken off every timed sample, and the least a launch
	 * takes by CUPTI; 0 where CUPTI could not measure them. */
	double launch_cost_ms, launch_floor_ms;
	int measured;
	size_t flush_bytes;
	void *pinned;
	size_t pinned_bytes;
	CUevent ev[2 * EV_MAX_ITERS + 2];
	int nthreads;
	sbx_lt *lt;
	sbx_torchref *tr; /* the PyTorch reference process, started lazily */
	/* Host pages for expected outputs, kept between evaluations: fresh
	 * pages cost a fault each, which in a VM adds up to seconds for
	 * gigabytes. */
	void *pool[EV_MAX_TRIALS][EV_MAX_TENSORS];
	void *pool_raw[EV_MAX_TRIALS][EV_MAX_TENSORS];
	size_t pool_bytes[EV_MAX_TRIALS][EV_MAX_TENSORS];
} gpu;

/* One program (the candidate or the `cuda` reference) ready to run. */
/* A module-scope variable of the candidate: restored before every run. */
typedef struct {
	CUdeviceptr ptr;
	size_t bytes;
	void *init; /* loaded contents; NULL: zero-filled */
} ev_global;

typedef struct {
	const char *what; /* "candidate" or "reference" */
	sbx_compiled comp;
	CUmodule mod;
	sbx_plan *plan;
	CUfunction *funcs; /* per step */
	CUdeviceptr *scratch;
	size_t nscratch;
	ev_global *globals;
	size_t nglobals;
	/* Per tensor, where this program writes that output instead of the
	 * buffer the candidate sees (the `cuda` reference's own outputs);
	 * NULL or 0: the shared buffer. */
	const CUdeviceptr *outs;
} prog;

typedef struct {
	gpu *g;
	const Kclaw__EvalRequest *req;
	const Kclaw__TaskSpec *task;
	Kclaw__EvalResult *res;
	int *fatal;
	unsigned trials, warmup, iters;
	int adaptive; /* iters is the most timed runs, not the count */
	/* Runs of the candidate and of the reference (a metric: the bench
	 * subtracts their GPU time from the wall time). */
	unsigned cand_runs, ref_runs;
	int cand_batched; /* the candidate was timed back to back */
	/* Timed runs are bracketed by kc_mark/kc_mark_end under CUPTI (a
	 * profiled candidate's timing: ev_time). */
	int trace;
	size_t nt;
	CUdeviceptr *tdev; /* per tensor: the buffer the plans see */
	size_t *tbytes, *tcount;
	uint64_t hash_in[EV_MAX_TENSORS];
	prog cand;
	/* What the reference kind does at each step of the protocol, and
	 * the state it keeps for this evaluation (its own). */
	const struct ev_ref_ops *ops;
	void *ref_state;
	/* Per output: the smallest relative difference between the expected
	 * outputs of two verification trials (the variation rule; 0 when
	 * unknown), and the candidate's worst relative error. */
	double var_rel[EV_MAX_TENSORS];
	int var_known[EV_MAX_TENSORS];
	double err_rel[EV_MAX_TENSORS];
	double max_abs, max_rel;
	/* Mixed into every generated input's seed, fresh per evaluation, so
	 * no candidate can know the inputs from the task's seed. */
	uint64_t salt;
	/* Numbers the timed runs' input sets (every one is new). */
	unsigned fresh_serial;
	CUdeviceptr held[EV_MAX_TENSORS]; /* a run's outputs, set aside to be
	                                     compared */
} ev;

/*
 * What each reference kind does at each step of the protocol (docs/plan.md
 * "What the reviewer guarantees"): the only place that knows which kind an
 * evaluation has. Each kind keeps its own state in e->ref_state (made by
 * setup, freed by release). Checks return 0 (right), 1 (wrong: the result
 * is filled) or -1 (error: the result is filled).
 */
typedef struct ev_ref_ops {
	const char *name;
	/* Whether the task's reference is of this kind and complete. */
	int (*usable)(const Kclaw__Reference *ref);
	/* Its state, the number of trials (e->trials as asked, at most
	 * EV_MAX_TRIALS), and what it must build before anything runs. */
	int (*setup)(ev *e);
	/* Every verification trial's inputs and expected outputs. */
	int (*prepare)(ev *e);
	/* Verification trial k: its inputs; after the candidate ran, the
	 * comparison of its outputs. */
	int (*trial_inputs)(ev *e, unsigned k);
	int (*trial_check)(ev *e, unsigned k, const char *when);
	/* Timed run `id` (distribution of trial k): its inputs, made before
	 * the events; after the candidate ran, the comparison of every output
	 * into chk slot `slot`, read once after the loop (or decided at once,
	 * returning 1). */
	int (*run_inputs)(ev *e, unsigned k, unsigned id);
	int (*run_check)(ev *e, unsigned k, unsigned id, unsigned slot);
	/* The profiled runs' inputs (trial 0's). */
	int (*profile_inputs)(ev *e);
	/* A reference-only evaluation: the inputs of two trials of one
	 * distribution where prepare did not make them (NULL: it did). */
	int (*sample_inputs)(ev *e);
	/* Fills res->baseline / reference_ms (0 when there is none). */
	int (*baseline)(ev *e);
	/* Frees e->ref_state (no driver call after a fault: *e->fatal). */
	void (*release)(ev *e);
	/* The reference's process owns the tensors (they are mapped, not
	 * allocated); outputs above held_max bytes are not copied aside
	 * (0: none is too large); runs may be timed back to back (inputs
	 * made in place, into any buffer). */
	int maps_tensors;
	size_t held_max;
	int batchable;
	/* The guarantees that do not hold for this kind, or NULL. */
	const char *caveat;
} ev_ref_ops;

/* ---------------------------------------------------------------- errors */

/*
 * Maps a failed driver call to the result. A sticky error is a kernel
 * fault whatever the call: RUNTIME_FAULT, and the child must exit.
 * Others get `status` (LAUNCH_ERROR for the candidate's launches,
 * INTERNAL_ERROR for the sandbox's own work). Returns -1 so callers can
 * `return ev_cu(...)`.
 */
static int
ev_cu(ev *e, CUresult r, Kclaw__EvalStatus status, const char *what)
{
	const char *name = sbx_cu_errname(&e->g->cu, r), *text = NULL;

	e->g->cu.cuGetErrorString(r, &text);
	if (sbx_cu_sticky(r)) {
		*e->fatal = 1;
		sbx_result_set(&e->res->fault_name, "%s", name);
		sbx_result_status(e->res, KCLAW__EVAL_STATUS__RUNTIME_FAULT,
		    "%s: the GPU reported %s (%s). The kernel faulted: look "
		    "for "
		    "out-of-bounds or misaligned accesses, traps and failed "
		    "asserts. The sandbox restarted its GPU process",
		    what, name, text ? text : "");
		return -1;
	}
	sbx_result_status(
	    e->res, status, "%s: %s (%s)", what, name, text ? text : "");
	return -1;
}

/* 0 when r is a success, else ev_cu's -1 with the result filled. */
static int
ev_ok(ev *e, CUresult r, Kclaw__EvalStatus status, const char *what)
{
	return r == CUDA_SUCCESS ? 0 : ev_cu(e, r, status, what);
}

#define EV_CU(e, call, status, what)                                           \
	do {                                                                   \
		CUresult ev_r_ = (call);                                       \
		if (ev_r_ != CUDA_SUCCESS)                                     \
			return ev_cu((e), ev_r_, (status), (what));            \
	} while (0)

#define EV_INTERNAL KCLAW__EVAL_STATUS__INTERNAL_ERROR

/* ------------------------------------------------------------------ init */

static int
gpu_attr(gpu *g, CUdevice_attribute a)
{
	int v = 0;

	g->cu.cuDeviceGetAttribute(&v, a, g->dev);
	return v;
}

static int
gpu_load_helpers(gpu *g)
{
	static const char *gen_names[9] = {NULL, "kc_gen_f32", "kc_gen_f16",
	    "kc_gen_bf16", "kc_gen_f64", "kc_gen_i32", "kc_gen_i64",
	    "kc_gen_i8", "kc_gen_u8"};
	sbx_compiled c;
	int rv;

	rv = sbx_compile(
	    sbx_helpers_cu, g->arch, g->cache_dir[0] ? g->cache_dir : NULL, &c);
	if (rv != 0) {
		kc_seterr(KC_EINTERNAL,
		    "the sandbox's helper kernels do not "
		    "compile: %s",
		    c.log ? c.log : kc_lasterr());
		sbx_compiled_free(&c);
		return KC_EINTERNAL;
	}
	if (g->cu.cuModuleLoadData(&g->helpers, c.cubin) != CUDA_SUCCESS) {
		sbx_compiled_free(&c);
		return kc_seterr(KC_EINTERNAL, "cannot load helper kernels");
	}
	sbx_compiled_free(&c);
	for (int i = 1; i < 9; i++)
		if (g->cu.cuModuleGetFunction(
		        &g->gen[i], g->helpers, gen_names[i]) != CUDA_SUCCESS)
			return kc_seterr(
			    KC_EINTERNAL, "helper %s missing", gen_names[i]);
	if (g->cu.cuModuleGetFunction(&g->hash, g->helpers, "kc_hash") !=
	        CUDA_SUCCESS ||
	    g->cu.cuModuleGetFunction(&g->poison_count, g->helpers,
	        "kc_poison_count") != CUDA_SUCCESS ||
	    g->cu.cuModuleGetFunction(&g->compare, g->helpers, "kc_compare") !=
	        CUDA_SUCCESS ||
	    g->cu.cuModuleGetFunction(
	        &g->flush_read, g->helpers, "kc_flush_read") != CUDA_SUCCESS ||
	    g->cu.cuModuleGetFunction(&g->hold, g->helpers, "kc_hold") !=
	        CUDA_SUCCESS ||
	    g->cu.cuModuleGetFunction(&g->probe, g->helpers, "kc_probe") !=
	        CUDA_SUCCESS ||
	    g->cu.cuModuleGetFunction(&g->mark, g->helpers, "kc_mark") !=
	        CUDA_SUCCESS ||
	    g->cu.cuModuleGetFunction(
	        &g->mark_end, g->helpers, "kc_mark_end") != CUDA_SUCCESS)
		return kc_seterr(KC_EINTERNAL, "a helper kernel is missing");
	return 0;
}

static int ev_cmp_double(const void *a, const void *b);

/* The median of n sorted doubles; 0 for none. */
static double
ev_sorted_median(const double *v, unsigned n)
{
	if (n == 0)
		return 0;
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The median of n doubles (sorted in place); 0 for none. */
static double
ev_median(double *v, unsigned n)
{
	qsort(v, n, sizeof(*v), ev_cmp_double);
	return ev_sorted_median(v, n);
}

/* A kernel that does nothing, one block per SM (kc_mark or kc_probe). */
static CUresult
gpu_launch_empty(gpu *g, CUfunction f)
{
	CUdeviceptr sink = g->acc + 7 * sizeof(uint64_t);
	void *params[1] = {&sink};

	return g->cu.cuLaunchKernel(
	    f, (unsigned)g->sms, 1, 1, 128, 1, 1, 0, g->stream, params, NULL);
}

/* The L2 flush before a timed run (ev_flush_l2). */
static CUresult
gpu_flush_l2(gpu *g)
{
	uint64_t n = g->flush_bytes / 16;
	CUdeviceptr sink = g->acc + 7 * sizeof(uint64_t);
	void *params[3] = {&g->flush, &n, &sink};

	return g->cu.cuLaunchKernel(g->flush_read, (unsigned)g->sms * 8, 1, 1,
	    256, 1, 1, 0, g->stream, params, NULL);
}

/*
 * What CUDA events add to a run they time: an empty kernel (kc_probe)
 * between two events after an L2 flush, EV_CALIB_RUNS times with no wait
 * between runs, under CUPTI. launch_cost_ms is the median of its events'
 * time minus its CUPTI duration (on the H200 about 3 us: from the start
 * event to the first block's start and from the last block's end to the
 * stop event, the same for any kernel), launch_floor_ms its CUPTI
 * duration. Every timed sample is reported less the cost (sbx_sample_ms),
 * so a 30 us kernel reads 30 us and not 33.
 *
 * The runs are not held: a timed run's hold is released while its L2
 * flush still runs, so the GPU finds the run queued, and so it finds
 * these (the host enqueues each within its flush). A GPU that waits at a
 * hold sees less, 2.4 us (measured with a wait after each run); held
 * calibration runs that sometimes met that case read 2.5 us in one child
 * and 3.3 us in the next. Without CUPTI both stay 0: raw event times.
 */
static void
gpu_calibrate(gpu *g)
{
	double probe[EV_CALIB_RUNS], cost[EV_CALIB_RUNS];
	/* The timed runs' own events, made here before any timing. */
	CUevent *ev = g->ev;
	unsigned n = 0, made = 0;
	int bad = 0;

	for (; !bad && made < 2 * EV_CALIB_RUNS; made++)
		bad = ev[made] == NULL &&
		    g->cu.cuEventCreate(&ev[made], CU_EVENT_DEFAULT) !=
		        CUDA_SUCCESS;
	if (!bad && sbx_prof_activity_start() != 0)
		bad = 1;
	for (; !bad && n < EV_CALIB_RUNS; n++)
		bad = gpu_launch_empty(g, g->mark) != CUDA_SUCCESS ||
		    gpu_flush_l2(g) != CUDA_SUCCESS ||
		    g->cu.cuEventRecord(ev[2 * n], g->stream) != CUDA_SUCCESS ||
		    gpu_launch_empty(g, g->probe) != CUDA_SUCCESS ||
		    g->cu.cuEventRecord(ev[2 * n + 1], g->stream) !=
		        CUDA_SUCCESS ||
		    gpu_launch_empty(g, g->mark_end) != CUDA_SUCCESS;
	if (made == 2 * EV_CALIB_RUNS) {
		bad =
		    bad || g->cu.cuStreamSynchronize(g->stream) != CUDA_SUCCESS;
		sbx_prof_activity_stop(NULL);
	}
	for (unsigned i = 0; !bad && i < n; i++) {
		float ms = 0;
		bad = g->cu.cuEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]) !=
		    CUDA_SUCCESS;
		cost[i] = ms;
	}
	if (bad || n < EV_CALIB_RUNS ||
	    sbx_prof_runs(NULL, probe, EV_CALIB_RUNS) != EV_CALIB_RUNS) {
		KC_WARN("the events' cost around a launch could not be "
		        "measured: timed runs are reported as their events "
		        "say");
		return;
	}
	for (unsigned i = 0; i < n; i++)
		cost[i] -= probe[i];
	g->launch_cost_ms = ev_median(cost, n);
	g->launch_floor_ms = ev_median(probe, n);
	if (g->launch_cost_ms < 0 || g->launch_floor_ms <= 0)
		g->launch_cost_ms = g->launch_floor_ms = 0;
}

/*
 * The device's ceilings for the speed of light: the copy bandwidth,
 * measured (best of three device-to-device copies of 256 MiB, which no L2
 * holds; read plus write), and the arithmetic peak, from the SM count and
 * clock at 8192 operations per SM per clock (Hopper's dense fp8 tensor
 * rate, the fastest arithmetic there is). Nothing measured: 0, and the
 * speed of light is not applied.
 */
static void
gpu_measure_ceilings(gpu *g)
{
	size_t half = (size_t)256 << 20;
	CUdeviceptr buf = 0;
	CUevent a = NULL, b = NULL;
	float best = 0;
	int clock_khz = gpu_attr(g, CU_DEVICE_ATTRIBUTE_CLOCK_RATE);

	g->peak_flops_per_ms = (double)g->sms * clock_khz * 8192.0;
	if (g->cu.cuMemAlloc(&buf, 2 * half) != CUDA_SUCCESS)
		return;
	if (g->cu.cuEventCreate(&a, CU_EVENT_DEFAULT) == CUDA_SUCCESS &&
	    g->cu.cuEventCreate(&b, CU_EVENT_DEFAULT) == CUDA_SUCCESS) {
		for (int i = 0; i < 4; i++) {
			float ms = 0;
			g->cu.cuEventRecord(a, g->stream);
			g->cu.cuMemcpyDtoDAsync(
			    buf + half, buf, half, g->stream);
			g->cu.cuEventRecord(b, g->stream);
			if (g->cu.cuEventSynchronize(b) != CUDA_SUCCESS ||
			    g->cu.cuEventElapsedTime(&ms, a, b) != CUDA_SUCCESS)
				break;
			if (i > 0 && ms > 0 && (best == 0 || ms < best))
				best = ms;
		}
	}
	if (best > 0)
		g->bw_bytes_per_ms = 2.0 * (double)half / best;
	g->cu.cuMemFree(buf);
	gpu_calibrate(g);
	KC_INFO("copy bandwidth %.0f GB/s, arithmetic peak %.0f TFLOP/s, "
	        "events' cost around a launch %.4f ms (an empty one %.4f ms)",
	    g->bw_bytes_per_ms / 1e6, g->peak_flops_per_ms / 1e9,
	    g->launch_cost_ms, g->launch_floor_ms);
}

/*
 * The hold's flag: two words of host memory mapped for the device. The
 * hold is launched once here, released at once, so its module is loaded
 * before any timed run. Without it (a driver that cannot map host
 * memory) runs are timed as they are launched.
 */
static void
gpu_hold_init(gpu *g)
{
	void *p = NULL;
	uint32_t want = 0;
	uint64_t max_ns = 0;
	void *params[3] = {&g->hold_dev, &want, &max_ns};

	if (g->cu.cuMemHostAlloc(&p, 64, CU_MEMHOSTALLOC_DEVICEMAP) !=
	    CUDA_SUCCESS) {
		KC_WARN("no host memory for the timing hold: timed runs "
		        "include their launch latency");
		return;
	}
	memset(p, 0, 64);
	if (g->cu.cuMemHostGetDevicePointer(&g->hold_dev, p, 0) !=
	        CUDA_SUCCESS ||
	    g->cu.cuLaunchKernel(g->hold, 1, 1, 1, 1, 1, 1, 0, g->stream,
	        params, NULL) != CUDA_SUCCESS) {
		KC_WARN("the timing hold cannot run: timed runs include "
		        "their launch latency");
		g->cu.cuMemFreeHost(p);
		return;
	}
	g->hold_flag = p;
}

static int
gpu_init(void **state, const sbx_child_config *cfg, Kclaw__EvalResult *ready)
{
	gpu *g = calloc(1, sizeof(*g));
	int n = 0, major, minor, rv;
	CUresult r;

	if (g == NULL)
		return KC_ENOMEM;
	*state = g;
	snprintf(g->cache_dir, sizeof(g->cache_dir), "%s",
	    cfg->cache_dir ? cfg->cache_dir : "");
	snprintf(g->arch_override, sizeof(g->arch_override), "%s",
	    cfg->arch ? cfg->arch : "");
	g->device = cfg->device;
	g->nthreads = (int)sysconf(_SC_NPROCESSORS_ONLN);
	if (g->nthreads > 16)
		g->nthreads = 16;
	sbx_limits_generic(&g->lim);
	if ((rv = sbx_cu_load(&g->cu)) != 0)
		goto nodev;
	if ((r = g->cu.cuInit(0)) != CUDA_SUCCESS) {
		rv =
		    kc_seterr(KC_ENODEV, "no usable GPU: cuInit failed with %s",
		        sbx_cu_errname(&g->cu, r));
		goto nodev;
	}
	if (g->cu.cuDeviceGetCount(&n) != CUDA_SUCCESS || cfg->device >= n) {
		rv = kc_seterr(KC_ENODEV,
		    "no GPU %d: this machine has %d; use --device 0..%d",
		    cfg->device, n, n - 1);
		goto nodev;
	}
	if ((r = g->cu.cuDeviceGet(&g->dev, cfg->device)) != CUDA_SUCCESS ||
	    (r = g->cu.cuDevicePrimaryCtxRetain(&g->ctx, g->dev)) !=
	        CUDA_SUCCESS ||
	    (r = g->cu.cuCtxSetCurrent(g->ctx)) != CUDA_SUCCESS ||
	    (r = g->cu.cuStreamCreate(&g->stream, CU_STREAM_NON_BLOCKING)) !=
	        CUDA_SUCCESS) {
		rv = kc_seterr(KC_ENODEV, "GPU %d cannot be used: %s",
		    cfg->device, sbx_cu_errname(&g->cu, r));
		goto nodev;
	}
	g->cu.cuDeviceGetName(g->name, sizeof(g->name), g->dev);
	major = gpu_attr(g, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
	minor = gpu_attr(g, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
	snprintf(g->arch, sizeof(g->arch), "sm_%d%d", major, minor);
	/* Hopper's arch-specific features (wgmma, setmaxnreg) need sm_90a. */
	if (major == 9 && minor == 0)
		snprintf(g->arch, sizeof(g->arch), "sm_90a");
	g->lim.max_block[0] =
	    (uint32_t)gpu_attr(g, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
	g->lim.max_block[1] =
	    (uint32_t)gpu_attr(g, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y);
	g->lim.max_block[2] =
	    (uint32_t)gpu_attr(g, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z);
	g->lim.max_grid[0] =
	    (uint32_t)gpu_attr(g, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
	g->lim.max_grid[1] =
	    (uint32_t)gpu_attr(g, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y);
	g->lim.max_grid[2] =
	    (uint32_t)gpu_attr(g, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z);
	g->lim.max_threads_per_block =
	    (uint32_t)gpu_attr(g, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
	g->lim.max_shared_optin = (uint32_t)gpu_attr(
	    g, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
	g->sms = gpu_attr(g, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
	g->max_threads_sm =
	    gpu_attr(g, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
	g->l2_bytes = gpu_attr(g, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
	/* Writing twice the L2's size evicts whatever a run left there. */
	g->flush_bytes = (size_t)(g->l2_bytes > 0 ? g->l2_bytes : 64 << 20) * 2;
	if ((r = g->cu.cuMemAlloc(&g->flush, g->flush_bytes)) != CUDA_SUCCESS ||
	    (r = g->cu.cuMemAlloc(&g->hash_out,
	         EV_MAX_TENSORS * sizeof(uint64_t))) != CUDA_SUCCESS ||
	    (r = g->cu.cuMemAlloc(&g->acc, 8 * sizeof(uint64_t))) !=
	        CUDA_SUCCESS ||
	    (r = g->cu.cuMemAlloc(&g->lt_work, EV_LT_WORKSPACE)) !=
	        CUDA_SUCCESS ||
	    (r = g->cu.cuMemAlloc(
	         &g->chk, (size_t)EV_MAX_ITERS * EV_CHK_OUTS * EV_CHK_SLOT)) !=
	        CUDA_SUCCESS) {
		rv = kc_seterr(KC_ENODEV, "GPU %d: cannot allocate: %s",
		    cfg->device, sbx_cu_errname(&g->cu, r));
		goto nodev;
	}
	if ((rv = gpu_load_helpers(g)) != 0)
		goto nodev;
	/* Defined contents for the L2 flush to read. */
	g->cu.cuMemsetD8Async(g->flush, 0x5a, g->flush_bytes, g->stream);
	gpu_hold_init(g);
	/* The ceilings are measured at the first evaluation, not here: a
	 * spare child starts beside a busy one, and its copies would disturb
	 * that one's timing (and be slowed by it). CUPTI is started once
	 * here, with no GPU work, so the first evaluation's calibration
	 * (gpu_calibrate) does not wait for its set-up. */
	if (sbx_prof_activity_start() == 0)
		sbx_prof_activity_stop(NULL);
	if (sbx_lt_open(&g->lt) != 0)
		KC_WARN("cuBLASLt unavailable: %s", kc_lasterr());
	else
		sbx_lt_set_workspace(g->lt, g->lt_work, EV_LT_WORKSPACE);
	g->have_device = 1;
	sbx_result_set(&ready->device_name, "%s", g->name);
	sbx_result_set(&ready->arch, "%s", g->arch);
	KC_INFO("GPU %d: %s (%s, %d SMs, L2 %d KiB)", cfg->device, g->name,
	    g->arch, g->sms, g->l2_bytes / 1024);
	return 0;
nodev:
	snprintf(g->nodev_reason, sizeof(g->nodev_reason), "%s", kc_lasterr());
	if (g->arch_override[0])
		sbx_result_set(&ready->arch, "%s", g->arch_override);
	KC_WARN("%s", g->nodev_reason);
	return rv;
}

static void
gpu_fini(void *state)
{
	gpu *g = state;

	if (g == NULL)
		return;
	for (int k = 0; k < EV_MAX_TRIALS; k++)
		for (int t = 0; t < EV_MAX_TENSORS; t++)
			if (g->pool_raw[k][t] != NULL)
				munmap(g->pool_raw[k][t],
				    g->pool_bytes[k][t] + EV_HUGE);
	sbx_torchref_free(g->tr);
	if (g->have_device) {
		if (g->lt)
			sbx_lt_close(g->lt);
		if (g->pinned)
			g->cu.cuMemFreeHost(g->pinned);
		if (g->hold_flag)
			g->cu.cuMemFreeHost((void *)g->hold_flag);
		g->cu.cuMemFree(g->flush);
		g->cu.cuMemFree(g->hash_out);
		g->cu.cuMemFree(g->acc);
		g->cu.cuMemFree(g->chk);
		g->cu.cuMemFree(g->lt_work);
		g->cu.cuModuleUnload(g->helpers);
	}
	free(g);
}

/* ------------------------------------------------------------- resources */

static void
ev_add_resources(ev *e, const prog *p, int loaded)
{
	Kclaw__EvalResult *res = e->res;
	const sbx_compiled *c = &p->comp;

	res->kernels = calloc(c->nsigs ? c->nsigs : 1, sizeof(*res->kernels));
	if (res->kernels == NULL)
		return;
	for (size_t i = 0; i < c->nsigs; i++) {
		Kclaw__KernelResources *k = malloc(sizeof(*k));
		const sbx_ptxas_info *pi = NULL;

		if (k == NULL)
			return;
		kclaw__kernel_resources__init(k);
		k->kernel = strdup(c->sigs[i].name);
		for (size_t j = 0; j < c->ninfo; j++)
			if (strcmp(c->info[j].name, c->sigs[i].name) == 0)
				pi = &c->info[j];
		if (pi != NULL) {
			k->registers = pi->registers;
			k->shared_static_bytes = pi->shared_bytes;
			k->local_bytes = pi->stack_bytes;
			k->spill_bytes = pi->spill_store_bytes;
			k->const_bytes = pi->const_bytes;
		}
		if (loaded) {
			/* The loaded module's numbers are the truth. */
			CUfunction f;
			int v;
			if (e->g->cu.cuModuleGetFunction(
			        &f, p->mod, c->sigs[i].name) == CUDA_SUCCESS) {
				e->g->cu.cuFuncGetAttribute(
				    &v, CU_FUNC_ATTRIBUTE_NUM_REGS, f);
				k->registers = v;
				e->g->cu.cuFuncGetAttribute(
				    &v, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f);
				k->shared_static_bytes = v;
				e->g->cu.cuFuncGetAttribute(
				    &v, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f);
				k->local_bytes = v;
				e->g->cu.cuFuncGetAttribute(
				    &v, CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES, f);
				k->const_bytes = v;
				e->g->cu.cuFuncGetAttribute(&v,
				    CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f);
				k->max_threads_per_block = v;
				/* Occupancy for the first step that launches
				 * it, with that step's block and shared. */
				for (size_t s = 0;
				     p->plan && s < p->plan->nsteps; s++) {
					const sbx_step *st = &p->plan->steps[s];
					int threads, blocks = 0;
					if (st->kind != SBX_STEP_KERNEL ||
					    strcmp(st->kernel, k->kernel) != 0)
						continue;
					threads = (int)(st->block[0] *
					    st->block[1] * st->block[2]);
					if (e->g->cu
					        .cuOccupancyMaxActiveBlocksPerMultiprocessor(
					            &blocks, f, threads,
					            st->shared_bytes) ==
					    CUDA_SUCCESS)
						k->occupancy =
						    (double)(blocks * threads) /
						    e->g->max_threads_sm;
					k->block_threads = threads;
					break;
				}
			}
		}
		res->kernels[res->n_kernels++] = k;
	}
}

/* ------------------------------------------------------------ programs */

static int
prog_compile(ev *e, prog *p, const char *source, const char *arch)
{
	int rv = sbx_compile(source, arch,
	    e->g->cache_dir[0] ? e->g->cache_dir : NULL, &p->comp);

	if (p == &e->cand) {
		e->res->compile_ms = p->comp.ms;
		e->res->compile_cached = p->comp.cached;
		sbx_result_set(
		    &e->res->compile_log, "%s", p->comp.log ? p->comp.log : "");
	}
	if (rv == KC_EINVAL && p == &e->cand) {
		sbx_result_status(e->res, KCLAW__EVAL_STATUS__COMPILE_ERROR,
		    "%s; the compile log has NVRTC's errors", kc_lasterr());
		return -1;
	}
	if (rv != 0) {
		sbx_result_status(e->res, EV_INTERNAL, "%s %s: %s",
		    p == &e->cand ? "compiling the candidate"
		                  : "compiling the task's reference",
		    "failed",
		    p->comp.log && *p->comp.log ? p->comp.log : kc_lasterr());
		return -1;
	}
	/* Device printf stalls an evaluation (measured: over 60 s for 1M
	 * threads; tests/gpu/adversarial, printf_flood) and the device heap
	 * outlives a run: both are refused by what the PTX calls. */
	if (p == &e->cand && sbx_ptx_refusal(p->comp.ptx) != NULL) {
		sbx_result_status(e->res, KCLAW__EVAL_STATUS__COMPILE_ERROR,
		    "%s", sbx_ptx_refusal(p->comp.ptx));
		return -1;
	}
	return 0;
}

/* Parses and checks the plan; refines signatures from the loaded module. */
static int
prog_plan(ev *e, prog *p, const char *plan_json, int loaded)
{
	Kclaw__EvalStatus bad =
	    p == &e->cand ? KCLAW__EVAL_STATUS__PLAN_ERROR : EV_INTERNAL;
	const char *who = p == &e->cand ? "" : "the task's reference: ";

	if (sbx_plan_parse(plan_json, e->task, &p->plan) != 0) {
		sbx_result_status(e->res, bad, "%s%s", who, kc_lasterr());
		return -1;
	}
	if (loaded) {
		for (size_t i = 0; i < p->comp.nsigs; i++) {
			sbx_sig *s = &p->comp.sigs[i];
			CUfunction f;
			size_t off, size, n = 0;
			int v = 0;

			if (e->g->cu.cuModuleGetFunction(&f, p->mod, s->name) !=
			    CUDA_SUCCESS)
				continue;
			while (n < SBX_MAX_ARGS &&
			    e->g->cu.cuFuncGetParamInfo(f, n, &off, &size) ==
			        CUDA_SUCCESS)
				s->sizes[n++] = (uint32_t)size;
			s->nparams = n;
			e->g->cu.cuFuncGetAttribute(
			    &v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f);
			s->max_threads = v;
			e->g->cu.cuFuncGetAttribute(
			    &v, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f);
			s->shared_static = v;
		}
	}
	if (sbx_plan_check(p->plan, p->comp.sigs, p->comp.nsigs, &e->g->lim) !=
	    0) {
		sbx_result_status(e->res, bad, "%s%s", who, kc_lasterr());
		return -1;
	}
	return 0;
}

static int
prog_load(ev *e, prog *p)
{
	Kclaw__EvalStatus bad =
	    p == &e->cand ? KCLAW__EVAL_STATUS__LAUNCH_ERROR : EV_INTERNAL;
	gpu *g = e->g;
	char what[128];

	snprintf(what, sizeof(what), "loading the %s's module", p->what);
	EV_CU(e, g->cu.cuModuleLoadData(&p->mod, p->comp.cubin), bad, what);
	return 0;
}

/* Resolves each step's function and allocates the plan's scratch. */
static int
prog_prepare(ev *e, prog *p)
{
	Kclaw__EvalStatus bad =
	    p == &e->cand ? KCLAW__EVAL_STATUS__LAUNCH_ERROR : EV_INTERNAL;
	gpu *g = e->g;
	char what[256];

	p->funcs = calloc(p->plan->nsteps, sizeof(*p->funcs));
	p->nscratch = p->plan->nbuffers - p->plan->ntensors;
	p->scratch = calloc(p->nscratch + 1, sizeof(*p->scratch));
	if (p->funcs == NULL || p->scratch == NULL) {
		sbx_result_status(e->res, EV_INTERNAL, "out of memory");
		return -1;
	}
	for (size_t s = 0; s < p->plan->nsteps; s++) {
		const sbx_step *st = &p->plan->steps[s];
		if (st->kind == SBX_STEP_MATMUL) {
			if (g->lt == NULL) {
				sbx_result_status(e->res, bad,
				    "plan: step %zu: cuBLASLt is not "
				    "available in this sandbox",
				    s);
				return -1;
			}
			continue;
		}
		snprintf(what, sizeof(what), "%s step %zu: kernel '%s'",
		    p->what, s, st->kernel);
		EV_CU(e,
		    g->cu.cuModuleGetFunction(&p->funcs[s], p->mod, st->kernel),
		    bad, what);
		if (st->shared_bytes > 48 * 1024)
			EV_CU(e,
			    g->cu.cuFuncSetAttribute(p->funcs[s],
			        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
			        (int)st->shared_bytes),
			    bad, what);
	}
	for (size_t i = 0; i < p->nscratch; i++) {
		const sbx_buffer *b = &p->plan->buffers[p->plan->ntensors + i];
		snprintf(what, sizeof(what),
		    "allocating %s scratch '%s' (%zu bytes)", p->what, b->name,
		    b->bytes);
		EV_CU(e, g->cu.cuMemAlloc(&p->scratch[i], b->bytes), bad, what);
	}
	return 0;
}

static int ev_poison(ev *e, const prog *p);

/*
 * The candidate's module-scope variables (`__device__` arrays, static
 * locals), which would otherwise carry state from one run into the next
 * (a memo of outputs by input, a run counter): each is found by its PTX
 * declaration, and its loaded contents are kept in host memory no kernel
 * can reach (zero-filled ones need no copy), to be restored before every
 * run.
 */
static int
prog_globals(ev *e, prog *p)
{
	sbx_ptx_global *v = NULL;
	size_t n = 0;
	gpu *g = e->g;

	if (p->comp.ptx == NULL)
		return 0;
	if (sbx_ptx_globals(p->comp.ptx, &v, &n) != 0 ||
	    (p->globals = calloc(n + 1, sizeof(*p->globals))) == NULL) {
		sbx_ptx_globals_free(v, n);
		sbx_result_status(e->res, EV_INTERNAL, "out of memory");
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		ev_global *gl = &p->globals[p->nglobals];
		if (g->cu.cuModuleGetGlobal(&gl->ptr, &gl->bytes, p->mod,
		        v[i].name) != CUDA_SUCCESS ||
		    gl->bytes == 0)
			continue;
		if (v[i].initialised) {
			if ((gl->init = malloc(gl->bytes)) == NULL ||
			    g->cu.cuMemcpyDtoH(gl->init, gl->ptr, gl->bytes) !=
			        CUDA_SUCCESS) {
				free(gl->init);
				sbx_ptx_globals_free(v, n);
				sbx_result_status(e->res, EV_INTERNAL,
				    "cannot read the candidate's global '%s'",
				    v[i].name);
				return -1;
			}
		}
		p->nglobals++;
	}
	sbx_ptx_globals_free(v, n);
	return 0;
}

/*
 * Before every run of p, nothing an earlier run left may remain: outputs
 * and scratch hold the poison (all-ones bytes, NaN), cuBLASLt's workspace
 * too, and the module's variables their loaded contents. So no state
 * survives from one run to the next (docs/plan.md, guarantee 2).
 */
static int
ev_fresh_state(ev *e, const prog *p)
{
	gpu *g = e->g;

	if (ev_poison(e, p) != 0)
		return -1;
	EV_CU(e,
	    g->cu.cuMemsetD8Async(g->lt_work, 0xff, EV_LT_WORKSPACE, g->stream),
	    EV_INTERNAL, "clearing the matmul workspace");
	for (size_t i = 0; i < p->nglobals; i++) {
		const ev_global *gl = &p->globals[i];
		if (gl->init == NULL)
			EV_CU(e,
			    g->cu.cuMemsetD8Async(
			        gl->ptr, 0, gl->bytes, g->stream),
			    EV_INTERNAL, "restoring the module's variables");
		else
			EV_CU(e,
			    g->cu.cuMemcpyHtoDAsync(
			        gl->ptr, gl->init, gl->bytes, g->stream),
			    EV_INTERNAL, "restoring the module's variables");
	}
	return 0;
}

static void
prog_free(ev *e, prog *p)
{
	for (size_t i = 0; i < p->nglobals; i++)
		free(p->globals[i].init);
	free(p->globals);
	if (e->g->have_device && !*e->fatal) {
		for (size_t i = 0; p->scratch && i < p->nscratch; i++)
			if (p->scratch[i])
				e->g->cu.cuMemFree(p->scratch[i]);
		if (p->mod)
			e->g->cu.cuModuleUnload(p->mod);
	}
	free(p->scratch);
	free(p->funcs);
	sbx_plan_free(p->plan);
	sbx_compiled_free(&p->comp);
}

static CUdeviceptr
prog_buffer(const ev *e, const prog *p, int b)
{
	if ((size_t)b < p->plan->ntensors && p->outs != NULL &&
	    (size_t)b < EV_MAX_TENSORS && p->outs[b] != 0)
		return p->outs[b];
	if ((size_t)b < p->plan->ntensors)
		return e->tdev[b];
	return p->scratch[(size_t)b - p->plan->ntensors];
}

/* Enqueues every step of p on the stream. Launch errors are the plan's. */
static int
prog_enqueue(ev *e, const prog *p)
{
	Kclaw__EvalStatus bad =
	    p == &e->cand ? KCLAW__EVAL_STATUS__LAUNCH_ERROR : EV_INTERNAL;
	gpu *g = e->g;

	if (p == &e->cand)
		e->cand_runs++;
	else
		e->ref_runs++;
	for (size_t s = 0; s < p->plan->nsteps; s++) {
		const sbx_step *st = &p->plan->steps[s];
		CUdeviceptr ptrs[SBX_MAX_ARGS];
		void *params[SBX_MAX_ARGS];
		char what[256];
		CUresult r;

		if (st->kind == SBX_STEP_MATMUL) {
			const sbx_matmul *m = &st->mm;
			if (sbx_lt_matmul(g->lt, m, prog_buffer(e, p, m->a),
			        prog_buffer(e, p, m->b),
			        m->c >= 0 ? prog_buffer(e, p, m->c) : 0,
			        prog_buffer(e, p, m->d),
			        m->bias >= 0 ? prog_buffer(e, p, m->bias) : 0,
			        g->stream) != 0) {
				sbx_result_status(e->res, bad,
				    "%s step %zu (matmul): %s", p->what, s,
				    kc_lasterr());
				return -1;
			}
			continue;
		}
		for (size_t a = 0; a < st->nargs; a++) {
			const sbx_arg *arg = &st->args[a];
			if (arg->kind == SBX_ARG_BUFFER) {
				ptrs[a] = prog_buffer(e, p, arg->buffer);
				params[a] = &ptrs[a];
			} else {
				params[a] = (void *)&arg->v;
			}
		}
		r = g->cu.cuLaunchKernel(p->funcs[s], st->grid[0], st->grid[1],
		    st->grid[2], st->block[0], st->block[1], st->block[2],
		    st->shared_bytes, g->stream, params, NULL);
		if (r != CUDA_SUCCESS) {
			snprintf(what, sizeof(what),
			    "%s step %zu: launching kernel '%s' (grid "
			    "[%u,%u,%u], block [%u,%u,%u], %u shared bytes)",
			    p->what, s, st->kernel, st->grid[0], st->grid[1],
			    st->grid[2], st->block[0], st->block[1],
			    st->block[2], st->shared_bytes);
			return ev_cu(e, r, bad, what);
		}
	}
	return 0;
}

/* Runs p once and waits: faults surface here. */
static int
prog_run_sync(ev *e, const prog *p)
{
	char what[128];

	if (prog_enqueue(e, p) != 0)
		return -1;
	snprintf(what, sizeof(what), "running the %s", p->what);
	EV_CU(e, e->g->cu.cuStreamSynchronize(e->g->stream),
	    p == &e->cand ? KCLAW__EVAL_STATUS__LAUNCH_ERROR : EV_INTERNAL,
	    what);
	return 0;
}

/* ---------------------------------------------------------------- tensors */

static int
ev_is_float(Kclaw__DType d)
{
	return d == KCLAW__DTYPE__F32 || d == KCLAW__DTYPE__F16 ||
	    d == KCLAW__DTYPE__BF16 || d == KCLAW__DTYPE__F64;
}

/*
 * Generates tensor t's contents for a trial into dst. Floating inputs get
 * one of EV_VARIANTS distributions by trial: the task's own, then
 * heavy-tailed, uniform, shifted, scaled, sparse and sign-skewed versions
 * of it, so that an output that only looks right for one distribution (a
 * tabulated statistic, a near-constant loss) is caught; uniform inputs
 * keep their range (a candidate may rely on it, e.g. for log) but move
 * within it. Parameters are the same in every trial. The evaluation's
 * random salt is part of every seed: a candidate that regenerates the
 * inputs from the task's seed instead of reading them
 * (tests/gpu/adversarial, fixed_seed_replica) gets them wrong.
 */
static int
ev_generate(ev *e, size_t t, unsigned trial, CUdeviceptr dst)
{
	const Kclaw__TensorSpec *ts = e->task->tensors[t];
	const Kclaw__InitSpec *in = ts->init;
	int dist = GEN_NORMAL;
	double a = 0, b = 1, c = 3;
	uint64_t seed, n = e->tcount[t];
	void *params[7];
	unsigned grid;
	gpu *g = e->g;

	if (in != NULL) {
		switch (in->dist) {
		case KCLAW__DISTRIBUTION__NORMAL:
			dist = GEN_NORMAL;
			a = in->mean;
			b = in->scale != 0 ? in->scale : 1;
			break;
		case KCLAW__DISTRIBUTION__UNIFORM:
			dist = GEN_UNIFORM;
			a = in->low;
			b = in->high;
			break;
		case KCLAW__DISTRIBUTION__HEAVY_TAILED:
			dist = GEN_STUDENT_T;
			a = in->mean;
			b = in->scale != 0 ? in->scale : 1;
			c = in->dof > 0 ? in->dof : 3;
			break;
		case KCLAW__DISTRIBUTION__ZEROS: dist = GEN_ZEROS; break;
		case KCLAW__DISTRIBUTION__ONES: dist = GEN_ONES; break;
		case KCLAW__DISTRIBUTION__ARANGE: dist = GEN_ARANGE; break;
		case KCLAW__DISTRIBUTION__RANDINT:
			dist = GEN_RANDINT;
			a = in->low;
			b = in->high;
			break;
		default: break;
		}
	}
	if (ts->kind == KCLAW__TENSOR_KIND__INPUT && ev_is_float(ts->dtype)) {
		unsigned v = ev_variant(trial);
		if (dist == GEN_NORMAL || dist == GEN_STUDENT_T) {
			switch (v) {
			case 1:
				dist = dist == GEN_NORMAL ? GEN_STUDENT_T
				                          : GEN_NORMAL;
				break;
			case 2:
				dist = GEN_UNIFORM;
				a = a - 2 * b;
				b = a + 4 * b;
				break;
			case 3: a = a + b; break;
			case 4: b = 4 * b; break;
			case 5: dist = GEN_SPARSE; break;
			case 6: dist = GEN_SKEWED; break;
			default: break;
			}
		} else if (dist == GEN_UNIFORM && v > 0) {
			double q = (b - a) / 4;
			if (v % 2 == 1)
				b = a + q;
			else if (v % 3 == 0)
				a = b - q;
		}
	}
	if (ts->kind == KCLAW__TENSOR_KIND__PARAMETER)
		trial = 0;
	seed = (e->task->seed ^ e->salt) * 0x9e3779b97f4a7c15ull ^
	    ((uint64_t)trial << 32) ^ (uint64_t)(t + 1) * 0xd1b54a32d192ed03ull;
	params[0] = &dst;
	params[1] = &n;
	params[2] = &seed;
	params[3] = &dist;
	params[4] = &a;
	params[5] = &b;
	params[6] = &c;
	grid = (unsigned)((n + 255) / 256);
	if (grid > (unsigned)g->sms * 16)
		grid = (unsigned)g->sms * 16;
	if (grid == 0)
		grid = 1;
	EV_CU(e,
	    g->cu.cuLaunchKernel(g->gen[ts->dtype], grid, 1, 1, 256, 1, 1, 0,
	        g->stream, params, NULL),
	    EV_INTERNAL, "generating inputs");
	return 0;
}

/*
 * The `tensors` reference's state: every set's inputs on the device (the
 * stash) and its expected outputs in host pages of the pool, unreadable
 * while the candidate runs.
 */
typedef struct {
	CUdeviceptr stash[EV_MAX_TRIALS][EV_MAX_TENSORS];
	void *expected[EV_MAX_TRIALS][EV_MAX_TENSORS]; /* mmap'd host pages */
} tensors_state;

static tensors_state *
tensors_st(const ev *e)
{
	return e->ref_state;
}

/* Loads a TensorData (.npy path or inline) checked against tensor t. */
static int
ev_load_tensor(ev *e, size_t t, const Kclaw__TensorData *td, kc_npy *out)
{
	const Kclaw__TensorSpec *ts = e->task->tensors[t];
	int rv;

	if (td->path != NULL && td->path[0] != '\0') {
		rv = kc_npy_read(td->path, EV_MAX_NPY, out);
	} else if (td->data.len >= 6 &&
	    memcmp(td->data.data, "\x93NUMPY", 6) == 0) {
		rv = kc_npy_parse(td->data.data, td->data.len, ts->name, out);
	} else if (td->data.len == e->tbytes[t]) {
		memset(out, 0, sizeof(*out));
		out->dtype = ts->dtype;
		out->count = e->tcount[t];
		out->elem_size = kc_dtype_size(ts->dtype);
		if ((out->data = malloc(td->data.len ? td->data.len : 1)) ==
		    NULL)
			return KC_ENOMEM;
		memcpy(out->data, td->data.data, td->data.len);
		rv = 0;
	} else {
		return kc_seterr(KC_EINVAL,
		    "tensor '%s': no .npy path, and %zu inline bytes where "
		    "%zu are needed (blobs must be fetched to a path first)",
		    ts->name, td->data.len, e->tbytes[t]);
	}
	if (rv != 0)
		return rv;
	if (out->dtype != ts->dtype || out->count != e->tcount[t]) {
		kc_npy_free(out);
		return kc_seterr(KC_EINVAL,
		    "tensor '%s': the .npy holds %zu elements of %s, the task "
		    "declares %zu of %s",
		    ts->name, out->count, sbx_dtype_name(out->dtype),
		    e->tcount[t], sbx_dtype_name(ts->dtype));
	}
	return 0;
}

static const Kclaw__TensorData *
ev_find_data(Kclaw__TensorData **v, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (v[i]->name != NULL && strcmp(v[i]->name, name) == 0)
			return v[i];
	return NULL;
}

/*
 * Trial k's tensor t from the reference set's list v (role "input" or
 * "expected"), loaded into arr; on failure the result says why.
 */
static int
ev_ref_tensor(ev *e, unsigned k, size_t t, Kclaw__TensorData **v, size_t n,
    const char *role, kc_npy *arr)
{
	const Kclaw__TensorSpec *ts = e->task->tensors[t];
	const Kclaw__TensorData *td = ev_find_data(v, n, ts->name);

	if (td == NULL) {
		sbx_result_status(e->res, EV_INTERNAL,
		    "the task's reference set %u has no %s '%s'", k, role,
		    ts->name);
		return -1;
	}
	if (ev_load_tensor(e, t, td, arr) != 0) {
		sbx_result_status(e->res, EV_INTERNAL,
		    "the task's reference: %s", kc_lasterr());
		return -1;
	}
	return 0;
}

/*
 * Trial k's expected tensor t: a pooled host buffer of at least bytes,
 * aligned to and advised for 2 MiB pages: mprotect, which hides it while
 * the candidate runs, then changes a few hundred entries instead of tens of
 * thousands (about 25 ms per 256 MiB with 4 KiB pages).
 */
static void *
ev_expected_buf(gpu *g, unsigned k, size_t t, size_t bytes)
{
	size_t need = (bytes + EV_HUGE - 1) / EV_HUGE * EV_HUGE;
	char *raw;

	if (need == 0)
		need = EV_HUGE;
	if (g->pool_bytes[k][t] >= need) {
		mprotect(
		    g->pool[k][t], g->pool_bytes[k][t], PROT_READ | PROT_WRITE);
		return g->pool[k][t];
	}
	if (g->pool_raw[k][t] != NULL)
		munmap(g->pool_raw[k][t], g->pool_bytes[k][t] + EV_HUGE);
	g->pool[k][t] = g->pool_raw[k][t] = NULL;
	g->pool_bytes[k][t] = 0;
	raw = mmap(NULL, need + EV_HUGE, PROT_READ | PROT_WRITE,
	    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (raw == MAP_FAILED)
		return NULL;
	g->pool_raw[k][t] = raw;
	g->pool[k][t] = (void *)(((uintptr_t)raw + EV_HUGE - 1) &
	    ~(uintptr_t)(EV_HUGE - 1));
	g->pool_bytes[k][t] = need;
	madvise(g->pool[k][t], need, MADV_HUGEPAGE);
	return g->pool[k][t];
}

/* Expected outputs are unreadable while the candidate runs: not on the
 * device, and not even in host pages the GPU could map (HMM). Trial k, or
 * every trial when k < 0. */
static void
ev_expected_protect(ev *e, int k, int prot)
{
	for (unsigned j = 0; j < e->trials; j++) {
		if (k >= 0 && j != (unsigned)k)
			continue;
		for (size_t t = 0; t < e->nt; t++)
			if (tensors_st(e)->expected[j][t] != NULL)
				mprotect(tensors_st(e)->expected[j][t],
				    e->g->pool_bytes[j][t], prot);
	}
}

static int
ev_poison(ev *e, const prog *p)
{
	gpu *g = e->g;

	for (size_t t = 0; t < e->nt; t++)
		if (e->task->tensors[t]->kind == KCLAW__TENSOR_KIND__OUTPUT)
			EV_CU(e,
			    g->cu.cuMemsetD8Async(p != NULL &&
			                p->outs != NULL && t < EV_MAX_TENSORS &&
			                p->outs[t]
			            ? p->outs[t]
			            : e->tdev[t],
			        0xff, e->tbytes[t], g->stream),
			    EV_INTERNAL, "poisoning outputs");
	for (size_t i = 0; p != NULL && i < p->nscratch; i++)
		EV_CU(e,
		    g->cu.cuMemsetD8Async(p->scratch[i], 0xff,
		        p->plan->buffers[p->plan->ntensors + i].bytes,
		        g->stream),
		    EV_INTERNAL, "poisoning scratch");
	return 0;
}

/* Copies trial k's inputs into the buffers the plans see. */
static int
ev_set_inputs(ev *e, unsigned k)
{
	for (size_t t = 0; t < e->nt; t++)
		if (tensors_st(e)->stash[k][t] != 0)
			EV_CU(e,
			    e->g->cu.cuMemcpyDtoDAsync(e->tdev[t],
			        tensors_st(e)->stash[k][t], e->tbytes[t],
			        e->g->stream),
			    EV_INTERNAL, "copying inputs");
	return 0;
}

/* Hashes every input and parameter into h[] (on the device). */
static int
ev_hash_tensors(ev *e, uint64_t *h, int outputs)
{
	gpu *g = e->g;
	uint64_t out[EV_MAX_TENSORS];
	size_t n = e->nt < EV_MAX_TENSORS ? e->nt : EV_MAX_TENSORS;

	EV_CU(e,
	    g->cu.cuMemsetD8Async(
	        g->hash_out, 0, EV_MAX_TENSORS * 8, g->stream),
	    EV_INTERNAL, "hashing inputs");
	for (size_t t = 0; t < n; t++) {
		CUdeviceptr dst = g->hash_out + t * 8;
		uint64_t bytes = e->tbytes[t];
		void *params[3] = {&e->tdev[t], &bytes, &dst};
		if ((e->task->tensors[t]->kind == KCLAW__TENSOR_KIND__OUTPUT) !=
		    (outputs != 0))
			continue;
		EV_CU(e,
		    g->cu.cuLaunchKernel(g->hash, (unsigned)g->sms * 8, 1, 1,
		        256, 1, 1, 0, g->stream, params, NULL),
		    EV_INTERNAL, "hashing inputs");
	}
	EV_CU(e, g->cu.cuStreamSynchronize(g->stream),
	    KCLAW__EVAL_STATUS__LAUNCH_ERROR, "running the candidate");
	EV_CU(e, g->cu.cuMemcpyDtoH(out, g->hash_out, n * 8), EV_INTERNAL,
	    "reading hashes");
	memcpy(h, out, n * 8);
	return 0;
}

/* Hashes of every input and parameter (outputs' slots are 0). */
static int
ev_hash_inputs(ev *e, uint64_t *h)
{
	return ev_hash_tensors(e, h, 0);
}

static int
ev_pinned(ev *e, size_t bytes)
{
	gpu *g = e->g;

	if (g->pinned_bytes >= bytes)
		return 0;
	if (g->pinned)
		g->cu.cuMemFreeHost(g->pinned);
	g->pinned = NULL;
	g->pinned_bytes = 0;
	EV_CU(e, g->cu.cuMemAllocHost(&g->pinned, bytes), EV_INTERNAL,
	    "allocating a host staging buffer");
	g->pinned_bytes = bytes;
	return 0;
}

/* The result's mismatch for tensor t in trial (replacing an earlier one):
 * its tensor, trial and note set, the rest for the caller to fill. NULL
 * when out of memory (the status still says what was wrong). */
static Kclaw__Mismatch *
ev_mismatch_new(ev *e, size_t t, unsigned trial, const char *note)
{
	Kclaw__Mismatch *m = malloc(sizeof(*m));

	if (m == NULL)
		return NULL;
	kclaw__mismatch__init(m);
	m->tensor = strdup(e->task->tensors[t]->name);
	m->trial = trial;
	m->note = strdup(note ? note : "");
	if (e->res->mismatch)
		kclaw__mismatch__free_unpacked(e->res->mismatch, NULL);
	e->res->mismatch = m;
	return m;
}

static void
ev_mismatch(ev *e, size_t t, unsigned trial, const sbx_cmp *c, const char *note)
{
	const Kclaw__TensorSpec *ts = e->task->tensors[t];
	Kclaw__Mismatch *m = ev_mismatch_new(e, t, trial, note);
	char coords[256];

	if (m == NULL)
		return;
	sbx_coords(ts->shape, ts->n_shape, c->worst, coords, sizeof(coords));
	m->index = c->worst;
	m->coords = strdup(coords);
	m->expected = c->expected;
	m->got = c->got;
	m->max_abs_err = c->max_abs_err;
	m->max_rel_err = c->max_rel_err;
	m->rel_norm = c->rel_norm;
	m->bad_count = c->bad_count;
	m->nan_count = c->nan_count;
}

static const Kclaw__Tolerance *
ev_tolerance(const ev *e, Kclaw__Tolerance *dflt)
{
	if (e->task->tolerance != NULL)
		return e->task->tolerance;
	kclaw__tolerance__init(dflt);
	dflt->atol = 1e-5;
	dflt->rtol = 1e-5;
	return dflt;
}

/* Fills the result for output t of trial k that failed comparison c. */
static void
ev_wrong(ev *e, size_t t, unsigned k, const sbx_cmp *c, const char *when)
{
	const Kclaw__TensorSpec *ts = e->task->tensors[t];
	Kclaw__Tolerance dflt;
	const Kclaw__Tolerance *tol = ev_tolerance(e, &dflt);
	char note[256];

	if (c->nan_count > 0)
		snprintf(note, sizeof(note),
		    "%s: %llu of %zu elements of '%s' are NaN: the "
		    "poison was never overwritten (an output the "
		    "candidate did not write) or it produced NaN",
		    when, (unsigned long long)c->nan_count, e->tcount[t],
		    ts->name);
	else
		snprintf(note, sizeof(note), "%s", when);
	ev_mismatch(e, t, k, c, note);
	sbx_result_status(e->res, KCLAW__EVAL_STATUS__WRONG_RESULT,
	    "output '%s' is wrong (%s, trial %u): %llu of %zu "
	    "elements outside atol %g + rtol %g; worst at %s: expected "
	    "%.9g, got %.9g; max abs err %.3g, relative norm %.3g "
	    "(limit %g)",
	    ts->name, when, k, (unsigned long long)c->bad_count, e->tcount[t],
	    tol->atol, tol->rtol,
	    e->res->mismatch ? e->res->mismatch->coords : "?", c->expected,
	    c->got, c->max_abs_err, c->rel_norm, tol->max_rel_norm);
}

/* The worst error figures seen, over every checked run (an OK result
 * carries them). */
static void
ev_note_error(ev *e, size_t t, double max_abs, double max_rel, double rel)
{
	if (max_abs > e->max_abs)
		e->max_abs = max_abs;
	if (max_rel > e->max_rel)
		e->max_rel = max_rel;
	if (t < EV_MAX_TENSORS && (rel > e->err_rel[t] || rel != rel))
		e->err_rel[t] = rel;
}

/*
 * Enqueues the device comparison of output t's got against exp (kc_compare)
 * into slot (EV_CHK_SLOT bytes: the two sums, the bad and NaN counts, the
 * largest absolute and relative errors), zeroed first.
 */
static int
ev_dev_compare(ev *e, size_t t, CUdeviceptr got, CUdeviceptr exp, double atol,
    double rtol, CUdeviceptr slot)
{
	gpu *g = e->g;
	uint64_t n = e->tcount[t];
	int dt = (int)e->task->tensors[t]->dtype;
	CUdeviceptr sp = slot, cp = slot + 2 * sizeof(uint64_t);
	void *params[8] = {&got, &exp, &n, &dt, &atol, &rtol, &sp, &cp};

	EV_CU(e, g->cu.cuMemsetD8Async(slot, 0, EV_CHK_SLOT, g->stream),
	    EV_INTERNAL, "comparing outputs");
	EV_CU(e,
	    g->cu.cuLaunchKernel(g->compare, (unsigned)g->sms * 8, 1, 1, 256, 1,
	        1, 0, g->stream, params, NULL),
	    EV_INTERNAL, "comparing outputs");
	return 0;
}

/* A slot's figures: the relative norm of the difference, bad and NaN
 * counts. */
typedef struct {
	double rel, max_abs, max_rel;
	uint64_t bad, nans;
} ev_slot;

static void ev_slot_read(const void *raw, ev_slot *out);

/* ev_dev_compare into the scratch slot, waited for and read: what = the
 * step, for errors. */
static int
ev_dev_compare_now(ev *e, size_t t, CUdeviceptr got, CUdeviceptr exp,
    double atol, double rtol, const char *what, ev_slot *out)
{
	gpu *g = e->g;
	uint8_t raw[EV_CHK_SLOT];

	if (ev_dev_compare(e, t, got, exp, atol, rtol, g->acc) != 0)
		return -1;
	EV_CU(e, g->cu.cuStreamSynchronize(g->stream), EV_INTERNAL, what);
	EV_CU(
	    e, g->cu.cuMemcpyDtoH(raw, g->acc, sizeof(raw)), EV_INTERNAL, what);
	ev_slot_read(raw, out);
	return 0;
}

static void
ev_slot_read(const void *raw, ev_slot *out)
{
	double sums[2], maxes[2];
	uint64_t counts[2];

	memcpy(sums, raw, sizeof(sums));
	memcpy(counts, (const char *)raw + 16, sizeof(counts));
	memcpy(maxes, (const char *)raw + 32, sizeof(maxes));
	out->rel = sums[1] > 0 ? sqrt(sums[0]) / sqrt(sums[1]) : sqrt(sums[0]);
	out->bad = counts[0];
	out->nans = counts[1];
	out->max_abs = maxes[0];
	out->max_rel = maxes[1];
}

/*
 * Copies the outputs out and compares them with trial k's expected ones.
 * Returns 0 when they match, 1 on a mismatch (result filled), -1 on error.
 */
static int
ev_check_outputs(ev *e, unsigned k, const char *when)
{
	Kclaw__Tolerance dflt;
	const Kclaw__Tolerance *tol = ev_tolerance(e, &dflt);
	int bad = 0;

	ev_expected_protect(e, (int)k, PROT_READ);
	for (size_t t = 0; t < e->nt && !bad; t++) {
		const Kclaw__TensorSpec *ts = e->task->tensors[t];
		sbx_cmp c;

		if (ts->kind != KCLAW__TENSOR_KIND__OUTPUT)
			continue;
		if (ev_pinned(e, e->tbytes[t]) != 0)
			return -1;
		EV_CU(e,
		    e->g->cu.cuMemcpyDtoH(
		        e->g->pinned, e->tdev[t], e->tbytes[t]),
		    EV_INTERNAL, "reading outputs");
		sbx_compare(ts->dtype, e->g->pinned,
		    tensors_st(e)->expected[k][t], e->tcount[t], tol,
		    e->g->nthreads, &c);
		ev_note_error(e, t, c.max_abs_err, c.max_rel_err, c.rel_norm);
		if (c.ok)
			continue;
		bad = 1;
		ev_wrong(e, t, k, &c, when);
	}
	ev_expected_protect(e, (int)k, PROT_NONE);
	return bad;
}

/* ----------------------------------------------------------- the phases */

static int
ev_alloc_tensors(ev *e)
{
	gpu *g = e->g;
	char what[256];

	e->nt = e->task->n_tensors;
	if (e->nt > EV_MAX_TENSORS) {
		sbx_result_status(e->res, KCLAW__EVAL_STATUS__PLAN_ERROR,
		    "the task has %zu tensors; the sandbox handles %d", e->nt,
		    EV_MAX_TENSORS);
		return -1;
	}
	e->tdev = calloc(e->nt + 1, sizeof(*e->tdev));
	e->tbytes = calloc(e->nt + 1, sizeof(*e->tbytes));
	e->tcount = calloc(e->nt + 1, sizeof(*e->tcount));
	if (e->tdev == NULL || e->tbytes == NULL || e->tcount == NULL) {
		sbx_result_status(e->res, EV_INTERNAL, "out of memory");
		return -1;
	}
	for (size_t t = 0; t < e->nt; t++) {
		const Kclaw__TensorSpec *ts = e->task->tensors[t];
		size_t esz = kc_dtype_size(ts->dtype);
		if (esz == 0 || sbx_tensor_count(ts, &e->tcount[t]) != 0) {
			sbx_result_status(e->res, EV_INTERNAL,
			    "the task's tensor '%s' has no dtype or a bad "
			    "shape",
			    ts->name);
			return -1;
		}
		/* A scalar is passed by value (plan.c): no buffer. */
		if (ts->kind == KCLAW__TENSOR_KIND__SCALAR)
			e->tcount[t] = 0;
		e->tbytes[t] = e->tcount[t] * esz;
		snprintf(what, sizeof(what),
		    "allocating tensor '%s' (%zu bytes)", ts->name,
		    e->tbytes[t]);
		/* Where the reference's process owns the tensors (torch),
		 * they are mapped from its buffers by its prepare. */
		if (ts->kind != KCLAW__TENSOR_KIND__SCALAR &&
		    !e->ops->maps_tensors)
			EV_CU(e,
			    g->cu.cuMemAlloc(
			        &e->tdev[t], e->tbytes[t] ? e->tbytes[t] : 1),
			    EV_INTERNAL, what);
		/* Outputs larger than the kind's held_max are not copied
		 * aside: the determinism check compares hashes instead (a
		 * torch task's GPU then holds one output copy beyond the
		 * problem's own, the reference process's expected outputs). */
		if (ts->kind == KCLAW__TENSOR_KIND__OUTPUT &&
		    (e->ops->held_max == 0 || e->tbytes[t] <= e->ops->held_max))
			EV_CU(e,
			    g->cu.cuMemAlloc(
			        &e->held[t], e->tbytes[t] ? e->tbytes[t] : 1),
			    EV_INTERNAL, what);
	}
	return 0;
}

/* How much output t varies with the inputs alone (the variation rule),
 * from the expected outputs of trials 0 and 1 in host memory (tensors
 * sets). */
static void
ev_note_variation_host(ev *e)
{
	Kclaw__Tolerance loose = KCLAW__TOLERANCE__INIT;

	loose.atol = 1e300;
	for (unsigned k = 1; k < 2 && k < e->trials; k++)
		for (size_t t = 0; t < e->nt && t < EV_MAX_TENSORS; t++) {
			sbx_cmp c;
			if (tensors_st(e)->expected[k][t] == NULL ||
			    tensors_st(e)->expected[k - 1][t] == NULL)
				continue;
			sbx_compare(e->task->tensors[t]->dtype,
			    tensors_st(e)->expected[k - 1][t],
			    tensors_st(e)->expected[k][t], e->tcount[t], &loose,
			    e->g->nthreads, &c);
			e->var_rel[t] = c.rel_norm;
			e->var_known[t] = 1;
		}
}

/* `tensors` references: every trial's inputs uploaded into the stash, its
 * expected outputs read into host pages. */
static int
ev_prepare_trials(ev *e)
{
	const Kclaw__Reference *ref = e->task->reference;
	gpu *g = e->g;

	for (unsigned k = 0; k < e->trials; k++) {
		const Kclaw__TensorSet *set = ref->sets[k % ref->n_sets];
		for (size_t t = 0; t < e->nt; t++) {
			const Kclaw__TensorSpec *ts = e->task->tensors[t];
			kc_npy arr;

			if (ts->kind == KCLAW__TENSOR_KIND__OUTPUT) {
				tensors_st(e)->expected[k][t] =
				    ev_expected_buf(g, k, t, e->tbytes[t]);
				if (tensors_st(e)->expected[k][t] == NULL) {
					sbx_result_status(e->res, EV_INTERNAL,
					    "out of host memory for expected "
					    "outputs");
					return -1;
				}
				if (ev_ref_tensor(e, k, t, set->expected,
				        set->n_expected, "expected", &arr) != 0)
					return -1;
				memcpy(tensors_st(e)->expected[k][t], arr.data,
				    e->tbytes[t]);
				kc_npy_free(&arr);
				continue;
			}
			EV_CU(e,
			    g->cu.cuMemAlloc(&tensors_st(e)->stash[k][t],
			        e->tbytes[t] ? e->tbytes[t] : 1),
			    EV_INTERNAL, "allocating input sets");
			if (ev_ref_tensor(e, k, t, set->inputs, set->n_inputs,
			        "input", &arr) != 0)
				return -1;
			EV_CU(e,
			    g->cu.cuMemcpyHtoD(tensors_st(e)->stash[k][t],
			        arr.data, e->tbytes[t]),
			    EV_INTERNAL, "uploading inputs");
			kc_npy_free(&arr);
		}
	}
	EV_CU(e, g->cu.cuStreamSynchronize(g->stream), EV_INTERNAL,
	    "making inputs");
	ev_note_variation_host(e);
	ev_expected_protect(e, -1, PROT_NONE);
	return 0;
}

/* ------------------------------------------------- the reference kinds */

static CUdeviceptr
ev_chk_slot(const ev *e, unsigned slot, size_t t)
{
	return e->g->chk + ((size_t)slot * EV_CHK_OUTS + t) * EV_CHK_SLOT;
}

/*
 * The `cuda` reference: nothing is kept between runs. Every run's inputs
 * (and, before the reference runs, its parameters) are generated in place
 * from their seeds, kept in host memory no kernel can reach; the reference
 * writes its outputs into buffers of its own (cuda_state.exp), compared with
 * the candidate's on the device and poisoned again at once. So no expected
 * output exists while the candidate runs, nothing crosses to the host but
 * the comparison's figures, and a candidate that wrote its inputs cannot
 * change the problem.
 */

/* The `cuda` reference's state: its program, and the outputs it writes
 * (not the candidate's, so a check needs no copy; poisoned whenever the
 * candidate runs). */
typedef struct {
	prog ref;
	CUdeviceptr exp[EV_MAX_TENSORS];
} cuda_state;

static cuda_state *
cuda_st(const ev *e)
{
	return e->ref_state;
}

/* The tensors of input set `serial` (a verification trial, or
 * EV_MAX_TRIALS + a timed run's number): the inputs, and with params the
 * parameters too (the same in every set). */
static int
cuda_make_tensors(ev *e, unsigned serial, int params)
{
	for (size_t t = 0; t < e->nt; t++) {
		Kclaw__TensorKind kind = e->task->tensors[t]->kind;
		if (kind == KCLAW__TENSOR_KIND__OUTPUT ||
		    kind == KCLAW__TENSOR_KIND__SCALAR ||
		    (kind == KCLAW__TENSOR_KIND__PARAMETER && !params))
			continue;
		if (ev_generate(e, t, serial, e->tdev[t]) != 0)
			return -1;
	}
	return 0;
}

/* The reference's outputs poisoned: nothing it computed stays where a
 * candidate could read it. */
static int
cuda_poison_expected(ev *e)
{
	gpu *g = e->g;

	for (size_t t = 0; t < e->nt && t < EV_MAX_TENSORS; t++)
		if (cuda_st(e)->exp[t] != 0)
			EV_CU(e,
			    g->cu.cuMemsetD8Async(cuda_st(e)->exp[t], 0xff,
			        e->tbytes[t], g->stream),
			    EV_INTERNAL, "poisoning the reference's outputs");
	return 0;
}

/* Enqueues the reference on input set `serial`, made again from its seeds
 * with the parameters, into its own outputs (its scratch poisoned). */
static int
cuda_run_reference(ev *e, unsigned serial)
{
	if (cuda_make_tensors(e, serial, 1) != 0 ||
	    ev_poison(e, &cuda_st(e)->ref) != 0)
		return -1;
	return prog_enqueue(e, &cuda_st(e)->ref);
}

/*
 * How much each output varies with the inputs alone: trials 0 and 1 draw
 * from the same distribution, so the relative difference of the
 * reference's outputs on them is what a kernel that ignores its inputs
 * would get wrong (the variation rule). Compared on the device.
 */
static int
cuda_prepare(ev *e)
{
	gpu *g = e->g;

	for (size_t t = 0; t < e->nt; t++) {
		char what[256];
		if (e->task->tensors[t]->kind != KCLAW__TENSOR_KIND__OUTPUT)
			continue;
		snprintf(what, sizeof(what),
		    "allocating tensor '%s' (%zu bytes)",
		    e->task->tensors[t]->name, e->tbytes[t]);
		EV_CU(e,
		    g->cu.cuMemAlloc(
		        &cuda_st(e)->exp[t], e->tbytes[t] ? e->tbytes[t] : 1),
		    EV_INTERNAL, what);
		EV_CU(e,
		    g->cu.cuMemsetD8Async(
		        cuda_st(e)->exp[t], 0xff, e->tbytes[t], g->stream),
		    EV_INTERNAL, what);
	}
	for (unsigned k = 0; k < 2; k++) {
		if (cuda_run_reference(e, k) != 0)
			return -1;
		for (size_t t = 0; t < e->nt && t < EV_MAX_TENSORS; t++) {
			ev_slot sl;
			if (cuda_st(e)->exp[t] == 0)
				continue;
			if (k == 0) {
				EV_CU(e,
				    g->cu.cuMemcpyDtoDAsync(e->held[t],
				        cuda_st(e)->exp[t], e->tbytes[t],
				        g->stream),
				    EV_INTERNAL,
				    "measuring the outputs' variation");
				continue;
			}
			if (ev_dev_compare_now(e, t, e->held[t],
			        cuda_st(e)->exp[t], 1e300, 0,
			        "measuring the outputs' variation", &sl) != 0)
				return -1;
			e->var_rel[t] = sl.rel;
			e->var_known[t] = 1;
		}
	}
	for (size_t t = 0; t < e->nt && t < EV_MAX_TENSORS; t++)
		if (e->held[t] != 0)
			EV_CU(e,
			    g->cu.cuMemsetD8Async(
			        e->held[t], 0xff, e->tbytes[t], g->stream),
			    EV_INTERNAL, "poisoning the reference's outputs");
	if (cuda_poison_expected(e) != 0)
		return -1;
	EV_CU(e, g->cu.cuStreamSynchronize(g->stream), EV_INTERNAL,
	    "making inputs");
	return 0;
}

static int
cuda_trial_inputs(ev *e, unsigned k)
{
	return cuda_make_tensors(e, k, 1);
}

/*
 * The report for output t that failed the device comparison: both
 * buffers copied out and compared on the host, for the worst element's
 * place and values. Returns 1 when it is wrong (result filled), 0 when
 * the host finds it within tolerance after all, -1 on error.
 */
static int
cuda_report_wrong(ev *e, size_t t, unsigned k, const char *when)
{
	Kclaw__Tolerance dflt;
	const Kclaw__Tolerance *tol = ev_tolerance(e, &dflt);
	size_t bytes = e->tbytes[t];
	void *exp = malloc(bytes ? bytes : 1);
	sbx_cmp c;

	if (exp == NULL) {
		sbx_result_status(e->res, EV_INTERNAL, "out of memory");
		return -1;
	}
	if (ev_pinned(e, bytes) != 0 ||
	    ev_ok(e, e->g->cu.cuMemcpyDtoH(exp, cuda_st(e)->exp[t], bytes),
	        EV_INTERNAL, "reading the expected outputs") != 0 ||
	    ev_ok(e, e->g->cu.cuMemcpyDtoH(e->g->pinned, e->tdev[t], bytes),
	        EV_INTERNAL, "reading outputs") != 0) {
		free(exp);
		return -1;
	}
	sbx_compare(e->task->tensors[t]->dtype, e->g->pinned, exp, e->tcount[t],
	    tol, e->g->nthreads, &c);
	free(exp);
	if (c.ok)
		return 0;
	ev_wrong(e, t, k, &c, when);
	return 1;
}

/* Verification trial k: the reference run on the trial's inputs made
 * again, every output compared on the device. */
static int
cuda_trial_check(ev *e, unsigned k, const char *when)
{
	Kclaw__Tolerance dflt;
	const Kclaw__Tolerance *tol = ev_tolerance(e, &dflt);
	int rv = 0;

	if (cuda_run_reference(e, k) != 0)
		return -1;
	for (size_t t = 0; t < e->nt && t < EV_MAX_TENSORS && rv == 0; t++) {
		ev_slot sl;
		if (cuda_st(e)->exp[t] == 0)
			continue;
		if (ev_dev_compare_now(e, t, e->tdev[t], cuda_st(e)->exp[t],
		        tol->atol, tol->rtol, when, &sl) != 0)
			return -1;
		ev_note_error(e, t, sl.max_abs, sl.max_rel, sl.rel);
		if (sl.bad != 0 || sl.nans != 0 ||
		    (tol->max_rel_norm > 0 && sl.rel > tol->max_rel_norm))
			rv = cuda_report_wrong(e, t, k, when);
	}
	if (cuda_poison_expected(e) != 0)
		return -1;
	return rv;
}

/* A timed run's inputs: new ones, so no input set comes back. The
 * parameters are as the last check left them, made again from their
 * seeds (a candidate that wrote one gets its own wrong answer, since the
 * reference's run makes them again). */
static int
cuda_run_inputs(ev *e, unsigned k, unsigned id)
{
	(void)k;
	return cuda_make_tensors(e, EV_MAX_TRIALS + id, 0);
}

/* The reference run on the timed run's inputs made again, every output
 * compared on the device into the run's slot, the reference's outputs
 * poisoned before the candidate runs next. */
static int
cuda_run_check(ev *e, unsigned k, unsigned id, unsigned slot)
{
	Kclaw__Tolerance dflt;
	const Kclaw__Tolerance *tol = ev_tolerance(e, &dflt);

	(void)k;
	if (cuda_run_reference(e, EV_MAX_TRIALS + id) != 0)
		return -1;
	for (size_t t = 0; t < e->nt && t < EV_CHK_OUTS; t++)
		if (cuda_st(e)->exp[t] != 0 &&
		    ev_dev_compare(e, t, e->tdev[t], cuda_st(e)->exp[t],
		        tol->atol, tol->rtol, ev_chk_slot(e, slot, t)) != 0)
			return -1;
	return cuda_poison_expected(e);
}

static int ev_time(ev *e, prog *p, int check, Kclaw__Timing **out);

static int
cuda_baseline(ev *e)
{
	int rv = ev_time(e, &cuda_st(e)->ref, 0, &e->res->baseline);

	if (rv == 0)
		e->res->reference_ms = e->res->baseline->median_ms;
	return rv;
}

static int
tensors_run_inputs(ev *e, unsigned k, unsigned id)
{
	(void)id;
	return ev_set_inputs(e, k);
}

/* The set's expected outputs uploaded after the candidate finished (they
 * are never on the device while it runs) and compared on the device. */
static int
tensors_run_check(ev *e, unsigned k, unsigned id, unsigned slot)
{
	Kclaw__Tolerance dflt;
	const Kclaw__Tolerance *tol = ev_tolerance(e, &dflt);
	gpu *g = e->g;

	(void)id;
	EV_CU(e, g->cu.cuStreamSynchronize(g->stream),
	    KCLAW__EVAL_STATUS__LAUNCH_ERROR,
	    "running the candidate while timing");
	for (size_t t = 0; t < e->nt && t < EV_CHK_OUTS; t++) {
		CUresult r;
		if (e->task->tensors[t]->kind != KCLAW__TENSOR_KIND__OUTPUT)
			continue;
		EV_CU(e,
		    g->cu.cuMemcpyDtoDAsync(
		        e->held[t], e->tdev[t], e->tbytes[t], g->stream),
		    EV_INTERNAL, "setting a timed run's outputs aside");
		ev_expected_protect(e, (int)k, PROT_READ);
		r = g->cu.cuMemcpyHtoD(
		    e->tdev[t], tensors_st(e)->expected[k][t], e->tbytes[t]);
		ev_expected_protect(e, (int)k, PROT_NONE);
		EV_CU(e, r, EV_INTERNAL, "uploading expected outputs");
		if (ev_dev_compare(e, t, e->held[t], e->tdev[t], tol->atol,
		        tol->rtol, ev_chk_slot(e, slot, t)) != 0)
			return -1;
	}
	return 0;
}

static int
tensors_baseline(ev *e)
{
	e->res->reference_ms = e->task->reference->baseline_ms;
	return 0;
}

static void ev_warn(ev *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int ev_check_variation(ev *e, size_t t, double rel, const char *when);

static int
cuda_usable(const Kclaw__Reference *ref)
{
	return ref->kind == KCLAW__REFERENCE__KIND__CUDA && ref->cuda != NULL;
}

/* The reference program compiled, loaded and checked like a candidate
 * (its failures are the sandbox's: INTERNAL_ERROR). */
static int
cuda_setup(ev *e)
{
	const Kclaw__Candidate *rc = e->task->reference->cuda;
	cuda_state *st = calloc(1, sizeof(*st));

	if (st == NULL) {
		sbx_result_status(e->res, EV_INTERNAL, "out of memory");
		return -1;
	}
	e->ref_state = st;
	st->ref.what = "reference";
	st->ref.outs = st->exp;
	/* At least three distributions in every evaluation. */
	if (e->trials < EV_MIN_TRIALS)
		e->trials = EV_MIN_TRIALS;
	if (prog_compile(e, &st->ref, rc->source, e->g->arch) != 0 ||
	    prog_load(e, &st->ref) != 0 ||
	    prog_plan(e, &st->ref, rc->plan_json, 1) != 0 ||
	    prog_prepare(e, &st->ref) != 0)
		return -1;
	return 0;
}

static int
cuda_profile_inputs(ev *e)
{
	return cuda_make_tensors(e, 0, 1);
}

static void
cuda_release(ev *e)
{
	cuda_state *st = e->ref_state;

	if (st == NULL)
		return;
	for (size_t t = 0; t < e->nt && t < EV_MAX_TENSORS; t++)
		if (st->exp[t] && !*e->fatal)
			e->g->cu.cuMemFree(st->exp[t]);
	prog_free(e, &st->ref);
	free(st);
	e->ref_state = NULL;
}

static const ev_ref_ops ev_cuda_ops = {
    .name = "cuda",
    .usable = cuda_usable,
    .setup = cuda_setup,
    .prepare = cuda_prepare,
    .trial_inputs = cuda_trial_inputs,
    .trial_check = cuda_trial_check,
    .run_inputs = cuda_run_inputs,
    .run_check = cuda_run_check,
    .profile_inputs = cuda_profile_inputs,
    .baseline = cuda_baseline,
    .release = cuda_release,
    .batchable = 1,
};

static int
tensors_usable(const Kclaw__Reference *ref)
{
	return ref->kind == KCLAW__REFERENCE__KIND__TENSORS && ref->n_sets > 0;
}

/* One trial per recorded set unless fewer were asked for. */
static int
tensors_setup(ev *e)
{
	const Kclaw__EvalOptions *o = e->req->options;
	size_t sets = e->task->reference->n_sets;

	if ((e->ref_state = calloc(1, sizeof(tensors_state))) == NULL) {
		sbx_result_status(e->res, EV_INTERNAL, "out of memory");
		return -1;
	}
	if (!(o && o->trials))
		e->trials = (unsigned)sets;
	if (e->trials > sets)
		e->trials = (unsigned)sets;
	return 0;
}

static int
tensors_profile_inputs(ev *e)
{
	return ev_set_inputs(e, 0);
}

static void
tensors_release(ev *e)
{
	tensors_state *st = e->ref_state;

	if (st == NULL)
		return;
	for (unsigned k = 0; k < EV_MAX_TRIALS; k++)
		for (size_t t = 0; t < e->nt && t < EV_MAX_TENSORS; t++)
			if (st->stash[k][t] != 0 && !*e->fatal &&
			    (k == 0 || st->stash[k][t] != st->stash[0][t]))
				e->g->cu.cuMemFree(st->stash[k][t]);
	free(st);
	e->ref_state = NULL;
}

static const ev_ref_ops ev_tensors_ops = {
    .name = "tensors",
    .usable = tensors_usable,
    .setup = tensors_setup,
    .prepare = ev_prepare_trials,
    .trial_inputs = ev_set_inputs,
    .trial_check = ev_check_outputs,
    .run_inputs = tensors_run_inputs,
    .run_check = tensors_run_check,
    .profile_inputs = tensors_profile_inputs,
    .baseline = tensors_baseline,
    .release = tensors_release,
    .caveat = "tensors reference: its input sets are fixed, so timed runs "
              "repeat inputs the candidate has seen (memoising across "
              "runs is stopped only by resetting the candidate's state "
              "before every run), the inputs' distributions are the "
              "recorded ones, and the baseline time is the one recorded "
              "at import, not measured in this evaluation",
};

/* ------------------------------------------------ the torch reference */

/*
 * A torch task runs against PyTorch in another process (torchref.c,
 * docs/torchref.md). That process allocates the inputs, parameters and
 * outputs and exports them by CUDA IPC handles, which the child maps: the
 * candidate runs on them. The expected outputs, the weights' private copy
 * and the generated inputs' copy stay in its own context, out of every
 * candidate's reach; it compares the outputs there, after the candidate
 * finished, and answers with the figures.
 */
#define TORCH_CALL_MS 300000
#define TORCH_BASELINE_MS 900000
#define TORCH_TIMED_SERIAL 1000

/* The torch reference's state: the reference process's buffers, mapped
 * (one mapping per allocation). */
typedef struct {
	CUdeviceptr mapped[EV_MAX_TENSORS];
	CUipcMemHandle mapped_handle[EV_MAX_TENSORS];
	size_t nmapped;
} torch_state;

static torch_state *
torch_st(const ev *e)
{
	return e->ref_state;
}

/* A status for a failed call: NO_TORCH where PyTorch or its GPU is
 * missing, else INTERNAL_ERROR (the sandbox's side, retried). */
static int
torch_fail(ev *e, int rv, const cJSON *reply, const char *what)
{
	const char *code = NULL, *err = NULL;

	if (reply != NULL) {
		code = cJSON_GetStringValue(cJSON_GetObjectItem(reply, "code"));
		err = cJSON_GetStringValue(cJSON_GetObjectItem(reply, "error"));
	}
	if (rv == KC_ENOENT || rv == KC_ENODEV ||
	    (code != NULL && strcmp(code, "NO_TORCH") == 0)) {
		sbx_result_status(e->res, KCLAW__EVAL_STATUS__NO_TORCH,
		    "%s: %s; a torch task needs Python with PyTorch on the "
		    "sandbox's machine (KCLAW_PYTHON names the interpreter), "
		    "or "
		    "convert the problem with kb2bundle --tensors",
		    what, err ? err : kc_lasterr());
		return -1;
	}
	sbx_result_status(e->res, EV_INTERNAL, "%s: %s%s%s", what,
	    code ? code : "", code ? ": " : "", err ? err : kc_lasterr());
	return -1;
}

/* One request; 0 with *reply holding an "ok": true reply, else -1 with the
 * result filled. */
static int
torch_call(ev *e, cJSON *req, int timeout_ms, const char *what, cJSON **reply)
{
	gpu *g = e->g;
	int rv;

	*reply = NULL;
	if (g->tr == NULL && sbx_torchref_new(&g->tr, NULL, NULL) != 0) {
		cJSON_Delete(req);
		sbx_result_status(e->res, EV_INTERNAL, "out of memory");
		return -1;
	}
	rv = sbx_torchref_call(g->tr, req, timeout_ms, reply);
	cJSON_Delete(req);
	if (rv != 0 || !cJSON_IsTrue(cJSON_GetObjectItem(*reply, "ok"))) {
		torch_fail(e, rv, *reply, what);
		cJSON_Delete(*reply);
		*reply = NULL;
		return -1;
	}
	return 0;
}

static cJSON *
torch_req(const char *op)
{
	cJSON *r = cJSON_CreateObject();

	if (r != NULL)
		cJSON_AddStringToObject(r, "op", op);
	return r;
}

static double
torch_num(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItem(o, key);

	return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static int
torch_hex(const char *hex, unsigned char *out, size_t n)
{
	if (hex == NULL || strlen(hex) != 2 * n)
		return -1;
	for (size_t i = 0; i < n; i++) {
		unsigned v;
		if (sscanf(hex + 2 * i, "%2x", &v) != 1)
			return -1;
		out[i] = (unsigned char)v;
	}
	return 0;
}

/* Loads the task in the reference process and maps its buffers. */
static int
torch_prepare(ev *e)
{
	const Kclaw__Reference *ref = e->task->reference;
	cJSON *req = torch_req("load"), *reply, *ts, *bufs;
	char key[65];
	gpu *g = e->g;

	if (req == NULL ||
	    (ts = cJSON_AddArrayToObject(req, "tensors")) == NULL)
		goto nomem;
	kc_sha256_hex(ref->torch_source, strlen(ref->torch_source), key);
	cJSON_AddStringToObject(req, "key", key);
	cJSON_AddStringToObject(req, "source", ref->torch_source);
	cJSON_AddNumberToObject(
	    req, "init_seed", (double)(ref->init_seed & ((1ull << 45) - 1)));
	cJSON_AddNumberToObject(req, "device", 0);
	for (size_t t = 0; t < e->nt; t++) {
		const Kclaw__TensorSpec *s = e->task->tensors[t];
		cJSON *o = cJSON_CreateObject(), *shape;
		if (o == NULL || !cJSON_AddItemToArray(ts, o))
			goto nomem;
		cJSON_AddStringToObject(o, "name", s->name);
		cJSON_AddStringToObject(
		    o, "kind", kc_tensor_kind_name(s->kind));
		cJSON_AddStringToObject(o, "dtype", kc_dtype_name(s->dtype));
		if (s->source_name && *s->source_name)
			cJSON_AddStringToObject(
			    o, "source_name", s->source_name);
		if ((shape = cJSON_AddArrayToObject(o, "shape")) == NULL)
			goto nomem;
		for (size_t d = 0; d < s->n_shape; d++)
			cJSON_AddItemToArray(
			    shape, cJSON_CreateNumber((double)s->shape[d]));
	}
	if (torch_call(e, req, TORCH_CALL_MS, "loading the torch reference",
	        &reply) != 0)
		return -1;
	bufs = cJSON_GetObjectItem(reply, "buffers");
	for (size_t t = 0, b = 0; t < e->nt; t++) {
		const Kclaw__TensorSpec *s = e->task->tensors[t];
		const cJSON *jb;
		CUipcMemHandle h;
		CUdeviceptr base = 0;
		size_t j;
		if (s->kind == KCLAW__TENSOR_KIND__SCALAR)
			continue;
		jb = cJSON_GetArrayItem(bufs, (int)b++);
		if (jb == NULL ||
		    torch_hex(
		        cJSON_GetStringValue(cJSON_GetObjectItem(jb, "handle")),
		        (unsigned char *)h.reserved, sizeof(h.reserved)) != 0 ||
		    (size_t)torch_num(jb, "bytes") != e->tbytes[t]) {
			cJSON_Delete(reply);
			sbx_result_status(e->res, EV_INTERNAL,
			    "the torch reference's buffer for '%s' is missing "
			    "or has the wrong size (want %zu bytes)",
			    s->name, e->tbytes[t]);
			return -1;
		}
		/* One mapping per allocation: several tensors may share one. */
		for (j = 0; j < torch_st(e)->nmapped; j++)
			if (memcmp(&torch_st(e)->mapped_handle[j], &h,
			        sizeof(h)) == 0)
				base = torch_st(e)->mapped[j];
		if (base == 0) {
			CUresult r = g->cu.cuIpcOpenMemHandle(
			    &base, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
			if (r != CUDA_SUCCESS) {
				cJSON_Delete(reply);
				return ev_cu(e, r, EV_INTERNAL,
				    "mapping the torch reference's buffers");
			}
			torch_st(e)->mapped[torch_st(e)->nmapped] = base;
			torch_st(e)->mapped_handle[torch_st(e)->nmapped++] = h;
		}
		e->tdev[t] = base + (CUdeviceptr)torch_num(jb, "offset");
	}
	cJSON_Delete(reply);
	return 0;
nomem:
	cJSON_Delete(req);
	sbx_result_status(e->res, EV_INTERNAL, "out of memory");
	return -1;
}

/* A seed for input set `serial`, salted per evaluation; 45 bits, which
 * cJSON prints as an integer (JSON numbers are doubles). */
static double
torch_seed(const ev *e, unsigned serial)
{
	uint64_t s = (e->task->seed ^ e->salt) * 0x9e3779b97f4a7c15ull ^
	    ((uint64_t)serial + 1) * 0xd1b54a32d192ed03ull;

	return (double)(s & ((1ull << 45) - 1));
}

static int
torch_inputs(ev *e, unsigned serial, unsigned variant, int keep)
{
	cJSON *req = torch_req("inputs"), *reply, *outs;

	/* The previous run must be over before its buffers are refilled. */
	EV_CU(e, e->g->cu.cuStreamSynchronize(e->g->stream),
	    KCLAW__EVAL_STATUS__LAUNCH_ERROR, "running the candidate");
	if (req == NULL) {
		sbx_result_status(e->res, EV_INTERNAL, "out of memory");
		return -1;
	}
	cJSON_AddNumberToObject(req, "serial", serial);
	cJSON_AddNumberToObject(req, "seed", torch_seed(e, serial));
	cJSON_AddNumberToObject(req, "variant", variant);
	cJSON_AddBoolToObject(req, "keep", keep);
	if (torch_call(e, req, TORCH_CALL_MS, "the torch reference's inputs",
	        &reply) != 0)
		return -1;
	outs = cJSON_GetObjectItem(reply, "outputs");
	for (size_t t = 0; keep && t < e->nt && t < EV_MAX_TENSORS; t++) {
		const cJSON *o;
		if (e->task->tensors[t]->kind != KCLAW__TENSOR_KIND__OUTPUT)
			continue;
		cJSON_ArrayForEach(o, outs)
		{
			const char *n = cJSON_GetStringValue(
			    cJSON_GetObjectItem(o, "name"));
			double var = torch_num(o, "var_norm"),
			       norm = torch_num(o, "exp_norm");
			if (n == NULL ||
			    strcmp(n, e->task->tensors[t]->name) != 0 ||
			    serial != 1 ||
			    !cJSON_IsNumber(cJSON_GetObjectItem(o, "var_norm")))
				continue;
			e->var_rel[t] = norm > 0 ? var / norm : var;
			e->var_known[t] = 1;
		}
	}
	cJSON_Delete(reply);
	return 0;
}

static int
torch_trial_inputs(ev *e, unsigned k)
{
	return torch_inputs(e, k, ev_variant(k), 1);
}

static int
torch_run_inputs(ev *e, unsigned k, unsigned id)
{
	(void)k;
	return torch_inputs(
	    e, TORCH_TIMED_SERIAL + id, ev_variant(EV_MAX_TRIALS + id), 0);
}

/* The reference process compares input set serial's outputs; 0, 1 (wrong:
 * result filled) or -1. */
static int
torch_check(ev *e, unsigned serial, unsigned trial, const char *when, int timed)
{
	Kclaw__Tolerance dflt;
	const Kclaw__Tolerance *tol = ev_tolerance(e, &dflt);
	cJSON *req = torch_req("check"), *reply, *outs;
	int bad = 0;

	EV_CU(e, e->g->cu.cuStreamSynchronize(e->g->stream),
	    KCLAW__EVAL_STATUS__LAUNCH_ERROR, "running the candidate");
	if (req == NULL) {
		sbx_result_status(e->res, EV_INTERNAL, "out of memory");
		return -1;
	}
	cJSON_AddNumberToObject(req, "serial", serial);
	cJSON_AddNumberToObject(req, "atol", tol->atol);
	cJSON_AddNumberToObject(req, "rtol", tol->rtol);
	cJSON_AddNumberToObject(req, "max_rel_norm", tol->max_rel_norm);
	/* The child keeps its own copy for the determinism check. */
	cJSON_AddBoolToObject(req, "hold", 0);
	cJSON_AddBoolToObject(req, "compare_held", 0);
	if (torch_call(e, req, TORCH_CALL_MS, "the torch reference's check",
	        &reply) != 0)
		return -1;
	outs = cJSON_GetObjectItem(reply, "outputs");
	for (size_t t = 0; t < e->nt && !bad; t++) {
		const Kclaw__TensorSpec *ts = e->task->tensors[t];
		const cJSON *o, *found = NULL;
		sbx_cmp c;
		double en;
		if (ts->kind != KCLAW__TENSOR_KIND__OUTPUT)
			continue;
		cJSON_ArrayForEach(o, outs)
		{
			const char *n = cJSON_GetStringValue(
			    cJSON_GetObjectItem(o, "name"));
			if (n != NULL && strcmp(n, ts->name) == 0)
				found = o;
		}
		if (found == NULL) {
			cJSON_Delete(reply);
			sbx_result_status(e->res, EV_INTERNAL,
			    "the torch reference did not check output '%s'",
			    ts->name);
			return -1;
		}
		memset(&c, 0, sizeof(c));
		c.bad_count = (uint64_t)torch_num(found, "bad");
		c.nan_count = (uint64_t)torch_num(found, "nan");
		c.worst = (size_t)torch_num(found, "worst");
		c.expected = torch_num(found, "expected");
		c.got = torch_num(found, "got");
		c.max_abs_err = torch_num(found, "max_abs");
		c.max_rel_err = torch_num(found, "max_rel");
		en = torch_num(found, "exp_norm");
		c.rel_norm = en > 0 ? torch_num(found, "err_norm") / en
		                    : torch_num(found, "err_norm");
		c.ok = c.bad_count == 0 && c.nan_count == 0 &&
		    (tol->max_rel_norm <= 0 || c.rel_norm <= tol->max_rel_norm);
		ev_note_error(e, t, c.max_abs_err, c.max_rel_err, c.rel_norm);
		if (!c.ok) {
			bad = 1;
			ev_wrong(e, t, trial, &c, when);
		} else if (timed &&
		    ev_check_variation(e, t, c.rel_norm, when)) {
			bad = 1;
		}
	}
	cJSON_Delete(reply);
	return bad;
}

static int
torch_trial_check(ev *e, unsigned k, const char *when)
{
	return torch_check(e, k, k, when, 0);
}

static int
torch_run_check(ev *e, unsigned k, unsigned id, unsigned slot)
{
	char when[96];

	(void)k;
	snprintf(when, sizeof(when),
	    "timed run %u, fresh inputs of distribution %u", slot,
	    ev_variant(EV_MAX_TRIALS + id));
	return torch_check(
	    e, TORCH_TIMED_SERIAL + id, EV_MAX_TRIALS + slot, when, 1);
}

/* A figure of PyTorch's timed runs as the reported time (sbx_sample_ms). */
static double
torch_sample(const ev *e, double ms)
{
	return sbx_sample_ms(
	    ms, 1, e->g->launch_cost_ms, e->g->launch_floor_ms);
}

static int
torch_timing(ev *e, const char *mode, Kclaw__Timing **out, double *setup_s)
{
	const Kclaw__EvalOptions *o = e->req->options;
	cJSON *req = torch_req("baseline"), *reply;
	Kclaw__Timing *t;
	char what[96];

	if (req == NULL || (t = malloc(sizeof(*t))) == NULL) {
		cJSON_Delete(req);
		sbx_result_status(e->res, EV_INTERNAL, "out of memory");
		return -1;
	}
	snprintf(what, sizeof(what), "timing PyTorch (%s)", mode);
	cJSON_AddStringToObject(req, "mode", mode);
	cJSON_AddNumberToObject(req, "warmup", e->warmup);
	cJSON_AddNumberToObject(req, "iters", e->iters);
	/* The candidate's protocol: adaptive unless a count was asked for. */
	if (e->adaptive) {
		cJSON_AddNumberToObject(req, "min_iters", EV_ADAPT_MIN);
		cJSON_AddNumberToObject(req, "batch", EV_ADAPT_BATCH);
		cJSON_AddNumberToObject(req, "ci", EV_ADAPT_CI);
		cJSON_AddNumberToObject(req, "budget_ms", EV_ADAPT_BUDGET_MS);
	}
	cJSON_AddBoolToObject(req, "flush", !(o && o->no_l2_flush));
	cJSON_AddNumberToObject(req, "seed", torch_seed(e, 999999));
	if (torch_call(e, req, TORCH_BASELINE_MS, what, &reply) != 0) {
		free(t);
		return -1;
	}
	kclaw__timing__init(t);
	/* PyTorch's runs are timed by events as the candidate's are, one pair
	 * per run: the same cost comes off (a shift, so the spread stays). */
	t->median_ms = torch_sample(e, torch_num(reply, "median_ms"));
	t->mean_ms = torch_sample(e, torch_num(reply, "mean_ms"));
	t->min_ms = torch_sample(e, torch_num(reply, "min_ms"));
	t->max_ms = torch_sample(e, torch_num(reply, "max_ms"));
	t->stddev_ms = torch_num(reply, "stddev_ms");
	t->iterations = (uint32_t)torch_num(reply, "iterations");
	t->l2_flushed = !(o && o->no_l2_flush);
	*setup_s = torch_num(reply, "setup_s");
	if (strcmp(mode, "eager") == 0) {
		sbx_result_add_metric(e->res, "torch.baseline_runs",
		    (double)e->warmup + t->iterations, "runs");
		if (cJSON_IsNumber(cJSON_GetObjectItem(reply, "peak_bytes")))
			sbx_result_add_metric(e->res, "torch.peak_gpu_bytes",
			    torch_num(reply, "peak_bytes"), "bytes");
	}
	cJSON_Delete(reply);
	*out = t;
	return 0;
}

/* PyTorch eager is the baseline; torch.compile is timed too, and its
 * failure loses only its number. */
static int
torch_baseline(ev *e)
{
	Kclaw__EvalResult *res = e->res;
	const char *mode = e->task->reference->torch_compile_mode &&
	        *e->task->reference->torch_compile_mode
	    ? e->task->reference->torch_compile_mode
	    : "compile";
	double setup = 0;
	Kclaw__EvalStatus st = res->status;
	char *msg = res->message ? strdup(res->message) : NULL;

	if (torch_timing(e, "eager", &res->baseline, &setup) != 0) {
		free(msg);
		return -1;
	}
	res->reference_ms = res->baseline->median_ms;
	if (e->req->options && e->req->options->no_compile_baseline) {
		free(msg);
		return 0;
	}
	if (torch_timing(e, mode, &res->torch_compile, &setup) != 0) {
		ev_warn(e, "torch.compile could not be timed: %s",
		    res->message ? res->message : "");
		sbx_result_status(res, st, "%s", msg ? msg : "");
	} else {
		res->torch_compile_ms = res->torch_compile->median_ms;
		sbx_result_add_metric(res, "torch.compile_setup_s", setup, "s");
	}
	free(msg);
	return 0;
}

static int
torch_usable(const Kclaw__Reference *ref)
{
	return ref->kind == KCLAW__REFERENCE__KIND__TORCH &&
	    ref->torch_source != NULL;
}

static int
torch_setup(ev *e)
{
	if ((e->ref_state = calloc(1, sizeof(torch_state))) == NULL) {
		sbx_result_status(e->res, EV_INTERNAL, "out of memory");
		return -1;
	}
	/* At least three distributions in every evaluation. */
	if (e->trials < EV_MIN_TRIALS)
		e->trials = EV_MIN_TRIALS;
	return 0;
}

/* The profiled runs read the inputs the reference process made last. */
static int
torch_profile_inputs(ev *e)
{
	(void)e;
	return 0;
}

/* Two input sets of the task's own distribution: the reference process
 * measures the outputs' variation on them. */
static int
torch_sample_inputs(ev *e)
{
	return torch_trial_inputs(e, 0) != 0 || torch_trial_inputs(e, 1) != 0
	    ? -1
	    : 0;
}

static void
torch_release(ev *e)
{
	torch_state *st = e->ref_state;

	if (st == NULL)
		return;
	for (size_t i = 0; i < st->nmapped && !*e->fatal; i++)
		e->g->cu.cuIpcCloseMemHandle(st->mapped[i]);
	free(st);
	e->ref_state = NULL;
}

static const ev_ref_ops ev_torch_ops = {
    .name = "torch",
    .usable = torch_usable,
    .setup = torch_setup,
    .prepare = torch_prepare,
    .trial_inputs = torch_trial_inputs,
    .trial_check = torch_trial_check,
    .run_inputs = torch_run_inputs,
    .run_check = torch_run_check,
    .profile_inputs = torch_profile_inputs,
    .sample_inputs = torch_sample_inputs,
    .baseline = torch_baseline,
    .release = torch_release,
    .maps_tensors = 1,
    .held_max = EV_HELD_MAX,
};

/* The reference kinds, in the order a task's reference is matched. */
static const ev_ref_ops *const ev_ref_kinds[] = {
    &ev_cuda_ops, &ev_torch_ops, &ev_tensors_ops};

/* ------------------------------------------------------ the protocol */

static void
ev_warn(ev *e, const char *fmt, ...)
{
	Kclaw__EvalResult *res = e->res;
	char buf[1024], **v;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if ((v = realloc(res->warnings, (res->n_warnings + 1) * sizeof(*v))) ==
	    NULL)
		return;
	res->warnings = v;
	if ((v[res->n_warnings] = strdup(buf)) != NULL)
		res->n_warnings++;
}

/* The variation rule (integrity.h) for output t with relative error rel,
 * seen `when`: 0 when it holds, 1 when it fails (result filled). */
static int
ev_check_variation(ev *e, size_t t, double rel, const char *when)
{
	const char *name = e->task->tensors[t]->name;

	if (t >= EV_MAX_TENSORS || !e->var_known[t] ||
	    sbx_error_small_vs_variation(rel, e->var_rel[t]))
		return 0;
	sbx_result_status(e->res, KCLAW__EVAL_STATUS__WRONG_RESULT,
	    "output '%s' does not follow its inputs (%s): its relative error "
	    "%.3g is %.0f%% of how much the expected output changes from one "
	    "input set to another (%.3g), though within atol/rtol; compute "
	    "the output from the inputs (a constant, a tabulated statistic or "
	    "a partial sum is not the computation)",
	    name, when, rel, 100 * rel / e->var_rel[t], e->var_rel[t]);
	return 1;
}

/* Writes to inputs and parameters during verification trial k (hashed on
 * the device before and after): 0, or 1 with the result filled. */
static int
ev_check_writes(
    ev *e, unsigned k, const uint64_t *before, const uint64_t *after)
{
	for (size_t t = 0; t < e->nt && t < EV_MAX_TENSORS; t++) {
		const Kclaw__TensorSpec *ts = e->task->tensors[t];
		char note[256];
		if (ts->kind == KCLAW__TENSOR_KIND__OUTPUT ||
		    before[t] == after[t])
			continue;
		snprintf(note, sizeof(note),
		    "%s '%s' was written by the candidate",
		    ts->kind == KCLAW__TENSOR_KIND__PARAMETER ? "parameter"
		                                              : "input",
		    ts->name);
		ev_mismatch_new(e, t, k, note);
		sbx_result_status(e->res, KCLAW__EVAL_STATUS__WRONG_RESULT,
		    "%s (trial %u); inputs and parameters are read-only: write "
		    "results only to outputs or scratch buffers",
		    note, k);
		return 1;
	}
	return 0;
}

/*
 * Verification: every trial from a fresh state on fresh inputs of its own
 * distribution, inputs hashed before and after, outputs compared; then the
 * variation rule over every output; then trial 0 again from a fresh state,
 * whose outputs must equal the first run's bit for bit (or the result says
 * by how much they differ) and still be right.
 */
static int
ev_verify(ev *e)
{
	uint64_t before[EV_MAX_TENSORS], after[EV_MAX_TENSORS];
	uint64_t first[EV_MAX_TENSORS], again[EV_MAX_TENSORS];
	gpu *g = e->g;
	int rv;

	for (unsigned k = 0; k < e->trials; k++) {
		char when[64];

		if (e->ops->trial_inputs(e, k) != 0 ||
		    ev_fresh_state(e, &e->cand) != 0 ||
		    ev_hash_inputs(e, before) != 0 ||
		    prog_run_sync(e, &e->cand) != 0 ||
		    ev_hash_inputs(e, after) != 0)
			return -1;
		if ((rv = ev_check_writes(e, k, before, after)) != 0)
			return rv;
		snprintf(when, sizeof(when), "verification trial %u", k);
		if ((rv = e->ops->trial_check(e, k, when)) != 0)
			return rv;
		if (k == 0 && ev_hash_tensors(e, first, 1) != 0)
			return -1;
		if (k == 0)
			for (size_t t = 0; t < e->nt && t < EV_MAX_TENSORS; t++)
				if (e->held[t] != 0)
					EV_CU(e,
					    g->cu.cuMemcpyDtoDAsync(e->held[t],
					        e->tdev[t], e->tbytes[t],
					        g->stream),
					    EV_INTERNAL, "keeping outputs");
	}
	for (size_t t = 0; t < e->nt && t < EV_MAX_TENSORS; t++)
		if (e->task->tensors[t]->kind == KCLAW__TENSOR_KIND__OUTPUT &&
		    (rv = ev_check_variation(
		         e, t, e->err_rel[t], "verification trials")) != 0)
			return rv;
	/* The determinism check. */
	if (e->ops->trial_inputs(e, 0) != 0 ||
	    ev_fresh_state(e, &e->cand) != 0 ||
	    prog_run_sync(e, &e->cand) != 0 ||
	    ev_hash_tensors(e, again, 1) != 0)
		return -1;
	for (size_t t = 0; t < e->nt && t < EV_MAX_TENSORS; t++) {
		ev_slot sl;
		if (e->task->tensors[t]->kind != KCLAW__TENSOR_KIND__OUTPUT)
			continue;
		if (e->held[t] == 0) {
			/* Too large to copy aside: the hashes say whether the
			 * two runs' bits differ, not by how much. */
			if (first[t] == again[t])
				continue;
			e->res->nondeterministic = 1;
			ev_warn(e,
			    "nondeterministic: the same inputs run twice from "
			    "a "
			    "fresh state gave different bits in '%s' (its %zu "
			    "bytes are not copied aside, so the difference is "
			    "not measured); atomics in a different order do "
			    "this, a race does too",
			    e->task->tensors[t]->name, e->tbytes[t]);
			continue;
		}
		if (ev_dev_compare_now(e, t, e->tdev[t], e->held[t], 0, 0,
		        "comparing two runs", &sl) != 0)
			return -1;
		if (sl.bad == 0)
			continue;
		e->res->nondeterministic = 1;
		if (sl.rel > e->res->nondeterminism_max_diff)
			e->res->nondeterminism_max_diff = sl.rel;
		ev_warn(e,
		    "nondeterministic: the same inputs run twice from a fresh "
		    "state gave %llu different elements of '%s' (relative "
		    "difference %.3g); atomics in a different order do this, a "
		    "race does too",
		    (unsigned long long)sl.bad, e->task->tensors[t]->name,
		    sl.rel);
	}
	return e->ops->trial_check(e, 0, "the determinism run (trial 0 again)");
}

static int
ev_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void
ev_stats(double *ms, unsigned n, Kclaw__Timing *t)
{
	double sum = 0, sq = 0;

	qsort(ms, n, sizeof(*ms), ev_cmp_double);
	for (unsigned i = 0; i < n; i++)
		sum += ms[i];
	t->iterations = n;
	t->min_ms = ms[0];
	t->max_ms = ms[n - 1];
	t->mean_ms = sum / n;
	t->median_ms = ev_sorted_median(ms, n);
	for (unsigned i = 0; i < n; i++)
		sq += (ms[i] - t->mean_ms) * (ms[i] - t->mean_ms);
	t->stddev_ms = n > 1 ? sqrt(sq / (n - 1)) : 0;
}

/* A random number no candidate can predict. */
static uint64_t
ev_random(void)
{
	uint64_t v = 0;

	if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v))
		v = kc_mono_ns() * 0x9e3779b97f4a7c15ull;
	return v;
}

/* Reads the comparisons of timed runs lo to n - 1: 0 when every run of
 * every output was right, 1 with the result filled. */
static int
ev_read_checks(ev *e, unsigned lo, unsigned n)
{
	Kclaw__Tolerance dflt;
	const Kclaw__Tolerance *tol = ev_tolerance(e, &dflt);
	size_t per = (size_t)EV_CHK_OUTS * EV_CHK_SLOT;
	size_t bytes = (size_t)(n - lo) * per;
	uint8_t *raw = malloc(bytes ? bytes : 1);

	if (raw == NULL) {
		sbx_result_status(e->res, EV_INTERNAL, "out of memory");
		return -1;
	}
	if (bytes > 0 &&
	    e->g->cu.cuMemcpyDtoH(raw, e->g->chk + lo * per, bytes) !=
	        CUDA_SUCCESS) {
		free(raw);
		sbx_result_status(
		    e->res, EV_INTERNAL, "reading the timed runs' checks");
		return -1;
	}
	for (unsigned i = lo; i < n; i++)
		for (size_t t = 0; t < e->nt && t < EV_CHK_OUTS; t++) {
			const Kclaw__TensorSpec *ts = e->task->tensors[t];
			Kclaw__Mismatch *m;
			char when[96];
			ev_slot sl;
			if (ts->kind != KCLAW__TENSOR_KIND__OUTPUT)
				continue;
			ev_slot_read(raw +
			        ((size_t)(i - lo) * EV_CHK_OUTS + t) *
			            EV_CHK_SLOT,
			    &sl);
			ev_note_error(e, t, sl.max_abs, sl.max_rel, sl.rel);
			snprintf(when, sizeof(when),
			    "timed run %u, fresh inputs of distribution %u", i,
			    ev_variant(EV_MAX_TRIALS + i));
			if (sl.bad == 0 && sl.nans == 0 &&
			    (tol->max_rel_norm <= 0 ||
			        sl.rel <= tol->max_rel_norm)) {
				if (ev_check_variation(e, t, sl.rel, when)) {
					free(raw);
					return 1;
				}
				continue;
			}
			if ((m = ev_mismatch_new(
			         e, t, EV_MAX_TRIALS + i, when)) != NULL) {
				m->bad_count = sl.bad;
				m->nan_count = sl.nans;
				m->rel_norm = sl.rel;
			}
			sbx_result_status(e->res,
			    KCLAW__EVAL_STATUS__WRONG_RESULT,
			    "output '%s' is wrong in %s: %llu of %zu elements "
			    "outside atol %g + rtol %g, %llu NaN (the poison "
			    "left unwritten, or computed), relative error "
			    "%.3g; "
			    "every timed run is checked, so a kernel must do "
			    "its whole work on every run",
			    ts->name, when, (unsigned long long)sl.bad,
			    e->tcount[t], tol->atol, tol->rtol,
			    (unsigned long long)sl.nans, sl.rel);
			free(raw);
			return 1;
		}
	free(raw);
	return 0;
}

/*
 * Buffer sets for back-to-back timing: set 0 is the evaluation's own
 * (e->tdev, p->scratch); every other set has inputs, outputs (of the
 * candidate; the reference writes into its own) and scratch of its own, and
 * shares the parameters. Swapping e->tdev and p->scratch points a run at
 * its set.
 */
typedef struct {
	unsigned n;
	CUdeviceptr *tdev[EV_BATCH_RUNS];
	CUdeviceptr *scratch[EV_BATCH_RUNS];
} ev_sets;

/* Whether p may be timed back to back: a `cuda` reference (inputs made from
 * seeds), adaptive timing, no module variables to restore between runs and
 * no matmul step (its workspace is shared). */
static int
ev_batch_eligible(const ev *e, const prog *p)
{
	if (!e->ops->batchable || !e->adaptive || p->nglobals != 0)
		return 0;
	for (size_t s = 0; s < p->plan->nsteps; s++)
		if (p->plan->steps[s].kind == SBX_STEP_MATMUL)
			return 0;
	return 1;
}

static int
ev_set_owns(const ev *e, const prog *p, size_t t)
{
	Kclaw__TensorKind kind = e->task->tensors[t]->kind;

	return kind == KCLAW__TENSOR_KIND__INPUT ||
	    (kind == KCLAW__TENSOR_KIND__OUTPUT && p == &e->cand);
}

static void
ev_sets_free(ev *e, const prog *p, ev_sets *s)
{
	for (unsigned j = 1; j < s->n; j++) {
		for (size_t t = 0; s->tdev[j] && t < e->nt; t++)
			if (s->tdev[j][t] != 0 &&
			    s->tdev[j][t] != s->tdev[0][t] && !*e->fatal)
				e->g->cu.cuMemFree(s->tdev[j][t]);
		for (size_t i = 0; s->scratch[j] && i < p->nscratch; i++)
			if (s->scratch[j][i] != 0 && !*e->fatal)
				e->g->cu.cuMemFree(s->scratch[j][i]);
		free(s->tdev[j]);
		free(s->scratch[j]);
	}
	memset(s, 0, sizeof(*s));
}

/* EV_BATCH_RUNS sets for p, or 0 sets (not batched) when they would take
 * more than EV_BATCH_BYTES or cannot be allocated. */
static void
ev_sets_alloc(ev *e, prog *p, ev_sets *s)
{
	size_t bytes = 0;

	memset(s, 0, sizeof(*s));
	for (size_t t = 0; t < e->nt; t++)
		if (ev_set_owns(e, p, t))
			bytes += e->tbytes[t];
	for (size_t i = 0; i < p->nscratch; i++)
		bytes += p->plan->buffers[p->plan->ntensors + i].bytes;
	if (bytes == 0 || bytes > EV_BATCH_BYTES / (EV_BATCH_RUNS - 1))
		return;
	s->tdev[0] = e->tdev;
	s->scratch[0] = p->scratch;
	s->n = 1;
	for (unsigned j = 1; j < EV_BATCH_RUNS; j++, s->n++) {
		s->tdev[j] = calloc(e->nt + 1, sizeof(CUdeviceptr));
		s->scratch[j] = calloc(p->nscratch + 1, sizeof(CUdeviceptr));
		if (s->tdev[j] == NULL || s->scratch[j] == NULL)
			goto fail;
		for (size_t t = 0; t < e->nt; t++) {
			s->tdev[j][t] = e->tdev[t];
			if (ev_set_owns(e, p, t) &&
			    e->g->cu.cuMemAlloc(&s->tdev[j][t],
			        e->tbytes[t] ? e->tbytes[t] : 1) !=
			        CUDA_SUCCESS) {
				s->tdev[j][t] = 0;
				goto fail;
			}
		}
		for (size_t i = 0; i < p->nscratch; i++)
			if (e->g->cu.cuMemAlloc(&s->scratch[j][i],
			        p->plan->buffers[p->plan->ntensors + i]
			            .bytes) != CUDA_SUCCESS)
				goto fail;
	}
	return;
fail:
	s->n++;
	ev_sets_free(e, p, s);
}

/* Points p's runs at set j. */
static void
ev_sets_use(ev *e, prog *p, const ev_sets *s, unsigned j)
{
	e->tdev = s->tdev[j];
	p->scratch = s->scratch[j];
}

/* Enqueues the L2 flush: the flush buffer read (kc_flush_read), so what a
 * run left in L2 is gone and nothing dirty is left to write back while
 * the next run is timed. */
static int
ev_flush_l2(ev *e)
{
	return ev_ok(e, gpu_flush_l2(e->g), EV_INTERNAL, "flushing L2");
}

/*
 * The hold before a timed run's start event: a one-thread kernel that waits
 * until the host has enqueued the run through its stop event
 * (ev_hold_release), so the run's launches are all queued when its start
 * event fires and the events time the GPU's work, not the host's launch
 * rate (the gaps a multi-kernel plan would otherwise show between its
 * kernels). It gives up after EV_HOLD_MAX_NS, counted
 * (sandbox.hold_expired), so a plan whose enqueue waits for the GPU
 * cannot deadlock.
 */
static int
ev_hold(ev *e)
{
	gpu *g = e->g;
	uint32_t want;
	uint64_t max_ns = EV_HOLD_MAX_NS;
	void *params[3] = {&g->hold_dev, &want, &max_ns};

	if (g->hold_flag == NULL)
		return 0;
	want = ++g->hold_seq;
	return ev_ok(e,
	    g->cu.cuLaunchKernel(
	        g->hold, 1, 1, 1, 1, 1, 1, 0, g->stream, params, NULL),
	    EV_INTERNAL, "holding a timed run");
}

/* Lets the last hold go (also on an error path: idempotent). */
static void
ev_hold_release(ev *e)
{
	gpu *g = e->g;

	if (g->hold_flag != NULL)
		__atomic_store_n(
		    &g->hold_flag[0], g->hold_seq, __ATOMIC_RELEASE);
}

/* The holds that gave up waiting since the last call (after a sync). */
static uint32_t
ev_hold_expired(ev *e)
{
	gpu *g = e->g;
	uint32_t n;

	if (g->hold_flag == NULL)
		return 0;
	n = __atomic_load_n(&g->hold_flag[1], __ATOMIC_ACQUIRE);
	__atomic_store_n(&g->hold_flag[1], 0, __ATOMIC_RELEASE);
	return n;
}

/*
 * Whether n timed runs (sorted) pin the median down: the distribution-free
 * 95 % confidence interval of the median (the order statistics
 * n/2 -+ 1.96 sqrt(n)/2) is within EV_ADAPT_CI of it on either side.
 */
static int
ev_median_settled(const double *sorted, unsigned n)
{
	double half = 0.98 * sqrt((double)n), med;
	long lo = (long)floor(n / 2.0 - half), hi = (long)ceil(n / 2.0 + half);

	if (n < 2)
		return 0;
	if (lo < 0)
		lo = 0;
	if (hi > (long)n - 1)
		hi = (long)n - 1;
	med = ev_sorted_median(sorted, n);
	return (sorted[hi] - sorted[lo]) / 2 <= EV_ADAPT_CI * med;
}

/* Where e->trace is set: kernel f (kc_mark or kc_mark_end) for CUPTI's
 * records, outside the events. */
static int
ev_mark(ev *e, CUfunction f)
{
	return !e->trace ? 0
	                 : ev_ok(e, gpu_launch_empty(e->g, f), EV_INTERNAL,
	                       "marking a run for the profiler");
}

/*
 * One back-to-back sample of p: EV_BATCH_RUNS runs, each on its own set
 * (fresh inputs, outputs and scratch poisoned, all before the events),
 * one L2 flush, the runs between one pair of events (batch b's), then with
 * check every run compared with the reference on its own inputs into chk
 * slots from `slot`. 0, 1 (wrong: the result is filled) or -1.
 */
static int
ev_time_batch(ev *e, prog *p, const ev_sets *sets, int check, int flush,
    unsigned b, unsigned slot)
{
	gpu *g = e->g;
	unsigned ids[EV_BATCH_RUNS];
	int rv = 0;

	for (unsigned j = 0; j < sets->n && rv == 0; j++) {
		ids[j] = e->fresh_serial++;
		ev_sets_use(e, p, sets, j);
		if (e->ops->run_inputs(e, j % e->trials, ids[j]) != 0 ||
		    ev_poison(e, p) != 0)
			rv = -1;
	}
	ev_sets_use(e, p, sets, 0);
	if (rv != 0 || ev_mark(e, g->mark) != 0 ||
	    (flush && ev_flush_l2(e) != 0) || ev_hold(e) != 0 ||
	    ev_ok(e, g->cu.cuEventRecord(g->ev[2 * b], g->stream), EV_INTERNAL,
	        "recording an event") != 0) {
		ev_hold_release(e);
		return -1;
	}
	for (unsigned j = 0; j < sets->n && rv == 0; j++) {
		ev_sets_use(e, p, sets, j);
		rv = prog_enqueue(e, p);
	}
	ev_sets_use(e, p, sets, 0);
	if (rv == 0)
		rv = ev_ok(e, g->cu.cuEventRecord(g->ev[2 * b + 1], g->stream),
		         EV_INTERNAL, "recording an event") != 0 ||
		    ev_mark(e, g->mark_end) != 0;
	ev_hold_release(e);
	if (rv != 0)
		return -1;
	for (unsigned j = 0; check && j < sets->n && rv == 0; j++) {
		ev_sets_use(e, &e->cand, sets, j);
		rv = e->ops->run_check(e, j % e->trials, ids[j], slot + j);
	}
	ev_sets_use(e, p, sets, 0);
	return rv;
}

/*
 * One run of p, its inputs in place, prepared as every timed run is: a
 * fresh state, the L2 flush, the hold, then the run between events a and
 * b, the hold released once it is enqueued. 0 or -1 (result filled).
 */
static int
ev_held_run(ev *e, prog *p, int flush, CUevent a, CUevent b)
{
	gpu *g = e->g;
	int rv = ev_fresh_state(e, p) != 0 || ev_mark(e, g->mark) != 0 ||
	        (flush && ev_flush_l2(e) != 0) || ev_hold(e) != 0 ||
	        ev_ok(e, g->cu.cuEventRecord(a, g->stream), EV_INTERNAL,
	            "recording an event") != 0 ||
	        prog_enqueue(e, p) != 0 ||
	        ev_ok(e, g->cu.cuEventRecord(b, g->stream), EV_INTERNAL,
	            "recording an event") != 0 ||
	        ev_mark(e, g->mark_end) != 0
	    ? -1
	    : 0;

	ev_hold_release(e);
	return rv;
}

/*
 * Runs lo..hi-1 of p, each held between its own pair of events (2 i,
 * 2 i + 1: ev_held_run), then with check its comparison with the
 * reference into chk slots from `slot`. 0, 1 (wrong: the result is
 * filled) or -1.
 */
static int
ev_time_runs(ev *e, prog *p, int check, int flush, unsigned lo, unsigned hi,
    unsigned slot)
{
	gpu *g = e->g;
	int rv;

	for (unsigned i = lo; i < hi; i++) {
		unsigned k = i % e->trials, id = e->fresh_serial++;

		if (e->ops->run_inputs(e, k, id) != 0 ||
		    ev_held_run(e, p, flush, g->ev[2 * i], g->ev[2 * i + 1]) !=
		        0)
			return -1;
		if (check &&
		    (rv = e->ops->run_check(e, k, id, slot + i - lo)) != 0)
			return rv;
	}
	return 0;
}

/*
 * The end of a traced timing (e->trace): CUPTI's span of each of the last
 * `samples` marked runs or batches (the ones kept; an adaptive timing's
 * first runs may have been dropped), over `per` runs each, and their
 * median as metric profile.timed_cupti_ms: the same runs as the reported
 * median, measured by the profiler's clock. Nothing when the records do
 * not hold them all (the profiler's buffer full).
 */
static void
ev_time_traced(ev *e, unsigned samples, unsigned per, unsigned cap)
{
	double *span = calloc(cap, sizeof(*span));
	unsigned n;

	e->trace = 0;
	sbx_prof_activity_stop(NULL);
	n = span != NULL ? sbx_prof_runs(span, NULL, cap) : 0;
	if (samples > 0 && n >= samples) {
		double *kept = span + (n - samples);
		for (unsigned i = 0; i < samples; i++)
			kept[i] /= per;
		sbx_result_add_metric(e->res, "profile.timed_cupti_ms",
		    ev_median(kept, samples), "ms");
		sbx_result_add_metric(
		    e->res, "profile.timed_cupti_samples", samples, "samples");
	}
	free(span);
}

/*
 * Times p: warm-up, then runs each between two events. Before each run
 * (outside the events): the next inputs (fresh ones where the reference
 * can compute them, else the next trial's), a fresh state (the poison in
 * outputs and scratch, the module's variables reset), the L2 flushed,
 * then the hold (ev_hold), released once the run is enqueued through its
 * stop event. With check, every timed run's outputs are then compared
 * with the reference's on the same inputs, after the candidate finished and
 * outside the events, the same work after every run: no run can tell
 * whether it is checked, because all are, and none can reuse what an
 * earlier one left.
 *
 * The runs go in batches, each read (its times and its checks) before the
 * next: e->iters of them when the count was asked for, else adaptively
 * until the median is settled (ev_median_settled), at most e->iters runs
 * or EV_ADAPT_BUDGET_MS. A plan whose first runs' median is under
 * EV_SHORT_MS is then timed back to back instead (ev_time_batch): the
 * first runs' times are dropped, and each sample is a batch's time over its
 * runs. Every sample is reported less the events' own cost around a launch
 * (sbx_sample_ms, gpu_calibrate), once per pair of events.
 */
static int
ev_time(ev *e, prog *p, int check, Kclaw__Timing **out)
{
	gpu *g = e->g;
	int flush = !(e->req->options && e->req->options->no_l2_flush);
	int cand = p == &e->cand;
	unsigned max = e->iters, n = 0, runs = 0, batches = 0, samples = 0;
	uint64_t t0 = kc_mono_ns();
	ev_sets sets = {0};
	Kclaw__Timing *t;
	double *ms, *sorted;
	int rv;

	for (unsigned i = 0; i < 2 * max + 2; i++)
		if (g->ev[i] == NULL)
			EV_CU(e,
			    g->cu.cuEventCreate(&g->ev[i], CU_EVENT_DEFAULT),
			    EV_INTERNAL, "creating events");
	if ((ms = calloc(max, sizeof(*ms))) == NULL ||
	    (sorted = calloc(max, sizeof(*sorted))) == NULL) {
		free(ms);
		sbx_result_status(e->res, EV_INTERNAL, "out of memory");
		return -1;
	}
	for (unsigned i = 0; i < e->warmup; i++)
		if (e->ops->run_inputs(e, i % e->trials, e->fresh_serial++) !=
		        0 ||
		    ev_fresh_state(e, p) != 0 || prog_enqueue(e, p) != 0)
			goto fail;
	if (ev_ok(e, g->cu.cuStreamSynchronize(g->stream),
	        cand ? KCLAW__EVAL_STATUS__LAUNCH_ERROR : EV_INTERNAL,
	        "warm-up") != 0)
		goto fail;
	/* Asked for (EvalOptions.trace_timing): the candidate's timed runs
	 * traced by CUPTI too, the independent measurement of the same runs
	 * (ev_time_traced). Not by default: tracing slowed one example
	 * kernel by 11 % (bias_gelu candidate 1 on the H200). */
	e->trace = cand && e->req->options && e->req->options->trace_timing &&
	    sbx_prof_activity_start() == 0;
	while (n < max) {
		unsigned lo = n, hi;
		hi = !e->adaptive ? max
		    : n == 0      ? EV_ADAPT_MIN
		                  : n + EV_ADAPT_BATCH;
		if (hi > max)
			hi = max;
		unsigned b = 0, nrun;
		if (sets.n > 0) {
			/* Back to back: whole batches of runs per sample. */
			if (n + sets.n > max)
				break;
			b = batches++;
			nrun = sets.n;
			rv = ev_time_batch(e, p, &sets, check, flush, b, runs);
		} else {
			nrun = hi - lo;
			rv = ev_time_runs(e, p, check, flush, lo, hi, runs);
			batches = hi;
		}
		if (rv != 0)
			goto done;
		if (ev_ok(e, g->cu.cuStreamSynchronize(g->stream),
		        cand ? KCLAW__EVAL_STATUS__LAUNCH_ERROR : EV_INTERNAL,
		        "timing") != 0)
			goto fail;
		if (check && (rv = ev_read_checks(e, runs, runs + nrun)) != 0)
			goto done;
		for (unsigned j = 0; j < nrun; j++) {
			/* A batch's runs share its time; a run has its own. */
			unsigned k = sets.n > 0 ? b : lo + j;
			float f = 0;
			if (sets.n == 0 || j == 0)
				g->cu.cuEventElapsedTime(
				    &f, g->ev[2 * k], g->ev[2 * k + 1]);
			ms[n + j] = sets.n > 0 && j > 0
			    ? ms[n]
			    : sbx_sample_ms(f, sets.n > 0 ? nrun : 1,
			          g->launch_cost_ms, g->launch_floor_ms);
		}
		runs += nrun;
		n += nrun;
		if (sets.n > 0)
			samples++;
		if (!e->adaptive)
			break;
		memcpy(sorted, ms, n * sizeof(*ms));
		qsort(sorted, n, sizeof(*sorted), ev_cmp_double);
		/* The reference is timed back to back exactly when the
		 * candidate was, so a speedup compares like with like. */
		if (sets.n == 0 && lo == 0 && ev_batch_eligible(e, p) &&
		    (cand ? sorted[n / 2] < EV_SHORT_MS : e->cand_batched)) {
			/* Launch latency is a visible part of these times:
			 * start again, back to back. */
			ev_sets_alloc(e, p, &sets);
			if (sets.n > 0) {
				n = 0;
				continue;
			}
		}
		/* Back to back, a batch is one sample (its runs share its
		 * time): settled only over EV_ADAPT_MIN batches. */
		if ((sets.n == 0 || samples >= EV_ADAPT_MIN) &&
		    ev_median_settled(sorted, n))
			break;
		if ((kc_mono_ns() - t0) / 1000000 > EV_ADAPT_BUDGET_MS)
			break;
	}
	if (sets.n > 0 && cand)
		e->cand_batched = 1;
	if (e->trace)
		ev_time_traced(e, sets.n > 0 ? samples : n,
		    sets.n > 0 ? sets.n : 1, 2 * max + 2);
	{
		uint32_t expired = ev_hold_expired(e);
		if (cand && g->launch_cost_ms > 0)
			sbx_result_add_metric(e->res, "sandbox.launch_cost_ms",
			    g->launch_cost_ms, "ms");
		if (expired > 0)
			sbx_result_add_metric(e->res,
			    cand ? "sandbox.candidate_hold_expired"
			         : "sandbox.reference_hold_expired",
			    expired, "runs");
	}
	if (sets.n > 0)
		sbx_result_add_metric(e->res,
		    cand ? "sandbox.candidate_batch_runs"
		         : "sandbox.reference_batch_runs",
		    sets.n, "runs");
	ev_sets_free(e, p, &sets);
	if ((t = malloc(sizeof(*t))) == NULL) {
		sbx_result_status(e->res, EV_INTERNAL, "out of memory");
		goto fail;
	}
	kclaw__timing__init(t);
	ev_stats(ms, n, t);
	free(ms);
	free(sorted);
	t->l2_flushed = flush;
	t->spot_checks = check ? runs : 0;
	*out = t;
	return 0;
fail:
	rv = -1;
done:
	ev_hold_release(e);
	if (e->trace) {
		e->trace = 0;
		sbx_prof_activity_stop(NULL);
	}
	if (sets.n > 0) {
		ev_sets_use(e, p, &sets, 0);
		ev_sets_free(e, p, &sets);
	}
	free(ms);
	free(sorted);
	return rv;
}

static int
ev_profile_run(void *arg)
{
	ev *e = arg;

	return prog_run_sync(e, &e->cand) == 0 ? 0 : KC_ECUDA;
}

static void
ev_profile(ev *e)
{
	Kclaw__EvalResult *res = e->res;
	gpu *g = e->g;
	int flush = !(e->req->options && e->req->options->no_l2_flush);
	double spans[EV_PROFILE_RUNS], evms[EV_PROFILE_RUNS],
	    over[EV_PROFILE_RUNS];
	unsigned r = 0, n;

	/* EV_PROFILE_RUNS runs under one CUPTI session, each between kc_mark
	 * and kc_mark_end (where the records are cut into runs), prepared,
	 * held and timed by its own events as a timed run is (ev_held_run,
	 * e->trace; the sandbox's kc_*
	 * kernels are left out of the records). The last run's records are
	 * the result's. Metrics, medians over the runs:
	 * profile.cupti_span_ms, each run's span by CUPTI's clock, an
	 * independent measurement of what the timed runs report
	 * (tests/gpu/timing/timing_agree.py); profile.events_ms, the same
	 * runs by their raw events; profile.event_overhead_ms, each run's
	 * raw events minus its span (what gpu_calibrate takes off). */
	if (sbx_prof_activity_start() != 0)
		return;
	e->trace = 1;
	for (; r < EV_PROFILE_RUNS; r++) {
		float ms = 0;
		if (e->ops->profile_inputs(e) != 0 ||
		    ev_held_run(e, &e->cand, flush, g->ev[0], g->ev[1]) != 0 ||
		    ev_ok(e, g->cu.cuStreamSynchronize(g->stream),
		        KCLAW__EVAL_STATUS__LAUNCH_ERROR, "profiling") != 0) {
			e->trace = 0;
			sbx_prof_activity_stop(NULL);
			return;
		}
		g->cu.cuEventElapsedTime(&ms, g->ev[0], g->ev[1]);
		evms[r] = ms;
	}
	e->trace = 0;
	sbx_prof_activity_stop(res);
	n = sbx_prof_runs(spans, NULL, EV_PROFILE_RUNS);
	if (n == r && n > 0) {
		for (unsigned i = 0; i < n; i++)
			over[i] = evms[i] - spans[i];
		sbx_result_add_metric(
		    res, "profile.cupti_span_ms", ev_median(spans, n), "ms");
		sbx_result_add_metric(
		    res, "profile.events_ms", ev_median(evms, n), "ms");
		sbx_result_add_metric(
		    res, "profile.event_overhead_ms", ev_median(over, n), "ms");
	}
	if (*e->fatal || res->status != KCLAW__EVAL_STATUS__OK)
		return;
	if (sbx_prof_range(e->g->ctx, e->g->device, ev_profile_run, e, res) ==
	    0)
		res->counters_available = 1;
}

/*
 * Outputs that vary between two input sets of one distribution by less
 * than the tolerance admits: a constant could pass allclose on them, so
 * only the variation rule tells. The result names them, with the fix,
 * and has every output's figures (output_variations).
 */
static void
ev_note_degenerate(ev *e)
{
	Kclaw__Tolerance dflt;
	const Kclaw__Tolerance *tol = ev_tolerance(e, &dflt);
	Kclaw__EvalResult *res = e->res;

	for (size_t t = 0; t < e->nt && t < EV_MAX_TENSORS; t++) {
		const char *name = e->task->tensors[t]->name;
		char **v;
		if (e->task->tensors[t]->kind == KCLAW__TENSOR_KIND__OUTPUT)
			kc_result_add_variation(
			    res, name, e->var_known[t], e->var_rel[t], tol);
		if (!e->var_known[t] ||
		    !sbx_output_degenerate(e->var_rel[t], tol))
			continue;
		if ((v = realloc(res->degenerate,
		         (res->n_degenerate + 1) * sizeof(*v))) == NULL)
			return;
		res->degenerate = v;
		if ((v[res->n_degenerate] = strdup(name)) != NULL)
			res->n_degenerate++;
		ev_warn(e,
		    "degenerate task: output '%s' changes by only %.3g "
		    "(relative) between two input sets, less than the "
		    "tolerance (rtol %g, max_rel_norm %g) admits, so a kernel "
		    "that ignores its inputs could pass allclose; the sandbox "
		    "holds candidates to a quarter of that variation, but "
		    "tighten the tolerance or give the inputs more spread",
		    name, e->var_rel[t], tol->rtol, tol->max_rel_norm);
	}
}

/*
 * After the timed runs: the figures an OK result carries, the precision
 * check, the speed of light. 0 when the candidate stands (status OK), 1
 * when it is refused (result filled).
 */
static int
ev_judge(ev *e)
{
	Kclaw__EvalResult *res = e->res;
	const Kclaw__TaskSpec *task = e->task;
	double in_bytes = 0, out_bytes = 0, flops = 0, worst = 0, var = 0;
	char what[512];

	sbx_result_status(res, KCLAW__EVAL_STATUS__OK,
	    "correct on %u trials and every one of %u timed runs; median "
	    "%.4f ms (spread %.4f ms)",
	    e->trials, res->timing->iterations, res->timing->median_ms,
	    res->timing->stddev_ms);
	res->max_abs_err = e->max_abs;
	res->max_rel_err = e->max_rel;
	for (size_t t = 0; t < e->nt && t < EV_MAX_TENSORS; t++) {
		const Kclaw__TensorSpec *ts = task->tensors[t];
		if (ts->kind != KCLAW__TENSOR_KIND__OUTPUT) {
			in_bytes += (double)e->tbytes[t];
			continue;
		}
		out_bytes += (double)e->tbytes[t];
		if (e->err_rel[t] > res->rel_norm)
			res->rel_norm = e->err_rel[t];
		if (e->var_rel[t] > 0) {
			if (var == 0 || e->var_rel[t] < var)
				var = e->var_rel[t];
			if (e->err_rel[t] / e->var_rel[t] > worst)
				worst = e->err_rel[t] / e->var_rel[t];
		}
	}
	res->output_variation = var;
	res->error_vs_variation = worst;
	ev_note_degenerate(e);
	if (sbx_precision_scan(e->req->candidate->source, e->cand.plan, task,
	        what, sizeof(what))) {
		if (task->precision != NULL &&
		    strcmp(task->precision, "strict") == 0) {
			sbx_result_status(res, KCLAW__EVAL_STATUS__WRONG_RESULT,
			    "lower precision than the task's: it uses %s while "
			    "the task's tensors are f32/f64 and its precision "
			    "is \"strict\"; compute in the task's precision",
			    what);
			return 1;
		}
		ev_warn(e,
		    "lower precision than the task's: it uses %s while the "
		    "task's tensors are f32/f64 (relative error %.3g)",
		    what, res->rel_norm);
	}
	if (res->rel_norm > 6e-5 &&
	    !(task->precision != NULL && strcmp(task->precision, "loose") == 0))
		ev_warn(e,
		    "its relative error %.3g is far above what f32 arithmetic "
		    "gives (about 1e-6): it passes the tolerance, but check "
		    "the accumulation order and precision",
		    res->rel_norm);
	if (task->reference != NULL)
		flops = task->reference->flops;
	res->speed_of_light_ms = sbx_speed_of_light_ms(in_bytes, out_bytes,
	    flops, e->g->bw_bytes_per_ms, e->g->peak_flops_per_ms);
	if (res->speed_of_light_ms > 0 && res->timing->median_ms > 0) {
		res->sol_fraction =
		    res->speed_of_light_ms / res->timing->median_ms;
		if (res->timing->median_ms < res->speed_of_light_ms) {
			sbx_result_status(res, KCLAW__EVAL_STATUS__WRONG_RESULT,
			    "faster than the speed of light: a median of %.4f "
			    "ms, where writing its %.0f output bytes and "
			    "reading a quarter of its %.0f input bytes at this "
			    "GPU's bandwidth (%.0f GB/s, with margin) takes at "
			    "least %.4f ms; the timing cannot be true (work "
			    "done outside the timed region, or skipped)",
			    res->timing->median_ms, out_bytes, in_bytes,
			    e->g->bw_bytes_per_ms / 1e6 * 1.25,
			    res->speed_of_light_ms);
			return 1;
		}
	}
	return 0;
}

static void ev_phase(ev *e, const char *name, uint64_t *since);

/*
 * No candidate: the reference alone, as a task's first evaluation (kclaw
 * eval TASK): its inputs for two trials of one distribution, so the
 * outputs' variation is measured and degenerate outputs named, and its
 * baselines timed.
 */
static void
ev_reference_only(ev *e, uint64_t *tp)
{
	Kclaw__EvalResult *res = e->res;
	double var = -1;

	if (ev_alloc_tensors(e) != 0 || e->ops->prepare(e) != 0)
		return;
	ev_phase(e, "sandbox.load_ms", tp);
	if (e->ops->sample_inputs != NULL && e->ops->sample_inputs(e) != 0)
		return;
	ev_phase(e, "sandbox.inputs_ms", tp);
	for (size_t t = 0; t < e->nt && t < EV_MAX_TENSORS; t++)
		if (e->var_known[t] && (var < 0 || e->var_rel[t] < var))
			var = e->var_rel[t];
	res->output_variation = var > 0 ? var : 0;
	ev_note_degenerate(e);
	sbx_result_status(res, KCLAW__EVAL_STATUS__OK, "reference only");
	if (e->ops->baseline(e) != 0)
		return;
	ev_phase(e, "sandbox.baseline_ms", tp);
	sbx_result_status(res, KCLAW__EVAL_STATUS__OK,
	    "reference only (%s): baseline %.4f ms%s%.4f%s; outputs change by "
	    "%.3g (relative) between two input sets of one distribution%s",
	    e->ops->name, res->reference_ms,
	    res->torch_compile_ms > 0 ? ", torch.compile " : "",
	    res->torch_compile_ms > 0 ? res->torch_compile_ms : 0.0,
	    res->torch_compile_ms > 0 ? " ms" : "", res->output_variation,
	    res->n_degenerate ? "; DEGENERATE (see warnings)" : "");
}

/* ---------------------------------------------------------- the backend */

/* Records how long the phase since *since took, as a metric: where an
 * evaluation's own time goes (the overhead around the kernels). */
static void
ev_phase(ev *e, const char *name, uint64_t *since)
{
	uint64_t now = kc_mono_ns();

	sbx_result_add_metric(e->res, name, (double)(now - *since) / 1e6, "ms");
	*since = now;
}

/* What the agents are told about the GPU (docs/agents.md "Context"): its
 * size and ceilings, as device.* metrics on every result. */
static void
gpu_device_metrics(gpu *g, Kclaw__EvalResult *res)
{
	size_t mem = 0, avail = 0;

	g->cu.cuMemGetInfo(&avail, &mem);
	sbx_result_add_metric(res, "device.sm_count", g->sms, "SMs");
	sbx_result_add_metric(res, "device.l2_bytes", g->l2_bytes, "bytes");
	sbx_result_add_metric(res, "device.shared_per_block_optin",
	    g->lim.max_shared_optin, "bytes");
	sbx_result_add_metric(res, "device.shared_per_sm",
	    gpu_attr(
	        g, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR),
	    "bytes");
	sbx_result_add_metric(res, "device.registers_per_sm",
	    gpu_attr(g, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR),
	    "registers");
	sbx_result_add_metric(
	    res, "device.max_threads_per_sm", g->max_threads_sm, "threads");
	sbx_result_add_metric(res, "device.memory_bytes", (double)mem, "bytes");
	if (g->bw_bytes_per_ms > 0)
		sbx_result_add_metric(res, "device.bandwidth_gbs",
		    g->bw_bytes_per_ms / 1e6, "GB/s");
	if (g->peak_flops_per_ms > 0)
		sbx_result_add_metric(res, "device.peak_tflops",
		    g->peak_flops_per_ms / 1e9, "TFLOP/s");
}

static void
ev_free(ev *e)
{
	if (e->ops != NULL && e->ops->release != NULL)
		e->ops->release(e);
	for (size_t t = 0; e->tdev && t < e->nt; t++) {
		if (e->tdev[t] && !*e->fatal && !e->ops->maps_tensors)
			e->g->cu.cuMemFree(e->tdev[t]);
		if (t < EV_MAX_TENSORS && e->held[t] && !*e->fatal)
			e->g->cu.cuMemFree(e->held[t]);
	}
	free(e->tdev);
	free(e->tbytes);
	free(e->tcount);
	prog_free(e, &e->cand);
}

static void
gpu_evaluate(void *state, const Kclaw__EvalRequest *req, Kclaw__EvalResult *res,
    int *fatal)
{
	gpu *g = state;
	const Kclaw__EvalOptions *o = req->options;
	const Kclaw__Candidate *cand = req->candidate;
	uint64_t t0 = kc_mono_ns();
	const char *arch;
	ev e = {
	    .g = g, .req = req, .task = req->task, .res = res, .fatal = fatal};
	int compile_only = o != NULL && o->compile_only;
	int refonly = o != NULL && o->reference_only;
	uint64_t tp = 0;
	Kclaw__TaskSpec empty_task = KCLAW__TASK_SPEC__INIT;

	e.cand.what = "candidate";
	if (g->have_device && !g->measured) {
		g->cu.cuCtxSetCurrent(g->ctx);
		gpu_measure_ceilings(g);
		g->measured = 1;
	}
	e.salt = ev_random();
	if (e.task == NULL)
		e.task = &empty_task;
	if (refonly) {
		if (!g->have_device) {
			sbx_result_status(res, KCLAW__EVAL_STATUS__NO_DEVICE,
			    "%s; a reference-only evaluation runs the "
			    "reference",
			    g->nodev_reason);
			goto out;
		}
		sbx_result_set(&res->device_name, "%s", g->name);
		sbx_result_set(&res->arch, "%s", g->arch);
		g->cu.cuCtxSetCurrent(g->ctx);
		tp = kc_mono_ns();
		goto reference;
	}
	if (cand == NULL || cand->source == NULL || cand->source[0] == '\0') {
		sbx_result_status(res, KCLAW__EVAL_STATUS__COMPILE_ERROR,
		    "the request has no candidate source (kernel.cu)");
		goto out;
	}
	sbx_result_set(&res->candidate_id, "%s", cand->id ? cand->id : "");
	arch = o != NULL && o->arch != NULL && o->arch[0] ? o->arch
	    : g->arch_override[0]                         ? g->arch_override
	    : g->have_device                              ? g->arch
	                                                  : NULL;
	if (g->have_device)
		sbx_result_set(&res->device_name, "%s", g->name);
	if (arch == NULL) {
		sbx_result_status(res, KCLAW__EVAL_STATUS__NO_DEVICE,
		    "%s; to compile without a GPU pass an architecture "
		    "(--compile-only --arch sm_90)",
		    g->nodev_reason);
		goto out;
	}
	sbx_result_set(&res->arch, "%s", arch);
	if (prog_compile(&e, &e.cand, cand->source, arch) != 0)
		goto out;
	if (!g->have_device || compile_only) {
		ev_add_resources(&e, &e.cand, 0);
		if (prog_plan(&e, &e.cand, cand->plan_json, 0) != 0)
			goto out;
		if (!g->have_device && !compile_only) {
			sbx_result_status(res, KCLAW__EVAL_STATUS__NO_DEVICE,
			    "compiled for %s and the plan checks, but it "
			    "cannot run: %s",
			    arch, g->nodev_reason);
			goto out;
		}
		sbx_result_status(res, KCLAW__EVAL_STATUS__OK,
		    "compiled for %s in %.0f ms%s; the plan checks against "
		    "the kernels' signatures (not run: compile-only)",
		    arch, res->compile_ms,
		    res->compile_cached ? " (cached)" : "");
		goto out;
	}
	g->cu.cuCtxSetCurrent(g->ctx);
	tp = kc_mono_ns();
	if (prog_load(&e, &e.cand) != 0)
		goto out;
	if (prog_plan(&e, &e.cand, cand->plan_json, 1) != 0) {
		ev_add_resources(&e, &e.cand, 1);
		goto out;
	}
	ev_add_resources(&e, &e.cand, 1);
reference:
	e.trials = o && o->trials ? o->trials
	    : e.task->trials      ? e.task->trials
	                          : EV_DEFAULT_TRIALS;
	e.warmup = o && o->warmup ? o->warmup : EV_DEFAULT_WARMUP;
	e.adaptive = !(o && o->iterations);
	e.iters = e.adaptive ? EV_ADAPT_MAX : o->iterations;
	if (e.trials > EV_MAX_TRIALS)
		e.trials = EV_MAX_TRIALS;
	if (e.iters > EV_MAX_ITERS)
		e.iters = EV_MAX_ITERS;
	for (size_t i = 0; e.task->reference != NULL && e.ops == NULL &&
	     i < sizeof(ev_ref_kinds) / sizeof(ev_ref_kinds[0]);
	     i++)
		if (ev_ref_kinds[i]->usable(e.task->reference))
			e.ops = ev_ref_kinds[i];
	if (e.ops == NULL) {
		sbx_result_status(res, EV_INTERNAL,
		    "the task has no usable reference (a `cuda` or `torch` "
		    "reference, or `tensors` sets); nothing to verify "
		    "against");
		goto out;
	}
	if (e.ops->setup(&e) != 0)
		goto out;
	if (e.trials > EV_MAX_TRIALS)
		e.trials = EV_MAX_TRIALS;
	if (e.ops->caveat != NULL)
		ev_warn(&e, "%s", e.ops->caveat);
	if (refonly) {
		ev_reference_only(&e, &tp);
		goto out;
	}
	if (prog_globals(&e, &e.cand) != 0)
		goto out;
	ev_phase(&e, "sandbox.setup_ms", &tp);
	if (prog_prepare(&e, &e.cand) != 0 || ev_alloc_tensors(&e) != 0 ||
	    e.ops->prepare(&e) != 0)
		goto out;
	ev_phase(&e, "sandbox.inputs_ms", &tp);
	if (ev_verify(&e) != 0)
		goto out;
	ev_phase(&e, "sandbox.verify_ms", &tp);
	if (ev_time(&e, &e.cand, 1, &res->timing) != 0)
		goto out;
	ev_phase(&e, "sandbox.time_ms", &tp);
	if (ev_judge(&e) != 0)
		goto out;
	if (o != NULL && o->profile) {
		ev_profile(&e);
		ev_phase(&e, "sandbox.profile_ms", &tp);
	}
	if (*fatal || res->status != KCLAW__EVAL_STATUS__OK)
		goto out;
	if (e.ops->baseline(&e) != 0) {
		/* The candidate is fine; the baseline is not its problem. */
		if (!*fatal)
			sbx_result_status(res, KCLAW__EVAL_STATUS__OK,
			    "correct; the reference could not be timed: %s",
			    res->message);
		goto out;
	}
	ev_phase(&e, "sandbox.baseline_ms", &tp);
	if (res->torch_compile_ms > 0 && res->timing->median_ms > 0)
		res->compile_speedup =
		    res->torch_compile_ms / res->timing->median_ms;
	if (res->reference_ms > 0 && res->timing->median_ms > 0) {
		res->speedup = res->reference_ms / res->timing->median_ms;
		sbx_result_status(res, KCLAW__EVAL_STATUS__OK,
		    "correct on %u trials and every one of %u timed runs; "
		    "median %.4f ms (spread %.4f ms), %.2fx the reference "
		    "(%.4f ms)",
		    e.trials, res->timing->iterations, res->timing->median_ms,
		    res->timing->stddev_ms, res->speedup, res->reference_ms);
	}
out:
	ev_free(&e);
	if (tp != 0)
		ev_phase(&e, "sandbox.cleanup_ms", &tp);
	if (g->have_device)
		gpu_device_metrics(g, res);
	if (e.cand_runs || e.ref_runs) {
		sbx_result_add_metric(
		    res, "sandbox.candidate_runs", e.cand_runs, "runs");
		sbx_result_add_metric(
		    res, "sandbox.reference_runs", e.ref_runs, "runs");
	}
	res->wall_ms = (double)(kc_mono_ns() - t0) / 1e6;
}

/*
 * A tunable sweep's sources compiled in parallel into the cache before its
 * configurations are evaluated one by one (sbx_backend.precompile), for
 * the architecture gpu_evaluate would choose.
 */
static int
gpu_precompile(void *state, const Kclaw__EvalRequest *req,
    const char *const *sources, size_t n, unsigned *threads)
{
	gpu *g = state;
	const Kclaw__EvalOptions *o = req->options;
	const char *arch = o != NULL && o->arch != NULL && o->arch[0] ? o->arch
	    : g->arch_override[0] ? g->arch_override
	    : g->have_device      ? g->arch
	                          : NULL;

	*threads = 0;
	if (arch == NULL || g->cache_dir[0] == '\0')
		return -1;
	return (int)sbx_compile_many(sources, n, arch, g->cache_dir, threads);
}

const sbx_backend sbx_cuda_backend = {
    .name = "cuda",
    .init = gpu_init,
    .evaluate = gpu_evaluate,
    .precompile = gpu_precompile,
    .fini = gpu_fini,
};
