/*
 * tunables.c - expanding a candidate's tunables into configurations
 * (tunables.h).
 */
#include "tunables.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "kc_err.h"

/* ---- integer expressions ---- */

typedef struct {
	const char *p;
	const char *const *names;
	const long long *vals;
	size_t n;
	int err;
	char why[160];
} tune_parser;

static long long tune_sum(tune_parser *t);

static void
tune_skip(tune_parser *t)
{
	while (isspace((unsigned char)*t->p))
		t->p++;
}

static long long
tune_atom(tune_parser *t)
{
	long long v = 0;

	tune_skip(t);
	if (*t->p == '(') {
		t->p++;
		v = tune_sum(t);
		tune_skip(t);
		if (*t->p != ')') {
			t->err = 1;
			snprintf(t->why, sizeof(t->why), "a ')' is missing");
			return 0;
		}
		t->p++;
		return v;
	}
	if (*t->p == '-') {
		t->p++;
		return -tune_atom(t);
	}
	if (*t->p == '$') {
		const char *s = ++t->p;
		size_t len;
		while (isalnum((unsigned char)*t->p) || *t->p == '_')
			t->p++;
		len = (size_t)(t->p - s);
		for (size_t i = 0; i < t->n; i++)
			if (strlen(t->names[i]) == len &&
			    strncmp(t->names[i], s, len) == 0)
				return t->vals[i];
		t->err = 1;
		snprintf(t->why, sizeof(t->why), "unknown tunable '$%.*s'",
		    (int)len, s);
		return 0;
	}
	if (isdigit((unsigned char)*t->p)) {
		while (isdigit((unsigned char)*t->p)) {
			if (v > (1ll << 52)) {
				t->err = 1;
				snprintf(t->why, sizeof(t->why),
				    "a number is too large");
				return 0;
			}
			v = v * 10 + (*t->p++ - '0');
		}
		return v;
	}
	t->err = 1;
	snprintf(
	    t->why, sizeof(t->why), "unexpected '%.8s'", *t->p ? t->p : "end");
	return 0;
}

static long long
tune_product(tune_parser *t)
{
	long long v = tune_atom(t);

	for (;;) {
		char op;
		long long r;
		tune_skip(t);
		op = *t->p;
		if (t->err || (op != '*' && op != '/' && op != '%'))
			return v;
		t->p++;
		r = tune_atom(t);
		if (t->err)
			return 0;
		if (op != '*' && r == 0) {
			t->err = 1;
			snprintf(t->why, sizeof(t->why), "division by zero");
			return 0;
		}
		v = op == '*' ? v * r : op == '/' ? v / r : v % r;
	}
}

static long long
tune_sum(tune_parser *t)
{
	long long v = tune_product(t);

	for (;;) {
		char op;
		tune_skip(t);
		op = *t->p;
		if (t->err || (op != '+' && op != '-'))
			return v;
		t->p++;
		v = op == '+' ? v + tune_product(t) : v - tune_product(t);
	}
}

int
kc_tune_eval(const char *expr, const char *const *names, const long long *vals,
    size_t nnames, long long *out)
{
	tune_parser t = {.p = expr, .names = names, .vals = vals, .n = nnames};

	*out = tune_sum(&t);
	tune_skip(&t);
	if (!t.err && *t.p != '\0') {
		t.err = 1;
		snprintf(t.why, sizeof(t.why), "unexpected '%.8s'", t.p);
	}
	if (t.err)
		return kc_seterr(KC_EINVAL,
		    "plan: tunables: the expression \"%s\": %s; write an "
		    "integer expression of + - * / %% and parentheses over "
		    "numbers and $NAMES",
		    expr, t.why);
	return 0;
}

/* ---- expansion ---- */

void
kc_tune_free(kc_tune_config *configs, size_t n)
{
	for (size_t i = 0; configs != NULL && i < n; i++) {
		free(configs[i].source);
		free(configs[i].plan_json);
	}
	free(configs);
}

/* Replaces every string that mentions a tunable with its value, in place. */
static int
tune_substitute(
    cJSON *node, const char *const *names, const long long *vals, size_t n)
{
	for (cJSON *c = node->child; c != NULL; c = c->next) {
		if (cJSON_IsString(c) && strchr(c->valuestring, '$') != NULL) {
			long long v;
			cJSON *num;
			int rv =
			    kc_tune_eval(c->valuestring, names, vals, n, &v);
			if (rv != 0)
				return rv;
			if ((num = cJSON_CreateNumber((double)v)) == NULL)
				return KC_ENOMEM;
			/* The replacement keeps the member's name. */
			if (c->string != NULL &&
			    (num->string = strdup(c->string)) == NULL) {
				cJSON_Delete(num);
				return KC_ENOMEM;
			}
			if (!cJSON_ReplaceItemViaPointer(node, c, num)) {
				cJSON_Delete(num);
				return KC_ENOMEM;
			}
			c = num;
		} else if (cJSON_IsObject(c) || cJSON_IsArray(c)) {
			int rv = tune_substitute(c, names, vals, n);
			if (rv != 0)
				return rv;
		}
	}
	return 0;
}

