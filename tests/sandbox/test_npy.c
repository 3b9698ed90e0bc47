/*
 * test_npy.c - NumPy .npy files read and written in C (common/npy.h).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kc_err.h"
#include "kc_test.h"
#include "kc_util.h"
#include "npy.h"

/* A version 1.0 file as NumPy writes it for np.arange(6, dtype='<f4')
 * .reshape(2, 3): header padded to 64 bytes, newline-terminated. */
static size_t
make_npy(unsigned char *buf, const char *dict, const void *data, size_t n)
{
	size_t hlen = strlen(dict), total;

	memcpy(buf, "\x93NUMPY\x01\x00", 8);
	memcpy(buf + 10, dict, hlen);
	while ((10 + hlen + 1) % 64 != 0)
		buf[10 + hlen++] = ' ';
	buf[10 + hlen++] = '\n';
	buf[8] = (unsigned char)hlen;
	buf[9] = 0;
	total = 10 + hlen;
	memcpy(buf + total, data, n);
	return total + n;
}

static void
test_reads_numpy_layout(void)
{
	unsigned char buf[512];
	float v[6] = {0, 1, 2, 3, 4, 5};
	kc_npy a;
	size_t n = make_npy(buf,
	    "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", v,
	    sizeof(v));

	KT_OK(kc_npy_parse(buf, n, "a.npy", &a));
	KT_EQ_INT(a.dtype, KCLAW__DTYPE__F32);
	KT_EQ_INT(a.ndim, 2);
	KT_EQ_INT(a.shape[0], 2);
	KT_EQ_INT(a.shape[1], 3);
	KT_EQ_INT(a.count, 6);
	KT_ASSERT(((float *)a.data)[5] == 5.0f);
	kc_npy_free(&a);

	/* A 0-d array and a 1-d one with a trailing comma. */
	n = make_npy(buf,
	    "{'descr': '<i8', 'fortran_order': False, 'shape': (), }",
	    "\x07\0\0\0\0\0\0\0", 8);
	KT_OK(kc_npy_parse(buf, n, "s.npy", &a));
	KT_EQ_INT(a.ndim, 0);
	KT_EQ_INT(a.count, 1);
	KT_EQ_INT(((int64_t *)a.data)[0], 7);
	kc_npy_free(&a);
}

static void
test_refuses_bad_files(void)
{
	unsigned char buf[512];
	float v[6] = {0};
	kc_npy a;
	size_t n;

	KT_EQ_INT(kc_npy_parse("hello world", 11, "x.npy", &a), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "not a .npy file");

	n = make_npy(buf,
	    "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", v,
	    sizeof(v));
	KT_EQ_INT(kc_npy_parse(buf, n, "f.npy", &a), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "Fortran");

	n = make_npy(buf,
	    "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", v,
	    sizeof(v));
	KT_EQ_INT(kc_npy_parse(buf, n, "b.npy", &a), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "big-endian");

	n = make_npy(buf,
	    "{'descr': '<c8', 'fortran_order': False, 'shape': (3,), }", v,
	    sizeof(v));
	KT_EQ_INT(kc_npy_parse(buf, n, "c.npy", &a), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "'<c8' is not supported");

	n = make_npy(buf,
	    "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", v,
	    sizeof(v));
	KT_EQ_INT(kc_npy_parse(buf, n - 4, "t.npy", &a), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "truncated data");
	KT_EQ_INT(kc_npy_parse(buf, 20, "h.npy", &a), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "truncated header");
}

static void
test_roundtrip_every_dtype(void)
{
	static const Kclaw__DType types[] = {KCLAW__DTYPE__F32,
	    KCLAW__DTYPE__F16, KCLAW__DTYPE__BF16, KCLAW__DTYPE__F64,
	    KCLAW__DTYPE__I32, KCLAW__DTYPE__I64, KCLAW__DTYPE__I8,
	    KCLAW__DTYPE__U8};
	char dir[] = "/tmp/kc-npy-XXXXXX", path[64];

	KT_ASSERT(mkdtemp(dir) != NULL);
	for (size_t i = 0; i < KC_ARRAY_LEN(types); i++) {
		kc_npy a = {0}, b;
		unsigned char data[7 * 5 * 8];
		a.dtype = types[i];
		a.ndim = 2;
		a.shape[0] = 7;
		a.shape[1] = 5;
		a.count = 35;
		a.elem_size = kc_npy_elem_size(types[i]);
		for (size_t j = 0; j < sizeof(data); j++)
			data[j] = (unsigned char)(j * 31 + i);
		a.data = data;
		snprintf(path, sizeof(path), "%s/t%zu.npy", dir, i);
		KT_OK(kc_npy_write(path, &a));
		KT_OK(kc_npy_read(path, 1 << 20, &b));
		KT_EQ_INT(b.dtype, types[i]);
		KT_EQ_INT(b.ndim, 2);
		KT_EQ_INT(b.shape[1], 5);
		KT_ASSERT(memcmp(b.data, data, 35 * a.elem_size) == 0);
		kc_npy_free(&b);
		unlink(path);
	}
	rmdir(dir);
}

int
main(void)
{
	KT_RUN(test_reads_numpy_layout);
	KT_RUN(test_refuses_bad_files);
	KT_RUN(test_roundtrip_every_dtype);
	return 0;
}
