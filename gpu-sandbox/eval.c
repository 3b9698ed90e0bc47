/*
 * eval.c - the CUDA backend's evaluation of one candidate (DESIGN.md "The
 * reviewer", steps 1-6): the protocol as a table of phases, and the
 * backend table the child runs it through.
 *
 * Each phase has one job and returns 0 (go on) or not (the result says
 * why: an error, a verdict, or an evaluation that is complete); a fault
 * (*fatal) ends the evaluation whatever the phase returned. A phase runs
 * when its row's condition holds: a candidate's evaluation, a
 * reference-only one (kclaw eval TASK), or both. A row's metric is the
 * time since the last metric, recorded when the phase went on: where an
 * evaluation's own time goes.
 *
 * The rooms the phases call: programs.c (compile, load, plan, run),
 * devmem.c (the tensors' device memory and generated inputs), checks.c
 * (what the GPU and the host check of a run, the judgement after timing),
 * timing.c (timed runs, the device's ceilings, profiling), device.c
 * (start-up, driver errors), and one file per reference kind behind
 * ev_ref_ops (ref_cuda.c, ref_tensors.c, ref_torch.c): the only places
 * that know which kind a task's reference is.
 *
 * Why this order: what the reference kind can start without the
 * candidate is sent first (prefetch: the torch kind's load runs in the
 * reference process while NVRTC compiles); inputs exist before the first
 * run, and the expected
 * outputs only where no candidate can reach them while it runs (the
 * reference kind's prepare); every verification trial runs from a fresh
 * state on inputs of its own distribution, inputs hashed before and after;
 * the determinism run repeats trial 0; only a verified candidate is timed,
 * and every timed run is checked again; the judgement (precision, speed of
 * light) needs the timing; the baselines are timed last, so a candidate's
 * verdict never waits for them. A sticky CUDA error (a kernel fault) ends
 * the evaluation with RUNTIME_FAULT and *fatal set: the child exits and a
 * fresh one starts.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "eval_int.h"

typedef struct {
	const char *name;
	int (*applies)(const ev *e);
	int (*run)(ev *e);
	const char *metric; /* NULL: the time runs on into the next's */
} ev_phase;

static int ev_cand(const ev *e);
static int ev_refonly(const ev *e);
static int ev_always(const ev *e);
static int ev_offline(const ev *e);
static int ev_online(const ev *e);
static int ev_profiled(const ev *e);

static int ph_target(ev *e);
static int ph_prefetch(ev *e);
static int ph_compile(ev *e);
static int ph_offline(ev *e);
static int ph_load(ev *e);
static int ph_plan(ev *e);
static int ph_device(ev *e);
static int ph_reference(ev *e);
static int ph_globals(ev *e);
static int ph_launches(ev *e);
static int ph_inputs(ev *e);
static int ph_samples(ev *e);
static int ph_variation(ev *e);
static int ph_trials(ev *e);
static int ph_determinism(ev *e);
static int ph_timing(ev *e);
static int ph_checks(ev *e);
static int ph_profile(ev *e);
static int ph_baselines(ev *e);
static int ph_result(ev *e);
static int ph_summary(ev *e);

