/*
 * cli_memory.c - `kclaw memory import|export|explain|stats ...`.
 */
#include <stdio.h>

#include "cli.h"

int
cli_memory(int argc, char **argv)
{
	if (cli_wants_help(argc, argv)) {
		printf("usage: kclaw memory import|export|explain|stats ... "
		       "[--json]\n\nImports, exports and inspects the "
		       "long-term memory.\n");
		return CLI_OK;
	}
	fprintf(stderr, "kclaw memory: not implemented yet\n");
	return CLI_NOT_IMPLEMENTED;
}
