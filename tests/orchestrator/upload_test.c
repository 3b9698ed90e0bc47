/*
 * upload_test.c - the PutBlob rpc against the real kclawd on tcp:// with a
 * token: a good upload stored and named by a Submit; a re-sent and an
 * overlapping piece change nothing; a piece past what was received, a
 * wrong hash, a malformed hash, sizes out of bounds and a wrong token are
 * refused with what is wrong; kclawd killed mid-upload adopts the partial
 * file at restart and the client resumes there (stale files are removed);
 * the staged-bytes and open-uploads bounds; idle uploads removed; and
 * `kclaw submit` of a 56 MiB bundle (more than the old 48 MiB inline
 * limit, 14 times the API's 4 MiB) over tcp from a folder kclawd cannot
 * read, reaching the store.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#include "blobput.h"
/* The harness's API helpers send no token; this test has its own. */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "harness.h"

#define TOKEN "upload-secret"
#define MIB ((size_t)1 << 20)
#define IDLE_MS 4000

static pid_t kclawd;

static int
t_call(const char *method, const ProtobufCMessage *req,
    const ProtobufCMessageDescriptor *d, ProtobufCMessage **resp)
{
	return kc_api_call(h_api, method, req, TOKEN, 10000, d, resp);
}

/* One PutBlob; its code, with *received and *stored from the answer. */
static int
t_put(const char *hash, uint64_t total, uint64_t offset, const uint8_t *data,
    size_t len, const char *token, uint64_t *received, bool *stored)
{
	Kclaw__PutBlobRequest req = KCLAW__PUT_BLOB_REQUEST__INIT;
	Kclaw__PutBlobResponse *resp;
	int rv;

	req.hash = (char *)hash;
	req.total = total;
	req.offset = offset;
	req.data.data = (uint8_t *)data;
	req.data.len = len;
	rv = kc_api_call(h_api, "PutBlob", &req.base, token, 10000,
	    &kclaw__put_blob_response__descriptor, (ProtobufCMessage **)&resp);
	if (rv == 0) {
		if (received)
			*received = resp->received;
		if (stored)
			*stored = resp->stored;
		kclaw__put_blob_response__free_unpacked(resp, NULL);
	}
	return rv;
}

static void
t_refused(int rv, int want, const char *says)
{
	if (rv != want)
		KT_FAIL("got %d, want %d (%s)", rv, want, kc_lasterr());
	if (strstr(kc_lasterr(), says) == NULL)
		KT_FAIL("'%s' does not say '%s'", kc_lasterr(), says);
}

static void
t_path(char *out, size_t n, const char *sub, const char *hash, const char *ext)
{
	snprintf(out, n, "%s/run/blobs%s/%s%s", h_home, sub, hash, ext);
}

/* The staging folder's .part files. */
static int
t_staged(void)
{
	char dir[512];
	struct dirent *d;
	DIR *dp;
	int n = 0;

	snprintf(dir, sizeof(dir), "%s/run/blobs/staging", h_home);
	if ((dp = opendir(dir)) == NULL)
		return 0;
	while ((d = readdir(dp)) != NULL)
		n += d->d_name[0] != '.';
	closedir(dp);
	return n;
}

/* A Submit naming hash as the task's input and expected output. */
static int
t_submit_blob(const char *name, const char *hash, char *id)
{
	Kclaw__TaskSpec *spec = h_spec(name, "seeds=ok:1.0", 1);
	Kclaw__SubmitRequest req = KCLAW__SUBMIT_REQUEST__INIT;
	Kclaw__SubmitResponse *resp;
	int rv;

	spec->reference->sets[0]->inputs[0]->data.len = 0;
	spec->reference->sets[0]->inputs[0]->blob = (char *)hash;
	spec->reference->sets[0]->expected[0]->data.len = 0;
	spec->reference->sets[0]->expected[0]->blob = (char *)hash;
	req.spec = spec;
	req.task_id = "";
	rv = t_call("Submit", &req.base, &kclaw__submit_response__descriptor,
	    (ProtobufCMessage **)&resp);
	if (rv == 0) {
		snprintf(id, 64, "%s", resp->task_id);
		kclaw__submit_response__free_unpacked(resp, NULL);
	}
	return rv;
}