/* clang-format off */
static const ev_phase ev_protocol[] = {
	{"target",      ev_cand,     ph_target,      NULL},                 /* COMPILE_ERROR (no source), NO_DEVICE */
	{"prefetch",    ev_online,   ph_prefetch,    NULL},
	{"compile",     ev_cand,     ph_compile,     NULL},                 /* COMPILE_ERROR */
	{"offline",     ev_offline,  ph_offline,     NULL},                 /* ends: OK (compile-only), PLAN_ERROR, NO_DEVICE */
	{"load",        ev_cand,     ph_load,        NULL},                 /* LAUNCH_ERROR */
	{"plan",        ev_cand,     ph_plan,        NULL},                 /* PLAN_ERROR */
	{"device",      ev_refonly,  ph_device,      NULL},                 /* NO_DEVICE */
	{"reference",   ev_always,   ph_reference,   NULL},                 /* INTERNAL_ERROR (no usable reference) */
	{"globals",     ev_cand,     ph_globals,     "sandbox.setup_ms"},
	{"launches",    ev_cand,     ph_launches,    NULL},                 /* LAUNCH_ERROR, PLAN_ERROR */
	{"inputs",      ev_cand,     ph_inputs,      "sandbox.inputs_ms"},  /* NO_TORCH */
	{"inputs",      ev_refonly,  ph_inputs,      "sandbox.load_ms"},
	{"samples",     ev_refonly,  ph_samples,     "sandbox.inputs_ms"},
	{"variation",   ev_refonly,  ph_variation,   NULL},
	{"trials",      ev_cand,     ph_trials,      NULL},                 /* WRONG_RESULT, LAUNCH_ERROR, RUNTIME_FAULT */
	{"determinism", ev_cand,     ph_determinism, "sandbox.verify_ms"},  /* WRONG_RESULT */
	{"timing",      ev_cand,     ph_timing,      "sandbox.time_ms"},    /* WRONG_RESULT: every timed run checked */
	{"checks",      ev_cand,     ph_checks,      NULL},                 /* OK, or WRONG_RESULT (precision, speed of light) */
	{"profile",     ev_profiled, ph_profile,     "sandbox.profile_ms"},
	{"baselines",   ev_always,   ph_baselines,   "sandbox.baseline_ms"},/* a candidate stays OK without one */
	{"result",      ev_cand,     ph_result,      NULL},                 /* OK: speedups */
	{"summary",     ev_refonly,  ph_summary,     NULL},                 /* OK: baseline, variation */
};
/* clang-format on */

/*
 * Runs the protocol's phases in order until one stops it (or a fault
 * does); what the result says then is the evaluation's verdict.
 */
static void
ev_run_protocol(ev *e)
{
	/* What an evaluation that stopped early left the reference process
	 * doing (its prefetched work) is over before this one uses the GPU. */
	if (e->g->tr != NULL)
		sbx_torchref_drop(e->g->tr);
	for (size_t i = 0; i < sizeof(ev_protocol) / sizeof(ev_protocol[0]);
	     i++) {
		const ev_phase *ph = &ev_protocol[i];
		int rv;

		uint64_t t0 = kc_mono_ns();

		if (!ph->applies(e))
			continue;
		rv = ph->run(e);
		ev_trace(e, t0, "phase %s", ph->name);
		if (rv == 0 && ph->metric != NULL)
			ev_clock(e, ph->metric);
		if (rv != 0 || *e->fatal)
			return;
	}
}

/* ------------------------------------------------------------- helpers */

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

/* Records how long the phases since the last metric took (e->tp). */
void
ev_clock(ev *e, const char *name)
{
	uint64_t now = kc_mono_ns();

	sbx_result_add_metric(e->res, name, (double)(now - e->tp) / 1e6, "ms");
	e->tp = now;
}

/*
 * A debug line (KCLAW_LOG=debug): what just ended, how long it took since
 * `since` and when, from the evaluation's start, to the microsecond: an
 * evaluation's wall time step by step, the gaps between the steps being
 * the sandbox's own time.
 */
