/*
 * tunables.h - a candidate's declared parameters (docs/plan.md
 * "Tunables"), searched by the sandbox without asking the model again.
 *
 * plan.json may name integer parameters with their candidate values:
 *
 *   {"tunables": {"BLOCK": [128, 256, 512], "UNROLL": [1, 2, 4]},
 *    "steps": [{"kernel": "k", "grid": "(1048576 + $BLOCK - 1) / $BLOCK",
 *               "block": "$BLOCK", "args": ["x", {"i32": "$UNROLL"}]}]}
 *
 * Every configuration (the product of the lists, at most
 * KC_TUNE_MAX_CONFIGS) becomes an ordinary candidate: the source gets a
 * `#define NAME value` per parameter, and every string in the plan that
 * names one ("$BLOCK", or an integer expression of + - * / % and
 * parentheses over them) becomes its integer value. The first value of each
 * list is the candidate's default.
 */
#ifndef KC_TUNABLES_H
#define KC_TUNABLES_H

#include <stddef.h>

#define KC_TUNE_MAX_PARAMS 8
#define KC_TUNE_MAX_VALUES 16
#define KC_TUNE_MAX_CONFIGS 32

typedef struct {
	char config[256]; /* "BLOCK=256 UNROLL=2" */
	char *source;     /* malloc'd: the defines, then the source */
	char *plan_json;  /* malloc'd: the plan without "tunables" */
} kc_tune_config;

/*
 * Expands plan_json's tunables into *configs (malloc'd, *n of them; free
 * with kc_tune_free). Returns 0 with *n = 0 when the plan declares none,
 * 0 with the configurations, or KC_EINVAL with a message naming what is
 * wrong (a name that is not an identifier, an empty or non-integer list,
 * too many configurations, an expression that does not evaluate).
 */
int kc_tune_expand(const char *source, const char *plan_json,
    kc_tune_config **configs, size_t *n);
void kc_tune_free(kc_tune_config *configs, size_t n);

/*
 * Evaluates an integer expression of + - * / % and parentheses over
 * numbers and $NAMES (vals[i] for names[i]). KC_EINVAL on a syntax error,
 * an unknown name or a division by zero.
 */
int kc_tune_eval(const char *expr, const char *const *names,
    const long long *vals, size_t nnames, long long *out);

#endif
