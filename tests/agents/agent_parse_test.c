/*
 * agent_parse_test.c - reply parsing, the candidate contract checks and the
 * Feature Extractor's rules on known sources, without any LLM.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "kc_err.h"
#include "kc_test.h"

static Kclaw__TensorSpec ta, tb, tc;
static Kclaw__TensorSpec *tensors[] = {&ta, &tb, &tc};
static int64_t shape[] = {64, 64};
static Kclaw__TaskSpec task = KCLAW__TASK_SPEC__INIT;

static void
setup(void)
{
	Kclaw__TensorSpec *t[] = {&ta, &tb, &tc};
	const char *names[] = {"A", "B", "C"};
	int i;

	for (i = 0; i < 3; i++) {
		kclaw__tensor_spec__init(t[i]);
		t[i]->name = (char *)names[i];
		t[i]->kind = i < 2 ? KCLAW__TENSOR_KIND__INPUT
		                   : KCLAW__TENSOR_KIND__OUTPUT;
		t[i]->dtype = KCLAW__DTYPE__F32;
		t[i]->n_shape = 2;
		t[i]->shape = shape;
	}
	task.name = "matmul";
	task.n_tensors = 3;
	task.tensors = tensors;
}

static void
test_blocks(void)
{
	const char *text = "intro\n```CUDA\ncode 1\n```\ntext\n   ```json\n"
	                   "{\"a\": 1}\n```\n```\nplain\n```\n";
	agent_block *b;
	kc_str err = {0};
	size_t n;

	KT_OK(agent_parse_blocks(text, &b, &n, &err));
	KT_EQ_INT(n, 3);
	KT_EQ_STR(b[0].lang, "cuda");
	KT_EQ_STR(b[0].body, "code 1\n");
	KT_EQ_INT(b[0].line, 2);
	KT_EQ_STR(b[1].lang, "json");
	KT_EQ_STR(b[1].body, "{\"a\": 1}\n");
	KT_EQ_STR(b[2].lang, "");
	agent_blocks_free(b, n);

	KT_EQ_INT(
	    agent_parse_blocks("a\n```cuda\nx\n", &b, &n, &err), KC_EINVAL);
	KT_CONTAINS(err.buf, "opened at line 2 is never closed");
	kc_str_free(&err);
}

static void
test_thinking(void)
{
	const char *t = "\n<think>draft:\n```cuda\nbad\n```\n</think>\nanswer";

	KT_EQ_STR(agent_reply_body(t), "\nanswer");
	/* Reasoning that never ends holds no answer. */
	KT_EQ_STR(agent_reply_body("<think>never closed"), "");
	KT_EQ_STR(agent_reply_body("plain"), "plain");
}

static void
test_json(void)
{
	kc_str err = {0};
	cJSON *o;

	KT_OK(agent_parse_json("  {\"x\": 2}  ", &o, &err));
	KT_EQ_INT(cJSON_GetObjectItem(o, "x")->valueint, 2);
	cJSON_Delete(o);
	KT_OK(agent_parse_json("here:\n```json\n{\"x\": 3}\n```", &o, &err));
	KT_EQ_INT(cJSON_GetObjectItem(o, "x")->valueint, 3);
	cJSON_Delete(o);
	KT_EQ_INT(
	    agent_parse_json("```json\n[1, 2]\n```", &o, &err), KC_EINVAL);
	KT_CONTAINS(err.buf, "must be a JSON object");
	err.len = 0;
	KT_EQ_INT(agent_parse_json("```json\n{\"x\": 'a'}\n```", &o, &err),
	    KC_EINVAL);
	KT_CONTAINS(err.buf, "near ''a'}");
	err.len = 0;
	KT_EQ_INT(agent_parse_json("no json at all", &o, &err), KC_EINVAL);
	KT_CONTAINS(err.buf, "no ```json block");
	kc_str_free(&err);
}

