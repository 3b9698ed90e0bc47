#include "pbjson.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kc_util.h"

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

static cJSON *pbjson_message(const ProtobufCMessage *m, bool pub);

/* The length of the valid UTF-8 sequence at p (n bytes left), 0 if none:
 * no overlong forms, surrogates or code points past U+10FFFF. */
static size_t
pbjson_utf8_len(const unsigned char *p, size_t n)
{
	size_t len = p[0] < 0x80           ? 1
	    : p[0] >= 0xC2 && p[0] <= 0xDF ? 2
	    : p[0] >= 0xE0 && p[0] <= 0xEF ? 3
	    : p[0] >= 0xF0 && p[0] <= 0xF4 ? 4
	                                   : 0;

	if (len == 0 || len > n)
		return 0;
	for (size_t i = 1; i < len; i++)
		if ((p[i] & 0xC0) != 0x80)
			return 0;
	if ((p[0] == 0xE0 && p[1] < 0xA0) || (p[0] == 0xED && p[1] > 0x9F) ||
	    (p[0] == 0xF0 && p[1] < 0x90) || (p[0] == 0xF4 && p[1] > 0x8F))
		return 0;
	return len;
}

/*
 * A JSON string item for s, whose bytes need not be UTF-8 (a description
 * or a plan from a task file): a byte that does not start a valid
 * sequence becomes U+FFFD, so what is printed is always valid JSON.
 */
static cJSON *
pbjson_string(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n = strlen(s), i = 0, k;
	kc_str out = {0};
	cJSON *j;

	while (i < n && (k = pbjson_utf8_len(p + i, n - i)) != 0)
		i += k;
	if (i == n)
		return cJSON_CreateString(s);
	kc_str_appendn(&out, s, i);
	while (i < n) {
		if ((k = pbjson_utf8_len(p + i, n - i)) != 0) {
			kc_str_appendn(&out, s + i, k);
			i += k;
		} else {
			kc_str_append(&out, "\xEF\xBF\xBD");
			i++;
		}
	}
	j = out.buf ? cJSON_CreateString(out.buf) : NULL;
	kc_str_free(&out);
	return j;
}

char *
kc_json_lower(char *s)
{
	for (char *c = s; c && *c; c++)
		*c = (char)tolower((unsigned char)*c);
	return s;
}

char *
kc_json_upper(char *s)
{
	for (char *c = s; c && *c; c++)
		*c = (char)toupper((unsigned char)*c);
	return s;
}

static bool
pbjson_ends(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);

	return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Public convention: a number field whose 0 means "not known or not
 * measured" (a time or a speedup). */
static bool
pbjson_zero_is_null(const ProtobufCFieldDescriptor *f)
{
	return (pbjson_ends(f->name, "_ms") &&
	           strcmp(f->name, "stddev_ms") != 0) ||
	    strcmp(f->name, "speedup") == 0 ||
	    strncmp(f->name, "speedup_", 8) == 0 ||
	    pbjson_ends(f->name, "_speedup") ||
	    strcmp(f->name, "sol_fraction") == 0;
}

/* Public convention: a string field holding an enum-like name as text
 * (a task's state, "DONE"), printed in lower case. */
static bool
pbjson_text_enum(const ProtobufCFieldDescriptor *f)
{
	return strcmp(f->name, "state") == 0;
}

/* The public form of a scalar value v of field f: null where 0 means
 * unknown. */
static cJSON *
pbjson_number(const ProtobufCFieldDescriptor *f, double v, bool pub)
{
	if (pub && v == 0 && pbjson_zero_is_null(f))
		return cJSON_CreateNull();
	return cJSON_CreateNumber(v);
}

