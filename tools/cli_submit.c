/*
 * cli_submit.c - `kclaw submit BUNDLE_DIR`.
 */
#include <stdio.h>

#include "cli.h"

int
cli_submit(int argc, char **argv)
{
	if (cli_wants_help(argc, argv)) {
		printf(
		    "usage: kclaw submit BUNDLE_DIR [--json]\n\nSubmits a task "
		    "bundle to the running orchestrator and prints its id.\n");
		return CLI_OK;
	}
	fprintf(stderr, "kclaw submit: not implemented yet\n");
	return CLI_NOT_IMPLEMENTED;
}