#define MM_SRC                                                                 \
	"#include <cuda_fp16.h>\n"                                             \
	"// a __global__ in a comment: extern \"C\" __global__ void fake()\n"  \
	"#define TILE 16\n"                                                    \
	"extern \"C\" {\n"                                                     \
	"__global__ void __launch_bounds__(256) mm(const float *__restrict__ " \
	"A, const float *__restrict__ B, float *C, int n)\n"                   \
	"{\n"                                                                  \
	"\t__shared__ float As[TILE][TILE];\n"                                 \
	"\t__shared__ float Bs[TILE][TILE];\n"                                 \
	"\tint row = blockIdx.y * TILE + threadIdx.y;\n"                       \
	"\tint col = blockIdx.x * TILE + threadIdx.x;\n"                       \
	"\tfloat acc = 0.f;\n"                                                 \
	"\tfor (int k0 = 0; k0 < n; k0 += TILE) {\n"                           \
	"\t\tAs[threadIdx.y][threadIdx.x] = A[row * n + k0 + threadIdx.x];\n"  \
	"\t\tBs[threadIdx.y][threadIdx.x] = B[(k0 + threadIdx.y) * n + "       \
	"col];\n"                                                              \
	"\t\t__syncthreads();\n"                                               \
	"#pragma unroll\n"                                                     \
	"\t\tfor (int k = 0; k < TILE; k++)\n"                                 \
	"\t\t\tacc += As[threadIdx.y][k] * Bs[k][threadIdx.x];\n"              \
	"\t\t__syncthreads();\n"                                               \
	"\t}\n"                                                                \
	"\tif (row < n && col < n)\n"                                          \
	"\t\tC[row * n + col] = acc;\n"                                        \
	"}\n"                                                                  \
	"}\n"                                                                  \
	"extern \"C\" __global__ void scale4(float4 *c, float s)\n"            \
	"{\n"                                                                  \
	"\tfloat4 v = c[threadIdx.x];\n"                                       \
	"\tv.x *= s;\n"                                                        \
	"\tc[threadIdx.x] = v;\n"                                              \
	"\tfloat w = __shfl_down_sync(0xffffffff, v.x, 1);\n"                  \
	"\tif (w > 0.f) atomicAdd(&c[0].y, w);\n"                              \
	"}\n"
#define MM_PLAN                                                                \
	"{\"scratch\": [{\"name\": \"tmp\", \"bytes\": 4096}], \"steps\": "    \
	"[{\"kernel\": \"mm\", \"grid\": [4, 4, 1], \"block\": [16, 16, 1], "  \
	"\"args\": [\"A\", \"B\", \"C\", {\"i32\": 64}]}, {\"kernel\": "       \
	"\"scale4\", \"grid\": [1], \"block\": [256], \"shared_bytes\": 128, " \
	"\"args\": [\"C\", {\"f32\": 0.5}]}]}"

static double
feat(Kclaw__Feature **f, size_t n, const char *name)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (strcmp(f[i]->name, name) == 0) {
			KT_EQ_STR(f[i]->source, "rule");
			return f[i]->value;
		}
	KT_FAIL("no feature %s", name);
	return -1;
}

static void
test_features(void)
{
	Kclaw__EvalResult e = KCLAW__EVAL_RESULT__INIT;
	Kclaw__KernelResources k1 = KCLAW__KERNEL_RESOURCES__INIT;
	Kclaw__KernelResources k2 = KCLAW__KERNEL_RESOURCES__INIT;
	Kclaw__KernelResources *ks[] = {&k1, &k2};
	Kclaw__Feature **f = NULL;
	size_t n = 0, i;
	char **names;

	KT_OK(agent_kernel_names(MM_SRC, &names, &n));
	KT_EQ_INT(n, 2);
	KT_EQ_STR(names[0], "mm");
	KT_EQ_STR(names[1], "scale4");
	agent_names_free(names, n);

	k1.registers = 40;
	k1.spill_bytes = 8;
	k1.occupancy = 0.5;
	k2.registers = 20;
	k2.occupancy = 1.0;
	e.kernels = ks;
	e.n_kernels = 2;
	n = 0;
	KT_OK(agent_rule_features(MM_SRC, MM_PLAN, &e, &f, &n));
	KT_ASSERT(feat(f, n, "kernels") == 2);
	KT_ASSERT(feat(f, n, "smem_arrays") == 2);
	KT_ASSERT(feat(f, n, "smem_tiling") == 1);
	KT_ASSERT(feat(f, n, "barriers") == 2);
	/* k0 < n walks K; k < TILE walks a tile: only the first counts. */
	KT_ASSERT(feat(f, n, "k_loops") == 1);
	KT_ASSERT(feat(f, n, "unrolled_loops") == 1);
	KT_ASSERT(feat(f, n, "vector_loads") == 1);
	KT_ASSERT(feat(f, n, "vector_stores") == 1);
	KT_ASSERT(feat(f, n, "warp_shuffles") == 1);
	KT_ASSERT(feat(f, n, "atomics") == 1);
	KT_ASSERT(feat(f, n, "bounds_checks") == 2);
	KT_ASSERT(feat(f, n, "tensor_core") == 0);
	KT_ASSERT(feat(f, n, "readonly_hints") == 2);
	KT_ASSERT(feat(f, n, "launch_steps") == 2);
	KT_ASSERT(feat(f, n, "scratch_bytes") == 4096);
	KT_ASSERT(feat(f, n, "max_block_threads") == 256);
	KT_ASSERT(feat(f, n, "max_grid_blocks") == 16);
	KT_ASSERT(feat(f, n, "dynamic_smem_bytes") == 128);
	KT_ASSERT(feat(f, n, "max_registers") == 40);
	KT_ASSERT(feat(f, n, "spill_bytes") == 8);
	KT_ASSERT(feat(f, n, "min_occupancy") == 0.5);
	for (i = 0; i < n; i++)
		kclaw__feature__free_unpacked(f[i], NULL);
	free(f);

	/* Tensor cores and no tiling. */
	f = NULL;
	n = 0;
	KT_OK(agent_rule_features("#include <mma.h>\nusing namespace nvcuda;\n"
	                          "extern \"C\" __global__ void t(half *a) {\n"
	                          " wmma::fragment<wmma::matrix_a, 16, 16, 16, "
	                          "half, wmma::row_major> fa;\n"
	                          " wmma::load_matrix_sync(fa, a, 16);\n}\n",
	    NULL, NULL, &f, &n));
	KT_ASSERT(feat(f, n, "tensor_core") >= 2);
	KT_ASSERT(feat(f, n, "smem_tiling") == 0);
	KT_ASSERT(feat(f, n, "half_precision") == 1);
	for (i = 0; i < n; i++)
		kclaw__feature__free_unpacked(f[i], NULL);
	free(f);
}

