/* fuzz_plan.c - launch plans come from LLM replies: both parsers (the
 * sandbox's and the bundle loader's) must refuse bad ones cleanly. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bundle.h"
#include "fuzz_task.h"
#include "plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *json = fuzz_text(data, size);
	sbx_plan *p;

	if (json == NULL)
		return 0;
	if (sbx_plan_parse(json, fuzz_task(), &p) == 0)
		sbx_plan_free(p);
	(void)kc_plan_check(fuzz_task(), json, "fuzz plan", 1);
	free(json);
	return 0;
}
