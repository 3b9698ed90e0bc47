/*
 * cli_common.c - what every subcommand shares.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "kc_err.h"

bool
cli_wants_help(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "--help") == 0 ||
		    strcmp(argv[i], "-h") == 0)
			return true;
	return false;
}

int
cli_fail(const char *prefix, int err)
{
	const char *detail = kc_lasterr();

	fprintf(stderr, "kclaw %s: %s\n", prefix,
	    *detail ? detail : kc_strerror(err));
	switch (err) {
	case KC_ENOENT: return CLI_NOT_FOUND;
	case KC_ETIMEDOUT:
	case KC_ECLOSED: return CLI_UNREACHABLE;
	case KC_ENOTSUP: return CLI_NOT_IMPLEMENTED;
	case KC_EINVAL: return CLI_USAGE;
	default: return CLI_FAIL;
	}
}

int
cli_config(int argc, char **argv, kc_config *cfg)
{
	const char *home = NULL;

	for (int i = 1; i + 1 < argc; i++)
		if (strcmp(argv[i], "--home") == 0)
			home = argv[i + 1];
	return kc_config_load(cfg, home);
}
