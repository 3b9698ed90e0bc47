/*
 * test_plan.c - launch plans: parsing, every refusal and its message, and
 * the checks against compiled signatures and device limits.
 */
#include <stdlib.h>
#include <string.h>

#include "kc_err.h"
#include "kc_test.h"
#include "plan.h"

static Kclaw__TaskSpec task = KCLAW__TASK_SPEC__INIT;
static Kclaw__TensorSpec ts[4];
static Kclaw__TensorSpec *tsp[4];
static int64_t shape_n[1] = {1024};
static int64_t shape_mk[2] = {16, 32};

static void
setup(void)
{
	static char *names[4] = {"x", "w", "y", "b"};
	static const Kclaw__TensorKind kinds[4] = {KCLAW__TENSOR_KIND__INPUT,
	    KCLAW__TENSOR_KIND__PARAMETER, KCLAW__TENSOR_KIND__OUTPUT,
	    KCLAW__TENSOR_KIND__PARAMETER};

	for (int i = 0; i < 4; i++) {
		kclaw__tensor_spec__init(&ts[i]);
		ts[i].name = names[i];
		ts[i].kind = kinds[i];
		ts[i].dtype = KCLAW__DTYPE__F32;
		ts[i].n_shape = 1;
		ts[i].shape = shape_n;
		tsp[i] = &ts[i];
	}
	task.n_tensors = 4;
	task.tensors = tsp;
}

static void
expect_refusal(const char *json, const char *want)
{
	sbx_plan *p = NULL;

	kc_clearerr();
	if (sbx_plan_parse(json, &task, &p) == 0) {
		sbx_plan_free(p);
		KT_FAIL("accepted: %s", json);
	}
	KT_CONTAINS(kc_lasterr(), want);
}

static void
test_parses_kernel_steps(void)
{
	sbx_plan *p;

	KT_OK(sbx_plan_parse(
	    "{\"scratch\":[{\"name\":\"tmp\",\"bytes\":4096}],\"steps\":["
	    "{\"kernel\":\"k1\",\"grid\":[4,2],\"block\":[256,1,1],"
	    "\"args\":[\"x\",\"tmp\",{\"i32\":-5},{\"u32\":7},{\"i64\":"
	    "4294967296},{\"f32\":0.5},{\"f64\":2.25}]},"
	    "{\"kernel\":\"k2\",\"grid\":1,\"block\":32,\"shared_bytes\":1024,"
	    "\"args\":[\"tmp\",\"w\",\"y\"]}]}",
	    &task, &p));
	KT_EQ_INT(p->nsteps, 2);
	KT_EQ_INT(p->nbuffers, 5);
	KT_EQ_STR(p->buffers[4].name, "tmp");
	KT_EQ_INT(p->buffers[4].bytes, 4096);
	KT_EQ_INT(p->buffers[2].bytes, 4096); /* y: 1024 floats */
	KT_EQ_INT(p->steps[0].grid[1], 2);
	KT_EQ_INT(p->steps[0].grid[2], 1);
	KT_EQ_INT(p->steps[0].args[1].buffer, 4);
	KT_EQ_INT(p->steps[0].args[2].kind, SBX_ARG_I32);
	KT_EQ_INT(p->steps[0].args[2].v.i32, -5);
	KT_EQ_INT(p->steps[0].args[4].v.i64, 4294967296LL);
	KT_ASSERT(p->steps[0].args[5].v.f32 == 0.5f);
	KT_ASSERT(p->steps[0].args[6].v.f64 == 2.25);
	KT_EQ_INT(p->steps[1].shared_bytes, 1024);
	KT_EQ_INT(p->steps[1].block[0], 32);
	sbx_plan_free(p);
}

