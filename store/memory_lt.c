/*
 * memory_lt.c - long-term memory at run time: evidence, retrieval with a
 * trace, learned statistics. See memory_lt.h and docs/memory.md.
 */
#include "memory_lt.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kc_err.h"
#include "kc_util.h"

/* Records of STORE_CF_LEARNED: 'a' signature '\0' method '\0' attempt. */
#define MEMLT_ATTEMPT_PREFIX 'a'
#define MEMLT_MAX_SIG 191
#define MEMLT_MAX_METHOD 63
#define MEMLT_MAX_ATTEMPT 127

const char *const memlt_bucket_names[MEMLT_NBUCKETS] = {
    "<0.9x",
    "0.9-1.0x",
    "1.0-1.03x",
    "1.03-1.1x",
    "1.1-1.25x",
    "1.25-1.5x",
    "1.5-2x",
    ">=2x",
};

static const double memlt_bucket_upper[MEMLT_NBUCKETS - 1] = {
    0.9, 1.0, 1.0 + MEMLT_SUCCESS_GAIN, 1.1, 1.25, 1.5, 2.0};

static const char *const memlt_source_names[KB_SRC_COUNT] = {
    "metric", "runtime", "feature"};

/* ------------------------------------------------------------ evidence */

typedef struct {
	kb_source src;
	char *name;
	double v;
} memlt_raw;

struct memlt_evidence {
	memlt_raw *v;
	size_t n, cap;
};

int
memlt_evidence_new(memlt_evidence **out)
{
	return (*out = calloc(1, sizeof(**out))) != NULL ? 0 : KC_ENOMEM;
}

void
memlt_evidence_free(memlt_evidence *ev)
{
	if (ev == NULL)
		return;
	for (size_t i = 0; i < ev->n; i++)
		free(ev->v[i].name);
	free(ev->v);
	free(ev);
}

int
memlt_evidence_set(
    memlt_evidence *ev, kb_source src, const char *name, double value)
{
	if (name == NULL || *name == '\0' || strlen(name) > 200 ||
	    src >= KB_SRC_COUNT)
		return kc_seterr(KC_EINVAL,
		    "evidence: a value needs a name of 1 to 200 characters");
	if (!isfinite(value))
		return kc_seterr(
		    KC_EINVAL, "evidence: '%s' is not a finite number", name);
	for (size_t i = 0; i < ev->n; i++)
		if (ev->v[i].src == src &&
		    strcasecmp(ev->v[i].name, name) == 0) {
			ev->v[i].v = value;
			return 0;
		}
	if (ev->n == ev->cap) {
		size_t cap = ev->cap ? ev->cap * 2 : 32;
		memlt_raw *nv = realloc(ev->v, cap * sizeof(*nv));
		if (nv == NULL)
			return KC_ENOMEM;
		ev->v = nv;
		ev->cap = cap;
	}
	if ((ev->v[ev->n].name = strdup(name)) == NULL)
		return KC_ENOMEM;
	ev->v[ev->n].src = src;
	ev->v[ev->n].v = value;
	ev->n++;
	return 0;
}

/* "sm_90a" or "compute_86" -> 90 or 86; 0 when it does not say. */
static int
memlt_arch_number(const char *arch)
{
	const char *p = arch;

	if (arch == NULL)
		return 0;
	while (*p && !isdigit((unsigned char)*p))
		p++;
	return *p ? atoi(p) : 0;
}

/* A runtime value; measurements that are not finite are left unknown. */
static int
memlt_set_runtime(memlt_evidence *ev, const char *name, double v)
{
	return isfinite(v) ? memlt_evidence_set(ev, KB_SRC_RUNTIME, name, v)
	                   : 0;
}

int
memlt_evidence_add_eval(memlt_evidence *ev, const Kclaw__EvalResult *r)
{
	double dur = 0, regs = -1, spill = -1, local = -1, shared = -1;
	double occ = -1, block = -1, grid = -1, longest = -1;
	int rv = 0, arch;

	if (r == NULL)
		return 0;
	for (size_t i = 0; i < r->n_metrics; i++) {
		const Kclaw__Metric *m = r->metrics[i];
		if (m == NULL || m->name == NULL || *m->name == '\0' ||
		    !isfinite(m->value))
			continue;
		if ((rv = memlt_evidence_set(
		         ev, KB_SRC_METRIC, m->name, m->value)) != 0)
			return rv;
	}
	for (size_t i = 0; i < r->n_activities; i++) {
		const Kclaw__KernelActivity *a = r->activities[i];
		double g = 1, b = 1;
		if (a == NULL)
			continue;
		dur += a->duration_us;
		for (size_t j = 0; j < a->n_grid; j++)
			g *= a->grid[j];
		for (size_t j = 0; j < a->n_block; j++)
			b *= a->block[j];
		/* The longest launch is the one worth describing. */
		if (a->duration_us > longest) {
			longest = a->duration_us;
			grid = a->n_grid ? g : -1;
			block = a->n_block ? b : -1;
		}
		shared = fmax(shared,
		    (double)a->shared_static_bytes + a->shared_dynamic_bytes);
	}
	for (size_t i = 0; i < r->n_kernels; i++) {
		const Kclaw__KernelResources *k = r->kernels[i];
		if (k == NULL)
			continue;
		regs = fmax(regs, k->registers);
		spill = fmax(spill, k->spill_bytes);
		local = fmax(local, k->local_bytes);
		shared = fmax(shared, k->shared_static_bytes);
		if (k->occupancy > 0) {
			double o = k->occupancy <= 1.0 ? k->occupancy * 100.0
			                               : k->occupancy;
			occ = occ < 0 ? o : fmin(occ, o);
		}
		if (block < 0 && k->block_threads > 0)
			block = k->block_threads;
	}
	if (r->n_activities > 0) {
		rv = rv ? rv : memlt_set_runtime(ev, "duration_us", dur);
		rv = rv ? rv
		        : memlt_set_runtime(
		              ev, "num_launches", (double)r->n_activities);
	}
	if (r->timing != NULL && r->timing->median_ms > 0)
		rv = rv
		    ? rv
		    : memlt_set_runtime(ev, "median_ms", r->timing->median_ms);
	if (regs >= 0)
		rv = rv ? rv : memlt_set_runtime(ev, "registers", regs);
	if (spill >= 0)
		rv = rv ? rv : memlt_set_runtime(ev, "spill_bytes", spill);
	if (local >= 0)
		rv = rv ? rv : memlt_set_runtime(ev, "local_bytes", local);
	if (shared >= 0)
		rv = rv ? rv : memlt_set_runtime(ev, "shared_bytes", shared);
	if (occ >= 0)
		rv = rv
		    ? rv
		    : memlt_set_runtime(ev, "theoretical_occupancy_pct", occ);
	if (block > 0)
		rv = rv ? rv : memlt_set_runtime(ev, "block_threads", block);
	if (grid > 0)
		rv = rv ? rv : memlt_set_runtime(ev, "grid_blocks", grid);
	if ((arch = memlt_arch_number(r->arch)) > 0)
		rv = rv ? rv : memlt_set_runtime(ev, "arch_sm", (double)arch);
	if (r->speedup > 0)
		rv = rv ? rv : memlt_set_runtime(ev, "speedup", r->speedup);
	return rv;
}

