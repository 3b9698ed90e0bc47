/*
 * export.c - `kclaw result ID --out DIR`: kernel.cu, plan.json, the
 * measurements (result.json), the history (history.json), a README, and
 * the two ways to run the kernel (export_c.c, export_py.c).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export.h"
#include "export_int.h"
#include "kc_config.h"
#include "kc_err.h"
#include "kc_util.h"

static const struct {
	Kclaw__DType d;
	const char *name;
	size_t size;
} kx_dtypes[] = {{KCLAW__DTYPE__F32, "f32", 4}, {KCLAW__DTYPE__F16, "f16", 2},
    {KCLAW__DTYPE__BF16, "bf16", 2}, {KCLAW__DTYPE__F64, "f64", 8},
    {KCLAW__DTYPE__I32, "i32", 4}, {KCLAW__DTYPE__I64, "i64", 8},
    {KCLAW__DTYPE__I8, "i8", 1}, {KCLAW__DTYPE__U8, "u8", 1},
    {KCLAW__DTYPE__BOOL, "bool", 1}};

const char *
kx_dtype_name(Kclaw__DType d)
{
	for (size_t i = 0; i < sizeof(kx_dtypes) / sizeof(kx_dtypes[0]); i++)
		if (kx_dtypes[i].d == d)
			return kx_dtypes[i].name;
	return "?";
}

size_t
kx_dtype_size(Kclaw__DType d)
{
	for (size_t i = 0; i < sizeof(kx_dtypes) / sizeof(kx_dtypes[0]); i++)
		if (kx_dtypes[i].d == d)
			return kx_dtypes[i].size;
	return 0;
}

const char *
kx_kind_name(Kclaw__TensorKind k)
{
	switch (k) {
	case KCLAW__TENSOR_KIND__INPUT: return "input";
	case KCLAW__TENSOR_KIND__PARAMETER: return "parameter";
	case KCLAW__TENSOR_KIND__OUTPUT: return "output";
	case KCLAW__TENSOR_KIND__SCALAR: return "scalar";
	default: return "?";
	}
}

unsigned long long
kx_numel(const Kclaw__TensorSpec *t)
{
	unsigned long long n = 1;

	for (size_t i = 0; i < t->n_shape; i++)
		n *= (unsigned long long)t->shape[i];
	return n;
}

static const char *
kx_dist_name(Kclaw__Distribution d)
{
	switch (d) {
	case KCLAW__DISTRIBUTION__NORMAL: return "normal";
	case KCLAW__DISTRIBUTION__UNIFORM: return "uniform";
	case KCLAW__DISTRIBUTION__HEAVY_TAILED: return "heavy_tailed";
	case KCLAW__DISTRIBUTION__ZEROS: return "zeros";
	case KCLAW__DISTRIBUTION__ONES: return "ones";
	case KCLAW__DISTRIBUTION__ARANGE: return "arange";
	case KCLAW__DISTRIBUTION__RANDINT: return "randint";
	case KCLAW__DISTRIBUTION__FROM_NPY: return "from_npy";
	default: return NULL;
	}
}

cJSON *
kx_tensors_json(const Kclaw__TaskSpec *spec)
{
	cJSON *arr = cJSON_CreateArray();

	for (size_t i = 0; arr && i < spec->n_tensors; i++) {
		const Kclaw__TensorSpec *t = spec->tensors[i];
		cJSON *o = cJSON_CreateObject(), *sh = cJSON_CreateArray();
		const char *dist = t->init ? kx_dist_name(t->init->dist) : NULL;

		cJSON_AddItemToArray(arr, o);
		cJSON_AddStringToObject(o, "name", t->name);
		cJSON_AddStringToObject(o, "kind", kx_kind_name(t->kind));
		cJSON_AddStringToObject(o, "dtype", kx_dtype_name(t->dtype));
		for (size_t j = 0; j < t->n_shape; j++)
			cJSON_AddItemToArray(
			    sh, cJSON_CreateNumber((double)t->shape[j]));
		cJSON_AddItemToObject(o, "shape", sh);
		if (t->kind == KCLAW__TENSOR_KIND__SCALAR)
			cJSON_AddNumberToObject(o, "value", t->scalar_value);
		else
			cJSON_AddNumberToObject(o, "bytes",
			    (double)(kx_numel(t) * kx_dtype_size(t->dtype)));
		if (t->source_name && *t->source_name)
			cJSON_AddStringToObject(
			    o, "source_name", t->source_name);
		if (dist != NULL) {
			cJSON *in = cJSON_AddObjectToObject(o, "init");
			cJSON_AddStringToObject(in, "dist", dist);
			cJSON_AddNumberToObject(in, "mean", t->init->mean);
			cJSON_AddNumberToObject(in, "scale", t->init->scale);
			cJSON_AddNumberToObject(in, "low", t->init->low);
			cJSON_AddNumberToObject(in, "high", t->init->high);
			cJSON_AddNumberToObject(in, "dof", t->init->dof);
		}
	}
	return arr;
}

static int
kx_literal(kc_str *s, const char *text, const char *open, const char *close,
    const char *indent)
{
	size_t col = 0;
	int rv = kc_str_append(s, open);

	for (const unsigned char *p = (const unsigned char *)text;
	     rv == 0 && *p; p++) {
		char e[8];
		if (*p == '\\')
			snprintf(e, sizeof(e), "\\\\");
		else if (*p == '"')
			snprintf(e, sizeof(e), "\\\"");
		else if (*p == '\n')
			snprintf(e, sizeof(e), "\\n");
		else if (*p == '\t')
			snprintf(e, sizeof(e), "\\t");
		else if (*p == '?')
			snprintf(e, sizeof(e), "\\?"); /* no C trigraphs */
		else if (*p >= 0x20 && *p < 0x7f)
			snprintf(e, sizeof(e), "%c", *p);
		else /* octal: a hex escape would swallow following digits */
			snprintf(e, sizeof(e), "\\%03o", *p);
		rv = kc_str_append(s, e);
		col += strlen(e);
		if (rv == 0 && (*p == '\n' || col >= 76) && p[1] != '\0') {
			rv = kc_str_printf(s, "\"\n%s\"", indent);
			col = 0;
		}
	}
	return rv ? rv : kc_str_append(s, close);
}

