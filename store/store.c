/*
 * store.c - RocksDB behind kclaw's error idiom. See store.h.
 */
#include "store.h"

#include <rocksdb/c.h>
#include <stdlib.h>
#include <string.h>

#include "kc_err.h"
#include "kc_util.h"

static const char *store_cf_names[STORE_CF_COUNT] = {
    [STORE_CF_DEFAULT] = "default",
    [STORE_CF_META] = "meta",
    [STORE_CF_TASKS] = "tasks",
    [STORE_CF_CANDIDATES] = "candidates",
    [STORE_CF_EVENTS] = "events",
    [STORE_CF_BLOBS] = "blobs",
    [STORE_CF_JOBS] = "jobs",
    [STORE_CF_KNOWLEDGE] = "knowledge",
    [STORE_CF_LEARNED] = "learned",
    [STORE_CF_SHORT_TERM] = "short_term",
};

struct store {
	rocksdb_t *db;
	rocksdb_options_t *opts;
	rocksdb_writeoptions_t *wsync;
	rocksdb_writeoptions_t *wnosync;
	rocksdb_readoptions_t *ropts;
	rocksdb_column_family_handle_t *cf[STORE_CF_COUNT];
	char *path;
};

struct store_batch {
	/* Column families are resolved at commit, when the store is known. */
	struct store_batch_op {
		store_cf cf;
		bool del;
		size_t klen, vlen;
		char *kv; /* key then value */
	} * ops;
	size_t nops, cap;
};

const char *
store_cf_name(store_cf cf)
{
	return (cf >= 0 && cf < STORE_CF_COUNT) ? store_cf_names[cf] : "?";
}

/* RocksDB reports errors through char **errptr, which must be NULL before
 * each call; this turns one into a kclaw error and frees it. */
static int
store_err(char *err, const char *what, const char *path)
{
	int rv = kc_seterr(
	    KC_ESTORE, "store %s (%s): %s", what, path ? path : "?", err);
	rocksdb_free(err);
	return rv;
}

int
store_open(store **out, const char *path)
{
	const char *names[STORE_CF_COUNT];
	const rocksdb_options_t *cfopts[STORE_CF_COUNT];
	store *s;
	char *err = NULL;
	int rv;

	if (path == NULL || *path == '\0')
		return kc_seterr(KC_EINVAL, "store: empty database path");
	if ((rv = kc_mkdirs(path, 0700)) != 0)
		return rv;
	if ((s = calloc(1, sizeof(*s))) == NULL ||
	    (s->path = strdup(path)) == NULL) {
		free(s);
		return KC_ENOMEM;
	}
	s->opts = rocksdb_options_create();
	rocksdb_options_set_create_if_missing(s->opts, 1);
	rocksdb_options_set_create_missing_column_families(s->opts, 1);
	/* A small, steady footprint: the orchestrator is one of many
	 * processes on a host and the store holds little hot data. */
	rocksdb_options_set_max_open_files(s->opts, 256);
	rocksdb_options_set_keep_log_file_num(s->opts, 4);
	rocksdb_options_set_max_total_wal_size(s->opts, 64u << 20);
	for (int i = 0; i < STORE_CF_COUNT; i++) {
		names[i] = store_cf_names[i];
		cfopts[i] = s->opts;
	}
	s->db = rocksdb_open_column_families(
	    s->opts, path, STORE_CF_COUNT, names, cfopts, s->cf, &err);
	if (err != NULL) {
		if (strstr(err, "lock") != NULL) {
			rocksdb_free(err);
			rv = kc_seterr(KC_EBUSY,
			    "store %s is in use by another process (only the "
			    "orchestrator opens it; ask it over the API)",
			    path);
		} else {
			rv = store_err(err, "open", path);
		}
		rocksdb_options_destroy(s->opts);
		free(s->path);
		free(s);
		return rv;
	}
	s->wsync = rocksdb_writeoptions_create();
	rocksdb_writeoptions_set_sync(s->wsync, 1);
	s->wnosync = rocksdb_writeoptions_create();
	s->ropts = rocksdb_readoptions_create();
	*out = s;
	return 0;
}

void
store_close(store *s)
{
	if (s == NULL)
		return;
	for (int i = 0; i < STORE_CF_COUNT; i++)
		if (s->cf[i] != NULL)
			rocksdb_column_family_handle_destroy(s->cf[i]);
	rocksdb_close(s->db);
	rocksdb_writeoptions_destroy(s->wsync);
	rocksdb_writeoptions_destroy(s->wnosync);
	rocksdb_readoptions_destroy(s->ropts);
	rocksdb_options_destroy(s->opts);
	free(s->path);
	free(s);
}

