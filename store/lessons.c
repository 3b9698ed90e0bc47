/*
 * lessons.c - learned experience across tasks (lessons.h): the lessons of
 * finished optimisation rounds, their similarity to a base kernel's
 * evidence, and their export and import.
 */
#include "lessons.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kc_err.h"
#include "kc_util.h"

#define LESSONS_PREFIX 'l'
#define LESSONS_USED_PREFIX 'u'
#define LESSONS_KEY_MAX 512

static const char *const lessons_src[KB_SRC_COUNT] = {
    "metric", "runtime", "feature"};

static const char *
lessons_s(const char *s)
{
	return s ? s : "";
}

static void
lessons_clear(lesson *l)
{
	free(l->signature);
	free(l->task_id);
	free(l->task_name);
	free(l->method);
	free(l->change);
	free(l->status);
	free(l->kernel_id);
	free(l->fields);
	memset(l, 0, sizeof(*l));
}

void
lessons_free(lesson *v, size_t n)
{
	for (size_t i = 0; v != NULL && i < n; i++)
		lessons_clear(&v[i]);
	free(v);
}

/* 'l' signature '\0' task id '\0' round: KC_EINVAL when too long. */
static int
lessons_key(const lesson *l, uint8_t *key, size_t *klen)
{
	size_t ns = strlen(lessons_s(l->signature));
	size_t nt = strlen(lessons_s(l->task_id));

	if (ns == 0 || nt == 0 || 1 + ns + 1 + nt + 1 + 8 > LESSONS_KEY_MAX)
		return kc_seterr(KC_EINVAL,
		    "lesson: signature and task id must be non-empty and "
		    "short (signature '%s', task '%s')",
		    lessons_s(l->signature), lessons_s(l->task_id));
	key[0] = LESSONS_PREFIX;
	memcpy(key + 1, l->signature, ns);
	key[1 + ns] = '\0';
	memcpy(key + 2 + ns, l->task_id, nt);
	key[2 + ns + nt] = '\0';
	store_key_u64(key + 3 + ns + nt, l->round);
	*klen = 3 + ns + nt + 8;
	return 0;
}

/* ---------------------------------------------------------------- JSON */

static cJSON *
lessons_to_json(const lesson *l)
{
	cJSON *o = cJSON_CreateObject(), *f = cJSON_CreateArray();

	cJSON_AddStringToObject(o, "signature", lessons_s(l->signature));
	cJSON_AddStringToObject(o, "task_id", lessons_s(l->task_id));
	cJSON_AddStringToObject(o, "task_name", lessons_s(l->task_name));
	cJSON_AddNumberToObject(o, "round", l->round);
	cJSON_AddStringToObject(o, "method", lessons_s(l->method));
	cJSON_AddStringToObject(o, "change", lessons_s(l->change));
	cJSON_AddStringToObject(o, "status", lessons_s(l->status));
	cJSON_AddStringToObject(o, "kernel_id", lessons_s(l->kernel_id));
	cJSON_AddNumberToObject(o, "speedup", l->speedup);
	cJSON_AddNumberToObject(o, "before", l->before);
	cJSON_AddNumberToObject(o, "after", l->after);
	cJSON_AddNumberToObject(o, "unix_ms", (double)l->unix_ms);
	for (size_t i = 0; i < l->nfields; i++) {
		cJSON *x = cJSON_CreateObject();
		cJSON_AddStringToObject(x, "name", l->fields[i].name);
		cJSON_AddNumberToObject(x, "value", l->fields[i].value);
		cJSON_AddStringToObject(
		    x, "source", lessons_src[l->fields[i].source]);
		cJSON_AddItemToArray(f, x);
	}
	cJSON_AddItemToObject(o, "fields", f);
	return o;
}

static int
lessons_str(const cJSON *o, const char *name, bool need, char **out)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, name);

	if (x == NULL && !need)
		x = NULL;
	else if (!cJSON_IsString(x))
		return kc_seterr(KC_EINVAL, "\"%s\" must be a string", name);
	*out = strdup(x ? x->valuestring : "");
	return *out ? 0 : KC_ENOMEM;
}

static double
lessons_num(const cJSON *o, const char *name)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, name);

	return cJSON_IsNumber(x) && isfinite(x->valuedouble) ? x->valuedouble
	                                                     : 0;
}

