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
#define PROF_MAX_RECORDS 256

/* CUPTI hands completed buffers to a callback on its own thread; the
 * records are collected here until sbx_prof_activity_stop reads them. */
static Kclaw__KernelActivity *prof_records[PROF_MAX_RECORDS];
static uint64_t prof_start[PROF_MAX_RECORDS], prof_end[PROF_MAX_RECORDS];
static size_t prof_nrecords;
static int prof_registered;
/* From the first start to the last end of the kept records of the last
 * sbx_prof_activity_stop, in ns; 0: none. */
static uint64_t prof_last_span_ns;

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

/*
 * The sandbox's own kernels (kc_*: input generators, the L2 flush) are
 * dropped: the records are the candidate's. With res NULL the records are
 * only measured (sbx_prof_last_span_ms), not kept.
 */
int
sbx_prof_activity_stop(Kclaw__EvalResult *res)
{
	Kclaw__KernelActivity **g = NULL;
	uint64_t lo = UINT64_MAX, hi = 0;
	size_t kept = 0;
	int rv = 0;

	cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
	cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
	if (res != NULL && prof_nrecords > 0) {
		g = realloc(res->activities,
		    (res->n_activities + prof_nrecords) * sizeof(*g));
		if (g == NULL)
			rv = KC_ENOMEM;
		else
			res->activities = g;
	}
	for (size_t i = 0; i < prof_nrecords; i++) {
		Kclaw__KernelActivity *a = prof_records[i];
		if (a->kernel == NULL || strncmp(a->kernel, "kc_", 3) == 0) {
			kclaw__kernel_activity__free_unpacked(a, NULL);
			continue;
		}
		if (prof_start[i] < lo)
			lo = prof_start[i];
		if (prof_end[i] > hi)
			hi = prof_end[i];
		kept++;
		if (g != NULL)
			res->activities[res->n_activities++] = a;
		else
			kclaw__kernel_activity__free_unpacked(a, NULL);
	}
	prof_last_span_ns = kept > 0 && hi > lo ? hi - lo : 0;
	prof_nrecords = 0;
	return rv;
}

double
sbx_prof_last_span_ms(void)
{
	return (double)prof_last_span_ns / 1e6;
}
