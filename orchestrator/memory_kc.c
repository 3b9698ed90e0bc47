/*
 * memory_kc.c - store/memory.h's memories behind the orchestrator's memory
 * seam (orch.h orch_memory_ops): retrieval with a trace over the expert
 * knowledge and the learned statistics, learning from every optimisation
 * attempt, and short-term memory with its bounded renderings.
 *
 * Every optimisation round leaves a lesson (store/lessons.h); a retrieval
 * keeps the lessons of other tasks closest to the base kernel's evidence,
 * which the Planner is shown.
 *
 * The knowledge is loaded once from the store (imported from the shipped
 * folder when the store has none yet). Without knowledge, retrieval answers
 * no recommendation and says why in the log; the rest works.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kc_err.h"
#include "kc_log.h"
#include "lessons.h"
#include "memory.h"
#include "memory_warm.h"
#include "orch.h"

static kb *mkc_kb;
static bool mkc_tried;

static const kb *
mkc_knowledge(store *s)
{
	if (!mkc_tried) {
		mkc_tried = true;
		if (kb_ensure(s, kb_default_dir(), &mkc_kb) != 0) {
			KC_WARN(
			    "no expert knowledge (%s); planning without "
			    "recommendations (`kclaw memory import` adds it)",
			    kc_lasterr());
			mkc_kb = NULL;
		}
	}
	return mkc_kb;
}

/* The task a candidate id ("<task>-c0001") belongs to (malloc'd). */
static char *
mkc_task_of(const char *candidate_id)
{
	const char *p = strrchr(candidate_id, '-');

	if (p == NULL || p[1] != 'c')
		return strdup(candidate_id);
	return strndup(candidate_id, (size_t)(p - candidate_id));
}

/* Evidence of a base kernel: its evaluation, features and task. */
static int
mkc_evidence(const Kclaw__CandidateRecord *base, const Kclaw__TaskSpec *task,
    uint32_t sm_count, memlt_evidence **out)
{
	memlt_evidence *ev;
	int rv;

	if ((rv = memlt_evidence_new(&ev)) != 0)
		return rv;
	if (base->eval)
		rv = memlt_evidence_add_eval(ev, base->eval);
	if (rv == 0 && base->n_features)
		rv = memlt_evidence_add_features(
		    ev, base->features, base->n_features);
	/* The task's tolerance and the GPU's SM count: rules that depend on
	 * them (no lower precision for a tight rtol) can fire. */
	if (rv == 0 && task)
		rv = memlt_evidence_add_task(ev, task);
	if (rv == 0 && sm_count)
		rv = memlt_evidence_set(
		    ev, KB_SRC_RUNTIME, "sm_count", (double)sm_count);
	if (rv != 0) {
		memlt_evidence_free(ev);
		return rv;
	}
	*out = ev;
	return 0;
}

/* Keeps the lessons of other tasks nearest to the retrieval's evidence
 * for the Planner of base (and for `kclaw memory explain`). */
static int
mkc_keep_lessons(
    store *s, const Kclaw__CandidateRecord *base, const memlt_result *res)
{
	const char *id = base->candidate ? base->candidate->id : NULL;
	lesson *v = NULL;
	size_t n = 0;
	char **lines = NULL, *task;
	int rv;

	if (id == NULL || *id == '\0')
		return 0;
	if ((task = mkc_task_of(id)) == NULL)
		return KC_ENOMEM;
	rv = lessons_similar(s, res, task, LESSONS_DEFAULT_SHOWN, &v, &n);
	free(task);
	if (rv == 0 && n > 0 && (lines = calloc(n, sizeof(*lines))) == NULL)
		rv = KC_ENOMEM;
	for (size_t i = 0; rv == 0 && i < n; i++)
		rv = lessons_render(&v[i], &lines[i]);
	if (rv == 0)
		rv = lessons_used_put(s, id, lines, n);
	for (size_t i = 0; lines && i < n; i++)
		free(lines[i]);
	free(lines);
	lessons_free(v, n);
	return rv;
}

