#include "blobs.h"

#include "callq.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api.h"
#include "bundle.h"
#include "kc_config.h"
#include "kc_err.h"
#include "kc_util.h"
#include "security.h"

/* What the per-tensor steps need besides the tensor. */
struct blobs_ctx {
	store *s;
	const char *dir;
	const kc_config *cfg; /* the roots a path must lie in; NULL: none */
	orch_blobs_progress p;
	int (*progress)(void *arg, const orch_blobs_progress *p);
	void *arg;
};

static int
blobs_set_str(char **field, const char *value)
{
	char *v = strdup(value);

	if (v == NULL)
		return KC_ENOMEM;
	/* protobuf-c's empty-string default is static: never free it. */
	if (*field != NULL && *field != protobuf_c_empty_string)
		free(*field);
	*field = v;
	return 0;
}

static bool
blobs_has_hash(const Kclaw__TensorData *td)
{
	return td->blob != NULL && strlen(td->blob) == 64 &&
	    strspn(td->blob, "0123456789abcdef") == 64;
}

static bool
blobs_td_pending(const Kclaw__TensorData *td)
{
	return !blobs_has_hash(td) &&
	    (td->data.len > 0 || (td->path != NULL && *td->path != '\0'));
}

/* ------------------------------------------------------------- import */

static int
blobs_count(Kclaw__TensorData *td, void *arg)
{
	orch_blobs_progress *p = arg;
	struct stat st;

	if (!blobs_td_pending(td))
		return 0;
	p->tensors++;
	if (td->data.len > 0)
		p->bytes += td->data.len;
	else if (stat(td->path, &st) == 0)
		p->bytes += (uint64_t)st.st_size;
	return 0;
}

static int
blobs_pending_one(Kclaw__TensorData *td, void *arg)
{
	(void)arg;
	return blobs_td_pending(td) ? 1 : 0;
}

bool
orch_blobs_pending(const Kclaw__TaskSpec *spec)
{
	return kc_spec_each_tensor_data(
	           (Kclaw__TaskSpec *)spec, blobs_pending_one, NULL) == 1;
}

static int
blobs_import_one(Kclaw__TensorData *td, void *arg)
{
	struct blobs_ctx *ctx = arg;
	char hash[65], path[KC_PATH_MAX], *data = NULL;
	const void *bytes;
	struct stat st;
	size_t len;
	int rv;

	if (!blobs_td_pending(td))
		return 0;
	if (td->data.len > 0) {
		bytes = td->data.data;
		len = td->data.len;
	} else {
		/* Opened and checked once, read from what was checked. */
		kc_bundle_file f;
		char what[128];

		snprintf(what, sizeof(what), "tensor '%s'", td->name);
		rv = ctx->cfg != NULL
		    ? orch_data_open(ctx->cfg, td->path, what, &f)
		    : kc_bundle_open(td->path, what, 0, NULL, &f);
		if (rv != 0)
			return rv;
		rv = kc_bundle_read(&f, what, ORCH_BLOB_MAX, &data, &len);
		kc_bundle_close(&f);
		if (rv != 0)
			return rv;
		bytes = data;
	}
	rv = store_blob_put(ctx->s, bytes, len, hash);
	if (rv == 0 && ctx->dir != NULL) {
		snprintf(path, sizeof(path), "%s/%s.npy", ctx->dir, hash);
		if (stat(path, &st) != 0 || (size_t)st.st_size != len)
			rv = kc_write_file(path, bytes, len);
	}
	free(data);
	if (rv == 0)
		rv = blobs_set_str(&td->blob, hash);
	if (rv != 0)
		return rv;
	/* The blob holds the bytes now: the stored spec need not. */
	if (td->data.len > 0) {
		free(td->data.data);
		td->data.data = NULL;
		td->data.len = 0;
	}
	ctx->p.done++;
	ctx->p.bytes_done += len;
	return ctx->progress ? ctx->progress(ctx->arg, &ctx->p) : 0;
}

int
orch_blobs_import_checked(store *s, Kclaw__TaskSpec *spec,
    const char *cache_dir, const kc_config *cfg,
    int (*progress)(void *arg, const orch_blobs_progress *p), void *arg)
{
	struct blobs_ctx ctx = {.s = s,
	    .dir = cache_dir,
	    .cfg = cfg,
	    .progress = progress,
	    .arg = arg};
	int rv;

	if (cache_dir != NULL && (rv = kc_mkdirs(cache_dir, 0700)) != 0)
		return rv;
	kc_spec_each_tensor_data(spec, blobs_count, &ctx.p);
	if (progress && (rv = progress(arg, &ctx.p)) != 0)
		return rv;
	return kc_spec_each_tensor_data(spec, blobs_import_one, &ctx);
}

int
orch_blobs_import(store *s, Kclaw__TaskSpec *spec, const char *cache_dir,
    int (*progress)(void *arg, const orch_blobs_progress *p), void *arg)
{
	return orch_blobs_import_checked(
	    s, spec, cache_dir, NULL, progress, arg);
}

