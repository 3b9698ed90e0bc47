#include "api.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kc_err.h"
#include "kc_util.h"

int
kc_pb_pack(const ProtobufCMessage *m, uint8_t **buf, size_t *len)
{
	size_t n = protobuf_c_message_get_packed_size(m);
	uint8_t *b = malloc(n ? n : 1);

	if (b == NULL)
		return KC_ENOMEM;
	protobuf_c_message_pack(m, b);
	*buf = b;
	*len = n;
	return 0;
}

/* Reads a base-128 varint at *p (< end); false when it runs off the end
 * or past 64 bits. */
static bool
kc_pb_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
	uint64_t x = 0;

	for (unsigned shift = 0; shift < 64 && *p < end; shift += 7) {
		uint8_t b = *(*p)++;
		x |= (uint64_t)(b & 0x7f) << shift;
		if ((b & 0x80) == 0) {
			*v = x;
			return true;
		}
	}
	return false;
}

/* The last top-level length-delimited field number `field` of msg into
 * *got (NULL when absent); false when msg is not a protobuf message. */
static bool
kc_pb_find(const void *msg, size_t len, unsigned field, const uint8_t **got,
    size_t *glen)
{
	const uint8_t *p = msg, *end = p + len;
	uint64_t key, n;

	*got = NULL;
	*glen = 0;
	while (p < end) {
		if (!kc_pb_varint(&p, end, &key))
			return false;
		switch (key & 7) {
		case 0:
			if (!kc_pb_varint(&p, end, &n))
				return false;
			break;
		case 1:
			if (end - p < 8)
				return false;
			p += 8;
			break;
		case 2:
			if (!kc_pb_varint(&p, end, &n) ||
			    n > (uint64_t)(end - p))
				return false;
			if (key >> 3 == field) {
				*got = p;
				*glen = (size_t)n;
			}
			p += n;
			break;
		case 5:
			if (end - p < 4)
				return false;
			p += 4;
			break;
		default: return false;
		}
	}
	return true;
}

bool
kc_pb_has_field(const void *msg, size_t len, unsigned field)
{
	const uint8_t *got;
	size_t glen;

	return kc_pb_find(msg, len, field, &got, &glen) && got != NULL;
}

bool
kc_pb_field_is(const void *msg, size_t len, unsigned field, const char *want)
{
	const uint8_t *got;
	size_t glen;

	return kc_pb_find(msg, len, field, &got, &glen) && got != NULL &&
	    glen == strlen(want) && memcmp(got, want, glen) == 0;
}

int
kc_token_check(const void *msg, size_t len, unsigned field, const char *want)
{
	const uint8_t *got;
	size_t glen, wlen = strlen(want);
	unsigned char diff;

	if (!kc_pb_find(msg, len, field, &got, &glen))
		return KC_EPERM;
	/* Constant time in the token's content: every byte of want is
	 * compared, and a length that differs is a difference too. */
	diff = glen != wlen;
	for (size_t i = 0; i < wlen; i++)
		diff |= (unsigned char)want[i] ^ (i < glen ? got[i] : 0);
	return diff == 0 ? 0 : KC_EPERM;
}

int
kc_call_authorize(bus_call *call, const void *data, size_t len, unsigned field,
    const char *token)
{
	if (token[0] && kc_token_check(data, len, field, token) != 0) {
		bus_call_reject(call);
		return KC_EPERM;
	}
	bus_call_prove(call);
	return 0;
}

int
kc_api_proof(
    void *token, const void *req, size_t len, void **refusal, size_t *rlen)
{
	Kclaw__ApiResponse ar = KCLAW__API_RESPONSE__INIT;
	Kclaw__ApiRequest *env;
	uint8_t *buf;

	if (((const char *)token)[0] == '\0' ||
	    kc_token_check(req, len, KC_API_TOKEN_FIELD, token) == 0)
		return 0;
	/* The refusal names the request it answers, as kclawd's would. */
	if ((env = kclaw__api_request__unpack(NULL, len, req)) != NULL) {
		ar.request_id = env->request_id;
		kclaw__api_request__free_unpacked(env, NULL);
	}
	ar.code = KCLAW__API_CODE__API_UNAUTHORIZED;
	ar.error = KC_TOKEN_REFUSED_API;
	if (kc_pb_pack(&ar.base, &buf, rlen) == 0)
		*refusal = buf;
	return KC_EPERM;
}

int
kc_work_proof(
    void *token, const void *req, size_t len, void **refusal, size_t *rlen)
{
	Kclaw__WorkReply wr = KCLAW__WORK_REPLY__INIT;
	uint8_t *buf;

	if (((const char *)token)[0] == '\0' ||
	    kc_token_check(req, len, KC_WORK_TOKEN_FIELD, token) == 0)
		return 0;
	wr.error = KC_TOKEN_REFUSED_WORK;
	if (kc_pb_pack(&wr.base, &buf, rlen) == 0)
		*refusal = buf;
	return KC_EPERM;
}

