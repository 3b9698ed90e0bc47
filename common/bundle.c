/*
 * bundle.c - loads and validates task bundles and candidate folders.
 *
 * The loader builds a TaskSpec in an arena of its own allocations, then packs
 * it and unpacks a copy with protobuf-c's default allocator, so the caller
 * frees the result with the generated free_unpacked and an error half way
 * through frees everything with one call.
 */
#include "bundle.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kc_err.h"
#include "kc_util.h"
#include "npy.h"
#include "spec_check.h"

#define BUNDLE_JSON_MAX (1u << 20)
#define BUNDLE_SOURCE_MAX (4u << 20)
#define BUNDLE_MAX_TENSORS 1024
#define BUNDLE_MAX_DIMS 8
#define BUNDLE_MAX_SETS 64
#define BUNDLE_MAX_ELEMS (1ull << 40)
#define BUNDLE_NAME_MAX 63
/* task.json and plans need a few levels; cJSON stops at 1000 and then
 * says only that the text does not parse. */
#define BUNDLE_JSON_MAX_DEPTH 64
/* Integers in JSON are doubles; beyond 2^53 they are no longer exact. */
#define BUNDLE_JSON_INT_MAX 9007199254740992.0

/* ------------------------------------------------------------ enum tables */

static const struct {
	const char *name;
	Kclaw__DType dtype;
	size_t size;
	const char *npy; /* the .npy type code, without its byte order */
} bundle_dtypes[] = {
    {"f32", KCLAW__DTYPE__F32, 4, "f4"},
    {"f16", KCLAW__DTYPE__F16, 2, "f2"},
    /* NumPy has no bfloat16: ml_dtypes saves it as the 2-byte void type. */
    {"bf16", KCLAW__DTYPE__BF16, 2, "V2"},
    {"f64", KCLAW__DTYPE__F64, 8, "f8"},
    {"i32", KCLAW__DTYPE__I32, 4, "i4"},
    {"i64", KCLAW__DTYPE__I64, 8, "i8"},
    {"i8", KCLAW__DTYPE__I8, 1, "i1"},
    {"u8", KCLAW__DTYPE__U8, 1, "u1"},
    {"bool", KCLAW__DTYPE__BOOL, 1, "b1"},
};

static const struct {
	const char *name;
	Kclaw__Distribution dist;
	const char *keys[3]; /* the parameters it takes besides "dist" */
} bundle_dists[] = {
    {"normal", KCLAW__DISTRIBUTION__NORMAL, {"mean", "scale"}},
    {"uniform", KCLAW__DISTRIBUTION__UNIFORM, {"low", "high"}},
    {"heavy_tailed", KCLAW__DISTRIBUTION__HEAVY_TAILED, {"dof", "scale"}},
    {"zeros", KCLAW__DISTRIBUTION__ZEROS, {NULL}},
    {"ones", KCLAW__DISTRIBUTION__ONES, {NULL}},
    {"arange", KCLAW__DISTRIBUTION__ARANGE, {NULL}},
    {"randint", KCLAW__DISTRIBUTION__RANDINT, {"low", "high"}},
    {"from_npy", KCLAW__DISTRIBUTION__FROM_NPY, {NULL}},
};

static const struct {
	const char *name;
	Kclaw__TensorKind kind;
} bundle_kinds[] = {
    {"input", KCLAW__TENSOR_KIND__INPUT},
    {"parameter", KCLAW__TENSOR_KIND__PARAMETER},
    {"output", KCLAW__TENSOR_KIND__OUTPUT},
    {"scalar", KCLAW__TENSOR_KIND__SCALAR},
};

const char *
kc_dtype_name(Kclaw__DType dtype)
{
	for (size_t i = 0; i < KC_ARRAY_LEN(bundle_dtypes); i++)
		if (bundle_dtypes[i].dtype == dtype)
			return bundle_dtypes[i].name;
	return "unspecified";
}

size_t
kc_dtype_size(Kclaw__DType dtype)
{
	for (size_t i = 0; i < KC_ARRAY_LEN(bundle_dtypes); i++)
		if (bundle_dtypes[i].dtype == dtype)
			return bundle_dtypes[i].size;
	return 0;
}

const char *
kc_dist_name(Kclaw__Distribution dist)
{
	for (size_t i = 0; i < KC_ARRAY_LEN(bundle_dists); i++)
		if (bundle_dists[i].dist == dist)
			return bundle_dists[i].name;
	return "unspecified";
}

const char *
kc_tensor_kind_name(Kclaw__TensorKind kind)
{
	for (size_t i = 0; i < KC_ARRAY_LEN(bundle_kinds); i++)
		if (bundle_kinds[i].kind == kind)
			return bundle_kinds[i].name;
	return "unspecified";
}

/* ----------------------------------------------------------- guarded open */

static const char *
bundle_file_type(mode_t m)
{
	if (S_ISFIFO(m))
		return "a FIFO";
	if (S_ISDIR(m))
		return "a folder";
	if (S_ISCHR(m) || S_ISBLK(m))
		return "a device";
	if (S_ISSOCK(m))
		return "a socket";
	return "not a regular file";
}

int
kc_bundle_open(const char *path, const char *what, unsigned flags,
    const kc_path_rule *rule, kc_bundle_file *out)
{
	char fdpath[64], held[PATH_MAX];
	unsigned char magic[6];
	struct stat st, fst;
	ssize_t n;
	int fd, fl, rv;

	memset(out, 0, sizeof(*out));
	out->fd = -1;
	if (path == NULL || path[0] == '\0')
		return kc_seterr(KC_EINVAL, "%s: no file is named", what);
	if (realpath(path, out->real) == NULL)
		return kc_seterr(errno == ENOENT ? KC_ENOENT : KC_EIO,
		    "%s: %s: %s", what, path, strerror(errno));
	if (rule != NULL && rule->allow != NULL &&
	    (rv = rule->allow(rule->arg, what, out->real)) != 0)
		return rv;
	if (stat(out->real, &st) != 0)
		return kc_seterr(
		    KC_EIO, "%s: %s: %s", what, out->real, strerror(errno));
	if (!S_ISREG(st.st_mode))
		return kc_seterr(KC_EINVAL,
		    "%s: %s is %s, not a regular file; task files must be "
		    "regular files",
		    what, path, bundle_file_type(st.st_mode));
	/* The real path has no link in it now: one found at open time was
	 * put there since, and a FIFO swapped in must not block. */
	fd = open(out->real,
	    O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		return errno == ELOOP
		    ? kc_seterr(KC_EPERM,
		          "%s: %s became a symbolic link after it was "
		          "checked; refused",
		          what, out->real)
		    : kc_seterr(errno == ENOENT ? KC_ENOENT : KC_EIO,
		          "%s: cannot open %s: %s", what, out->real,
		          strerror(errno));
	rv = 0;
	if (fstat(fd, &fst) != 0 || !S_ISREG(fst.st_mode) ||
	    fst.st_dev != st.st_dev || fst.st_ino != st.st_ino)
		rv = kc_seterr(KC_EPERM,
		    "%s: %s was replaced between its check and its opening; "
		    "refused",
		    what, out->real);
	/* Where the descriptor really is: a folder of the path swapped for
	 * a link after realpath leads the open elsewhere, which only the
	 * kernel's name for the open file shows. */
	snprintf(fdpath, sizeof(fdpath), "/proc/self/fd/%d", fd);
	n = rv == 0 ? readlink(fdpath, held, sizeof(held) - 1) : 0;
	if (n < 0)
		rv = kc_seterr(KC_EIO,
		    "%s: cannot tell which file was opened for %s (%s: %s); "
		    "kclaw needs /proc",
		    what, out->real, fdpath, strerror(errno));
	held[n > 0 ? n : 0] = '\0';
	if (rv == 0 && strcmp(held, out->real) != 0)
		rv = kc_seterr(KC_EPERM,
		    "%s: %s led to %s when it was opened (a link was swapped "
		    "in after the check); refused",
		    what, out->real, held);
	if (rv == 0 &&
	    ((fl = fcntl(fd, F_GETFL)) < 0 ||
	        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0))
		rv = kc_seterr(
		    KC_EIO, "%s: %s: %s", what, out->real, strerror(errno));
	if (rv == 0 && (flags & KC_OPEN_NPY) &&
	    (pread(fd, magic, sizeof(magic), 0) != (ssize_t)sizeof(magic) ||
	        memcmp(magic, "\x93NUMPY", 6) != 0))
		rv = kc_seterr(KC_EINVAL,
		    "%s: %s is not a .npy file (magic \\x93NUMPY missing); "
		    "a tensor is a .npy file written with numpy.save",
		    what, out->real);
	if (rv != 0) {
		close(fd);
		return rv;
	}
	out->fd = fd;
	out->dev = (uint64_t)fst.st_dev;
	out->ino = (uint64_t)fst.st_ino;
	out->size = (uint64_t)fst.st_size;
	return 0;
}

int
kc_bundle_read(const kc_bundle_file *f, const char *what, size_t max,
    char **data, size_t *len)
{
	size_t got = 0, size = (size_t)f->size;
	char *buf;

	*data = NULL;
	*len = 0;
	if (f->size > max)
		return kc_seterr(KC_ENOSPC,
		    "%s: %s is %llu bytes, over the limit of %zu bytes (%.1f "
		    "MB against a size limit of %.1f MiB)",
		    what, f->real, (unsigned long long)f->size, max,
		    (double)f->size / 1e6, (double)max / (1 << 20));
	if ((buf = malloc(size + 1)) == NULL)
		return KC_ENOMEM;
	while (got < size) {
		ssize_t n = pread(f->fd, buf + got, size - got, (off_t)got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			free(buf);
			return kc_seterr(KC_EIO, "%s: cannot read %s: %s", what,
			    f->real, n < 0 ? strerror(errno) : "short read");
		}
		got += (size_t)n;
	}
	buf[got] = '\0';
	*data = buf;
	*len = got;
	return 0;
}

void
kc_bundle_close(kc_bundle_file *f)
{
	if (f != NULL && f->fd >= 0)
		close(f->fd);
	if (f != NULL)
		f->fd = -1;
}

int
kc_bundle_read_file(const char *path, const char *what, unsigned flags,
    const kc_path_rule *rule, size_t max, char **data, size_t *len)
{
	kc_bundle_file f;
	int rv;

	if ((rv = kc_bundle_open(path, what, flags, rule, &f)) != 0)
		return rv;
	rv = kc_bundle_read(&f, what, max, data, len);
	kc_bundle_close(&f);
	return rv;
}

/* ------------------------------------------------------------------ arena */

/* Every allocation of a message under construction, freed in one go. */
struct bundle_arena {
	void **ptrs;
	size_t n, cap;
};

/* Takes p (malloc'd) into the arena; frees it if that fails. */
static int
bundle_adopt(struct bundle_arena *a, void *p)
{
	if (a->n == a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 64;
		void **np = realloc(a->ptrs, cap * sizeof(*np));
		if (np == NULL) {
			free(p);
			return KC_ENOMEM;
		}
		a->ptrs = np;
		a->cap = cap;
	}
	a->ptrs[a->n++] = p;
	return 0;
}

/* Zeroed memory owned by the arena, or NULL. */
static void *
bundle_alloc(struct bundle_arena *a, size_t size)
{
	void *p = calloc(1, size ? size : 1);

	if (p == NULL || bundle_adopt(a, p) != 0)
		return NULL;
	return p;
}

static char *
bundle_strdup(struct bundle_arena *a, const char *s)
{
	size_t n = strlen(s) + 1;
	char *p = bundle_alloc(a, n);

	if (p != NULL)
		memcpy(p, s, n);
	return p;
}

static void
bundle_arena_free(struct bundle_arena *a)
{
	for (size_t i = 0; i < a->n; i++)
		free(a->ptrs[i]);
	free(a->ptrs);
	a->ptrs = NULL;
	a->n = a->cap = 0;
}

/* ---------------------------------------------------------------- helpers */

struct bundle_loader {
	char dir[PATH_MAX];       /* the bundle folder, absolute and resolved */
	char file[PATH_MAX + 16]; /* "<dir>/task.json", starts each error */
	const kc_path_rule *rule; /* the caller's (may be NULL) */
	struct bundle_arena ar;
	Kclaw__TaskSpec spec;
	Kclaw__Tolerance tol;
	Kclaw__Budget budget;
	Kclaw__FsmParams params;
	Kclaw__Reference ref;
};

/* Without libm: every double past 2^53 is an integer, and none is kept. */
static int
bundle_is_int(double v)
{
	return v > -BUNDLE_JSON_INT_MAX && v < BUNDLE_JSON_INT_MAX &&
	    (double)(long long)v == v;
}

static int
bundle_is_ident(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > BUNDLE_NAME_MAX)
		return 0;
	if (!(s[0] == '_' || (s[0] >= 'a' && s[0] <= 'z') ||
	        (s[0] >= 'A' && s[0] <= 'Z')))
		return 0;
	for (size_t i = 1; i < n; i++) {
		char c = s[i];
		if (!(c == '_' || (c >= 'a' && c <= 'z') ||
		        (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')))
			return 0;
	}
	return 1;
}

/* Task names appear in replay keys and file names: keep them plain. */
static int
bundle_is_task_name(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > 128)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!(c == '_' || c == '-' || c == '.' ||
		        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		        (c >= '0' && c <= '9')))
			return 0;
	}
	return s[0] != '.';
}

