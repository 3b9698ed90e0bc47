/*
 * bench.h - one table of figures for every benchmark program: component,
 * figure, value, unit, target and whether it is met. `--json` prints JSON
 * lines instead, which tools/bench-all.sh gathers into one table.
 */
#ifndef KC_BENCH_H
#define KC_BENCH_H

#include <stdbool.h>

#define BENCH_MAX_ROWS 64

typedef struct {
	bool json;
	int n;
	struct bench_row {
		char component[32];
		char name[128];
		double value;
		char unit[24];
		char target[48];
		int met; /* 1 met, 0 missed, -1 no target */
	} rows[BENCH_MAX_ROWS];
} bench_table;

void bench_init(bench_table *t, int argc, char **argv);
void bench_row(bench_table *t, const char *component, const char *name,
    double value, const char *unit, const char *target, int met);
void bench_print(const bench_table *t);

#endif
