/*
 * devmem.c - the tensors' device memory: the buffers the plans see, the
 * outputs set aside for the determinism check, the poison, a pinned
 * staging buffer, and inputs generated on the device (the sandbox's own
 * generator kernels, so a 64M-element task costs milliseconds).
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

/* Distribution codes of the generator kernels (helpers_cu.c). */
enum {
	GEN_NORMAL = 1,
	GEN_UNIFORM = 2,
	GEN_STUDENT_T = 3,
	GEN_ZEROS = 4,
	GEN_ONES = 5,
	GEN_ARANGE = 6,
	GEN_RANDINT = 7,
	GEN_SPARSE = 8, /* normal, three quarters of it zeros */
	GEN_SKEWED = 9  /* |normal|, a tenth of the signs flipped */
};

unsigned
ev_variant(unsigned trial)
{
	return trial < 2 ? 0 : (trial - 1) % EV_VARIANTS;
}

static int
ev_is_float(Kclaw__DType d)
{
	return d == KCLAW__DTYPE__F32 || d == KCLAW__DTYPE__F16 ||
	    d == KCLAW__DTYPE__BF16 || d == KCLAW__DTYPE__F64;
}

/*
 * Generates tensor t's contents for a trial into dst. Floating inputs get
 * one of EV_VARIANTS distributions by trial: the task's own, then
 * heavy-tailed, uniform, shifted, scaled, sparse and sign-skewed versions
 * of it, so that an output that only looks right for one distribution (a
 * tabulated statistic, a near-constant loss) is caught; uniform inputs
 * keep their range (a candidate may rely on it, e.g. for log) but move
 * within it. Parameters are the same in every trial. The evaluation's
 * random salt is part of every seed: a candidate that regenerates the
 * inputs from the task's seed instead of reading them
 * (tests/gpu/adversarial, fixed_seed_replica) gets them wrong.
 */
int
ev_generate(ev *e, size_t t, unsigned trial, CUdeviceptr dst)
{
	const Kclaw__TensorSpec *ts = e->task->tensors[t];
	const Kclaw__InitSpec *in = ts->init;
	int dist = GEN_NORMAL;
	double a = 0, b = 1, c = 3;
	uint64_t seed, n = e->tcount[t];
	void *params[7];
	unsigned grid;
	ev_gpu *g = e->g;

	if (in != NULL) {
		switch (in->dist) {
		case KCLAW__DISTRIBUTION__NORMAL:
			dist = GEN_NORMAL;
			a = in->mean;
			b = in->scale != 0 ? in->scale : 1;
			break;
		case KCLAW__DISTRIBUTION__UNIFORM:
			dist = GEN_UNIFORM;
			a = in->low;
			b = in->high;
			break;
		case KCLAW__DISTRIBUTION__HEAVY_TAILED:
			dist = GEN_STUDENT_T;
			a = in->mean;
			b = in->scale != 0 ? in->scale : 1;
			c = in->dof > 0 ? in->dof : 3;
			break;
		case KCLAW__DISTRIBUTION__ZEROS: dist = GEN_ZEROS; break;
		case KCLAW__DISTRIBUTION__ONES: dist = GEN_ONES; break;
		case KCLAW__DISTRIBUTION__ARANGE: dist = GEN_ARANGE; break;
		case KCLAW__DISTRIBUTION__RANDINT:
			dist = GEN_RANDINT;
			a = in->low;
			b = in->high;
			break;
		default: break;
		}
	}
	if (ts->kind == KCLAW__TENSOR_KIND__INPUT && ev_is_float(ts->dtype)) {
		unsigned v = ev_variant(trial);
		if (dist == GEN_NORMAL || dist == GEN_STUDENT_T) {
			switch (v) {
			case 1:
				dist = dist == GEN_NORMAL ? GEN_STUDENT_T
				                          : GEN_NORMAL;
				break;
			case 2:
				dist = GEN_UNIFORM;
				a = a - 2 * b;
				b = a + 4 * b;
				break;
			case 3: a = a + b; break;
			case 4: b = 4 * b; break;
			case 5: dist = GEN_SPARSE; break;
			case 6: dist = GEN_SKEWED; break;
			default: break;
			}
		} else if (dist == GEN_UNIFORM && v > 0) {
			double q = (b - a) / 4;
			if (v % 2 == 1)
				b = a + q;
			else if (v % 3 == 0)
				a = b - q;
		}
	}
	if (ts->kind == KCLAW__TENSOR_KIND__PARAMETER)
		trial = 0;
	seed = (e->task->seed ^ e->salt) * 0x9e3779b97f4a7c15ull ^
	    ((uint64_t)trial << 32) ^ (uint64_t)(t + 1) * 0xd1b54a32d192ed03ull;
	params[0] = &dst;
	params[1] = &n;
	params[2] = &seed;
	params[3] = &dist;
	params[4] = &a;
	params[5] = &b;
	params[6] = &c;
	grid = (unsigned)((n + 255) / 256);
	if (grid > (unsigned)g->sms * 16)
		grid = (unsigned)g->sms * 16;
	if (grid == 0)
		grid = 1;
	EV_CU(e,
	    g->cu.cuLaunchKernel(g->gen[ts->dtype], grid, 1, 1, 256, 1, 1, 0,
	        g->stream, params, NULL),
	    EV_INTERNAL, "generating inputs");
	return 0;
}

