/*
 * blob_rpc_test.c - the Blob rpc against the real kclawd: a worker with
 * its own home fetches a task's tensors by hash in chunks, verifies and
 * caches them under a size bound with LRU eviction; the server refuses a
 * wrong token, a malformed hash, an unknown blob and an offset past the
 * end, caps a chunk, and a corrupted file on the orchestrator's side is
 * never accepted by the worker.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>

#include "blobcache.h"
#include "blobput.h"
/* The harness's API helpers send no token; this test has its own. */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "harness.h"
#include "worker.h"

#define TOKEN "blob-rpc-secret"

/* Submits a task whose input and expected output are x and y, uploaded
 * first (PutBlob: the API takes no 9 MiB Submit); waits until the task has
 * left IMPORTING. */
static void
t_submit(
    const char *name, const uint8_t *x, size_t nx, const uint8_t *y, size_t ny)
{
	Kclaw__TaskSpec *spec = h_spec(name, "seeds=ok:1.0", 1);
	Kclaw__SubmitRequest req = KCLAW__SUBMIT_REQUEST__INIT;
	Kclaw__SubmitResponse *resp;
	char id[64], hx[65], hy[65];

	KT_OK(kc_blob_put_bytes(h_api, TOKEN, x, nx, hx, NULL));
	KT_OK(kc_blob_put_bytes(h_api, TOKEN, y, ny, hy, NULL));
	spec->reference->sets[0]->inputs[0]->data.len = 0;
	spec->reference->sets[0]->inputs[0]->blob = hx;
	spec->reference->sets[0]->expected[0]->data.len = 0;
	spec->reference->sets[0]->expected[0]->blob = hy;
	req.spec = spec;
	req.task_id = "";
	KT_OK(h_call("Submit", &req.base, &kclaw__submit_response__descriptor,
	    (ProtobufCMessage **)&resp));
	snprintf(id, sizeof(id), "%s", resp->task_id);
	kclaw__submit_response__free_unpacked(resp, NULL);
	for (int i = 0; i < 200; i++) {
		Kclaw__StatusRequest sr = KCLAW__STATUS_REQUEST__INIT;
		Kclaw__StatusResponse *st;
		bool importing;
		sr.task_id = id;
		KT_OK(h_call("Status", &sr.base,
		    &kclaw__status_response__descriptor,
		    (ProtobufCMessage **)&st));
		importing = strcmp(st->task->state, "IMPORTING") == 0 ||
		    strcmp(st->task->state, "SUBMITTED") == 0;
		kclaw__status_response__free_unpacked(st, NULL);
		if (!importing)
			return;
		kc_sleep_ms(50);
	}
	KT_FAIL("task %s stayed IMPORTING", name);
}

static void
t_age(const char *path, time_t secs_ago)
{
	struct timespec ts[2];

	ts[0].tv_sec = ts[1].tv_sec = time(NULL) - secs_ago;
	ts[0].tv_nsec = ts[1].tv_nsec = 0;
	KT_ASSERT(utimensat(AT_FDCWD, path, ts, 0) == 0);
}

