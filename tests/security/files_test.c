/*
 * files_test.c - what a spec or a bundle can make kclaw read. A file is
 * opened once and checked on its descriptor, so a link swapped in between
 * Submit's check and the importer's read imports nothing from outside the
 * roots; the deployment's own files (kclaw.json, db/, run/, ...) are never
 * data; task.json obeys the bundle's rules and a FIFO never blocks
 * kclawd or `kclaw eval`; every number of a task is bounded, with the
 * bound in the message; text is UTF-8; JSON too deep or too large is
 * refused as what it is. One group per argument: swap, home, fifo,
 * bounds, text, kclawd.
 */
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "blobs.h"
#include "bundle.h"
#include "npy.h"
#include "orchestrator/harness.h"
#include "security.h"
#include "spec_check.h"
#include "store.h"

static char outside[64]; /* a folder in no root, with secret.npy */

/* A .npy file of 16 floats, each fill. */
static void
npy_file(const char *path, float fill)
{
	float v[16];
	kc_npy a = {0};

	for (int i = 0; i < 16; i++)
		v[i] = fill;
	a.dtype = KCLAW__DTYPE__F32;
	a.ndim = 1;
	a.shape[0] = 16;
	a.count = 16;
	a.elem_size = 4;
	a.data = v;
	KT_OK(kc_npy_write(path, &a));
}

static void
sh(const char *fmt, ...)
{
	char cmd[2048];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	if (system(cmd) != 0)
		KT_FAIL("command failed: %s", cmd);
}

static void
make_outside(void)
{
	char path[128];

	snprintf(outside, sizeof(outside), "/tmp/kc-files-out-XXXXXX");
	KT_ASSERT(mkdtemp(outside) != NULL);
	snprintf(path, sizeof(path), "%s/secret.npy", outside);
	npy_file(path, 666);
	snprintf(path, sizeof(path), "%s/x.npy", outside);
	npy_file(path, 666);
}

static void
remove_outside(void)
{
	sh("rm -rf '%s'", outside);
}

/* A heap copy of spec (the importer changes the one it is given). */
static Kclaw__TaskSpec *
spec_copy(const Kclaw__TaskSpec *spec)
{
	Kclaw__TaskSpec *c;
	uint8_t *buf;
	size_t len;

	KT_OK(kc_pb_pack(&spec->base, &buf, &len));
	c = kclaw__task_spec__unpack(NULL, len, buf);
	free(buf);
	KT_ASSERT(c != NULL);
	return c;
}

/* h_spec's task with its input x read from path. */
static Kclaw__TaskSpec *
spec_with_path(const char *path)
{
	Kclaw__TaskSpec *spec = h_spec("files", "", 1);
	Kclaw__TensorData *x = spec->reference->sets[0]->inputs[0];

	x->data.data = NULL;
	x->data.len = 0;
	x->path = (char *)path;
	return spec;
}

/* A copy of examples/softmax_rows in dir, whose task.json is made from
 * the example's with "from" replaced by "to" (NULL: as it is). */
static void
bundle_copy(const char *dir, const char *from, const char *to)
{
	char path[600], *text, *hit;
	size_t len;
	kc_str s = {0};

	sh("mkdir -p '%s' && cp -r '%s/examples/softmax_rows/.' '%s'", dir,
	    getenv("KCLAW_SRC"), dir);
	if (from == NULL)
		return;
	snprintf(path, sizeof(path), "%s/task.json", dir);
	KT_OK(kc_read_file(path, 1 << 20, &text, &len));
	KT_ASSERT((hit = strstr(text, from)) != NULL);
	KT_OK(kc_str_appendn(&s, text, (size_t)(hit - text)));
	KT_OK(kc_str_append(&s, to));
	KT_OK(kc_str_append(&s, hit + strlen(from)));
	KT_OK(kc_write_file(path, s.buf, s.len));
	kc_str_free(&s);
	free(text);
}

/* ------------------------------------------------------------------ swap */

/* Rules that change the file system after the check, before the open:
 * the moment a racing local user would pick. */
static const char *swap_path, *swap_to;

static int
swap_file_for_link(void *arg, const char *what, const char *real)
{
	(void)arg, (void)what, (void)real;
	KT_ASSERT(unlink(swap_path) == 0 && symlink(swap_to, swap_path) == 0);
	return 0;
}

static int
swap_folder_for_link(void *arg, const char *what, const char *real)
{
	char old[600];

	(void)arg, (void)what, (void)real;
	snprintf(old, sizeof(old), "%s.old", swap_path);
	KT_ASSERT(rename(swap_path, old) == 0);
	KT_ASSERT(symlink(swap_to, swap_path) == 0);
	return 0;
}