static void
expect_bad(const char *src, const char *plan, const char *msg)
{
	kc_str err = {0};

	KT_EQ_INT(agent_check_candidate(&task, src, plan, &err), KC_EINVAL);
	KT_CONTAINS(err.buf, msg);
	kc_str_free(&err);
}

static void
test_contract(void)
{
	kc_str err = {0};

	KT_OK(agent_check_candidate(&task, MM_SRC, MM_PLAN, &err));
	expect_bad(
	    "#include \"mine.h\"\n" MM_SRC, MM_PLAN, "only toolkit headers");
	expect_bad(
	    "#include <cuda_runtime.h>\n" MM_SRC, MM_PLAN, "host header");
	expect_bad(MM_SRC "int main() { return 0; }\n", MM_PLAN, "host code");
	expect_bad(MM_SRC "void launch() { mm<<<1, 1>>>(0, 0, 0, 1); }\n",
	    MM_PLAN, "'<<<'");
	expect_bad("__device__ int f() { return 1; }\n", MM_PLAN,
	    "no __global__ kernel");
	expect_bad("template <int T> __global__ void mm(float *C) {}\n",
	    MM_PLAN, "'mm' is not extern \"C\"");
	expect_bad(MM_SRC,
	    "{\"steps\": [{\"kernel\": \"mm\", \"grid\": [1], \"block\": [64, "
	    "32], \"args\": [\"C\"]}]}",
	    "2048 threads");
	expect_bad(MM_SRC,
	    "{\"steps\": [{\"kernel\": \"mm\", \"grid\": [0], \"block\": [64], "
	    "\"args\": [\"C\"]}]}",
	    "grid[0] must be a positive integer");
	expect_bad(MM_SRC,
	    "{\"steps\": [{\"kernel\": \"mm\", \"block\": [64], \"args\": "
	    "[\"C\"]}]}",
	    "'grid' must be a positive integer or an array");
	expect_bad(MM_SRC,
	    "{\"steps\": [{\"kernel\": \"mm\", \"grid\": [1], \"block\": [64], "
	    "\"args\": [\"C\", {\"int\": 3}]}]}",
	    "typed scalar");
	expect_bad(MM_SRC,
	    "{\"steps\": [{\"kernel\": \"mm\", \"grid\": [1], \"block\": [64], "
	    "\"args\": [\"A\"]}]}",
	    "output 'C' is never passed");
	expect_bad(MM_SRC, "{\"steps\": []}", "'steps' must be a non-empty");
	/* A library step is left to the sandbox (docs/plan.md). */
	KT_OK(agent_check_candidate(&task, MM_SRC,
	    "{\"steps\": [{\"matmul\": {\"a\": \"A\", \"b\": \"B\", \"d\": "
	    "\"C\"}}]}",
	    &err));
	kc_str_free(&err);
}