int
kx_c_literal(kc_str *s, const char *text)
{
	return kx_literal(s, text, "\"", "\"", "    ");
}

int
kx_py_literal(kc_str *s, const char *text)
{
	/* Python has no trigraphs, and "\?" is kept as two characters, so
	 * the same escapes read back as the same bytes except '?': handled
	 * by writing it as \x3f (a Python bytes hex escape takes exactly
	 * two digits). */
	kc_str t = {0};
	int rv = kx_literal(&t, text, "(b\"", "\")", "    b");
	char *p;

	if (rv != 0) {
		kc_str_free(&t);
		return rv;
	}
	for (p = t.buf; rv == 0 && *p; p++) {
		if (p[0] == '\\' && p[1] == '?') {
			rv = kc_str_append(s, "\\x3f");
			p++;
		} else if (p[0] == '\\' && p[1] != '\0') {
			rv = kc_str_appendn(s, p, 2);
			p++;
		} else {
			rv = kc_str_appendn(s, p, 1);
		}
	}
	kc_str_free(&t);
	return rv;
}

/* ---- result.json, history.json ---- */

static const char *
kx_status_name(const Kclaw__EvalResult *e, char *buf, size_t n)
{
	const ProtobufCEnumValue *v;

	if (e == NULL)
		return NULL;
	v = protobuf_c_enum_descriptor_get_value(
	    &kclaw__eval_status__descriptor, e->status);
	snprintf(buf, n, "%s", v ? v->name : "unknown");
	for (char *p = buf; *p; p++)
		if (*p >= 'A' && *p <= 'Z')
			*p = (char)(*p - 'A' + 'a');
	return buf;
}

static void
kx_add_num(cJSON *o, const char *key, double v)
{
	if (v > 0)
		cJSON_AddNumberToObject(o, key, v);
	else
		cJSON_AddNullToObject(o, key);
}

static void
kx_add_str(cJSON *o, const char *key, const char *v)
{
	if (v != NULL && *v != '\0')
		cJSON_AddStringToObject(o, key, v);
	else
		cJSON_AddNullToObject(o, key);
}

