/*
 * mon_upload.c - POST /api/tasks: a task bundle uploaded as a tar archive
 * (docs/api.md "Submit"), submitted as `kclaw submit` does it.
 *
 * The token is checked on the request's headers before any of the body is
 * read (monitor.c, mon_submit_cb); the body is then streamed to a private
 * temporary folder, never held in memory: at most MON_UPLOAD_MAX bytes,
 * MON_MAX_UPLOADS at once, each read within MON_IO_TIMEOUT_MS. The archive
 * is unpacked there (regular files and folders only, no absolute names, no
 * "..", no links), the bundle loaded and checked (kc_bundle_load), its
 * tensor files uploaded by content (PutBlob) and the spec submitted
 * (Submit): the orchestrator applies the same rules and limits as to any
 * API client. The folder is removed afterwards.
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api.h"
#include "blobput.h"
#include "bundle.h"
#include "kc_err.h"
#include "kc_log.h"
#include "kc_util.h"
#include "monitor_int.h"
#include "pbjson.h"

/* An archive's entries, at most. */
#define MON_TAR_MAX_ENTRIES 4096

struct mon_upload {
	mon *m;
	struct mon_conn *c;
	uint64_t len;
	char task_id[80];
	char dir[64];
	bus_client *api;
};

/* ------------------------------------------------------------- tar */

static uint64_t
mon_tar_octal(const unsigned char *p, size_t n, bool *ok)
{
	uint64_t v = 0;
	size_t i = 0;

	while (i < n && p[i] == ' ')
		i++;
	for (; i < n && p[i] >= '0' && p[i] <= '7'; i++)
		v = v * 8 + (uint64_t)(p[i] - '0');
	*ok = i == n || p[i] == '\0' || p[i] == ' ';
	return v;
}

/* Whether an entry's name stays inside the folder: relative, no "..". */
static bool
mon_tar_name_ok(const char *name)
{
	const char *p = name;

	if (*name == '\0' || *name == '/')
		return false;
	while (*p != '\0') {
		size_t n = strcspn(p, "/");
		if (n == 2 && p[0] == '.' && p[1] == '.')
			return false;
		p += n;
		while (*p == '/')
			p++;
	}
	return true;
}

/* Copies n bytes of the archive f into the new file path (0600, refused if
 * it exists). */
static int
mon_tar_copy(FILE *f, const char *path, uint64_t n)
{
	char buf[65536];
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
	int rv = 0;

	if (fd < 0)
		return kc_seterr(KC_EINVAL,
		    "the archive holds '%s' twice, or under a file", path);
	while (n > 0 && rv == 0) {
		size_t k = n < sizeof(buf) ? (size_t)n : sizeof(buf);
		if (fread(buf, 1, k, f) != k)
			rv = kc_seterr(KC_EINVAL, "the archive is truncated");
		else if (write(fd, buf, k) != (ssize_t)k)
			rv = kc_seterr(KC_EIO, "cannot stage the bundle: %s",
			    strerror(errno));
		n -= k;
	}
	close(fd);
	return rv;
}

