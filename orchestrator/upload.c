/*
 * upload.c - the PutBlob rpc: tensors uploaded by content. See upload.h.
 *
 * One thread owns every unfinished upload (the table below), so none of it
 * needs a lock; the NNG thread only queues calls. Each upload's bytes
 * [0, received) are in its staging file and in its running SHA-256, so
 * finishing costs no second pass over the file: a piece that overlaps what
 * was received has only its new tail written (a re-sent piece changes
 * nothing), and a piece that starts past `received` is refused.
 */
#include "upload.h"

#include "callq.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
#include "blobs.h"
#include "kc_config.h"
#include "kc_err.h"
#include "kc_log.h"
#include "kc_util.h"

/* One unfinished upload. */
struct upl {
	char hash[65];
	uint64_t total;    /* declared; 0: adopted at start, not asked yet */
	uint64_t received; /* contiguous from 0, in the staging file */
	kc_sha256_ctx sha; /* of [0, received), when sha_ok */
	bool sha_ok;       /* false for an adopted file until it is read */
	int fd;            /* -1 until needed */
	uint64_t touched_ms;
};

struct orch_upload {
	store *s;
	char blobs[KC_PATH_MAX];   /* run/blobs: the evaluations' cache */
	char staging[KC_PATH_MAX]; /* run/blobs/staging */
	char token[128];
	orch_upload_limits lim;
	orch_callq *q; /* one thread: what follows is its own */
	struct upl ups[ORCH_UPLOAD_MAX_OPEN];
	unsigned nups;
};

/* A refusal: the API code and what is wrong, for the reply. */
struct upl_err {
	Kclaw__ApiCode code;
	char text[512];
};

static int upl_fail(struct upl_err *e, Kclaw__ApiCode code, const char *fmt,
    ...) __attribute__((format(printf, 3, 4)));

static int
upl_fail(struct upl_err *e, Kclaw__ApiCode code, const char *fmt, ...)
{
	va_list ap;

	e->code = code;
	va_start(ap, fmt);
	vsnprintf(e->text, sizeof(e->text), fmt, ap);
	va_end(ap);
	return -1;
}

static bool
upl_hash_ok(const char *h)
{
	return h != NULL && strlen(h) == 64 &&
	    strspn(h, "0123456789abcdef") == 64;
}

static void
upl_path(const orch_upload *u, const char *hash, char *out, size_t n)
{
	snprintf(out, n, "%s/%s.part", u->staging, hash);
}

static uint64_t
upl_staged(const orch_upload *u)
{
	uint64_t sum = 0;

	for (unsigned i = 0; i < u->nups; i++)
		sum += u->ups[i].total ? u->ups[i].total : u->ups[i].received;
	return sum;
}

static struct upl *
upl_find(orch_upload *u, const char *hash)
{
	for (unsigned i = 0; i < u->nups; i++)
		if (strcmp(u->ups[i].hash, hash) == 0)
			return &u->ups[i];
	return NULL;
}

/* Forgets up; with unlink, removes its staging file too. */
static void
upl_remove(orch_upload *u, struct upl *up, bool unlink_file)
{
	char path[KC_PATH_MAX + 80];

	if (up->fd >= 0)
		close(up->fd);
	if (unlink_file) {
		upl_path(u, up->hash, path, sizeof(path));
		unlink(path);
	}
	*up = u->ups[--u->nups];
}

/* ----------------------------------------------------------- staging */

/* At start: partial files younger than the idle limit are adopted (a
 * client resumes them), everything else in the folder is removed. */
