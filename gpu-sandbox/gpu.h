/*
 * gpu.h - what the CUDA backend's files share: cuBLASLt matmul steps and
 * CUPTI profiling. Only the child links these.
 */
#ifndef SBX_GPU_H
#define SBX_GPU_H

#include <cuda.h>
#include <stddef.h>

#include "kclaw.pb-c.h"
#include "plan.h"

/* ---- cuBLASLt (matmul.c) ---- */

typedef struct sbx_lt sbx_lt;

int sbx_lt_open(sbx_lt **out);
void sbx_lt_close(sbx_lt *lt);
/* The device workspace cuBLASLt may use (allocated by the caller). */
void sbx_lt_set_workspace(sbx_lt *lt, CUdeviceptr ws, size_t bytes);
/*
 * Enqueues D = alpha * op(A) @ op(B) + beta * C (+ bias, activation), all
 * row-major, on stream. c and bias may be 0 when the step has none.
 * Returns 0, or KC_ECUDA with the cuBLASLt status in kc_lasterr().
 */
int sbx_lt_matmul(sbx_lt *lt, const sbx_matmul *mm, CUdeviceptr a,
    CUdeviceptr b, CUdeviceptr c, CUdeviceptr d, CUdeviceptr bias,
    CUstream stream);

/* ---- CUPTI (profile.c, profile_range.cc) ---- */

/* Starts recording kernel activity records. */
int sbx_prof_activity_start(void);
/* Stops, flushes and appends one KernelActivity per kernel of the last run
 * to res (a run is what lies between a kc_mark and a kc_mark_end kernel;
 * the sandbox's own kc_* kernels left out; res NULL: none kept). */
int sbx_prof_activity_stop(Kclaw__EvalResult *res);
/* The last stop's runs, up to max, in launch order: each run's span from
 * its first kernel's start to its last kernel's end by CUPTI's clock (a
 * plan's time, gaps between steps included; 0: none ran) and the same for
 * the calibration kernel kc_probe (either array NULL: not wanted). Returns
 * how many runs. */
unsigned sbx_prof_runs(double *span_ms, double *probe_ms, unsigned max);

/* Runs the caller's work once per profiler pass. */
typedef int (*sbx_prof_run_fn)(void *arg);
/*
 * Collects hardware metrics (range profiler) over run(arg), replayed as
 * many times as the metrics need, and appends them to res->metrics. When
 * counters cannot be read, sets res->counters_note and returns KC_ENOTSUP;
 * the evaluation goes on.
 */
int sbx_prof_range(CUcontext ctx, int device, sbx_prof_run_fn run, void *arg,
    Kclaw__EvalResult *res);

#endif
