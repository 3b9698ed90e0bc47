/*
 * integrity.c - the reviewer's rules that need no GPU (integrity.h).
 */
#include "integrity.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kc_err.h"
#include "spec_check.h"

void
sbx_ptx_globals_free(sbx_ptx_global *v, size_t n)
{
	for (size_t i = 0; v != NULL && i < n; i++)
		free(v[i].name);
	free(v);
}

/* The identifier that ends just before p (skipping blanks). */
static size_t
ptx_ident_before(const char *line, const char *p, const char **start)
{
	const char *e = p, *s;

	while (e > line && isspace((unsigned char)e[-1]))
		e--;
	s = e;
	while (s > line &&
	    (isalnum((unsigned char)s[-1]) || s[-1] == '_' || s[-1] == '$'))
		s--;
	*start = s;
	return (size_t)(e - s);
}

int
sbx_ptx_globals(const char *ptx, sbx_ptx_global **names, size_t *n)
{
	sbx_ptx_global *v = NULL;
	size_t nv = 0, cap = 0;
	const char *line = ptx;

	*names = NULL;
	*n = 0;
	while (line != NULL && *line != '\0') {
		const char *end = strchr(line, '\n');
		size_t len = end ? (size_t)(end - line) : strlen(line);
		char buf[1024];
		const char *g, *stop, *s;
		size_t il;

		if (len >= sizeof(buf))
			len = sizeof(buf) - 1;
		memcpy(buf, line, len);
		buf[len] = '\0';
		line = end ? end + 1 : NULL;
		/* A declaration at module scope: `[.visible|.weak] .global
		 * ... name[N] [= {...}];`. Parameters (.param), externs
		 * (declared elsewhere) and comments are not state. */
		g = strstr(buf, ".global");
		if (g == NULL || strstr(buf, ".extern") != NULL ||
		    strstr(buf, "//") != NULL)
			continue;
		for (s = buf; isspace((unsigned char)*s); s++)
			;
		if (*s != '.')
			continue;
		stop = strpbrk(g, "[=;");
		if (stop == NULL)
			continue;
		il = ptx_ident_before(buf, stop, &s);
		if (il == 0 || s <= g + 7)
			continue;
		if (nv == cap) {
			sbx_ptx_global *nvp;
			cap = cap ? cap * 2 : 8;
			if ((nvp = realloc(v, cap * sizeof(*v))) == NULL)
				goto nomem;
			v = nvp;
		}
		if ((v[nv].name = strndup(s, il)) == NULL)
			goto nomem;
		v[nv].initialised = strchr(stop, '=') != NULL;
		nv++;
	}
	*names = v;
	*n = nv;
	return 0;
nomem:
	sbx_ptx_globals_free(v, nv);
	return kc_seterr(KC_ENOMEM, "out of memory reading the PTX's globals");
}

/* Whether the PTX calls function name (a call, or its declaration). */
static int
ptx_calls(const char *ptx, const char *name)
{
	size_t n = strlen(name);

	for (const char *p = ptx; (p = strstr(p, name)) != NULL; p += n) {
		char before = p == ptx ? ' ' : p[-1], after = p[n];
		if ((isalnum((unsigned char)before) || before == '_') ||
		    (isalnum((unsigned char)after) || after == '_'))
			continue;
		/* `.func ... malloc(` or `call ... malloc,` */
		for (const char *q = p; q > ptx && q[-1] != '\n'; q--)
			if (strncmp(q - 1, ".func", 5) == 0 ||
			    strncmp(q - 1, "call", 4) == 0)
				return 1;
	}
	return 0;
}

const char *
sbx_ptx_refusal(const char *ptx)
{
	if (ptx == NULL)
		return NULL;
	/* Every printf call contends for one buffer the driver drains at
	 * each synchronisation (an evaluation stalls past its deadline), and
	 * nobody reads the output. */
	if (ptx_calls(ptx, "vprintf"))
		return "kernel.cu calls printf on the device: candidates may "
		       "not print (the output is discarded, and printing from "
		       "many threads stalls an evaluation past its deadline); "
		       "remove the printf calls";
	/* The device heap outlives a run and is not the plan's: state kept
	 * there would carry one run's work into the next. */
	if (ptx_calls(ptx, "malloc") || ptx_calls(ptx, "free") ||
	    ptx_calls(ptx, "__nv_aligned_device_malloc"))
		return "kernel.cu allocates on the device heap (malloc/free/"
		       "new): candidates may not, because heap memory outlives "
		       "a run; declare the memory as a scratch buffer in "
		       "plan.json instead";
	return NULL;
}

