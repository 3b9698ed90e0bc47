/*
 * timing.c - timed runs (warm-up, events per run or per back-to-back
 * batch, the L2 flush, the hold, every run checked), the device's
 * ceilings and the events' own cost measured at the first evaluation, and
 * profiling under CUPTI.
 */
#include <cuda.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include "eval_int.h"

/* A kernel that does nothing, one block per SM (kc_mark or kc_probe). */
static CUresult
ev_gpu_launch_empty(ev_gpu *g, CUfunction f)
{
	CUdeviceptr sink = g->acc + 7 * sizeof(uint64_t);
	void *params[1] = {&sink};

	return g->cu.cuLaunchKernel(
	    f, (unsigned)g->sms, 1, 1, 128, 1, 1, 0, g->stream, params, NULL);
}

/* A read of bytes at buf with f (kc_flush_read or kc_read_sweep) in
 * blocks of threads. */
static CUresult
ev_gpu_read(ev_gpu *g, CUfunction f, CUdeviceptr buf, size_t bytes,
    unsigned blocks, unsigned threads)
{
	uint64_t n = bytes / 16;
	CUdeviceptr sink = g->acc + 7 * sizeof(uint64_t);
	void *params[3] = {&buf, &n, &sink};

	return g->cu.cuLaunchKernel(
	    f, blocks, 1, 1, threads, 1, 1, 0, g->stream, params, NULL);
}

/* The same with every SM full. */
static CUresult
ev_gpu_sweep(ev_gpu *g, CUfunction f, CUdeviceptr buf, size_t bytes)
{
	return ev_gpu_read(g, f, buf, bytes, (unsigned)g->sms * 8, 256);
}

/*
 * The L2 flush before a timed run (ev_flush_l2): the flush buffer read
 * twice. Read once, it left the L2 in one of two states, flush after
 * flush: on the H200 sum_reduce 2 and 3's runs took 19.3-19.9 us after
 * one flush and 19.9-20.6 us after the next (the "two modes" of their
 * spans), and layernorm 2's and softmax_rows 2's events carried 0.15-0.2
 * us more than CUPTI saw on every other run. Read twice, both are gone
 * (sum_reduce's runs 18.8-19.5 us whatever their place; those two plans'
 * events less their spans spread 0.05-0.11 us, not 0.14-0.24). The
 * second read costs about 28 us a run, outside the events (on the H200,
 * 120 MiB at the 4.45 TB/s its child measured). sum_reduce's events
 * still carry 0.2-0.3 us more on every other run (docs/benchmarks.md).
 */
static CUresult
ev_gpu_flush_l2(ev_gpu *g)
{
	CUresult r = ev_gpu_sweep(g, g->flush_read, g->flush, g->flush_bytes);

	return r != CUDA_SUCCESS
	    ? r
	    : ev_gpu_sweep(g, g->flush_read, g->flush, g->flush_bytes);
}

/* The hold (ev_hold) on the device's stream; none without its flag. */
static CUresult
ev_gpu_hold(ev_gpu *g)
{
	uint32_t want;
	uint64_t max_ns = EV_HOLD_MAX_NS;
	void *params[3] = {&g->hold_dev, &want, &max_ns};

	if (g->hold_flag == NULL)
		return CUDA_SUCCESS;
	want = ++g->hold_seq;
	return g->cu.cuLaunchKernel(
	    g->hold, 1, 1, 1, 1, 1, 1, 0, g->stream, params, NULL);
}

static void
ev_gpu_hold_release(ev_gpu *g)
{
	if (g->hold_flag != NULL)
		__atomic_store_n(
		    &g->hold_flag[0], g->hold_seq, __ATOMIC_RELEASE);
}

/*
 * What CUDA events add to a run they time, measured the way a timed run
 * goes (ev_held_run) under CUPTI: after an L2 flush, the hold, then a
 * probe between two events, the hold released once they are enqueued,
 * then the host waits for the stop event (as after every timed run,
 * ev_held_run). EV_CALIB_RUNS times each of four probes,
 * interleaved, after as many of each unmeasured, to let the GPU settle
 * (children that measured their first runs read 3.5-3.9 us where others
 * read 3.1-3.4, and their one-kernel plans 0.6-1.2 % low against CUPTI,
 * both before the wait; with it every cost reads 2.3-2.6 us).
 * The probes: the empty kernel kc_probe; a read of the flush buffer
 * (kc_read_sweep, every SM busy for about 30 us on the H200, as the
 * kernels timed are); and two launches, the read then a read of 4 KiB
 * in one block, and that small read then the whole one (the shapes of a
 * partial sum and its final block, or of a clear and the sum). launch_cost_ms
 * is the median of the read's events' interval minus its CUPTI span: from the
 * start event to the first block's start and from the last block's end
 * to the stop event. launch_step_ms is what each launch after the first
 * adds to that (the two-launch probes' median cost less launch_cost_ms;
 * the span holds the gap between the launches, so this is beyond it: the
 * two-kernel sum_reduce plans read 0.4-0.7 us over CUPTI without it
 * before the wait, and 1.0-1.9 % under with it: ev_plan_calibrate).
 * launch_empty_ms is the cost around the empty kernel (reported beside),
 * launch_floor_ms the empty kernel's CUPTI duration, the least any run
 * takes. Every timed sample is reported less the cost of its plan's
 * launches (ev_gpu_cost, sbx_sample_ms), so a 30 us kernel reads 30 us
 * and not 33. Without CUPTI all stay 0: raw event times.
 */