/* Refuses a key that occurs twice in obj (cJSON keeps both). */
static int
bundle_check_dups(const char *file, const cJSON *obj, const char *what)
{
	const cJSON *a, *b;

	cJSON_ArrayForEach(a, obj)
	{
		for (b = a->next; b != NULL; b = b->next)
			if (strcmp(a->string, b->string) == 0)
				return kc_seterr(KC_EINVAL,
				    "%s: %s: field '%s' appears twice; keep "
				    "one",
				    file, what, a->string);
	}
	return 0;
}

/* Refuses a field of obj that is not in known (NULL-terminated). */
static int
bundle_check_keys(const char *file, const cJSON *obj, const char *what,
    const char *const *known)
{
	const cJSON *it;
	int rv;

	if ((rv = bundle_check_dups(file, obj, what)) != 0)
		return rv;
	cJSON_ArrayForEach(it, obj)
	{
		size_t i;
		char list[256] = "";

		for (i = 0; known[i] != NULL; i++)
			if (strcmp(known[i], it->string) == 0)
				break;
		if (known[i] != NULL)
			continue;
		for (i = 0; known[i] != NULL; i++) {
			strncat(list, i ? ", " : "",
			    sizeof(list) - strlen(list) - 1);
			strncat(
			    list, known[i], sizeof(list) - strlen(list) - 1);
		}
		return kc_seterr(KC_EINVAL,
		    "%s: %s: unknown field '%s'; the fields are %s "
		    "(see docs/bundle.md)",
		    file, what, it->string, list);
	}
	return 0;
}

/* A string field; *out is NULL when it is absent and not required. */
static int
bundle_get_str(const char *file, const cJSON *obj, const char *what,
    const char *key, int required, const char **out)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);

	*out = NULL;
	if (it == NULL) {
		if (required)
			return kc_seterr(KC_EINVAL,
			    "%s: %s: field '%s' is missing; add it "
			    "(see docs/bundle.md)",
			    file, what, key);
		return 0;
	}
	if (!cJSON_IsString(it))
		return kc_seterr(KC_EINVAL, "%s: %s: '%s' must be a string",
		    file, what, key);
	*out = it->valuestring;
	return 0;
}

/*
 * A number field at least min (and integral when integral is set, at most
 * max); *out keeps its value when the field is absent and not required.
 */
static int
bundle_get_num(const char *file, const cJSON *obj, const char *what,
    const char *key, int required, int integral, double min, double max,
    double *out)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
	double v;

	if (it == NULL) {
		if (required)
			return kc_seterr(KC_EINVAL,
			    "%s: %s: field '%s' is missing; add it "
			    "(see docs/bundle.md)",
			    file, what, key);
		return 0;
	}
	if (!cJSON_IsNumber(it))
		return kc_seterr(KC_EINVAL, "%s: %s: '%s' must be a number",
		    file, what, key);
	v = it->valuedouble;
	if (!isfinite(v) || v < min || v > max ||
	    (integral && !bundle_is_int(v)))
		return max == HUGE_VAL
		    ? kc_seterr(KC_EINVAL,
		          "%s: %s: '%s' is %g; it must be %s of at "
		          "least %g",
		          file, what, key, v,
		          integral ? "an integer" : "a number", min)
		    : kc_seterr(KC_EINVAL,
		          "%s: %s: '%s' is %g; it must be %s from %.15g "
		          "to %.15g",
		          file, what, key, v,
		          integral ? "an integer" : "a number", min, max);
	*out = v;
	return 0;
}

static int
bundle_get_u64(const char *file, const cJSON *obj, const char *what,
    const char *key, double max, uint64_t *out)
{
	double v = (double)*out;
	int rv = bundle_get_num(file, obj, what, key, 0, 1, 0, max, &v);

	if (rv == 0)
		*out = (uint64_t)v;
	return rv;
}

/* A count of at most max (kc_spec_check's bounds, spec_check.h). */
static int
bundle_get_u32(const char *file, const cJSON *obj, const char *what,
    const char *key, uint32_t max, uint32_t *out)
{
	uint64_t v = *out;
	int rv = bundle_get_u64(file, obj, what, key, max, &v);

	if (rv == 0)
		*out = (uint32_t)v;
	return rv;
}

static int
bundle_get_dbl(const char *file, const cJSON *obj, const char *what,
    const char *key, double *out)
{
	return bundle_get_num(file, obj, what, key, 0, 0, 0, HUGE_VAL, out);
}

/* The loader's rule: inside the bundle folder, then the caller's. */
struct bundle_inside {
	const struct bundle_loader *l;
	const char *rel;
};

static int
bundle_inside_allow(void *arg, const char *what, const char *real)
{
	const struct bundle_inside *in = arg;
	const struct bundle_loader *l = in->l;
	size_t dl = strlen(l->dir);

	if (strncmp(real, l->dir, dl) != 0 || real[dl] != '/')
		return kc_seterr(KC_EPERM,
		    "%s: '%s' leads outside the bundle folder; copy the file "
		    "into %s",
		    what, in->rel, l->dir);
	if (l->rule != NULL && l->rule->allow != NULL)
		return l->rule->allow(l->rule->arg, what, real);
	return 0;
}

/*
 * Opens a file of the bundle (kc_bundle_open). Names are relative and may
 * not leave the folder (a bundle is self-contained, so it can be
 * content-addressed and shipped to another host). what names the field
 * (with the file it is in) in every message.
 */
