/*
 * programs.c - one program (the candidate or the `cuda` reference) from
 * source to launches: NVRTC compile, module load, plan check against the
 * loaded kernels, the kernels' resources for the result, module variables
 * restored and buffers poisoned before every run, the plan's steps
 * enqueued.
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

void
ev_add_resources(ev *e, const ev_prog *p, int loaded)
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

int
ev_prog_compile(ev *e, ev_prog *p, const char *source, const char *arch)
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
int
ev_prog_plan(ev *e, ev_prog *p, const char *plan_json, int loaded)
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

int
ev_prog_load(ev *e, ev_prog *p)
{
	Kclaw__EvalStatus bad =
	    p == &e->cand ? KCLAW__EVAL_STATUS__LAUNCH_ERROR : EV_INTERNAL;
	ev_gpu *g = e->g;
	char what[128];

	snprintf(what, sizeof(what), "loading the %s's module", p->what);
	EV_CU(e, g->cu.cuModuleLoadData(&p->mod, p->comp.cubin), bad, what);
	return 0;
}

/* Resolves each step's function and allocates the plan's scratch. */
int
ev_prog_prepare(ev *e, ev_prog *p)
{
	Kclaw__EvalStatus bad =
	    p == &e->cand ? KCLAW__EVAL_STATUS__LAUNCH_ERROR : EV_INTERNAL;
	ev_gpu *g = e->g;
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

/*
 * The candidate's module-scope variables (`__device__` arrays, static
 * locals), which would otherwise carry state from one run into the next
 * (a memo of outputs by input, a run counter): each is found by its PTX
 * declaration, and its loaded contents are kept in host memory no kernel
 * can reach (zero-filled ones need no copy), to be restored before every
 * run.
 */
int
ev_prog_globals(ev *e, ev_prog *p)
{
	sbx_ptx_global *v = NULL;
	size_t n = 0;
	ev_gpu *g = e->g;

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
int
ev_fresh_state(ev *e, const ev_prog *p)
{
	ev_gpu *g = e->g;

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

void
ev_prog_free(ev *e, ev_prog *p)
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
ev_prog_buffer(const ev *e, const ev_prog *p, int b)
{
	if ((size_t)b < p->plan->ntensors && p->outs != NULL &&
	    (size_t)b < EV_MAX_TENSORS && p->outs[b] != 0)
		return p->outs[b];
	if ((size_t)b < p->plan->ntensors)
		return e->tdev[b];
	return p->scratch[(size_t)b - p->plan->ntensors];
}

/* Enqueues every step of p on the stream. Launch errors are the plan's. */
int
ev_prog_enqueue(ev *e, const ev_prog *p)
{
	Kclaw__EvalStatus bad =
	    p == &e->cand ? KCLAW__EVAL_STATUS__LAUNCH_ERROR : EV_INTERNAL;
	ev_gpu *g = e->g;

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
			if (sbx_lt_matmul(g->lt, m, ev_prog_buffer(e, p, m->a),
			        ev_prog_buffer(e, p, m->b),
			        m->c >= 0 ? ev_prog_buffer(e, p, m->c) : 0,
			        ev_prog_buffer(e, p, m->d),
			        m->bias >= 0 ? ev_prog_buffer(e, p, m->bias)
			                     : 0,
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
				ptrs[a] = ev_prog_buffer(e, p, arg->buffer);
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
int
ev_prog_run_sync(ev *e, const ev_prog *p)
{
	char what[128];
	uint64_t t0 = kc_mono_ns();

	if (ev_prog_enqueue(e, p) != 0)
		return -1;
	snprintf(what, sizeof(what), "running the %s", p->what);
	EV_CU(e, e->g->cu.cuStreamSynchronize(e->g->stream),
	    p == &e->cand ? KCLAW__EVAL_STATUS__LAUNCH_ERROR : EV_INTERNAL,
	    what);
	ev_trace(e, t0, "%s", what);
	return 0;
}
