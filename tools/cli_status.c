/*
 * cli_status.c - `kclaw status`.
 */
#include <stdio.h>

#include "cli.h"

int
cli_status(int argc, char **argv)
{
	if (cli_wants_help(argc, argv)) {
		printf("usage: kclaw status [TASK_ID] [--json]\n\nShows the "
		       "processes and the tasks, or one task.\n");
		return CLI_OK;
	}
	fprintf(stderr, "kclaw status: not implemented yet\n");
	return CLI_NOT_IMPLEMENTED;
}
