/*
 * test_torchref.c - the sandbox child's client of the PyTorch reference
 * process (gpu-sandbox/torchref.c, docs/torchref.md), against a stand-in
 * reference process written for the test (torchref_standin.py): real
 * processes over a real socketpair; crashes, hangs, garbage and a missing
 * PyTorch are the stand-in's, scripted.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "kc_err.h"
#include "kc_test.h"
#include "kc_util.h"
#include "torchref.h"

static char standin[PATH_MAX];
static char once_path[PATH_MAX];

static sbx_torchref *
client(const char *mode)
{
	sbx_torchref *r;

	setenv("KCLAW_STANDIN_MODE", mode, 1);
	KT_OK(sbx_torchref_new(&r, "python3", standin));
	return r;
}

static cJSON *
req(const char *op)
{
	cJSON *r = cJSON_CreateObject();

	cJSON_AddStringToObject(r, "op", op);
	return r;
}

static cJSON *
load_req(void)
{
	cJSON *r = req("load"), *ts = cJSON_AddArrayToObject(r, "tensors");
	static const char *names[] = {"x", "s", "w", "out"};
	static const char *kinds[] = {"input", "scalar", "parameter", "output"};

	cJSON_AddStringToObject(r, "key", "k1");
	cJSON_AddStringToObject(r, "source", "class Model: pass\n");
	cJSON_AddNumberToObject(r, "init_seed", 42);
	cJSON_AddNumberToObject(r, "device", 0);
	for (int i = 0; i < 4; i++) {
		cJSON *t = cJSON_CreateObject(), *sh;
		cJSON_AddStringToObject(t, "name", names[i]);
		cJSON_AddStringToObject(t, "kind", kinds[i]);
		cJSON_AddStringToObject(t, "dtype", "f32");
		if (i == 2)
			cJSON_AddStringToObject(t, "source_name", "lin.weight");
		sh = cJSON_AddArrayToObject(t, "shape");
		cJSON_AddItemToArray(sh, cJSON_CreateNumber(i == 1 ? 1 : 256));
		cJSON_AddItemToArray(ts, t);
	}
	return r;
}

/* An inputs request for set `serial` of the task's own distribution, kept. */
static cJSON *
inputs_req(int serial, double seed)
{
	cJSON *q = req("inputs");

	cJSON_AddNumberToObject(q, "serial", serial);
	cJSON_AddNumberToObject(q, "seed", seed);
	cJSON_AddNumberToObject(q, "variant", 0);
	cJSON_AddBoolToObject(q, "keep", 1);
	return q;
}

/* Whether a reply says ok; prints its error when not. */
static int
is_ok(const cJSON *a)
{
	if (cJSON_IsTrue(cJSON_GetObjectItem(a, "ok")))
		return 1;
	fprintf(stderr, "reply: %s: %s\n",
	    cJSON_GetStringValue(cJSON_GetObjectItem(a, "code")),
	    cJSON_GetStringValue(cJSON_GetObjectItem(a, "error")));
	return 0;
}

static double
num(const cJSON *o, const char *k)
{
	return cJSON_GetNumberValue(cJSON_GetObjectItem(o, k));
}

