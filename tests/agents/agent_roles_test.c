/*
 * agent_roles_test.c - every role through the runtime and the real HTTP
 * path against the scripted test server: prompts rendered from the template
 * files, replies validated into AgentReplys, re-asks with the parse error
 * (no code block, unclosed block, invalid plan JSON, unknown kernel, unknown
 * method), the bound on re-asks, LLM failures, and replay of a recording
 * giving a byte-identical reply.
 */
#include <protobuf-c/protobuf-c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "agent.h"
#include "agent_testlib.h"
#include "api.h"
#include "kc_err.h"
#include "kc_test.h"
#include "kc_util.h"

static kt_llm_server srv;
static char prompts[512];

#define ADD_SRC                                                                \
	"extern \"C\" __global__ void add(const float *x, const float *y, "    \
	"float *out, int n)\n{\n\tint i = blockIdx.x * blockDim.x + "          \
	"threadIdx.x;\n\tif (i < n)\n\t\tout[i] = x[i] + y[i];\n}\n"
#define ADD_PLAN                                                               \
	"{\"steps\": [{\"kernel\": \"add\", \"grid\": [4, 1, 1], \"block\": "  \
	"[256, 1, 1], \"args\": [\"x\", \"y\", \"out\", {\"i32\": 1024}]}]}"
#define ADD_REPLY                                                              \
	"### Candidate 1: simple\n```cuda\n" ADD_SRC "```\n```json\n" ADD_PLAN \
	"\n```\n"
#define ADD4_SRC                                                               \
	"extern \"C\" __global__ void add4(const float4 *x, const float4 *y, " \
	"float4 *out, int n)\n{\n\tint i = blockIdx.x * blockDim.x + "         \
	"threadIdx.x;\n\tif (i < n) {\n\t\tfloat4 a = x[i];\n\t\tfloat4 b = "  \
	"y[i];\n\t\tout[i] = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, "    \
	"a.w + b.w);\n\t}\n}\n"
#define ADD4_PLAN                                                              \
	"{\"steps\": [{\"kernel\": \"add4\", \"grid\": [1, 1, 1], \"block\": " \
	"[256, 1, 1], \"args\": [\"x\", \"y\", \"out\", {\"i32\": 256}]}]}"
#define ADD4_REPLY                                                             \
	"### Candidate 2: float4\n```cuda\n" ADD4_SRC                          \
	"```\n```json\n" ADD4_PLAN "\n```\n"

/* ---- a task and jobs, built as the orchestrator would send them ---- */

static Kclaw__TensorSpec tx, ty, tout;
static Kclaw__TensorSpec *tensors[] = {&tx, &ty, &tout};
static int64_t shape[] = {1024};
static Kclaw__Tolerance tol = KCLAW__TOLERANCE__INIT;
static Kclaw__Candidate ref = KCLAW__CANDIDATE__INIT;
static Kclaw__Reference reference = KCLAW__REFERENCE__INIT;
static Kclaw__TaskSpec task = KCLAW__TASK_SPEC__INIT;
static Kclaw__Candidate base = KCLAW__CANDIDATE__INIT;
static Kclaw__EvalResult base_eval = KCLAW__EVAL_RESULT__INIT;
static Kclaw__Timing base_timing = KCLAW__TIMING__INIT;

static void
tensor(Kclaw__TensorSpec *t, const char *name, Kclaw__TensorKind kind)
{
	kclaw__tensor_spec__init(t);
	t->name = (char *)name;
	t->kind = kind;
	t->dtype = KCLAW__DTYPE__F32;
	t->n_shape = 1;
	t->shape = shape;
}

static void
setup_task(void)
{
	tensor(&tx, "x", KCLAW__TENSOR_KIND__INPUT);
	tensor(&ty, "y", KCLAW__TENSOR_KIND__INPUT);
	tensor(&tout, "out", KCLAW__TENSOR_KIND__OUTPUT);
	tol.atol = 1e-5;
	tol.rtol = 1e-5;
	ref.source = ADD_SRC;
	ref.plan_json = ADD_PLAN;
	reference.kind = KCLAW__REFERENCE__KIND__CUDA;
	reference.cuda = &ref;
	task.name = "vec_add";
	task.description = "out = x + y for 1024 floats";
	task.n_tensors = 3;
	task.tensors = tensors;
	task.tolerance = &tol;
	task.reference = &reference;
	base.id = "cbase";
	base.source = ADD_SRC;
	base.plan_json = ADD_PLAN;
	base.method = "seed";
	base_timing.median_ms = 0.0123;
	base_timing.iterations = 50;
	base_eval.status = KCLAW__EVAL_STATUS__OK;
	base_eval.timing = &base_timing;
	base_eval.speedup = 1.0;
}

static Kclaw__AgentJob
job_for(Kclaw__Role role, const char *key)
{
	Kclaw__AgentJob j = KCLAW__AGENT_JOB__INIT;

	j.job_id = "job-1";
	j.task_id = "t-1";
	j.role = role;
	j.task = &task;
	j.replay_key = (char *)key;
	return j;
}

static llm_client *
http_client(void)
{
	llm_client *c;
	llm_config cfg;

	kt_llm_config(&cfg, &srv);
	KT_OK(llm_http_open(&c, &cfg));
	return c;
}

static Kclaw__AgentReply *
run(llm_client *c, const Kclaw__AgentJob *job)
{
	agent_ctx ctx = {.llm = c, .prompts_dir = prompts, .max_asks = 3};
	Kclaw__AgentReply *r = NULL;

	KT_OK(agent_handle(&ctx, job, &r));
	KT_ASSERT(r != NULL);
	KT_EQ_STR(r->job_id, job->job_id);
	return r;
}

/* The content of message i of logged request n. */
static const char *
logged_msg(cJSON *log, int n, int i)
{
	cJSON *body = cJSON_GetObjectItem(cJSON_GetArrayItem(log, n), "body");
	cJSON *m = cJSON_GetArrayItem(cJSON_GetObjectItem(body, "messages"), i);

	KT_ASSERT(m != NULL);
	return cJSON_GetObjectItem(m, "content")->valuestring;
}

static int
logged_count(void)
{
	cJSON *log = kt_llm_log(&srv);
	int n = cJSON_GetArraySize(log);

	cJSON_Delete(log);
	return n;
}

/* ------------------------------------------------------------- tests */

static void
test_generator(void)
{
	llm_client *c = http_client();
	Kclaw__AgentJob j =
	    job_for(KCLAW__ROLE__GENERATOR, "vec_add/generator/0");
	Kclaw__AgentReply *r;
	cJSON *log;

	j.count = 2;
	kt_llm_script(
	    &srv, kt_reply("Two seeds.\n" ADD_REPLY ADD4_REPLY), NULL);
	r = run(c, &j);
	KT_ASSERT(r->ok);
	KT_EQ_INT(r->role, KCLAW__ROLE__GENERATOR);
	KT_EQ_INT(r->n_candidates, 2);
	KT_EQ_STR(r->candidates[0]->source, ADD_SRC);
	KT_EQ_STR(r->candidates[0]->plan_json, ADD_PLAN);
	KT_EQ_STR(r->candidates[1]->source, ADD4_SRC);
	KT_EQ_STR(r->candidates[0]->origin, "generator");
	KT_ASSERT(strcmp(r->candidates[0]->id, r->candidates[1]->id) != 0);
	KT_EQ_INT(r->usage->calls, 1);
	KT_EQ_INT(r->usage->prompt_tokens, 100);
	KT_ASSERT(r->usage->completion_tokens > 0);
	KT_ASSERT(r->usage->latency_ms > 0);
	KT_EQ_STR(r->exchange_id, "chatcmpl-test-0");

	log = kt_llm_log(&srv);
	KT_EQ_INT(cJSON_GetArraySize(log), 1);
	KT_CONTAINS(logged_msg(log, 0, 0), "You are the Generator of kclaw");
	KT_CONTAINS(logged_msg(log, 0, 0), "extern \"C\" __global__");
	KT_CONTAINS(logged_msg(log, 0, 0), "docs/plan.md");
	/* The contract shows the matmul step and what the sandbox checks. */
	KT_CONTAINS(logged_msg(log, 0, 0), "{\"matmul\": {");
	KT_CONTAINS(
	    logged_msg(log, 0, 0), "fresh inputs of a new distribution");
	KT_CONTAINS(logged_msg(log, 0, 0), "- out: output f32 [1024]");
	KT_CONTAINS(logged_msg(log, 0, 1), "# Task: vec_add");
	KT_CONTAINS(logged_msg(log, 0, 1), "Write 2 candidate");
	KT_CONTAINS(logged_msg(log, 0, 1), "A CUDA reference");
	KT_ASSERT(strstr(logged_msg(log, 0, 1), "{{") == NULL);
	cJSON_Delete(log);
	kclaw__agent_reply__free_unpacked(r, NULL);
	llm_close(c);
}

