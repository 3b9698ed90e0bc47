/*
 * expr.c - parser and evaluator of the policy's expression language. See
 * expr.h for the grammar and the meaning of unknown.
 */
#include "expr.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kc_err.h"

typedef enum {
	EXPR_NUM,
	EXPR_IDENT,
	EXPR_NEG,
	EXPR_NOT,
	EXPR_AND,
	EXPR_OR,
	EXPR_ADD,
	EXPR_SUB,
	EXPR_MUL,
	EXPR_DIV,
	EXPR_LT,
	EXPR_LE,
	EXPR_GT,
	EXPR_GE,
	EXPR_EQ,
	EXPR_NE,
	EXPR_CALL,
} expr_op;

typedef enum {
	EXPR_FN_KNOWN,
	EXPR_FN_DEFAULT,
	EXPR_FN_MIN,
	EXPR_FN_MAX,
	EXPR_FN_ABS,
	EXPR_FN_CLAMP,
} expr_fn;

static const struct expr_fn_info {
	const char *name;
	expr_fn fn;
	int min_args, max_args;
} expr_fns[] = {
    {"known", EXPR_FN_KNOWN, 1, 1},
    {"default", EXPR_FN_DEFAULT, 2, 2},
    {"min", EXPR_FN_MIN, 1, 16},
    {"max", EXPR_FN_MAX, 1, 16},
    {"abs", EXPR_FN_ABS, 1, 1},
    {"clamp", EXPR_FN_CLAMP, 3, 3},
};

typedef struct expr_node {
	expr_op op;
	double num;
	char *name;          /* EXPR_IDENT */
	expr_fn fn;          /* EXPR_CALL */
	struct expr_node *a; /* operand, left */
	struct expr_node *b; /* right */
	struct expr_node **args;
	int nargs;
} expr_node;

struct expr {
	expr_node *root;
	char *src;
};

typedef struct {
	const char *src;
	size_t pos;
	char *err;
	size_t errlen;
	bool failed;
} expr_parser;

/* --------------------------------------------------------------- nodes */

static void
expr_node_free(expr_node *n)
{
	if (n == NULL)
		return;
	expr_node_free(n->a);
	expr_node_free(n->b);
	for (int i = 0; i < n->nargs; i++)
		expr_node_free(n->args[i]);
	free(n->args);
	free(n->name);
	free(n);
}

static expr_node *
expr_node_new(expr_parser *p, expr_op op)
{
	expr_node *n = calloc(1, sizeof(*n));

	if (n == NULL && !p->failed) {
		p->failed = true;
		snprintf(p->err, p->errlen, "out of memory");
	}
	if (n != NULL)
		n->op = op;
	return n;
}

/* Records the first error only: later ones are consequences of it. */
static expr_node *
expr_fail(expr_parser *p, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (p->failed)
		return NULL;
	p->failed = true;
	n = snprintf(p->err, p->errlen, "column %zu: ", p->pos + 1);
	if (n >= 0 && (size_t)n < p->errlen) {
		va_start(ap, fmt);
		vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
		va_end(ap);
	}
	return NULL;
}

/* ------------------------------------------------------------- lexing */

static void
expr_skip_space(expr_parser *p)
{
	while (p->src[p->pos] != '\0' && isspace((unsigned char)p->src[p->pos]))
		p->pos++;
}

/* Consumes the operator tok when it comes next (a word operator only
 * when not followed by an identifier character). */
static bool
expr_accept(expr_parser *p, const char *tok)
{
	size_t n = strlen(tok);
	char after;

	expr_skip_space(p);
	if (strncmp(p->src + p->pos, tok, n) != 0)
		return false;
	after = p->src[p->pos + n];
	if (isalpha((unsigned char)tok[0]) &&
	    (isalnum((unsigned char)after) || after == '_'))
		return false;
	/* "<" must not take the first half of "<=", nor "!" of "!=". */
	if (n == 1 && (tok[0] == '<' || tok[0] == '>' || tok[0] == '!') &&
	    after == '=')
		return false;
	p->pos += n;
	return true;
}

