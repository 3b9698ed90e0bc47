/*
 * eval_int.h - what the evaluation's files share (internal to the CUDA
 * backend; the `ev_` prefix). eval.c holds the protocol; the rooms it
 * calls are named below by file.
 */
#ifndef SBX_EVAL_INT_H
#define SBX_EVAL_INT_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

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
/* Runs of a plan, under CUPTI, that measure the events' cost around its
 * own launches (ev_plan_calibrate), for plans whose warm-up run took under
 * EV_PLAN_CALIB_UNDER_MS: beyond it a microsecond is under 0.1 % of a
 * run. As many as a batch of timed runs, so that runs which alternate
 * (sum_reduce's events on the H200: 0.1-0.3 us more on every other run)
 * weigh in it as they do in the batches. */
#define EV_PLAN_CALIB_RUNS EV_ADAPT_BATCH
#define EV_PLAN_CALIB_UNDER_MS 1.0
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

/* Distinct input distributions an evaluation cycles through. Trials 0 and
 * 1 both use the task's own (their outputs' difference is how much the
 * output varies with the inputs alone: the variation rule); trial k > 1
 * uses variant k - 1, timed run i variant i (mod EV_VARIANTS). */
#define EV_VARIANTS 7
#define EV_MIN_TRIALS 4

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
	CUfunction hash, poison_count, compare, flush_read, read_sweep, hold,
	    probe, mark, mark_end;
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
	/* Measured at start-up: the device's copy bandwidth (reads plus
	 * writes), its read bandwidth (a read-only sweep) and its peak
	 * arithmetic rate, for the speed of light and the roofline. */
	double bw_bytes_per_ms, read_bytes_per_ms, peak_flops_per_ms;
	/* Measured at start-up (ev_gpu_calibrate): the events' own time around
	 * one launch of a kernel that fills the GPU, what each further launch
	 * of a plan adds to it (both taken off every timed sample:
	 * ev_gpu_cost), the same around an empty one (reported beside), and
	 * the least a launch takes by CUPTI; 0 where CUPTI could not measure
	 * them. */
	double launch_cost_ms, launch_step_ms, launch_empty_ms, launch_floor_ms;
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
} ev_gpu;

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
} ev_prog;

