/* fuzz_npy.c - .npy files come from task bundles and the KernelBench
 * bridge: any bytes must parse or be refused cleanly. */
#include <stdint.h>
#include <stdlib.h>

#include "npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	kc_npy arr;

	if (kc_npy_parse(data, size, "fuzz.npy", &arr) == 0)
		kc_npy_free(&arr);
	return 0;
}
