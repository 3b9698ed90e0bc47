/*
 * spec_check.c - the server's check of a submitted TaskSpec. See
 * spec_check.h; the rules are the bundle loader's (common/bundle.c,
 * docs/bundle.md), applied to the decoded message instead of JSON.
 */
#include "spec_check.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bundle.h"
#include "kc_err.h"

#define SPEC_NAME_MAX 63 /* a tensor name: a C identifier */
#define SPEC_TASK_NAME_MAX 128

/* A C identifier of 1 to SPEC_NAME_MAX characters: tensor names become
 * kernel argument names and file names. */
static bool
spec_is_ident(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (n == 0 || n > SPEC_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		bool alpha = c == '_' || (c >= 'a' && c <= 'z') ||
		    (c >= 'A' && c <= 'Z');
		if (!alpha && !(i > 0 && c >= '0' && c <= '9'))
			return false;
	}
	return true;
}

/* Task names appear in replay keys and file names. */
static bool
spec_is_task_name(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (n == 0 || n > SPEC_TASK_NAME_MAX || s[0] == '.')
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!(c == '_' || c == '-' || c == '.' ||
		        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		        (c >= '0' && c <= '9')))
			return false;
	}
	return true;
}

static bool
spec_is_hex64(const char *s)
{
	if (s == NULL || strlen(s) != 64)
		return false;
	for (size_t i = 0; i < 64; i++)
		if (!((s[i] >= '0' && s[i] <= '9') ||
		        (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

/* A finite, non-negative figure (tolerances, times, factors). */
static int
spec_check_num(const char *what, double v)
{
	if (!isfinite(v) || v < 0)
		return kc_seterr(KC_EINVAL,
		    "spec: %s is %g; it must be a finite number >= 0", what, v);
	return 0;
}

bool
kc_utf8_valid(const char *s, size_t n, size_t *bad)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0;

	while (i < n) {
		unsigned c = u[i];
		size_t k;
		uint32_t cp, min;

		if (c < 0x80) {
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf) {
			k = 1;
			cp = c & 0x1f;
			min = 0x80;
		} else if (c >= 0xe0 && c <= 0xef) {
			k = 2;
			cp = c & 0x0f;
			min = 0x800;
		} else if (c >= 0xf0 && c <= 0xf4) {
			k = 3;
			cp = c & 0x07;
			min = 0x10000;
		} else {
			goto fail;
		}
		if (k > n - i - 1)
			goto fail;
		for (size_t j = 1; j <= k; j++) {
			if ((u[i + j] & 0xc0) != 0x80)
				goto fail;
			cp = cp << 6 | (u[i + j] & 0x3f);
		}
		/* Overlong, a UTF-16 surrogate, or past Unicode. */
		if (cp < min || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
			goto fail;
		i += k + 1;
	}
	return true;
fail:
	if (bad != NULL)
		*bad = i;
	return false;
}

/* s as an error message may quote it (in at most 80 bytes): not valid
 * UTF-8, or cut inside a character, would make the answer's JSON invalid
 * in turn. */
static const char *
spec_shown(const char *s)
{
	size_t n = s != NULL ? strlen(s) : 0;

	if (n <= 80 && kc_utf8_valid(s, n, NULL))
		return n ? s : "";
	return n > 80 ? "(a name over 80 bytes)" : "(a name not valid UTF-8)";
}

/* Text shown to agents and in JSON answers: bounded and UTF-8. */
static int
spec_check_text(const char *what, const char *s)
{
	size_t n = s != NULL ? strlen(s) : 0, bad;

	if (n > KC_SPEC_MAX_TEXT)
		return kc_seterr(KC_EINVAL,
		    "spec: %s is %zu bytes, over the limit of %u; shorten it",
		    what, n, KC_SPEC_MAX_TEXT);
	if (!kc_utf8_valid(s, n, &bad))
		return kc_seterr(KC_EINVAL,
		    "spec: %s is not valid UTF-8 (at byte %zu); send text as "
		    "UTF-8",
		    what, bad);
	return 0;
}

/* A short label (a torch argument name, a candidate's origin). */
static int
spec_check_label(const char *what, const char *s)
{
	size_t n = s != NULL ? strlen(s) : 0;

	if (n > KC_SPEC_MAX_LABEL)
		return kc_seterr(KC_EINVAL,
		    "spec: %s is %zu bytes, over the limit of %d; shorten it",
		    what, n, KC_SPEC_MAX_LABEL);
	return spec_check_text(what, s);
}

/* A count of at most max (0 is the default). */
static int
spec_check_count(const char *what, uint64_t v, uint64_t max)
{
	if (v > max)
		return kc_seterr(KC_EINVAL,
		    "spec: %s is %llu; at most %llu (0: the default)", what,
		    (unsigned long long)v, (unsigned long long)max);
	return 0;
}

/* A figure from 0 to max: finite, not negative. */
static int
spec_check_range(const char *what, double v, double max)
{
	if (!isfinite(v) || v < 0 || v > max)
		return kc_seterr(KC_EINVAL,
		    "spec: %s is %g; it must be a number from 0 to %g", what, v,
		    max);
	return 0;
}

int
kc_spec_tensor_bytes(
    Kclaw__DType dtype, const int64_t *shape, size_t ndim, uint64_t *bytes)
{
	uint64_t elems = 1;
	size_t size = kc_dtype_size(dtype);

	if (size == 0)
		return kc_seterr(KC_EINVAL,
		    "unknown dtype %d; use one of f32, f16, bf16, f64, i32, "
		    "i64, i8, u8, bool",
		    (int)dtype);
	for (size_t i = 0; i < ndim; i++) {
		if (shape[i] < 1)
			return kc_seterr(KC_EINVAL,
			    "shape[%zu] is %lld; dimensions must be positive "
			    "integers",
			    i, (long long)shape[i]);
		/* elems * shape[i] <= KC_SPEC_MAX_ELEMS, without the
		 * product overflowing first. */
		if ((uint64_t)shape[i] > KC_SPEC_MAX_ELEMS / elems)
			return kc_seterr(KC_EINVAL,
			    "the shape holds more than 2^40 elements (at "
			    "shape[%zu] = %lld); use a smaller problem",
			    i, (long long)shape[i]);
		elems *= (uint64_t)shape[i];
	}
	*bytes = elems * size; /* <= 2^40 * 8: no overflow */
	return 0;
}

static const Kclaw__TensorSpec *
spec_find(const Kclaw__TaskSpec *spec, const char *name, size_t before)
{
	for (size_t i = 0; i < before; i++)
		if (strcmp(spec->tensors[i]->name, name) == 0)
			return spec->tensors[i];
	return NULL;
}

static int
spec_check_tensor(const Kclaw__TaskSpec *spec, size_t i, uint64_t *total)
{
	const Kclaw__TensorSpec *t = spec->tensors[i];
	const Kclaw__InitSpec *in;
	char what[96], field[128];
	uint64_t bytes;
	bool scalar;
	int rv;

	if (t == NULL || !spec_is_ident(t->name))
		return kc_seterr(KC_EINVAL,
		    "spec: tensors[%zu]: name '%.80s' is not a C identifier; "
		    "use letters, digits and '_', not starting with a digit, "
		    "at most %d characters",
		    i, t ? spec_shown(t->name) : "", SPEC_NAME_MAX);
	snprintf(what, sizeof(what), "tensors[%zu] '%s'", i, t->name);
	if (spec_find(spec, t->name, i) != NULL)
		return kc_seterr(KC_EINVAL,
		    "spec: %s: tensor name '%s' is used twice; names must be "
		    "unique",
		    what, t->name);
	if (t->kind < KCLAW__TENSOR_KIND__INPUT ||
	    t->kind > KCLAW__TENSOR_KIND__SCALAR)
		return kc_seterr(KC_EINVAL,
		    "spec: %s: unknown kind %d; use input, parameter, output "
		    "or scalar",
		    what, (int)t->kind);
	scalar = t->kind == KCLAW__TENSOR_KIND__SCALAR;
	if (t->n_shape > KC_SPEC_MAX_DIMS || (t->n_shape == 0 && !scalar))
		return kc_seterr(KC_EINVAL,
		    "spec: %s: shape has %zu dimensions; give 1 to %d "
		    "positive integers, such as [1024, 1024]",
		    what, t->n_shape, KC_SPEC_MAX_DIMS);
	if ((rv = kc_spec_tensor_bytes(
	         t->dtype, t->shape, t->n_shape, &bytes)) != 0)
		return kc_seterr(rv, "spec: %s: %s", what, kc_lasterr());
	if (bytes > KC_SPEC_MAX_TOTAL_BYTES - *total)
		return kc_seterr(KC_EINVAL,
		    "spec: %s: the tensors need more than %llu GiB in all, "
		    "more than a GPU holds; use smaller shapes",
		    what, (unsigned long long)(KC_SPEC_MAX_TOTAL_BYTES >> 30));
	*total += bytes;
	snprintf(field, sizeof(field), "%s.source_name", what);
	if ((rv = spec_check_label(field, t->source_name)) != 0)
		return rv;
	if (!isfinite(t->scalar_value))
		return kc_seterr(KC_EINVAL,
		    "spec: %s: scalar_value is %g; it must be finite", what,
		    t->scalar_value);
	if ((in = t->init) != NULL) {
		if (t->kind == KCLAW__TENSOR_KIND__OUTPUT)
			return kc_seterr(KC_EINVAL,
			    "spec: %s: an output has no init (it is poisoned "
			    "before every run); remove 'init'",
			    what);
		if (in->dist < KCLAW__DISTRIBUTION__DIST_UNSPECIFIED ||
		    in->dist > KCLAW__DISTRIBUTION__FROM_NPY)
			return kc_seterr(KC_EINVAL,
			    "spec: %s: unknown init distribution %d", what,
			    (int)in->dist);
		if (!isfinite(in->mean) || !isfinite(in->scale) ||
		    !isfinite(in->low) || !isfinite(in->high) ||
		    !isfinite(in->dof) || in->scale < 0 || in->dof < 0 ||
		    in->low > in->high)
			return kc_seterr(KC_EINVAL,
			    "spec: %s: init needs finite figures, scale and "
			    "dof >= 0 and low <= high",
			    what);
	}
	return 0;
}

static int
spec_check_data(const Kclaw__TaskSpec *spec, size_t set, const char *list,
    size_t j, const Kclaw__TensorData *d)
{
	if (d == NULL || !spec_is_ident(d->name) ||
	    spec_find(spec, d->name, spec->n_tensors) == NULL)
		return kc_seterr(KC_EINVAL,
		    "spec: reference.sets[%zu].%s[%zu]: '%.80s' is not one of "
		    "the task's tensors",
		    set, list, j, d ? spec_shown(d->name) : "");
	if (d->path != NULL &&
	    (strlen(d->path) > 4096 ||
	        !kc_utf8_valid(d->path, strlen(d->path), NULL)))
		return kc_seterr(KC_EINVAL,
		    "spec: reference.sets[%zu].%s[%zu] '%s': path is not valid "
		    "UTF-8 or longer than 4096 bytes",
		    set, list, j, d->name);
	if (d->blob != NULL && *d->blob && !spec_is_hex64(d->blob))
		return kc_seterr(KC_EINVAL,
		    "spec: reference.sets[%zu].%s[%zu] '%s': blob must be a "
		    "SHA-256 in lower-case hex",
		    set, list, j, d->name);
	return 0;
}

static int
spec_check_reference(const Kclaw__TaskSpec *spec)
{
	const Kclaw__Reference *r = spec->reference;
	int rv;

	if (r == NULL)
		return 0;
	if (r->kind < KCLAW__REFERENCE__KIND__KIND_UNSPECIFIED ||
	    r->kind > KCLAW__REFERENCE__KIND__TORCH)
		return kc_seterr(KC_EINVAL,
		    "spec: reference.kind %d is unknown; use cuda, tensors or "
		    "torch",
		    (int)r->kind);
	if ((rv = spec_check_num("reference.baseline_ms", r->baseline_ms)) !=
	        0 ||
	    (rv = spec_check_num(
	         "reference.torch_compile_ms", r->torch_compile_ms)) != 0 ||
	    (rv = spec_check_num("reference.flops", r->flops)) != 0 ||
	    (rv = spec_check_text("reference.torch_source", r->torch_source)) !=
	        0 ||
	    (rv = spec_check_label(
	         "reference.torch_compile_mode", r->torch_compile_mode)) != 0)
		return rv;
	if (r->cuda != NULL &&
	    ((rv = spec_check_text("reference.cuda.source", r->cuda->source)) !=
	            0 ||
	        (rv = spec_check_text(
	             "reference.cuda.plan_json", r->cuda->plan_json)) != 0 ||
	        (rv = spec_check_label("reference.cuda.id", r->cuda->id)) !=
	            0 ||
	        (rv = spec_check_label(
	             "reference.cuda.parent_id", r->cuda->parent_id)) != 0 ||
	        (rv = spec_check_label(
	             "reference.cuda.origin", r->cuda->origin)) != 0 ||
	        (rv = spec_check_label(
	             "reference.cuda.method", r->cuda->method)) != 0))
		return rv;
	if (r->kind == KCLAW__REFERENCE__KIND__CUDA &&
	    (r->cuda == NULL || r->cuda->source == NULL || !*r->cuda->source))
		return kc_seterr(KC_EINVAL,
		    "spec: a cuda reference needs reference.cuda with its "
		    "source");
	if (r->n_sets > KC_SPEC_MAX_SETS ||
	    (r->kind == KCLAW__REFERENCE__KIND__TENSORS && r->n_sets == 0))
		return kc_seterr(KC_EINVAL,
		    "spec: reference.sets holds %zu input sets; give 1 to %d",
		    r->n_sets, KC_SPEC_MAX_SETS);
	for (size_t s = 0; s < r->n_sets; s++) {
		const Kclaw__TensorSet *ts = r->sets[s];
		if (ts == NULL || ts->n_inputs > spec->n_tensors ||
		    ts->n_expected > spec->n_tensors)
			return kc_seterr(KC_EINVAL,
			    "spec: reference.sets[%zu] names more tensors "
			    "than the task has",
			    s);
		for (size_t j = 0; j < ts->n_inputs; j++)
			if ((rv = spec_check_data(
			         spec, s, "inputs", j, ts->inputs[j])) != 0)
				return rv;
		for (size_t j = 0; j < ts->n_expected; j++)
			if ((rv = spec_check_data(
			         spec, s, "expected", j, ts->expected[j])) != 0)
				return rv;
	}
	return 0;
}

/* The state machine's parameters: each bounded as in kclaw.json. */
static int
spec_check_params(const Kclaw__FsmParams *p)
{
	int rv;

	if ((rv = spec_check_count(
	         "params.seeds", p->seeds, KC_SPEC_MAX_SEEDS)) != 0 ||
	    (rv = spec_check_range("params.rt", p->rt, KC_SPEC_MAX_RT)) != 0 ||
	    (rv = spec_check_range("params.at", p->at, KC_SPEC_MAX_AT)) != 0 ||
	    (rv = spec_check_count("params.max_repairs", p->max_repairs,
	         KC_SPEC_MAX_REPAIRS)) != 0 ||
	    (rv = spec_check_count("params.job_retries", p->job_retries,
	         KC_SPEC_MAX_JOB_RETRIES)) != 0 ||
	    (rv = spec_check_count("params.agent_timeout_s", p->agent_timeout_s,
	         KC_SPEC_MAX_TIMEOUT_S)) != 0 ||
	    (rv = spec_check_count("params.eval_timeout_s", p->eval_timeout_s,
	         KC_SPEC_MAX_TIMEOUT_S)) != 0 ||
	    (rv = spec_check_count("params.max_duplicates", p->max_duplicates,
	         KC_SPEC_MAX_DUPLICATES)) != 0)
		return rv;
	if (!(p->explore_share <= 1) || !(p->sol_stop <= 1) ||
	    !isfinite(p->explore_share) || !isfinite(p->sol_stop))
		return kc_seterr(KC_EINVAL,
		    "spec: params.explore_share is %g and params.sol_stop %g; "
		    "each must be at most 1 (0: the default; negative: off)",
		    p->explore_share, p->sol_stop);
	return 0;
}

int
kc_spec_check(const Kclaw__TaskSpec *spec)
{
	uint64_t total = 0;
	size_t outputs = 0;
	bool torch;
	int rv;

	if (spec == NULL)
		return kc_seterr(KC_EINVAL, "spec: missing");
	if (!spec_is_task_name(spec->name))
		return kc_seterr(KC_EINVAL,
		    "spec: name '%.80s' may hold only letters, digits, '_', "
		    "'-' and '.' (1 to %d, not starting with '.'); rename the "
		    "task",
		    spec_shown(spec->name), SPEC_TASK_NAME_MAX);
	if ((rv = spec_check_text("description", spec->description)) != 0 ||
	    (rv = spec_check_text("context", spec->context)) != 0)
		return rv;
	torch = spec->reference != NULL &&
	    spec->reference->kind == KCLAW__REFERENCE__KIND__TORCH;
	/* A torch problem may leave its tensors to the reference process. */
	if (spec->n_tensors > KC_SPEC_MAX_TENSORS ||
	    (spec->n_tensors == 0 && !torch))
		return kc_seterr(KC_EINVAL,
		    "spec: %zu tensors; a task has 1 to %d", spec->n_tensors,
		    KC_SPEC_MAX_TENSORS);
	for (size_t i = 0; i < spec->n_tensors; i++) {
		if ((rv = spec_check_tensor(spec, i, &total)) != 0)
			return rv;
		outputs += spec->tensors[i]->kind == KCLAW__TENSOR_KIND__OUTPUT;
	}
	if (outputs == 0 && !torch)
		return kc_seterr(KC_EINVAL,
		    "spec: no tensor has kind output; define the tensor the "
		    "task computes so it can be compared to the reference");
	if (spec->tolerance != NULL &&
	    ((rv = spec_check_num("tolerance.atol", spec->tolerance->atol)) !=
	            0 ||
	        (rv = spec_check_num(
	             "tolerance.rtol", spec->tolerance->rtol)) != 0 ||
	        (rv = spec_check_num("tolerance.max_rel_norm",
	             spec->tolerance->max_rel_norm)) != 0))
		return rv;
	if (spec->budget != NULL &&
	    ((rv = spec_check_range("budget.target_speedup",
	          spec->budget->target_speedup, KC_SPEC_MAX_SPEEDUP)) != 0 ||
	        (rv = spec_check_count("budget.rounds", spec->budget->rounds,
	             KC_SPEC_MAX_ROUNDS)) != 0 ||
	        (rv = spec_check_count("budget.tokens", spec->budget->tokens,
	             (uint64_t)KC_SPEC_MAX_TOKENS)) != 0 ||
	        (rv = spec_check_count("budget.wall_seconds",
	             spec->budget->wall_seconds,
	             (uint64_t)KC_SPEC_MAX_WALL_S)) != 0))
		return rv;
	if (spec->params != NULL && (rv = spec_check_params(spec->params)) != 0)
		return rv;
	if (spec->trials > KC_SPEC_MAX_TRIALS)
		return kc_seterr(KC_EINVAL, "spec: trials is %u; at most %u",
		    spec->trials, KC_SPEC_MAX_TRIALS);
	if (spec->precision != NULL && *spec->precision &&
	    strcmp(spec->precision, "strict") != 0 &&
	    strcmp(spec->precision, "warn") != 0 &&
	    strcmp(spec->precision, "loose") != 0)
		return kc_seterr(KC_EINVAL,
		    "spec: precision '%.40s' is unknown; use \"strict\", "
		    "\"warn\" or \"loose\"",
		    spec_shown(spec->precision));
	return spec_check_reference(spec);
}

double
kc_tolerance_admits(const Kclaw__Tolerance *tol)
{
	double lim = 0;

	if (tol != NULL) {
		lim = tol->rtol;
		if (tol->max_rel_norm > lim)
			lim = tol->max_rel_norm;
	}
	return lim > 0 ? lim : 1e-5;
}

void
kc_result_add_variation(Kclaw__EvalResult *r, const char *name, int measured,
    double variation, const Kclaw__Tolerance *tol)
{
	Kclaw__OutputVariation **g, *v;

	g = realloc(
	    r->output_variations, (r->n_output_variations + 1) * sizeof(*g));
	if (g == NULL)
		return;
	r->output_variations = g;
	if ((v = malloc(sizeof(*v))) == NULL)
		return;
	kclaw__output_variation__init(v);
	if ((v->name = strdup(name ? name : "")) == NULL) {
		free(v);
		return;
	}
	v->measured = measured != 0;
	v->variation = measured ? variation : 0;
	v->admits = kc_tolerance_admits(tol);
	v->degenerate = measured && variation < v->admits;
	r->output_variations[r->n_output_variations++] = v;
}
