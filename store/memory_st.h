/*
 * memory_st.h - short-term memory: per task, the repair chains and, per
 * base kernel, the optimisation attempts (DESIGN.md "Memories";
 * docs/memory.md "Short-term memory").
 *
 * Records live in STORE_CF_SHORT_TERM under task id + '\0' + big-endian u64
 * sequence, so a task's records scan in order. A repair chain is the run of
 * repair records up to and including one whose kernel passed; the next
 * failure starts a new chain. The renderers produce the text of
 * AgentJob.repair_chain and AgentJob.opt_history, never longer than the
 * byte budget: the newest records are shown in full, older ones as one
 * line, the oldest are counted but dropped.
 */
#ifndef KC_MEMORY_ST_H
#define KC_MEMORY_ST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"

#define MEMST_DEFAULT_BYTES 6000    /* default budget of one rendering */
#define MEMST_MAX_FIELD_BYTES 16384 /* longer fields are cut when stored */

typedef enum {
	MEMST_REPAIR = 1, /* one failing kernel and what was done about it */
	MEMST_OPT = 2,    /* one optimisation attempt on a base kernel */
} memst_kind;

/*
 * One record. Strings may be NULL (absent). For MEMST_REPAIR: kernel_id is
 * the failing kernel, status its EvalStatus name (COMPILE_ERROR, ...),
 * failure the summary of what failed, diagnosis and fix what the Diagnoser
 * and Repairer said and did, result_id the repaired kernel, outcome what
 * happened to it, and passed ends the chain. For MEMST_OPT: base_id the base
 * kernel, method and plan what was tried, kernel_id the kernel it produced,
 * status and outcome its evaluation, speedup its speedup over the base
 * (base median / its median; 0 when it failed), ms its median.
 */
typedef struct {
	memst_kind kind;
	uint64_t seq;          /* set by the store */
	uint64_t time_unix_ms; /* 0: now */
	uint32_t round;
	char *kernel_id;
	char *status;
	char *failure;
	char *diagnosis;
	char *fix;
	char *result_id;
	char *outcome;
	bool passed;
	char *base_id;
	char *method;
	char *plan;
	double speedup;
	double ms;
} memst_record;

typedef struct {
	memst_record *recs; /* in sequence order */
	size_t n;
} memst_list;

/* The next free sequence number of the task (1 for the first record). */
int memst_next_seq(store *s, const char *task_id, uint64_t *seq);
/* Puts r under (task_id, seq) into the batch; the caller commits it with
 * its state transition. Any seq works (e.g. the round); records read back
 * in seq order, and a record put again under the same seq replaces it. */
int memst_put(
    store_batch *b, const char *task_id, uint64_t seq, const memst_record *r);
/* Appends r now (next seq, synced); *seq may be NULL. */
int memst_append(
    store *s, const char *task_id, const memst_record *r, uint64_t *seq);
/* All records of a task in order; out is the caller's (memst_list_free). */
int memst_load(store *s, const char *task_id, memst_list *out);
void memst_list_free(memst_list *l);
/* Deletes every record of a task (into b when not NULL). */
int memst_delete_task(store *s, store_batch *b, const char *task_id);

/*
 * The Diagnoser's context (AgentJob.repair_chain): the open chain in full
 * (newest first in detail, older attempts summarised), then earlier closed
 * chains as one line each, within max_bytes (0: MEMST_DEFAULT_BYTES; the
 * text is never longer). "" when the task has no repair records. *out is
 * malloc'd.
 */
int memst_render_repair_chain(
    const memst_list *l, size_t max_bytes, char **out);
/*
 * The Planner's context (AgentJob.opt_history): the attempts on base_id in
 * detail, then the attempts on earlier bases summarised, within max_bytes.
 */
int memst_render_opt_history(
    const memst_list *l, const char *base_id, size_t max_bytes, char **out);

/* Load and render in one call. */
int memst_repair_chain_text(
    store *s, const char *task_id, size_t max_bytes, char **out);
int memst_opt_history_text(store *s, const char *task_id, const char *base_id,
    size_t max_bytes, char **out);

#endif
