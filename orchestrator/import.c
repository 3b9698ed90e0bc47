/*
 * import.c - a task's tensors enter the store off the loop.
 *
 * Reading, hashing and storing a bundle's .npy files takes time in
 * proportion to the task's size (seconds for a few GB), and the loop must
 * never block on that (DESIGN.md "Pitfalls already known"): every client
 * would take a blocked loop for a dead orchestrator. So Submit only stores
 * the task in IMPORTING with its spec as submitted, and answers; this
 * thread takes the tasks to import in order, reads each one's stored spec,
 * puts every tensor into the blob column family (and the run folder's
 * cache, which evaluations read), and hands the loop its progress and, at
 * the end, the spec with its blobs or the reason it failed, as inputs. The
 * loop commits the spec with the IMPORTED transition. The thread touches
 * no task: only the store (thread safe) and its own queue.
 *
 * A restarted kclawd finds the task still IMPORTING and imports it again
 * from the start; blobs already stored are kept (content-addressed).
 *
 * Every file is opened with the check Submit made (orch_data_open: the
 * bundle roots, never the home's own files, a regular .npy file) and read
 * from that descriptor: a link swapped in after Submit, or before a
 * restart, imports nothing from outside the roots.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blobs.h"
#include "kc_err.h"
#include "kc_log.h"
#include "kc_util.h"
#include "orch_int.h"

struct orch_import_req {
	struct orch_task *task;
	char id[ORCH_ID_LEN + 1];
	struct orch_import_req *next;
};

struct orch_importer {
	orch *o;
	nng_thread *thr;
	nng_mtx *mtx;
	nng_cv *cv;
	struct orch_import_req *head, *tail;
	struct orch_task *current; /* being imported */
	bool cancel;               /* current is no longer awaited */
	bool stop;
	char cache_dir[KC_PATH_MAX];
};

/* "1.2 GB", "340 MB", "12 KB". */
static void
import_size(uint64_t b, char *out, size_t n)
{
	if (b >= (uint64_t)1 << 30)
		snprintf(out, n, "%.1f GB", (double)b / (1u << 30));
	else if (b >= (uint64_t)1 << 20)
		snprintf(out, n, "%.0f MB", (double)b / (1u << 20));
	else
		snprintf(out, n, "%.0f KB", (double)b / (1u << 10));
}

static void
import_post(struct orch_importer *imp, struct orch_task *t,
    enum orch_msg_kind kind, Kclaw__TaskSpec *spec, const char *text)
{
	struct orch_msg *m = calloc(1, sizeof(*m));

	if (m == NULL || (text && (m->text = strdup(text)) == NULL)) {
		free(m);
		if (spec)
			kclaw__task_spec__free_unpacked(spec, NULL);
		return;
	}
	m->kind = kind;
	m->task = t;
	m->spec = spec;
	orch_post(imp->o, m);
}

/* After each tensor: tell the loop, and stop when the task is no longer
 * awaited or the orchestrator stops. */
static int
import_progress(void *arg, const orch_blobs_progress *p)
{
	struct orch_importer *imp = arg;
	char done[32], total[32], text[160];
	bool stop;

	nng_mtx_lock(imp->mtx);
	stop = imp->stop || imp->cancel;
	nng_mtx_unlock(imp->mtx);
	if (stop)
		return KC_ECANCELED;
	import_size(p->bytes_done, done, sizeof(done));
	import_size(p->bytes, total, sizeof(total));
	snprintf(text, sizeof(text), "%u of %u tensor files, %s of %s", p->done,
	    p->tensors, done, total);
	import_post(imp, imp->current, ORCH_MSG_IMPORT_PROGRESS, NULL, text);
	return 0;
}

