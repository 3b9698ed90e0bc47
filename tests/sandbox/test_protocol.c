/*
 * test_protocol.c - the evaluation protocol (gpu-sandbox/eval.c's table of
 * phases) run without a GPU, through its two seams: the driver's function
 * table (sbx_cu) filled with a fake GPU whose memory is host memory and
 * whose kernels (the sandbox's helpers and this file's candidates) run on
 * the CPU at launch, and a scripted reference kind (an ev_ref_ops of this
 * file's own) that logs what the protocol asks of it. What it proves: the
 * order of the phases, the status each failure ends in, that every timed
 * run is checked, and that an evaluation gives back every buffer it took.
 */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval_int.h"
#include "kc_err.h"
#include "kc_test.h"

#define N 256

/* ------------------------------------------------------- the fake GPU */

typedef struct {
	const char *name;
	unsigned nparams;
	uint32_t sizes[8];
} fk_fn;

/* Every kernel the fake knows: the sandbox's helpers (device.c looks each
 * up at start-up) and the candidates below, all (const float *x, float *y,
 * int n). */
static fk_fn fk_fns[] = {
    {"kc_gen_f32", 7, {8, 8, 8, 4, 8, 8, 8}},
    {"kc_gen_f16", 7, {8, 8, 8, 4, 8, 8, 8}},
    {"kc_gen_bf16", 7, {8, 8, 8, 4, 8, 8, 8}},
    {"kc_gen_f64", 7, {8, 8, 8, 4, 8, 8, 8}},
    {"kc_gen_i32", 7, {8, 8, 8, 4, 8, 8, 8}},
    {"kc_gen_i64", 7, {8, 8, 8, 4, 8, 8, 8}},
    {"kc_gen_i8", 7, {8, 8, 8, 4, 8, 8, 8}},
    {"kc_gen_u8", 7, {8, 8, 8, 4, 8, 8, 8}},
    {"kc_hash", 3, {8, 8, 8}},
    {"kc_poison_count", 3, {8, 8, 8}},
    {"kc_compare", 8, {8, 8, 8, 4, 8, 8, 8, 8}},
    {"kc_flush_read", 3, {8, 8, 8}},
    {"kc_read_sweep", 3, {8, 8, 8}},
    {"kc_hold", 3, {8, 4, 8}},
    {"kc_probe", 1, {8}},
    {"kc_mark", 1, {8}},
    {"kc_mark_end", 1, {8}},
    {"scale2", 3, {8, 8, 4}},
    {"scale3", 3, {8, 8, 4}},
    {"bad_run", 3, {8, 8, 4}},
    {"writes_input", 3, {8, 8, 4}},
    {"faults", 3, {8, 8, 4}},
    {"zeros", 3, {8, 8, 4}},
    {"near_zeros", 3, {8, 8, 4}},
};

typedef struct {
	double t;
} fk_event;

#define FK_MAX_ALLOCS 4096
#define FK_MAX_EVENTS 8192

static struct {
	void *allocs[FK_MAX_ALLOCS];
	unsigned nallocs;
	fk_event events[FK_MAX_EVENTS];
	unsigned nevents;
	double now_ms;          /* the fake clock: candidate launches move it */
	unsigned cand_launches; /* launches of the test's kernels */
	unsigned bad_launch;    /* bad_run's wrong launch (1-based) */
	int faulted;            /* a launch faulted: the context is lost */
	char log[8192];         /* what the protocol did, in order */
} fk;

static void
fk_log(const char *fmt, ...)
{
	size_t len = strlen(fk.log);
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(fk.log + len, sizeof(fk.log) - len, fmt, ap);
	va_end(ap);
}

static void *
fk_ptr(CUdeviceptr p)
{
	return (void *)(uintptr_t)p;
}

static CUresult
fk_ok(void)
{
	return fk.faulted ? CUDA_ERROR_ILLEGAL_ADDRESS : CUDA_SUCCESS;
}

static CUresult CUDAAPI
fk_init(unsigned int flags)
{
	(void)flags;
	return CUDA_SUCCESS;
}

static CUresult CUDAAPI
fk_driver_version(int *v)
{
	*v = 12040;
	return CUDA_SUCCESS;
}

static CUresult CUDAAPI
fk_device_get(CUdevice *d, int i)
{
	*d = i;
	return CUDA_SUCCESS;
}

static CUresult CUDAAPI
fk_device_count(int *n)
{
	*n = 1;
	return CUDA_SUCCESS;
}

static CUresult CUDAAPI
fk_device_name(char *name, int len, CUdevice d)
{
	(void)d;
	snprintf(name, (size_t)len, "fake GPU");
	return CUDA_SUCCESS;
}

static CUresult CUDAAPI
fk_device_attr(int *v, CUdevice_attribute a, CUdevice d)
{
	(void)d;
	switch (a) {
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 9; break;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = 0; break;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
	case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: *v = 64; break;
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: *v = 0x7fffffff; break;
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: *v = 65535; break;
	case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
		*v = 227 * 1024;
		break;
	case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 2; break;
	case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
		*v = 2048;
		break;
	case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *v = 64 * 1024; break;
	case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: *v = 1000000; break;
	default: *v = 0; break;
	}
	return CUDA_SUCCESS;
}