static void
test_render(void)
{
	agent_vars v = {0};
	char *out;

	KT_OK(agent_vars_set(&v, "a", "1"));
	KT_OK(agent_vars_set(&v, "e", ""));
	KT_OK(agent_vars_set(&v, "a", "2"));
	KT_OK(agent_render(
	    "x{{a}}y{{#e}}E{{/e}}{{^e}}N{{ a }}{{/e}}", &v, "t", &out));
	KT_EQ_STR(out, "x2yN2");
	free(out);
	KT_EQ_INT(agent_render("{{#a}}open", &v, "t.md", &out), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "t.md:1: section {{#a}} is never closed");
	KT_EQ_INT(agent_render("\n{{b}}", &v, "t.md", &out), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "t.md:2: unknown variable 'b'");
	KT_EQ_INT(agent_render("{{a", &v, "t.md", &out), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "never closed with '}}'");
	agent_vars_free(&v);
}

/* ---------------------------------------- replies as models write them */

#define K1_SRC "extern \"C\" __global__ void k1(float *C)\n{\n\tC[0] = 1;\n}\n"
#define K2_SRC                                                                 \
	"extern \"C\" __global__ void k2(float *C)\n{\n\tC[threadIdx.x] = "    \
	"2;\n}\n"
#define K1_PLAN                                                                \
	"{\"steps\": [{\"kernel\": \"k1\", \"grid\": 1, \"block\": 1, "        \
	"\"args\": [\"C\"]}]}"
#define K2_PLAN                                                                \
	"{\"steps\": [{\"kernel\": \"k2\", \"grid\": [1], \"block\": 64, "     \
	"\"args\": [\"C\"]}]}"
#define CAND(src, plan) "```cuda\n" src "```\n```json\n" plan "\n```\n"

static size_t
parse(const char *text, size_t max, Kclaw__Candidate ***c, int *rv)
{
	kc_str err = {0};
	size_t n = 0;

	*rv = agent_parse_candidates(&task, text, max, c, &n, &err);
	kc_str_free(&err);
	return n;
}

static void
free_cands(Kclaw__Candidate **c, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		kclaw__candidate__free_unpacked(c[i], NULL);
	free(c);
}

static void
test_thinking_conventions(void)
{
	/* Only the closing tag: the template opened the reasoning. */
	KT_EQ_STR(agent_reply_body("draft ```cuda\nbad\n```\n</think>\nanswer"),
	    "\nanswer");
	KT_EQ_STR(
	    agent_reply_body("<think>a</think>mid<think>b</think>end"), "end");
	KT_EQ_STR(agent_reply_body("<thinking>x</thinking>y"), "y");
	KT_EQ_STR(agent_reply_body("  <think>cut off ```cuda\nk\n```"), "");
}

/* A single integer grid or block is a 1-D launch (docs/plan.md). */
static void
test_integer_dims(void)
{
	kc_str err = {0};

	KT_OK(agent_check_candidate(&task, K1_SRC, K1_PLAN, &err));
	KT_OK(agent_check_candidate(&task, K2_SRC, K2_PLAN, &err));
	expect_bad(K1_SRC,
	    "{\"steps\": [{\"kernel\": \"k1\", \"grid\": 0, \"block\": 1, "
	    "\"args\": [\"C\"]}]}",
	    "'grid' must be a positive integer");
	expect_bad(K1_SRC,
	    "{\"steps\": [{\"kernel\": \"k1\", \"grid\": 1, \"block\": 2048, "
	    "\"args\": [\"C\"]}]}",
	    "more than the 1024");
	expect_bad(K1_SRC,
	    "{\"steps\": [{\"kernel\": \"k1\", \"grid\": 1.5, \"block\": 1, "
	    "\"args\": [\"C\"]}]}",
	    "'grid' must be a positive integer");
	/* Tunables: the default configuration is checked like any plan. */
	KT_OK(agent_check_candidate(&task, K1_SRC,
	    "{\"tunables\": {\"B\": [128, 256]}, \"steps\": [{\"kernel\": "
	    "\"k1\", \"grid\": \"4096 / $B\", \"block\": \"$B\", "
	    "\"args\": [\"C\"]}]}",
	    &err));
	expect_bad(K1_SRC,
	    "{\"tunables\": {\"B\": [2048]}, \"steps\": [{\"kernel\": "
	    "\"k1\", \"grid\": 1, \"block\": \"$B\", \"args\": [\"C\"]}]}",
	    "more than the 1024");
	expect_bad(K1_SRC,
	    "{\"tunables\": {\"B\": [1]}, \"steps\": [{\"kernel\": "
	    "\"k1\", \"grid\": \"$C\", \"block\": 1, \"args\": [\"C\"]}]}",
	    "unknown tunable");
	kc_str_free(&err);
}

