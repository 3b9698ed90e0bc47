/*
 * nvrtc_check.c - `mainjob_nvrtc FILE...`: compiles each kernel source with
 * NVRTC for sm_90 (no GPU needed) and prints "OK" or "COMPILE_ERROR" per
 * file, one line each, so a test can hold the recordings' kernels to the
 * statuses the scripted sandbox gives them.
 */
#include <stdio.h>
#include <stdlib.h>

#include "compile.h"
#include "kc_util.h"

int
main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		sbx_compiled c;
		char *src;
		size_t len;
		int rv;
		if (kc_read_file(argv[i], 1 << 20, &src, &len) != 0) {
			fprintf(stderr, "cannot read %s\n", argv[i]);
			return 2;
		}
		rv = sbx_compile(src, "sm_90", NULL, &c);
		printf("%s %s\n", argv[i], rv == 0 ? "OK" : "COMPILE_ERROR");
		sbx_compiled_free(&c);
		free(src);
	}
	return 0;
}
