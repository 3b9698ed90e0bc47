/*
 * serve_test.c - memory_serve, what the orchestrator answers the API's
 * Memory rpc with: every query on a real store, responses freed the way
 * the API frees them (the sanitizers check ownership), and bad requests
 * refused with a reason.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kc_err.h"
#include "kc_test.h"
#include "kc_util.h"
#include "memory.h"

static store *s;

/* Serves one request; returns the response (caller frees) or NULL with
 * *rv set. */
static Kclaw__MemoryResponse *
serve(const char *query, const char *cand, const char *task, const char *data,
    int *rv)
{
	Kclaw__MemoryRequest req = KCLAW__MEMORY_REQUEST__INIT;
	Kclaw__MemoryResponse *resp = malloc(sizeof(*resp));

	KT_ASSERT(resp != NULL);
	kclaw__memory_response__init(resp);
	req.query = (char *)query;
	req.candidate_id = (char *)(cand ? cand : "");
	req.task_id = (char *)(task ? task : "");
	if (data != NULL) {
		req.data.data = (uint8_t *)data;
		req.data.len = strlen(data);
	}
	*rv = memory_serve(s, NULL, &req, resp);
	if (*rv != 0) {
		kclaw__memory_response__free_unpacked(resp, NULL);
		return NULL;
	}
	return resp;
}

static Kclaw__MemoryResponse *
serve_ok(
    const char *query, const char *cand, const char *task, const char *data)
{
	int rv;
	Kclaw__MemoryResponse *r = serve(query, cand, task, data, &rv);

	if (r == NULL)
		KT_FAIL("memory_serve(%s): %d %s", query, rv, kc_lasterr());
	return r;
}

static void
put_candidate(const char *id)
{
	Kclaw__CandidateRecord rec = KCLAW__CANDIDATE_RECORD__INIT;
	Kclaw__Candidate cand = KCLAW__CANDIDATE__INIT;
	Kclaw__EvalResult eval = KCLAW__EVAL_RESULT__INIT;
	Kclaw__KernelResources k = KCLAW__KERNEL_RESOURCES__INIT;
	Kclaw__KernelResources *ks[] = {&k};
	uint8_t buf[1024];
	size_t n;

	cand.id = (char *)id;
	k.registers = 255;
	k.spill_bytes = 96;
	eval.kernels = ks;
	eval.n_kernels = 1;
	eval.arch = "sm_90";
	rec.candidate = &cand;
	rec.eval = &eval;
	n = kclaw__candidate_record__pack(&rec, buf);
	KT_OK(store_put(s, STORE_CF_CANDIDATES, id, strlen(id), buf, n, true));
}

