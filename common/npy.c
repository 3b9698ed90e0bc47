#include "npy.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bundle.h"
#include "kc_err.h"
#include "kc_util.h"

static const struct {
	Kclaw__DType dtype;
	const char *descr; /* NumPy's dtype.str, little-endian */
} npy_types[] = {
    {KCLAW__DTYPE__F32, "<f4"},
    {KCLAW__DTYPE__F16, "<f2"},
    {KCLAW__DTYPE__BF16, "<V2"},
    {KCLAW__DTYPE__F64, "<f8"},
    {KCLAW__DTYPE__I32, "<i4"},
    {KCLAW__DTYPE__I64, "<i8"},
    {KCLAW__DTYPE__I8, "|i1"},
    {KCLAW__DTYPE__U8, "|u1"},
    {KCLAW__DTYPE__BOOL, "|b1"},
};

/* Sizes come from the bundle's one dtype table. */
size_t
kc_npy_elem_size(Kclaw__DType dtype)
{
	return kc_dtype_size(dtype);
}

/* Finds the value text after 'key': in a Python dict literal. */
static const char *
npy_dict_value(const char *hdr, const char *key)
{
	char pat[32];
	const char *p;

	snprintf(pat, sizeof(pat), "'%s'", key);
	if ((p = strstr(hdr, pat)) == NULL)
		return NULL;
	p += strlen(pat);
	while (*p == ' ')
		p++;
	if (*p != ':')
		return NULL;
	p++;
	while (*p == ' ')
		p++;
	return p;
}

/* The dtype as written (h->descr) and kclaw's name for it, if any. */
static int
npy_parse_descr(const char *v, const char *what, kc_npy_header *h)
{
	char *d = h->descr;
	size_t n = 0;

	if (*v != '\'' && *v != '"')
		return kc_seterr(KC_EINVAL,
		    "%s: dtype is not a simple type (structured arrays are "
		    "not supported)",
		    what);
	v++;
	while (*v && *v != '\'' && *v != '"' && n + 1 < sizeof(h->descr))
		d[n++] = *v++;
	d[n] = '\0';
	/* A one-byte type has no byte order; '=' is native order, which is
	 * little-endian on every GPU host. */
	if (d[0] == '>' && strcmp(d + 1, "i1") != 0 &&
	    strcmp(d + 1, "u1") != 0 && strcmp(d + 1, "b1") != 0)
		return kc_seterr(KC_EINVAL,
		    "%s: big-endian data ('%s') is not supported; save it "
		    "with arr.astype(arr.dtype.newbyteorder('<'))",
		    what, d);
	h->dtype = KCLAW__DTYPE__DTYPE_UNSPECIFIED;
	if (strchr("<>|=", d[0]) == NULL || d[0] == '\0')
		return 0;
	for (size_t i = 0; i < KC_ARRAY_LEN(npy_types); i++)
		if (strcmp(npy_types[i].descr + 1, d + 1) == 0)
			h->dtype = npy_types[i].dtype;
	return 0;
}

/* The shape tuple at v, "(2, 3)" or "(7,)" or "()". */
static int
npy_parse_shape(const char *v, const char *what, kc_npy_header *h)
{
	if (v == NULL || *v != '(')
		return kc_seterr(KC_EINVAL, "%s: header has no 'shape'", what);
	v++;
	h->count = 1;
	for (;;) {
		char *end;
		long long d;

		while (*v == ' ' || *v == ',')
			v++;
		if (*v == ')')
			return 0;
		if (!isdigit((unsigned char)*v))
			return kc_seterr(KC_EINVAL,
			    "%s: malformed shape in the header", what);
		errno = 0;
		d = strtoll(v, &end, 10);
		if (errno != 0)
			return kc_seterr(
			    KC_EINVAL, "%s: shape overflows", what);
		v = end;
		if (h->ndim == KC_NPY_MAX_DIMS)
			return kc_seterr(KC_EINVAL,
			    "%s: more than %d dimensions", what,
			    KC_NPY_MAX_DIMS);
		h->shape[h->ndim++] = d;
		if (d != 0 && h->count > SIZE_MAX / (size_t)d)
			return kc_seterr(
			    KC_EINVAL, "%s: shape overflows", what);
		h->count *= (size_t)d;
		while (*v == ' ')
			v++;
		if (*v == 'L')
			v++;
	}
}