static void
kx_add_timing(cJSON *o, const char *key, const Kclaw__Timing *tm)
{
	cJSON *t;

	if (tm == NULL || tm->median_ms <= 0) {
		cJSON_AddNullToObject(o, key);
		return;
	}
	t = cJSON_AddObjectToObject(o, key);
	cJSON_AddNumberToObject(t, "median_ms", tm->median_ms);
	cJSON_AddNumberToObject(t, "mean_ms", tm->mean_ms);
	cJSON_AddNumberToObject(t, "min_ms", tm->min_ms);
	cJSON_AddNumberToObject(t, "max_ms", tm->max_ms);
	cJSON_AddNumberToObject(t, "stddev_ms", tm->stddev_ms);
	cJSON_AddNumberToObject(t, "iterations", tm->iterations);
	cJSON_AddBoolToObject(t, "l2_flushed", tm->l2_flushed);
	cJSON_AddNumberToObject(t, "spot_checks", tm->spot_checks);
}

static void
kx_add_strings(cJSON *o, const char *key, char **v, size_t n)
{
	cJSON *a = cJSON_AddArrayToObject(o, key);

	for (size_t i = 0; i < n; i++)
		cJSON_AddItemToArray(a, cJSON_CreateString(v[i]));
}

static const char *
kx_ref_kind(const Kclaw__TaskSpec *spec)
{
	if (spec == NULL || spec->reference == NULL)
		return NULL;
	switch (spec->reference->kind) {
	case KCLAW__REFERENCE__KIND__CUDA: return "cuda";
	case KCLAW__REFERENCE__KIND__TENSORS: return "tensors";
	case KCLAW__REFERENCE__KIND__TORCH: return "torch";
	default: return NULL;
	}
}

/* The candidate's speedup over the reference timed in its evaluation. */
static double
kx_speedup(const Kclaw__EvalResult *e, double reference_ms)
{
	if (e == NULL)
		return 0;
	if (e->speedup > 0)
		return e->speedup;
	if (e->timing && e->timing->median_ms > 0 && reference_ms > 0)
		return reference_ms / e->timing->median_ms;
	return 0;
}