int
ev_poison(ev *e, const ev_prog *p)
{
	ev_gpu *g = e->g;

	for (size_t t = 0; t < e->nt; t++)
		if (e->task->tensors[t]->kind == KCLAW__TENSOR_KIND__OUTPUT)
			EV_CU(e,
			    g->cu.cuMemsetD8Async(p != NULL &&
			                p->outs != NULL && t < EV_MAX_TENSORS &&
			                p->outs[t]
			            ? p->outs[t]
			            : e->tdev[t],
			        0xff, e->tbytes[t], g->stream),
			    EV_INTERNAL, "poisoning outputs");
	for (size_t i = 0; p != NULL && i < p->nscratch; i++)
		EV_CU(e,
		    g->cu.cuMemsetD8Async(p->scratch[i], 0xff,
		        p->plan->buffers[p->plan->ntensors + i].bytes,
		        g->stream),
		    EV_INTERNAL, "poisoning scratch");
	return 0;
}

int
ev_pinned(ev *e, size_t bytes)
{
	ev_gpu *g = e->g;

	if (g->pinned_bytes >= bytes)
		return 0;
	if (g->pinned)
		g->cu.cuMemFreeHost(g->pinned);
	g->pinned = NULL;
	g->pinned_bytes = 0;
	EV_CU(e, g->cu.cuMemAllocHost(&g->pinned, bytes), EV_INTERNAL,
	    "allocating a host staging buffer");
	g->pinned_bytes = bytes;
	return 0;
}

int
ev_alloc_tensors(ev *e)
{
	ev_gpu *g = e->g;
	char what[256];

	e->nt = e->task->n_tensors;
	if (e->nt > EV_MAX_TENSORS) {
		sbx_result_status(e->res, KCLAW__EVAL_STATUS__PLAN_ERROR,
		    "the task has %zu tensors; the sandbox handles %d", e->nt,
		    EV_MAX_TENSORS);
		return -1;
	}
	e->tdev = calloc(e->nt + 1, sizeof(*e->tdev));
	e->tbytes = calloc(e->nt + 1, sizeof(*e->tbytes));
	e->tcount = calloc(e->nt + 1, sizeof(*e->tcount));
	if (e->tdev == NULL || e->tbytes == NULL || e->tcount == NULL) {
		sbx_result_status(e->res, EV_INTERNAL, "out of memory");
		return -1;
	}
	for (size_t t = 0; t < e->nt; t++) {
		const Kclaw__TensorSpec *ts = e->task->tensors[t];
		size_t esz = kc_dtype_size(ts->dtype);
		if (esz == 0 || sbx_tensor_count(ts, &e->tcount[t]) != 0) {
			sbx_result_status(e->res, EV_INTERNAL,
			    "the task's tensor '%s' has no dtype or a bad "
			    "shape",
			    ts->name);
			return -1;
		}
		/* A scalar is passed by value (plan.c): no buffer. */
		if (ts->kind == KCLAW__TENSOR_KIND__SCALAR)
			e->tcount[t] = 0;
		e->tbytes[t] = e->tcount[t] * esz;
		snprintf(what, sizeof(what),
		    "allocating tensor '%s' (%zu bytes)", ts->name,
		    e->tbytes[t]);
		/* Where the reference's process owns the tensors (torch),
		 * they are mapped from its buffers by its prepare. */
		if (ts->kind != KCLAW__TENSOR_KIND__SCALAR &&
		    !e->ops->maps_tensors)
			EV_CU(e,
			    g->cu.cuMemAlloc(
			        &e->tdev[t], e->tbytes[t] ? e->tbytes[t] : 1),
			    EV_INTERNAL, what);
		/* Outputs larger than the kind's held_max are not copied
		 * aside: the determinism check compares hashes instead (a
		 * torch task's GPU then holds one output copy beyond the
		 * problem's own, the reference process's expected outputs). */
		if (ts->kind == KCLAW__TENSOR_KIND__OUTPUT &&
		    (e->ops->held_max == 0 || e->tbytes[t] <= e->ops->held_max))
			EV_CU(e,
			    g->cu.cuMemAlloc(
			        &e->held[t], e->tbytes[t] ? e->tbytes[t] : 1),
			    EV_INTERNAL, what);
	}
	return 0;
}
