/*
 * lessons_test.c - learned experience across tasks: a lesson written by
 * one task's optimisation round (through the orchestrator's memory seam,
 * orch_memory_kc) is retrieved for a second task's base kernel, ranked by
 * its evidence over a dissimilar one, never shown to its own task, and
 * appears in the second task's Planner prompt; lessons are bounded per
 * signature; export and import carry them to another store; `kclaw memory
 * explain` shows the lessons a retrieval used.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"
#include "kc_err.h"
#include "kc_test.h"
#include "kc_util.h"
#include "lessons.h"
#include "memory.h"
#include "orch.h"

static char dir[64], db[128];

/* A base kernel's record: its evaluation (DRAM-bound or compute-bound)
 * and its rule features. */
static void
put_base(store *s, const char *task, const char *name, bool memory_bound)
{
	Kclaw__CandidateRecord rec = KCLAW__CANDIDATE_RECORD__INIT;
	Kclaw__Candidate c = KCLAW__CANDIDATE__INIT;
	Kclaw__EvalResult e = KCLAW__EVAL_RESULT__INIT;
	Kclaw__TaskSpec spec = KCLAW__TASK_SPEC__INIT;
	Kclaw__Metric m[3] = {
	    KCLAW__METRIC__INIT, KCLAW__METRIC__INIT, KCLAW__METRIC__INIT};
	Kclaw__Metric *mp[3] = {&m[0], &m[1], &m[2]};
	Kclaw__Feature f[2] = {KCLAW__FEATURE__INIT, KCLAW__FEATURE__INIT};
	Kclaw__Feature *fp[2] = {&f[0], &f[1]};
	char id[64], key[128];
	uint8_t *buf;
	size_t len;

	snprintf(id, sizeof(id), "%s-c0001", task);
	c.id = id;
	c.source = "__global__ void k() {}";
	e.status = KCLAW__EVAL_STATUS__OK;
	e.speedup = 1.5;
	e.arch = "sm_90";
	m[0].name = "dram_throughput_pct";
	m[0].value = memory_bound ? 88 : 12;
	m[1].name = "sm_throughput_pct";
	m[1].value = memory_bound ? 20 : 91;
	m[2].name = "achieved_occupancy_pct";
	m[2].value = memory_bound ? 70 : 40;
	e.metrics = mp;
	e.n_metrics = 3;
	f[0].name = "vector_loads";
	f[0].value = 0;
	f[1].name = "is_matmul";
	f[1].value = memory_bound ? 0 : 1;
	rec.candidate = &c;
	rec.eval = &e;
	rec.features = fp;
	rec.n_features = 2;
	len = kclaw__candidate_record__get_packed_size(&rec);
	KT_ASSERT((buf = malloc(len)) != NULL);
	kclaw__candidate_record__pack(&rec, buf);
	snprintf(key, sizeof(key), "%s/%s", task, id);
	KT_OK(store_put(
	    s, STORE_CF_CANDIDATES, key, strlen(key), buf, len, false));
	free(buf);
	spec.name = (char *)name;
	len = kclaw__task_spec__get_packed_size(&spec);
	KT_ASSERT((buf = malloc(len)) != NULL);
	kclaw__task_spec__pack(&spec, buf);
	snprintf(key, sizeof(key), "%s/spec", task);
	KT_OK(store_put(s, STORE_CF_TASKS, key, strlen(key), buf, len, false));
	free(buf);
}

/* Round 2 of task: method on its base, committed as the orchestrator
 * commits a finished round. */
static void
finish_round(store *s, const char *task, const char *method, double speedup)
{
	const orch_memory_ops *m = orch_memory_kc();
	char base[64], kid[64];
	orch_memory_record r = {0};
	store_batch *b;

	snprintf(base, sizeof(base), "%s-c0001", task);
	snprintf(kid, sizeof(kid), "%s-c0002", task);
	r.kind = 2;
	r.round = 2;
	r.kernel_id = kid;
	r.status = "OK";
	r.base_id = base;
	r.method = method;
	r.plan = "1. load float4\n   per thread\n2. unroll the row loop by 4";
	r.speedup = speedup;
	r.ms = 0.5;
	KT_OK(store_batch_new(&b));
	KT_OK(m->record(NULL, s, b, task, &r));
	KT_OK(store_batch_commit(s, b, true));
	store_batch_free(b);
}

