/*
 * expr_test.c - the policy's expression language: arithmetic, logic with
 * unknown, functions, malformed input, division by zero, unknown
 * identifiers, size and depth limits.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "expr.h"
#include "kc_err.h"
#include "kc_test.h"
#include "kc_util.h"

/* Evidence of the tests: a few known fields, one declared but unknown. */
static int
test_lookup(void *arg, const char *name, expr_value *val)
{
	(void)arg;
	static const struct {
		const char *name;
		double v;
	} known[] = {
	    {"dram", 80.0},
	    {"sm", 20.0},
	    {"zero", 0.0},
	    {"flag", 1.0},
	    {"big", 1e308},
	};
	for (size_t i = 0; i < KC_ARRAY_LEN(known); i++)
		if (strcmp(known[i].name, name) == 0) {
			*val = (expr_value){true, known[i].v};
			return 0;
		}
	if (strcmp(name, "missing") == 0) {
		*val = (expr_value){false, 0};
		return 0;
	}
	return KC_ENOENT;
}

static expr_value
eval_ok(const char *src)
{
	char err[256];
	expr_value v;
	int rv = expr_eval_str(src, test_lookup, NULL, &v, err, sizeof(err));

	if (rv != 0)
		KT_FAIL("'%s': %d %s %s", src, rv, err, kc_lasterr());
	return v;
}

static void
expect_num(const char *src, double want)
{
	expr_value v = eval_ok(src);

	if (!v.known || fabs(v.v - want) > 1e-9)
		KT_FAIL("'%s' = %s%g, want %g", src, v.known ? "" : "unknown ",
		    v.v, want);
}

static void
expect_unknown(const char *src)
{
	expr_value v = eval_ok(src);

	if (v.known)
		KT_FAIL("'%s' = %g, want unknown", src, v.v);
}

/* Parsing must fail with a message containing want. */
static void
expect_parse_error(const char *src, const char *want)
{
	char err[256];
	expr *e = NULL;
	int rv = expr_parse(src, &e, err, sizeof(err));

	if (rv != KC_EINVAL || e != NULL)
		KT_FAIL("'%s' parsed (rv %d), want error '%s'", src, rv, want);
	KT_CONTAINS(err, want);
}

static void
test_arithmetic(void)
{
	expect_num("1 + 2 * 3", 7);
	expect_num("(1 + 2) * 3", 9);
	expect_num("10 - 4 - 3", 3);
	expect_num("8 / 4 / 2", 1);
	expect_num("-3 + 5", 2);
	expect_num("--3", 3);
	expect_num("1.5e2", 150);
	expect_num(".5 * 4", 2);
	expect_num("dram / sm", 4);
	expect_num("dram - sm * 2", 40);
}

static void
test_comparisons_and_logic(void)
{
	expect_num("dram >= 80", 1);
	expect_num("dram > 80", 0);
	expect_num("sm <= 20 && dram != 0", 1);
	expect_num("sm == 20", 1);
	expect_num("!(dram < sm)", 1);
	expect_num("not flag", 0);
	expect_num("dram > 50 and sm < 30", 1);
	expect_num("dram < 50 or sm < 30", 1);
	expect_num("true && !false", 1);
	/* && binds tighter than ||. */
	expect_num("1 || 0 && 0", 1);
	expect_num("(1 || 0) && 0", 0);
}

static void
test_unknown(void)
{
	expect_unknown("missing");
	expect_unknown("missing + 1");
	expect_unknown("missing > 3");
	expect_unknown("!missing");
	expect_unknown("missing && flag");
	expect_unknown("missing || zero");
	/* Kleene logic: a known deciding operand wins. */
	expect_num("missing && zero", 0);
	expect_num("zero && missing", 0);
	expect_num("missing || flag", 1);
	expect_num("flag || missing", 1);
	/* Explicit handling. */
	expect_num("known(missing)", 0);
	expect_num("known(dram)", 1);
	expect_num("default(missing, 42)", 42);
	expect_num("default(dram, 42)", 80);
	expect_num("default(missing > 3, false)", 0);
	expect_unknown("max(dram, missing)");
}

static void
test_division_by_zero(void)
{
	expect_unknown("1 / 0");
	expect_unknown("dram / zero");
	expect_unknown("dram / (sm - 20)");
	/* Unknown, not an error, and then handled like any unknown. */
	expect_num("default(dram / zero, -1)", -1);
	expect_num("known(dram / zero)", 0);
	expect_num("dram / zero > 1 || flag", 1);
	/* Overflow to infinity is undefined too. */
	expect_unknown("big * big");
}

static void
test_functions(void)
{
	expect_num("min(3, 1, 2)", 1);
	expect_num("max(dram, sm, 99)", 99);
	expect_num("abs(sm - dram)", 60);
	expect_num("clamp(dram, 0, 50)", 50);
	expect_num("clamp(-5, 0, 50)", 0);
	expect_num("max(1)", 1);
}

