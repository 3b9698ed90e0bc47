/*
 * verify.c - comparing outputs on the host.
 */
#include "verify.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

float
sbx_half_to_float(uint16_t h)
{
	uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f,
	         man = h & 0x3ff, bits;
	float f;

	if (exp == 0) {
		f = ldexpf((float)man, -24);
		return sign ? -f : f;
	}
	if (exp == 31)
		bits = sign | 0x7f800000u | (man << 13);
	else
		bits = sign | ((exp + 112) << 23) | (man << 13);
	memcpy(&f, &bits, 4);
	return f;
}

float
sbx_bf16_to_float(uint16_t h)
{
	uint32_t bits = (uint32_t)h << 16;
	float f;

	memcpy(&f, &bits, 4);
	return f;
}

uint16_t
sbx_float_to_bf16(float f)
{
	uint32_t bits;

	memcpy(&bits, &f, 4);
	if (isnan(f))
		return 0x7fc0;
	/* Round to nearest even. */
	bits += 0x7fff + ((bits >> 16) & 1);
	return (uint16_t)(bits >> 16);
}

uint16_t
sbx_float_to_half(float f)
{
	uint32_t bits, sign, man;
	int exp;

	memcpy(&bits, &f, 4);
	sign = (bits >> 16) & 0x8000;
	exp = (int)((bits >> 23) & 0xff) - 127 + 15;
	man = bits & 0x7fffff;
	if (isnan(f))
		return (uint16_t)(sign | 0x7e00);
	if (exp >= 31)
		return (uint16_t)(sign | 0x7c00);
	if (exp <= 0) {
		if (exp < -10)
			return (uint16_t)sign;
		man |= 0x800000;
		return (uint16_t)(sign |
		    ((man >> (14 - exp)) + ((man >> (13 - exp)) & 1)));
	}
	return (uint16_t)(sign | (uint32_t)(exp << 10) |
	    ((man >> 13) + ((man >> 12) & 1)));
}

double
sbx_elem_get(Kclaw__DType dtype, const void *buf, size_t i)
{
	switch (dtype) {
	case KCLAW__DTYPE__F32: return ((const float *)buf)[i];
	case KCLAW__DTYPE__F64: return ((const double *)buf)[i];
	case KCLAW__DTYPE__F16:
		return sbx_half_to_float(((const uint16_t *)buf)[i]);
	case KCLAW__DTYPE__BF16:
		return sbx_bf16_to_float(((const uint16_t *)buf)[i]);
	case KCLAW__DTYPE__I32: return ((const int32_t *)buf)[i];
	case KCLAW__DTYPE__I64: return (double)((const int64_t *)buf)[i];
	case KCLAW__DTYPE__I8: return ((const int8_t *)buf)[i];
	case KCLAW__DTYPE__U8: return ((const uint8_t *)buf)[i];
	default: return NAN;
	}
}

typedef struct {
	Kclaw__DType dtype;
	const void *got, *exp;
	size_t lo, hi;
	double atol, rtol;
	sbx_cmp r;
	double err2, exp2;
} cmp_part;

static inline void
cmp_one(cmp_part *p, size_t i, double e, double g)
{
	sbx_cmp *r = &p->r;
	double d, score;

	if (isnan(e) && isnan(g))
		return;
	if (isnan(g) || isnan(e) || isinf(g) != isinf(e)) {
		if (isnan(g))
			r->nan_count++;
		r->bad_count++;
		score = INFINITY;
		d = INFINITY;
	} else if (isinf(e)) {
		d = (g == e) ? 0 : INFINITY;
		score = d;
		if (g != e)
			r->bad_count++;
	} else {
		double lim = p->atol + p->rtol * fabs(e);
		d = fabs(g - e);
		score = lim > 0 ? d / lim : (d > 0 ? INFINITY : 0);
		if (d > lim)
			r->bad_count++;
		p->err2 += d * d;
		p->exp2 += e * e;
		if (e != 0 && d / fabs(e) > r->max_rel_err)
			r->max_rel_err = d / fabs(e);
	}
	if (d > r->max_abs_err)
		r->max_abs_err = d;
	if (score > r->worst_score) {
		r->worst_score = score;
		r->worst = i;
		r->expected = e;
		r->got = g;
	}
}