static bool
expr_is_ident_start(char c)
{
	return isalpha((unsigned char)c) || c == '_';
}

static bool
expr_is_ident_char(char c)
{
	return isalnum((unsigned char)c) || c == '_';
}

static const char *
expr_describe_next(expr_parser *p, char *buf, size_t len)
{
	expr_skip_space(p);
	if (p->src[p->pos] == '\0')
		return "the end of the expression";
	snprintf(buf, len, "'%.12s'", p->src + p->pos);
	return buf;
}

/* ------------------------------------------------------------ parsing */

static expr_node *expr_parse_or(expr_parser *p, int depth);

static expr_node *
expr_parse_number(expr_parser *p)
{
	size_t start = p->pos, n;
	char buf[64];
	expr_node *node;
	double v;

	while (isdigit((unsigned char)p->src[p->pos]))
		p->pos++;
	if (p->src[p->pos] == '.') {
		p->pos++;
		while (isdigit((unsigned char)p->src[p->pos]))
			p->pos++;
	}
	if (p->src[p->pos] == 'e' || p->src[p->pos] == 'E') {
		size_t e = p->pos + 1;
		if (p->src[e] == '+' || p->src[e] == '-')
			e++;
		if (isdigit((unsigned char)p->src[e])) {
			while (isdigit((unsigned char)p->src[e]))
				e++;
			p->pos = e;
		}
	}
	n = p->pos - start;
	if (n >= sizeof(buf) || (n == 1 && p->src[start] == '.')) {
		p->pos = start;
		return expr_fail(p, "malformed number");
	}
	if (expr_is_ident_char(p->src[p->pos]) || p->src[p->pos] == '.') {
		return expr_fail(p, "malformed number '%.*s%c'", (int)n,
		    p->src + start, p->src[p->pos]);
	}
	memcpy(buf, p->src + start, n);
	buf[n] = '\0';
	v = strtod(buf, NULL);
	if (!isfinite(v)) {
		p->pos = start;
		return expr_fail(p, "number '%s' is out of range", buf);
	}
	if ((node = expr_node_new(p, EXPR_NUM)) != NULL)
		node->num = v;
	return node;
}

static expr_node *
expr_parse_call(expr_parser *p, const char *name, size_t name_pos, int depth)
{
	const struct expr_fn_info *info = NULL;
	expr_node *node, *arg;
	char what[32];

	for (size_t i = 0; i < sizeof(expr_fns) / sizeof(expr_fns[0]); i++)
		if (strcmp(expr_fns[i].name, name) == 0)
			info = &expr_fns[i];
	if (info == NULL) {
		p->pos = name_pos;
		return expr_fail(p,
		    "unknown function '%s' (known: known, default, min, max, "
		    "abs, clamp)",
		    name);
	}
	if ((node = expr_node_new(p, EXPR_CALL)) == NULL)
		return NULL;
	node->fn = info->fn;
	if ((node->args = calloc(
	         (size_t)info->max_args, sizeof(*node->args))) == NULL) {
		expr_node_free(node);
		return expr_fail(p, "out of memory");
	}
	if (!expr_accept(p, ")")) {
		do {
			if (node->nargs == info->max_args) {
				expr_node_free(node);
				return expr_fail(p,
				    "too many arguments for '%s' (at most %d)",
				    name, info->max_args);
			}
			if ((arg = expr_parse_or(p, depth + 1)) == NULL) {
				expr_node_free(node);
				return NULL;
			}
			node->args[node->nargs++] = arg;
		} while (expr_accept(p, ","));
		if (!expr_accept(p, ")")) {
			expr_node_free(node);
			return expr_fail(p,
			    "expected ',' or ')' in the arguments of '%s', "
			    "found %s",
			    name, expr_describe_next(p, what, sizeof(what)));
		}
	}
	if (node->nargs < info->min_args) {
		int nargs = node->nargs;
		expr_node_free(node);
		p->pos = name_pos;
		return expr_fail(p, "'%s' takes %s%d argument%s, not %d", name,
		    info->min_args == info->max_args ? "" : "at least ",
		    info->min_args, info->min_args == 1 ? "" : "s", nargs);
	}
	return node;
}

