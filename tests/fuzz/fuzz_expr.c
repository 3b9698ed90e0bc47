/* fuzz_expr.c - expressions come from knowledge files: parse and evaluate
 * anything without crashing, recursing without bound or hanging. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "expr.h"
#include "fuzz_task.h"
#include "kc_err.h"

static int
fuzz_lookup(void *arg, const char *name, expr_value *val)
{
	(void)arg;
	if (name[0] == 'u') /* names starting with u are declared unknown */
		*val = (expr_value){.known = false};
	else if (name[0] == 'z')
		return KC_ENOENT;
	else
		*val =
		    (expr_value){.known = true, .v = (double)strlen(name) - 3};
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *src = fuzz_text(data, size), err[256];
	expr *e;
	expr_value v;

	if (src == NULL)
		return 0;
	if (expr_parse(src, &e, err, sizeof(err)) == 0) {
		(void)expr_eval(e, fuzz_lookup, NULL, &v);
		expr_free(e);
	}
	free(src);
	return 0;
}
