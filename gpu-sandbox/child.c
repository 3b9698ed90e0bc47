/*
 * child.c - the sandbox child's loop: announce the device, then answer each
 * request through the backend; exit after a fault.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kc_err.h"
#include "kc_log.h"
#include "kc_util.h"
#include "sandbox.h"
#include "tunables.h"

/* Exit code of a child that reported a fault (its context is lost). */
#define CHILD_EXIT_FAULT 3

/*
 * Before a sweep's configurations are evaluated one by one, their sources
 * compiled in parallel into the compile cache (the backend's precompile),
 * so that each evaluation finds its compile there; what does not compile
 * is reported by its own evaluation. Off with
 * KCLAW_SANDBOX_PARALLEL_COMPILE=0. Returns how many compiled, or -1 when
 * nothing was done.
 */
static int
child_precompile(const sbx_backend *be, void *state,
    const Kclaw__EvalRequest *req, const kc_tune_config *cfg, size_t n,
    unsigned *threads)
{
	const char *env = getenv("KCLAW_SANDBOX_PARALLEL_COMPILE");
	const char **sources;
	int rv;

	*threads = 0;
	if (be->precompile == NULL || n < 2 ||
	    (env != NULL && strcmp(env, "0") == 0))
		return -1;
	if ((sources = malloc(n * sizeof(*sources))) == NULL)
		return -1;
	for (size_t i = 0; i < n; i++)
		sources[i] = cfg[i].source;
	rv = be->precompile(state, req, sources, n, threads);
	free(sources);
	return rv;
}

/*
 * A candidate with tunables (tunables.h): every configuration evaluated in
 * turn, the fastest correct one's result returned with the whole sweep in
 * res->tuning. A configuration that loses the context (a fault) ends the
 * sweep with its result. Compile-only: every configuration must compile
 * and plan-check. Returns 0 when it handled the request (res filled), 1
 * when the candidate declares no tunables.
 */
static int
child_tune(const sbx_backend *be, void *state, const Kclaw__EvalRequest *req,
    Kclaw__EvalResult **res, int *fatal)
{
	kc_tune_config *cfg;
	size_t n, best = (size_t)-1;
	Kclaw__EvalResult **each;
	Kclaw__EvalRequest r = *req;
	Kclaw__Candidate c;
	int compile_only = req->options && req->options->compile_only;
	size_t done = 0;
	unsigned threads = 0;
	uint64_t t0;
	double pre_ms;
	int rv, pre;

	if (req->candidate == NULL)
		return 1;
	/* A tunable plan that does not expand is the candidate's plan error
	 * (out of memory is the sandbox's). */
	if ((rv = kc_tune_expand(req->candidate->source,
	         req->candidate->plan_json, &cfg, &n)) != 0) {
		sbx_result_status(*res,
		    rv == KC_EINVAL ? KCLAW__EVAL_STATUS__PLAN_ERROR
		                    : KCLAW__EVAL_STATUS__INTERNAL_ERROR,
		    "%s", kc_lasterr());
		return 0;
	}
	if (n == 0)
		return 1;
	if ((each = calloc(n, sizeof(*each))) == NULL) {
		kc_tune_free(cfg, n);
		sbx_result_status(
		    *res, KCLAW__EVAL_STATUS__INTERNAL_ERROR, "out of memory");
		return 0;
	}
	t0 = kc_mono_ns();
	pre = child_precompile(be, state, req, cfg, n, &threads);
	pre_ms = (double)(kc_mono_ns() - t0) / 1e6;
	for (size_t i = 0; i < n && !*fatal; i++, done++) {
		c = *req->candidate;
		c.source = cfg[i].source;
		c.plan_json = cfg[i].plan_json;
		r.candidate = &c;
		if ((each[i] = sbx_result_new(req->job_id)) == NULL)
			break;
		be->evaluate(state, &r, each[i], fatal);
		if (each[i]->status != KCLAW__EVAL_STATUS__OK)
			continue;
		if (compile_only) {
			if (best == (size_t)-1)
				best = i;
			continue;
		}
		if (each[i]->timing != NULL &&
		    (best == (size_t)-1 ||
		        each[i]->timing->median_ms <
		            each[best]->timing->median_ms))
			best = i;
	}
	/* Compile-only: the first failing configuration is the answer. */
	for (size_t i = 0; compile_only && i < done; i++)
		if (each[i] != NULL &&
		    each[i]->status != KCLAW__EVAL_STATUS__OK) {
			best = i;
			break;
		}
	if (best == (size_t)-1)
		best = done ? done - 1 : 0;
	if (each[best] != NULL) {
		Kclaw__EvalResult *out = each[best];
		each[best] = NULL;
		kclaw__eval_result__free_unpacked(*res, NULL);
		*res = out;
	}
	(*res)->tuning = calloc(done ? done : 1, sizeof(*(*res)->tuning));
	for (size_t i = 0; (*res)->tuning != NULL && i < done; i++) {
		Kclaw__TuningPoint *tp = malloc(sizeof(*tp));
		const Kclaw__EvalResult *e = i == best ? *res : each[i];
		if (tp == NULL || e == NULL) {
			free(tp);
			continue;
		}
		kclaw__tuning_point__init(tp);
		tp->config = strdup(cfg[i].config);
		tp->status = e->status;
		tp->median_ms = e->timing ? e->timing->median_ms : 0;
		tp->message = strdup(e->message ? e->message : "");
		tp->compile_cached = e->compile_cached;
		(*res)->tuning[(*res)->n_tuning++] = tp;
	}
	if (pre >= 0) {
		sbx_result_add_metric(
		    *res, "sandbox.precompiled", pre, "configurations");
		sbx_result_add_metric(
		    *res, "sandbox.precompile_threads", threads, "threads");
		sbx_result_add_metric(
		    *res, "sandbox.precompile_ms", pre_ms, "ms");
	}
	sbx_result_set(&(*res)->tuned_config, "%s", cfg[best].config);
	sbx_result_set(&(*res)->tuned_source, "%s", cfg[best].source);
	sbx_result_set(&(*res)->tuned_plan, "%s", cfg[best].plan_json);
	if ((*res)->status == KCLAW__EVAL_STATUS__OK && !compile_only)
		sbx_result_status(*res, KCLAW__EVAL_STATUS__OK,
		    "%s; tuned over %zu configurations, the fastest %s (the "
		    "default %s: %.4f ms)",
		    (*res)->message ? (*res)->message : "", done,
		    cfg[best].config, cfg[0].config,
		    (*res)->tuning && (*res)->n_tuning
		        ? (*res)->tuning[0]->median_ms
		        : 0.0);
	for (size_t i = 0; i < n; i++)
		if (each[i] != NULL)
			kclaw__eval_result__free_unpacked(each[i], NULL);
	free(each);
	kc_tune_free(cfg, n);
	return 0;
}

