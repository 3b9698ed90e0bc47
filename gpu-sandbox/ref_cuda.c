/*
 * ref_cuda.c - the `cuda` reference kind: a CUDA program run in the
 * sandbox on every input set, compared with the candidate on the device.
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
	ev_prog ref;
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
	ev_gpu *g = e->g;

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
	return ev_prog_enqueue(e, &cuda_st(e)->ref);
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
	ev_gpu *g = e->g;

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

static int
cuda_baseline(ev *e)
{
	int rv = ev_time(e, &cuda_st(e)->ref, 0, &e->res->baseline);

	if (rv == 0)
		e->res->reference_ms = e->res->baseline->median_ms;
	return rv;
}

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
	if (ev_prog_compile(e, &st->ref, rc->source, e->g->arch) != 0 ||
	    ev_prog_load(e, &st->ref) != 0 ||
	    ev_prog_plan(e, &st->ref, rc->plan_json, 1) != 0 ||
	    ev_prog_prepare(e, &st->ref) != 0)
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
	ev_prog_free(e, &st->ref);
	free(st);
	e->ref_state = NULL;
}

const ev_ref_ops ev_cuda_ops = {
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