static int
swap_file_for_fifo(void *arg, const char *what, const char *real)
{
	(void)arg, (void)what, (void)real;
	KT_ASSERT(unlink(swap_path) == 0 && mkfifo(swap_path, 0600) == 0);
	return 0;
}

/* kc_bundle_open: whatever is swapped in after the check is refused, and
 * nothing blocks. */
static void
test_open_refuses_swaps(void)
{
	char dir[] = "/tmp/kc-files-swap-XXXXXX", file[128], sub[128], to[128];
	kc_path_rule rule = {0};
	kc_bundle_file f;

	KT_ASSERT(mkdtemp(dir) != NULL);
	make_outside();
	snprintf(file, sizeof(file), "%s/x.npy", dir);
	snprintf(to, sizeof(to), "%s/secret.npy", outside);

	/* Unchanged: opened, at its real path, the .npy magic checked. */
	npy_file(file, 1);
	KT_OK(kc_bundle_open(file, "tensor 'x'", KC_OPEN_NPY, NULL, &f));
	KT_ASSERT(f.fd >= 0 && f.size > 0);
	kc_bundle_close(&f);

	/* The file becomes a link to a file outside. */
	swap_path = file;
	swap_to = to;
	rule.allow = swap_file_for_link;
	KT_EQ_INT(kc_bundle_open(file, "tensor 'x'", KC_OPEN_NPY, &rule, &f),
	    KC_EPERM);
	KT_CONTAINS(kc_lasterr(), "tensor 'x'");
	KT_CONTAINS(kc_lasterr(), "symbolic link");
	KT_EQ_INT(f.fd, -1);

	/* A folder of the path becomes a link to a folder outside. */
	snprintf(sub, sizeof(sub), "%s/d", dir);
	KT_ASSERT(mkdir(sub, 0700) == 0);
	snprintf(file, sizeof(file), "%s/d/x.npy", dir);
	npy_file(file, 1);
	swap_path = sub;
	swap_to = outside;
	rule.allow = swap_folder_for_link;
	KT_EQ_INT(kc_bundle_open(file, "tensor 'x'", KC_OPEN_NPY, &rule, &f),
	    KC_EPERM);
	KT_CONTAINS(kc_lasterr(), "swapped");

	/* The file becomes a FIFO: refused at once, not waited on. */
	snprintf(file, sizeof(file), "%s/y.npy", dir);
	npy_file(file, 1);
	swap_path = file;
	rule.allow = swap_file_for_fifo;
	alarm(20);
	KT_EQ_INT(kc_bundle_open(file, "tensor 'y'", KC_OPEN_NPY, &rule, &f),
	    KC_EINVAL);
	alarm(0);
	KT_CONTAINS(kc_lasterr(), "a FIFO");

	/* Not a .npy file. */
	snprintf(file, sizeof(file), "%s/notes.txt", dir);
	KT_OK(kc_write_file(file, "not a tensor\n", 13));
	KT_EQ_INT(kc_bundle_open(file, "tensor 'z'", KC_OPEN_NPY, NULL, &f),
	    KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "is not a .npy file");
	sh("rm -rf '%s'", dir);
	remove_outside();
}

/* Submit's check, then a link swapped in, then the importer: the import
 * reads nothing from outside the roots (before: the check resolved the
 * path once and the importer read whatever the path led to later). */