static void
test_good_upload(void)
{
	const size_t n = 5 * MIB + 123;
	uint8_t *a = h_bytes(n, 1);
	char ha[65], path[600], id[64];
	uint64_t sent = 0, received;
	bool stored;

	KT_OK(kc_blob_put_bytes(h_api, TOKEN, a, n, ha, &sent));
	KT_EQ_INT(sent, n);
	/* Asked again: stored, nothing sent. */
	KT_OK(t_put(ha, n, 0, NULL, 0, TOKEN, &received, &stored));
	KT_ASSERT(stored && received == n);
	KT_OK(kc_blob_put_bytes(h_api, TOKEN, a, n, ha, &sent));
	KT_EQ_INT(sent, 0);
	/* In the evaluations' cache as an imported tensor; nothing staged. */
	t_path(path, sizeof(path), "", ha, ".npy");
	h_same_file(path, a, n);
	KT_EQ_INT(t_staged(), 0);
	/* A Submit names it by hash; one naming an unknown blob is
	 * refused. */
	KT_OK(t_submit_blob("uploaded", ha, id));
	t_refused(t_submit_blob("unknown",
	              "00000000000000000000000000000000000000000000000000000000"
	              "00000000",
	              id),
	    KC_EINVAL, "not in the orchestrator's store");
	free(a);
}

static void
test_resend_and_offsets(void)
{
	const size_t n = 5 * MIB;
	uint8_t *b = h_bytes(n, 2);
	char hb[65];
	uint64_t received = 0;
	bool stored = false;

	kc_sha256_hex(b, n, hb);
	KT_OK(t_put(hb, n, 0, b, 2 * MIB, TOKEN, &received, &stored));
	KT_ASSERT(received == 2 * MIB && !stored);
	/* The same piece again changes nothing. */
	KT_OK(t_put(hb, n, 0, b, 2 * MIB, TOKEN, &received, &stored));
	KT_ASSERT(received == 2 * MIB && !stored);
	/* One that overlaps: only its new tail is written. */
	KT_OK(t_put(hb, n, MIB, b + MIB, 2 * MIB, TOKEN, &received, &stored));
	KT_ASSERT(received == 3 * MIB && !stored);
	/* A gap is refused, and says where to resume. */
	t_refused(t_put(hb, n, 4 * MIB, b + 4 * MIB, MIB, TOKEN, NULL, NULL),
	    KC_EINVAL, "send from offset 3145728");
	/* The upload has one size. */
	t_refused(
	    t_put(hb, n + 1, 3 * MIB, b + 3 * MIB, MIB, TOKEN, NULL, NULL),
	    KC_EINVAL, "declared 5242880 bytes");
	/* A query says where it stands. */
	KT_OK(t_put(hb, n, 0, NULL, 0, TOKEN, &received, &stored));
	KT_ASSERT(received == 3 * MIB && !stored);
	KT_OK(t_put(
	    hb, n, 3 * MIB, b + 3 * MIB, 2 * MIB, TOKEN, &received, &stored));
	KT_ASSERT(received == n && stored);
	KT_EQ_INT(t_staged(), 0);
	free(b);
}

