/*
 * child_main.c - kclaw-sandbox-child: the process that owns the CUDA
 * context. Started by kclaw-sandbox only; speaks frames on fds 3 and 4.
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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
	/* Device printf lands on standard output at every synchronisation; a
	 * candidate printing from every thread would fill the sandbox's log
	 * (tests/gpu/adversarial, printf_flood). Nobody reads it: discard. */
	int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (null >= 0) {
		dup2(null, STDOUT_FILENO);
		close(null);
	}
	kc_log_init(name);
	return sbx_child_main(&sbx_cuda_backend, argc, argv);
}
