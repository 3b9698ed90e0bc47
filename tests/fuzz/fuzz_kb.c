/* fuzz_kb.c - knowledge files (policy.json, methods.json) are authored by
 * people: validation must reject anything malformed with an error, never
 * crash. The input is split at its first NUL byte into the two files. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_task.h"
#include "kb.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = fuzz_text(data, size);
	const char *methods;
	kb *k;

	if (text == NULL)
		return 0;
	methods = text + strlen(text);
	if ((size_t)(methods - text) < size)
		methods++;
	if (kb_load_json(text, "policy.json", methods, "methods.json", &k) == 0)
		kb_free(k);
	free(text);
	return 0;
}