static cJSON *
kx_result_json(const Kclaw__ResultResponse *r)
{
	const Kclaw__TaskRecord *t = r->task;
	const Kclaw__TaskSpec *spec = t ? t->spec : NULL;
	const Kclaw__Candidate *c = r->best->candidate;
	const Kclaw__EvalResult *e = r->best->eval;
	cJSON *o = cJSON_CreateObject(), *x, *v;
	char st[32], state[32];
	double ref_ms = e && e->reference_ms > 0 ? e->reference_ms
	                                         : (t ? t->reference_ms : 0);
	double tc_ms = e && e->torch_compile_ms > 0 ? e->torch_compile_ms : 0;

	if (tc_ms <= 0 && t && t->torch_compile_ms > 0)
		tc_ms = t->torch_compile_ms;
	if (tc_ms <= 0 && spec && spec->reference &&
	    spec->reference->torch_compile_ms > 0)
		tc_ms = spec->reference->torch_compile_ms;

	x = cJSON_AddObjectToObject(o, "task");
	kx_add_str(x, "id", t ? t->id : NULL);
	kx_add_str(x, "name", spec ? spec->name : NULL);
	kx_add_str(x, "description", spec ? spec->description : NULL);
	/* Lower case, as every --json prints it ("done"). */
	snprintf(state, sizeof(state), "%s", t && t->state ? t->state : "");
	for (char *p = state; *p; p++)
		*p = (char)tolower((unsigned char)*p);
	kx_add_str(x, "state", state);
	kx_add_str(x, "error", t ? t->error : NULL);
	kx_add_str(x, "reference", kx_ref_kind(spec));
	if (t)
		cJSON_AddNumberToObject(x, "rounds", t->round);

	x = cJSON_AddObjectToObject(o, "candidate");
	kx_add_str(x, "id", c->id);
	kx_add_str(x, "parent_id", c->parent_id);
	kx_add_str(x, "origin", c->origin);
	kx_add_str(x, "method", c->method);
	cJSON_AddNumberToObject(x, "round", c->round);

	kx_add_str(o, "status", kx_status_name(e, st, sizeof(st)));
	kx_add_timing(o, "timing", e ? e->timing : NULL);
	kx_add_timing(o, "baseline", e ? e->baseline : NULL);
	kx_add_num(o, "reference_ms", ref_ms);
	kx_add_num(o, "speedup", kx_speedup(e, ref_ms));
	kx_add_num(o, "torch_compile_ms", tc_ms);
	kx_add_num(o, "compile_speedup",
	    e && e->compile_speedup > 0 ? e->compile_speedup
	        : tc_ms > 0 && e && e->timing && e->timing->median_ms > 0
	        ? tc_ms / e->timing->median_ms
	        : 0);
	kx_add_num(o, "speed_of_light_ms", e ? e->speed_of_light_ms : 0);
	kx_add_num(o, "sol_fraction", e ? e->sol_fraction : 0);

	x = cJSON_AddObjectToObject(o, "errors");
	if (e) {
		cJSON_AddNumberToObject(x, "max_abs_err", e->max_abs_err);
		cJSON_AddNumberToObject(x, "max_rel_err", e->max_rel_err);
		cJSON_AddNumberToObject(x, "rel_norm", e->rel_norm);
		cJSON_AddNumberToObject(
		    x, "output_variation", e->output_variation);
		cJSON_AddNumberToObject(
		    x, "error_vs_variation", e->error_vs_variation);
		cJSON_AddBoolToObject(
		    x, "nondeterministic", e->nondeterministic);
		cJSON_AddNumberToObject(
		    x, "nondeterminism_max_diff", e->nondeterminism_max_diff);
	}
	if (spec && spec->tolerance) {
		v = cJSON_AddObjectToObject(o, "tolerance");
		cJSON_AddNumberToObject(v, "atol", spec->tolerance->atol);
		cJSON_AddNumberToObject(v, "rtol", spec->tolerance->rtol);
		cJSON_AddNumberToObject(
		    v, "max_rel_norm", spec->tolerance->max_rel_norm);
	} else {
		cJSON_AddNullToObject(o, "tolerance");
	}
	kx_add_strings(
	    o, "warnings", e ? e->warnings : NULL, e ? e->n_warnings : 0);
	kx_add_strings(
	    o, "degenerate", e ? e->degenerate : NULL, e ? e->n_degenerate : 0);
	/* Every output's variation between two input sets and what the
	 * tolerance admits (EvalResult.output_variations). */
	x = cJSON_AddArrayToObject(o, "outputs");
	for (size_t i = 0; e && i < e->n_output_variations; i++) {
		const Kclaw__OutputVariation *ov = e->output_variations[i];
		cJSON *j = cJSON_CreateObject();
		if (j == NULL || !cJSON_AddItemToArray(x, j))
			break;
		kx_add_str(j, "name", ov->name);
		if (ov->measured)
			cJSON_AddNumberToObject(j, "variation", ov->variation);
		else
			cJSON_AddNullToObject(j, "variation");
		cJSON_AddNumberToObject(j, "admits", ov->admits);
		cJSON_AddBoolToObject(j, "degenerate", ov->degenerate);
	}
	kx_add_str(o, "tuned_config", e ? e->tuned_config : NULL);

	x = cJSON_AddObjectToObject(o, "verified");
	cJSON_AddItemToObject(
	    x, "tensors", spec ? kx_tensors_json(spec) : cJSON_CreateArray());
	cJSON_AddNumberToObject(
	    x, "trials", spec && spec->trials ? spec->trials : 3);
	cJSON_AddStringToObject(x, "note",
	    "the kernel and its plan were verified for exactly these shapes, "
	    "dtypes and scalar values; the launch plan's grid and sizes are "
	    "fixed for them, so other shapes need a task of their own");

	x = cJSON_AddObjectToObject(o, "device");
	kx_add_str(x, "name", e ? e->device_name : NULL);
	kx_add_str(x, "arch", e ? e->arch : NULL);

	v = cJSON_AddArrayToObject(o, "kernels");
	for (size_t i = 0; e && i < e->n_kernels; i++) {
		const Kclaw__KernelResources *k = e->kernels[i];
		cJSON *kr = cJSON_CreateObject();
		cJSON_AddItemToArray(v, kr);
		cJSON_AddStringToObject(kr, "kernel", k->kernel);
		cJSON_AddNumberToObject(kr, "registers", k->registers);
		cJSON_AddNumberToObject(
		    kr, "shared_static_bytes", k->shared_static_bytes);
		cJSON_AddNumberToObject(kr, "local_bytes", k->local_bytes);
		cJSON_AddNumberToObject(kr, "spill_bytes", k->spill_bytes);
		cJSON_AddNumberToObject(kr, "occupancy", k->occupancy);
	}
	return o;
}