static void
ev_gpu_calibrate(ev_gpu *g)
{
	/* Runs 0..first-1 are the warm-up, first..total-1 are measured; run
	 * n's probe is form n % forms. */
	enum { forms = 4, first = forms * EV_CALIB_RUNS, total = 2 * first };
	enum { EMPTY, READ, READ_SMALL, SMALL_READ };
	double probe[total], cost[total];
	/* Each form's costs (events less CUPTI span), the empty kernel's own
	 * spans, and the two-launch forms' costs together. */
	double by_form[forms][EV_CALIB_RUNS], least[EV_CALIB_RUNS],
	    two[2 * EV_CALIB_RUNS];
	/* The timed runs' own events, made here before any timing. */
	CUevent *ev = g->ev;
	unsigned n = 0, made = 0;
	int bad = 0;

	for (; !bad && made < 2 * total; made++)
		bad = ev[made] == NULL &&
		    g->cu.cuEventCreate(&ev[made], CU_EVENT_DEFAULT) !=
		        CUDA_SUCCESS;
	if (!bad && sbx_prof_activity_start() != 0)
		bad = 1;
	for (; !bad && n < total; n++) {
		unsigned form = n % forms;
		bad = ev_gpu_launch_empty(g, g->mark) != CUDA_SUCCESS ||
		    ev_gpu_flush_l2(g) != CUDA_SUCCESS ||
		    ev_gpu_hold(g) != CUDA_SUCCESS ||
		    g->cu.cuEventRecord(ev[0], g->stream) != CUDA_SUCCESS ||
		    (form == EMPTY &&
		        ev_gpu_launch_empty(g, g->probe) != CUDA_SUCCESS) ||
		    (form == SMALL_READ &&
		        ev_gpu_read(g, g->read_sweep, g->flush, 4096, 1,
		            1024) != CUDA_SUCCESS) ||
		    (form != EMPTY &&
		        ev_gpu_sweep(g, g->read_sweep, g->flush,
		            g->flush_bytes) != CUDA_SUCCESS) ||
		    (form == READ_SMALL &&
		        ev_gpu_read(g, g->read_sweep, g->flush, 4096, 1,
		            1024) != CUDA_SUCCESS) ||
		    g->cu.cuEventRecord(ev[1], g->stream) != CUDA_SUCCESS ||
		    ev_gpu_launch_empty(g, g->mark_end) != CUDA_SUCCESS;
		ev_gpu_hold_release(g);
		if (!bad) {
			float ms = 0;
			bad = g->cu.cuEventSynchronize(ev[1]) != CUDA_SUCCESS ||
			    g->cu.cuEventElapsedTime(&ms, ev[0], ev[1]) !=
			        CUDA_SUCCESS;
			cost[n] = ms;
		}
	}
	if (made == 2 * total) {
		bad =
		    bad || g->cu.cuStreamSynchronize(g->stream) != CUDA_SUCCESS;
		sbx_prof_activity_stop(NULL);
	}
	if (bad || n < total || sbx_prof_runs(NULL, probe, total) != total) {
		KC_WARN("the events' cost around a launch could not be "
		        "measured: timed runs are reported as their events "
		        "say");
		return;
	}
	for (unsigned i = 0; i < EV_CALIB_RUNS; i++) {
		for (unsigned f = 0; f < forms; f++) {
			unsigned k = first + forms * i + f;
			by_form[f][i] = cost[k] - probe[k];
		}
		least[i] = probe[first + forms * i + EMPTY];
		two[2 * i] = by_form[READ_SMALL][i];
		two[2 * i + 1] = by_form[SMALL_READ][i];
	}
	g->launch_cost_ms = sbx_median(by_form[READ], EV_CALIB_RUNS);
	g->launch_empty_ms = sbx_median(by_form[EMPTY], EV_CALIB_RUNS);
	g->launch_floor_ms = sbx_median(least, EV_CALIB_RUNS);
	g->launch_step_ms =
	    sbx_median(two, 2 * EV_CALIB_RUNS) - g->launch_cost_ms;
	KC_INFO("events' cost: read %.4f ms, empty %.4f ms, read then small "
	        "%.4f ms, small then read %.4f ms",
	    g->launch_cost_ms, g->launch_empty_ms,
	    sbx_median(by_form[READ_SMALL], EV_CALIB_RUNS),
	    sbx_median(by_form[SMALL_READ], EV_CALIB_RUNS));
	if (g->launch_step_ms < 0)
		g->launch_step_ms = 0;
	if (g->launch_cost_ms < 0 || g->launch_floor_ms <= 0)
		g->launch_cost_ms = g->launch_floor_ms = g->launch_step_ms = 0;
}

/* What the events add around a run of a plan of steps launches
 * (ev_gpu_calibrate). */
static double
ev_gpu_cost(const ev_gpu *g, size_t steps)
{
	return g->launch_cost_ms +
	    (steps > 1 ? (double)(steps - 1) * g->launch_step_ms : 0);
}

/*
 * The best of three timed runs of one of the ceilings' sweeps (after one
 * untimed), in ms; 0 when the events fail.
 */
static float
ev_gpu_best_of(
    ev_gpu *g, CUevent a, CUevent b, int read, CUdeviceptr buf, size_t half)
{
	float best = 0;

	for (int i = 0; i < 4; i++) {
		float ms = 0;
		g->cu.cuEventRecord(a, g->stream);
		if (read)
			ev_gpu_sweep(g, g->read_sweep, buf, 2 * half);
		else
			g->cu.cuMemcpyDtoDAsync(
			    buf + half, buf, half, g->stream);
		g->cu.cuEventRecord(b, g->stream);
		if (g->cu.cuEventSynchronize(b) != CUDA_SUCCESS ||
		    g->cu.cuEventElapsedTime(&ms, a, b) != CUDA_SUCCESS)
			return 0;
		if (i > 0 && ms > 0 && (best == 0 || ms < best))
			best = ms;
	}
	return best;
}

