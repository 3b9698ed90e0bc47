/*
 * device.c - the GPU the child owns: start-up (context, stream, limits,
 * the sandbox's own buffers and helper kernels), shut-down, the device
 * figures every result carries, and driver errors mapped to results.
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
 * Maps a failed driver call to the result. A sticky error is a kernel
 * fault whatever the call: RUNTIME_FAULT, and the child must exit.
 * Others get `status` (LAUNCH_ERROR for the candidate's launches,
 * INTERNAL_ERROR for the sandbox's own work). Returns -1 so callers can
 * `return ev_cu(...)`.
 */
int
ev_cu(ev *e, CUresult r, Kclaw__EvalStatus status, const char *what)
{
	const char *name = sbx_cu_errname(&e->g->cu, r), *text = NULL;

	e->g->cu.cuGetErrorString(r, &text);
	if (sbx_cu_sticky(r)) {
		*e->fatal = 1;
		sbx_result_set(&e->res->fault_name, "%s", name);
		sbx_result_status(e->res, KCLAW__EVAL_STATUS__RUNTIME_FAULT,
		    "%s: the GPU reported %s (%s). The kernel faulted: look "
		    "for "
		    "out-of-bounds or misaligned accesses, traps and failed "
		    "asserts. The sandbox restarted its GPU process",
		    what, name, text ? text : "");
		return -1;
	}
	sbx_result_status(
	    e->res, status, "%s: %s (%s)", what, name, text ? text : "");
	return -1;
}

/* 0 when r is a success, else ev_cu's -1 with the result filled. */
int
ev_ok(ev *e, CUresult r, Kclaw__EvalStatus status, const char *what)
{
	return r == CUDA_SUCCESS ? 0 : ev_cu(e, r, status, what);
}

int
ev_gpu_attr(ev_gpu *g, CUdevice_attribute a)
{
	int v = 0;

	g->cu.cuDeviceGetAttribute(&v, a, g->dev);
	return v;
}

static int
ev_gpu_load_helpers(ev_gpu *g)
{
	static const char *gen_names[9] = {NULL, "kc_gen_f32", "kc_gen_f16",
	    "kc_gen_bf16", "kc_gen_f64", "kc_gen_i32", "kc_gen_i64",
	    "kc_gen_i8", "kc_gen_u8"};
	sbx_compiled c;
	int rv;

	rv = sbx_compile(
	    sbx_helpers_cu, g->arch, g->cache_dir[0] ? g->cache_dir : NULL, &c);
	if (rv != 0) {
		kc_seterr(KC_EINTERNAL,
		    "the sandbox's helper kernels do not "
		    "compile: %s",
		    c.log ? c.log : kc_lasterr());
		sbx_compiled_free(&c);
		return KC_EINTERNAL;
	}
	if (g->cu.cuModuleLoadData(&g->helpers, c.cubin) != CUDA_SUCCESS) {
		sbx_compiled_free(&c);
		return kc_seterr(KC_EINTERNAL, "cannot load helper kernels");
	}
	sbx_compiled_free(&c);
	for (int i = 1; i < 9; i++)
		if (g->cu.cuModuleGetFunction(
		        &g->gen[i], g->helpers, gen_names[i]) != CUDA_SUCCESS)
			return kc_seterr(
			    KC_EINTERNAL, "helper %s missing", gen_names[i]);
	if (g->cu.cuModuleGetFunction(&g->hash, g->helpers, "kc_hash") !=
	        CUDA_SUCCESS ||
	    g->cu.cuModuleGetFunction(&g->poison_count, g->helpers,
	        "kc_poison_count") != CUDA_SUCCESS ||
	    g->cu.cuModuleGetFunction(&g->compare, g->helpers, "kc_compare") !=
	        CUDA_SUCCESS ||
	    g->cu.cuModuleGetFunction(
	        &g->flush_read, g->helpers, "kc_flush_read") != CUDA_SUCCESS ||
	    g->cu.cuModuleGetFunction(&g->hold, g->helpers, "kc_hold") !=
	        CUDA_SUCCESS ||
	    g->cu.cuModuleGetFunction(&g->probe, g->helpers, "kc_probe") !=
	        CUDA_SUCCESS ||
	    g->cu.cuModuleGetFunction(&g->mark, g->helpers, "kc_mark") !=
	        CUDA_SUCCESS ||
	    g->cu.cuModuleGetFunction(
	        &g->mark_end, g->helpers, "kc_mark_end") != CUDA_SUCCESS ||
	    g->cu.cuModuleGetFunction(
	        &g->read_sweep, g->helpers, "kc_read_sweep") != CUDA_SUCCESS)
		return kc_seterr(KC_EINTERNAL, "a helper kernel is missing");
	return 0;
}

