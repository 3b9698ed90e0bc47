/*
 * plan.c - parses and checks launch plans (docs/plan.md).
 */
#include "plan.h"

#include "bundle.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kc_err.h"
#include "kc_util.h"

/* The bundle's dtype table (common/bundle.h), with "?" for none. */
const char *
sbx_dtype_name(Kclaw__DType dtype)
{
	return dtype == KCLAW__DTYPE__DTYPE_UNSPECIFIED ? "?"
	                                                : kc_dtype_name(dtype);
}

int
sbx_tensor_count(const Kclaw__TensorSpec *t, size_t *count)
{
	size_t n = 1;

	for (size_t i = 0; i < t->n_shape; i++) {
		if (t->shape[i] < 0 ||
		    (t->shape[i] > 0 && n > SIZE_MAX / (size_t)t->shape[i]))
			return kc_seterr(KC_EINVAL,
			    "tensor '%s': bad shape (dimension %zu is %lld)",
			    t->name, i, (long long)t->shape[i]);
		n *= (size_t)t->shape[i];
	}
	*count = n;
	return 0;
}

void
sbx_limits_generic(sbx_limits *lim)
{
	*lim = (sbx_limits){
	    .max_block = {1024, 1024, 64},
	    .max_grid = {2147483647u, 65535, 65535},
	    .max_threads_per_block = 1024,
	    .max_shared_optin = 227 * 1024,
	};
}

/* ---- parsing ---- */

static int
plan_find_buffer(const sbx_plan *p, const char *name)
{
	for (size_t i = 0; i < p->nbuffers; i++)
		if (strcmp(p->buffers[i].name, name) == 0)
			return (int)i;
	return -1;
}

/* "x, w, y, tmp" for error messages. */
static void
plan_buffer_names(const sbx_plan *p, char *out, size_t n)
{
	size_t len = 0;

	out[0] = '\0';
	for (size_t i = 0; i < p->nbuffers && len + 1 < n; i++)
		len += (size_t)snprintf(out + len, n - len, "%s%s",
		    i ? ", " : "", p->buffers[i].name);
}

static int
plan_ident_ok(const char *s)
{
	if (s == NULL || *s == '\0' || strlen(s) >= SBX_NAME_MAX)
		return 0;
	if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
	        *s == '_'))
		return 0;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		        (*s >= '0' && *s <= '9') || *s == '_'))
			return 0;
	return 1;
}

/* Reads an array of 1 to 3 positive integers; missing dimensions are 1. */
static int
plan_dim3(const cJSON *v, const char *where, const char *field, uint32_t d[3])
{
	int n;

	d[0] = d[1] = d[2] = 1;
	if (cJSON_IsNumber(v)) {
		if (v->valuedouble < 1 || v->valuedouble > 4294967295.0 ||
		    v->valuedouble != floor(v->valuedouble))
			return kc_seterr(KC_EINVAL,
			    "%s: '%s' must be a positive integer", where,
			    field);
		d[0] = (uint32_t)v->valuedouble;
		return 0;
	}
	if (!cJSON_IsArray(v) || (n = cJSON_GetArraySize(v)) < 1 || n > 3)
		return kc_seterr(KC_EINVAL,
		    "%s: '%s' must be an array of 1 to 3 positive integers, "
		    "e.g. [256, 1, 1]",
		    where, field);
	for (int i = 0; i < n; i++) {
		const cJSON *e = cJSON_GetArrayItem(v, i);
		if (!cJSON_IsNumber(e) || e->valuedouble < 1 ||
		    e->valuedouble > 4294967295.0 ||
		    e->valuedouble != floor(e->valuedouble))
			return kc_seterr(KC_EINVAL,
			    "%s: '%s'[%d] must be a positive integer", where,
			    field, i);
		d[i] = (uint32_t)e->valuedouble;
	}
	return 0;
}

/* A torch problem's scalar input, named in a plan, is passed by value with
 * its declared type. */