/* The whole protocol against a reference that behaves. */
static void
test_protocol(void)
{
	sbx_torchref *r = client("ok");
	cJSON *q, *a, *bufs, *outs;

	q = load_req();
	KT_OK(sbx_torchref_call(r, q, 10000, &a));
	cJSON_Delete(q);
	KT_ASSERT(is_ok(a));
	KT_EQ_INT(sbx_torchref_starts(r), 1);
	bufs = cJSON_GetObjectItem(a, "buffers");
	/* A buffer per tensor, none for the scalar, which gets its value. */
	KT_EQ_INT(cJSON_GetArraySize(bufs), 3);
	KT_EQ_INT(num(cJSON_GetArrayItem(bufs, 0), "bytes"), 1024);
	KT_EQ_INT(strlen(cJSON_GetStringValue(cJSON_GetObjectItem(
	              cJSON_GetArrayItem(bufs, 0), "handle"))),
	    128);
	KT_ASSERT(num(cJSON_GetObjectItem(a, "scalars"), "s") == 2.5);
	cJSON_Delete(a);

	for (int serial = 0; serial < 2; serial++) {
		q = req("inputs");
		cJSON_AddNumberToObject(q, "serial", serial);
		cJSON_AddNumberToObject(q, "seed", 35184372088831.0);
		cJSON_AddNumberToObject(q, "variant", 0);
		cJSON_AddBoolToObject(q, "keep", 1);
		KT_OK(sbx_torchref_call(r, q, 10000, &a));
		cJSON_Delete(q);
		KT_ASSERT(is_ok(a));
		outs = cJSON_GetObjectItem(a, "outputs");
		KT_EQ_STR(cJSON_GetStringValue(cJSON_GetObjectItem(
		              cJSON_GetArrayItem(outs, 0), "name")),
		    "out");
		/* The variation is known from the second kept set on. */
		KT_EQ_INT(cJSON_IsNumber(cJSON_GetObjectItem(
		              cJSON_GetArrayItem(outs, 0), "var_norm")),
		    serial == 1);
		cJSON_Delete(a);
	}
	q = req("check");
	cJSON_AddNumberToObject(q, "serial", 1);
	cJSON_AddNumberToObject(q, "atol", 1e-2);
	cJSON_AddNumberToObject(q, "rtol", 1e-2);
	cJSON_AddNumberToObject(q, "max_rel_norm", 1e-2);
	cJSON_AddBoolToObject(q, "hold", 0);
	cJSON_AddBoolToObject(q, "compare_held", 0);
	KT_OK(sbx_torchref_call(r, q, 10000, &a));
	cJSON_Delete(q);
	KT_ASSERT(is_ok(a));
	KT_EQ_INT(num(cJSON_GetArrayItem(cJSON_GetObjectItem(a, "outputs"), 0),
	              "count"),
	    256);
	cJSON_Delete(a);
	/* An older serial cannot be checked: only the latest is kept. */
	q = req("check");
	cJSON_AddNumberToObject(q, "serial", 0);
	cJSON_AddNumberToObject(q, "atol", 1e-2);
	cJSON_AddNumberToObject(q, "rtol", 1e-2);
	cJSON_AddNumberToObject(q, "max_rel_norm", 1e-2);
	cJSON_AddBoolToObject(q, "hold", 0);
	cJSON_AddBoolToObject(q, "compare_held", 0);
	KT_OK(sbx_torchref_call(r, q, 10000, &a));
	cJSON_Delete(q);
	KT_ASSERT(cJSON_IsFalse(cJSON_GetObjectItem(a, "ok")));
	KT_EQ_STR(
	    cJSON_GetStringValue(cJSON_GetObjectItem(a, "code")), "INTERNAL");
	cJSON_Delete(a);
	q = req("baseline");
	cJSON_AddStringToObject(q, "mode", "eager");
	cJSON_AddNumberToObject(q, "warmup", 2);
	cJSON_AddNumberToObject(q, "iters", 10);
	cJSON_AddBoolToObject(q, "flush", 1);
	cJSON_AddNumberToObject(q, "seed", 99);
	KT_OK(sbx_torchref_call(r, q, 10000, &a));
	cJSON_Delete(q);
	KT_ASSERT(num(a, "median_ms") > 0);
	KT_EQ_INT(num(a, "iterations"), 10);
	cJSON_Delete(a);
	KT_EQ_INT(sbx_torchref_starts(r), 1);
	sbx_torchref_free(r);
}

/* A request in two halves (the load sent before the candidate compiles):
 * its reply read later; a reply never read is dropped by the next call,
 * which gets its own reply, not the earlier one. */
static void
test_send_then_receive(void)
{
	sbx_torchref *r = client("ok");
	cJSON *q, *a;

	KT_ASSERT(sbx_torchref_pending(r) == NULL);
	KT_EQ_INT(sbx_torchref_receive(r, &a), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "no request");
	q = load_req();
	KT_OK(sbx_torchref_send(r, q, 10000));
	KT_EQ_STR(sbx_torchref_pending(r), "load");
	KT_OK(sbx_torchref_receive(r, &a));
	KT_ASSERT(sbx_torchref_pending(r) == NULL);
	KT_ASSERT(is_ok(a));
	KT_EQ_INT(cJSON_GetArraySize(cJSON_GetObjectItem(a, "buffers")), 3);
	cJSON_Delete(a);
	/* Sent and left: the next call reads past it. */
	KT_OK(sbx_torchref_send(r, q, 10000));
	cJSON_Delete(q);
	q = inputs_req(0, 7);
	KT_OK(sbx_torchref_call(r, q, 10000, &a));
	cJSON_Delete(q);
	KT_ASSERT(is_ok(a));
	KT_ASSERT(cJSON_GetObjectItem(a, "outputs") != NULL);
	KT_ASSERT(cJSON_GetObjectItem(a, "buffers") == NULL);
	KT_ASSERT(sbx_torchref_pending(r) == NULL);
	cJSON_Delete(a);
	KT_EQ_INT(sbx_torchref_starts(r), 1);
	sbx_torchref_free(r);
}