static void *
cmp_run(void *arg)
{
	cmp_part *p = arg;

	p->r.worst_score = -1;
	if (p->dtype == KCLAW__DTYPE__F32) {
		/* The common case, kept free of divisions: an element within
		 * tolerance only updates the maxima when it beats them (a
		 * multiply decides), anything else takes the general path. */
		const float *ep = p->exp, *gp = p->got;
		sbx_cmp *r = &p->r;
		double err2 = 0, exp2 = 0;
		for (size_t i = p->lo; i < p->hi; i++) {
			double e = ep[i], g = gp[i];
			double d = fabs(g - e), ae = fabs(e);
			double lim = p->atol + p->rtol * ae;
			if (!(d <= lim) || isinf(e)) {
				cmp_one(p, i, e, g);
				continue;
			}
			err2 += d * d;
			exp2 += e * e;
			if (d > r->max_abs_err)
				r->max_abs_err = d;
			if (d > r->max_rel_err * ae && ae > 0)
				r->max_rel_err = d / ae;
			if (d > r->worst_score * lim) {
				r->worst_score = lim > 0 ? d / lim : 0;
				r->worst = i;
				r->expected = e;
				r->got = g;
			}
		}
		p->err2 += err2;
		p->exp2 += exp2;
		return NULL;
	}
	for (size_t i = p->lo; i < p->hi; i++)
		cmp_one(p, i, sbx_elem_get(p->dtype, p->exp, i),
		    sbx_elem_get(p->dtype, p->got, i));
	return NULL;
}

void
sbx_compare(Kclaw__DType dtype, const void *got, const void *expected,
    size_t count, const Kclaw__Tolerance *tol, int nthreads, sbx_cmp *out)
{
	cmp_part parts[16];
	pthread_t th[16];
	int n = nthreads < 1 ? 1 : nthreads > 16 ? 16 : nthreads;
	double err2 = 0, exp2 = 0;

	if (count < ((size_t)1 << 20))
		n = 1;
	memset(out, 0, sizeof(*out));
	out->worst_score = -1;
	for (int t = 0; t < n; t++) {
		parts[t] = (cmp_part){.dtype = dtype,
		    .got = got,
		    .exp = expected,
		    .lo = count * (size_t)t / (size_t)n,
		    .hi = count * (size_t)(t + 1) / (size_t)n,
		    .atol = tol ? tol->atol : 0,
		    .rtol = tol ? tol->rtol : 0};
		if (t > 0 &&
		    pthread_create(&th[t], NULL, cmp_run, &parts[t]) != 0) {
			cmp_run(&parts[t]);
			th[t] = 0;
		}
	}
	cmp_run(&parts[0]);
	for (int t = 0; t < n; t++) {
		sbx_cmp *r = &parts[t].r;
		if (t > 0 && th[t] != 0)
			pthread_join(th[t], NULL);
		out->bad_count += r->bad_count;
		out->nan_count += r->nan_count;
		if (r->max_abs_err > out->max_abs_err)
			out->max_abs_err = r->max_abs_err;
		if (r->max_rel_err > out->max_rel_err)
			out->max_rel_err = r->max_rel_err;
		if (r->worst_score > out->worst_score) {
			out->worst_score = r->worst_score;
			out->worst = r->worst;
			out->expected = r->expected;
			out->got = r->got;
		}
		err2 += parts[t].err2;
		exp2 += parts[t].exp2;
	}
	out->rel_norm = exp2 > 0 ? sqrt(err2) / sqrt(exp2) : sqrt(err2);
	if (out->nan_count > 0)
		out->rel_norm = INFINITY;
	out->ok = out->bad_count == 0 &&
	    (tol == NULL || tol->max_rel_norm <= 0 ||
	        out->rel_norm <= tol->max_rel_norm);
}

void
sbx_coords(const int64_t *shape, size_t ndim, size_t index, char *buf, size_t n)
{
	size_t idx[16], len = 0;

	if (ndim > 16)
		ndim = 16;
	for (size_t d = ndim; d-- > 0;) {
		size_t s = shape[d] > 0 ? (size_t)shape[d] : 1;
		idx[d] = index % s;
		index /= s;
	}
	len += (size_t)snprintf(buf + len, n - len, "[");
	for (size_t d = 0; d < ndim && len < n; d++)
		len += (size_t)snprintf(
		    buf + len, n - len, "%s%zu", d ? ", " : "", idx[d]);
	if (len < n)
		snprintf(buf + len, n - len, "]");
}
