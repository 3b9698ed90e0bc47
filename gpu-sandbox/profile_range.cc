/*
 * profile_range.cc - hardware metrics with CUPTI's range profiler: one user
 * range around a whole run of the candidate's plan, replayed by us once
 * per pass the metrics need, then evaluated to named numbers.
 *
 * Built as C++ only because cupti_profiler_host.h includes <string>
 * (DESIGN.md "Pitfalls"); everything here has C linkage and follows the C
 * idiom of the rest of the sandbox.
 */
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_target.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "gpu.h"
#include "kc_err.h"
#include "sandbox.h"
}

#define RANGE_MAX_PASSES 64

/* The metrics asked for, under the names results carry. */
static const struct {
	const char *metric; /* CUPTI's name */
	const char *name;   /* ours */
	const char *unit;
	double scale;
} range_metrics[] = {
    {"gpu__time_duration.sum", "duration", "us", 1e-3},
    {"dram__throughput.avg.pct_of_peak_sustained_elapsed", "dram_throughput",
        "%", 1},
    {"sm__throughput.avg.pct_of_peak_sustained_elapsed", "sm_throughput", "%",
        1},
    {"sm__warps_active.avg.pct_of_peak_sustained_active", "achieved_occupancy",
        "%", 1},
    {"l1tex__t_sector_hit_rate.pct", "l1_hit_rate", "%", 1},
    {"lts__t_sector_hit_rate.pct", "l2_hit_rate", "%", 1},
    {"dram__bytes_read.sum", "dram_bytes_read", "bytes", 1},
    {"dram__bytes_write.sum", "dram_bytes_written", "bytes", 1},
};
#define RANGE_NMETRICS (sizeof(range_metrics) / sizeof(range_metrics[0]))

typedef struct {
	CUpti_Profiler_Host_Object *host;
	CUpti_RangeProfiler_Object *rp;
	uint8_t *avail, *config, *counters;
	size_t avail_len, config_len, counters_len;
	const char *names[RANGE_NMETRICS];
	size_t idx[RANGE_NMETRICS]; /* into range_metrics */
	size_t n;
} range_state;

static int
range_fail(Kclaw__EvalResult *res, const char *what, CUptiResult r)
{
	const char *text = NULL;
	char note[512];

	cuptiGetResultString(r, &text);
	snprintf(note, sizeof(note),
	    "hardware counters unavailable: %s failed (%s)%s", what,
	    text ? text : "?",
	    r == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES
	        ? "; the driver restricts counters to admin users "
	          "(NVreg_RestrictProfilingToAdminUsers=0 lifts it)"
	        : "");
	sbx_result_set(&res->counters_note, "%s", note);
	return KC_ENOTSUP;
}

#define RANGE_TRY(call, what)                                                  \
	do {                                                                   \
		CUptiResult range_r_ = (call);                                 \
		if (range_r_ != CUPTI_SUCCESS) {                               \
			rv = range_fail(res, (what), range_r_);                \
			goto out;                                              \
		}                                                              \
	} while (0)

/* Zeroes a CUPTI parameter struct and sets the size its type's header
 * declares: the two lines every CUPTI call needs, and no way to pair a
 * struct with another type's size. */
