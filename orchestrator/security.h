/*
 * security.h - who may talk to kclawd, and what a request may make it read.
 * docs/security.md has the threat model.
 */
#ifndef ORCH_SECURITY_H
#define ORCH_SECURITY_H

#include <stddef.h>

#include "bundle.h"
#include "kc_config.h"
#include "kclaw.pb-c.h"

/*
 * The check at kclawd's start: an API or work address that other hosts can
 * reach (anything but ipc:// and inproc://) needs a token, and the
 * dashboard (http_url), which asks for none, must be on a loopback host;
 * unless the deployment says "insecure_tcp": true in kclaw.json or
 * KCLAW_INSECURE_TCP=1. Call it after every override of cfg. Returns 0, or
 * KC_EPERM with kc_lasterr() saying why and what to do.
 */
int orch_security_check(const kc_config *cfg);

/*
 * Whether Submit.bundle_dir may be read: its real path must lie inside one
 * of the allowed roots: kclawd's working folder, the deployment home,
 * KCLAW_BUNDLE_ROOTS (folders separated by ':') and kclaw.json's
 * "bundle_roots" (read per request). On success real (n bytes) holds the real
 * path. KC_ENOENT when dir does not exist, KC_EPERM when it is outside;
 * kc_lasterr() says what to do.
 */
int orch_bundle_dir_check(
    const kc_config *cfg, const char *dir, char *real, size_t n);

/*
 * The same rule for the .npy files a spec's reference names
 * (TensorData.path): a spec sent over the API must not make the sandbox
 * read a file outside the allowed roots. Each file is opened as the
 * importer opens it (orch_data_open), so what is refused here is refused
 * there too. KC_EPERM / KC_EINVAL with the tensor and what to do.
 */
int orch_spec_paths_check(const kc_config *cfg, const Kclaw__TaskSpec *spec);

/*
 * The rule for every file kclawd reads as task data (a kc_path_rule's
 * allow, arg a const kc_config *): its real path lies inside an allowed
 * root, and is none of the deployment's own files, whatever root holds
 * it: kclaw.json, db/, run/ (sockets, logs), cache/, recordings/ and the
 * LLM key file that kclaw.json or KCLAW_LLM_API_KEY_FILE names.
 */
int orch_data_rule(void *cfg, const char *what, const char *real);

/*
 * Opens a tensor file that a spec names for reading, with orch_data_rule
 * and the .npy magic checked on the descriptor (kc_bundle_open). Submit's
 * check and the importer (also after a restart) both open with it.
 */
int orch_data_open(const kc_config *cfg, const char *path, const char *what,
    kc_bundle_file *out);

#endif
