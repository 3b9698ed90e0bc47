/*
 * ref_torch.c - the `torch` reference kind: a PyTorch problem run live by
 * the reference process (torchref.c), its buffers mapped into the child.
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

/*
 * A torch task runs against PyTorch in another process (torchref.c,
 * docs/torchref.md). That process allocates the inputs, parameters and
 * outputs and exports them by CUDA IPC handles, which the child maps: the
 * candidate runs on them. The expected outputs, the weights' private copy
 * and the generated inputs' copy stay in its own context, out of every
 * candidate's reach; it compares the outputs there, after the candidate
 * finished, and answers with the figures.
 */
#define TORCH_CALL_MS 300000
#define TORCH_BASELINE_MS 900000
#define TORCH_TIMED_SERIAL 1000
/* Timed runs whose inputs are staged while the candidate compiles
 * (torch_prefetch), after the trials' and the warm-up runs'. */
#define TORCH_STAGED_TIMED 4

/* The torch reference's state: the reference process's buffers, mapped
 * (one mapping per allocation). */
typedef struct {
	CUdeviceptr mapped[EV_MAX_TENSORS];
	CUipcMemHandle mapped_handle[EV_MAX_TENSORS];
	size_t nmapped;
	/* What the evaluation cost on the reference's side: the replies'
	 * gpu_ms (its draws, forwards and comparisons, by its events), the
	 * time waited for them, the requests. */
	double gpu_ms, wait_ms;
	unsigned calls;
	/* Serials the reference process drew ahead (torch_staged). */
	unsigned staged;
	/* The eager baseline's reply, timed during the compile (the
	 * prefetch's last request), until the baselines phase uses it. */
	cJSON *baseline;
	/* The reference process's peak GPU memory, the largest any reply
	 * reported. */
	double peak_bytes;
	/* The same for the timing's runs alone (their inputs and checks). */
	int in_timed;
	double timed_gpu_ms, timed_wait_ms;
	unsigned timed_inputs;
} torch_state;

static torch_state *
torch_st(const ev *e)
{
	return e->ref_state;
}

/* A status for a failed call: NO_TORCH where PyTorch or its GPU is
 * missing, else INTERNAL_ERROR (the sandbox's side, retried). */
static int
torch_fail(ev *e, int rv, const cJSON *reply, const char *what)
{
	const char *code = NULL, *err = NULL;

	if (reply != NULL) {
		code = cJSON_GetStringValue(cJSON_GetObjectItem(reply, "code"));
		err = cJSON_GetStringValue(cJSON_GetObjectItem(reply, "error"));
	}
	if (rv == KC_ENOENT || rv == KC_ENODEV ||
	    (code != NULL && strcmp(code, "NO_TORCH") == 0)) {
		sbx_result_status(e->res, KCLAW__EVAL_STATUS__NO_TORCH,
		    "%s: %s; a torch task needs Python with PyTorch on the "
		    "sandbox's machine (KCLAW_PYTHON names the interpreter), "
		    "or "
		    "convert the problem with kb2bundle --tensors",
		    what, err ? err : kc_lasterr());
		return -1;
	}
	sbx_result_status(e->res, EV_INTERNAL, "%s: %s%s%s", what,
	    code ? code : "", code ? ": " : "", err ? err : kc_lasterr());
	return -1;
}

static double torch_num(const cJSON *o, const char *key);

/* What a request of this evaluation cost, from t0 (its send, or the start
 * of the wait for its reply) to now: its wait, its reply's gpu_ms. */
static void
torch_account(ev *e, uint64_t t0, int rv, const cJSON *reply, const char *what)
{
	torch_state *st = torch_st(e);
	double gpu = rv == 0 ? torch_num(reply, "gpu_ms") : 0,
	       wait = (double)(kc_mono_ns() - t0) / 1e6;

	ev_trace(e, t0, "the reference's %s (GPU %.3f ms)", what, gpu);
	if (st == NULL)
		return;
	st->wait_ms += wait;
	st->gpu_ms += gpu;
	st->calls++;
	if (st->in_timed) {
		st->timed_wait_ms += wait;
		st->timed_gpu_ms += gpu;
	}
}

/* A request's reply accounted (torch_account): 0 with *reply holding an
 * "ok": true reply, else -1 with the result filled and *reply NULL. */
static int
torch_replied(ev *e, uint64_t t0, int rv, const char *what, cJSON **reply)
{
	torch_account(e, t0, rv, *reply, what);
	if (rv != 0 || !cJSON_IsTrue(cJSON_GetObjectItem(*reply, "ok"))) {
		torch_fail(e, rv, *reply, what);
		cJSON_Delete(*reply);
		*reply = NULL;
		return -1;
	}
	return 0;
}