#define RANGE_INIT(p, type)                                                    \
	(memset(&(p), 0, sizeof(p)), (p).structSize = type##_STRUCT_SIZE)

extern "C" int
sbx_prof_range(CUcontext ctx, int device, sbx_prof_run_fn run, void *arg,
    Kclaw__EvalResult *res)
{
	range_state st;
	CUpti_Profiler_Initialize_Params init = {
	    CUpti_Profiler_Initialize_Params_STRUCT_SIZE, NULL};
	CUpti_Device_GetChipName_Params chip = {
	    CUpti_Device_GetChipName_Params_STRUCT_SIZE, NULL, 0, NULL};
	CUpti_Profiler_GetCounterAvailability_Params avail = {
	    CUpti_Profiler_GetCounterAvailability_Params_STRUCT_SIZE, NULL, ctx,
	    0, NULL};
	double values[RANGE_NMETRICS];
	char dropped[256] = "";
	size_t passes = 0;
	int rv = 0, enabled = 0;

	static int initialized;

	memset(&st, 0, sizeof(st));
	if (!initialized)
		RANGE_TRY(
		    cuptiProfilerInitialize(&init), "cuptiProfilerInitialize");
	initialized = 1;
	chip.deviceIndex = (size_t)device;
	RANGE_TRY(cuptiDeviceGetChipName(&chip), "cuptiDeviceGetChipName");
	RANGE_TRY(cuptiProfilerGetCounterAvailability(&avail),
	    "cuptiProfilerGetCounterAvailability");
	st.avail_len = avail.counterAvailabilityImageSize;
	if ((st.avail = (uint8_t *)calloc(1, st.avail_len + 1)) == NULL) {
		rv = KC_ENOMEM;
		goto out;
	}
	avail.pCounterAvailabilityImage = st.avail;
	RANGE_TRY(cuptiProfilerGetCounterAvailability(&avail),
	    "cuptiProfilerGetCounterAvailability");

	{
		CUpti_Profiler_Host_Initialize_Params hi;
		RANGE_INIT(hi, CUpti_Profiler_Host_Initialize_Params);
		hi.profilerType = CUPTI_PROFILER_TYPE_RANGE_PROFILER;
		hi.pChipName = chip.pChipName;
		hi.pCounterAvailabilityImage = st.avail;
		RANGE_TRY(cuptiProfilerHostInitialize(&hi),
		    "cuptiProfilerHostInitialize");
		st.host = hi.pHostObject;
	}
	/* Keep the metrics this chip knows; name the others in the note. */
	for (size_t i = 0; i < RANGE_NMETRICS; i++) {
		CUpti_Profiler_Host_GetMetricProperties_Params mp;
		RANGE_INIT(mp, CUpti_Profiler_Host_GetMetricProperties_Params);
		mp.pHostObject = st.host;
		mp.pMetricName = range_metrics[i].metric;
		if (cuptiProfilerHostGetMetricProperties(&mp) !=
		    CUPTI_SUCCESS) {
			size_t len = strlen(dropped);
			snprintf(dropped + len, sizeof(dropped) - len, "%s%s",
			    len ? ", " : "", range_metrics[i].name);
			continue;
		}
		st.idx[st.n] = i;
		st.names[st.n++] = range_metrics[i].metric;
	}
	if (st.n == 0) {
		sbx_result_set(&res->counters_note,
		    "no metric is known for chip %s", chip.pChipName);
		rv = KC_ENOTSUP;
		goto out;
	}
	{
		CUpti_Profiler_Host_ConfigAddMetrics_Params am;
		CUpti_Profiler_Host_GetConfigImageSize_Params cs;
		CUpti_Profiler_Host_GetConfigImage_Params ci;
		CUpti_Profiler_Host_GetNumOfPasses_Params np;
		RANGE_INIT(am, CUpti_Profiler_Host_ConfigAddMetrics_Params);
		am.pHostObject = st.host;
		am.ppMetricNames = st.names;
		am.numMetrics = st.n;
		RANGE_TRY(cuptiProfilerHostConfigAddMetrics(&am),
		    "cuptiProfilerHostConfigAddMetrics");
		RANGE_INIT(cs, CUpti_Profiler_Host_GetConfigImageSize_Params);
		cs.pHostObject = st.host;
		RANGE_TRY(cuptiProfilerHostGetConfigImageSize(&cs),
		    "cuptiProfilerHostGetConfigImageSize");
		st.config_len = cs.configImageSize;
		if ((st.config = (uint8_t *)calloc(1, st.config_len + 1)) ==
		    NULL) {
			rv = KC_ENOMEM;
			goto out;
		}
		RANGE_INIT(ci, CUpti_Profiler_Host_GetConfigImage_Params);
		ci.pHostObject = st.host;
		ci.configImageSize = st.config_len;
		ci.pConfigImage = st.config;
		RANGE_TRY(cuptiProfilerHostGetConfigImage(&ci),
		    "cuptiProfilerHostGetConfigImage");
		RANGE_INIT(np, CUpti_Profiler_Host_GetNumOfPasses_Params);
		np.configImageSize = st.config_len;
		np.pConfigImage = st.config;
		RANGE_TRY(cuptiProfilerHostGetNumOfPasses(&np),
		    "cuptiProfilerHostGetNumOfPasses");
		passes = np.numOfPasses;
	}
	{
		CUpti_RangeProfiler_Enable_Params en;
		RANGE_INIT(en, CUpti_RangeProfiler_Enable_Params);
		en.ctx = ctx;
		RANGE_TRY(
		    cuptiRangeProfilerEnable(&en), "cuptiRangeProfilerEnable");
		st.rp = en.pRangeProfilerObject;
		enabled = 1;
	}
	{
		CUpti_RangeProfiler_GetCounterDataSize_Params ds;
		CUpti_RangeProfiler_CounterDataImage_Initialize_Params di;
		RANGE_INIT(ds, CUpti_RangeProfiler_GetCounterDataSize_Params);
		ds.pRangeProfilerObject = st.rp;
		ds.pMetricNames = st.names;
		ds.numMetrics = st.n;
		ds.maxNumOfRanges = 1;
		ds.maxNumRangeTreeNodes = 1;
		RANGE_TRY(cuptiRangeProfilerGetCounterDataSize(&ds),
		    "cuptiRangeProfilerGetCounterDataSize");
		st.counters_len = ds.counterDataSize;
		if ((st.counters = (uint8_t *)calloc(1, st.counters_len + 1)) ==
		    NULL) {
			rv = KC_ENOMEM;
			goto out;
		}
		RANGE_INIT(
		    di, CUpti_RangeProfiler_CounterDataImage_Initialize_Params);
		di.pRangeProfilerObject = st.rp;
		di.counterDataSize = st.counters_len;
		di.pCounterData = st.counters;
		RANGE_TRY(cuptiRangeProfilerCounterDataImageInitialize(&di),
		    "cuptiRangeProfilerCounterDataImageInitialize");
	}
	{
		CUpti_RangeProfiler_SetConfig_Params sc;
		RANGE_INIT(sc, CUpti_RangeProfiler_SetConfig_Params);
		sc.pRangeProfilerObject = st.rp;
		sc.configSize = st.config_len;
		sc.pConfig = st.config;
		sc.counterDataImageSize = st.counters_len;
		sc.pCounterDataImage = st.counters;
		sc.range = CUPTI_UserRange;
		sc.replayMode = CUPTI_UserReplay;
		sc.maxRangesPerPass = 1;
		sc.numNestingLevels = 1;
		sc.minNestingLevel = 1;
		sc.passIndex = 0;
		sc.targetNestingLevel = 1;
		RANGE_TRY(cuptiRangeProfilerSetConfig(&sc),
		    "cuptiRangeProfilerSetConfig");
	}
	for (size_t pass = 0; pass < RANGE_MAX_PASSES; pass++) {
		CUpti_RangeProfiler_Start_Params sp;
		CUpti_RangeProfiler_PushRange_Params pu;
		CUpti_RangeProfiler_PopRange_Params po;
		CUpti_RangeProfiler_Stop_Params so;
		int run_rv;

		RANGE_INIT(sp, CUpti_RangeProfiler_Start_Params);
		sp.pRangeProfilerObject = st.rp;
		RANGE_TRY(
		    cuptiRangeProfilerStart(&sp), "cuptiRangeProfilerStart");
		RANGE_INIT(pu, CUpti_RangeProfiler_PushRange_Params);
		pu.pRangeProfilerObject = st.rp;
		pu.pRangeName = "plan";
		RANGE_TRY(cuptiRangeProfilerPushRange(&pu),
		    "cuptiRangeProfilerPushRange");
		run_rv = run(arg);
		RANGE_INIT(po, CUpti_RangeProfiler_PopRange_Params);
		po.pRangeProfilerObject = st.rp;
		RANGE_TRY(cuptiRangeProfilerPopRange(&po),
		    "cuptiRangeProfilerPopRange");
		RANGE_INIT(so, CUpti_RangeProfiler_Stop_Params);
		so.pRangeProfilerObject = st.rp;
		RANGE_TRY(
		    cuptiRangeProfilerStop(&so), "cuptiRangeProfilerStop");
		if (run_rv != 0) {
			/* The candidate failed under the profiler: the result
			 * already says how. */
			rv = run_rv;
			goto out;
		}
		if (so.isAllPassSubmitted)
			break;
	}
	{
		CUpti_RangeProfiler_DecodeData_Params dd;
		CUpti_Profiler_Host_EvaluateToGpuValues_Params ev;
		RANGE_INIT(dd, CUpti_RangeProfiler_DecodeData_Params);
		dd.pRangeProfilerObject = st.rp;
		RANGE_TRY(cuptiRangeProfilerDecodeData(&dd),
		    "cuptiRangeProfilerDecodeData");
		RANGE_INIT(ev, CUpti_Profiler_Host_EvaluateToGpuValues_Params);
		ev.pHostObject = st.host;
		ev.pCounterDataImage = st.counters;
		ev.counterDataImageSize = st.counters_len;
		ev.rangeIndex = 0;
		ev.ppMetricNames = st.names;
		ev.numMetrics = st.n;
		ev.pMetricValues = values;
		RANGE_TRY(cuptiProfilerHostEvaluateToGpuValues(&ev),
		    "cuptiProfilerHostEvaluateToGpuValues");
	}
	for (size_t i = 0; i < st.n; i++) {
		size_t m = st.idx[i];
		sbx_result_add_metric(res, range_metrics[m].name,
		    values[i] * range_metrics[m].scale, range_metrics[m].unit);
	}
	sbx_result_set(&res->counters_note,
	    "range profiler on %s: %zu metrics in %zu passes%s%s",
	    chip.pChipName, st.n, passes, dropped[0] ? "; not available: " : "",
	    dropped);
out:
	if (enabled) {
		CUpti_RangeProfiler_Disable_Params dp;
		RANGE_INIT(dp, CUpti_RangeProfiler_Disable_Params);
		dp.pRangeProfilerObject = st.rp;
		cuptiRangeProfilerDisable(&dp);
	}
	if (st.host != NULL) {
		CUpti_Profiler_Host_Deinitialize_Params hd;
		RANGE_INIT(hd, CUpti_Profiler_Host_Deinitialize_Params);
		hd.pHostObject = st.host;
		cuptiProfilerHostDeinitialize(&hd);
	}
	free(st.avail);
	free(st.config);
	free(st.counters);
	return rv;
}