/* Copies source without // and block comments, so a comment that names
 * a type is not taken for its use. */
static char *
strip_comments(const char *src)
{
	size_t n = strlen(src);
	char *out = malloc(n + 1), *o = out;

	if (out == NULL)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		if (src[i] == '/' && src[i + 1] == '/') {
			while (i < n && src[i] != '\n')
				i++;
			*o++ = '\n';
		} else if (src[i] == '/' && src[i + 1] == '*') {
			i += 2;
			while (
			    i + 1 < n && !(src[i] == '*' && src[i + 1] == '/'))
				i++;
			i++;
			*o++ = ' ';
		} else {
			*o++ = src[i];
		}
	}
	*o = '\0';
	return out;
}

static int
has_word(const char *text, const char *w)
{
	size_t n = strlen(w);

	for (const char *p = text; (p = strstr(p, w)) != NULL; p += n) {
		char b = p == text ? ' ' : p[-1], a = p[n];
		if (!(isalnum((unsigned char)b) || b == '_') &&
		    !(isalnum((unsigned char)a) || a == '_'))
			return 1;
	}
	return 0;
}

static void
what_add(char *what, size_t len, const char *item)
{
	size_t used = strlen(what);

	if (strstr(what, item) != NULL || used + 3 >= len)
		return;
	snprintf(what + used, len - used, "%s%s", used ? ", " : "", item);
}

int
sbx_precision_scan(const char *source, const sbx_plan *plan,
    const Kclaw__TaskSpec *task, char *what, size_t whatlen)
{
	/* Words that mean the arithmetic is done below f32. Substrings of
	 * PTX-level types (f16, bf16) are matched only as these spellings. */
	static const char *low[] = {"__half", "__half2", "half2",
	    "__nv_bfloat16", "__nv_bfloat162", "nv_bfloat16", "__half_raw",
	    "__float2half", "__float2half_rn", "__float2bfloat16",
	    "__float2bfloat16_rn", "__hadd", "__hmul", "__hfma",
	    "__nv_fp8_e4m3", "__nv_fp8_e5m2", "__nv_fp8x2_e4m3",
	    "__nv_fp8x4_e4m3", "wmma::precision::tf32", "__float_to_tf32",
	    "precision::tf32", "tf32", "e4m3", "e5m2", NULL};
	int any_float = 0;
	char *text;

	what[0] = '\0';
	for (size_t t = 0; task != NULL && t < task->n_tensors; t++) {
		Kclaw__DType d = task->tensors[t]->dtype;
		if (d == KCLAW__DTYPE__F16 || d == KCLAW__DTYPE__BF16)
			return 0;
		any_float |= d == KCLAW__DTYPE__F32 || d == KCLAW__DTYPE__F64;
	}
	if (!any_float)
		return 0;
	if (source != NULL && (text = strip_comments(source)) != NULL) {
		for (int i = 0; low[i] != NULL; i++)
			if (has_word(text, low[i]))
				what_add(what, whatlen, low[i]);
		/* Inline PTX tensor-core instructions on 16-bit types. */
		if (strstr(text, ".f16") != NULL ||
		    strstr(text, ".bf16") != NULL)
			what_add(what, whatlen, "16-bit PTX (.f16/.bf16)");
		free(text);
	}
	for (size_t s = 0; plan != NULL && s < plan->nsteps; s++) {
		const sbx_step *st = &plan->steps[s];
		if (st->kind != SBX_STEP_MATMUL)
			continue;
		if (st->mm.dtype == KCLAW__DTYPE__F16 ||
		    st->mm.dtype == KCLAW__DTYPE__BF16)
			what_add(what, whatlen, "a 16-bit matmul step");
		if (st->mm.tf32)
			what_add(what, whatlen, "a matmul step with tf32");
	}
	return what[0] != '\0';
}

double
sbx_speed_of_light_ms(double in_bytes, double out_bytes, double flops,
    double bw_bytes_per_ms, double peak_flops_per_ms)
{
	double mem = 0, comp = 0;

	if (bw_bytes_per_ms > 0)
		mem = (out_bytes + 0.25 * in_bytes) / (1.25 * bw_bytes_per_ms);
	if (flops > 0 && peak_flops_per_ms > 0)
		comp = flops / peak_flops_per_ms;
	return mem > comp ? mem : comp;
}

