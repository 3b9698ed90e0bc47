/*
 * api.h - the API envelope (kclaw.ApiRequest / kclaw.ApiResponse, see
 * proto/kclaw.proto) over bus_client and bus_server. The method is the rpc
 * name of `service Kclaw` ("Submit", "Status", ...).
 */
#ifndef KC_API_H
#define KC_API_H

#include <protobuf-c/protobuf-c.h>

#include "bus.h"
#include "kclaw.pb-c.h"

/*
 * Calls method with req and waits up to timeout_ms. On success *resp is the
 * unpacked response of type resp_desc (free with
 * protobuf_c_message_free_unpacked). When the server answers with an error,
 * returns KC_EINVAL / KC_ENOENT / KC_EPERM / ... with the server's message in
 * kc_lasterr(). KC_ETIMEDOUT when no orchestrator answered.
 */
int kc_api_call(bus_client *c, const char *method, const ProtobufCMessage *req,
    const char *token, int timeout_ms,
    const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp);

/* Server side: answers call with code, error text and an optional payload
 * message; takes call. */
int kc_api_reply(bus_call *call, uint64_t request_id, Kclaw__ApiCode code,
    const char *error, const ProtobufCMessage *payload);

/* Packs any message into a malloc'd buffer (caller frees). */
int kc_pb_pack(const ProtobufCMessage *m, uint8_t **buf, size_t *len);

#endif