static void
test_refuses_bad_plans(void)
{
	expect_refusal("", "plan: empty");
	expect_refusal("[1,2]", "not a JSON object");
	expect_refusal("{\"steps\":[]}", "'steps' must be a non-empty array");
	expect_refusal("{\"stepz\":[]}", "unknown key 'stepz'");
	expect_refusal("{\"steps\":[{\"kernel\":\"k\",\"grid\":[1],"
	               "\"block\":[1],\"args\":[\"x\",\"yy\",\"y\"]}]}",
	    "plan: step 0 (kernel 'k'): argument 1: unknown tensor or "
	    "scratch buffer 'yy'; known: x, w, y, b");
	expect_refusal("{\"steps\":[{\"kernel\":\"k\",\"grid\":[1],"
	               "\"block\":[1],\"args\":[\"y\",{\"i16\":3}]}]}",
	    "unknown scalar type 'i16'");
	expect_refusal("{\"steps\":[{\"kernel\":\"k\",\"grid\":[1],"
	               "\"block\":[1],\"args\":[\"y\",{\"i32\":1.5}]}]}",
	    "is not an integer");
	expect_refusal("{\"steps\":[{\"kernel\":\"k\",\"grid\":[1],"
	               "\"block\":[1],\"args\":[\"y\",{\"i32\":3000000000}]}]}",
	    "does not fit in i32");
	expect_refusal("{\"steps\":[{\"kernel\":\"k\",\"grid\":[0],"
	               "\"block\":[1],\"args\":[\"y\"]}]}",
	    "'grid'[0] must be a positive integer");
	expect_refusal("{\"steps\":[{\"kernel\":\"k\",\"grid\":[1,1,1,1],"
	               "\"block\":[1],\"args\":[\"y\"]}]}",
	    "'grid' must be an array of 1 to 3");
	expect_refusal("{\"steps\":[{\"kernel\":\"k\",\"grid\":[1],"
	               "\"block\":[1]}]}",
	    "'args' is missing");
	expect_refusal("{\"steps\":[{\"kernel\":\"9k\",\"grid\":[1],"
	               "\"block\":[1],\"args\":[\"y\"]}]}",
	    "must name an extern \"C\" __global__ function");
	expect_refusal("{\"steps\":[{\"kernel\":\"k\",\"grid\":[1],"
	               "\"block\":[1],\"args\":[\"x\",\"w\"]}]}",
	    "output tensor 'y' is not passed to any step");
	expect_refusal("{\"scratch\":[{\"name\":\"x\",\"bytes\":4}],"
	               "\"steps\":[{\"kernel\":\"k\",\"grid\":[1],"
	               "\"block\":[1],\"args\":[\"y\"]}]}",
	    "scratch 'x': the name is already used");
	expect_refusal("{\"scratch\":[{\"name\":\"t\",\"bytes\":0}],"
	               "\"steps\":[{\"kernel\":\"k\",\"grid\":[1],"
	               "\"block\":[1],\"args\":[\"y\"]}]}",
	    "scratch 't': 'bytes' must be an integer");
	expect_refusal(
	    "{\"steps\":[{\"grid\":[1]}]}", "a step has either 'kernel'");
}