static int
bundle_open_rel(struct bundle_loader *l, const char *what, const char *rel,
    kc_bundle_file *f)
{
	struct bundle_inside in = {.l = l, .rel = rel};
	kc_path_rule rule = {.allow = bundle_inside_allow, .arg = &in};
	char joined[PATH_MAX * 2];
	int rv;

	f->fd = -1;
	if (rel[0] == '\0')
		return kc_seterr(KC_EINVAL,
		    "%s: the file name is empty; name a file inside the "
		    "bundle folder",
		    what);
	if (rel[0] == '/')
		return kc_seterr(KC_EINVAL,
		    "%s: '%s' is an absolute path; name files relative to "
		    "the bundle folder",
		    what, rel);
	snprintf(joined, sizeof(joined), "%s/%s", l->dir, rel);
	if (strlen(joined) >= PATH_MAX)
		return kc_seterr(
		    KC_EINVAL, "%s: path '%s' is too long", what, rel);
	rv = kc_bundle_open(joined, what, 0, &rule, f);
	if (rv == KC_ENOENT)
		return kc_seterr(KC_ENOENT,
		    "%s: file '%s' is missing; put it in %s or fix the name",
		    what, rel, l->dir);
	return rv;
}

/* Reads a text file of the bundle into the arena: no NUL byte, UTF-8. */
static int
bundle_read_text(struct bundle_loader *l, const char *what, const char *rel,
    size_t max, char **out)
{
	char fwhat[PATH_MAX + 64];
	kc_bundle_file f;
	char *data;
	size_t len, bad;
	int rv;

	snprintf(fwhat, sizeof(fwhat), "%s: %s", l->file, what);
	if ((rv = bundle_open_rel(l, fwhat, rel, &f)) != 0)
		return rv;
	rv = kc_bundle_read(&f, fwhat, max, &data, &len);
	kc_bundle_close(&f);
	if (rv != 0)
		return rv;
	if ((rv = bundle_adopt(&l->ar, data)) != 0)
		return rv;
	if (strlen(data) != len)
		return kc_seterr(KC_EINVAL,
		    "%s: '%s' holds a NUL byte; it must be text", fwhat, rel);
	if (!kc_utf8_valid(data, len, &bad))
		return kc_seterr(KC_EINVAL,
		    "%s: '%s' is not valid UTF-8 (at byte %zu); save it as "
		    "UTF-8",
		    fwhat, rel, bad);
	*out = data;
	return 0;
}

/* Nesting beyond BUNDLE_JSON_MAX_DEPTH is refused as what it is, before
 * cJSON (whose own limit reads as a syntax error) sees the text. */
static int
bundle_json_depth(const char *file, const char *text, size_t len)
{
	size_t depth = 0, line = 1;
	bool str = false;

	for (size_t i = 0; i < len; i++) {
		char c = text[i];
		if (c == '\n')
			line++;
		if (str) {
			if (c == '\\')
				i++;
			else if (c == '"')
				str = false;
		} else if (c == '"') {
			str = true;
		} else if (c == '[' || c == '{') {
			if (++depth > BUNDLE_JSON_MAX_DEPTH)
				return kc_seterr(KC_EINVAL,
				    "%s: the JSON nests more than %d levels "
				    "deep (at line %zu), over the depth limit "
				    "of %d; a task or plan needs a few levels",
				    file, BUNDLE_JSON_MAX_DEPTH, line,
				    BUNDLE_JSON_MAX_DEPTH);
		} else if ((c == ']' || c == '}') && depth > 0) {
			depth--;
		}
	}
	return 0;
}

/*
 * Every string and field name of the tree must be UTF-8: they reach JSON
 * answers (status --json, the dashboard) that would not parse otherwise.
 * path names the field ("tensors[1].source_name").
 */
static int
bundle_json_utf8(const char *file, const cJSON *it, const char *path)
{
	char sub[256];
	size_t bad;
	int i = 0, rv;

	if (cJSON_IsString(it) && it->valuestring != NULL &&
	    !kc_utf8_valid(it->valuestring, strlen(it->valuestring), &bad))
		return kc_seterr(KC_EINVAL,
		    "%s: %s is not valid UTF-8 (at byte %zu); save the file "
		    "as UTF-8",
		    file, path, bad);
	for (const cJSON *c = it->child; c != NULL; c = c->next, i++) {
		if (cJSON_IsObject(it) && c->string != NULL &&
		    !kc_utf8_valid(c->string, strlen(c->string), &bad))
			return kc_seterr(KC_EINVAL,
			    "%s: a field name in %s is not valid UTF-8 (at "
			    "byte %zu); save the file as UTF-8",
			    file, *path ? path : "the top-level object", bad);
		if (cJSON_IsObject(it))
			snprintf(sub, sizeof(sub), "%s%s%s", path,
			    *path ? "." : "", c->string);
		else
			snprintf(sub, sizeof(sub), "%s[%d]", path, i);
		if ((rv = bundle_json_utf8(file, c, sub)) != 0)
			return rv;
	}
	return 0;
}

static int
bundle_parse_json(const char *file, const char *text, size_t len, cJSON **out)
{
	const char *end = NULL;
	cJSON *root;
	int line = 1, rv;

	if ((rv = bundle_json_depth(file, text, len)) != 0)
		return rv;
	root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
	if (root == NULL) {
		const char *stop = end ? end : cJSON_GetErrorPtr();
		if (stop == NULL || stop < text || stop > text + len)
			stop = text;
		for (const char *p = text; p < stop; p++)
			line += *p == '\n';
		return kc_seterr(KC_EINVAL,
		    "%s: not valid JSON near line %d; fix the syntax", file,
		    line);
	}
	for (const char *p = end; p != NULL && p < text + len; p++) {
		if (*p != ' ' && *p != '\n' && *p != '\r' && *p != '\t') {
			cJSON_Delete(root);
			return kc_seterr(KC_EINVAL,
			    "%s: text after the end of the JSON value; remove "
			    "it",
			    file);
		}
	}
	if (!cJSON_IsObject(root)) {
		cJSON_Delete(root);
		return kc_seterr(
		    KC_EINVAL, "%s: must hold a JSON object {...}", file);
	}
	if ((rv = bundle_json_utf8(file, root, "")) != 0) {
		cJSON_Delete(root);
		return rv;
	}
	*out = root;
	return 0;
}

/* ---------------------------------------------------------------- tensors */

static const Kclaw__TensorSpec *
bundle_find_tensor(const Kclaw__TaskSpec *spec, const char *name)
{
	for (size_t i = 0; i < spec->n_tensors; i++)
		if (strcmp(spec->tensors[i]->name, name) == 0)
			return spec->tensors[i];
	return NULL;
}

static int
bundle_parse_init(struct bundle_loader *l, const cJSON *jinit, const char *what,
    Kclaw__TensorSpec *t)
{
	Kclaw__InitSpec *init;
	const char *dname;
	const char *keys[5] = {"dist"};
	size_t d, nk = 1;
	char iwhat[160];
	int rv;

	snprintf(iwhat, sizeof(iwhat), "%s: init", what);
	if (!cJSON_IsObject(jinit))
		return kc_seterr(KC_EINVAL,
		    "%s: %s must be an object such as "
		    "{\"dist\":\"normal\",\"mean\":0,\"scale\":1}",
		    l->file, iwhat);
	if ((rv = bundle_get_str(l->file, jinit, iwhat, "dist", 1, &dname)) !=
	    0)
		return rv;
	for (d = 0; d < KC_ARRAY_LEN(bundle_dists); d++)
		if (strcmp(bundle_dists[d].name, dname) == 0)
			break;
	if (d == KC_ARRAY_LEN(bundle_dists))
		return kc_seterr(KC_EINVAL,
		    "%s: %s: unknown dist '%s'; use one of normal, uniform, "
		    "heavy_tailed, zeros, ones, arange, randint, from_npy",
		    l->file, iwhat, dname);
	for (size_t k = 0; k < 3 && bundle_dists[d].keys[k] != NULL; k++)
		keys[nk++] = bundle_dists[d].keys[k];
	keys[nk] = NULL;
	if ((rv = bundle_check_keys(l->file, jinit, iwhat, keys)) != 0)
		return rv;
	if ((init = bundle_alloc(&l->ar, sizeof(*init))) == NULL)
		return KC_ENOMEM;
	kclaw__init_spec__init(init);
	init->dist = bundle_dists[d].dist;
	/* Defaults are written out so the sandbox never sees a bare 0. */
	switch (init->dist) {
	case KCLAW__DISTRIBUTION__NORMAL:
		init->scale = 1;
		if ((rv = bundle_get_num(l->file, jinit, iwhat, "mean", 0, 0,
		         -HUGE_VAL, HUGE_VAL, &init->mean)) != 0 ||
		    (rv = bundle_get_num(l->file, jinit, iwhat, "scale", 0, 0,
		         0, HUGE_VAL, &init->scale)) != 0)
			return rv;
		break;
	case KCLAW__DISTRIBUTION__HEAVY_TAILED:
		init->scale = 1;
		init->dof = 3;
		if ((rv = bundle_get_num(l->file, jinit, iwhat, "dof", 0, 0,
		         1e-6, HUGE_VAL, &init->dof)) != 0 ||
		    (rv = bundle_get_num(l->file, jinit, iwhat, "scale", 0, 0,
		         0, HUGE_VAL, &init->scale)) != 0)
			return rv;
		break;
	case KCLAW__DISTRIBUTION__UNIFORM:
	case KCLAW__DISTRIBUTION__RANDINT: {
		int isint = init->dist == KCLAW__DISTRIBUTION__RANDINT;
		init->high = 1;
		if ((rv = bundle_get_num(l->file, jinit, iwhat, "low", 0, isint,
		         -HUGE_VAL, HUGE_VAL, &init->low)) != 0 ||
		    (rv = bundle_get_num(l->file, jinit, iwhat, "high", isint,
		         isint, -HUGE_VAL, HUGE_VAL, &init->high)) != 0)
			return rv;
		if (!(init->low < init->high))
			return kc_seterr(KC_EINVAL,
			    "%s: %s: low (%g) must be below high (%g)", l->file,
			    iwhat, init->low, init->high);
		break;
	}
	default: break;
	}
	t->init = init;
	return 0;
}

