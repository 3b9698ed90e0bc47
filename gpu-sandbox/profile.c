/*
 * profile.c - CUPTI activity records: one KernelActivity per kernel the
 * profiled run launched (duration, registers, shared memory, grid, block).
 */
#include <cupti.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"
#include "kc_err.h"
#include "kc_log.h"

#define PROF_BUF_BYTES (1u << 20)
#define PROF_MAX_RECORDS 16384
#define PROF_MAX_RUNS 4096

/* CUPTI hands completed buffers to a callback on its own thread; the
 * records are collected here until sbx_prof_activity_stop reads them. */
static Kclaw__KernelActivity *prof_records[PROF_MAX_RECORDS];
static uint64_t prof_start[PROF_MAX_RECORDS], prof_end[PROF_MAX_RECORDS];
static size_t prof_nrecords;
static int prof_registered;
/* The last sbx_prof_activity_stop's runs (sbx_prof_runs), in ns. */
static uint64_t prof_span_ns[PROF_MAX_RUNS], prof_probe_ns[PROF_MAX_RUNS];
static unsigned prof_nruns;
/* Where the last run's records end in start order (prof_cut_runs). */
static size_t prof_last_end;

static void CUPTIAPI
prof_buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
	*buffer = aligned_alloc(8, PROF_BUF_BYTES);
	*size = *buffer ? PROF_BUF_BYTES : 0;
	*max_records = 0;
}

static void CUPTIAPI
prof_buffer_completed(
    CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid)
{
	CUpti_Activity *rec = NULL;

	(void)ctx;
	(void)stream;
	(void)size;
	while (
	    cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
		const CUpti_ActivityKernel10 *k;
		Kclaw__KernelActivity *a;

		if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL &&
		    rec->kind != CUPTI_ACTIVITY_KIND_KERNEL)
			continue;
		if (prof_nrecords == PROF_MAX_RECORDS)
			break;
		k = (const CUpti_ActivityKernel10 *)rec;
		if ((a = malloc(sizeof(*a))) == NULL)
			break;
		kclaw__kernel_activity__init(a);
		a->kernel = strdup(k->name ? k->name : "?");
		a->duration_us = (double)(k->end - k->start) / 1e3;
		a->registers = k->registersPerThread;
		a->shared_static_bytes = k->staticSharedMemory;
		a->shared_dynamic_bytes = k->dynamicSharedMemory;
		a->grid = malloc(3 * sizeof(uint32_t));
		a->block = malloc(3 * sizeof(uint32_t));
		if (a->grid && a->block) {
			a->n_grid = a->n_block = 3;
			a->grid[0] = (uint32_t)k->gridX;
			a->grid[1] = (uint32_t)k->gridY;
			a->grid[2] = (uint32_t)k->gridZ;
			a->block[0] = (uint32_t)k->blockX;
			a->block[1] = (uint32_t)k->blockY;
			a->block[2] = (uint32_t)k->blockZ;
		}
		prof_start[prof_nrecords] = k->start;
		prof_end[prof_nrecords] = k->end;
		prof_records[prof_nrecords++] = a;
	}
	free(buffer);
}

int
sbx_prof_activity_start(void)
{
	CUptiResult r;

	if (!prof_registered) {
		r = cuptiActivityRegisterCallbacks(
		    prof_buffer_requested, prof_buffer_completed);
		if (r != CUPTI_SUCCESS)
			return kc_seterr(KC_ECUDA,
			    "cuptiActivityRegisterCallbacks: %d", (int)r);
		prof_registered = 1;
	}
	prof_nrecords = 0;
	r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
	if (r != CUPTI_SUCCESS)
		return kc_seterr(KC_ECUDA, "cuptiActivityEnable: %d", (int)r);
	return 0;
}

/* A record's place in start order. */
typedef struct {
	uint64_t start;
	size_t i;
} prof_order;

