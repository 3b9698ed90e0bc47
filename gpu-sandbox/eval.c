/*
 * eval.c - the CUDA backend's evaluation of one candidate (DESIGN.md "The
 * reviewer", steps 1-6): the protocol, and the backend table the child
 * runs it through.
 *
 * The rooms it calls: programs.c (compile, load, plan, run), devmem.c (the
 * tensors' device memory and generated inputs), checks.c (what the GPU and
 * the host check of a run), timing.c (timed runs, the device's ceilings,
 * profiling), device.c (start-up, driver errors), and one file per
 * reference kind behind ev_ref_ops (ref_cuda.c, ref_tensors.c,
 * ref_torch.c).
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

#include "eval_int.h"

/* The reference kinds, in the order a task's reference is matched. */
static const ev_ref_ops *const ev_ref_kinds[] = {
    &ev_cuda_ops, &ev_torch_ops, &ev_tensors_ops};

void
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
	ev_gpu *g = e->g;
	int rv;

	for (unsigned k = 0; k < e->trials; k++) {
		char when[64];

		if (e->ops->trial_inputs(e, k) != 0 ||
		    ev_fresh_state(e, &e->cand) != 0 ||
		    ev_hash_inputs(e, before) != 0 ||
		    ev_prog_run_sync(e, &e->cand) != 0 ||
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
	    ev_prog_run_sync(e, &e->cand) != 0 ||
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

/* A random number no candidate can predict. */
static uint64_t
ev_random(void)
{
	uint64_t v = 0;

	if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v))
		v = kc_mono_ns() * 0x9e3779b97f4a7c15ull;
	return v;
}

/* Records how long the phase since *since took, as a metric: where an
 * evaluation's own time goes (the overhead around the kernels). */
static void
ev_phase(ev *e, const char *name, uint64_t *since)
{
	uint64_t now = kc_mono_ns();

	sbx_result_add_metric(e->res, name, (double)(now - *since) / 1e6, "ms");
	*since = now;
}

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
	ev_prog_free(e, &e->cand);
}

static void
ev_gpu_evaluate(void *state, const Kclaw__EvalRequest *req,
    Kclaw__EvalResult *res, int *fatal)
{
	ev_gpu *g = state;
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
		ev_gpu_measure_ceilings(g);
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
	if (ev_prog_compile(&e, &e.cand, cand->source, arch) != 0)
		goto out;
	if (!g->have_device || compile_only) {
		ev_add_resources(&e, &e.cand, 0);
		if (ev_prog_plan(&e, &e.cand, cand->plan_json, 0) != 0)
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
	if (ev_prog_load(&e, &e.cand) != 0)
		goto out;
	if (ev_prog_plan(&e, &e.cand, cand->plan_json, 1) != 0) {
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
	if (ev_prog_globals(&e, &e.cand) != 0)
		goto out;
	ev_phase(&e, "sandbox.setup_ms", &tp);
	if (ev_prog_prepare(&e, &e.cand) != 0 || ev_alloc_tensors(&e) != 0 ||
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
		ev_gpu_device_metrics(g, res);
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
 * the architecture ev_gpu_evaluate would choose.
 */
static int
ev_gpu_precompile(void *state, const Kclaw__EvalRequest *req,
    const char *const *sources, size_t n, unsigned *threads)
{
	ev_gpu *g = state;
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
    .init = ev_gpu_init,
    .evaluate = ev_gpu_evaluate,
    .precompile = ev_gpu_precompile,
    .fini = ev_gpu_fini,
};