/*
 * The device's ceilings for the speed of light and the roofline: the copy
 * bandwidth (the best of three device-to-device copies of 1 GiB, which no
 * L2 holds; read plus write) and the read bandwidth (the best of three
 * read-only sweeps of those 2 GiB), measured, and the arithmetic peak,
 * from the SM count and clock at 8192 operations per SM per clock
 * (Hopper's dense fp8 tensor rate, the fastest arithmetic there is).
 * Nothing measured: 0, and the speed of light is not applied. Sweeps of
 * a quarter of that (0.12 ms) read 4.30-4.44 TB/s on the H200 where an
 * MSE loss's kernel read 4.57: a sweep's ramp and tail weigh on a short
 * one. Where 2 GiB cannot be had, 256 MiB halves.
 */
void
ev_gpu_measure_ceilings(ev_gpu *g)
{
	size_t half = (size_t)1 << 30;
	CUdeviceptr buf = 0;
	CUevent a = NULL, b = NULL;
	float copy = 0, read = 0;
	int clock_khz = ev_gpu_attr(g, CU_DEVICE_ATTRIBUTE_CLOCK_RATE);

	g->peak_flops_per_ms = (double)g->sms * clock_khz * SBX_OPS_FP8;
	if (g->cu.cuMemAlloc(&buf, 2 * half) != CUDA_SUCCESS &&
	    g->cu.cuMemAlloc(&buf, 2 * (half = (size_t)256 << 20)) !=
	        CUDA_SUCCESS)
		return;
	if (g->cu.cuEventCreate(&a, CU_EVENT_DEFAULT) == CUDA_SUCCESS &&
	    g->cu.cuEventCreate(&b, CU_EVENT_DEFAULT) == CUDA_SUCCESS) {
		copy = ev_gpu_best_of(g, a, b, 0, buf, half);
		read = ev_gpu_best_of(g, a, b, 1, buf, half);
	}
	if (copy > 0)
		g->bw_bytes_per_ms = 2.0 * (double)half / copy;
	if (read > 0)
		g->read_bytes_per_ms = 2.0 * (double)half / read;
	g->cu.cuMemFree(buf);
	ev_gpu_calibrate(g);
	KC_INFO("copy bandwidth %.0f GB/s, read bandwidth %.0f GB/s, "
	        "arithmetic peak %.0f TFLOP/s, events' cost around a launch "
	        "%.4f ms (around an empty one %.4f ms, which takes %.4f ms)",
	    g->bw_bytes_per_ms / 1e6, g->read_bytes_per_ms / 1e6,
	    g->peak_flops_per_ms / 1e9, g->launch_cost_ms, g->launch_empty_ms,
	    g->launch_floor_ms);
}

/*
 * The hold's flag: two words of host memory mapped for the device. The
 * hold is launched once here, released at once, so its module is loaded
 * before any timed run. Without it (a driver that cannot map host
 * memory) runs are timed as they are launched.
 */
void
ev_gpu_hold_init(ev_gpu *g)
{
	void *p = NULL;
	uint32_t want = 0;
	uint64_t max_ns = 0;
	void *params[3] = {&g->hold_dev, &want, &max_ns};

	if (g->cu.cuMemHostAlloc(&p, 64, CU_MEMHOSTALLOC_DEVICEMAP) !=
	    CUDA_SUCCESS) {
		KC_WARN("no host memory for the timing hold: timed runs "
		        "include their launch latency");
		return;
	}
	memset(p, 0, 64);
	if (g->cu.cuMemHostGetDevicePointer(&g->hold_dev, p, 0) !=
	        CUDA_SUCCESS ||
	    g->cu.cuLaunchKernel(g->hold, 1, 1, 1, 1, 1, 1, 0, g->stream,
	        params, NULL) != CUDA_SUCCESS) {
		KC_WARN("the timing hold cannot run: timed runs include "
		        "their launch latency");
		g->cu.cuMemFreeHost(p);
		return;
	}
	g->hold_flag = p;
}

static void
ev_stats(double *ms, unsigned n, Kclaw__Timing *t)
{
	double sum = 0, sq = 0;

	qsort(ms, n, sizeof(*ms), sbx_cmp_double);
	for (unsigned i = 0; i < n; i++)
		sum += ms[i];
	t->iterations = n;
	t->min_ms = ms[0];
	t->max_ms = ms[n - 1];
	t->mean_ms = sum / n;
	t->median_ms = sbx_sorted_median(ms, n);
	for (unsigned i = 0; i < n; i++)
		sq += (ms[i] - t->mean_ms) * (ms[i] - t->mean_ms);
	t->stddev_ms = n > 1 ? sqrt(sq / (n - 1)) : 0;
}

/*
 * Buffer sets for back-to-back timing: set 0 is the evaluation's own
 * (e->tdev, p->scratch); every other set has inputs, outputs (of the
 * candidate; the reference writes into its own) and scratch of its own, and
 * shares the parameters. Swapping e->tdev and p->scratch points a run at
 * its set.
 */
typedef struct {
	unsigned n;
	CUdeviceptr *tdev[EV_BATCH_RUNS];
	CUdeviceptr *scratch[EV_BATCH_RUNS];
} ev_sets;

/* Whether p may be timed back to back: a `cuda` reference (inputs made from
 * seeds), adaptive timing, no module variables to restore between runs and
 * no matmul step (its workspace is shared). */
static int
ev_batch_eligible(const ev *e, const ev_prog *p)
{
	if (!e->ops->batchable || !e->adaptive || p->nglobals != 0)
		return 0;
	for (size_t s = 0; s < p->plan->nsteps; s++)
		if (p->plan->steps[s].kind == SBX_STEP_MATMUL)
			return 0;
	return 1;
}

