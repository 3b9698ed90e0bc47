/*
 * plan.h - a candidate's launch plan (docs/plan.md): parsed from JSON,
 * checked against the task's tensors, the compiled kernels' signatures and
 * the device's limits. Every refusal is a PLAN_ERROR whose message
 * (kc_lasterr) names the step, the field, what is wrong and what to do.
 */
#ifndef SBX_PLAN_H
#define SBX_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "kclaw.pb-c.h"

#define SBX_NAME_MAX 128
#define SBX_MAX_STEPS 256
#define SBX_MAX_ARGS 64
#define SBX_MAX_SCRATCH 64
#define SBX_MAX_SCRATCH_BYTES ((size_t)16 << 30)

enum sbx_arg_kind {
	SBX_ARG_BUFFER, /* a tensor or scratch buffer: a device pointer */
	SBX_ARG_I32,
	SBX_ARG_U32,
	SBX_ARG_I64,
	SBX_ARG_F32,
	SBX_ARG_F64,
};

typedef struct {
	enum sbx_arg_kind kind;
	/* Buffers: index into the plan's buffer table (tensors, then
	 * scratch). */
	int buffer;
	union {
		int32_t i32;
		uint32_t u32;
		int64_t i64;
		float f32;
		double f64;
	} v;
} sbx_arg;

enum sbx_step_kind { SBX_STEP_KERNEL, SBX_STEP_MATMUL };

enum sbx_epilogue {
	SBX_EPI_NONE,
	SBX_EPI_RELU,
	SBX_EPI_GELU,
	SBX_EPI_BIAS,
	SBX_EPI_BIAS_RELU,
	SBX_EPI_BIAS_GELU,
};

/* D[m,n] = alpha * op(A) @ op(B) + beta * C (+ bias[n]), row-major. */
typedef struct {
	int a, b, c, d, bias; /* buffer indices; c and bias -1 if absent */
	int64_t m, n, k;
	int trans_a, trans_b;
	Kclaw__DType dtype;
	int tf32; /* f32 inputs: allow TF32 tensor cores */
	enum sbx_epilogue epilogue;
	double alpha, beta;
} sbx_matmul;

typedef struct {
	enum sbx_step_kind kind;
	char kernel[SBX_NAME_MAX];
	uint32_t grid[3], block[3];
	uint32_t shared_bytes;
	sbx_arg args[SBX_MAX_ARGS];
	size_t nargs;
	sbx_matmul mm;
} sbx_step;

/* One device buffer the plan can name, or a task's scalar (a torch
 * problem's non-tensor input), which an argument gets by value. */
typedef struct {
	char name[SBX_NAME_MAX];
	int tensor; /* index into task->tensors, or -1 for scratch */
	size_t bytes;
	int scalar;
	sbx_arg value;
} sbx_buffer;

typedef struct {
	sbx_buffer *buffers;
	size_t nbuffers;
	size_t ntensors; /* buffers[0..ntensors) are the task's tensors */
	sbx_step *steps;
	size_t nsteps;
} sbx_plan;

/* A compiled kernel's parameters (sizes in bytes), from the PTX or from
 * cuFuncGetParamInfo. */
typedef struct {
	char name[SBX_NAME_MAX];
	size_t nparams;
	uint32_t sizes[SBX_MAX_ARGS];
	int max_threads; /* per block for this kernel; 0 = unknown */
	int shared_static;
} sbx_sig;

typedef struct {
	uint32_t max_block[3];
	uint32_t max_grid[3];
	uint32_t max_threads_per_block;
	uint32_t max_shared_optin; /* dynamic + static, bytes */
} sbx_limits;

/* The limits of every current NVIDIA GPU, used where no device is known
 * (compile-only). The device's own replace them when there is one. */
void sbx_limits_generic(sbx_limits *lim);

/* A dtype's name for messages; kc_dtype_size (bundle.h) gives its size. */
const char *sbx_dtype_name(Kclaw__DType dtype);
/* Elements of a tensor; refuses negative or overflowing shapes. */
int sbx_tensor_count(const Kclaw__TensorSpec *t, size_t *count);

/* Parses json against task's tensors. On success *out is malloc'd
 * (sbx_plan_free). Errors are KC_EINVAL with the detail in kc_lasterr(). */
int sbx_plan_parse(
    const char *json, const Kclaw__TaskSpec *task, sbx_plan **out);
void sbx_plan_free(sbx_plan *p);

/*
 * Checks every kernel step against the compiled signatures (the kernel
 * exists, argument count and sizes match) and the limits (grid, block,
 * shared memory). KC_EINVAL with the detail in kc_lasterr().
 */
int sbx_plan_check(const sbx_plan *p, const sbx_sig *sigs, size_t nsigs,
    const sbx_limits *lim);

#endif