static void
plan_scalar_value(const Kclaw__TensorSpec *t, sbx_buffer *b)
{
	b->scalar = 1;
	b->bytes = 0;
	switch (t->dtype) {
	case KCLAW__DTYPE__F64:
		b->value.kind = SBX_ARG_F64;
		b->value.v.f64 = t->scalar_value;
		break;
	case KCLAW__DTYPE__I32:
		b->value.kind = SBX_ARG_I32;
		b->value.v.i32 = (int32_t)t->scalar_value;
		break;
	case KCLAW__DTYPE__I64:
		b->value.kind = SBX_ARG_I64;
		b->value.v.i64 = (int64_t)t->scalar_value;
		break;
	default:
		b->value.kind = SBX_ARG_F32;
		b->value.v.f32 = (float)t->scalar_value;
		break;
	}
}

static int
plan_parse_scalar(const cJSON *a, const char *where, sbx_arg *arg)
{
	const cJSON *v = a->child;
	double x;

	if (v == NULL || v->next != NULL || !cJSON_IsNumber(v))
		return kc_seterr(KC_EINVAL,
		    "%s: a scalar is an object with one typed number, e.g. "
		    "{\"i32\": 4096} or {\"f32\": 0.5}",
		    where);
	x = v->valuedouble;
	if (strcmp(v->string, "f32") == 0) {
		arg->kind = SBX_ARG_F32;
		arg->v.f32 = (float)x;
		return 0;
	}
	if (strcmp(v->string, "f64") == 0) {
		arg->kind = SBX_ARG_F64;
		arg->v.f64 = x;
		return 0;
	}
	if (x != floor(x))
		return kc_seterr(KC_EINVAL, "%s: %s value %g is not an integer",
		    where, v->string, x);
	if (strcmp(v->string, "i32") == 0) {
		if (x < -2147483648.0 || x > 2147483647.0)
			return kc_seterr(KC_EINVAL,
			    "%s: %g does not fit in i32; use {\"i64\": ...}",
			    where, x);
		arg->kind = SBX_ARG_I32;
		arg->v.i32 = (int32_t)x;
	} else if (strcmp(v->string, "u32") == 0) {
		if (x < 0 || x > 4294967295.0)
			return kc_seterr(
			    KC_EINVAL, "%s: %g does not fit in u32", where, x);
		arg->kind = SBX_ARG_U32;
		arg->v.u32 = (uint32_t)x;
	} else if (strcmp(v->string, "i64") == 0) {
		if (fabs(x) > 9007199254740992.0)
			return kc_seterr(KC_EINVAL,
			    "%s: %g is beyond the exact range of a JSON "
			    "number",
			    where, x);
		arg->kind = SBX_ARG_I64;
		arg->v.i64 = (int64_t)x;
	} else {
		return kc_seterr(KC_EINVAL,
		    "%s: unknown scalar type '%s'; use i32, u32, i64, f32 or "
		    "f64",
		    where, v->string);
	}
	return 0;
}

