/*
 * test_supervise.c - the real kclaw-sandbox, driven as its orchestrator
 * over a private ipc:// address, supervising
 *  - a scripted child that crashes, hangs, faults or exits on command:
 *    each gets the right status and a fresh child serves the next request;
 *  - a reference-only request: every output's variation figures arrive,
 *    and the printed result (`kclaw eval TASK`) shows them;
 *  - cancellation: a "task cancelled" event aborts that task's evaluation
 *    (CANCELLED, child replaced), and other tasks' events do not;
 *  - the real child on a machine without a GPU driver (KCLAW_CUDA_DRIVER
 *    points nowhere): NO_DEVICE, while compile-only requests still work.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bus.h"
#include "kc_err.h"
#include "kc_test.h"
#include "kc_util.h"
#include "sandbox.h"
#include "sandbox_client.h"

static char home[] = "/tmp/kc-sbx-home-XXXXXX";
static char script_child[1024];

/* One request for the one-output task "t", answered within wait_ms: the
 * session's return code, with the result in *out. */
static int
eval_try(sbx_session *s, const char *task_id, const char *src, const char *plan,
    unsigned timeout_ms, int compile_only, const char *arch, int wait_ms,
    Kclaw__EvalResult **out)
{
	Kclaw__EvalRequest req = KCLAW__EVAL_REQUEST__INIT;
	Kclaw__Candidate c = KCLAW__CANDIDATE__INIT;
	Kclaw__EvalOptions o = KCLAW__EVAL_OPTIONS__INIT;
	Kclaw__TaskSpec t = KCLAW__TASK_SPEC__INIT;
	Kclaw__TensorSpec y = KCLAW__TENSOR_SPEC__INIT;
	Kclaw__TensorSpec *yp = &y;
	int64_t shape[1] = {256};
	int rv;

	y.name = "y";
	y.kind = KCLAW__TENSOR_KIND__OUTPUT;
	y.dtype = KCLAW__DTYPE__F32;
	y.n_shape = 1;
	y.shape = shape;
	t.name = "t";
	t.n_tensors = 1;
	t.tensors = &yp;
	c.source = (char *)src;
	c.plan_json = (char *)(plan ? plan : "");
	o.timeout_ms = timeout_ms;
	o.compile_only = compile_only;
	o.arch = (char *)(arch ? arch : "");
	req.task = &t;
	req.task_id = (char *)(task_id ? task_id : "");
	req.candidate = &c;
	req.options = &o;
	rv = sbx_session_eval(s, &req, wait_ms, out);
	free(req.job_id);
	return rv;
}

static Kclaw__EvalResult *
eval_task(sbx_session *s, const char *task_id, const char *src,
    const char *plan, unsigned timeout_ms, int compile_only, const char *arch)
{
	Kclaw__EvalResult *r = NULL;

	KT_OK(eval_try(
	    s, task_id, src, plan, timeout_ms, compile_only, arch, 30000, &r));
	return r;
}

static Kclaw__EvalResult *
eval(sbx_session *s, const char *src, const char *plan, unsigned timeout_ms,
    int compile_only, const char *arch)
{
	return eval_task(s, NULL, src, plan, timeout_ms, compile_only, arch);
}

/* The pid of the child that answered, (since) when it started, whether
 * the sandbox started it alone (1) or as a spare (0), and when it measured
 * its device (script_child.c). */
static int
ok_pid_measured(sbx_session *s, unsigned long long *since, int *alone,
    char *measured, size_t size)
{
	Kclaw__EvalResult *r = eval(s, "ok", NULL, 5000, 0, NULL);
	unsigned long long t = 0;
	char how[16] = "", when[32] = "";
	int pid;

	KT_EQ_STR(sbx_status_name(r->status), "OK");
	KT_EQ_STR(r->device_name, "scripted GPU");
	KT_ASSERT(sscanf(r->message,
	              "pid %d since %llu, started %15[^,], measured %31[^\n]",
	              &pid, &t, how, when) == 4);
	kclaw__eval_result__free_unpacked(r, NULL);
	if (since)
		*since = t;
	if (alone)
		*alone = strcmp(how, "alone") == 0;
	if (measured)
		snprintf(measured, size, "%s", when);
	return pid;
}

