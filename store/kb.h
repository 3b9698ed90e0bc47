/*
 * kb.h - long-term expert knowledge: the decision policy and the method
 * knowledge (DESIGN.md "Memories"; docs/memory.md).
 *
 * Authored as JSON in the repository (store/knowledge/policy.json and
 * methods.json), validated, and imported into STORE_CF_KNOWLEDGE as a new
 * version whenever the content changed. A loaded kb is immutable and may be
 * shared by readers; the orchestrator loads the head version once and
 * reloads it after an import.
 *
 * Validation errors name the file and the place in it, e.g.
 *   policy.json: rules[3] "spill_first": when: column 12: expected ')'
 *   policy.json: rules[5] "fuse": allow: method 'fusion' is not defined in
 *   methods.json
 *   methods.json:14:5: JSON syntax error near '}'
 */
#ifndef KC_KB_H
#define KC_KB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "expr.h"
#include "store.h"

#define KB_POLICY_FILE "policy.json"
#define KB_METHODS_FILE "methods.json"
#define KB_MAX_FILE_BYTES (4u << 20)

/* Where a raw input comes from; a field lists aliases per source. */
typedef enum {
	KB_SRC_METRIC = 0, /* profiler metric (EvalResult.metrics) */
	KB_SRC_RUNTIME,    /* timing and resources (EvalResult) */
	KB_SRC_FEATURE,    /* static code feature (Feature Extractor) */
	KB_SRC_COUNT
} kb_source;

/* A raw name accepted for a field, with a factor applied to its value
 * (e.g. an occupancy reported as a fraction, scale 100 to percent). */
typedef struct {
	char *name;
	double scale;
} kb_alias;

/* Normalisation: raw inputs -> one named evidence field. */
typedef struct {
	char *name;
	kb_source source;
	kb_alias *aliases; /* first present one wins */
	size_t naliases;
	char *unit;
	char *doc;
} kb_field;

/* A derived field or a named predicate: name = expression. */
typedef struct {
	char *name;
	expr *e;
	char *doc;
} kb_named_expr;

/* A bottleneck class: active when `when` is true and no active class of
 * higher priority suppresses it. */
typedef struct {
	char *name;
	int priority; /* higher first */
	expr *when;
	char **suppresses; /* class names */
	size_t nsuppresses;
	char *why;
} kb_class;

/* A row of the decision table: when its class is active and `when` holds,
 * the methods in `allow` are allowed, in order of preference. */
typedef struct {
	char *name;
	char *cls;
	expr *when; /* NULL: the class alone decides */
	char **allow;
	size_t nallow;
	char *why;
} kb_rule;

/* A global veto: when `when` is true, the methods are not allowed. */
typedef struct {
	char *name;
	expr *when;
	char **methods;
	size_t nmethods;
	char *why;
} kb_veto;

typedef struct {
	char *name;
	char *title;
	char *intent;
	char *applies_when;
	char *requires;
	char *expected;   /* the metric change it should cause */
	char *cue_ampere; /* implementation cues, sm_80/sm_86 */
	char *cue_hopper; /* implementation cues, sm_90 */
	char *pitfalls;
	char **tags;
	size_t ntags;
} kb_method;

typedef struct kb {
	uint64_t version; /* store version; 0 when loaded from files */
	char *label;      /* the authors' version label ("2026.11-1") */
	char sha256[65];  /* of the canonical JSON */
	uint64_t imported_unix_ms;
	kb_field *fields;
	size_t nfields;
	kb_named_expr *derived;
	size_t nderived;
	kb_named_expr *predicates;
	size_t npredicates;
	kb_class *classes; /* sorted by priority, highest first */
	size_t nclasses;
	kb_rule *rules;
	size_t nrules;
	kb_veto *vetoes;
	size_t nvetoes;
	kb_method *methods;
	size_t nmethods;
	void *doc; /* the canonical JSON document (cJSON *) */
} kb;

/*
 * Reads and validates DIR/policy.json and DIR/methods.json. On failure the
 * error (kc_lasterr) names the file and the place; *out is the caller's
 * (kb_free) on success.
 */
int kb_load_dir(const char *dir, kb **out);
/* The same from in-memory JSON texts; names are used in error messages. */
int kb_load_json(const char *policy_json, const char *policy_name,
    const char *methods_json, const char *methods_name, kb **out);
void kb_free(kb *k);

/*
 * Validates DIR and stores it as a new version (the head) unless the head
 * already holds the same content: *version gets the head version and
 * *changed whether a new one was written. Synced.
 */
int kb_import(store *s, const char *dir, uint64_t *version, bool *changed);
/* Loads a stored version (0 = head). KC_ENOENT when nothing was imported. */
int kb_load(store *s, uint64_t version, kb **out);
/* Loads the head, importing dir first when the store holds no knowledge. */
int kb_ensure(store *s, const char *dir, kb **out);
/* Writes a stored version (0 = head) as DIR/policy.json and methods.json;
 * re-importing them gives the same content. */
int kb_export(store *s, uint64_t version, const char *dir);

/* One stored version, for listings. */
typedef struct {
	uint64_t version;
	char label[64];
	char sha256[65];
	uint64_t imported_unix_ms;
	char source[256];
} kb_version_info;
/* All stored versions, oldest first; *out is malloc'd (caller frees). */
int kb_versions(store *s, kb_version_info **out, size_t *n);

/* The shipped knowledge folder: $KCLAW_KNOWLEDGE, else the installed
 * share/kclaw/knowledge (kc_share_dir). */
const char *kb_default_dir(void);

const kb_method *kb_method_find(const kb *k, const char *name);
const kb_class *kb_class_find(const kb *k, const char *name);

/*
 * The method knowledge as text for the Planner, at most max_bytes long
 * (cut at a line boundary with " [...]"). arch_sm (e.g. 80, 90; 0 when not
 * known) picks the implementation cues: Hopper's from 90 on, Ampere's
 * below, both when unknown. *out is malloc'd.
 */
int kb_method_text(
    const kb_method *m, int arch_sm, size_t max_bytes, char **out);

#endif