static int
store_check_cf(store_cf cf)
{
	if (cf <= STORE_CF_DEFAULT || cf >= STORE_CF_COUNT)
		return kc_seterr(
		    KC_EINVAL, "store: bad column family %d", (int)cf);
	return 0;
}

int
store_put(store *s, store_cf cf, const void *key, size_t klen, const void *val,
    size_t vlen, bool sync)
{
	char *err = NULL;
	int rv;

	if ((rv = store_check_cf(cf)) != 0)
		return rv;
	rocksdb_put_cf(s->db, sync ? s->wsync : s->wnosync, s->cf[cf], key,
	    klen, val, vlen, &err);
	return err ? store_err(err, "put", s->path) : 0;
}

int
store_get(store *s, store_cf cf, const void *key, size_t klen, void **val,
    size_t *vlen)
{
	char *err = NULL, *v;
	size_t n = 0;
	int rv;

	if ((rv = store_check_cf(cf)) != 0)
		return rv;
	v = rocksdb_get_cf(s->db, s->ropts, s->cf[cf], key, klen, &n, &err);
	if (err != NULL)
		return store_err(err, "get", s->path);
	if (v == NULL)
		return KC_ENOENT;
	/* Hand out a malloc'd copy (with a NUL after it, for text values) so
	 * callers free with free(), not rocksdb_free(). */
	void *copy = malloc(n + 1);
	if (copy == NULL) {
		rocksdb_free(v);
		return KC_ENOMEM;
	}
	memcpy(copy, v, n);
	((char *)copy)[n] = '\0';
	rocksdb_free(v);
	*val = copy;
	*vlen = n;
	return 0;
}

int
store_delete(store *s, store_cf cf, const void *key, size_t klen, bool sync)
{
	char *err = NULL;
	int rv;

	if ((rv = store_check_cf(cf)) != 0)
		return rv;
	rocksdb_delete_cf(
	    s->db, sync ? s->wsync : s->wnosync, s->cf[cf], key, klen, &err);
	return err ? store_err(err, "delete", s->path) : 0;
}

int
store_batch_new(store_batch **out)
{
	store_batch *b = calloc(1, sizeof(*b));

	if (b == NULL)
		return KC_ENOMEM;
	*out = b;
	return 0;
}

static int
store_batch_add(store_batch *b, store_cf cf, bool del, const void *key,
    size_t klen, const void *val, size_t vlen)
{
	struct store_batch_op *op;
	int rv;

	if ((rv = store_check_cf(cf)) != 0)
		return rv;
	if (b->nops == b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 8;
		void *n = realloc(b->ops, cap * sizeof(*b->ops));
		if (n == NULL)
			return KC_ENOMEM;
		b->ops = n;
		b->cap = cap;
	}
	op = &b->ops[b->nops];
	if ((op->kv = malloc(klen + vlen + 1)) == NULL)
		return KC_ENOMEM;
	memcpy(op->kv, key, klen);
	if (vlen > 0)
		memcpy(op->kv + klen, val, vlen);
	op->cf = cf;
	op->del = del;
	op->klen = klen;
	op->vlen = vlen;
	b->nops++;
	return 0;
}

int
store_batch_put(store_batch *b, store_cf cf, const void *key, size_t klen,
    const void *val, size_t vlen)
{
	return store_batch_add(b, cf, false, key, klen, val, vlen);
}

int
store_batch_delete(store_batch *b, store_cf cf, const void *key, size_t klen)
{
	return store_batch_add(b, cf, true, key, klen, NULL, 0);
}

int
store_batch_commit(store *s, store_batch *b, bool sync)
{
	rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
	char *err = NULL;

	for (size_t i = 0; i < b->nops; i++) {
		struct store_batch_op *op = &b->ops[i];
		if (op->del)
			rocksdb_writebatch_delete_cf(
			    wb, s->cf[op->cf], op->kv, op->klen);
		else
			rocksdb_writebatch_put_cf(wb, s->cf[op->cf], op->kv,
			    op->klen, op->kv + op->klen, op->vlen);
	}
	rocksdb_write(s->db, sync ? s->wsync : s->wnosync, wb, &err);
	rocksdb_writebatch_destroy(wb);
	return err ? store_err(err, "batch commit", s->path) : 0;
}

void
store_batch_free(store_batch *b)
{
	if (b == NULL)
		return;
	for (size_t i = 0; i < b->nops; i++)
		free(b->ops[i].kv);
	free(b->ops);
	free(b);
}