static int
ok_pid_how(sbx_session *s, unsigned long long *since, int *alone)
{
	return ok_pid_measured(s, since, alone, NULL, 0);
}

static int
ok_pid(sbx_session *s)
{
	return ok_pid_how(s, NULL, NULL);
}

static void
test_scripted_child_is_replaced(void)
{
	sbx_client_opts o = {.child_path = script_child, .home = home};
	Kclaw__EvalResult *r;
	sbx_session *s;
	unsigned long long since = 0;
	uint64_t t0;
	int a, b, c, d, e, alone = -1;
	char measured[32];

	KT_OK(sbx_session_open(&s, &o));
	/* The first child is told it starts alone, and measures its device
	 * as it starts; the spare beside it, which serves after the crash,
	 * is not, and measures when its parent asks it to, between two
	 * requests (here as the crash arrives, the spare ready by then). */
	a = ok_pid_measured(s, NULL, &alone, measured, sizeof(measured));
	KT_EQ_INT(alone, 1);
	KT_EQ_STR(measured, "at start");
	KT_EQ_INT(ok_pid(s), a); /* one child serves many requests */

	/* The child that serves the request after a crash is the spare,
	 * started (and given a second to finish starting) before the crash,
	 * so no start-up is waited for. */
	kc_sleep_ms(1000);
	t0 = kc_mono_ms();
	r = eval(s, "crash", NULL, 5000, 0, NULL);
	KT_EQ_STR(sbx_status_name(r->status), "RUNTIME_FAULT");
	KT_EQ_STR(r->fault_name, "SIGABRT");
	KT_CONTAINS(r->message, "a fresh one was started");
	kclaw__eval_result__free_unpacked(r, NULL);
	b = ok_pid_measured(s, &since, &alone, measured, sizeof(measured));
	KT_ASSERT(b != a);
	KT_ASSERT(since <= t0);
	KT_EQ_INT(alone, 0);
	KT_EQ_STR(measured, "when idle");

	t0 = kc_mono_ms();
	r = eval(s, "hang", NULL, 700, 0, NULL);
	KT_EQ_STR(sbx_status_name(r->status), "TIMEOUT");
	KT_CONTAINS(r->message, "did not finish within 700 ms");
	KT_ASSERT(kc_mono_ms() - t0 < 5000);
	kclaw__eval_result__free_unpacked(r, NULL);
	c = ok_pid(s);
	KT_ASSERT(c != b);

	r = eval(s, "fault CUDA_ERROR_ILLEGAL_ADDRESS", NULL, 5000, 0, NULL);
	KT_EQ_STR(sbx_status_name(r->status), "RUNTIME_FAULT");
	KT_EQ_STR(r->fault_name, "CUDA_ERROR_ILLEGAL_ADDRESS");
	kclaw__eval_result__free_unpacked(r, NULL);
	d = ok_pid(s);
	KT_ASSERT(d != c);

	r = eval(s, "exit 7", NULL, 5000, 0, NULL);
	KT_EQ_STR(sbx_status_name(r->status), "RUNTIME_FAULT");
	KT_EQ_STR(r->fault_name, "EXIT_7");
	kclaw__eval_result__free_unpacked(r, NULL);
	e = ok_pid(s);
	KT_ASSERT(e != d);
	sbx_session_close(s);
}

/* Whether pid is gone (reaped, or a zombie nobody reaps yet). */
static int
pid_gone(int pid)
{
	char path[64], st = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	if ((f = fopen(path, "r")) == NULL)
		return 1;
	if (fscanf(f, "%*d (%*[^)]) %c", &st) != 1)
		st = 0;
	fclose(f);
	return st == 'Z' || st == 'X';
}

