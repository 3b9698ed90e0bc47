#include "blobs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bundle.h"
#include "kc_config.h"
#include "kc_err.h"
#include "kc_util.h"

/* What the per-tensor steps need besides the tensor. */
struct blobs_ctx {
	store *s;
	const char *dir;
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
		if ((rv = kc_read_file(td->path, ORCH_BLOB_MAX, &data, &len)) !=
		    0)
			return kc_seterr(
			    rv, "tensor '%s': %s", td->name, kc_lasterr());
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
orch_blobs_import(store *s, Kclaw__TaskSpec *spec, const char *cache_dir,
    int (*progress)(void *arg, const orch_blobs_progress *p), void *arg)
{
	struct blobs_ctx ctx = {
	    .s = s, .dir = cache_dir, .progress = progress, .arg = arg};
	int rv;

	if (cache_dir != NULL && (rv = kc_mkdirs(cache_dir, 0700)) != 0)
		return rv;
	kc_spec_each_tensor_data(spec, blobs_count, &ctx.p);
	if (progress && (rv = progress(arg, &ctx.p)) != 0)
		return rv;
	return kc_spec_each_tensor_data(spec, blobs_import_one, &ctx);
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
