/*
 * security.h - who may talk to kclawd, and what a request may make it read.
 * docs/security.md has the threat model.
 */
#ifndef ORCH_SECURITY_H
#define ORCH_SECURITY_H

#include <stddef.h>

#include "kc_config.h"

/*
 * The check at kclawd's start: an API or work address that other hosts can
 * reach (anything but ipc:// and inproc://) needs a token, unless the
 * deployment says "insecure_tcp": true in kclaw.json or
 * KCLAW_INSECURE_TCP=1. Returns 0, or KC_EPERM with kc_lasterr() saying why
 * and what to do.
 */
int orch_security_check(const kc_config *cfg);

/*
 * Whether Submit.bundle_dir may be read: its real path must lie inside one
 * of the allowed roots (kclawd's working folder, the deployment home, and
 * kclaw.json's "bundle_roots"). On success real (n bytes) holds the real
 * path. KC_ENOENT when dir does not exist, KC_EPERM when it is outside;
 * kc_lasterr() says what to do.
 */
int orch_bundle_dir_check(
    const kc_config *cfg, const char *dir, char *real, size_t n);

#endif