static void
test_matmul_steps(void)
{
	sbx_plan *p;

	ts[0].n_shape = 2;
	ts[0].shape = shape_mk; /* x: 16 x 32 */
	KT_OK(sbx_plan_parse("{\"steps\":[{\"matmul\":{\"a\":\"x\",\"b\":\"w\","
	                     "\"d\":\"y\",\"bias\":\"b\",\"m\":16,\"n\":32,"
	                     "\"k\":32,\"epilogue\":\"bias_gelu\"}}]}",
	    &task, &p));
	KT_EQ_INT(p->steps[0].kind, SBX_STEP_MATMUL);
	KT_EQ_INT(p->steps[0].mm.epilogue, SBX_EPI_BIAS_GELU);
	KT_EQ_INT(p->steps[0].mm.bias, 3);
	KT_EQ_INT(p->steps[0].mm.c, -1);
	sbx_plan_free(p);
	expect_refusal("{\"steps\":[{\"matmul\":{\"a\":\"x\",\"b\":\"w\","
	               "\"d\":\"y\",\"m\":64,\"n\":32,\"k\":32}}]}",
	    "'a' (x) has 2048 bytes; the matmul needs 2048 elements of f32");
	expect_refusal("{\"steps\":[{\"matmul\":{\"a\":\"x\",\"b\":\"w\","
	               "\"d\":\"y\",\"m\":16,\"n\":32,\"k\":32,"
	               "\"epilogue\":\"bias_relu\"}}]}",
	    "needs a 'bias' buffer");
	expect_refusal("{\"steps\":[{\"matmul\":{\"a\":\"x\",\"b\":\"w\","
	               "\"d\":\"y\",\"m\":16,\"n\":32,\"k\":32,"
	               "\"epilogue\":\"swish\"}}]}",
	    "unknown epilogue 'swish'");
	expect_refusal("{\"steps\":[{\"matmul\":{\"a\":\"x\",\"b\":\"w\","
	               "\"d\":\"y\",\"m\":16,\"n\":32,\"k\":32,"
	               "\"dtype\":\"f16\"}}]}",
	    "'a' (x) is f32 but the matmul's dtype is f16");
	expect_refusal("{\"steps\":[{\"matmul\":{\"a\":\"x\",\"b\":\"w\","
	               "\"d\":\"y\",\"m\":16,\"n\":32,\"k\":32,\"beta\":1}}]}",
	    "no 'c' buffer");
	ts[0].n_shape = 1;
	ts[0].shape = shape_n;
}

static void
test_checks_against_signatures_and_limits(void)
{
	sbx_sig sig = {.name = "k",
	    .nparams = 4,
	    .sizes = {8, 8, 8, 4},
	    .max_threads = 512,
	    .shared_static = 1024};
	sbx_limits lim;
	sbx_plan *p;

	sbx_limits_generic(&lim);
	KT_OK(sbx_plan_parse("{\"steps\":[{\"kernel\":\"k\",\"grid\":[4],"
	                     "\"block\":[256],\"args\":[\"x\",\"w\",\"y\","
	                     "{\"i32\":1024}]}]}",
	    &task, &p));
	KT_OK(sbx_plan_check(p, &sig, 1, &lim));
	p->steps[0].args[3].kind = SBX_ARG_I64;
	KT_EQ_INT(sbx_plan_check(p, &sig, 1, &lim), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(),
	    "argument 3 is i64 (8 bytes) but the "
	    "kernel's parameter 3 has 4 bytes");
	p->steps[0].args[3].kind = SBX_ARG_I32;
	p->steps[0].nargs = 3;
	KT_EQ_INT(sbx_plan_check(p, &sig, 1, &lim), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "3 arguments given, the kernel takes 4");
	p->steps[0].nargs = 4;
	p->steps[0].block[0] = 1024;
	KT_EQ_INT(sbx_plan_check(p, &sig, 1, &lim), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "the compiled kernel allows at most 512");
	p->steps[0].block[0] = 2048;
	KT_EQ_INT(sbx_plan_check(p, &sig, 1, &lim), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(),
	    "block.x is 2048, the device allows at "
	    "most 1024");
	p->steps[0].block[0] = 256;
	p->steps[0].shared_bytes = 300000;
	KT_EQ_INT(sbx_plan_check(p, &sig, 1, &lim), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "300000 bytes of dynamic shared memory");
	p->steps[0].shared_bytes = 0;
	snprintf(sig.name, sizeof(sig.name), "other");
	KT_EQ_INT(sbx_plan_check(p, &sig, 1, &lim), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(),
	    "kernel 'k' is not in the compiled module "
	    "(kernels: other)");
	sbx_plan_free(p);
}

int
main(void)
{
	setup();
	KT_RUN(test_parses_kernel_steps);
	KT_RUN(test_refuses_bad_plans);
	KT_RUN(test_matmul_steps);
	KT_RUN(test_checks_against_signatures_and_limits);
	return 0;
}
