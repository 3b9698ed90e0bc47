/*
 * memory_lt.h - long-term memory at run time: retrieval with a trace, and
 * the statistics learned from every optimisation attempt (DESIGN.md
 * "Memories"; docs/memory.md "Retrieval" and "Learning").
 *
 * Retrieval: raw evidence (profiler metrics, runtime features, static code
 * features) is normalised by the policy into named fields; derived fields,
 * predicates and bottleneck classes are evaluated; the decision table's
 * rules of the active classes allow methods; vetoes remove some; the rest
 * are ranked by UCB1 over the learned statistics of the evidence signature,
 * with the rules' preference as the prior:
 *
 *   score = (successes + prior) / (attempts + 1)
 *         + c * sqrt(ln(N + 1) / (attempts + 1))
 *
 * where N is the attempts of all allowed methods under the signature and c
 * the exploration weight (MEMLT_DEFAULT_C). Deterministic: the same evidence
 * and statistics always give the same ranking.
 *
 * Learning: one record per attempt in STORE_CF_LEARNED, keyed by (signature,
 * method, attempt id), so recording the same attempt twice (a replayed
 * transition) counts it once, and a batch may hold any number of them.
 */
#ifndef KC_MEMORY_LT_H
#define KC_MEMORY_LT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kb.h"
#include "kclaw.pb-c.h"
#include "store.h"

#define MEMLT_DEFAULT_C 0.5
#define MEMLT_DEFAULT_KNOWLEDGE_BYTES 1600
/* Recommendations when no options are given: enough choice for the
 * Planner, a bounded prompt (8 x 1600 bytes at most). */
#define MEMLT_DEFAULT_MAX_METHODS 8
/* An attempt succeeds when correct and at least this much faster than its
 * base (speedup over base >= 1 + MEMLT_SUCCESS_GAIN). */
#define MEMLT_SUCCESS_GAIN 0.03

/* ------------------------------------------------------------ evidence */

/* Raw evidence: named numbers by source, before normalisation. */
typedef struct memlt_evidence memlt_evidence;

int memlt_evidence_new(memlt_evidence **out);
void memlt_evidence_free(memlt_evidence *ev);
/* Sets (or replaces) one raw value; names compare case-insensitively. */
int memlt_evidence_set(
    memlt_evidence *ev, kb_source src, const char *name, double value);
/*
 * Adds an evaluation's metrics (KB_SRC_METRIC) and runtime features
 * (KB_SRC_RUNTIME: median_ms, duration_us, registers, spill_bytes,
 * local_bytes, shared_bytes, theoretical_occupancy_pct, block_threads,
 * grid_blocks, num_launches, arch_sm, speedup).
 */
int memlt_evidence_add_eval(memlt_evidence *ev, const Kclaw__EvalResult *r);
/* Adds what the task says (KB_SRC_RUNTIME: rtol, atol from its
 * tolerance), so rules can ask whether lower precision is acceptable. */
int memlt_evidence_add_task(memlt_evidence *ev, const Kclaw__TaskSpec *task);
/* Adds static features (KB_SRC_FEATURE) from the Feature Extractor. */
int memlt_evidence_add_features(
    memlt_evidence *ev, Kclaw__Feature *const *f, size_t n);
/*
 * Adds evidence from JSON: either sections {"metrics": {...}, "runtime":
 * {...}, "features": {...}} (objects of name: number|bool|null, or arrays of
 * {"name", "value"}), or one flat object (each name looked up as a metric,
 * runtime and feature alias). KC_EINVAL with a clear message otherwise.
 */
int memlt_evidence_add_json(memlt_evidence *ev, const char *json);

/* ----------------------------------------------------------- retrieval */

typedef struct {
	double c;                  /* exploration weight; < 0: default */
	size_t max_methods;        /* 0: all allowed */
	size_t knowledge_bytes;    /* per recommendation; 0: default */
	bool with_global_fallback; /* show all-signature stats in knowledge */
} memlt_options;

/* One known field of the normalised evidence (lessons compare them). */
typedef struct {
	char name[48];
	double value;
	kb_source source;
} memlt_field;

typedef struct {
	/* Ranked, best first. Each is malloc'd with malloc'd strings: free it
	 * with kclaw__recommendation__free_unpacked(r, NULL), or all of them
	 * with memlt_result_free. */
	Kclaw__Recommendation **recs;
	size_t nrecs;
	char *signature; /* the evidence signature (learned stats key) */
	char *primary;   /* the highest-priority active class, or "none" */
	char *trace;     /* the full trace as text */
	int arch_sm;     /* from the evidence; 0 when unknown */
	char **active;   /* active classes, highest priority first */
	size_t nactive;
	char **fired; /* rules that fired, in table order per class */
	size_t nfired;
	char **vetoes; /* vetoes whose condition held */
	size_t nvetoes;
	memlt_field *fields; /* the known fields, in the policy's order */
	size_t nfields;
} memlt_result;

/*
 * Retrieves the ranked methods for ev under k. s may be NULL (no learned
 * statistics: every method counts as untried). opt may be NULL: c 0.5,
 * MEMLT_DEFAULT_MAX_METHODS, MEMLT_DEFAULT_KNOWLEDGE_BYTES.
 * out is the caller's (memlt_result_free), also on failure.
 */
int memlt_retrieve(store *s, const kb *k, const memlt_evidence *ev,
    const memlt_options *opt, memlt_result *out);
void memlt_result_free(memlt_result *r);

/* ------------------------------------------------------------ learning */

/*
 * Records one optimisation attempt of method under signature (from the
 * Recommendation that suggested it): correct and the speedup over its base
 * (base median / new median; ignored when !correct). attempt_id (e.g. the
 * new candidate's id) makes the record idempotent. With b, the record is
 * put into the batch (the caller commits it with its state transition);
 * without, it is written and synced now.
 */
int memlt_learn(store *s, store_batch *b, const char *signature,
    const char *method, const char *attempt_id, bool correct, double speedup);

/* Gain buckets of the distribution (speedup over base). */
#define MEMLT_NBUCKETS 8
extern const char *const memlt_bucket_names[MEMLT_NBUCKETS];

typedef struct {
	char signature[192]; /* "*" in the all-signature rows */
	char method[64];
	uint32_t attempts;
	uint32_t correct;
	uint32_t successes;
	double gain_mean; /* mean of (speedup - 1) over correct attempts */
	double gain_min, gain_max;
	double speedup_best;
	uint32_t buckets[MEMLT_NBUCKETS]; /* correct attempts by speedup */
	uint64_t last_unix_ms;
} memlt_stat;

/*
 * The statistics, one row per (signature, method), sorted by signature then
 * method, followed (when with_global) by one "*" row per method over all
 * signatures. signature may be NULL (all) or one signature. *out is
 * malloc'd (caller frees).
 */
int memlt_stats(store *s, const char *signature, bool with_global,
    memlt_stat **out, size_t *n);
/* One (signature, method) row; zeroes when nothing was learned. */
int memlt_stat_get(
    store *s, const char *signature, const char *method, memlt_stat *out);

#endif