static void
test_check_then_import(void)
{
	char bundle[300], file[320], moved[320], cache[300], secret[128],
	    hash[65];
	Kclaw__TaskSpec *spec, *copy;
	char *bytes;
	size_t len;
	store *s;

	h_setup("files-swap", "");
	KT_ASSERT(chdir(h_home) == 0);
	make_outside();
	snprintf(bundle, sizeof(bundle), "%s/bundle", h_home);
	snprintf(file, sizeof(file), "%s/x.npy", bundle);
	snprintf(cache, sizeof(cache), "%s/blobs", h_cfg.run_dir);
	snprintf(secret, sizeof(secret), "%s/secret.npy", outside);
	KT_OK(kc_mkdirs(bundle, 0700));
	npy_file(file, 1);
	KT_OK(kc_read_file(secret, 1 << 20, &bytes, &len));
	kc_sha256_hex(bytes, len, hash);
	free(bytes);
	KT_OK(kc_mkdirs(h_cfg.db_dir, 0700));
	KT_OK(store_open(&s, h_cfg.db_dir));
	spec = spec_with_path(file);

	/* The file becomes a link to a file outside every root. */
	KT_OK(orch_spec_paths_check(&h_cfg, spec));
	KT_ASSERT(unlink(file) == 0 && symlink(secret, file) == 0);
	copy = spec_copy(spec);
	KT_EQ_INT(orch_blobs_import_checked(s, copy, cache, &h_cfg, NULL, NULL),
	    KC_EPERM);
	KT_CONTAINS(kc_lasterr(), "tensor 'x'");
	KT_CONTAINS(kc_lasterr(), "outside the allowed roots");
	KT_ASSERT(copy->reference->sets[0]->inputs[0]->blob[0] == '\0');
	KT_ASSERT(!orch_blob_stored(s, cache, hash, NULL));
	kclaw__task_spec__free_unpacked(copy, NULL);
	/* Submit now says the same. */
	KT_EQ_INT(orch_spec_paths_check(&h_cfg, spec), KC_EPERM);

	/* The bundle folder becomes a link to a folder outside. */
	KT_ASSERT(unlink(file) == 0);
	npy_file(file, 1);
	KT_OK(orch_spec_paths_check(&h_cfg, spec));
	snprintf(moved, sizeof(moved), "%s.old", bundle);
	KT_ASSERT(rename(bundle, moved) == 0 && symlink(outside, bundle) == 0);
	snprintf(file, sizeof(file), "%s/x.npy", bundle);
	copy = spec_copy(spec);
	KT_EQ_INT(orch_blobs_import_checked(s, copy, cache, &h_cfg, NULL, NULL),
	    KC_EPERM);
	KT_CONTAINS(kc_lasterr(), "outside the allowed roots");
	KT_ASSERT(!orch_blob_stored(s, cache, hash, NULL));
	kclaw__task_spec__free_unpacked(copy, NULL);

	/* Left alone, the file is imported. */
	KT_ASSERT(unlink(bundle) == 0 && rename(moved, bundle) == 0);
	copy = spec_copy(spec);
	KT_OK(orch_blobs_import_checked(s, copy, cache, &h_cfg, NULL, NULL));
	KT_EQ_INT(strlen(copy->reference->sets[0]->inputs[0]->blob), 64);
	kclaw__task_spec__free_unpacked(copy, NULL);
	store_close(s);
	remove_outside();
	h_teardown();
}

/* ------------------------------------------------------------------ home */

/* The deployment's own files are refused as tensors whatever root holds
 * them (before: the home is a root, and kclaw.json was imported as a
 * tensor and handed back by the Blob rpc). */
static void
test_home_files_are_not_data(void)
{
	static const char *const own[] = {"kclaw.json", "run/kclawd.log",
	    "run/blobs/a.npy", "db/CURRENT", "cache/blobs/b.npy",
	    "recordings/r.npy", "bundles/key.npy", "bundles/b/x.npy"};
	char path[600], json[600];
	kc_path_rule rule = {.allow = orch_data_rule, .arg = &h_cfg};
	Kclaw__TaskSpec *loaded;

	h_setup("files-home", "");
	KT_ASSERT(chdir(h_home) == 0);
	/* The LLM key file kclaw.json names, shaped like a tensor. */
	snprintf(path, sizeof(path), "%s/kclaw.json", h_home);
	snprintf(json, sizeof(json),
	    "{\"token\": \"secret-token\", \"llm\": {\"api_key_file\": "
	    "\"%s/bundles/key.npy\"}}\n",
	    h_home);
	KT_OK(kc_write_file(path, json, strlen(json)));
	sh("cd '%s' && mkdir -p run/blobs db cache/blobs recordings bundles/b "
	   "&& echo log >run/kclawd.log && echo MANIFEST >db/CURRENT",
	    h_home);
	for (size_t i = 2; i < KC_ARRAY_LEN(own); i++) {
		snprintf(path, sizeof(path), "%s/%s", h_home, own[i]);
		if (strstr(own[i], ".npy") && strcmp(own[i], "bundles/b/x.npy"))
			npy_file(path, 2);
	}
	/* A link in a bundle to the home's kclaw.json. */
	snprintf(path, sizeof(path), "%s/bundles/b/x.npy", h_home);
	KT_ASSERT(symlink("../../kclaw.json", path) == 0);
	for (size_t i = 0; i < KC_ARRAY_LEN(own); i++) {
		snprintf(path, sizeof(path), "%s/%s", h_home, own[i]);
		KT_EQ_INT(orch_spec_paths_check(&h_cfg, spec_with_path(path)),
		    KC_EPERM);
		KT_CONTAINS(kc_lasterr(), "input tensor 'x'");
		KT_CONTAINS(kc_lasterr(), "the deployment's own files");
	}
	/* A hard link to kclaw.json has a path of its own. */
	snprintf(path, sizeof(path), "%s/kclaw.json", h_home);
	snprintf(json, sizeof(json), "%s/bundles/hard.npy", h_home);
	KT_ASSERT(link(path, json) == 0);
	KT_EQ_INT(
	    orch_spec_paths_check(&h_cfg, spec_with_path(json)), KC_EPERM);
	KT_CONTAINS(kc_lasterr(), "the deployment's own files");
	/* Naming run/ as a root changes nothing. */
	snprintf(path, sizeof(path), "%s/run", h_home);
	setenv("KCLAW_BUNDLE_ROOTS", path, 1);
	snprintf(path, sizeof(path), "%s/run/blobs/a.npy", h_home);
	KT_EQ_INT(
	    orch_spec_paths_check(&h_cfg, spec_with_path(path)), KC_EPERM);
	unsetenv("KCLAW_BUNDLE_ROOTS");
	/* Inside the roots but not a .npy file: refused by its content. */
	snprintf(path, sizeof(path), "%s/bundles/notes.txt", h_home);
	KT_OK(kc_write_file(path, "notes\n", 6));
	KT_EQ_INT(
	    orch_spec_paths_check(&h_cfg, spec_with_path(path)), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "not a .npy file");
	/* A tensor file of a bundle in the home is data. */
	snprintf(path, sizeof(path), "%s/bundles/ok.npy", h_home);
	npy_file(path, 3);
	KT_OK(orch_spec_paths_check(&h_cfg, spec_with_path(path)));

	/* A bundle that is the home itself may not name kclaw.json as its
	 * context (it would reach the agents, status and the dashboard). */
	bundle_copy(h_home, "\"context.py\"", "\"kclaw.json\"");
	KT_EQ_INT(kc_bundle_load_rule(h_home, &rule, &loaded), KC_EPERM);
	KT_CONTAINS(kc_lasterr(), "context");
	KT_CONTAINS(kc_lasterr(), "the deployment's own files");
	/* The same bundle beside the home's files loads. */
	snprintf(path, sizeof(path), "%s/bundles/softmax", h_home);
	bundle_copy(path, NULL, NULL);
	KT_OK(kc_bundle_load_rule(path, &rule, &loaded));
	kclaw__task_spec__free_unpacked(loaded, NULL);
	h_teardown();
}

