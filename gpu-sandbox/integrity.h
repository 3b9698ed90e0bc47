/*
 * integrity.h - the reviewer's guarantees that need no GPU to decide
 * (docs/plan.md "What the reviewer guarantees"): which module state a
 * candidate could carry from one run to the next, which calls it may not
 * make, whether it computes in lower precision than its task, how fast any
 * kernel could possibly be, and whether an error is small against how much
 * the expected outputs vary. Pure C, so CI tests every rule directly; the
 * CUDA backend (eval.c) applies them on every evaluation.
 */
#ifndef SBX_INTEGRITY_H
#define SBX_INTEGRITY_H

#include <stddef.h>

#include "kclaw.pb-c.h"
#include "plan.h"

/* A module-scope variable in global memory. */
typedef struct {
	char *name;
	int initialised; /* declared with `= {...}`; else zero-filled */
} sbx_ptx_global;

/*
 * The module-scope variables a PTX text defines in global memory
 * (`.global` declarations: `__device__` variables, static locals), which
 * persist between launches; the sandbox restores each to its loaded
 * contents before every run. *v is malloc'd (sbx_ptx_globals_free).
 * Returns 0 or KC_ENOMEM.
 */
int sbx_ptx_globals(const char *ptx, sbx_ptx_global **v, size_t *n);
void sbx_ptx_globals_free(sbx_ptx_global *v, size_t n);

/*
 * Calls a candidate may not make, by what its PTX calls: device printf
 * (vprintf) and the device heap (malloc, free), whose contents outlive a
 * run. Returns NULL, or the sentence that refuses the candidate.
 */
const char *sbx_ptx_refusal(const char *ptx);

/*
 * Lower precision than the task's: when every floating tensor of the task
 * is f32 or f64, names what in source (comments skipped) or plan computes
 * in half, bf16, tf32 or fp8 into what (e.g. "__nv_bfloat16, a matmul step
 * with tf32") and returns 1; else 0.
 */
int sbx_precision_scan(const char *source, const sbx_plan *plan,
    const Kclaw__TaskSpec *task, char *what, size_t whatlen);

/*
 * The fastest any kernel could run the task, in ms: every output written
 * once and at least a quarter of every input read once (a kernel may
 * legitimately skip structured parts, such as a triangle), at 1.25 times
 * the device's measured copy bandwidth (bytes per ms), and flops (0 =
 * unknown) at peak_flops (per ms). 0 when nothing is known.
 */
double sbx_speed_of_light_ms(double in_bytes, double out_bytes, double flops,
    double bw_bytes_per_ms, double peak_flops_per_ms);

/*
 * Dense operations per SM per clock of Hopper's fastest unit for each
 * precision: f64 (DMMA) and f32 (FFMA) 256, tf32 2048, f16/bf16 4096,
 * fp8 8192 (the rate the speed of light assumes for every kernel).
 */
#define SBX_OPS_F64 256.0
#define SBX_OPS_F32 256.0
#define SBX_OPS_TF32 2048.0
#define SBX_OPS_16 4096.0
#define SBX_OPS_FP8 8192.0

/*
 * The operations per SM per clock of the precision a candidate computes
 * in: the task's floating types, lowered by what its source or plan uses
 * (sbx_precision_scan: tf32, half/bf16, fp8), the fastest of them. A task
 * without floating tensors: SBX_OPS_FP8.
 */
double sbx_precision_ops(
    const char *source, const sbx_plan *plan, const Kclaw__TaskSpec *task);

/*
 * The honest roofline, in ms: the compulsory bytes (every input read once,
 * every output written once) at the bandwidths measured, or flops (0 =
 * unknown) at the peak of the precision used (per ms), whichever takes
 * longer. A kernel's time over it is how far it is from what the GPU
 * allows (sol_fraction = roofline / median); 0 when nothing is known.
 *
 * The bytes: inputs at the read bandwidth read_bw (a read-only sweep;
 * HBM reads alone go faster than a copy's mix: on the H200 a loss that
 * reads two tensors and writes a scalar read 1.134 of the copy roofline),
 * outputs at the write bandwidth that makes a copy take what it measured
 * (1/w = 2/copy_bw - 1/read_bw), so a kernel at the copy rate reads 1.0
 * whatever its mix. read_bw 0 (not measured) or below copy_bw: both at
 * copy_bw. Bandwidths in bytes per ms, a copy's counting reads and writes.
 */