/* Fences indented inside a list item; the indentation is not code. */
static void
test_indented_fences(void)
{
	static const char *text =
	    "1. The kernel:\n"
	    "    ```cuda\n"
	    "    extern \"C\" __global__ void k1(float *C)\n"
	    "    {\n"
	    "    \tC[0] = 1;\n"
	    "    }\n"
	    "    ```\n"
	    "2. Its plan:\n"
	    "    ```json\n"
	    "    " K1_PLAN "\n"
	    "    ```\n";
	Kclaw__Candidate **c;
	size_t n;
	int rv;

	n = parse(text, 1, &c, &rv);
	KT_OK(rv);
	KT_EQ_INT(n, 1);
	KT_EQ_STR(c[0]->source, K1_SRC);
	KT_EQ_STR(c[0]->plan_json, K1_PLAN);
	free_cands(c, n);
}

/* A short snippet quoted in the prose before the full source is not the
 * candidate, and neither is a first draft: the last complete pair is. */
static void
test_last_code_block_wins(void)
{
	Kclaw__Candidate **c;
	size_t n;
	int rv;

	n = parse("The key line is\n```cuda\nC[0] = 1;\n```\nso:\n" CAND(
	              K1_SRC, K1_PLAN),
	    1, &c, &rv);
	KT_OK(rv);
	KT_EQ_INT(n, 1);
	KT_EQ_STR(c[0]->source, K1_SRC);
	free_cands(c, n);

	n = parse(
	    "Draft:\n" CAND(K1_SRC, K1_PLAN) "Better:\n" CAND(K2_SRC, K2_PLAN),
	    1, &c, &rv);
	KT_OK(rv);
	KT_EQ_INT(n, 1);
	KT_EQ_STR(c[0]->source, K2_SRC);
	free_cands(c, n);

	/* Seeds: the format's example echoed first does not take a place. */
	n = parse("Format:\n" CAND(K1_SRC, K1_PLAN) "Seed 1:\n" CAND(
	              K2_SRC, K2_PLAN) "Seed 2:\n" CAND(K1_SRC, K1_PLAN),
	    2, &c, &rv);
	KT_OK(rv);
	KT_EQ_INT(n, 2);
	KT_EQ_STR(c[0]->source, K2_SRC);
	KT_EQ_STR(c[1]->source, K1_SRC);
	free_cands(c, n);

	/* A block without a language that holds a kernel is code. */
	n = parse(
	    "```\n" K1_SRC "```\n```json\n" K1_PLAN "\n```\n", 1, &c, &rv);
	KT_OK(rv);
	KT_EQ_INT(n, 1);
	free_cands(c, n);
}

/* An echoed format example before the real plan does not win: the last
 * ```json block that parses does. */
static void
test_last_json_wins(void)
{
	kc_str err = {0};
	cJSON *o;

	KT_OK(agent_parse_json(
	    "The format is\n```json\n{\"method\": \"<name>\", \"steps\": "
	    "[\"...\"]}\n```\nMy plan:\n```json\n{\"method\": \"real\"}\n```\n",
	    &o, &err));
	KT_EQ_STR(cJSON_GetObjectItem(o, "method")->valuestring, "real");
	cJSON_Delete(o);
	KT_OK(agent_parse_json(
	    "```json\n{\"x\": 1}\n```\nand\n```json\n{broken\n```\n", &o,
	    &err));
	KT_EQ_INT(cJSON_GetObjectItem(o, "x")->valueint, 1);
	KT_ASSERT(err.len == 0);
	cJSON_Delete(o);
	KT_EQ_INT(
	    agent_parse_json("```json\n{a\n```\n```json\n{b,\n```\n", &o, &err),
	    KC_EINVAL);
	KT_CONTAINS(err.buf, "block at line 4");
	kc_str_free(&err);
}

int
main(void)
{
	setup();
	KT_RUN(test_blocks);
	KT_RUN(test_thinking);
	KT_RUN(test_json);
	KT_RUN(test_features);
	KT_RUN(test_contract);
	KT_RUN(test_render);
	KT_RUN(test_thinking_conventions);
	KT_RUN(test_integer_dims);
	KT_RUN(test_indented_fences);
	KT_RUN(test_last_code_block_wins);
	KT_RUN(test_last_json_wins);
	return 0;
}
