/*
 * child_main.c - kclaw-sandbox-child: the process that owns the CUDA
 * context. Started by kclaw-sandbox only; speaks frames on fds 3 and 4.
 */
#include <stdio.h>
#include <string.h>

#include "kc_log.h"
#include "sandbox.h"

int
main(int argc, char **argv)
{
	char name[64];
	const char *dev = "0";

	for (int i = 1; i + 1 < argc; i++)
		if (strcmp(argv[i], "--device") == 0)
			dev = argv[i + 1];
	snprintf(name, sizeof(name), "sandbox-child-%s", dev);
	kc_log_init(name);
	return sbx_child_main(&sbx_cuda_backend, argc, argv);
}
