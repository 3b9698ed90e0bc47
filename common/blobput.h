/*
 * blobput.h - a client's side of the PutBlob rpc: tensor contents sent to
 * the orchestrator by hash before a Submit names them (docs/orchestrator.md
 * "Tensors uploaded by content"; the server is orchestrator/upload.c).
 *
 * Each content goes in pieces of at most KC_BLOB_PUT_CHUNK bytes, one
 * request answered before the next, so neither side holds more than a
 * piece. The first request carries no data and asks where the content
 * stands: already stored (nothing is sent), or how many bytes an earlier,
 * interrupted upload left staged (sending resumes there). Every answer says
 * how much the orchestrator has, and the next piece starts there.
 */
#ifndef KC_BLOBPUT_H
#define KC_BLOBPUT_H

#include <stddef.h>
#include <stdint.h>

#include "bus.h"

#define KC_BLOB_PUT_CHUNK ((size_t)2 << 20)

/* The sha256 (hex) and size of the file at path, read in pieces. */
int kc_blob_hash_file(const char *path, char hash[65], uint64_t *size);

/*
 * Makes sure the orchestrator behind c holds the content of the file at
 * path, whose sha256 is hash (kc_blob_hash_file): sends what it lacks.
 * *sent (may be NULL) is set to the bytes sent (0 when it had them all).
 * An error says how far the upload got; calling again resumes it. The
 * file must not change meanwhile (the orchestrator checks the hash and
 * discards a mismatch).
 */
int kc_blob_put_file(bus_client *c, const char *token, const char *path,
    const char *hash, uint64_t *sent);

/* The same for len bytes in memory; hash receives their sha256. */
int kc_blob_put_bytes(bus_client *c, const char *token, const void *data,
    size_t len, char hash[65], uint64_t *sent);

#endif
