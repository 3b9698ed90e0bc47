/*
 * pbjson.h - any kclaw protobuf message as JSON (cJSON), generically from
 * protobuf-c's descriptors. Field names are the .proto names; enums are
 * their value names ("OK", "WRONG_RESULT"); bytes are base64; 64-bit
 * integers are JSON numbers (exact up to 2^53, which sequence numbers and
 * byte counts stay below). kc_pb_to_json is the raw form for logs of the
 * GPU suites; kc_pb_to_json_public, below, is the one public convention:
 * every `kclaw --json`, the HTTP API (/api/, its event stream and the
 * dashboard's WebSocket, docs/api.md).
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

/*
 * m in the public convention every `kclaw ... --json` prints
 * (docs/cli.md "JSON output"): enums by their lower-case name as task.json
 * spells them ("ok", "wrong_result", "f32", "generator"), an UNSPECIFIED
 * enum null; fields holding an enum-like name as text ("state": "DONE")
 * lower-case too; every field present: an empty string, an unset
 * sub-message, and a time (`*_ms`, but not `stddev_ms`) or speedup
 * (`speedup`, `*_speedup`, `sol_fraction`) of 0 are null (not known or not
 * measured); bytes are never printed: a bytes field `x` is `x_bytes`, its
 * length (null when empty). NULL only when out of memory.
 */
cJSON *kc_pb_to_json_public(const ProtobufCMessage *m);
/* The same, printed compactly; malloc'd (caller frees). */
char *kc_pb_to_json_public_text(const ProtobufCMessage *m);
/* s lower-cased in place; returns s. */
char *kc_json_lower(char *s);
/* s upper-cased in place (a public enum name back to the .proto's, as
 * a filter's "done" for the API's "DONE"); returns s. */
char *kc_json_upper(char *s);

#endif