/* The replies to a load and then trial 0's inputs, read in that order:
 * the load's names the buffers; the inputs' (ok, with outputs) is
 * returned for the caller's own checks. */
static cJSON *
receive_load_then_inputs(sbx_torchref *r)
{
	cJSON *a;

	KT_EQ_STR(sbx_torchref_pending(r), "load");
	KT_OK(sbx_torchref_receive(r, &a));
	KT_ASSERT(cJSON_GetObjectItem(a, "buffers") != NULL);
	cJSON_Delete(a);
	KT_EQ_STR(sbx_torchref_pending(r), "inputs");
	KT_OK(sbx_torchref_receive(r, &a));
	KT_ASSERT(is_ok(a));
	KT_ASSERT(cJSON_GetObjectItem(a, "outputs") != NULL);
	return a;
}

/* Requests sent back to back (the load, then trial 0's inputs, before the
 * candidate compiles): their replies come in the order sent; no more than
 * SBX_TORCHREF_PIPELINE wait at once; sbx_torchref_drop reads and drops
 * every one left, and the connection is in step after it. */
static void
test_pipelined_requests(void)
{
	sbx_torchref *r = client("ok");
	cJSON *load = load_req(), *in = inputs_req(0, 7), *a;

	KT_OK(sbx_torchref_send(r, load, 10000));
	KT_OK(sbx_torchref_send(r, in, 10000));
	a = receive_load_then_inputs(r);
	KT_ASSERT(cJSON_GetObjectItem(a, "buffers") == NULL);
	cJSON_Delete(a);
	KT_ASSERT(sbx_torchref_pending(r) == NULL);

	for (int i = 0; i < SBX_TORCHREF_PIPELINE; i++)
		KT_OK(sbx_torchref_send(r, i % 2 ? in : load, 10000));
	KT_EQ_INT(sbx_torchref_send(r, in, 10000), KC_EBUSY);
	KT_CONTAINS(kc_lasterr(), "already wait");
	sbx_torchref_drop(r);
	KT_ASSERT(sbx_torchref_pending(r) == NULL);
	KT_OK(sbx_torchref_send(r, load, 10000));
	KT_OK(sbx_torchref_receive(r, &a));
	KT_ASSERT(cJSON_GetObjectItem(a, "buffers") != NULL);
	cJSON_Delete(a);
	KT_EQ_INT(sbx_torchref_starts(r), 1);
	cJSON_Delete(load);
	cJSON_Delete(in);
	sbx_torchref_free(r);
}

/* The prefetch's shape (ref_torch.c torch_prefetch): load, trial 0's
 * inputs and stage requests all sent before any reply is read, the
 * replies in order; a staged serial's later inputs gets the staged
 * figures, and a reference that stages nothing says so. */