static int
plan_parse_kernel_step(
    sbx_plan *p, const cJSON *s, const char *where, sbx_step *st)
{
	const cJSON *k = cJSON_GetObjectItemCaseSensitive(s, "kernel");
	const cJSON *args, *sh;
	char w[256], names[512];
	int rv;

	st->kind = SBX_STEP_KERNEL;
	if (!cJSON_IsString(k) || !plan_ident_ok(k->valuestring))
		return kc_seterr(KC_EINVAL,
		    "%s: 'kernel' must name an extern \"C\" __global__ "
		    "function (a C identifier)",
		    where);
	snprintf(st->kernel, sizeof(st->kernel), "%s", k->valuestring);
	snprintf(w, sizeof(w), "%s (kernel '%s')", where, st->kernel);
	if ((rv = plan_dim3(cJSON_GetObjectItemCaseSensitive(s, "grid"), w,
	         "grid", st->grid)) != 0)
		return rv;
	if ((rv = plan_dim3(cJSON_GetObjectItemCaseSensitive(s, "block"), w,
	         "block", st->block)) != 0)
		return rv;
	sh = cJSON_GetObjectItemCaseSensitive(s, "shared_bytes");
	if (sh != NULL) {
		if (!cJSON_IsNumber(sh) || sh->valuedouble < 0 ||
		    sh->valuedouble > 4294967295.0 ||
		    sh->valuedouble != floor(sh->valuedouble))
			return kc_seterr(KC_EINVAL,
			    "%s: 'shared_bytes' must be a non-negative integer",
			    w);
		st->shared_bytes = (uint32_t)sh->valuedouble;
	}
	args = cJSON_GetObjectItemCaseSensitive(s, "args");
	if (args == NULL)
		return kc_seterr(KC_EINVAL,
		    "%s: 'args' is missing; list the kernel's arguments, "
		    "e.g. [\"x\", \"y\", {\"i32\": 1024}]",
		    w);
	if (!cJSON_IsArray(args))
		return kc_seterr(KC_EINVAL, "%s: 'args' must be an array", w);
	if (cJSON_GetArraySize(args) > SBX_MAX_ARGS)
		return kc_seterr(
		    KC_EINVAL, "%s: more than %d arguments", w, SBX_MAX_ARGS);
	for (const cJSON *a = args->child; a != NULL; a = a->next) {
		sbx_arg *arg = &st->args[st->nargs];
		char aw[300];

		snprintf(aw, sizeof(aw), "%s: argument %zu", w, st->nargs);
		if (cJSON_IsString(a)) {
			int b = plan_find_buffer(p, a->valuestring);
			if (b < 0) {
				plan_buffer_names(p, names, sizeof(names));
				return kc_seterr(KC_EINVAL,
				    "%s: unknown tensor or scratch buffer "
				    "'%s'; known: %s",
				    aw, a->valuestring, names);
			}
			if (p->buffers[b].scalar) {
				*arg = p->buffers[b].value;
			} else {
				arg->kind = SBX_ARG_BUFFER;
				arg->buffer = b;
			}
		} else if (cJSON_IsObject(a)) {
			if ((rv = plan_parse_scalar(a, aw, arg)) != 0)
				return rv;
		} else {
			return kc_seterr(KC_EINVAL,
			    "%s: must be a tensor name or a typed scalar like "
			    "{\"i32\": 4096}",
			    aw);
		}
		st->nargs++;
	}
	return 0;
}

static const struct {
	const char *name;
	enum sbx_epilogue epi;
} plan_epilogues[] = {
    {"none", SBX_EPI_NONE},
    {"relu", SBX_EPI_RELU},
    {"gelu", SBX_EPI_GELU},
    {"bias", SBX_EPI_BIAS},
    {"bias_relu", SBX_EPI_BIAS_RELU},
    {"bias_gelu", SBX_EPI_BIAS_GELU},
};

/* Looks up a matmul operand; -1 for an absent optional one. */
static int
plan_mm_operand(const sbx_plan *p, const cJSON *mm, const char *field,
    int required, const char *where, int *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(mm, field);
	char names[512];

	*out = -1;
	if (v == NULL || cJSON_IsNull(v)) {
		if (required)
			return kc_seterr(KC_EINVAL,
			    "%s: '%s' is missing; name a tensor or scratch "
			    "buffer",
			    where, field);
		return 0;
	}
	if (!cJSON_IsString(v))
		return kc_seterr(
		    KC_EINVAL, "%s: '%s' must be a buffer name", where, field);
	if ((*out = plan_find_buffer(p, v->valuestring)) < 0) {
		plan_buffer_names(p, names, sizeof(names));
		return kc_seterr(KC_EINVAL,
		    "%s: '%s' names unknown buffer '%s'; known: %s", where,
		    field, v->valuestring, names);
	}
	return 0;
}

