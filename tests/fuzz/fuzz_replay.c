/*
 * fuzz_replay.c - runs a fuzz target over every file of its corpus folder,
 * so what the fuzzer once found stays fixed in the ordinary test build.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kc_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
main(int argc, char **argv)
{
	DIR *d;
	struct dirent *e;
	int n = 0;

	if (argc != 2) {
		fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
		return 2;
	}
	if ((d = opendir(argv[1])) == NULL) {
		fprintf(stderr, "no corpus folder %s\n", argv[1]);
		return 1;
	}
	while ((e = readdir(d)) != NULL) {
		char path[4096];
		char *data;
		size_t len;
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", argv[1], e->d_name);
		if (kc_read_file(path, 64u << 20, &data, &len) != 0)
			continue;
		LLVMFuzzerTestOneInput((const uint8_t *)data, len);
		free(data);
		n++;
	}
	closedir(d);
	fprintf(stderr, "replayed %d inputs\n", n);
	return n > 0 ? 0 : 1;
}
