/*
 * cli_watch.c - `kclaw watch`.
 */
#include <stdio.h>

#include "cli.h"

int
cli_watch(int argc, char **argv)
{
	if (cli_wants_help(argc, argv)) {
		printf(
		    "usage: kclaw watch [TASK_ID] [--json]\n\nLive view of one "
		    "task or all; --json streams events as JSON lines.\n");
		return CLI_OK;
	}
	fprintf(stderr, "kclaw watch: not implemented yet\n");
	return CLI_NOT_IMPLEMENTED;
}