/* Checks that buffer b holds at least count elements of dtype. */
static int
plan_mm_size(const sbx_plan *p, const Kclaw__TaskSpec *task, int b,
    const char *field, Kclaw__DType dtype, uint64_t count, const char *where)
{
	const sbx_buffer *buf = &p->buffers[b];
	size_t esz = kc_dtype_size(dtype);

	if (buf->tensor >= 0 && task->tensors[buf->tensor]->dtype != dtype)
		return kc_seterr(KC_EINVAL,
		    "%s: '%s' (%s) is %s but the matmul's dtype is %s", where,
		    field, buf->name,
		    sbx_dtype_name(task->tensors[buf->tensor]->dtype),
		    sbx_dtype_name(dtype));
	if (count > SIZE_MAX / esz || buf->bytes < count * esz)
		return kc_seterr(KC_EINVAL,
		    "%s: '%s' (%s) has %zu bytes; the matmul needs %llu "
		    "elements of %s",
		    where, field, buf->name, buf->bytes,
		    (unsigned long long)count, sbx_dtype_name(dtype));
	return 0;
}

static int
plan_mm_int(const cJSON *mm, const char *field, const char *where, int64_t *v)
{
	const cJSON *j = cJSON_GetObjectItemCaseSensitive(mm, field);

	if (!cJSON_IsNumber(j) || j->valuedouble < 1 ||
	    j->valuedouble > 2147483647.0 ||
	    j->valuedouble != floor(j->valuedouble))
		return kc_seterr(KC_EINVAL,
		    "%s: '%s' must be a positive integer", where, field);
	*v = (int64_t)j->valuedouble;
	return 0;
}

