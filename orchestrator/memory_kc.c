/*
 * memory_kc.c - store/memory.h's memories behind the orchestrator's memory
 * seam (orch.h orch_memory_ops): retrieval with a trace over the expert
 * knowledge and the learned statistics, learning from every optimisation
 * attempt, and short-term memory with its bounded renderings.
 *
 * The knowledge is loaded once from the store (imported from the shipped
 * folder when the store has none yet). Without knowledge, retrieval answers
 * no recommendation and says why in the log; the rest works.
 */
#include <stdlib.h>
#include <string.h>

#include "kc_err.h"
#include "kc_log.h"
#include "memory.h"
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
	if ((rv = memlt_evidence_new(&ev)) != 0)
		return rv;
	if (base->eval)
		rv = memlt_evidence_add_eval(ev, base->eval);
	if (rv == 0 && base->n_features)
		rv = memlt_evidence_add_features(
		    ev, base->features, base->n_features);
	/* The task's tolerance and the GPU's SM count: rules that depend on
	 * them (no lower precision for a tight rtol) can fire. */
	if (rv == 0 && ctx && ctx->task)
		rv = memlt_evidence_add_task(ev, ctx->task);
	if (rv == 0 && ctx && ctx->sm_count)
		rv = memlt_evidence_set(
		    ev, KB_SRC_RUNTIME, "sm_count", (double)ctx->sm_count);
	if (rv == 0)
		rv = memlt_retrieve(s, k, ev, NULL, &res);
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

static int
mkc_record(void *arg, store *s, store_batch *b, const char *task_id,
    const orch_memory_record *r)
{
	memst_record m;

	(void)arg;
	(void)s;
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
	return memst_put(b, task_id, r->round, &m);
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

static const orch_memory_ops mkc_ops = {
    .name = "kc_memory",
    .retrieve = mkc_retrieve,
    .record = mkc_record,
    .repair_chain = mkc_repair_chain,
    .opt_history = mkc_opt_history,
    .learn = mkc_learn,
    .query = mkc_query,
};

const orch_memory_ops *
orch_memory_kc(void)
{
	return &mkc_ops;
}
