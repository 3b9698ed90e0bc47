/*
 * kc_err.h - the one error idiom of kclaw.
 *
 * Every function that can fail returns int: 0 on success or a negative
 * KC_E* code; results travel through out-parameters. kc_strerror gives the
 * text. Messages that reach a user say what failed, on what, and what to do;
 * kc_errmsg is the per-thread buffer for that detail.
 */
#ifndef KC_ERR_H
#define KC_ERR_H

#include <stddef.h>

enum {
	KC_OK = 0,
	KC_ENOMEM = -1,    /* out of memory */
	KC_EINVAL = -2,    /* bad argument or malformed input */
	KC_EIO = -3,       /* file or device I/O failed */
	KC_ENOENT = -4,    /* no such thing (file, key, task) */
	KC_ETIMEDOUT = -5, /* a deadline passed */
	KC_ECLOSED = -6,   /* the peer or object was closed */
	KC_EPROTO = -7,    /* a message did not decode */
	KC_ESTORE = -8,    /* RocksDB reported an error */
	KC_EBUS = -9,      /* NNG reported an error */
	KC_ENOSPC = -10,   /* a size limit was exceeded */
	KC_EEXIST = -11,   /* already exists */
	KC_ENODEV = -12,   /* no GPU or no driver */
	KC_ECUDA = -13,    /* a CUDA/NVRTC/CUPTI call failed */
	KC_EHTTP = -14,    /* an HTTP exchange failed */
	KC_ECANCELED = -15,
	KC_EBUSY = -16,
	KC_ENOTSUP = -17, /* not implemented or not supported here */
	KC_EPERM = -18,   /* refused: bad token, path outside the root */
	KC_EINTERNAL = -19,
};

/* Text for a KC_E* code; never NULL. */
const char *kc_strerror(int err);

/*
 * Per-thread detail for the last error ("task.json: tensor 'x': unknown
 * dtype 'f33'; use one of f32, f16, ..."). kc_seterr formats it and returns
 * err so callers can write `return kc_seterr(KC_EINVAL, "...", ...)`.
 * The arguments may include kc_lasterr() itself, to add context to it.
 */
int kc_seterr(int err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
const char *kc_lasterr(void);
void kc_clearerr(void);

#endif