static int
plan_parse_matmul(sbx_plan *p, const Kclaw__TaskSpec *task, const cJSON *mm,
    const char *where, sbx_step *st)
{
	sbx_matmul *m = &st->mm;
	const cJSON *v;
	char w[256];
	int rv;

	st->kind = SBX_STEP_MATMUL;
	snprintf(st->kernel, sizeof(st->kernel), "matmul");
	snprintf(w, sizeof(w), "%s (matmul)", where);
	if (!cJSON_IsObject(mm))
		return kc_seterr(KC_EINVAL,
		    "%s: 'matmul' must be an object (docs/plan.md)", w);
	if ((rv = plan_mm_int(mm, "m", w, &m->m)) != 0 ||
	    (rv = plan_mm_int(mm, "n", w, &m->n)) != 0 ||
	    (rv = plan_mm_int(mm, "k", w, &m->k)) != 0)
		return rv;
	if ((rv = plan_mm_operand(p, mm, "a", 1, w, &m->a)) != 0 ||
	    (rv = plan_mm_operand(p, mm, "b", 1, w, &m->b)) != 0 ||
	    (rv = plan_mm_operand(p, mm, "d", 1, w, &m->d)) != 0 ||
	    (rv = plan_mm_operand(p, mm, "c", 0, w, &m->c)) != 0 ||
	    (rv = plan_mm_operand(p, mm, "bias", 0, w, &m->bias)) != 0)
		return rv;
	v = cJSON_GetObjectItemCaseSensitive(mm, "dtype");
	m->dtype = KCLAW__DTYPE__F32;
	if (v != NULL) {
		if (!cJSON_IsString(v))
			return kc_seterr(KC_EINVAL,
			    "%s: 'dtype' must be f32, f16 or bf16", w);
		if (strcmp(v->valuestring, "f32") == 0)
			m->dtype = KCLAW__DTYPE__F32;
		else if (strcmp(v->valuestring, "f16") == 0)
			m->dtype = KCLAW__DTYPE__F16;
		else if (strcmp(v->valuestring, "bf16") == 0)
			m->dtype = KCLAW__DTYPE__BF16;
		else
			return kc_seterr(KC_EINVAL,
			    "%s: dtype '%s' is not supported; use f32, f16 "
			    "or bf16",
			    w, v->valuestring);
	}
	m->trans_a =
	    cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(mm, "trans_a"));
	m->trans_b =
	    cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(mm, "trans_b"));
	m->tf32 = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(mm, "tf32"));
	m->alpha = 1.0;
	m->beta = 0.0;
	if ((v = cJSON_GetObjectItemCaseSensitive(mm, "alpha")) != NULL) {
		if (!cJSON_IsNumber(v))
			return kc_seterr(
			    KC_EINVAL, "%s: 'alpha' must be a number", w);
		m->alpha = v->valuedouble;
	}
	if ((v = cJSON_GetObjectItemCaseSensitive(mm, "beta")) != NULL) {
		if (!cJSON_IsNumber(v))
			return kc_seterr(
			    KC_EINVAL, "%s: 'beta' must be a number", w);
		m->beta = v->valuedouble;
	}
	m->epilogue = SBX_EPI_NONE;
	if ((v = cJSON_GetObjectItemCaseSensitive(mm, "epilogue")) != NULL) {
		size_t i;
		if (!cJSON_IsString(v))
			return kc_seterr(
			    KC_EINVAL, "%s: 'epilogue' must be a string", w);
		for (i = 0; i < KC_ARRAY_LEN(plan_epilogues); i++)
			if (strcmp(plan_epilogues[i].name, v->valuestring) == 0)
				break;
		if (i == KC_ARRAY_LEN(plan_epilogues))
			return kc_seterr(KC_EINVAL,
			    "%s: unknown epilogue '%s'; use none, relu, gelu, "
			    "bias, bias_relu or bias_gelu",
			    w, v->valuestring);
		m->epilogue = plan_epilogues[i].epi;
	}
	if (m->epilogue >= SBX_EPI_BIAS && m->bias < 0)
		return kc_seterr(KC_EINVAL,
		    "%s: epilogue '%s' needs a 'bias' buffer of n elements", w,
		    v->valuestring);
	if (m->epilogue < SBX_EPI_BIAS && m->bias >= 0)
		return kc_seterr(KC_EINVAL,
		    "%s: 'bias' is given but the epilogue does not add it; use "
		    "epilogue bias, bias_relu or bias_gelu",
		    w);
	if (m->beta != 0.0 && m->c < 0)
		return kc_seterr(KC_EINVAL,
		    "%s: beta is %g but no 'c' buffer is given", w, m->beta);
	if ((rv = plan_mm_size(p, task, m->a, "a", m->dtype,
	         (uint64_t)m->m * (uint64_t)m->k, w)) != 0 ||
	    (rv = plan_mm_size(p, task, m->b, "b", m->dtype,
	         (uint64_t)m->k * (uint64_t)m->n, w)) != 0 ||
	    (rv = plan_mm_size(p, task, m->d, "d", m->dtype,
	         (uint64_t)m->m * (uint64_t)m->n, w)) != 0)
		return rv;
	if (m->c >= 0 &&
	    (rv = plan_mm_size(p, task, m->c, "c", m->dtype,
	         (uint64_t)m->m * (uint64_t)m->n, w)) != 0)
		return rv;
	if (m->bias >= 0 &&
	    (rv = plan_mm_size(
	         p, task, m->bias, "bias", m->dtype, (uint64_t)m->n, w)) != 0)
		return rv;
	if (m->tf32 && m->dtype != KCLAW__DTYPE__F32)
		return kc_seterr(
		    KC_EINVAL, "%s: 'tf32' applies only to dtype f32", w);
	return 0;
}

