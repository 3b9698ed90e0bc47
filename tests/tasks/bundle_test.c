/*
 * bundle_test.c - loading task bundles and candidate folders: every field
 * lands in the TaskSpec, and each kind of bad bundle is refused with a
 * message that names the file, the field and what is wrong.
 */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bundle.h"
#include "kc_err.h"
#include "kc_test.h"
#include "kc_util.h"

static char test_root[PATH_MAX];
static int test_seq;

static const char cuda_task[] =
    "{\"name\":\"vec_add\",\"description\":\"y = x + w\",\n"
    " \"tensors\":[\n"
    "  {\"name\":\"x\",\"kind\":\"input\",\"dtype\":\"f32\","
    "\"shape\":[1024],"
    "\"init\":{\"dist\":\"normal\",\"mean\":0.5,\"scale\":2}},\n"
    "  {\"name\":\"w\",\"kind\":\"parameter\",\"dtype\":\"f16\","
    "\"shape\":[1024],"
    "\"init\":{\"dist\":\"uniform\",\"low\":-1,\"high\":1}},\n"
    "  {\"name\":\"idx\",\"kind\":\"input\",\"dtype\":\"i32\","
    "\"shape\":[4,256],\"init\":{\"dist\":\"randint\",\"high\":10}},\n"
    "  {\"name\":\"t\",\"kind\":\"input\",\"dtype\":\"bf16\","
    "\"shape\":[8],\"init\":{\"dist\":\"heavy_tailed\",\"dof\":2}},\n"
    "  {\"name\":\"y\",\"kind\":\"output\",\"dtype\":\"f32\","
    "\"shape\":[1024]}],\n"
    " \"tolerance\":{\"atol\":1e-5,\"rtol\":1e-4,\"max_rel_norm\":1e-3},\n"
    " \"budget\":{\"rounds\":15,\"tokens\":100000,\"wall_seconds\":600,"
    "\"target_speedup\":2.5},\n"
    " \"params\":{\"seeds\":3,\"rt\":0.3,\"at\":0.25,"
    "\"explore_share\":0,\"sol_stop\":0.5},"
    " \"trials\":4, \"seed\":7,\n"
    " \"reference\":{\"kind\":\"cuda\",\"source\":\"reference.cu\","
    "\"plan\":\"reference.plan.json\"},\n"
    " \"context\":\"context.py\"}\n";

static const char ref_src[] =
    "extern \"C\" __global__ void add(const float *x, const float *w,\n"
    "    float *y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) y[i] = x[i] + w[i]; }\n";

static const char ref_plan[] =
    "{\"scratch\":[{\"name\":\"tmp\",\"bytes\":4096}],"
    "\"steps\":[{\"kernel\":\"add\",\"grid\":[4,1,1],\"block\":[256,1,1],"
    "\"shared_bytes\":0,\"args\":[\"x\",\"w\",\"y\",\"tmp\","
    "{\"i32\":1024}]}]}";

static void
put(const char *dir, const char *name, const void *data, size_t len)
{
	char path[PATH_MAX];
	char *slash;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	slash = strrchr(path, '/');
	*slash = '\0';
	KT_OK(kc_mkdirs(path, 0700));
	*slash = '/';
	KT_OK(kc_write_file(path, data, len));
}

static void
put_text(const char *dir, const char *name, const char *text)
{
	put(dir, name, text, strlen(text));
}

/* A fresh folder under the test root. */
static void
new_dir(char out[PATH_MAX])
{
	snprintf(out, PATH_MAX, "%s/b%d", test_root, test_seq++);
	KT_OK(kc_mkdirs(out, 0700));
}

/*
 * Writes a version-1 .npy file: descr and shape verbatim into the header,
 * then nbytes of data (which may disagree with the header on purpose).
 */
static void
put_npy(const char *dir, const char *name, const char *descr, const char *shape,
    size_t nbytes)
{
	char hdr[256];
	unsigned char *buf;
	size_t hl, total;

	hl = (size_t)snprintf(hdr, sizeof(hdr),
	    "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr,
	    shape);
	/* Pad so data starts on a 64-byte boundary, as NumPy does. */
	while ((10 + hl + 1) % 64 != 0)
		hdr[hl++] = ' ';
	hdr[hl++] = '\n';
	total = 10 + hl + nbytes;
	KT_ASSERT((buf = calloc(1, total)) != NULL);
	memcpy(buf, "\x93NUMPY\x01\x00", 8);
	buf[8] = (unsigned char)(hl & 0xff);
	buf[9] = (unsigned char)(hl >> 8);
	memcpy(buf + 10, hdr, hl);
	put(dir, name, buf, total);
	free(buf);
}

