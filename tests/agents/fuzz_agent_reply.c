/*
 * fuzz_agent_reply.c - a model's reply is input from outside: every role's
 * validation, the block and JSON parsers, the contract checks, the rule
 * features and the template renderer must take any bytes without crashing
 * or leaking. libFuzzer target (tools/fuzz.sh style, -DKC_FUZZ=ON); in the
 * normal build it replays its corpus as the test agents_fuzz_corpus.
 */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "kc_err.h"

static Kclaw__TensorSpec tx = KCLAW__TENSOR_SPEC__INIT;
static Kclaw__TensorSpec ty = KCLAW__TENSOR_SPEC__INIT;
static Kclaw__TensorSpec *tensors[] = {&tx, &ty};
static int64_t shape[] = {256};
static Kclaw__TaskSpec task = KCLAW__TASK_SPEC__INIT;
static Kclaw__Candidate kernel = KCLAW__CANDIDATE__INIT;
static Kclaw__OptPlan plan = KCLAW__OPT_PLAN__INIT;
static Kclaw__Diagnosis diag = KCLAW__DIAGNOSIS__INIT;
static Kclaw__EvalResult eval = KCLAW__EVAL_RESULT__INIT;
static Kclaw__Recommendation rec = KCLAW__RECOMMENDATION__INIT;
static Kclaw__Recommendation *recs[] = {&rec};

static void
fuzz_setup(void)
{
	tx.name = "x";
	tx.kind = KCLAW__TENSOR_KIND__INPUT;
	tx.dtype = KCLAW__DTYPE__F32;
	tx.n_shape = 1;
	tx.shape = shape;
	ty = tx;
	ty.name = "y";
	ty.kind = KCLAW__TENSOR_KIND__OUTPUT;
	task.name = "fuzz";
	task.n_tensors = 2;
	task.tensors = tensors;
	kernel.id = "c0";
	kernel.source = "extern \"C\" __global__ void k(const float *x, float "
	                "*y) { y[threadIdx.x] = x[threadIdx.x]; }";
	kernel.plan_json = "{\"steps\": [{\"kernel\": \"k\", \"grid\": [1], "
	                   "\"block\": [256], \"args\": [\"x\", \"y\"]}]}";
	plan.method = "m";
	diag.category = "compile";
	rec.method = "m";
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int ready;
	Kclaw__AgentJob job = KCLAW__AGENT_JOB__INIT;
	Kclaw__Feature **f = NULL;
	Kclaw__Candidate **c;
	agent_vars vars = {0};
	kc_str err = {0};
	cJSON *o;
	char *text, *out;
	size_t n = 0, i;
	Kclaw__Role r;

	if (!ready) {
		fuzz_setup();
		ready = 1;
	}
	if ((text = malloc(size + 1)) == NULL)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';

	if (agent_parse_candidates(&task, text, 4, &c, &n, &err) != KC_ENOMEM) {
		for (i = 0; i < n; i++)
			kclaw__candidate__free_unpacked(c[i], NULL);
		free(c);
	}
	if (agent_parse_json(text, &o, &err) == 0)
		cJSON_Delete(o);
	n = 0;
	agent_rule_features(text, text, &eval, &f, &n);
	for (i = 0; i < n; i++)
		kclaw__feature__free_unpacked(f[i], NULL);
	free(f);

	job.job_id = "j";
	job.task = &task;
	job.count = 2;
	job.base_kernel = &kernel;
	job.base_eval = &eval;
	job.failing = &kernel;
	job.failure = &eval;
	job.plan = &plan;
	job.diagnosis = &diag;
	job.methods = recs;
	job.n_methods = 1;
	for (r = KCLAW__ROLE__GENERATOR; r <= KCLAW__ROLE__REPAIRER; r++) {
		Kclaw__AgentReply reply = KCLAW__AGENT_REPLY__INIT;
		const agent_role *role = agent_role_by_id(r);
		Kclaw__AgentReply *copy = malloc(sizeof(*copy));

		if (copy == NULL)
			break;
		*copy = reply;
		job.role = r;
		err.len = 0;
		role->accept(&job, text, true, copy, &err);
		kclaw__agent_reply__free_unpacked(copy, NULL);
	}

	agent_vars_set(&vars, "a", "value");
	agent_vars_set(&vars, "e", "");
	if (agent_render(text, &vars, "fuzz.md", &out) == 0)
		free(out);
	agent_vars_free(&vars);
	kc_str_free(&err);
	free(text);
	return 0;
}
