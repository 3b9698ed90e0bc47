/*
 * gpu_suite.c - the sandbox on a real GPU: one kclaw-sandbox serves every
 * case in turn, and after each case a correct kernel must still evaluate
 * OK (the sandbox keeps serving after faults and timeouts).
 *
 * Needs a GPU: labelled `gpu`, skipped by CI. Writes a JSON line per case
 * to $KCLAW_GPU_LOG when set.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bundle.h"
#include "kc_err.h"
#include "kc_test.h"
#include "kc_util.h"
#include "npy.h"
#include "pbjson.h"
#include "sandbox.h"
#include "sandbox_client.h"

#define N 1048576

static sbx_session *sess;
static Kclaw__TaskSpec *vec_task, *mm_task, *npy_task;
static char root[256];
static FILE *gpu_log;
static int failures;

static void
put(const char *dir, const char *name, const char *text)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	KT_OK(kc_write_file(path, text, strlen(text)));
}

static Kclaw__TaskSpec *
make_task(const char *name, const char *task_json, const char *ref_cu,
    const char *ref_plan)
{
	Kclaw__TaskSpec *t;
	char dir[512];

	snprintf(dir, sizeof(dir), "%s/%s", root, name);
	KT_OK(kc_mkdirs(dir, 0700));
	put(dir, "task.json", task_json);
	if (ref_cu != NULL) {
		put(dir, "reference.cu", ref_cu);
		put(dir, "reference.plan.json", ref_plan);
	}
	KT_OK(kc_bundle_load(dir, &t));
	return t;
}

static const char vec_json[] =
    "{\"name\":\"vec\",\"tensors\":["
    "{\"name\":\"x\",\"kind\":\"input\",\"dtype\":\"f32\",\"shape\":[1048576],"
    "\"init\":{\"dist\":\"normal\",\"mean\":0,\"scale\":1}},"
    "{\"name\":\"w\",\"kind\":\"parameter\",\"dtype\":\"f32\",\"shape\":"
    "[1048576],\"init\":{\"dist\":\"uniform\",\"low\":-1,\"high\":1}},"
    "{\"name\":\"y\",\"kind\":\"output\",\"dtype\":\"f32\",\"shape\":"
    "[1048576]}],"
    "\"tolerance\":{\"atol\":1e-5,\"rtol\":1e-5,\"max_rel_norm\":1e-5},"
    "\"trials\":3,\"seed\":7,"
    "\"reference\":{\"kind\":\"cuda\",\"source\":\"reference.cu\","
    "\"plan\":\"reference.plan.json\"}}";

static const char vec_ref[] =
    "extern \"C\" __global__ void mul(const float *x, const float *w, "
    "float *y, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) y[i] = x[i] * w[i];\n}\n";

static const char vec_plan[] =
    "{\"steps\":[{\"kernel\":\"mul\",\"grid\":[4096,1,1],\"block\":[256,1,"
    "1],\"args\":[\"x\",\"w\",\"y\",{\"i32\":1048576}]}]}";

/* A correct candidate with a different shape: float4 and a grid-stride
 * loop. */
static const char vec_good[] =
    "extern \"C\" __global__ void mul4(const float4 *x, const float4 *w, "
    "float4 *y, int n4) {\n"
    "  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n4; "
    "i += gridDim.x * blockDim.x) {\n"
    "    float4 a = x[i], b = w[i];\n"
    "    y[i] = make_float4(a.x * b.x, a.y * b.y, a.z * b.z, a.w * b.w);\n"
    "  }\n}\n";
static const char vec_good_plan[] =
    "{\"steps\":[{\"kernel\":\"mul4\",\"grid\":[528,1,1],\"block\":[256,1,"
    "1],\"args\":[\"x\",\"w\",\"y\",{\"i32\":262144}]}]}";

typedef struct {
	const char *name;
	Kclaw__TaskSpec **task;
	const char *src;
	const char *plan;
	Kclaw__EvalStatus want;
	const char *want_text; /* in message, fault name or mismatch note */
	unsigned timeout_ms;
	int profile;
} gcase;