/* A cuda bundle whose task.json is cuda_task with one edit applied. */
static void
make_cuda_bundle(char dir[PATH_MAX], const char *from, const char *to)
{
	char *text;
	const char *at;

	new_dir(dir);
	KT_ASSERT((text = malloc(
	               sizeof(cuda_task) + (to ? strlen(to) : 0) + 1)) != NULL);
	if (from != NULL) {
		KT_ASSERT((at = strstr(cuda_task, from)) != NULL);
		sprintf(text, "%.*s%s%s", (int)(at - cuda_task), cuda_task, to,
		    at + strlen(from));
	} else {
		strcpy(text, cuda_task);
	}
	put_text(dir, "task.json", text);
	put_text(dir, "reference.cu", ref_src);
	put_text(dir, "reference.plan.json", ref_plan);
	put_text(dir, "context.py", "class Model: pass\n");
	free(text);
}

/* Loads a bundle that must be refused and returns the message. */
static const char *
refused(const char *dir)
{
	Kclaw__TaskSpec *spec = NULL;
	int rv = kc_bundle_load(dir, &spec);

	if (rv == 0)
		KT_FAIL("bundle %s was accepted", dir);
	KT_ASSERT(spec == NULL);
	KT_ASSERT(kc_lasterr()[0] != '\0');
	fprintf(stderr, "   refused: %s\n", kc_lasterr());
	return kc_lasterr();
}

static const char *
refused_edit(const char *from, const char *to)
{
	char dir[PATH_MAX];

	make_cuda_bundle(dir, from, to);
	return refused(dir);
}

static void
test_cuda_bundle(void)
{
	char dir[PATH_MAX];
	Kclaw__TaskSpec *s = NULL;
	const Kclaw__TensorSpec *t;

	make_cuda_bundle(dir, NULL, NULL);
	KT_OK(kc_bundle_load(dir, &s));
	KT_EQ_STR(s->name, "vec_add");
	KT_EQ_STR(s->description, "y = x + w");
	KT_EQ_INT(s->n_tensors, 5);

	t = s->tensors[0];
	KT_EQ_STR(t->name, "x");
	KT_EQ_INT(t->kind, KCLAW__TENSOR_KIND__INPUT);
	KT_EQ_INT(t->dtype, KCLAW__DTYPE__F32);
	KT_EQ_INT(t->n_shape, 1);
	KT_EQ_INT(t->shape[0], 1024);
	KT_EQ_INT(t->init->dist, KCLAW__DISTRIBUTION__NORMAL);
	KT_ASSERT(t->init->mean == 0.5 && t->init->scale == 2);

	t = s->tensors[1];
	KT_EQ_INT(t->kind, KCLAW__TENSOR_KIND__PARAMETER);
	KT_EQ_INT(t->dtype, KCLAW__DTYPE__F16);
	KT_EQ_INT(t->init->dist, KCLAW__DISTRIBUTION__UNIFORM);
	KT_ASSERT(t->init->low == -1 && t->init->high == 1);

	t = s->tensors[2];
	KT_EQ_INT(t->dtype, KCLAW__DTYPE__I32);
	KT_EQ_INT(t->n_shape, 2);
	KT_EQ_INT(t->shape[0], 4);
	KT_EQ_INT(t->shape[1], 256);
	KT_EQ_INT(t->init->dist, KCLAW__DISTRIBUTION__RANDINT);
	KT_ASSERT(t->init->low == 0 && t->init->high == 10);

	/* Omitted parameters arrive as their documented defaults. */
	t = s->tensors[3];
	KT_EQ_INT(t->dtype, KCLAW__DTYPE__BF16);
	KT_EQ_INT(t->init->dist, KCLAW__DISTRIBUTION__HEAVY_TAILED);
	KT_ASSERT(t->init->dof == 2 && t->init->scale == 1);

	t = s->tensors[4];
	KT_EQ_INT(t->kind, KCLAW__TENSOR_KIND__OUTPUT);
	KT_ASSERT(t->init == NULL);

	KT_ASSERT(s->tolerance->atol == 1e-5 && s->tolerance->rtol == 1e-4 &&
	    s->tolerance->max_rel_norm == 1e-3);
	KT_EQ_INT(s->budget->rounds, 15);
	KT_EQ_INT(s->budget->tokens, 100000);
	KT_EQ_INT(s->budget->wall_seconds, 600);
	KT_ASSERT(s->budget->target_speedup == 2.5);
	KT_EQ_INT(s->params->seeds, 3);
	KT_ASSERT(s->params->rt == 0.3 && s->params->at == 0.25);
	KT_EQ_INT(s->params->max_repairs, 0);
	/* task.json's 0 is off: negative on the wire, where 0 is default. */
	KT_ASSERT(s->params->explore_share < 0);
	KT_ASSERT(s->params->sol_stop == 0.5);
	KT_EQ_INT(s->trials, 4);
	KT_EQ_INT(s->seed, 7);

	KT_EQ_INT(s->reference->kind, KCLAW__REFERENCE__KIND__CUDA);
	KT_EQ_STR(s->reference->cuda->source, ref_src);
	KT_EQ_STR(s->reference->cuda->plan_json, ref_plan);
	KT_EQ_STR(s->reference->cuda->origin, "reference");
	KT_EQ_INT(s->reference->n_sets, 0);
	KT_EQ_STR(s->context, "class Model: pass\n");
	kclaw__task_spec__free_unpacked(s, NULL);

	/* Optional parts may be left out. */
	make_cuda_bundle(dir, ",\n \"context\":\"context.py\"", "");
	KT_OK(kc_bundle_load(dir, &s));
	KT_EQ_STR(s->context, "");
	kclaw__task_spec__free_unpacked(s, NULL);
}

