/*
 * expr.h - the small, safe expression language of the decision policy
 * (DESIGN.md "Memories"; docs/memory.md "Expressions").
 *
 * Expressions are parsed into a tree once (at import) and evaluated many
 * times in C: no shell, no eval, no loops, no side effects, bounded size and
 * depth. Values are numbers (booleans are 1 and 0) or *unknown*: a field the
 * evidence lacks, or an undefined operation such as division by zero.
 * Unknown propagates through arithmetic and comparisons; `&&` and `||`
 * follow Kleene's three-valued logic (false && unknown is false, true ||
 * unknown is true), and known(x) / default(x, v) test and replace it, so
 * every predicate says explicitly what a missing field means.
 *
 *   expr    := or
 *   or      := and { ("||" | "or") and }
 *   and     := not { ("&&" | "and") not }
 *   not     := ("!" | "not") not | cmp
 *   cmp     := sum [ ("<" | "<=" | ">" | ">=" | "==" | "!=") sum ]
 *   sum     := product { ("+" | "-") product }
 *   product := unary { ("*" | "/") unary }
 *   unary   := "-" unary | primary
 *   primary := NUMBER | "true" | "false" | IDENT
 *            | IDENT "(" [ expr { "," expr } ] ")" | "(" expr ")"
 *
 * Functions: known(x), default(x, v), min(a, b, ...), max(a, b, ...),
 * abs(x), clamp(x, lo, hi).
 */
#ifndef KC_EXPR_H
#define KC_EXPR_H

#include <stdbool.h>
#include <stddef.h>

#define EXPR_MAX_LEN 2048 /* bytes of source */
#define EXPR_MAX_DEPTH 48 /* nesting of the tree */

typedef struct expr expr;

typedef struct {
	bool known;
	double v;
} expr_value;

/*
 * Parses src. On failure returns KC_EINVAL and writes into err (size
 * errlen) what is wrong and at which column ("column 7: expected ')' after
 * arguments of 'max'"). On success *out is owned by the caller (expr_free).
 */
int expr_parse(const char *src, expr **out, char *err, size_t errlen);
void expr_free(expr *e);

/*
 * Resolves an identifier to a value during evaluation: returns 0 and fills
 * *val (known or not), or KC_ENOENT when the name is not declared at all.
 */
typedef int (*expr_lookup_fn)(void *arg, const char *name, expr_value *val);

/*
 * Evaluates e. Returns KC_ENOENT (with kc_seterr naming the identifier)
 * when lookup does not know an identifier; never fails otherwise: undefined
 * arithmetic (x / 0, overflow to infinity or NaN) yields unknown.
 */
int expr_eval(const expr *e, expr_lookup_fn lookup, void *arg, expr_value *out);

/* Calls fn for every identifier e reads, in source order (duplicates
 * included). fn returns 0 to go on or an error that stops the walk. */
typedef int (*expr_ident_fn)(void *arg, const char *name);
int expr_idents(const expr *e, expr_ident_fn fn, void *arg);

/* The source text e was parsed from. */
const char *expr_source(const expr *e);

/* Convenience for tests and one-off checks: parse and evaluate. */
int expr_eval_str(const char *src, expr_lookup_fn lookup, void *arg,
    expr_value *out, char *err, size_t errlen);

/* "true", "false", "unknown" for a boolean context; the number otherwise. */
void expr_value_str(expr_value v, bool boolean, char *buf, size_t len);

/* Truth of a value in a boolean context: known and non-zero. */
static inline bool
expr_is_true(expr_value v)
{
	return v.known && v.v != 0.0;
}

#endif