static int
prof_order_cmp(const void *a, const void *b)
{
	const prof_order *x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

/* Grows [*lo, *hi] to hold record i. */
static void
prof_extend(uint64_t *lo, uint64_t *hi, size_t i)
{
	if (prof_start[i] < *lo)
		*lo = prof_start[i];
	if (prof_end[i] > *hi)
		*hi = prof_end[i];
}

/* Closes the run [lo, hi] (candidate) and [plo, phi] (kc_probe). */
static void
prof_close_run(uint64_t lo, uint64_t hi, uint64_t plo, uint64_t phi)
{
	if (prof_nruns == PROF_MAX_RUNS)
		return;
	prof_span_ns[prof_nruns] = hi > lo ? hi - lo : 0;
	prof_probe_ns[prof_nruns++] = phi > plo ? phi - plo : 0;
}

/*
 * The records in start order, cut into runs: a run begins at a kc_mark
 * and ends at the next kc_mark_end (or kc_mark, or the last record);
 * records outside runs (a timed run's check, warm-up) are not counted.
 * Each run's span of the candidate's kernels (not kc_*) and of the
 * calibration kernels (kc_probe, kc_read_sweep: ev_gpu_calibrate) go to
 * prof_span_ns/prof_probe_ns. Returns
 * the index in `order` where the last run begins (0: no runs).
 */
static size_t
prof_cut_runs(const prof_order *order, size_t n)
{
	uint64_t lo = UINT64_MAX, hi = 0, plo = UINT64_MAX, phi = 0;
	size_t last = 0;
	int in = 0;

	prof_nruns = 0;
	prof_last_end = n;
	for (size_t j = 0; j < n; j++) {
		size_t i = order[j].i;
		const char *k = prof_records[i]->kernel;
		if (k == NULL)
			continue;
		if (strcmp(k, "kc_mark") == 0 ||
		    strcmp(k, "kc_mark_end") == 0) {
			if (in) {
				prof_close_run(lo, hi, plo, phi);
				prof_last_end = j;
			}
			in = strcmp(k, "kc_mark") == 0;
			if (in)
				last = j;
			lo = plo = UINT64_MAX;
			hi = phi = 0;
		} else if (in &&
		    (strcmp(k, "kc_probe") == 0 ||
		        strcmp(k, "kc_read_sweep") == 0))
			prof_extend(&plo, &phi, i);
		else if (in && strncmp(k, "kc_", 3) != 0)
			prof_extend(&lo, &hi, i);
	}
	if (in) {
		prof_close_run(lo, hi, plo, phi);
		prof_last_end = n;
	}
	return last;
}

/*
 * The sandbox's own kernels (kc_*: input generators, the L2 flush, the
 * hold, the marks) are dropped: the records are the candidate's, those of
 * the last run when there were several. With
 * res NULL the records are only measured (sbx_prof_runs), not kept.
 */
int
sbx_prof_activity_stop(Kclaw__EvalResult *res)
{
	Kclaw__KernelActivity **g = NULL;
	prof_order *order = NULL;
	size_t first = 0;
	int rv = 0;

	cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
	cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
	prof_nruns = 0;
	if (prof_nrecords > 0 &&
	    (order = malloc(prof_nrecords * sizeof(*order))) == NULL)
		rv = KC_ENOMEM;
	for (size_t i = 0; order != NULL && i < prof_nrecords; i++)
		order[i] = (prof_order){prof_start[i], i};
	if (order != NULL) {
		qsort(order, prof_nrecords, sizeof(*order), prof_order_cmp);
		first = prof_cut_runs(order, prof_nrecords);
	}
	if (res != NULL && order != NULL) {
		g = realloc(res->activities,
		    (res->n_activities + prof_nrecords) * sizeof(*g));
		if (g == NULL)
			rv = KC_ENOMEM;
		else
			res->activities = g;
	}
	for (size_t j = 0; j < prof_nrecords; j++) {
		size_t i = order != NULL ? order[j].i : j;
		Kclaw__KernelActivity *a = prof_records[i];
		if (g != NULL && j >= first && j < prof_last_end &&
		    a->kernel != NULL && strncmp(a->kernel, "kc_", 3) != 0)
			res->activities[res->n_activities++] = a;
		else
			kclaw__kernel_activity__free_unpacked(a, NULL);
	}
	free(order);
	prof_nrecords = 0;
	return rv;
}

unsigned
sbx_prof_runs(double *span_ms, double *probe_ms, unsigned max)
{
	unsigned n = prof_nruns < max ? prof_nruns : max;

	for (unsigned r = 0; r < n; r++) {
		if (span_ms != NULL)
			span_ms[r] = (double)prof_span_ns[r] / 1e6;
		if (probe_ms != NULL)
			probe_ms[r] = (double)prof_probe_ns[r] / 1e6;
	}
	return n;
}
