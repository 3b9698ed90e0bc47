/*
 * blob_fetch.c - kc-blob-fetch: fetches blobs by hash with the Blob rpc
 * into this home's cache, as a sandbox does before an evaluation, and
 * prints the throughput. The multi-host test uses it for the refusal of a
 * wrong token across hosts, the benchmark (tests/fleet/bench.sh) for MiB/s.
 *
 *   kc-blob-fetch [--home DIR] [--work-url URL] [--fresh] HASH...
 *
 * --fresh removes each blob from the cache first (so it is fetched).
 * Prints "fetched N bytes in S s: R MiB/s". Exit 0, 1 on a failure (the
 * message on stderr), 2 on bad usage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "blobcache.h"
#include "kc_config.h"
#include "kc_err.h"
#include "kc_util.h"
#include "worker.h"

int
main(int argc, char **argv)
{
	const char *home = NULL, *url = NULL;
	bool fresh = false;
	kc_config cfg;
	kc_blob_cache c;
	kc_worker *w;
	char path[KC_PATH_MAX + 80];
	uint64_t t0;
	double s;
	int i, first = 0;

	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--home") == 0 && i + 1 < argc)
			home = argv[++i];
		else if (strcmp(argv[i], "--work-url") == 0 && i + 1 < argc)
			url = argv[++i];
		else if (strcmp(argv[i], "--fresh") == 0)
			fresh = true;
		else if (argv[i][0] == '-') {
			fprintf(stderr,
			    "usage: kc-blob-fetch [--home DIR] [--work-url "
			    "URL] "
			    "[--fresh] HASH...\n");
			return 2;
		} else {
			first = i;
			break;
		}
	}
	if (first == 0) {
		fprintf(stderr, "kc-blob-fetch: name at least one blob hash\n");
		return 2;
	}
	if (kc_config_load(&cfg, home) != 0 ||
	    kc_blob_cache_init(&c, &cfg) != 0 ||
	    kc_worker_open(&w, url ? url : cfg.work_url, KCLAW__ROLE__SANDBOX,
	        0, NULL, cfg.token) != 0) {
		fprintf(stderr, "kc-blob-fetch: %s\n", kc_lasterr());
		return 1;
	}
	t0 = kc_mono_ns();
	for (i = first; i < argc; i++) {
		if (fresh) {
			snprintf(path, sizeof(path), "%s/%s", c.dir, argv[i]);
			unlink(path);
		}
		if (kc_blob_get(&c, w, argv[i], NULL, 0, path, sizeof(path)) !=
		    0) {
			fprintf(stderr, "kc-blob-fetch: %s\n", kc_lasterr());
			kc_worker_close(w);
			return 1;
		}
	}
	s = (double)(kc_mono_ns() - t0) / 1e9;
	printf("fetched %llu bytes in %.3f s: %.1f MiB/s (%llu blobs, %llu "
	       "hits)\n",
	    (unsigned long long)c.fetched_bytes, s,
	    s > 0 ? (double)c.fetched_bytes / 1048576.0 / s : 0,
	    (unsigned long long)c.fetched_blobs, (unsigned long long)c.hits);
	kc_worker_close(w);
	return 0;
}