static const gcase cases[] = {
    {"correct", &vec_task, vec_good, vec_good_plan, KCLAW__EVAL_STATUS__OK,
        "correct", 0, 0},
    {"wrong", &vec_task,
        "extern \"C\" __global__ void mul(const float *x, const float *w, "
        "float *y, int n) {\n  int i = blockIdx.x * blockDim.x + "
        "threadIdx.x;\n  if (i < n) y[i] = x[i] + w[i];\n}\n",
        vec_plan, KCLAW__EVAL_STATUS__WRONG_RESULT, "output 'y' is wrong", 0,
        0},
    {"half_output", &vec_task,
        "extern \"C\" __global__ void mul(const float *x, const float *w, "
        "float *y, int n) {\n  int i = blockIdx.x * blockDim.x + "
        "threadIdx.x;\n  if (i < n / 2) y[i] = x[i] * w[i];\n}\n",
        vec_plan, KCLAW__EVAL_STATUS__WRONG_RESULT, "poison", 0, 0},
    {"writes_input", &vec_task,
        "extern \"C\" __global__ void mul(float *x, const float *w, "
        "float *y, int n) {\n  int i = blockIdx.x * blockDim.x + "
        "threadIdx.x;\n  if (i < n) { y[i] = x[i] * w[i]; x[i] = 0.f; }\n}\n",
        vec_plan, KCLAW__EVAL_STATUS__WRONG_RESULT, "input 'x' was written", 0,
        0},
    {"illegal_address", &vec_task,
        "extern \"C\" __global__ void mul(const float *x, const float *w, "
        "float *y, int n) {\n  int i = blockIdx.x * blockDim.x + "
        "threadIdx.x;\n  /* null at run time; the compiler cannot know */\n"
        "  float *bad = (float *)(unsigned long long)(w[0] > 100.f);\n"
        "  bad[i] = x[i] * w[i];\n}\n",
        vec_plan, KCLAW__EVAL_STATUS__RUNTIME_FAULT,
        "CUDA_ERROR_ILLEGAL_ADDRESS", 0, 0},
    {"misaligned_address", &vec_task,
        "extern \"C\" __global__ void mul(const float *x, const float *w, "
        "float *y, int n) {\n  int i = blockIdx.x * blockDim.x + "
        "threadIdx.x;\n  const float *p = (const float *)((const char *)x + "
        "1);\n  if (i < n) y[i] = p[i];\n}\n",
        vec_plan, KCLAW__EVAL_STATUS__RUNTIME_FAULT,
        "CUDA_ERROR_MISALIGNED_ADDRESS", 0, 0},
    {"trap", &vec_task,
        "extern \"C\" __global__ void mul(const float *x, const float *w, "
        "float *y, int n) {\n  if (threadIdx.x == 7) __trap();\n  int i = "
        "blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) y[i] = x[i] * "
        "w[i];\n}\n",
        vec_plan, KCLAW__EVAL_STATUS__RUNTIME_FAULT, "CUDA_ERROR", 0, 0},
    {"stack_overflow", &vec_task,
        "__device__ float deep(volatile float *p, int d) {\n  volatile float "
        "buf[64];\n  for (int k = 0; k < 64; k++) buf[k] = p[k] + d;\n  "
        "return d > 1000000000 ? buf[d & 63] : deep(p, d + 1) + buf[d & "
        "63];\n}\n"
        "extern \"C\" __global__ void mul(const float *x, const float *w, "
        "float *y, int n) {\n  int i = blockIdx.x * blockDim.x + "
        "threadIdx.x;\n  if (i < n) y[i] = deep((volatile float *)x, i);\n}\n",
        vec_plan, KCLAW__EVAL_STATUS__RUNTIME_FAULT, "CUDA_ERROR", 0, 0},
    {"never_ends", &vec_task,
        "extern \"C\" __global__ void mul(const float *x, const float *w, "
        "float *y, int n) {\n  while (clock64() >= 0) __nanosleep(1000);\n"
        "  y[0] = x[0];\n}\n",
        vec_plan, KCLAW__EVAL_STATUS__TIMEOUT, "did not finish", 4000, 0},
    {"too_much_shared", &vec_task,
        "extern \"C\" __global__ void mul(const float *x, const float *w, "
        "float *y, int n) {\n  extern __shared__ float s[];\n  int i = "
        "blockIdx.x * blockDim.x + threadIdx.x;\n  s[threadIdx.x] = x[i];\n  "
        "if (i < n) y[i] = s[threadIdx.x] * w[i];\n}\n",
        "{\"steps\":[{\"kernel\":\"mul\",\"grid\":[4096,1,1],\"block\":[256,1,"
        "1],\"shared_bytes\":300000,\"args\":[\"x\",\"w\",\"y\",{\"i32\":"
        "1048576}]}]}",
        KCLAW__EVAL_STATUS__PLAN_ERROR, "shared memory", 0, 0},
    {"compile_error", &vec_task,
        "extern \"C\" __global__ void mul(const float *x) { undeclared = 1; "
        "}\n",
        vec_plan, KCLAW__EVAL_STATUS__COMPILE_ERROR, "does not compile", 0, 0},
    {"bad_arg_count", &vec_task, vec_ref,
        "{\"steps\":[{\"kernel\":\"mul\",\"grid\":[4096,1,1],\"block\":[256,1,"
        "1],\"args\":[\"x\",\"w\",\"y\"]}]}",
        KCLAW__EVAL_STATUS__PLAN_ERROR, "3 arguments given, the kernel takes 4",
        0, 0},
    {"cublaslt_bias_relu", &mm_task,
        "extern \"C\" __global__ void unused() {}\n",
        "{\"steps\":[{\"matmul\":{\"a\":\"a\",\"b\":\"b\",\"d\":\"d\","
        "\"bias\":\"bias\",\"m\":256,\"n\":384,\"k\":512,"
        "\"epilogue\":\"bias_relu\"}}]}",
        KCLAW__EVAL_STATUS__OK, "correct", 0, 0},
    {"npy_reference", &npy_task, vec_good, vec_good_plan,
        KCLAW__EVAL_STATUS__OK, "correct", 0, 0},
    {"profile", &vec_task, vec_good, vec_good_plan, KCLAW__EVAL_STATUS__OK,
        "correct", 0, 1},
};