static void
upl_scan(orch_upload *u)
{
	uint64_t now = kc_mono_ms();
	time_t wall = time(NULL);
	struct dirent *d;
	DIR *dir;

	if ((dir = opendir(u->staging)) == NULL)
		return;
	while ((d = readdir(dir)) != NULL) {
		char path[KC_PATH_MAX + 300], hash[65];
		struct stat st;
		double age_ms;
		size_t n = strlen(d->d_name);

		if (strcmp(d->d_name, ".") == 0 || strcmp(d->d_name, "..") == 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", u->staging, d->d_name);
		if (lstat(path, &st) != 0)
			continue;
		age_ms = difftime(wall, st.st_mtime) * 1000;
		snprintf(hash, sizeof(hash), "%.64s", d->d_name);
		if (n == 69 && strcmp(d->d_name + 64, ".part") == 0 &&
		    upl_hash_ok(hash) && S_ISREG(st.st_mode) &&
		    age_ms < (double)u->lim.idle_ms &&
		    u->nups < ORCH_UPLOAD_MAX_OPEN &&
		    (uint64_t)st.st_size <= ORCH_BLOB_MAX) {
			struct upl *up = &u->ups[u->nups++];
			memset(up, 0, sizeof(*up));
			kc_strlcpy(up->hash, hash, sizeof(up->hash));
			up->received = (uint64_t)st.st_size;
			up->fd = -1;
			up->touched_ms =
			    now - (uint64_t)(age_ms > 0 ? age_ms : 0);
			KC_INFO("upload of %s: %llu bytes staged before a "
			        "restart; the client may resume",
			    hash, (unsigned long long)up->received);
			continue;
		}
		if (S_ISDIR(st.st_mode))
			continue;
		KC_INFO("upload staging: removing stale %s", d->d_name);
		unlink(path);
	}
	closedir(dir);
}

/* Removes uploads idle for longer than the limit. */
static void
upl_reap(orch_upload *u)
{
	uint64_t now = kc_mono_ms();

	for (unsigned i = 0; i < u->nups;) {
		struct upl *up = &u->ups[i];
		if (now - up->touched_ms < u->lim.idle_ms) {
			i++;
			continue;
		}
		KC_INFO("upload of %s: idle for %u ms with %llu of %llu "
		        "bytes; removed",
		    up->hash, u->lim.idle_ms, (unsigned long long)up->received,
		    (unsigned long long)up->total);
		upl_remove(u, up, true);
	}
}

/* Opens an adopted upload's file and hashes what it holds, so appending
 * can go on. */
static int
upl_ready(orch_upload *u, struct upl *up, struct upl_err *e)
{
	char path[KC_PATH_MAX + 80];
	uint8_t *buf;
	uint64_t off = 0;

	upl_path(u, up->hash, path, sizeof(path));
	if (up->fd < 0 &&
	    (up->fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW)) < 0)
		return upl_fail(e, KCLAW__API_CODE__API_INTERNAL,
		    "PutBlob %s: cannot open %s: %s", up->hash, path,
		    strerror(errno));
	if (up->sha_ok)
		return 0;
	if ((buf = malloc(1u << 20)) == NULL)
		return upl_fail(
		    e, KCLAW__API_CODE__API_INTERNAL, "out of memory");
	kc_sha256_init(&up->sha);
	while (off < up->received) {
		size_t want = up->received - off < (1u << 20)
		    ? (size_t)(up->received - off)
		    : (1u << 20);
		ssize_t r = pread(up->fd, buf, want, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		kc_sha256_update(&up->sha, buf, (size_t)r);
		off += (uint64_t)r;
	}
	free(buf);
	/* A shorter file than it was: keep what it has. */
	if (off < up->received && ftruncate(up->fd, (off_t)off) != 0)
		off = 0;
	up->received = off;
	up->sha_ok = true;
	return 0;
}

/* Checks the finished upload's hash and moves its content into the store
 * and the cache. Removes the upload either way. */
static int
upl_finish(orch_upload *u, struct upl *up, struct upl_err *e)
{
	char got[65], part[KC_PATH_MAX + 80], dest[KC_PATH_MAX + 80];
	kc_sha256_ctx sha = up->sha;
	void *map;
	int rv;

	kc_sha256_final_hex(&sha, got);
	if (strcmp(got, up->hash) != 0) {
		char want[65];
		unsigned long long total = (unsigned long long)up->total;
		kc_strlcpy(want, up->hash, sizeof(want));
		upl_remove(u, up, true);
		return upl_fail(e, KCLAW__API_CODE__API_BAD_REQUEST,
		    "PutBlob: the %llu bytes received have the sha256 %s, not "
		    "%s: the upload was discarded; send the content again "
		    "from offset 0 (did the file change while it was sent?)",
		    total, got, want);
	}
	upl_path(u, up->hash, part, sizeof(part));
	snprintf(dest, sizeof(dest), "%s/%s.npy", u->blobs, up->hash);
	if (fsync(up->fd) != 0 ||
	    (map = mmap(NULL, (size_t)up->total, PROT_READ, MAP_PRIVATE, up->fd,
	         0)) == MAP_FAILED) {
		upl_fail(e, KCLAW__API_CODE__API_INTERNAL,
		    "PutBlob %s: cannot read back %s: %s", up->hash, part,
		    strerror(errno));
		upl_remove(u, up, true);
		return -1;
	}
	rv = store_blob_put_as(u->s, up->hash, map, (size_t)up->total);
	munmap(map, (size_t)up->total);
	if (rv != 0) {
		upl_fail(e, KCLAW__API_CODE__API_INTERNAL, "PutBlob %s: %s",
		    up->hash, kc_lasterr());
		upl_remove(u, up, true);
		return -1;
	}
	/* The store holds it now; the staged file becomes the cache's copy
	 * (the cache is only ever written after the store). */
	if (rename(part, dest) != 0)
		KC_WARN("upload of %s: cannot move %s to %s: %s (the store "
		        "has it; the cache file is written when needed)",
		    up->hash, part, dest, strerror(errno));
	KC_INFO("upload of %s: %llu bytes verified and stored", up->hash,
	    (unsigned long long)up->total);
	upl_remove(u, up, false);
	unlink(part);
	return 0;
}

/* Writes the part of [offset, offset + len) that lies past received. */
static int
upl_append(struct upl *up, uint64_t offset, const uint8_t *data, size_t len,
    struct upl_err *e)
{
	size_t skip = (size_t)(up->received - offset), done;

	if (len <= skip)
		return 0; /* all of it was received before: a re-send */
	data += skip;
	len -= skip;
	for (done = 0; done < len;) {
		ssize_t w = pwrite(up->fd, data + done, len - done,
		    (off_t)(up->received + done));
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			/* Keep what is whole: received does not move. */
			if (ftruncate(up->fd, (off_t)up->received) != 0)
				up->sha_ok = false;
			return upl_fail(e, KCLAW__API_CODE__API_INTERNAL,
			    "PutBlob %s: cannot write the staging file: %s "
			    "(is the disk of the orchestrator's run folder "
			    "full?)",
			    up->hash, w < 0 ? strerror(errno) : "short write");
		}
		done += (size_t)w;
	}
	kc_sha256_update(&up->sha, data, len);
	up->received += len;
	return 0;
}