/* Re-asks: the second request holds the bad reply and the parse error. */
static void
expect_reask(const char *bad, const char *error_part)
{
	llm_client *c = http_client();
	Kclaw__AgentJob j =
	    job_for(KCLAW__ROLE__GENERATOR, "vec_add/generator/1");
	Kclaw__AgentReply *r;
	cJSON *log;

	kt_llm_script(&srv, kt_reply(bad), kt_reply(ADD_REPLY), NULL);
	r = run(c, &j);
	KT_ASSERT(r->ok);
	KT_EQ_INT(r->n_candidates, 1);
	KT_EQ_INT(r->usage->calls, 2);
	KT_EQ_STR(r->exchange_id, "chatcmpl-test-1");
	log = kt_llm_log(&srv);
	KT_EQ_INT(cJSON_GetArraySize(log), 2);
	KT_EQ_STR(logged_msg(log, 1, 2), bad);
	KT_CONTAINS(logged_msg(log, 1, 3), "could not be used");
	KT_CONTAINS(logged_msg(log, 1, 3), error_part);
	cJSON_Delete(log);
	kclaw__agent_reply__free_unpacked(r, NULL);
	llm_close(c);
}

static void
test_reasks(void)
{
	expect_reask(
	    "I would tile it in shared memory.", "no ```cuda code block found");
	expect_reask("```cuda\n" ADD_SRC, "is never closed");
	expect_reask("```cuda\n" ADD_SRC
	             "```\n```json\n{\"steps\": [{\"kernel\": "
	             "\"add\",]}\n```\n",
	    "not valid JSON");
	expect_reask("```cuda\n" ADD_SRC
	             "```\n```json\n{\"steps\": [{\"kernel\": "
	             "\"add2\", \"grid\": [1], \"block\": [256], \"args\": "
	             "[\"x\", \"y\", \"out\"]}]}\n```\n",
	    "kernel 'add2', which the source does not define");
	expect_reask("```cuda\n" ADD_SRC "```\n", "has no ```json launch plan");
	expect_reask(
	    "```cuda\n__global__ void add(float *out) {}\n```\n```json\n"
	    "{\"steps\": [{\"kernel\": \"add\", \"grid\": [1], "
	    "\"block\": [1], \"args\": [\"out\"]}]}\n```\n",
	    "is not extern \"C\"");
	expect_reask("```cuda\n#include <stdio.h>\n" ADD_SRC
	             "```\n```json\n" ADD_PLAN "\n```\n",
	    "host header");
	expect_reask("```cuda\n" ADD_SRC
	             "```\n```json\n{\"steps\": [{\"kernel\": "
	             "\"add\", \"grid\": [4], \"block\": [256], \"args\": "
	             "[\"x\", \"y\", \"z\"]}]}\n```\n",
	    "names 'z'");
}

static void
test_reask_bounded(void)
{
	llm_client *c = http_client();
	Kclaw__AgentJob j =
	    job_for(KCLAW__ROLE__GENERATOR, "vec_add/generator/2");
	Kclaw__AgentReply *r;

	kt_llm_script(&srv, kt_reply("no code 1"), kt_reply("no code 2"),
	    kt_reply("no code 3"), kt_reply(ADD_REPLY), NULL);
	r = run(c, &j);
	KT_ASSERT(!r->ok);
	KT_CONTAINS(r->error, "not usable 3 times");
	KT_CONTAINS(r->error, "no ```cuda code block");
	KT_EQ_INT(r->usage->calls, 3);
	KT_EQ_INT(r->n_candidates, 0);
	KT_EQ_INT(logged_count(), 3);
	kclaw__agent_reply__free_unpacked(r, NULL);

	/* Fewer seeds than asked: re-asked, and accepted on the last ask. */
	j.count = 2;
	kt_llm_script(&srv, kt_reply(ADD_REPLY), kt_reply(ADD_REPLY),
	    kt_reply(ADD4_REPLY), NULL);
	r = run(c, &j);
	KT_ASSERT(r->ok);
	KT_EQ_INT(r->usage->calls, 3);
	KT_EQ_INT(r->n_candidates, 1);
	KT_EQ_STR(r->candidates[0]->source, ADD4_SRC);
	kclaw__agent_reply__free_unpacked(r, NULL);
	llm_close(c);
}

static void
test_llm_failure(void)
{
	llm_client *c = http_client();
	Kclaw__AgentJob j = job_for(KCLAW__ROLE__PLANNER, "vec_add/planner/0");
	Kclaw__AgentReply *r;

	j.base_kernel = &base;
	kt_llm_script(&srv, kt_status(500, NULL), kt_status(500, NULL),
	    kt_status(500, NULL), NULL);
	r = run(c, &j);
	KT_ASSERT(!r->ok);
	KT_CONTAINS(r->error, "the LLM call failed");
	KT_CONTAINS(r->error, "after 3 tries");
	/* Three 500s: a request can cause those, so no outage. */
	KT_ASSERT(!r->model_unavailable);
	KT_ASSERT(r->plan == NULL);
	kclaw__agent_reply__free_unpacked(r, NULL);

	/* A job without what its role needs fails before any LLM call. */
	j = job_for(KCLAW__ROLE__OPTIMIZER, "vec_add/optimizer/0");
	j.base_kernel = &base;
	kt_llm_script(&srv, kt_reply(ADD_REPLY), NULL);
	r = run(c, &j);
	KT_ASSERT(!r->ok);
	KT_CONTAINS(r->error, "has no plan");
	KT_EQ_INT(logged_count(), 0);
	kclaw__agent_reply__free_unpacked(r, NULL);
	llm_close(c);
}

static void
test_feature(void)
{
	llm_client *c = http_client();
	Kclaw__AgentJob j = job_for(KCLAW__ROLE__FEATURE, "vec_add/feature/0");
	Kclaw__AgentReply *r;
	size_t i;
	int seen_rule = 0, seen_llm = 0;
	cJSON *log;

	j.base_kernel = &base;
	j.base_eval = &base_eval;
	kt_llm_script(&srv,
	    kt_reply("```json\n{\"features\": [{\"name\": \"coalescing\", "
	             "\"value\": 1}, {\"name\": \"bounds_checks\", \"value\": "
	             "3}]}\n```"),
	    kt_reply("```json\n{\"features\": [{\"name\": \"coalescing\", "
	             "\"value\": 0.95, \"note\": \"unit stride\"}, {\"name\": "
	             "\"memory_bound\", \"value\": true}]}\n```"),
	    NULL);
	r = run(c, &j);
	KT_ASSERT(r->ok);
	for (i = 0; i < r->n_features; i++) {
		const Kclaw__Feature *f = r->features[i];
		if (strcmp(f->name, "kernels") == 0) {
			KT_EQ_STR(f->source, "rule");
			KT_ASSERT(f->value == 1);
			seen_rule++;
		}
		if (strcmp(f->name, "bounds_checks") == 0) {
			KT_ASSERT(f->value == 1);
			seen_rule++;
		}
		if (strcmp(f->name, "coalescing") == 0) {
			KT_EQ_STR(f->source, "llm");
			KT_ASSERT(f->value == 0.95);
			KT_EQ_STR(f->note, "unit stride");
			seen_llm++;
		}
		if (strcmp(f->name, "memory_bound") == 0) {
			KT_ASSERT(f->value == 1);
			seen_llm++;
		}
	}
	KT_EQ_INT(seen_rule, 2);
	KT_EQ_INT(seen_llm, 2);
	log = kt_llm_log(&srv);
	KT_CONTAINS(logged_msg(log, 0, 1), "- bounds_checks = 1");
	KT_CONTAINS(logged_msg(log, 0, 1), "median 0.0123 ms");
	KT_CONTAINS(logged_msg(log, 1, 3), "'bounds_checks' is a rule feature");
	cJSON_Delete(log);
	kclaw__agent_reply__free_unpacked(r, NULL);
	llm_close(c);
}

