/*
 * test_verify.c - the host comparison that decides WRONG_RESULT, and the
 * conversions it relies on.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kc_err.h"
#include "kc_test.h"
#include "verify.h"

static void
test_allclose_and_worst_element(void)
{
	Kclaw__Tolerance tol = KCLAW__TOLERANCE__INIT;
	float e[6] = {1, 2, 3, 4, 5, 6}, g[6] = {1, 2, 3.5f, 4, 5.001f, 6};
	sbx_cmp c;

	tol.atol = 1e-2;
	tol.rtol = 1e-3;
	sbx_compare(KCLAW__DTYPE__F32, e, e, 6, &tol, 1, &c);
	KT_ASSERT(c.ok);
	KT_EQ_INT(c.bad_count, 0);
	KT_ASSERT(c.rel_norm == 0);

	sbx_compare(KCLAW__DTYPE__F32, g, e, 6, &tol, 1, &c);
	KT_ASSERT(!c.ok);
	KT_EQ_INT(c.bad_count, 1); /* 5.001 is within 1e-2 + 5e-3 */
	KT_EQ_INT(c.worst, 2);
	KT_ASSERT(c.expected == 3 && c.got == 3.5);
	KT_ASSERT(fabs(c.max_abs_err - 0.5) < 1e-6);
	KT_ASSERT(c.rel_norm > 0.05 && c.rel_norm < 0.06);

	/* Within allclose but over the relative-norm limit. */
	tol.atol = 1;
	tol.max_rel_norm = 1e-3;
	sbx_compare(KCLAW__DTYPE__F32, g, e, 6, &tol, 1, &c);
	KT_EQ_INT(c.bad_count, 0);
	KT_ASSERT(!c.ok);
}

static void
test_poison_counts_as_nan(void)
{
	Kclaw__Tolerance tol = KCLAW__TOLERANCE__INIT;
	size_t n = 3 << 20; /* large enough for the threaded path */
	float *e = malloc(n * 4), *g = malloc(n * 4);
	sbx_cmp c;

	KT_ASSERT(e && g);
	for (size_t i = 0; i < n; i++)
		e[i] = g[i] = (float)i * 0.5f;
	/* The poison: all-ones bytes, which is a NaN in every float type. */
	memset(g + n / 2, 0xff, (n - n / 2) * 4);
	tol.atol = tol.rtol = 1e-5;
	sbx_compare(KCLAW__DTYPE__F32, g, e, n, &tol, 4, &c);
	KT_ASSERT(!c.ok);
	KT_EQ_INT(c.nan_count, n - n / 2);
	KT_EQ_INT(c.bad_count, n - n / 2);
	KT_ASSERT(c.worst >= n / 2);
	KT_ASSERT(isnan(c.got));
	free(e);
	free(g);
}

static void
test_half_types(void)
{
	Kclaw__Tolerance tol = KCLAW__TOLERANCE__INIT;
	uint16_t h[3], b[3];
	float v[3] = {1.5f, -0.333f, 65504.0f};
	sbx_cmp c;

	for (int i = 0; i < 3; i++) {
		h[i] = sbx_float_to_half(v[i]);
		b[i] = sbx_float_to_bf16(v[i]);
	}
	KT_ASSERT(sbx_half_to_float(h[0]) == 1.5f);
	KT_ASSERT(fabsf(sbx_half_to_float(h[1]) + 0.333f) < 1e-3f);
	KT_ASSERT(sbx_half_to_float(h[2]) == 65504.0f);
	KT_ASSERT(sbx_bf16_to_float(b[0]) == 1.5f);
	KT_ASSERT(fabsf(sbx_bf16_to_float(b[1]) + 0.333f) < 2e-3f);
	KT_ASSERT(isnan(sbx_half_to_float(0xffff)));
	KT_ASSERT(isnan(sbx_bf16_to_float(0xffff)));
	tol.atol = 1e-3;
	sbx_compare(KCLAW__DTYPE__F16, h, h, 3, &tol, 1, &c);
	KT_ASSERT(c.ok);
	KT_ASSERT(sbx_elem_get(KCLAW__DTYPE__I8, "\xfe", 0) == -2);
	KT_ASSERT(sbx_elem_get(KCLAW__DTYPE__U8, "\xfe", 0) == 254);
}

static void
test_coords(void)
{
	int64_t shape[3] = {4, 5, 6};
	char buf[64];

	sbx_coords(shape, 3, 1 * 30 + 2 * 6 + 3, buf, sizeof(buf));
	KT_EQ_STR(buf, "[1, 2, 3]");
	sbx_coords(shape, 0, 0, buf, sizeof(buf));
	KT_EQ_STR(buf, "[]");
}

int
main(void)
{
	KT_RUN(test_allclose_and_worst_element);
	KT_RUN(test_poison_counts_as_nan);
	KT_RUN(test_half_types);
	KT_RUN(test_coords);
	return 0;
}