/*
 * cuBLASLt's first matmul in a process sets the library up (70-77 ms on
 * the H200), which landed on the first matmul candidate's verification:
 * one small f32 matmul here, on the L2 flush's buffer (its contents stay
 * defined), microseconds of GPU work a busy sibling child does not
 * notice. Only f32: warming all four precisions took 230-280 ms, which
 * every child's start would pay.
 */
static void
ev_gpu_warm_matmul(ev_gpu *g)
{
	CUdeviceptr a = g->flush, b = a + (1 << 20), d = a + (2 << 20);
	sbx_matmul mm = {.a = 0,
	    .b = 1,
	    .c = -1,
	    .d = 2,
	    .bias = -1,
	    .m = 128,
	    .n = 128,
	    .k = 128,
	    .dtype = KCLAW__DTYPE__F32,
	    .epilogue = SBX_EPI_NONE,
	    .alpha = 1,
	    .beta = 0};
	uint64_t t0 = kc_mono_ns();

	if (sbx_lt_matmul(g->lt, &mm, a, b, 0, d, 0, g->stream) != 0)
		KC_WARN("warming cuBLASLt up: %s", kc_lasterr());
	else if (g->cu.cuStreamSynchronize(g->stream) != CUDA_SUCCESS)
		KC_WARN("warming cuBLASLt up: the stream failed");
	KC_DEBUG(
	    "cuBLASLt warmed up in %.1f ms", (double)(kc_mono_ns() - t0) / 1e6);
}

void
ev_gpu_measure(void *state, Kclaw__EvalResult *res)
{
	ev_gpu *g = state;
	uint64_t t0 = kc_mono_ns();

	if (!g->have_device || g->measured)
		return;
	g->cu.cuCtxSetCurrent(g->ctx);
	ev_gpu_measure_ceilings(g);
	g->measured = 1;
	sbx_result_add_metric(res, "sandbox.ceilings_ms",
	    (double)(kc_mono_ns() - t0) / 1e6, "ms");
}

int
ev_gpu_init(void **state, const sbx_child_config *cfg, Kclaw__EvalResult *ready)
{
	ev_gpu *g;
	int rv = ev_gpu_open(state, cfg, NULL, ready);

	if (rv != 0)
		return rv;
	g = *state;
	/* CUPTI is started once here, with no GPU work, so the calibration
	 * (ev_gpu_calibrate) does not wait for its set-up. CUPTI and
	 * cuBLASLt work on the real driver only (not on a test's). */
	if (sbx_prof_activity_start() == 0)
		sbx_prof_activity_stop(NULL);
	if (sbx_lt_open(&g->lt) != 0)
		KC_WARN("cuBLASLt unavailable: %s", kc_lasterr());
	else {
		sbx_lt_set_workspace(g->lt, g->lt_work, EV_LT_WORKSPACE);
		ev_gpu_warm_matmul(g);
	}
	/* The ceilings and the events' cost (16 ms on the H200) are measured
	 * here by a child started alone, so no evaluation waits for them. A
	 * spare starts beside a busy child, whose timing its copies would
	 * disturb (and be slowed by): it measures when its parent finds the
	 * sandbox idle (ev_gpu_measure), or else at its first evaluation. */
	if (cfg->alone)
		ev_gpu_measure(g, ready);
	return 0;
}