static void
test_unknown_identifier(void)
{
	expr_value v;
	char err[128];

	KT_EQ_INT(expr_eval_str("nosuchfield > 3", test_lookup, NULL, &v, err,
	              sizeof(err)),
	    KC_ENOENT);
	KT_CONTAINS(kc_lasterr(), "nosuchfield");
	/* Short-circuit does not hide it when evaluated. */
	KT_EQ_INT(expr_eval_str("flag && nosuch", test_lookup, NULL, &v, err,
	              sizeof(err)),
	    KC_ENOENT);
	/* No lookup at all. */
	KT_EQ_INT(
	    expr_eval_str("x", NULL, NULL, &v, err, sizeof(err)), KC_ENOENT);
}

static int
collect_ident(void *arg, const char *name)
{
	kc_str *s = arg;

	return kc_str_printf(s, "%s,", name);
}

static void
test_idents(void)
{
	expr *e;
	char err[128];
	kc_str s = {0};

	KT_OK(expr_parse("a + max(b, c) > default(d, 1) && !known(a)", &e, err,
	    sizeof(err)));
	KT_OK(expr_idents(e, collect_ident, &s));
	KT_EQ_STR(s.buf, "a,b,c,d,a,");
	KT_EQ_STR(expr_source(e), "a + max(b, c) > default(d, 1) && !known(a)");
	kc_str_free(&s);
	expr_free(e);
}

static void
test_malformed(void)
{
	char deep[256], longsrc[EXPR_MAX_LEN + 16];

	expect_parse_error("", "empty expression");
	expect_parse_error("   ", "empty expression");
	expect_parse_error("1 +", "column 4: expected a number");
	expect_parse_error("(1 + 2", "expected ')'");
	expect_parse_error("1 + 2)", "unexpected ')'");
	expect_parse_error("dram >> 3", "expected a number");
	expect_parse_error("a < b < c", "comparisons do not chain");
	expect_parse_error("foo(1)", "unknown function 'foo'");
	expect_parse_error("max()", "'max' takes at least 1 argument");
	expect_parse_error("abs(1, 2)", "too many arguments for 'abs'");
	expect_parse_error("clamp(1, 2)", "'clamp' takes 3 arguments");
	expect_parse_error("max(1, 2", "expected ',' or ')'");
	expect_parse_error("1.2.3", "malformed number");
	expect_parse_error("12abc", "malformed number");
	expect_parse_error("1e999", "out of range");
	expect_parse_error("dram $ 3", "unexpected '$ 3'");
	expect_parse_error("a = 3", "unexpected '= 3'");
	expect_parse_error("and", "expected a value");
	expect_parse_error("a\x01", "control character");
	expect_parse_error("&& a", "expected a number, a name or '('");
	/* Depth is bounded: a hostile policy cannot blow the stack. */
	memset(deep, '(', 200);
	deep[200] = '1';
	deep[201] = '\0';
	expect_parse_error(deep, "nested too deeply");
	memset(deep, '!', 200);
	expect_parse_error(deep, "nested too deeply");
	memset(deep, '-', 200);
	expect_parse_error(deep, "nested too deeply");
	memset(longsrc, '1', sizeof(longsrc) - 1);
	longsrc[sizeof(longsrc) - 1] = '\0';
	expect_parse_error(longsrc, "limit");
	{
		expr *e = (expr *)1;
		KT_EQ_INT(expr_parse(NULL, &e, NULL, 0), KC_EINVAL);
		KT_ASSERT(e == NULL);
	}
}

static void
test_long_chain(void)
{
	/* A long flat chain is fine (depth is nesting, not length). */
	kc_str s = {0};

	for (int i = 0; i < 300; i++)
		KT_OK(kc_str_append(&s, i ? " + 1" : "1"));
	expect_num(s.buf, 300);
	kc_str_free(&s);
}

static void
test_value_str(void)
{
	char buf[32];

	expr_value_str((expr_value){false, 0}, true, buf, sizeof(buf));
	KT_EQ_STR(buf, "unknown");
	expr_value_str((expr_value){true, 1}, true, buf, sizeof(buf));
	KT_EQ_STR(buf, "true");
	expr_value_str((expr_value){true, 2.5}, false, buf, sizeof(buf));
	KT_EQ_STR(buf, "2.5");
}

int
main(void)
{
	KT_RUN(test_arithmetic);
	KT_RUN(test_comparisons_and_logic);
	KT_RUN(test_unknown);
	KT_RUN(test_division_by_zero);
	KT_RUN(test_functions);
	KT_RUN(test_unknown_identifier);
	KT_RUN(test_idents);
	KT_RUN(test_malformed);
	KT_RUN(test_long_chain);
	KT_RUN(test_value_str);
	return 0;
}