double sbx_roofline_ms(double in_bytes, double out_bytes, double flops,
    double copy_bw, double read_bw, double peak_flops_per_ms);

/*
 * The variation rule: a candidate's relative error err_rel (||got - exp||
 * / ||exp||, worst over trials) must be small against var_rel, the
 * smallest relative difference between the expected outputs of two
 * verification trials, or a kernel that ignores its inputs passes
 * whenever outputs vary less than the tolerance. Returns 1 when err_rel
 * is acceptable: at most a quarter of var_rel, or below the floor under
 * which float arithmetic's own rounding dominates.
 */
int sbx_error_small_vs_variation(double err_rel, double var_rel);
#define SBX_VARIATION_FRACTION 0.25
#define SBX_VARIATION_FLOOR 1e-6

/*
 * A task is degenerate when its outputs vary between trials by less than
 * the tolerance admits: a constant could pass allclose. Returns 1 then.
 */
int sbx_output_degenerate(double var_rel, const Kclaw__Tolerance *tol);

/*
 * One timed sample as the reported time: ms from one pair of CUDA events
 * around `runs` runs back to back (1: a single run), per run, less cost,
 * the events' own time around a launch (measured per device: an empty
 * kernel's events minus its CUPTI duration, timing.c ev_gpu_calibrate). Never
 * below floor_ms (that empty kernel's CUPTI duration, the least a launch
 * takes) and never above the raw time per run. cost 0: the raw time.
 */
double sbx_sample_ms(double ms, unsigned runs, double cost, double floor_ms);

/* qsort's order of doubles, ascending. */
int sbx_cmp_double(const void *a, const void *b);

/* The median of n sorted doubles; 0 for none. */
double sbx_sorted_median(const double *v, unsigned n);

/* The median of n doubles (sorted in place); 0 for none. */
double sbx_median(double *v, unsigned n);

/*
 * The events' cost around one run of a plan of `steps` launches, measured
 * on that plan (timing.c ev_plan_calibrate): over[] holds n runs' events
 * less their CUPTI span (sorted in place here). Their mean, less the runs
 * more than SBX_PLAN_COST_SLACK_MS from their median (interrupted ones),
 * never below 0 and never more than the child's calibration for as many
 * launches (child_ms) plus SBX_PLAN_COST_SLACK_MS per launch: what a
 * plan's own runs add beyond the calibration's probes is a launch's tail
 * and start, about a microsecond, not a share of its work. The mean: a
 * timed sample is its span plus this excess, and where the spans spread
 * far wider than the excess, their median moves by the excess's mean
 * (sum_reduce on the H200: the excess's median 0, its mean +0.1 us, the
 * medians +0.5 to +1.3 % apart). n 0: child_ms.
 */
#define SBX_PLAN_COST_SLACK_MS 0.0015
double sbx_plan_cost(double *over, unsigned n, double child_ms, size_t steps);

/*
 * Whether n timed samples (sorted) pin their median down: its
 * distribution-free 95 % confidence interval lies within ci (a fraction)
 * of it on either side. The interval is the pair of order statistics lo
 * and n - 1 - lo (from 0), lo = floor(n/2 - 1.96 sqrt(n)/2): for 10
 * samples the 2nd and 9th of 10 (97.9 % coverage), for 20 the 6th and 15th
 * (95.9 %). It is symmetric: one slow sample (the largest) is outside it,
 * as one fast one is. torchref_measure.py's _median_settled is the same
 * rule for the reference's baseline.
 */
int sbx_median_settled(const double *sorted, unsigned n, double ci);

#endif