/* One value of field f at address p as a new cJSON item. */
static cJSON *
pbjson_value(const ProtobufCFieldDescriptor *f, const void *p, bool pub)
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
		return pbjson_number(f, (double)*(const int64_t *)p, pub);
	case PROTOBUF_C_TYPE_UINT64:
	case PROTOBUF_C_TYPE_FIXED64:
		return pbjson_number(f, (double)*(const uint64_t *)p, pub);
	case PROTOBUF_C_TYPE_FLOAT:
		return pbjson_number(f, *(const float *)p, pub);
	case PROTOBUF_C_TYPE_DOUBLE:
		return pbjson_number(f, *(const double *)p, pub);
	case PROTOBUF_C_TYPE_BOOL:
		return cJSON_CreateBool(*(const protobuf_c_boolean *)p);
	case PROTOBUF_C_TYPE_ENUM: {
		int v = *(const int *)p;
		const ProtobufCEnumValue *ev =
		    protobuf_c_enum_descriptor_get_value(f->descriptor, v);
		cJSON *j;
		if (ev == NULL)
			return cJSON_CreateNumber(v);
		if (pub && pbjson_ends(ev->name, "UNSPECIFIED"))
			return cJSON_CreateNull();
		j = cJSON_CreateString(ev->name);
		if (pub && j != NULL)
			kc_json_lower(j->valuestring);
		return j;
	}
	case PROTOBUF_C_TYPE_STRING: {
		const char *s = *(char *const *)p;
		cJSON *j;
		if (pub && (s == NULL || *s == '\0'))
			return cJSON_CreateNull();
		j = pbjson_string(s ? s : "");
		if (pub && j != NULL && pbjson_text_enum(f))
			kc_json_lower(j->valuestring);
		return j;
	}
	case PROTOBUF_C_TYPE_BYTES: {
		const ProtobufCBinaryData *b = p;
		char *t;
		cJSON *j;
		if (pub)
			return b->len ? cJSON_CreateNumber((double)b->len)
			              : cJSON_CreateNull();
		t = pbjson_base64(b->data, b->len);
		j = t ? cJSON_CreateString(t) : NULL;
		free(t);
		return j;
	}
	case PROTOBUF_C_TYPE_MESSAGE: {
		const ProtobufCMessage *m = *(const ProtobufCMessage *const *)p;
		return m ? pbjson_message(m, pub) : cJSON_CreateNull();
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

static cJSON *
pbjson_message(const ProtobufCMessage *m, bool pub)
{
	const ProtobufCMessageDescriptor *d = m->descriptor;
	const char *base = (const char *)m;
	cJSON *o = cJSON_CreateObject();

	if (o == NULL)
		return NULL;
	for (unsigned i = 0; i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];
		char name[128];
		cJSON *v;

		if (f->label == PROTOBUF_C_LABEL_REPEATED) {
			size_t n =
			    *(const size_t *)(base + f->quantifier_offset);
			const char *arr = *(char *const *)(base + f->offset);
			v = cJSON_CreateArray();
			for (size_t k = 0; v != NULL && k < n; k++)
				cJSON_AddItemToArray(v,
				    pbjson_value(f,
				        arr + k * pbjson_size(f->type), pub));
		} else if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
		    *(const uint32_t *)(base + f->quantifier_offset) != f->id) {
			continue;
		} else if (!pub && f->type == PROTOBUF_C_TYPE_MESSAGE &&
		    *(void *const *)(base + f->offset) == NULL) {
			continue; /* unset sub-message: leave it out */
		} else {
			v = pbjson_value(f, base + f->offset, pub);
		}
		if (v == NULL) {
			cJSON_Delete(o);
			return NULL;
		}
		/* Public: a bytes field is its length, under NAME_bytes. */
		snprintf(name, sizeof(name),
		    pub && f->type == PROTOBUF_C_TYPE_BYTES ? "%s_bytes" : "%s",
		    f->name);
		cJSON_AddItemToObject(o, name, v);
	}
	return o;
}

cJSON *
kc_pb_to_json(const ProtobufCMessage *m)
{
	return pbjson_message(m, false);
}

cJSON *
kc_pb_to_json_public(const ProtobufCMessage *m)
{
	return pbjson_message(m, true);
}

/* j as one line of text; j is freed. */
static char *
pbjson_text(cJSON *j)
{
	char *t;

	if (j == NULL)
		return NULL;
	t = cJSON_PrintUnformatted(j);
	cJSON_Delete(j);
	return t;
}

char *
kc_pb_to_json_public_text(const ProtobufCMessage *m)
{
	return pbjson_text(kc_pb_to_json_public(m));
}

char *
kc_pb_to_json_text(const ProtobufCMessage *m)
{
	return pbjson_text(kc_pb_to_json(m));
}
