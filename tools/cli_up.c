/*
 * cli_up.c - `kclaw up`.
 */
#include <stdio.h>

#include "cli.h"

int
cli_up(int argc, char **argv)
{
	if (cli_wants_help(argc, argv)) {
		printf("usage: kclaw up [--home DIR] [--agents N] "
		       "[--foreground]\n\nStarts the orchestrator, the agent "
		       "processes and one sandbox per visible GPU, and "
		       "supervises them.\n");
		return CLI_OK;
	}
	fprintf(stderr, "kclaw up: not implemented yet\n");
	return CLI_NOT_IMPLEMENTED;
}
