/*
 * cli_cancel.c - `kclaw cancel TASK_ID`.
 */
#include <stdio.h>

#include "cli.h"

int
cli_cancel(int argc, char **argv)
{
	if (cli_wants_help(argc, argv)) {
		printf("usage: kclaw cancel TASK_ID [--json]\n\nCancels a "
		       "task.\n");
		return CLI_OK;
	}
	fprintf(stderr, "kclaw cancel: not implemented yet\n");
	return CLI_NOT_IMPLEMENTED;
}
