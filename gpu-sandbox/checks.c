/*
 * checks.c - what is checked of a run: inputs hashed on the device before
 * and after, outputs compared on the device (kc_compare, into slots read
 * after the timed runs), the variation rule, mismatches as the result
 * reports them, and the judgement after timing (precision, speed of
 * light).
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

#include "eval_int.h"

/* Hashes every input and parameter into h[] (on the device). */
int
ev_hash_tensors(ev *e, uint64_t *h, int outputs)
{
	ev_gpu *g = e->g;
	uint64_t out[EV_MAX_TENSORS];
	size_t n = e->nt < EV_MAX_TENSORS ? e->nt : EV_MAX_TENSORS;
	uint64_t t0 = kc_mono_ns();

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
	ev_trace(e, t0, "hashing the %s", outputs ? "outputs" : "inputs");
	return 0;
}

/* Hashes of every input and parameter (outputs' slots are 0). */
int
ev_hash_inputs(ev *e, uint64_t *h)
{
	return ev_hash_tensors(e, h, 0);
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

const Kclaw__Tolerance *
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
void
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
void
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
int
ev_dev_compare(ev *e, size_t t, CUdeviceptr got, CUdeviceptr exp, double atol,
    double rtol, CUdeviceptr slot)
{
	ev_gpu *g = e->g;
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

/* ev_dev_compare into the scratch slot, waited for and read: what = the
 * step, for errors. */
int
ev_dev_compare_now(ev *e, size_t t, CUdeviceptr got, CUdeviceptr exp,
    double atol, double rtol, const char *what, ev_slot *out)
{
	ev_gpu *g = e->g;
	uint8_t raw[EV_CHK_SLOT];

	if (ev_dev_compare(e, t, got, exp, atol, rtol, g->acc) != 0)
		return -1;
	EV_CU(e, g->cu.cuStreamSynchronize(g->stream), EV_INTERNAL, what);
	EV_CU(
	    e, g->cu.cuMemcpyDtoH(raw, g->acc, sizeof(raw)), EV_INTERNAL, what);
	ev_slot_read(raw, out);
	return 0;
}

CUdeviceptr
ev_chk_slot(const ev *e, unsigned slot, size_t t)
{
	return e->g->chk + ((size_t)slot * EV_CHK_OUTS + t) * EV_CHK_SLOT;
}

/* The variation rule (integrity.h) for output t with relative error rel,
 * seen `when`: 0 when it holds, 1 when it fails (result filled). */
int
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
int
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

/* Reads the comparisons of timed runs lo to n - 1: 0 when every run of
 * every output was right, 1 with the result filled. */
int
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
 * Outputs that vary between two input sets of one distribution by less
 * than the tolerance admits: a constant could pass allclose on them, so
 * only the variation rule tells. The result names them, with the fix,
 * and has every output's figures (output_variations).
 */
void
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
 * Whether every output is degenerate (it varies with the inputs by less
 * than the tolerance admits) and the candidate's were exact on every
 * checked run: then a time below the speed of light is the problem's, not
 * a trick (a kernel that writes level2/80's zeros is right for every
 * input).
 */
static int
ev_exact_on_degenerate(const ev *e)
{
	Kclaw__Tolerance dflt;
	const Kclaw__Tolerance *tol = ev_tolerance(e, &dflt);
	int outputs = 0;

	if (e->max_abs != 0)
		return 0;
	for (size_t t = 0; t < e->nt && t < EV_MAX_TENSORS; t++) {
		if (e->task->tensors[t]->kind != KCLAW__TENSOR_KIND__OUTPUT)
			continue;
		if (!e->var_known[t] ||
		    !sbx_output_degenerate(e->var_rel[t], tol) ||
		    e->err_rel[t] != 0)
			return 0;
		outputs++;
	}
	return outputs > 0;
}

/*
 * After the timed runs: the figures an OK result carries, the precision
 * check, the speed of light. 0 when the candidate stands (status OK), 1
 * when it is refused (result filled).
 */
int
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
	/* The honest figure for how close it is to what the GPU allows;
	 * the speed of light above is only the impossibility check. */
	res->roofline_ms = sbx_roofline_ms(in_bytes, out_bytes, flops,
	    e->g->bw_bytes_per_ms, e->g->read_bytes_per_ms,
	    e->g->peak_flops_per_ms / SBX_OPS_FP8 *
	        sbx_precision_ops(
	            e->req->candidate->source, e->cand.plan, task));
	if (res->roofline_ms > 0 && res->timing->median_ms > 0)
		res->sol_fraction = res->roofline_ms / res->timing->median_ms;
	if (res->speed_of_light_ms > 0 && res->timing->median_ms > 0) {
		if (res->timing->median_ms < res->speed_of_light_ms &&
		    ev_exact_on_degenerate(e)) {
			res->degenerate_output = 1;
			ev_warn(e,
			    "degenerate output: every output is the same for "
			    "every input (within the tolerance) and this "
			    "kernel's were exact on every checked run, so its "
			    "median %.4f ms, below the speed of light (%.4f "
			    "ms), measures no computation; the problem, not "
			    "the kernel, is what is fast",
			    res->timing->median_ms, res->speed_of_light_ms);
			sbx_result_status(res, KCLAW__EVAL_STATUS__OK,
			    "correct on %u trials and every one of %u timed "
			    "runs, exactly, on outputs that do not vary with "
			    "the inputs (degenerate output); median %.4f ms, "
			    "below the speed of light, which does not bound "
			    "such a problem",
			    e->trials, res->timing->iterations,
			    res->timing->median_ms);
		} else if (res->timing->median_ms < res->speed_of_light_ms) {
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