static int
kc_api_code_err(Kclaw__ApiCode code)
{
	switch (code) {
	case KCLAW__API_CODE__API_OK: return 0;
	case KCLAW__API_CODE__API_BAD_REQUEST: return KC_EINVAL;
	case KCLAW__API_CODE__API_NOT_FOUND: return KC_ENOENT;
	case KCLAW__API_CODE__API_UNKNOWN_METHOD: return KC_ENOTSUP;
	case KCLAW__API_CODE__API_UNAUTHORIZED: return KC_EPERM;
	case KCLAW__API_CODE__API_UNAVAILABLE: return KC_EBUSY;
	case KCLAW__API_CODE__API_DEADLINE_EXCEEDED: return KC_ETIMEDOUT;
	case KCLAW__API_CODE__API_CONFLICT: return KC_EEXIST;
	default: return KC_EINTERNAL;
	}
}

int
kc_api_call(bus_client *c, const char *method, const ProtobufCMessage *req,
    const char *token, int timeout_ms,
    const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp)
{
	Kclaw__ApiRequest env = KCLAW__API_REQUEST__INIT;
	Kclaw__ApiResponse *ar = NULL;
	uint8_t *payload = NULL, *buf = NULL;
	size_t plen = 0, blen = 0, rlen = 0;
	void *rbuf = NULL;
	char id[17];
	int rv;

	if ((rv = kc_pb_pack(req, &payload, &plen)) != 0)
		return rv;
	kc_new_id(id);
	env.method = (char *)method;
	env.request_id = kc_fnv1a64(id, 16, 0);
	env.deadline_unix_ms =
	    timeout_ms > 0 ? kc_now_ms() + (uint64_t)timeout_ms : 0;
	env.payload.data = payload;
	env.payload.len = plen;
	env.token = (char *)(token ? token : "");
	rv = kc_pb_pack(&env.base, &buf, &blen);
	free(payload);
	if (rv != 0)
		return rv;
	if (blen > KC_API_MAX_MSG) {
		free(buf);
		return kc_seterr(KC_EINVAL,
		    "%s: the request is %zu bytes, over the API's %zu-byte "
		    "limit; large data travels as blobs (`kclaw submit` "
		    "uploads a spec's tensors with PutBlob)",
		    method, blen, KC_API_MAX_MSG);
	}
	rv = bus_client_call(c, buf, blen, timeout_ms, &rbuf, &rlen);
	free(buf);
	if (rv == KC_ETIMEDOUT)
		return kc_seterr(KC_ETIMEDOUT,
		    "no answer from the orchestrator within %d ms; is it "
		    "running? (start it with `kclaw up`)",
		    timeout_ms);
	if (rv != 0)
		return rv;
	ar = kclaw__api_response__unpack(NULL, rlen, rbuf);
	free(rbuf);
	if (ar == NULL)
		return kc_seterr(KC_EPROTO,
		    "the orchestrator's reply did not decode; are client "
		    "and server the same version?");
	if (ar->code != KCLAW__API_CODE__API_OK) {
		rv = kc_seterr(kc_api_code_err(ar->code), "%s",
		    ar->error && *ar->error ? ar->error : "request refused");
		kclaw__api_response__free_unpacked(ar, NULL);
		return rv;
	}
	*resp = protobuf_c_message_unpack(
	    resp_desc, NULL, ar->payload.len, ar->payload.data);
	kclaw__api_response__free_unpacked(ar, NULL);
	if (*resp == NULL)
		return kc_seterr(
		    KC_EPROTO, "%s: response did not decode", method);
	return 0;
}

int
kc_api_reply(bus_call *call, uint64_t request_id, Kclaw__ApiCode code,
    const char *error, const ProtobufCMessage *payload)
{
	Kclaw__ApiResponse ar = KCLAW__API_RESPONSE__INIT;
	uint8_t *p = NULL;
	size_t plen = 0;
	int rv;

	if (payload != NULL && (rv = kc_pb_pack(payload, &p, &plen)) != 0) {
		bus_call_drop(call);
		return rv;
	}
	ar.request_id = request_id;
	ar.code = code;
	ar.error = (char *)(error ? error : "");
	ar.payload.data = p;
	ar.payload.len = plen;
	rv = kc_call_reply_msg(call, &ar.base);
	free(p);
	return rv;
}

int
kc_call_reply_msg(bus_call *call, const ProtobufCMessage *m)
{
	uint8_t *buf;
	size_t len;
	int rv;

	if ((rv = kc_pb_pack(m, &buf, &len)) != 0) {
		bus_call_drop(call);
		return rv;
	}
	rv = bus_call_reply(call, buf, len);
	free(buf);
	return rv;
}

double
kc_eval_metric(const Kclaw__EvalResult *r, const char *name)
{
	for (size_t i = 0; r != NULL && i < r->n_metrics; i++)
		if (r->metrics[i]->name != NULL &&
		    strcmp(r->metrics[i]->name, name) == 0)
			return r->metrics[i]->value;
	return 0;
}