/* ------------------------------------------------------------ PutBlob */

static int
upl_put(orch_upload *u, const Kclaw__PutBlobRequest *req,
    Kclaw__PutBlobResponse *resp, struct upl_err *e)
{
	const char *h = req->hash;
	struct upl *up;
	uint64_t size;
	char path[KC_PATH_MAX + 80];

	if (!upl_hash_ok(h))
		return upl_fail(e, KCLAW__API_CODE__API_BAD_REQUEST,
		    "PutBlob: hash must be 64 lowercase hex digits (the "
		    "content's sha256), not '%.80s'",
		    h ? h : "");
	up = upl_find(u, h);
	if (orch_blob_stored(u->s, u->blobs, h, &size)) {
		/* Nothing to send: a partial copy is no longer needed. */
		if (up != NULL)
			upl_remove(u, up, true);
		resp->stored = true;
		resp->received = size;
		return 0;
	}
	if (req->data.len == 0) {
		/* Where it stands; nothing changes. */
		resp->received = up ? up->received : 0;
		if (up)
			up->touched_ms = kc_mono_ms();
		return 0;
	}
	if (req->total == 0 || req->total > ORCH_BLOB_MAX)
		return upl_fail(e, KCLAW__API_CODE__API_BAD_REQUEST,
		    "PutBlob %s: total %llu bytes is not between 1 and %zu "
		    "(the largest tensor file an orchestrator takes)",
		    h, (unsigned long long)req->total, ORCH_BLOB_MAX);
	if (req->data.len > ORCH_UPLOAD_CHUNK_MAX)
		return upl_fail(e, KCLAW__API_CODE__API_BAD_REQUEST,
		    "PutBlob %s: a piece is at most %zu bytes, not %zu; send "
		    "the content in pieces",
		    h, ORCH_UPLOAD_CHUNK_MAX, req->data.len);
	if (req->offset > req->total ||
	    req->data.len > req->total - req->offset)
		return upl_fail(e, KCLAW__API_CODE__API_BAD_REQUEST,
		    "PutBlob %s: %zu bytes at offset %llu run past the "
		    "total of %llu",
		    h, req->data.len, (unsigned long long)req->offset,
		    (unsigned long long)req->total);
	if (up != NULL && up->total == 0) {
		/* Adopted after a restart: its size is declared now. */
		uint64_t others = upl_staged(u) - up->received;
		if (up->received > req->total) {
			upl_remove(u, up, true);
			up = NULL;
		} else if (others + req->total > u->lim.staged_max) {
			return upl_fail(e, KCLAW__API_CODE__API_UNAVAILABLE,
			    "PutBlob %s: staging is full (%llu of %llu bytes "
			    "held by unfinished uploads); retry later, or "
			    "raise orchestrator.upload_staged_bytes",
			    h, (unsigned long long)others,
			    (unsigned long long)u->lim.staged_max);
		} else {
			up->total = req->total;
		}
	}
	if (up == NULL) {
		uint64_t staged = upl_staged(u);
		if (u->nups >= ORCH_UPLOAD_MAX_OPEN)
			return upl_fail(e, KCLAW__API_CODE__API_UNAVAILABLE,
			    "PutBlob %s: %d uploads are unfinished, the most "
			    "at once; retry when one ends (an idle one is "
			    "removed after %u ms)",
			    h, ORCH_UPLOAD_MAX_OPEN, u->lim.idle_ms);
		if (staged + req->total > u->lim.staged_max)
			return upl_fail(e, KCLAW__API_CODE__API_UNAVAILABLE,
			    "PutBlob %s: staging is full (%llu of %llu bytes "
			    "held by unfinished uploads, %llu more asked); "
			    "retry later, or raise "
			    "orchestrator.upload_staged_bytes",
			    h, (unsigned long long)staged,
			    (unsigned long long)u->lim.staged_max,
			    (unsigned long long)req->total);
		upl_path(u, h, path, sizeof(path));
		up = &u->ups[u->nups];
		memset(up, 0, sizeof(*up));
		kc_strlcpy(up->hash, h, sizeof(up->hash));
		up->total = req->total;
		up->fd = open(path,
		    O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (up->fd < 0)
			return upl_fail(e, KCLAW__API_CODE__API_INTERNAL,
			    "PutBlob %s: cannot create %s: %s", h, path,
			    strerror(errno));
		kc_sha256_init(&up->sha);
		up->sha_ok = true;
		u->nups++;
	} else if (up->total != req->total) {
		return upl_fail(e, KCLAW__API_CODE__API_BAD_REQUEST,
		    "PutBlob %s: this upload was declared %llu bytes, not "
		    "%llu; one hash names one content (send the right total; "
		    "an unfinished upload is removed after %u ms idle)",
		    h, (unsigned long long)up->total,
		    (unsigned long long)req->total, u->lim.idle_ms);
	}
	if (upl_ready(u, up, e) != 0)
		return -1;
	up->touched_ms = kc_mono_ms();
	if (req->offset > up->received)
		return upl_fail(e, KCLAW__API_CODE__API_BAD_REQUEST,
		    "PutBlob %s: offset %llu is past the %llu bytes received "
		    "so far; send from offset %llu (a PutBlob without data "
		    "says where an upload stands)",
		    h, (unsigned long long)req->offset,
		    (unsigned long long)up->received,
		    (unsigned long long)up->received);
	if (upl_append(up, req->offset, req->data.data, req->data.len, e) != 0)
		return -1;
	resp->received = up->received;
	if (up->received == up->total) {
		if (upl_finish(u, up, e) != 0)
			return -1;
		resp->stored = true;
	}
	return 0;
}

static void
upl_serve(orch_upload *u, bus_call *call)
{
	Kclaw__PutBlobResponse resp = KCLAW__PUT_BLOB_RESPONSE__INIT;
	Kclaw__PutBlobRequest *req = NULL;
	Kclaw__ApiRequest *env;
	struct upl_err e = {0};
	const void *data;
	size_t len;

	data = bus_call_data(call, &len);
	if ((env = kclaw__api_request__unpack(NULL, len, data)) == NULL) {
		kc_api_reply(call, 0, KCLAW__API_CODE__API_BAD_REQUEST,
		    "the request is not a kclaw.ApiRequest; see "
		    "proto/kclaw.proto",
		    NULL);
		return;
	}
	if (kc_call_authorize(call, data, len, KC_API_TOKEN_FIELD, u->token) !=
	    0) {
		kc_api_reply(call, env->request_id,
		    KCLAW__API_CODE__API_UNAUTHORIZED, KC_TOKEN_REFUSED_API,
		    NULL);
		goto out;
	}
	req = kclaw__put_blob_request__unpack(
	    NULL, env->payload.len, env->payload.data);
	if (req == NULL) {
		kc_api_reply(call, env->request_id,
		    KCLAW__API_CODE__API_BAD_REQUEST,
		    "PutBlob: the payload is not a kclaw.PutBlobRequest; "
		    "encode the request message of this rpc (see "
		    "proto/kclaw.proto)",
		    NULL);
		goto out;
	}
	kc_clearerr();
	if (upl_put(u, req, &resp, &e) != 0)
		kc_api_reply(call, env->request_id, e.code, e.text, NULL);
	else
		kc_api_reply(call, env->request_id, KCLAW__API_CODE__API_OK,
		    NULL, &resp.base);
out:
	if (req)
		kclaw__put_blob_request__free_unpacked(req, NULL);
	kclaw__api_request__free_unpacked(env, NULL);
}

/* ------------------------------------------------------------- thread */

static void
upl_serve_cb(void *arg, bus_call *call)
{
	upl_serve(arg, call);
}

static void
upl_reap_cb(void *arg)
{
	upl_reap(arg);
}

int
orch_upload_open(orch_upload **out, store *s, const char *blobs_dir,
    const char *token, const orch_upload_limits *lim)
{
	orch_callq_ops ops = {upl_serve_cb, upl_reap_cb, NULL};
	orch_upload *u;
	int rv;

	if ((u = calloc(1, sizeof(*u))) == NULL)
		return KC_ENOMEM;
	u->s = s;
	u->lim = *lim;
	kc_strlcpy(u->blobs, blobs_dir, sizeof(u->blobs));
	snprintf(u->staging, sizeof(u->staging), "%s/staging", blobs_dir);
	kc_strlcpy(u->token, token ? token : "", sizeof(u->token));
	if ((rv = kc_mkdirs(u->staging, 0700)) != 0) {
		orch_upload_close(u);
		return rv;
	}
	upl_scan(u);
	/* One thread; each second it also removes idle uploads. */
	ops.arg = u;
	if ((rv = orch_callq_open(
	         &u->q, "uploads", 1, ORCH_UPLOAD_QUEUE, 1000, &ops)) != 0) {
		orch_upload_close(u);
		return rv;
	}
	*out = u;
	return 0;
}

void
orch_upload_post(orch_upload *u, bus_call *call)
{
	orch_callq_post(u->q, call);
}

void
orch_upload_stop(orch_upload *u)
{
	if (u != NULL)
		orch_callq_stop(u->q);
}

void
orch_upload_close(orch_upload *u)
{
	if (u == NULL)
		return;
	orch_callq_close(u->q);
	while (u->nups > 0)
		upl_remove(u, &u->ups[0], false);
	free(u);
}
