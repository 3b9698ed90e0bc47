/*
 * blobcache.c - a worker's cache of blobs fetched by hash. See blobcache.h.
 */
#include "blobcache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bundle.h"
#include "kc_err.h"
#include "kc_log.h"
#include "kc_util.h"

/* A file used this recently may be read by another worker of the home. */
#define KC_BLOB_RECENT_S 60
#define KC_BLOB_TRIES 4

static bool
blob_is_hash(const char *h)
{
	return h != NULL && strlen(h) == 64 &&
	    strspn(h, "0123456789abcdef") == 64;
}

int
kc_blob_cache_init(kc_blob_cache *c, const kc_config *cfg)
{
	memset(c, 0, sizeof(*c));
	snprintf(c->dir, sizeof(c->dir), "%s/cache/blobs", cfg->home);
	snprintf(c->local, sizeof(c->local), "%s/blobs", cfg->run_dir);
	c->max_bytes = cfg->blob_cache_bytes ? cfg->blob_cache_bytes
	                                     : KC_BLOB_CACHE_DEFAULT;
	c->chunk = KC_BLOB_CHUNK;
	c->timeout_ms = 30000;
	return kc_mkdirs(c->dir, 0700);
}

struct blob_ent {
	char name[65];
	uint64_t size;
	time_t used;
};

static int
blob_ent_cmp(const void *a, const void *b)
{
	const struct blob_ent *x = a, *y = b;

	return x->used < y->used ? -1 : x->used > y->used ? 1 : 0;
}

static bool
blob_kept(const char *name, const char *const *keep, unsigned nkeep)
{
	for (unsigned i = 0; i < nkeep; i++)
		if (keep[i] != NULL && strcmp(keep[i], name) == 0)
			return true;
	return false;
}

/* Removes least recently used files until need more bytes fit. */
static int
blob_make_room(
    kc_blob_cache *c, uint64_t need, const char *const *keep, unsigned nkeep)
{
	struct blob_ent *v = NULL;
	size_t n = 0, cap = 0;
	uint64_t total = 0;
	time_t now = time(NULL);
	struct dirent *de;
	DIR *d;

	if ((d = opendir(c->dir)) == NULL)
		return kc_seterr(
		    KC_EIO, "cannot read %s: %s", c->dir, strerror(errno));
	while ((de = readdir(d)) != NULL) {
		char path[KC_PATH_MAX + 80];
		struct stat st;
		if (!blob_is_hash(de->d_name))
			continue;
		snprintf(path, sizeof(path), "%s/%s", c->dir, de->d_name);
		if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode))
			continue;
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 64;
			struct blob_ent *nv = realloc(v, ncap * sizeof(*nv));
			if (nv == NULL) {
				closedir(d);
				free(v);
				return KC_ENOMEM;
			}
			v = nv;
			cap = ncap;
		}
		memcpy(v[n].name, de->d_name, 65);
		v[n].size = (uint64_t)st.st_size;
		v[n].used = st.st_mtime;
		total += v[n].size;
		n++;
	}
	closedir(d);
	if (n > 0)
		qsort(v, n, sizeof(*v), blob_ent_cmp);
	for (size_t i = 0; i < n && total + need > c->max_bytes; i++) {
		char path[KC_PATH_MAX + 80];
		if (blob_kept(v[i].name, keep, nkeep) ||
		    now - v[i].used < KC_BLOB_RECENT_S)
			continue;
		snprintf(path, sizeof(path), "%s/%s", c->dir, v[i].name);
		if (unlink(path) == 0) {
			total -= v[i].size;
			c->evicted++;
		}
	}
	if (total + need > c->max_bytes)
		KC_WARN("blob cache %s: %llu bytes in use by this and recent "
		        "evaluations, over its bound of %llu "
		        "(blob_cache_bytes)",
		    c->dir, (unsigned long long)(total + need),
		    (unsigned long long)c->max_bytes);
	free(v);
	return 0;
}

/* One chunk, asked again after a timeout (the socket was reopened). */
static int
blob_chunk(kc_blob_cache *c, kc_worker *w, const char *hash, uint64_t off,
    Kclaw__BlobChunk **ch)
{
	int rv = KC_ETIMEDOUT;

	for (int i = 0; i < KC_BLOB_TRIES && rv == KC_ETIMEDOUT; i++)
		rv = kc_worker_blob(w, hash, off, c->chunk, c->timeout_ms, ch);
	return rv;
}

