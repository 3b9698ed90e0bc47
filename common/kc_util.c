#include "kc_util.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kc_err.h"

uint64_t
kc_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t
kc_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t
kc_mono_ms(void)
{
	return kc_mono_ns() / 1000000u;
}

void
kc_sleep_ms(uint32_t ms)
{
	struct timespec ts = {
	    .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

int
kc_read_file(const char *path, size_t max_len, char **data, size_t *len)
{
	struct stat st;
	char *buf = NULL;
	size_t got = 0;
	int fd, rv = 0;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return kc_seterr(errno == ENOENT ? KC_ENOENT : KC_EIO,
		    "cannot open %s: %s", path, strerror(errno));
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		rv = kc_seterr(KC_EIO, "%s is not a regular file", path);
		goto out;
	}
	if ((size_t)st.st_size > max_len) {
		rv = kc_seterr(KC_ENOSPC,
		    "%s is %lld bytes, over the limit of %zu", path,
		    (long long)st.st_size, max_len);
		goto out;
	}
	if ((buf = malloc((size_t)st.st_size + 1)) == NULL) {
		rv = KC_ENOMEM;
		goto out;
	}
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rv = kc_seterr(KC_EIO, "cannot read %s: %s", path,
			    n < 0 ? strerror(errno) : "short read");
			goto out;
		}
		got += (size_t)n;
	}
	buf[got] = '\0';
	*data = buf;
	*len = got;
	buf = NULL;
out:
	free(buf);
	close(fd);
	return rv;
}

int
kc_write_file(const char *path, const void *data, size_t len)
{
	char tmp[4096];
	const char *p = data;
	int fd;

	/* A temporary name of its own (mkstemp, mode 0600): two threads of one
	 * process writing the same path (the importer and an evaluation's
	 * write-back) never share a temporary file. */
	if (snprintf(tmp, sizeof(tmp), "%s.tmp.XXXXXX", path) >=
	    (int)sizeof(tmp))
		return kc_seterr(KC_EINVAL, "path too long: %s", path);
	if ((fd = mkstemp(tmp)) < 0)
		return kc_seterr(
		    KC_EIO, "cannot create %s: %s", tmp, strerror(errno));
	while (len > 0) {
		ssize_t n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			close(fd);
			unlink(tmp);
			return kc_seterr(KC_EIO, "cannot write %s: %s", tmp,
			    strerror(errno));
		}
		p += n;
		len -= (size_t)n;
	}
	if (fsync(fd) != 0 || close(fd) != 0 || rename(tmp, path) != 0) {
		unlink(tmp);
		return kc_seterr(
		    KC_EIO, "cannot write %s: %s", path, strerror(errno));
	}
	return 0;
}

int
kc_write_json(const char *path, const cJSON *o)
{
	char *text = o ? cJSON_Print(o) : NULL;
	int rv;

	if (text == NULL)
		return kc_seterr(KC_ENOMEM, "out of memory printing %s", path);
	rv = kc_write_file(path, text, strlen(text));
	cJSON_free(text);
	return rv;
}

int
kc_mkdirs(const char *path, unsigned mode)
{
	char buf[4096];
	size_t n = strlen(path);

	if (n == 0 || n >= sizeof(buf))
		return kc_seterr(KC_EINVAL, "bad folder path '%s'", path);
	memcpy(buf, path, n + 1);
	for (size_t i = 1; i <= n; i++) {
		if (buf[i] != '/' && buf[i] != '\0')
			continue;
		char c = buf[i];
		buf[i] = '\0';
		if (mkdir(buf, (mode_t)mode) != 0 && errno != EEXIST)
			return kc_seterr(KC_EIO, "cannot create folder %s: %s",
			    buf, strerror(errno));
		buf[i] = c;
	}
	return 0;
}

void
kc_new_id(char out[17])
{
	static const char hex[] = "0123456789abcdef";
	uint8_t raw[8];
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
	bool ok = false;

	if (fd >= 0) {
		ok = read(fd, raw, sizeof(raw)) == (ssize_t)sizeof(raw);
		close(fd);
	}
	if (!ok) {
		/* Fall back on time and pid: unique enough for ids, not keys.
		 */
		uint64_t v = kc_mono_ns() ^ ((uint64_t)getpid() << 40);
		memcpy(raw, &v, sizeof(raw));
	}
	for (int i = 0; i < 8; i++) {
		out[2 * i] = hex[raw[i] >> 4];
		out[2 * i + 1] = hex[raw[i] & 15];
	}
	out[16] = '\0';
}