static int
ev_set_owns(const ev *e, const ev_prog *p, size_t t)
{
	Kclaw__TensorKind kind = e->task->tensors[t]->kind;

	return kind == KCLAW__TENSOR_KIND__INPUT ||
	    (kind == KCLAW__TENSOR_KIND__OUTPUT && p == &e->cand);
}

static void
ev_sets_free(ev *e, const ev_prog *p, ev_sets *s)
{
	for (unsigned j = 1; j < s->n; j++) {
		for (size_t t = 0; s->tdev[j] && t < e->nt; t++)
			if (s->tdev[j][t] != 0 &&
			    s->tdev[j][t] != s->tdev[0][t] && !*e->fatal)
				e->g->cu.cuMemFree(s->tdev[j][t]);
		for (size_t i = 0; s->scratch[j] && i < p->nscratch; i++)
			if (s->scratch[j][i] != 0 && !*e->fatal)
				e->g->cu.cuMemFree(s->scratch[j][i]);
		free(s->tdev[j]);
		free(s->scratch[j]);
	}
	memset(s, 0, sizeof(*s));
}

/* EV_BATCH_RUNS sets for p, or 0 sets (not batched) when they would take
 * more than EV_BATCH_BYTES or cannot be allocated. */
static void
ev_sets_alloc(ev *e, ev_prog *p, ev_sets *s)
{
	size_t bytes = 0;

	memset(s, 0, sizeof(*s));
	for (size_t t = 0; t < e->nt; t++)
		if (ev_set_owns(e, p, t))
			bytes += e->tbytes[t];
	for (size_t i = 0; i < p->nscratch; i++)
		bytes += p->plan->buffers[p->plan->ntensors + i].bytes;
	if (bytes == 0 || bytes > EV_BATCH_BYTES / (EV_BATCH_RUNS - 1))
		return;
	s->tdev[0] = e->tdev;
	s->scratch[0] = p->scratch;
	s->n = 1;
	for (unsigned j = 1; j < EV_BATCH_RUNS; j++, s->n++) {
		s->tdev[j] = calloc(e->nt + 1, sizeof(CUdeviceptr));
		s->scratch[j] = calloc(p->nscratch + 1, sizeof(CUdeviceptr));
		if (s->tdev[j] == NULL || s->scratch[j] == NULL)
			goto fail;
		for (size_t t = 0; t < e->nt; t++) {
			s->tdev[j][t] = e->tdev[t];
			if (ev_set_owns(e, p, t) &&
			    e->g->cu.cuMemAlloc(&s->tdev[j][t],
			        e->tbytes[t] ? e->tbytes[t] : 1) !=
			        CUDA_SUCCESS) {
				s->tdev[j][t] = 0;
				goto fail;
			}
		}
		for (size_t i = 0; i < p->nscratch; i++)
			if (e->g->cu.cuMemAlloc(&s->scratch[j][i],
			        p->plan->buffers[p->plan->ntensors + i]
			            .bytes) != CUDA_SUCCESS)
				goto fail;
	}
	return;
fail:
	s->n++;
	ev_sets_free(e, p, s);
}

/* Points p's runs at set j. */
static void
ev_sets_use(ev *e, ev_prog *p, const ev_sets *s, unsigned j)
{
	e->tdev = s->tdev[j];
	p->scratch = s->scratch[j];
}

/* Enqueues the L2 flush: the flush buffer read (kc_flush_read), so what a
 * run left in L2 is gone and nothing dirty is left to write back while
 * the next run is timed. */
static int
ev_flush_l2(ev *e)
{
	return ev_ok(e, ev_gpu_flush_l2(e->g), EV_INTERNAL, "flushing L2");
}

/*
 * The hold before a timed run's start event: a one-thread kernel that waits
 * until the host has enqueued the run through its stop event
 * (ev_hold_release), so the run's launches are all queued when its start
 * event fires and the events time the GPU's work, not the host's launch
 * rate (the gaps a multi-kernel plan would otherwise show between its
 * kernels). It gives up after EV_HOLD_MAX_NS, counted
 * (sandbox.hold_expired), so a plan whose enqueue waits for the GPU
 * cannot deadlock.
 */
static int
ev_hold(ev *e)
{
	return ev_ok(e, ev_gpu_hold(e->g), EV_INTERNAL, "holding a timed run");
}

/* Lets the last hold go (also on an error path: idempotent). */
static void
ev_hold_release(ev *e)
{
	ev_gpu_hold_release(e->g);
}

/* The holds that gave up waiting since the last call (after a sync). */
static uint32_t
ev_hold_expired(ev *e)
{
	ev_gpu *g = e->g;
	uint32_t n;

	if (g->hold_flag == NULL)
		return 0;
	n = __atomic_load_n(&g->hold_flag[1], __ATOMIC_ACQUIRE);
	__atomic_store_n(&g->hold_flag[1], 0, __ATOMIC_RELEASE);
	return n;
}

/* Where e->trace is set: kernel f (kc_mark or kc_mark_end) for CUPTI's
 * records, outside the events. */
static int
ev_mark(ev *e, CUfunction f)
{
	return !e->trace ? 0
	                 : ev_ok(e, ev_gpu_launch_empty(e->g, f), EV_INTERNAL,
	                       "marking a run for the profiler");
}

/*
 * One back-to-back sample of p: EV_BATCH_RUNS runs, each on its own set
 * (fresh inputs, outputs and scratch poisoned, all before the events),
 * one L2 flush, the runs between one pair of events (batch b's), then with
 * check every run compared with the reference on its own inputs into chk
 * slots from `slot`. 0, 1 (wrong: the result is filled) or -1.
 */