/* ------------------------------------------------------------------ fifo */

/* task.json obeys the rules of the files it names: no way out of the
 * folder, and a FIFO is refused at once instead of blocking the reader. */
static void
test_task_json_rules(void)
{
	char dir[] = "/tmp/kc-files-fifo-XXXXXX", b[128], path[300], cmd[1200],
	     out[300], *text;
	Kclaw__TaskSpec *spec;
	uint64_t t0;
	size_t len;
	int st;

	KT_ASSERT(mkdtemp(dir) != NULL);
	make_outside();
	snprintf(b, sizeof(b), "%s/b", dir);
	bundle_copy(b, NULL, NULL);
	snprintf(path, sizeof(path), "%s/task.json", b);
	sh("cp '%s' '%s/task.json' && cp '%s' '%s/inner.json'", path, outside,
	    path, b);

	/* A FIFO: refused within a second, the loader never waits. */
	KT_ASSERT(unlink(path) == 0 && mkfifo(path, 0600) == 0);
	t0 = kc_mono_ms();
	alarm(20);
	KT_EQ_INT(kc_bundle_load(b, &spec), KC_EINVAL);
	alarm(0);
	KT_ASSERT(kc_mono_ms() - t0 < 5000);
	KT_CONTAINS(kc_lasterr(), "task.json");
	KT_CONTAINS(kc_lasterr(), "a FIFO, not a regular file");

	/* `kclaw eval` on it exits with the reason (timeout(1) would answer
	 * 124 for a hang). */
	snprintf(out, sizeof(out), "%s/eval.out", dir);
	snprintf(cmd, sizeof(cmd),
	    "KCLAW_HOME='%s/home' KCLAW_CUDA_DRIVER=/nonexistent/libcuda.so.1 "
	    "timeout 30 '%s/kclaw' eval '%s' --compile-only --arch sm_90 "
	    ">'%s' 2>&1",
	    dir, getenv("KCLAW_BIN"), b, out);
	st = system(cmd);
	KT_ASSERT(
	    WIFEXITED(st) && WEXITSTATUS(st) != 124 && WEXITSTATUS(st) != 0);
	KT_OK(kc_read_file(out, 1 << 16, &text, &len));
	KT_CONTAINS(text, "a FIFO");
	free(text);

	/* A link to a task.json outside the bundle: refused, not followed. */
	snprintf(cmd, sizeof(cmd), "%s/task.json", outside);
	KT_ASSERT(unlink(path) == 0 && symlink(cmd, path) == 0);
	KT_EQ_INT(kc_bundle_load(b, &spec), KC_EPERM);
	KT_CONTAINS(kc_lasterr(), "leads outside the bundle folder");
	/* A link inside the bundle is followed. */
	KT_ASSERT(unlink(path) == 0 && symlink("inner.json", path) == 0);
	KT_OK(kc_bundle_load(b, &spec));
	kclaw__task_spec__free_unpacked(spec, NULL);

	/* A FIFO as the context file. */
	snprintf(path, sizeof(path), "%s/context.py", b);
	KT_ASSERT(unlink(path) == 0 && mkfifo(path, 0600) == 0);
	alarm(20);
	KT_EQ_INT(kc_bundle_load(b, &spec), KC_EINVAL);
	alarm(0);
	KT_CONTAINS(kc_lasterr(), "context");
	KT_CONTAINS(kc_lasterr(), "a FIFO");
	sh("rm -rf '%s'", dir);
	remove_outside();
}