static int
bundle_parse_shape(struct bundle_loader *l, const cJSON *jshape,
    const char *what, Kclaw__TensorSpec *t)
{
	int n = cJSON_GetArraySize(jshape);
	double elems = 1;

	if (!cJSON_IsArray(jshape) || n < 1 || n > BUNDLE_MAX_DIMS)
		return kc_seterr(KC_EINVAL,
		    "%s: %s: shape must be an array of 1 to %d positive "
		    "integers, such as [1024, 1024]",
		    l->file, what, BUNDLE_MAX_DIMS);
	if ((t->shape = bundle_alloc(&l->ar, sizeof(int64_t) * (size_t)n)) ==
	    NULL)
		return KC_ENOMEM;
	for (int i = 0; i < n; i++) {
		const cJSON *d = cJSON_GetArrayItem(jshape, i);
		if (!cJSON_IsNumber(d) || d->valuedouble < 1 ||
		    !bundle_is_int(d->valuedouble) ||
		    d->valuedouble > BUNDLE_JSON_INT_MAX)
			return kc_seterr(KC_EINVAL,
			    "%s: %s: shape[%d] must be a positive integer",
			    l->file, what, i);
		t->shape[i] = (int64_t)d->valuedouble;
		elems *= d->valuedouble;
	}
	t->n_shape = (size_t)n;
	if (elems > (double)BUNDLE_MAX_ELEMS)
		return kc_seterr(KC_EINVAL,
		    "%s: %s: shape holds %.3g elements, over the limit of "
		    "2^40",
		    l->file, what, elems);
	return 0;
}

static int
bundle_parse_tensor(
    struct bundle_loader *l, const cJSON *jt, int idx, Kclaw__TensorSpec *t)
{
	static const char *const keys[] = {"name", "kind", "dtype", "shape",
	    "init", "source_name", "value", NULL};
	const char *name, *kind, *dtype, *source_name;
	const cJSON *jinit;
	char what[128];
	size_t i;
	int rv;

	snprintf(what, sizeof(what), "tensors[%d]", idx);
	if (!cJSON_IsObject(jt))
		return kc_seterr(
		    KC_EINVAL, "%s: %s must be an object", l->file, what);
	if ((rv = bundle_check_keys(l->file, jt, what, keys)) != 0 ||
	    (rv = bundle_get_str(l->file, jt, what, "name", 1, &name)) != 0)
		return rv;
	if (!bundle_is_ident(name))
		return kc_seterr(KC_EINVAL,
		    "%s: %s: name '%s' is not a C identifier; use letters, "
		    "digits and '_', not starting with a digit, at most %d "
		    "characters",
		    l->file, what, name, BUNDLE_NAME_MAX);
	if (bundle_find_tensor(&l->spec, name) != NULL)
		return kc_seterr(KC_EINVAL,
		    "%s: %s: tensor name '%s' is used twice; names must be "
		    "unique",
		    l->file, what, name);
	snprintf(what, sizeof(what), "tensors[%d] '%s'", idx, name);
	if ((t->name = bundle_strdup(&l->ar, name)) == NULL)
		return KC_ENOMEM;

	if ((rv = bundle_get_str(l->file, jt, what, "kind", 1, &kind)) != 0)
		return rv;
	for (i = 0; i < KC_ARRAY_LEN(bundle_kinds); i++)
		if (strcmp(bundle_kinds[i].name, kind) == 0)
			break;
	if (i == KC_ARRAY_LEN(bundle_kinds))
		return kc_seterr(KC_EINVAL,
		    "%s: %s: unknown kind '%s'; use input, parameter, output "
		    "or scalar",
		    l->file, what, kind);
	t->kind = bundle_kinds[i].kind;
	if ((rv = bundle_get_str(
	         l->file, jt, what, "source_name", 0, &source_name)) != 0)
		return rv;
	if (source_name != NULL &&
	    (t->source_name = bundle_strdup(&l->ar, source_name)) == NULL)
		return KC_ENOMEM;

	if ((rv = bundle_get_str(l->file, jt, what, "dtype", 1, &dtype)) != 0)
		return rv;
	for (i = 0; i < KC_ARRAY_LEN(bundle_dtypes); i++)
		if (strcmp(bundle_dtypes[i].name, dtype) == 0)
			break;
	if (i == KC_ARRAY_LEN(bundle_dtypes))
		return kc_seterr(KC_EINVAL,
		    "%s: %s: unknown dtype '%s'; use one of f32, f16, bf16, "
		    "f64, i32, i64, i8, u8, bool",
		    l->file, what, dtype);
	t->dtype = bundle_dtypes[i].dtype;
	if (t->kind == KCLAW__TENSOR_KIND__SCALAR) {
		/* A value get_inputs() returns that is not a tensor: the plan
		 * passes it by name as a typed scalar argument. */
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(jt, "value");
		if (t->dtype != KCLAW__DTYPE__F32 &&
		    t->dtype != KCLAW__DTYPE__F64 &&
		    t->dtype != KCLAW__DTYPE__I32 &&
		    t->dtype != KCLAW__DTYPE__I64)
			return kc_seterr(KC_EINVAL,
			    "%s: %s: a scalar's dtype is f32, f64, i32 or i64",
			    l->file, what);
		if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
			return kc_seterr(KC_EINVAL,
			    "%s: %s: a scalar needs its 'value', a finite "
			    "number (what get_inputs() returns in its place)",
			    l->file, what);
		t->scalar_value = v->valuedouble;
		if ((t->shape = bundle_alloc(&l->ar, sizeof(int64_t))) == NULL)
			return KC_ENOMEM;
		t->shape[0] = 1;
		t->n_shape = 1;
		return 0;
	}
	if (cJSON_HasObjectItem(jt, "value"))
		return kc_seterr(KC_EINVAL,
		    "%s: %s: only a scalar has a 'value'; remove it", l->file,
		    what);

	if (!cJSON_HasObjectItem(jt, "shape"))
		return kc_seterr(KC_EINVAL,
		    "%s: %s: field 'shape' is missing; add it, such as "
		    "\"shape\":[1024]",
		    l->file, what);
	if ((rv = bundle_parse_shape(l,
	         cJSON_GetObjectItemCaseSensitive(jt, "shape"), what, t)) != 0)
		return rv;

	jinit = cJSON_GetObjectItemCaseSensitive(jt, "init");
	if (jinit != NULL && t->kind == KCLAW__TENSOR_KIND__OUTPUT)
		return kc_seterr(KC_EINVAL,
		    "%s: %s: an output has no init (it is poisoned before "
		    "every run); remove 'init'",
		    l->file, what);
	if (jinit != NULL)
		return bundle_parse_init(l, jinit, what, t);
	return 0;
}

static int
bundle_parse_tensors(struct bundle_loader *l, const cJSON *root)
{
	const cJSON *jts = cJSON_GetObjectItemCaseSensitive(root, "tensors");
	int n = cJSON_GetArraySize(jts);
	size_t outputs = 0;
	int rv;

	if (jts == NULL)
		return kc_seterr(KC_EINVAL,
		    "%s: field 'tensors' is missing; list the task's inputs, "
		    "parameters and outputs (see docs/bundle.md)",
		    l->file);
	if (!cJSON_IsArray(jts) || n < 1 || n > BUNDLE_MAX_TENSORS)
		return kc_seterr(KC_EINVAL,
		    "%s: 'tensors' must be an array of 1 to %d tensors",
		    l->file, BUNDLE_MAX_TENSORS);
	l->spec.tensors =
	    bundle_alloc(&l->ar, sizeof(*l->spec.tensors) * (size_t)n);
	if (l->spec.tensors == NULL)
		return KC_ENOMEM;
	for (int i = 0; i < n; i++) {
		Kclaw__TensorSpec *t = bundle_alloc(&l->ar, sizeof(*t));
		if (t == NULL)
			return KC_ENOMEM;
		kclaw__tensor_spec__init(t);
		if ((rv = bundle_parse_tensor(
		         l, cJSON_GetArrayItem(jts, i), i, t)) != 0)
			return rv;
		l->spec.tensors[l->spec.n_tensors++] = t;
		outputs += t->kind == KCLAW__TENSOR_KIND__OUTPUT;
	}
	if (outputs == 0)
		return kc_seterr(KC_EINVAL,
		    "%s: no tensor has kind \"output\"; define the tensor "
		    "the task computes so it can be compared to the reference",
		    l->file);
	return 0;
}

/* ------------------------------------------------------------ plain parts */

