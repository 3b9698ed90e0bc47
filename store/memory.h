/*
 * memory.h - kclaw's two memories (DESIGN.md "Memories"), one include for
 * their users, and the memory commands as library calls: the `kclaw memory`
 * CLI runs them on a store it opened itself, and the orchestrator can run
 * them for the API's Memory rpc on the store it owns.
 *
 *   expr.h       the safe expression language of the policy
 *   kb.h         expert knowledge: import, export, validation, versions
 *   memory_lt.h  retrieval with a trace; learned statistics
 *   memory_st.h  short-term memory: repair chains, optimisation histories
 *
 * Each command writes its output for a human or, with json, one JSON
 * document, into *out (malloc'd, caller frees).
 */
#ifndef KC_MEMORY_H
#define KC_MEMORY_H

#include <stdbool.h>

#include "expr.h"
#include "kclaw.pb-c.h"
#include "kb.h"
#include "memory_lt.h"
#include "memory_st.h"
#include "store.h"

/* Validates and imports dir (NULL: kb_default_dir()). */
int memory_cmd_import(store *s, const char *dir, bool json, char **out);
/* Writes the head knowledge to dir. */
int memory_cmd_export(store *s, const char *dir, bool json, char **out);
/* Learned statistics (signature NULL: all), with all-signature rows. */
int memory_cmd_stats(store *s, const char *signature, bool json, char **out);
/* The methods of k (NULL: the store's head), with their learned totals. */
int memory_cmd_methods(store *s, const kb *k, bool json, char **out);
/*
 * Retrieval trace for a stored candidate's evaluation and features
 * (KC_ENOENT when no CandidateRecord has that id), under k (NULL: the
 * store's head knowledge).
 */
int memory_cmd_explain_candidate(
    store *s, const kb *k, const char *candidate_id, bool json, char **out);
/*
 * Retrieval trace for evidence given as JSON (memlt_evidence_add_json).
 * s may be NULL when k is given: no learned statistics then.
 */
int memory_cmd_explain_evidence(
    store *s, const kb *k, const char *evidence_json, bool json, char **out);

/*
 * Serves the API's Memory rpc on the orchestrator's store: query "stats"
 * (data: a signature, optional), "methods", "explain" (candidate_id, or
 * evidence JSON in data), "import" (data: a folder on the orchestrator's
 * host; empty: the shipped knowledge), "export" (data: a folder),
 * "short_term" (task_id; candidate_id: the base kernel, optional). Fills
 * resp->text (for humans), resp->data (JSON, where the CLI has --json) and,
 * for explain, resp->recommendations; all malloc'd, so a response made with
 * malloc + kclaw__memory_response__init is freed with
 * kclaw__memory_response__free_unpacked(resp, NULL). k may be NULL (the
 * store's head). KC_EINVAL for an unknown query or missing argument,
 * KC_ENOENT for what does not exist.
 */
int memory_serve(store *s, const kb *k, const Kclaw__MemoryRequest *req,
    Kclaw__MemoryResponse *resp);

#endif
