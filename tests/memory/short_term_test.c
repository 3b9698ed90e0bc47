/*
 * short_term_test.c - short-term memory in a real store: records in order
 * across a reopen, batches, repair chains that end when a kernel passes,
 * optimisation histories per base, and renderings that never exceed their
 * byte budget however much history a task has.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kc_err.h"
#include "kc_test.h"
#include "kc_util.h"
#include "memory.h"

static char dir[64], db[128];

static memst_record
repair(const char *kernel, const char *status, const char *fix,
    const char *result, bool passed)
{
	memst_record r = {.kind = MEMST_REPAIR,
	    .round = 1,
	    .kernel_id = (char *)kernel,
	    .status = (char *)status,
	    .failure = "error: identifier \"tid\" is undefined",
	    .diagnosis = "the thread index variable was never declared",
	    .fix = (char *)fix,
	    .result_id = (char *)result,
	    .outcome = passed ? "correct, 0.41 ms" : "still failing",
	    .passed = passed};
	return r;
}

static memst_record
attempt(
    const char *base, const char *method, const char *kernel, double speedup)
{
	memst_record r = {.kind = MEMST_OPT,
	    .round = 2,
	    .base_id = (char *)base,
	    .method = (char *)method,
	    .plan = "1. load float4 2. unroll by 4",
	    .kernel_id = (char *)kernel,
	    .status = speedup > 0 ? "OK" : "WRONG_RESULT",
	    .outcome = speedup > 1 ? "faster" : "not faster",
	    .speedup = speedup,
	    .ms = speedup > 0 ? 1.0 / speedup : 0};
	return r;
}

/* True when s does not end inside a UTF-8 sequence. */
static bool
utf8_complete(const char *s)
{
	size_t n = strlen(s), i = n;

	while (i > 0 && ((unsigned char)s[i - 1] & 0xC0) == 0x80)
		i--;
	if (i == 0 || ((unsigned char)s[i - 1] & 0x80) == 0)
		return i == n;
	unsigned char c = (unsigned char)s[i - 1];
	size_t want = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : 4;
	return n - (i - 1) == want;
}

static void
test_records_and_reopen(void)
{
	store *s;
	store_batch *b;
	memst_list l;
	memst_record r =
	    repair("k1", "COMPILE_ERROR", "declare tid", "k2", false);
	uint64_t seq;
	char big[100000];

	KT_OK(store_open(&s, db));
	KT_OK(memst_next_seq(s, "task-a", &seq));
	KT_EQ_INT(seq, 1);
	KT_OK(memst_append(s, "task-a", &r, &seq));
	KT_EQ_INT(seq, 1);
	/* Two records in one batch, committed with something else. */
	KT_OK(memst_next_seq(s, "task-a", &seq));
	KT_EQ_INT(seq, 2);
	KT_OK(store_batch_new(&b));
	r = attempt("k2", "vectorized_access", "k3", 1.4);
	KT_OK(memst_put(b, "task-a", seq, &r));
	r = attempt("k2", "kernel_fusion", "k4", 0);
	KT_OK(memst_put(b, "task-a", seq + 1, &r));
	KT_OK(store_batch_put(b, STORE_CF_META, "x", 1, "y", 1));
	KT_OK(store_batch_commit(s, b, true));
	store_batch_free(b);
	/* Another task's records stay apart, including a task whose id
	 * starts with this one's. */
	r = repair("z1", "TIMEOUT", "f", "z2", true);
	KT_OK(memst_append(s, "task-ab", &r, NULL));
	/* A huge field is cut when stored. */
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	r = repair("k4", "WRONG_RESULT", big, "k5", true);
	KT_OK(memst_append(s, "task-a", &r, &seq));
	KT_EQ_INT(seq, 4);
	/* Bad input. */
	KT_EQ_INT(memst_append(s, "", &r, NULL), KC_EINVAL);
	r.kind = 0;
	KT_EQ_INT(memst_append(s, "task-a", &r, NULL), KC_EINVAL);
	store_close(s);

	KT_OK(store_open(&s, db));
	KT_OK(memst_load(s, "task-a", &l));
	KT_EQ_INT(l.n, 4);
	KT_EQ_INT(l.recs[0].kind, MEMST_REPAIR);
	KT_EQ_STR(l.recs[0].kernel_id, "k1");
	KT_EQ_STR(l.recs[0].fix, "declare tid");
	KT_ASSERT(!l.recs[0].passed);
	KT_ASSERT(l.recs[0].time_unix_ms > 0);
	KT_EQ_INT(l.recs[1].kind, MEMST_OPT);
	KT_EQ_STR(l.recs[1].method, "vectorized_access");
	KT_ASSERT(l.recs[1].speedup == 1.4);
	KT_EQ_STR(l.recs[2].method, "kernel_fusion");
	KT_EQ_INT(l.recs[3].seq, 4);
	KT_EQ_INT(strlen(l.recs[3].fix), MEMST_MAX_FIELD_BYTES);
	KT_ASSERT(l.recs[3].passed);
	memst_list_free(&l);
	KT_OK(memst_load(s, "task-ab", &l));
	KT_EQ_INT(l.n, 1);
	memst_list_free(&l);
	/* Deleting a task leaves the other. */
	KT_OK(memst_delete_task(s, NULL, "task-a"));
	KT_OK(memst_load(s, "task-a", &l));
	KT_EQ_INT(l.n, 0);
	memst_list_free(&l);
	KT_OK(memst_load(s, "task-ab", &l));
	KT_EQ_INT(l.n, 1);
	memst_list_free(&l);
	store_close(s);
}