int
memlt_evidence_add_task(memlt_evidence *ev, const Kclaw__TaskSpec *task)
{
	bool wide = false, narrow = false;
	int rv = 0;

	if (task == NULL || task->tolerance == NULL)
		return 0;
	if (task->tolerance->rtol > 0)
		rv = memlt_set_runtime(ev, "rtol", task->tolerance->rtol);
	if (rv == 0 && task->tolerance->atol > 0)
		rv = memlt_set_runtime(ev, "atol", task->tolerance->atol);
	/* Whether its floating-point data is all 32 or 64 bits wide: tensor
	 * cores would then compute in TF32 (a veto for a tight rtol). */
	for (size_t i = 0; rv == 0 && i < task->n_tensors; i++) {
		Kclaw__DType d = task->tensors[i]->dtype;
		if (d == KCLAW__DTYPE__F16 || d == KCLAW__DTYPE__BF16)
			narrow = true;
		else if (d == KCLAW__DTYPE__F32 || d == KCLAW__DTYPE__F64)
			wide = true;
	}
	if (rv == 0 && (wide || narrow))
		rv = memlt_set_runtime(ev, "wide_floats", narrow ? 0 : 1);
	return rv;
}

int
memlt_evidence_add_features(
    memlt_evidence *ev, Kclaw__Feature *const *f, size_t n)
{
	int rv;

	for (size_t i = 0; i < n; i++) {
		if (f[i] == NULL || f[i]->name == NULL || *f[i]->name == '\0' ||
		    !isfinite(f[i]->value))
			continue;
		if ((rv = memlt_evidence_set(
		         ev, KB_SRC_FEATURE, f[i]->name, f[i]->value)) != 0)
			return rv;
	}
	return 0;
}

/* One JSON value as a number: true/false are 1/0, null is skipped. */
static int
memlt_json_value(memlt_evidence *ev, kb_source src, const char *where,
    const char *name, const cJSON *v)
{
	if (cJSON_IsNull(v))
		return 0;
	if (cJSON_IsBool(v))
		return memlt_evidence_set(
		    ev, src, name, cJSON_IsTrue(v) ? 1 : 0);
	if (cJSON_IsNumber(v))
		return memlt_evidence_set(ev, src, name, v->valuedouble);
	return kc_seterr(KC_EINVAL,
	    "evidence: %s '%s' must be a number, true, false or null", where,
	    name);
}

/* A section: {"name": value, ...} or [{"name": ..., "value": ...}, ...]. */
static int
memlt_json_section(
    memlt_evidence *ev, kb_source src, const char *where, const cJSON *sec)
{
	const cJSON *c;
	int rv;

	if (cJSON_IsObject(sec)) {
		cJSON_ArrayForEach(c, sec)
		{
			if ((rv = memlt_json_value(
			         ev, src, where, c->string, c)) != 0)
				return rv;
		}
		return 0;
	}
	if (!cJSON_IsArray(sec))
		return kc_seterr(KC_EINVAL,
		    "evidence: '%s' must be an object of name: value or an "
		    "array of {\"name\", \"value\"}",
		    where);
	cJSON_ArrayForEach(c, sec)
	{
		const cJSON *n = cJSON_GetObjectItemCaseSensitive(c, "name");
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, "value");
		if (!cJSON_IsString(n) || v == NULL)
			return kc_seterr(KC_EINVAL,
			    "evidence: each entry of '%s' needs \"name\" and "
			    "\"value\"",
			    where);
		if ((rv = memlt_json_value(
		         ev, src, where, n->valuestring, v)) != 0)
			return rv;
	}
	return 0;
}

int
memlt_evidence_add_json(memlt_evidence *ev, const char *json)
{
	static const char *const sections[KB_SRC_COUNT] = {
	    "metrics", "runtime", "features"};
	cJSON *doc;
	const cJSON *c;
	bool sectioned = false;
	int rv = 0;

	if (json == NULL || (doc = cJSON_Parse(json)) == NULL)
		return kc_seterr(KC_EINVAL,
		    "evidence: not valid JSON; give {\"metrics\": {...}, "
		    "\"runtime\": {...}, \"features\": {...}} or one object "
		    "of name: number");
	if (!cJSON_IsObject(doc)) {
		cJSON_Delete(doc);
		return kc_seterr(KC_EINVAL, "evidence: expected a JSON object");
	}
	for (int s = 0; s < KB_SRC_COUNT; s++)
		if (cJSON_GetObjectItemCaseSensitive(doc, sections[s]) != NULL)
			sectioned = true;
	cJSON_ArrayForEach(c, doc)
	{
		int s;
		if (!sectioned) {
			/* A flat object: the field lookup tries every
			 * source, so the source given here only labels it. */
			if ((rv = memlt_json_value(ev, KB_SRC_METRIC, "value",
			         c->string, c)) != 0)
				break;
			continue;
		}
		for (s = 0; s < KB_SRC_COUNT; s++)
			if (strcmp(c->string, sections[s]) == 0)
				break;
		if (s == KB_SRC_COUNT) {
			rv = kc_seterr(KC_EINVAL,
			    "evidence: unknown section '%s' (use metrics, "
			    "runtime, features)",
			    c->string);
			break;
		}
		if ((rv = memlt_json_section(
		         ev, (kb_source)s, sections[s], c)) != 0)
			break;
	}
	cJSON_Delete(doc);
	return rv;
}

