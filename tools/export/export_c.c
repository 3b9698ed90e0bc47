/*
 * export_c.c - the standalone C launcher of an exported kernel:
 * launcher.h (the tensors in order, the API), launcher.c (kernel.cu
 * embedded, NVRTC for the current device, the CUDA driver API, the plan's
 * steps unrolled in order, matmul steps through cuBLASLt) and main.c (an
 * example). The generated code links libcuda, libnvrtc and, with matmul
 * steps, libcublasLt; it compiles with -Wall -Wextra.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export_int.h"
#include "kc_config.h"
#include "kc_err.h"
#include "kc_util.h"

/* A plan's buffer name as a C expression: a tensor, a scratch buffer or
 * a scalar tensor (a torch problem's number, passed by value). */
typedef struct {
	const Kclaw__TaskSpec *spec;
	const cJSON *scratch;
	const char *plan_name;
} kx_ctx;

static int
kx_tensor_index(const kx_ctx *x, const char *name, int *dev)
{
	int d = 0;

	for (size_t i = 0; i < x->spec->n_tensors; i++) {
		const Kclaw__TensorSpec *t = x->spec->tensors[i];
		if (strcmp(t->name, name) == 0) {
			*dev = t->kind == KCLAW__TENSOR_KIND__SCALAR ? -1 : d;
			return (int)i;
		}
		if (t->kind != KCLAW__TENSOR_KIND__SCALAR)
			d++;
	}
	return -1;
}

static int
kx_scratch_index(const kx_ctx *x, const char *name)
{
	int i = 0;
	const cJSON *s;

	cJSON_ArrayForEach(s, x->scratch)
	{
		const cJSON *n = cJSON_GetObjectItemCaseSensitive(s, "name");
		if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0)
			return i;
		i++;
	}
	return -1;
}

/* Appends the device pointer for buffer name ("0" for NULL). */
static int
kx_buf_expr(kc_str *s, const kx_ctx *x, const cJSON *v, const char *where)
{
	int dev, i;

	if (v == NULL || cJSON_IsNull(v))
		return kc_str_append(s, "0");
	if (!cJSON_IsString(v))
		return kc_seterr(
		    KC_EINVAL, "plan.json: %s: a buffer must be a name", where);
	if (kx_tensor_index(x, v->valuestring, &dev) >= 0 && dev >= 0)
		return kc_str_printf(s, "t[KCLAW_T_%s]", v->valuestring);
	if ((i = kx_scratch_index(x, v->valuestring)) >= 0)
		return kc_str_printf(s, "k->scratch[%d]", i);
	return kc_seterr(KC_EINVAL,
	    "plan.json: %s: '%s' is neither a tensor nor a scratch buffer",
	    where, v->valuestring);
}

static int
kx_scalar_decl(kc_str *s, int j, const char *type, double v)
{
	if (strcmp(type, "i32") == 0)
		return kc_str_printf(
		    s, "\t\tint a%d = %lld;\n", j, (long long)v);
	if (strcmp(type, "u32") == 0)
		return kc_str_printf(
		    s, "\t\tunsigned a%d = %lluu;\n", j, (unsigned long long)v);
	if (strcmp(type, "i64") == 0)
		return kc_str_printf(
		    s, "\t\tlong long a%d = %lldll;\n", j, (long long)v);
	if (strcmp(type, "f64") == 0)
		return kc_str_printf(s, "\t\tdouble a%d = %.17g;\n", j, v);
	return kc_str_printf(
	    s, "\t\tfloat a%d = %.9gf;\n", j, (double)(float)v);
}

static const char *
kx_scalar_type_of(const Kclaw__TensorSpec *t)
{
	switch (t->dtype) {
	case KCLAW__DTYPE__F64: return "f64";
	case KCLAW__DTYPE__I32: return "i32";
	case KCLAW__DTYPE__I64: return "i64";
	default: return "f32";
	}
}

