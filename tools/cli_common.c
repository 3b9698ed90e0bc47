/*
 * cli_common.c - what every subcommand shares.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "kc_err.h"

bool
cli_wants_help(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "--help") == 0 ||
		    strcmp(argv[i], "-h") == 0)
			return true;
	return false;
}

int
cli_fail(const char *prefix, int err)
{
	const char *detail = kc_lasterr();

	fprintf(stderr, "kclaw %s: %s\n", prefix,
	    *detail ? detail : kc_strerror(err));
	switch (err) {
	case KC_ENOENT: return CLI_NOT_FOUND;
	case KC_ETIMEDOUT:
	case KC_ECLOSED: return CLI_UNREACHABLE;
	case KC_ENOTSUP: return CLI_NOT_IMPLEMENTED;
	case KC_EINVAL: return CLI_USAGE;
	default: return CLI_FAIL;
	}
}

int
cli_config(int argc, char **argv, kc_config *cfg)
{
	const char *home = NULL;

	for (int i = 1; i + 1 < argc; i++)
		if (strcmp(argv[i], "--home") == 0)
			home = argv[i + 1];
	return kc_config_load(cfg, home);
}

/* ------------------------------------------------- why a task ended */

/* The detail of the task's last TASK_FINISHED event, malloc'd, or NULL. */
static char *
cli_finished_detail(orch_client *c, const char *id)
{
	uint64_t since = 0;
	char *detail = NULL;

	for (int pages = 0; pages < 1000; pages++) {
		Kclaw__EventsRequest req = KCLAW__EVENTS_REQUEST__INIT;
		Kclaw__EventsResponse *resp;
		req.since_seq = since;
		req.limit = 1000;
		req.task_id = (char *)id;
		if (orch_client_call(c, "Events", &req.base,
		        &kclaw__events_response__descriptor,
		        (ProtobufCMessage **)&resp) != 0) {
			kc_clearerr();
			break;
		}
		for (size_t i = 0; i < resp->n_events; i++) {
			const Kclaw__Event *ev = resp->events[i];
			if (ev->kind == KCLAW__EVENT_KIND__TASK_FINISHED &&
			    ev->detail && *ev->detail) {
				free(detail);
				detail = strdup(ev->detail);
			}
			since = ev->seq;
		}
		bool more = resp->n_events > 0 && since < resp->last_seq;
		kclaw__events_response__free_unpacked(resp, NULL);
		if (!more)
			break;
	}
	return detail;
}

char *
cli_task_why(orch_client *c, const Kclaw__TaskRecord *t)
{
	const char *err = t->error ? t->error : "";
	bool final = strcmp(t->state, "DONE") == 0 ||
	    strcmp(t->state, "FAILED") == 0 ||
	    strcmp(t->state, "CANCELLED") == 0;
	char *d, *why, *cut;
	size_t n;

	/* A failed job's record lacks its reason ("see the task's events"),
	 * a listed task's record has none: the TASK_FINISHED event says
	 * which job failed and why. */
	if (!final || (*err && strstr(err, "see the task's events") == NULL))
		return *err ? strdup(err) : NULL;
	if (c == NULL || (d = cli_finished_detail(c, t->id)) == NULL)
		return *err ? strdup(err) : NULL;
	why = d;
	n = strlen(t->state);
	if (strncmp(why, t->state, n) == 0 && strncmp(why + n, ": ", 2) == 0)
		why += n + 2; /* "FAILED: " */
	if ((cut = strstr(why, " (best speedup ")) != NULL)
		*cut = '\0';
	if ((cut = strstr(why, " (see the task's events)")) != NULL)
		memmove(cut, cut + 24, strlen(cut + 24) + 1);
	why = strdup(why);
	free(d);
	return why;
}

void
cli_task_why_fill(orch_client *c, Kclaw__TaskRecord *t)
{
	char *why = cli_task_why(c, t);

	if (why == NULL)
		return;
	if (t->error != protobuf_c_empty_string)
		free(t->error);
	t->error = why;
}

/* -------------------------------------------------------------- GPU */

typedef int (*cli_cu_init_fn)(unsigned);
typedef int (*cli_cu_count_fn)(int *);

bool
cli_have_gpu(char *why, size_t n)
{
	const char *path = getenv("KCLAW_CUDA_DRIVER");
	cli_cu_init_fn init;
	cli_cu_count_fn count;
	void *lib;
	int devices = 0, r;

	if (path == NULL || *path == '\0')
		path = "libcuda.so.1";
	if ((lib = dlopen(path, RTLD_NOW | RTLD_LOCAL)) == NULL) {
		snprintf(why, n,
		    "the NVIDIA driver library %s cannot be loaded", path);
		return false;
	}
	init = (cli_cu_init_fn)dlsym(lib, "cuInit");
	count = (cli_cu_count_fn)dlsym(lib, "cuDeviceGetCount");
	if (init == NULL || count == NULL) {
		snprintf(why, n, "%s is not a CUDA driver", path);
		dlclose(lib);
		return false;
	}
	if ((r = init(0)) != 0) {
		snprintf(why, n, "cuInit failed with CUDA error %d", r);
		dlclose(lib);
		return false;
	}
	if (count(&devices) != 0 || devices < 1) {
		snprintf(why, n, "the driver sees no device");
		dlclose(lib);
		return false;
	}
	dlclose(lib);
	return true;
}