double
sbx_precision_ops(
    const char *source, const sbx_plan *plan, const Kclaw__TaskSpec *task)
{
	double ops = 0;
	char what[512];

	for (size_t t = 0; task != NULL && t < task->n_tensors; t++) {
		Kclaw__DType d = task->tensors[t]->dtype;
		double o = d == KCLAW__DTYPE__F16 || d == KCLAW__DTYPE__BF16
		    ? SBX_OPS_16
		    : d == KCLAW__DTYPE__F32 ? SBX_OPS_F32
		    : d == KCLAW__DTYPE__F64 ? SBX_OPS_F64
		                             : 0;
		if (o > ops)
			ops = o;
	}
	if (ops == 0)
		return SBX_OPS_FP8;
	if (!sbx_precision_scan(source, plan, task, what, sizeof(what)))
		return ops;
	if (strstr(what, "fp8") != NULL || strstr(what, "e4m3") != NULL ||
	    strstr(what, "e5m2") != NULL)
		return SBX_OPS_FP8;
	if ((strstr(what, "16") != NULL || strstr(what, "half") != NULL ||
	        strstr(what, "__h") != NULL) &&
	    ops < SBX_OPS_16)
		ops = SBX_OPS_16;
	if (strstr(what, "tf32") != NULL && ops < SBX_OPS_TF32)
		ops = SBX_OPS_TF32;
	return ops;
}

double
sbx_roofline_ms(double in_bytes, double out_bytes, double flops, double copy_bw,
    double read_bw, double peak_flops_per_ms)
{
	double mem = 0, comp = 0;

	if (copy_bw > 0) {
		double r = read_bw > copy_bw ? read_bw : copy_bw;
		double w_inv = 2 / copy_bw - 1 / r; /* per write byte */

		mem = in_bytes / r + out_bytes * w_inv;
	}
	if (flops > 0 && peak_flops_per_ms > 0)
		comp = flops / peak_flops_per_ms;
	return mem > comp ? mem : comp;
}

int
sbx_error_small_vs_variation(double err_rel, double var_rel)
{
	if (!(err_rel == err_rel))
		return 0;
	if (err_rel <= SBX_VARIATION_FLOOR)
		return 1;
	return err_rel <= SBX_VARIATION_FRACTION * var_rel;
}

int
sbx_output_degenerate(double var_rel, const Kclaw__Tolerance *tol)
{
	return var_rel < kc_tolerance_admits(tol);
}

double
sbx_sample_ms(double ms, unsigned runs, double cost, double floor_ms)
{
	double raw, v;

	if (runs == 0)
		return 0;
	raw = ms / runs;
	v = (ms - cost) / runs;
	if (v < floor_ms)
		v = floor_ms;
	return v > raw ? raw : v;
}

int
sbx_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

double
sbx_sorted_median(const double *v, unsigned n)
{
	if (n == 0)
		return 0;
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double
sbx_median(double *v, unsigned n)
{
	qsort(v, n, sizeof(*v), sbx_cmp_double);
	return sbx_sorted_median(v, n);
}

double
sbx_plan_cost(double *over, unsigned n, double child_ms, size_t steps)
{
	double med, sum = 0, cost,
	            most = child_ms + (double)steps * SBX_PLAN_COST_SLACK_MS;
	unsigned kept = 0;

	if (n == 0)
		return child_ms;
	med = sbx_median(over, n);
	if (!(med > 0))
		return 0;
	/* The mean, not the median: a timed sample is its span plus the
	 * events' excess, and over samples far more spread than that excess
	 * the median moves by the excess's mean. An interrupted run (beyond
	 * a launch's slack from the median) is not the events' cost. */
	for (unsigned i = 0; i < n; i++)
		if (fabs(over[i] - med) <= SBX_PLAN_COST_SLACK_MS) {
			sum += over[i];
			kept++;
		}
	cost = kept > 0 ? sum / kept : med;
	if (!(cost > 0))
		return 0;
	return cost > most ? most : cost;
}

int
sbx_median_settled(const double *sorted, unsigned n, double ci)
{
	long lo, hi;
	double med;

	if (n < 2)
		return 0;
	lo = (long)floor(n / 2.0 - 0.98 * sqrt((double)n));
	if (lo < 0)
		lo = 0;
	hi = (long)n - 1 - lo;
	med = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
	return (sorted[hi] - sorted[lo]) / 2 <= ci * med;
}