static CUresult CUDAAPI
fk_ctx_retain(CUcontext *c, CUdevice d)
{
	(void)d;
	*c = (CUcontext)(uintptr_t)0x10;
	return CUDA_SUCCESS;
}

static CUresult CUDAAPI
fk_ctx_set(CUcontext c)
{
	(void)c;
	return CUDA_SUCCESS;
}

static CUresult CUDAAPI
fk_sync(void)
{
	return fk_ok();
}

static CUresult CUDAAPI
fk_module_load(CUmodule *m, const void *image)
{
	(void)image;
	*m = (CUmodule)(uintptr_t)0x20;
	fk_log("load ");
	return CUDA_SUCCESS;
}

static CUresult CUDAAPI
fk_module_unload(CUmodule m)
{
	(void)m;
	return CUDA_SUCCESS;
}

static CUresult CUDAAPI
fk_module_function(CUfunction *f, CUmodule m, const char *name)
{
	(void)m;
	for (size_t i = 0; i < sizeof(fk_fns) / sizeof(fk_fns[0]); i++)
		if (strcmp(fk_fns[i].name, name) == 0) {
			*f = (CUfunction)(void *)&fk_fns[i];
			return CUDA_SUCCESS;
		}
	return CUDA_ERROR_NOT_FOUND;
}

static CUresult CUDAAPI
fk_module_global(CUdeviceptr *p, size_t *bytes, CUmodule m, const char *n)
{
	(void)p;
	(void)bytes;
	(void)m;
	(void)n;
	return CUDA_ERROR_NOT_FOUND;
}

static CUresult CUDAAPI
fk_func_attr(int *v, CUfunction_attribute a, CUfunction f)
{
	(void)f;
	*v = a == CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK ? 1024
	    : a == CU_FUNC_ATTRIBUTE_NUM_REGS             ? 16
	                                                  : 0;
	return CUDA_SUCCESS;
}

static CUresult CUDAAPI
fk_func_set_attr(CUfunction f, CUfunction_attribute a, int v)
{
	(void)f;
	(void)a;
	(void)v;
	return CUDA_SUCCESS;
}

static CUresult CUDAAPI
fk_param_info(CUfunction f, size_t i, size_t *off, size_t *size)
{
	const fk_fn *fn = (const fk_fn *)(void *)f;

	if (i >= fn->nparams)
		return CUDA_ERROR_INVALID_VALUE;
	*off = 8 * i;
	*size = fn->sizes[i];
	return CUDA_SUCCESS;
}

static CUresult CUDAAPI
fk_occupancy(int *blocks, CUfunction f, int threads, size_t shared)
{
	(void)f;
	(void)threads;
	(void)shared;
	*blocks = 8;
	return CUDA_SUCCESS;
}