static Kclaw__Recommendation m1 = KCLAW__RECOMMENDATION__INIT;
static Kclaw__Recommendation m2 = KCLAW__RECOMMENDATION__INIT;
static Kclaw__Recommendation *methods[] = {&m1, &m2};

static Kclaw__AgentJob
planner_job(const char *key)
{
	Kclaw__AgentJob j = job_for(KCLAW__ROLE__PLANNER, key);

	m1.method = "vectorize_memory";
	m1.score = 0.8;
	m1.rule = "R2";
	m1.knowledge = "use float4 loads when aligned";
	m1.attempts = 4;
	m1.successes = 3;
	m1.mean_gain = 1.4;
	m2.method = "grid_stride";
	m2.score = 0.4;
	j.base_kernel = &base;
	j.base_eval = &base_eval;
	j.methods = methods;
	j.n_methods = 2;
	j.opt_history = "round 1: smem_tiling -> slower (no reuse)";
	return j;
}

#define PLAN_LOOSE                                                             \
	"```json\n{\"method\": \"Vectorize-Memory\", \"steps\": [\"1. x\"], "  \
	"\"rationale\": \"r\"}\n```"
#define PLAN_OK                                                                \
	"```json\n{\"method\": \"vectorize_memory\", \"steps\": [\"1. load "   \
	"float4\", \"2. quarter the grid\"], \"rationale\": \"memory "         \
	"bound\", "                                                            \
	"\"expected_effect\": \"1.5x\"}\n```"

#define PLAN_OUTSIDE                                                           \
	"{\"method\": \"loop_unroll\", \"steps\": [\"a\"], "                   \
	"\"rationale\": \"r\", \"expected_effect\": \"e\"}"

/* A plan bound by screening: the best retrieved method (the first),
 * one step naming it and the Planner's choice, after calls calls. */
static void
bound_plan(const Kclaw__AgentReply *r, unsigned calls)
{
	KT_EQ_STR(r->plan->method, "vectorize_memory");
	KT_EQ_STR(r->plan->screening, "bound");
	KT_EQ_STR(r->plan->planner_method, "loop_unroll");
	KT_ASSERT(!r->plan->exploration);
	KT_EQ_INT(r->plan->n_steps, 1);
	KT_CONTAINS(r->plan->steps[0],
	    "Apply vectorize_memory to the base kernel: use float4 loads");
	KT_CONTAINS(r->plan->steps[0], "were for loop_unroll");
	KT_CONTAINS(r->plan->rationale, "r [screened: loop_unroll is outside");
	KT_CONTAINS(r->plan->rationale, "bound to vectorize_memory");
	KT_EQ_STR(r->plan->expected_effect, "e");
	KT_EQ_INT(r->usage->calls, calls);
}

/* The shipped recordings hold no screening asks: replayed, the ask finds
 * no recording, which is no call, and the bound plan stands. */
static void
test_planner_replay_bound(void)
{
	char dir[256], path[512];
	Kclaw__AgentJob j = planner_job("vec_add/planner/0");
	Kclaw__AgentReply *r;
	llm_client *c;
	FILE *f;

	kt_tmpdir(dir, "kc-screen");
	snprintf(path, sizeof(path), "%s/vec_add", dir);
	KT_ASSERT(mkdir(path, 0700) == 0);
	snprintf(path, sizeof(path), "%s/vec_add/planner", dir);
	KT_ASSERT(mkdir(path, 0700) == 0);
	snprintf(path, sizeof(path), "%s/vec_add/planner/0.txt", dir);
	KT_ASSERT((f = fopen(path, "w")) != NULL);
	fputs(PLAN_OUTSIDE, f);
	fclose(f);
	KT_OK(llm_replay_open(&c, dir, false));
	r = run(c, &j);
	KT_ASSERT(r->ok);
	bound_plan(r, 1);
	KT_EQ_INT(r->usage->failed_calls, 0);
	kclaw__agent_reply__free_unpacked(r, NULL);
	llm_close(c);
	kt_rmtree(dir);
}

static void
test_planner(void)
{
	llm_client *c = http_client();
	Kclaw__AgentJob j = planner_job("vec_add/planner/1");
	Kclaw__AgentReply *r;
	cJSON *log;

	kt_llm_script(&srv,
	    kt_reply("```json\n{\"method\": \"loop_unroll\", \"steps\": "
	             "[], \"rationale\": \"r\"}\n```"),
	    kt_reply("{\"method\": \"vectorize_memory\", \"steps\": [\"a\"],}"),
	    kt_reply(PLAN_OK), NULL);
	r = run(c, &j);
	KT_ASSERT(r->ok);
	KT_ASSERT(r->plan != NULL);
	KT_EQ_STR(r->plan->method, "vectorize_memory");
	KT_EQ_INT(r->plan->n_steps, 2);
	KT_EQ_STR(r->plan->steps[1], "2. quarter the grid");
	KT_EQ_STR(r->plan->rationale, "memory bound");
	KT_EQ_STR(r->plan->expected_effect, "1.5x");
	KT_EQ_INT(r->usage->calls, 3);
	log = kt_llm_log(&srv);
	KT_CONTAINS(logged_msg(log, 0, 1),
	    "1. vectorize_memory (score 0.800, rule R2, learned: 3 of 4");
	KT_CONTAINS(logged_msg(log, 0, 1), "knowledge: use float4 loads");
	KT_CONTAINS(logged_msg(log, 0, 1), "round 1: smem_tiling -> slower");
	KT_CONTAINS(
	    logged_msg(log, 0, 1), "from: vectorize_memory, grid_stride");
	KT_CONTAINS(logged_msg(log, 1, 3), "\"steps\" must be an array");
	KT_CONTAINS(logged_msg(log, 2, 5), "not valid JSON");
	cJSON_Delete(log);
	kclaw__agent_reply__free_unpacked(r, NULL);

	/* Binding screening, a round that does not explore: the prompt says
	 * so; a method outside the retrieved list is asked again once,
	 * naming the list, and a retrieved choice then stands. */
	KT_ASSERT(!j.explore);
	kt_llm_script(&srv, kt_reply(PLAN_OUTSIDE), kt_reply(PLAN_OK), NULL);
	r = run(c, &j);
	KT_ASSERT(r->ok);
	KT_EQ_STR(r->plan->method, "vectorize_memory");
	KT_EQ_STR(r->plan->screening, "asked again");
	KT_EQ_STR(r->plan->planner_method, "loop_unroll");
	KT_ASSERT(!r->plan->exploration);
	KT_EQ_INT(r->plan->n_steps, 2);
	KT_EQ_INT(r->usage->calls, 2);
	log = kt_llm_log(&srv);
	KT_CONTAINS(logged_msg(log, 0, 1), "not accepted in this round");
	KT_ASSERT(strstr(logged_msg(log, 0, 1), "exploration round") == NULL);
	KT_CONTAINS(logged_msg(log, 1, 3),
	    "\"loop_unroll\" is not among the methods retrieved");
	KT_CONTAINS(logged_msg(log, 1, 3),
	    "choose one of vectorize_memory, grid_stride");
	cJSON_Delete(log);
	kclaw__agent_reply__free_unpacked(r, NULL);

	/* It insists: the plan is bound to the best retrieved method, its
	 * steps replaced, and the record says what happened. */
	kt_llm_script(
	    &srv, kt_reply(PLAN_OUTSIDE), kt_reply(PLAN_OUTSIDE), NULL);
	r = run(c, &j);
	KT_ASSERT(r->ok);
	bound_plan(r, 2);
	kclaw__agent_reply__free_unpacked(r, NULL);

	/* The ask fails (HTTP 500 three times) or is not usable: bound. */
	kt_llm_script(&srv, kt_reply(PLAN_OUTSIDE), kt_status(500, NULL),
	    kt_status(500, NULL), kt_status(500, NULL), NULL);
	r = run(c, &j);
	KT_ASSERT(r->ok);
	bound_plan(r, 2);
	KT_EQ_INT(r->usage->failed_calls, 1);
	kclaw__agent_reply__free_unpacked(r, NULL);
	kt_llm_script(&srv, kt_reply(PLAN_OUTSIDE), kt_reply("no json"), NULL);
	r = run(c, &j);
	KT_ASSERT(r->ok);
	bound_plan(r, 2);
	kclaw__agent_reply__free_unpacked(r, NULL);

	/* An exploration round: the prompt says so, and the method outside
	 * is taken at once and marked as explored. */
	j.explore = true;
	kt_llm_script(&srv, kt_reply(PLAN_OUTSIDE), NULL);
	r = run(c, &j);
	KT_ASSERT(r->ok);
	KT_EQ_STR(r->plan->method, "loop_unroll");
	KT_ASSERT(r->plan->exploration);
	KT_EQ_STR(r->plan->screening, "explored");
	KT_EQ_STR(r->plan->planner_method, "loop_unroll");
	KT_EQ_STR(r->plan->rationale, "r");
	KT_EQ_INT(r->usage->calls, 1);
	log = kt_llm_log(&srv);
	KT_CONTAINS(logged_msg(log, 0, 1), "This is an exploration round");
	cJSON_Delete(log);
	kclaw__agent_reply__free_unpacked(r, NULL);
	/* ... where a retrieved method is no exploration of screening's. */
	kt_llm_script(&srv, kt_reply(PLAN_OK), NULL);
	r = run(c, &j);
	KT_EQ_STR(r->plan->method, "vectorize_memory");
	KT_ASSERT(r->plan->exploration);
	KT_EQ_STR(r->plan->screening, "");
	kclaw__agent_reply__free_unpacked(r, NULL);
	j.explore = false;

	/* The method is matched loosely and answered in memory's spelling. */
	kt_llm_script(&srv, kt_reply(PLAN_LOOSE), NULL);
	r = run(c, &j);
	KT_ASSERT(r->ok);
	KT_EQ_STR(r->plan->method, "vectorize_memory");
	kclaw__agent_reply__free_unpacked(r, NULL);
	llm_close(c);
}