static int
ev_time_batch(ev *e, ev_prog *p, const ev_sets *sets, int check, int flush,
    unsigned b, unsigned slot)
{
	ev_gpu *g = e->g;
	unsigned ids[EV_BATCH_RUNS];
	int rv = 0;

	for (unsigned j = 0; j < sets->n && rv == 0; j++) {
		ids[j] = e->fresh_serial++;
		ev_sets_use(e, p, sets, j);
		if (e->ops->run_inputs(e, j % e->trials, ids[j]) != 0 ||
		    ev_poison(e, p) != 0)
			rv = -1;
	}
	ev_sets_use(e, p, sets, 0);
	if (rv != 0 || ev_mark(e, g->mark) != 0 ||
	    (flush && ev_flush_l2(e) != 0) || ev_hold(e) != 0 ||
	    ev_ok(e, g->cu.cuEventRecord(g->ev[2 * b], g->stream), EV_INTERNAL,
	        "recording an event") != 0) {
		ev_hold_release(e);
		return -1;
	}
	for (unsigned j = 0; j < sets->n && rv == 0; j++) {
		ev_sets_use(e, p, sets, j);
		rv = ev_prog_enqueue(e, p);
	}
	ev_sets_use(e, p, sets, 0);
	if (rv == 0)
		rv = ev_ok(e, g->cu.cuEventRecord(g->ev[2 * b + 1], g->stream),
		         EV_INTERNAL, "recording an event") != 0 ||
		    ev_mark(e, g->mark_end) != 0;
	ev_hold_release(e);
	if (rv != 0)
		return -1;
	for (unsigned j = 0; check && j < sets->n && rv == 0; j++) {
		ev_sets_use(e, &e->cand, sets, j);
		rv = e->ops->run_check(e, j % e->trials, ids[j], slot + j);
	}
	ev_sets_use(e, p, sets, 0);
	return rv;
}

/*
 * One run of p, its inputs in place, prepared as every timed run is: a
 * fresh state, the L2 flush, the hold, then the run between the events
 * ev[0] and ev[1], the hold released once it is enqueued, then the host
 * waiting for ev[1] before it goes on; *ms is the events' time. 0 or -1
 * (result filled). Without the wait the host enqueued the next run's
 * inputs and this one's comparison while this one ran, and its events
 * read -0.7 to +0.8 us off its CUPTI span, by its place in the batch
 * (sum_reduce and layernorm on the H200): the two medians of a plan of
 * two modes apart by up to 3.6 %, its own cost (ev_plan_calibrate) off by
 * one mode's 0.9 us. With it, -0.2 to +1.1 us, standard deviation 0.2 us.
 * Every held run uses the same pair, read as soon as the host has waited
 * for it.
 */
static int
ev_held_run(ev *e, ev_prog *p, int flush, double *ms)
{
	ev_gpu *g = e->g;
	float f = 0;
	int rv = ev_fresh_state(e, p) != 0 || ev_mark(e, g->mark) != 0 ||
	        (flush && ev_flush_l2(e) != 0) || ev_hold(e) != 0 ||
	        ev_ok(e, g->cu.cuEventRecord(g->ev[0], g->stream), EV_INTERNAL,
	            "recording an event") != 0 ||
	        ev_prog_enqueue(e, p) != 0 ||
	        ev_ok(e, g->cu.cuEventRecord(g->ev[1], g->stream), EV_INTERNAL,
	            "recording an event") != 0 ||
	        ev_mark(e, g->mark_end) != 0
	    ? -1
	    : 0;

	ev_hold_release(e);
	if (rv == 0)
		rv = ev_ok(e, g->cu.cuEventSynchronize(g->ev[1]),
		         p == &e->cand ? KCLAW__EVAL_STATUS__LAUNCH_ERROR
		                       : EV_INTERNAL,
		         "waiting for a timed run") != 0 ||
		        ev_ok(e,
		            g->cu.cuEventElapsedTime(&f, g->ev[0], g->ev[1]),
		            EV_INTERNAL, "reading a timed run's events") != 0
		    ? -1
		    : 0;
	*ms = f;
	return rv;
}

/*
 * Runs lo..hi-1 of p, each held and timed by the events (ev_held_run,
 * into ms[i - lo]), then with check its comparison with the reference
 * into chk slots from `slot`. 0, 1 (wrong: the result is filled) or -1.
 */
static int
ev_time_runs(ev *e, ev_prog *p, int check, int flush, unsigned lo, unsigned hi,
    unsigned slot, double *ms)
{
	int rv;

	for (unsigned i = lo; i < hi; i++) {
		unsigned k = i % e->trials, id = e->fresh_serial++;

		if (e->ops->run_inputs(e, k, id) != 0 ||
		    ev_held_run(e, p, flush, &ms[i - lo]) != 0)
			return -1;
		if (check &&
		    (rv = e->ops->run_check(e, k, id, slot + i - lo)) != 0)
			return rv;
	}
	return 0;
}

/* The step log (debug): per-run figures (what) in the order they ran, so
 * a slow run can be placed; to 10 ns, the events' noise is 0.2 us. */
static void
ev_trace_times(const char *what, const double *ms, unsigned n)
{
	char line[2000];
	size_t len = 0;

	for (unsigned i = 0; i < n && len + 14 < sizeof(line); i++)
		len += (size_t)snprintf(
		    line + len, sizeof(line) - len, " %.5f", ms[i]);
	line[len] = '\0';
	KC_DEBUG("eval: %s in order (ms):%s", what, line);
}

/*
 * The end of a traced timing (e->trace): CUPTI's span of each of the last
 * `samples` marked runs or batches (the ones kept; an adaptive timing's
 * first runs may have been dropped), over `per` runs each, and their
 * median as metric profile.timed_cupti_ms: the same runs as the reported
 * median, measured by the profiler's clock. Nothing when the records do
 * not hold them all (the profiler's buffer full).
 */