static Kclaw__CandidateRecord *
get_base(store *s, const char *task)
{
	char key[128];
	void *val;
	size_t len;
	Kclaw__CandidateRecord *rec;

	snprintf(key, sizeof(key), "%s/%s-c0001", task, task);
	KT_OK(store_get(s, STORE_CF_CANDIDATES, key, strlen(key), &val, &len));
	rec = kclaw__candidate_record__unpack(NULL, len, val);
	free(val);
	KT_ASSERT(rec != NULL);
	return rec;
}

/* What the Planner of task's base is shown. */
static char *
planner_prompt(store *s, const char *task, char ***lines, size_t *n)
{
	const orch_memory_ops *m = orch_memory_kc();
	Kclaw__CandidateRecord *base = get_base(s, task);
	Kclaw__Recommendation **recs = NULL;
	Kclaw__TaskSpec spec = KCLAW__TASK_SPEC__INIT;
	Kclaw__AgentJob job = KCLAW__AGENT_JOB__INIT;
	orch_retrieve_ctx ctx = {.task = &spec, .sm_count = 132};
	agent_vars vars = {0};
	char *sig = NULL, *prompt = NULL, prompts[1024];
	size_t nrecs = 0;

	KT_OK(m->retrieve(NULL, s, base, &ctx, &recs, &nrecs, &sig));
	KT_ASSERT(nrecs > 0);
	KT_OK(m->lessons(NULL, s, task, base->candidate->id, lines, n));
	spec.name = (char *)task;
	job.task = &spec;
	job.role = KCLAW__ROLE__PLANNER;
	job.base_kernel = base->candidate;
	job.base_eval = base->eval;
	job.methods = recs;
	job.n_methods = nrecs;
	job.lessons = *lines;
	job.n_lessons = *n;
	KT_OK(agent_job_vars(&job, &vars));
	snprintf(prompts, sizeof(prompts), "%s/agents/prompts",
	    getenv("KCLAW_SRC") ? getenv("KCLAW_SRC") : ".");
	KT_OK(agent_render_file(prompts, "planner.md", &vars, &prompt));
	agent_vars_free(&vars);
	for (size_t i = 0; i < nrecs; i++)
		kclaw__recommendation__free_unpacked(recs[i], NULL);
	free(recs);
	free(sig);
	kclaw__candidate_record__free_unpacked(base, NULL);
	return prompt;
}

static void
test_across_tasks(void)
{
	store *s;
	char **lines = NULL, *prompt, *text;
	size_t n = 0;

	KT_OK(store_open(&s, db));
	put_base(s, "ta", "softmax_rows", true);
	put_base(s, "tb", "layernorm_rows", true);
	put_base(s, "tc", "gemm_tiles", false);
	finish_round(s, "ta", "vectorized_access", 1.4);
	finish_round(s, "tc", "tensor_cores", 2.0);

	/* Task b sees a's lesson first (same evidence), then c's. */
	prompt = planner_prompt(s, "tb", &lines, &n);
	KT_EQ_INT((int)n, 2);
	KT_CONTAINS(lines[0], "task softmax_rows");
	KT_CONTAINS(lines[0], "vectorized_access -> OK, 1.400x over its base");
	KT_CONTAINS(lines[0], "(1.500x -> 2.100x the reference)");
	KT_CONTAINS(lines[0], "changed: 1. load float4 per thread 2. unroll");
	KT_CONTAINS(lines[1], "task gemm_tiles");
	KT_CONTAINS(prompt, "## Lessons from other tasks");
	KT_CONTAINS(prompt, "- task softmax_rows");
	free(prompt);
	free(lines);

	/* Task a is not shown its own lesson. */
	prompt = planner_prompt(s, "ta", &lines, &n);
	for (size_t i = 0; i < n; i++)
		KT_ASSERT(strstr(lines[i], "softmax_rows") == NULL);
	KT_CONTAINS(lines[0], "task gemm_tiles");
	free(prompt);
	free(lines);

	/* explain shows the lessons that b's retrieval kept. */
	KT_OK(memory_cmd_explain_candidate(s, NULL, "tb-c0001", false, &text));
	KT_CONTAINS(text, "lessons from other tasks (shown to the Planner):");
	KT_CONTAINS(text, "1. task softmax_rows");
	free(text);
	KT_OK(memory_cmd_explain_candidate(s, NULL, "tb-c0001", true, &text));
	KT_CONTAINS(text, "\"lessons_shown\":true");
	free(text);
	store_close(s);
}