static int
tune_ident(const char *s)
{
	if (!(isalpha((unsigned char)*s) || *s == '_'))
		return 0;
	for (; *s; s++)
		if (!(isalnum((unsigned char)*s) || *s == '_'))
			return 0;
	return 1;
}

int
kc_tune_expand(const char *source, const char *plan_json,
    kc_tune_config **configs, size_t *n)
{
	const char *names[KC_TUNE_MAX_PARAMS];
	long long values[KC_TUNE_MAX_PARAMS][KC_TUNE_MAX_VALUES];
	size_t nvals[KC_TUNE_MAX_PARAMS], np = 0, total = 1;
	kc_tune_config *out = NULL;
	cJSON *root = NULL, *tun, *p;
	int rv = 0;

	*configs = NULL;
	*n = 0;
	if (plan_json == NULL || (root = cJSON_Parse(plan_json)) == NULL)
		return 0; /* the plan check reports a plan that is not JSON */
	tun = cJSON_GetObjectItemCaseSensitive(root, "tunables");
	if (tun == NULL) {
		cJSON_Delete(root);
		return 0;
	}
	if (!cJSON_IsObject(tun) || tun->child == NULL) {
		rv = kc_seterr(KC_EINVAL,
		    "plan: 'tunables' must be an object of NAME: [values], "
		    "such as {\"BLOCK\": [128, 256, 512]}");
		goto out;
	}
	cJSON_ArrayForEach(p, tun)
	{
		const cJSON *v;
		if (np == KC_TUNE_MAX_PARAMS) {
			rv = kc_seterr(KC_EINVAL,
			    "plan: tunables: at most %d parameters",
			    KC_TUNE_MAX_PARAMS);
			goto out;
		}
		if (!tune_ident(p->string) || strlen(p->string) > 64) {
			rv = kc_seterr(KC_EINVAL,
			    "plan: tunables: '%s' is not a C identifier (it "
			    "becomes a #define)",
			    p->string);
			goto out;
		}
		if (!cJSON_IsArray(p) || cJSON_GetArraySize(p) < 1 ||
		    cJSON_GetArraySize(p) > KC_TUNE_MAX_VALUES) {
			rv = kc_seterr(KC_EINVAL,
			    "plan: tunables: '%s' needs a list of 1 to %d "
			    "integers",
			    p->string, KC_TUNE_MAX_VALUES);
			goto out;
		}
		names[np] = p->string;
		nvals[np] = 0;
		cJSON_ArrayForEach(v, p)
		{
			if (!cJSON_IsNumber(v) ||
			    v->valuedouble !=
			        (double)(long long)v->valuedouble ||
			    v->valuedouble > 1e15 || v->valuedouble < -1e15) {
				rv = kc_seterr(KC_EINVAL,
				    "plan: tunables: '%s' holds a value that "
				    "is "
				    "not an integer",
				    p->string);
				goto out;
			}
			values[np][nvals[np]++] = (long long)v->valuedouble;
		}
		total *= nvals[np];
		if (total > KC_TUNE_MAX_CONFIGS) {
			rv = kc_seterr(KC_EINVAL,
			    "plan: tunables: more than %d configurations (the "
			    "product of the lists); give fewer values",
			    KC_TUNE_MAX_CONFIGS);
			goto out;
		}
		np++;
	}
	if ((out = calloc(total, sizeof(*out))) == NULL) {
		rv = kc_seterr(KC_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t c = 0; c < total; c++) {
		long long vals[KC_TUNE_MAX_PARAMS];
		size_t rest = c, used = 0, slen = strlen(source ? source : "");
		cJSON *plan;
		char *defs;

		/* The first parameter varies slowest: configuration 0 is the
		 * default (every first value). */
		for (size_t i = np; i-- > 0;) {
			vals[i] = values[i][rest % nvals[i]];
			rest /= nvals[i];
		}
		for (size_t i = 0; i < np; i++)
			used += (size_t)snprintf(out[c].config + used,
			    used < sizeof(out[c].config)
			        ? sizeof(out[c].config) - used
			        : 0,
			    "%s%s=%lld", i ? " " : "", names[i], vals[i]);
		if ((defs = malloc(np * 96 + slen + 1)) == NULL) {
			rv = kc_seterr(KC_ENOMEM, "out of memory");
			goto out;
		}
		used = 0;
		for (size_t i = 0; i < np; i++)
			used += (size_t)sprintf(defs + used,
			    "#define %s %lld\n", names[i], vals[i]);
		memcpy(defs + used, source ? source : "", slen + 1);
		out[c].source = defs;
		if ((plan = cJSON_Duplicate(root, 1)) == NULL) {
			rv = kc_seterr(KC_ENOMEM, "out of memory");
			goto out;
		}
		cJSON_DeleteItemFromObjectCaseSensitive(plan, "tunables");
		if ((rv = tune_substitute(plan, names, vals, np)) == 0 &&
		    (out[c].plan_json = cJSON_PrintUnformatted(plan)) == NULL)
			rv = kc_seterr(KC_ENOMEM, "out of memory");
		cJSON_Delete(plan);
		if (rv != 0)
			goto out;
	}
	*configs = out;
	*n = total;
	out = NULL;
out:
	kc_tune_free(out, total);
	cJSON_Delete(root);
	return rv;
}