/* ---------------------------------------------------------------- bounds */

/* Every number of a spec is bounded, and the refusal names the bound
 * (before: job_retries, max_repairs, eval_timeout_s took 2^32-1, and
 * agent_timeout_s x 1000 wrapped: 4294968 s became 704 ms). */
static void
test_spec_bounds(void)
{
	Kclaw__TaskSpec *spec = h_spec("bounds", "", 1);
	Kclaw__FsmParams p = KCLAW__FSM_PARAMS__INIT;
	Kclaw__Budget *b = spec->budget;
	struct {
		const char *field, *bound;
		uint32_t *u32;
		uint64_t *u64;
		double *dbl;
		double ok, bad;
	} cases[] = {
	    {"params.seeds", "at most 64", &p.seeds, NULL, NULL, 64, 65},
	    {"params.max_repairs", "at most 1000", &p.max_repairs, NULL, NULL,
	        1000, 4294967295.0},
	    {"params.job_retries", "at most 100", &p.job_retries, NULL, NULL,
	        100, 4294967295.0},
	    {"params.agent_timeout_s", "at most 86400", &p.agent_timeout_s,
	        NULL, NULL, 86400, 4294968},
	    {"params.eval_timeout_s", "at most 86400", &p.eval_timeout_s, NULL,
	        NULL, 86400, 4294967295.0},
	    {"params.max_duplicates", "at most 1000", &p.max_duplicates, NULL,
	        NULL, 1000, 1001},
	    {"params.rt", "from 0 to 100", NULL, NULL, &p.rt, 100, 101},
	    {"params.at", "from 0 to 1e+06", NULL, NULL, &p.at, 1e6, 1e7},
	    {"budget.rounds", "at most 100000", &b->rounds, NULL, NULL, 100000,
	        100001},
	    {"budget.tokens", "at most 1000000000000000", NULL, &b->tokens,
	        NULL, 1e15, 1e19},
	    {"budget.wall_seconds", "at most 1000000000", NULL,
	        &b->wall_seconds, NULL, 1e9, 1e19},
	    {"budget.target_speedup", "from 0 to 1e+06", NULL, NULL,
	        &b->target_speedup, 1e6, 1e7},
	    {"trials", "at most 1000", &spec->trials, NULL, NULL, 1000, 1001},
	};

	spec->params = &p;
	for (size_t i = 0; i < KC_ARRAY_LEN(cases); i++) {
		double v[2] = {cases[i].ok, cases[i].bad};
		for (int k = 0; k < 2; k++) {
			if (cases[i].u32)
				*cases[i].u32 = (uint32_t)v[k];
			if (cases[i].u64)
				*cases[i].u64 = (uint64_t)v[k];
			if (cases[i].dbl)
				*cases[i].dbl = v[k];
			if (k == 0) {
				KT_OK(kc_spec_check(spec));
				continue;
			}
			KT_EQ_INT(kc_spec_check(spec), KC_EINVAL);
			KT_CONTAINS(kc_lasterr(), cases[i].field);
			KT_CONTAINS(kc_lasterr(), cases[i].bound);
		}
		if (cases[i].u32)
			*cases[i].u32 = 0;
		if (cases[i].u64)
			*cases[i].u64 = 0;
		if (cases[i].dbl)
			*cases[i].dbl = 0;
	}
	/* What JSON cannot hold, protobuf can. */
	spec->tensors[0]->scalar_value = NAN;
	KT_EQ_INT(kc_spec_check(spec), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "scalar_value");
	spec->tensors[0]->scalar_value = 0;
	spec->reference->flops = -1;
	KT_EQ_INT(kc_spec_check(spec), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "reference.flops");
	spec->reference->flops = 0;
	spec->params = NULL;
}