static Kclaw__EvalResult *
run(const char *src, const char *plan, Kclaw__TaskSpec *task,
    unsigned timeout_ms, int profile, unsigned iterations)
{
	Kclaw__EvalRequest req = KCLAW__EVAL_REQUEST__INIT;
	Kclaw__Candidate c = KCLAW__CANDIDATE__INIT;
	Kclaw__EvalOptions o = KCLAW__EVAL_OPTIONS__INIT;
	Kclaw__EvalResult *r = NULL;

	c.source = (char *)src;
	c.plan_json = (char *)plan;
	o.timeout_ms = timeout_ms ? timeout_ms : 60000;
	o.profile = profile;
	o.iterations = iterations;
	req.task = task;
	req.candidate = &c;
	req.options = &o;
	KT_OK(sbx_session_eval(sess, &req, 180000, &r));
	free(req.job_id);
	return r;
}

static int
has_text(const Kclaw__EvalResult *r, const char *want)
{
	return (r->message && strstr(r->message, want)) ||
	    (r->fault_name && strstr(r->fault_name, want)) ||
	    (r->mismatch && r->mismatch->note &&
	        strstr(r->mismatch->note, want));
}

static int
has_metric(const Kclaw__EvalResult *r, const char *name)
{
	for (size_t m = 0; m < r->n_metrics; m++)
		if (strcmp(r->metrics[m]->name, name) == 0)
			return 1;
	return 0;
}