static void
test_refusals(void)
{
	const size_t n = 3 * MIB;
	uint8_t *c = h_bytes(n, 3), *big = h_bytes(2 * MIB + 1, 4);
	char hc[65], other[65], path[600];
	uint64_t received;
	bool stored;

	kc_sha256_hex(c, n, hc);
	/* The content does not hash to what was declared: discarded. */
	kc_sha256_hex(c, n - 1, other);
	KT_OK(t_put(other, n, 0, c, 2 * MIB, TOKEN, &received, &stored));
	t_refused(t_put(other, n, 2 * MIB, c + 2 * MIB, MIB, TOKEN, NULL, NULL),
	    KC_EINVAL, "the upload was discarded");
	KT_OK(t_put(other, n, 0, NULL, 0, TOKEN, &received, &stored));
	KT_ASSERT(received == 0 && !stored);
	t_path(path, sizeof(path), "", other, ".npy");
	KT_ASSERT(access(path, F_OK) != 0);
	KT_EQ_INT(t_staged(), 0);
	/* Names and sizes, each checked before anything is written. */
	t_refused(
	    t_put("../../../../etc/passwd", n, 0, c, 10, TOKEN, NULL, NULL),
	    KC_EINVAL, "64 lowercase hex");
	t_refused(t_put("ABCDEF", n, 0, c, 10, TOKEN, NULL, NULL), KC_EINVAL,
	    "64 lowercase hex");
	t_refused(t_put(hc, 0, 0, c, 10, TOKEN, NULL, NULL), KC_EINVAL,
	    "not between 1 and");
	t_refused(
	    t_put(hc, ((uint64_t)2 << 30) + 1, 0, c, 10, TOKEN, NULL, NULL),
	    KC_EINVAL, "not between 1 and");
	t_refused(t_put(hc, 8 * MIB, 0, big, 2 * MIB + 1, TOKEN, NULL, NULL),
	    KC_EINVAL, "a piece is at most 2097152");
	t_refused(t_put(hc, n, n - 5, c, 10, TOKEN, NULL, NULL), KC_EINVAL,
	    "run past the total");
	t_refused(t_put(hc, n, UINT64_MAX - 4, c, 10, TOKEN, NULL, NULL),
	    KC_EINVAL, "run past the total");
	/* The token first: nothing is staged for a stranger. */
	t_refused(t_put(hc, n, 0, c, MIB, "not-the-token", NULL, NULL),
	    KC_EPERM, "bad or missing token");
	t_refused(t_put(hc, n, 0, c, MIB, NULL, NULL, NULL), KC_EPERM, "token");
	KT_EQ_INT(t_staged(), 0);
	/* An envelope whose payload is not a PutBlobRequest. */
	{
		Kclaw__ApiRequest env = KCLAW__API_REQUEST__INIT;
		Kclaw__ApiResponse *ar;
		uint8_t *buf;
		size_t len, rlen;
		void *rep;
		bus_client *cl;
		static const uint8_t junk[] = {0x0a, 0xff, 0xff, 0xff, 0x0f};
		env.method = "PutBlob";
		env.token = TOKEN;
		env.payload.data = (uint8_t *)junk;
		env.payload.len = sizeof(junk);
		KT_OK(kc_pb_pack(&env.base, &buf, &len));
		KT_OK(bus_client_open(&cl, h_cfg.api_url, 0));
		KT_OK(bus_client_call(cl, buf, len, 5000, &rep, &rlen));
		bus_client_close(cl);
		free(buf);
		KT_ASSERT((ar = kclaw__api_response__unpack(NULL, rlen, rep)));
		KT_EQ_INT(ar->code, KCLAW__API_CODE__API_BAD_REQUEST);
		KT_CONTAINS(ar->error, "not a kclaw.PutBlobRequest");
		kclaw__api_response__free_unpacked(ar, NULL);
		free(rep);
	}
	free(c);
	free(big);
}

/* Sets path's modification time to secs ago. */
static void
t_age(const char *path, time_t secs)
{
	struct timespec ts[2];

	ts[0].tv_sec = ts[1].tv_sec = time(NULL) - secs;
	ts[0].tv_nsec = ts[1].tv_nsec = 0;
	KT_ASSERT(utimensat(AT_FDCWD, path, ts, 0) == 0);
}