static int
bundle_parse_tolerance(struct bundle_loader *l, const cJSON *root)
{
	static const char *const keys[] = {
	    "atol", "rtol", "max_rel_norm", NULL};
	const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, "tolerance");
	int rv;

	if (j == NULL)
		return kc_seterr(KC_EINVAL,
		    "%s: field 'tolerance' is missing; say how close outputs "
		    "must be, such as \"tolerance\":{\"atol\":1e-5,"
		    "\"rtol\":1e-5,\"max_rel_norm\":1e-5}",
		    l->file);
	if (!cJSON_IsObject(j))
		return kc_seterr(
		    KC_EINVAL, "%s: 'tolerance' must be an object", l->file);
	kclaw__tolerance__init(&l->tol);
	if ((rv = bundle_check_keys(l->file, j, "tolerance", keys)) != 0 ||
	    (rv = bundle_get_num(l->file, j, "tolerance", "atol", 1, 0, 0,
	         HUGE_VAL, &l->tol.atol)) != 0 ||
	    (rv = bundle_get_num(l->file, j, "tolerance", "rtol", 1, 0, 0,
	         HUGE_VAL, &l->tol.rtol)) != 0 ||
	    (rv = bundle_get_num(l->file, j, "tolerance", "max_rel_norm", 1, 0,
	         0, HUGE_VAL, &l->tol.max_rel_norm)) != 0)
		return rv;
	l->spec.tolerance = &l->tol;
	return 0;
}

static int
bundle_parse_budget(struct bundle_loader *l, const cJSON *root)
{
	static const char *const keys[] = {
	    "rounds", "tokens", "wall_seconds", "target_speedup", NULL};
	const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, "budget");
	int rv;

	kclaw__budget__init(&l->budget);
	l->spec.budget = &l->budget;
	if (j == NULL)
		return 0;
	if (!cJSON_IsObject(j))
		return kc_seterr(
		    KC_EINVAL, "%s: 'budget' must be an object", l->file);
	if ((rv = bundle_check_keys(l->file, j, "budget", keys)) != 0 ||
	    (rv = bundle_get_u32(l->file, j, "budget", "rounds",
	         KC_SPEC_MAX_ROUNDS, &l->budget.rounds)) != 0 ||
	    (rv = bundle_get_u64(l->file, j, "budget", "tokens",
	         KC_SPEC_MAX_TOKENS, &l->budget.tokens)) != 0 ||
	    (rv = bundle_get_u64(l->file, j, "budget", "wall_seconds",
	         KC_SPEC_MAX_WALL_S, &l->budget.wall_seconds)) != 0 ||
	    (rv = bundle_get_num(l->file, j, "budget", "target_speedup", 0, 0,
	         0, KC_SPEC_MAX_SPEEDUP, &l->budget.target_speedup)) != 0)
		return rv;
	return 0;
}

static int
bundle_parse_params(struct bundle_loader *l, const cJSON *root)
{
	static const char *const keys[] = {"seeds", "rt", "at", "max_repairs",
	    "job_retries", "agent_timeout_s", "eval_timeout_s", "explore_share",
	    "sol_stop", "candidates_per_round", "tune", NULL};
	static const char *const shares[] = {"explore_share", "sol_stop"};
	const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, "params");
	Kclaw__FsmParams *p = &l->params;
	double *share[] = {&p->explore_share, &p->sol_stop};
	int rv;

	kclaw__fsm_params__init(p);
	l->spec.params = p;
	if (j == NULL)
		return 0;
	if (!cJSON_IsObject(j))
		return kc_seterr(
		    KC_EINVAL, "%s: 'params' must be an object", l->file);
	if ((rv = bundle_check_keys(l->file, j, "params", keys)) != 0 ||
	    (rv = bundle_get_u32(l->file, j, "params", "seeds",
	         KC_SPEC_MAX_SEEDS, &p->seeds)) != 0 ||
	    (rv = bundle_get_num(l->file, j, "params", "rt", 0, 0, 0,
	         KC_SPEC_MAX_RT, &p->rt)) != 0 ||
	    (rv = bundle_get_num(l->file, j, "params", "at", 0, 0, 0,
	         KC_SPEC_MAX_AT, &p->at)) != 0 ||
	    (rv = bundle_get_u32(l->file, j, "params", "max_repairs",
	         KC_SPEC_MAX_REPAIRS, &p->max_repairs)) != 0 ||
	    (rv = bundle_get_u32(l->file, j, "params", "job_retries",
	         KC_SPEC_MAX_JOB_RETRIES, &p->job_retries)) != 0 ||
	    (rv = bundle_get_u32(l->file, j, "params", "agent_timeout_s",
	         KC_SPEC_MAX_TIMEOUT_S, &p->agent_timeout_s)) != 0 ||
	    (rv = bundle_get_u32(l->file, j, "params", "eval_timeout_s",
	         KC_SPEC_MAX_TIMEOUT_S, &p->eval_timeout_s)) != 0 ||
	    (rv = bundle_get_u32(l->file, j, "params", "candidates_per_round",
	         KC_SPEC_MAX_CANDIDATES_PER_ROUND, &p->candidates_per_round)) !=
	        0)
		return rv;
	/* tune: true or false (on the wire 1, or -1 for off). */
	{
		const cJSON *tu = cJSON_GetObjectItemCaseSensitive(j, "tune");
		if (tu && !cJSON_IsBool(tu))
			return kc_seterr(KC_EINVAL,
			    "%s: params.tune must be true or false", l->file);
		if (tu)
			p->tune = cJSON_IsTrue(tu) ? 1 : -1;
	}
	/* Shares in [0, 1], where 0 is off; on the wire 0 is the default and
	 * a negative value off (proto/kclaw.proto FsmParams). */
	for (size_t i = 0; i < 2; i++) {
		if (cJSON_GetObjectItemCaseSensitive(j, shares[i]) == NULL)
			continue;
		if ((rv = bundle_get_num(l->file, j, "params", shares[i], 0, 0,
		         0, 1, share[i])) != 0)
			return rv;
		if (*share[i] == 0)
			*share[i] = -1;
	}
	return 0;
}

/* -------------------------------------------------------------------- npy */

/*
 * Checks that the open .npy file f holds a C-ordered array of the
 * tensor's dtype and shape, and that its size matches its header. The
 * header is read by npy.c, the one reader of the format.
 */
static int
bundle_npy_check(const char *file, const char *what, const kc_bundle_file *f,
    const char *rel, const Kclaw__TensorSpec *t)
{
	char nwhat[PATH_MAX + 256];
	const char *descr = NULL;
	kc_npy_header h;
	double bytes;
	int rv;

	for (size_t i = 0; i < KC_ARRAY_LEN(bundle_dtypes); i++)
		if (bundle_dtypes[i].dtype == t->dtype)
			descr = bundle_dtypes[i].npy;
	snprintf(nwhat, sizeof(nwhat), "%s: %s: '%s'", file, what, rel);
	if ((rv = kc_npy_read_header(f->fd, nwhat, &h)) != 0)
		return rv;
	if (h.dtype != t->dtype)
		return kc_seterr(KC_EINVAL,
		    "%s: %s: '%s' holds dtype '%s' but the tensor is %s, "
		    "which is stored as '<%s'; convert the array or fix the "
		    "dtype",
		    file, what, rel, h.descr, kc_dtype_name(t->dtype), descr);
	if ((size_t)h.ndim != t->n_shape ||
	    memcmp(h.shape, t->shape, t->n_shape * sizeof(int64_t)) != 0) {
		kc_str got = {0}, want = {0};
		for (int i = 0; i < h.ndim; i++)
			kc_str_printf(&got, "%s%lld", i ? ", " : "",
			    (long long)h.shape[i]);
		for (size_t i = 0; i < t->n_shape; i++)
			kc_str_printf(&want, "%s%lld", i ? ", " : "",
			    (long long)t->shape[i]);
		rv = kc_seterr(KC_EINVAL,
		    "%s: %s: '%s' has shape [%s] but the tensor's shape is "
		    "[%s]; fix the shape in task.json or the file",
		    file, what, rel, got.buf ? got.buf : "",
		    want.buf ? want.buf : "");
		kc_str_free(&got);
		kc_str_free(&want);
		return rv;
	}
	bytes = (double)h.data_offset +
	    (double)h.count * (double)kc_dtype_size(t->dtype);
	if ((double)f->size != bytes)
		return kc_seterr(KC_EINVAL,
		    "%s: %s: '%s' is %llu bytes, which does not match its "
		    "header (truncated?); write it again",
		    file, what, rel, (unsigned long long)f->size);
	return 0;
}

/* -------------------------------------------------------------- reference */

