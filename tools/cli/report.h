/*
 * report.h - the report over finished tasks that `kclaw report` prints and
 * `kclaw main` prints at its end, and the LLM usage and cost of a task that
 * the report and `kclaw status ID` show (tools/cli/cli_report.c).
 */
#ifndef CLI_REPORT_H
#define CLI_REPORT_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "client.h"
#include "kc_config.h"

/*
 * Prints the report of the tasks ids[0..n) (n == 0: every finished task)
 * as a table, or as one JSON document with json, to out. Reads the tasks
 * through c (List, then Result per task) and prices their tokens with
 * c->cfg's prices. Returns 0 or a KC_E* code (KC_ENOENT: an id is not a
 * task) with kc_seterr's detail.
 */
int cli_report_print(
    orch_client *c, char *const *ids, size_t n, bool json, FILE *out);
/* The same; with by_level the figures per KernelBench level (the task
 * name's L<n>_ prefix, "other" without one) instead of the task table. */
int cli_report_print_by(orch_client *c, char *const *ids, size_t n, bool json,
    bool by_level, FILE *out);

/* What a report shows (cli_report_print_opts). */
typedef struct {
	bool json;
	bool by_level;  /* the figures per KernelBench level */
	bool compare;   /* published figures beside, with their conditions */
	size_t not_run; /* problems that never became tasks (kernelbench) */
} cli_report_opts;

/* The same as cli_report_print_by with every option of opts. */
int cli_report_print_opts(orch_client *c, char *const *ids, size_t n,
    const cli_report_opts *opts, FILE *out);

/*
 * The cost in USD of one role's usage under cfg's prices: prompt tokens at
 * the prompt price, of them the cached ones at cached_prompt; completion
 * tokens at the completion price, of them the reasoning ones at reasoning
 * (providers count cached and reasoning tokens inside prompt and
 * completion). false, *usd = 0, when no price matches u's model.
 */
bool cli_usage_cost(
    const kc_config *cfg, const Kclaw__RoleUsage *u, double *usd);
/*
 * Prints u[0..n) as a table, one row per role and model (prompt,
 * completion, reasoning and cached tokens, calls, failed calls, cost), a
 * total row, and a line "no price for model X" per model without a price;
 * every line starts with indent. Prints nothing when n == 0.
 */
void cli_usage_print(FILE *out, const kc_config *cfg,
    Kclaw__RoleUsage *const *u, size_t n, const char *indent);
/*
 * Adds u[0..n) to o: "usage" (each RoleUsage with its "cost_usd", null
 * without a price), "cost_usd" (the total; null when a model has no price
 * or there is no usage) and "unpriced" (the models without a price).
 * Returns 0 or KC_ENOMEM.
 */
int cli_usage_json(
    cJSON *o, const kc_config *cfg, Kclaw__RoleUsage *const *u, size_t n);

#endif