int
kc_npy_parse_header(
    const void *buf, size_t len, const char *what, kc_npy_header *h)
{
	const unsigned char *b = buf;
	size_t hlen, off;
	char *hdr;
	const char *v;
	int rv;

	memset(h, 0, sizeof(*h));
	if (len < 10 || memcmp(b, "\x93NUMPY", 6) != 0)
		return kc_seterr(KC_EINVAL,
		    "%s is not a .npy file (magic \\x93NUMPY missing); write "
		    "it with numpy.save",
		    what);
	if (b[6] == 1) {
		hlen = (size_t)b[8] | (size_t)b[9] << 8;
		off = 10;
	} else if (b[6] == 2 || b[6] == 3) {
		if (len < 12)
			return kc_seterr(
			    KC_EINVAL, "%s: truncated header", what);
		hlen = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 |
		    (size_t)b[11] << 24;
		off = 12;
	} else {
		return kc_seterr(KC_EINVAL,
		    "%s: .npy version %d.%d is not supported; write it with "
		    "numpy.save",
		    what, b[6], b[7]);
	}
	if (hlen > KC_NPY_MAX_HEADER)
		return kc_seterr(KC_EINVAL,
		    "%s: the .npy header is %zu bytes, over the limit of %zu",
		    what, hlen, KC_NPY_MAX_HEADER);
	if (hlen > len - off)
		return kc_seterr(KC_EINVAL, "%s: truncated header", what);
	if ((hdr = malloc(hlen + 1)) == NULL)
		return KC_ENOMEM;
	memcpy(hdr, b + off, hlen);
	hdr[hlen] = '\0';
	h->data_offset = off + hlen;

	rv = 0;
	if ((v = npy_dict_value(hdr, "descr")) == NULL)
		rv = kc_seterr(KC_EINVAL, "%s: header has no 'descr'", what);
	if (rv == 0)
		rv = npy_parse_descr(v, what, h);
	if (rv == 0 &&
	    ((v = npy_dict_value(hdr, "fortran_order")) == NULL ||
	        strncmp(v, "False", 5) != 0))
		rv = kc_seterr(KC_EINVAL,
		    "%s: Fortran-ordered arrays are not supported; save "
		    "np.ascontiguousarray(arr)",
		    what);
	if (rv == 0)
		rv = npy_parse_shape(npy_dict_value(hdr, "shape"), what, h);
	free(hdr);
	return rv;
}

int
kc_npy_read_header(int fd, const char *what, kc_npy_header *h)
{
	unsigned char pre[12], *buf;
	size_t hlen, need;
	ssize_t n;
	int rv;

	memset(h, 0, sizeof(*h));
	n = pread(fd, pre, sizeof(pre), 0);
	if (n < 0)
		return kc_seterr(
		    KC_EIO, "%s: cannot read: %s", what, strerror(errno));
	/* Too short or without magic: the parser says which. */
	if (n < 12 || memcmp(pre, "\x93NUMPY", 6) != 0 || pre[6] < 1 ||
	    pre[6] > 3)
		return kc_npy_parse_header(pre, (size_t)n, what, h);
	hlen = pre[6] == 1 ? ((size_t)pre[8] | (size_t)pre[9] << 8)
	                   : ((size_t)pre[8] | (size_t)pre[9] << 8 |
	                         (size_t)pre[10] << 16 | (size_t)pre[11] << 24);
	if (hlen > KC_NPY_MAX_HEADER)
		return kc_npy_parse_header(pre, (size_t)n, what, h);
	need = (pre[6] == 1 ? 10 : 12) + hlen;
	if ((buf = malloc(need)) == NULL)
		return KC_ENOMEM;
	n = pread(fd, buf, need, 0);
	if (n < 0)
		rv = kc_seterr(
		    KC_EIO, "%s: cannot read: %s", what, strerror(errno));
	else
		rv = kc_npy_parse_header(buf, (size_t)n, what, h);
	free(buf);
	return rv;
}