static cJSON *
kx_history_json(const Kclaw__ResultResponse *r)
{
	cJSON *o = cJSON_CreateObject(), *a;
	const Kclaw__TaskRecord *t = r->task;

	kx_add_str(o, "task_id", t ? t->id : NULL);
	kx_add_str(o, "best_id", r->best ? r->best->candidate->id : NULL);
	a = cJSON_AddArrayToObject(o, "candidates");
	for (size_t i = 0; i < r->n_history; i++) {
		const Kclaw__CandidateRecord *h = r->history[i];
		const Kclaw__Candidate *c = h->candidate;
		const Kclaw__EvalResult *e = h->eval;
		cJSON *x = cJSON_CreateObject();
		char st[32];
		double ref = e && e->reference_ms > 0
		    ? e->reference_ms
		    : (t ? t->reference_ms : 0);

		if (c == NULL) {
			cJSON_Delete(x);
			continue;
		}
		cJSON_AddItemToArray(a, x);
		kx_add_str(x, "id", c->id);
		kx_add_str(x, "parent_id", c->parent_id);
		kx_add_str(x, "origin", c->origin);
		kx_add_str(x, "method", c->method);
		cJSON_AddNumberToObject(x, "round", c->round);
		kx_add_str(x, "status", kx_status_name(e, st, sizeof(st)));
		kx_add_num(
		    x, "median_ms", e && e->timing ? e->timing->median_ms : 0);
		kx_add_num(x, "reference_ms", ref);
		kx_add_num(x, "speedup",
		    e && e->status == KCLAW__EVAL_STATUS__OK
		        ? kx_speedup(e, ref)
		        : 0);
		kx_add_str(x, "message", e ? e->message : NULL);
		kx_add_str(x, "reused_from", h->reused_from);
		cJSON_AddBoolToObject(x, "best",
		    r->best && strcmp(r->best->candidate->id, c->id) == 0);
	}
	return o;
}

static int
kx_write_json(const char *dir, const char *name, cJSON *o)
{
	char path[KC_PATH_MAX];
	int rv;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	rv = kc_write_json(path, o);
	cJSON_Delete(o);
	return rv;
}

