#include "kc_err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char kc_errbuf[2048];

const char *
kc_strerror(int err)
{
	switch (err) {
	case KC_OK: return "success";
	case KC_ENOMEM: return "out of memory";
	case KC_EINVAL: return "invalid argument or input";
	case KC_EIO: return "input/output error";
	case KC_ENOENT: return "not found";
	case KC_ETIMEDOUT: return "timed out";
	case KC_ECLOSED: return "closed";
	case KC_EPROTO: return "malformed message";
	case KC_ESTORE: return "store error";
	case KC_EBUS: return "bus error";
	case KC_ENOSPC: return "size limit exceeded";
	case KC_EEXIST: return "already exists";
	case KC_ENODEV: return "no GPU device or driver";
	case KC_ECUDA: return "CUDA error";
	case KC_EHTTP: return "HTTP error";
	case KC_ECANCELED: return "cancelled";
	case KC_EBUSY: return "busy";
	case KC_ENOTSUP: return "not supported";
	case KC_EPERM: return "not permitted";
	case KC_EINTERNAL: return "internal error";
	default: return "unknown error";
	}
}

int
kc_seterr(int err, const char *fmt, ...)
{
	char msg[sizeof(kc_errbuf)];
	va_list ap;

	/* Callers wrap the last error ("%s: %s", file, kc_lasterr()): format
	 * into a copy first, as vsnprintf must not write the buffer it reads.
	 */
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	memcpy(kc_errbuf, msg, strlen(msg) + 1);
	return err;
}

const char *
kc_lasterr(void)
{
	return kc_errbuf[0] != '\0' ? kc_errbuf : "";
}

void
kc_clearerr(void)
{
	kc_errbuf[0] = '\0';
}