/* Fills l from o (l zeroed by the caller; freed by it on failure). */
static int
lessons_from_json(const cJSON *o, lesson *l)
{
	const cJSON *f, *x;
	int rv;

	if (!cJSON_IsObject(o))
		return kc_seterr(KC_EINVAL, "a lesson must be an object");
	if ((rv = lessons_str(o, "signature", true, &l->signature)) != 0 ||
	    (rv = lessons_str(o, "task_id", true, &l->task_id)) != 0 ||
	    (rv = lessons_str(o, "task_name", false, &l->task_name)) != 0 ||
	    (rv = lessons_str(o, "method", true, &l->method)) != 0 ||
	    (rv = lessons_str(o, "change", false, &l->change)) != 0 ||
	    (rv = lessons_str(o, "status", false, &l->status)) != 0 ||
	    (rv = lessons_str(o, "kernel_id", false, &l->kernel_id)) != 0)
		return rv;
	l->round = (uint32_t)lessons_num(o, "round");
	l->speedup = lessons_num(o, "speedup");
	l->before = lessons_num(o, "before");
	l->after = lessons_num(o, "after");
	l->unix_ms = (uint64_t)lessons_num(o, "unix_ms");
	f = cJSON_GetObjectItemCaseSensitive(o, "fields");
	if (f != NULL && !cJSON_IsArray(f))
		return kc_seterr(KC_EINVAL, "\"fields\" must be an array");
	l->fields =
	    calloc((size_t)cJSON_GetArraySize(f) + 1, sizeof(*l->fields));
	if (l->fields == NULL)
		return KC_ENOMEM;
	cJSON_ArrayForEach(x, f)
	{
		const cJSON *nm = cJSON_GetObjectItemCaseSensitive(x, "name");
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(x, "value");
		const cJSON *src =
		    cJSON_GetObjectItemCaseSensitive(x, "source");
		memlt_field *mf = &l->fields[l->nfields];
		if (!cJSON_IsString(nm) || !cJSON_IsNumber(v))
			return kc_seterr(KC_EINVAL,
			    "fields[%zu] needs a \"name\" and a numeric "
			    "\"value\"",
			    l->nfields);
		snprintf(mf->name, sizeof(mf->name), "%s", nm->valuestring);
		mf->value = v->valuedouble;
		mf->source = KB_SRC_METRIC;
		for (int i = 0; i < KB_SRC_COUNT; i++)
			if (cJSON_IsString(src) &&
			    strcmp(src->valuestring, lessons_src[i]) == 0)
				mf->source = (kb_source)i;
		l->nfields++;
	}
	if (!*l->signature || !*l->task_id || !*l->method)
		return kc_seterr(KC_EINVAL,
		    "a lesson needs a signature, a task_id and a method");
	return 0;
}

/* ------------------------------------------------------------- storing */

typedef struct {
	uint8_t *key;
	size_t klen;
	uint64_t unix_ms;
} lessons_age;

typedef struct {
	const uint8_t *skip;
	size_t skiplen;
	lessons_age *v;
	size_t n, cap;
} lessons_ages;

static int
lessons_age_fn(
    void *arg, const void *key, size_t klen, const void *val, size_t vlen)
{
	lessons_ages *a = arg;
	cJSON *o;

	if (klen == a->skiplen && memcmp(key, a->skip, klen) == 0)
		return 0;
	if (a->n == a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 64;
		lessons_age *p = realloc(a->v, cap * sizeof(*p));
		if (p == NULL)
			return KC_ENOMEM;
		a->v = p;
		a->cap = cap;
	}
	if ((a->v[a->n].key = malloc(klen)) == NULL)
		return KC_ENOMEM;
	memcpy(a->v[a->n].key, key, klen);
	a->v[a->n].klen = klen;
	o = cJSON_ParseWithLength(val, vlen);
	a->v[a->n].unix_ms = (uint64_t)lessons_num(o, "unix_ms");
	cJSON_Delete(o);
	a->n++;
	return 0;
}

static int
lessons_cmp_age(const void *x, const void *y)
{
	const lessons_age *a = x, *b = y;
	size_t n = a->klen < b->klen ? a->klen : b->klen;
	int c;

	if (a->unix_ms != b->unix_ms)
		return a->unix_ms < b->unix_ms ? -1 : 1;
	if ((c = memcmp(a->key, b->key, n)) != 0)
		return c;
	return a->klen < b->klen ? -1 : a->klen > b->klen;
}