static int
blob_write_all(int fd, const uint8_t *p, size_t n)
{
	while (n > 0) {
		ssize_t k = write(fd, p, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return KC_EIO;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

/* Streams blob hash into a temporary file, checks it, renames it to
 * final. Memory: one chunk at a time. */
static int
blob_fetch(kc_blob_cache *c, kc_worker *w, const char *hash,
    const char *const *keep, unsigned nkeep, const char *final)
{
	char tmp[KC_PATH_MAX + 128], got[65];
	Kclaw__BlobChunk *ch = NULL;
	uint64_t off = 0, total = 0;
	kc_sha256_ctx sha;
	int fd, rv;

	snprintf(
	    tmp, sizeof(tmp), "%s/.%s.%d.part", c->dir, hash, (int)getpid());
	if ((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) <
	    0)
		return kc_seterr(
		    KC_EIO, "cannot create %s: %s", tmp, strerror(errno));
	kc_sha256_init(&sha);
	for (bool first = true;; first = false) {
		if ((rv = blob_chunk(c, w, hash, off, &ch)) != 0)
			goto fail;
		if (first) {
			total = ch->total;
			if (total > c->max_bytes) {
				rv = kc_seterr(KC_ENOSPC,
				    "blob %s has %llu bytes, more than this "
				    "worker's cache may hold (%llu): raise "
				    "\"blob_cache_bytes\" in kclaw.json or "
				    "KCLAW_BLOB_CACHE_BYTES",
				    hash, (unsigned long long)total,
				    (unsigned long long)c->max_bytes);
				goto fail;
			}
			if ((rv = blob_make_room(c, total, keep, nkeep)) != 0)
				goto fail;
		}
		if (ch->hash == NULL || strcmp(ch->hash, hash) != 0 ||
		    ch->offset != off || ch->total != total ||
		    ch->data.len > total - off ||
		    (ch->data.len == 0 && off < total)) {
			rv = kc_seterr(KC_EPROTO,
			    "blob %s: the orchestrator answered another piece "
			    "(offset %llu, %zu bytes of %llu) than asked "
			    "(offset %llu of %llu)",
			    hash, (unsigned long long)ch->offset, ch->data.len,
			    (unsigned long long)ch->total,
			    (unsigned long long)off, (unsigned long long)total);
			goto fail;
		}
		kc_sha256_update(&sha, ch->data.data, ch->data.len);
		if (blob_write_all(fd, ch->data.data, ch->data.len) != 0) {
			rv = kc_seterr(KC_EIO, "cannot write %s: %s", tmp,
			    strerror(errno));
			goto fail;
		}
		off += ch->data.len;
		kclaw__blob_chunk__free_unpacked(ch, NULL);
		ch = NULL;
		if (off == total)
			break;
	}
	kc_sha256_final_hex(&sha, got);
	if (strcmp(got, hash) != 0) {
		rv = kc_seterr(KC_EPROTO,
		    "blob %s: the %llu bytes received hash to %s; not used",
		    hash, (unsigned long long)total, got);
		goto fail;
	}
	if (fsync(fd) != 0 || close(fd) != 0) {
		fd = -1;
		rv = kc_seterr(
		    KC_EIO, "cannot write %s: %s", tmp, strerror(errno));
		goto fail;
	}
	fd = -1;
	if (rename(tmp, final) != 0) {
		rv = kc_seterr(KC_EIO, "cannot rename %s to %s: %s", tmp, final,
		    strerror(errno));
		goto fail;
	}
	c->fetched_bytes += total;
	c->fetched_blobs++;
	return 0;
fail:
	if (ch != NULL)
		kclaw__blob_chunk__free_unpacked(ch, NULL);
	if (fd >= 0)
		close(fd);
	unlink(tmp);
	return rv;
}

int
kc_blob_get(kc_blob_cache *c, kc_worker *w, const char *hash,
    const char *const *keep, unsigned nkeep, char *path, size_t n)
{
	struct stat st;
	int rv;

	if (!blob_is_hash(hash))
		return kc_seterr(KC_EINVAL,
		    "blob '%.80s' is not a sha256 (64 lowercase hex digits)",
		    hash ? hash : "");
	snprintf(path, n, "%s/%s", c->dir, hash);
	if (lstat(path, &st) == 0 && S_ISREG(st.st_mode)) {
		/* A hit is a use: the newest are evicted last. */
		utimensat(AT_FDCWD, path, NULL, 0);
		c->hits++;
		return 0;
	}
	/* The same home as the orchestrator's: its file, as it is. */
	snprintf(path, n, "%s/%s.npy", c->local, hash);
	if (lstat(path, &st) == 0 && S_ISREG(st.st_mode)) {
		c->local_hits++;
		return 0;
	}
	snprintf(path, n, "%s/%s", c->dir, hash);
	if ((rv = blob_fetch(c, w, hash, keep, nkeep, path)) != 0)
		return rv;
	return 0;
}

struct blob_resolve {
	kc_blob_cache *c;
	kc_worker *w;
	const char **keep;
	unsigned nkeep, cap;
};

static int
blob_collect(Kclaw__TensorData *td, void *arg)
{
	struct blob_resolve *r = arg;

	if (td->blob == NULL || td->blob[0] == '\0')
		return 0;
	if (r->nkeep == r->cap) {
		unsigned ncap = r->cap ? r->cap * 2 : 16;
		const char **nk = realloc(r->keep, ncap * sizeof(*nk));
		if (nk == NULL)
			return KC_ENOMEM;
		r->keep = nk;
		r->cap = ncap;
	}
	r->keep[r->nkeep++] = td->blob;
	return 0;
}

static int
blob_resolve_one(Kclaw__TensorData *td, void *arg)
{
	struct blob_resolve *r = arg;
	char path[KC_PATH_MAX + 80], *p;
	int rv;

	if (td->blob == NULL || td->blob[0] == '\0')
		return 0;
	if ((rv = kc_blob_get(r->c, r->w, td->blob, r->keep, r->nkeep, path,
	         sizeof(path))) != 0)
		return kc_seterr(rv, "tensor '%s': %s",
		    td->name ? td->name : "?", kc_lasterr());
	if ((p = strdup(path)) == NULL)
		return KC_ENOMEM;
	/* protobuf-c's empty-string default is static: never free it. */
	if (td->path != NULL && td->path != protobuf_c_empty_string)
		free(td->path);
	td->path = p;
	return 0;
}

int
kc_blob_resolve_spec(kc_blob_cache *c, kc_worker *w, Kclaw__TaskSpec *spec)
{
	struct blob_resolve r = {.c = c, .w = w};
	int rv;

	if (spec == NULL)
		return 0;
	if ((rv = kc_spec_each_tensor_data(spec, blob_collect, &r)) == 0)
		rv = kc_spec_each_tensor_data(spec, blob_resolve_one, &r);
	free(r.keep);
	return rv;
}
