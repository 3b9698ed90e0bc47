/*
 * blobcache.h - a worker's own copies of blobs, fetched by hash from the
 * orchestrator with the Blob rpc (docs/orchestrator.md "Blobs").
 *
 * A task's tensors are named by SHA-256 (TensorData.blob). A worker on any
 * host resolves each hash to a file of its own home:
 *
 *  1. <home>/cache/blobs/<hash>: fetched earlier and verified then (a file
 *     appears there only by rename after its hash matched);
 *  2. <home>/run/blobs/<hash>.npy: the orchestrator's own file, present
 *     only when this worker shares the orchestrator's home (one host, one
 *     deployment folder): used as it is, nothing is copied;
 *  3. otherwise fetched in chunks (KC_BLOB_CHUNK bytes per call, so memory
 *     is bounded whatever the size), hashed as it streams to a temporary
 *     file, and kept only when the hash matches.
 *
 * The cache is bounded (kc_config.blob_cache_bytes): before a fetch, the
 * least recently used files are removed until the new blob fits. A file's
 * modification time is its last use (a hit touches it). Files of the
 * evaluation being prepared, and any used in the last minute (another
 * sandbox of the same home may be reading them), are kept; when they
 * alone exceed the bound the cache runs over it and says so. A blob larger
 * than the whole bound is refused with a message naming the setting.
 */
#ifndef KC_BLOBCACHE_H
#define KC_BLOBCACHE_H

#include <stdint.h>

#include "kc_config.h"
#include "kclaw.pb-c.h"
#include "worker.h"

#define KC_BLOB_CHUNK (4u << 20) /* bytes per Blob call */

typedef struct {
	char dir[KC_PATH_MAX];   /* <home>/cache/blobs */
	char local[KC_PATH_MAX]; /* <home>/run/blobs (the same-home path) */
	uint64_t max_bytes;
	uint32_t chunk;
	int timeout_ms; /* per chunk */
	/* What the last calls did (a benchmark and the tests read them). */
	uint64_t fetched_bytes, fetched_blobs, hits, local_hits, evicted;
} kc_blob_cache;

/* From cfg's home and bound; creates the folder (0700). */
int kc_blob_cache_init(kc_blob_cache *c, const kc_config *cfg);

/*
 * The local file holding blob hash, into path (n bytes), fetched through w
 * when needed. keep (nkeep hashes, may be NULL) are never evicted to make
 * room. Errors: KC_EINVAL for a malformed hash, KC_ENOSPC when the blob is
 * larger than the bound, KC_EPROTO when the content does not match its
 * hash, and kc_worker_blob's.
 */
int kc_blob_get(kc_blob_cache *c, kc_worker *w, const char *hash,
    const char *const *keep, unsigned nkeep, char *path, size_t n);

/* Points every TensorData of spec that has a blob at its local file (the
 * path the worker sent, if any, is replaced: it names a file of the
 * orchestrator's host). */
int kc_blob_resolve_spec(kc_blob_cache *c, kc_worker *w, Kclaw__TaskSpec *spec);

#endif
