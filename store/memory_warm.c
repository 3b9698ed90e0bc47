/*
 * memory_warm.c - warm starts across tasks. See memory_warm.h.
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kc_err.h"
#include "kc_util.h"
#include "memory_warm.h"

#define MEMWARM_PREFIX 'w'
#define MEMWARM_WORDS_MAX 4096

/* ------------------------------------------------------------ vector */

static int
memwarm_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The words of name and description: lowercased runs of letters and
 * digits of at least two characters, sorted and unique. */
static int
memwarm_words(const Kclaw__TaskSpec *t, char **out)
{
	char buf[MEMWARM_WORDS_MAX], *w[512];
	size_t n = 0, len = 0;
	kc_str s = {0};
	int rv = 0;

	snprintf(buf, sizeof(buf), "%s %s", t->name ? t->name : "",
	    t->description ? t->description : "");
	for (char *p = buf; *p;) {
		char *start;
		while (*p && !isalnum((unsigned char)*p))
			p++;
		start = p;
		while (*p && isalnum((unsigned char)*p)) {
			*p = (char)tolower((unsigned char)*p);
			p++;
		}
		len = (size_t)(p - start);
		if (*p)
			*p++ = '\0';
		if (len >= 2 && n < KC_ARRAY_LEN(w))
			w[n++] = start;
	}
	qsort(w, n, sizeof(w[0]), memwarm_cmp);
	for (size_t i = 0; i < n && rv == 0; i++)
		if (i == 0 || strcmp(w[i], w[i - 1]) != 0)
			rv = kc_str_printf(&s, "%s%s", s.len ? " " : "", w[i]);
	if (rv == 0)
		rv = kc_str_append(&s, "");
	if (rv != 0) {
		kc_str_free(&s);
		return KC_ENOMEM;
	}
	*out = kc_str_take(&s);
	return 0;
}

static double
memwarm_elems(const Kclaw__TensorSpec *ts)
{
	double n = 1;

	for (size_t d = 0; d < ts->n_shape; d++)
		n *= ts->shape[d] > 0 ? (double)ts->shape[d] : 1;
	return n;
}

int
memwarm_vector_of(const Kclaw__TaskSpec *task, memwarm_vector *out)
{
	double in_el = 0, out_el = 0, rank = 0, dtype = 0;
	double n_in = 0, n_par = 0, n_out = 0;

	memset(out, 0, sizeof(*out));
	for (size_t i = 0; i < task->n_tensors; i++) {
		const Kclaw__TensorSpec *ts = task->tensors[i];
		if (ts->kind == KCLAW__TENSOR_KIND__OUTPUT) {
			n_out++;
			out_el += memwarm_elems(ts);
			if (dtype == 0)
				dtype = ts->dtype;
		} else if (ts->kind == KCLAW__TENSOR_KIND__INPUT) {
			n_in++;
			in_el += memwarm_elems(ts);
		} else if (ts->kind != KCLAW__TENSOR_KIND__SCALAR) {
			n_par++;
			in_el += memwarm_elems(ts);
		}
		if ((double)ts->n_shape > rank)
			rank = (double)ts->n_shape;
	}
	out->v[0] = n_in;
	out->v[1] = n_par;
	out->v[2] = n_out;
	out->v[3] = in_el > 0 ? log2(in_el) : 0;
	out->v[4] = out_el > 0 ? log2(out_el) : 0;
	out->v[5] = in_el > 0 && out_el > 0 ? log2(in_el / out_el) : 0;
	out->v[6] = rank;
	out->v[7] = dtype;
	out->v[8] = task->reference ? (double)task->reference->kind : 0;
	return memwarm_words(task, &out->words);
}

void
memwarm_vector_free(memwarm_vector *v)
{
	free(v->words);
	v->words = NULL;
}

/* Jaccard distance of two sorted, unique word lists. */
static double
memwarm_jaccard(const char *a, const char *b)
{
	char *x = strdup(a ? a : ""), *y = strdup(b ? b : "");
	char *wa[512], *wb[512], *save;
	size_t na = 0, nb = 0, i = 0, j = 0, both = 0;
	double d;

	if (x == NULL || y == NULL) {
		free(x);
		free(y);
		return 1;
	}
	for (char *t = strtok_r(x, " ", &save); t && na < KC_ARRAY_LEN(wa);
	     t = strtok_r(NULL, " ", &save))
		wa[na++] = t;
	for (char *t = strtok_r(y, " ", &save); t && nb < KC_ARRAY_LEN(wb);
	     t = strtok_r(NULL, " ", &save))
		wb[nb++] = t;
	while (i < na && j < nb) {
		int c = strcmp(wa[i], wb[j]);
		both += c == 0;
		i += c <= 0;
		j += c >= 0;
	}
	d = na + nb - both ? 1 - (double)both / (double)(na + nb - both) : 0;
	free(x);
	free(y);
	return d;
}

double
memwarm_distance(const memwarm_vector *a, const memwarm_vector *b)
{
	double d = 0;

	for (int i = 0; i < MEMWARM_DIMS; i++) {
		double m = fmax(fabs(a->v[i]), fabs(b->v[i]));
		d += fabs(a->v[i] - b->v[i]) / (1 + m);
	}
	return d + 2 * memwarm_jaccard(a->words, b->words);
}

/* ------------------------------------------------------------ records */

static int
memwarm_key(const char *task_id, char *key, size_t sz, size_t *klen)
{
	size_t n = strlen(task_id);

	if (n + 1 > sz)
		return kc_seterr(KC_EINVAL, "task id %s is too long", task_id);
	key[0] = MEMWARM_PREFIX;
	memcpy(key + 1, task_id, n);
	*klen = n + 1;
	return 0;
}

