/*
 * cli_report.c - `kclaw report`.
 */
#include <stdio.h>

#include "cli.h"

int
cli_report(int argc, char **argv)
{
	if (cli_wants_help(argc, argv)) {
		printf("usage: kclaw report [--json]\n\nReports over finished "
		       "tasks: status, speedups, rounds, tokens.\n");
		return CLI_OK;
	}
	fprintf(stderr, "kclaw report: not implemented yet\n");
	return CLI_NOT_IMPLEMENTED;
}
