/*
 * blobs_test.c - a task's tensor files are imported by content: the task
 * survives its bundle folder being deleted, equal contents are stored once,
 * and an import reports its progress and can be stopped between tensors.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "blobs.h"
#include "kc_err.h"
#include "kc_test.h"
#include "kc_util.h"
#include "store.h"

static char dir[64];

static Kclaw__TaskSpec *
spec_with_files(const char *x_path, const char *y_path)
{
	Kclaw__TaskSpec spec = KCLAW__TASK_SPEC__INIT;
	Kclaw__Reference ref = KCLAW__REFERENCE__INIT;
	Kclaw__TensorSet set = KCLAW__TENSOR_SET__INIT;
	Kclaw__TensorData x = KCLAW__TENSOR_DATA__INIT,
	                  y = KCLAW__TENSOR_DATA__INIT,
	                  z = KCLAW__TENSOR_DATA__INIT;
	Kclaw__TensorData *in[] = {&x, &z}, *ex[] = {&y};
	Kclaw__TaskSpec *out;
	uint8_t *buf;
	size_t len;

	x.name = "x", x.path = (char *)x_path;
	y.name = "y", y.path = (char *)y_path;
	z.name = "z", z.data.data = (uint8_t *)"inline bytes";
	z.data.len = 12;
	set.n_inputs = 2, set.inputs = in;
	set.n_expected = 1, set.expected = ex;
	ref.kind = KCLAW__REFERENCE__KIND__TENSORS;
	ref.n_sets = 1;
	Kclaw__TensorSet *sets[] = {&set};
	ref.sets = sets;
	spec.name = "t";
	spec.reference = &ref;
	/* As the orchestrator holds it: an unpacked message. */
	len = kclaw__task_spec__get_packed_size(&spec);
	KT_ASSERT((buf = malloc(len)) != NULL);
	kclaw__task_spec__pack(&spec, buf);
	KT_ASSERT((out = kclaw__task_spec__unpack(NULL, len, buf)) != NULL);
	free(buf);
	return out;
}

static void
check_file(const char *path, const char *want)
{
	char *data;
	size_t len;

	KT_OK(kc_read_file(path, 1 << 20, &data, &len));
	KT_EQ_INT(len, strlen(want));
	KT_ASSERT(memcmp(data, want, len) == 0);
	free(data);
}

static void
test_survives_bundle_deletion(void)
{
	char db[128], cache[128], xp[128], yp[128], hx[65];
	store *s;

	snprintf(db, sizeof(db), "%s/db", dir);
	snprintf(cache, sizeof(cache), "%s/run/blobs", dir);
	snprintf(xp, sizeof(xp), "%s/x.npy", dir);
	snprintf(yp, sizeof(yp), "%s/y.npy", dir);
	KT_OK(kc_write_file(xp, "x contents", 10));
	KT_OK(kc_write_file(yp, "y contents", 10));
	KT_OK(store_open(&s, db));
	Kclaw__TaskSpec *spec = spec_with_files(xp, yp);
	KT_ASSERT(orch_blobs_pending(spec));
	KT_OK(orch_blobs_import(s, spec, NULL, NULL, NULL));
	KT_ASSERT(!orch_blobs_pending(spec));
	Kclaw__TensorSet *set = spec->reference->sets[0];
	kc_sha256_hex("x contents", 10, hx);
	KT_EQ_STR(set->inputs[0]->blob, hx);
	KT_EQ_INT(strlen(set->expected[0]->blob), 64);
	KT_EQ_INT(strlen(set->inputs[1]->blob), 64);
	/* The blob holds the inline bytes: the spec no longer does. */
	KT_EQ_INT(set->inputs[1]->data.len, 0);

	/* The bundle goes away; the evaluation still gets the tensors. */
	KT_ASSERT(unlink(xp) == 0 && unlink(yp) == 0);
	KT_OK(orch_blobs_materialize(s, cache, spec));
	KT_ASSERT(strncmp(set->inputs[0]->path, cache, strlen(cache)) == 0);
	check_file(set->inputs[0]->path, "x contents");
	check_file(set->expected[0]->path, "y contents");
	check_file(set->inputs[1]->path, "inline bytes");
	KT_EQ_INT(set->inputs[1]->data.len, 0);
	kclaw__task_spec__free_unpacked(spec, NULL);

	/* A file that cannot be read is a clear error naming the tensor. */
	spec = spec_with_files("/nonexistent/x.npy", yp);
	KT_EQ_INT(orch_blobs_import(s, spec, NULL, NULL, NULL), KC_ENOENT);
	KT_CONTAINS(kc_lasterr(), "tensor 'x'");
	kclaw__task_spec__free_unpacked(spec, NULL);
	store_close(s);
}

struct seen {
	orch_blobs_progress last;
	unsigned calls, stop_after;
};

static int
on_progress(void *arg, const orch_blobs_progress *p)
{
	struct seen *s = arg;

	s->last = *p;
	return ++s->calls == s->stop_after ? KC_ECANCELED : 0;
}

/* The import as the orchestrator runs it: progress after each tensor,
 * the evaluation's cache written, a stop between tensors. */
static void
test_progress_and_cache(void)
{
	char db[128], cache[128], xp[128], yp[128], path[256];
	struct seen seen = {0};
	store *s;

	snprintf(db, sizeof(db), "%s/db2", dir);
	snprintf(cache, sizeof(cache), "%s/run2/blobs", dir);
	snprintf(xp, sizeof(xp), "%s/x2.npy", dir);
	snprintf(yp, sizeof(yp), "%s/y2.npy", dir);
	KT_OK(kc_write_file(xp, "x contents 2", 12));
	KT_OK(kc_write_file(yp, "y contents 2", 12));
	KT_OK(store_open(&s, db));
	Kclaw__TaskSpec *spec = spec_with_files(xp, yp);
	KT_OK(orch_blobs_import(s, spec, cache, on_progress, &seen));
	KT_EQ_INT(seen.calls, 4); /* before the first, after each of 3 */
	KT_EQ_INT(seen.last.tensors, 3);
	KT_EQ_INT(seen.last.done, 3);
	KT_EQ_INT(seen.last.bytes, 12 + 12 + 12);
	KT_EQ_INT(seen.last.bytes_done, 36);
	snprintf(path, sizeof(path), "%s/%s.npy", cache,
	    spec->reference->sets[0]->expected[0]->blob);
	check_file(path, "y contents 2");
	kclaw__task_spec__free_unpacked(spec, NULL);

	/* Stopped after the first tensor: the rest is not imported. */
	spec = spec_with_files(xp, yp);
	seen = (struct seen){.stop_after = 2};
	KT_EQ_INT(orch_blobs_import(s, spec, cache, on_progress, &seen),
	    KC_ECANCELED);
	KT_EQ_INT(strlen(spec->reference->sets[0]->inputs[0]->blob), 64);
	KT_ASSERT(orch_blobs_pending(spec));
	kclaw__task_spec__free_unpacked(spec, NULL);
	store_close(s);
}

int
main(void)
{
	snprintf(dir, sizeof(dir), "/tmp/kc-blobs-XXXXXX");
	KT_ASSERT(mkdtemp(dir) != NULL);
	KT_RUN(test_survives_bundle_deletion);
	KT_RUN(test_progress_and_cache);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	KT_ASSERT(system(cmd) == 0);
	return 0;
}