/* Deletes the oldest lessons of the signature so that one more fits. */
static int
lessons_evict(store *s, store_batch *b, const uint8_t *key, size_t klen,
    const char *signature)
{
	lessons_ages a = {.skip = key, .skiplen = klen};
	size_t plen = strlen(signature) + 2;
	int rv;

	rv = store_scan(
	    s, STORE_CF_LEARNED, key, plen, NULL, 0, lessons_age_fn, &a);
	if (rv == 0 && a.n >= LESSONS_MAX_PER_SIGNATURE) {
		qsort(a.v, a.n, sizeof(*a.v), lessons_cmp_age);
		for (size_t i = 0;
		     rv == 0 && i + LESSONS_MAX_PER_SIGNATURE <= a.n; i++)
			rv = b ? store_batch_delete(b, STORE_CF_LEARNED,
			             a.v[i].key, a.v[i].klen)
			       : store_delete(s, STORE_CF_LEARNED, a.v[i].key,
			             a.v[i].klen, false);
	}
	for (size_t i = 0; i < a.n; i++)
		free(a.v[i].key);
	free(a.v);
	return rv;
}

int
lessons_put(store *s, store_batch *b, const lesson *l)
{
	uint8_t key[LESSONS_KEY_MAX];
	size_t klen = 0;
	lesson c = *l;
	cJSON *o;
	char *text;
	int rv;

	if ((rv = lessons_key(l, key, &klen)) != 0)
		return rv;
	if (c.unix_ms == 0)
		c.unix_ms = kc_now_ms();
	if ((o = lessons_to_json(&c)) == NULL)
		return KC_ENOMEM;
	text = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	if (text == NULL)
		return KC_ENOMEM;
	rv = lessons_evict(s, b, key, klen, l->signature);
	if (rv == 0)
		rv = b ? store_batch_put(
		             b, STORE_CF_LEARNED, key, klen, text, strlen(text))
		       : store_put(s, STORE_CF_LEARNED, key, klen, text,
		             strlen(text), true);
	free(text);
	return rv;
}

/* ------------------------------------------------------------- reading */

typedef struct {
	lesson *v;
	size_t n, cap;
} lessons_vec;

static int
lessons_list_fn(
    void *arg, const void *key, size_t klen, const void *val, size_t vlen)
{
	lessons_vec *a = arg;
	cJSON *o;
	int rv;

	(void)key;
	(void)klen;
	if (a->n == a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 64;
		lesson *p = realloc(a->v, cap * sizeof(*p));
		if (p == NULL)
			return KC_ENOMEM;
		a->v = p;
		a->cap = cap;
	}
	memset(&a->v[a->n], 0, sizeof(a->v[a->n]));
	if ((o = cJSON_ParseWithLength(val, vlen)) == NULL)
		return 0; /* not ours to judge: skipped */
	rv = lessons_from_json(o, &a->v[a->n]);
	cJSON_Delete(o);
	a->n++;
	if (rv == KC_EINVAL) {
		/* A malformed record is skipped, not fatal. */
		kc_clearerr();
		lessons_clear(&a->v[--a->n]);
		return 0;
	}
	return rv;
}

int
lessons_list(store *s, lesson **out, size_t *n)
{
	lessons_vec a = {0};
	uint8_t prefix = LESSONS_PREFIX;
	int rv;

	*out = NULL;
	*n = 0;
	rv = store_scan(
	    s, STORE_CF_LEARNED, &prefix, 1, NULL, 0, lessons_list_fn, &a);
	if (rv != 0) {
		lessons_free(a.v, a.n);
		return rv;
	}
	*out = a.v;
	*n = a.n;
	return 0;
}

/* Relative difference of two values in [0, 1]. */
static double
lessons_diff(double a, double b)
{
	double m = fmax(fabs(a), fabs(b));

	if (m < 1e-12)
		return 0;
	return fmin(1.0, fabs(a - b) / m);
}

static double
lessons_weight(kb_source src)
{
	return src == KB_SRC_RUNTIME ? 0.5 : 1.0;
}

static double
lessons_distance(const memlt_result *r, const lesson *l)
{
	double sum = 0, wsum = 0, d;

	for (size_t i = 0; i < r->nfields; i++) {
		const memlt_field *q = &r->fields[i];
		double w = lessons_weight(q->source);
		size_t j;
		for (j = 0; j < l->nfields; j++)
			if (strcmp(l->fields[j].name, q->name) == 0)
				break;
		sum += w *
		    (j < l->nfields ? lessons_diff(q->value, l->fields[j].value)
		                    : 0.5);
		wsum += w;
	}
	for (size_t j = 0; j < l->nfields; j++) {
		double w = lessons_weight(l->fields[j].source);
		size_t i;
		for (i = 0; i < r->nfields; i++)
			if (strcmp(l->fields[j].name, r->fields[i].name) == 0)
				break;
		if (i == r->nfields) {
			sum += w * 0.5;
			wsum += w;
		}
	}
	d = wsum > 0 ? sum / wsum : 1.0;
	if (strcmp(lessons_s(r->signature), l->signature) != 0)
		d += 0.5;
	/* Rounded, so that ties are ties on every machine. */
	return round(d * 1e6) / 1e6;
}

