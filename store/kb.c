/*
 * kb.c - expert knowledge: parse and validate the policy and method files,
 * store them as versions, load and export them. See kb.h.
 */
#include "kb.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kc_config.h"
#include "kc_err.h"
#include "kc_util.h"

/* Keys of STORE_CF_KNOWLEDGE. */
static const char kb_head_key[] = "head";
#define KB_VER_PREFIX 'v'

/* ------------------------------------------------------------- errors */

/* One file being validated: its name for messages, its text to find
 * line numbers in. */
typedef struct {
	const char *file;
	const char *text;
} kb_src;

/* Line of the first `"name": "<anchor>"` in the text, or 0. Knowing the
 * line makes an error in a 1000-line policy quick to find. */
static int
kb_line_of(const kb_src *src, const char *anchor)
{
	char quoted[160];
	const char *p, *q;
	size_t n;

	if (src->text == NULL || anchor == NULL || *anchor == '\0')
		return 0;
	n = (size_t)snprintf(quoted, sizeof(quoted), "\"%s\"", anchor);
	if (n >= sizeof(quoted))
		return 0;
	for (p = strstr(src->text, quoted); p != NULL;
	     p = strstr(p + 1, quoted)) {
		q = p;
		while (q > src->text && isspace((unsigned char)q[-1]))
			q--;
		if (q > src->text && q[-1] == ':') {
			q--;
			while (q > src->text && isspace((unsigned char)q[-1]))
				q--;
			if (q - src->text >= 6 &&
			    strncmp(q - 6, "\"name\"", 6) == 0)
				break;
		}
	}
	if (p == NULL)
		return 0;
	int line = 1;
	for (q = src->text; q < p; q++)
		line += *q == '\n';
	return line;
}

static int kb_err(const kb_src *src, const char *anchor, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* "file:LINE: message" (or "file: message" when the line is unknown). */
static int
kb_err(const kb_src *src, const char *anchor, const char *fmt, ...)
{
	char msg[768];
	va_list ap;
	int line = kb_line_of(src, anchor);

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (line > 0)
		return kc_seterr(KC_EINVAL, "%s:%d: %s", src->file, line, msg);
	return kc_seterr(KC_EINVAL, "%s: %s", src->file, msg);
}

/* Parses JSON text; a syntax error names the line and column. */
static int
kb_parse_json(const kb_src *src, cJSON **out)
{
	const char *end = NULL;
	int line = 1, col = 1;

	*out = cJSON_ParseWithOpts(src->text, &end, true);
	if (*out != NULL)
		return 0;
	if (end == NULL)
		return kc_seterr(KC_ENOMEM, "%s: out of memory", src->file);
	for (const char *p = src->text; p < end; p++) {
		if (*p == '\n') {
			line++;
			col = 1;
		} else {
			col++;
		}
	}
	return kc_seterr(KC_EINVAL,
	    "%s:%d:%d: JSON syntax error near '%.16s'; check for a missing "
	    "comma or quote",
	    src->file, line, col, end);
}

/* ------------------------------------------------------ JSON accessors */

/* Refuses fields other than the allowed ones (a typo would otherwise be
 * ignored silently). */
static int
kb_check_keys(const kb_src *src, const char *where, const char *anchor,
    const cJSON *obj, const char *const *allowed)
{
	const cJSON *c;
	char list[256];
	size_t n = 0;

	if (!cJSON_IsObject(obj))
		return kb_err(src, anchor, "%s: expected an object", where);
	cJSON_ArrayForEach(c, obj)
	{
		bool ok = false;
		for (const char *const *a = allowed; *a; a++)
			if (strcmp(*a, c->string) == 0)
				ok = true;
		if (ok)
			continue;
		list[0] = '\0';
		for (const char *const *a = allowed; *a; a++) {
			int w = snprintf(list + n, sizeof(list) - n, "%s%s",
			    a == allowed ? "" : ", ", *a);
			if (w < 0 || (size_t)w >= sizeof(list) - n)
				break;
			n += (size_t)w;
		}
		return kb_err(src, anchor,
		    "%s: unknown field '%s' (allowed: %s)", where, c->string,
		    list);
	}
	return 0;
}

/* A required (or optional) string member; *out is strdup'd. */
static int
kb_get_str(const kb_src *src, const char *where, const char *anchor,
    const cJSON *obj, const char *key, bool required, char **out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);

	*out = NULL;
	if (v == NULL || cJSON_IsNull(v)) {
		if (required)
			return kb_err(
			    src, anchor, "%s: missing field '%s'", where, key);
		return (*out = strdup("")) ? 0 : KC_ENOMEM;
	}
	if (!cJSON_IsString(v))
		return kb_err(
		    src, anchor, "%s: '%s' must be a string", where, key);
	if (required && v->valuestring[0] == '\0')
		return kb_err(src, anchor, "%s: '%s' is empty", where, key);
	return (*out = strdup(v->valuestring)) ? 0 : KC_ENOMEM;
}

/* An array of strings; empty allowed when !required. */
static int
kb_get_strs(const kb_src *src, const char *where, const char *anchor,
    const cJSON *obj, const char *key, bool required, char ***out, size_t *n)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key), *c;
	size_t i = 0;

	*out = NULL;
	*n = 0;
	if (v == NULL) {
		if (required)
			return kb_err(
			    src, anchor, "%s: missing field '%s'", where, key);
		return 0;
	}
	if (!cJSON_IsArray(v))
		return kb_err(src, anchor,
		    "%s: '%s' must be an array of strings", where, key);
	if (required && cJSON_GetArraySize(v) == 0)
		return kb_err(src, anchor, "%s: '%s' is empty", where, key);
	if ((*out = calloc(
	         (size_t)cJSON_GetArraySize(v) + 1, sizeof(char *))) == NULL)
		return KC_ENOMEM;
	cJSON_ArrayForEach(c, v)
	{
		if (!cJSON_IsString(c))
			return kb_err(src, anchor,
			    "%s: %s[%zu] must be a string", where, key, i);
		if (((*out)[i++] = strdup(c->valuestring)) == NULL)
			return KC_ENOMEM;
		*n = i;
	}
	return 0;
}