/* A tensors bundle: two input sets of x (f32 [2,3]) and w, expected y. */
static void
make_tensor_bundle(char dir[PATH_MAX], const char *extra_init)
{
	char task[2048];

	new_dir(dir);
	snprintf(task, sizeof(task),
	    "{\"name\":\"kb_relu\",\n"
	    " \"tensors\":[\n"
	    "  {\"name\":\"x\",\"kind\":\"input\",\"dtype\":\"f32\","
	    "\"shape\":[2,3]%s},\n"
	    "  {\"name\":\"w\",\"kind\":\"parameter\",\"dtype\":\"i8\","
	    "\"shape\":[3]},\n"
	    "  {\"name\":\"y\",\"kind\":\"output\",\"dtype\":\"f32\","
	    "\"shape\":[2,3]}],\n"
	    " \"tolerance\":{\"atol\":1e-2,\"rtol\":1e-2,"
	    "\"max_rel_norm\":1e-2},\n"
	    " \"reference\":{\"kind\":\"tensors\",\"baseline_ms\":1.25,"
	    "\"torch_compile_ms\":0.75,\"sets\":[\n"
	    "  {\"seed\":1,\"inputs\":{\"x\":\"set0/x.npy\","
	    "\"w\":\"params/w.npy\"},\"expected\":{\"y\":\"set0/y.npy\"}},\n"
	    "  {\"seed\":2,\"inputs\":{\"x\":\"set1/x.npy\","
	    "\"w\":\"params/w.npy\"},\"expected\":{\"y\":\"set1/y.npy\"}}]}}\n",
	    extra_init);
	put_text(dir, "task.json", task);
	put_npy(dir, "set0/x.npy", "<f4", "(2, 3)", 24);
	put_npy(dir, "set0/y.npy", "<f4", "(2, 3)", 24);
	put_npy(dir, "set1/x.npy", "<f4", "(2, 3)", 24);
	put_npy(dir, "set1/y.npy", "<f4", "(2, 3)", 24);
	put_npy(dir, "params/w.npy", "|i1", "(3,)", 3);
}

static void
test_tensor_bundle(void)
{
	char dir[PATH_MAX], real[PATH_MAX], want[PATH_MAX + 16];
	Kclaw__TaskSpec *s = NULL;
	const Kclaw__Reference *r;

	make_tensor_bundle(dir, "");
	KT_OK(kc_bundle_load(dir, &s));
	KT_ASSERT(realpath(dir, real) != NULL);
	r = s->reference;
	KT_EQ_INT(r->kind, KCLAW__REFERENCE__KIND__TENSORS);
	KT_ASSERT(r->baseline_ms == 1.25 && r->torch_compile_ms == 0.75);
	KT_ASSERT(r->cuda == NULL);
	KT_EQ_INT(r->n_sets, 2);
	KT_EQ_INT(r->sets[1]->seed, 2);
	KT_EQ_INT(r->sets[1]->n_inputs, 2);
	KT_EQ_INT(r->sets[1]->n_expected, 1);
	KT_EQ_STR(r->sets[1]->inputs[0]->name, "x");
	snprintf(want, sizeof(want), "%s/set1/x.npy", real);
	KT_EQ_STR(r->sets[1]->inputs[0]->path, want);
	snprintf(want, sizeof(want), "%s/params/w.npy", real);
	KT_EQ_STR(r->sets[1]->inputs[1]->path, want);
	snprintf(want, sizeof(want), "%s/set1/y.npy", real);
	KT_EQ_STR(r->sets[1]->expected[0]->path, want);
	/* Inputs of a tensors reference come from the files. */
	KT_EQ_INT(s->tensors[0]->init->dist, KCLAW__DISTRIBUTION__FROM_NPY);
	KT_EQ_INT(s->tensors[1]->init->dist, KCLAW__DISTRIBUTION__FROM_NPY);
	kclaw__task_spec__free_unpacked(s, NULL);

	make_tensor_bundle(dir, ",\"init\":{\"dist\":\"from_npy\"}");
	KT_OK(kc_bundle_load(dir, &s));
	kclaw__task_spec__free_unpacked(s, NULL);
}