static int
plan_parse_scratch(sbx_plan *p, const cJSON *scratch)
{
	if (scratch == NULL)
		return 0;
	if (!cJSON_IsArray(scratch))
		return kc_seterr(KC_EINVAL,
		    "plan: 'scratch' must be an array of {\"name\": ..., "
		    "\"bytes\": ...}");
	if (cJSON_GetArraySize(scratch) > SBX_MAX_SCRATCH)
		return kc_seterr(KC_EINVAL,
		    "plan: more than %d scratch buffers", SBX_MAX_SCRATCH);
	for (const cJSON *s = scratch->child; s != NULL; s = s->next) {
		const cJSON *n = cJSON_GetObjectItemCaseSensitive(s, "name");
		const cJSON *b = cJSON_GetObjectItemCaseSensitive(s, "bytes");
		sbx_buffer *buf = &p->buffers[p->nbuffers];
		size_t idx = p->nbuffers - p->ntensors;

		if (!cJSON_IsString(n) || !plan_ident_ok(n->valuestring))
			return kc_seterr(KC_EINVAL,
			    "plan: scratch %zu: 'name' must be a C "
			    "identifier",
			    idx);
		if (plan_find_buffer(p, n->valuestring) >= 0)
			return kc_seterr(KC_EINVAL,
			    "plan: scratch '%s': the name is already used by "
			    "a tensor or another scratch buffer",
			    n->valuestring);
		if (!cJSON_IsNumber(b) || b->valuedouble < 1 ||
		    b->valuedouble != floor(b->valuedouble) ||
		    b->valuedouble > (double)SBX_MAX_SCRATCH_BYTES)
			return kc_seterr(KC_EINVAL,
			    "plan: scratch '%s': 'bytes' must be an integer "
			    "from 1 to %zu",
			    n->valuestring, SBX_MAX_SCRATCH_BYTES);
		snprintf(buf->name, sizeof(buf->name), "%s", n->valuestring);
		buf->tensor = -1;
		buf->bytes = (size_t)b->valuedouble;
		p->nbuffers++;
	}
	return 0;
}

/* Every output must be written by some step, else its poison stays. */
static int
plan_check_outputs(const sbx_plan *p, const Kclaw__TaskSpec *task)
{
	for (size_t t = 0; t < task->n_tensors; t++) {
		int written = 0;
		if (task->tensors[t]->kind != KCLAW__TENSOR_KIND__OUTPUT)
			continue;
		for (size_t s = 0; s < p->nsteps && !written; s++) {
			const sbx_step *st = &p->steps[s];
			if (st->kind == SBX_STEP_MATMUL) {
				written = st->mm.d == (int)t;
				continue;
			}
			for (size_t a = 0; a < st->nargs; a++)
				if (st->args[a].kind == SBX_ARG_BUFFER &&
				    st->args[a].buffer == (int)t)
					written = 1;
		}
		if (!written)
			return kc_seterr(KC_EINVAL,
			    "plan: output tensor '%s' is not passed to any "
			    "step; every output must be written",
			    task->tensors[t]->name);
	}
	return 0;
}