/* The reference process's client, made on first use. */
static sbx_torchref *
torch_client(ev *e)
{
	ev_gpu *g = e->g;

	if (g->tr == NULL && sbx_torchref_new(&g->tr, NULL, NULL) != 0) {
		sbx_result_status(e->res, EV_INTERNAL, "out of memory");
		return NULL;
	}
	return g->tr;
}

/* One request; 0 with *reply holding an "ok": true reply, else -1 with the
 * result filled. */
static int
torch_call(ev *e, cJSON *req, int timeout_ms, const char *what, cJSON **reply)
{
	sbx_torchref *tr = torch_client(e);
	uint64_t t0;
	int rv;

	*reply = NULL;
	if (tr == NULL) {
		cJSON_Delete(req);
		return -1;
	}
	t0 = kc_mono_ns();
	rv = sbx_torchref_call(tr, req, timeout_ms, reply);
	cJSON_Delete(req);
	return torch_replied(e, t0, rv, what, reply);
}

static cJSON *
torch_req(const char *op)
{
	cJSON *r = cJSON_CreateObject();

	if (r != NULL)
		cJSON_AddStringToObject(r, "op", op);
	return r;
}

static double
torch_num(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItem(o, key);

	return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static int
torch_hex(const char *hex, unsigned char *out, size_t n)
{
	if (hex == NULL || strlen(hex) != 2 * n)
		return -1;
	for (size_t i = 0; i < n; i++) {
		unsigned v;
		if (sscanf(hex + 2 * i, "%2x", &v) != 1)
			return -1;
		out[i] = (unsigned char)v;
	}
	return 0;
}

/* The request that loads the task in the reference process (NULL: out of
 * memory). */
static cJSON *
torch_load_req(const ev *e)
{
	const Kclaw__Reference *ref = e->task->reference;
	cJSON *req = torch_req("load"), *ts;
	char key[65];

	if (req == NULL ||
	    (ts = cJSON_AddArrayToObject(req, "tensors")) == NULL)
		goto nomem;
	kc_sha256_hex(ref->torch_source, strlen(ref->torch_source), key);
	cJSON_AddStringToObject(req, "key", key);
	cJSON_AddStringToObject(req, "source", ref->torch_source);
	cJSON_AddNumberToObject(
	    req, "init_seed", (double)(ref->init_seed & ((1ull << 45) - 1)));
	cJSON_AddNumberToObject(req, "device", 0);
	for (size_t t = 0; t < e->task->n_tensors; t++) {
		const Kclaw__TensorSpec *s = e->task->tensors[t];
		cJSON *o = cJSON_CreateObject(), *shape;
		if (o == NULL || !cJSON_AddItemToArray(ts, o))
			goto nomem;
		cJSON_AddStringToObject(o, "name", s->name);
		cJSON_AddStringToObject(
		    o, "kind", kc_tensor_kind_name(s->kind));
		cJSON_AddStringToObject(o, "dtype", kc_dtype_name(s->dtype));
		if (s->source_name && *s->source_name)
			cJSON_AddStringToObject(
			    o, "source_name", s->source_name);
		if ((shape = cJSON_AddArrayToObject(o, "shape")) == NULL)
			goto nomem;
		for (size_t d = 0; d < s->n_shape; d++)
			cJSON_AddItemToArray(
			    shape, cJSON_CreateNumber((double)s->shape[d]));
	}
	return req;
nomem:
	cJSON_Delete(req);
	return NULL;
}

/* Whether the reply to what the prefetch sent as its nth request (1: the
 * load, 2: trial 0's inputs) is the next one to read. */
static int
torch_prefetched(const ev *e, int nth, const char *op)
{
	const char *p = e->g->tr ? sbx_torchref_pending(e->g->tr) : NULL;

	return e->ref_sent >= nth && p != NULL && strcmp(p, op) == 0;
}

/* Loads the task in the reference process (the reply to torch_prefetch's
 * load, or the load asked now) and maps its buffers. */
static int
torch_prepare(ev *e)
{
	cJSON *reply, *bufs;
	ev_gpu *g = e->g;
	int rv;

	if (torch_prefetched(e, 1, "load")) {
		uint64_t t0 = kc_mono_ns();
		rv = sbx_torchref_receive(g->tr, &reply);
		rv = torch_replied(
		    e, t0, rv, "loading the torch reference", &reply);
	} else {
		cJSON *req = torch_load_req(e);
		if (req == NULL) {
			sbx_result_status(e->res, EV_INTERNAL, "out of memory");
			return -1;
		}
		rv = torch_call(e, req, TORCH_CALL_MS,
		    "loading the torch reference", &reply);
	}
	if (rv != 0)
		return -1;
	bufs = cJSON_GetObjectItem(reply, "buffers");
	for (size_t t = 0, b = 0; t < e->nt; t++) {
		const Kclaw__TensorSpec *s = e->task->tensors[t];
		const cJSON *jb;
		CUipcMemHandle h;
		CUdeviceptr base = 0;
		size_t j;
		if (s->kind == KCLAW__TENSOR_KIND__SCALAR)
			continue;
		jb = cJSON_GetArrayItem(bufs, (int)b++);
		if (jb == NULL ||
		    torch_hex(
		        cJSON_GetStringValue(cJSON_GetObjectItem(jb, "handle")),
		        (unsigned char *)h.reserved, sizeof(h.reserved)) != 0 ||
		    (size_t)torch_num(jb, "bytes") != e->tbytes[t]) {
			cJSON_Delete(reply);
			sbx_result_status(e->res, EV_INTERNAL,
			    "the torch reference's buffer for '%s' is missing "
			    "or has the wrong size (want %zu bytes)",
			    s->name, e->tbytes[t]);
			return -1;
		}
		/* One mapping per allocation: several tensors may share one. */
		for (j = 0; j < torch_st(e)->nmapped; j++)
			if (memcmp(&torch_st(e)->mapped_handle[j], &h,
			        sizeof(h)) == 0)
				base = torch_st(e)->mapped[j];
		if (base == 0) {
			CUresult r = g->cu.cuIpcOpenMemHandle(
			    &base, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
			if (r != CUDA_SUCCESS) {
				cJSON_Delete(reply);
				return ev_cu(e, r, EV_INTERNAL,
				    "mapping the torch reference's buffers");
			}
			torch_st(e)->mapped[torch_st(e)->nmapped] = base;
			torch_st(e)->mapped_handle[torch_st(e)->nmapped++] = h;
		}
		e->tdev[t] = base + (CUdeviceptr)torch_num(jb, "offset");
	}
	cJSON_Delete(reply);
	return 0;
}

/* A seed for input set `serial`, salted per evaluation; 45 bits, which
 * cJSON prints as an integer (JSON numbers are doubles). */
static double
torch_seed(const ev *e, unsigned serial)
{
	uint64_t s = (e->task->seed ^ e->salt) * 0x9e3779b97f4a7c15ull ^
	    ((uint64_t)serial + 1) * 0xd1b54a32d192ed03ull;

	return (double)(s & ((1ull << 45) - 1));
}

/* The request for input set `serial` (NULL: out of memory). */
static cJSON *
torch_inputs_req(const ev *e, unsigned serial, unsigned variant, int keep)
{
	cJSON *req = torch_req("inputs");

	if (req == NULL)
		return NULL;
	cJSON_AddNumberToObject(req, "serial", serial);
	cJSON_AddNumberToObject(req, "seed", torch_seed(e, serial));
	cJSON_AddNumberToObject(req, "variant", variant);
	cJSON_AddBoolToObject(req, "keep", keep);
	return req;
}

/* The request that has the reference process do inputs' work for
 * `serial` ahead (NULL: out of memory). */
static cJSON *
torch_stage_req(const ev *e, unsigned serial, unsigned variant, int keep)
{
	cJSON *req = torch_inputs_req(e, serial, variant, keep);

	if (req != NULL)
		cJSON_ReplaceItemInObject(
		    req, "op", cJSON_CreateString("stage"));
	return req;
}

/* The request that times PyTorch in mode (eager, compile, max-autotune),
 * at precision (NULL: the task's; else a math mode of
 * sbx_torchref_precision), by the candidate's protocol (NULL: out of
 * memory). It depends on nothing the candidate does. */
static cJSON *
torch_baseline_req(const ev *e, const char *mode, const char *precision)
{
	const Kclaw__EvalOptions *o = e->req->options;
	cJSON *req = torch_req("baseline");

	if (req == NULL)
		return NULL;
	cJSON_AddStringToObject(req, "mode", mode);
	if (precision != NULL)
		cJSON_AddStringToObject(req, "precision", precision);
	cJSON_AddNumberToObject(req, "warmup", e->warmup);
	cJSON_AddNumberToObject(req, "iters", e->iters);
	/* The candidate's protocol: adaptive unless a count was asked for. */
	if (e->adaptive) {
		cJSON_AddNumberToObject(req, "min_iters", EV_ADAPT_MIN);
		cJSON_AddNumberToObject(req, "batch", EV_ADAPT_BATCH);
		cJSON_AddNumberToObject(req, "ci", EV_ADAPT_CI);
		cJSON_AddNumberToObject(req, "budget_ms", EV_ADAPT_BUDGET_MS);
	}
	cJSON_AddBoolToObject(req, "flush", !(o && o->no_l2_flush));
	cJSON_AddNumberToObject(req, "seed", torch_seed(e, 999999));
	return req;
}

/* The reference process's peak GPU memory, where a reply says it. */
static void
torch_note_peak(ev *e, const cJSON *reply)
{
	torch_state *st = torch_st(e);
	double peak = torch_num(reply, "peak_bytes");

	if (st != NULL && peak > st->peak_bytes)
		st->peak_bytes = peak;
}

/* The trials a torch evaluation runs: at least three distributions. */
static unsigned
torch_trials(const ev *e)
{
	return e->trials < EV_MIN_TRIALS ? EV_MIN_TRIALS : e->trials;
}

/*
 * The stage requests for the serials the evaluation will ask for after
 * trial 0, in the order it will: the other trials (their outputs kept),
 * then the runs, whose ids count from 0 (e->fresh_serial): the warm-up
 * runs and the first TORCH_STAGED_TIMED timed ones. As many as the
 * pipeline holds.
 */
static void
torch_send_stages(ev *e, sbx_torchref *tr)
{
	unsigned trials = torch_trials(e),
	         timed = e->iters < TORCH_STAGED_TIMED ? e->iters
	                                               : TORCH_STAGED_TIMED,
	         runs = e->warmup + timed;

	/* One place stays for the baseline (torch_prefetch). */
	for (unsigned i = 1;
	     i < trials + runs && e->ref_sent < SBX_TORCHREF_PIPELINE - 1;
	     i++) {
		unsigned id = i - trials;
		cJSON *req = i < trials
		    ? torch_stage_req(e, i, ev_variant(i), 1)
		    : torch_stage_req(e, TORCH_TIMED_SERIAL + id,
		          ev_variant(EV_MAX_TRIALS + id), 0);
		int rv = req != NULL ? sbx_torchref_send(tr, req, TORCH_CALL_MS)
		                     : KC_ENOMEM;
		cJSON_Delete(req);
		if (rv != 0)
			return;
		e->ref_sent++;
	}
}

/*
 * Before the candidate is compiled: the load sent, then trial 0's inputs,
 * so the reference process loads the task (24.9 ms median for a
 * KernelBench Level 1 problem it had not loaded), draws trial 0's inputs
 * and runs its forward while NVRTC compiles (35-220 ms). Nothing runs in
 * the shared buffers before trial 0, so its inputs can be made this early.
 * Then the later serials as stage requests (torch_send_stages): their
 * draws and forwards run on the GPU while the CPU compiles, into the
 * reference's own tensors, as many as its budget holds. torch_prepare
 * reads the load's reply, trial 0's torch_inputs the next and then the
 * stages' (torch_staged), before the candidate first runs. Last goes the
 * eager baseline (torch_baseline_req: it needs nothing of the candidate),
 * timed while NVRTC still compiles or right after; torch_settle waits for
 * it before the sandbox uses the GPU, so no work of the sandbox's runs
 * beside its timed runs. Where they cannot be sent, those ask again and
 * say why. (Replies left over from an evaluation that ended early were
 * dropped before this one began: ev_run_protocol.)
 */
static void
torch_prefetch(ev *e)
{
	sbx_torchref *tr = torch_client(e);
	const Kclaw__EvalOptions *o = e->req->options;
	cJSON *load = tr ? torch_load_req(e) : NULL,
	      *in = load ? torch_inputs_req(e, 0, ev_variant(0), 1) : NULL,
	      *base;

	if (load != NULL && sbx_torchref_send(tr, load, TORCH_CALL_MS) == 0) {
		e->ref_sent = 1;
		if (in != NULL && sbx_torchref_send(tr, in, TORCH_CALL_MS) == 0)
			e->ref_sent = 2;
	}
	cJSON_Delete(load);
	cJSON_Delete(in);
	if (e->ref_sent != 2 || (o != NULL && o->reference_only))
		return;
	torch_send_stages(e, tr);
	/* Its draws go to tensors of its own: the shared buffers hold trial
	 * 0's inputs. Only where NVRTC will run: with the compile cached
	 * there is nothing to fill, and those private draws would cost a
	 * second copy of the inputs for nothing. */
	if (e->compile_cached)
		return;
	if ((base = torch_baseline_req(e, "eager", NULL)) != NULL &&
	    cJSON_AddBoolToObject(base, "keep_inputs", 1) != NULL &&
	    sbx_torchref_send(tr, base, TORCH_BASELINE_MS) == 0)
		e->ref_sent++;
	cJSON_Delete(base);
}

/* After the compile: every prefetched request answered (the process is
 * idle), the replies kept for their readers in order. */
static void
torch_settle(ev *e)
{
	uint64_t t0 = kc_mono_ns();

	if (e->g->tr == NULL || e->ref_sent == 0)
		return;
	sbx_torchref_settle(e->g->tr);
	e->ref_settle_ms += (double)(kc_mono_ns() - t0) / 1e6;
	ev_trace(e, t0, "waiting for the reference's prefetched work");
}

/*
 * The stages' replies (torch_prefetch), read before the candidate first
 * runs: the reference process answers in order and each reply comes after
 * its GPU work is done, so once the last is read nothing it staged can
 * run beside the candidate, and every staged forward ran on the parameters
 * as loaded, before any candidate could write them. A serial it did not
 * stage (no room, or an error it will report again) is drawn when asked.
 */
static int
torch_staged(ev *e)
{
	sbx_torchref *tr = e->g->tr;
	const char *p;

	while (tr != NULL && (p = sbx_torchref_pending(tr)) != NULL &&
	    strcmp(p, "stage") == 0) {
		uint64_t t0 = kc_mono_ns();
		cJSON *reply = NULL;
		int rv = sbx_torchref_receive(tr, &reply);
		torch_account(e, t0, rv, reply, "staging inputs");
		if (rv != 0) {
			torch_fail(e, rv, NULL, "staging inputs");
			return -1;
		}
		if (!cJSON_IsTrue(cJSON_GetObjectItem(reply, "ok")))
			KC_DEBUG("the torch reference staged nothing: %s",
			    cJSON_GetStringValue(
			        cJSON_GetObjectItem(reply, "error")));
		else if (cJSON_IsTrue(cJSON_GetObjectItem(reply, "staged")) &&
		    torch_st(e) != NULL)
			torch_st(e)->staged++;
		cJSON_Delete(reply);
	}
	/* The eager baseline's, kept for the baselines phase (accounted
	 * there); a failed one is asked again then. */
	if (tr != NULL && (p = sbx_torchref_pending(tr)) != NULL &&
	    strcmp(p, "baseline") == 0) {
		cJSON *reply = NULL;
		if (sbx_torchref_receive(tr, &reply) == 0 &&
		    torch_st(e) != NULL && torch_st(e)->baseline == NULL)
			torch_st(e)->baseline = reply;
		else
			cJSON_Delete(reply);
	}
	return 0;
}

/* Input set `serial` made in the shared buffers, with its expected
 * outputs (trial 0's the reply to the prefetch's request, when it went
 * out). */
static int
torch_inputs(ev *e, unsigned serial, unsigned variant, int keep)
{
	cJSON *req, *reply, *outs;
	const char *what = "the torch reference's inputs";

	/* The previous run must be over before its buffers are refilled. */
	EV_CU(e, e->g->cu.cuStreamSynchronize(e->g->stream),
	    KCLAW__EVAL_STATUS__LAUNCH_ERROR, "running the candidate");
	if (serial == 0 && torch_prefetched(e, 2, "inputs")) {
		uint64_t t0 = kc_mono_ns();
		int rv = sbx_torchref_receive(e->g->tr, &reply);
		e->ref_sent = 0;
		if (torch_replied(e, t0, rv, what, &reply) != 0)
			return -1;
		if (torch_staged(e) != 0) {
			cJSON_Delete(reply);
			return -1;
		}
	} else if ((req = torch_inputs_req(e, serial, variant, keep)) == NULL) {
		sbx_result_status(e->res, EV_INTERNAL, "out of memory");
		return -1;
	} else if (torch_call(e, req, TORCH_CALL_MS, what, &reply) != 0) {
		return -1;
	}
	outs = cJSON_GetObjectItem(reply, "outputs");
	for (size_t t = 0; keep && t < e->nt && t < EV_MAX_TENSORS; t++) {
		const cJSON *o;
		if (e->task->tensors[t]->kind != KCLAW__TENSOR_KIND__OUTPUT)
			continue;
		cJSON_ArrayForEach(o, outs)
		{
			const char *n = cJSON_GetStringValue(
			    cJSON_GetObjectItem(o, "name"));
			double var = torch_num(o, "var_norm"),
			       norm = torch_num(o, "exp_norm");
			if (n == NULL ||
			    strcmp(n, e->task->tensors[t]->name) != 0 ||
			    serial != 1 ||
			    !cJSON_IsNumber(cJSON_GetObjectItem(o, "var_norm")))
				continue;
			e->var_rel[t] = norm > 0 ? var / norm : var;
			e->var_known[t] = 1;
		}
	}
	cJSON_Delete(reply);
	return 0;
}

static int
torch_trial_inputs(ev *e, unsigned k)
{
	return torch_inputs(e, k, ev_variant(k), 1);
}

static int
torch_run_inputs(ev *e, unsigned k, unsigned id)
{
	torch_state *st = torch_st(e);
	int rv;

	(void)k;
	st->in_timed = 1;
	st->timed_inputs++;
	rv = torch_inputs(
	    e, TORCH_TIMED_SERIAL + id, ev_variant(EV_MAX_TRIALS + id), 0);
	st->in_timed = 0;
	return rv;
}

/* The reference process compares input set serial's outputs; 0, 1 (wrong:
 * result filled) or -1. */
static int
torch_check(ev *e, unsigned serial, unsigned trial, const char *when, int timed)
{
	Kclaw__Tolerance dflt;
	const Kclaw__Tolerance *tol = ev_tolerance(e, &dflt);
	cJSON *req = torch_req("check"), *reply, *outs;
	int bad = 0;

	EV_CU(e, e->g->cu.cuStreamSynchronize(e->g->stream),
	    KCLAW__EVAL_STATUS__LAUNCH_ERROR, "running the candidate");
	if (req == NULL) {
		sbx_result_status(e->res, EV_INTERNAL, "out of memory");
		return -1;
	}
	cJSON_AddNumberToObject(req, "serial", serial);
	cJSON_AddNumberToObject(req, "atol", tol->atol);
	cJSON_AddNumberToObject(req, "rtol", tol->rtol);
	cJSON_AddNumberToObject(req, "max_rel_norm", tol->max_rel_norm);
	/* The child keeps its own copy for the determinism check. */
	cJSON_AddBoolToObject(req, "hold", 0);
	cJSON_AddBoolToObject(req, "compare_held", 0);
	if (torch_call(e, req, TORCH_CALL_MS, "the torch reference's check",
	        &reply) != 0)
		return -1;
	torch_note_peak(e, reply);
	outs = cJSON_GetObjectItem(reply, "outputs");
	for (size_t t = 0; t < e->nt && !bad; t++) {
		const Kclaw__TensorSpec *ts = e->task->tensors[t];
		const cJSON *o, *found = NULL;
		sbx_cmp c;
		double en;
		if (ts->kind != KCLAW__TENSOR_KIND__OUTPUT)
			continue;
		cJSON_ArrayForEach(o, outs)
		{
			const char *n = cJSON_GetStringValue(
			    cJSON_GetObjectItem(o, "name"));
			if (n != NULL && strcmp(n, ts->name) == 0)
				found = o;
		}
		if (found == NULL) {
			cJSON_Delete(reply);
			sbx_result_status(e->res, EV_INTERNAL,
			    "the torch reference did not check output '%s'",
			    ts->name);
			return -1;
		}
		memset(&c, 0, sizeof(c));
		c.bad_count = (uint64_t)torch_num(found, "bad");
		c.nan_count = (uint64_t)torch_num(found, "nan");
		c.worst = (size_t)torch_num(found, "worst");
		c.expected = torch_num(found, "expected");
		c.got = torch_num(found, "got");
		c.max_abs_err = torch_num(found, "max_abs");
		c.max_rel_err = torch_num(found, "max_rel");
		en = torch_num(found, "exp_norm");
		c.rel_norm = en > 0 ? torch_num(found, "err_norm") / en
		                    : torch_num(found, "err_norm");
		c.ok = c.bad_count == 0 && c.nan_count == 0 &&
		    (tol->max_rel_norm <= 0 || c.rel_norm <= tol->max_rel_norm);
		ev_note_error(e, t, c.max_abs_err, c.max_rel_err, c.rel_norm);
		if (!c.ok) {
			bad = 1;
			ev_wrong(e, t, trial, &c, when);
		} else if (timed &&
		    ev_check_variation(e, t, c.rel_norm, when)) {
			bad = 1;
		}
	}
	cJSON_Delete(reply);
	return bad;
}

static int
torch_trial_check(ev *e, unsigned k, const char *when)
{
	return torch_check(e, k, k, when, 0);
}

static int
torch_run_check(ev *e, unsigned k, unsigned id, unsigned slot)
{
	char when[96];

	torch_state *st = torch_st(e);
	int rv;

	(void)k;
	snprintf(when, sizeof(when),
	    "timed run %u, fresh inputs of distribution %u", slot,
	    ev_variant(EV_MAX_TRIALS + id));
	st->in_timed = 1;
	rv = torch_check(
	    e, TORCH_TIMED_SERIAL + id, EV_MAX_TRIALS + slot, when, 1);
	st->in_timed = 0;
	return rv;
}

/* A figure of PyTorch's timed runs as the reported time (sbx_sample_ms). */
static double
torch_sample(const ev *e, double ms)
{
	return sbx_sample_ms(
	    ms, 1, e->g->launch_cost_ms, e->g->launch_floor_ms);
}

/* The eager baseline the prefetch asked for (torch_staged kept its
 * reply): 0 with *reply holding it, accounted, else -1 (none, or it
 * failed: the caller asks again, and that call's failure is the one
 * reported). */
static int
torch_prefetched_baseline(ev *e, const char *what, cJSON **reply)
{
	torch_state *st = torch_st(e);

	if (st == NULL || st->baseline == NULL)
		return -1;
	*reply = st->baseline;
	st->baseline = NULL;
	torch_account(e, kc_mono_ns(), 0, *reply, what);
	if (cJSON_IsTrue(cJSON_GetObjectItem(*reply, "ok")))
		return 0;
	cJSON_Delete(*reply);
	*reply = NULL;
	return -1;
}

/* PyTorch timed in mode at precision (torch_baseline_req): the eager one
 * at the task's precision is the prefetch's where it went out. */
static int
torch_timing(ev *e, const char *mode, const char *precision,
    Kclaw__Timing **out, double *setup_s)
{
	const Kclaw__EvalOptions *o = e->req->options;
	int eager = strcmp(mode, "eager") == 0 && precision == NULL;
	cJSON *req, *reply = NULL;
	Kclaw__Timing *t;
	char what[96];

	snprintf(what, sizeof(what), "timing PyTorch (%s%s%s)", mode,
	    precision ? ", " : "", precision ? precision : "");
	if ((t = malloc(sizeof(*t))) == NULL) {
		sbx_result_status(e->res, EV_INTERNAL, "out of memory");
		return -1;
	}
	if (!eager || torch_prefetched_baseline(e, what, &reply) != 0) {
		if ((req = torch_baseline_req(e, mode, precision)) == NULL) {
			free(t);
			sbx_result_status(e->res, EV_INTERNAL, "out of memory");
			return -1;
		}
		if (torch_call(e, req, TORCH_BASELINE_MS, what, &reply) != 0) {
			free(t);
			return -1;
		}
	}
	kclaw__timing__init(t);
	/* PyTorch's runs are timed by events as the candidate's are, one pair
	 * per run: the same cost comes off (a shift, so the spread stays). */
	t->median_ms = torch_sample(e, torch_num(reply, "median_ms"));
	t->mean_ms = torch_sample(e, torch_num(reply, "mean_ms"));
	t->min_ms = torch_sample(e, torch_num(reply, "min_ms"));
	t->max_ms = torch_sample(e, torch_num(reply, "max_ms"));
	t->stddev_ms = torch_num(reply, "stddev_ms");
	t->iterations = (uint32_t)torch_num(reply, "iterations");
	t->l2_flushed = !(o && o->no_l2_flush);
	*setup_s = torch_num(reply, "setup_s");
	if (eager)
		sbx_result_add_metric(e->res, "torch.baseline_runs",
		    (double)e->warmup + t->iterations, "runs");
	torch_note_peak(e, reply);
	cJSON_Delete(reply);
	*out = t;
	return 0;
}

/*
 * A candidate below the task's precision (what the precision scan finds):
 * PyTorch eager timed in that math mode too, so its speedup can be read at
 * matched precision (speedup_matched_precision). Its failure loses only
 * that number.
 */
static void
torch_matched_precision(ev *e)
{
	Kclaw__EvalResult *res = e->res;
	Kclaw__EvalStatus st = res->status;
	Kclaw__Timing *t = NULL;
	const char *prec;
	char what[512], metric[64], *msg;
	double setup = 0;

	if (e->req->candidate == NULL || res->timing == NULL ||
	    res->timing->median_ms <= 0 ||
	    !sbx_precision_scan(e->req->candidate->source, e->cand.plan,
	        e->task, what, sizeof(what)) ||
	    (prec = sbx_torchref_precision(what)) == NULL)
		return;
	msg = res->message ? strdup(res->message) : NULL;
	if (torch_timing(e, "eager", prec, &t, &setup) != 0) {
		ev_warn(e,
		    "PyTorch could not be timed at the candidate's "
		    "precision (%s): %s",
		    prec, res->message ? res->message : "");
		sbx_result_status(res, st, "%s", msg ? msg : "");
		free(msg);
		return;
	}
	free(msg);
	res->speedup_matched_precision = t->median_ms / res->timing->median_ms;
	snprintf(metric, sizeof(metric), "torch.matched_precision.%s_ms", prec);
	sbx_result_add_metric(res, metric, t->median_ms, "ms");
	free(t); /* no field of a Timing owns memory */
}

/* PyTorch eager is the baseline; torch.compile is timed too, and its
 * failure loses only its number. */
static int
torch_baseline(ev *e)
{
	Kclaw__EvalResult *res = e->res;
	const char *mode = e->task->reference->torch_compile_mode &&
	        *e->task->reference->torch_compile_mode
	    ? e->task->reference->torch_compile_mode
	    : "compile";
	double setup = 0;
	Kclaw__EvalStatus st = res->status;
	char *msg = res->message ? strdup(res->message) : NULL;

	if (torch_timing(e, "eager", NULL, &res->baseline, &setup) != 0) {
		free(msg);
		return -1;
	}
	res->reference_ms = res->baseline->median_ms;
	torch_matched_precision(e);
	if (e->req->options && e->req->options->no_compile_baseline) {
		free(msg);
		return 0;
	}
	if (torch_timing(e, mode, NULL, &res->torch_compile, &setup) != 0) {
		ev_warn(e, "torch.compile could not be timed: %s",
		    res->message ? res->message : "");
		sbx_result_status(res, st, "%s", msg ? msg : "");
	} else {
		res->torch_compile_ms = res->torch_compile->median_ms;
		sbx_result_add_metric(res, "torch.compile_setup_s", setup, "s");
	}
	free(msg);
	return 0;
}

static int
torch_usable(const Kclaw__Reference *ref)
{
	return ref->kind == KCLAW__REFERENCE__KIND__TORCH &&
	    ref->torch_source != NULL;
}

static int
torch_setup(ev *e)
{
	if ((e->ref_state = calloc(1, sizeof(torch_state))) == NULL) {
		sbx_result_status(e->res, EV_INTERNAL, "out of memory");
		return -1;
	}
	e->trials = torch_trials(e);
	return 0;
}

/* The profiled runs read the inputs the reference process made last. */
static int
torch_profile_inputs(ev *e)
{
	(void)e;
	return 0;
}

/* Two input sets of the task's own distribution: the reference process
 * measures the outputs' variation on them. */
static int
torch_sample_inputs(ev *e)
{
	return torch_trial_inputs(e, 0) != 0 || torch_trial_inputs(e, 1) != 0
	    ? -1
	    : 0;
}

static void
torch_release(ev *e)
{
	torch_state *st = e->ref_state;

	if (st == NULL)
		return;
	cJSON_Delete(st->baseline);
	if (st->peak_bytes > 0)
		sbx_result_add_metric(
		    e->res, "torch.peak_gpu_bytes", st->peak_bytes, "bytes");
	if (st->calls > 0) {
		sbx_result_add_metric(
		    e->res, "torch.reference_gpu_ms", st->gpu_ms, "ms");
		sbx_result_add_metric(e->res, "torch.reference_wait_ms",
		    st->wait_ms + e->ref_settle_ms, "ms");
		sbx_result_add_metric(
		    e->res, "torch.reference_calls", st->calls, "calls");
		sbx_result_add_metric(
		    e->res, "torch.staged_serials", st->staged, "serials");
	}
	if (st->timed_inputs > 0) {
		sbx_result_add_metric(
		    e->res, "torch.timed_gpu_ms", st->timed_gpu_ms, "ms");
		sbx_result_add_metric(
		    e->res, "torch.timed_wait_ms", st->timed_wait_ms, "ms");
		sbx_result_add_metric(
		    e->res, "torch.timed_inputs", st->timed_inputs, "runs");
	}
	for (size_t i = 0; i < st->nmapped && !*e->fatal; i++)
		e->g->cu.cuIpcCloseMemHandle(st->mapped[i]);
	free(st);
	e->ref_state = NULL;
}

const ev_ref_ops ev_torch_ops = {
    .name = "torch",
    .usable = torch_usable,
    .setup = torch_setup,
    .prefetch = torch_prefetch,
    .settle = torch_settle,
    .prepare = torch_prepare,
    .trial_inputs = torch_trial_inputs,
    .trial_check = torch_trial_check,
    .run_inputs = torch_run_inputs,
    .run_check = torch_run_check,
    .profile_inputs = torch_profile_inputs,
    .sample_inputs = torch_sample_inputs,
    .baseline = torch_baseline,
    .release = torch_release,
    .maps_tensors = 1,
    .held_max = EV_HELD_MAX,
};
