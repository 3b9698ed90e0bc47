/*
 * store.h - kclaw's one RocksDB database (DESIGN.md "Memories").
 *
 * Column families by kind of record; keys are fixed-width big-endian where
 * they are numbers, so that byte order is numeric order and prefix scans
 * return records in sequence. Writes that belong together go in one batch,
 * committed atomically across column families; `sync` makes a commit
 * durable against a machine crash (the WAL is fsynced), and every commit
 * survives the process being killed. Only one process (the orchestrator)
 * opens the database read-write.
 */
#ifndef KC_STORE_H
#define KC_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
	STORE_CF_DEFAULT = 0, /* RocksDB's own; unused by kclaw */
	STORE_CF_META,        /* schema version, counters */
	STORE_CF_TASKS,       /* task id -> kclaw.TaskRecord */
	STORE_CF_CANDIDATES,  /* task id + candidate id -> CandidateRecord */
	STORE_CF_EVENTS,      /* u64 seq (BE) -> kclaw.Event */
	STORE_CF_BLOBS,       /* sha256 hex -> bytes */
	STORE_CF_JOBS,        /* job id -> in-flight job (resent on restart) */
	STORE_CF_KNOWLEDGE,   /* expert knowledge: policy and methods */
	STORE_CF_LEARNED,     /* learned statistics per (signature, method) */
	STORE_CF_SHORT_TERM,  /* task id + u64 seq -> short-term records */
	STORE_CF_COUNT
} store_cf;

typedef struct store store;
typedef struct store_batch store_batch;

/* Name of a column family as stored in RocksDB ("tasks", ...). */
const char *store_cf_name(store_cf cf);

/* Opens (creating if missing) the database in folder path. */
int store_open(store **out, const char *path);
void store_close(store *s);

int store_put(store *s, store_cf cf, const void *key, size_t klen,
    const void *val, size_t vlen, bool sync);
/* KC_ENOENT when absent; on success *val is malloc'd (caller frees). */
int store_get(store *s, store_cf cf, const void *key, size_t klen, void **val,
    size_t *vlen);
int store_delete(
    store *s, store_cf cf, const void *key, size_t klen, bool sync);

/* Batches: everything put in one batch commits atomically, or nothing. */
int store_batch_new(store_batch **out);
int store_batch_put(store_batch *b, store_cf cf, const void *key, size_t klen,
    const void *val, size_t vlen);
int store_batch_delete(
    store_batch *b, store_cf cf, const void *key, size_t klen);
int store_batch_commit(store *s, store_batch *b, bool sync);
void store_batch_free(store_batch *b);

/*
 * Calls fn for every record whose key starts with prefix (plen may be 0),
 * in key order, starting at the first key >= start when start is not NULL.
 * fn returns 0 to go on, 1 to stop (not an error), or a negative code that
 * stops the scan and is returned.
 */
typedef int (*store_scan_fn)(
    void *arg, const void *key, size_t klen, const void *val, size_t vlen);
int store_scan(store *s, store_cf cf, const void *prefix, size_t plen,
    const void *start, size_t slen, store_scan_fn fn, void *arg);
/* The last key of a column family under prefix (e.g. the highest seq). */
int store_last_key(store *s, store_cf cf, const void *prefix, size_t plen,
    void **key, size_t *klen);

/* Fixed-width big-endian keys. */
static inline void
store_key_u64(uint8_t out[8], uint64_t v)
{
	for (int i = 7; i >= 0; i--) {
		out[i] = (uint8_t)v;
		v >>= 8;
	}
}

static inline uint64_t
store_key_get_u64(const uint8_t in[8])
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v = v << 8 | in[i];
	return v;
}

/* Content-addressed blobs: *hash (65 bytes) receives the sha256 hex. */
int store_blob_put(store *s, const void *data, size_t len, char hash[65]);
int store_blob_get(store *s, const char *hash, void **data, size_t *len);
/* Stores data under hash, which the caller has checked is its sha256
 * (an upload hashed as it arrived); a blob already there is kept. */
int store_blob_put_as(
    store *s, const char hash[65], const void *data, size_t len);
/* 0 when the blob is in the store (*len its size, when len is not NULL),
 * KC_ENOENT when not; copies nothing out. */
int store_blob_has(store *s, const char *hash, size_t *len);

#endif