int
sbx_plan_parse(const char *json, const Kclaw__TaskSpec *task, sbx_plan **out)
{
	cJSON *root = NULL;
	const cJSON *steps;
	sbx_plan *p;
	int rv = 0;

	if ((p = calloc(1, sizeof(*p))) == NULL)
		return KC_ENOMEM;
	p->buffers =
	    calloc(task->n_tensors + SBX_MAX_SCRATCH, sizeof(*p->buffers));
	p->steps = calloc(SBX_MAX_STEPS, sizeof(*p->steps));
	if (p->buffers == NULL || p->steps == NULL) {
		rv = KC_ENOMEM;
		goto fail;
	}
	for (size_t i = 0; i < task->n_tensors; i++) {
		const Kclaw__TensorSpec *t = task->tensors[i];
		size_t count = 0;
		if ((rv = sbx_tensor_count(t, &count)) != 0)
			goto fail;
		snprintf(p->buffers[i].name, SBX_NAME_MAX, "%s", t->name);
		p->buffers[i].tensor = (int)i;
		p->buffers[i].bytes = count * kc_dtype_size(t->dtype);
		if (t->kind == KCLAW__TENSOR_KIND__SCALAR)
			plan_scalar_value(t, &p->buffers[i]);
	}
	p->nbuffers = p->ntensors = task->n_tensors;

	if (json == NULL || *json == '\0') {
		rv = kc_seterr(KC_EINVAL,
		    "plan: empty; a candidate needs a plan.json with "
		    "\"steps\"");
		goto fail;
	}
	if ((root = cJSON_Parse(json)) == NULL || !cJSON_IsObject(root)) {
		rv = kc_seterr(KC_EINVAL,
		    "plan: not a JSON object (error near '%.32s')",
		    cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() : json);
		goto fail;
	}
	for (const cJSON *k = root->child; k != NULL; k = k->next)
		if (strcmp(k->string, "scratch") != 0 &&
		    strcmp(k->string, "steps") != 0) {
			rv = kc_seterr(KC_EINVAL,
			    "plan: unknown key '%s'; a plan has 'scratch' and "
			    "'steps'",
			    k->string);
			goto fail;
		}
	if ((rv = plan_parse_scratch(
	         p, cJSON_GetObjectItemCaseSensitive(root, "scratch"))) != 0)
		goto fail;
	steps = cJSON_GetObjectItemCaseSensitive(root, "steps");
	if (!cJSON_IsArray(steps) || cJSON_GetArraySize(steps) == 0) {
		rv = kc_seterr(KC_EINVAL,
		    "plan: 'steps' must be a non-empty array of kernel "
		    "launches");
		goto fail;
	}
	if (cJSON_GetArraySize(steps) > SBX_MAX_STEPS) {
		rv = kc_seterr(
		    KC_EINVAL, "plan: more than %d steps", SBX_MAX_STEPS);
		goto fail;
	}
	for (const cJSON *s = steps->child; s != NULL; s = s->next) {
		sbx_step *st = &p->steps[p->nsteps];
		const cJSON *mm;
		char where[64];

		snprintf(where, sizeof(where), "plan: step %zu", p->nsteps);
		if (!cJSON_IsObject(s)) {
			rv = kc_seterr(
			    KC_EINVAL, "%s: must be an object", where);
			goto fail;
		}
		mm = cJSON_GetObjectItemCaseSensitive(s, "matmul");
		if (mm != NULL)
			rv = plan_parse_matmul(p, task, mm, where, st);
		else if (cJSON_GetObjectItemCaseSensitive(s, "kernel"))
			rv = plan_parse_kernel_step(p, s, where, st);
		else
			rv = kc_seterr(KC_EINVAL,
			    "%s: a step has either 'kernel' (a launch) or "
			    "'matmul' (a cuBLASLt matmul)",
			    where);
		if (rv != 0)
			goto fail;
		p->nsteps++;
	}
	if ((rv = plan_check_outputs(p, task)) != 0)
		goto fail;
	cJSON_Delete(root);
	*out = p;
	return 0;
fail:
	cJSON_Delete(root);
	sbx_plan_free(p);
	return rv;
}

void
sbx_plan_free(sbx_plan *p)
{
	if (p == NULL)
		return;
	free(p->buffers);
	free(p->steps);
	free(p);
}

/* ---- checks against the compiled module and the device ---- */

static const char *
plan_arg_desc(const sbx_plan *p, const sbx_arg *a, char *buf, size_t n)
{
	switch (a->kind) {
	case SBX_ARG_BUFFER:
		snprintf(buf, n, "buffer '%s' (8-byte pointer)",
		    p->buffers[a->buffer].name);
		break;
	case SBX_ARG_I32: snprintf(buf, n, "i32 (4 bytes)"); break;
	case SBX_ARG_U32: snprintf(buf, n, "u32 (4 bytes)"); break;
	case SBX_ARG_F32: snprintf(buf, n, "f32 (4 bytes)"); break;
	case SBX_ARG_I64: snprintf(buf, n, "i64 (8 bytes)"); break;
	case SBX_ARG_F64: snprintf(buf, n, "f64 (8 bytes)"); break;
	}
	return buf;
}

static uint32_t
plan_arg_size(const sbx_arg *a)
{
	switch (a->kind) {
	case SBX_ARG_I32:
	case SBX_ARG_U32:
	case SBX_ARG_F32: return 4;
	default: return 8;
	}
}