static void
test_npy_mismatch(void)
{
	char dir[PATH_MAX], path[PATH_MAX + 16];
	const char *m;

	make_tensor_bundle(dir, "");
	put_npy(dir, "set1/x.npy", "<f4", "(3, 2)", 24);
	m = refused(dir);
	KT_CONTAINS(m, "task.json");
	KT_CONTAINS(m, "set1/x.npy");
	KT_CONTAINS(m, "[3, 2]");
	KT_CONTAINS(m, "[2, 3]");

	make_tensor_bundle(dir, "");
	put_npy(dir, "set0/y.npy", "<f8", "(2, 3)", 48);
	m = refused(dir);
	KT_CONTAINS(m, "set0/y.npy");
	KT_CONTAINS(m, "'<f8'");
	KT_CONTAINS(m, "f32");

	make_tensor_bundle(dir, "");
	put_npy(dir, "set0/x.npy", "<f4", "(2, 3)", 20);
	KT_CONTAINS(refused(dir), "truncated");

	make_tensor_bundle(dir, "");
	put_text(dir, "set0/x.npy", "x,y\n1,2\n");
	KT_CONTAINS(refused(dir), "not a .npy file");

	make_tensor_bundle(dir, "");
	snprintf(path, sizeof(path), "%s/set1/y.npy", dir);
	KT_ASSERT(unlink(path) == 0);
	m = refused(dir);
	KT_CONTAINS(m, "set1/y.npy");
	KT_CONTAINS(m, "missing");

	make_tensor_bundle(dir, ",\"init\":{\"dist\":\"normal\"}");
	KT_CONTAINS(refused(dir), "from_npy");
}

static void
test_tensor_sets(void)
{
	char dir[PATH_MAX], task[1024];

	new_dir(dir);
	put_npy(dir, "x.npy", "<f4", "(4,)", 16);
	put_npy(dir, "y.npy", "<f4", "(4,)", 16);
#define TASK_FMT                                                               \
	"{\"name\":\"t\",\"tensors\":["                                        \
	"{\"name\":\"x\",\"kind\":\"input\",\"dtype\":\"f32\","                \
	"\"shape\":[4]},"                                                      \
	"{\"name\":\"y\",\"kind\":\"output\",\"dtype\":\"f32\","               \
	"\"shape\":[4]}],"                                                     \
	"\"tolerance\":{\"atol\":0,\"rtol\":0,\"max_rel_norm\":0},"            \
	"\"reference\":{\"kind\":\"tensors\"%s,\"sets\":[%s]}}"
	snprintf(task, sizeof(task), TASK_FMT, ",\"baseline_ms\":1",
	    "{\"inputs\":{\"x\":\"x.npy\"},\"expected\":{}}");
	put_text(dir, "task.json", task);
	KT_CONTAINS(refused(dir), "'expected' lacks tensor 'y'");

	snprintf(task, sizeof(task), TASK_FMT, ",\"baseline_ms\":1",
	    "{\"inputs\":{\"x\":\"x.npy\",\"y\":\"y.npy\"},"
	    "\"expected\":{\"y\":\"y.npy\"}}");
	put_text(dir, "task.json", task);
	KT_CONTAINS(refused(dir), "is an output");

	snprintf(task, sizeof(task), TASK_FMT, ",\"baseline_ms\":1",
	    "{\"inputs\":{\"x\":\"x.npy\",\"x\":\"x.npy\"},"
	    "\"expected\":{\"y\":\"y.npy\"}}");
	put_text(dir, "task.json", task);
	KT_CONTAINS(refused(dir), "appears twice");

	snprintf(task, sizeof(task), TASK_FMT, ",\"baseline_ms\":1",
	    "{\"inputs\":{\"z\":\"x.npy\"},\"expected\":{\"y\":\"y.npy\"}}");
	put_text(dir, "task.json", task);
	KT_CONTAINS(refused(dir), "no tensor is named 'z'");

	snprintf(task, sizeof(task), TASK_FMT, "",
	    "{\"inputs\":{\"x\":\"x.npy\"},\"expected\":{\"y\":\"y.npy\"}}");
	put_text(dir, "task.json", task);
	KT_CONTAINS(refused(dir), "'baseline_ms' is missing");

	snprintf(task, sizeof(task), TASK_FMT, ",\"baseline_ms\":1", "");
	put_text(dir, "task.json", task);
	KT_CONTAINS(refused(dir), "'sets' must be an array of 1");

	snprintf(task, sizeof(task), TASK_FMT, ",\"baseline_ms\":1",
	    "{\"inputs\":{\"x\":\"../x.npy\"},\"expected\":{\"y\":\"y.npy\"}}");
	put_text(dir, "task.json", task);
	put_npy(test_root, "x.npy", "<f4", "(4,)", 16);
	KT_CONTAINS(refused(dir), "outside the bundle folder");

	snprintf(task, sizeof(task), TASK_FMT, ",\"baseline_ms\":1",
	    "{\"inputs\":{\"x\":\"/etc/passwd\"},"
	    "\"expected\":{\"y\":\"y.npy\"}}");
	put_text(dir, "task.json", task);
	KT_CONTAINS(refused(dir), "absolute path");

	snprintf(task, sizeof(task), TASK_FMT, ",\"baseline_ms\":1",
	    "{\"inputs\":{\"x\":\"x.npy\"},\"expected\":{\"y\":\"y.npy\"}}");
	put_text(dir, "task.json", task);
	{
		Kclaw__TaskSpec *s = NULL;
		KT_OK(kc_bundle_load(dir, &s));
		KT_EQ_INT(s->reference->n_sets, 1);
		kclaw__task_spec__free_unpacked(s, NULL);
	}
#undef TASK_FMT
}

