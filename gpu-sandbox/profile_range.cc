/*
 * profile_range.cc - hardware metrics with CUPTI's range profiler. Built as
 * C++ only because cupti_profiler_host.h includes <string> (DESIGN.md
 * "Pitfalls"); everything here has C linkage and follows the C idiom.
 */
#include <string.h>

extern "C" {
#include "gpu.h"
#include "kc_err.h"
}

extern "C" int
sbx_prof_range(
    CUcontext ctx, sbx_prof_run_fn run, void *arg, Kclaw__EvalResult *res)
{
	(void)ctx;
	(void)run;
	(void)arg;
	res->counters_available = 0;
	res->counters_note = strdup("hardware metrics are not collected by "
	                            "this build (range profiler pending)");
	return KC_ENOTSUP;
}