int
ev_gpu_open(void **state, const sbx_child_config *cfg, const sbx_cu *cu,
    Kclaw__EvalResult *ready)
{
	ev_gpu *g = calloc(1, sizeof(*g));
	int n = 0, major, minor, rv;
	CUresult r;

	if (g == NULL)
		return KC_ENOMEM;
	*state = g;
	snprintf(g->cache_dir, sizeof(g->cache_dir), "%s",
	    cfg->cache_dir ? cfg->cache_dir : "");
	snprintf(g->arch_override, sizeof(g->arch_override), "%s",
	    cfg->arch ? cfg->arch : "");
	g->device = cfg->device;
	g->nthreads = (int)sysconf(_SC_NPROCESSORS_ONLN);
	if (g->nthreads > 16)
		g->nthreads = 16;
	sbx_limits_generic(&g->lim);
	if (cu != NULL)
		g->cu = *cu;
	else if ((rv = sbx_cu_load(&g->cu)) != 0)
		goto nodev;
	if ((r = g->cu.cuInit(0)) != CUDA_SUCCESS) {
		rv =
		    kc_seterr(KC_ENODEV, "no usable GPU: cuInit failed with %s",
		        sbx_cu_errname(&g->cu, r));
		goto nodev;
	}
	if (g->cu.cuDeviceGetCount(&n) != CUDA_SUCCESS || cfg->device >= n) {
		rv = kc_seterr(KC_ENODEV,
		    "no GPU %d: this machine has %d; use --device 0..%d",
		    cfg->device, n, n - 1);
		goto nodev;
	}
	if ((r = g->cu.cuDeviceGet(&g->dev, cfg->device)) != CUDA_SUCCESS ||
	    (r = g->cu.cuDevicePrimaryCtxRetain(&g->ctx, g->dev)) !=
	        CUDA_SUCCESS ||
	    (r = g->cu.cuCtxSetCurrent(g->ctx)) != CUDA_SUCCESS ||
	    (r = g->cu.cuStreamCreate(&g->stream, CU_STREAM_NON_BLOCKING)) !=
	        CUDA_SUCCESS) {
		rv = kc_seterr(KC_ENODEV, "GPU %d cannot be used: %s",
		    cfg->device, sbx_cu_errname(&g->cu, r));
		goto nodev;
	}
	g->cu.cuDeviceGetName(g->name, sizeof(g->name), g->dev);
	major = ev_gpu_attr(g, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
	minor = ev_gpu_attr(g, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
	snprintf(g->arch, sizeof(g->arch), "sm_%d%d", major, minor);
	/* Hopper's arch-specific features (wgmma, setmaxnreg) need sm_90a. */
	if (major == 9 && minor == 0)
		snprintf(g->arch, sizeof(g->arch), "sm_90a");
	g->lim.max_block[0] =
	    (uint32_t)ev_gpu_attr(g, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
	g->lim.max_block[1] =
	    (uint32_t)ev_gpu_attr(g, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y);
	g->lim.max_block[2] =
	    (uint32_t)ev_gpu_attr(g, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z);
	g->lim.max_grid[0] =
	    (uint32_t)ev_gpu_attr(g, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
	g->lim.max_grid[1] =
	    (uint32_t)ev_gpu_attr(g, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y);
	g->lim.max_grid[2] =
	    (uint32_t)ev_gpu_attr(g, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z);
	g->lim.max_threads_per_block =
	    (uint32_t)ev_gpu_attr(g, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
	g->lim.max_shared_optin = (uint32_t)ev_gpu_attr(
	    g, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
	g->sms = ev_gpu_attr(g, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
	g->max_threads_sm =
	    ev_gpu_attr(g, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
	g->l2_bytes = ev_gpu_attr(g, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
	/* Writing twice the L2's size evicts whatever a run left there. */
	g->flush_bytes = (size_t)(g->l2_bytes > 0 ? g->l2_bytes : 64 << 20) * 2;
	if ((r = g->cu.cuMemAlloc(&g->flush, g->flush_bytes)) != CUDA_SUCCESS ||
	    (r = g->cu.cuMemAlloc(&g->hash_out,
	         EV_MAX_TENSORS * sizeof(uint64_t))) != CUDA_SUCCESS ||
	    (r = g->cu.cuMemAlloc(&g->acc, 8 * sizeof(uint64_t))) !=
	        CUDA_SUCCESS ||
	    (r = g->cu.cuMemAlloc(&g->lt_work, EV_LT_WORKSPACE)) !=
	        CUDA_SUCCESS ||
	    (r = g->cu.cuMemAlloc(
	         &g->chk, (size_t)EV_MAX_ITERS * EV_CHK_OUTS * EV_CHK_SLOT)) !=
	        CUDA_SUCCESS) {
		rv = kc_seterr(KC_ENODEV, "GPU %d: cannot allocate: %s",
		    cfg->device, sbx_cu_errname(&g->cu, r));
		goto nodev;
	}
	if ((rv = ev_gpu_load_helpers(g)) != 0)
		goto nodev;
	/* Defined contents for the L2 flush to read. */
	g->cu.cuMemsetD8Async(g->flush, 0x5a, g->flush_bytes, g->stream);
	ev_gpu_hold_init(g);
	g->have_device = 1;
	sbx_result_set(&ready->device_name, "%s", g->name);
	sbx_result_set(&ready->arch, "%s", g->arch);
	KC_INFO("GPU %d: %s (%s, %d SMs, L2 %d KiB)", cfg->device, g->name,
	    g->arch, g->sms, g->l2_bytes / 1024);
	return 0;
nodev:
	snprintf(g->nodev_reason, sizeof(g->nodev_reason), "%s", kc_lasterr());
	if (g->arch_override[0])
		sbx_result_set(&ready->arch, "%s", g->arch_override);
	KC_WARN("%s", g->nodev_reason);
	return rv;
}

void
ev_gpu_fini(void *state)
{
	ev_gpu *g = state;

	if (g == NULL)
		return;
	for (int k = 0; k < EV_MAX_TRIALS; k++)
		for (int t = 0; t < EV_MAX_TENSORS; t++)
			if (g->pool_raw[k][t] != NULL)
				munmap(g->pool_raw[k][t],
				    g->pool_bytes[k][t] + EV_HUGE);
	sbx_torchref_free(g->tr);
	if (g->have_device) {
		if (g->lt)
			sbx_lt_close(g->lt);
		if (g->pinned)
			g->cu.cuMemFreeHost(g->pinned);
		if (g->hold_flag)
			g->cu.cuMemFreeHost((void *)g->hold_flag);
		g->cu.cuMemFree(g->flush);
		g->cu.cuMemFree(g->hash_out);
		g->cu.cuMemFree(g->acc);
		g->cu.cuMemFree(g->chk);
		g->cu.cuMemFree(g->lt_work);
		g->cu.cuModuleUnload(g->helpers);
	}
	free(g);
}

/* What the agents are told about the GPU (docs/agents.md "Context"): its
 * size and ceilings, as device.* metrics on every result. */
void
ev_gpu_device_metrics(ev_gpu *g, Kclaw__EvalResult *res)
{
	size_t mem = 0, avail = 0;

	g->cu.cuMemGetInfo(&avail, &mem);
	sbx_result_add_metric(res, "device.sm_count", g->sms, "SMs");
	sbx_result_add_metric(res, "device.l2_bytes", g->l2_bytes, "bytes");
	sbx_result_add_metric(res, "device.shared_per_block_optin",
	    g->lim.max_shared_optin, "bytes");
	sbx_result_add_metric(res, "device.shared_per_sm",
	    ev_gpu_attr(
	        g, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR),
	    "bytes");
	sbx_result_add_metric(res, "device.registers_per_sm",
	    ev_gpu_attr(
	        g, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR),
	    "registers");
	sbx_result_add_metric(
	    res, "device.max_threads_per_sm", g->max_threads_sm, "threads");
	sbx_result_add_metric(res, "device.memory_bytes", (double)mem, "bytes");
	if (g->bw_bytes_per_ms > 0)
		sbx_result_add_metric(res, "device.bandwidth_gbs",
		    g->bw_bytes_per_ms / 1e6, "GB/s");
	if (g->read_bytes_per_ms > 0)
		sbx_result_add_metric(res, "device.read_bandwidth_gbs",
		    g->read_bytes_per_ms / 1e6, "GB/s");
	if (g->peak_flops_per_ms > 0)
		sbx_result_add_metric(res, "device.peak_tflops",
		    g->peak_flops_per_ms / 1e9, "TFLOP/s");
}