static void
ev_time_traced(
    ev *e, const double *ms, unsigned samples, unsigned per, unsigned cap)
{
	double *span = calloc(2 * (size_t)cap, sizeof(*span));
	unsigned n;

	e->trace = 0;
	sbx_prof_activity_stop(NULL);
	n = span != NULL ? sbx_prof_runs(span, NULL, cap) : 0;
	if (samples > 0 && n >= samples) {
		double *kept = span + (n - samples), *excess = span + cap;
		for (unsigned i = 0; i < samples; i++) {
			kept[i] /= per;
			excess[i] = ms[i * per] - kept[i];
		}
		ev_trace_times(
		    "timed samples less their CUPTI span", excess, samples);
		sbx_result_add_metric(e->res, "profile.timed_excess_ms",
		    sbx_median(excess, samples), "ms");
		sbx_result_add_metric(e->res, "profile.timed_cupti_ms",
		    sbx_median(kept, samples), "ms");
		sbx_result_add_metric(
		    e->res, "profile.timed_cupti_samples", samples, "samples");
	}
	free(span);
}

/* Whether every step of p is a kernel of its own module (a library
 * matmul's kernels are cuBLASLt's choice). */
static int
ev_plan_kernels_only(const ev_prog *p)
{
	for (size_t s = 0; s < p->plan->nsteps; s++)
		if (p->plan->steps[s].kind != SBX_STEP_KERNEL)
			return 0;
	return 1;
}

/*
 * The events' cost around one run of p, measured on p (into *cost; 0, 1
 * when a run was wrong, or -1, the result filled). The child's
 * calibration (ev_gpu_calibrate) measures it on its own probes, and a
 * plan's launches need not cost what the probes' do: sum_reduce's
 * two-launch plans, a partial sum then one block or a clear then the
 * sum, cost 2.3-2.5 us, as one launch does, and with the child's cost
 * for two launches (its step included) read 1.0-1.9 % under CUPTI on the
 * H200. So a plan of kernels whose warm-up run took under
 * EV_PLAN_CALIB_UNDER_MS, of a kind that makes each run's inputs in
 * place, runs EV_PLAN_CALIB_RUNS timed runs first under CUPTI, each as
 * every timed run goes (ev_time_runs: its own inputs, the fresh state,
 * the flush, the hold, the wait for its stop event, then with check its
 * comparison, read here like any other); its cost is their mean of
 * events less span (sbx_plan_cost says why the mean; at most a launch's
 * slack over the child's). Their times are not samples: CUPTI's tracing can
 * slow a kernel. Anything else (a longer plan, a matmul step, inputs from
 * another process, no CUPTI, records that do not hold every run): the
 * child's cost for as many launches (ev_gpu_cost).
 */
static int
ev_plan_calibrate(
    ev *e, ev_prog *p, int check, int flush, double warm_ms, double *cost)
{
	ev_gpu *g = e->g;
	double span[EV_PLAN_CALIB_RUNS], over[EV_PLAN_CALIB_RUNS],
	    raw[EV_PLAN_CALIB_RUNS];
	int cand = p == &e->cand;
	uint64_t t0 = kc_mono_ns();
	unsigned n;
	int rv;

	*cost = ev_gpu_cost(g, p->plan->nsteps);
	if (g->launch_cost_ms <= 0 || warm_ms >= EV_PLAN_CALIB_UNDER_MS ||
	    !e->ops->batchable || !ev_plan_kernels_only(p) ||
	    sbx_prof_activity_start() != 0)
		return 0;
	e->trace = 1;
	rv = ev_time_runs(e, p, check, flush, 0, EV_PLAN_CALIB_RUNS, 0, raw);
	e->trace = 0;
	ev_hold_release(e);
	if (rv == 0)
		rv = ev_ok(e, g->cu.cuStreamSynchronize(g->stream),
		    cand ? KCLAW__EVAL_STATUS__LAUNCH_ERROR : EV_INTERNAL,
		    "measuring the events' cost around the plan");
	sbx_prof_activity_stop(NULL);
	if (rv == 0 && check)
		rv = ev_read_checks(e, 0, EV_PLAN_CALIB_RUNS);
	if (rv != 0)
		return rv;
	n = sbx_prof_runs(span, NULL, EV_PLAN_CALIB_RUNS);
	if (n != EV_PLAN_CALIB_RUNS)
		return 0;
	for (unsigned i = 0; i < n; i++)
		over[i] = raw[i] - span[i];
	ev_trace_times(
	    "calibration runs' events less their CUPTI span", over, n);
	*cost = sbx_plan_cost(over, n, *cost, p->plan->nsteps);
	ev_trace(e, t0,
	    "the events' cost around the %s's runs, measured on %u of them: "
	    "%.5f ms (the child's calibration: %.5f ms)",
	    p->what, n, *cost, ev_gpu_cost(g, p->plan->nsteps));
	return 0;
}

/*
 * Times p: warm-up, then runs each between two events. Before each run
 * (outside the events): the next inputs (fresh ones where the reference
 * can compute them, else the next trial's), a fresh state (the poison in
 * outputs and scratch, the module's variables reset), the L2 flushed,
 * then the hold (ev_hold), released once the run is enqueued through its
 * stop event, and the host waits for that event before it goes on
 * (ev_held_run says why). With check, every timed run's outputs are then
 * compared with the reference's on the same inputs, after the candidate
 * finished and outside the events, the same work after every run: no run can
 * tell whether it is checked, because all are, and none can reuse what an
 * earlier one left.
 *
 * The runs go in batches, each read (its times and its checks) before the
 * next: e->iters of them when the count was asked for, else adaptively
 * until the median is settled (sbx_median_settled), at most e->iters runs
 * or EV_ADAPT_BUDGET_MS. A plan whose first runs' median is under
 * EV_SHORT_MS is then timed back to back instead (ev_time_batch): the
 * first runs' times are dropped, and each sample is a batch's time over its
 * runs. Every sample is reported less the events' own cost around its
 * launches, once per pair of events (sbx_sample_ms, ev_gpu_calibrate): a
 * run's, that of its plan measured on it where it is short
 * (ev_plan_calibrate, after the warm-up; its runs are checked as these
 * are, and timed by CUPTI, not reported), else that of its
 * plan's steps (ev_gpu_cost); a batch's, one launch's.
 */