/* The same bounds in task.json, with the bound in the message. */
static void
test_bundle_bounds(void)
{
	static const struct {
		const char *from, *to, *want;
	} cases[] = {
	    {"\"seeds\": 3", "\"job_retries\": 4294967295",
	        "'job_retries' is 4.29497e+09; it must be an integer from 0 "
	        "to 100"},
	    {"\"seeds\": 3", "\"max_repairs\": 4294967295",
	        "'max_repairs' is 4.29497e+09; it must be an integer from 0 "
	        "to 1000"},
	    {"\"seeds\": 3", "\"agent_timeout_s\": 4294968",
	        "'agent_timeout_s' is 4.29497e+06; it must be an integer from "
	        "0 to 86400"},
	    {"\"seeds\": 3", "\"eval_timeout_s\": 86401",
	        "'eval_timeout_s' is 86401; it must be an integer from 0 to "
	        "86400"},
	    {"\"seeds\": 3", "\"seeds\": 65", "from 0 to 64"},
	    {"\"rt\": 0.3", "\"rt\": 1000", "from 0 to 100"},
	    {"\"rounds\": 15", "\"rounds\": 4294967295", "from 0 to 100000"},
	    {"\"rounds\": 15", "\"tokens\": 9007199254740991",
	        "from 0 to 1e+15"},
	    {"\"rounds\": 15", "\"wall_seconds\": 1e12",
	        "from 0 to 1000000000"},
	    {"\"trials\": 3", "\"trials\": 100000", "from 0 to 1000"},
	};
	char dir[] = "/tmp/kc-files-bounds-XXXXXX", b[128];
	Kclaw__TaskSpec *spec;

	KT_ASSERT(mkdtemp(dir) != NULL);
	for (size_t i = 0; i < KC_ARRAY_LEN(cases); i++) {
		snprintf(b, sizeof(b), "%s/b%zu", dir, i);
		bundle_copy(b, cases[i].from, cases[i].to);
		KT_EQ_INT(kc_bundle_load(b, &spec), KC_EINVAL);
		KT_CONTAINS(kc_lasterr(), cases[i].want);
	}
	/* At the bound: loaded. */
	snprintf(b, sizeof(b), "%s/ok", dir);
	bundle_copy(b, "\"seeds\": 3",
	    "\"seeds\": 64, \"job_retries\": 100, \"agent_timeout_s\": 86400");
	KT_OK(kc_bundle_load(b, &spec));
	KT_EQ_INT(spec->params->agent_timeout_s, 86400);
	KT_OK(kc_spec_check(spec));
	kclaw__task_spec__free_unpacked(spec, NULL);
	sh("rm -rf '%s'", dir);
}

/* ------------------------------------------------------------------ text */

static void
test_utf8(void)
{
	static const struct {
		const char *s;
		int ok;
		size_t bad;
	} cases[] = {
	    {"plain", 1, 0},
	    {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 1, 0},
	    {"caf\xe9", 0, 3},          /* Latin-1 */
	    {"a\xc0\x80", 0, 1},        /* overlong NUL */
	    {"ab\xed\xa0\x80", 0, 2},   /* a surrogate */
	    {"\xf4\x90\x80\x80", 0, 0}, /* past U+10FFFF */
	    {"x\xe2\x82", 0, 1},        /* cut short */
	    {"\xff", 0, 0},
	};

	for (size_t i = 0; i < KC_ARRAY_LEN(cases); i++) {
		size_t bad = 99;
		KT_EQ_INT(kc_utf8_valid(cases[i].s, strlen(cases[i].s), &bad),
		    cases[i].ok);
		if (!cases[i].ok)
			KT_EQ_INT(bad, cases[i].bad);
	}
}

/* Non-UTF-8 text is refused with the field named (before: it was stored,
 * and `status --json` and /api/result answered invalid JSON). */
