/*
 * api.h - the API envelope (kclaw.ApiRequest / kclaw.ApiResponse, see
 * proto/kclaw.proto) over bus_client and bus_server. The method is the rpc
 * name of `service Kclaw` ("Submit", "Status", ...).
 */
#ifndef KC_API_H
#define KC_API_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>

#include "bus.h"
#include "kclaw.pb-c.h"

/* The API socket's receive limit (kclawd's ORCH_API_MAX_MSG): a request
 * envelope over it is refused before it is sent. */
#define KC_API_MAX_MSG ((size_t)4 << 20)

/*
 * Calls method with req and waits up to timeout_ms. On success *resp is the
 * unpacked response of type resp_desc (free with
 * protobuf_c_message_free_unpacked). When the server answers with an error,
 * returns KC_EINVAL / KC_ENOENT / KC_EPERM / ... with the server's message in
 * kc_lasterr(). KC_ETIMEDOUT when no orchestrator answered. A request over
 * KC_API_MAX_MSG is KC_EINVAL at once (kclawd would drop its connection
 * unanswered).
 */
int kc_api_call(bus_client *c, const char *method, const ProtobufCMessage *req,
    const char *token, int timeout_ms,
    const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp);

/* Server side: answers call with code, error text and an optional payload
 * message; takes call. */
int kc_api_reply(bus_call *call, uint64_t request_id, Kclaw__ApiCode code,
    const char *error, const ProtobufCMessage *payload);

/*
 * Server side: 0 when the raw protobuf message msg (len bytes) carries, in
 * its top-level length-delimited field number `field` (the last one, as
 * protobuf reads it), exactly the bytes of want; KC_EPERM otherwise (also
 * for a missing field when want is not empty). Reads the wire, not the
 * decoded C string, so "token\0zzz" is not "token"; the comparison takes
 * the same time wherever the bytes differ. ApiRequest.token is field 5,
 * WorkRequest.token field 8.
 */
int kc_token_check(
    const void *msg, size_t len, unsigned field, const char *want);
#define KC_API_TOKEN_FIELD 5  /* ApiRequest.token */
#define KC_WORK_TOKEN_FIELD 8 /* WorkRequest.token */
/* What a refused token is told, on the API and on the work socket. */
#define KC_TOKEN_REFUSED_API                                                   \
	"bad or missing token: set KCLAW_TOKEN to the deployment's token"
#define KC_TOKEN_REFUSED_WORK                                                  \
	"bad or missing token: set KCLAW_TOKEN (or \"token\" in kclaw.json) "  \
	"to the orchestrator's"
/*
 * The token gate of a server opened with BUS_PROVE_BY_HANDLER: where a
 * token is asked for (token not empty), the request's field `field` on the
 * wire must be it (kc_token_check). 0 when authentic, and the connection
 * is then proved (it leaves the capped set of unproven ones,
 * docs/security.md); KC_EPERM otherwise: the caller answers with
 * KC_TOKEN_REFUSED_*, and the connection is closed once that answer is
 * out (bus_call_reject).
 */
int kc_call_authorize(bus_call *call, const void *data, size_t len,
    unsigned field, const char *token);
/*
 * The gate's proofs (bus_proof_fn; token is the deployment's token, a C
 * string that outlives the server): a first request on the API or work
 * socket must carry the token, or its connection gets the same refusal
 * kclawd's handlers give (KC_TOKEN_REFUSED_*) and is closed before NNG
 * sees it. An empty token proves every request.
 */
int kc_api_proof(
    void *token, const void *req, size_t len, void **refusal, size_t *rlen);
int kc_work_proof(
    void *token, const void *req, size_t len, void **refusal, size_t *rlen);
/* Whether msg has a top-level length-delimited field number `field` (a
 * cheap look at the wire before decoding, e.g. WorkRequest.blob = 9). */
bool kc_pb_has_field(const void *msg, size_t len, unsigned field);
/* Whether msg's top-level length-delimited field number `field` (the last
 * one) holds exactly the bytes of want (e.g. ApiRequest.method = 1 is
 * "PutBlob"); false when it is absent or msg is not protobuf. */
bool kc_pb_field_is(
    const void *msg, size_t len, unsigned field, const char *want);

/* Packs any message into a malloc'd buffer (caller frees). */
int kc_pb_pack(const ProtobufCMessage *m, uint8_t **buf, size_t *len);
/* Replies to call with m packed; a message that cannot be packed drops the
 * call (the caller must not touch it again either way). */
int kc_call_reply_msg(bus_call *call, const ProtobufCMessage *m);

/* The value of r's metric `name` (e.g. the sandbox's device.sm_count), or
 * 0 when r has none. */
double kc_eval_metric(const Kclaw__EvalResult *r, const char *name);

#endif