/* Keys compare as the store orders them: signature, task id, round. */
static int
lessons_cmp_key(const lesson *a, const lesson *b)
{
	int c;

	if ((c = strcmp(a->signature, b->signature)) != 0 ||
	    (c = strcmp(a->task_id, b->task_id)) != 0)
		return c;
	return a->round < b->round ? -1 : a->round > b->round;
}

static int
lessons_cmp_near(const void *x, const void *y)
{
	const lesson *a = x, *b = y;

	if (a->distance != b->distance)
		return a->distance < b->distance ? -1 : 1;
	return lessons_cmp_key(a, b);
}

int
lessons_similar(store *s, const memlt_result *r, const char *exclude_task,
    size_t k, lesson **out, size_t *n)
{
	lesson *v;
	size_t nv, keep = 0;
	int rv;

	*out = NULL;
	*n = 0;
	if ((rv = lessons_list(s, &v, &nv)) != 0)
		return rv;
	for (size_t i = 0; i < nv; i++) {
		if (exclude_task != NULL &&
		    strcmp(v[i].task_id, exclude_task) == 0) {
			lessons_clear(&v[i]);
			continue;
		}
		v[i].distance = lessons_distance(r, &v[i]);
		v[keep++] = v[i];
	}
	if (keep > 1)
		qsort(v, keep, sizeof(*v), lessons_cmp_near);
	if (keep > k) {
		for (size_t i = k; i < keep; i++)
			lessons_clear(&v[i]);
		keep = k;
	}
	if (keep == 0) {
		free(v);
		return 0;
	}
	*out = v;
	*n = keep;
	return 0;
}

int
lessons_render(const lesson *l, char **out)
{
	kc_str t = {0};
	int rv;

	rv = kc_str_printf(&t, "task %s (%s, distance %.3f): %s -> %s",
	    l->task_name && *l->task_name ? l->task_name : l->task_id,
	    l->signature, l->distance, l->method,
	    l->status && *l->status ? l->status : "?");
	if (rv == 0 && l->speedup > 0)
		rv = kc_str_printf(&t, ", %.3fx over its base", l->speedup);
	if (rv == 0 && l->before > 0 && l->after > 0)
		rv = kc_str_printf(
		    &t, " (%.3fx -> %.3fx the reference)", l->before, l->after);
	else if (rv == 0 && l->before > 0)
		rv =
		    kc_str_printf(&t, " (base %.3fx the reference)", l->before);
	if (rv == 0 && l->change && *l->change)
		rv = kc_str_printf(&t, "; changed: %s", l->change);
	if (rv != 0) {
		kc_str_free(&t);
		return KC_ENOMEM;
	}
	*out = kc_str_take(&t);
	return *out ? 0 : KC_ENOMEM;
}

/* --------------------------------------------------- lessons shown */

static int
lessons_used_key(const char *candidate_id, uint8_t *key, size_t *klen)
{
	size_t n = strlen(lessons_s(candidate_id));

	if (n == 0 || n + 1 > LESSONS_KEY_MAX)
		return kc_seterr(KC_EINVAL, "lessons: bad candidate id");
	key[0] = LESSONS_USED_PREFIX;
	memcpy(key + 1, candidate_id, n);
	*klen = n + 1;
	return 0;
}

int
lessons_used_put(
    store *s, const char *candidate_id, char *const *lines, size_t n)
{
	uint8_t key[LESSONS_KEY_MAX];
	size_t klen = 0;
	cJSON *a;
	char *text;
	int rv;

	if ((rv = lessons_used_key(candidate_id, key, &klen)) != 0)
		return rv;
	if ((a = cJSON_CreateArray()) == NULL)
		return KC_ENOMEM;
	for (size_t i = 0; i < n; i++)
		cJSON_AddItemToArray(a, cJSON_CreateString(lines[i]));
	text = cJSON_PrintUnformatted(a);
	cJSON_Delete(a);
	if (text == NULL)
		return KC_ENOMEM;
	rv = store_put(
	    s, STORE_CF_LEARNED, key, klen, text, strlen(text), false);
	free(text);
	return rv;
}