static void
check_case(const gcase *gc)
{
	uint64_t t0 = kc_mono_ns();
	Kclaw__EvalResult *r, *after;
	int ok;
	char *json;

	r = run(gc->src, gc->plan, *gc->task, gc->timeout_ms, gc->profile, 20);
	ok = r->status == gc->want && has_text(r, gc->want_text);
	if (gc->want == KCLAW__EVAL_STATUS__OK)
		ok = ok && r->timing != NULL && r->timing->median_ms > 0;
	if (strcmp(gc->name, "half_output") == 0)
		ok = ok && r->mismatch && r->mismatch->nan_count > 0;
	if (strcmp(gc->name, "wrong") == 0)
		ok = ok && r->mismatch && r->mismatch->bad_count > 0;
	if (strcmp(gc->name, "correct") == 0)
		ok = ok && r->baseline != NULL && r->speedup > 0 &&
		    r->n_kernels == 1 && r->kernels[0]->registers > 0;
	if (gc->profile) {
		/* Activity records always; metrics when counters can be
		 * read, and a note either way. */
		ok = ok && r->n_activities > 0 && r->counters_note &&
		    *r->counters_note &&
		    (!r->counters_available ||
		        has_metric(r, "dram_throughput"));
		fprintf(stderr, "  counters: %s\n", r->counters_note);
		for (size_t m = 0; m < r->n_metrics; m++)
			fprintf(stderr, "  %s = %.4g %s\n", r->metrics[m]->name,
			    r->metrics[m]->value, r->metrics[m]->unit);
	}
	fprintf(stderr, "%-20s %-14s %s%s%s (%.0f ms)%s\n", gc->name,
	    sbx_status_name(r->status), r->fault_name ? r->fault_name : "",
	    r->fault_name && *r->fault_name ? " " : "",
	    r->message ? r->message : "", (double)(kc_mono_ns() - t0) / 1e6,
	    ok ? "" : "   <-- UNEXPECTED");
	if (gpu_log != NULL && (json = kc_pb_to_json_text(&r->base)) != NULL) {
		fprintf(gpu_log,
		    "{\"case\":\"%s\",\"pass\":%s,\"result\":%s}\n", gc->name,
		    ok ? "true" : "false", json);
		free(json);
	}
	if (!ok)
		failures++;
	kclaw__eval_result__free_unpacked(r, NULL);

	/* The sandbox keeps serving. */
	after = run(vec_good, vec_good_plan, vec_task, 0, 0, 5);
	if (after->status != KCLAW__EVAL_STATUS__OK) {
		fprintf(stderr, "  after %s: %s %s   <-- NOT SERVING\n",
		    gc->name, sbx_status_name(after->status), after->message);
		failures++;
	}
	kclaw__eval_result__free_unpacked(after, NULL);
}

static void
make_npy_task(void)
{
	char dir[512], path[600];
	kc_npy x = {0}, w = {0}, y = {0};
	uint64_t s = 12345;

	snprintf(dir, sizeof(dir), "%s/npy", root);
	KT_OK(kc_mkdirs(dir, 0700));
	x.dtype = w.dtype = y.dtype = KCLAW__DTYPE__F32;
	x.ndim = w.ndim = y.ndim = 1;
	x.shape[0] = w.shape[0] = y.shape[0] = N;
	x.count = w.count = y.count = N;
	x.elem_size = w.elem_size = y.elem_size = 4;
	for (int set = 0; set < 2; set++) {
		float *xd = malloc(N * 4), *wd = malloc(N * 4),
		      *yd = malloc(N * 4);
		KT_ASSERT(xd && wd && yd);
		for (int i = 0; i < N; i++) {
			s = s * 6364136223846793005ull + 1442695040888963407ull;
			xd[i] =
			    (float)((double)(s >> 11) / 9007199254740992.0 * 4 -
			        2);
			wd[i] = (float)(i % 13) * 0.25f - 1.5f;
			yd[i] = xd[i] * wd[i];
		}
		x.data = xd;
		w.data = wd;
		y.data = yd;
		snprintf(path, sizeof(path), "%s/x%d.npy", dir, set);
		KT_OK(kc_npy_write(path, &x));
		snprintf(path, sizeof(path), "%s/w%d.npy", dir, set);
		KT_OK(kc_npy_write(path, &w));
		snprintf(path, sizeof(path), "%s/y%d.npy", dir, set);
		KT_OK(kc_npy_write(path, &y));
		free(xd);
		free(wd);
		free(yd);
	}
	npy_task = make_task("npy",
	    "{\"name\":\"vec_npy\",\"tensors\":["
	    "{\"name\":\"x\",\"kind\":\"input\",\"dtype\":\"f32\",\"shape\":"
	    "[1048576]},"
	    "{\"name\":\"w\",\"kind\":\"parameter\",\"dtype\":\"f32\","
	    "\"shape\":[1048576]},"
	    "{\"name\":\"y\",\"kind\":\"output\",\"dtype\":\"f32\",\"shape\":"
	    "[1048576]}],"
	    "\"tolerance\":{\"atol\":1e-6,\"rtol\":1e-6,\"max_rel_norm\":1e-6},"
	    "\"reference\":{\"kind\":\"tensors\",\"baseline_ms\":1.0,\"sets\":["
	    "{\"seed\":1,\"inputs\":{\"x\":\"x0.npy\",\"w\":\"w0.npy\"},"
	    "\"expected\":{\"y\":\"y0.npy\"}},"
	    "{\"seed\":2,\"inputs\":{\"x\":\"x1.npy\",\"w\":\"w1.npy\"},"
	    "\"expected\":{\"y\":\"y1.npy\"}}]}}",
	    NULL, NULL);
}