int
main(void)
{
	const size_t na = (9u << 20) + 123, nb = 1u << 20, nc = 2u << 20;
	uint8_t *a = h_bytes(na, 1), *b = h_bytes(nb, 2), *c = h_bytes(nc, 3);
	uint8_t *d = h_bytes(64, 4);
	char ha[65], hb[65], hc[65], path[KC_PATH_MAX + 80], whome[256];
	char orig[KC_PATH_MAX + 80];
	kc_config wcfg;
	kc_blob_cache cache;
	kc_worker *w, *bad;
	Kclaw__BlobChunk *ch = NULL;
	struct stat st;

	h_token = TOKEN;
	setenv("KCLAW_TOKEN", TOKEN, 1);
	kc_sha256_hex(a, na, ha);
	kc_sha256_hex(b, nb, hb);
	kc_sha256_hex(c, nc, hc);
	h_setup("blobrpc", NULL);
	h_kclawd();
	h_wait_up();
	t_submit("blob_a", a, na, b, nb);
	t_submit("blob_c", c, nc, d, 64);

	/* The worker: a home of its own, no folder shared with kclawd's. */
	snprintf(whome, sizeof(whome), "%s-worker", h_home);
	KT_OK(kc_config_load(&wcfg, whome));
	KT_OK(kc_worker_open(
	    &w, h_cfg.work_url, KCLAW__ROLE__SANDBOX, 0, "blob-test", TOKEN));

	fprintf(stderr, "-- %s\n",
	    "fetch in chunks, verified, cached in the worker's home");
	KT_OK(kc_blob_cache_init(&cache, &wcfg));
	KT_OK(kc_blob_get(&cache, w, ha, NULL, 0, path, sizeof(path)));
	KT_ASSERT(strncmp(path, whome, strlen(whome)) == 0);
	h_same_file(path, a, na);
	KT_ASSERT(cache.fetched_bytes == na && cache.fetched_blobs == 1);
	KT_ASSERT(cache.local_hits == 0);

	fprintf(stderr, "-- %s\n", "a second use is a hit: nothing fetched");
	KT_OK(kc_blob_get(&cache, w, ha, NULL, 0, path, sizeof(path)));
	KT_ASSERT(cache.hits == 1 && cache.fetched_blobs == 1);

	fprintf(stderr, "-- %s\n",
	    "a chunk is capped at 8 MiB; the offset past the end refused");
	KT_OK(kc_worker_blob(w, ha, 0, UINT32_MAX, 10000, &ch));
	KT_ASSERT(ch->data.len == (8u << 20) && ch->total == na);
	kclaw__blob_chunk__free_unpacked(ch, NULL);
	KT_OK(kc_worker_blob(w, ha, na, 100, 10000, &ch));
	KT_ASSERT(ch->data.len == 0 && ch->total == na);
	kclaw__blob_chunk__free_unpacked(ch, NULL);
	KT_ASSERT(kc_worker_blob(w, ha, na + 1, 100, 10000, &ch) == KC_EINVAL);
	KT_ASSERT(strstr(kc_lasterr(), "past its end") != NULL);

	fprintf(stderr, "-- %s\n",
	    "a malformed hash names no file; an unknown blob is ENOENT");
	KT_ASSERT(kc_worker_blob(w, "../../../../etc/passwd", 0, 0, 10000,
	              &ch) == KC_EINVAL);
	KT_ASSERT(strstr(kc_lasterr(), "64 lowercase hex") != NULL);
	KT_ASSERT(kc_worker_blob(w, "ABCDEF", 0, 0, 10000, &ch) == KC_EINVAL);
	KT_ASSERT(kc_worker_blob(w,
	              "0000000000000000000000000000000000000000000000000000000"
	              "000000000",
	              0, 0, 10000, &ch) == KC_ENOENT);
	KT_ASSERT(strstr(kc_lasterr(), "not in this orchestrator") != NULL);
	KT_ASSERT(kc_blob_get(&cache, w, "../x", NULL, 0, path, sizeof(path)) ==
	    KC_EINVAL);

	fprintf(stderr, "-- %s\n",
	    "a wrong token is refused before anything is read");
	KT_OK(kc_worker_open(&bad, h_cfg.work_url, KCLAW__ROLE__SANDBOX, 0,
	    "blob-bad", "not-the-token"));
	KT_ASSERT(kc_worker_blob(bad, ha, 0, 0, 10000, &ch) == KC_EPERM);
	KT_ASSERT(strstr(kc_lasterr(), "bad or missing token") != NULL);
	kc_worker_close(bad);

	fprintf(stderr, "-- %s\n",
	    "LRU: the least recently used file goes, the newest stay");
	cache.max_bytes = na + nb + (64u << 10); /* a and b fit, not c too */
	KT_OK(kc_blob_get(&cache, w, hb, NULL, 0, path, sizeof(path)));
	h_same_file(path, b, nb);
	/* a was used 10 minutes ago, b 5: a is the least recent. */
	snprintf(orig, sizeof(orig), "%s/%s", cache.dir, ha);
	t_age(orig, 600);
	t_age(path, 300);
	KT_OK(kc_blob_get(&cache, w, hc, NULL, 0, path, sizeof(path)));
	h_same_file(path, c, nc);
	KT_ASSERT(stat(orig, &st) != 0 && errno == ENOENT);
	snprintf(orig, sizeof(orig), "%s/%s", cache.dir, hb);
	KT_ASSERT(stat(orig, &st) == 0);
	KT_ASSERT(cache.evicted == 1);
	/* A hit makes b the newest again. */
	t_age(orig, 300);
	KT_OK(kc_blob_get(&cache, w, hb, NULL, 0, path, sizeof(path)));
	KT_ASSERT(stat(orig, &st) == 0 && time(NULL) - st.st_mtime < 60);

	fprintf(stderr, "-- %s\n",
	    "a blob larger than the whole bound is refused, by name");
	cache.max_bytes = 1u << 20;
	KT_ASSERT(kc_blob_get(&cache, w, ha, NULL, 0, path, sizeof(path)) ==
	    KC_ENOSPC);
	KT_ASSERT(strstr(kc_lasterr(), "blob_cache_bytes") != NULL);
	cache.max_bytes = 64u << 20;

	fprintf(stderr, "-- %s\n",
	    "content that does not hash to its name is never kept");
	snprintf(orig, sizeof(orig), "%s/blobs/%s.npy", h_cfg.run_dir, ha);
	{
		int fd = open(orig, O_WRONLY);
		KT_ASSERT(fd >= 0);
		KT_ASSERT(pwrite(fd, "X", 1, (off_t)(na / 2)) == 1);
		close(fd);
	}
	KT_ASSERT(kc_blob_get(&cache, w, ha, NULL, 0, path, sizeof(path)) ==
	    KC_EPROTO);
	KT_ASSERT(strstr(kc_lasterr(), "hash to") != NULL);
	snprintf(path, sizeof(path), "%s/%s", cache.dir, ha);
	KT_ASSERT(stat(path, &st) != 0);
	/* The orchestrator's file is rewritten from its store when gone. */
	KT_ASSERT(unlink(orig) == 0);
	KT_OK(kc_blob_get(&cache, w, ha, NULL, 0, path, sizeof(path)));
	h_same_file(path, a, na);

	fprintf(stderr, "-- %s\n",
	    "the same home as kclawd's: its file is used, not copied");
	{
		kc_blob_cache same;
		KT_OK(kc_blob_cache_init(&same, &h_cfg));
		KT_OK(kc_blob_get(&same, w, hc, NULL, 0, path, sizeof(path)));
		KT_ASSERT(same.local_hits == 1 && same.fetched_blobs == 0);
		KT_ASSERT(strstr(path, "/run/blobs/") != NULL);
	}

	kc_worker_close(w);
	h_reap_all();
	h_teardown();
	{
		char cmd[400];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", whome);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", whome);
	}
	free(a);
	free(b);
	free(c);
	free(d);
	return 0;
}