static int
kx_write_text(const char *dir, const char *name, const char *text)
{
	char path[KC_PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return kc_write_file(path, text, strlen(text));
}

static int
kx_readme(const char *dir, const Kclaw__ResultResponse *r,
    const Kclaw__TaskSpec *spec, int has_matmul)
{
	kc_str s = {0};
	int rv;

	kc_str_printf(&s,
	    "# %s: the best kernel of task %s\n\n"
	    "Candidate %s (%s). Measurements in result.json, every candidate "
	    "in history.json.\n\n"
	    "## Verified for\n\n"
	    "Exactly these tensors (the launch plan's grid and sizes are "
	    "fixed for them;\nother shapes need a task of their own):\n\n",
	    spec->name, r->task && r->task->id ? r->task->id : "?",
	    r->best->candidate->id, r->best->candidate->origin);
	for (size_t i = 0; i < spec->n_tensors; i++) {
		const Kclaw__TensorSpec *t = spec->tensors[i];
		kc_str_printf(&s, "- `%s`: %s %s [", t->name,
		    kx_kind_name(t->kind), kx_dtype_name(t->dtype));
		for (size_t j = 0; j < t->n_shape; j++)
			kc_str_printf(&s, "%s%lld", j ? ", " : "",
			    (long long)t->shape[j]);
		kc_str_append(&s, "]");
		if (t->kind == KCLAW__TENSOR_KIND__SCALAR)
			kc_str_printf(&s, " = %.17g", t->scalar_value);
		kc_str_append(&s, "\n");
	}
	kc_str_printf(&s,
	    "\n## Files\n\n"
	    "- `kernel.cu`, `plan.json`: the candidate (docs/plan.md); "
	    "`kclaw eval TASK_DIR DIR` evaluates it again.\n"
	    "- `launcher.h`, `launcher.c`: a standalone C launcher. It "
	    "compiles kernel.cu (embedded\n  in launcher.c) with NVRTC for the "
	    "current device, loads it with the CUDA driver\n  API and runs "
	    "the plan's steps in order on a stream%s. It links the\n  "
	    "libraries (no dlopen):\n\n"
	    "      cc -O2 -I/usr/local/cuda/include main.c launcher.c \\\n"
	    "         -L/usr/local/cuda/lib64 -lcuda -lnvrtc%s -lm -o run\n"
	    "      ./run\n\n"
	    "  `main.c` is an example: random inputs, one checked run, a "
	    "timing.\n"
	    "- `model_new.py`: `ModelNew`, a torch.nn.Module with the task's "
	    "forward interface\n  (inputs in order, parameters by the task's "
	    "names). It compiles kernel.cu with\n  NVRTC and launches it "
	    "through the CUDA driver with ctypes on PyTorch's current\n  "
	    "stream; it needs PyTorch with CUDA and libnvrtc (the CUDA "
	    "toolkit, or the\n  nvidia-cuda-nvrtc wheel PyTorch installs), "
	    "nothing else.%s\n"
	    "  The kernel is a PyTorch operator, `model_new.KERNEL_OP` "
	    "(torch.library,\n  `torch.ops.kclaw.k_<task>_<hash>`, with a fake "
	    "implementation), so ModelNew\n  works eagerly, under "
	    "torch.compile (one node, no graph break) and inside a\n  CUDA "
	    "graph capture (call it once before capturing: the first call "
	    "compiles).\n  Inputs of other shapes, dtypes, strides or "
	    "devices than the verified ones run\n  the task's PyTorch Model "
	    "instead, with one warning (other references raise).\n",
	    has_matmul ? ", matmul steps through cuBLASLt" : "",
	    has_matmul ? " -lcublasLt" : "",
	    has_matmul ? " Matmul steps run through\n  torch.matmul "
	                 "(cuBLAS) with the same epilogue."
	               : "");
	if (s.buf == NULL)
		return KC_ENOMEM;
	rv = kx_write_text(dir, "README.md", s.buf);
	kc_str_free(&s);
	return rv;
}

int
kc_export_result(const char *dir, const Kclaw__ResultResponse *r)
{
	const Kclaw__CandidateRecord *b = r->best;
	const Kclaw__TaskSpec *spec = r->task ? r->task->spec : NULL;
	const char *source, *plan;
	int rv;

	if (b == NULL || b->candidate == NULL)
		return kc_seterr(KC_EINVAL, "the task has no correct kernel");
	if (spec == NULL)
		return kc_seterr(KC_EINVAL, "the result carries no task spec");
	/* A candidate with tunables was measured in its tuned
	 * configuration: that source and plan are the ones verified. */
	source = b->candidate->source;
	plan = b->candidate->plan_json;
	if (b->eval && b->eval->tuned_source && *b->eval->tuned_source &&
	    b->eval->tuned_plan && *b->eval->tuned_plan) {
		source = b->eval->tuned_source;
		plan = b->eval->tuned_plan;
	}
	if ((rv = kc_mkdirs(dir, 0755)) != 0 ||
	    (rv = kx_write_text(dir, "kernel.cu", source)) != 0 ||
	    (rv = kx_write_text(dir, "plan.json", plan)) != 0 ||
	    (rv = kx_write_json(dir, "result.json", kx_result_json(r))) != 0 ||
	    (rv = kx_write_json(dir, "history.json", kx_history_json(r))) !=
	        0 ||
	    (rv = kx_write_c(dir, spec, source, plan)) != 0 ||
	    (rv = kx_write_py(dir, spec, source, plan)) != 0)
		return rv;
	return kx_readme(dir, r, spec, strstr(plan, "\"matmul\"") != NULL);
}
