/*
 * orch_standin.c - a stand-in orchestrator for the CLI tests of `kclaw
 * report` and `kclaw status`: it answers the API (List, Result, Status,
 * Events, Health) on URL from task records written in a JSON file, so the
 * real kclaw binary can be checked against records with known figures.
 *
 *   cli_orch_standin URL RECORDS.json READY_FILE
 *
 * RECORDS.json is an array of TaskRecord objects, oldest first, in the
 * .proto's field names (the form --json prints; enums by name). READY_FILE
 * is created once the API listens; SIGTERM or SIGINT stops it.
 */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "kc_err.h"
#include "kc_util.h"

/* The records, held until exit (reachable, so no leak is reported). */
static Kclaw__TaskRecord **standin_tasks;
static size_t standin_ntasks;

static ProtobufCMessage *
standin_new(const ProtobufCMessageDescriptor *d)
{
	ProtobufCMessage *m = calloc(1, d->sizeof_message);

	if (m != NULL)
		protobuf_c_message_init(d, m);
	return m;
}

/* Fills m from the JSON object o, by the descriptor's field names. */
static int
standin_fill(ProtobufCMessage *m, const cJSON *o)
{
	const ProtobufCMessageDescriptor *d = m->descriptor;
	const cJSON *v;

	if (!cJSON_IsObject(o))
		return kc_seterr(KC_EINVAL, "%s: not an object", d->name);
	cJSON_ArrayForEach(v, o)
	{
		const ProtobufCFieldDescriptor *f =
		    protobuf_c_message_descriptor_get_field_by_name(
		        d, v->string);
		const ProtobufCEnumValue *ev;
		char *p;
		int rv;

		if (f == NULL)
			return kc_seterr(KC_EINVAL, "%s has no field %s",
			    d->name, v->string);
		p = (char *)m + f->offset;
		if (f->label == PROTOBUF_C_LABEL_REPEATED) {
			size_t *n =
			    (size_t *)((char *)m + f->quantifier_offset);
			ProtobufCMessage **arr;
			const cJSON *e;
			if (f->type != PROTOBUF_C_TYPE_MESSAGE ||
			    !cJSON_IsArray(v))
				return kc_seterr(KC_EINVAL,
				    "%s.%s: only arrays of messages", d->name,
				    f->name);
			arr = calloc(
			    (size_t)cJSON_GetArraySize(v) + 1, sizeof(*arr));
			if (arr == NULL)
				return KC_ENOMEM;
			*(ProtobufCMessage ***)p = arr;
			cJSON_ArrayForEach(e, v)
			{
				if ((arr[*n] = standin_new(f->descriptor)) ==
				    NULL)
					return KC_ENOMEM;
				if ((rv = standin_fill(arr[(*n)++], e)) != 0)
					return rv;
			}
			continue;
		}
		switch (f->type) {
		case PROTOBUF_C_TYPE_STRING:
			if (!cJSON_IsString(v) ||
			    (*(char **)p = strdup(v->valuestring)) == NULL)
				return kc_seterr(KC_EINVAL, "%s.%s: a string",
				    d->name, f->name);
			break;
		case PROTOBUF_C_TYPE_DOUBLE:
			*(double *)p = v->valuedouble;
			break;
		case PROTOBUF_C_TYPE_UINT32:
			*(uint32_t *)p = (uint32_t)v->valuedouble;
			break;
		case PROTOBUF_C_TYPE_UINT64:
			*(uint64_t *)p = (uint64_t)v->valuedouble;
			break;
		case PROTOBUF_C_TYPE_INT32:
			*(int32_t *)p = (int32_t)v->valuedouble;
			break;
		case PROTOBUF_C_TYPE_ENUM:
			ev = cJSON_IsString(v)
			    ? protobuf_c_enum_descriptor_get_value_by_name(
			          f->descriptor, v->valuestring)
			    : NULL;
			if (ev == NULL)
				return kc_seterr(KC_EINVAL,
				    "%s.%s: an enum value name", d->name,
				    f->name);
			*(int *)p = ev->value;
			break;
		case PROTOBUF_C_TYPE_MESSAGE:
			if ((*(ProtobufCMessage **)p =
			            standin_new(f->descriptor)) == NULL)
				return KC_ENOMEM;
			if ((rv = standin_fill(*(ProtobufCMessage **)p, v)) !=
			    0)
				return rv;
			break;
		default:
			return kc_seterr(KC_EINVAL, "%s.%s: type not supported",
			    d->name, f->name);
		}
	}
	return 0;
}

static Kclaw__TaskRecord *
standin_find(const char *id)
{
	for (size_t i = 0; i < standin_ntasks; i++)
		if (strcmp(standin_tasks[i]->id, id) == 0)
			return standin_tasks[i];
	return NULL;
}