static void
test_optimizer(void)
{
	llm_client *c = http_client();
	Kclaw__AgentJob j =
	    job_for(KCLAW__ROLE__OPTIMIZER, "vec_add/optimizer/1");
	Kclaw__OptPlan plan = KCLAW__OPT_PLAN__INIT;
	char *steps[] = {"1. load float4", "2. quarter the grid"};
	Kclaw__AgentReply *r;
	cJSON *log;

	plan.method = "vectorize_memory";
	plan.n_steps = 2;
	plan.steps = steps;
	j.base_kernel = &base;
	j.base_eval = &base_eval;
	j.plan = &plan;
	j.round = 2;
	kt_llm_script(&srv, kt_reply(ADD4_REPLY), NULL);
	r = run(c, &j);
	KT_ASSERT(r->ok);
	KT_EQ_INT(r->n_candidates, 1);
	KT_EQ_STR(r->candidates[0]->source, ADD4_SRC);
	KT_EQ_STR(r->candidates[0]->origin, "optimizer");
	KT_EQ_STR(r->candidates[0]->parent_id, "cbase");
	KT_EQ_STR(r->candidates[0]->method, "vectorize_memory");
	KT_EQ_INT(r->candidates[0]->round, 2);
	log = kt_llm_log(&srv);
	KT_CONTAINS(
	    logged_msg(log, 0, 1), "method: vectorize_memory\n1. 1. load");
	KT_CONTAINS(logged_msg(log, 0, 1), ADD_SRC);
	cJSON_Delete(log);
	kclaw__agent_reply__free_unpacked(r, NULL);
	llm_close(c);
}

static Kclaw__EvalResult failure = KCLAW__EVAL_RESULT__INIT;
static Kclaw__Candidate failing = KCLAW__CANDIDATE__INIT;

static void
setup_failure(void)
{
	failing.id = "cbad";
	failing.source = "extern \"C\" __global__ void add(const float *x, "
	                 "const float *y, float *out, int n)\n{\n\tout[i] = "
	                 "x[i] + y[i];\n}\n";
	failing.plan_json = ADD_PLAN;
	failing.method = "vectorize_memory";
	failure.status = KCLAW__EVAL_STATUS__COMPILE_ERROR;
	failure.message = "compilation failed";
	failure.compile_log = "kernel.cu(3): error: identifier \"i\" is "
	                      "undefined";
}

static void
test_diagnoser(void)
{
	llm_client *c = http_client();
	Kclaw__AgentJob j =
	    job_for(KCLAW__ROLE__DIAGNOSER, "vec_add/diagnoser/0");
	Kclaw__AgentReply *r;
	cJSON *log;

	j.failing = &failing;
	j.failure = &failure;
	j.repair_chain = "attempt 1: declared i as int -> still failed";
	kt_llm_script(&srv,
	    kt_reply("```json\n{\"category\": \"syntax\", \"root_cause\": "
	             "\"x\", \"fix\": \"y\"}\n```"),
	    kt_reply("```json\n{\"category\": \"compile\", \"root_cause\": "
	             "\"i is used but never declared\", \"fix\": \"declare int "
	             "i = blockIdx.x * blockDim.x + threadIdx.x and guard i < "
	             "n\"}\n```"),
	    NULL);
	r = run(c, &j);
	KT_ASSERT(r->ok);
	KT_ASSERT(r->diagnosis != NULL);
	KT_EQ_STR(r->diagnosis->category, "compile");
	KT_EQ_STR(r->diagnosis->root_cause, "i is used but never declared");
	KT_CONTAINS(r->diagnosis->fix, "guard i < n");
	log = kt_llm_log(&srv);
	KT_CONTAINS(logged_msg(log, 0, 1), "status: COMPILE_ERROR");
	KT_CONTAINS(logged_msg(log, 0, 1), "identifier \"i\" is undefined");
	KT_CONTAINS(logged_msg(log, 0, 1), "attempt 1: declared i as int");
	KT_CONTAINS(logged_msg(log, 1, 3), "\"category\" 'syntax' is unknown");
	cJSON_Delete(log);
	kclaw__agent_reply__free_unpacked(r, NULL);
	llm_close(c);
}

static void
test_repairer(void)
{
	llm_client *c = http_client();
	Kclaw__AgentJob j =
	    job_for(KCLAW__ROLE__REPAIRER, "vec_add/repairer/0");
	Kclaw__Diagnosis d = KCLAW__DIAGNOSIS__INIT;
	Kclaw__AgentReply *r;
	cJSON *log;

	d.category = "compile";
	d.root_cause = "i is never declared";
	d.fix = "declare i";
	j.failing = &failing;
	j.failure = &failure;
	j.diagnosis = &d;
	kt_llm_script(&srv, kt_reply(ADD_REPLY), NULL);
	r = run(c, &j);
	KT_ASSERT(r->ok);
	KT_EQ_INT(r->n_candidates, 1);
	KT_EQ_STR(r->candidates[0]->origin, "repairer");
	KT_EQ_STR(r->candidates[0]->parent_id, "cbad");
	log = kt_llm_log(&srv);
	KT_CONTAINS(logged_msg(log, 0, 1), "root cause: i is never declared");
	cJSON_Delete(log);
	kclaw__agent_reply__free_unpacked(r, NULL);
	llm_close(c);
}

