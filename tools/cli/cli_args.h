/*
 * cli_args.h - the argument loop the orchestrator commands (submit, status,
 * result, cancel) share: --help, --home, their own flags and options, and
 * one positional argument, with the same messages and exit codes for all.
 */
#ifndef KC_CLI_ARGS_H
#define KC_CLI_ARGS_H

#include <stdbool.h>
#include <stdio.h>

/* cli_args returns this when the command goes on. */
#define CLI_ARGS_GO (-1)
#define CLI_NOPTS(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* One option: a flag sets *flag; otherwise the argument after it goes to
 * *value. */
typedef struct {
	const char *name;
	bool *flag;
	const char **value;
} cli_opt;

/* Parses argv[1..argc) of the subcommand argv[0]. --help or -h prints
 * usage to stdout and returns CLI_OK; --home DIR is left to cli_config; the
 * first argument not starting with '-' goes to *pos; anything else is a
 * usage error. If missing is not NULL and no positional argument came, it
 * is printed as the question to answer (exit CLI_USAGE). */
int cli_args(int argc, char **argv, const cli_opt *opts, int nopts,
    const char **pos, const char *missing, void (*usage)(FILE *f));

#endif