int
kc_npy_parse(const void *buf, size_t len, const char *what, kc_npy *out)
{
	kc_npy_header h;
	size_t need;
	kc_npy a = {0};
	int rv;

	memset(out, 0, sizeof(*out));
	if ((rv = kc_npy_parse_header(buf, len, what, &h)) != 0)
		return rv;
	if (h.dtype == KCLAW__DTYPE__DTYPE_UNSPECIFIED)
		return kc_seterr(KC_EINVAL,
		    "%s: dtype '%s' is not supported; use float32, float16, "
		    "float64, int32, int64, int8, uint8 or bool",
		    what, h.descr);
	a.dtype = h.dtype;
	a.ndim = h.ndim;
	memcpy(a.shape, h.shape, sizeof(a.shape));
	a.count = h.count;
	a.elem_size = kc_npy_elem_size(a.dtype);
	if (a.count > SIZE_MAX / a.elem_size)
		return kc_seterr(KC_EINVAL, "%s: shape overflows", what);
	need = a.count * a.elem_size;
	if (len - h.data_offset < need)
		return kc_seterr(KC_EINVAL,
		    "%s: truncated data: %zu bytes for %zu elements of %zu "
		    "bytes",
		    what, len - h.data_offset, a.count, a.elem_size);
	if ((a.data = malloc(need ? need : 1)) == NULL)
		return KC_ENOMEM;
	memcpy(a.data, (const unsigned char *)buf + h.data_offset, need);
	*out = a;
	return 0;
}

int
kc_npy_read(const char *path, size_t max_len, kc_npy *out)
{
	char *buf;
	size_t len;
	int rv;

	/* Opened as a bundle's files are: a regular file, never waited on. */
	if ((rv = kc_bundle_read_file(
	         path, path, KC_OPEN_NPY, NULL, max_len, &buf, &len)) != 0)
		return rv;
	rv = kc_npy_parse(buf, len, path, out);
	free(buf);
	return rv;
}

int
kc_npy_encode(const kc_npy *arr, void **buf, size_t *len)
{
	char hdr[256];
	const char *descr = NULL;
	size_t n, total, data_len;
	unsigned char *b;

	for (size_t i = 0; i < KC_ARRAY_LEN(npy_types); i++)
		if (npy_types[i].dtype == arr->dtype)
			descr = npy_types[i].descr;
	if (descr == NULL || arr->ndim < 0 || arr->ndim > KC_NPY_MAX_DIMS)
		return kc_seterr(KC_EINVAL, "npy: bad dtype or rank");
	n = (size_t)snprintf(hdr, sizeof(hdr),
	    "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
	for (int i = 0; i < arr->ndim; i++)
		n += (size_t)snprintf(hdr + n, sizeof(hdr) - n, "%lld,%s",
		    (long long)arr->shape[i], i + 1 < arr->ndim ? " " : "");
	n += (size_t)snprintf(hdr + n, sizeof(hdr) - n, "), }");
	/* Pad with spaces so data starts 64-byte aligned; end with '\n'. */
	while ((10 + n + 1) % 64 != 0)
		hdr[n++] = ' ';
	hdr[n++] = '\n';
	data_len = arr->count * kc_npy_elem_size(arr->dtype);
	total = 10 + n + data_len;
	if ((b = malloc(total)) == NULL)
		return KC_ENOMEM;
	memcpy(b, "\x93NUMPY\x01\x00", 8);
	b[8] = (unsigned char)(n & 0xff);
	b[9] = (unsigned char)(n >> 8);
	memcpy(b + 10, hdr, n);
	if (data_len)
		memcpy(b + 10 + n, arr->data, data_len);
	*buf = b;
	*len = total;
	return 0;
}

int
kc_npy_write(const char *path, const kc_npy *arr)
{
	void *buf;
	size_t len;
	int rv;

	if ((rv = kc_npy_encode(arr, &buf, &len)) != 0)
		return rv;
	rv = kc_write_file(path, buf, len);
	free(buf);
	return rv;
}

void
kc_npy_free(kc_npy *arr)
{
	if (arr == NULL)
		return;
	free(arr->data);
	memset(arr, 0, sizeof(*arr));
}
