/*
 * cli_eval.c - `kclaw eval TASK_DIR CANDIDATE_DIR`.
 */
#include <stdio.h>

#include "cli.h"

int
cli_eval(int argc, char **argv)
{
	if (cli_wants_help(argc, argv)) {
		printf("usage: kclaw eval TASK_DIR CANDIDATE_DIR [--json] "
		       "[--compile-only] [--arch sm_XX]\n\nRuns one evaluation "
		       "through a sandbox and prints the result.\n");
		return CLI_OK;
	}
	fprintf(stderr, "kclaw eval: not implemented yet\n");
	return CLI_NOT_IMPLEMENTED;
}