static void
test_staged_serials(void)
{
	const char *modes[] = {"ok", "no_stage"};

	for (int m = 0; m < 2; m++) {
		sbx_torchref *r = client(modes[m]);
		cJSON *load = load_req(), *in = inputs_req(0, 7), *a;
		cJSON *st[SBX_TORCHREF_PIPELINE - 2];
		int n = SBX_TORCHREF_PIPELINE - 2;

		KT_OK(sbx_torchref_send(r, load, 10000));
		KT_OK(sbx_torchref_send(r, in, 10000));
		for (int i = 0; i < n; i++) {
			st[i] = inputs_req(i + 1, 100 + i);
			cJSON_ReplaceItemInObject(
			    st[i], "op", cJSON_CreateString("stage"));
			KT_OK(sbx_torchref_send(r, st[i], 10000));
		}
		KT_EQ_STR(sbx_torchref_pending(r), "load");
		KT_OK(sbx_torchref_receive(r, &a));
		cJSON_Delete(a);
		KT_OK(sbx_torchref_receive(r, &a));
		KT_ASSERT(is_ok(a));
		cJSON_Delete(a);
		for (int i = 0; i < n; i++) {
			KT_EQ_STR(sbx_torchref_pending(r), "stage");
			KT_OK(sbx_torchref_receive(r, &a));
			KT_ASSERT(is_ok(a));
			KT_EQ_INT(
			    cJSON_IsTrue(cJSON_GetObjectItem(a, "staged")),
			    m == 0);
			cJSON_Delete(a);
		}
		KT_ASSERT(sbx_torchref_pending(r) == NULL);
		/* Serial 3 as staged (seed 102): its expected norm is the
		 * staged one, 1 + 102 / 1000. */
		cJSON_Delete(in);
		in = inputs_req(3, 102);
		KT_OK(sbx_torchref_call(r, in, 10000, &a));
		KT_ASSERT(is_ok(a));
		KT_ASSERT(fabs(num(cJSON_GetArrayItem(
		                       cJSON_GetObjectItem(a, "outputs"), 0),
		                   "exp_norm") -
		              1.102) < 1e-9);
		cJSON_Delete(a);
		for (int i = 0; i < n; i++)
			cJSON_Delete(st[i]);
		cJSON_Delete(load);
		cJSON_Delete(in);
		sbx_torchref_free(r);
	}
}

/* Settling (sbx_torchref_settle): every reply due is read and kept, so
 * the process may die afterwards and the replies still come, in order;
 * a process that dies answering one request fails that one and loses the
 * later ones. */
static void
test_settle_keeps_replies(void)
{
	sbx_torchref *r = client("ok");
	cJSON *load = load_req(), *in = inputs_req(0, 7),
	      *st = inputs_req(1, 8), *a;
	pid_t pid;

	cJSON_ReplaceItemInObject(st, "op", cJSON_CreateString("stage"));
	KT_OK(sbx_torchref_send(r, load, 10000));
	KT_OK(sbx_torchref_send(r, in, 10000));
	KT_OK(sbx_torchref_send(r, st, 10000));
	sbx_torchref_settle(r);
	/* Nothing is left to read from the process: kill it. */
	pid = sbx_torchref_pid(r);
	KT_ASSERT(pid > 0);
	kill(pid, SIGKILL);
	cJSON_Delete(receive_load_then_inputs(r));
	KT_EQ_STR(sbx_torchref_pending(r), "stage");
	KT_OK(sbx_torchref_receive(r, &a));
	KT_ASSERT(is_ok(a));
	cJSON_Delete(a);
	KT_ASSERT(sbx_torchref_pending(r) == NULL);
	sbx_torchref_free(r);

	/* Settled replies count against the pipeline until read; a drop
	 * frees them. */
	r = client("ok");
	for (int i = 0; i < SBX_TORCHREF_PIPELINE; i++)
		KT_OK(sbx_torchref_send(r, load, 10000));
	sbx_torchref_settle(r);
	KT_EQ_INT(sbx_torchref_send(r, load, 10000), KC_EBUSY);
	sbx_torchref_drop(r);
	KT_ASSERT(sbx_torchref_pending(r) == NULL);
	KT_OK(sbx_torchref_send(r, load, 10000));
	KT_OK(sbx_torchref_receive(r, &a));
	cJSON_Delete(a);
	KT_EQ_INT(sbx_torchref_starts(r), 1);
	sbx_torchref_free(r);

	unlink(once_path);
	setenv("KCLAW_STANDIN_ONCE", once_path, 1);
	r = client("crash_on_inputs");
	KT_OK(sbx_torchref_send(r, load, 10000));
	KT_OK(sbx_torchref_send(r, in, 10000));
	KT_OK(sbx_torchref_send(r, st, 10000));
	sbx_torchref_settle(r);
	KT_OK(sbx_torchref_receive(r, &a));
	KT_ASSERT(cJSON_GetObjectItem(a, "buffers") != NULL);
	cJSON_Delete(a);
	KT_EQ_STR(sbx_torchref_pending(r), "inputs");
	KT_EQ_INT(sbx_torchref_receive(r, &a), KC_ECLOSED);
	KT_CONTAINS(kc_lasterr(), "exited with status 3");
	KT_ASSERT(a == NULL);
	KT_ASSERT(sbx_torchref_pending(r) == NULL);
	KT_EQ_INT(sbx_torchref_receive(r, &a), KC_EINVAL);
	unsetenv("KCLAW_STANDIN_ONCE");
	sbx_torchref_free(r);
	cJSON_Delete(load);
	cJSON_Delete(in);
	cJSON_Delete(st);
}

