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

/* Points every TensorData with a blob at cache_dir/<hash>.npy, writing the
 * file from the store when it is missing. */
int orch_blobs_materialize(
    store *s, const char *cache_dir, Kclaw__TaskSpec *spec);

#endif
