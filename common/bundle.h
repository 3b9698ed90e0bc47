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

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "kclaw.pb-c.h"

/* ---------------------------------------------------------- guarded open */

/*
 * Who may be read: allow returns 0 when real (a path with every symbolic
 * link and ".." resolved) may be read as what ("task.json: context"), or
 * an error with kc_lasterr() saying why and what to do. kclawd's rule is
 * its bundle roots without the home's own files (orch_data_rule); the
 * bundle loader adds "inside the bundle folder" to whatever rule it got.
 */
typedef struct {
	int (*allow)(void *arg, const char *what, const char *real);
	void *arg;
} kc_path_rule;

/* A file opened by kc_bundle_open: read it from fd, never by name again. */
typedef struct {
	int fd;
	char real[PATH_MAX]; /* its real path when it was opened */
	uint64_t dev, ino, size;
} kc_bundle_file;

#define KC_OPEN_NPY 1u /* the file must start with the .npy magic */

/*
 * Opens path once to read it as task data, and checks what it opened:
 * the path is resolved (realpath) and the rule (may be NULL) asked about
 * the real path; the real path is then opened without following a
 * symbolic link (O_NOFOLLOW) and without blocking (O_NONBLOCK, so a FIFO
 * or a device never holds the caller); the descriptor must be a regular
 * file, with the device and inode that the real path had when it was
 * checked, at the real path that was checked (/proc/self/fd): a link
 * swapped in anywhere along the path between the check and the open is
 * refused, not followed. With KC_OPEN_NPY its first bytes must be the
 * .npy magic. what starts every message. On success the caller reads
 * out->fd and closes it with kc_bundle_close.
 */
int kc_bundle_open(const char *path, const char *what, unsigned flags,
    const kc_path_rule *rule, kc_bundle_file *out);
/*
 * Reads all of f (at most max bytes: a larger file is refused with
 * KC_ENOSPC, its size and the limit named) into a malloc'd, NUL-terminated
 * *data.
 */
int kc_bundle_read(const kc_bundle_file *f, const char *what, size_t max,
    char **data, size_t *len);
void kc_bundle_close(kc_bundle_file *f);
/* kc_bundle_open, kc_bundle_read and kc_bundle_close in one call. */
int kc_bundle_read_file(const char *path, const char *what, unsigned flags,
    const kc_path_rule *rule, size_t max, char **data, size_t *len);

/* ----------------------------------------------------------- the loaders */

/*
 * Loads the bundle in dir. On success *out is a new TaskSpec the caller
 * frees with kclaw__task_spec__free_unpacked(*out, NULL). File names in a
 * bundle are relative to dir and may not leave it; a TENSORS reference's
 * .npy files become absolute paths in TensorData.path.
 */
int kc_bundle_load(const char *dir, Kclaw__TaskSpec **out);
/* The same, with every file it opens (task.json included) also held to
 * rule (kclawd: its bundle roots, never the home's own files). */
int kc_bundle_load_rule(
    const char *dir, const kc_path_rule *rule, Kclaw__TaskSpec **out);

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