static int
mkc_retrieve(void *arg, store *s, const Kclaw__CandidateRecord *base,
    const orch_retrieve_ctx *ctx, Kclaw__Recommendation ***recs, size_t *n,
    char **signature)
{
	const kb *k = mkc_knowledge(s);
	memlt_evidence *ev = NULL;
	memlt_result res;
	int rv;

	(void)arg;
	*recs = NULL;
	*n = 0;
	*signature = NULL;
	memset(&res, 0, sizeof(res));
	if (k == NULL) {
		*signature = strdup("");
		return *signature ? 0 : KC_ENOMEM;
	}
	if ((rv = mkc_evidence(base, ctx ? ctx->task : NULL,
	         ctx ? ctx->sm_count : 0, &ev)) != 0)
		return rv;
	rv = memlt_retrieve(s, k, ev, NULL, &res);
	/* Lessons are advice: without them the Planner still plans. */
	if (rv == 0 && mkc_keep_lessons(s, base, &res) != 0) {
		KC_WARN("lessons for %s not kept: %s",
		    base->candidate ? base->candidate->id : "?", kc_lasterr());
		kc_clearerr();
	}
	if (rv == 0) {
		*signature = strdup(res.signature ? res.signature : "");
		for (size_t i = 0; i < res.nrecs; i++)
			if (res.recs[i]->signature == NULL ||
			    !*res.recs[i]->signature) {
				/* The learned statistics are keyed by it. */
				res.recs[i]->signature =
				    strdup(res.signature ? res.signature : "");
			}
		*recs = res.recs;
		*n = res.nrecs;
		res.recs = NULL;
		res.nrecs = 0;
		if (*signature == NULL)
			rv = KC_ENOMEM;
	}
	memlt_result_free(&res);
	memlt_evidence_free(ev);
	return rv;
}

/* A stored message of the orchestrator's (keys: orchestrator/orch.c). */
static int
mkc_get(store *s, store_cf cf, const char *key,
    const ProtobufCMessageDescriptor *d, ProtobufCMessage **out)
{
	void *val;
	size_t len;
	int rv;

	if ((rv = store_get(s, cf, key, strlen(key), &val, &len)) != 0)
		return kc_seterr(rv, "%s is not in the store", key);
	*out = protobuf_c_message_unpack(d, NULL, len, val);
	free(val);
	return *out ? 0 : kc_seterr(KC_EPROTO, "%s does not decode", key);
}

/* The plan's text as one line of at most LESSONS_CHANGE_BYTES. */
static char *
mkc_change(const char *plan)
{
	size_t n = 0, max = LESSONS_CHANGE_BYTES;
	char *out = malloc(max + 1);
	const char *p = plan ? plan : "";
	bool space = false;

	if (out == NULL)
		return NULL;
	for (; *p && n < max; p++) {
		if (isspace((unsigned char)*p)) {
			space = n > 0;
			continue;
		}
		if (space && n + 1 < max)
			out[n++] = ' ';
		space = false;
		out[n++] = *p;
	}
	/* Cut: never split a UTF-8 character. */
	if (*p) {
		while (n > 0 && ((unsigned char)out[n - 1] & 0xC0) == 0x80)
			n--;
		if (n > 0 && (unsigned char)out[n - 1] >= 0xC0)
			n--;
	}
	out[n] = '\0';
	return out;
}

/* The lesson of one optimisation round: the base's evidence signature and
 * fields, the method, the plan's summary, the outcome, the speedups. */
