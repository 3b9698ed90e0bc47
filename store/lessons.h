/*
 * lessons.h - learned experience across tasks (docs/memory.md "Lessons"):
 * after every optimisation round a short lesson is kept (the base kernel's
 * evidence signature and normalised fields, the method, what changed, the
 * outcome and the speedups); a Planner is shown the lessons of OTHER tasks
 * whose evidence is closest to its base kernel's, with their outcomes.
 *
 * Lessons live in STORE_CF_LEARNED under 'l' signature '\0' task id '\0'
 * round (big-endian u64), one JSON document each; a round recorded again
 * (a replayed transition, a repaired attempt) overwrites its lesson. At
 * most LESSONS_MAX_PER_SIGNATURE are kept per signature: a new lesson
 * evicts the oldest. The lessons shown for a retrieval are kept under
 * 'u' candidate id, so `kclaw memory explain` shows exactly those.
 *
 * Similarity is a weighted distance over the fields both evidences know
 * (relative difference per field, profiler metrics and rule features
 * weight 1, runtime figures 0.5; a field only one side knows counts half),
 * plus 0.5 when the signatures differ. Deterministic: ties go to the
 * smaller key.
 */
#ifndef KC_LESSONS_H
#define KC_LESSONS_H

#include <stddef.h>
#include <stdint.h>

#include "memory_lt.h"
#include "store.h"

#define LESSONS_MAX_PER_SIGNATURE 64
/* Lessons shown to a Planner by default. */
#define LESSONS_DEFAULT_SHOWN 4
/* "What changed" is cut to this many bytes. */
#define LESSONS_CHANGE_BYTES 240
#define LESSONS_FILE "lessons.json"

typedef struct {
	char *signature;
	char *task_id;
	char *task_name;
	uint32_t round;
	char *method;
	char *change;    /* what changed: the plan's summary, one line */
	char *status;    /* the new kernel's EvalStatus name */
	char *kernel_id; /* the new kernel */
	double speedup;  /* over its base; 0 when it failed */
	double before;   /* the base over the reference; 0: unknown */
	double after;    /* the new kernel over the reference; 0: failed */
	uint64_t unix_ms;
	memlt_field *fields; /* the base's known evidence fields */
	size_t nfields;
	double distance; /* set by lessons_similar */
} lesson;

/* Frees the strings and fields of n lessons and the array. */
void lessons_free(lesson *v, size_t n);

/*
 * Stores l (its strings are copied; unix_ms 0: now). With b, the lesson is
 * put into the batch and committed with the caller's transition; without,
 * written now. Evicts the oldest committed lessons of l's signature beyond
 * LESSONS_MAX_PER_SIGNATURE - 1.
 */
int lessons_put(store *s, store_batch *b, const lesson *l);

/* Every lesson, in key order (*out malloc'd: lessons_free). */
int lessons_list(store *s, lesson **out, size_t *n);

/*
 * The k lessons closest to the evidence of r (its signature and fields),
 * skipping those of task exclude_task (may be NULL), nearest first with
 * their distance (*out malloc'd: lessons_free).
 */
int lessons_similar(store *s, const memlt_result *r, const char *exclude_task,
    size_t k, lesson **out, size_t *n);

/* One line for the Planner (malloc'd): task, signature, distance, method,
 * outcome, speedups, what changed. */
int lessons_render(const lesson *l, char **out);

/* The lessons used for a retrieval of candidate_id: the rendered lines as
 * shown (put without a batch). lessons_used_get gives KC_ENOENT when none
 * were kept; *lines is one malloc'd block (a single free). */
int lessons_used_put(
    store *s, const char *candidate_id, char *const *lines, size_t n);
int lessons_used_get(
    store *s, const char *candidate_id, char ***lines, size_t *n);

/* Writes every lesson to dir/lessons.json (*n: how many). */
int lessons_export(store *s, const char *dir, size_t *n);
/* Imports dir/lessons.json when present (*n: how many; 0 without the
 * file). A lesson whose key exists is replaced. KC_EINVAL with the file
 * and the lesson's index for a malformed one. */
int lessons_import(store *s, const char *dir, size_t *n);

#endif
