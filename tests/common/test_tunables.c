/*
 * test_tunables.c - a candidate's tunables expanded into configurations
 * (common/tunables.h): the product of the lists, the default first, the
 * defines, every $expression of the plan substituted, and the refusals.
 */
#include <stdlib.h>
#include <string.h>

#include "kc_err.h"
#include "kc_test.h"
#include "tunables.h"

static void
test_expressions(void)
{
	const char *names[2] = {"BLOCK", "PER"};
	long long vals[2] = {256, 4}, v;

	KT_OK(kc_tune_eval("$BLOCK", names, vals, 2, &v));
	KT_EQ_INT(v, 256);
	KT_OK(kc_tune_eval("(1000 + $BLOCK * $PER - 1) / ($BLOCK * $PER)",
	    names, vals, 2, &v));
	KT_EQ_INT(v, 1);
	KT_OK(kc_tune_eval(" -3 + 2 * (5 % 3) ", names, vals, 2, &v));
	KT_EQ_INT(v, 1);
	KT_EQ_INT(kc_tune_eval("$BLOCKS", names, vals, 2, &v), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "unknown tunable '$BLOCKS'");
	KT_EQ_INT(
	    kc_tune_eval("4 / ($PER - 4)", names, vals, 2, &v), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "division by zero");
	KT_EQ_INT(kc_tune_eval("(1 + 2", names, vals, 2, &v), KC_EINVAL);
	KT_EQ_INT(kc_tune_eval("2 3", names, vals, 2, &v), KC_EINVAL);
}

static void
test_expand(void)
{
	const char *plan =
	    "{\"tunables\": {\"BLOCK\": [256, 128], \"PER\": [1, 2, 4]},"
	    " \"steps\": [{\"kernel\": \"k\", \"grid\": \"4096 / ($BLOCK * "
	    "$PER)\", \"block\": [\"$BLOCK\", 1, 1],"
	    " \"args\": [\"x\", {\"i32\": \"$PER\"}, \"y\"]}]}";
	kc_tune_config *c;
	size_t n;

	KT_OK(kc_tune_expand("__global__ void k() {}\n", plan, &c, &n));
	KT_EQ_INT(n, 6);
	/* The default (every first value) comes first; the first parameter
	 * varies slowest. */
	KT_EQ_STR(c[0].config, "BLOCK=256 PER=1");
	KT_EQ_STR(c[1].config, "BLOCK=256 PER=2");
	KT_EQ_STR(c[5].config, "BLOCK=128 PER=4");
	KT_ASSERT(strncmp(c[5].source, "#define BLOCK 128\n#define PER 4\n",
	              32) == 0);
	KT_CONTAINS(c[5].source, "__global__ void k()");
	KT_CONTAINS(c[5].plan_json, "\"grid\":8");
	KT_CONTAINS(c[5].plan_json, "\"block\":[128,1,1]");
	KT_CONTAINS(c[5].plan_json, "{\"i32\":4}");
	KT_ASSERT(strstr(c[5].plan_json, "tunables") == NULL);
	KT_ASSERT(strstr(c[5].plan_json, "$") == NULL);
	kc_tune_free(c, n);

	/* A plan without tunables: nothing to expand. */
	KT_OK(kc_tune_expand("", "{\"steps\": []}", &c, &n));
	KT_EQ_INT(n, 0);
	KT_ASSERT(c == NULL);
}

static void
test_refusals(void)
{
	kc_tune_config *c;
	size_t n;

	KT_EQ_INT(kc_tune_expand("",
	              "{\"tunables\": {\"1X\": [1]}, \"steps\": []}", &c, &n),
	    KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "not a C identifier");
	KT_EQ_INT(kc_tune_expand(
	              "", "{\"tunables\": {\"X\": []}, \"steps\": []}", &c, &n),
	    KC_EINVAL);
	KT_EQ_INT(kc_tune_expand("",
	              "{\"tunables\": {\"X\": [1.5]}, \"steps\": []}", &c, &n),
	    KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "not an integer");
	/* 8 x 8 = 64 configurations: over the limit. */
	KT_EQ_INT(kc_tune_expand("",
	              "{\"tunables\": {\"A\": [1,2,3,4,5,6,7,8], \"B\": "
	              "[1,2,3,4,5,6,7,8]}, \"steps\": []}",
	              &c, &n),
	    KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "more than 32 configurations");
	KT_EQ_INT(kc_tune_expand("",
	              "{\"tunables\": {\"A\": [1]}, \"steps\": [{\"kernel\": "
	              "\"k\", \"grid\": \"$B\", \"block\": 1}]}",
	              &c, &n),
	    KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "unknown tunable '$B'");
}

int
main(void)
{
	KT_RUN(test_expressions);
	KT_RUN(test_expand);
	KT_RUN(test_refusals);
	return 0;
}