typedef struct {
	ev_gpu *g;
	const Kclaw__EvalRequest *req;
	const Kclaw__TaskSpec *task;
	Kclaw__EvalResult *res;
	int *fatal;
	/* The kinds a task's reference is matched against, in order. */
	const struct ev_ref_ops *const *kinds;
	size_t nkinds;
	int refonly;      /* no candidate: the reference alone */
	const char *arch; /* what the candidate is compiled for */
	uint64_t t0;      /* the evaluation's start (ev_trace) */
	uint64_t tp;      /* the last phase metric's end (0: none yet) */
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
	/* Trial 0's outputs hashed, for the determinism check. */
	uint64_t first_out[EV_MAX_TENSORS];
	ev_prog cand;
	/* What the reference kind does at each step of the protocol, and
	 * the state it keeps for this evaluation (its own). */
	const struct ev_ref_ops *ops;
	void *ref_state;
	int ref_sent; /* how many requests the kind's prefetch sent */
	/* The kind whose prefetch ran (its settle comes after the compile),
	 * and how long settling waited. */
	const struct ev_ref_ops *prefetched;
	double ref_settle_ms;
	/* The candidate's compile will be a cache hit (known before the
	 * prefetch): there is no compile time to fill. */
	int compile_cached;
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
	/* Optional, before the candidate is compiled (e->trials and the
	 * other counts as asked, ev_counts): sends what prepare and the
	 * runs' inputs will need of another process (the torch kind's load,
	 * first draw and staged serials), so that it works while NVRTC does;
	 * e->ref_sent counts what went out. Nothing fails here: prepare and
	 * trial_inputs do what did not happen. */
	void (*prefetch)(ev *e);
	/* Optional, after the compile and before the sandbox first uses the
	 * GPU: waits until the prefetched work is done and keeps its replies,
	 * so that nothing the other process times (the torch kind's eager
	 * baseline) runs beside the sandbox's own GPU work. */
	void (*settle)(ev *e);
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

#define EV_CU(e, call, status, what)                                           \
	do {                                                                   \
		CUresult ev_r_ = (call);                                       \
		if (ev_r_ != CUDA_SUCCESS)                                     \
			return ev_cu((e), ev_r_, (status), (what));            \
	} while (0)

#define EV_INTERNAL KCLAW__EVAL_STATUS__INTERNAL_ERROR

/* A slot's figures: the relative norm of the difference, bad and NaN
 * counts. */
typedef struct {
	double rel, max_abs, max_rel;
	uint64_t bad, nans;
} ev_slot;

/* ---- the reference kinds (ref_cuda.c, ref_tensors.c, ref_torch.c) ---- */

extern const ev_ref_ops ev_cuda_ops, ev_tensors_ops, ev_torch_ops;

/* ---- device.c ---- */

void ev_counts(ev *e);
int ev_cu(ev *e, CUresult r, Kclaw__EvalStatus status, const char *what);
int ev_ok(ev *e, CUresult r, Kclaw__EvalStatus status, const char *what);
int ev_gpu_attr(ev_gpu *g, CUdevice_attribute a);
void ev_gpu_device_metrics(ev_gpu *g, Kclaw__EvalResult *res);
void ev_gpu_fini(void *state);
/* The device's ceilings and the events' cost, once per child (the
 * sandbox.ceilings_ms metric in res says how long it took). */
void ev_gpu_measure(void *state, Kclaw__EvalResult *res);
int ev_gpu_init(
    void **state, const sbx_child_config *cfg, Kclaw__EvalResult *ready);
/* ev_gpu_init with the driver's functions given (cu; NULL: libcuda.so.1
 * loaded), without CUPTI's set-up and cuBLASLt: the device seam a test
 * fills with a fake GPU. */
int ev_gpu_open(void **state, const sbx_child_config *cfg, const sbx_cu *cu,
    Kclaw__EvalResult *ready);

/* ---- programs.c ---- */

void ev_add_resources(ev *e, const ev_prog *p, int loaded);
int ev_fresh_state(ev *e, const ev_prog *p);
int ev_prog_compile(ev *e, ev_prog *p, const char *source, const char *arch);
int ev_prog_enqueue(ev *e, const ev_prog *p);
void ev_prog_free(ev *e, ev_prog *p);
int ev_prog_globals(ev *e, ev_prog *p);
int ev_prog_load(ev *e, ev_prog *p);
int ev_prog_plan(ev *e, ev_prog *p, const char *plan_json, int loaded);
int ev_prog_prepare(ev *e, ev_prog *p);
int ev_prog_run_sync(ev *e, const ev_prog *p);

/* ---- devmem.c ---- */

int ev_alloc_tensors(ev *e);
int ev_generate(ev *e, size_t t, unsigned trial, CUdeviceptr dst);
int ev_pinned(ev *e, size_t bytes);
int ev_poison(ev *e, const ev_prog *p);
unsigned ev_variant(unsigned trial);

/* ---- checks.c ---- */

int ev_check_variation(ev *e, size_t t, double rel, const char *when);
int ev_check_writes(
    ev *e, unsigned k, const uint64_t *before, const uint64_t *after);
CUdeviceptr ev_chk_slot(const ev *e, unsigned slot, size_t t);
int ev_dev_compare(ev *e, size_t t, CUdeviceptr got, CUdeviceptr exp,
    double atol, double rtol, CUdeviceptr slot);
int ev_dev_compare_now(ev *e, size_t t, CUdeviceptr got, CUdeviceptr exp,
    double atol, double rtol, const char *what, ev_slot *out);
int ev_hash_inputs(ev *e, uint64_t *h);
int ev_hash_tensors(ev *e, uint64_t *h, int outputs);
int ev_judge(ev *e);
void ev_note_degenerate(ev *e);
void ev_note_error(ev *e, size_t t, double max_abs, double max_rel, double rel);
int ev_read_checks(ev *e, unsigned lo, unsigned n);
const Kclaw__Tolerance *ev_tolerance(const ev *e, Kclaw__Tolerance *dflt);
void ev_wrong(ev *e, size_t t, unsigned k, const sbx_cmp *c, const char *when);

/* ---- timing.c ---- */

void ev_profile(ev *e);
int ev_time(ev *e, ev_prog *p, int check, Kclaw__Timing **out);
void ev_gpu_hold_init(ev_gpu *g);
void ev_gpu_measure_ceilings(ev_gpu *g);

/* ---- eval.c ---- */

void ev_warn(ev *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ev_clock(ev *e, const char *name);
void ev_trace(const ev *e, uint64_t since, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/*
 * One evaluation through the protocol's phases on GPU g, the task's
 * reference matched against kinds[0..nkinds) in order (the backend's
 * evaluate with the three real kinds; a test's own kinds or device
 * functions (g->cu) are the seams).
 */
void ev_evaluate(ev_gpu *g, const ev_ref_ops *const *kinds, size_t nkinds,
    const Kclaw__EvalRequest *req, Kclaw__EvalResult *res, int *fatal);

#endif