/* A reference that dies mid-request is reported with its exit status and
 * replaced by the next call. */
static void
test_crash_then_restart(void)
{
	sbx_torchref *r;
	cJSON *q, *a;

	unlink(once_path);
	setenv("KCLAW_STANDIN_ONCE", once_path, 1);
	r = client("crash_on_inputs");
	q = load_req();
	KT_OK(sbx_torchref_call(r, q, 10000, &a));
	cJSON_Delete(q);
	cJSON_Delete(a);
	q = inputs_req(0, 1);
	KT_EQ_INT(sbx_torchref_call(r, q, 10000, &a), KC_ECLOSED);
	KT_CONTAINS(kc_lasterr(), "exited with status 3");
	KT_ASSERT(a == NULL);
	/* The next call starts a fresh process, which has no task loaded. */
	KT_OK(sbx_torchref_call(r, q, 10000, &a));
	KT_EQ_INT(sbx_torchref_starts(r), 2);
	KT_ASSERT(cJSON_IsFalse(cJSON_GetObjectItem(a, "ok")));
	cJSON_Delete(a);
	cJSON_Delete(q);
	sbx_torchref_free(r);
	unsetenv("KCLAW_STANDIN_ONCE");
}

/* A hung reference is killed at the request's deadline. */
static void
test_hang_is_killed(void)
{
	sbx_torchref *r = client("hang_on_check");
	cJSON *q, *a;
	uint64_t t0;

	q = load_req();
	KT_OK(sbx_torchref_call(r, q, 10000, &a));
	cJSON_Delete(q);
	cJSON_Delete(a);
	q = req("check");
	cJSON_AddNumberToObject(q, "serial", 0);
	cJSON_AddNumberToObject(q, "atol", 1e-2);
	cJSON_AddNumberToObject(q, "rtol", 1e-2);
	cJSON_AddNumberToObject(q, "max_rel_norm", 1e-2);
	cJSON_AddBoolToObject(q, "hold", 0);
	cJSON_AddBoolToObject(q, "compare_held", 0);
	t0 = kc_mono_ns();
	KT_EQ_INT(sbx_torchref_call(r, q, 400, &a), KC_ETIMEDOUT);
	KT_ASSERT(kc_mono_ns() - t0 < 3000000000ull);
	KT_CONTAINS(kc_lasterr(), "did not answer 'check' within 400 ms");
	cJSON_Delete(q);
	/* Replaced: hello works again. */
	q = req("unload");
	KT_OK(sbx_torchref_call(r, q, 10000, &a));
	KT_EQ_INT(sbx_torchref_starts(r), 2);
	cJSON_Delete(a);
	cJSON_Delete(q);
	sbx_torchref_free(r);
}

static void
test_garbage_no_torch_no_script(void)
{
	sbx_torchref *r = client("garbage");
	cJSON *q = load_req(), *a;

	KT_EQ_INT(sbx_torchref_call(r, q, 10000, &a), KC_EPROTO);
	KT_CONTAINS(kc_lasterr(), "not a JSON object");
	sbx_torchref_free(r);

	r = client("no_torch");
	KT_EQ_INT(sbx_torchref_call(r, q, 10000, &a), KC_ENODEV);
	KT_CONTAINS(kc_lasterr(), "PyTorch");
	sbx_torchref_free(r);

	KT_OK(sbx_torchref_new(&r, "python3", "/nonexistent/torchref.py"));
	KT_EQ_INT(sbx_torchref_call(r, q, 10000, &a), KC_ENOENT);
	KT_CONTAINS(kc_lasterr(), "KCLAW_TORCHREF");
	sbx_torchref_free(r);

	KT_OK(sbx_torchref_new(&r, "/nonexistent/python3", standin));
	KT_EQ_INT(sbx_torchref_call(r, q, 10000, &a), KC_ENOENT);
	KT_CONTAINS(kc_lasterr(), "did not start");
	sbx_torchref_free(r);
	cJSON_Delete(q);
}

