/*
 * pbjson.h - any kclaw protobuf message as JSON (cJSON), generically from
 * protobuf-c's descriptors. Field names are the .proto names; enums are
 * their value names ("OK", "WRONG_RESULT"); bytes are base64; 64-bit
 * integers are JSON numbers (exact up to 2^53, which sequence numbers and
 * byte counts stay below). Used by every --json output, the dashboard's HTTP
 * API and the event stream for other programs.
 */
#ifndef KC_PBJSON_H
#define KC_PBJSON_H

#include <cjson/cJSON.h>
#include <protobuf-c/protobuf-c.h>

/* A new cJSON object for m (caller frees with cJSON_Delete); NULL only when
 * out of memory. */
cJSON *kc_pb_to_json(const ProtobufCMessage *m);

/* The same, printed compactly; malloc'd (caller frees). */
char *kc_pb_to_json_text(const ProtobufCMessage *m);

#endif
