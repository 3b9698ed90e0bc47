/*
 * npy.h - NumPy's .npy format (version 1.0, 2.0 and 3.0 headers), read and
 * written in C. Only what kclaw's tensors need: little-endian, C order,
 * the dtypes of kclaw.DType (f4 f2 f8 i4 i8 i1 u1; bfloat16, which NumPy
 * has no code for, travels as the 2-byte void type '<V2', as ml_dtypes
 * saves it).
 */
#ifndef KC_NPY_H
#define KC_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "kclaw.pb-c.h"

#define KC_NPY_MAX_DIMS 8

typedef struct {
	Kclaw__DType dtype;
	int ndim;
	int64_t shape[KC_NPY_MAX_DIMS];
	size_t count;     /* product of shape (1 for a 0-d array) */
	size_t elem_size; /* bytes per element */
	void *data;       /* count * elem_size bytes, malloc'd */
} kc_npy;

/* Bytes per element of a dtype in .npy files; 0 if unsupported. */
size_t kc_npy_elem_size(Kclaw__DType dtype);

/*
 * Parses an .npy image of len bytes. what names it in errors (a path).
 * On success out holds a malloc'd copy of the data (kc_npy_free). Refuses
 * Fortran order, big-endian data, object arrays and truncated files with a
 * message that says which.
 */
int kc_npy_parse(const void *buf, size_t len, const char *what, kc_npy *out);
/* Reads and parses a file (at most max_len bytes). */
int kc_npy_read(const char *path, size_t max_len, kc_npy *out);
/* Encodes arr (version 1.0 header) into a malloc'd buffer (caller frees). */
int kc_npy_encode(const kc_npy *arr, void **buf, size_t *len);
int kc_npy_write(const char *path, const kc_npy *arr);
void kc_npy_free(kc_npy *arr);

#endif