/* The warm process's socket in dir (the one *.sock there), or "". */
static void
warm_sock(const char *dir, char *out, size_t n)
{
	DIR *d = opendir(dir);
	struct dirent *de;

	out[0] = '\0';
	while (d != NULL && (de = readdir(d)) != NULL) {
		size_t len = strlen(de->d_name);
		if (len > 5 && strcmp(de->d_name + len - 5, ".sock") == 0)
			snprintf(out, n, "%s/%s", dir, de->d_name);
	}
	if (d != NULL)
		closedir(d);
}

/* Removes a warm test's folders (base/run and what is in it). */
static void
warm_cleanup(const char *base, const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	char p[PATH_MAX];

	while (d != NULL && (de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
		unlink(p);
	}
	if (d != NULL)
		closedir(d);
	rmdir(dir);
	rmdir(base);
}

/* Whether something accepts connections on the Unix socket at path. */
static int
listening(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM, 0), ok;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	close(fd);
	return ok;
}

static void
one_call(sbx_torchref *r)
{
	cJSON *q = load_req(), *a;

	KT_OK(sbx_torchref_call(r, q, 10000, &a));
	KT_ASSERT(is_ok(a));
	cJSON_Delete(a);
	cJSON_Delete(q);
}

/* inputs after one_call's load: the same process, which has the task. */
static void
inputs_call(sbx_torchref *r)
{
	cJSON *q = req("inputs"), *a;

	cJSON_AddNumberToObject(q, "serial", 0);
	cJSON_AddNumberToObject(q, "seed", 7);
	cJSON_AddNumberToObject(q, "variant", 0);
	cJSON_AddBoolToObject(q, "keep", 1);
	KT_OK(sbx_torchref_call(r, q, 10000, &a));
	KT_ASSERT(is_ok(a));
	cJSON_Delete(a);
	cJSON_Delete(q);
}

/*
 * The warm process: started by the first client, kept after it, reused by
 * the next; a second client while one is served gets a private process;
 * killed (a hang, garbage), it is replaced by a fresh one. Its socket is
 * owner-only in an owner-only folder.
 */
static void
test_warm_reuse(void)
{
	char base[] = "/tmp/kc_trw.XXXXXX", dir[PATH_MAX], sock[PATH_MAX];
	sbx_torchref *a, *b, *c;
	struct stat sb;
	pid_t warm;
	uint64_t until;

	KT_ASSERT(mkdtemp(base) != NULL);
	snprintf(dir, sizeof(dir), "%s/run", base);
	setenv("KCLAW_TORCHREF_WARM", dir, 1);
	setenv("KCLAW_TORCHREF_IDLE_S", "60", 1);
	a = client("ok");
	one_call(a);
	KT_ASSERT(sbx_torchref_is_warm(a));
	warm = sbx_torchref_pid(a);
	KT_ASSERT(warm > 0);
	/* Every request of one sandbox goes over its one connection: the
	 * task it loaded is there for its inputs (a new connection per
	 * request met BUSY and fell to a private process with no task). */
	inputs_call(a);
	KT_ASSERT(sbx_torchref_is_warm(a));
	KT_EQ_INT(sbx_torchref_pid(a), warm);
	KT_EQ_INT(sbx_torchref_starts(a), 1);
	warm_sock(dir, sock, sizeof(sock));
	KT_ASSERT(sock[0] != '\0');
	KT_OK(stat(sock, &sb));
	KT_EQ_INT(sb.st_mode & 0777, 0600);
	KT_OK(stat(dir, &sb));
	KT_EQ_INT(sb.st_mode & 0777, 0700);

	/* Busy: the second sandbox gets a private process. */
	b = client("ok");
	one_call(b);
	KT_ASSERT(!sbx_torchref_is_warm(b));
	KT_ASSERT(sbx_torchref_pid(b) != warm);
	sbx_torchref_free(b);
	sbx_torchref_free(a);

	/* Kept: the next sandbox is served by the same process, whose task
	 * is still loaded. */
	c = client("ok");
	one_call(c);
	KT_ASSERT(sbx_torchref_is_warm(c));
	KT_EQ_INT(sbx_torchref_pid(c), warm);
	KT_EQ_INT(sbx_torchref_starts(c), 1);

	/* Killed, it is replaced by a fresh one. */
	sbx_torchref_kill(c);
	until = kc_mono_ns() + 5000000000ull;
	while (listening(sock) && kc_mono_ns() < until)
		kc_sleep_ms(10);
	KT_ASSERT(!listening(sock));
	one_call(c);
	KT_ASSERT(sbx_torchref_is_warm(c));
	KT_ASSERT(sbx_torchref_pid(c) != warm);
	sbx_torchref_kill(c);
	sbx_torchref_free(c);
	warm_cleanup(base, dir);
	unsetenv("KCLAW_TORCHREF_WARM");
	unsetenv("KCLAW_TORCHREF_IDLE_S");
}