int
main(void)
{
	sbx_client_opts co = {0};
	const char *log = getenv("KCLAW_GPU_LOG");
	const char *tmp = getenv("TMPDIR");

	snprintf(root, sizeof(root), "%s/kclaw-gpu-XXXXXX", tmp ? tmp : "/tmp");
	KT_ASSERT(mkdtemp(root) != NULL);
	if (log != NULL)
		gpu_log = fopen(log, "w");
	vec_task = make_task("vec", vec_json, vec_ref, vec_plan);
	mm_task = make_task("mm",
	    "{\"name\":\"mm\",\"tensors\":["
	    "{\"name\":\"a\",\"kind\":\"input\",\"dtype\":\"f32\",\"shape\":"
	    "[256,512],\"init\":{\"dist\":\"normal\",\"mean\":0,\"scale\":1}},"
	    "{\"name\":\"b\",\"kind\":\"parameter\",\"dtype\":\"f32\","
	    "\"shape\":[512,384],\"init\":{\"dist\":\"uniform\",\"low\":-1,"
	    "\"high\":1}},"
	    "{\"name\":\"bias\",\"kind\":\"parameter\",\"dtype\":\"f32\","
	    "\"shape\":[384],\"init\":{\"dist\":\"normal\",\"mean\":0,"
	    "\"scale\":1}},"
	    "{\"name\":\"d\",\"kind\":\"output\",\"dtype\":\"f32\",\"shape\":"
	    "[256,384]}],"
	    "\"tolerance\":{\"atol\":1e-2,\"rtol\":1e-3,\"max_rel_norm\":1e-4},"
	    "\"trials\":2,\"seed\":3,"
	    "\"reference\":{\"kind\":\"cuda\",\"source\":\"reference.cu\","
	    "\"plan\":\"reference.plan.json\"}}",
	    "extern \"C\" __global__ void mm(const float *a, const float *b, "
	    "const float *bias, float *d, int m, int n, int k) {\n"
	    "  int r = blockIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x;\n"
	    "  if (c >= n) return;\n  double s = 0;\n"
	    "  for (int j = 0; j < k; j++) s += (double)a[r * k + j] * b[j * n "
	    "+ c];\n"
	    "  float v = (float)s + bias[c];\n  d[r * n + c] = v > 0 ? v : "
	    "0;\n}\n",
	    "{\"steps\":[{\"kernel\":\"mm\",\"grid\":[3,256,1],\"block\":[128,"
	    "1,1],\"args\":[\"a\",\"b\",\"bias\",\"d\",{\"i32\":256},{\"i32\":"
	    "384},{\"i32\":512}]}]}");
	make_npy_task();

	KT_OK(sbx_session_open(&sess, &co));
	for (size_t i = 0; i < KC_ARRAY_LEN(cases); i++)
		check_case(&cases[i]);
	sbx_session_close(sess);
	if (gpu_log != NULL)
		fclose(gpu_log);
	kclaw__task_spec__free_unpacked(vec_task, NULL);
	kclaw__task_spec__free_unpacked(mm_task, NULL);
	kclaw__task_spec__free_unpacked(npy_task, NULL);
	if (failures > 0)
		KT_FAIL("%d case(s) did not get the expected status", failures);
	fprintf(stderr, "all %zu GPU cases as expected\n", KC_ARRAY_LEN(cases));
	return 0;
}
