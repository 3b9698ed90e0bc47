/*
 * torchref.h - the sandbox child's side of the live PyTorch reference
 * (docs/torchref.md): starts `python3 torchref.py --fd 3` beside the child,
 * speaks its JSON-lines protocol over a Unix socketpair, and kills and
 * restarts it when it crashes, hangs past a request's deadline or answers
 * garbage. No CUDA here: the child maps the buffers the replies name.
 */
#ifndef SBX_TORCHREF_H
#define SBX_TORCHREF_H

#include <cjson/cJSON.h>

typedef struct sbx_torchref sbx_torchref;

/*
 * A client for the reference process (not started until the first call).
 * python: the interpreter (NULL: $KCLAW_PYTHON, else "python3"); script:
 * torchref.py (NULL: $KCLAW_TORCHREF, else share/kclaw/torch/torchref.py
 * beside the binary). Returns 0 or KC_ENOMEM.
 */
int sbx_torchref_new(
    sbx_torchref **out, const char *python, const char *script);
void sbx_torchref_free(sbx_torchref *r);

/*
 * Sends req (one JSON object; not taken) and waits up to timeout_ms for the
 * reply, starting the process first (and saying hello) if none runs. On
 * success *reply is the parsed reply (cJSON_Delete it); a reply with
 * "ok": false is a success of this call: read its "code" and "error". On
 * failure the process is killed (the next call starts a fresh one) and the
 * return is KC_ETIMEDOUT (no reply in time), KC_ECLOSED (it exited: the
 * exit status is in kc_lasterr), KC_EPROTO (a line that is not a JSON
 * object) or KC_ENOENT (python or the script cannot be run).
 */
int sbx_torchref_call(
    sbx_torchref *r, const cJSON *req, int timeout_ms, cJSON **reply);

/* The hello reply's fields once started ("" before). */
const char *sbx_torchref_version(const sbx_torchref *r);
/* Processes started so far. */
unsigned sbx_torchref_starts(const sbx_torchref *r);
/* Kills the process now (the next call starts a fresh one). */
void sbx_torchref_kill(sbx_torchref *r);

/* The start-up limit: importing PyTorch takes seconds. */
#define SBX_TORCHREF_START_MS 120000
/* The longest line either side sends. */
#define SBX_TORCHREF_LINE_MAX (16u << 20)

#endif