static expr_node *
expr_parse_primary(expr_parser *p, int depth)
{
	expr_node *node;
	char what[32];
	char c;

	if (depth > EXPR_MAX_DEPTH)
		return expr_fail(p, "expression nested too deeply (limit %d)",
		    EXPR_MAX_DEPTH);
	expr_skip_space(p);
	c = p->src[p->pos];
	if (isdigit((unsigned char)c) || c == '.')
		return expr_parse_number(p);
	if (expr_is_ident_start(c)) {
		size_t start = p->pos, n;
		char *name;

		while (expr_is_ident_char(p->src[p->pos]))
			p->pos++;
		n = p->pos - start;
		if ((name = strndup(p->src + start, n)) == NULL)
			return expr_fail(p, "out of memory");
		if (strcmp(name, "true") == 0 || strcmp(name, "false") == 0) {
			node = expr_node_new(p, EXPR_NUM);
			if (node != NULL)
				node->num = name[0] == 't' ? 1.0 : 0.0;
			free(name);
			return node;
		}
		if (strcmp(name, "and") == 0 || strcmp(name, "or") == 0 ||
		    strcmp(name, "not") == 0) {
			free(name);
			p->pos = start;
			return expr_fail(p, "expected a value, found operator");
		}
		if (expr_accept(p, "(")) {
			node = expr_parse_call(p, name, start, depth);
			free(name);
			return node;
		}
		if ((node = expr_node_new(p, EXPR_IDENT)) == NULL) {
			free(name);
			return NULL;
		}
		node->name = name;
		return node;
	}
	if (expr_accept(p, "(")) {
		if ((node = expr_parse_or(p, depth + 1)) == NULL)
			return NULL;
		if (!expr_accept(p, ")")) {
			expr_node_free(node);
			return expr_fail(p, "expected ')', found %s",
			    expr_describe_next(p, what, sizeof(what)));
		}
		return node;
	}
	return expr_fail(p, "expected a number, a name or '(', found %s",
	    expr_describe_next(p, what, sizeof(what)));
}

static expr_node *
expr_parse_unary(expr_parser *p, int depth)
{
	expr_node *node, *a;

	if (depth > EXPR_MAX_DEPTH)
		return expr_fail(p, "expression nested too deeply (limit %d)",
		    EXPR_MAX_DEPTH);
	if (expr_accept(p, "-")) {
		if ((a = expr_parse_unary(p, depth + 1)) == NULL)
			return NULL;
		if ((node = expr_node_new(p, EXPR_NEG)) == NULL) {
			expr_node_free(a);
			return NULL;
		}
		node->a = a;
		return node;
	}
	return expr_parse_primary(p, depth);
}

/* One left-associative level of binary operators. */
typedef expr_node *(*expr_level_fn)(expr_parser *p, int depth);

static expr_node *
expr_parse_binary(expr_parser *p, int depth, expr_level_fn next,
    const char *const *toks, const expr_op *ops, int ntoks, bool chain)
{
	expr_node *left, *right, *node;
	int i;

	if ((left = next(p, depth)) == NULL)
		return NULL;
	for (;;) {
		for (i = 0; i < ntoks; i++)
			if (expr_accept(p, toks[i]))
				break;
		if (i == ntoks)
			return left;
		if ((right = next(p, depth)) == NULL) {
			expr_node_free(left);
			return NULL;
		}
		if ((node = expr_node_new(p, ops[i])) == NULL) {
			expr_node_free(left);
			expr_node_free(right);
			return NULL;
		}
		node->a = left;
		node->b = right;
		left = node;
		if (!chain) {
			/* a < b < c reads as maths but would compare a
			 * boolean with c: refuse it. */
			for (i = 0; i < ntoks; i++) {
				size_t save = p->pos;
				if (expr_accept(p, toks[i])) {
					p->pos = save;
					expr_node_free(left);
					return expr_fail(p,
					    "comparisons do not chain; write "
					    "a < b && b < c");
				}
			}
			return left;
		}
	}
}