bool
orch_blob_stored(
    store *s, const char *cache_dir, const char *hash, uint64_t *size)
{
	char path[KC_PATH_MAX + 80];
	struct stat st;
	size_t len;

	snprintf(path, sizeof(path), "%s/%s.npy", cache_dir, hash);
	if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
		if (size)
			*size = (uint64_t)st.st_size;
		return true;
	}
	if (store_blob_has(s, hash, &len) != 0) {
		kc_clearerr();
		return false;
	}
	if (size)
		*size = len;
	return true;
}

struct blobs_check {
	store *s;
	const char *dir;
};

static int
blobs_check_one(Kclaw__TensorData *td, void *arg)
{
	const struct blobs_check *c = arg;

	if (!blobs_has_hash(td) ||
	    orch_blob_stored(c->s, c->dir, td->blob, NULL))
		return 0;
	return kc_seterr(KC_EINVAL,
	    "tensor '%s': blob %s is not in the orchestrator's store; upload "
	    "its content first (PutBlob; `kclaw submit DIR` does), or send "
	    "it inline or by path",
	    td->name ? td->name : "", td->blob);
}

int
orch_blobs_check_stored(store *s, const char *cache_dir, Kclaw__TaskSpec *spec)
{
	struct blobs_check c = {.s = s, .dir = cache_dir};

	return kc_spec_each_tensor_data(spec, blobs_check_one, &c);
}

/* -------------------------------------------------------- materialize */

static int
blobs_materialize_one(Kclaw__TensorData *td, void *arg)
{
	const struct blobs_ctx *ctx = arg;
	store *s = ctx->s;
	const char *dir = ctx->dir;
	char path[KC_PATH_MAX];
	struct stat st;
	void *data;
	size_t len;
	int rv;

	if (!blobs_has_hash(td))
		return 0;
	snprintf(path, sizeof(path), "%s/%s.npy", dir, td->blob);
	/* The import wrote the file; only a removed run folder needs it
	 * written again here. */
	if (stat(path, &st) != 0) {
		if ((rv = store_blob_get(s, td->blob, &data, &len)) != 0)
			return kc_seterr(rv == KC_ENOENT ? KC_ENOENT : rv,
			    "tensor '%s': blob %s is not in the store",
			    td->name, td->blob);
		rv = kc_write_file(path, data, len);
		free(data);
		if (rv != 0)
			return rv;
	}
	/* The inline copy is not needed once the file is there. */
	if (td->data.len > 0) {
		free(td->data.data);
		td->data.data = NULL;
		td->data.len = 0;
	}
	return blobs_set_str(&td->path, path);
}

int
orch_blobs_materialize(store *s, const char *cache_dir, Kclaw__TaskSpec *spec)
{
	int rv;

	if ((rv = kc_mkdirs(cache_dir, 0700)) != 0)
		return rv;
	struct blobs_ctx ctx = {.s = s, .dir = cache_dir};

	return kc_spec_each_tensor_data(spec, blobs_materialize_one, &ctx);
}

/* ------------------------------------------------------------- serving */

struct orch_blob_server {
	store *s;
	char dir[KC_PATH_MAX];
	char token[128];
	pthread_mutex_t mtx;       /* served_bytes */
	pthread_mutex_t write_mtx; /* one materialisation at a time */
	orch_callq *q;
	uint64_t served_bytes;
};

static void blob_refuse(bus_call *call, const char *hash, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Answers a valid-token request that cannot be served: what is wrong. */
static void
blob_refuse(bus_call *call, const char *hash, const char *fmt, ...)
{
	Kclaw__WorkReply wr = KCLAW__WORK_REPLY__INIT;
	Kclaw__BlobChunk bc = KCLAW__BLOB_CHUNK__INIT;
	char text[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	bc.hash = (char *)(hash ? hash : "");
	bc.error = text;
	wr.blob = &bc;
	kc_call_reply_msg(call, &wr.base);
}

static bool
blob_hash_ok(const char *h)
{
	return h != NULL && strlen(h) == 64 &&
	    strspn(h, "0123456789abcdef") == 64;
}

/* Opens dir/<hash>.npy, writing it from the store first when the run
 * folder lost it. -1 with errno ENOENT when the store has no such blob. */
static int
blob_open(orch_blob_server *bs, const char *hash, char *path, size_t n)
{
	void *data;
	size_t len;
	int fd;

	snprintf(path, n, "%s/%s.npy", bs->dir, hash);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) >= 0 ||
	    errno != ENOENT)
		return fd;
	pthread_mutex_lock(&bs->write_mtx);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0 &&
	    store_blob_get(bs->s, hash, &data, &len) == 0) {
		if (kc_write_file(path, data, len) == 0)
			fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		free(data);
	}
	pthread_mutex_unlock(&bs->write_mtx);
	kc_clearerr();
	if (fd < 0)
		errno = ENOENT;
	return fd;
}