/* Without a planned retrieval, explain ranks the lessons now. */
static void
test_explain_evidence(void)
{
	store *s;
	char *text;

	KT_OK(store_open(&s, db));
	KT_OK(memory_cmd_explain_evidence(s, NULL,
	    "{\"metrics\": {\"dram_throughput_pct\": 90, "
	    "\"sm_throughput_pct\": 18}}",
	    false, &text));
	KT_CONTAINS(text, "closest to this evidence now");
	KT_CONTAINS(text, "1. task softmax_rows");
	free(text);
	store_close(s);
}

static void
test_bound_and_round_trip(void)
{
	store *s, *s2;
	lesson *v;
	size_t n, nsig = 0, nimp = 0;
	char out[128], db2[160], *text;
	FILE *f;

	KT_OK(store_open(&s, db));
	for (uint32_t i = 0; i < LESSONS_MAX_PER_SIGNATURE + 6; i++) {
		lesson l = {.signature = "bound@sm90",
		    .task_id = "tbound",
		    .task_name = "bound",
		    .round = i + 1,
		    .method = "loop_unrolling",
		    .status = "OK",
		    .speedup = 1.1,
		    .unix_ms = 1000 + i};
		KT_OK(lessons_put(s, NULL, &l));
	}
	KT_OK(lessons_list(s, &v, &n));
	for (size_t i = 0; i < n; i++)
		if (strcmp(v[i].signature, "bound@sm90") == 0) {
			nsig++;
			KT_ASSERT(v[i].round > 6); /* the oldest went */
		}
	KT_EQ_INT((int)nsig, LESSONS_MAX_PER_SIGNATURE);
	lessons_free(v, n);

	snprintf(out, sizeof(out), "%s/export", dir);
	KT_OK(kc_mkdirs(out, 0755));
	KT_OK(memory_cmd_export(s, out, false, &text));
	KT_CONTAINS(text, "lessons to");
	free(text);
	KT_OK(lessons_list(s, &v, &n));
	store_close(s);

	snprintf(db2, sizeof(db2), "%s/db2", dir);
	KT_OK(store_open(&s2, db2));
	KT_OK(memory_cmd_import(s2, out, false, &text));
	KT_CONTAINS(text, "lessons from");
	free(text);
	{
		lesson *w;
		size_t nw;
		KT_OK(lessons_list(s2, &w, &nw));
		KT_EQ_INT((int)nw, (int)n);
		for (size_t i = 0; i < n; i++) {
			KT_EQ_STR(w[i].task_id, v[i].task_id);
			KT_EQ_STR(w[i].method, v[i].method);
			KT_EQ_STR(w[i].change, v[i].change);
			KT_EQ_INT((int)w[i].nfields, (int)v[i].nfields);
			KT_ASSERT(w[i].unix_ms == v[i].unix_ms);
		}
		lessons_free(w, nw);
	}
	lessons_free(v, n);

	/* A malformed file imports nothing and says where. */
	snprintf(db2, sizeof(db2), "%s/%s", out, LESSONS_FILE);
	KT_ASSERT((f = fopen(db2, "w")) != NULL);
	fputs("{\"lessons\": [{\"signature\": \"x\", \"task_id\": \"t\"}]}", f);
	fclose(f);
	KT_EQ_INT(lessons_import(s2, out, &nimp), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "lessons[0]");
	KT_EQ_INT((int)nimp, 0);
	store_close(s2);
}

int
main(void)
{
	char cmd[128];

	snprintf(dir, sizeof(dir), "/tmp/kc-lessons-test-XXXXXX");
	KT_ASSERT(mkdtemp(dir) != NULL);
	snprintf(db, sizeof(db), "%s/db", dir);
	KT_RUN(test_across_tasks);
	KT_RUN(test_explain_evidence);
	KT_RUN(test_bound_and_round_trip);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	KT_ASSERT(system(cmd) == 0);
	return 0;
}
