/*
 * memory_bench.c - how long the memories take at the sizes a long-running
 * deployment reaches: `memory_bench DB_DIR N KNOWLEDGE_DIR` learns N
 * attempts in one batch, then times retrieval with and without them, the
 * two short-term renderings over 1000 records, and loading the knowledge.
 * Not a test: numbers depend on the machine (build with
 * -DCMAKE_BUILD_TYPE=Release for meaningful ones).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kc_err.h"
#include "kc_util.h"
#include "memory.h"

#define BENCH_ITERS 50

static double
bench_ms(uint64_t from)
{
	return (double)(kc_mono_ns() - from) / 1e6;
}

int
main(int argc, char **argv)
{
	static const char *const methods[] = {"vectorized_access",
	    "grid_stride_loop", "reduce_memory_passes", "kernel_fusion",
	    "epilogue_fusion"};
	static const char *const sigs[] = {"memory_bandwidth@sm80",
	    "memory_bandwidth@sm90", "compute_bound@sm90",
	    "latency_bound@sm80"};
	memst_record *recs;
	memst_list l;
	memlt_evidence *ev;
	memlt_result r;
	store_batch *b;
	store *s;
	kb *k;
	char id[32], big[2000], *out;
	uint64_t t;
	int n, rv = 0;

	if (argc != 4 || (n = atoi(argv[2])) <= 0) {
		fprintf(stderr, "usage: memory_bench DB_DIR N KNOWLEDGE_DIR\n");
		return 2;
	}
	if (store_open(&s, argv[1]) != 0 || kb_ensure(s, argv[3], &k) != 0 ||
	    memlt_evidence_new(&ev) != 0) {
		fprintf(stderr, "memory_bench: %s\n", kc_lasterr());
		return 1;
	}
	t = kc_mono_ns();
	rv |= store_batch_new(&b);
	for (int i = 0; i < n && rv == 0; i++) {
		snprintf(id, sizeof(id), "c%d", i);
		rv = memlt_learn(NULL, b, sigs[i % 4], methods[i % 5], id,
		    i % 3 != 0, 0.8 + (i % 7) * 0.1);
	}
	rv |= store_batch_commit(s, b, true);
	store_batch_free(b);
	printf("learn %d attempts in one batch: %.1f ms\n", n, bench_ms(t));

	rv |= memlt_evidence_add_json(ev,
	    "{\"metrics\": {\"dram_throughput_pct\": 90, "
	    "\"sm_throughput_pct\": 20}, \"runtime\": {\"duration_us\": 500, "
	    "\"arch_sm\": 80}}");
	t = kc_mono_ns();
	for (int i = 0; i < BENCH_ITERS && rv == 0; i++) {
		rv = memlt_retrieve(s, k, ev, NULL, &r);
		memlt_result_free(&r);
	}
	printf("retrieve with %d learned attempts: %.3f ms\n", n,
	    bench_ms(t) / BENCH_ITERS);
	t = kc_mono_ns();
	for (int i = 0; i < BENCH_ITERS && rv == 0; i++) {
		rv = memlt_retrieve(NULL, k, ev, NULL, &r);
		memlt_result_free(&r);
	}
	printf("retrieve without learned statistics: %.3f ms\n",
	    bench_ms(t) / BENCH_ITERS);

	if ((recs = calloc(1000, sizeof(*recs))) == NULL)
		return 1;
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	for (int i = 0; i < 1000; i++)
		recs[i] =
		    (memst_record){.kind = i % 2 ? MEMST_OPT : MEMST_REPAIR,
		        .failure = big,
		        .plan = big,
		        .base_id = "b",
		        .method = "m"};
	l.recs = recs;
	l.n = 1000;
	t = kc_mono_ns();
	for (int i = 0; i < BENCH_ITERS && rv == 0; i++) {
		if ((rv = memst_render_opt_history(&l, "b", 6000, &out)) == 0)
			free(out);
		if (rv == 0 &&
		    (rv = memst_render_repair_chain(&l, 6000, &out)) == 0)
			free(out);
	}
	printf("render repair chain + history of 1000 records: %.3f ms\n",
	    bench_ms(t) / BENCH_ITERS);
	free(recs);

	t = kc_mono_ns();
	for (int i = 0; i < BENCH_ITERS && rv == 0; i++) {
		kb *x;
		if ((rv = kb_load_dir(argv[3], &x)) == 0)
			kb_free(x);
	}
	printf("load and validate the knowledge files: %.2f ms\n",
	    bench_ms(t) / BENCH_ITERS);
	if (rv != 0)
		fprintf(stderr, "memory_bench: %s\n", kc_lasterr());
	memlt_evidence_free(ev);
	kb_free(k);
	store_close(s);
	return rv == 0 ? 0 : 1;
}