/* bfloat16 travels as the 2-byte void type, as ml_dtypes and npy.c save it. */
static void
test_bf16_npy(void)
{
	static const char task[] =
	    "{\"name\":\"b\",\"tensors\":["
	    "{\"name\":\"x\",\"kind\":\"input\",\"dtype\":\"bf16\","
	    "\"shape\":[8]},"
	    "{\"name\":\"w\",\"kind\":\"parameter\",\"dtype\":\"u8\","
	    "\"shape\":[2]},"
	    "{\"name\":\"y\",\"kind\":\"output\",\"dtype\":\"bf16\","
	    "\"shape\":[8]}],"
	    "\"tolerance\":{\"atol\":0,\"rtol\":0,\"max_rel_norm\":0},"
	    "\"reference\":{\"kind\":\"tensors\",\"baseline_ms\":1,"
	    "\"sets\":[{\"inputs\":{\"x\":\"x.npy\",\"w\":\"w.npy\"},"
	    "\"expected\":{\"y\":\"y.npy\"}}]}}";
	char dir[PATH_MAX];
	Kclaw__TaskSpec *s = NULL;

	new_dir(dir);
	put_text(dir, "task.json", task);
	put_npy(dir, "x.npy", "<V2", "(8,)", 16);
	put_npy(dir, "y.npy", "|V2", "(8,)", 16);
	put_npy(dir, "w.npy", "|u1", "(2,)", 2);
	KT_OK(kc_bundle_load(dir, &s));
	KT_EQ_INT(s->tensors[0]->dtype, KCLAW__DTYPE__BF16);
	kclaw__task_spec__free_unpacked(s, NULL);

	put_npy(dir, "x.npy", "<u2", "(8,)", 16);
	KT_CONTAINS(refused(dir), "holds dtype '<u2' but the tensor is bf16");
	put_npy(dir, "x.npy", ">V2", "(8,)", 16);
	KT_CONTAINS(refused(dir), "'>V2'");

	/* An empty parameter file is refused by name. */
	put_npy(dir, "x.npy", "<V2", "(8,)", 16);
	put_text(dir, "w.npy", "");
	KT_CONTAINS(refused(dir), "'w.npy' is not a .npy file");
}