int
ev_time(ev *e, ev_prog *p, int check, Kclaw__Timing **out)
{
	ev_gpu *g = e->g;
	int flush = !(e->req->options && e->req->options->no_l2_flush);
	int cand = p == &e->cand;
	unsigned max = e->iters, n = 0, runs = 0, batches = 0, samples = 0;
	uint64_t t0 = kc_mono_ns();
	ev_sets sets = {0};
	Kclaw__Timing *t;
	double *ms, *sorted, *raw, cost = 0;
	float warm_ms = 0;
	int rv;

	/* ev[0] and ev[1] time every held run; a back-to-back batch b has
	 * ev[2 b] and ev[2 b + 1]. */
	for (unsigned i = 0; i < 2 * max + 2; i++)
		if (g->ev[i] == NULL)
			EV_CU(e,
			    g->cu.cuEventCreate(&g->ev[i], CU_EVENT_DEFAULT),
			    EV_INTERNAL, "creating events");
	/* Each sample, the same sorted, each run's events' time. */
	if ((ms = calloc(3 * (size_t)max, sizeof(*ms))) == NULL) {
		sbx_result_status(e->res, EV_INTERNAL, "out of memory");
		return -1;
	}
	sorted = ms + max;
	raw = ms + 2 * (size_t)max;
	/* The warm-up; its last run between events, to tell a short plan
	 * (ev_plan_calibrate) roughly, launch latency included. */
	for (unsigned i = 0; i < e->warmup; i++) {
		int last = i + 1 == e->warmup;
		if (e->ops->run_inputs(e, i % e->trials, e->fresh_serial++) !=
		        0 ||
		    ev_fresh_state(e, p) != 0 ||
		    (last &&
		        g->cu.cuEventRecord(g->ev[0], g->stream) !=
		            CUDA_SUCCESS) ||
		    ev_prog_enqueue(e, p) != 0 ||
		    (last &&
		        g->cu.cuEventRecord(g->ev[1], g->stream) !=
		            CUDA_SUCCESS))
			goto fail;
	}
	if (ev_ok(e, g->cu.cuStreamSynchronize(g->stream),
	        cand ? KCLAW__EVAL_STATUS__LAUNCH_ERROR : EV_INTERNAL,
	        "warm-up") != 0)
		goto fail;
	if (e->warmup > 0)
		g->cu.cuEventElapsedTime(&warm_ms, g->ev[0], g->ev[1]);
	if ((rv = ev_plan_calibrate(e, p, check, flush, warm_ms, &cost)) != 0)
		goto done;
	/* Asked for (EvalOptions.trace_timing): the candidate's timed runs
	 * traced by CUPTI too, the independent measurement of the same runs
	 * (ev_time_traced). Not by default: tracing slowed one example
	 * kernel by 11 % (bias_gelu candidate 1 on the H200). */
	e->trace = cand && e->req->options && e->req->options->trace_timing &&
	    sbx_prof_activity_start() == 0;
	while (n < max) {
		unsigned lo = n, hi;
		uint64_t tb = kc_mono_ns();
		hi = !e->adaptive ? max
		    : n == 0      ? EV_ADAPT_MIN
		                  : n + EV_ADAPT_BATCH;
		if (hi > max)
			hi = max;
		unsigned b = 0, nrun;
		if (sets.n > 0) {
			/* Back to back: whole batches of runs per sample. */
			if (n + sets.n > max)
				break;
			b = batches++;
			nrun = sets.n;
			rv = ev_time_batch(e, p, &sets, check, flush, b, runs);
		} else {
			nrun = hi - lo;
			rv = ev_time_runs(
			    e, p, check, flush, lo, hi, runs, raw + lo);
		}
		if (rv != 0)
			goto done;
		if (ev_ok(e, g->cu.cuStreamSynchronize(g->stream),
		        cand ? KCLAW__EVAL_STATUS__LAUNCH_ERROR : EV_INTERNAL,
		        "timing") != 0)
			goto fail;
		if (check && (rv = ev_read_checks(e, runs, runs + nrun)) != 0)
			goto done;
		ev_trace(e, tb, "%u timed run(s) of the %s", nrun, p->what);
		for (unsigned j = 0; j < nrun; j++) {
			/* A batch's runs share its time; a run has its own. */
			if (sets.n == 0)
				ms[n + j] = sbx_sample_ms(
				    raw[lo + j], 1, cost, g->launch_floor_ms);
			else if (j > 0)
				ms[n + j] = ms[n];
			else {
				float f = 0;
				g->cu.cuEventElapsedTime(
				    &f, g->ev[2 * b], g->ev[2 * b + 1]);
				ms[n] = sbx_sample_ms(f, nrun,
				    g->launch_cost_ms, g->launch_floor_ms);
			}
		}
		ev_trace_times("timed samples", ms + n, sets.n > 0 ? 1 : nrun);
		runs += nrun;
		n += nrun;
		if (sets.n > 0)
			samples++;
		if (!e->adaptive)
			break;
		memcpy(sorted, ms, n * sizeof(*ms));
		qsort(sorted, n, sizeof(*sorted), sbx_cmp_double);
		/* The reference is timed back to back exactly when the
		 * candidate was, so a speedup compares like with like. */
		if (sets.n == 0 && lo == 0 && ev_batch_eligible(e, p) &&
		    (cand ? sorted[n / 2] < EV_SHORT_MS : e->cand_batched)) {
			/* Launch latency is a visible part of these times:
			 * start again, back to back. */
			ev_sets_alloc(e, p, &sets);
			if (sets.n > 0) {
				n = 0;
				continue;
			}
		}
		/* Back to back, a batch is one sample (its runs share its
		 * time): settled only over EV_ADAPT_MIN batches. */
		if ((sets.n == 0 || samples >= EV_ADAPT_MIN) &&
		    sbx_median_settled(sorted, n, EV_ADAPT_CI))
			break;
		if ((kc_mono_ns() - t0) / 1000000 > EV_ADAPT_BUDGET_MS)
			break;
	}
	if (sets.n > 0 && cand)
		e->cand_batched = 1;
	if (e->trace)
		ev_time_traced(e, ms, sets.n > 0 ? samples : n,
		    sets.n > 0 ? sets.n : 1, 2 * max + 2);
	{
		uint32_t expired = ev_hold_expired(e);
		if (cand && g->launch_cost_ms > 0) {
			sbx_result_add_metric(e->res, "sandbox.launch_cost_ms",
			    g->launch_cost_ms, "ms");
			sbx_result_add_metric(e->res,
			    "sandbox.launch_cost_empty_ms", g->launch_empty_ms,
			    "ms");
			sbx_result_add_metric(e->res,
			    "sandbox.launch_cost_step_ms", g->launch_step_ms,
			    "ms");
		}
		if (expired > 0)
			sbx_result_add_metric(e->res,
			    cand ? "sandbox.candidate_hold_expired"
			         : "sandbox.reference_hold_expired",
			    expired, "runs");
	}
	if (sets.n > 0)
		sbx_result_add_metric(e->res,
		    cand ? "sandbox.candidate_batch_runs"
		         : "sandbox.reference_batch_runs",
		    sets.n, "runs");
	else if (g->launch_cost_ms > 0)
		sbx_result_add_metric(e->res,
		    cand ? "sandbox.candidate_launch_cost_ms"
		         : "sandbox.reference_launch_cost_ms",
		    cost, "ms");
	ev_sets_free(e, p, &sets);
	if ((t = malloc(sizeof(*t))) == NULL) {
		sbx_result_status(e->res, EV_INTERNAL, "out of memory");
		goto fail;
	}
	kclaw__timing__init(t);
	ev_stats(ms, n, t);
	free(ms);
	t->l2_flushed = flush;
	t->spot_checks = check ? runs : 0;
	*out = t;
	return 0;
fail:
	rv = -1;
done:
	ev_hold_release(e);
	if (e->trace) {
		e->trace = 0;
		sbx_prof_activity_stop(NULL);
	}
	if (sets.n > 0) {
		ev_sets_use(e, p, &sets, 0);
		ev_sets_free(e, p, &sets);
	}
	free(ms);
	return rv;
}

