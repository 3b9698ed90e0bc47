/*
 * test_torchref.c - the sandbox child's client of the PyTorch reference
 * process (gpu-sandbox/torchref.c, docs/torchref.md), against a stand-in
 * reference process written for the test (torchref_standin.py): real
 * processes over a real socketpair; crashes, hangs, garbage and a missing
 * PyTorch are the stand-in's, scripted.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
	q = req("inputs");
	cJSON_AddNumberToObject(q, "serial", 0);
	cJSON_AddNumberToObject(q, "seed", 1);
	cJSON_AddNumberToObject(q, "variant", 0);
	cJSON_AddBoolToObject(q, "keep", 1);
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
	KT_RUN(test_crash_then_restart);
	KT_RUN(test_hang_is_killed);
	KT_RUN(test_garbage_no_torch_no_script);
	unlink(once_path);
	return 0;
}