static void
test_refusals(void)
{
	char dir[PATH_MAX];
	const char *m;

	m = refused("/nonexistent/kclaw/bundle");
	KT_CONTAINS(m, "/nonexistent/kclaw/bundle");

	new_dir(dir);
	m = refused(dir);
	KT_CONTAINS(m, "task.json is missing");

	m = refused_edit("\"tensors\":[\n", "\"tensors\":[,\n");
	KT_CONTAINS(m, "not valid JSON near line 2");

	m = refused_edit("\"sol_stop\":0.5", "\"sol_stop\":1.5");
	KT_CONTAINS(m, "'sol_stop' is 1.5; it must be a number from 0 to 1");
	m = refused_edit("\"trials\":4", "\"trails\":4");
	KT_CONTAINS(m, "unknown field 'trails'");
	KT_CONTAINS(m, "trials");

	m = refused_edit("\"dtype\":\"f16\"", "\"dtype\":\"f33\"");
	KT_CONTAINS(m, "tensors[1] 'w'");
	KT_CONTAINS(m, "unknown dtype 'f33'");
	KT_CONTAINS(m, "bf16");

	m = refused_edit("\"dist\":\"normal\"", "\"dist\":\"gauss\"");
	KT_CONTAINS(m, "tensors[0] 'x': init");
	KT_CONTAINS(m, "unknown dist 'gauss'");

	m = refused_edit("\"kind\":\"parameter\"", "\"kind\":\"weight\"");
	KT_CONTAINS(m, "unknown kind 'weight'");

	m = refused_edit("\"name\":\"idx\"", "\"name\":\"2idx\"");
	KT_CONTAINS(m, "'2idx' is not a C identifier");
	m = refused_edit("\"name\":\"idx\"", "\"name\":\"x\"");
	KT_CONTAINS(m, "'x' is used twice");
	m = refused_edit("\"name\":\"vec_add\"", "\"name\":\"../up\"");
	KT_CONTAINS(m, "name '../up'");

	m = refused_edit("\"kind\":\"output\"", "\"kind\":\"input\"");
	KT_CONTAINS(m, "no tensor has kind \"output\"");

	m = refused_edit(" \"tolerance\":{\"atol\":1e-5,\"rtol\":1e-4,"
	                 "\"max_rel_norm\":1e-3},\n",
	    "");
	KT_CONTAINS(m, "'tolerance' is missing");
	m = refused_edit("\"max_rel_norm\":1e-3", "\"max_rel\":1e-3");
	KT_CONTAINS(m, "unknown field 'max_rel'");
	m = refused_edit("\"atol\":1e-5", "\"atol\":-1");
	KT_CONTAINS(m, "'atol' is -1");

	m = refused_edit("\"mean\":0.5,\"scale\":2", "\"mean\":0.5,\"std\":2");
	KT_CONTAINS(m, "unknown field 'std'");
	m = refused_edit("\"low\":-1,\"high\":1", "\"low\":1,\"high\":-1");
	KT_CONTAINS(m, "low (1) must be below high (-1)");
	m = refused_edit(
	    "\"dist\":\"randint\",\"high\":10", "\"dist\":\"randint\"");
	KT_CONTAINS(m, "field 'high' is missing");

	m = refused_edit("\"shape\":[4,256]", "\"shape\":[4,0]");
	KT_CONTAINS(m, "shape[1] must be a positive integer");
	m = refused_edit("\"shape\":[4,256]", "\"shape\":[]");
	KT_CONTAINS(m, "shape must be an array");
	m = refused_edit("\"shape\":[4,256]", "\"shape\":[1e9,1e9,1e9]");
	KT_CONTAINS(m, "over the limit");

	m = refused_edit("\"shape\":[1024]}]",
	    "\"shape\":[1024],"
	    "\"init\":{\"dist\":\"zeros\"}}]");
	KT_CONTAINS(m, "an output has no init");

	m = refused_edit(",\"init\":{\"dist\":\"normal\",\"mean\":0.5,"
	                 "\"scale\":2}",
	    "");
	KT_CONTAINS(m, "'x'");
	KT_CONTAINS(m, "needs an init");

	m = refused_edit("\"trials\":4", "\"trials\":4.5");
	KT_CONTAINS(m, "'trials' is 4.5");
	m = refused_edit("\"seeds\":3", "\"seeds\":\"3\"");
	KT_CONTAINS(m, "'seeds' must be a number");
	m = refused_edit("\"name\":\"vec_add\",",
	    "\"name\":\"vec_add\",\"name\":"
	    "\"again\",");
	KT_CONTAINS(m, "'name' appears twice");

	m = refused_edit("\"kind\":\"cuda\"", "\"kind\":\"pytorch\"");
	KT_CONTAINS(m, "unknown kind 'pytorch'; use cuda, torch or tensors");
	/* A torch reference takes a Python source, not a launch plan. */
	m = refused_edit("\"kind\":\"cuda\"", "\"kind\":\"torch\"");
	KT_CONTAINS(m, "unknown field 'plan'");
	m = refused_edit(
	    "\"source\":\"reference.cu\"", "\"source\":\"ref.cu\"");
	KT_CONTAINS(m, "reference.source");
	KT_CONTAINS(m, "'ref.cu' is missing");
	m = refused_edit(
	    "\"context\":\"context.py\"", "\"context\":\"ctx.py\"");
	KT_CONTAINS(m, "'ctx.py' is missing");
	m = refused_edit("\"plan\":\"reference.plan.json\"", "\"plan\":\"\"");
	KT_CONTAINS(m, "file name is empty");
	m = refused_edit("}\n", "} []\n");
	KT_CONTAINS(m, "text after the end");
}