static CUresult CUDAAPI
fk_mem_alloc(CUdeviceptr *p, size_t bytes)
{
	void *m;

	if (fk.nallocs == FK_MAX_ALLOCS || (m = calloc(1, bytes)) == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	fk.allocs[fk.nallocs++] = m;
	*p = (CUdeviceptr)(uintptr_t)m;
	return CUDA_SUCCESS;
}

static CUresult CUDAAPI
fk_mem_free(CUdeviceptr p)
{
	for (unsigned i = 0; i < fk.nallocs; i++)
		if (fk.allocs[i] == fk_ptr(p)) {
			free(fk.allocs[i]);
			fk.allocs[i] = fk.allocs[--fk.nallocs];
			return CUDA_SUCCESS;
		}
	return CUDA_ERROR_INVALID_VALUE;
}

static CUresult CUDAAPI
fk_host_alloc(void **p, size_t bytes)
{
	CUdeviceptr d = 0;
	CUresult r = fk_mem_alloc(&d, bytes);

	*p = fk_ptr(d);
	return r;
}

static CUresult CUDAAPI
fk_host_free(void *p)
{
	return fk_mem_free((CUdeviceptr)(uintptr_t)p);
}

static CUresult CUDAAPI
fk_host_alloc_flags(void **p, size_t bytes, unsigned int flags)
{
	(void)flags;
	return fk_host_alloc(p, bytes);
}

static CUresult CUDAAPI
fk_host_device_ptr(CUdeviceptr *d, void *p, unsigned int flags)
{
	(void)flags;
	*d = (CUdeviceptr)(uintptr_t)p;
	return CUDA_SUCCESS;
}

static CUresult CUDAAPI
fk_mem_info(size_t *avail, size_t *total)
{
	*avail = *total = (size_t)80 << 30;
	return CUDA_SUCCESS;
}

static CUresult CUDAAPI
fk_htod(CUdeviceptr d, const void *s, size_t n)
{
	memcpy(fk_ptr(d), s, n);
	return fk_ok();
}

static CUresult CUDAAPI
fk_htod_async(CUdeviceptr d, const void *s, size_t n, CUstream st)
{
	(void)st;
	return fk_htod(d, s, n);
}

static CUresult CUDAAPI
fk_ipc_open(CUdeviceptr *p, CUipcMemHandle h, unsigned int flags)
{
	(void)p;
	(void)h;
	(void)flags;
	return CUDA_ERROR_NOT_SUPPORTED;
}

static CUresult CUDAAPI
fk_ipc_close(CUdeviceptr p)
{
	(void)p;
	return CUDA_ERROR_NOT_SUPPORTED;
}

static CUresult CUDAAPI
fk_dtoh(void *d, CUdeviceptr s, size_t n)
{
	memcpy(d, fk_ptr(s), n);
	return fk_ok();
}

static CUresult CUDAAPI
fk_dtod_async(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st)
{
	(void)st;
	memmove(fk_ptr(d), fk_ptr(s), n);
	return fk_ok();
}

static CUresult CUDAAPI
fk_memset8(CUdeviceptr d, unsigned char v, size_t n, CUstream st)
{
	(void)st;
	memset(fk_ptr(d), v, n);
	return fk_ok();
}

static CUresult CUDAAPI
fk_memset32(CUdeviceptr d, unsigned int v, size_t n, CUstream st)
{
	uint32_t *p = fk_ptr(d);

	(void)st;
	for (size_t i = 0; i < n; i++)
		p[i] = v;
	return fk_ok();
}

static CUresult CUDAAPI
fk_stream_create(CUstream *s, unsigned int flags)
{
	(void)flags;
	*s = (CUstream)(uintptr_t)0x30;
	return CUDA_SUCCESS;
}

static CUresult CUDAAPI
fk_stream_sync(CUstream s)
{
	(void)s;
	return fk_ok();
}

static CUresult CUDAAPI
fk_event_create(CUevent *e, unsigned int flags)
{
	(void)flags;
	if (fk.nevents == FK_MAX_EVENTS)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*e = (CUevent)(void *)&fk.events[fk.nevents++];
	return CUDA_SUCCESS;
}

static CUresult CUDAAPI
fk_event_record(CUevent e, CUstream s)
{
	(void)s;
	((fk_event *)(void *)e)->t = fk.now_ms;
	return fk_ok();
}

static CUresult CUDAAPI
fk_event_sync(CUevent e)
{
	(void)e;
	return fk_ok();
}

static CUresult CUDAAPI
fk_event_elapsed(float *ms, CUevent a, CUevent b)
{
	*ms = (float)(((fk_event *)(void *)b)->t - ((fk_event *)(void *)a)->t);
	return fk_ok();
}

static CUresult CUDAAPI
fk_error_name(CUresult r, const char **s)
{
	*s = r == CUDA_ERROR_ILLEGAL_ADDRESS ? "CUDA_ERROR_ILLEGAL_ADDRESS"
	                                     : "CUDA_ERROR_FAKE";
	return CUDA_SUCCESS;
}

static CUresult CUDAAPI
fk_error_string(CUresult r, const char **s)
{
	(void)r;
	*s = "reported by the fake GPU";
	return CUDA_SUCCESS;
}

/* kc_compare (helpers_cu.c) on f32: the squared error and expected sums,
 * the bad and NaN counts, the largest absolute and relative errors. */
static void
fk_compare(void **params)
{
	const float *got = fk_ptr(*(CUdeviceptr *)params[0]);
	const float *exp = fk_ptr(*(CUdeviceptr *)params[1]);
	uint64_t n = *(uint64_t *)params[2];
	double atol = *(double *)params[4], rtol = *(double *)params[5];
	double *sums = fk_ptr(*(CUdeviceptr *)params[6]);
	uint64_t *counts = fk_ptr(*(CUdeviceptr *)params[7]);
	double mabs, mrel;

	KT_EQ_INT(*(int *)params[3], KCLAW__DTYPE__F32);
	memcpy(&mabs, &counts[2], sizeof(mabs));
	memcpy(&mrel, &counts[3], sizeof(mrel));
	for (uint64_t i = 0; i < n; i++) {
		double e = exp[i], g = got[i], d;
		if (isnan(e) && isnan(g))
			continue;
		if (isnan(g) || isnan(e)) {
			counts[0]++;
			counts[1] += isnan(g);
			continue;
		}
		d = fabs(g - e);
		counts[0] += d > atol + rtol * fabs(e);
		sums[0] += d * d;
		sums[1] += e * e;
		mabs = fmax(mabs, d);
		if (e != 0)
			mrel = fmax(mrel, d / fabs(e));
	}
	memcpy(&counts[2], &mabs, sizeof(mabs));
	memcpy(&counts[3], &mrel, sizeof(mrel));
}

/* kc_hash: any function of the bytes does (FNV-1a). */
static void
fk_hash(void **params)
{
	const unsigned char *p = fk_ptr(*(CUdeviceptr *)params[0]);
	uint64_t n = *(uint64_t *)params[1], h = 0xcbf29ce484222325ull;
	uint64_t *out = fk_ptr(*(CUdeviceptr *)params[2]);

	for (uint64_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	*out = h;
}

/* The candidates: y = 2x is right; each other one is wrong its own way. */
static void
fk_candidate(const char *name, void **params)
{
	float *x = fk_ptr(*(CUdeviceptr *)params[0]);
	float *y = fk_ptr(*(CUdeviceptr *)params[1]);
	int n = *(int *)params[2];

	fk.cand_launches++;
	fk.now_ms += 0.02;
	if (strcmp(name, "faults") == 0) {
		fk.faulted = 1;
		return;
	}
	for (int i = 0; i < n; i++)
		y[i] = (strcmp(name, "scale3") == 0 ? 3.0f : 2.0f) * x[i];
	if (strcmp(name, "zeros") == 0 || strcmp(name, "near_zeros") == 0)
		for (int i = 0; i < n; i++)
			y[i] = name[0] == 'z' ? 0.0f : 1e-8f;
	if (strcmp(name, "bad_run") == 0 && fk.cand_launches == fk.bad_launch)
		y[n / 2] += 1.0f;
	if (strcmp(name, "writes_input") == 0)
		x[0] = 42;
}

static CUresult CUDAAPI
fk_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
    unsigned by, unsigned bz, unsigned shared, CUstream s, void **params,
    void **extra)
{
	const char *name = ((const fk_fn *)(void *)f)->name;

	(void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz;
	(void)shared, (void)s, (void)extra;
	if (fk.faulted)
		return CUDA_ERROR_ILLEGAL_ADDRESS;
	if (strcmp(name, "kc_compare") == 0)
		fk_compare(params);
	else if (strcmp(name, "kc_hash") == 0)
		fk_hash(params);
	else if (strncmp(name, "kc_", 3) != 0)
		fk_candidate(name, params);
	return CUDA_SUCCESS;
}

static const sbx_cu fk_cu = {
    .cuInit = fk_init,
    .cuDriverGetVersion = fk_driver_version,
    .cuDeviceGet = fk_device_get,
    .cuDeviceGetCount = fk_device_count,
    .cuDeviceGetName = fk_device_name,
    .cuDeviceGetAttribute = fk_device_attr,
    .cuDevicePrimaryCtxRetain = fk_ctx_retain,
    .cuCtxSetCurrent = fk_ctx_set,
    .cuCtxSynchronize = fk_sync,
    .cuModuleLoadData = fk_module_load,
    .cuModuleUnload = fk_module_unload,
    .cuModuleGetFunction = fk_module_function,
    .cuModuleGetGlobal = fk_module_global,
    .cuFuncGetAttribute = fk_func_attr,
    .cuFuncSetAttribute = fk_func_set_attr,
    .cuFuncGetParamInfo = fk_param_info,
    .cuLaunchKernel = fk_launch,
    .cuOccupancyMaxActiveBlocksPerMultiprocessor = fk_occupancy,
    .cuMemAlloc = fk_mem_alloc,
    .cuMemFree = fk_mem_free,
    .cuMemAllocHost = fk_host_alloc,
    .cuMemFreeHost = fk_host_free,
    .cuMemHostAlloc = fk_host_alloc_flags,
    .cuMemHostGetDevicePointer = fk_host_device_ptr,
    .cuMemGetInfo = fk_mem_info,
    .cuMemcpyHtoD = fk_htod,
    .cuMemcpyHtoDAsync = fk_htod_async,
    .cuIpcOpenMemHandle = fk_ipc_open,
    .cuIpcCloseMemHandle = fk_ipc_close,
    .cuMemcpyDtoH = fk_dtoh,
    .cuMemcpyDtoDAsync = fk_dtod_async,
    .cuMemsetD8Async = fk_memset8,
    .cuMemsetD32Async = fk_memset32,
    .cuStreamCreate = fk_stream_create,
    .cuStreamSynchronize = fk_stream_sync,
    .cuEventCreate = fk_event_create,
    .cuEventRecord = fk_event_record,
    .cuEventSynchronize = fk_event_sync,
    .cuEventElapsedTime = fk_event_elapsed,
    .cuGetErrorName = fk_error_name,
    .cuGetErrorString = fk_error_string,
};

/* ------------------------------------------- the scripted reference */

/* Its state: the expected outputs (y = 2x) on the fake device, and how
 * many timed runs it was asked to make inputs for and to check. */
typedef struct {
	CUdeviceptr exp;
	unsigned runs_made, runs_checked;
	unsigned last_id;
} sc_state;

static int sc_usable_answer = 1;
/* The task's output is 0 for every input (KernelBench level2/80's kind of
 * problem): degenerate. */
static int sc_zero;

static int
sc_usable(const Kclaw__Reference *ref)
{
	(void)ref;
	return sc_usable_answer;
}

static int
sc_setup(ev *e)
{
	fk_log("setup ");
	e->ref_state = calloc(1, sizeof(sc_state));
	return e->ref_state != NULL ? 0 : -1;
}

/* Input set `serial`: x made on the host (the fake's device memory is
 * host memory), the expected 2x beside it. */
static void
sc_make(ev *e, unsigned serial)
{
	sc_state *st = e->ref_state;
	float *x = fk_ptr(e->tdev[0]), *exp = fk_ptr(st->exp);

	for (int i = 0; i < N; i++) {
		x[i] = sinf((float)serial * 7.1f + (float)i * 0.37f);
		exp[i] = sc_zero ? 0.0f : 2 * x[i];
	}
}

static int
sc_prepare(ev *e)
{
	sc_state *st = e->ref_state;

	fk_log("prepare ");
	if (e->g->cu.cuMemAlloc(&st->exp, N * sizeof(float)) != CUDA_SUCCESS)
		return -1;
	e->var_known[1] = 1;
	e->var_rel[1] = sc_zero ? 0.0 : 1.0;
	return 0;
}

static int
sc_trial_inputs(ev *e, unsigned k)
{
	fk_log("inputs%u ", k);
	sc_make(e, k);
	return 0;
}

static int
sc_trial_check(ev *e, unsigned k, const char *when)
{
	sc_state *st = e->ref_state;
	ev_slot sl;

	fk_log("check%u ", k);
	if (ev_dev_compare_now(
	        e, 1, e->tdev[1], st->exp, 1e-5, 1e-5, when, &sl) != 0)
		return -1;
	ev_note_error(e, 1, sl.max_abs, sl.max_rel, sl.rel);
	if (sl.bad == 0 && sl.nans == 0)
		return 0;
	{
		sbx_cmp c = {.bad_count = sl.bad,
		    .nan_count = sl.nans,
		    .rel_norm = sl.rel,
		    .max_abs_err = sl.max_abs};
		ev_wrong(e, 1, k, &c, when);
	}
	return 1;
}

static int
sc_run_inputs(ev *e, unsigned k, unsigned id)
{
	sc_state *st = e->ref_state;

	(void)k;
	st->runs_made++;
	st->last_id = id;
	sc_make(e, 1000 + id);
	return 0;
}

/* A timed run's outputs compared on the (fake) device into its slot, as
 * the `cuda` kind does; ids must come in the order the runs were made. */
static int
sc_run_check(ev *e, unsigned k, unsigned id, unsigned slot)
{
	sc_state *st = e->ref_state;

	(void)k;
	KT_EQ_INT(id, st->last_id);
	st->runs_checked++;
	return ev_dev_compare(
	    e, 1, e->tdev[1], st->exp, 1e-5, 1e-5, ev_chk_slot(e, slot, 1));
}

static int
sc_profile_inputs(ev *e)
{
	sc_make(e, 0);
	return 0;
}

static int
sc_baseline(ev *e)
{
	sc_state *st = e->ref_state;

	fk_log("timed%u/%u baseline ", st->runs_made, st->runs_checked);
	e->res->reference_ms = 0.04;
	return 0;
}

static void
sc_release(ev *e)
{
	sc_state *st = e->ref_state;

	fk_log("release");
	if (st != NULL && st->exp != 0 && !*e->fatal)
		e->g->cu.cuMemFree(st->exp);
	free(st);
	e->ref_state = NULL;
}

static const ev_ref_ops sc_ops = {
    .name = "scripted",
    .usable = sc_usable,
    .setup = sc_setup,
    .prepare = sc_prepare,
    .trial_inputs = sc_trial_inputs,
    .trial_check = sc_trial_check,
    .run_inputs = sc_run_inputs,
    .run_check = sc_run_check,
    .profile_inputs = sc_profile_inputs,
    .baseline = sc_baseline,
    .release = sc_release,
};

/* What the torch kind sends before the candidate compiles, for a kind
 * made from sc_ops (sc_early_ops). */
static void
sc_prefetch(ev *e)
{
	(void)e;
	fk_log("prefetch ");
}

static const ev_ref_ops *const sc_kinds[] = {&sc_ops};
/* sc_ops with sc_prefetch (made by test_prefetch_before_compile). */
static ev_ref_ops sc_early_ops;
static const ev_ref_ops *const sc_early_kinds[] = {&sc_early_ops};
/* Whether evaluate() uses the kind with a prefetch. */
static int sc_early;

/* --------------------------------------------------------------- cases */

static char cache_dir[] = "/tmp/kclaw-protocol-XXXXXX";

static Kclaw__TaskSpec task = KCLAW__TASK_SPEC__INIT;
static Kclaw__TensorSpec tensors[3];
static Kclaw__TensorSpec *tensorp[3];
static Kclaw__Reference reference = KCLAW__REFERENCE__INIT;
static int64_t shape[1] = {N};

static void
setup_task(void)
{
	static char *names[2] = {"x", "y"};

	for (int i = 0; i < 2; i++) {
		kclaw__tensor_spec__init(&tensors[i]);
		tensors[i].name = names[i];
		tensors[i].kind = i == 0 ? KCLAW__TENSOR_KIND__INPUT
		                         : KCLAW__TENSOR_KIND__OUTPUT;
		tensors[i].dtype = KCLAW__DTYPE__F32;
		tensors[i].n_shape = 1;
		tensors[i].shape = shape;
		tensorp[i] = &tensors[i];
	}
	task.name = "scale";
	task.n_tensors = 2;
	task.tensors = tensorp;
	reference.kind = KCLAW__REFERENCE__KIND__TENSORS;
	task.reference = &reference;
}

/* A candidate named `kernel` with that kernel's source, on plan `plan`
 * (NULL: the right one). */
typedef struct {
	const char *kernel, *source, *plan;
	unsigned iterations;
	int reference_only, compile_only;
	double bandwidth;    /* bytes per ms for the speed of light; 0: none */
	unsigned bad_launch; /* bad_run's wrong launch, counted from 1 */
} sc_case;

/*
 * One evaluation on a fresh fake GPU: its result (the caller frees it), the
 * phases' log in fk.log, and every buffer the evaluation allocated given back
 * (all of them, after a fault, by the fake).
 */
static Kclaw__EvalResult *
evaluate(const sc_case *c, int *fatal)
{
	Kclaw__EvalResult *res = malloc(sizeof(*res));
	char source[512], plan[512];
	Kclaw__EvalRequest req = KCLAW__EVAL_REQUEST__INIT;
	Kclaw__EvalOptions o = KCLAW__EVAL_OPTIONS__INIT;
	Kclaw__Candidate cand = KCLAW__CANDIDATE__INIT;
	Kclaw__EvalResult *ready = malloc(sizeof(*ready));
	sbx_child_config cfg = {.device = 0, .cache_dir = cache_dir};
	void *state = NULL;
	ev_gpu *g;
	unsigned base;

	KT_ASSERT(res != NULL && ready != NULL);
	kclaw__eval_result__init(ready);
	memset(&fk, 0, sizeof(fk));
	fk.bad_launch = c->bad_launch;
	KT_OK(ev_gpu_open(&state, &cfg, &fk_cu, ready));
	kclaw__eval_result__free_unpacked(ready, NULL);
	g = state;
	/* No ceilings measured: the speed of light is the case's. */
	g->measured = 1;
	g->bw_bytes_per_ms = c->bandwidth;
	base = fk.nallocs;
	fk.log[0] = '\0';
	snprintf(source, sizeof(source),
	    "extern \"C\" __global__ void %s(const float *x, float *y, int "
	    "n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) "
	    "y[i] = 2 * x[i]; }",
	    c->kernel);
	snprintf(plan, sizeof(plan),
	    "{\"steps\":[{\"kernel\":\"%s\",\"grid\":[1],\"block\":[256],"
	    "\"args\":[\"x\",\"y\",{\"i32\":%d}]}]}",
	    c->kernel, N);
	cand.id = "c1";
	cand.source = (char *)(c->source ? c->source : source);
	cand.plan_json = (char *)(c->plan ? c->plan : plan);
	o.iterations = c->iterations ? c->iterations : 20;
	o.reference_only = c->reference_only;
	o.compile_only = c->compile_only;
	req.candidate = &cand;
	req.task = &task;
	req.options = &o;
	*fatal = 0;
	kclaw__eval_result__init(res);
	ev_evaluate(
	    g, sc_early ? sc_early_kinds : sc_kinds, 1, &req, res, fatal);
	if (!*fatal)
		KT_EQ_INT(fk.nallocs, base);
	ev_gpu_fini(g);
	while (fk.nallocs > 0)
		free(fk.allocs[--fk.nallocs]);
	return res;
}

static void
expect(Kclaw__EvalResult *res, Kclaw__EvalStatus want, const char *says)
{
	if (res->status != want)
		KT_FAIL("status %d, want %d: %s", res->status, want,
		    res->message ? res->message : "");
	KT_CONTAINS(res->message, says);
}

/* The protocol's order, as the reference kind sees it, and a verdict
 * with every timed run checked. */
static void
test_phases_in_order(void)
{
	sc_case c = {.kernel = "scale2"};
	Kclaw__EvalResult *res;
	int fatal;

	res = evaluate(&c, &fatal);
	expect(res, KCLAW__EVAL_STATUS__OK, "2.00x the reference");
	/* compile and load the candidate, the kind's setup and inputs, three
	 * trials, the determinism run (trial 0 again), 20 timed runs all
	 * checked, the baseline, the kind's state freed. */
	KT_EQ_STR(fk.log,
	    "load setup prepare inputs0 check0 inputs1 check1 inputs2 check2 "
	    "inputs0 check0 timed23/20 baseline release");
	KT_EQ_INT(res->timing->iterations, 20);
	KT_EQ_INT(res->timing->spot_checks, 20);
	/* 3 trials + 1 determinism run + 3 warm-up + 20 timed runs. */
	KT_EQ_INT(fk.cand_launches, 27);
	KT_ASSERT(fabs(res->timing->median_ms - 0.02) < 1e-6);
	KT_ASSERT(fabs(res->speedup - 2.0) < 1e-3);
	KT_EQ_INT(res->nondeterministic, 0);
	kclaw__eval_result__free_unpacked(res, NULL);
	/* The roofline: 1024 bytes read and 1024 written at 204800 bytes per
	 * ms is 0.01 ms, half the kernel's 0.02 ms; the speed of light
	 * ((1024 + 1024 / 4) / (1.25 * 204800) = 0.005 ms) is no obstacle. */
	c.bandwidth = 204800;
	res = evaluate(&c, &fatal);
	expect(res, KCLAW__EVAL_STATUS__OK, "2.00x the reference");
	KT_ASSERT(fabs(res->roofline_ms - 0.01) < 1e-12);
	KT_ASSERT(fabs(res->sol_fraction - 0.5) < 1e-4);
	KT_ASSERT(fabs(res->speed_of_light_ms - 0.005) < 1e-12);
	kclaw__eval_result__free_unpacked(res, NULL);
}

/* A kind's prefetch goes out before the candidate compiles (before the
 * module's load, the candidate's first use of the GPU), also for a
 * candidate that then does not compile; a compile-only evaluation sends
 * nothing. */
static void
test_prefetch_before_compile(void)
{
	sc_case c = {.kernel = "scale2"};
	Kclaw__EvalResult *res;
	int fatal;

	sc_early_ops = sc_ops;
	sc_early_ops.prefetch = sc_prefetch;
	sc_early = 1;
	res = evaluate(&c, &fatal);
	expect(res, KCLAW__EVAL_STATUS__OK, "2.00x the reference");
	KT_EQ_STR(fk.log,
	    "prefetch load setup prepare inputs0 check0 inputs1 check1 "
	    "inputs2 check2 inputs0 check0 timed23/20 baseline release");
	kclaw__eval_result__free_unpacked(res, NULL);
	c.source = "this is not CUDA";
	res = evaluate(&c, &fatal);
	expect(res, KCLAW__EVAL_STATUS__COMPILE_ERROR, "compile log");
	KT_EQ_STR(fk.log, "prefetch ");
	kclaw__eval_result__free_unpacked(res, NULL);
	c.source = NULL;
	c.compile_only = 1;
	res = evaluate(&c, &fatal);
	KT_EQ_INT(res->status, KCLAW__EVAL_STATUS__OK);
	KT_EQ_STR(fk.log, "");
	kclaw__eval_result__free_unpacked(res, NULL);
	sc_early = 0;
}

static void
test_compile_error(void)
{
	sc_case c = {.kernel = "scale2", .source = "this is not CUDA"};
	Kclaw__EvalResult *res;
	int fatal;

	res = evaluate(&c, &fatal);
	expect(res, KCLAW__EVAL_STATUS__COMPILE_ERROR, "compile log");
	KT_EQ_STR(fk.log, "");
	kclaw__eval_result__free_unpacked(res, NULL);
}

static void
test_plan_error(void)
{
	sc_case c = {.kernel = "scale2",
	    .plan = "{\"steps\":[{\"kernel\":\"scale2\",\"grid\":[1],"
	            "\"block\":[256],\"args\":[\"x\",\"y\"]}]}"};
	Kclaw__EvalResult *res;
	int fatal;

	res = evaluate(&c, &fatal);
	KT_EQ_INT(res->status, KCLAW__EVAL_STATUS__PLAN_ERROR);
	KT_EQ_STR(fk.log, "load ");
	kclaw__eval_result__free_unpacked(res, NULL);
}

static void
test_wrong_in_a_trial(void)
{
	sc_case c = {.kernel = "scale3"};
	Kclaw__EvalResult *res;
	int fatal;

	res = evaluate(&c, &fatal);
	expect(res, KCLAW__EVAL_STATUS__WRONG_RESULT,
	    "output 'y' is wrong (verification trial 0");
	KT_EQ_STR(fk.log, "load setup prepare inputs0 check0 release");
	kclaw__eval_result__free_unpacked(res, NULL);
}

static void
test_writes_its_input(void)
{
	sc_case c = {.kernel = "writes_input"};
	Kclaw__EvalResult *res;
	int fatal;

	res = evaluate(&c, &fatal);
	expect(res, KCLAW__EVAL_STATUS__WRONG_RESULT,
	    "input 'x' was written by the candidate");
	KT_EQ_STR(fk.log, "load setup prepare inputs0 release");
	kclaw__eval_result__free_unpacked(res, NULL);
}

/* Right in every trial and in the determinism run, wrong in one timed run
 * only, the first or the last: every timed run is checked, so it is
 * found. */
static void
test_one_wrong_timed_run(void)
{
	Kclaw__EvalResult *res;
	int fatal;

	for (unsigned run = 0; run < 20; run += 19) {
		/* 3 trials, the determinism run and 3 warm-up runs come
		 * first. */
		sc_case c = {.kernel = "bad_run", .bad_launch = 7 + run + 1};
		char want[64];

		res = evaluate(&c, &fatal);
		snprintf(want, sizeof(want), "timed run %u,", run);
		expect(res, KCLAW__EVAL_STATUS__WRONG_RESULT, want);
		KT_CONTAINS(res->message, "every timed run is checked");
		KT_EQ_STR(fk.log,
		    "load setup prepare inputs0 check0 inputs1 check1 inputs2 "
		    "check2 inputs0 check0 release");
		kclaw__eval_result__free_unpacked(res, NULL);
	}
}

static void
test_faster_than_light(void)
{
	sc_case c = {.kernel = "scale2", .bandwidth = 1000};
	Kclaw__EvalResult *res;
	int fatal;

	res = evaluate(&c, &fatal);
	expect(res, KCLAW__EVAL_STATUS__WRONG_RESULT,
	    "faster than the speed of light");
	KT_EQ_STR(fk.log,
	    "load setup prepare inputs0 check0 inputs1 check1 inputs2 check2 "
	    "inputs0 check0 release");
	kclaw__eval_result__free_unpacked(res, NULL);
}

/* A kernel that writes zeros where the output is zero for every input is
 * right, and fast because the problem is: OK, counted apart (degenerate
 * output), not "faster than the speed of light". Not exact (a 1e-8 error,
 * within the tolerance), or on a task whose output varies, it is
 * refused. */
static void
test_degenerate_output(void)
{
	sc_case c = {.kernel = "zeros", .bandwidth = 1000};
	Kclaw__EvalResult *res;
	int fatal;

	sc_zero = 1;
	res = evaluate(&c, &fatal);
	expect(res, KCLAW__EVAL_STATUS__OK, "degenerate output");
	KT_EQ_INT(res->degenerate_output, 1);
	KT_CONTAINS(res->message, "2.00x the reference");
	KT_EQ_INT(res->n_degenerate, 1);
	kclaw__eval_result__free_unpacked(res, NULL);
	c.kernel = "near_zeros";
	res = evaluate(&c, &fatal);
	expect(res, KCLAW__EVAL_STATUS__WRONG_RESULT,
	    "faster than the speed of light");
	KT_EQ_INT(res->degenerate_output, 0);
	kclaw__eval_result__free_unpacked(res, NULL);
	sc_zero = 0;
	c.kernel = "zeros";
	res = evaluate(&c, &fatal);
	expect(res, KCLAW__EVAL_STATUS__WRONG_RESULT, "verification trial 0");
	KT_EQ_INT(res->degenerate_output, 0);
	kclaw__eval_result__free_unpacked(res, NULL);
}

static void
test_fault(void)
{
	sc_case c = {.kernel = "faults"};
	Kclaw__EvalResult *res;
	int fatal;

	res = evaluate(&c, &fatal);
	expect(res, KCLAW__EVAL_STATUS__RUNTIME_FAULT,
	    "CUDA_ERROR_ILLEGAL_ADDRESS");
	KT_EQ_INT(fatal, 1);
	kclaw__eval_result__free_unpacked(res, NULL);
}

static void
test_reference_only(void)
{
	sc_case c = {.kernel = "scale2", .reference_only = 1};
	Kclaw__EvalResult *res;
	int fatal;

	res = evaluate(&c, &fatal);
	expect(res, KCLAW__EVAL_STATUS__OK, "reference only (scripted)");
	KT_EQ_STR(fk.log, "setup prepare timed0/0 baseline release");
	kclaw__eval_result__free_unpacked(res, NULL);
}

static void
test_compile_only(void)
{
	sc_case c = {.kernel = "scale2", .compile_only = 1};
	Kclaw__EvalResult *res;
	int fatal;

	res = evaluate(&c, &fatal);
	expect(res, KCLAW__EVAL_STATUS__OK, "not run: compile-only");
	KT_EQ_STR(fk.log, "");
	kclaw__eval_result__free_unpacked(res, NULL);
}

static void
test_no_usable_reference(void)
{
	sc_case c = {.kernel = "scale2"};
	Kclaw__EvalResult *res;
	int fatal;

	sc_usable_answer = 0;
	res = evaluate(&c, &fatal);
	sc_usable_answer = 1;
	expect(res, KCLAW__EVAL_STATUS__INTERNAL_ERROR,
	    "the task has no usable reference");
	KT_EQ_STR(fk.log, "load ");
	kclaw__eval_result__free_unpacked(res, NULL);
}

int
main(void)
{
	char cmd[128];

	KT_ASSERT(mkdtemp(cache_dir) != NULL);
	setup_task();
	KT_RUN(test_phases_in_order);
	KT_RUN(test_compile_error);
	KT_RUN(test_prefetch_before_compile);
	KT_RUN(test_plan_error);
	KT_RUN(test_wrong_in_a_trial);
	KT_RUN(test_writes_its_input);
	KT_RUN(test_one_wrong_timed_run);
	KT_RUN(test_faster_than_light);
	KT_RUN(test_degenerate_output);
	KT_RUN(test_fault);
	KT_RUN(test_reference_only);
	KT_RUN(test_compile_only);
	KT_RUN(test_no_usable_reference);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", cache_dir);
	return system(cmd) == 0 ? 0 : 1;
}
