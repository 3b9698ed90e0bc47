/*
 * blobput.c - sending tensor contents with PutBlob. See blobput.h.
 */
#include "blobput.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api.h"
#include "kc_err.h"
#include "kc_util.h"

/* Where the bytes come from: a file (fd) or memory. */
struct put_src {
	int fd;
	const uint8_t *mem;
	const char *what; /* for messages */
};

static int
put_read(const struct put_src *src, uint64_t off, uint8_t *buf, size_t n)
{
	size_t got = 0;

	if (src->mem != NULL) {
		memcpy(buf, src->mem + off, n);
		return 0;
	}
	while (got < n) {
		ssize_t r =
		    pread(src->fd, buf + got, n - got, (off_t)(off + got));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return kc_seterr(KC_EIO, "cannot read %s: %s",
			    src->what,
			    r < 0 ? strerror(errno) : "it became shorter");
		got += (size_t)r;
	}
	return 0;
}

/* One PutBlob call; *resp is the answer (caller frees). */
static int
put_call(bus_client *c, const char *token, const char *hash, uint64_t total,
    uint64_t offset, const uint8_t *data, size_t len,
    Kclaw__PutBlobResponse **resp)
{
	Kclaw__PutBlobRequest req = KCLAW__PUT_BLOB_REQUEST__INIT;
	/* The last piece makes the orchestrator store the whole content:
	 * allow it time in proportion (16 MiB/s), as for any piece. */
	int timeout_ms = 10000 + (int)(total >> 14);

	req.hash = (char *)hash;
	req.total = total;
	req.offset = offset;
	req.data.data = (uint8_t *)data;
	req.data.len = len;
	return kc_api_call(c, "PutBlob", &req.base, token, timeout_ms,
	    &kclaw__put_blob_response__descriptor, (ProtobufCMessage **)resp);
}

static int
put_loop(bus_client *c, const char *token, const struct put_src *src,
    const char *hash, uint64_t total, uint64_t *sent)
{
	Kclaw__PutBlobResponse *resp;
	uint64_t off, done = 0;
	uint8_t *buf = NULL;
	char why[512];
	int rv;

	if (sent)
		*sent = 0;
	/* Where it stands: stored, or staged up to some offset. */
	if ((rv = put_call(c, token, hash, total, 0, NULL, 0, &resp)) != 0)
		goto fail;
	off = resp->received;
	if (resp->stored) {
		kclaw__put_blob_response__free_unpacked(resp, NULL);
		return 0;
	}
	kclaw__put_blob_response__free_unpacked(resp, NULL);
	if (off > total)
		off = 0;
	if ((buf = malloc(KC_BLOB_PUT_CHUNK)) == NULL)
		return KC_ENOMEM;
	for (;;) {
		size_t n = total - off < KC_BLOB_PUT_CHUNK
		    ? (size_t)(total - off)
		    : KC_BLOB_PUT_CHUNK;
		bool stored;
		uint64_t next;
		if (n == 0) {
			rv = kc_seterr(KC_EPROTO,
			    "the orchestrator has all %llu bytes of %s but "
			    "did not store them",
			    (unsigned long long)total, src->what);
			goto fail;
		}
		if ((rv = put_read(src, off, buf, n)) != 0 ||
		    (rv = put_call(
		         c, token, hash, total, off, buf, n, &resp)) != 0)
			goto fail;
		stored = resp->stored;
		next = resp->received;
		kclaw__put_blob_response__free_unpacked(resp, NULL);
		done += n;
		if (stored)
			break;
		if (next <= off || next > total) {
			rv = kc_seterr(KC_EPROTO,
			    "the orchestrator answered %llu bytes received "
			    "after a piece at %llu of %s",
			    (unsigned long long)next, (unsigned long long)off,
			    src->what);
			goto fail;
		}
		off = next;
	}
	free(buf);
	if (sent)
		*sent = done;
	return 0;
fail:
	free(buf);
	kc_strlcpy(why, kc_lasterr(), sizeof(why));
	return kc_seterr(rv,
	    "uploading %s (%llu bytes, sha256 %.12s...): %s; the same command "
	    "again resumes the upload",
	    src->what, (unsigned long long)total, hash, why);
}

int
kc_blob_hash_file(const char *path, char hash[65], uint64_t *size)
{
	kc_sha256_ctx sha;
	uint8_t *buf;
	uint64_t n = 0;
	int fd;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return kc_seterr(errno == ENOENT ? KC_ENOENT : KC_EIO,
		    "cannot read %s: %s", path, strerror(errno));
	if ((buf = malloc(1u << 20)) == NULL) {
		close(fd);
		return KC_ENOMEM;
	}
	kc_sha256_init(&sha);
	for (;;) {
		ssize_t r = read(fd, buf, 1u << 20);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int e = errno;
			free(buf);
			close(fd);
			return kc_seterr(
			    KC_EIO, "cannot read %s: %s", path, strerror(e));
		}
		if (r == 0)
			break;
		kc_sha256_update(&sha, buf, (size_t)r);
		n += (uint64_t)r;
	}
	free(buf);
	close(fd);
	kc_sha256_final_hex(&sha, hash);
	if (size)
		*size = n;
	return 0;
}

int
kc_blob_put_file(bus_client *c, const char *token, const char *path,
    const char *hash, uint64_t *sent)
{
	struct put_src src = {.what = path};
	struct stat st;
	int rv;

	if ((src.fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return kc_seterr(errno == ENOENT ? KC_ENOENT : KC_EIO,
		    "cannot read %s: %s", path, strerror(errno));
	if (fstat(src.fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(src.fd);
		return kc_seterr(KC_EIO, "%s is not a regular file", path);
	}
	rv = put_loop(c, token, &src, hash, (uint64_t)st.st_size, sent);
	close(src.fd);
	return rv;
}

int
kc_blob_put_bytes(bus_client *c, const char *token, const void *data,
    size_t len, char hash[65], uint64_t *sent)
{
	struct put_src src = {.fd = -1, .mem = data, .what = "a tensor"};

	kc_sha256_hex(data, len, hash);
	return put_loop(c, token, &src, hash, len, sent);
}