/* Unpacks the ustar archive at tar into dir. */
static int
mon_tar_extract(const char *tar, const char *dir)
{
	unsigned char h[512];
	char name[300], path[600];
	FILE *f = fopen(tar, "rb");
	int rv = 0, entries = 0;

	if (f == NULL)
		return kc_seterr(KC_EIO, "cannot read the staged archive");
	for (;;) {
		bool ok, zero = true;
		uint64_t size;
		if (fread(h, 1, sizeof(h), f) != sizeof(h)) {
			rv = kc_seterr(KC_EINVAL,
			    "the upload is not a tar archive (or is "
			    "truncated): send `tar -cf - -C BUNDLE .`");
			break;
		}
		for (size_t i = 0; i < sizeof(h) && zero; i++)
			zero = h[i] == 0;
		if (zero)
			break; /* the end-of-archive block */
		if (++entries > MON_TAR_MAX_ENTRIES) {
			rv = kc_seterr(KC_EINVAL,
			    "the archive has more than %d entries",
			    MON_TAR_MAX_ENTRIES);
			break;
		}
		size = mon_tar_octal(h + 124, 12, &ok);
		if (!ok || memcmp(h + 257, "ustar", 5) != 0) {
			rv = kc_seterr(KC_EINVAL,
			    "the upload is not a ustar/pax tar archive");
			break;
		}
		if (h[345] != '\0')
			snprintf(name, sizeof(name), "%.155s/%.100s",
			    (const char *)h + 345, (const char *)h);
		else
			snprintf(name, sizeof(name), "%.100s", (const char *)h);
		while (strncmp(name, "./", 2) == 0)
			memmove(name, name + 2, strlen(name + 2) + 1);
		switch (h[156]) {
		case 'x':
		case 'g':
			/* pax attributes (times, owners): not needed. */
			if (fseeko(f, (off_t)((size + 511) / 512 * 512),
			        SEEK_CUR) != 0)
				rv = kc_seterr(KC_EINVAL, "truncated archive");
			break;
		case '5':
			if (name[0] == '\0' || strcmp(name, ".") == 0 ||
			    strcmp(name, "./") == 0)
				break;
			if (!mon_tar_name_ok(name)) {
				rv = kc_seterr(KC_EINVAL,
				    "the archive names '%s', outside the "
				    "bundle",
				    name);
				break;
			}
			snprintf(path, sizeof(path), "%s/%s", dir, name);
			rv = kc_mkdirs(path, 0700);
			break;
		case '0':
		case '\0':
			if (!mon_tar_name_ok(name)) {
				rv = kc_seterr(KC_EINVAL,
				    "the archive names '%s', outside the "
				    "bundle",
				    name);
				break;
			}
			snprintf(path, sizeof(path), "%s/%s", dir, name);
			{
				char *slash = strrchr(path, '/');
				*slash = '\0';
				rv = kc_mkdirs(path, 0700);
				*slash = '/';
			}
			if (rv == 0)
				rv = mon_tar_copy(f, path, size);
			if (rv == 0 && size % 512 &&
			    fseeko(f, (off_t)(512 - size % 512), SEEK_CUR) != 0)
				rv = kc_seterr(KC_EINVAL, "truncated archive");
			break;
		default:
			rv = kc_seterr(KC_EINVAL,
			    "the archive's entry '%s' is not a file or a "
			    "folder (links and devices are refused)",
			    name);
			break;
		}
		if (rv != 0)
			break;
	}
	fclose(f);
	return rv;
}

/* The bundle's folder in the unpacked archive: its top, or its one
 * folder, whichever holds task.json. */
static int
mon_bundle_root(const char *dir, char *out, size_t n)
{
	char path[600], *sub = NULL;
	struct stat st;
	DIR *d;
	struct dirent *e;
	int count = 0;

	snprintf(path, sizeof(path), "%s/task.json", dir);
	if (lstat(path, &st) == 0) {
		snprintf(out, n, "%s", dir);
		return 0;
	}
	/* One folder at the top ("softmax_rows/task.json"). */
	if ((d = opendir(dir)) != NULL) {
		while ((e = readdir(d)) != NULL) {
			if (e->d_name[0] == '.')
				continue;
			count++;
			free(sub);
			sub = strdup(e->d_name);
		}
		closedir(d);
	}
	if (count == 1 && sub != NULL) {
		snprintf(path, sizeof(path), "%s/%s/task.json", dir, sub);
		if (lstat(path, &st) == 0) {
			snprintf(out, n, "%s/%s", dir, sub);
			free(sub);
			return 0;
		}
	}
	free(sub);
	return kc_seterr(KC_EINVAL,
	    "the archive has no task.json, at its top or in its one folder");
}

static int
mon_rm_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	remove(path);
	return 0;
}

/* ------------------------------------------------------------ submit */

/* A tensor file of the bundle, sent by content and then named by hash
 * (as `kclaw submit` does, tools/cli/cli_submit.c). */