/* Left idle, the warm process exits and takes its socket with it. */
static void
test_warm_idle_exit(void)
{
	char base[] = "/tmp/kc_trw.XXXXXX", dir[PATH_MAX], sock[PATH_MAX];
	sbx_torchref *a;
	pid_t warm;
	uint64_t until;

	KT_ASSERT(mkdtemp(base) != NULL);
	snprintf(dir, sizeof(dir), "%s/run", base);
	setenv("KCLAW_TORCHREF_WARM", dir, 1);
	setenv("KCLAW_TORCHREF_IDLE_S", "1", 1);
	a = client("ok");
	one_call(a);
	warm = sbx_torchref_pid(a);
	warm_sock(dir, sock, sizeof(sock));
	KT_ASSERT(sock[0] != '\0');
	sbx_torchref_free(a);
	until = kc_mono_ns() + 10000000000ull;
	while (access(sock, F_OK) == 0 && kc_mono_ns() < until)
		kc_sleep_ms(20);
	KT_ASSERT(access(sock, F_OK) != 0);
	/* Reaped or a zombie of init's: it no longer serves. */
	KT_ASSERT(kill(warm, 0) != 0 || !listening(sock));
	warm_cleanup(base, dir);
	unsetenv("KCLAW_TORCHREF_WARM");
	unsetenv("KCLAW_TORCHREF_IDLE_S");
}

/* One line to the socket fd and, with want_reply, one line back (5 s at
 * most): 0, 1 when the reply is BUSY, or -1. */
static int
raw_line(int fd, const char *line, int want_reply)
{
	char buf[65536];
	size_t n = 0;

	if (send(fd, line, strlen(line), MSG_NOSIGNAL) !=
	        (ssize_t)strlen(line) ||
	    send(fd, "\n", 1, MSG_NOSIGNAL) != 1)
		return -1;
	while (want_reply && n < sizeof(buf) - 1) {
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		ssize_t got;
		if (poll(&pf, 1, 5000) <= 0 ||
		    (got = read(fd, buf + n, sizeof(buf) - 1 - n)) <= 0)
			return -1;
		n += (size_t)got;
		buf[n] = '\0';
		if (memchr(buf, '\n', n) != NULL)
			return strstr(buf, "\"BUSY\"") != NULL;
	}
	return 0;
}

/* A request that still runs after its sandbox hung up (the child killed
 * at its deadline while the reference hangs) ends the warm process: it
 * does not hold the GPU for good. */