/* Recording a job and replaying it gives the same bytes. */
static void
test_replay_byte_identical(void)
{
	Kclaw__AgentJob j = planner_job("vec_add/planner/2");
	Kclaw__AgentReply *r;
	uint8_t *b1, *b2, *b3;
	size_t l1, l2, l3;
	llm_client *c, *http;
	llm_config cfg;
	char dir[256];

	kt_tmpdir(dir, "kt-replay");
	kt_llm_config(&cfg, &srv);
	KT_OK(llm_http_open(&http, &cfg));
	KT_OK(llm_record_open(&c, http, dir, &cfg));
	kt_llm_script(&srv, kt_status(429, "0"),
	    kt_reply("{\"method\": \"grid_stride\"}"), kt_reply(PLAN_OK), NULL);
	r = run(c, &j);
	KT_ASSERT(r->ok);
	KT_EQ_INT(r->usage->calls, 2);
	KT_EQ_INT(r->usage->retries, 1);
	KT_EQ_STR(r->exchange_id, "vec_add/planner/2.reask1");
	KT_OK(kc_pb_pack(&r->base, &b1, &l1));
	kclaw__agent_reply__free_unpacked(r, NULL);
	llm_close(c);

	kt_llm_script(&srv, NULL);
	KT_OK(llm_replay_open(&c, dir, true));
	r = run(c, &j);
	KT_OK(kc_pb_pack(&r->base, &b2, &l2));
	kclaw__agent_reply__free_unpacked(r, NULL);
	r = run(c, &j);
	KT_OK(kc_pb_pack(&r->base, &b3, &l3));
	kclaw__agent_reply__free_unpacked(r, NULL);
	llm_close(c);
	KT_EQ_INT(logged_count(), 0);
	KT_EQ_INT(l2, l1);
	KT_ASSERT(memcmp(b1, b2, l1) == 0);
	KT_EQ_INT(l3, l1);
	KT_ASSERT(memcmp(b1, b3, l1) == 0);
	free(b1);
	free(b2);
	free(b3);

	/* A job that was never recorded fails clearly in replay. */
	KT_OK(llm_replay_open(&c, dir, false));
	j.replay_key = "vec_add/planner/3";
	r = run(c, &j);
	KT_ASSERT(!r->ok);
	KT_CONTAINS(r->error, "no recorded reply for key 'vec_add/planner/3'");
	kclaw__agent_reply__free_unpacked(r, NULL);
	llm_close(c);
	kt_rmtree(dir);
}

/* Templates are read per job: an edit shows in the next prompt, and a typo
 * is reported with the file and the variable. */
static void
test_edited_templates(void)
{
	char dir[256], cmd[1024], path[600];
	static const char *edited = "EDITED {{task_name}} {{#opt_history}}"
	                            "history: {{opt_history}}{{/opt_history}}"
	                            "{{^context}} no context{{/context}}";
	llm_client *c = http_client();
	Kclaw__AgentJob j = planner_job("vec_add/planner/4");
	agent_ctx ctx = {.llm = c, .prompts_dir = dir, .max_asks = 2};
	Kclaw__AgentReply *r;
	cJSON *log;

	kt_tmpdir(dir, "kt-prompts");
	snprintf(cmd, sizeof(cmd), "cp %s/*.md %s/", prompts, dir);
	KT_ASSERT(system(cmd) == 0);
	snprintf(path, sizeof(path), "%s/planner.md", dir);
	KT_OK(kc_write_file(path, edited, strlen(edited)));
	kt_llm_script(&srv, kt_reply(PLAN_OK), NULL);
	KT_OK(agent_handle(&ctx, &j, &r));
	KT_ASSERT(r->ok);
	kclaw__agent_reply__free_unpacked(r, NULL);
	log = kt_llm_log(&srv);
	KT_EQ_STR(logged_msg(log, 0, 1),
	    "EDITED vec_add history: round 1: smem_tiling -> slower (no "
	    "reuse) no context");
	cJSON_Delete(log);

	KT_OK(kc_write_file(path, "line one\n{{task_nmae}}", 22));
	kt_llm_script(&srv, kt_reply(PLAN_OK), NULL);
	KT_OK(agent_handle(&ctx, &j, &r));
	KT_ASSERT(!r->ok);
	KT_CONTAINS(r->error, "planner.md:2: unknown variable 'task_nmae'");
	KT_EQ_INT(logged_count(), 0);
	kclaw__agent_reply__free_unpacked(r, NULL);
	llm_close(c);
	kt_rmtree(dir);
}

/* ------------------------------------------ replies of real models */

/* The reply's token limit of logged request n (max_tokens). */
static int
logged_limit(cJSON *log, int n)
{
	cJSON *body = cJSON_GetObjectItem(cJSON_GetArrayItem(log, n), "body");

	return cJSON_GetObjectItem(body, "max_tokens")->valueint;
}

static int
logged_msgs(cJSON *log, int n)
{
	cJSON *body = cJSON_GetObjectItem(cJSON_GetArrayItem(log, n), "body");

	return cJSON_GetArraySize(cJSON_GetObjectItem(body, "messages"));
}

static cJSON *
kt_cut(const char *content)
{
	cJSON *a = kt_reply(content);

	cJSON_AddStringToObject(a, "finish_reason", "length");
	return a;
}

/* A reply cut off at the limit is asked again with the limit doubled,
 * then with a request to be shorter; the re-asks count in the usage. */
static void
test_truncation(void)
{
	llm_client *c = http_client();
	Kclaw__AgentJob j =
	    job_for(KCLAW__ROLE__GENERATOR, "vec_add/generator/5");
	Kclaw__AgentReply *r;
	cJSON *log;

	kt_llm_script(&srv, kt_cut("```cuda\nextern \"C\" __global"),
	    kt_reply(ADD_REPLY), NULL);
	r = run(c, &j);
	KT_ASSERT(r->ok);
	KT_EQ_INT(r->usage->calls, 2);
	KT_EQ_INT(r->usage->truncated, 1);
	log = kt_llm_log(&srv);
	KT_EQ_INT(logged_limit(log, 0), 1234);
	KT_EQ_INT(logged_limit(log, 1), 2468);
	/* The same conversation, only a higher limit. */
	KT_EQ_INT(logged_msgs(log, 1), 2);
	cJSON_Delete(log);
	kclaw__agent_reply__free_unpacked(r, NULL);

	kt_llm_script(&srv, kt_cut("```cuda\nx"), kt_cut("```cuda\ny"),
	    kt_reply(ADD_REPLY), NULL);
	r = run(c, &j);
	KT_ASSERT(r->ok);
	KT_EQ_INT(r->usage->calls, 3);
	KT_EQ_INT(r->usage->truncated, 2);
	KT_EQ_STR(r->exchange_id, "chatcmpl-test-2");
	log = kt_llm_log(&srv);
	KT_EQ_INT(logged_limit(log, 2), 2468);
	KT_EQ_INT(logged_msgs(log, 2), 4);
	KT_EQ_STR(logged_msg(log, 2, 2), "```cuda\ny");
	KT_CONTAINS(logged_msg(log, 2, 3), "cut off at the token limit (2468");
	KT_CONTAINS(logged_msg(log, 2, 3), "much shorter");
	cJSON_Delete(log);
	kclaw__agent_reply__free_unpacked(r, NULL);

	/* Bounded: a third cut-off reply is judged as it is (and re-asked
	 * as malformed, within max_asks). */
	kt_llm_script(&srv, kt_cut("a"), kt_cut("b"), kt_cut("```cuda\nc"),
	    kt_cut("d"), kt_cut("e"), kt_reply(ADD_REPLY), NULL);
	r = run(c, &j);
	KT_ASSERT(!r->ok);
	KT_EQ_INT(r->usage->truncated, 2);
	KT_EQ_INT(r->usage->calls, 5);
	KT_CONTAINS(r->error, "not usable 3 times");
	kclaw__agent_reply__free_unpacked(r, NULL);
	llm_close(c);
}

/* Through Anthropic's Messages API: a reply cut at max_tokens
 * (stop_reason) is asked again with the limit doubled, as a cut
 * chat-completions reply is, and a kernel drafted in a thinking block is
 * never taken. */