static int
mon_upload_tensor(Kclaw__TensorData *td, void *arg)
{
	struct mon_upload *u = arg;
	char hash[65], why[512];
	int rv;

	if (td->path == NULL || *td->path == '\0')
		return 0;
	if ((rv = kc_blob_hash_file(td->path, hash, NULL)) != 0 ||
	    (rv = kc_blob_put_file(
	         u->api, u->m->token, td->path, hash, NULL)) != 0) {
		kc_strlcpy(why, kc_lasterr(), sizeof(why));
		return kc_seterr(rv, "tensor '%s': %s", td->name, why);
	}
	if (td->blob != NULL && td->blob != protobuf_c_empty_string)
		free(td->blob);
	if ((td->blob = strdup(hash)) == NULL)
		return KC_ENOMEM;
	if (td->path != protobuf_c_empty_string)
		free(td->path);
	td->path = (char *)protobuf_c_empty_string;
	return 0;
}

/* Loads the unpacked bundle and submits it; *id receives the task's id. */
static int
mon_upload_submit(struct mon_upload *u, const char *root, char *id, size_t n)
{
	Kclaw__TaskSpec *spec = NULL;
	Kclaw__SubmitRequest req = KCLAW__SUBMIT_REQUEST__INIT;
	Kclaw__SubmitResponse *resp;
	int rv;

	if ((rv = kc_bundle_load(root, &spec)) != 0)
		return rv;
	if ((rv = bus_client_open(&u->api, u->m->api_url, 0)) != 0 ||
	    (rv = kc_spec_each_tensor_data(spec, mon_upload_tensor, u)) != 0)
		goto out;
	req.spec = spec;
	if (u->task_id[0] != '\0')
		req.task_id = u->task_id;
	if ((rv = kc_api_call(u->api, "Submit", &req.base, u->m->token,
	         MON_API_TIMEOUT_MS, &kclaw__submit_response__descriptor,
	         (ProtobufCMessage **)&resp)) != 0)
		goto out;
	kc_strlcpy(id, resp->task_id, n);
	kclaw__submit_response__free_unpacked(resp, NULL);
out:
	kclaw__task_spec__free_unpacked(spec, NULL);
	return rv;
}

/* Reads the body into dir/upload.tar. */
static int
mon_upload_body(struct mon_upload *u, const char *tar)
{
	char buf[65536];
	uint64_t left = u->len;
	int fd = open(tar, O_WRONLY | O_CREAT | O_EXCL, 0600);
	int rv = 0;

	if (fd < 0)
		return kc_seterr(
		    KC_EIO, "cannot stage the upload: %s", strerror(errno));
	while (left > 0 && rv == 0) {
		size_t got = 0;
		size_t want = left < sizeof(buf) ? (size_t)left : sizeof(buf);
		if (u->m->stop) {
			rv = kc_seterr(KC_ECLOSED, "shutting down");
		} else if (mon_conn_read(u->c, buf, want, &got) != 0 ||
		    got == 0) {
			rv = kc_seterr(KC_ECLOSED,
			    "the upload stopped after %llu of %llu bytes",
			    (unsigned long long)(u->len - left),
			    (unsigned long long)u->len);
		} else if (write(fd, buf, got) != (ssize_t)got) {
			rv = kc_seterr(KC_EIO, "cannot stage the upload: %s",
			    strerror(errno));
		}
		left -= got;
	}
	close(fd);
	return rv;
}

static void *
mon_upload_main(void *arg)
{
	struct mon_upload *u = arg;
	mon *m = u->m;
	char tar[128], unpacked[128], root[700], id[80] = "";
	static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
	int rv;

	snprintf(tar, sizeof(tar), "%s/upload.tar", u->dir);
	snprintf(unpacked, sizeof(unpacked), "%s/bundle", u->dir);
	/* Sent whether or not the client asked (clients must take a 1xx they
	 * did not expect): it also tells the connection guard that this
	 * connection was answered, so a long upload is not taken for a
	 * stalled request. */
	if (mon_conn_write(u->c, cont, sizeof(cont) - 1) != 0)
		goto out;
	if ((rv = mon_upload_body(u, tar)) != 0) {
		KC_WARN("dashboard: upload: %s", kc_lasterr());
		kc_clearerr();
		goto out; /* the peer is gone or stalled: no answer */
	}
	if ((rv = kc_mkdirs(unpacked, 0700)) == 0 &&
	    (rv = mon_tar_extract(tar, unpacked)) == 0 &&
	    (rv = mon_bundle_root(unpacked, root, sizeof(root))) == 0)
		rv = mon_upload_submit(u, root, id, sizeof(id));
	if (rv == 0) {
		cJSON *j = cJSON_CreateObject();
		char *t;
		cJSON_AddStringToObject(j, "task_id", id);
		t = cJSON_PrintUnformatted(j);
		cJSON_Delete(j);
		mon_conn_respond(u->c, 201, "application/json", t ? t : "{}");
		free(t);
		KC_INFO("dashboard: task %s submitted by upload", id);
	} else {
		uint16_t st = mon_err_status(rv);
		char *t = mon_error_json(st, kc_lasterr());
		mon_conn_respond(u->c, st, "application/json", t ? t : "{}");
		free(t);
		kc_clearerr();
	}
out:
	nftw(u->dir, mon_rm_one, 16, FTW_DEPTH | FTW_PHYS);
	bus_client_close(u->api);
	mon_conn_end(u->c);
	pthread_mutex_lock(&m->mu);
	m->nuploads--;
	pthread_mutex_unlock(&m->mu);
	free(u);
	mon_thread_done(m);
	return NULL;
}