static void
blob_serve(orch_blob_server *bs, bus_call *call)
{
	Kclaw__WorkReply wr = KCLAW__WORK_REPLY__INIT;
	Kclaw__BlobChunk bc = KCLAW__BLOB_CHUNK__INIT;
	Kclaw__WorkRequest *req;
	const Kclaw__BlobRequest *br;
	char path[KC_PATH_MAX];
	const void *data;
	uint8_t *buf = NULL;
	struct stat st;
	size_t len, want, got = 0;
	int fd;

	data = bus_call_data(call, &len);
	/* The token first, like every work request. */
	if (kc_call_authorize(
	        call, data, len, KC_WORK_TOKEN_FIELD, bs->token) != 0) {
		wr.error = KC_TOKEN_REFUSED_WORK;
		kc_call_reply_msg(call, &wr.base);
		return;
	}
	if ((req = kclaw__work_request__unpack(NULL, len, data)) == NULL ||
	    req->blob == NULL) {
		if (req)
			kclaw__work_request__free_unpacked(req, NULL);
		blob_refuse(call, NULL,
		    "the blob request did not decode; is the worker the same "
		    "version as the orchestrator?");
		return;
	}
	br = req->blob;
	if (!blob_hash_ok(br->hash)) {
		blob_refuse(call, NULL,
		    "blob: the hash must be 64 lowercase hex digits (a "
		    "sha256), not '%.80s'",
		    br->hash ? br->hash : "");
		goto out;
	}
	if ((fd = blob_open(bs, br->hash, path, sizeof(path))) < 0) {
		blob_refuse(call, br->hash,
		    "blob %s is not in this orchestrator's store (a task "
		    "names it, but it was never imported)",
		    br->hash);
		goto out;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		blob_refuse(
		    call, br->hash, "blob %s: cannot read %s", br->hash, path);
		goto out;
	}
	if (br->offset > (uint64_t)st.st_size) {
		close(fd);
		blob_refuse(call, br->hash,
		    "blob %s: offset %llu is past its end (%llu bytes)",
		    br->hash, (unsigned long long)br->offset,
		    (unsigned long long)st.st_size);
		goto out;
	}
	want = br->length == 0 || br->length > ORCH_BLOB_CHUNK_MAX
	    ? ORCH_BLOB_CHUNK_MAX
	    : br->length;
	if (want > (uint64_t)st.st_size - br->offset)
		want = (size_t)((uint64_t)st.st_size - br->offset);
	if ((buf = malloc(want ? want : 1)) == NULL) {
		close(fd);
		bus_call_drop(call);
		goto out;
	}
	while (got < want) {
		ssize_t r =
		    pread(fd, buf + got, want - got, (off_t)(br->offset + got));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	close(fd);
	if (got < want) {
		blob_refuse(call, br->hash, "blob %s: short read of %s",
		    br->hash, path);
		goto out;
	}
	bc.hash = br->hash;
	bc.offset = br->offset;
	bc.total = (uint64_t)st.st_size;
	bc.data.data = buf;
	bc.data.len = got;
	wr.blob = &bc;
	kc_call_reply_msg(call, &wr.base);
	pthread_mutex_lock(&bs->mtx);
	bs->served_bytes += got;
	pthread_mutex_unlock(&bs->mtx);
out:
	free(buf);
	kclaw__work_request__free_unpacked(req, NULL);
}

static void
blob_serve_cb(void *arg, bus_call *call)
{
	blob_serve(arg, call);
}

int
orch_blob_server_open(
    orch_blob_server **out, store *s, const char *cache_dir, const char *token)
{
	orch_callq_ops ops = {blob_serve_cb, NULL, NULL};
	orch_blob_server *bs;
	int rv;

	if ((bs = calloc(1, sizeof(*bs))) == NULL)
		return KC_ENOMEM;
	bs->s = s;
	kc_strlcpy(bs->dir, cache_dir, sizeof(bs->dir));
	kc_strlcpy(bs->token, token ? token : "", sizeof(bs->token));
	pthread_mutex_init(&bs->mtx, NULL);
	pthread_mutex_init(&bs->write_mtx, NULL);
	ops.arg = bs;
	if ((rv = kc_mkdirs(cache_dir, 0700)) != 0 ||
	    (rv = orch_callq_open(&bs->q, "blobs", ORCH_BLOB_THREADS,
	         ORCH_BLOB_QUEUE, 0, &ops)) != 0) {
		orch_blob_server_close(bs);
		return rv;
	}
	*out = bs;
	return 0;
}

void
orch_blob_server_post(orch_blob_server *bs, bus_call *call)
{
	orch_callq_post(bs->q, call);
}

void
orch_blob_server_stop(orch_blob_server *bs)
{
	if (bs != NULL)
		orch_callq_stop(bs->q);
}

void
orch_blob_server_close(orch_blob_server *bs)
{
	if (bs == NULL)
		return;
	orch_callq_close(bs->q);
	pthread_mutex_destroy(&bs->mtx);
	pthread_mutex_destroy(&bs->write_mtx);
	free(bs);
}