/* One name->file map of a tensor set ("inputs" or "expected"). */
static int
bundle_parse_set_map(struct bundle_loader *l, const cJSON *jset,
    const char *what, const char *key, int want_outputs, size_t *n_out,
    Kclaw__TensorData ***out)
{
	const cJSON *jm = cJSON_GetObjectItemCaseSensitive(jset, key);
	const cJSON *it;
	char twhat[192], fwhat[PATH_MAX + 256];
	kc_bundle_file f;
	size_t n = 0;
	int rv;

	if (jm == NULL || !cJSON_IsObject(jm))
		return kc_seterr(KC_EINVAL,
		    "%s: %s: '%s' must be an object mapping tensor names to "
		    ".npy files",
		    l->file, what, key);
	if ((rv = bundle_check_dups(l->file, jm, what)) != 0)
		return rv;
	*out = bundle_alloc(&l->ar, sizeof(**out) * l->spec.n_tensors);
	if (*out == NULL)
		return KC_ENOMEM;
	cJSON_ArrayForEach(it, jm)
	{
		const Kclaw__TensorSpec *t =
		    bundle_find_tensor(&l->spec, it->string);
		Kclaw__TensorData *td;
		int is_out;

		snprintf(
		    twhat, sizeof(twhat), "%s: %s '%s'", what, key, it->string);
		if (t == NULL)
			return kc_seterr(KC_EINVAL,
			    "%s: %s: no tensor is named '%s'; name one from "
			    "'tensors'",
			    l->file, twhat, it->string);
		is_out = t->kind == KCLAW__TENSOR_KIND__OUTPUT;
		if (is_out != want_outputs)
			return kc_seterr(KC_EINVAL,
			    "%s: %s: '%s' is %s %s; '%s' lists %s", l->file,
			    twhat, it->string, is_out ? "an" : "a",
			    kc_tensor_kind_name(t->kind), key,
			    want_outputs ? "outputs only"
			                 : "inputs and parameters only");
		if (!cJSON_IsString(it))
			return kc_seterr(KC_EINVAL,
			    "%s: %s must be a .npy file name", l->file, twhat);
		snprintf(fwhat, sizeof(fwhat), "%s: %s", l->file, twhat);
		if ((rv = bundle_open_rel(l, fwhat, it->valuestring, &f)) != 0)
			return rv;
		rv = bundle_npy_check(l->file, twhat, &f, it->valuestring, t);
		kc_bundle_close(&f);
		if (rv != 0)
			return rv;
		if ((td = bundle_alloc(&l->ar, sizeof(*td))) == NULL)
			return KC_ENOMEM;
		kclaw__tensor_data__init(td);
		if ((td->name = bundle_strdup(&l->ar, t->name)) == NULL ||
		    (td->path = bundle_strdup(&l->ar, f.real)) == NULL)
			return KC_ENOMEM;
		(*out)[n++] = td;
	}
	for (size_t i = 0; i < l->spec.n_tensors; i++) {
		const Kclaw__TensorSpec *t = l->spec.tensors[i];
		int is_out = t->kind == KCLAW__TENSOR_KIND__OUTPUT, found = 0;
		if (is_out != want_outputs)
			continue;
		for (size_t k = 0; k < n; k++)
			found |= strcmp((*out)[k]->name, t->name) == 0;
		if (!found)
			return kc_seterr(KC_EINVAL,
			    "%s: %s: '%s' lacks tensor '%s'; add its .npy "
			    "file",
			    l->file, what, key, t->name);
	}
	*n_out = n;
	return 0;
}

static int
bundle_parse_tensor_ref(struct bundle_loader *l, const cJSON *jr)
{
	static const char *const keys[] = {
	    "kind", "sets", "baseline_ms", "torch_compile_ms", NULL};
	static const char *const set_keys[] = {
	    "seed", "inputs", "expected", NULL};
	const cJSON *jsets = cJSON_GetObjectItemCaseSensitive(jr, "sets");
	int n = cJSON_GetArraySize(jsets);
	char what[64];
	int rv;

	if ((rv = bundle_check_keys(l->file, jr, "reference", keys)) != 0)
		return rv;
	if (!cJSON_IsArray(jsets) || n < 1 || n > BUNDLE_MAX_SETS)
		return kc_seterr(KC_EINVAL,
		    "%s: reference: 'sets' must be an array of 1 to %d input "
		    "sets, each {\"seed\":1,\"inputs\":{...},"
		    "\"expected\":{...}}",
		    l->file, BUNDLE_MAX_SETS);
	if ((rv = bundle_get_num(l->file, jr, "reference", "baseline_ms", 1, 0,
	         1e-9, HUGE_VAL, &l->ref.baseline_ms)) != 0 ||
	    (rv = bundle_get_dbl(l->file, jr, "reference", "torch_compile_ms",
	         &l->ref.torch_compile_ms)) != 0)
		return rv;
	/* The inputs come from the files, so no tensor may ask for a draw. */
	for (size_t i = 0; i < l->spec.n_tensors; i++) {
		Kclaw__TensorSpec *t = l->spec.tensors[i];
		if (t->kind == KCLAW__TENSOR_KIND__OUTPUT)
			continue;
		if (t->init != NULL &&
		    t->init->dist != KCLAW__DISTRIBUTION__FROM_NPY)
			return kc_seterr(KC_EINVAL,
			    "%s: tensors[%zu] '%s': a tensors reference "
			    "reads its inputs from .npy files, so its init "
			    "must be {\"dist\":\"from_npy\"} or absent",
			    l->file, i, t->name);
		if (t->init == NULL) {
			t->init = bundle_alloc(&l->ar, sizeof(*t->init));
			if (t->init == NULL)
				return KC_ENOMEM;
			kclaw__init_spec__init(t->init);
			t->init->dist = KCLAW__DISTRIBUTION__FROM_NPY;
		}
	}
	l->ref.sets = bundle_alloc(&l->ar, sizeof(*l->ref.sets) * (size_t)n);
	if (l->ref.sets == NULL)
		return KC_ENOMEM;
	for (int i = 0; i < n; i++) {
		const cJSON *js = cJSON_GetArrayItem(jsets, i);
		Kclaw__TensorSet *ts = bundle_alloc(&l->ar, sizeof(*ts));

		if (ts == NULL)
			return KC_ENOMEM;
		kclaw__tensor_set__init(ts);
		snprintf(what, sizeof(what), "reference.sets[%d]", i);
		if (!cJSON_IsObject(js))
			return kc_seterr(KC_EINVAL, "%s: %s must be an object",
			    l->file, what);
		if ((rv = bundle_check_keys(l->file, js, what, set_keys)) !=
		        0 ||
		    (rv = bundle_get_u64(l->file, js, what, "seed",
		         BUNDLE_JSON_INT_MAX, &ts->seed)) != 0 ||
		    (rv = bundle_parse_set_map(l, js, what, "inputs", 0,
		         &ts->n_inputs, &ts->inputs)) != 0 ||
		    (rv = bundle_parse_set_map(l, js, what, "expected", 1,
		         &ts->n_expected, &ts->expected)) != 0)
			return rv;
		l->ref.sets[l->ref.n_sets++] = ts;
	}
	return 0;
}

static int
bundle_parse_cuda_ref(struct bundle_loader *l, const cJSON *jr)
{
	static const char *const keys[] = {"kind", "source", "plan", NULL};
	const char *src, *plan;
	char pwhat[PATH_MAX + 32];
	Kclaw__Candidate *c;
	int rv;

	if ((rv = bundle_check_keys(l->file, jr, "reference", keys)) != 0 ||
	    (rv = bundle_get_str(
	         l->file, jr, "reference", "source", 1, &src)) != 0 ||
	    (rv = bundle_get_str(l->file, jr, "reference", "plan", 1, &plan)) !=
	        0)
		return rv;
	/* The sandbox draws the inputs, so each needs a distribution. */
	for (size_t i = 0; i < l->spec.n_tensors; i++) {
		const Kclaw__TensorSpec *t = l->spec.tensors[i];
		if (t->kind == KCLAW__TENSOR_KIND__OUTPUT)
			continue;
		if (t->init == NULL ||
		    t->init->dist == KCLAW__DISTRIBUTION__FROM_NPY)
			return kc_seterr(KC_EINVAL,
			    "%s: tensors[%zu] '%s': a cuda reference runs on "
			    "inputs the sandbox draws, so this %s needs an "
			    "init such as {\"dist\":\"normal\",\"mean\":0,"
			    "\"scale\":1}",
			    l->file, i, t->name, kc_tensor_kind_name(t->kind));
	}
	if ((c = bundle_alloc(&l->ar, sizeof(*c))) == NULL)
		return KC_ENOMEM;
	kclaw__candidate__init(c);
	if ((c->origin = bundle_strdup(&l->ar, "reference")) == NULL)
		return KC_ENOMEM;
	if ((rv = bundle_read_text(l, "reference.source", src,
	         BUNDLE_SOURCE_MAX, &c->source)) != 0 ||
	    (rv = bundle_read_text(l, "reference.plan", plan, BUNDLE_JSON_MAX,
	         &c->plan_json)) != 0)
		return rv;
	if (c->source[0] == '\0')
		return kc_seterr(KC_EINVAL,
		    "%s: reference.source: '%s' is empty; it must define the "
		    "extern \"C\" __global__ kernels the plan launches",
		    l->file, src);
	snprintf(pwhat, sizeof(pwhat), "%s/%s", l->dir, plan);
	if ((rv = kc_plan_check(&l->spec, c->plan_json, pwhat, 1)) != 0)
		return rv;
	l->ref.cuda = c;
	return 0;
}

/*
 * A torch reference: the problem's Python source, run live beside the
 * sandbox (docs/torchref.md). Every tensor is declared (kb2bundle writes
 * them from meta tensors), none needs an init: get_inputs() draws them.
 */
static int
bundle_parse_torch_ref(struct bundle_loader *l, const cJSON *jr)
{
	static const char *const keys[] = {"kind", "source", "init_seed",
	    "flops", "compile_mode", "baseline_ms", "torch_compile_ms", NULL};
	const char *src, *mode;
	int rv;

	if ((rv = bundle_check_keys(l->file, jr, "reference", keys)) != 0 ||
	    (rv = bundle_get_str(
	         l->file, jr, "reference", "source", 1, &src)) != 0 ||
	    (rv = bundle_get_str(
	         l->file, jr, "reference", "compile_mode", 0, &mode)) != 0 ||
	    (rv = bundle_get_u64(l->file, jr, "reference", "init_seed",
	         BUNDLE_JSON_INT_MAX, &l->ref.init_seed)) != 0 ||
	    (rv = bundle_get_dbl(
	         l->file, jr, "reference", "flops", &l->ref.flops)) != 0 ||
	    (rv = bundle_get_dbl(l->file, jr, "reference", "baseline_ms",
	         &l->ref.baseline_ms)) != 0 ||
	    (rv = bundle_get_dbl(l->file, jr, "reference", "torch_compile_ms",
	         &l->ref.torch_compile_ms)) != 0)
		return rv;
	if (mode != NULL && strcmp(mode, "default") != 0 &&
	    strcmp(mode, "max-autotune") != 0)
		return kc_seterr(KC_EINVAL,
		    "%s: reference.compile_mode '%s': use default or "
		    "max-autotune",
		    l->file, mode);
	if (mode != NULL && strcmp(mode, "max-autotune") == 0 &&
	    (l->ref.torch_compile_mode = bundle_strdup(&l->ar, mode)) == NULL)
		return KC_ENOMEM;
	if ((rv = bundle_read_text(l, "reference.source", src,
	         BUNDLE_SOURCE_MAX, &l->ref.torch_source)) != 0)
		return rv;
	if (strstr(l->ref.torch_source, "class Model") == NULL ||
	    strstr(l->ref.torch_source, "def get_inputs") == NULL)
		return kc_seterr(KC_EINVAL,
		    "%s: reference.source: '%s' must define class Model, "
		    "get_inputs() and get_init_inputs() (a KernelBench-style "
		    "problem)",
		    l->file, src);
	return 0;
}