static void *
kill_parent_later(void *arg)
{
	kc_sleep_ms(500);
	kill(*(pid_t *)arg, SIGKILL);
	return NULL;
}

/* A sandbox killed with SIGKILL while its child runs a hung evaluation:
 * the child dies with it (it would otherwise hold its GPU context and
 * memory), within a second. */
static void
test_child_dies_with_its_parent(void)
{
	sbx_client_opts o = {.child_path = script_child, .home = home};
	Kclaw__EvalResult *r = NULL;
	sbx_session *s;
	pthread_t killer;
	pid_t parent;
	int child;
	uint64_t t0;

	KT_OK(sbx_session_open(&s, &o));
	child = ok_pid(s);
	parent = sbx_session_pid(s);
	KT_ASSERT(parent > 0 && !pid_gone(child));
	KT_ASSERT(
	    pthread_create(&killer, NULL, kill_parent_later, &parent) == 0);
	/* The sandbox dies under the call: it fails, or answers nothing. */
	if (eval_try(s, NULL, "hang", NULL, 20000, 0, NULL, 5000, &r) == 0 &&
	    r != NULL)
		kclaw__eval_result__free_unpacked(r, NULL);
	pthread_join(killer, NULL);
	t0 = kc_mono_ms();
	while (!pid_gone(child) && kc_mono_ms() - t0 < 3000)
		kc_sleep_ms(20);
	if (!pid_gone(child)) {
		kill(child, SIGKILL); /* it holds ctest's output open */
		KT_FAIL("child %d outlived its sandbox %d by 3 s", child,
		    (int)parent);
	}
	fprintf(stderr, "  child gone %llu ms after its sandbox was killed\n",
	    (unsigned long long)(kc_mono_ms() - t0));
	sbx_session_close(s);
}

/* A reference-only evaluation (`kclaw eval TASK`): every output's
 * variation and what the task's tolerance admits come back from the child
 * through the sandbox, and the printed result (what `kclaw eval` shows)
 * has one line per output and the warning. */
static void
test_reference_only_figures(void)
{
	sbx_client_opts o = {.child_path = script_child, .home = home};
	Kclaw__EvalRequest req = KCLAW__EVAL_REQUEST__INIT;
	Kclaw__EvalOptions opt = KCLAW__EVAL_OPTIONS__INIT;
	Kclaw__TaskSpec t = KCLAW__TASK_SPEC__INIT;
	Kclaw__Tolerance tol = KCLAW__TOLERANCE__INIT;
	Kclaw__TensorSpec x = KCLAW__TENSOR_SPEC__INIT,
	                  y = KCLAW__TENSOR_SPEC__INIT,
	                  flat = KCLAW__TENSOR_SPEC__INIT;
	Kclaw__TensorSpec *ts[3] = {&x, &y, &flat};
	int64_t shape[1] = {256};
	Kclaw__EvalResult *r = NULL;
	const Kclaw__OutputVariation *v;
	sbx_session *s;
	char *text = NULL;
	size_t len = 0;
	FILE *f;

	x.name = "x";
	x.kind = KCLAW__TENSOR_KIND__INPUT;
	y.name = "y";
	flat.name = "flat_sum";
	y.kind = flat.kind = KCLAW__TENSOR_KIND__OUTPUT;
	x.dtype = y.dtype = flat.dtype = KCLAW__DTYPE__F32;
	x.n_shape = y.n_shape = flat.n_shape = 1;
	x.shape = y.shape = flat.shape = shape;
	tol.rtol = 1e-3;
	tol.max_rel_norm = 2e-3;
	t.name = "t";
	t.n_tensors = 3;
	t.tensors = ts;
	t.tolerance = &tol;
	opt.reference_only = 1;
	req.task = &t;
	req.options = &opt;

	KT_OK(sbx_session_open(&s, &o));
	KT_OK(sbx_session_eval(s, &req, 30000, &r));
	free(req.job_id);
	sbx_session_close(s);
	KT_EQ_STR(sbx_status_name(r->status), "OK");
	KT_EQ_INT(r->n_output_variations, 2); /* the outputs, not x */
	v = r->output_variations[0];
	KT_EQ_STR(v->name, "y");
	KT_ASSERT(v->measured && !v->degenerate);
	KT_ASSERT(v->variation == 0.5);
	KT_ASSERT(v->admits == 2e-3); /* max(rtol, max_rel_norm) */
	v = r->output_variations[1];
	KT_EQ_STR(v->name, "flat_sum");
	KT_ASSERT(v->measured && v->degenerate);
	KT_ASSERT(v->variation == 1e-9);
	KT_ASSERT(v->admits == 2e-3);
	KT_EQ_INT(r->n_degenerate, 1);
	KT_EQ_STR(r->degenerate[0], "flat_sum");

	KT_ASSERT((f = open_memstream(&text, &len)) != NULL);
	sbx_result_print(f, r);
	fclose(f);
	KT_CONTAINS(text,
	    "output y: varies 0.5 (relative) between two input sets; the "
	    "tolerance admits 0.002\n"
	    "output flat_sum: varies 1e-09 (relative) between two input "
	    "sets; the tolerance admits 0.002: DEGENERATE, a constant could "
	    "pass\n"
	    "warning: degenerate task: output 'flat_sum' changes by only "
	    "1e-09");
	free(text);
	kclaw__eval_result__free_unpacked(r, NULL);
}