/* One kernel step's block of kclaw_kernel_run. */
static int
kx_kernel_step(kc_str *s, const kx_ctx *x, const cJSON *st, size_t i, int fn,
    const char *kname)
{
	const cJSON *args = cJSON_GetObjectItemCaseSensitive(st, "args"), *a;
	const cJSON *g = cJSON_GetObjectItemCaseSensitive(st, "grid");
	const cJSON *b = cJSON_GetObjectItemCaseSensitive(st, "block");
	const cJSON *sh = cJSON_GetObjectItemCaseSensitive(st, "shared_bytes");
	unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
	int j = 0, n, rv = 0;
	char where[96];

	for (int d = 0; d < 3; d++) {
		const cJSON *ge = cJSON_IsArray(g) ? cJSON_GetArrayItem(g, d)
		    : d == 0                       ? g
		                                   : NULL;
		const cJSON *be = cJSON_IsArray(b) ? cJSON_GetArrayItem(b, d)
		    : d == 0                       ? b
		                                   : NULL;
		if (cJSON_IsNumber(ge))
			grid[d] = (unsigned)ge->valuedouble;
		if (cJSON_IsNumber(be))
			block[d] = (unsigned)be->valuedouble;
	}
	n = cJSON_GetArraySize(args);
	kc_str_printf(s, "\t{ /* step %zu: kernel %s */\n", i, kname);
	cJSON_ArrayForEach(a, args)
	{
		snprintf(where, sizeof(where), "steps[%zu].args[%d]", i, j);
		if (cJSON_IsString(a)) {
			int dev, ti = kx_tensor_index(x, a->valuestring, &dev);
			if (ti >= 0 && dev < 0) {
				const Kclaw__TensorSpec *t =
				    x->spec->tensors[ti];
				kc_str_printf(
				    s, "\t\t/* scalar %s */\n", t->name);
				rv = kx_scalar_decl(s, j, kx_scalar_type_of(t),
				    t->scalar_value);
			} else {
				kc_str_printf(s, "\t\tCUdeviceptr a%d = ", j);
				if ((rv = kx_buf_expr(s, x, a, where)) == 0)
					rv = kc_str_append(s, ";\n");
			}
		} else if (cJSON_IsObject(a) && a->child &&
		    cJSON_IsNumber(a->child)) {
			rv = kx_scalar_decl(
			    s, j, a->child->string, a->child->valuedouble);
		} else {
			rv = kc_seterr(KC_EINVAL,
			    "plan.json: %s: not a buffer name or a typed "
			    "scalar",
			    where);
		}
		if (rv != 0)
			return rv;
		j++;
	}
	if (n > 0) {
		kc_str_append(s, "\t\tvoid *p[] = {");
		for (j = 0; j < n; j++)
			kc_str_printf(s, "%s&a%d", j ? ", " : "", j);
		kc_str_append(s, "};\n");
	}
	return kc_str_printf(s,
	    "\t\tif ((rv = kclaw_cu(cuLaunchKernel(k->fn[%d], %uu, %uu, %uu, "
	    "%uu, %uu, %uu,\n\t\t         %uu, s, %s, NULL),\n\t\t         "
	    "\"step %zu (kernel %s)\")) != 0)\n\t\t\treturn rv;\n\t}\n",
	    fn, grid[0], grid[1], grid[2], block[0], block[1], block[2],
	    cJSON_IsNumber(sh) ? (unsigned)sh->valuedouble : 0u,
	    n > 0 ? "p" : "NULL", i, kname);
}

static const struct {
	const char *name, *c;
} kx_epilogues[] = {{"none", "CUBLASLT_EPILOGUE_DEFAULT"},
    {"relu", "CUBLASLT_EPILOGUE_RELU"}, {"gelu", "CUBLASLT_EPILOGUE_GELU"},
    {"bias", "CUBLASLT_EPILOGUE_BIAS"},
    {"bias_relu", "CUBLASLT_EPILOGUE_RELU_BIAS"},
    {"bias_gelu", "CUBLASLT_EPILOGUE_GELU_BIAS"}};

static double
kx_num(const cJSON *o, const char *key, double dflt)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

