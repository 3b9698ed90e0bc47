/*
 * cli_main.c - `kclaw main`: the README's main job.
 */
#include <stdio.h>

#include "cli.h"

int
cli_main_job(int argc, char **argv)
{
	if (cli_wants_help(argc, argv)) {
		printf("usage: kclaw main\n\nThe main job: starts the service "
		       "and prints its health.\n");
		return CLI_OK;
	}
	fprintf(stderr, "kclaw main: not implemented yet\n");
	return CLI_NOT_IMPLEMENTED;
}