/* KCLAW_SANDBOX_SPARE=0: no spare; the replacement starts after the
 * crash, and still serves the next request. */
static void
test_without_spare(void)
{
	sbx_client_opts o = {.child_path = script_child, .home = home};
	unsigned long long since = 0;
	Kclaw__EvalResult *r;
	sbx_session *s;
	uint64_t t0;
	int a, b, alone = -1;
	char measured[32];

	setenv("KCLAW_SANDBOX_SPARE", "0", 1);
	KT_OK(sbx_session_open(&s, &o));
	a = ok_pid(s);
	t0 = kc_mono_ms();
	r = eval(s, "crash", NULL, 5000, 0, NULL);
	KT_EQ_STR(sbx_status_name(r->status), "RUNTIME_FAULT");
	kclaw__eval_result__free_unpacked(r, NULL);
	/* Without spares every child starts alone. */
	b = ok_pid_measured(s, &since, &alone, measured, sizeof(measured));
	KT_ASSERT(b != a);
	KT_ASSERT(since >= t0);
	KT_EQ_INT(alone, 1);
	KT_EQ_STR(measured, "at start");
	sbx_session_close(s);
	unsetenv("KCLAW_SANDBOX_SPARE");
}

/* Publishes a task's cancellation until told to stop (PUB/SUB drops
 * messages sent before the subscriber is connected). */
typedef struct {
	bus_pub *pub;
	volatile int stop;
} canceller;

static void *
cancel_run(void *arg)
{
	canceller *c = arg;
	static const char ev[] = "cancelled";

	while (!c->stop) {
		bus_pub_send(c->pub, "task.T1.task_cancelled", ev, sizeof(ev));
		bus_pub_send(c->pub, "task.T2.state_changed", ev, sizeof(ev));
		kc_sleep_ms(50);
	}
	return NULL;
}