/* ---------------------------------------------------------- evaluation */

/* Every name of the policy with its value for this evidence. */
typedef struct {
	const char *name;
	expr_value v;
	char from[96]; /* fields: where the value came from */
} memlt_val;

typedef struct {
	const kb *k;
	memlt_val *vals; /* fields, derived, predicates, classes */
	size_t n;
} memlt_ctx;

static int
memlt_lookup(void *arg, const char *name, expr_value *val)
{
	memlt_ctx *c = arg;

	for (size_t i = 0; i < c->n; i++)
		if (strcmp(c->vals[i].name, name) == 0) {
			*val = c->vals[i].v;
			return 0;
		}
	return KC_ENOENT;
}

static const memlt_val *
memlt_find(const memlt_ctx *c, const char *name)
{
	for (size_t i = 0; i < c->n; i++)
		if (strcmp(c->vals[i].name, name) == 0)
			return &c->vals[i];
	return NULL;
}

/* The field's value: its first alias present in its own source, else in
 * any source (the sandbox and the Feature Extractor may label a number
 * differently than the policy expects). */
static void
memlt_normalise(const kb_field *f, const memlt_evidence *ev, memlt_val *out)
{
	out->name = f->name;
	out->v = (expr_value){false, 0};
	snprintf(out->from, sizeof(out->from), "not in the evidence");
	for (int pass = 0; pass < 2; pass++)
		for (size_t a = 0; a < f->naliases; a++)
			for (size_t i = 0; i < ev->n; i++) {
				const memlt_raw *r = &ev->v[i];
				if ((pass == 0) != (r->src == f->source) ||
				    strcasecmp(r->name, f->aliases[a].name) !=
				        0)
					continue;
				double v = r->v * f->aliases[a].scale;
				if (!isfinite(v))
					continue;
				out->v = (expr_value){true, v};
				snprintf(out->from, sizeof(out->from),
				    "%s %s%s", memlt_source_names[r->src],
				    r->name,
				    f->aliases[a].scale != 1.0 ? " (scaled)"
				                               : "");
				return;
			}
}

/* One allowed method while ranking. */
typedef struct {
	const char *method;
	const kb_rule *rule;
	const kb_class *cls;
	double prior;
	bool vetoed;
	const kb_veto *veto;
	memlt_stat stat;
	double score, mean, bonus;
} memlt_cand;

typedef struct {
	memlt_cand *v;
	size_t n, cap;
} memlt_cands;

static memlt_cand *
memlt_cand_get(memlt_cands *cs, const char *method)
{
	for (size_t i = 0; i < cs->n; i++)
		if (strcmp(cs->v[i].method, method) == 0)
			return &cs->v[i];
	if (cs->n == cs->cap) {
		size_t cap = cs->cap ? cs->cap * 2 : 32;
		memlt_cand *nv = realloc(cs->v, cap * sizeof(*nv));
		if (nv == NULL)
			return NULL;
		cs->v = nv;
		cs->cap = cap;
	}
	memset(&cs->v[cs->n], 0, sizeof(cs->v[0]));
	cs->v[cs->n].method = method;
	cs->v[cs->n].prior = -1;
	return &cs->v[cs->n++];
}

static int
memlt_cmp_cand(const void *a, const void *b)
{
	const memlt_cand *x = a, *y = b;

	if (x->score != y->score)
		return x->score > y->score ? -1 : 1;
	if (x->prior != y->prior)
		return x->prior > y->prior ? -1 : 1;
	return strcmp(x->method, y->method);
}

/* ------------------------------------------------------- trace helpers */

typedef struct {
	const memlt_ctx *ctx;
	kc_str *s;
	char **seen;
	size_t nseen;
	bool first;
} memlt_idents_out;

static bool
memlt_seen(memlt_idents_out *o, const char *name)
{
	for (size_t i = 0; i < o->nseen; i++)
		if (strcmp(o->seen[i], name) == 0)
			return true;
	if (o->nseen < 32)
		o->seen[o->nseen++] = (char *)name;
	return false;
}

/* Predicates and classes are booleans; fields and derived are numbers. */
static bool
memlt_is_bool(const kb *k, const char *name)
{
	for (size_t i = 0; i < k->npredicates; i++)
		if (strcmp(k->predicates[i].name, name) == 0)
			return true;
	return kb_class_find(k, name) != NULL;
}

/* "name=value" for each identifier an expression reads. */
static int
memlt_ident_str(void *arg, const char *name)
{
	memlt_idents_out *o = arg;
	const memlt_val *v = memlt_find(o->ctx, name);
	char buf[48];

	if (memlt_seen(o, name))
		return 0;
	expr_value_str(
	    v ? v->v : (expr_value){false, 0}, false, buf, sizeof(buf));
	if (v != NULL && memlt_is_bool(o->ctx->k, name))
		expr_value_str(v->v, true, buf, sizeof(buf));
	return kc_str_printf(
	           o->s, "%s%s=%s", o->first ? "" : ", ", name, buf) != 0
	    ? KC_ENOMEM
	    : (o->first = false, 0);
}

static int
memlt_expr_values(const memlt_ctx *ctx, const expr *e, kc_str *s)
{
	char *seen[32];
	memlt_idents_out o = {.ctx = ctx, .s = s, .seen = seen, .first = true};

	return expr_idents(e, memlt_ident_str, &o);
}

/* Appends a copy of text to a protobuf-c repeated string field. */
static int
memlt_push(char ***v, size_t *n, const char *text)
{
	char **nv = realloc(*v, (*n + 1) * sizeof(*nv));

	if (nv == NULL)
		return KC_ENOMEM;
	*v = nv;
	if ((nv[*n] = strdup(text)) == NULL)
		return KC_ENOMEM;
	(*n)++;
	return 0;
}

/* "name=value" items of an expression, one matched entry each. */
typedef struct {
	const memlt_ctx *ctx;
	Kclaw__Recommendation *rec;
	char *seen[32];
	size_t nseen;
} memlt_matched;