int
sbx_child_main(const sbx_backend *be, int argc, char **argv)
{
	sbx_child_config cfg = {.device = 0};
	Kclaw__EvalResult *ready;
	void *state = NULL;
	int rv, code = 0;

	for (int i = 1; i < argc; i++) {
		int value = i + 1 < argc;
		if (strcmp(argv[i], "--alone") == 0)
			cfg.alone = 1;
		else if (value && strcmp(argv[i], "--device") == 0)
			cfg.device = atoi(argv[++i]);
		else if (value && strcmp(argv[i], "--cache") == 0)
			cfg.cache_dir = argv[++i];
		else if (value && strcmp(argv[i], "--arch") == 0)
			cfg.arch = argv[++i];
	}
	/* The parent owns the lifecycle: a dead parent closes the pipe and
	 * this loop ends; SIGPIPE must not kill it mid-answer. */
	signal(SIGPIPE, SIG_IGN);
	if ((ready = sbx_result_new("")) == NULL)
		return 1;
	rv = be->init(&state, &cfg, ready);
	if (rv == 0)
		ready->status = KCLAW__EVAL_STATUS__OK;
	else
		sbx_result_status(
		    ready, KCLAW__EVAL_STATUS__NO_DEVICE, "%s", kc_lasterr());
	rv = sbx_frame_write(SBX_CHILD_OUT_FD, &ready->base);
	kclaw__eval_result__free_unpacked(ready, NULL);
	/* A parent that died while this child started: leave through fini
	 * all the same (LeakSanitizer reported the backend's state). */
	if (rv != 0)
		code = 1;
	while (rv == 0) {
		Kclaw__EvalRequest *req;
		Kclaw__EvalResult *res;
		void *buf;
		size_t len;
		int fatal = 0;

		rv = sbx_frame_read(SBX_CHILD_IN_FD, -1, &buf, &len);
		if (rv == KC_ECLOSED)
			break;
		if (rv != 0) {
			KC_ERROR("reading a request: %s", kc_lasterr());
			code = 1;
			break;
		}
		req = kclaw__eval_request__unpack(NULL, len, buf);
		free(buf);
		if (req == NULL) {
			KC_ERROR("a request from the parent did not decode");
			code = 1;
			break;
		}
		if ((res = sbx_result_new(req->job_id)) == NULL) {
			kclaw__eval_request__free_unpacked(req, NULL);
			code = 1;
			break;
		}
		if (req->measure_device) {
			if (be->measure != NULL)
				be->measure(state, res);
			sbx_result_status(
			    res, KCLAW__EVAL_STATUS__OK, "measured");
		} else if (child_tune(be, state, req, &res, &fatal) != 0) {
			be->evaluate(state, req, res, &fatal);
		}
		kclaw__eval_request__free_unpacked(req, NULL);
		rv = sbx_frame_write(SBX_CHILD_OUT_FD, &res->base);
		kclaw__eval_result__free_unpacked(res, NULL);
		if (fatal) {
			/* The context is poisoned for good: leave without
			 * touching CUDA again (no fini, no unload). */
			_exit(CHILD_EXIT_FAULT);
		}
		if (rv != 0)
			break;
	}
	if (be->fini != NULL)
		be->fini(state);
	return code;
}
