/*
 * blobs.h - task bundles imported by content (DESIGN.md "Tasks").
 *
 * Every .npy file a task names (a `tensors` reference's inputs and expected
 * outputs) and every tensor sent inline is read into the store's blob
 * column family under its SHA-256, and the hash is recorded in the TaskSpec
 * (TensorData.blob). So a task survives its bundle folder being moved or
 * deleted, and a sandbox on another host can be given what it lacks by
 * hash. Importing is work proportional to the task's size: the
 * orchestrator does it off its loop (import.c). Before an evaluation,
 * blobs are written back to files under the deployment's run folder (once
 * per content; the import writes them already) and the request's paths
 * point there.
 */
#ifndef ORCH_BLOBS_H
#define ORCH_BLOBS_H

#include <stdbool.h>
#include <stdint.h>

#include "bus.h"
#include "kc_config.h"
#include "kclaw.pb-c.h"
#include "store.h"

/* Largest tensor file imported (bigger ones are refused with a message). */
#define ORCH_BLOB_MAX ((size_t)2 << 30)

/* Where an import stands: tensors (files or inline) and their bytes. */
typedef struct {
	uint32_t tensors, done;
	uint64_t bytes, bytes_done;
} orch_blobs_progress;

/* Whether spec names a tensor that is not in the store yet (a file or
 * inline bytes without TensorData.blob). Reads no file. */
bool orch_blobs_pending(const Kclaw__TaskSpec *spec);

/*
 * Imports every TensorData.path (or inline data) of spec's reference sets
 * as a blob, sets TensorData.blob and drops the inline copy; spec's
 * strings are malloc'd (an unpacked message). With cache_dir, each
 * content is also written to cache_dir/<hash>.npy, as an evaluation needs
 * it. progress (may be NULL) is called before the first tensor and after
 * each; a non-zero return stops the import and is returned.
 */
int orch_blobs_import(store *s, Kclaw__TaskSpec *spec, const char *cache_dir,
    int (*progress)(void *arg, const orch_blobs_progress *p), void *arg);
/*
 * The same, with every TensorData.path opened as Submit checked it
 * (orch_data_open: the bundle roots of cfg, never the home's own files,
 * a regular .npy file, read from the descriptor that was checked), so a
 * link swapped in after Submit imports nothing from outside the roots.
 * orch_blobs_import opens regular files the same way (never blocking on
 * a FIFO), with no roots and no .npy check.
 */
int orch_blobs_import_checked(store *s, Kclaw__TaskSpec *spec,
    const char *cache_dir, const kc_config *cfg,
    int (*progress)(void *arg, const orch_blobs_progress *p), void *arg);

/*
 * Whether the store holds blob hash (64 lowercase hex digits): its cache
 * file cache_dir/<hash>.npy exists (written only after the store's copy,
 * so a cheap stat answers), or the store says so. *size (may be NULL) is
 * its size in bytes.
 */
bool orch_blob_stored(
    store *s, const char *cache_dir, const char *hash, uint64_t *size);

/* Refuses (KC_EINVAL, with the tensor named) a spec that names a blob the
 * store does not hold: Submit checks it, so a task never waits for
 * content nobody sent. */
int orch_blobs_check_stored(
    store *s, const char *cache_dir, Kclaw__TaskSpec *spec);

/* Points every TensorData with a blob at cache_dir/<hash>.npy, writing the
 * file from the store when it is missing. */
int orch_blobs_materialize(
    store *s, const char *cache_dir, Kclaw__TaskSpec *spec);

/*
 * The Blob rpc (docs/orchestrator.md "Blobs"): a WorkRequest with `blob`
 * set, on the work socket, asks for a piece of a blob by hash. Served by
 * ORCH_BLOB_THREADS threads of its own, off the loop, from
 * cache_dir/<hash>.npy (written from the store when missing), at most
 * ORCH_BLOB_CHUNK_MAX bytes per reply, so memory stays bounded whatever
 * the blob's size. The token is checked on the wire as for any work
 * request; the hash format and the offset are checked before any file is
 * named. At most ORCH_BLOB_QUEUE requests wait; more are dropped (the
 * worker's call times out and it asks again).
 */
#define ORCH_BLOB_CHUNK_MAX ((size_t)8 << 20)
/* The work socket's receive limit (requests carry results, not data). */
#define ORCH_WORK_MAX_MSG ((size_t)16 << 20)
#define ORCH_BLOB_THREADS 2
#define ORCH_BLOB_QUEUE 256

typedef struct orch_blob_server orch_blob_server;

int orch_blob_server_open(
    orch_blob_server **out, store *s, const char *cache_dir, const char *token);
/* From the work socket's NNG thread: never blocks; takes call. */
void orch_blob_server_post(orch_blob_server *bs, bus_call *call);
/* Joins the threads and drops waiting calls (before the work socket
 * closes); close also frees. */
void orch_blob_server_stop(orch_blob_server *bs);
void orch_blob_server_close(orch_blob_server *bs);

#endif