static void
kb_free_strs(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

/* Names become identifiers of the expression language. */
static bool
kb_valid_name(const char *s)
{
	static const char *const reserved[] = {"true", "false", "and", "or",
	    "not", "known", "default", "min", "max", "abs", "clamp", NULL};

	if (s == NULL || !(isalpha((unsigned char)*s) || *s == '_') ||
	    strlen(s) >= 64)
		return false;
	for (const char *p = s; *p; p++)
		if (!(isalnum((unsigned char)*p) || *p == '_'))
			return false;
	for (const char *const *r = reserved; *r; r++)
		if (strcmp(*r, s) == 0)
			return false;
	return true;
}

/* ---------------------------------------------------------- name scope */

/* Names an expression may read: what was declared before it. */
typedef struct {
	const char **names;
	size_t n, cap;
} kb_scope;

static bool
kb_scope_has(const kb_scope *sc, const char *name)
{
	for (size_t i = 0; i < sc->n; i++)
		if (strcmp(sc->names[i], name) == 0)
			return true;
	return false;
}

static int
kb_scope_add(
    kb_scope *sc, const kb_src *src, const char *where, const char *name)
{
	if (!kb_valid_name(name))
		return kb_err(src, name,
		    "%s: name '%s' is not an identifier (letters, digits, "
		    "'_'; not a keyword or function name)",
		    where, name);
	if (kb_scope_has(sc, name))
		return kb_err(
		    src, name, "%s: name '%s' is defined twice", where, name);
	if (sc->n == sc->cap) {
		size_t cap = sc->cap ? sc->cap * 2 : 64;
		const char **v = realloc(sc->names, cap * sizeof(*v));
		if (v == NULL)
			return KC_ENOMEM;
		sc->names = v;
		sc->cap = cap;
	}
	sc->names[sc->n++] = name;
	return 0;
}

typedef struct {
	const kb_scope *sc;
	const char *bad;
} kb_ident_check;

static int
kb_ident_check_fn(void *arg, const char *name)
{
	kb_ident_check *c = arg;

	if (kb_scope_has(c->sc, name))
		return 0;
	c->bad = name;
	return KC_ENOENT;
}

/* Parses the expression at obj[key] and checks that it reads only names in
 * scope. */
static int
kb_get_expr(const kb_src *src, const char *where, const char *anchor,
    const cJSON *obj, const char *key, bool required, const kb_scope *sc,
    expr **out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
	char perr[256];
	kb_ident_check chk = {.sc = sc};
	int rv;

	*out = NULL;
	if (v == NULL && !required)
		return 0;
	if (v == NULL)
		return kb_err(
		    src, anchor, "%s: missing field '%s'", where, key);
	if (!cJSON_IsString(v))
		return kb_err(src, anchor,
		    "%s: '%s' must be an expression string", where, key);
	if ((rv = expr_parse(v->valuestring, out, perr, sizeof(perr))) != 0)
		return rv == KC_ENOMEM
		    ? rv
		    : kb_err(src, anchor,
		          "%s: %s: predicate does not parse: "
		          "%s (in \"%s\")",
		          where, key, perr, v->valuestring);
	if (expr_idents(*out, kb_ident_check_fn, &chk) != 0) {
		rv = kb_err(src, anchor,
		    "%s: %s: unknown identifier '%s' (in \"%s\"); use a field, "
		    "derived field or predicate defined before it",
		    where, key, chk.bad, v->valuestring);
		expr_free(*out);
		*out = NULL;
		return rv;
	}
	return 0;
}

/* ------------------------------------------------------------- policy */

static int
kb_source_parse(const char *s, kb_source *out)
{
	static const char *const names[KB_SRC_COUNT] = {
	    "metric", "runtime", "feature"};

	for (int i = 0; i < KB_SRC_COUNT; i++)
		if (strcmp(names[i], s) == 0) {
			*out = (kb_source)i;
			return 0;
		}
	return KC_EINVAL;
}

static int
kb_parse_field(
    const kb_src *src, const cJSON *o, size_t idx, kb_field *f, kb_scope *sc)
{
	static const char *const keys[] = {
	    "name", "source", "aliases", "unit", "doc", NULL};
	const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
	const char *anchor = cJSON_IsString(name) ? name->valuestring : NULL;
	char where[128], *source = NULL;
	const cJSON *al, *a;
	int rv;

	snprintf(where, sizeof(where), "fields[%zu]%s%s%s", idx,
	    anchor ? " \"" : "", anchor ? anchor : "", anchor ? "\"" : "");
	if ((rv = kb_check_keys(src, where, anchor, o, keys)) != 0 ||
	    (rv = kb_get_str(src, where, anchor, o, "name", true, &f->name)) !=
	        0 ||
	    (rv = kb_get_str(src, where, anchor, o, "unit", false, &f->unit)) !=
	        0 ||
	    (rv = kb_get_str(src, where, anchor, o, "doc", false, &f->doc)) !=
	        0)
		return rv;
	if ((rv = kb_get_str(src, where, anchor, o, "source", true, &source)) !=
	    0)
		return rv;
	if (kb_source_parse(source, &f->source) != 0) {
		rv = kb_err(src, anchor,
		    "%s: source '%s' is not one of metric, runtime, feature",
		    where, source);
		free(source);
		return rv;
	}
	free(source);
	al = cJSON_GetObjectItemCaseSensitive(o, "aliases");
	if (al == NULL) {
		/* Without aliases the field reads the raw value of its own
		 * name. */
		if ((f->aliases = calloc(1, sizeof(*f->aliases))) == NULL ||
		    (f->aliases[0].name = strdup(f->name)) == NULL)
			return KC_ENOMEM;
		f->aliases[0].scale = 1.0;
		f->naliases = 1;
		return kb_scope_add(sc, src, where, f->name);
	}
	if (!cJSON_IsArray(al) || cJSON_GetArraySize(al) == 0)
		return kb_err(src, anchor,
		    "%s: 'aliases' must be a non-empty array", where);
	if ((f->aliases = calloc(
	         (size_t)cJSON_GetArraySize(al), sizeof(*f->aliases))) == NULL)
		return KC_ENOMEM;
	cJSON_ArrayForEach(a, al)
	{
		kb_alias *x = &f->aliases[f->naliases];
		x->scale = 1.0;
		if (cJSON_IsString(a)) {
			if ((x->name = strdup(a->valuestring)) == NULL)
				return KC_ENOMEM;
			f->naliases++;
		} else if (cJSON_IsObject(a)) {
			static const char *const akeys[] = {
			    "name", "scale", NULL};
			const cJSON *sc_ =
			    cJSON_GetObjectItemCaseSensitive(a, "scale");
			if ((rv = kb_check_keys(
			         src, where, anchor, a, akeys)) != 0 ||
			    (rv = kb_get_str(src, where, anchor, a, "name",
			         true, &x->name)) != 0)
				return rv;
			f->naliases++; /* counted once named: kb_free frees it
			                */
			if (sc_ != NULL && !cJSON_IsNumber(sc_))
				return kb_err(src, anchor,
				    "%s: alias '%s': 'scale' must be a number",
				    where, x->name);
			if (sc_ != NULL)
				x->scale = sc_->valuedouble;
		} else {
			return kb_err(src, anchor,
			    "%s: an alias is a string or {\"name\", "
			    "\"scale\"}",
			    where);
		}
	}
	return kb_scope_add(sc, src, where, f->name);
}

static int
kb_parse_named_expr(const kb_src *src, const char *section, const cJSON *o,
    size_t idx, kb_named_expr *d, kb_scope *sc)
{
	static const char *const keys[] = {"name", "expr", "doc", NULL};
	const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
	const char *anchor = cJSON_IsString(name) ? name->valuestring : NULL;
	char where[128];
	int rv;

	snprintf(where, sizeof(where), "%s[%zu]%s%s%s", section, idx,
	    anchor ? " \"" : "", anchor ? anchor : "", anchor ? "\"" : "");
	if ((rv = kb_check_keys(src, where, anchor, o, keys)) != 0 ||
	    (rv = kb_get_str(src, where, anchor, o, "name", true, &d->name)) !=
	        0 ||
	    (rv = kb_get_str(src, where, anchor, o, "doc", false, &d->doc)) !=
	        0 ||
	    (rv = kb_get_expr(
	         src, where, anchor, o, "expr", true, sc, &d->e)) != 0)
		return rv;
	return kb_scope_add(sc, src, where, d->name);
}

static int
kb_parse_class(const kb_src *src, const cJSON *o, size_t idx, kb_class *c,
    const kb_scope *sc)
{
	static const char *const keys[] = {
	    "name", "priority", "when", "suppresses", "why", NULL};
	const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
	const char *anchor = cJSON_IsString(name) ? name->valuestring : NULL;
	const cJSON *pr;
	char where[128];
	int rv;

	snprintf(where, sizeof(where), "classes[%zu]%s%s%s", idx,
	    anchor ? " \"" : "", anchor ? anchor : "", anchor ? "\"" : "");
	if ((rv = kb_check_keys(src, where, anchor, o, keys)) != 0 ||
	    (rv = kb_get_str(src, where, anchor, o, "name", true, &c->name)) !=
	        0 ||
	    (rv = kb_get_str(src, where, anchor, o, "why", true, &c->why)) !=
	        0 ||
	    (rv = kb_get_strs(src, where, anchor, o, "suppresses", false,
	         &c->suppresses, &c->nsuppresses)) != 0 ||
	    (rv = kb_get_expr(
	         src, where, anchor, o, "when", true, sc, &c->when)) != 0)
		return rv;
	pr = cJSON_GetObjectItemCaseSensitive(o, "priority");
	if (!cJSON_IsNumber(pr) || pr->valuedouble != (double)pr->valueint)
		return kb_err(src, anchor,
		    "%s: 'priority' must be an integer (higher wins)", where);
	c->priority = pr->valueint;
	return 0;
}

static int
kb_parse_rule(const kb_src *src, const cJSON *o, size_t idx, kb_rule *r,
    const kb_scope *sc)
{
	static const char *const keys[] = {
	    "name", "class", "when", "allow", "why", NULL};
	const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
	const char *anchor = cJSON_IsString(name) ? name->valuestring : NULL;
	char where[128];
	int rv;

	snprintf(where, sizeof(where), "rules[%zu]%s%s%s", idx,
	    anchor ? " \"" : "", anchor ? anchor : "", anchor ? "\"" : "");
	if ((rv = kb_check_keys(src, where, anchor, o, keys)) != 0 ||
	    (rv = kb_get_str(src, where, anchor, o, "name", true, &r->name)) !=
	        0 ||
	    (rv = kb_get_str(src, where, anchor, o, "class", true, &r->cls)) !=
	        0 ||
	    (rv = kb_get_str(src, where, anchor, o, "why", true, &r->why)) !=
	        0 ||
	    (rv = kb_get_strs(src, where, anchor, o, "allow", true, &r->allow,
	         &r->nallow)) != 0 ||
	    (rv = kb_get_expr(
	         src, where, anchor, o, "when", false, sc, &r->when)) != 0)
		return rv;
	if (!kb_valid_name(r->name))
		return kb_err(src, anchor, "%s: name '%s' is not an identifier",
		    where, r->name);
	return 0;
}

static int
kb_parse_veto(const kb_src *src, const cJSON *o, size_t idx, kb_veto *v,
    const kb_scope *sc)
{
	static const char *const keys[] = {
	    "name", "when", "methods", "why", NULL};
	const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
	const char *anchor = cJSON_IsString(name) ? name->valuestring : NULL;
	char where[128];
	int rv;

	snprintf(where, sizeof(where), "vetoes[%zu]%s%s%s", idx,
	    anchor ? " \"" : "", anchor ? anchor : "", anchor ? "\"" : "");
	if ((rv = kb_check_keys(src, where, anchor, o, keys)) != 0 ||
	    (rv = kb_get_str(src, where, anchor, o, "name", true, &v->name)) !=
	        0 ||
	    (rv = kb_get_str(src, where, anchor, o, "why", true, &v->why)) !=
	        0 ||
	    (rv = kb_get_strs(src, where, anchor, o, "methods", true,
	         &v->methods, &v->nmethods)) != 0 ||
	    (rv = kb_get_expr(
	         src, where, anchor, o, "when", true, sc, &v->when)) != 0)
		return rv;
	return 0;
}

/* The array at doc[key] (required), with its length. */
static int
kb_section(const kb_src *src, const cJSON *doc, const char *key,
    const cJSON **out, size_t *n)
{
	*n = 0;
	*out = cJSON_GetObjectItemCaseSensitive(doc, key);
	if (*out == NULL)
		return kb_err(src, NULL, "missing section '%s'", key);
	if (!cJSON_IsArray(*out))
		return kb_err(src, NULL, "'%s' must be an array", key);
	*n = (size_t)cJSON_GetArraySize(*out);
	return 0;
}

static int
kb_cmp_class(const void *a, const void *b)
{
	const kb_class *x = a, *y = b;

	if (x->priority != y->priority)
		return y->priority - x->priority;
	return strcmp(x->name, y->name);
}

#define KB_ALLOC(ptr, n)                                                       \
	(((ptr) = calloc((n) ? (n) : 1, sizeof(*(ptr)))) == NULL ? KC_ENOMEM   \
	                                                         : 0)

/*
 * Parses a section of named expressions ("derived" or "predicates") into
 * *v; *nv counts the entries parsed so far, so that the caller's cleanup
 * frees them after a failure too.
 */
static int
kb_parse_named_section(const kb_src *src, const cJSON *doc, const char *key,
    kb_named_expr **v, size_t *nv, kb_scope *sc)
{
	const cJSON *sec, *o;
	size_t n = 0, i = 0;
	int rv;

	if ((rv = kb_section(src, doc, key, &sec, &n)) != 0 ||
	    (rv = KB_ALLOC(*v, n)) != 0)
		return rv;
	cJSON_ArrayForEach(o, sec)
	{
		*nv = i + 1;
		if ((rv = kb_parse_named_expr(src, key, o, i, &(*v)[i], sc)) !=
		    0)
			return rv;
		i++;
	}
	return 0;
}

static int
kb_build_policy(kb *k, const kb_src *src, const cJSON *doc, const kb_src *msrc)
{
	static const char *const keys[] = {"version", "doc", "fields",
	    "derived", "predicates", "classes", "rules", "vetoes", NULL};
	const cJSON *sec, *o;
	kb_scope sc = {0};
	size_t n = 0, i;
	int rv;

	if ((rv = kb_check_keys(src, "policy", NULL, doc, keys)) != 0 ||
	    (rv = kb_get_str(
	         src, "policy", NULL, doc, "version", true, &k->label)) != 0)
		goto out;
	if ((rv = kb_section(src, doc, "fields", &sec, &n)) != 0 ||
	    (rv = KB_ALLOC(k->fields, n)) != 0)
		goto out;
	i = 0;
	cJSON_ArrayForEach(o, sec)
	{
		k->nfields = i + 1;
		if ((rv = kb_parse_field(src, o, i, &k->fields[i], &sc)) != 0)
			goto out;
		i++;
	}
	if ((rv = kb_parse_named_section(
	         src, doc, "derived", &k->derived, &k->nderived, &sc)) != 0 ||
	    (rv = kb_parse_named_section(src, doc, "predicates", &k->predicates,
	         &k->npredicates, &sc)) != 0)
		goto out;
	/* Classes read fields, derived fields and predicates, not each
	 * other; rules and vetoes may read classes too (1 when active). */
	if ((rv = kb_section(src, doc, "classes", &sec, &n)) != 0 ||
	    (rv = KB_ALLOC(k->classes, n)) != 0)
		goto out;
	if (n == 0) {
		rv = kb_err(src, NULL, "'classes' is empty");
		goto out;
	}
	i = 0;
	cJSON_ArrayForEach(o, sec)
	{
		k->nclasses = i + 1;
		if ((rv = kb_parse_class(src, o, i, &k->classes[i], &sc)) != 0)
			goto out;
		i++;
	}
	for (i = 0; i < k->nclasses; i++) {
		char where[128];
		snprintf(where, sizeof(where), "classes[%zu] \"%s\"", i,
		    k->classes[i].name);
		if ((rv = kb_scope_add(&sc, src, where, k->classes[i].name)) !=
		    0)
			goto out;
	}
	for (i = 0; i < k->nclasses; i++)
		for (size_t j = 0; j < k->classes[i].nsuppresses; j++)
			if (kb_class_find(k, k->classes[i].suppresses[j]) ==
			    NULL) {
				rv = kb_err(src, k->classes[i].name,
				    "classes[%zu] \"%s\": suppresses class "
				    "'%s', which is not defined",
				    i, k->classes[i].name,
				    k->classes[i].suppresses[j]);
				goto out;
			}
	if ((rv = kb_section(src, doc, "rules", &sec, &n)) != 0 ||
	    (rv = KB_ALLOC(k->rules, n)) != 0)
		goto out;
	i = 0;
	cJSON_ArrayForEach(o, sec)
	{
		kb_rule *r = &k->rules[i];
		k->nrules = i + 1;
		if ((rv = kb_parse_rule(src, o, i, r, &sc)) != 0)
			goto out;
		for (size_t j = 0; j < i; j++)
			if (strcmp(k->rules[j].name, r->name) == 0) {
				rv = kb_err(src, r->name,
				    "rules[%zu] \"%s\": name is used by "
				    "rules[%zu] too",
				    i, r->name, j);
				goto out;
			}
		if (kb_class_find(k, r->cls) == NULL) {
			rv = kb_err(src, r->name,
			    "rules[%zu] \"%s\": class '%s' is not defined in "
			    "'classes'",
			    i, r->name, r->cls);
			goto out;
		}
		for (size_t j = 0; j < r->nallow; j++)
			if (kb_method_find(k, r->allow[j]) == NULL) {
				rv = kb_err(src, r->name,
				    "rules[%zu] \"%s\": allow: method '%s' is "
				    "not defined in %s",
				    i, r->name, r->allow[j], msrc->file);
				goto out;
			}
		i++;
	}
	if ((rv = kb_section(src, doc, "vetoes", &sec, &n)) != 0 ||
	    (rv = KB_ALLOC(k->vetoes, n)) != 0)
		goto out;
	i = 0;
	cJSON_ArrayForEach(o, sec)
	{
		kb_veto *v = &k->vetoes[i];
		k->nvetoes = i + 1;
		if ((rv = kb_parse_veto(src, o, i, v, &sc)) != 0)
			goto out;
		for (size_t j = 0; j < v->nmethods; j++)
			if (kb_method_find(k, v->methods[j]) == NULL) {
				rv = kb_err(src, v->name,
				    "vetoes[%zu] \"%s\": methods: method '%s' "
				    "is not defined in %s",
				    i, v->name, v->methods[j], msrc->file);
				goto out;
			}
		i++;
	}
	qsort(k->classes, k->nclasses, sizeof(*k->classes), kb_cmp_class);
out:
	free(sc.names);
	return rv;
}

/* ------------------------------------------------------------ methods */

static int
kb_parse_method(const kb_src *src, const cJSON *o, size_t idx, kb_method *m)
{
	static const char *const keys[] = {"name", "title", "intent",
	    "applies_when", "requires", "expected", "cues", "pitfalls", "tags",
	    NULL};
	static const char *const cue_keys[] = {"ampere", "hopper", NULL};
	const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
	const char *anchor = cJSON_IsString(name) ? name->valuestring : NULL;
	const cJSON *cues;
	char where[128];
	int rv;

	snprintf(where, sizeof(where), "methods[%zu]%s%s%s", idx,
	    anchor ? " \"" : "", anchor ? anchor : "", anchor ? "\"" : "");
	if ((rv = kb_check_keys(src, where, anchor, o, keys)) != 0 ||
	    (rv = kb_get_str(src, where, anchor, o, "name", true, &m->name)) !=
	        0 ||
	    (rv = kb_get_str(
	         src, where, anchor, o, "title", true, &m->title)) != 0 ||
	    (rv = kb_get_str(
	         src, where, anchor, o, "intent", true, &m->intent)) != 0 ||
	    (rv = kb_get_str(src, where, anchor, o, "applies_when", true,
	         &m->applies_when)) != 0 ||
	    (rv = kb_get_str(
	         src, where, anchor, o, "requires", true, &m->requires)) != 0 ||
	    (rv = kb_get_str(
	         src, where, anchor, o, "expected", true, &m->expected)) != 0 ||
	    (rv = kb_get_str(
	         src, where, anchor, o, "pitfalls", true, &m->pitfalls)) != 0 ||
	    (rv = kb_get_strs(src, where, anchor, o, "tags", false, &m->tags,
	         &m->ntags)) != 0)
		return rv;
	if (!kb_valid_name(m->name))
		return kb_err(src, anchor, "%s: name '%s' is not an identifier",
		    where, m->name);
	cues = cJSON_GetObjectItemCaseSensitive(o, "cues");
	if (cues == NULL)
		return kb_err(src, anchor,
		    "%s: missing field 'cues' ({\"ampere\", \"hopper\"})",
		    where);
	if ((rv = kb_check_keys(src, where, anchor, cues, cue_keys)) != 0 ||
	    (rv = kb_get_str(src, where, anchor, cues, "ampere", true,
	         &m->cue_ampere)) != 0 ||
	    (rv = kb_get_str(src, where, anchor, cues, "hopper", true,
	         &m->cue_hopper)) != 0)
		return rv;
	return 0;
}

static int
kb_build_methods(kb *k, const kb_src *src, const cJSON *doc)
{
	static const char *const keys[] = {"version", "doc", "methods", NULL};
	const cJSON *sec, *o;
	size_t n = 0, i = 0;
	int rv;

	if ((rv = kb_check_keys(src, "methods file", NULL, doc, keys)) != 0 ||
	    (rv = kb_section(src, doc, "methods", &sec, &n)) != 0 ||
	    (rv = KB_ALLOC(k->methods, n)) != 0)
		return rv;
	cJSON_ArrayForEach(o, sec)
	{
		k->nmethods = i + 1;
		if ((rv = kb_parse_method(src, o, i, &k->methods[i])) != 0)
			return rv;
		for (size_t j = 0; j < i; j++)
			if (strcmp(k->methods[j].name, k->methods[i].name) == 0)
				return kb_err(src, k->methods[i].name,
				    "methods[%zu] \"%s\": defined twice (also "
				    "methods[%zu])",
				    i, k->methods[i].name, j);
		i++;
	}
	return 0;
}

/* ---------------------------------------------------------- load, free */

void
kb_free(kb *k)
{
	if (k == NULL)
		return;
	for (size_t i = 0; i < k->nfields; i++) {
		for (size_t j = 0; j < k->fields[i].naliases; j++)
			free(k->fields[i].aliases[j].name);
		free(k->fields[i].aliases);
		free(k->fields[i].name);
		free(k->fields[i].unit);
		free(k->fields[i].doc);
	}
	free(k->fields);
	for (size_t i = 0; i < k->nderived; i++) {
		free(k->derived[i].name);
		expr_free(k->derived[i].e);
		free(k->derived[i].doc);
	}
	free(k->derived);
	for (size_t i = 0; i < k->npredicates; i++) {
		free(k->predicates[i].name);
		expr_free(k->predicates[i].e);
		free(k->predicates[i].doc);
	}
	free(k->predicates);
	for (size_t i = 0; i < k->nclasses; i++) {
		free(k->classes[i].name);
		expr_free(k->classes[i].when);
		kb_free_strs(
		    k->classes[i].suppresses, k->classes[i].nsuppresses);
		free(k->classes[i].why);
	}
	free(k->classes);
	for (size_t i = 0; i < k->nrules; i++) {
		free(k->rules[i].name);
		free(k->rules[i].cls);
		expr_free(k->rules[i].when);
		kb_free_strs(k->rules[i].allow, k->rules[i].nallow);
		free(k->rules[i].why);
	}
	free(k->rules);
	for (size_t i = 0; i < k->nvetoes; i++) {
		free(k->vetoes[i].name);
		expr_free(k->vetoes[i].when);
		kb_free_strs(k->vetoes[i].methods, k->vetoes[i].nmethods);
		free(k->vetoes[i].why);
	}
	free(k->vetoes);
	for (size_t i = 0; i < k->nmethods; i++) {
		kb_method *m = &k->methods[i];
		free(m->name);
		free(m->title);
		free(m->intent);
		free(m->applies_when);
		free(m->requires);
		free(m->expected);
		free(m->cue_ampere);
		free(m->cue_hopper);
		free(m->pitfalls);
		kb_free_strs(m->tags, m->ntags);
	}
	free(k->methods);
	free(k->label);
	cJSON_Delete(k->doc);
	free(k);
}

/* Builds a kb from parsed documents; takes both on success and failure. */
static int
kb_build(cJSON *policy, const kb_src *psrc, cJSON *methods, const kb_src *msrc,
    kb **out)
{
	kb *k;
	cJSON *doc;
	char *canon;
	int rv;

	*out = NULL;
	if ((k = calloc(1, sizeof(*k))) == NULL ||
	    (doc = cJSON_CreateObject()) == NULL) {
		free(k);
		cJSON_Delete(policy);
		cJSON_Delete(methods);
		return KC_ENOMEM;
	}
	cJSON_AddItemToObject(doc, "policy", policy);
	cJSON_AddItemToObject(doc, "methods", methods);
	k->doc = doc;
	/* Methods first: the policy's rules refer to them. */
	if ((rv = kb_build_methods(k, msrc, methods)) != 0 ||
	    (rv = kb_build_policy(k, psrc, policy, msrc)) != 0) {
		kb_free(k);
		return rv;
	}
	if ((canon = cJSON_PrintUnformatted(doc)) == NULL) {
		kb_free(k);
		return KC_ENOMEM;
	}
	kc_sha256_hex(canon, strlen(canon), k->sha256);
	free(canon);
	*out = k;
	return 0;
}

int
kb_load_json(const char *policy_json, const char *policy_name,
    const char *methods_json, const char *methods_name, kb **out)
{
	kb_src psrc = {.file = policy_name, .text = policy_json};
	kb_src msrc = {.file = methods_name, .text = methods_json};
	cJSON *p, *m;
	int rv;

	*out = NULL;
	if ((rv = kb_parse_json(&psrc, &p)) != 0)
		return rv;
	if ((rv = kb_parse_json(&msrc, &m)) != 0) {
		cJSON_Delete(p);
		return rv;
	}
	return kb_build(p, &psrc, m, &msrc, out);
}

int
kb_load_dir(const char *dir, kb **out)
{
	char ppath[KC_PATH_MAX], mpath[KC_PATH_MAX];
	char *ptext = NULL, *mtext = NULL;
	size_t len;
	int rv;

	*out = NULL;
	if (dir == NULL || *dir == '\0')
		return kc_seterr(KC_EINVAL, "knowledge: no folder given");
	snprintf(ppath, sizeof(ppath), "%s/%s", dir, KB_POLICY_FILE);
	snprintf(mpath, sizeof(mpath), "%s/%s", dir, KB_METHODS_FILE);
	if ((rv = kc_read_file(ppath, KB_MAX_FILE_BYTES, &ptext, &len)) != 0) {
		rv = kc_seterr(rv,
		    "knowledge: cannot read %s (%s); a knowledge folder holds "
		    "%s and %s",
		    ppath, kc_strerror(rv), KB_POLICY_FILE, KB_METHODS_FILE);
		goto out;
	}
	if ((rv = kc_read_file(mpath, KB_MAX_FILE_BYTES, &mtext, &len)) != 0) {
		rv = kc_seterr(rv,
		    "knowledge: cannot read %s (%s); a knowledge folder holds "
		    "%s and %s",
		    mpath, kc_strerror(rv), KB_POLICY_FILE, KB_METHODS_FILE);
		goto out;
	}
	rv = kb_load_json(ptext, ppath, mtext, mpath, out);
out:
	free(ptext);
	free(mtext);
	return rv;
}

/* -------------------------------------------------------------- store */

static void
kb_ver_key(uint8_t key[9], uint64_t version)
{
	key[0] = KB_VER_PREFIX;
	store_key_u64(key + 1, version);
}

static int
kb_head(store *s, uint64_t *version)
{
	void *val = NULL;
	size_t vlen = 0;
	int rv;

	*version = 0;
	rv = store_get(s, STORE_CF_KNOWLEDGE, kb_head_key,
	    sizeof(kb_head_key) - 1, &val, &vlen);
	if (rv != 0)
		return rv;
	if (vlen != 8) {
		free(val);
		return kc_seterr(KC_ESTORE,
		    "knowledge: the head record is damaged; run `kclaw "
		    "memory import` again");
	}
	*version = store_key_get_u64(val);
	free(val);
	return 0;
}

/* Reads a stored version's record. */
static int
kb_get_record(store *s, uint64_t version, cJSON **out)
{
	uint8_t key[9];
	void *val = NULL;
	size_t vlen;
	char *text;
	int rv;

	*out = NULL;
	if (version == 0 && (rv = kb_head(s, &version)) != 0) {
		if (rv == KC_ENOENT)
			return kc_seterr(KC_ENOENT,
			    "knowledge: nothing imported yet; run `kclaw "
			    "memory import`");
		return rv;
	}
	kb_ver_key(key, version);
	if ((rv = store_get(
	         s, STORE_CF_KNOWLEDGE, key, sizeof(key), &val, &vlen)) != 0) {
		if (rv == KC_ENOENT)
			return kc_seterr(KC_ENOENT,
			    "knowledge: no version %llu in the store",
			    (unsigned long long)version);
		return rv;
	}
	text = malloc(vlen + 1);
	if (text == NULL) {
		free(val);
		return KC_ENOMEM;
	}
	memcpy(text, val, vlen);
	text[vlen] = '\0';
	free(val);
	*out = cJSON_Parse(text);
	free(text);
	if (*out == NULL)
		return kc_seterr(KC_ESTORE,
		    "knowledge: stored version %llu does not parse",
		    (unsigned long long)version);
	return 0;
}

int
kb_load(store *s, uint64_t version, kb **out)
{
	cJSON *rec, *p, *m, *v;
	char pname[64], mname[64];
	kb_src psrc = {.file = pname}, msrc = {.file = mname};
	int rv;

	*out = NULL;
	if ((rv = kb_get_record(s, version, &rec)) != 0)
		return rv;
	v = cJSON_GetObjectItemCaseSensitive(rec, "version");
	version = cJSON_IsNumber(v) ? (uint64_t)v->valuedouble : version;
	snprintf(pname, sizeof(pname), "stored version %llu policy",
	    (unsigned long long)version);
	snprintf(mname, sizeof(mname), "stored version %llu methods",
	    (unsigned long long)version);
	p = cJSON_DetachItemFromObjectCaseSensitive(rec, "policy");
	m = cJSON_DetachItemFromObjectCaseSensitive(rec, "methods");
	if (p == NULL || m == NULL) {
		cJSON_Delete(p);
		cJSON_Delete(m);
		cJSON_Delete(rec);
		return kc_seterr(KC_ESTORE,
		    "knowledge: stored version %llu lacks its policy or "
		    "methods",
		    (unsigned long long)version);
	}
	if ((rv = kb_build(p, &psrc, m, &msrc, out)) == 0) {
		const cJSON *t =
		    cJSON_GetObjectItemCaseSensitive(rec, "imported_unix_ms");
		(*out)->version = version;
		(*out)->imported_unix_ms =
		    cJSON_IsNumber(t) ? (uint64_t)t->valuedouble : 0;
	}
	cJSON_Delete(rec);
	return rv;
}

int
kb_import(store *s, const char *dir, uint64_t *version, bool *changed)
{
	kb *k = NULL;
	cJSON *rec = NULL, *old = NULL;
	store_batch *b = NULL;
	uint64_t head = 0;
	uint8_t key[9], hv[8];
	char *text = NULL;
	int rv;

	*changed = false;
	*version = 0;
	if ((rv = kb_load_dir(dir, &k)) != 0)
		return rv;
	if ((rv = kb_head(s, &head)) != 0 && rv != KC_ENOENT)
		goto out;
	if (head != 0 && kb_get_record(s, head, &old) == 0) {
		const cJSON *sha =
		    cJSON_GetObjectItemCaseSensitive(old, "sha256");
		if (cJSON_IsString(sha) &&
		    strcmp(sha->valuestring, k->sha256) == 0) {
			*version = head;
			rv = 0;
			goto out;
		}
	}
	if ((rec = cJSON_CreateObject()) == NULL) {
		rv = KC_ENOMEM;
		goto out;
	}
	cJSON_AddNumberToObject(rec, "version", (double)(head + 1));
	cJSON_AddStringToObject(rec, "label", k->label);
	cJSON_AddStringToObject(rec, "sha256", k->sha256);
	cJSON_AddNumberToObject(rec, "imported_unix_ms", (double)kc_now_ms());
	cJSON_AddStringToObject(rec, "source", dir);
	cJSON_AddItemReferenceToObject(
	    rec, "policy", cJSON_GetObjectItemCaseSensitive(k->doc, "policy"));
	cJSON_AddItemReferenceToObject(rec, "methods",
	    cJSON_GetObjectItemCaseSensitive(k->doc, "methods"));
	if ((text = cJSON_PrintUnformatted(rec)) == NULL) {
		rv = KC_ENOMEM;
		goto out;
	}
	kb_ver_key(key, head + 1);
	store_key_u64(hv, head + 1);
	if ((rv = store_batch_new(&b)) != 0 ||
	    (rv = store_batch_put(b, STORE_CF_KNOWLEDGE, key, sizeof(key), text,
	         strlen(text))) != 0 ||
	    (rv = store_batch_put(b, STORE_CF_KNOWLEDGE, kb_head_key,
	         sizeof(kb_head_key) - 1, hv, sizeof(hv))) != 0 ||
	    (rv = store_batch_commit(s, b, true)) != 0)
		goto out;
	*version = head + 1;
	*changed = true;
out:
	store_batch_free(b);
	free(text);
	cJSON_Delete(rec);
	cJSON_Delete(old);
	kb_free(k);
	return rv;
}

int
kb_ensure(store *s, const char *dir, kb **out)
{
	uint64_t v;
	bool changed;
	int rv;

	if ((rv = kb_load(s, 0, out)) != KC_ENOENT)
		return rv;
	if ((rv = kb_import(s, dir ? dir : kb_default_dir(), &v, &changed)) !=
	    0)
		return rv;
	return kb_load(s, v, out);
}

static int
kb_write_json(const char *dir, const char *name, const cJSON *doc)
{
	char path[KC_PATH_MAX];
	char *text = cJSON_Print(doc);
	kc_str s = {0};
	int rv;

	if (text == NULL)
		return KC_ENOMEM;
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if ((rv = kc_str_append(&s, text)) == 0 &&
	    (rv = kc_str_append(&s, "\n")) == 0)
		rv = kc_write_file(path, s.buf, s.len);
	if (rv != 0 && rv != KC_ENOMEM)
		rv = kc_seterr(rv, "knowledge: cannot write %s: %s", path,
		    kc_strerror(rv));
	kc_str_free(&s);
	free(text);
	return rv;
}

int
kb_export(store *s, uint64_t version, const char *dir)
{
	cJSON *rec;
	int rv;

	if (dir == NULL || *dir == '\0')
		return kc_seterr(
		    KC_EINVAL, "knowledge: no folder to export to");
	if ((rv = kb_get_record(s, version, &rec)) != 0)
		return rv;
	if ((rv = kc_mkdirs(dir, 0755)) != 0)
		rv = kc_seterr(rv, "knowledge: cannot create %s", dir);
	else if ((rv = kb_write_json(dir, KB_POLICY_FILE,
	              cJSON_GetObjectItemCaseSensitive(rec, "policy"))) == 0)
		rv = kb_write_json(dir, KB_METHODS_FILE,
		    cJSON_GetObjectItemCaseSensitive(rec, "methods"));
	cJSON_Delete(rec);
	return rv;
}

typedef struct {
	kb_version_info *v;
	size_t n, cap;
} kb_versions_acc;

static int
kb_versions_fn(
    void *arg, const void *key, size_t klen, const void *val, size_t vlen)
{
	kb_versions_acc *acc = arg;
	kb_version_info *vi;
	cJSON *rec;
	const cJSON *x;
	char *text;

	if (klen != 9)
		return 0;
	if (acc->n == acc->cap) {
		size_t cap = acc->cap ? acc->cap * 2 : 8;
		kb_version_info *nv = realloc(acc->v, cap * sizeof(*nv));
		if (nv == NULL)
			return KC_ENOMEM;
		acc->v = nv;
		acc->cap = cap;
	}
	vi = &acc->v[acc->n];
	memset(vi, 0, sizeof(*vi));
	vi->version = store_key_get_u64((const uint8_t *)key + 1);
	if ((text = strndup(val, vlen)) == NULL)
		return KC_ENOMEM;
	rec = cJSON_Parse(text);
	free(text);
	if ((x = cJSON_GetObjectItemCaseSensitive(rec, "label")) &&
	    cJSON_IsString(x))
		kc_strlcpy(vi->label, x->valuestring, sizeof(vi->label));
	if ((x = cJSON_GetObjectItemCaseSensitive(rec, "sha256")) &&
	    cJSON_IsString(x))
		kc_strlcpy(vi->sha256, x->valuestring, sizeof(vi->sha256));
	if ((x = cJSON_GetObjectItemCaseSensitive(rec, "source")) &&
	    cJSON_IsString(x))
		kc_strlcpy(vi->source, x->valuestring, sizeof(vi->source));
	if ((x = cJSON_GetObjectItemCaseSensitive(rec, "imported_unix_ms")) &&
	    cJSON_IsNumber(x))
		vi->imported_unix_ms = (uint64_t)x->valuedouble;
	cJSON_Delete(rec);
	acc->n++;
	return 0;
}

int
kb_versions(store *s, kb_version_info **out, size_t *n)
{
	kb_versions_acc acc = {0};
	char prefix = KB_VER_PREFIX;
	int rv;

	rv = store_scan(
	    s, STORE_CF_KNOWLEDGE, &prefix, 1, NULL, 0, kb_versions_fn, &acc);
	if (rv != 0) {
		free(acc.v);
		return rv;
	}
	*out = acc.v;
	*n = acc.n;
	return 0;
}

/* -------------------------------------------------------------- lookup */

const char *
kb_default_dir(void)
{
	static _Thread_local char dir[KC_PATH_MAX];
	const char *env = getenv("KCLAW_KNOWLEDGE");

	if (env != NULL && *env != '\0')
		return env;
	/* Where it is not, dir still names where it was looked for, so the
	 * import's error says which folder is missing. */
	kc_share_dir("knowledge", dir, sizeof(dir));
	kc_clearerr();
	return dir;
}

const kb_method *
kb_method_find(const kb *k, const char *name)
{
	for (size_t i = 0; i < k->nmethods; i++)
		if (k->methods[i].name != NULL &&
		    strcmp(k->methods[i].name, name) == 0)
			return &k->methods[i];
	return NULL;
}

const kb_class *
kb_class_find(const kb *k, const char *name)
{
	for (size_t i = 0; i < k->nclasses; i++)
		if (k->classes[i].name != NULL &&
		    strcmp(k->classes[i].name, name) == 0)
			return &k->classes[i];
	return NULL;
}

int
kb_method_text(const kb_method *m, int arch_sm, size_t max_bytes, char **out)
{
	kc_str s = {0};
	int rv = 0;

	*out = NULL;
	rv |= kc_str_printf(&s, "%s (%s)\n", m->name, m->title);
	rv |= kc_str_printf(&s, "intent: %s\n", m->intent);
	rv |= kc_str_printf(&s, "applies when: %s\n", m->applies_when);
	rv |= kc_str_printf(&s, "requires: %s\n", m->requires);
	rv |= kc_str_printf(&s, "expected effect: %s\n", m->expected);
	if (arch_sm == 0 || arch_sm >= 90)
		rv |= kc_str_printf(
		    &s, "Hopper (sm_90) cues: %s\n", m->cue_hopper);
	if (arch_sm < 90)
		rv |= kc_str_printf(
		    &s, "Ampere (sm_80/86) cues: %s\n", m->cue_ampere);
	rv |= kc_str_printf(&s, "pitfalls: %s\n", m->pitfalls);
	if (rv != 0) {
		kc_str_free(&s);
		return KC_ENOMEM;
	}
	if (max_bytes > 0 && s.len > max_bytes) {
		/* Keep whole lines where possible: a cut sentence misleads
		 * more than a missing one. */
		static const char more[] = " [...]\n";
		size_t keep =
		    max_bytes > sizeof(more) ? max_bytes - sizeof(more) + 1 : 0;
		size_t cut = keep;
		while (cut > 0 && s.buf[cut - 1] != '\n')
			cut--;
		if (cut < keep / 2)
			cut = keep;
		while (cut > 0 && ((unsigned char)s.buf[cut] & 0xC0) == 0x80)
			cut--;
		s.buf[cut] = '\0';
		s.len = cut;
		if (cut > 0 && s.buf[cut - 1] == '\n')
			s.buf[--s.len] = '\0';
		if (max_bytes >= sizeof(more) - 1 &&
		    kc_str_append(&s, more) != 0) {
			kc_str_free(&s);
			return KC_ENOMEM;
		}
	}
	*out = kc_str_take(&s);
	return *out != NULL ? 0 : KC_ENOMEM;
}