static expr_node *
expr_parse_product(expr_parser *p, int depth)
{
	static const char *const toks[] = {"*", "/"};
	static const expr_op ops[] = {EXPR_MUL, EXPR_DIV};

	return expr_parse_binary(
	    p, depth, expr_parse_unary, toks, ops, 2, true);
}

static expr_node *
expr_parse_sum(expr_parser *p, int depth)
{
	static const char *const toks[] = {"+", "-"};
	static const expr_op ops[] = {EXPR_ADD, EXPR_SUB};

	return expr_parse_binary(
	    p, depth, expr_parse_product, toks, ops, 2, true);
}

static expr_node *
expr_parse_cmp(expr_parser *p, int depth)
{
	/* Two-character operators first: expr_accept is greedy per token. */
	static const char *const toks[] = {"<=", ">=", "==", "!=", "<", ">"};
	static const expr_op ops[] = {
	    EXPR_LE, EXPR_GE, EXPR_EQ, EXPR_NE, EXPR_LT, EXPR_GT};

	return expr_parse_binary(p, depth, expr_parse_sum, toks, ops, 6, false);
}

static expr_node *
expr_parse_not(expr_parser *p, int depth)
{
	expr_node *node, *a;

	if (depth > EXPR_MAX_DEPTH)
		return expr_fail(p, "expression nested too deeply (limit %d)",
		    EXPR_MAX_DEPTH);
	if (expr_accept(p, "!") || expr_accept(p, "not")) {
		if ((a = expr_parse_not(p, depth + 1)) == NULL)
			return NULL;
		if ((node = expr_node_new(p, EXPR_NOT)) == NULL) {
			expr_node_free(a);
			return NULL;
		}
		node->a = a;
		return node;
	}
	return expr_parse_cmp(p, depth);
}

static expr_node *
expr_parse_and(expr_parser *p, int depth)
{
	static const char *const toks[] = {"&&", "and"};
	static const expr_op ops[] = {EXPR_AND, EXPR_AND};

	return expr_parse_binary(p, depth, expr_parse_not, toks, ops, 2, true);
}

static expr_node *
expr_parse_or(expr_parser *p, int depth)
{
	static const char *const toks[] = {"||", "or"};
	static const expr_op ops[] = {EXPR_OR, EXPR_OR};

	if (depth > EXPR_MAX_DEPTH)
		return expr_fail(p, "expression nested too deeply (limit %d)",
		    EXPR_MAX_DEPTH);
	return expr_parse_binary(p, depth, expr_parse_and, toks, ops, 2, true);
}

int
expr_parse(const char *src, expr **out, char *err, size_t errlen)
{
	char dummy[8];
	char what[32];
	expr_parser p = {.src = src, .err = err, .errlen = errlen};
	expr_node *root;
	expr *e;

	if (err == NULL || errlen == 0) {
		p.err = dummy;
		p.errlen = sizeof(dummy);
	}
	p.err[0] = '\0';
	*out = NULL;
	if (src == NULL) {
		snprintf(p.err, p.errlen, "no expression");
		return KC_EINVAL;
	}
	if (strlen(src) > EXPR_MAX_LEN) {
		snprintf(p.err, p.errlen,
		    "expression is %zu bytes long (limit %d)", strlen(src),
		    EXPR_MAX_LEN);
		return KC_EINVAL;
	}
	for (const char *c = src; *c; c++)
		if ((unsigned char)*c < 0x20 && !isspace((unsigned char)*c)) {
			snprintf(p.err, p.errlen,
			    "column %zu: control character 0x%02x",
			    (size_t)(c - src) + 1, (unsigned)*c);
			return KC_EINVAL;
		}
	expr_skip_space(&p);
	if (src[p.pos] == '\0') {
		snprintf(p.err, p.errlen, "empty expression");
		return KC_EINVAL;
	}
	if ((root = expr_parse_or(&p, 0)) == NULL)
		return KC_EINVAL;
	expr_skip_space(&p);
	if (src[p.pos] != '\0') {
		expr_node_free(root);
		expr_fail(&p, "unexpected %s after a complete expression",
		    expr_describe_next(&p, what, sizeof(what)));
		return KC_EINVAL;
	}
	if ((e = calloc(1, sizeof(*e))) == NULL ||
	    (e->src = strdup(src)) == NULL) {
		free(e);
		expr_node_free(root);
		snprintf(p.err, p.errlen, "out of memory");
		return KC_ENOMEM;
	}
	e->root = root;
	*out = e;
	return 0;
}