int
lessons_used_get(store *s, const char *candidate_id, char ***lines, size_t *n)
{
	uint8_t key[LESSONS_KEY_MAX];
	size_t klen, vlen, bytes = 0, cnt = 0;
	void *val;
	cJSON *a, *x;
	char **v, *p;
	int rv;

	*lines = NULL;
	*n = 0;
	if ((rv = lessons_used_key(candidate_id, key, &klen)) != 0)
		return rv;
	if ((rv = store_get(s, STORE_CF_LEARNED, key, klen, &val, &vlen)) != 0)
		return rv;
	a = cJSON_ParseWithLength(val, vlen);
	free(val);
	if (!cJSON_IsArray(a)) {
		cJSON_Delete(a);
		return kc_seterr(KC_EPROTO,
		    "the lessons kept for %s do not decode", candidate_id);
	}
	cJSON_ArrayForEach(x, a) if (cJSON_IsString(x))
	{
		bytes += strlen(x->valuestring) + 1;
		cnt++;
	}
	if ((v = malloc((cnt + 1) * sizeof(*v) + bytes + 1)) == NULL) {
		cJSON_Delete(a);
		return KC_ENOMEM;
	}
	p = (char *)(v + cnt + 1);
	cnt = 0;
	cJSON_ArrayForEach(x, a) if (cJSON_IsString(x))
	{
		size_t len = strlen(x->valuestring) + 1;
		memcpy(p, x->valuestring, len);
		v[cnt++] = p;
		p += len;
	}
	v[cnt] = NULL;
	cJSON_Delete(a);
	*lines = v;
	*n = cnt;
	return 0;
}

/* ------------------------------------------------- export and import */

int
lessons_export(store *s, const char *dir, size_t *n)
{
	char path[4096];
	lesson *v;
	size_t nv;
	cJSON *doc, *a;
	int rv;

	*n = 0;
	if ((rv = lessons_list(s, &v, &nv)) != 0)
		return rv;
	doc = cJSON_CreateObject();
	a = cJSON_CreateArray();
	cJSON_AddStringToObject(doc, "format", "kclaw-lessons/1");
	for (size_t i = 0; i < nv; i++)
		cJSON_AddItemToArray(a, lessons_to_json(&v[i]));
	cJSON_AddItemToObject(doc, "lessons", a);
	lessons_free(v, nv);
	snprintf(path, sizeof(path), "%s/%s", dir, LESSONS_FILE);
	rv = kc_write_json(path, doc);
	cJSON_Delete(doc);
	if (rv == 0)
		*n = nv;
	return rv;
}

int
lessons_import(store *s, const char *dir, size_t *n)
{
	char path[4096], *text = NULL;
	size_t len, i = 0;
	cJSON *doc, *a, *x;
	int rv;

	*n = 0;
	snprintf(path, sizeof(path), "%s/%s", dir, LESSONS_FILE);
	if ((rv = kc_read_file(path, 64u << 20, &text, &len)) == KC_ENOENT) {
		kc_clearerr();
		return 0;
	}
	if (rv != 0)
		return rv;
	doc = cJSON_ParseWithLength(text, len);
	free(text);
	a = cJSON_GetObjectItemCaseSensitive(doc, "lessons");
	if (!cJSON_IsArray(a)) {
		cJSON_Delete(doc);
		return kc_seterr(KC_EINVAL,
		    "%s: expected {\"format\": \"kclaw-lessons/1\", "
		    "\"lessons\": [...]}",
		    path);
	}
	/* Validated first: a bad file imports nothing. */
	cJSON_ArrayForEach(x, a)
	{
		lesson l;
		memset(&l, 0, sizeof(l));
		rv = lessons_from_json(x, &l);
		lessons_clear(&l);
		if (rv != 0) {
			rv = kc_seterr(
			    rv, "%s: lessons[%zu]: %s", path, i, kc_lasterr());
			cJSON_Delete(doc);
			return rv;
		}
		i++;
	}
	cJSON_ArrayForEach(x, a)
	{
		lesson l;
		memset(&l, 0, sizeof(l));
		if ((rv = lessons_from_json(x, &l)) == 0)
			rv = lessons_put(s, NULL, &l);
		lessons_clear(&l);
		if (rv != 0)
			break;
		(*n)++;
	}
	cJSON_Delete(doc);
	return rv;
}