static int
mkc_lesson(
    store *s, store_batch *b, const char *task_id, const orch_memory_record *r)
{
	const kb *k = mkc_knowledge(s);
	Kclaw__CandidateRecord *base = NULL;
	Kclaw__TaskSpec *spec = NULL;
	memlt_evidence *ev = NULL;
	memlt_options opt = {.c = -1, .max_methods = 1};
	memlt_result res;
	char key[256];
	lesson l;
	int rv;

	memset(&res, 0, sizeof(res));
	memset(&l, 0, sizeof(l));
	if (k == NULL || r->base_id == NULL)
		return 0;
	snprintf(key, sizeof(key), "%s/%s", task_id, r->base_id);
	if ((rv = mkc_get(s, STORE_CF_CANDIDATES, key,
	         &kclaw__candidate_record__descriptor,
	         (ProtobufCMessage **)&base)) != 0)
		goto out;
	snprintf(key, sizeof(key), "%s/spec", task_id);
	if (mkc_get(s, STORE_CF_TASKS, key, &kclaw__task_spec__descriptor,
	        (ProtobufCMessage **)&spec) != 0)
		kc_clearerr();
	if ((rv = mkc_evidence(base, spec, 0, &ev)) != 0 ||
	    (rv = memlt_retrieve(NULL, k, ev, &opt, &res)) != 0)
		goto out;
	/* The signature retrieval used for this base, so that lessons and
	 * learned statistics agree; else this evidence's. */
	l.signature = base->n_methods && base->methods[0]->signature &&
	        *base->methods[0]->signature
	    ? base->methods[0]->signature
	    : res.signature;
	l.task_id = (char *)task_id;
	l.task_name = spec ? spec->name : NULL;
	l.round = r->round;
	l.method = (char *)r->method;
	l.status = (char *)r->status;
	l.kernel_id = (char *)r->kernel_id;
	l.speedup = r->speedup;
	l.before = base->eval ? base->eval->speedup : 0;
	l.after = l.before > 0 && r->speedup > 0 ? l.before * r->speedup : 0;
	l.fields = res.fields;
	l.nfields = res.nfields;
	if ((l.change = mkc_change(r->plan)) == NULL) {
		rv = KC_ENOMEM;
		goto out;
	}
	rv = lessons_put(s, b, &l);
out:
	free(l.change);
	memlt_result_free(&res);
	memlt_evidence_free(ev);
	if (base)
		kclaw__candidate_record__free_unpacked(base, NULL);
	if (spec)
		kclaw__task_spec__free_unpacked(spec, NULL);
	return rv;
}

static int
mkc_record(void *arg, store *s, store_batch *b, const char *task_id,
    const orch_memory_record *r)
{
	memst_record m;
	int rv;

	(void)arg;
	memset(&m, 0, sizeof(m));
	m.kind = r->kind == 1 ? MEMST_REPAIR : MEMST_OPT;
	m.round = r->round;
	m.kernel_id = (char *)r->kernel_id;
	m.status = (char *)r->status;
	m.failure = (char *)r->failure;
	m.diagnosis = (char *)r->diagnosis;
	m.fix = (char *)r->fix;
	m.result_id = (char *)r->result_id;
	m.outcome = (char *)r->outcome;
	m.passed = r->passed != 0;
	m.base_id = (char *)r->base_id;
	m.method = (char *)r->method;
	m.plan = (char *)r->plan;
	m.speedup = r->speedup;
	m.ms = r->ms;
	/* One record per finished round: the round is a distinct, ordered
	 * sequence number, and a replayed transition writes the same key. */
	if ((rv = memst_put(b, task_id, r->round, &m)) != 0)
		return rv;
	if (r->kind == 2 && r->method && *r->method &&
	    (rv = mkc_lesson(s, b, task_id, r)) != 0 && rv != KC_ENOMEM) {
		/* A lesson is advice for other tasks: never fatal. */
		KC_WARN("task %s: round %u: no lesson kept: %s", task_id,
		    r->round, kc_lasterr());
		kc_clearerr();
		rv = 0;
	}
	return rv;
}

static int
mkc_repair_chain(
    void *arg, store *s, const char *task_id, size_t max, char **out)
{
	(void)arg;
	return memst_repair_chain_text(s, task_id, max, out);
}

static int
mkc_opt_history(void *arg, store *s, const char *task_id, const char *base_id,
    size_t max, char **out)
{
	(void)arg;
	return memst_opt_history_text(s, task_id, base_id, max, out);
}

static int
mkc_learn(void *arg, store *s, store_batch *b, const char *signature,
    const char *method, const char *attempt_id, int correct, double speedup)
{
	(void)arg;
	return memlt_learn(
	    s, b, signature, method, attempt_id, correct != 0, speedup);
}

/* The Memory rpc: memory_serve on the orchestrator's store. An import
 * changes the knowledge: retrieval reloads it. */
static int
mkc_query(void *arg, store *s, const Kclaw__MemoryRequest *req,
    Kclaw__MemoryResponse **resp)
{
	int rv;

	(void)arg;
	if ((*resp = malloc(sizeof(**resp))) == NULL)
		return KC_ENOMEM;
	kclaw__memory_response__init(*resp);
	rv = memory_serve(s, mkc_knowledge(s), req, *resp);
	if (rv == 0 && req->query && strcmp(req->query, "import") == 0) {
		kb_free(mkc_kb);
		mkc_kb = NULL;
		mkc_tried = false;
	}
	return rv;
}

