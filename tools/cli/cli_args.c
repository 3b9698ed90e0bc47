/*
 * cli_args.c - the shared argument loop. See cli_args.h.
 */
#include "cli_args.h"

#include <string.h>

#include "cli.h"

/* Says what is wrong (arg, if any, quoted after it), then how to use cmd. */
static int
cli_args_bad(
    const char *cmd, const char *what, const char *arg, void (*usage)(FILE *f))
{
	if (arg)
		fprintf(stderr, "kclaw %s: %s '%s'\n\n", cmd, what, arg);
	else
		fprintf(stderr, "kclaw %s: %s\n\n", cmd, what);
	usage(stderr);
	return CLI_USAGE;
}

int
cli_args(int argc, char **argv, const cli_opt *opts, int nopts,
    const char **pos, const char *missing, void (*usage)(FILE *f))
{
	for (int i = 1; i < argc; i++) {
		const cli_opt *o = NULL;

		for (int k = 0; k < nopts && o == NULL; k++)
			if (strcmp(argv[i], opts[k].name) == 0 &&
			    (opts[k].flag || i + 1 < argc))
				o = &opts[k];
		if (strcmp(argv[i], "--help") == 0 ||
		    strcmp(argv[i], "-h") == 0) {
			usage(stdout);
			return CLI_OK;
		} else if (o && o->flag) {
			*o->flag = true;
		} else if (o) {
			*o->value = argv[++i];
		} else if (strcmp(argv[i], "--home") == 0 && i + 1 < argc) {
			i++;
		} else if (argv[i][0] != '-' && *pos == NULL) {
			*pos = argv[i];
		} else {
			return cli_args_bad(
			    argv[0], "unknown argument", argv[i], usage);
		}
	}
	if (missing && *pos == NULL)
		return cli_args_bad(argv[0], missing, NULL, usage);
	return CLI_ARGS_GO;
}