void
expr_free(expr *e)
{
	if (e == NULL)
		return;
	expr_node_free(e->root);
	free(e->src);
	free(e);
}

const char *
expr_source(const expr *e)
{
	return e != NULL ? e->src : "";
}

/* --------------------------------------------------------- evaluation */

static const expr_value expr_unknown = {.known = false, .v = 0.0};

static expr_value
expr_num(double v)
{
	if (!isfinite(v))
		return expr_unknown;
	return (expr_value){.known = true, .v = v};
}

static int expr_eval_node(
    const expr_node *n, expr_lookup_fn lookup, void *arg, expr_value *out);

static int
expr_eval_call(
    const expr_node *n, expr_lookup_fn lookup, void *arg, expr_value *out)
{
	expr_value v[16];
	int rv;

	for (int i = 0; i < n->nargs; i++)
		if ((rv = expr_eval_node(n->args[i], lookup, arg, &v[i])) != 0)
			return rv;
	switch (n->fn) {
	case EXPR_FN_KNOWN: *out = expr_num(v[0].known ? 1.0 : 0.0); return 0;
	case EXPR_FN_DEFAULT: *out = v[0].known ? v[0] : v[1]; return 0;
	default: break;
	}
	/* The remaining functions are unknown when any argument is. */
	for (int i = 0; i < n->nargs; i++)
		if (!v[i].known) {
			*out = expr_unknown;
			return 0;
		}
	switch (n->fn) {
	case EXPR_FN_MIN:
	case EXPR_FN_MAX: {
		double r = v[0].v;
		for (int i = 1; i < n->nargs; i++)
			r = n->fn == EXPR_FN_MIN ? fmin(r, v[i].v)
			                         : fmax(r, v[i].v);
		*out = expr_num(r);
		return 0;
	}
	case EXPR_FN_ABS: *out = expr_num(fabs(v[0].v)); return 0;
	case EXPR_FN_CLAMP:
		*out = expr_num(fmin(fmax(v[0].v, v[1].v), v[2].v));
		return 0;
	default: break;
	}
	return kc_seterr(KC_EINTERNAL, "expr: unhandled function");
}