uint64_t
kc_fnv1a64(const void *data, size_t len, uint64_t seed)
{
	const uint8_t *p = data;
	uint64_t h = 1469598103934665603ull ^ seed;

	for (size_t i = 0; i < len; i++) {
		h ^= p[i];
		h *= 1099511628211ull;
	}
	return h;
}

/* ---- SHA-256 (FIPS 180-4), for content addresses of blobs ---- */

static const uint32_t kc_sha_k[64] = {0x428a2f98, 0x71374491, 0xb5c0fbcf,
    0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
    0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7,
    0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
    0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85,
    0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e,
    0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
    0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c,
    0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3, 0x748f82ee,
    0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

#define KC_ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void
kc_sha_block(uint32_t h[8], const uint8_t *p)
{
	uint32_t w[64], a, b, c, d, e, f, g, hh;

	for (int i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
		    (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
	for (int i = 16; i < 64; i++) {
		uint32_t s0 = KC_ROR(w[i - 15], 7) ^ KC_ROR(w[i - 15], 18) ^
		    (w[i - 15] >> 3);
		uint32_t s1 = KC_ROR(w[i - 2], 17) ^ KC_ROR(w[i - 2], 19) ^
		    (w[i - 2] >> 10);
		w[i] = w[i - 16] + s0 + w[i - 7] + s1;
	}
	a = h[0], b = h[1], c = h[2], d = h[3];
	e = h[4], f = h[5], g = h[6], hh = h[7];
	for (int i = 0; i < 64; i++) {
		uint32_t s1 = KC_ROR(e, 6) ^ KC_ROR(e, 11) ^ KC_ROR(e, 25);
		uint32_t ch = (e & f) ^ (~e & g);
		uint32_t t1 = hh + s1 + ch + kc_sha_k[i] + w[i];
		uint32_t s0 = KC_ROR(a, 2) ^ KC_ROR(a, 13) ^ KC_ROR(a, 22);
		uint32_t mj = (a & b) ^ (a & c) ^ (b & c);
		uint32_t t2 = s0 + mj;
		hh = g, g = f, f = e, e = d + t1;
		d = c, c = b, b = a, a = t1 + t2;
	}
	h[0] += a, h[1] += b, h[2] += c, h[3] += d;
	h[4] += e, h[5] += f, h[6] += g, h[7] += hh;
}

void
kc_sha256_init(kc_sha256_ctx *c)
{
	static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372,
	    0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

	memcpy(c->h, h0, sizeof(h0));
	c->nbuf = 0;
	c->len = 0;
}

void
kc_sha256_update(kc_sha256_ctx *c, const void *data, size_t len)
{
	const uint8_t *p = data;

	c->len += len;
	if (c->nbuf > 0) {
		size_t take = 64 - c->nbuf < len ? 64 - c->nbuf : len;
		memcpy(c->buf + c->nbuf, p, take);
		c->nbuf += take;
		p += take;
		len -= take;
		if (c->nbuf < 64)
			return;
		kc_sha_block(c->h, c->buf);
		c->nbuf = 0;
	}
	for (; len >= 64; p += 64, len -= 64)
		kc_sha_block(c->h, p);
	if (len > 0)
		memcpy(c->buf, p, len);
	c->nbuf = len;
}

void
kc_sha256_final(kc_sha256_ctx *c, uint8_t out[32])
{
	uint8_t tail[128] = {0};
	uint64_t bits = c->len * 8;
	size_t tlen;

	memcpy(tail, c->buf, c->nbuf);
	tail[c->nbuf] = 0x80;
	tlen = c->nbuf + 1 + 8 <= 64 ? 64 : 128;
	for (int i = 0; i < 8; i++)
		tail[tlen - 1 - i] = (uint8_t)(bits >> (8 * i));
	kc_sha_block(c->h, tail);
	if (tlen == 128)
		kc_sha_block(c->h, tail + 64);
	for (int i = 0; i < 8; i++) {
		out[4 * i] = (uint8_t)(c->h[i] >> 24);
		out[4 * i + 1] = (uint8_t)(c->h[i] >> 16);
		out[4 * i + 2] = (uint8_t)(c->h[i] >> 8);
		out[4 * i + 3] = (uint8_t)c->h[i];
	}
}

void
kc_sha256_final_hex(kc_sha256_ctx *c, char out[65])
{
	static const char hex[] = "0123456789abcdef";
	uint8_t d[32];

	kc_sha256_final(c, d);
	for (int i = 0; i < 32; i++) {
		out[2 * i] = hex[d[i] >> 4];
		out[2 * i + 1] = hex[d[i] & 15];
	}
	out[64] = '\0';
}

void
kc_sha256(const void *data, size_t len, uint8_t out[32])
{
	kc_sha256_ctx c;

	kc_sha256_init(&c);
	kc_sha256_update(&c, data, len);
	kc_sha256_final(&c, out);
}

void
kc_sha256_hex(const void *data, size_t len, char out[65])
{
	kc_sha256_ctx c;

	kc_sha256_init(&c);
	kc_sha256_update(&c, data, len);
	kc_sha256_final_hex(&c, out);
}

/* ---- growable strings ---- */

static int
kc_str_reserve(kc_str *s, size_t extra)
{
	size_t need = s->len + extra + 1;
	char *nb;

	if (need <= s->cap)
		return 0;
	size_t cap = s->cap ? s->cap : 64;
	while (cap < need)
		cap *= 2;
	if ((nb = realloc(s->buf, cap)) == NULL)
		return KC_ENOMEM;
	s->buf = nb;
	s->cap = cap;
	return 0;
}

int
kc_str_appendn(kc_str *s, const char *text, size_t n)
{
	if (kc_str_reserve(s, n) != 0)
		return KC_ENOMEM;
	memcpy(s->buf + s->len, text, n);
	s->len += n;
	s->buf[s->len] = '\0';
	return 0;
}

int
kc_str_append(kc_str *s, const char *text)
{
	return kc_str_appendn(s, text, strlen(text));
}

int
kc_str_printf(kc_str *s, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return KC_EINVAL;
	if (kc_str_reserve(s, (size_t)n) != 0)
		return KC_ENOMEM;
	va_start(ap, fmt);
	vsnprintf(s->buf + s->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	s->len += (size_t)n;
	return 0;
}

char *
kc_str_take(kc_str *s)
{
	char *b = s->buf;

	if (b == NULL)
		b = calloc(1, 1);
	s->buf = NULL;
	s->len = s->cap = 0;
	return b;
}

void
kc_str_free(kc_str *s)
{
	free(s->buf);
	s->buf = NULL;
	s->len = s->cap = 0;
}

bool
kc_strlcpy(char *dst, const char *src, size_t n)
{
	size_t l = strlen(src);

	if (n == 0)
		return false;
	if (l >= n) {
		memcpy(dst, src, n - 1);
		dst[n - 1] = '\0';
		return false;
	}
	memcpy(dst, src, l + 1);
	return true;
}

int
kc_share_dir(const char *sub, char *out, size_t n)
{
	const char *env = getenv("KCLAW_SHARE_DIR");
	char exe[PATH_MAX], *slash;
	struct stat st;
	ssize_t len;

	if (env != NULL && *env != '\0') {
		snprintf(out, n, "%s/%s", env, sub);
	} else {
		len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
		if (len <= 0)
			return kc_seterr(KC_ENOENT,
			    "cannot find this program's folder "
			    "(/proc/self/exe) "
			    "to look for share/kclaw/%s; set KCLAW_SHARE_DIR",
			    sub);
		exe[len] = '\0';
		if ((slash = strrchr(exe, '/')) != NULL)
			*slash = '\0';
		if ((slash = strrchr(exe, '/')) != NULL)
			*slash = '\0'; /* <prefix>/bin -> <prefix> */
		snprintf(out, n, "%s/share/kclaw/%s", exe, sub);
	}
	if (stat(out, &st) != 0 || !S_ISDIR(st.st_mode))
		return kc_seterr(KC_ENOENT,
		    "kclaw's %s folder %s does not exist; install kclaw "
		    "(cmake --install) or set KCLAW_SHARE_DIR to its "
		    "share/kclaw folder",
		    sub, out);
	return 0;
}