static int
memlt_matched_fn(void *arg, const char *name)
{
	memlt_matched *m = arg;
	kc_str s = {0};
	memlt_idents_out o = {.ctx = m->ctx,
	    .s = &s,
	    .seen = m->seen,
	    .nseen = m->nseen,
	    .first = true};
	int rv;

	if ((rv = memlt_ident_str(&o, name)) != 0) {
		kc_str_free(&s);
		return rv;
	}
	m->nseen = o.nseen;
	if (s.buf != NULL)
		rv = memlt_push(&m->rec->matched, &m->rec->n_matched, s.buf);
	kc_str_free(&s);
	return rv;
}

/* ------------------------------------------------------------ learning */

typedef struct {
	memlt_stat *v;
	size_t n, cap;
	const char *sig; /* filter, or NULL */
} memlt_stats_acc;

static memlt_stat *
memlt_stat_row(
    memlt_stat **v, size_t *n, size_t *cap, const char *sig, const char *method)
{
	for (size_t i = *n; i > 0; i--)
		if (strcmp((*v)[i - 1].method, method) == 0 &&
		    strcmp((*v)[i - 1].signature, sig) == 0)
			return &(*v)[i - 1];
	if (*n == *cap) {
		size_t nc = *cap ? *cap * 2 : 32;
		memlt_stat *nv = realloc(*v, nc * sizeof(*nv));
		if (nv == NULL)
			return NULL;
		*v = nv;
		*cap = nc;
	}
	memset(&(*v)[*n], 0, sizeof(**v));
	kc_strlcpy((*v)[*n].signature, sig, sizeof((*v)[*n].signature));
	kc_strlcpy((*v)[*n].method, method, sizeof((*v)[*n].method));
	(*v)[*n].gain_min = INFINITY;
	(*v)[*n].gain_max = -INFINITY;
	return &(*v)[(*n)++];
}

static void
memlt_stat_add(memlt_stat *st, bool correct, double speedup, uint64_t t)
{
	int b;

	st->attempts++;
	if (t > st->last_unix_ms)
		st->last_unix_ms = t;
	if (!correct)
		return;
	st->correct++;
	if (speedup >= 1.0 + MEMLT_SUCCESS_GAIN)
		st->successes++;
	/* gain_mean holds the running sum until memlt_stat_finish. */
	st->gain_mean += speedup - 1.0;
	st->gain_min = fmin(st->gain_min, speedup - 1.0);
	st->gain_max = fmax(st->gain_max, speedup - 1.0);
	st->speedup_best = fmax(st->speedup_best, speedup);
	for (b = 0; b < MEMLT_NBUCKETS - 1; b++)
		if (speedup < memlt_bucket_upper[b])
			break;
	st->buckets[b]++;
}

static void
memlt_stat_finish(memlt_stat *st)
{
	if (st->correct > 0) {
		st->gain_mean /= st->correct;
	} else {
		st->gain_mean = 0;
		st->gain_min = 0;
		st->gain_max = 0;
	}
}

/* Splits a learned key into its parts; false when it is not one. */
static bool
memlt_parse_key(const void *key, size_t klen, char *sig, char *method)
{
	const char *k = key, *end = k + klen, *a, *b;

	if (klen < 5 || k[0] != MEMLT_ATTEMPT_PREFIX)
		return false;
	a = memchr(k + 1, '\0', (size_t)(end - k - 1));
	if (a == NULL || a - (k + 1) > MEMLT_MAX_SIG)
		return false;
	b = memchr(a + 1, '\0', (size_t)(end - a - 1));
	if (b == NULL || b - (a + 1) > MEMLT_MAX_METHOD)
		return false;
	memcpy(sig, k + 1, (size_t)(a - (k + 1)));
	sig[a - (k + 1)] = '\0';
	memcpy(method, a + 1, (size_t)(b - (a + 1)));
	method[b - (a + 1)] = '\0';
	return true;
}

/* A learned record's value: version 1, correct (0/1), speedup (IEEE-754
 * double, big-endian bits), time in ms (big-endian u64). Fixed-size and
 * binary because retrieval reads every record of a signature. */
#define MEMLT_REC_LEN 18

static void
memlt_rec_encode(
    uint8_t v[MEMLT_REC_LEN], bool correct, double speedup, uint64_t t)
{
	uint64_t bits;

	memcpy(&bits, &speedup, sizeof(bits));
	v[0] = 1;
	v[1] = correct ? 1 : 0;
	store_key_u64(v + 2, bits);
	store_key_u64(v + 10, t);
}

static bool
memlt_rec_decode(
    const uint8_t *v, size_t len, bool *correct, double *speedup, uint64_t *t)
{
	uint64_t bits;

	if (len != MEMLT_REC_LEN || v[0] != 1)
		return false;
	*correct = v[1] != 0;
	bits = store_key_get_u64(v + 2);
	memcpy(speedup, &bits, sizeof(*speedup));
	*t = store_key_get_u64(v + 10);
	return isfinite(*speedup);
}

static int
memlt_stats_fn(
    void *arg, const void *key, size_t klen, const void *val, size_t vlen)
{
	memlt_stats_acc *acc = arg;
	char sig[MEMLT_MAX_SIG + 1], method[MEMLT_MAX_METHOD + 1];
	memlt_stat *st;
	bool correct;
	double speedup;
	uint64_t t;

	if (!memlt_parse_key(key, klen, sig, method))
		return 0;
	if (acc->sig != NULL && strcmp(acc->sig, sig) != 0)
		return 0;
	/* A damaged record counts as nothing learned. */
	if (!memlt_rec_decode(val, vlen, &correct, &speedup, &t))
		return 0;
	st = memlt_stat_row(&acc->v, &acc->n, &acc->cap, sig, method);
	if (st == NULL)
		return KC_ENOMEM;
	memlt_stat_add(st, correct, speedup, t);
	return 0;
}

static int
memlt_cmp_stat(const void *a, const void *b)
{
	const memlt_stat *x = a, *y = b;
	int c;

	/* The all-signature rows come last. */
	if ((x->signature[0] == '*') != (y->signature[0] == '*'))
		return x->signature[0] == '*' ? 1 : -1;
	if ((c = strcmp(x->signature, y->signature)) != 0)
		return c;
	return strcmp(x->method, y->method);
}