static void
test_text_fields(void)
{
	Kclaw__TaskSpec *spec = h_spec("text", "", 1);
	Kclaw__Candidate cand = KCLAW__CANDIDATE__INIT;
	char dir[] = "/tmp/kc-files-text-XXXXXX", b[128], path[300];
	Kclaw__TaskSpec *loaded;

	spec->description = "caf\xe9";
	KT_EQ_INT(kc_spec_check(spec), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "description is not valid UTF-8");
	spec->description = "";
	spec->context = "\xff";
	KT_EQ_INT(kc_spec_check(spec), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "context is not valid UTF-8");
	spec->context = "";
	spec->tensors[0]->source_name = "x\xc0\x80";
	KT_EQ_INT(kc_spec_check(spec), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "tensors[0] 'x'.source_name");
	spec->tensors[0]->source_name = "";
	cand.source = "extern \"C\" __global__ void k() {}";
	cand.plan_json = "{\"steps\": [\"\xe9\"]}";
	spec->reference->cuda = &cand;
	KT_EQ_INT(kc_spec_check(spec), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "reference.cuda.plan_json");
	spec->reference->cuda = NULL;
	KT_OK(kc_spec_check(spec));

	/* task.json and the files it names. */
	KT_ASSERT(mkdtemp(dir) != NULL);
	snprintf(b, sizeof(b), "%s/desc", dir);
	bundle_copy(b, "Row softmax", "Row softm\xe4x");
	KT_EQ_INT(kc_bundle_load(b, &loaded), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "description is not valid UTF-8");
	snprintf(b, sizeof(b), "%s/name", dir);
	bundle_copy(b, "\"kind\": \"output\"",
	    "\"kind\": \"output\", \"source_name\": \"\xff\"");
	KT_EQ_INT(kc_bundle_load(b, &loaded), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "tensors[1].source_name is not valid UTF-8");
	snprintf(b, sizeof(b), "%s/key", dir);
	bundle_copy(b, "\"trials\"", "\"tr\xefls\"");
	KT_EQ_INT(kc_bundle_load(b, &loaded), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "a field name");
	snprintf(b, sizeof(b), "%s/plan", dir);
	bundle_copy(b, NULL, NULL);
	snprintf(path, sizeof(path), "%s/reference.plan.json", b);
	sh("printf ' ' >>'%s' && printf '\\351' >>'%s'", path, path);
	KT_EQ_INT(kc_bundle_load(b, &loaded), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "reference.plan");
	KT_CONTAINS(kc_lasterr(), "is not valid UTF-8");
	sh("rm -rf '%s'", dir);
}

/* JSON nested too deep, or too large, is refused as what it is (before:
 * "not valid JSON near line 1", and INTERNAL from kclawd). */
static void
test_json_depth_and_size(void)
{
	char dir[] = "/tmp/kc-files-json-XXXXXX", b[128], path[300];
	Kclaw__TaskSpec *spec;
	kc_str s = {0};

	KT_ASSERT(mkdtemp(dir) != NULL);
	snprintf(b, sizeof(b), "%s/deep", dir);
	KT_OK(kc_mkdirs(b, 0700));
	KT_OK(kc_str_append(&s, "{\"name\": "));
	for (int i = 0; i < 100000; i++)
		KT_OK(kc_str_append(&s, "["));
	for (int i = 0; i < 100000; i++)
		KT_OK(kc_str_append(&s, "]"));
	KT_OK(kc_str_append(&s, "}\n"));
	snprintf(path, sizeof(path), "%s/task.json", b);
	KT_OK(kc_write_file(path, s.buf, s.len));
	kc_str_free(&s);
	KT_EQ_INT(kc_bundle_load(b, &spec), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "nests more than 64 levels deep");
	KT_CONTAINS(kc_lasterr(), "depth limit");
	KT_ASSERT(strstr(kc_lasterr(), "not valid JSON") == NULL);
	/* A plan too. */
	KT_OK(kc_str_append(&s, "{\"steps\": "));
	for (int i = 0; i < 70; i++)
		KT_OK(kc_str_append(&s, "["));
	for (int i = 0; i < 70; i++)
		KT_OK(kc_str_append(&s, "]"));
	KT_OK(kc_str_append(&s, "}"));
	KT_EQ_INT(kc_plan_check(NULL, s.buf, "plan.json", 0), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "plan.json: the JSON nests more than 64");
	kc_str_free(&s);

	/* 6.7 MB of task.json: the size limit, named. */
	snprintf(b, sizeof(b), "%s/big", dir);
	bundle_copy(b, NULL, NULL);
	snprintf(path, sizeof(path), "%s/task.json", b);
	sh("head -c 6700000 /dev/zero | tr '\\0' ' ' >>'%s'", path);
	KT_EQ_INT(kc_bundle_load(b, &spec), KC_ENOSPC);
	KT_CONTAINS(kc_lasterr(), "task.json is ");
	KT_CONTAINS(kc_lasterr(), "over the limit of 1048576 bytes");
	KT_CONTAINS(kc_lasterr(), "keep tensors in .npy files");
	sh("rm -rf '%s'", dir);
}

/* ---------------------------------------------------------------- kclawd */

static const char deep_open[] =
    "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[";
static const char deep_close[] =
    "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]";