static int
kx_matmul_step(kc_str *s, const kx_ctx *x, const cJSON *mm, size_t i)
{
	const cJSON *v;
	const char *dtype = "f32", *epi = "CUBLASLT_EPILOGUE_DEFAULT";
	static const char *bufs[] = {"a", "b", "c", "d", "bias"};
	char where[96];
	int rv;

	if ((v = cJSON_GetObjectItemCaseSensitive(mm, "dtype")) &&
	    cJSON_IsString(v))
		dtype = v->valuestring;
	if ((v = cJSON_GetObjectItemCaseSensitive(mm, "epilogue")) &&
	    cJSON_IsString(v))
		for (size_t e = 0;
		     e < sizeof(kx_epilogues) / sizeof(kx_epilogues[0]); e++)
			if (strcmp(kx_epilogues[e].name, v->valuestring) == 0)
				epi = kx_epilogues[e].c;
	kc_str_printf(s,
	    "\t{ /* step %zu: matmul */\n"
	    "\t\tstatic const kclaw_mm mm = {%lldll, %lldll, %lldll, %d, %d, "
	    "%s,\n\t\t    %d, %.17g, %.17g, %s};\n",
	    i, (long long)kx_num(mm, "m", 0), (long long)kx_num(mm, "n", 0),
	    (long long)kx_num(mm, "k", 0),
	    cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(mm, "trans_a")),
	    cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(mm, "trans_b")),
	    strcmp(dtype, "f16") == 0        ? "CUDA_R_16F"
	        : strcmp(dtype, "bf16") == 0 ? "CUDA_R_16BF"
	                                     : "CUDA_R_32F",
	    cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(mm, "tf32")),
	    kx_num(mm, "alpha", 1), kx_num(mm, "beta", 0), epi);
	for (size_t b = 0; b < 5; b++) {
		snprintf(
		    where, sizeof(where), "steps[%zu].matmul.%s", i, bufs[b]);
		kc_str_printf(s, "\t\tCUdeviceptr %s = ", bufs[b]);
		if ((rv = kx_buf_expr(s, x,
		         cJSON_GetObjectItemCaseSensitive(mm, bufs[b]),
		         where)) != 0)
			return rv;
		kc_str_append(s, ";\n");
	}
	return kc_str_printf(s,
	    "\t\tif ((rv = kclaw_matmul(k, &mm, a, b, c, d, bias, s,\n"
	    "\t\t         \"step %zu (matmul)\")) != 0)\n\t\t\treturn rv;\n"
	    "\t}\n",
	    i);
}