static void
test_killed_mid_upload(void)
{
	const size_t n = 8 * MIB + 7;
	uint8_t *d = h_bytes(n, 5);
	char hd[65], stale[65], path[600];
	uint64_t received = 0, sent = 0;
	bool stored = false;

	kc_sha256_hex(d, n, hd);
	for (size_t off = 0; off < 6 * MIB; off += 2 * MIB)
		KT_OK(t_put(
		    hd, n, off, d + off, 2 * MIB, TOKEN, &received, &stored));
	KT_ASSERT(received == 6 * MIB && !stored);
	h_kill(kclawd, SIGKILL);
	/* Left in staging while it was down: an hour-old upload and a file
	 * that is no upload at all. */
	kc_sha256_hex("stale", 5, stale);
	t_path(path, sizeof(path), "/staging", stale, ".part");
	KT_OK(kc_write_file(path, "old", 3));
	t_age(path, 3600);
	t_path(path, sizeof(path), "/staging", "junk", "");
	KT_OK(kc_write_file(path, "x", 1));
	kclawd = h_kclawd();
	h_wait_up();
	/* The young partial is adopted; the stale and the stray removed. */
	KT_EQ_INT(t_staged(), 1);
	KT_OK(t_put(hd, n, 0, NULL, 0, TOKEN, &received, &stored));
	KT_ASSERT(received == 6 * MIB && !stored);
	/* The client resumes where the orchestrator is: 2 MiB + 7 sent. */
	KT_OK(kc_blob_put_bytes(h_api, TOKEN, d, n, hd, &sent));
	KT_EQ_INT(sent, n - 6 * MIB);
	t_path(path, sizeof(path), "", hd, ".npy");
	h_same_file(path, d, n);
	KT_EQ_INT(t_staged(), 0);
	free(d);
}

/* kclaw.json: upload_staged_bytes 24 MiB, upload_idle_ms IDLE_MS. */
static void
test_bounds_and_idle(void)
{
	uint8_t *a = h_bytes(16 * MIB, 6), *b = h_bytes(10 * MIB, 7);
	uint8_t small[1024];
	char ha[65], hb[65], hs[16][65], path[600];
	uint64_t received, t0;
	bool stored;

	kc_sha256_hex(a, 16 * MIB, ha);
	kc_sha256_hex(b, 10 * MIB, hb);
	KT_OK(t_put(ha, 16 * MIB, 0, a, MIB, TOKEN, &received, &stored));
	/* 16 + 10 MiB declared is more than the 24 MiB staging holds. */
	t_refused(t_put(hb, 10 * MIB, 0, b, MIB, TOKEN, NULL, NULL), KC_EBUSY,
	    "staging is full");
	/* At most 16 unfinished at once. */
	for (int i = 0; i < 15; i++) {
		memset(small, i + 1, sizeof(small));
		kc_sha256_hex(small, sizeof(small), hs[i]);
		KT_OK(t_put(hs[i], sizeof(small), 0, small, 512, TOKEN,
		    &received, &stored));
	}
	memset(small, 99, sizeof(small));
	kc_sha256_hex(small, sizeof(small), hs[15]);
	t_refused(
	    t_put(hs[15], sizeof(small), 0, small, 512, TOKEN, NULL, NULL),
	    KC_EBUSY, "16 uploads are unfinished");
	KT_EQ_INT(t_staged(), 16);
	/* Nobody finishes them: they are removed once idle. */
	t0 = kc_mono_ms();
	while (t_staged() > 0 && kc_mono_ms() - t0 < IDLE_MS + 4000)
		kc_sleep_ms(100);
	KT_EQ_INT(t_staged(), 0);
	printf("  16 idle uploads removed %llu ms after their last piece "
	       "(idle limit %d ms)\n",
	    (unsigned long long)(kc_mono_ms() - t0), IDLE_MS);
	KT_OK(t_put(ha, 16 * MIB, 0, NULL, 0, TOKEN, &received, &stored));
	KT_ASSERT(received == 0 && !stored);
	/* And the one refused before now fits. */
	KT_OK(kc_blob_put_bytes(h_api, TOKEN, b, 10 * MIB, hb, NULL));
	t_path(path, sizeof(path), "", hb, ".npy");
	h_same_file(path, b, 10 * MIB);
	free(a);
	free(b);
}

