/*
 * ref_tensors.c - the `tensors` reference kind: recorded input sets and
 * expected outputs (.npy), a recorded baseline time. The expected outputs
 * live in host pages made unreadable while the candidate runs.
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
ev_expected_buf(ev_gpu *g, unsigned k, size_t t, size_t bytes)
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
	ev_gpu *g = e->g;

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
	ev_gpu *g = e->g;

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

const ev_ref_ops ev_tensors_ops = {
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
