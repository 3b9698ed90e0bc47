/*
 * report.h - the report over finished tasks that `kclaw report` prints and
 * `kclaw main` prints at its end (tools/cli_report.c).
 */
#ifndef CLI_REPORT_H
#define CLI_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "client.h"

/*
 * Prints the report of the tasks ids[0..n) (n == 0: every finished task)
 * as a table, or as one JSON document with json, to out. Reads the tasks
 * through c (List, then Result per task). Returns 0 or a KC_E* code
 * (KC_ENOENT: an id is not a task) with kc_seterr's detail.
 */
int cli_report_print(
    orch_client *c, char *const *ids, size_t n, bool json, FILE *out);

#endif