static int
kx_header(kc_str *s, const Kclaw__TaskSpec *spec)
{
	int d = 0;

	kc_str_printf(s,
	    "/*\n * launcher.h - the kclaw kernel of task %s, standalone.\n"
	    " * Generated by `kclaw result --out`; see README.md.\n *\n"
	    " * kclaw_kernel_load compiles kernel.cu (embedded in launcher.c) "
	    "with NVRTC\n * for the device of the current CUDA context and "
	    "allocates the plan's\n * scratch; kclaw_kernel_run runs the "
	    "plan's steps in order on a stream.\n * Link with -lcuda "
	    "-lnvrtc (and -lcublasLt when the plan has matmul\n * steps): "
	    "the libraries are linked, not opened with dlopen.\n *\n"
	    " * The kernel was verified for exactly these tensors; "
	    "tensors[] of\n * kclaw_kernel_run holds their device pointers "
	    "in this order\n * (row-major, contiguous; inputs and parameters "
	    "are only read):\n *\n",
	    spec->name);
	for (size_t i = 0; i < spec->n_tensors; i++) {
		const Kclaw__TensorSpec *t = spec->tensors[i];
		if (t->kind == KCLAW__TENSOR_KIND__SCALAR) {
			kc_str_printf(s,
			    " *   -  %-16s scalar %s = %.17g (fixed in the "
			    "plan)\n",
			    t->name, kx_dtype_name(t->dtype), t->scalar_value);
			continue;
		}
		kc_str_printf(s, " *   %d  %-16s %-9s %-4s [", d++, t->name,
		    kx_kind_name(t->kind), kx_dtype_name(t->dtype));
		for (size_t j = 0; j < t->n_shape; j++)
			kc_str_printf(
			    s, "%s%lld", j ? ", " : "", (long long)t->shape[j]);
		kc_str_printf(s, "], %llu bytes\n",
		    kx_numel(t) * kx_dtype_size(t->dtype));
	}
	kc_str_printf(s,
	    " */\n#ifndef KCLAW_LAUNCHER_H\n#define KCLAW_LAUNCHER_H\n\n"
	    "#include <cuda.h>\n#include <stddef.h>\n\n"
	    "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n"
	    "#define KCLAW_TASK_NAME \"%s\"\n\n/* Indices into tensors[]. */\n"
	    "enum {\n",
	    spec->name);
	d = 0;
	for (size_t i = 0; i < spec->n_tensors; i++)
		if (spec->tensors[i]->kind != KCLAW__TENSOR_KIND__SCALAR)
			kc_str_printf(s, "\tKCLAW_T_%s = %d,\n",
			    spec->tensors[i]->name, d++);
	return kc_str_printf(s,
	    "\tKCLAW_NTENSORS = %d\n};\n\n"
	    "/* What kclaw_kernel_run expects of each tensor, and how the task "
	    "drew\n * inputs (dist \"\" where the problem's own code did: "
	    "main.c then uses\n * normal(0, 1) for floats, 0 for integers). "
	    "*/\n"
	    "typedef struct {\n\tconst char *name;\n"
	    "\tconst char *kind;  /* \"input\", \"parameter\", \"output\" */\n"
	    "\tconst char *dtype; /* \"f32\", \"f16\", \"bf16\", \"f64\", "
	    "\"i32\", \"i64\", \"i8\", \"u8\", \"bool\" */\n"
	    "\tsize_t elem_bytes;\n\tunsigned long long numel, bytes;\n"
	    "\tint ndim;\n\tlong long shape[8];\n"
	    "\tconst char *dist; /* normal (a mean, b scale), uniform and "
	    "randint\n\t                     (a low, b high), zeros, ones, "
	    "arange, heavy_tailed */\n\tdouble a, b;\n} kclaw_tensor_info;\n\n"
	    "extern const kclaw_tensor_info kclaw_tensors[%s];\n\n"
	    "typedef struct kclaw_kernel kclaw_kernel;\n\n"
	    "/* Compiles and loads the kernel in the current CUDA context "
	    "(which must\n * exist) and allocates its scratch. 0 or non-zero "
	    "(a CUresult, or -1);\n * kclaw_kernel_error() says what "
	    "failed. */\nint kclaw_kernel_load(kclaw_kernel **out);\n\n"
	    "/* Runs the plan's steps in order on stream s (asynchronous, "
	    "like a kernel\n * launch): tensors[i] is the device pointer of "
	    "tensor i above. One k\n * runs one plan at a time (its scratch "
	    "is shared): do not run the same k\n * on two streams at once. "
	    "0 or non-zero, as kclaw_kernel_load. */\n"
	    "int kclaw_kernel_run(\n    const kclaw_kernel *k, CUdeviceptr "
	    "*tensors, CUstream s);\n\n"
	    "void kclaw_kernel_free(kclaw_kernel *k);\n\n"
	    "/* The last failure of this thread, in words. */\n"
	    "const char *kclaw_kernel_error(void);\n\n"
	    "#ifdef __cplusplus\n}\n#endif\n\n#endif\n",
	    d, d > 0 ? "KCLAW_NTENSORS" : "1");
}