static void
test_cancel_aborts_the_evaluation(void)
{
	char url[256];
	sbx_client_opts o = {.child_path = script_child, .home = home};
	canceller c = {0};
	Kclaw__EvalResult *r;
	sbx_session *s;
	pthread_t th;
	uint64_t t0;
	int a;

	snprintf(url, sizeof(url), "ipc://%s/events.ipc", home);
	o.events_url = url;
	KT_OK(bus_pub_open(&c.pub, url));
	KT_OK(sbx_session_open(&s, &o));
	KT_ASSERT(pthread_create(&th, NULL, cancel_run, &c) == 0);
	/* Another task's events do not touch this one. */
	r = eval_task(s, "T2", "ok", NULL, 5000, 0, NULL);
	KT_EQ_STR(sbx_status_name(r->status), "OK");
	KT_ASSERT(sscanf(r->message, "pid %d", &a) == 1);
	kclaw__eval_result__free_unpacked(r, NULL);

	t0 = kc_mono_ms();
	r = eval_task(s, "T1", "hang", NULL, 20000, 0, NULL);
	KT_EQ_STR(sbx_status_name(r->status), "CANCELLED");
	KT_CONTAINS(r->message, "cancelled");
	KT_ASSERT(kc_mono_ms() - t0 < 10000);
	kclaw__eval_result__free_unpacked(r, NULL);
	c.stop = 1;
	pthread_join(th, NULL);
	KT_ASSERT(ok_pid(s) != a);
	sbx_session_close(s);
	bus_pub_close(c.pub);
}

static void
test_no_device(void)
{
	sbx_client_opts o = {.home = home};
	Kclaw__EvalResult *r;
	sbx_session *s;
	const char *src = "extern \"C\" __global__ void k(float *y, int n) { "
	                  "y[threadIdx.x] = n; }\n";
	const char *plan = "{\"steps\":[{\"kernel\":\"k\",\"grid\":[1],"
	                   "\"block\":[256],\"args\":[\"y\",{\"i32\":3}]}]}";

	/* The real child; the test's environment hides the driver. */
	KT_OK(sbx_session_open(&s, &o));
	r = eval(s, src, plan, 20000, 0, NULL);
	KT_EQ_STR(sbx_status_name(r->status), "NO_DEVICE");
	KT_CONTAINS(r->message, "no NVIDIA driver");
	kclaw__eval_result__free_unpacked(r, NULL);

	r = eval(s, src, plan, 20000, 1, "sm_90");
	KT_EQ_STR(sbx_status_name(r->status), "OK");
	KT_CONTAINS(r->message, "not run: compile-only");
	KT_EQ_STR(r->arch, "sm_90");
	KT_EQ_INT(r->n_kernels, 1);
	KT_EQ_STR(r->kernels[0]->kernel, "k");
	KT_ASSERT(r->kernels[0]->registers > 0);
	kclaw__eval_result__free_unpacked(r, NULL);

	/* The plan is checked against the compiled signature. */
	r = eval(s, src,
	    "{\"steps\":[{\"kernel\":\"k\",\"grid\":[1],\"block\":[256],"
	    "\"args\":[\"y\",{\"f64\":3}]}]}",
	    20000, 1, "sm_90");
	KT_EQ_STR(sbx_status_name(r->status), "PLAN_ERROR");
	KT_CONTAINS(r->message, "argument 1 is f64 (8 bytes)");
	kclaw__eval_result__free_unpacked(r, NULL);

	r = eval(s, "extern \"C\" __global__ void k( { }\n", plan, 20000, 1,
	    "sm_90");
	KT_EQ_STR(sbx_status_name(r->status), "COMPILE_ERROR");
	KT_CONTAINS(r->compile_log, "error");
	kclaw__eval_result__free_unpacked(r, NULL);
	sbx_session_close(s);
}

int
main(void)
{
	const char *bin = getenv("KCLAW_BIN");

	KT_ASSERT(bin != NULL);
	KT_ASSERT(mkdtemp(home) != NULL);
	snprintf(
	    script_child, sizeof(script_child), "%s/sbx_script_child", bin);
	KT_RUN(test_scripted_child_is_replaced);
	KT_RUN(test_reference_only_figures);
	KT_RUN(test_without_spare);
	KT_RUN(test_cancel_aborts_the_evaluation);
	KT_RUN(test_no_device);
	KT_RUN(test_child_dies_with_its_parent);
	return 0;
}