void
mon_upload_start(mon *m, nng_aio *aio)
{
	nng_http_req *req = nng_aio_get_input(aio, 0);
	const char *cl = nng_http_req_get_header(req, "Content-Length");
	const char *te = nng_http_req_get_header(req, "Transfer-Encoding");
	const char *expect = nng_http_req_get_header(req, "Expect");
	const char *uri = nng_http_req_get_uri(req);
	static const char *const close_hdr[] = {"Connection", "close", NULL};
	struct mon_upload *u;
	char *end = NULL, msg[160];
	bool full;

	if (te != NULL || cl == NULL || *cl == '\0') {
		mon_http_error_h(aio, 411,
		    "send the archive with a Content-Length (curl "
		    "--data-binary @bundle.tar)",
		    close_hdr);
		return;
	}
	if ((u = calloc(1, sizeof(*u))) == NULL) {
		mon_http_error(aio, 500, "out of memory");
		return;
	}
	u->m = m;
	u->len = strtoull(cl, &end, 10);
	if (expect != NULL && strcasecmp(expect, "100-continue") != 0) {
		free(u);
		mon_http_error_h(aio, 417,
		    "only 'Expect: 100-continue' is understood", close_hdr);
		return;
	}
	if (end == NULL || *end != '\0' || u->len == 0 ||
	    u->len > MON_UPLOAD_MAX) {
		snprintf(msg, sizeof(msg),
		    "the archive must be 1 to %llu bytes (its tensors "
		    "included)",
		    (unsigned long long)MON_UPLOAD_MAX);
		free(u);
		mon_http_error_h(aio, 413, msg, close_hdr);
		return;
	}
	if (mon_query(uri, "task_id", u->task_id, sizeof(u->task_id)) &&
	    !mon_valid_id(u->task_id)) {
		free(u);
		mon_http_error_h(aio, 400, "bad task_id", close_hdr);
		return;
	}
	pthread_mutex_lock(&m->mu);
	full = m->stop || m->nuploads >= MON_MAX_UPLOADS;
	if (!full)
		m->nuploads++;
	pthread_mutex_unlock(&m->mu);
	if (full) {
		free(u);
		mon_http_error_h(aio, 503,
		    "two uploads are in progress; try again when one ends",
		    close_hdr);
		return;
	}
	snprintf(u->dir, sizeof(u->dir), "%s/kclaw-upload-XXXXXX",
	    getenv("TMPDIR") && strlen(getenv("TMPDIR")) < 32 ? getenv("TMPDIR")
	                                                      : "/tmp");
	if (mkdtemp(u->dir) == NULL) {
		mon_http_error_h(
		    aio, 500, "cannot make a temporary folder", close_hdr);
		goto fail;
	}
	if (mon_conn_take(m, aio, &u->c) != 0) {
		rmdir(u->dir);
		mon_http_error(aio, 500, "out of memory");
		goto fail;
	}
	if (mon_thread_spawn(m, mon_upload_main, u) != 0) {
		rmdir(u->dir);
		mon_conn_end(u->c);
		goto fail;
	}
	return;
fail:
	pthread_mutex_lock(&m->mu);
	m->nuploads--;
	pthread_mutex_unlock(&m->mu);
	free(u);
}