static int
bundle_parse_reference(struct bundle_loader *l, const cJSON *root)
{
	const cJSON *jr = cJSON_GetObjectItemCaseSensitive(root, "reference");
	const char *kind;
	int rv;

	kclaw__reference__init(&l->ref);
	if (jr == NULL)
		return kc_seterr(KC_EINVAL,
		    "%s: field 'reference' is missing; give a cuda reference "
		    "(source and plan) or a tensors reference (expected "
		    "outputs as .npy), see docs/bundle.md",
		    l->file);
	if (!cJSON_IsObject(jr))
		return kc_seterr(
		    KC_EINVAL, "%s: 'reference' must be an object", l->file);
	if ((rv = bundle_get_str(l->file, jr, "reference", "kind", 1, &kind)) !=
	    0)
		return rv;
	if (strcmp(kind, "cuda") == 0) {
		l->ref.kind = KCLAW__REFERENCE__KIND__CUDA;
		rv = bundle_parse_cuda_ref(l, jr);
	} else if (strcmp(kind, "tensors") == 0) {
		l->ref.kind = KCLAW__REFERENCE__KIND__TENSORS;
		rv = bundle_parse_tensor_ref(l, jr);
	} else if (strcmp(kind, "torch") == 0) {
		l->ref.kind = KCLAW__REFERENCE__KIND__TORCH;
		rv = bundle_parse_torch_ref(l, jr);
	} else {
		return kc_seterr(KC_EINVAL,
		    "%s: reference: unknown kind '%s'; use cuda, torch or "
		    "tensors",
		    l->file, kind);
	}
	/* Only a torch problem's get_inputs() has values that are not
	 * tensors. */
	for (size_t i = 0; rv == 0 && i < l->spec.n_tensors; i++)
		if (l->spec.tensors[i]->kind == KCLAW__TENSOR_KIND__SCALAR &&
		    l->ref.kind != KCLAW__REFERENCE__KIND__TORCH)
			return kc_seterr(KC_EINVAL,
			    "%s: tensors[%zu] '%s': scalars belong to torch "
			    "references; make it a parameter or input tensor",
			    l->file, i, l->spec.tensors[i]->name);
	if (rv == 0)
		l->spec.reference = &l->ref;
	return rv;
}

/* ------------------------------------------------------------- the plan */

static int
bundle_plan_name_known(
    const Kclaw__TaskSpec *spec, const cJSON *scratch, const char *name)
{
	const cJSON *s;

	if (spec == NULL || bundle_find_tensor(spec, name) != NULL)
		return 1;
	cJSON_ArrayForEach(s, scratch)
	{
		const cJSON *n = cJSON_GetObjectItemCaseSensitive(s, "name");
		if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0)
			return 1;
	}
	return 0;
}

static int
bundle_plan_check_scratch(
    const Kclaw__TaskSpec *spec, const cJSON *scratch, const char *where)
{
	const cJSON *s, *o;
	int i = 0;

	if (scratch == NULL)
		return 0;
	if (!cJSON_IsArray(scratch))
		return kc_seterr(KC_EINVAL,
		    "%s: 'scratch' must be an array of "
		    "{\"name\":...,\"bytes\":...}",
		    where);
	cJSON_ArrayForEach(s, scratch)
	{
		const cJSON *n = cJSON_GetObjectItemCaseSensitive(s, "name");
		const cJSON *b = cJSON_GetObjectItemCaseSensitive(s, "bytes");
		int j = 0;

		if (!cJSON_IsString(n) || !bundle_is_ident(n->valuestring))
			return kc_seterr(KC_EINVAL,
			    "%s: scratch[%d]: 'name' must be a C identifier",
			    where, i);
		if (!cJSON_IsNumber(b) || b->valuedouble < 1 ||
		    !bundle_is_int(b->valuedouble) ||
		    b->valuedouble > BUNDLE_JSON_INT_MAX)
			return kc_seterr(KC_EINVAL,
			    "%s: scratch[%d] '%s': 'bytes' must be a positive "
			    "integer",
			    where, i, n->valuestring);
		if (spec != NULL &&
		    bundle_find_tensor(spec, n->valuestring) != NULL)
			return kc_seterr(KC_EINVAL,
			    "%s: scratch[%d] '%s' has the name of a tensor of "
			    "the task; rename it",
			    where, i, n->valuestring);
		cJSON_ArrayForEach(o, scratch)
		{
			const cJSON *on =
			    cJSON_GetObjectItemCaseSensitive(o, "name");
			if (j++ < i && cJSON_IsString(on) &&
			    strcmp(on->valuestring, n->valuestring) == 0)
				return kc_seterr(KC_EINVAL,
				    "%s: scratch[%d] '%s' is declared twice",
				    where, i, n->valuestring);
		}
		i++;
	}
	return 0;
}

/* Marks in used[] which tensors a string names. */
static void
bundle_plan_mark(const Kclaw__TaskSpec *spec, const char *name, char *used)
{
	for (size_t t = 0; spec != NULL && t < spec->n_tensors; t++)
		if (strcmp(spec->tensors[t]->name, name) == 0)
			used[t] = 1;
}

static int
bundle_plan_check_step(const Kclaw__TaskSpec *spec, const cJSON *scratch,
    const cJSON *step, int i, const char *where, char *used)
{
	const cJSON *kernel = cJSON_GetObjectItemCaseSensitive(step, "kernel");
	const cJSON *args = cJSON_GetObjectItemCaseSensitive(step, "args");
	const cJSON *a;
	int k = 0;

	if (!cJSON_IsObject(step))
		return kc_seterr(
		    KC_EINVAL, "%s: steps[%d] must be an object", where, i);
	if (kernel == NULL) {
		/*
		 * A library step (e.g. {"matmul":{...}}): its operands are
		 * named in its own fields, which the sandbox validates; here
		 * they only count as uses.
		 */
		cJSON_ArrayForEach(a, step)
		{
			const cJSON *f;
			if (cJSON_IsString(a))
				bundle_plan_mark(spec, a->valuestring, used);
			cJSON_ArrayForEach(f, a)
			{
				if (cJSON_IsString(f))
					bundle_plan_mark(
					    spec, f->valuestring, used);
			}
		}
		return 0;
	}
	if (!cJSON_IsString(kernel) || !bundle_is_ident(kernel->valuestring))
		return kc_seterr(KC_EINVAL,
		    "%s: steps[%d]: 'kernel' must name an extern \"C\" "
		    "__global__ function of the source",
		    where, i);
	if (args == NULL)
		return 0;
	if (!cJSON_IsArray(args))
		return kc_seterr(KC_EINVAL,
		    "%s: steps[%d] '%s': 'args' must be an array of tensor "
		    "names and typed scalars such as {\"i32\":1024}",
		    where, i, kernel->valuestring);
	cJSON_ArrayForEach(a, args)
	{
		if (cJSON_IsString(a)) {
			if (!bundle_plan_name_known(
			        spec, scratch, a->valuestring))
				return kc_seterr(KC_EINVAL,
				    "%s: steps[%d] '%s': args[%d] names '%s', "
				    "which is neither a tensor of the task "
				    "nor a scratch buffer; fix the name or "
				    "declare it in 'scratch'",
				    where, i, kernel->valuestring, k,
				    a->valuestring);
			bundle_plan_mark(spec, a->valuestring, used);
		} else if (!cJSON_IsObject(a)) {
			return kc_seterr(KC_EINVAL,
			    "%s: steps[%d] '%s': args[%d] must be a tensor "
			    "name or a typed scalar such as {\"i32\":1024}",
			    where, i, kernel->valuestring, k);
		}
		k++;
	}
	return 0;
}