static int
mkc_lessons(void *arg, store *s, const char *task_id, const char *base_id,
    char ***lines, size_t *n)
{
	int rv;

	(void)arg;
	(void)task_id;
	rv = lessons_used_get(s, base_id, lines, n);
	if (rv == KC_ENOENT) {
		kc_clearerr();
		rv = 0;
	}
	return rv;
}

/* ------------------------------------------------------ diverse seeds */

/* A method's family: its first tag ("memory", "compute", ...). */
static const char *
mkc_family(const kb_method *m)
{
	return m && m->ntags ? m->tags[0] : "";
}

/* Takes method m for the next seed unless its family is taken already. */
static void
mkc_take(const kb_method *m, uint32_t k, char (*out)[ORCH_STRATEGY_MAX],
    const char **fam, size_t *n)
{
	if (m == NULL || *n >= k)
		return;
	for (size_t i = 0; i < *n; i++)
		if (strcmp(fam[i], mkc_family(m)) == 0)
			return;
	fam[*n] = mkc_family(m);
	snprintf(out[*n], ORCH_STRATEGY_MAX, "%s (%s, %s family): %s", m->title,
	    m->name, mkc_family(m), m->intent ? m->intent : "");
	(*n)++;
}

/*
 * The seeds' strategies: the methods retrieval recommends for the task
 * alone (no kernel yet: its tolerance and shapes are the evidence), then
 * the knowledge's methods in their authored order, one per family, so no
 * two seeds share a family.
 */
static int
mkc_seed_strategies(void *arg, store *s, const Kclaw__TaskSpec *task,
    uint32_t k, char (*out)[ORCH_STRATEGY_MAX], size_t *n)
{
	const kb *kn = mkc_knowledge(s);
	const char *fam[ORCH_MAX_SEEDS];
	memlt_evidence *ev = NULL;
	memlt_result res;
	int rv;

	(void)arg;
	*n = 0;
	if (kn == NULL)
		return 0;
	if (k > ORCH_MAX_SEEDS)
		k = ORCH_MAX_SEEDS;
	memset(&res, 0, sizeof(res));
	if ((rv = memlt_evidence_new(&ev)) != 0)
		return rv;
	if (task)
		rv = memlt_evidence_add_task(ev, task);
	/* Without a kernel few rules fire; what fires ranks first. */
	if (rv == 0 && memlt_retrieve(s, kn, ev, NULL, &res) == 0)
		for (size_t i = 0; i < res.nrecs; i++)
			mkc_take(kb_method_find(kn, res.recs[i]->method), k,
			    out, fam, n);
	kc_clearerr();
	for (size_t i = 0; rv == 0 && i < kn->nmethods; i++)
		mkc_take(&kn->methods[i], k, out, fam, n);
	memlt_result_free(&res);
	memlt_evidence_free(ev);
	return rv;
}

/* ------------------------------------------------------- warm starts */

static int
mkc_warm_start(void *arg, store *s, const char *task_id,
    const Kclaw__TaskSpec *task, Kclaw__Candidate **best, char **from)
{
	double d;

	(void)arg;
	return memwarm_nearest(s, task_id, task, best, from, &d);
}

static int
mkc_solved(void *arg, store *s, store_batch *b, const char *task_id,
    const Kclaw__TaskSpec *task, const Kclaw__Candidate *best, double speedup)
{
	(void)arg;
	return memwarm_put(s, b, task_id, task, best, speedup);
}

static const orch_memory_ops mkc_ops = {
    .name = "kc_memory",
    .retrieve = mkc_retrieve,
    .record = mkc_record,
    .repair_chain = mkc_repair_chain,
    .opt_history = mkc_opt_history,
    .learn = mkc_learn,
    .query = mkc_query,
    .lessons = mkc_lessons,
    .seed_strategies = mkc_seed_strategies,
    .warm_start = mkc_warm_start,
    .solved = mkc_solved,
};

const orch_memory_ops *
orch_memory_kc(void)
{
	return &mkc_ops;
}