static void
test_anthropic_truncation(void)
{
	Kclaw__AgentJob j =
	    job_for(KCLAW__ROLE__GENERATOR, "vec_add/generator/6");
	Kclaw__AgentReply *r;
	llm_config cfg;
	llm_client *c;
	cJSON *cut = kt_reply("```cuda\nextern \"C\" __global"), *ok;
	cJSON *log;

	kt_llm_config(&cfg, &srv);
	cfg.api = LLM_API_ANTHROPIC;
	KT_OK(llm_http_open(&c, &cfg));
	cJSON_AddStringToObject(cut, "stop_reason", "max_tokens");
	ok = kt_reply(ADD_REPLY);
	cJSON_AddStringToObject(ok, "thinking", ADD4_REPLY);
	kt_llm_script(&srv, cut, ok, NULL);
	r = run(c, &j);
	KT_ASSERT(r->ok);
	KT_EQ_INT(r->usage->calls, 2);
	KT_EQ_INT(r->usage->truncated, 1);
	KT_EQ_INT(r->n_candidates, 1);
	KT_CONTAINS(r->candidates[0]->source, "void add(");
	KT_ASSERT(strstr(r->candidates[0]->source, "add4") == NULL);
	KT_ASSERT(
	    r->usage->cache_write_tokens > 0 || r->usage->cached_tokens > 0);
	log = kt_llm_log(&srv);
	KT_EQ_STR(cJSON_GetObjectItem(cJSON_GetArrayItem(log, 1), "path")
	              ->valuestring,
	    "/v1/messages");
	KT_EQ_INT(logged_limit(log, 0), 1234);
	KT_EQ_INT(logged_limit(log, 1), 2468);
	/* The same conversation (the system prompt apart), a higher limit. */
	KT_EQ_INT(logged_msgs(log, 1), 1);
	cJSON_Delete(log);
	kclaw__agent_reply__free_unpacked(r, NULL);
	llm_close(c);
}

/* Code in the reasoning is never the answer: reasoning_content, inline
 * <think> with and without its opening tag, and unclosed reasoning. */
static void
test_reasoning_never_taken(void)
{
	llm_client *c = http_client();
	Kclaw__AgentJob j =
	    job_for(KCLAW__ROLE__OPTIMIZER, "vec_add/optimizer/2");
	Kclaw__OptPlan plan = KCLAW__OPT_PLAN__INIT;
	char *steps[] = {"1. load float4"};
	Kclaw__AgentReply *r;
	cJSON *a, *log;

	plan.method = "vectorize_memory";
	plan.n_steps = 1;
	plan.steps = steps;
	j.base_kernel = &base;
	j.plan = &plan;

	a = kt_reply("");
	cJSON_AddStringToObject(a, "reasoning_content", ADD_REPLY);
	kt_llm_script(&srv, a, kt_reply(ADD4_REPLY), NULL);
	r = run(c, &j);
	KT_ASSERT(r->ok);
	KT_EQ_INT(r->usage->calls, 2);
	KT_EQ_STR(r->candidates[0]->source, ADD4_SRC);
	log = kt_llm_log(&srv);
	KT_CONTAINS(logged_msg(log, 1, 3), "no ```cuda code block");
	cJSON_Delete(log);
	kclaw__agent_reply__free_unpacked(r, NULL);

	kt_llm_script(&srv,
	    kt_reply("<think>first try:\n" ADD_REPLY "</think>\n" ADD4_REPLY),
	    NULL);
	r = run(c, &j);
	KT_ASSERT(r->ok);
	KT_EQ_INT(r->usage->calls, 1);
	KT_EQ_STR(r->candidates[0]->source, ADD4_SRC);
	kclaw__agent_reply__free_unpacked(r, NULL);

	/* No opening tag: the chat template opened the reasoning. */
	kt_llm_script(&srv,
	    kt_reply("so maybe:\n" ADD4_REPLY "hmm, no.\n</think>\n" ADD_REPLY),
	    NULL);
	r = run(c, &j);
	KT_ASSERT(r->ok);
	KT_EQ_STR(r->candidates[0]->source, ADD_SRC);
	kclaw__agent_reply__free_unpacked(r, NULL);

	kt_llm_script(&srv, kt_reply("<think>drafting\n" ADD_REPLY),
	    kt_reply(ADD4_REPLY), NULL);
	r = run(c, &j);
	KT_ASSERT(r->ok);
	KT_EQ_INT(r->usage->calls, 2);
	KT_EQ_STR(r->candidates[0]->source, ADD4_SRC);
	kclaw__agent_reply__free_unpacked(r, NULL);
	llm_close(c);
}

static cJSON *
usage_reply(
    const char *content, int prompt, int completion, int reasoning, int cached)
{
	cJSON *a = kt_reply(content);
	cJSON *u = cJSON_AddObjectToObject(a, "usage");

	cJSON_AddNumberToObject(u, "prompt_tokens", prompt);
	cJSON_AddNumberToObject(u, "completion_tokens", completion);
	cJSON_AddNumberToObject(
	    cJSON_AddObjectToObject(u, "completion_tokens_details"),
	    "reasoning_tokens", reasoning);
	cJSON_AddNumberToObject(
	    cJSON_AddObjectToObject(u, "prompt_tokens_details"),
	    "cached_tokens", cached);
	return a;
}

/* Usage sums every call of a job, re-asked and failed ones included, with
 * reasoning and cached tokens, and the parameters the server refused. */
static void
test_usage(void)
{
	llm_client *c = http_client();
	Kclaw__AgentJob j = planner_job("vec_add/planner/6");
	Kclaw__AgentReply *r;
	cJSON *opts;
	llm_config cfg;

	kt_llm_script(&srv, usage_reply("no plan here", 1000, 500, 300, 600),
	    usage_reply(PLAN_OK, 1200, 200, 100, 1000), NULL);
	r = run(c, &j);
	KT_ASSERT(r->ok);
	KT_EQ_INT(r->usage->calls, 2);
	KT_EQ_INT(r->usage->prompt_tokens, 2200);
	KT_EQ_INT(r->usage->completion_tokens, 700);
	KT_EQ_INT(r->usage->reasoning_tokens, 400);
	KT_EQ_INT(r->usage->cached_tokens, 1600);
	KT_EQ_INT(r->usage->failed_calls, 0);
	kclaw__agent_reply__free_unpacked(r, NULL);

	kt_llm_script(&srv, kt_status(500, NULL), kt_status(503, NULL),
	    kt_status(500, NULL), NULL);
	r = run(c, &j);
	KT_ASSERT(!r->ok);
	KT_EQ_INT(r->usage->calls, 1);
	KT_EQ_INT(r->usage->failed_calls, 1);
	KT_EQ_INT(r->usage->retries, 2);
	KT_ASSERT(r->usage->latency_ms > 0);
	kclaw__agent_reply__free_unpacked(r, NULL);
	llm_close(c);

	/* A model that refuses temperature: dropped, and the reply says so. */
	kt_llm_config(&cfg, &srv);
	kc_strlcpy(cfg.model, "unknown-reasoner", sizeof(cfg.model));
	KT_OK(llm_http_open(&c, &cfg));
	opts = cJSON_CreateObject();
	cJSON_AddStringToObject(cJSON_AddObjectToObject(opts, "refuse"),
	    "temperature", "Unsupported value: 'temperature'");
	kt_llm_script_with(&srv, opts, kt_reply(PLAN_OK), NULL);
	r = run(c, &j);
	KT_ASSERT(r->ok);
	KT_EQ_INT(r->usage->calls, 1);
	KT_EQ_INT(r->usage->dropped_params, 1);
	KT_EQ_INT(logged_count(), 2);
	kclaw__agent_reply__free_unpacked(r, NULL);
	llm_close(c);
}

/* A prompt larger than the context window loses its oldest history
 * first; one that cannot fit even without memories fails the job. */