static void
test_reference_plan(void)
{
	char dir[PATH_MAX];
	const char *m;

	make_cuda_bundle(dir, NULL, NULL);
	put_text(dir, "reference.plan.json",
	    "{\"steps\":[{\"kernel\":\"add\",\"grid\":[4,1,1],"
	    "\"block\":[256,1,1],\"args\":[\"x\",\"w\",\"z\"]}]}");
	m = refused(dir);
	KT_CONTAINS(m, "reference.plan.json");
	KT_CONTAINS(m, "steps[0] 'add': args[2] names 'z'");

	make_cuda_bundle(dir, NULL, NULL);
	put_text(dir, "reference.plan.json",
	    "{\"steps\":[{\"kernel\":\"add\",\"grid\":[4,1,1],"
	    "\"block\":[256,1,1],\"args\":[\"x\",\"w\",{\"i32\":3}]}]}");
	KT_CONTAINS(refused(dir), "output 'y' is never passed to a step");

	make_cuda_bundle(dir, NULL, NULL);
	put_text(dir, "reference.plan.json",
	    "{\"scratch\":[{\"name\":\"x\",\"bytes\":4}],\"steps\":[{"
	    "\"kernel\":"
	    "\"add\",\"args\":[\"y\"]}]}");
	KT_CONTAINS(refused(dir), "scratch[0] 'x' has the name of a tensor");

	make_cuda_bundle(dir, NULL, NULL);
	put_text(dir, "reference.plan.json",
	    "{\"scratch\":[{\"name\":\"a\",\"bytes\":4},{\"name\":\"a\","
	    "\"bytes\":8}],\"steps\":[{\"kernel\":\"add\",\"args\":[\"y\"]}]}");
	KT_CONTAINS(refused(dir), "scratch[1] 'a' is declared twice");

	make_cuda_bundle(dir, NULL, NULL);
	put_text(dir, "reference.plan.json", "{\"steps\":[]}");
	KT_CONTAINS(refused(dir), "'steps' must be a non-empty array");

	make_cuda_bundle(dir, NULL, NULL);
	put_text(dir, "reference.plan.json",
	    "{\"steps\":[{\"kernel\":\"add(\",\"args\":[\"y\"]}]}");
	KT_CONTAINS(refused(dir), "'kernel' must name");

	/* A library step that does not write the output leaves it unset. */
	make_cuda_bundle(dir, NULL, NULL);
	put_text(dir, "reference.plan.json",
	    "{\"steps\":[{\"matmul\":{\"a\":\"x\",\"b\":\"w\","
	    "\"d\":\"x\"}}]}");
	KT_CONTAINS(refused(dir), "output 'y' is never passed");

	make_cuda_bundle(dir, NULL, NULL);
	put_text(dir, "reference.plan.json",
	    "{\"steps\":[{\"kernel\":\"add(\",\"args\":[\"y\"]}]}");
	KT_CONTAINS(refused(dir), "'kernel' must name");

	make_cuda_bundle(dir, NULL, NULL);
	put_text(dir, "reference.plan.json", "{\"steps\":[{\"kernel\":");
	KT_CONTAINS(refused(dir), "not valid JSON");

	/* A library step's operands count as uses of the output. */
	make_cuda_bundle(dir, NULL, NULL);
	put_text(dir, "reference.plan.json",
	    "{\"steps\":[{\"matmul\":{\"a\":\"x\",\"b\":\"w\","
	    "\"d\":\"y\",\"m\":32,\"n\":32,\"k\":32}}]}");
	{
		Kclaw__TaskSpec *s = NULL;
		KT_OK(kc_bundle_load(dir, &s));
		kclaw__task_spec__free_unpacked(s, NULL);
	}
}

static void
test_candidate(void)
{
	char dir[PATH_MAX];
	Kclaw__Candidate *c = NULL;

	new_dir(dir);
	put_text(dir, "kernel.cu", ref_src);
	put_text(dir, "plan.json", ref_plan);
	KT_OK(kc_candidate_load(dir, &c));
	KT_EQ_STR(c->source, ref_src);
	KT_EQ_STR(c->plan_json, ref_plan);
	KT_EQ_STR(c->origin, "user");
	kclaw__candidate__free_unpacked(c, NULL);

	put_text(dir, "plan.json", "{\"steps\":[{\"kernel\":1}]}");
	KT_ASSERT(kc_candidate_load(dir, &c) != 0);
	KT_ASSERT(c == NULL);
	KT_CONTAINS(kc_lasterr(), "plan.json: steps[0]");

	put_text(dir, "kernel.cu", "");
	KT_ASSERT(kc_candidate_load(dir, &c) != 0);
	KT_CONTAINS(kc_lasterr(), "kernel.cu is empty");

	new_dir(dir);
	put_text(dir, "plan.json", ref_plan);
	KT_ASSERT(kc_candidate_load(dir, &c) != 0);
	KT_CONTAINS(kc_lasterr(), "'kernel.cu' is missing");

	/* A task's plan check with a spec catches names a folder cannot. */
	{
		Kclaw__TaskSpec *s = NULL;
		make_cuda_bundle(dir, NULL, NULL);
		KT_OK(kc_bundle_load(dir, &s));
		KT_OK(kc_plan_check(s, ref_plan, "plan.json", 1));
		KT_ASSERT(kc_plan_check(s,
		              "{\"steps\":[{\"kernel\":\"k\",\"args\":[\"q\"]}]"
		              "}",
		              "plan.json", 0) == KC_EINVAL);
		KT_CONTAINS(kc_lasterr(), "names 'q'");
		kclaw__task_spec__free_unpacked(s, NULL);
	}
}

/*
 * Every truncation and many byte flips of a valid task.json: each must be
 * loaded or refused with a message, never crash (the test runs under ASan).
 */
static void
test_damaged_json(void)
{
	char dir[PATH_MAX], *text;
	size_t n = strlen(cuda_task);
	uint64_t rng = 12345;

	make_cuda_bundle(dir, NULL, NULL);
	KT_ASSERT((text = malloc(n + 1)) != NULL);
	for (size_t cut = 0; cut < n - 2; cut += 7) {
		Kclaw__TaskSpec *s = NULL;
		put(dir, "task.json", cuda_task, cut);
		KT_ASSERT(kc_bundle_load(dir, &s) != 0);
		KT_ASSERT(kc_lasterr()[0] != '\0');
	}
	for (int i = 0; i < 400; i++) {
		Kclaw__TaskSpec *s = NULL;
		size_t at;
		memcpy(text, cuda_task, n + 1);
		rng = rng * 6364136223846793005ull + 1442695040888963407ull;
		at = (size_t)(rng >> 33) % n;
		text[at] = "0-9\"{}[],:e.xa\\"[(rng >> 20) % 15];
		put(dir, "task.json", text, n);
		if (kc_bundle_load(dir, &s) == 0)
			kclaw__task_spec__free_unpacked(s, NULL);
		else
			KT_ASSERT(kc_lasterr()[0] != '\0');
	}
	free(text);
}

