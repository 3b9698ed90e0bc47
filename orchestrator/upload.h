/*
 * upload.h - tensors uploaded by content before a Submit (the PutBlob rpc;
 * docs/orchestrator.md "Tensors uploaded by content").
 *
 * Submit carries no large tensors: a client sends each tensor file's
 * content in pieces of at most ORCH_UPLOAD_CHUNK_MAX with PutBlob, then
 * submits the spec naming the contents by hash (TensorData.blob). That
 * keeps the API socket's receive limit (ORCH_API_MAX_MSG) small, so a peer
 * that has proved nothing can make NNG buffer little (docs/security.md
 * "Authenticate before buffering").
 *
 * The pieces are staged in run/blobs/staging/<hash>.part and hashed as
 * they arrive; when `total` bytes are there the SHA-256 must be the
 * declared one, and the content enters the store's blobs and the
 * evaluations' cache run/blobs/<hash>.npy, as an imported tensor does.
 * Bounds: one upload at most ORCH_BLOB_MAX bytes, at most
 * ORCH_UPLOAD_MAX_OPEN unfinished at once, their declared sizes together
 * at most the staged-bytes limit; an upload idle for longer than the idle
 * limit is removed (also at start, by the file's age). A restarted kclawd
 * adopts the younger partial files, so a client resumes where it was.
 *
 * Served by one thread of its own, off the loop (hashing and storing a
 * large blob takes seconds), with at most ORCH_UPLOAD_QUEUE requests
 * waiting. The token is checked on the wire first, as for every request.
 */
#ifndef ORCH_UPLOAD_H
#define ORCH_UPLOAD_H

#include <stdint.h>

#include "api.h"
#include "blobput.h"
#include "bus.h"
#include "store.h"

/* The API socket's receive limit: a PutBlob piece and its envelope, or a
 * spec without large tensors, fit; an unproven peer can make NNG hold at
 * most this much per connection (BUS_MAX_NEW_CONNS of them). */
#define ORCH_API_MAX_MSG KC_API_MAX_MSG
#define ORCH_UPLOAD_CHUNK_MAX KC_BLOB_PUT_CHUNK
#define ORCH_UPLOAD_MAX_OPEN 16
#define ORCH_UPLOAD_QUEUE 64
/* Defaults of kclaw.json's orchestrator.upload_staged_bytes and
 * orchestrator.upload_idle_ms. */
#define ORCH_UPLOAD_STAGED_DEFAULT ((uint64_t)8 << 30)
#define ORCH_UPLOAD_IDLE_DEFAULT_MS (15u * 60 * 1000)

typedef struct {
	uint64_t staged_max; /* declared bytes of unfinished uploads, in all */
	uint32_t idle_ms;    /* an upload untouched this long is removed */
} orch_upload_limits;

typedef struct orch_upload orch_upload;

/*
 * Serves PutBlob for the store s, staging under blobs_dir/staging and
 * finishing into blobs_dir/<hash>.npy (the evaluations' cache). Removes
 * what is stale in the staging folder and adopts the rest. token "" asks
 * for none (ipc://, or insecure_tcp).
 */
int orch_upload_open(orch_upload **out, store *s, const char *blobs_dir,
    const char *token, const orch_upload_limits *lim);
/* From the API socket's NNG thread: never blocks; takes call (a whole
 * ApiRequest whose method is PutBlob). */
void orch_upload_post(orch_upload *u, bus_call *call);
/* Joins the thread and drops waiting calls (before the API socket closes);
 * close also frees. Partial uploads stay on disk for a restart. */
void orch_upload_stop(orch_upload *u);
void orch_upload_close(orch_upload *u);

#endif