int
kc_plan_check(const Kclaw__TaskSpec *spec, const char *plan_json,
    const char *where, int require_outputs)
{
	cJSON *root = NULL;
	const cJSON *steps, *scratch, *step;
	char *used = NULL;
	int rv, i = 0;

	if (plan_json == NULL)
		return kc_seterr(KC_EINVAL, "%s: the plan is empty", where);
	if ((rv = bundle_parse_json(
	         where, plan_json, strlen(plan_json), &root)) != 0)
		return rv;
	steps = cJSON_GetObjectItemCaseSensitive(root, "steps");
	scratch = cJSON_GetObjectItemCaseSensitive(root, "scratch");
	if (!cJSON_IsArray(steps) || cJSON_GetArraySize(steps) < 1) {
		rv = kc_seterr(KC_EINVAL,
		    "%s: 'steps' must be a non-empty array of launches such "
		    "as {\"kernel\":\"k\",\"grid\":[g,1,1],\"block\":[256,1,1],"
		    "\"args\":[\"x\",\"y\"]} (see docs/plan.md)",
		    where);
		goto out;
	}
	if ((rv = bundle_plan_check_scratch(spec, scratch, where)) != 0)
		goto out;
	if (spec != NULL && (used = calloc(spec->n_tensors + 1, 1)) == NULL) {
		rv = KC_ENOMEM;
		goto out;
	}
	cJSON_ArrayForEach(step, steps)
	{
		if ((rv = bundle_plan_check_step(
		         spec, scratch, step, i++, where, used)) != 0)
			goto out;
	}
	for (size_t t = 0;
	     require_outputs && spec != NULL && t < spec->n_tensors; t++) {
		if (spec->tensors[t]->kind == KCLAW__TENSOR_KIND__OUTPUT &&
		    !used[t]) {
			rv = kc_seterr(KC_EINVAL,
			    "%s: output '%s' is never passed to a step, so "
			    "nothing computes it; pass it to the kernel that "
			    "writes it",
			    where, spec->tensors[t]->name);
			goto out;
		}
	}
out:
	free(used);
	cJSON_Delete(root);
	return rv;
}

/* ------------------------------------------------------------ the loaders */

/* Packs msg and unpacks a copy that protobuf-c's free_unpacked can free. */
static int
bundle_copy_out(const ProtobufCMessage *msg, ProtobufCMessage **out)
{
	size_t len = protobuf_c_message_get_packed_size(msg);
	uint8_t *buf = malloc(len ? len : 1);

	if (buf == NULL)
		return KC_ENOMEM;
	protobuf_c_message_pack(msg, buf);
	*out = protobuf_c_message_unpack(msg->descriptor, NULL, len, buf);
	free(buf);
	return *out != NULL ? 0 : KC_ENOMEM;
}

static int
bundle_parse_root(struct bundle_loader *l, const cJSON *root)
{
	static const char *const keys[] = {"name", "description", "tensors",
	    "tolerance", "budget", "params", "trials", "seed", "reference",
	    "context", "precision", NULL};
	const char *name, *desc, *ctx, *prec;
	int rv;

	if ((rv = bundle_check_keys(l->file, root, "task", keys)) != 0 ||
	    (rv = bundle_get_str(l->file, root, "task", "name", 1, &name)) !=
	        0 ||
	    (rv = bundle_get_str(
	         l->file, root, "task", "description", 0, &desc)) != 0 ||
	    (rv = bundle_get_str(l->file, root, "task", "context", 0, &ctx)) !=
	        0 ||
	    (rv = bundle_get_str(
	         l->file, root, "task", "precision", 0, &prec)) != 0)
		return rv;
	if (prec != NULL && strcmp(prec, "strict") != 0 &&
	    strcmp(prec, "warn") != 0 && strcmp(prec, "loose") != 0)
		return kc_seterr(KC_EINVAL,
		    "%s: precision '%s': use \"strict\" (lower precision than "
		    "the tensors' fails), \"warn\" (it passes with a warning, "
		    "the default) or \"loose\" (no warning)",
		    l->file, prec);
	if (prec != NULL &&
	    (l->spec.precision = bundle_strdup(&l->ar, prec)) == NULL)
		return KC_ENOMEM;
	if (!bundle_is_task_name(name))
		return kc_seterr(KC_EINVAL,
		    "%s: name '%s' may hold only letters, digits, '_', '-' "
		    "and '.' (1 to 128, not starting with '.'); rename the "
		    "task",
		    l->file, name);
	if ((l->spec.name = bundle_strdup(&l->ar, name)) == NULL ||
	    (desc != NULL &&
	        (l->spec.description = bundle_strdup(&l->ar, desc)) == NULL))
		return KC_ENOMEM;
	if ((rv = bundle_parse_tensors(l, root)) != 0 ||
	    (rv = bundle_parse_tolerance(l, root)) != 0 ||
	    (rv = bundle_parse_budget(l, root)) != 0 ||
	    (rv = bundle_parse_params(l, root)) != 0 ||
	    (rv = bundle_get_u32(l->file, root, "task", "trials",
	         KC_SPEC_MAX_TRIALS, &l->spec.trials)) != 0 ||
	    (rv = bundle_get_u64(l->file, root, "task", "seed",
	         BUNDLE_JSON_INT_MAX, &l->spec.seed)) != 0 ||
	    (rv = bundle_parse_reference(l, root)) != 0)
		return rv;
	if (ctx != NULL &&
	    (rv = bundle_read_text(
	         l, "context", ctx, BUNDLE_SOURCE_MAX, &l->spec.context)) != 0)
		return rv;
	return 0;
}

/* Resolves a folder argument into an absolute path for messages and joins. */
static int
bundle_open_dir(const char *dir, const char *what, char out[PATH_MAX])
{
	struct stat st;

	if (dir == NULL || dir[0] == '\0')
		return kc_seterr(KC_EINVAL, "no %s folder given", what);
	if (realpath(dir, out) == NULL)
		return kc_seterr(errno == ENOENT ? KC_ENOENT : KC_EIO,
		    "%s folder %s: %s; pass the folder that holds the %s", what,
		    dir, strerror(errno), what);
	if (stat(out, &st) != 0 || !S_ISDIR(st.st_mode))
		return kc_seterr(KC_EINVAL,
		    "%s is not a folder; pass the %s folder, not a file in it",
		    dir, what);
	return 0;
}

int
kc_bundle_load_rule(
    const char *dir, const kc_path_rule *rule, Kclaw__TaskSpec **out)
{
	struct bundle_loader *l;
	kc_bundle_file f = {.fd = -1};
	cJSON *root = NULL;
	char *text = NULL;
	size_t len;
	int rv;

	*out = NULL;
	if ((l = calloc(1, sizeof(*l))) == NULL)
		return KC_ENOMEM;
	kclaw__task_spec__init(&l->spec);
	l->rule = rule;
	if ((rv = bundle_open_dir(dir, "bundle", l->dir)) != 0)
		goto out;
	snprintf(l->file, sizeof(l->file), "%s/task.json", l->dir);
	/* task.json obeys the rules of the files it names: inside the
	 * folder, a regular file (a FIFO would block the reader), opened
	 * once. */
	if ((rv = bundle_open_rel(l, l->file, "task.json", &f)) != 0) {
		if (rv == KC_ENOENT)
			rv = kc_seterr(rv,
			    "%s is missing; a bundle folder holds task.json "
			    "(see docs/bundle.md)",
			    l->file);
		goto out;
	}
	if ((rv = kc_bundle_read(&f, l->file, BUNDLE_JSON_MAX, &text, &len)) !=
	    0) {
		if (f.size > BUNDLE_JSON_MAX)
			rv = kc_seterr(rv,
			    "%s; keep tensors in .npy files and long text in "
			    "the files task.json names (docs/bundle.md)",
			    kc_lasterr());
		goto out;
	}
	if ((rv = bundle_parse_json(l->file, text, len, &root)) != 0 ||
	    (rv = bundle_parse_root(l, root)) != 0)
		goto out;
	rv = bundle_copy_out(&l->spec.base, (ProtobufCMessage **)out);
out:
	kc_bundle_close(&f);
	cJSON_Delete(root);
	free(text);
	bundle_arena_free(&l->ar);
	free(l);
	return rv;
}

int
kc_bundle_load(const char *dir, Kclaw__TaskSpec **out)
{
	return kc_bundle_load_rule(dir, NULL, out);
}

int
kc_candidate_load(const char *dir, Kclaw__Candidate **out)
{
	struct bundle_loader *l;
	Kclaw__Candidate c;
	char where[PATH_MAX + 32];
	int rv;

	*out = NULL;
	if ((l = calloc(1, sizeof(*l))) == NULL)
		return KC_ENOMEM;
	kclaw__candidate__init(&c);
	c.origin = "user";
	if ((rv = bundle_open_dir(dir, "candidate", l->dir)) != 0)
		goto out;
	snprintf(l->file, sizeof(l->file), "%s", l->dir);
	if ((rv = bundle_read_text(l, "source", "kernel.cu", BUNDLE_SOURCE_MAX,
	         &c.source)) != 0 ||
	    (rv = bundle_read_text(
	         l, "plan", "plan.json", BUNDLE_JSON_MAX, &c.plan_json)) != 0)
		goto out;
	if (c.source[0] == '\0') {
		rv = kc_seterr(KC_EINVAL,
		    "%s/kernel.cu is empty; it must define the extern \"C\" "
		    "__global__ kernels the plan launches",
		    l->dir);
		goto out;
	}
	snprintf(where, sizeof(where), "%s/plan.json", l->dir);
	if ((rv = kc_plan_check(NULL, c.plan_json, where, 0)) != 0)
		goto out;
	rv = bundle_copy_out(&c.base, (ProtobufCMessage **)out);
out:
	bundle_arena_free(&l->ar);
	free(l);
	return rv;
}

/* ---- inlining tensors for a remote submit ---- */

int
kc_spec_each_tensor_data(Kclaw__TaskSpec *spec,
    int (*fn)(Kclaw__TensorData *td, void *arg), void *arg)
{
	Kclaw__Reference *ref = spec->reference;
	int rv;

	for (size_t i = 0; ref != NULL && i < ref->n_sets; i++) {
		Kclaw__TensorSet *set = ref->sets[i];
		for (size_t k = 0; k < set->n_inputs; k++)
			if ((rv = fn(set->inputs[k], arg)) != 0)
				return rv;
		for (size_t k = 0; k < set->n_expected; k++)
			if ((rv = fn(set->expected[k], arg)) != 0)
				return rv;
	}
	return 0;
}
