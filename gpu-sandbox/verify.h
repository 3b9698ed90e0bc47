/*
 * verify.h - host-side comparison of a candidate's outputs with the
 * expected ones, and the conversions it needs. Pure C: no GPU involved, so
 * CI tests it directly.
 */
#ifndef SBX_VERIFY_H
#define SBX_VERIFY_H

#include <stddef.h>
#include <stdint.h>

#include "kclaw.pb-c.h"

/* Element i of a buffer of dtype, as a double. */
double sbx_elem_get(Kclaw__DType dtype, const void *buf, size_t i);
float sbx_half_to_float(uint16_t h);
float sbx_bf16_to_float(uint16_t h);
uint16_t sbx_float_to_half(float f);
uint16_t sbx_float_to_bf16(float f);

/* The outcome of comparing one tensor. */
typedef struct {
	int ok;
	size_t worst;         /* index of the worst element */
	double worst_score;   /* |got-exp| / (atol + rtol*|exp|); inf for NaN */
	double expected, got; /* at the worst element */
	double max_abs_err, max_rel_err, rel_norm;
	uint64_t bad_count, nan_count;
} sbx_cmp;

/*
 * Compares count elements. An element passes when both are NaN, or
 * |got - exp| <= atol + rtol * |exp|; the tensor passes when every element
 * does and, if max_rel_norm > 0, ||got - exp|| / ||exp|| <= max_rel_norm.
 * A NaN where a number was expected (the poison left unwritten) counts in
 * nan_count. Uses up to nthreads threads for large tensors.
 */
void sbx_compare(Kclaw__DType dtype, const void *got, const void *expected,
    size_t count, const Kclaw__Tolerance *tol, int nthreads, sbx_cmp *out);

/* "[3, 17]" for a flat index into shape. */
void sbx_coords(
    const int64_t *shape, size_t ndim, size_t index, char *buf, size_t n);

#endif