static void
import_one(struct orch_importer *imp, struct orch_import_req *req)
{
	Kclaw__TaskSpec *spec = NULL;
	uint64_t t0 = kc_mono_ms();
	int rv;

	kc_clearerr();
	if ((rv = orch_spec_get(imp->o, req->id, &spec)) == 0)
		rv = orch_blobs_import_checked(imp->o->db, spec, imp->cache_dir,
		    &imp->o->opt.cfg, import_progress, imp);
	if (rv == KC_ECANCELED) {
		KC_INFO("task %s: import abandoned", req->id);
		if (spec)
			kclaw__task_spec__free_unpacked(spec, NULL);
		return;
	}
	if (rv != 0) {
		char text[600];
		KC_WARN("task %s: import failed: %s", req->id, kc_lasterr());
		snprintf(text, sizeof(text), "%s", kc_lasterr());
		if (spec)
			kclaw__task_spec__free_unpacked(spec, NULL);
		import_post(imp, req->task, ORCH_MSG_IMPORTED, NULL,
		    *text ? text : "the tensors could not be imported");
		return;
	}
	KC_INFO("task %s: tensors imported in %llu ms", req->id,
	    (unsigned long long)(kc_mono_ms() - t0));
	import_post(imp, req->task, ORCH_MSG_IMPORTED, spec, NULL);
}

static void
import_main(void *arg)
{
	struct orch_importer *imp = arg;
	struct orch_import_req *req;

	nng_mtx_lock(imp->mtx);
	for (;;) {
		while (!imp->stop && imp->head == NULL)
			nng_cv_wait(imp->cv);
		if (imp->stop)
			break;
		req = imp->head;
		if ((imp->head = req->next) == NULL)
			imp->tail = NULL;
		imp->current = req->task;
		imp->cancel = false;
		nng_mtx_unlock(imp->mtx);
		import_one(imp, req);
		free(req);
		nng_mtx_lock(imp->mtx);
		imp->current = NULL;
	}
	nng_mtx_unlock(imp->mtx);
}

int
orch_import_open(orch *o)
{
	struct orch_importer *imp = calloc(1, sizeof(*imp));
	int nrv;

	if (imp == NULL)
		return KC_ENOMEM;
	imp->o = o;
	snprintf(imp->cache_dir, sizeof(imp->cache_dir), "%s/blobs",
	    o->opt.cfg.run_dir);
	if ((nrv = nng_mtx_alloc(&imp->mtx)) != 0 ||
	    (nrv = nng_cv_alloc(&imp->cv, imp->mtx)) != 0 ||
	    (nrv = nng_thread_create(&imp->thr, import_main, imp)) != 0) {
		if (imp->cv)
			nng_cv_free(imp->cv);
		if (imp->mtx)
			nng_mtx_free(imp->mtx);
		free(imp);
		return kc_seterr(
		    KC_ENOMEM, "orchestrator: importer: %s", nng_strerror(nrv));
	}
	o->importer = imp;
	return 0;
}

void
orch_import_close(orch *o)
{
	struct orch_importer *imp = o->importer;
	struct orch_import_req *req, *next;

	if (imp == NULL)
		return;
	nng_mtx_lock(imp->mtx);
	imp->stop = true;
	nng_cv_wake(imp->cv);
	nng_mtx_unlock(imp->mtx);
	nng_thread_destroy(imp->thr); /* joins */
	for (req = imp->head; req; req = next) {
		next = req->next;
		free(req);
	}
	nng_cv_free(imp->cv);
	nng_mtx_free(imp->mtx);
	free(imp);
	o->importer = NULL;
}

int
orch_import_queue(orch *o, struct orch_task *t)
{
	struct orch_importer *imp = o->importer;
	struct orch_import_req *req = calloc(1, sizeof(*req));

	if (req == NULL)
		return KC_ENOMEM;
	req->task = t;
	kc_strlcpy(req->id, t->id, sizeof(req->id));
	nng_mtx_lock(imp->mtx);
	if (imp->tail)
		imp->tail->next = req;
	else
		imp->head = req;
	imp->tail = req;
	nng_cv_wake(imp->cv);
	nng_mtx_unlock(imp->mtx);
	return 0;
}

void
orch_import_cancel(orch *o, struct orch_task *t)
{
	struct orch_importer *imp = o->importer;
	struct orch_import_req **p, *req;

	if (imp == NULL)
		return;
	nng_mtx_lock(imp->mtx);
	if (imp->current == t)
		imp->cancel = true;
	for (p = &imp->head; *p;) {
		if ((*p)->task != t) {
			p = &(*p)->next;
			continue;
		}
		req = *p;
		*p = req->next;
		free(req);
	}
	imp->tail = NULL;
	for (req = imp->head; req; req = req->next)
		imp->tail = req;
	nng_mtx_unlock(imp->mtx);
}
