#include "pbjson.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static char *
pbjson_base64(const uint8_t *p, size_t n)
{
	static const char tbl[] =
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	char *out = malloc(4 * ((n + 2) / 3) + 1), *o = out;

	if (out == NULL)
		return NULL;
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16;
		if (i + 1 < n)
			v |= (uint32_t)p[i + 1] << 8;
		if (i + 2 < n)
			v |= p[i + 2];
		*o++ = tbl[(v >> 18) & 63];
		*o++ = tbl[(v >> 12) & 63];
		*o++ = i + 1 < n ? tbl[(v >> 6) & 63] : '=';
		*o++ = i + 2 < n ? tbl[v & 63] : '=';
	}
	*o = '\0';
	return out;
}

/* One value of field f at address p as a new cJSON item. */
static cJSON *
pbjson_value(const ProtobufCFieldDescriptor *f, const void *p)
{
	switch (f->type) {
	case PROTOBUF_C_TYPE_INT32:
	case PROTOBUF_C_TYPE_SINT32:
	case PROTOBUF_C_TYPE_SFIXED32:
		return cJSON_CreateNumber(*(const int32_t *)p);
	case PROTOBUF_C_TYPE_UINT32:
	case PROTOBUF_C_TYPE_FIXED32:
		return cJSON_CreateNumber(*(const uint32_t *)p);
	case PROTOBUF_C_TYPE_INT64:
	case PROTOBUF_C_TYPE_SINT64:
	case PROTOBUF_C_TYPE_SFIXED64:
		return cJSON_CreateNumber((double)*(const int64_t *)p);
	case PROTOBUF_C_TYPE_UINT64:
	case PROTOBUF_C_TYPE_FIXED64:
		return cJSON_CreateNumber((double)*(const uint64_t *)p);
	case PROTOBUF_C_TYPE_FLOAT:
		return cJSON_CreateNumber(*(const float *)p);
	case PROTOBUF_C_TYPE_DOUBLE:
		return cJSON_CreateNumber(*(const double *)p);
	case PROTOBUF_C_TYPE_BOOL:
		return cJSON_CreateBool(*(const protobuf_c_boolean *)p);
	case PROTOBUF_C_TYPE_ENUM: {
		int v = *(const int *)p;
		const ProtobufCEnumValue *ev =
		    protobuf_c_enum_descriptor_get_value(f->descriptor, v);
		return ev ? cJSON_CreateString(ev->name)
		          : cJSON_CreateNumber(v);
	}
	case PROTOBUF_C_TYPE_STRING: {
		const char *s = *(char *const *)p;
		return cJSON_CreateString(s ? s : "");
	}
	case PROTOBUF_C_TYPE_BYTES: {
		const ProtobufCBinaryData *b = p;
		char *t = pbjson_base64(b->data, b->len);
		cJSON *j = t ? cJSON_CreateString(t) : NULL;
		free(t);
		return j;
	}
	case PROTOBUF_C_TYPE_MESSAGE: {
		const ProtobufCMessage *m = *(const ProtobufCMessage *const *)p;
		return m ? kc_pb_to_json(m) : cJSON_CreateNull();
	}
	}
	return cJSON_CreateNull();
}

static size_t
pbjson_size(ProtobufCType t)
{
	switch (t) {
	case PROTOBUF_C_TYPE_INT64:
	case PROTOBUF_C_TYPE_SINT64:
	case PROTOBUF_C_TYPE_SFIXED64:
	case PROTOBUF_C_TYPE_UINT64:
	case PROTOBUF_C_TYPE_FIXED64:
	case PROTOBUF_C_TYPE_DOUBLE: return 8;
	case PROTOBUF_C_TYPE_BOOL: return sizeof(protobuf_c_boolean);
	case PROTOBUF_C_TYPE_ENUM: return sizeof(int);
	case PROTOBUF_C_TYPE_STRING: return sizeof(char *);
	case PROTOBUF_C_TYPE_BYTES: return sizeof(ProtobufCBinaryData);
	case PROTOBUF_C_TYPE_MESSAGE: return sizeof(void *);
	default: return 4;
	}
}

cJSON *
kc_pb_to_json(const ProtobufCMessage *m)
{
	const ProtobufCMessageDescriptor *d = m->descriptor;
	const char *base = (const char *)m;
	cJSON *o = cJSON_CreateObject();

	if (o == NULL)
		return NULL;
	for (unsigned i = 0; i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];
		cJSON *v;

		if (f->label == PROTOBUF_C_LABEL_REPEATED) {
			size_t n =
			    *(const size_t *)(base + f->quantifier_offset);
			const char *arr = *(char *const *)(base + f->offset);
			v = cJSON_CreateArray();
			for (size_t k = 0; v != NULL && k < n; k++)
				cJSON_AddItemToArray(v,
				    pbjson_value(
				        f, arr + k * pbjson_size(f->type)));
		} else if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
		    *(const uint32_t *)(base + f->quantifier_offset) != f->id) {
			continue;
		} else if (f->type == PROTOBUF_C_TYPE_MESSAGE &&
		    *(void *const *)(base + f->offset) == NULL) {
			continue; /* unset sub-message: leave it out */
		} else {
			v = pbjson_value(f, base + f->offset);
		}
		if (v == NULL) {
			cJSON_Delete(o);
			return NULL;
		}
		cJSON_AddItemToObject(o, f->name, v);
	}
	return o;
}

char *
kc_pb_to_json_text(const ProtobufCMessage *m)
{
	cJSON *j = kc_pb_to_json(m);
	char *t;

	if (j == NULL)
		return NULL;
	t = cJSON_PrintUnformatted(j);
	cJSON_Delete(j);
	return t;
}