void
ev_trace(const ev *e, uint64_t since, const char *fmt, ...)
{
	uint64_t now = kc_mono_ns();
	char what[160];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	KC_DEBUG("eval +%.3f ms: %s took %.3f ms", (double)(now - e->t0) / 1e6,
	    what, (double)(now - since) / 1e6);
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

/* --------------------------------------------------------- conditions */

static int
ev_cand(const ev *e)
{
	return !e->refonly;
}

static int
ev_refonly(const ev *e)
{
	return e->refonly;
}

static int
ev_always(const ev *e)
{
	(void)e;
	return 1;
}

/* No GPU, or only a compile asked for: the candidate cannot run. */
static int
ev_offline(const ev *e)
{
	const Kclaw__EvalOptions *o = e->req->options;

	return !e->refonly && (!e->g->have_device || (o && o->compile_only));
}

/* A candidate that will run (not compile-only, a device there). */
static int
ev_online(const ev *e)
{
	return !e->refonly && !ev_offline(e);
}

static int
ev_profiled(const ev *e)
{
	return !e->refonly && e->req->options && e->req->options->profile;
}

/* ------------------------------------------------------------- phases */

/* The candidate's source is there, and an architecture to compile for:
 * the request's, the sandbox's override, or the GPU's. */
static int
ph_target(ev *e)
{
	const Kclaw__EvalOptions *o = e->req->options;
	const Kclaw__Candidate *cand = e->req->candidate;
	ev_gpu *g = e->g;

	if (cand == NULL || cand->source == NULL || cand->source[0] == '\0') {
		sbx_result_status(e->res, KCLAW__EVAL_STATUS__COMPILE_ERROR,
		    "the request has no candidate source (kernel.cu)");
		return -1;
	}
	sbx_result_set(&e->res->candidate_id, "%s", cand->id ? cand->id : "");
	e->arch = o != NULL && o->arch != NULL && o->arch[0] ? o->arch
	    : g->arch_override[0]                            ? g->arch_override
	    : g->have_device                                 ? g->arch
	                                                     : NULL;
	if (g->have_device)
		sbx_result_set(&e->res->device_name, "%s", g->name);
	if (e->arch == NULL) {
		sbx_result_status(e->res, KCLAW__EVAL_STATUS__NO_DEVICE,
		    "%s; to compile without a GPU pass an architecture "
		    "(--compile-only --arch sm_90)",
		    g->nodev_reason);
		return -1;
	}
	sbx_result_set(&e->res->arch, "%s", e->arch);
	return 0;
}

/* What the task's reference kind can start before the candidate is
 * compiled (its prefetch), so that it runs beside NVRTC. */
static int
ph_prefetch(ev *e)
{
	const Kclaw__Reference *ref = e->task->reference;

	for (size_t i = 0; ref != NULL && i < e->nkinds; i++)
		if (e->kinds[i]->usable(ref)) {
			if (e->kinds[i]->prefetch != NULL) {
				ev_counts(e);
				e->compile_cached = sbx_compile_is_cached(
				    e->req->candidate->source, e->arch,
				    e->g->cache_dir[0] ? e->g->cache_dir
				                       : NULL);
				e->kinds[i]->prefetch(e);
				e->prefetched = e->kinds[i];
			}
			break;
		}
	return 0;
}

static int
ph_compile(ev *e)
{
	return ev_prog_compile(e, &e->cand, e->req->candidate->source, e->arch);
}

/* Without running: the plan checked against the compiled signatures. */
static int
ph_offline(ev *e)
{
	Kclaw__EvalResult *res = e->res;
	const Kclaw__EvalOptions *o = e->req->options;

	ev_add_resources(e, &e->cand, 0);
	if (ev_prog_plan(e, &e->cand, e->req->candidate->plan_json, 0) != 0)
		return -1;
	if (!e->g->have_device && !(o && o->compile_only)) {
		sbx_result_status(res, KCLAW__EVAL_STATUS__NO_DEVICE,
		    "compiled for %s and the plan checks, but it "
		    "cannot run: %s",
		    e->arch, e->g->nodev_reason);
		return -1;
	}
	sbx_result_status(res, KCLAW__EVAL_STATUS__OK,
	    "compiled for %s in %.0f ms%s; the plan checks against "
	    "the kernels' signatures (not run: compile-only)",
	    e->arch, res->compile_ms, res->compile_cached ? " (cached)" : "");
	return 1;
}

/* The prefetched work done (the kind's settle: the GPU is the sandbox's
 * from here), the module loaded; the evaluation's clock starts. */
static int
ph_load(ev *e)
{
	if (e->prefetched != NULL && e->prefetched->settle != NULL)
		e->prefetched->settle(e);
	e->g->cu.cuCtxSetCurrent(e->g->ctx);
	e->tp = kc_mono_ns();
	return ev_prog_load(e, &e->cand);
}

/* The plan checked against the loaded kernels; their resources kept. */
static int
ph_plan(ev *e)
{
	int rv = ev_prog_plan(e, &e->cand, e->req->candidate->plan_json, 1);

	ev_add_resources(e, &e->cand, 1);
	return rv;
}

/* A reference-only evaluation runs the reference: a GPU is needed. */
static int
ph_device(ev *e)
{
	ev_gpu *g = e->g;

	if (!g->have_device) {
		sbx_result_status(e->res, KCLAW__EVAL_STATUS__NO_DEVICE,
		    "%s; a reference-only evaluation runs the reference",
		    g->nodev_reason);
		return -1;
	}
	sbx_result_set(&e->res->device_name, "%s", g->name);
	sbx_result_set(&e->res->arch, "%s", g->arch);
	g->cu.cuCtxSetCurrent(g->ctx);
	e->tp = kc_mono_ns();
	return 0;
}

/* The counts asked for (trials, warm-up runs, timed runs: the most, where
 * adaptive), before the kind's setup raises any. */
void
ev_counts(ev *e)
{
	const Kclaw__EvalOptions *o = e->req->options;

	e->trials = o && o->trials ? o->trials
	    : e->task->trials      ? e->task->trials
	                           : EV_DEFAULT_TRIALS;
	e->warmup = o && o->warmup ? o->warmup : EV_DEFAULT_WARMUP;
	e->adaptive = !(o && o->iterations);
	e->iters = e->adaptive ? EV_ADAPT_MAX : o->iterations;
	if (e->trials > EV_MAX_TRIALS)
		e->trials = EV_MAX_TRIALS;
	if (e->iters > EV_MAX_ITERS)
		e->iters = EV_MAX_ITERS;
}

/* The counts asked for, the reference kind that matches the task, and
 * what that kind must build (its setup); the kind's caveat, if any. */
static int
ph_reference(ev *e)
{
	ev_counts(e);
	for (size_t i = 0;
	     e->task->reference != NULL && e->ops == NULL && i < e->nkinds; i++)
		if (e->kinds[i]->usable(e->task->reference))
			e->ops = e->kinds[i];
	if (e->ops == NULL) {
		sbx_result_status(e->res, EV_INTERNAL,
		    "the task has no usable reference (a `cuda` or `torch` "
		    "reference, or `tensors` sets); nothing to verify "
		    "against");
		return -1;
	}
	if (e->ops->setup(e) != 0)
		return -1;
	if (e->trials > EV_MAX_TRIALS)
		e->trials = EV_MAX_TRIALS;
	if (e->ops->caveat != NULL)
		ev_warn(e, "%s", e->ops->caveat);
	return 0;
}

static int
ph_globals(ev *e)
{
	return ev_prog_globals(e, &e->cand);
}

/* Each step's kernel resolved, the plan's scratch allocated. */
static int
ph_launches(ev *e)
{
	return ev_prog_prepare(e, &e->cand);
}

/* The tensors' buffers, then every trial's inputs and expected outputs
 * (the reference kind's prepare). */
static int
ph_inputs(ev *e)
{
	return ev_alloc_tensors(e) != 0 || e->ops->prepare(e) != 0 ? -1 : 0;
}

/* Reference only: two input sets of one distribution, where the kind's
 * prepare did not make them. */
static int
ph_samples(ev *e)
{
	return e->ops->sample_inputs != NULL ? e->ops->sample_inputs(e) : 0;
}

/* Reference only: how much the outputs vary with the inputs, degenerate
 * outputs named. */
static int
ph_variation(ev *e)
{
	double var = -1;

	for (size_t t = 0; t < e->nt && t < EV_MAX_TENSORS; t++)
		if (e->var_known[t] && (var < 0 || e->var_rel[t] < var))
			var = e->var_rel[t];
	e->res->output_variation = var > 0 ? var : 0;
	ev_note_degenerate(e);
	sbx_result_status(e->res, KCLAW__EVAL_STATUS__OK, "reference only");
	return 0;
}

/*
 * Verification: every trial from a fresh state on fresh inputs of its own
 * distribution, inputs hashed before and after, outputs compared; then the
 * variation rule over every output. Trial 0's outputs are kept (copied
 * aside, or hashed where too large) for the determinism run.
 */
static int
ph_trials(ev *e)
{
	uint64_t before[EV_MAX_TENSORS], after[EV_MAX_TENSORS];
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
		if (k == 0 && ev_hash_tensors(e, e->first_out, 1) != 0)
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
	return 0;
}

/*
 * Trial 0 again from a fresh state: its outputs must equal the first
 * run's bit for bit (or the result says by how much they differ) and
 * still be right.
 */
static int
ph_determinism(ev *e)
{
	uint64_t again[EV_MAX_TENSORS];

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
			if (e->first_out[t] == again[t])
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

/* Timed runs of the candidate, every one checked (ev_time). */
static int
ph_timing(ev *e)
{
	return ev_time(e, &e->cand, 1, &e->res->timing);
}

/* The figures an OK result carries, precision, the speed of light. */
static int
ph_checks(ev *e)
{
	return ev_judge(e);
}

/* Under CUPTI on request; what it finds does not change the verdict,
 * unless the candidate faults (the driver stops on *fatal). */
static int
ph_profile(ev *e)
{
	ev_profile(e);
	return 0;
}

/*
 * The reference kind's baselines, timed last. A candidate stands without
 * them (OK, with why they are missing); a reference-only evaluation does
 * not.
 */
static int
ph_baselines(ev *e)
{
	Kclaw__EvalResult *res = e->res;

	if (res->status != KCLAW__EVAL_STATUS__OK)
		return 1;
	if (e->ops->baseline(e) == 0)
		return 0;
	if (!e->refonly && !*e->fatal)
		sbx_result_status(res, KCLAW__EVAL_STATUS__OK,
		    "correct; the reference could not be timed: %s",
		    res->message);
	return -1;
}

/* The speedups over the baselines, in the verdict's message. */
static int
ph_result(ev *e)
{
	Kclaw__EvalResult *res = e->res;

	if (res->torch_compile_ms > 0 && res->timing->median_ms > 0)
		res->compile_speedup =
		    res->torch_compile_ms / res->timing->median_ms;
	if (res->reference_ms > 0 && res->timing->median_ms > 0) {
		res->speedup = res->reference_ms / res->timing->median_ms;
		sbx_result_status(res, KCLAW__EVAL_STATUS__OK,
		    "correct on %u trials and every one of %u timed runs; "
		    "median %.4f ms (spread %.4f ms), %.2fx the reference "
		    "(%.4f ms)",
		    e->trials, res->timing->iterations, res->timing->median_ms,
		    res->timing->stddev_ms, res->speedup, res->reference_ms);
		if (res->degenerate_output)
			sbx_result_status(res, KCLAW__EVAL_STATUS__OK,
			    "%s; degenerate output: exact on outputs that do "
			    "not vary with the inputs, below the speed of "
			    "light",
			    res->message);
	}
	return 0;
}

/* Reference only: the baselines and the outputs' variation. */
static int
ph_summary(ev *e)
{
	Kclaw__EvalResult *res = e->res;

	sbx_result_status(res, KCLAW__EVAL_STATUS__OK,
	    "reference only (%s): baseline %.4f ms%s%.4f%s; outputs change by "
	    "%.3g (relative) between two input sets of one distribution%s",
	    e->ops->name, res->reference_ms,
	    res->torch_compile_ms > 0 ? ", torch.compile " : "",
	    res->torch_compile_ms > 0 ? res->torch_compile_ms : 0.0,
	    res->torch_compile_ms > 0 ? " ms" : "", res->output_variation,
	    res->n_degenerate ? "; DEGENERATE (see warnings)" : "");
	return 0;
}

/* ---------------------------------------------------------- the backend */

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

void
ev_evaluate(ev_gpu *g, const ev_ref_ops *const *kinds, size_t nkinds,
    const Kclaw__EvalRequest *req, Kclaw__EvalResult *res, int *fatal)
{
	uint64_t t0 = kc_mono_ns();
	Kclaw__TaskSpec empty_task = KCLAW__TASK_SPEC__INIT;
	ev e = {.g = g,
	    .req = req,
	    .task = req->task ? req->task : &empty_task,
	    .res = res,
	    .fatal = fatal,
	    .t0 = t0,
	    .kinds = kinds,
	    .nkinds = nkinds,
	    .refonly = req->options != NULL && req->options->reference_only};

	e.cand.what = "candidate";
	ev_gpu_measure(g, res);
	e.salt = ev_random();
	ev_run_protocol(&e);
	ev_free(&e);
	if (e.tp != 0)
		ev_clock(&e, "sandbox.cleanup_ms");
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

/* The reference kinds, in the order a task's reference is matched. */
static const ev_ref_ops *const ev_ref_kinds[] = {
    &ev_cuda_ops, &ev_torch_ops, &ev_tensors_ops};

static void
ev_gpu_evaluate(void *state, const Kclaw__EvalRequest *req,
    Kclaw__EvalResult *res, int *fatal)
{
	ev_evaluate(state, ev_ref_kinds,
	    sizeof(ev_ref_kinds) / sizeof(ev_ref_kinds[0]), req, res, fatal);
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
    .measure = ev_gpu_measure,
    .fini = ev_gpu_fini,
};