/* Answers one call; runs on an NNG thread and never blocks. */
static void
standin_call(void *arg, bus_call *call)
{
	const void *data;
	size_t len;
	Kclaw__ApiRequest *req;
	const char *m;

	(void)arg;
	data = bus_call_data(call, &len);
	if ((req = kclaw__api_request__unpack(NULL, len, data)) == NULL) {
		bus_call_drop(call);
		return;
	}
	m = req->method;
	if (strcmp(m, "List") == 0) {
		Kclaw__ListResponse r = KCLAW__LIST_RESPONSE__INIT;
		Kclaw__TaskRecord **newest =
		    calloc(standin_ntasks + 1, sizeof(*newest));
		for (size_t i = 0; newest && i < standin_ntasks; i++)
			newest[i] = standin_tasks[standin_ntasks - 1 - i];
		r.tasks = newest;
		r.n_tasks = newest ? standin_ntasks : 0;
		kc_api_reply(call, req->request_id,
		    newest ? KCLAW__API_CODE__API_OK
		           : KCLAW__API_CODE__API_INTERNAL,
		    newest ? "" : "out of memory", newest ? &r.base : NULL);
		free(newest);
	} else if (strcmp(m, "Result") == 0 || strcmp(m, "Status") == 0) {
		/* ResultRequest and StatusRequest both hold task_id only. */
		Kclaw__StatusRequest *sr = kclaw__status_request__unpack(
		    NULL, req->payload.len, req->payload.data);
		Kclaw__TaskRecord *t = sr ? standin_find(sr->task_id) : NULL;
		Kclaw__ResultResponse res = KCLAW__RESULT_RESPONSE__INIT;
		Kclaw__StatusResponse st = KCLAW__STATUS_RESPONSE__INIT;
		char why[160];
		snprintf(
		    why, sizeof(why), "no task '%s'", sr ? sr->task_id : "?");
		res.task = st.task = t;
		kc_api_reply(call, req->request_id,
		    t ? KCLAW__API_CODE__API_OK
		      : KCLAW__API_CODE__API_NOT_FOUND,
		    t ? "" : why,
		    t == NULL       ? NULL
		        : *m == 'R' ? &res.base
		                    : &st.base);
		if (sr)
			kclaw__status_request__free_unpacked(sr, NULL);
	} else if (strcmp(m, "Events") == 0) {
		Kclaw__EventsResponse r = KCLAW__EVENTS_RESPONSE__INIT;
		kc_api_reply(call, req->request_id, KCLAW__API_CODE__API_OK, "",
		    &r.base);
	} else if (strcmp(m, "Health") == 0) {
		Kclaw__HealthResponse r = KCLAW__HEALTH_RESPONSE__INIT;
		r.version = "standin";
		r.tasks_total = (uint32_t)standin_ntasks;
		kc_api_reply(call, req->request_id, KCLAW__API_CODE__API_OK, "",
		    &r.base);
	} else {
		kc_api_reply(call, req->request_id,
		    KCLAW__API_CODE__API_UNKNOWN_METHOD,
		    "the stand-in answers List, Result, Status, Events, Health",
		    NULL);
	}
	kclaw__api_request__free_unpacked(req, NULL);
}

static int
standin_load(const char *path)
{
	char *text;
	size_t len;
	cJSON *root, *o;
	int rv;

	if ((rv = kc_read_file(path, 1 << 24, &text, &len)) != 0)
		return rv;
	root = cJSON_ParseWithLength(text, len);
	free(text);
	if (!cJSON_IsArray(root)) {
		cJSON_Delete(root);
		return kc_seterr(KC_EINVAL, "%s: not a JSON array", path);
	}
	standin_tasks = calloc(
	    (size_t)cJSON_GetArraySize(root) + 1, sizeof(*standin_tasks));
	rv = standin_tasks ? 0 : KC_ENOMEM;
	cJSON_ArrayForEach(o, root)
	{
		if (rv != 0)
			break;
		Kclaw__TaskRecord *t = (Kclaw__TaskRecord *)standin_new(
		    &kclaw__task_record__descriptor);
		if (t == NULL) {
			rv = KC_ENOMEM;
			break;
		}
		standin_tasks[standin_ntasks++] = t;
		rv = standin_fill(&t->base, o);
	}
	cJSON_Delete(root);
	return rv;
}

int
main(int argc, char **argv)
{
	bus_server *srv = NULL;
	sigset_t set;
	FILE *ready;
	int rv, sig;

	if (argc != 4) {
		fprintf(stderr,
		    "usage: cli_orch_standin URL RECORDS.json READY_FILE\n");
		return 2;
	}
	/* Blocked before NNG starts its threads, so only sigwait sees them. */
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	if ((rv = standin_load(argv[2])) != 0 ||
	    (rv = bus_server_open(
	         &srv, argv[1], 4, 1 << 24, standin_call, NULL)) != 0) {
		fprintf(stderr, "cli_orch_standin: %s\n", kc_lasterr());
		return 1;
	}
	if ((ready = fopen(argv[3], "w")) == NULL) {
		fprintf(
		    stderr, "cli_orch_standin: cannot create %s\n", argv[3]);
		bus_server_close(srv);
		return 1;
	}
	fclose(ready);
	sigwait(&set, &sig);
	bus_server_close(srv);
	return 0;
}