static int
ev_profile_run(void *arg)
{
	ev *e = arg;

	return ev_prog_run_sync(e, &e->cand) == 0 ? 0 : KC_ECUDA;
}

void
ev_profile(ev *e)
{
	Kclaw__EvalResult *res = e->res;
	ev_gpu *g = e->g;
	int flush = !(e->req->options && e->req->options->no_l2_flush);
	double spans[EV_PROFILE_RUNS], evms[EV_PROFILE_RUNS],
	    over[EV_PROFILE_RUNS];
	unsigned r = 0, n;

	/* EV_PROFILE_RUNS runs under one CUPTI session, each between kc_mark
	 * and kc_mark_end (where the records are cut into runs), prepared,
	 * held and timed by its own events as a timed run is (ev_held_run,
	 * e->trace; the sandbox's kc_*
	 * kernels are left out of the records). The last run's records are
	 * the result's. Metrics, medians over the runs:
	 * profile.cupti_span_ms, each run's span by CUPTI's clock, an
	 * independent measurement of what the timed runs report
	 * (tests/gpu/timing/timing_agree.py); profile.events_ms, the same
	 * runs by their raw events; profile.event_overhead_ms, each run's
	 * raw events minus its span (what ev_gpu_calibrate takes off). */
	if (sbx_prof_activity_start() != 0)
		return;
	e->trace = 1;
	for (; r < EV_PROFILE_RUNS; r++) {
		if (e->ops->profile_inputs(e) != 0 ||
		    ev_held_run(e, &e->cand, flush, &evms[r]) != 0 ||
		    ev_ok(e, g->cu.cuStreamSynchronize(g->stream),
		        KCLAW__EVAL_STATUS__LAUNCH_ERROR, "profiling") != 0) {
			e->trace = 0;
			sbx_prof_activity_stop(NULL);
			return;
		}
	}
	e->trace = 0;
	sbx_prof_activity_stop(res);
	n = sbx_prof_runs(spans, NULL, EV_PROFILE_RUNS);
	if (n == r && n > 0) {
		for (unsigned i = 0; i < n; i++)
			over[i] = evms[i] - spans[i];
		sbx_result_add_metric(
		    res, "profile.cupti_span_ms", sbx_median(spans, n), "ms");
		sbx_result_add_metric(
		    res, "profile.events_ms", sbx_median(evms, n), "ms");
		sbx_result_add_metric(res, "profile.event_overhead_ms",
		    sbx_median(over, n), "ms");
	}
	if (*e->fatal || res->status != KCLAW__EVAL_STATUS__OK)
		return;
	if (sbx_prof_range(e->g->ctx, e->g->device, ev_profile_run, e, res) ==
	    0)
		res->counters_available = 1;
}