static void
test_context_window(void)
{
	Kclaw__AgentJob j = planner_job("vec_add/planner/7");
	Kclaw__AgentReply *r;
	llm_config cfg;
	llm_client *c;
	kc_str hist = {0};
	size_t bytes = 0;
	unsigned base_tokens;
	cJSON *log;
	int i;

	/* The prompt's size with an empty history. */
	c = http_client();
	j.opt_history = "";
	kt_llm_script(&srv, kt_reply(PLAN_OK), NULL);
	r = run(c, &j);
	KT_ASSERT(r->ok);
	kclaw__agent_reply__free_unpacked(r, NULL);
	log = kt_llm_log(&srv);
	for (i = 0; i < 2; i++)
		bytes += strlen(logged_msg(log, 0, i)) + 16;
	cJSON_Delete(log);
	llm_close(c);
	base_tokens = llm_estimate_tokens(bytes);

	for (i = 0; i < 400; i++)
		kc_str_printf(&hist,
		    "round %d: tried a method that made it %d%% slower\n", i,
		    i % 50);
	j.opt_history = hist.buf;
	kt_llm_config(&cfg, &srv);
	/* Room for the prompt, a little history and the 1234-token reply. */
	cfg.profile.context_window = base_tokens + 1234 + 600;
	KT_OK(llm_http_open(&c, &cfg));
	kt_llm_script(&srv, kt_reply(PLAN_OK), NULL);
	r = run(c, &j);
	KT_ASSERT(r->ok);
	kclaw__agent_reply__free_unpacked(r, NULL);
	log = kt_llm_log(&srv);
	KT_CONTAINS(logged_msg(log, 0, 1), "round 399: tried");
	KT_CONTAINS(logged_msg(log, 0, 1), "earlier entries left out");
	KT_ASSERT(strstr(logged_msg(log, 0, 1), "round 0: tried") == NULL);
	cJSON_Delete(log);
	llm_close(c);

	cfg.profile.context_window = base_tokens / 2;
	KT_OK(llm_http_open(&c, &cfg));
	kt_llm_script(&srv, kt_reply(PLAN_OK), NULL);
	r = run(c, &j);
	KT_ASSERT(!r->ok);
	KT_CONTAINS(r->error, "even with its memories left out");
	KT_CONTAINS(r->error, "context window is");
	KT_EQ_INT(logged_count(), 0);
	kclaw__agent_reply__free_unpacked(r, NULL);
	llm_close(c);
	kc_str_free(&hist);
}

/* What the agents are shown of a torch task and of an evaluation: the
 * problem's Python source, its scalar by value, the reviewer's warnings,
 * error figures and the speed of light. */
static void
test_job_vars_torch(void)
{
	Kclaw__AgentJob job = KCLAW__AGENT_JOB__INIT;
	Kclaw__TaskSpec t = KCLAW__TASK_SPEC__INIT;
	Kclaw__Reference ref = KCLAW__REFERENCE__INIT;
	Kclaw__TensorSpec a = KCLAW__TENSOR_SPEC__INIT,
	                  sc = KCLAW__TENSOR_SPEC__INIT,
	                  out = KCLAW__TENSOR_SPEC__INIT;
	Kclaw__TensorSpec *ts[3] = {&a, &sc, &out};
	Kclaw__EvalResult ev = KCLAW__EVAL_RESULT__INIT;
	char *warn[1] = {"lower precision than the task's: it uses __half"};
	int64_t shape[2] = {64, 32};
	agent_vars vars = {0};
	Kclaw__Metric m[4] = {KCLAW__METRIC__INIT, KCLAW__METRIC__INIT,
	    KCLAW__METRIC__INIT, KCLAW__METRIC__INIT};
	Kclaw__Metric *mp[4] = {&m[0], &m[1], &m[2], &m[3]};

	a.name = "A";
	a.kind = KCLAW__TENSOR_KIND__INPUT;
	a.dtype = KCLAW__DTYPE__F32;
	a.shape = shape;
	a.n_shape = 2;
	sc.name = "s";
	sc.kind = KCLAW__TENSOR_KIND__SCALAR;
	sc.dtype = KCLAW__DTYPE__F32;
	sc.scalar_value = 3.5;
	out = a;
	out.name = "out";
	out.kind = KCLAW__TENSOR_KIND__OUTPUT;
	ref.kind = KCLAW__REFERENCE__KIND__TORCH;
	ref.torch_source = "class Model:\n    def forward(self, A, s):"
	                   "\n        return A * s\n";
	t.name = "scale";
	t.tensors = ts;
	t.n_tensors = 3;
	t.reference = &ref;
	ev.status = KCLAW__EVAL_STATUS__OK;
	ev.speed_of_light_ms = 0.01;
	ev.sol_fraction = 0.42;
	ev.rel_norm = 2.5e-3;
	ev.max_abs_err = 1e-2;
	ev.warnings = warn;
	ev.n_warnings = 1;
	ev.compile_speedup = 1.5;
	ev.torch_compile_ms = 0.2;
	ev.device_name = "NVIDIA H200";
	ev.arch = "sm_90a";
	m[0].name = "device.sm_count";
	m[0].value = 132;
	m[1].name = "device.bandwidth_gbs";
	m[1].value = 4100;
	m[2].name = "device.l2_bytes";
	m[2].value = 50 << 20;
	m[3].name = "sandbox.verify_ms";
	m[3].value = 12.5;
	m[3].unit = "ms";
	ev.metrics = mp;
	ev.n_metrics = 4;
	job.job_id = "j1";
	job.task = &t;
	job.base_eval = &ev;
	KT_OK(agent_job_vars(&job, &vars));
	KT_CONTAINS(agent_vars_get(&vars, "reference"), "```python");
	KT_CONTAINS(agent_vars_get(&vars, "reference"), "return A * s");
	KT_CONTAINS(agent_vars_get(&vars, "reference"), "torch.compile");
	KT_CONTAINS(agent_vars_get(&vars, "tensors"), "- s: scalar f32 = 3.5");
	KT_CONTAINS(
	    agent_vars_get(&vars, "tensors"), "- A: input f32 [64, 32]");
	KT_CONTAINS(
	    agent_vars_get(&vars, "base_eval"), "warning: lower precision");
	KT_CONTAINS(agent_vars_get(&vars, "base_eval"), "at 42% of");
	KT_CONTAINS(agent_vars_get(&vars, "base_eval"), "relative norm 0.0025");
	KT_CONTAINS(agent_vars_get(&vars, "base_eval"),
	    "speedup over torch.compile: 1.500x");
	/* The GPU's figures on the device line, not as raw metrics. */
	KT_CONTAINS(agent_vars_get(&vars, "base_eval"),
	    "device: NVIDIA H200 (sm_90a), 132 SMs, 4100 GB/s measured copy "
	    "bandwidth, L2 50 MiB");
	KT_ASSERT(strstr(agent_vars_get(&vars, "base_eval"),
	              "metric device.") == NULL);
	KT_CONTAINS(agent_vars_get(&vars, "base_eval"),
	    "metric sandbox.verify_ms = 12.5 ms");
	agent_vars_free(&vars);
}

/* --------------------------------------- diverse seeds, cacheable prompts */

/* The whole prompt of logged request n: its messages' contents joined. */
static char *
logged_prompt(cJSON *log, int n)
{
	cJSON *body = cJSON_GetObjectItem(cJSON_GetArrayItem(log, n), "body");
	cJSON *msgs = cJSON_GetObjectItem(body, "messages"), *m;
	kc_str s = {0};

	cJSON_ArrayForEach(m, msgs) KT_OK(
	    kc_str_append(&s, cJSON_GetObjectItem(m, "content")->valuestring));
	return kc_str_take(&s);
}

/* The share of b's bytes identical, from its start, to a's: what a
 * provider's prefix cache serves of b after a. */
static double
prefix_share(const char *a, const char *b)
{
	size_t i = 0, n = strlen(b);

	while (a[i] && a[i] == b[i])
		i++;
	return n ? (double)i / (double)n : 0;
}

/* The k seed jobs of a task as the orchestrator sends them (sched.c
 * orch_build_seed): each its index, its strategy and the others' as the
 * ones to avoid. */
static const char *seed_strats[] = {
    "Coalesce global memory accesses (coalesce_global_access, memory "
    "family): one element per thread",
    "Register blocking (register_blocking, compute family): several "
    "outputs per thread",
    "Tune the block size (tune_block_size, occupancy family): occupancy "
    "first",
};