int
main(void)
{
	char dir[64], db[128], kdir[1024], cmd[128];
	const char *src = getenv("KCLAW_SRC");
	Kclaw__MemoryResponse *r;
	memst_record rec = {.kind = MEMST_OPT,
	    .base_id = "b1",
	    .method = "split_k",
	    .kernel_id = "k2",
	    .status = "OK",
	    .speedup = 1.7};
	int rv;

	snprintf(dir, sizeof(dir), "/tmp/kc-serve-test-XXXXXX");
	KT_ASSERT(mkdtemp(dir) != NULL);
	snprintf(db, sizeof(db), "%s/db", dir);
	snprintf(kdir, sizeof(kdir), "%s/store/knowledge", src ? src : ".");
	KT_OK(store_open(&s, db));

	/* Before an import: a clear not-found. */
	KT_ASSERT(serve("methods", NULL, NULL, NULL, &rv) == NULL);
	KT_EQ_INT(rv, KC_ENOENT);
	KT_CONTAINS(kc_lasterr(), "kclaw memory import");

	r = serve_ok("import", NULL, NULL, kdir);
	KT_CONTAINS(r->text, "as knowledge version 1");
	kclaw__memory_response__free_unpacked(r, NULL);

	r = serve_ok("methods", NULL, NULL, NULL);
	KT_CONTAINS(r->text, "tensor_core_mma");
	KT_ASSERT(r->data.len > 1000);
	KT_ASSERT(memchr(r->data.data, '{', r->data.len) == r->data.data);
	kclaw__memory_response__free_unpacked(r, NULL);

	KT_OK(memlt_learn(s, NULL, "register_spill@sm90",
	    "reduce_register_pressure", "c9", true, 1.4));
	r = serve_ok("stats", NULL, NULL, "register_spill@sm90");
	KT_CONTAINS(r->text, "reduce_register_pressure");
	KT_ASSERT(
	    strstr((const char *)r->data.data, "\"best_speedup\":1.4") != NULL);
	kclaw__memory_response__free_unpacked(r, NULL);

	/* Explain a stored candidate: recommendations move into the
	 * response with their trace. */
	put_candidate("cand-1");
	r = serve_ok("explain", "cand-1", NULL, NULL);
	KT_CONTAINS(r->text, "candidate cand-1");
	KT_CONTAINS(r->text, "* register_spill");
	KT_ASSERT(r->n_recommendations >= 3);
	KT_EQ_STR(r->recommendations[0]->signature, "register_spill@sm90");
	{
		bool seen = false;
		for (size_t i = 0; i < r->n_recommendations; i++)
			if (strcmp(r->recommendations[i]->method,
			        "reduce_register_pressure") == 0) {
				KT_EQ_INT(r->recommendations[i]->attempts, 1);
				KT_EQ_INT(r->recommendations[i]->successes, 1);
				seen = true;
			}
		KT_ASSERT(seen);
	}
	KT_ASSERT(r->data.len > 0);
	kclaw__memory_response__free_unpacked(r, NULL);
	/* ... or evidence given as JSON. */
	r = serve_ok("explain", NULL, NULL,
	    "{\"metrics\": {\"sm_throughput\": 90, \"dram_throughput\": 10},"
	    " \"runtime\": {\"duration_us\": 900}}");
	KT_CONTAINS(r->text, "primary: compute_bound");
	kclaw__memory_response__free_unpacked(r, NULL);

	/* Short-term memory of a task. */
	KT_OK(memst_append(s, "task-9", &rec, NULL));
	r = serve_ok("short_term", "b1", "task-9", NULL);
	KT_CONTAINS(r->text, "Optimisation attempts on base b1 (1)");
	KT_CONTAINS(r->text, "method split_k");
	kclaw__memory_response__free_unpacked(r, NULL);

	/* Export to a folder, then bad requests. */
	snprintf(cmd, sizeof(cmd), "%s/exp", dir);
	r = serve_ok("export", NULL, NULL, cmd);
	KT_CONTAINS(r->text, "exported knowledge version 1");
	kclaw__memory_response__free_unpacked(r, NULL);
	KT_ASSERT(serve("export", NULL, NULL, NULL, &rv) == NULL);
	KT_EQ_INT(rv, KC_EINVAL);
	KT_ASSERT(serve("explain", NULL, NULL, NULL, &rv) == NULL);
	KT_EQ_INT(rv, KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "candidate_id or evidence JSON");
	KT_ASSERT(serve("explain", "nope", NULL, NULL, &rv) == NULL);
	KT_EQ_INT(rv, KC_ENOENT);
	KT_ASSERT(serve("explain", NULL, NULL, "{bad", &rv) == NULL);
	KT_EQ_INT(rv, KC_EINVAL);
	KT_ASSERT(serve("short_term", NULL, NULL, NULL, &rv) == NULL);
	KT_EQ_INT(rv, KC_EINVAL);
	KT_ASSERT(serve("forget", NULL, NULL, NULL, &rv) == NULL);
	KT_EQ_INT(rv, KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "unknown memory query 'forget'");
	KT_ASSERT(serve(NULL, NULL, NULL, NULL, &rv) == NULL);
	KT_EQ_INT(rv, KC_EINVAL);

	store_close(s);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	KT_EQ_INT(system(cmd), 0);
	return 0;
}
