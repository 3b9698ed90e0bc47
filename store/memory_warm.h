/*
 * memory_warm.h - warm starts across tasks (docs/memory.md "Warm starts"):
 * every solved task leaves its best kernel with the task's feature vector;
 * a new task's seeds include the best kernel of the most similar one, for
 * the Generator to adapt.
 *
 * The feature vector is the task's shape as a spec shows it before any
 * kernel exists: how many inputs, parameters and outputs, the sizes of
 * inputs and outputs (log2 of their elements) and their ratio (how much a
 * kernel reduces), the highest rank, the dtype, the reference's kind; and
 * the words of its name and description. The distance sums the relative
 * difference of every figure and twice the words' Jaccard distance, so two
 * norms over the same shapes are nearer than a norm and a GEMM.
 *
 * Records live in STORE_CF_LEARNED under 'w' task id, one JSON document
 * each; a task solved again overwrites its record.
 */
#ifndef KC_MEMORY_WARM_H
#define KC_MEMORY_WARM_H

#include <stddef.h>

#include "kclaw.pb-c.h"
#include "store.h"

#define MEMWARM_DIMS 9

typedef struct {
	double v[MEMWARM_DIMS];
	char *words; /* sorted, unique, space-separated (malloc'd) */
} memwarm_vector;

/* The feature vector of a task (free with memwarm_vector_free). */
int memwarm_vector_of(const Kclaw__TaskSpec *task, memwarm_vector *out);
void memwarm_vector_free(memwarm_vector *v);
double memwarm_distance(const memwarm_vector *a, const memwarm_vector *b);

/*
 * Keeps task_id's best kernel (source and plan) with its feature vector
 * and speedup over the reference; into b when b is not NULL, else written
 * now.
 */
int memwarm_put(store *s, store_batch *b, const char *task_id,
    const Kclaw__TaskSpec *task, const Kclaw__Candidate *best, double speedup);

/*
 * The best kernel of the solved task nearest to task, other than
 * exclude_task_id (a task solved before under the same name is the
 * nearest of all): *best (kclaw__candidate__free_unpacked) and
 * *from (its task name, malloc'd) and *distance; *best NULL when the store
 * has none. Ties go to the smaller key.
 */
int memwarm_nearest(store *s, const char *exclude_task_id,
    const Kclaw__TaskSpec *task, Kclaw__Candidate **best, char **from,
    double *distance);

#endif
