/* fuzz_bundle.c - task.json arrives from users and other programs: any
 * text must load or be refused with a clear error. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bundle.h"
#include "kc_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char dir[64];
	char path[128];
	Kclaw__TaskSpec *spec;

	if (dir[0] == '\0') {
		snprintf(
		    dir, sizeof(dir), "/tmp/kc-fuzz-bundle-%d", (int)getpid());
		kc_mkdirs(dir, 0700);
	}
	snprintf(path, sizeof(path), "%s/task.json", dir);
	FILE *f = fopen(path, "wb");
	if (f == NULL)
		return 0;
	fwrite(data, 1, size, f);
	fclose(f);
	if (kc_bundle_load(dir, &spec) == 0)
		kclaw__task_spec__free_unpacked(spec, NULL);
	return 0;
}