static void
test_seed_prompts_differ(void)
{
	llm_client *c = http_client();
	char *p[3], *avoid[3][2], key[64];
	Kclaw__AgentReply *r;
	cJSON *log;

	kt_llm_script(&srv, kt_reply(ADD_REPLY), kt_reply(ADD4_REPLY),
	    kt_reply(ADD_REPLY), NULL);
	for (uint32_t i = 0; i < 3; i++) {
		Kclaw__AgentJob j;
		snprintf(key, sizeof(key), "vec_add/generator/%u", i);
		j = job_for(KCLAW__ROLE__GENERATOR, key);
		j.count = 1;
		j.seed_index = i;
		j.seeds = 3;
		j.strategy = (char *)seed_strats[i];
		for (uint32_t x = 0, n = 0; x < 3; x++)
			if (x != i)
				avoid[i][n++] = (char *)seed_strats[x];
		j.avoid = avoid[i];
		j.n_avoid = 2;
		r = run(c, &j);
		KT_ASSERT(r->ok);
		kclaw__agent_reply__free_unpacked(r, NULL);
	}
	log = kt_llm_log(&srv);
	KT_EQ_INT(cJSON_GetArraySize(log), 3);
	for (int i = 0; i < 3; i++) {
		char want[64];
		p[i] = logged_prompt(log, i);
		snprintf(want, sizeof(want), "## Your seed: %d of 3\n", i + 1);
		KT_CONTAINS(p[i], want);
		KT_CONTAINS(logged_msg(log, i, 1), seed_strats[i]);
		KT_CONTAINS(logged_msg(log, i, 1), "do not repeat them");
		KT_ASSERT(strstr(p[i], "{{") == NULL);
	}
	/* No two seed prompts of the task are equal, and each shares most
	 * of its bytes with the one before (the task's part comes first). */
	for (int i = 0; i < 3; i++)
		for (int k = i + 1; k < 3; k++)
			KT_ASSERT(strcmp(p[i], p[k]) != 0);
	KT_ASSERT(prefix_share(p[0], p[1]) > 0.8);
	KT_ASSERT(prefix_share(p[1], p[2]) > 0.8);
	for (int i = 0; i < 3; i++)
		free(p[i]);
	cJSON_Delete(log);
	llm_close(c);
}

/* A warm start: the seed shows the similar task's kernel to adapt. */
static void
test_seed_warm_start(void)
{
	llm_client *c = http_client();
	Kclaw__AgentJob j =
	    job_for(KCLAW__ROLE__GENERATOR, "vec_add/generator/2");
	Kclaw__Candidate warm = KCLAW__CANDIDATE__INIT;
	Kclaw__AgentReply *r;
	cJSON *log;

	warm.source = ADD4_SRC;
	warm.plan_json = ADD4_PLAN;
	j.count = 1;
	j.seed_index = 2;
	j.seeds = 3;
	j.strategy = "adapt the best kernel of the similar solved task vec_sub";
	j.warm_start = &warm;
	j.warm_task = "vec_sub";
	kt_llm_script(&srv, kt_reply(ADD_REPLY), NULL);
	r = run(c, &j);
	KT_ASSERT(r->ok);
	kclaw__agent_reply__free_unpacked(r, NULL);
	log = kt_llm_log(&srv);
	KT_CONTAINS(logged_msg(log, 0, 1), "The best kernel of vec_sub");
	KT_CONTAINS(logged_msg(log, 0, 1), ADD4_SRC);
	KT_CONTAINS(logged_msg(log, 0, 1), ADD4_PLAN);
	cJSON_Delete(log);
	llm_close(c);
}

/*
 * Prompts a provider can cache: a role's successive prompts on one task
 * (the Planner's next round with a longer history and another screening
 * mode, the Optimizer's next plan) share most of their bytes from the
 * start, because the stable part (system text, the task's contract and
 * reference, the base) comes first and what varies last.
 */
static void
test_prompt_prefix_stable(void)
{
	llm_client *c = http_client();
	Kclaw__AgentJob pj1 = planner_job("vec_add/planner/0");
	Kclaw__AgentJob pj2 = planner_job("vec_add/planner/1");
	Kclaw__AgentJob oj1 =
	    job_for(KCLAW__ROLE__OPTIMIZER, "vec_add/optimizer/0");
	Kclaw__AgentJob oj2 =
	    job_for(KCLAW__ROLE__OPTIMIZER, "vec_add/optimizer/1");
	Kclaw__OptPlan plan1 = KCLAW__OPT_PLAN__INIT,
	               plan2 = KCLAW__OPT_PLAN__INIT;
	char *s1[] = {"1. load float4", "2. quarter the grid"};
	char *s2[] = {"1. one block per 2048 elements", "2. unroll by 8"};
	Kclaw__AgentReply *r;
	char *p[4];
	cJSON *log;

	pj1.round = 1;
	pj2.round = 2;
	pj2.explore = true;
	pj2.opt_history = "round 1: smem_tiling -> slower (no reuse)\n"
	                  "round 2: vectorize_memory -> 1.12x (below 1.3)";
	plan1.method = "vectorize_memory";
	plan1.steps = s1;
	plan1.n_steps = 2;
	plan2.method = "thread_coarsening";
	plan2.steps = s2;
	plan2.n_steps = 2;
	oj1.base_kernel = oj2.base_kernel = &base;
	oj1.base_eval = oj2.base_eval = &base_eval;
	oj1.plan = &plan1;
	oj2.plan = &plan2;
	oj1.round = 1;
	oj2.round = 2;
	kt_llm_script(&srv, kt_reply(PLAN_OK), kt_reply(PLAN_OK),
	    kt_reply(ADD4_REPLY), kt_reply(ADD4_REPLY), NULL);
	r = run(c, &pj1);
	kclaw__agent_reply__free_unpacked(r, NULL);
	r = run(c, &pj2);
	kclaw__agent_reply__free_unpacked(r, NULL);
	r = run(c, &oj1);
	kclaw__agent_reply__free_unpacked(r, NULL);
	r = run(c, &oj2);
	kclaw__agent_reply__free_unpacked(r, NULL);
	log = kt_llm_log(&srv);
	KT_EQ_INT(cJSON_GetArraySize(log), 4);
	for (int i = 0; i < 4; i++)
		p[i] = logged_prompt(log, i);
	/* The system message is byte-identical across every role's calls
	 * of the task but for the role's title. */
	KT_EQ_STR(logged_msg(log, 0, 0), logged_msg(log, 1, 0));
	KT_EQ_STR(logged_msg(log, 2, 0), logged_msg(log, 3, 0));
	KT_ASSERT(prefix_share(p[0], p[1]) > 0.8);
	KT_ASSERT(prefix_share(p[2], p[3]) > 0.8);
	for (int i = 0; i < 4; i++)
		free(p[i]);
	cJSON_Delete(log);
	llm_close(c);
}

int
main(void)
{
	snprintf(
	    prompts, sizeof(prompts), "%s/agents/prompts", getenv("KCLAW_SRC"));
	setup_task();
	setup_failure();
	kt_llm_start(&srv);
	KT_RUN(test_generator);
	KT_RUN(test_reasks);
	KT_RUN(test_reask_bounded);
	KT_RUN(test_llm_failure);
	KT_RUN(test_feature);
	KT_RUN(test_planner);
	KT_RUN(test_planner_replay_bound);
	KT_RUN(test_optimizer);
	KT_RUN(test_diagnoser);
	KT_RUN(test_repairer);
	KT_RUN(test_replay_byte_identical);
	KT_RUN(test_edited_templates);
	KT_RUN(test_truncation);
	KT_RUN(test_anthropic_truncation);
	KT_RUN(test_reasoning_never_taken);
	KT_RUN(test_usage);
	KT_RUN(test_context_window);
	KT_RUN(test_job_vars_torch);
	KT_RUN(test_seed_prompts_differ);
	KT_RUN(test_seed_warm_start);
	KT_RUN(test_prompt_prefix_stable);
	kt_llm_stop(&srv);
	return 0;
}