int
memlt_stats(store *s, const char *signature, bool with_global, memlt_stat **out,
    size_t *n)
{
	memlt_stats_acc acc = {.sig = signature};
	char prefix[MEMLT_MAX_SIG + 3];
	size_t plen = 1, nrows;
	int rv;

	*out = NULL;
	*n = 0;
	prefix[0] = MEMLT_ATTEMPT_PREFIX;
	if (signature != NULL) {
		if (strlen(signature) > MEMLT_MAX_SIG)
			return kc_seterr(KC_EINVAL,
			    "learned: signature longer than %d characters",
			    MEMLT_MAX_SIG);
		memcpy(prefix + 1, signature, strlen(signature) + 1);
		plen = strlen(signature) + 2;
	}
	rv = store_scan(
	    s, STORE_CF_LEARNED, prefix, plen, NULL, 0, memlt_stats_fn, &acc);
	if (rv != 0) {
		free(acc.v);
		return rv;
	}
	nrows = acc.n;
	if (with_global) {
		/* Re-adding each row's records is not possible from the
		 * aggregate, so the global rows merge the per-signature
		 * aggregates field by field. */
		for (size_t i = 0; i < nrows; i++) {
			memlt_stat row = acc.v[i];
			memlt_stat *g = memlt_stat_row(
			    &acc.v, &acc.n, &acc.cap, "*", row.method);
			if (g == NULL) {
				free(acc.v);
				return KC_ENOMEM;
			}
			g->attempts += row.attempts;
			g->correct += row.correct;
			g->successes += row.successes;
			g->gain_mean += row.gain_mean;
			if (row.correct > 0) {
				g->gain_min = fmin(g->gain_min, row.gain_min);
				g->gain_max = fmax(g->gain_max, row.gain_max);
			}
			g->speedup_best =
			    fmax(g->speedup_best, row.speedup_best);
			for (int b = 0; b < MEMLT_NBUCKETS; b++)
				g->buckets[b] += row.buckets[b];
			if (row.last_unix_ms > g->last_unix_ms)
				g->last_unix_ms = row.last_unix_ms;
		}
	}
	for (size_t i = 0; i < acc.n; i++)
		memlt_stat_finish(&acc.v[i]);
	if (acc.n > 1)
		qsort(acc.v, acc.n, sizeof(*acc.v), memlt_cmp_stat);
	*out = acc.v;
	*n = acc.n;
	return 0;
}

int
memlt_stat_get(
    store *s, const char *signature, const char *method, memlt_stat *out)
{
	memlt_stat *v;
	size_t n;
	int rv;

	memset(out, 0, sizeof(*out));
	kc_strlcpy(out->signature, signature, sizeof(out->signature));
	kc_strlcpy(out->method, method, sizeof(out->method));
	if ((rv = memlt_stats(s, signature, false, &v, &n)) != 0)
		return rv;
	for (size_t i = 0; i < n; i++)
		if (strcmp(v[i].method, method) == 0)
			*out = v[i];
	free(v);
	return 0;
}

static bool
memlt_valid_part(const char *s, size_t max)
{
	return s != NULL && *s != '\0' && strlen(s) <= max;
}

int
memlt_learn(store *s, store_batch *b, const char *signature, const char *method,
    const char *attempt_id, bool correct, double speedup)
{
	char key[1 + MEMLT_MAX_SIG + 1 + MEMLT_MAX_METHOD + 1 +
	    MEMLT_MAX_ATTEMPT + 1];
	uint8_t val[MEMLT_REC_LEN];
	size_t klen;

	if (!memlt_valid_part(signature, MEMLT_MAX_SIG) ||
	    !memlt_valid_part(method, MEMLT_MAX_METHOD) ||
	    !memlt_valid_part(attempt_id, MEMLT_MAX_ATTEMPT))
		return kc_seterr(KC_EINVAL,
		    "learned: signature (1-%d chars), method (1-%d) and "
		    "attempt id (1-%d) are required",
		    MEMLT_MAX_SIG, MEMLT_MAX_METHOD, MEMLT_MAX_ATTEMPT);
	if (correct && !(isfinite(speedup) && speedup > 0))
		return kc_seterr(KC_EINVAL,
		    "learned: a correct attempt of %s needs a positive "
		    "speedup over its base, not %g",
		    method, speedup);
	if (!correct)
		speedup = 0;
	klen = (size_t)snprintf(
	           key, sizeof(key), "%c%s", MEMLT_ATTEMPT_PREFIX, signature) +
	    1;
	klen +=
	    (size_t)snprintf(key + klen, sizeof(key) - klen, "%s", method) + 1;
	klen +=
	    (size_t)snprintf(key + klen, sizeof(key) - klen, "%s", attempt_id);
	memlt_rec_encode(val, correct, speedup, kc_now_ms());
	if (b != NULL)
		return store_batch_put(
		    b, STORE_CF_LEARNED, key, klen, val, sizeof(val));
	if (s == NULL)
		return kc_seterr(KC_EINVAL, "learned: no store and no batch");
	return store_put(
	    s, STORE_CF_LEARNED, key, klen, val, sizeof(val), true);
}

/* ----------------------------------------------------------- retrieval */

void
memlt_result_free(memlt_result *r)
{
	if (r == NULL)
		return;
	for (size_t i = 0; i < r->nrecs; i++)
		kclaw__recommendation__free_unpacked(r->recs[i], NULL);
	free(r->recs);
	for (size_t i = 0; i < r->nactive; i++)
		free(r->active[i]);
	free(r->active);
	for (size_t i = 0; i < r->nfired; i++)
		free(r->fired[i]);
	free(r->fired);
	for (size_t i = 0; i < r->nvetoes; i++)
		free(r->vetoes[i]);
	free(r->vetoes);
	free(r->signature);
	free(r->primary);
	free(r->trace);
	free(r->fields);
	memset(r, 0, sizeof(*r));
}

