#include "blobs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bundle.h"
#include "kc_config.h"
#include "kc_err.h"
#include "kc_util.h"

/* What the per-tensor steps need besides the tensor. */
struct blobs_ctx {
	store *s;
	const char *dir;
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

static int
blobs_import_one(Kclaw__TensorData *td, void *arg)
{
	store *s = ((struct blobs_ctx *)arg)->s;
	char hash[65], *data = NULL;
	size_t len;
	int rv;

	if (td->blob != NULL && strlen(td->blob) == 64)
		return 0;
	if (td->data.len > 0) {
		rv = store_blob_put(s, td->data.data, td->data.len, hash);
	} else if (td->path != NULL && *td->path != '\0') {
		if ((rv = kc_read_file(td->path, ORCH_BLOB_MAX, &data, &len)) !=
		    0)
			return kc_seterr(
			    rv, "tensor '%s': %s", td->name, kc_lasterr());
		rv = store_blob_put(s, data, len, hash);
		free(data);
	} else {
		return 0;
	}
	return rv != 0 ? rv : blobs_set_str(&td->blob, hash);
}

int
orch_blobs_import(store *s, Kclaw__TaskSpec *spec)
{
	struct blobs_ctx ctx = {.s = s};

	return kc_spec_each_tensor_data(spec, blobs_import_one, &ctx);
}

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

	if (td->blob == NULL || strlen(td->blob) != 64 ||
	    strspn(td->blob, "0123456789abcdef") != 64)
		return 0;
	snprintf(path, sizeof(path), "%s/%s.npy", dir, td->blob);
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