static int
kx_tensor_table(kc_str *s, const Kclaw__TaskSpec *spec)
{
	int d = 0;

	kc_str_append(s, "const kclaw_tensor_info kclaw_tensors[] = {\n");
	for (size_t i = 0; i < spec->n_tensors; i++) {
		const Kclaw__TensorSpec *t = spec->tensors[i];
		const Kclaw__InitSpec *in = t->init;
		const char *dist = "";
		double a = 0, b = 0;

		if (t->kind == KCLAW__TENSOR_KIND__SCALAR)
			continue;
		if (in != NULL) {
			switch (in->dist) {
			case KCLAW__DISTRIBUTION__NORMAL:
				dist = "normal", a = in->mean, b = in->scale;
				break;
			case KCLAW__DISTRIBUTION__UNIFORM:
				dist = "uniform", a = in->low, b = in->high;
				break;
			case KCLAW__DISTRIBUTION__RANDINT:
				dist = "randint", a = in->low, b = in->high;
				break;
			case KCLAW__DISTRIBUTION__HEAVY_TAILED:
				dist = "heavy_tailed", b = in->scale;
				break;
			case KCLAW__DISTRIBUTION__ZEROS: dist = "zeros"; break;
			case KCLAW__DISTRIBUTION__ONES: dist = "ones"; break;
			case KCLAW__DISTRIBUTION__ARANGE:
				dist = "arange";
				break;
			default: break;
			}
		}
		kc_str_printf(s,
		    "    {\"%s\", \"%s\", \"%s\", %zu, %lluull, %lluull, %zu, "
		    "{",
		    t->name, kx_kind_name(t->kind), kx_dtype_name(t->dtype),
		    kx_dtype_size(t->dtype), kx_numel(t),
		    kx_numel(t) * kx_dtype_size(t->dtype), t->n_shape);
		for (size_t j = 0; j < t->n_shape; j++)
			kc_str_printf(s, "%s%lldll", j ? ", " : "",
			    (long long)t->shape[j]);
		kc_str_printf(s, "}, \"%s\", %.17g, %.17g},\n", dist, a, b);
		d++;
	}
	if (d == 0)
		kc_str_append(s,
		    "    {\"\", \"\", \"\", 0, 0, 0, 0, {0}, \"\", "
		    "0, 0},\n");
	return kc_str_append(s, "};\n\n");
}

static int
kx_write_str(const char *dir, const char *name, kc_str *s)
{
	char path[KC_PATH_MAX];
	int rv;

	if (s->buf == NULL)
		return KC_ENOMEM;
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	rv = kc_write_file(path, s->buf, s->len);
	kc_str_free(s);
	return rv;
}