static void
test_repair_chains(void)
{
	memst_record recs[5];
	memst_list l = {.recs = recs, .n = 0};
	char *t;

	/* Nothing yet: nothing to say. */
	KT_OK(memst_render_repair_chain(&l, 0, &t));
	KT_EQ_STR(t, "");
	free(t);
	/* Chain 1: k1 -> k2 fails, k2 -> k3 passes. Chain 2: k5 -> k6
	 * fails (open). */
	recs[0] = repair("k1", "COMPILE_ERROR", "declare tid", "k2", false);
	recs[1] =
	    repair("k2", "WRONG_RESULT", "fix the row stride", "k3", true);
	recs[2] = attempt("k3", "vectorized_access", "k5", 1.2);
	recs[3] =
	    repair("k5", "RUNTIME_FAULT", "guard the tail loop", "k6", false);
	l.n = 4;
	KT_OK(memst_render_repair_chain(&l, 0, &t));
	KT_CONTAINS(t, "Current repair chain: 1 earlier attempt failed");
	KT_CONTAINS(t, "attempt 1 (round 1): kernel k5 failed RUNTIME_FAULT");
	KT_CONTAINS(t, "fix: guard the tail loop");
	KT_CONTAINS(t, "outcome: k6 still failing");
	KT_CONTAINS(t, "Earlier repair chains of this task:");
	KT_CONTAINS(t,
	    "- 2 attempts, ended when kernel k3 passed; last fix: "
	    "fix the row stride");
	/* The closed chain's attempts are not repeated in detail. */
	KT_ASSERT(strstr(t, "declare tid") == NULL);
	free(t);
	/* The open chain ends when a kernel passes. */
	recs[4] =
	    repair("k6", "WRONG_RESULT", "use fp32 accumulators", "k7", true);
	l.n = 5;
	KT_OK(memst_render_repair_chain(&l, 0, &t));
	KT_CONTAINS(t, "No open repair chain");
	KT_CONTAINS(t, "- 2 attempts, ended when kernel k7 passed");
	free(t);
}

