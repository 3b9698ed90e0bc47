/*
 * store_fixture.c - puts a store into the states the CLI test needs, the
 * way the orchestrator would: `candidate DB ID` stores an evaluated
 * CandidateRecord, `learn DB` records optimisation attempts,
 * `short-term DB TASK` records a repair and an optimisation attempt, and
 * `hold DB READY_FILE` keeps the store open (as a running orchestrator
 * does) until stdin closes or the process is killed.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "kc_err.h"
#include "kc_util.h"
#include "kclaw.pb-c.h"
#include "memory.h"

static int
fixture_candidate(store *s, const char *id)
{
	Kclaw__CandidateRecord rec = KCLAW__CANDIDATE_RECORD__INIT;
	Kclaw__Candidate cand = KCLAW__CANDIDATE__INIT;
	Kclaw__EvalResult eval = KCLAW__EVAL_RESULT__INIT;
	Kclaw__Metric m1 = KCLAW__METRIC__INIT, m2 = KCLAW__METRIC__INIT;
	Kclaw__Metric *ms[] = {&m1, &m2};
	Kclaw__Feature f = KCLAW__FEATURE__INIT;
	Kclaw__Feature *fs[] = {&f};
	Kclaw__Recommendation r = KCLAW__RECOMMENDATION__INIT;
	Kclaw__Recommendation *rs[] = {&r};
	Kclaw__Timing t = KCLAW__TIMING__INIT;
	uint8_t buf[4096];
	char key[128];
	size_t n;

	cand.id = (char *)id;
	cand.source = "extern \"C\" __global__ void k() {}";
	eval.status = KCLAW__EVAL_STATUS__OK;
	m1.name = "dram_throughput_pct";
	m1.value = 91;
	m2.name = "sm_throughput_pct";
	m2.value = 18;
	eval.metrics = ms;
	eval.n_metrics = 2;
	t.median_ms = 0.8;
	eval.timing = &t;
	eval.arch = "sm_80";
	f.name = "vector_loads";
	f.value = 0;
	r.method = "vectorized_access";
	rec.candidate = &cand;
	rec.eval = &eval;
	rec.features = fs;
	rec.n_features = 1;
	rec.methods = rs;
	rec.n_methods = 1;
	n = kclaw__candidate_record__get_packed_size(&rec);
	if (n > sizeof(buf))
		return KC_ENOSPC;
	kclaw__candidate_record__pack(&rec, buf);
	snprintf(key, sizeof(key), "task-1/%s", id);
	return store_put(
	    s, STORE_CF_CANDIDATES, key, strlen(key), buf, n, true);
}

static int
fixture_learn(store *s)
{
	int rv = 0;

	rv = rv ? rv
	        : memlt_learn(s, NULL, "memory_bandwidth@sm80",
	              "vectorized_access", "c1", true, 1.5);
	rv = rv ? rv
	        : memlt_learn(s, NULL, "memory_bandwidth@sm80",
	              "vectorized_access", "c2", false, 0);
	rv = rv ? rv
	        : memlt_learn(s, NULL, "compute_bound@sm90", "tensor_core_mma",
	              "c3", true, 3.0);
	return rv;
}

static int
fixture_short_term(store *s, const char *task)
{
	memst_record r = {.kind = MEMST_REPAIR,
	    .round = 1,
	    .kernel_id = "k1",
	    .status = "COMPILE_ERROR",
	    .failure = "identifier \"tid\" is undefined",
	    .diagnosis = "tid is never declared",
	    .fix = "declare tid from blockIdx and threadIdx",
	    .result_id = "k2",
	    .outcome = "k2 compiles and is correct",
	    .passed = true};
	memst_record o = {.kind = MEMST_OPT,
	    .round = 2,
	    .base_id = "k2",
	    .method = "vectorized_access",
	    .plan = "load float4",
	    .kernel_id = "k3",
	    .status = "OK",
	    .outcome = "faster",
	    .speedup = 1.8,
	    .ms = 0.2};
	int rv = memst_append(s, task, &r, NULL);

	return rv ? rv : memst_append(s, task, &o, NULL);
}

int
main(int argc, char **argv)
{
	store *s;
	int rv;

	if (argc < 3) {
		fprintf(stderr,
		    "usage: store_fixture candidate DB ID | learn DB | "
		    "short-term DB TASK | hold DB READY_FILE\n");
		return 2;
	}
	if ((rv = store_open(&s, argv[2])) != 0) {
		fprintf(stderr, "store_fixture: %s\n", kc_lasterr());
		return 1;
	}
	if (strcmp(argv[1], "candidate") == 0 && argc == 4)
		rv = fixture_candidate(s, argv[3]);
	else if (strcmp(argv[1], "learn") == 0)
		rv = fixture_learn(s);
	else if (strcmp(argv[1], "short-term") == 0 && argc == 4)
		rv = fixture_short_term(s, argv[3]);
	else if (strcmp(argv[1], "hold") == 0 && argc == 4) {
		char c;
		rv = kc_write_file(argv[3], "ready\n", 6);
		/* Held until the test closes our stdin or kills us. */
		while (rv == 0 && read(0, &c, 1) > 0)
			;
	} else {
		rv = KC_EINVAL;
	}
	if (rv != 0)
		fprintf(stderr, "store_fixture %s: %s (%s)\n", argv[1],
		    kc_strerror(rv), kc_lasterr());
	store_close(s);
	return rv == 0 ? 0 : 1;
}