static int
submit_dir(const char *dir)
{
	Kclaw__SubmitRequest req = KCLAW__SUBMIT_REQUEST__INIT;
	Kclaw__SubmitResponse *resp;
	int rv;

	req.bundle_dir = (char *)dir;
	rv = h_call("Submit", &req.base, &kclaw__submit_response__descriptor,
	    (ProtobufCMessage **)&resp);
	if (rv == 0)
		kclaw__submit_response__free_unpacked(resp, NULL);
	return rv;
}

static void
health(void)
{
	Kclaw__HealthRequest req = KCLAW__HEALTH_REQUEST__INIT;
	ProtobufCMessage *resp;

	KT_OK(h_call(
	    "Health", &req.base, &kclaw__health_response__descriptor, &resp));
	protobuf_c_message_free_unpacked(resp, NULL);
}

/* The real kclawd: each finding is refused over the API with what it is,
 * and kclawd keeps answering (before: a FIFO task.json held its loop in
 * open() until Health timed out). */
static void
test_kclawd(void)
{
	char b[400], path[600];
	Kclaw__TaskSpec *spec;
	Kclaw__FsmParams p = KCLAW__FSM_PARAMS__INIT;
	pid_t kd;
	uint64_t t0;

	h_setup("files-kd", "");
	kd = h_kclawd();
	h_wait_up();

	snprintf(b, sizeof(b), "%s/bundles/fifo", h_home);
	bundle_copy(b, NULL, NULL);
	snprintf(path, sizeof(path), "%s/task.json", b);
	KT_ASSERT(unlink(path) == 0 && mkfifo(path, 0600) == 0);
	t0 = kc_mono_ms();
	KT_EQ_INT(submit_dir(b), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "a FIFO, not a regular file");
	health();
	fprintf(stderr, "FIFO task.json refused, Health answered, in %llu ms\n",
	    (unsigned long long)(kc_mono_ms() - t0));

	snprintf(b, sizeof(b), "%s/bundles/big", h_home);
	bundle_copy(b, NULL, NULL);
	snprintf(path, sizeof(path), "%s/task.json", b);
	sh("head -c 6700000 /dev/zero | tr '\\0' ' ' >>'%s'", path);
	KT_EQ_INT(submit_dir(b), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "over the limit of 1048576 bytes");

	snprintf(b, sizeof(b), "%s/bundles/deep", h_home);
	snprintf(path, sizeof(path), "\"trials\": %.70s%.70s", deep_open,
	    deep_close);
	bundle_copy(b, "\"trials\": 3", path);
	KT_EQ_INT(submit_dir(b), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "nests more than 64 levels deep");

	/* The home as a bundle whose context is kclaw.json. */
	bundle_copy(h_home, "\"context.py\"", "\"kclaw.json\"");
	KT_EQ_INT(submit_dir(h_home), KC_EPERM);
	KT_CONTAINS(kc_lasterr(), "the deployment's own files");

	/* A spec naming kclaw.json as a tensor. */
	snprintf(path, sizeof(path), "%s/kclaw.json", h_home);
	KT_EQ_INT(h_submit(spec_with_path(path), NULL, NULL), KC_EPERM);
	KT_CONTAINS(kc_lasterr(), "the deployment's own files");

	/* Bounds and text. */
	spec = h_spec("kd", "", 1);
	p.agent_timeout_s = 4294968;
	spec->params = &p;
	KT_EQ_INT(h_submit(spec, NULL, NULL), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(),
	    "params.agent_timeout_s is 4294968; at most "
	    "86400");
	spec->params = NULL;
	spec->description = "\xe9t\xe9";
	KT_EQ_INT(h_submit(spec, NULL, NULL), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "description is not valid UTF-8");
	spec->description = "";
	health();
	h_kill(kd, SIGTERM);
	h_teardown();
}

int
main(int argc, char **argv)
{
	const char *group = argc > 1 ? argv[1] : "";

	signal(SIGPIPE, SIG_IGN);
	if (strcmp(group, "swap") == 0) {
		KT_RUN(test_open_refuses_swaps);
		KT_RUN(test_check_then_import);
	} else if (strcmp(group, "home") == 0) {
		KT_RUN(test_home_files_are_not_data);
	} else if (strcmp(group, "fifo") == 0) {
		KT_RUN(test_task_json_rules);
	} else if (strcmp(group, "bounds") == 0) {
		KT_RUN(test_spec_bounds);
		KT_RUN(test_bundle_bounds);
	} else if (strcmp(group, "text") == 0) {
		KT_RUN(test_utf8);
		KT_RUN(test_text_fields);
		KT_RUN(test_json_depth_and_size);
	} else if (strcmp(group, "kclawd") == 0) {
		KT_RUN(test_kclawd);
	} else {
		fprintf(stderr,
		    "usage: files_test swap|home|fifo|bounds|text|kclawd\n");
		return 2;
	}
	return 0;
}