static void
test_opt_history(void)
{
	memst_record recs[6];
	memst_list l = {.recs = recs, .n = 6};
	char *t;

	recs[0] = attempt("b1", "vectorized_access", "k2", 1.3);
	recs[1] = attempt("b1", "shared_memory_tiling", "k3", 0.8);
	recs[2] = repair("k3", "WRONG_RESULT", "f", "k4", true);
	recs[3] = attempt("b1", "kernel_fusion", "k5", 0);
	recs[4] = attempt("b2", "loop_unrolling", "k6", 1.05);
	recs[5] = attempt("b2", "tensor_core_mma", "k7", 2.1);
	KT_OK(memst_render_opt_history(&l, "b2", 0, &t));
	KT_CONTAINS(t, "Optimisation attempts on base b2 (2)");
	KT_CONTAINS(t, "attempt 2 (round 2): method tensor_core_mma");
	KT_CONTAINS(t, "plan: 1. load float4 2. unroll by 4");
	KT_CONTAINS(t, "result: kernel k7 OK, 2.1x vs its base");
	KT_CONTAINS(t, "Attempts on earlier base kernels (3):");
	KT_CONTAINS(
	    t, "- shared_memory_tiling on base b1: OK, 0.8x vs its base");
	KT_CONTAINS(t, "- kernel_fusion on base b1: WRONG_RESULT; not faster");
	free(t);
	KT_OK(memst_render_opt_history(&l, "b9", 0, &t));
	KT_CONTAINS(t, "No attempts on base b9 yet.");
	KT_CONTAINS(t, "Attempts on earlier base kernels (5):");
	free(t);
	l.n = 0;
	KT_OK(memst_render_opt_history(&l, "b1", 0, &t));
	KT_EQ_STR(t, "");
	free(t);
}

static void
test_bounded(void)
{
	enum { N = 300 };
	static const size_t budgets[] = {
	    0, 1, 50, 100, 400, 1000, 2000, 6000, 20000};
	memst_record *recs = calloc(N, sizeof(*recs));
	memst_list l = {.recs = recs, .n = N};
	char failure[3000], ids[N][16];
	char *t;

	/* Long, multi-byte failure texts: the cut must not split one. */
	for (size_t i = 0; i + 3 < sizeof(failure); i += 3)
		memcpy(failure + i, "\xc3\xa9x", 3);
	failure[sizeof(failure) - 1] = '\0';
	for (int i = 0; i < N; i++) {
		snprintf(ids[i], sizeof(ids[i]), "k%03d", i);
		if (i % 2 == 0) {
			recs[i] = repair(ids[i], "WRONG_RESULT", failure,
			    ids[i], i % 10 == 0);
			recs[i].failure = failure;
		} else {
			recs[i] = attempt(
			    "base", "loop_unrolling", ids[i], 1.0 + i / 1000.0);
			recs[i].plan = failure;
		}
	}
	for (size_t b = 0; b < KC_ARRAY_LEN(budgets); b++) {
		size_t max = budgets[b] ? budgets[b] : MEMST_DEFAULT_BYTES;
		KT_OK(memst_render_repair_chain(&l, budgets[b], &t));
		if (strlen(t) > max)
			KT_FAIL("repair chain: %zu bytes for a budget of %zu",
			    strlen(t), max);
		KT_ASSERT(utf8_complete(t));
		if (max >= 2000) {
			/* The newest attempt is shown; the oldest are
			 * counted, not shown. */
			KT_CONTAINS(t, "kernel k298 failed WRONG_RESULT");
			KT_CONTAINS(t, "Current repair chain: 4 earlier");
		}
		if (max >= 2000 && max <= 6000) {
			/* 30 closed chains do not fit a quarter of it. */
			KT_CONTAINS(t, "older chains omitted");
		}
		free(t);
		KT_OK(memst_render_opt_history(&l, "base", budgets[b], &t));
		if (strlen(t) > max)
			KT_FAIL("opt history: %zu bytes for a budget of %zu",
			    strlen(t), max);
		KT_ASSERT(utf8_complete(t));
		if (max >= 2000) {
			KT_CONTAINS(t, "attempt 150 (round 2)");
			KT_CONTAINS(t, "older attempts omitted)");
			KT_ASSERT(strstr(t, "attempt 1 (round 2)") == NULL);
		}
		free(t);
	}
	free(recs);
}

int
main(void)
{
	char cmd[128];

	snprintf(dir, sizeof(dir), "/tmp/kc-memst-test-XXXXXX");
	KT_ASSERT(mkdtemp(dir) != NULL);
	snprintf(db, sizeof(db), "%s/db", dir);
	KT_RUN(test_records_and_reopen);
	KT_RUN(test_repair_chains);
	KT_RUN(test_opt_history);
	KT_RUN(test_bounded);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	KT_EQ_INT(system(cmd), 0);
	return 0;
}