/* Builds the recommendation for one ranked candidate. */
static int
memlt_make_rec(const memlt_ctx *ctx, const memlt_cands *cs, const memlt_cand *c,
    const memlt_result *res, size_t kbytes, const memlt_stat *global,
    Kclaw__Recommendation **out)
{
	Kclaw__Recommendation *r = malloc(sizeof(*r));
	const kb_method *m = kb_method_find(ctx->k, c->method);
	memlt_matched mt = {.ctx = ctx};
	char *text = NULL, item[256];
	kc_str s = {0};
	int rv;

	*out = NULL;
	if (r == NULL)
		return KC_ENOMEM;
	kclaw__recommendation__init(r);
	*out = r;
	mt.rec = r;
	if ((r->method = strdup(c->method)) == NULL ||
	    (r->rule = strdup(c->rule->name)) == NULL ||
	    (r->signature = strdup(res->signature)) == NULL)
		return KC_ENOMEM;
	r->score = c->score;
	r->attempts = c->stat.attempts;
	r->successes = c->stat.successes;
	r->mean_gain = c->stat.gain_mean;
	snprintf(item, sizeof(item), "class %s", c->cls->name);
	if ((rv = memlt_push(&r->matched, &r->n_matched, item)) != 0 ||
	    (rv = expr_idents(c->cls->when, memlt_matched_fn, &mt)) != 0 ||
	    (rv = expr_idents(c->rule->when, memlt_matched_fn, &mt)) != 0)
		return rv;
	/* What this rule allowed but a veto removed, and why. */
	for (size_t i = 0; i < cs->n; i++) {
		const memlt_cand *o = &cs->v[i];
		if (!o->vetoed)
			continue;
		for (size_t j = 0; j < c->rule->nallow; j++)
			if (strcmp(c->rule->allow[j], o->method) == 0) {
				snprintf(item, sizeof(item), "%s: %s (veto %s)",
				    o->method, o->veto->why, o->veto->name);
				if ((rv = memlt_push(
				         &r->vetoed, &r->n_vetoed, item)) != 0)
					return rv;
			}
	}
	/* The learned line first: the method text gets what is left of the
	 * budget, so the whole knowledge stays within kbytes. */
	kc_str learned = {0};
	rv = kc_str_printf(&learned, "allowed by rule %s (%s): %s\n",
	    c->rule->name, c->cls->name, c->rule->why);
	if (rv == 0 && c->stat.attempts == 0)
		rv = kc_str_printf(&learned,
		    "learned (%s): never tried for this signature",
		    res->signature);
	else if (rv == 0)
		rv = kc_str_printf(&learned,
		    "learned (%s): %u attempts, %u correct, %u faster by "
		    ">=%.0f%%, mean gain %+.1f%%, best %.2fx",
		    res->signature, c->stat.attempts, c->stat.correct,
		    c->stat.successes, MEMLT_SUCCESS_GAIN * 100,
		    c->stat.gain_mean * 100, c->stat.speedup_best);
	if (rv == 0 && global != NULL && global->attempts > 0)
		rv = kc_str_printf(&learned,
		    "; all signatures: %u attempts, %u faster, mean gain "
		    "%+.1f%%",
		    global->attempts, global->successes,
		    global->gain_mean * 100);
	if (rv == 0 && m != NULL)
		rv = kb_method_text(m, res->arch_sm,
		    kbytes > learned.len + 64 ? kbytes - learned.len : 64,
		    &text);
	if (rv == 0)
		rv = kc_str_printf(&s, "%s%s", text ? text : "",
		    learned.buf ? learned.buf : "");
	free(text);
	kc_str_free(&learned);
	if (rv != 0) {
		kc_str_free(&s);
		return KC_ENOMEM;
	}
	r->knowledge = kc_str_take(&s);
	return r->knowledge != NULL ? 0 : KC_ENOMEM;
}

/*
 * Evaluates the rules of one active class and allows their methods. The
 * prior falls with the class's rank among the active ones, with the rule's
 * rank among the class's fired rules and with the method's position in
 * the rule's list: the authors' order is the preference.
 */
static int
memlt_class_rules(const memlt_ctx *ctx, const kb_class *cls, size_t rank,
    memlt_cands *cs, memlt_result *out, kc_str *t)
{
	const kb *k = ctx->k;
	size_t nfired = 0;
	char buf[32];
	int rv = 0, mem = 0;

	for (size_t ri = 0; ri < k->nrules; ri++) {
		const kb_rule *r = &k->rules[ri];
		expr_value w = {true, 1.0};
		kc_str vals = {0};
		if (strcmp(r->cls, cls->name) != 0)
			continue;
		if (r->when != NULL &&
		    ((rv = expr_eval(r->when, memlt_lookup, (void *)ctx, &w)) !=
		            0 ||
		        (rv = memlt_expr_values(ctx, r->when, &vals)) != 0)) {
			kc_str_free(&vals);
			return rv;
		}
		expr_value_str(w, true, buf, sizeof(buf));
		mem |= kc_str_printf(t, "  %s %-22s [%s] when %s = %s%s%s%s\n",
		    expr_is_true(w) ? "fired" : "     ", r->name, r->cls,
		    r->when ? expr_source(r->when) : "(always)", buf,
		    vals.buf ? " (" : "", vals.buf ? vals.buf : "",
		    vals.buf ? ")" : "");
		kc_str_free(&vals);
		if (!expr_is_true(w))
			continue;
		if ((rv = memlt_push(&out->fired, &out->nfired, r->name)) != 0)
			return rv;
		mem |= kc_str_printf(t, "        allows");
		for (size_t j = 0; j < r->nallow; j++) {
			memlt_cand *c = memlt_cand_get(cs, r->allow[j]);
			double p = (1.0 / (1.0 + 0.25 * (double)rank)) *
			    fmax(0.5, 1.0 - 0.1 * (double)nfired) *
			    fmax(0.5, 1.0 - 0.02 * (double)j);
			if (c == NULL)
				return KC_ENOMEM;
			mem |= kc_str_printf(t, " %s", r->allow[j]);
			if (p > c->prior) {
				c->prior = p;
				c->rule = r;
				c->cls = cls;
			}
		}
		mem |= kc_str_printf(t, "\n        why: %s\n", r->why);
		nfired++;
	}
	return mem != 0 ? KC_ENOMEM : 0;
}

/*
 * Evaluates named expressions (derived fields or predicates) in order,
 * each seeing the ones before it, and lists them in t; predicates read as
 * true/false. A failed append is or-ed into *mem, as the caller does.
 */
static int
memlt_eval_named(memlt_ctx *ctx, const kb_named_expr *x, size_t n, bool truth,
    kc_str *t, int *mem)
{
	char buf[64];
	int rv;

	for (size_t i = 0; i < n; i++) {
		memlt_val *v = &ctx->vals[ctx->n];
		v->name = x[i].name;
		if ((rv = expr_eval(x[i].e, memlt_lookup, ctx, &v->v)) != 0)
			return rv;
		ctx->n++;
		expr_value_str(v->v, truth, buf, sizeof(buf));
		*mem |= kc_str_printf(t, "  %-26s = %-10s  [%s]\n", v->name,
		    buf, expr_source(x[i].e));
	}
	return 0;
}

