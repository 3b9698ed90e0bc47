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

/* The most header bytes a reader takes (NumPy writes well under 4 KiB). */
#define KC_NPY_MAX_HEADER ((size_t)64 << 10)

/*
 * What a .npy header says: its dtype as written (descr, e.g. "<f4"), the
 * dtype of kclaw it is (KCLAW__DTYPE__DTYPE_UNSPECIFIED when kclaw has none,
 * so that a caller can name the file's type against the one it expected),
 * the shape, and where the data starts.
 */
typedef struct {
	char descr[16];
	Kclaw__DType dtype;
	int ndim;
	int64_t shape[KC_NPY_MAX_DIMS];
	size_t count;       /* product of shape (1 for a 0-d array) */
	size_t data_offset; /* bytes before the data */
} kc_npy_header;

/*
 * Parses the header at the start of buf (len bytes, at least the whole
 * header). what names the file in errors. Refuses a missing magic, an
 * unknown version, a truncated or oversized header, Fortran order,
 * big-endian data, structured arrays and malformed shapes, each with a
 * message that says which. An unknown dtype is not an error here.
 */
int kc_npy_parse_header(
    const void *buf, size_t len, const char *what, kc_npy_header *h);
/* The same from the start of an open file (pread: fd's offset is kept). */
int kc_npy_read_header(int fd, const char *what, kc_npy_header *h);

/* Bytes per element of a dtype in .npy files; 0 if unsupported. */
size_t kc_npy_elem_size(Kclaw__DType dtype);

/*
 * Parses an .npy image of len bytes. what names it in errors (a path).
 * On success out holds a malloc'd copy of the data (kc_npy_free). Refuses
 * Fortran order, big-endian data, object arrays and truncated files with a
 * message that says which.
 */
int kc_npy_parse(const void *buf, size_t len, const char *what, kc_npy *out);
/* Reads and parses a file (at most max_len bytes), opened with
 * kc_bundle_open: a regular file only, a FIFO refused without waiting. */
int kc_npy_read(const char *path, size_t max_len, kc_npy *out);
/* Encodes arr (version 1.0 header) into a malloc'd buffer (caller frees). */
int kc_npy_encode(const kc_npy *arr, void **buf, size_t *len);
int kc_npy_write(const char *path, const kc_npy *arr);
void kc_npy_free(kc_npy *arr);

#endif
