/*
 * bundle.h - task bundles and candidate folders on disk (docs/bundle.md).
 *
 * A task bundle is a folder with task.json and the files it names (the
 * reference's CUDA source and launch plan, or its .npy input sets, and an
 * optional context file). A candidate folder holds kernel.cu and plan.json.
 * Loading validates everything that can be checked without a GPU or a
 * compiler and refuses bad input with a message that names the file, the
 * field, what is wrong and what to do (kc_lasterr). Compiling the reference
 * is the sandbox's job (`kclaw eval --compile-only`).
 */
#ifndef KC_BUNDLE_H
#define KC_BUNDLE_H

#include "kclaw.pb-c.h"

/*
 * Loads the bundle in dir. On success *out is a new TaskSpec the caller
 * frees with kclaw__task_spec__free_unpacked(*out, NULL). File names in a
 * bundle are relative to dir and may not leave it; a TENSORS reference's
 * .npy files become absolute paths in TensorData.path.
 */
int kc_bundle_load(const char *dir, Kclaw__TaskSpec **out);

/*
 * Loads the candidate in dir (kernel.cu and plan.json) with origin "user".
 * On success *out is a new Candidate the caller frees with
 * kclaw__candidate__free_unpacked(*out, NULL).
 */
int kc_candidate_load(const char *dir, Kclaw__Candidate **out);

/*
 * Checks that a launch plan only names the task's tensors and its own
 * scratch buffers, that scratch and kernel names are C identifiers, and,
 * when require_outputs is set, that every output tensor is passed to some
 * step. `where` starts each error message (e.g. the plan's file name).
 */
int kc_plan_check(const Kclaw__TaskSpec *spec, const char *plan_json,
    const char *where, int require_outputs);

/* Calls fn for every tensor (inputs, then expected outputs) of every set of
 * spec's reference; stops at and returns the first non-zero result. */
int kc_spec_each_tensor_data(Kclaw__TaskSpec *spec,
    int (*fn)(Kclaw__TensorData *td, void *arg), void *arg);

/* Short names of the enums as task.json spells them ("f32", "normal"). */
const char *kc_dtype_name(Kclaw__DType dtype);
const char *kc_dist_name(Kclaw__Distribution dist);
const char *kc_tensor_kind_name(Kclaw__TensorKind kind);
/* Bytes per element of a dtype; 0 for DTYPE_UNSPECIFIED. */
size_t kc_dtype_size(Kclaw__DType dtype);

#endif