static int
expr_eval_node(
    const expr_node *n, expr_lookup_fn lookup, void *arg, expr_value *out)
{
	expr_value a, b;
	int rv;

	switch (n->op) {
	case EXPR_NUM: *out = expr_num(n->num); return 0;
	case EXPR_IDENT:
		*out = expr_unknown;
		if (lookup == NULL)
			return kc_seterr(
			    KC_ENOENT, "unknown identifier '%s'", n->name);
		if ((rv = lookup(arg, n->name, out)) == KC_ENOENT)
			return kc_seterr(
			    KC_ENOENT, "unknown identifier '%s'", n->name);
		if (rv == 0 && out->known && !isfinite(out->v))
			*out = expr_unknown;
		return rv;
	case EXPR_CALL: return expr_eval_call(n, lookup, arg, out);
	case EXPR_NEG:
	case EXPR_NOT:
		if ((rv = expr_eval_node(n->a, lookup, arg, &a)) != 0)
			return rv;
		if (!a.known)
			*out = expr_unknown;
		else if (n->op == EXPR_NEG)
			*out = expr_num(-a.v);
		else
			*out = expr_num(a.v == 0.0 ? 1.0 : 0.0);
		return 0;
	case EXPR_AND:
	case EXPR_OR: {
		/* Kleene logic: a known deciding side wins over unknown. */
		bool is_and = n->op == EXPR_AND;
		if ((rv = expr_eval_node(n->a, lookup, arg, &a)) != 0)
			return rv;
		if (a.known && (a.v != 0.0) != is_and) {
			*out = expr_num(is_and ? 0.0 : 1.0);
			return 0;
		}
		if ((rv = expr_eval_node(n->b, lookup, arg, &b)) != 0)
			return rv;
		if (b.known && (b.v != 0.0) != is_and)
			*out = expr_num(is_and ? 0.0 : 1.0);
		else if (!a.known || !b.known)
			*out = expr_unknown;
		else
			*out = expr_num(is_and ? 1.0 : 0.0);
		return 0;
	}
	default: break;
	}
	if ((rv = expr_eval_node(n->a, lookup, arg, &a)) != 0 ||
	    (rv = expr_eval_node(n->b, lookup, arg, &b)) != 0)
		return rv;
	if (!a.known || !b.known) {
		*out = expr_unknown;
		return 0;
	}
	switch (n->op) {
	case EXPR_ADD: *out = expr_num(a.v + b.v); break;
	case EXPR_SUB: *out = expr_num(a.v - b.v); break;
	case EXPR_MUL: *out = expr_num(a.v * b.v); break;
	case EXPR_DIV:
		*out = b.v == 0.0 ? expr_unknown : expr_num(a.v / b.v);
		break;
	case EXPR_LT: *out = expr_num(a.v < b.v); break;
	case EXPR_LE: *out = expr_num(a.v <= b.v); break;
	case EXPR_GT: *out = expr_num(a.v > b.v); break;
	case EXPR_GE: *out = expr_num(a.v >= b.v); break;
	case EXPR_EQ: *out = expr_num(a.v == b.v); break;
	case EXPR_NE: *out = expr_num(a.v != b.v); break;
	default: return kc_seterr(KC_EINTERNAL, "expr: unhandled operator");
	}
	return 0;
}

int
expr_eval(const expr *e, expr_lookup_fn lookup, void *arg, expr_value *out)
{
	*out = expr_unknown;
	if (e == NULL || e->root == NULL)
		return kc_seterr(KC_EINVAL, "expr: no expression");
	return expr_eval_node(e->root, lookup, arg, out);
}

static int
expr_idents_node(const expr_node *n, expr_ident_fn fn, void *arg)
{
	int rv = 0;

	if (n == NULL)
		return 0;
	if (n->op == EXPR_IDENT)
		return fn(arg, n->name);
	if ((rv = expr_idents_node(n->a, fn, arg)) != 0 ||
	    (rv = expr_idents_node(n->b, fn, arg)) != 0)
		return rv;
	for (int i = 0; i < n->nargs; i++)
		if ((rv = expr_idents_node(n->args[i], fn, arg)) != 0)
			return rv;
	return 0;
}

int
expr_idents(const expr *e, expr_ident_fn fn, void *arg)
{
	return e != NULL ? expr_idents_node(e->root, fn, arg) : 0;
}

int
expr_eval_str(const char *src, expr_lookup_fn lookup, void *arg,
    expr_value *out, char *err, size_t errlen)
{
	expr *e;
	int rv;

	*out = expr_unknown;
	if ((rv = expr_parse(src, &e, err, errlen)) != 0)
		return rv;
	rv = expr_eval(e, lookup, arg, out);
	expr_free(e);
	return rv;
}

void
expr_value_str(expr_value v, bool boolean, char *buf, size_t len)
{
	if (!v.known)
		snprintf(buf, len, "unknown");
	else if (boolean)
		snprintf(buf, len, "%s", v.v != 0.0 ? "true" : "false");
	else
		snprintf(buf, len, "%g", v.v);
}
