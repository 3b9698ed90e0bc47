/*
 * bench_store.c - figures for the store: synced atomic batches (what every
 * state transition costs), unsynced puts, point reads and prefix scans.
 * `kclaw-bench-store [--json]`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "kc_err.h"
#include "kc_util.h"
#include "store.h"

static int
count_fn(void *arg, const void *k, size_t kl, const void *v, size_t vl)
{
	(void)k, (void)kl, (void)v, (void)vl;
	(*(long *)arg)++;
	return 0;
}

int
main(int argc, char **argv)
{
	char dir[] = "/tmp/kc-bench-store-XXXXXX", cmd[128];
	char val[600];
	uint8_t key[16];
	bench_table t;
	store *s;

	bench_init(&t, argc, argv);
	if (mkdtemp(dir) == NULL || store_open(&s, dir) != 0) {
		fprintf(stderr, "bench_store: %s\n", kc_lasterr());
		return 1;
	}
	memset(val, 'v', sizeof(val));

	/* A transition: state + short-term record + event in one synced
	 * batch over three column families. */
	int n = 2000;
	uint64_t t0 = kc_mono_ns();
	for (int i = 0; i < n; i++) {
		store_batch *b;
		store_key_u64(key, (uint64_t)i);
		if (store_batch_new(&b) != 0 ||
		    store_batch_put(b, STORE_CF_TASKS, key, 8, val, 400) != 0 ||
		    store_batch_put(b, STORE_CF_SHORT_TERM, key, 8, val, 300) !=
		        0 ||
		    store_batch_put(b, STORE_CF_EVENTS, key, 8, val, 120) !=
		        0 ||
		    store_batch_commit(s, b, true) != 0) {
			fprintf(stderr, "bench_store: %s\n", kc_lasterr());
			return 1;
		}
		store_batch_free(b);
	}
	double secs = (double)(kc_mono_ns() - t0) / 1e9;
	bench_row(&t, "store", "synced 3-family batches (a transition)",
	    n / secs, "/s", ">= 500/s", n / secs >= 500);

	n = 50000;
	t0 = kc_mono_ns();
	for (int i = 0; i < n; i++) {
		store_key_u64(key, (uint64_t)i);
		store_key_u64(key + 8, 7);
		store_put(
		    s, STORE_CF_CANDIDATES, key, 16, val, sizeof(val), false);
	}
	secs = (double)(kc_mono_ns() - t0) / 1e9;
	bench_row(&t, "store", "unsynced puts (600 B)", n / secs, "/s", "", -1);

	t0 = kc_mono_ns();
	for (int i = 0; i < n; i++) {
		void *v;
		size_t vl;
		store_key_u64(key, (uint64_t)(i * 7919 % n));
		store_key_u64(key + 8, 7);
		if (store_get(s, STORE_CF_CANDIDATES, key, 16, &v, &vl) == 0)
			free(v);
	}
	secs = (double)(kc_mono_ns() - t0) / 1e9;
	bench_row(&t, "store", "point reads", n / secs, "/s", ">= 100000/s",
	    n / secs >= 100000);

	long cnt = 0;
	t0 = kc_mono_ns();
	store_scan(s, STORE_CF_CANDIDATES, NULL, 0, NULL, 0, count_fn, &cnt);
	secs = (double)(kc_mono_ns() - t0) / 1e9;
	bench_row(&t, "store", "prefix scan", cnt / secs, "records/s", "", -1);
	store_close(s);

	t0 = kc_mono_ns();
	if (store_open(&s, dir) != 0)
		return 1;
	bench_row(&t, "store", "reopen after writes",
	    (double)(kc_mono_ns() - t0) / 1e6, "ms", "< 1000 ms",
	    (double)(kc_mono_ns() - t0) / 1e6 < 1000);
	store_close(s);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		return 1;
	bench_print(&t);
	return 0;
}