/* A float32 .npy of n elements, content from seed. */
static void
t_npy(const char *path, size_t n, uint32_t seed)
{
	char hdr[128];
	size_t hl;
	uint8_t *body = h_bytes(n * 4, seed);
	FILE *f = fopen(path, "wb");

	KT_ASSERT(f != NULL);
	hl = (size_t)snprintf(hdr, sizeof(hdr),
	    "{'descr': '<f4', 'fortran_order': False, 'shape': (%zu,), }", n);
	while ((10 + hl + 1) % 64 != 0)
		hdr[hl++] = ' ';
	hdr[hl++] = '\n';
	KT_ASSERT(fwrite("\x93NUMPY\x01\x00", 1, 8, f) == 8);
	fputc((int)(hl & 0xff), f);
	fputc((int)(hl >> 8), f);
	KT_ASSERT(fwrite(hdr, 1, hl, f) == hl);
	/* Small finite floats: clear the exponent's top bits. */
	for (size_t i = 0; i < n; i++)
		body[4 * i + 3] &= 0x3f;
	KT_ASSERT(fwrite(body, 1, n * 4, f) == n * 4);
	KT_ASSERT(fclose(f) == 0);
	free(body);
}

static void
test_big_bundle_over_tcp(void)
{
	/* 4 files of 14 MiB: 56 MiB, more than the old 48 MiB inline. */
	const size_t n = (14 * MIB) / 4;
	char dir[256], path[600], cmd[2048], *out = NULL;
	size_t len;
	Kclaw__StatusResponse *st;
	Kclaw__StatusRequest sr = KCLAW__STATUS_REQUEST__INIT;
	char id[64];
	uint64_t t0;
	int files = 0;

	snprintf(dir, sizeof(dir), "/tmp/kc-upload-bundle-XXXXXX");
	KT_ASSERT(mkdtemp(dir) != NULL);
	for (int s = 0; s < 2; s++) {
		snprintf(path, sizeof(path), "%s/set%d", dir, s);
		KT_ASSERT(mkdir(path, 0700) == 0);
		snprintf(path, sizeof(path), "%s/set%d/x.npy", dir, s);
		t_npy(path, n, (uint32_t)(10 + 2 * s));
		snprintf(path, sizeof(path), "%s/set%d/y.npy", dir, s);
		t_npy(path, n, (uint32_t)(11 + 2 * s));
	}
	snprintf(cmd, sizeof(cmd),
	    "{\"name\": \"big\", \"tensors\": ["
	    "{\"name\": \"x\", \"kind\": \"input\", \"dtype\": \"f32\", "
	    "\"shape\": [%zu]}, {\"name\": \"y\", \"kind\": \"output\", "
	    "\"dtype\": \"f32\", \"shape\": [%zu]}], \"tolerance\": "
	    "{\"atol\": 1e-5, \"rtol\": 1e-5, \"max_rel_norm\": 1e-5}, "
	    "\"budget\": {\"rounds\": 1}, "
	    "\"reference\": {\"kind\": \"tensors\", \"baseline_ms\": 4.0, "
	    "\"sets\": [{\"seed\": 1, \"inputs\": {\"x\": \"set0/x.npy\"}, "
	    "\"expected\": {\"y\": \"set0/y.npy\"}}, {\"seed\": 2, "
	    "\"inputs\": {\"x\": \"set1/x.npy\"}, \"expected\": {\"y\": "
	    "\"set1/y.npy\"}}]}}\n",
	    n, n);
	snprintf(path, sizeof(path), "%s/task.json", dir);
	KT_OK(kc_write_file(path, cmd, strlen(cmd)));
	/* The client has a home of its own and reaches kclawd over tcp;
	 * kclawd's roots do not hold the bundle. */
	snprintf(path, sizeof(path), "%s/submit.out", h_home);
	snprintf(cmd, sizeof(cmd),
	    "KCLAW_HOME='%s-client' '%s/kclaw' submit '%s' >'%s' 2>&1", h_home,
	    getenv("KCLAW_BIN"), dir, path);
	t0 = kc_mono_ms();
	if (system(cmd) != 0) {
		kc_read_file(path, 1 << 16, &out, &len);
		KT_FAIL("kclaw submit of a 56 MiB bundle failed: %s",
		    out ? out : "");
	}
	printf("  kclaw submit of a 56 MiB bundle over tcp: %llu ms\n",
	    (unsigned long long)(kc_mono_ms() - t0));
	KT_OK(kc_read_file(path, 1 << 16, &out, &len));
	snprintf(id, sizeof(id), "%.*s", (int)strcspn(out, "\n"), out);
	free(out);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	KT_ASSERT(system(cmd) == 0);
	/* The task needs no bundle folder: its tensors are in the store. */
	sr.task_id = id;
	for (int i = 0; i < 100; i++) {
		KT_OK(t_call("Status", &sr.base,
		    &kclaw__status_response__descriptor,
		    (ProtobufCMessage **)&st));
		if (strcmp(st->task->state, "IMPORTING") != 0 &&
		    strcmp(st->task->state, "SUBMITTED") != 0)
			break;
		kclaw__status_response__free_unpacked(st, NULL);
		st = NULL;
		kc_sleep_ms(50);
	}
	KT_ASSERT(st != NULL);
	if (strcmp(st->task->state, "FAILED") == 0)
		KT_FAIL("task %s failed: %s", id, st->task->error);
	for (size_t s = 0; s < st->task->spec->reference->n_sets; s++) {
		Kclaw__TensorSet *set = st->task->spec->reference->sets[s];
		Kclaw__TensorData *tds[2] = {set->inputs[0], set->expected[0]};
		for (int k = 0; k < 2; k++) {
			struct stat fs;
			KT_ASSERT(strlen(tds[k]->blob) == 64);
			KT_ASSERT(tds[k]->data.len == 0);
			t_path(path, sizeof(path), "", tds[k]->blob, ".npy");
			KT_ASSERT(stat(path, &fs) == 0);
			KT_ASSERT((size_t)fs.st_size > n * 4);
			files++;
		}
	}
	KT_EQ_INT(files, 4);
	kclaw__status_response__free_unpacked(st, NULL);
	KT_EQ_INT(t_staged(), 0);
}

int
main(void)
{
	char url[64], orch[160];
	int port[2];

	h_token = TOKEN;
	kt_free_ports(port, 2);
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", port[0]);
	setenv("KCLAW_API_URL", url, 1);
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", port[1]);
	setenv("KCLAW_WORK_URL", url, 1);
	setenv("KCLAW_TOKEN", TOKEN, 1);
	unsetenv("KCLAW_BUNDLE_ROOTS");
	snprintf(orch, sizeof(orch),
	    "\"upload_staged_bytes\": %zu, \"upload_idle_ms\": %d", 24 * MIB,
	    IDLE_MS);
	h_setup("upload", orch);
	kclawd = h_kclawd();
	h_wait_up();
	KT_RUN(test_good_upload);
	KT_RUN(test_resend_and_offsets);
	KT_RUN(test_refusals);
	KT_RUN(test_killed_mid_upload);
	KT_RUN(test_bounds_and_idle);
	KT_RUN(test_big_bundle_over_tcp);
	h_kill(kclawd, SIGTERM);
	h_teardown();
	return 0;
}
