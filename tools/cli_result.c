/*
 * cli_result.c - `kclaw result TASK_ID`.
 */
#include <stdio.h>

#include "cli.h"

int
cli_result(int argc, char **argv)
{
	if (cli_wants_help(argc, argv)) {
		printf(
		    "usage: kclaw result TASK_ID [--json]\n\nPrints the best "
		    "kernel, its plan, its measurements and the history.\n");
		return CLI_OK;
	}
	fprintf(stderr, "kclaw result: not implemented yet\n");
	return CLI_NOT_IMPLEMENTED;
}