int
memlt_retrieve(store *s, const kb *k, const memlt_evidence *ev,
    const memlt_options *opt, memlt_result *out)
{
	memlt_options o = {.c = MEMLT_DEFAULT_C,
	    .max_methods = MEMLT_DEFAULT_MAX_METHODS,
	    .knowledge_bytes = MEMLT_DEFAULT_KNOWLEDGE_BYTES,
	    .with_global_fallback = true};
	memlt_ctx ctx = {.k = k};
	memlt_cands cs = {0};
	memlt_stat *stats = NULL, *gstats = NULL;
	size_t nstats = 0, ngstats = 0, nallowed = 0;
	bool *active = NULL;
	uint64_t total_n = 0;
	kc_str t = {0}, sig = {0};
	char buf[64];
	int rv = 0, mem = 0;

	memset(out, 0, sizeof(*out));
	if (opt != NULL) {
		o = *opt;
		if (o.c < 0)
			o.c = MEMLT_DEFAULT_C;
		if (o.knowledge_bytes == 0)
			o.knowledge_bytes = MEMLT_DEFAULT_KNOWLEDGE_BYTES;
	}
	if (k == NULL || ev == NULL)
		return kc_seterr(
		    KC_EINVAL, "retrieve: no knowledge or evidence");
	ctx.vals =
	    calloc(k->nfields + k->nderived + k->npredicates + k->nclasses + 1,
	        sizeof(*ctx.vals));
	active = calloc(k->nclasses + 1, sizeof(*active));
	out->fields = calloc(k->nfields + 1, sizeof(*out->fields));
	if (ctx.vals == NULL || active == NULL || out->fields == NULL) {
		rv = KC_ENOMEM;
		goto out;
	}

	/* 1. Normalise raw evidence into fields. */
	mem |= kc_str_printf(&t,
	    "knowledge version %llu (%s, sha256 %.12s)\n\nevidence "
	    "(normalised fields):\n",
	    (unsigned long long)k->version, k->label ? k->label : "",
	    k->sha256);
	for (size_t i = 0; i < k->nfields; i++) {
		memlt_val *v = &ctx.vals[ctx.n++];
		memlt_normalise(&k->fields[i], ev, v);
		if (v->v.known && out->fields != NULL) {
			memlt_field *f = &out->fields[out->nfields++];
			snprintf(f->name, sizeof(f->name), "%s", v->name);
			f->value = v->v.v;
			f->source = k->fields[i].source;
		}
		expr_value_str(v->v, false, buf, sizeof(buf));
		if (v->v.known)
			mem |= kc_str_printf(&t, "  %-26s = %-10s  from %s\n",
			    v->name, buf, v->from);
	}
	{
		size_t nunknown = 0;
		for (size_t i = 0; i < ctx.n; i++)
			nunknown += !ctx.vals[i].v.known;
		if (nunknown > 0) {
			mem |= kc_str_printf(&t, "  unknown:");
			for (size_t i = 0; i < ctx.n; i++)
				if (!ctx.vals[i].v.known)
					mem |= kc_str_printf(
					    &t, " %s", ctx.vals[i].name);
			mem |= kc_str_printf(&t, "\n");
		}
	}
	{
		const memlt_val *a = memlt_find(&ctx, "arch_sm");
		out->arch_sm = a != NULL && a->v.known ? (int)a->v.v : 0;
	}

	/* 2. Derived fields and predicates, in order. */
	mem |= kc_str_printf(&t, "\nderived:\n");
	if ((rv = memlt_eval_named(
	         &ctx, k->derived, k->nderived, false, &t, &mem)) != 0)
		goto out;
	mem |= kc_str_printf(&t, "\npredicates:\n");
	if ((rv = memlt_eval_named(
	         &ctx, k->predicates, k->npredicates, true, &t, &mem)) != 0)
		goto out;

	/* 3. Bottleneck classes by priority; an active class suppresses the
	 * lower ones it names. */
	mem |= kc_str_printf(&t, "\nbottleneck classes (priority order):\n");
	for (size_t i = 0; i < k->nclasses; i++) {
		const kb_class *c = &k->classes[i];
		expr_value w;
		const char *by = NULL;
		kc_str vals = {0};
		if ((rv = expr_eval(c->when, memlt_lookup, &ctx, &w)) != 0)
			goto out;
		for (size_t j = 0; j < i && by == NULL; j++)
			if (active[j])
				for (size_t x = 0;
				     x < k->classes[j].nsuppresses; x++)
					if (strcmp(k->classes[j].suppresses[x],
					        c->name) == 0)
						by = k->classes[j].name;
		active[i] = expr_is_true(w) && by == NULL;
		if (active[i] &&
		    (rv = memlt_push(&out->active, &out->nactive, c->name)) !=
		        0)
			goto out;
		if ((rv = memlt_expr_values(&ctx, c->when, &vals)) != 0) {
			kc_str_free(&vals);
			goto out;
		}
		expr_value_str(w, true, buf, sizeof(buf));
		mem |= kc_str_printf(&t,
		    "  %s %-20s p%-3d when %s = %s (%s)%s%s\n",
		    active[i] ? "*" : " ", c->name, c->priority,
		    expr_source(c->when), buf, vals.buf ? vals.buf : "",
		    by ? "; suppressed by " : "", by ? by : "");
		kc_str_free(&vals);
	}
	for (size_t i = 0; i < k->nclasses; i++) {
		memlt_val *v = &ctx.vals[ctx.n++];
		v->name = k->classes[i].name;
		v->v = (expr_value){true, active[i] ? 1.0 : 0.0};
	}
	out->primary = NULL;
	for (size_t i = 0; i < k->nclasses && out->primary == NULL; i++)
		if (active[i])
			out->primary = strdup(k->classes[i].name);
	if (out->primary == NULL)
		out->primary = strdup("none");
	/* The signature is deliberately coarse (primary class and GPU
	 * generation) so that statistics accumulate across tasks. */
	mem |= kc_str_printf(&sig, "%s", out->primary ? out->primary : "none");
	if (out->arch_sm > 0)
		mem |= kc_str_printf(&sig, "@sm%d", out->arch_sm);
	if (mem != 0 || out->primary == NULL ||
	    (out->signature = kc_str_take(&sig)) == NULL) {
		rv = KC_ENOMEM;
		goto out;
	}
	mem |= kc_str_printf(
	    &t, "primary: %s; signature: %s\n", out->primary, out->signature);

	/* 4. The decision table: the rules of the active classes. */
	mem |= kc_str_printf(&t, "\nrules:\n");
	{
		size_t rank = 0;
		for (size_t ci = 0; ci < k->nclasses; ci++) {
			if (!active[ci])
				continue;
			if ((rv = memlt_class_rules(&ctx, &k->classes[ci],
			         rank++, &cs, out, &t)) != 0)
				goto out;
		}
		mem |= kc_str_printf(&t, "  not active:");
		for (size_t ci = 0; ci < k->nclasses; ci++)
			if (!active[ci])
				for (size_t ri = 0; ri < k->nrules; ri++)
					if (strcmp(k->rules[ri].cls,
					        k->classes[ci].name) == 0)
						mem |= kc_str_printf(&t, " %s",
						    k->rules[ri].name);
		mem |= kc_str_printf(&t, "\n");
	}

	/* 5. Vetoes. */
	mem |= kc_str_printf(&t, "\nvetoes:\n");
	for (size_t i = 0; i < k->nvetoes; i++) {
		const kb_veto *v = &k->vetoes[i];
		expr_value w;
		kc_str vals = {0};
		if ((rv = expr_eval(v->when, memlt_lookup, &ctx, &w)) != 0)
			goto out;
		if ((rv = memlt_expr_values(&ctx, v->when, &vals)) != 0) {
			kc_str_free(&vals);
			goto out;
		}
		expr_value_str(w, true, buf, sizeof(buf));
		mem |= kc_str_printf(&t, "  %s %-20s when %s = %s (%s)\n",
		    expr_is_true(w) ? "VETO" : "    ", v->name,
		    expr_source(v->when), buf, vals.buf ? vals.buf : "");
		kc_str_free(&vals);
		if (!expr_is_true(w))
			continue;
		if ((rv = memlt_push(&out->vetoes, &out->nvetoes, v->name)) !=
		    0)
			goto out;
		for (size_t j = 0; j < v->nmethods; j++)
			for (size_t x = 0; x < cs.n; x++)
				if (strcmp(cs.v[x].method, v->methods[j]) ==
				        0 &&
				    !cs.v[x].vetoed) {
					cs.v[x].vetoed = true;
					cs.v[x].veto = v;
					mem |= kc_str_printf(&t,
					    "       removes %s: %s\n",
					    v->methods[j], v->why);
				}
	}

	/* 6. Rank the allowed methods by UCB1 over the learned stats. */
	if (s != NULL &&
	    ((rv = memlt_stats(s, out->signature, false, &stats, &nstats)) !=
	            0 ||
	        (o.with_global_fallback &&
	            (rv = memlt_stats(s, NULL, true, &gstats, &ngstats)) != 0)))
		goto out;
	for (size_t i = 0; i < cs.n; i++) {
		memlt_cand *c = &cs.v[i];
		memset(&c->stat, 0, sizeof(c->stat));
		for (size_t j = 0; j < nstats; j++)
			if (strcmp(stats[j].method, c->method) == 0)
				c->stat = stats[j];
		if (!c->vetoed) {
			total_n += c->stat.attempts;
			nallowed++;
		}
	}
	for (size_t i = 0; i < cs.n; i++) {
		memlt_cand *c = &cs.v[i];
		double n = c->stat.attempts;
		c->mean = (c->stat.successes + c->prior) / (n + 1.0);
		c->bonus = o.c * sqrt(log((double)total_n + 1.0) / (n + 1.0));
		c->score = c->vetoed ? -1.0 : c->mean + c->bonus;
	}
	if (cs.n > 1)
		qsort(cs.v, cs.n, sizeof(*cs.v), memlt_cmp_cand);
	mem |= kc_str_printf(&t,
	    "\nranking (UCB1, c=%.2f, N=%llu attempts under %s):\n", o.c,
	    (unsigned long long)total_n, out->signature);
	if (nallowed == 0)
		mem |= kc_str_printf(&t,
		    "  no method allowed: no rule fired for this evidence\n");
	{
		size_t rank = 0;
		for (size_t i = 0; i < cs.n; i++) {
			const memlt_cand *c = &cs.v[i];
			if (c->vetoed)
				continue;
			mem |= kc_str_printf(&t,
			    "  %2zu. %-28s score %.3f = (succ %u + prior %.2f) "
			    "/ (n %u + 1) + %.3f  rule %s\n",
			    ++rank, c->method, c->score, c->stat.successes,
			    c->prior, c->stat.attempts, c->bonus,
			    c->rule->name);
		}
	}
	if (mem != 0) {
		rv = KC_ENOMEM;
		goto out;
	}

	/* 7. The recommendations. */
	{
		size_t want = nallowed;
		if (o.max_methods > 0 && o.max_methods < want)
			want = o.max_methods;
		if ((out->recs = calloc(want + 1, sizeof(*out->recs))) ==
		    NULL) {
			rv = KC_ENOMEM;
			goto out;
		}
		for (size_t i = 0; i < cs.n && out->nrecs < want; i++) {
			const memlt_stat *g = NULL;
			if (cs.v[i].vetoed)
				continue;
			for (size_t j = 0; j < ngstats; j++)
				if (gstats[j].signature[0] == '*' &&
				    strcmp(gstats[j].method, cs.v[i].method) ==
				        0)
					g = &gstats[j];
			rv = memlt_make_rec(&ctx, &cs, &cs.v[i], out,
			    o.knowledge_bytes, g, &out->recs[out->nrecs]);
			if (out->recs[out->nrecs] != NULL)
				out->nrecs++;
			if (rv != 0)
				goto out;
		}
	}
	out->trace = kc_str_take(&t);
	if (out->trace == NULL)
		rv = KC_ENOMEM;
out:
	kc_str_free(&t);
	kc_str_free(&sig);
	free(ctx.vals);
	free(active);
	free(cs.v);
	free(stats);
	free(gstats);
	return rv;
}
