/*
 * blobs.h - task bundles imported by content (DESIGN.md "Tasks").
 *
 * At submit, every .npy file a task names (a `tensors` reference's inputs
 * and expected outputs) is read into the store's blob column family under
 * its SHA-256, and the hash is recorded in the TaskSpec (TensorData.blob).
 * So a task survives its bundle folder being moved or deleted, and a
 * sandbox on another host can be given what it lacks by hash. Before an
 * evaluation, blobs are written back to files under the deployment's run
 * folder (once per content) and the request's paths point there.
 */
#ifndef ORCH_BLOBS_H
#define ORCH_BLOBS_H

#include "kclaw.pb-c.h"
#include "store.h"

/* Largest tensor file imported (bigger ones are refused with a message). */
#define ORCH_BLOB_MAX ((size_t)2 << 30)

/* Imports every TensorData.path (or inline data) of spec's reference sets
 * as a blob and sets TensorData.blob; spec's strings are malloc'd. */
int orch_blobs_import(store *s, Kclaw__TaskSpec *spec);

/* Points every TensorData with a blob at cache_dir/<hash>.npy, writing the
 * file from the store when it is missing. */
int orch_blobs_materialize(
    store *s, const char *cache_dir, Kclaw__TaskSpec *spec);

#endif
