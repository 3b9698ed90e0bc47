#include "bench.h"

#include <stdio.h>
#include <string.h>

#include "kc_util.h"

void
bench_init(bench_table *t, int argc, char **argv)
{
	memset(t, 0, sizeof(*t));
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "--json") == 0)
			t->json = true;
}

void
bench_row(bench_table *t, const char *component, const char *name, double value,
    const char *unit, const char *target, int met)
{
	if (t->n >= BENCH_MAX_ROWS)
		return;
	struct bench_row *r = &t->rows[t->n++];
	kc_strlcpy(r->component, component, sizeof(r->component));
	kc_strlcpy(r->name, name, sizeof(r->name));
	kc_strlcpy(r->unit, unit, sizeof(r->unit));
	kc_strlcpy(r->target, target, sizeof(r->target));
	r->value = value;
	r->met = met;
	if (!t->json)
		fprintf(stderr, "  %s: %.4g %s\n", name, value, unit);
}

void
bench_print(const bench_table *t)
{
	for (int i = 0; i < t->n; i++) {
		const struct bench_row *r = &t->rows[i];
		if (t->json)
			printf(
			    "{\"component\":\"%s\",\"name\":\"%s\",\"value\":"
			    "%.6g,\"unit\":\"%s\",\"target\":\"%s\",\"met\":"
			    "%s}\n",
			    r->component, r->name, r->value, r->unit, r->target,
			    r->met < 0   ? "null"
			        : r->met ? "true"
			                 : "false");
		else
			printf("%-8s %-44s %12.4g %-9s %-18s %s\n",
			    r->component, r->name, r->value, r->unit, r->target,
			    r->met < 0   ? ""
			        : r->met ? "met"
			                 : "MISSED");
	}
}