int
memwarm_put(store *s, store_batch *b, const char *task_id,
    const Kclaw__TaskSpec *task, const Kclaw__Candidate *best, double speedup)
{
	memwarm_vector v;
	cJSON *o = NULL, *arr;
	char key[256], *text = NULL;
	size_t klen = 0;
	int rv;

	if ((rv = memwarm_key(task_id, key, sizeof(key), &klen)) != 0)
		return rv;
	if ((rv = memwarm_vector_of(task, &v)) != 0)
		return rv;
	rv = KC_ENOMEM;
	if ((o = cJSON_CreateObject()) == NULL ||
	    cJSON_AddStringToObject(o, "task", task->name ? task->name : "") ==
	        NULL ||
	    cJSON_AddStringToObject(o, "words", v.words) == NULL ||
	    cJSON_AddStringToObject(o, "source", best->source) == NULL ||
	    cJSON_AddStringToObject(o, "plan", best->plan_json) == NULL ||
	    cJSON_AddStringToObject(o, "id", best->id ? best->id : "") ==
	        NULL ||
	    cJSON_AddNumberToObject(o, "speedup", speedup) == NULL ||
	    (arr = cJSON_AddArrayToObject(o, "vector")) == NULL)
		goto out;
	for (int i = 0; i < MEMWARM_DIMS; i++)
		if (!cJSON_AddItemToArray(arr, cJSON_CreateNumber(v.v[i])))
			goto out;
	if ((text = cJSON_PrintUnformatted(o)) == NULL)
		goto out;
	rv = b ? store_batch_put(
	             b, STORE_CF_LEARNED, key, klen, text, strlen(text))
	       : store_put(
	             s, STORE_CF_LEARNED, key, klen, text, strlen(text), true);
out:
	free(text);
	cJSON_Delete(o);
	memwarm_vector_free(&v);
	return rv;
}

struct memwarm_scan {
	const memwarm_vector *want;
	const char *exclude;
	cJSON *best;
	double dist;
};

static int
memwarm_visit(
    void *arg, const void *key, size_t klen, const void *val, size_t vlen)
{
	struct memwarm_scan *sc = arg;
	memwarm_vector v = {0};
	const cJSON *arr, *w;
	cJSON *o;
	double d;

	if (klen - 1 == strlen(sc->exclude) &&
	    memcmp((const char *)key + 1, sc->exclude, klen - 1) == 0)
		return 0;
	if ((o = cJSON_ParseWithLength(val, vlen)) == NULL)
		return 0; /* not a record of this layout: no warm start */
	arr = cJSON_GetObjectItemCaseSensitive(o, "vector");
	w = cJSON_GetObjectItemCaseSensitive(o, "words");
	if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) != MEMWARM_DIMS ||
	    !cJSON_IsString(w) ||
	    !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(o, "source"))) {
		cJSON_Delete(o);
		return 0;
	}
	for (int i = 0; i < MEMWARM_DIMS; i++)
		v.v[i] = cJSON_GetArrayItem(arr, i)->valuedouble;
	v.words = w->valuestring;
	d = memwarm_distance(sc->want, &v);
	if (sc->best == NULL || d < sc->dist) {
		cJSON_Delete(sc->best);
		sc->best = o;
		sc->dist = d;
	} else {
		cJSON_Delete(o);
	}
	return 0;
}

int
memwarm_nearest(store *s, const char *exclude_task_id,
    const Kclaw__TaskSpec *task, Kclaw__Candidate **best, char **from,
    double *distance)
{
	struct memwarm_scan sc = {.exclude = exclude_task_id};
	char prefix = MEMWARM_PREFIX;
	Kclaw__Candidate *c;
	memwarm_vector v;
	int rv;

	*best = NULL;
	*from = NULL;
	*distance = 0;
	if ((rv = memwarm_vector_of(task, &v)) != 0)
		return rv;
	sc.want = &v;
	rv = store_scan(
	    s, STORE_CF_LEARNED, &prefix, 1, NULL, 0, memwarm_visit, &sc);
	memwarm_vector_free(&v);
	if (rv != 0 || sc.best == NULL) {
		cJSON_Delete(sc.best);
		return rv;
	}
	rv = KC_ENOMEM;
	if ((c = malloc(sizeof(*c))) == NULL)
		goto out;
	kclaw__candidate__init(c);
	c->source = strdup(
	    cJSON_GetObjectItemCaseSensitive(sc.best, "source")->valuestring);
	c->plan_json = strdup(
	    cJSON_IsString(cJSON_GetObjectItemCaseSensitive(sc.best, "plan"))
	        ? cJSON_GetObjectItemCaseSensitive(sc.best, "plan")->valuestring
	        : "");
	c->id = strdup(
	    cJSON_IsString(cJSON_GetObjectItemCaseSensitive(sc.best, "id"))
	        ? cJSON_GetObjectItemCaseSensitive(sc.best, "id")->valuestring
	        : "");
	*from = strdup(
	    cJSON_IsString(cJSON_GetObjectItemCaseSensitive(sc.best, "task"))
	        ? cJSON_GetObjectItemCaseSensitive(sc.best, "task")->valuestring
	        : "");
	if (c->source == NULL || c->plan_json == NULL || c->id == NULL ||
	    *from == NULL) {
		kclaw__candidate__free_unpacked(c, NULL);
		free(*from);
		*from = NULL;
		goto out;
	}
	*best = c;
	*distance = sc.dist;
	rv = 0;
out:
	cJSON_Delete(sc.best);
	return rv;
}