/* A torch bundle: the problem's source, every tensor declared, a scalar
 * input with its value, a bool mask, and the plan check naming the scalar
 * as an argument. */
static void
test_torch_bundle(void)
{
	static const char task[] =
	    "{\"name\":\"scale_masked\",\"precision\":\"strict\","
	    "\"tolerance\":{\"atol\":1e-2,\"rtol\":1e-2,\"max_rel_norm\":1e-2},"
	    "\"tensors\":["
	    "{\"name\":\"A\",\"kind\":\"input\",\"dtype\":\"f32\","
	    "\"shape\":[64,32],\"source_name\":\"A\"},"
	    "{\"name\":\"s\",\"kind\":\"scalar\",\"dtype\":\"f32\","
	    "\"value\":3.5},"
	    "{\"name\":\"mask\",\"kind\":\"input\",\"dtype\":\"bool\","
	    "\"shape\":[64,32]},"
	    "{\"name\":\"weight\",\"kind\":\"parameter\",\"dtype\":"
	    "\"f32\",\"shape\":[32],\"source_name\":\"lin.weight\"},"
	    "{\"name\":\"out\",\"kind\":\"output\",\"dtype\":\"f32\","
	    "\"shape\":[64,32]}],"
	    "\"reference\":{\"kind\":\"torch\",\"source\":\"model.py\","
	    "\"init_seed\":42,\"flops\":2048}}";
	static const char model[] =
	    "import torch\nclass Model(torch.nn.Module):\n"
	    "    def forward(self, A, s, mask):\n"
	    "        return A * s * mask\n"
	    "def get_inputs():\n    return [torch.randn(64, 32), 3.5,"
	    " torch.rand(64, 32) > 0.5]\n"
	    "def get_init_inputs():\n    return []\n";
	Kclaw__TaskSpec *spec = NULL;
	char dir[PATH_MAX];
	const char *m;

	new_dir(dir);
	put_text(dir, "task.json", task);
	put_text(dir, "model.py", model);
	KT_OK(kc_bundle_load(dir, &spec));
	KT_EQ_INT(spec->reference->kind, KCLAW__REFERENCE__KIND__TORCH);
	KT_CONTAINS(spec->reference->torch_source, "class Model");
	KT_EQ_INT(spec->reference->init_seed, 42);
	KT_ASSERT(spec->reference->flops == 2048);
	KT_EQ_INT(spec->tensors[1]->kind, KCLAW__TENSOR_KIND__SCALAR);
	KT_ASSERT(spec->tensors[1]->scalar_value == 3.5);
	KT_EQ_INT(spec->tensors[2]->dtype, KCLAW__DTYPE__BOOL);
	KT_EQ_STR(spec->tensors[3]->source_name, "lin.weight");
	KT_EQ_STR(spec->precision, "strict");
	kclaw__task_spec__free_unpacked(spec, NULL);

	/* A scalar without its value, a scalar in a cuda task, an unknown
	 * precision, a source that is no KernelBench problem. */
	new_dir(dir);
	put_text(dir, "model.py", model);
	{
		char t2[sizeof(task) + 64];
		const char *at = strstr(task, ",\"value\":3.5");
		snprintf(t2, sizeof(t2), "%.*s%s", (int)(at - task), task,
		    at + strlen(",\"value\":3.5"));
		put_text(dir, "task.json", t2);
	}
	m = refused(dir);
	KT_CONTAINS(m, "needs its 'value'");
	m = refused_edit("\"trials\":4", "\"precision\":\"fast\",\"trials\":4");
	KT_CONTAINS(m, "precision 'fast'");
	new_dir(dir);
	put_text(dir, "task.json", task);
	put_text(dir, "model.py", "def f(): pass\n");
	m = refused(dir);
	KT_CONTAINS(m, "class Model");
}

int
main(void)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(test_root, sizeof(test_root), "%s/kc_bundle_XXXXXX",
	    tmp ? tmp : "/tmp");
	KT_ASSERT(mkdtemp(test_root) != NULL);
	KT_RUN(test_cuda_bundle);
	KT_RUN(test_tensor_bundle);
	KT_RUN(test_npy_mismatch);
	KT_RUN(test_tensor_sets);
	KT_RUN(test_bf16_npy);
	KT_RUN(test_refusals);
	KT_RUN(test_reference_plan);
	KT_RUN(test_candidate);
	KT_RUN(test_damaged_json);
	KT_RUN(test_torch_bundle);
	{
		char cmd[PATH_MAX + 16];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", test_root);
		KT_ASSERT(system(cmd) == 0);
	}
	return 0;
}