int
kx_write_c(const char *dir, const Kclaw__TaskSpec *spec, const char *source,
    const char *plan_json)
{
	cJSON *plan = cJSON_Parse(plan_json), *steps, *st, *sc;
	kx_ctx x = {spec, NULL, "plan.json"};
	kc_str h = {0}, c = {0}, run = {0};
	const char *funcs[256];
	unsigned shared[256];
	int nfuncs = 0, nscratch = 0, has_mm = 0, rv = 0;
	size_t i = 0;

	if (plan == NULL)
		return kc_seterr(KC_EINVAL, "plan.json is not valid JSON");
	steps = cJSON_GetObjectItemCaseSensitive(plan, "steps");
	x.scratch = cJSON_GetObjectItemCaseSensitive(plan, "scratch");
	nscratch = cJSON_GetArraySize(x.scratch);
	kc_str_append(&run,
	    "int\nkclaw_kernel_run(const kclaw_kernel *k, CUdeviceptr *t, "
	    "CUstream s)\n{\n\tint rv = 0;\n\n\t(void)k;\n\t(void)t;\n"
	    "\t(void)s;\n");
	cJSON_ArrayForEach(st, steps)
	{
		const cJSON *mm =
		    cJSON_GetObjectItemCaseSensitive(st, "matmul");
		const cJSON *kn =
		    cJSON_GetObjectItemCaseSensitive(st, "kernel");
		const cJSON *sh =
		    cJSON_GetObjectItemCaseSensitive(st, "shared_bytes");
		int f;

		if (mm != NULL) {
			has_mm = 1;
			rv = kx_matmul_step(&run, &x, mm, i);
		} else if (cJSON_IsString(kn)) {
			for (f = 0; f < nfuncs; f++)
				if (strcmp(funcs[f], kn->valuestring) == 0)
					break;
			if (f == nfuncs) {
				if (nfuncs == 256) {
					rv = kc_seterr(KC_EINVAL,
					    "plan.json: more than 256 kernels");
					break;
				}
				funcs[nfuncs] = kn->valuestring;
				shared[nfuncs++] = 0;
			}
			if (cJSON_IsNumber(sh) &&
			    (unsigned)sh->valuedouble > shared[f])
				shared[f] = (unsigned)sh->valuedouble;
			rv =
			    kx_kernel_step(&run, &x, st, i, f, kn->valuestring);
		} else {
			rv = kc_seterr(KC_EINVAL,
			    "plan.json: steps[%zu] is neither a kernel nor a "
			    "matmul step",
			    i);
		}
		if (rv != 0)
			break;
		i++;
	}
	kc_str_append(&run, "\treturn rv;\n}\n");
	if (rv == 0)
		rv = kx_header(&h, spec);
	if (rv == 0) {
		kc_str_printf(&c,
		    "/*\n * launcher.c - the kclaw kernel of task %s: "
		    "kernel.cu, compiled by NVRTC,\n * and its launch plan "
		    "(plan.json) unrolled. Generated by `kclaw result\n * "
		    "--out`; launcher.h says how to use it.\n */\n"
		    "#include <stdint.h>\n#include <stdio.h>\n"
		    "#include <stdlib.h>\n#include <string.h>\n\n"
		    "#include <nvrtc.h>\n%s\n#include \"launcher.h\"\n\n"
		    "/* Where NVRTC finds the toolkit's headers (CUDA_HOME "
		    "overrides it). */\n#ifndef KCLAW_CUDA_INCLUDE\n"
		    "#define KCLAW_CUDA_INCLUDE \"/usr/local/cuda/include\"\n"
		    "#endif\n\n#define KCLAW_HAS_MATMUL %d\n"
		    "#define KCLAW_NFUNCS %d\n#define KCLAW_NSCRATCH %d\n\n",
		    spec->name, has_mm ? "#include <cublasLt.h>\n" : "", has_mm,
		    nfuncs, nscratch);
		kx_tensor_table(&c, spec);
		kc_str_append(&c,
		    "/* kernel.cu */\nstatic const char "
		    "kclaw_source[] =\n    ");
		kx_c_literal(&c, source);
		kc_str_append(&c,
		    ";\n\nstatic const char *const "
		    "kclaw_func_names[] = {");
		for (int f = 0; f < nfuncs; f++)
			kc_str_printf(&c, "%s\"%s\"", f ? ", " : "", funcs[f]);
		kc_str_append(&c, nfuncs ? "};\n" : "\"\"};\n");
		kc_str_append(&c,
		    "/* The most dynamic shared memory each "
		    "kernel's steps ask for. */\n"
		    "static const unsigned kclaw_func_shared[] "
		    "= {");
		for (int f = 0; f < nfuncs; f++)
			kc_str_printf(&c, "%s%u", f ? ", " : "", shared[f]);
		kc_str_append(&c, nfuncs ? "};\n" : "0};\n");
		kc_str_append(&c,
		    "static const size_t kclaw_scratch_bytes[] "
		    "= {");
		i = 0;
		cJSON_ArrayForEach(sc, x.scratch)
		{
			const cJSON *b =
			    cJSON_GetObjectItemCaseSensitive(sc, "bytes");
			const cJSON *n =
			    cJSON_GetObjectItemCaseSensitive(sc, "name");
			kc_str_printf(&c, "%s%.0f /* %s */", i++ ? ", " : "",
			    cJSON_IsNumber(b) ? b->valuedouble : 0,
			    cJSON_IsString(n) ? n->valuestring : "?");
		}
		kc_str_append(&c, nscratch ? "};\n\n" : "0};\n\n");
		kc_str_append(&c, kx_launcher_body);
		kc_str_append(&c, run.buf);
		rv = kx_write_str(dir, "launcher.h", &h);
	}
	if (rv == 0)
		rv = kx_write_str(dir, "launcher.c", &c);
	if (rv == 0) {
		kc_str m = {0};
		kc_str_append(&m, kx_main_c);
		rv = kx_write_str(dir, "main.c", &m);
	}
	kc_str_free(&h);
	kc_str_free(&c);
	kc_str_free(&run);
	cJSON_Delete(plan);
	return rv;
}