static void
test_warm_orphan_exits(void)
{
	char base[] = "/tmp/kc_trw.XXXXXX", dir[PATH_MAX], sock[PATH_MAX];
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	sbx_torchref *a;
	cJSON *q;
	char *text;
	uint64_t until;
	int fd;

	KT_ASSERT(mkdtemp(base) != NULL);
	snprintf(dir, sizeof(dir), "%s/run", base);
	setenv("KCLAW_TORCHREF_WARM", dir, 1);
	setenv("KCLAW_TORCHREF_IDLE_S", "60", 1);
	setenv("KCLAW_TORCHREF_ORPHAN_S", "1", 1);
	a = client("hang_on_check");
	one_call(a);
	warm_sock(dir, sock, sizeof(sock));
	KT_ASSERT(sock[0] != '\0');
	sbx_torchref_free(a);

	/* A sandbox of its own: hello, load, a check that hangs, and gone. */
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	/* Busy until the process has seen the last client's end of file. */
	until = kc_mono_ns() + 5000000000ull;
	for (;;) {
		fd = socket(AF_UNIX, SOCK_STREAM, 0);
		KT_OK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)));
		if (raw_line(fd, "{\"op\":\"hello\"}", 1) == 0)
			break;
		close(fd);
		KT_ASSERT(kc_mono_ns() < until);
		kc_sleep_ms(20);
	}
	q = load_req();
	text = cJSON_PrintUnformatted(q);
	KT_OK(raw_line(fd, text, 1));
	free(text);
	cJSON_Delete(q);
	KT_OK(raw_line(fd,
	    "{\"op\":\"check\",\"serial\":0,\"atol\":0.01,\"rtol\":0.01,"
	    "\"max_rel_norm\":0.01,\"hold\":false,\"compare_held\":false}",
	    0));
	close(fd);
	until = kc_mono_ns() + 10000000000ull;
	while (access(sock, F_OK) == 0 && kc_mono_ns() < until)
		kc_sleep_ms(20);
	KT_ASSERT(access(sock, F_OK) != 0);
	KT_ASSERT(!listening(sock));
	warm_cleanup(base, dir);
	unsetenv("KCLAW_TORCHREF_WARM");
	unsetenv("KCLAW_TORCHREF_IDLE_S");
	unsetenv("KCLAW_TORCHREF_ORPHAN_S");
}

/* A baseline at the candidate's precision: the mode for what
 * sbx_precision_scan found, and the reference's echo of it. */
static void
test_matched_precision(void)
{
	sbx_torchref *r = client("ok");
	cJSON *q, *a;

	KT_ASSERT(sbx_torchref_precision("") == NULL);
	KT_ASSERT(sbx_torchref_precision(NULL) == NULL);
	KT_EQ_STR(sbx_torchref_precision("tf32"), "tf32");
	KT_EQ_STR(sbx_torchref_precision("a matmul step with tf32"), "tf32");
	KT_EQ_STR(sbx_torchref_precision("__half, __float2half"), "f16");
	KT_EQ_STR(sbx_torchref_precision("tf32, half2"), "f16");
	KT_EQ_STR(sbx_torchref_precision("16-bit PTX (.f16/.bf16)"), "f16");
	KT_EQ_STR(sbx_torchref_precision("__nv_bfloat16, __hadd"), "bf16");
	KT_EQ_STR(sbx_torchref_precision("__nv_fp8_e4m3"), "bf16");
	KT_ASSERT(sbx_torchref_precision("something else") == NULL);

	one_call(r);
	q = req("baseline");
	cJSON_AddStringToObject(q, "mode", "eager");
	cJSON_AddNumberToObject(q, "warmup", 1);
	cJSON_AddNumberToObject(q, "iters", 5);
	cJSON_AddBoolToObject(q, "flush", 1);
	cJSON_AddNumberToObject(q, "seed", 7);
	cJSON_AddStringToObject(q, "precision", "tf32");
	KT_OK(sbx_torchref_call(r, q, 10000, &a));
	KT_ASSERT(is_ok(a));
	KT_EQ_STR(
	    cJSON_GetStringValue(cJSON_GetObjectItem(a, "precision")), "tf32");
	KT_ASSERT(num(a, "median_ms") == 0.5);
	cJSON_Delete(a);
	cJSON_Delete(q);
	sbx_torchref_free(r);
}

int
main(void)
{
	const char *src = getenv("KCLAW_SRC");
	const char *tmp = getenv("TMPDIR");

	snprintf(standin, sizeof(standin),
	    "%s/tests/sandbox/torchref_standin.py", src ? src : ".");
	snprintf(once_path, sizeof(once_path), "%s/kc_standin_once.%d",
	    tmp ? tmp : "/tmp", (int)getpid());
	KT_RUN(test_protocol);
	KT_RUN(test_send_then_receive);
	KT_RUN(test_pipelined_requests);
	KT_RUN(test_staged_serials);
	KT_RUN(test_settle_keeps_replies);
	KT_RUN(test_crash_then_restart);
	KT_RUN(test_hang_is_killed);
	KT_RUN(test_garbage_no_torch_no_script);
	KT_RUN(test_warm_reuse);
	KT_RUN(test_warm_idle_exit);
	KT_RUN(test_warm_orphan_exits);
	KT_RUN(test_matched_precision);
	unlink(once_path);
	return 0;
}
