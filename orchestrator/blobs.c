#include "blobs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kc_config.h"
#include "kc_err.h"
#include "kc_util.h"

typedef int (*blobs_fn)(store *s, const char *arg, Kclaw__TensorData *td);

/* Calls fn for every tensor of every reference set. */
static int
blobs_each(store *s, const char *arg, Kclaw__TaskSpec *spec, blobs_fn fn)
{
	Kclaw__Reference *ref = spec->reference;
	int rv;

	if (ref == NULL)
		return 0;
	for (size_t i = 0; i < ref->n_sets; i++) {
		Kclaw__TensorSet *set = ref->sets[i];
		for (size_t k = 0; k < set->n_inputs; k++)
			if ((rv = fn(s, arg, set->inputs[k])) != 0)
				return rv;
		for (size_t k = 0; k < set->n_expected; k++)
			if ((rv = fn(s, arg, set->expected[k])) != 0)
				return rv;
	}
	return 0;
}

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
blobs_import_one(store *s, const char *arg, Kclaw__TensorData *td)
{
	char hash[65], *data = NULL;
	size_t len;
	int rv;

	(void)arg;
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
	return blobs_each(s, NULL, spec, blobs_import_one);
}

static int
blobs_materialize_one(store *s, const char *dir, Kclaw__TensorData *td)
{
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
	return blobs_each(s, cache_dir, spec, blobs_materialize_one);
}
