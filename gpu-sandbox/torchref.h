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
#include <sys/types.h>

typedef struct sbx_torchref sbx_torchref;

/*
 * A client for the reference process (not started until the first call).
 * python: the interpreter (NULL: $KCLAW_PYTHON, else "python3"); script:
 * torchref.py (NULL: $KCLAW_TORCHREF, else share/kclaw/torch/torchref.py
 * beside the binary). Returns 0 or KC_ENOMEM.
 *
 * With $KCLAW_TORCHREF_WARM naming a folder (kclaw eval sets it to its
 * home's run/), the client connects to the warm reference process on a
 * socket there, starting it when none listens: it survives this sandbox
 * and serves the next one (docs/torchref.md "Warm process"). Where it is
 * busy or unusable, a private process is started as without the variable.
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

/*
 * The same in two halves, so the caller can work while the process does:
 * sbx_torchref_send starts the process if none runs and sends req, whose
 * reply sbx_torchref_receive then reads (waiting up to timeout_ms from the
 * send), failing as sbx_torchref_call does. Up to SBX_TORCHREF_PIPELINE
 * requests may wait for their replies, which come in the order sent (the
 * process answers one request at a time); one more is KC_EBUSY.
 * sbx_torchref_pending names the op of the oldest (NULL: none).
 * sbx_torchref_drop reads and drops every reply not received (an
 * evaluation that stopped before it needed them), as sbx_torchref_call
 * does first, so the connection stays in step. sbx_torchref_settle waits
 * for every reply still due and keeps them, so the process is idle on
 * return; sbx_torchref_receive then hands them out in order, each with
 * its own failure (a process that died answering one loses the later
 * ones, as reading them one by one would).
 */
#define SBX_TORCHREF_PIPELINE 16
int sbx_torchref_send(sbx_torchref *r, const cJSON *req, int timeout_ms);
int sbx_torchref_receive(sbx_torchref *r, cJSON **reply);
const char *sbx_torchref_pending(const sbx_torchref *r);
void sbx_torchref_drop(sbx_torchref *r);
void sbx_torchref_settle(sbx_torchref *r);

/* The hello reply's fields once started ("" before). */
const char *sbx_torchref_version(const sbx_torchref *r);
/* Processes started so far. */
unsigned sbx_torchref_starts(const sbx_torchref *r);
/* Kills the process now, the warm one too (the next call starts a fresh
 * one). sbx_torchref_free kills a private process and leaves the warm one
 * for the next sandbox. */
void sbx_torchref_kill(sbx_torchref *r);
/* The process served by (private or warm), 0 before the first call. */
pid_t sbx_torchref_pid(const sbx_torchref *r);
/* Whether the connection is to the warm process. */
int sbx_torchref_is_warm(const sbx_torchref *r);

/*
 * The math mode a baseline at the candidate's precision is timed in (the
 * reference's "precision": "tf32", "f16" or "bf16"), from what
 * sbx_precision_scan found (its `what`): the lowest precision named; FP8,
 * which PyTorch's eager mode has no autocast for, is matched by bf16.
 * NULL when what names none.
 */
const char *sbx_torchref_precision(const char *what);

/* The start-up limit: importing PyTorch takes seconds. */
#define SBX_TORCHREF_START_MS 120000
/* The longest line either side sends. */
#define SBX_TORCHREF_LINE_MAX (16u << 20)

#endif