int
sbx_plan_check(
    const sbx_plan *p, const sbx_sig *sigs, size_t nsigs, const sbx_limits *lim)
{
	static const char axis[3] = {'x', 'y', 'z'};
	char names[512], desc[160];

	for (size_t s = 0; s < p->nsteps; s++) {
		const sbx_step *st = &p->steps[s];
		const sbx_sig *sig = NULL;
		uint64_t threads;
		uint32_t shared_total;
		size_t len = 0;

		if (st->kind != SBX_STEP_KERNEL)
			continue;
		for (size_t i = 0; i < nsigs; i++)
			if (strcmp(sigs[i].name, st->kernel) == 0)
				sig = &sigs[i];
		if (sig == NULL) {
			names[0] = '\0';
			for (size_t i = 0; i < nsigs && len + 1 < sizeof(names);
			     i++)
				len += (size_t)snprintf(names + len,
				    sizeof(names) - len, "%s%s", i ? ", " : "",
				    sigs[i].name);
			return kc_seterr(KC_EINVAL,
			    "plan: step %zu: kernel '%s' is not in the "
			    "compiled module (kernels: %s); declare it "
			    "extern \"C\" __global__",
			    s, st->kernel, nsigs ? names : "none");
		}
		if (sig->nparams != st->nargs)
			return kc_seterr(KC_EINVAL,
			    "plan: step %zu (kernel '%s'): %zu arguments "
			    "given, the kernel takes %zu",
			    s, st->kernel, st->nargs, sig->nparams);
		for (size_t a = 0; a < st->nargs; a++)
			if (plan_arg_size(&st->args[a]) != sig->sizes[a])
				return kc_seterr(KC_EINVAL,
				    "plan: step %zu (kernel '%s'): argument "
				    "%zu is %s but the kernel's parameter %zu "
				    "has %u bytes",
				    s, st->kernel, a,
				    plan_arg_desc(
				        p, &st->args[a], desc, sizeof(desc)),
				    a, sig->sizes[a]);
		for (int d = 0; d < 3; d++) {
			if (st->block[d] > lim->max_block[d])
				return kc_seterr(KC_EINVAL,
				    "plan: step %zu (kernel '%s'): block.%c "
				    "is %u, the device allows at most %u",
				    s, st->kernel, axis[d], st->block[d],
				    lim->max_block[d]);
			if (st->grid[d] > lim->max_grid[d])
				return kc_seterr(KC_EINVAL,
				    "plan: step %zu (kernel '%s'): grid.%c "
				    "is %u, the device allows at most %u",
				    s, st->kernel, axis[d], st->grid[d],
				    lim->max_grid[d]);
		}
		threads = (uint64_t)st->block[0] * st->block[1] * st->block[2];
		if (threads > lim->max_threads_per_block)
			return kc_seterr(KC_EINVAL,
			    "plan: step %zu (kernel '%s'): block has %llu "
			    "threads, the device allows at most %u",
			    s, st->kernel, (unsigned long long)threads,
			    lim->max_threads_per_block);
		if (sig->max_threads > 0 &&
		    threads > (uint64_t)sig->max_threads)
			return kc_seterr(KC_EINVAL,
			    "plan: step %zu (kernel '%s'): block has %llu "
			    "threads but the compiled kernel allows at most "
			    "%d (registers or __launch_bounds__)",
			    s, st->kernel, (unsigned long long)threads,
			    sig->max_threads);
		shared_total = st->shared_bytes + (uint32_t)sig->shared_static;
		if (st->shared_bytes > lim->max_shared_optin ||
		    shared_total > lim->max_shared_optin)
			return kc_seterr(KC_EINVAL,
			    "plan: step %zu (kernel '%s'): %u bytes of dynamic "
			    "shared memory plus %d static exceed the "
			    "device's %u bytes per block",
			    s, st->kernel, st->shared_bytes, sig->shared_static,
			    lim->max_shared_optin);
	}
	return 0;
}