int
store_scan(store *s, store_cf cf, const void *prefix, size_t plen,
    const void *start, size_t slen, store_scan_fn fn, void *arg)
{
	rocksdb_iterator_t *it;
	char *err = NULL;
	int rv;

	if ((rv = store_check_cf(cf)) != 0)
		return rv;
	it = rocksdb_create_iterator_cf(s->db, s->ropts, s->cf[cf]);
	if (start != NULL &&
	    (plen == 0 || (slen >= plen && memcmp(start, prefix, plen) == 0)))
		rocksdb_iter_seek(it, start, slen);
	else if (plen > 0)
		rocksdb_iter_seek(it, prefix, plen);
	else
		rocksdb_iter_seek_to_first(it);
	for (; rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
		size_t kl, vl;
		const char *k = rocksdb_iter_key(it, &kl);
		const char *v = rocksdb_iter_value(it, &vl);
		if (kl < plen || (plen > 0 && memcmp(k, prefix, plen) != 0))
			break;
		if ((rv = fn(arg, k, kl, v, vl)) != 0)
			break;
	}
	rocksdb_iter_get_error(it, &err);
	rocksdb_iter_destroy(it);
	if (err != NULL)
		return store_err(err, "scan", s->path);
	return rv < 0 ? rv : 0;
}

int
store_last_key(store *s, store_cf cf, const void *prefix, size_t plen,
    void **key, size_t *klen)
{
	rocksdb_iterator_t *it;
	char *err = NULL;
	int rv = KC_ENOENT;

	if ((rv = store_check_cf(cf)) != 0)
		return rv;
	rv = KC_ENOENT;
	it = rocksdb_create_iterator_cf(s->db, s->ropts, s->cf[cf]);
	if (plen == 0) {
		rocksdb_iter_seek_to_last(it);
	} else {
		/* Seek past the prefix: the prefix with its last byte
		 * incremented (carrying); then step back. */
		char *upper = malloc(plen);
		size_t ul = plen;
		if (upper == NULL) {
			rocksdb_iter_destroy(it);
			return KC_ENOMEM;
		}
		memcpy(upper, prefix, plen);
		while (ul > 0 && (unsigned char)upper[ul - 1] == 0xff)
			ul--;
		if (ul == 0) {
			rocksdb_iter_seek_to_last(it);
		} else {
			upper[ul - 1]++;
			rocksdb_iter_seek(it, upper, ul);
			if (rocksdb_iter_valid(it))
				rocksdb_iter_prev(it);
			else
				rocksdb_iter_seek_to_last(it);
		}
		free(upper);
	}
	if (rocksdb_iter_valid(it)) {
		size_t kl;
		const char *k = rocksdb_iter_key(it, &kl);
		if (kl >= plen && (plen == 0 || memcmp(k, prefix, plen) == 0)) {
			if ((*key = malloc(kl + 1)) == NULL) {
				rv = KC_ENOMEM;
			} else {
				memcpy(*key, k, kl);
				((char *)*key)[kl] = '\0';
				*klen = kl;
				rv = 0;
			}
		}
	}
	rocksdb_iter_get_error(it, &err);
	rocksdb_iter_destroy(it);
	if (err != NULL)
		return store_err(err, "seek", s->path);
	return rv;
}

int
store_blob_put(store *s, const void *data, size_t len, char hash[65])
{
	void *old = NULL;
	size_t olen;

	kc_sha256_hex(data, len, hash);
	if (store_get(s, STORE_CF_BLOBS, hash, 64, &old, &olen) == 0) {
		free(old);
		return 0; /* content-addressed: already there */
	}
	return store_put(s, STORE_CF_BLOBS, hash, 64, data, len, true);
}

int
store_blob_put_as(store *s, const char hash[65], const void *data, size_t len)
{
	int rv;

	if ((rv = store_blob_has(s, hash, NULL)) != KC_ENOENT)
		return rv;
	return store_put(s, STORE_CF_BLOBS, hash, 64, data, len, true);
}

int
store_blob_has(store *s, const char *hash, size_t *len)
{
	rocksdb_pinnableslice_t *v;
	char *err = NULL;
	size_t n = 0;

	if (hash == NULL || strlen(hash) != 64)
		return kc_seterr(KC_EINVAL,
		    "store: blob hash must be 64 hex "
		    "characters");
	v = rocksdb_get_pinned_cf(
	    s->db, s->ropts, s->cf[STORE_CF_BLOBS], hash, 64, &err);
	if (err != NULL)
		return store_err(err, "get", s->path);
	if (v == NULL)
		return KC_ENOENT;
	rocksdb_pinnableslice_value(v, &n);
	rocksdb_pinnableslice_destroy(v);
	if (len != NULL)
		*len = n;
	return 0;
}

int
store_blob_get(store *s, const char *hash, void **data, size_t *len)
{
	if (hash == NULL || strlen(hash) != 64)
		return kc_seterr(KC_EINVAL,
		    "store: blob hash must be 64 hex "
		    "characters");
	return store_get(s, STORE_CF_BLOBS, hash, 64, data, len);
}
