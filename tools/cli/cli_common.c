/*
 * cli_common.c - what every subcommand shares.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "kc_err.h"
#include "pbjson.h"

/* ------------------------------------------------------------ --json */

#define CLI_ERR_KEEP 4096

static struct {
	bool on, printed, stream;
	FILE *real_err;
	char err[CLI_ERR_KEEP];
	size_t nerr;
} cli_json_state;

/* stderr while --json is on: written through to fd 2, and kept (the
 * first CLI_ERR_KEEP bytes) for the error document. */
static ssize_t
cli_err_write(void *cookie, const char *buf, size_t n)
{
	size_t room = CLI_ERR_KEEP - 1 - cli_json_state.nerr;

	(void)cookie;
	memcpy(
	    cli_json_state.err + cli_json_state.nerr, buf, n < room ? n : room);
	cli_json_state.nerr += n < room ? n : room;
	cli_json_state.err[cli_json_state.nerr] = '\0';
	fwrite(buf, 1, n, cli_json_state.real_err);
	return (ssize_t)n;
}

void
cli_json_begin(int argc, char **argv)
{
	cookie_io_functions_t io = {.write = cli_err_write};
	FILE *f;

	for (int i = 1; i < argc && !cli_json_state.on; i++)
		cli_json_state.on = strcmp(argv[i], "--json") == 0;
	if (!cli_json_state.on || (f = fopencookie(NULL, "w", io)) == NULL)
		return;
	setvbuf(f, NULL, _IONBF, 0);
	cli_json_state.real_err = stderr;
	stderr = f;
}

FILE *
cli_stderr_raw(void)
{
	return cli_json_state.real_err ? cli_json_state.real_err : stderr;
}

void
cli_json_stream(void)
{
	cli_json_state.stream = true;
}

void
cli_json_print(FILE *out, const char *text)
{
	fprintf(out, "%s\n", text ? text : "null");
	cli_json_state.printed = true;
}

int
cli_json_print_obj(FILE *out, cJSON *o)
{
	char *text = o ? cJSON_PrintUnformatted(o) : NULL;

	cJSON_Delete(o);
	if (text == NULL)
		return KC_ENOMEM;
	cli_json_print(out, text);
	cJSON_free(text);
	return 0;
}

cJSON *
cli_json_str(cJSON *o, const char *k, const char *s)
{
	return s && *s ? cJSON_AddStringToObject(o, k, s)
	               : cJSON_AddNullToObject(o, k);
}

cJSON *
cli_json_enum(cJSON *o, const char *k, const char *s)
{
	cJSON *j = cli_json_str(o, k, s);

	if (cJSON_IsString(j))
		kc_json_lower(j->valuestring);
	return j;
}

int
cli_json_end(int code)
{
	static const char *const codes[] = {"ok", "failed", "usage",
	    "not_found", "unreachable", "not_implemented"};
	char *msg = cli_json_state.err, *end;
	cJSON *root, *e;

	if (!cli_json_state.on)
		return code;
	fflush(stderr);
	if (cli_json_state.real_err != NULL) {
		FILE *f = stderr;
		stderr = cli_json_state.real_err;
		fclose(f);
	}
	if (code == CLI_OK ||
	    (cli_json_state.printed && !cli_json_state.stream))
		return code;
	/* The message: what the command wrote to stderr before a usage text,
	 * its last paragraph, without the trailing newline. */
	if (strncmp(msg, "usage:", 6) == 0)
		*msg = '\0';
	else if ((end = strstr(msg, "\nusage:")) != NULL)
		end[1] = '\0';
	end = msg + strlen(msg);
	while (end > msg && (end[-1] == '\n' || end[-1] == ' '))
		*--end = '\0';
	while ((end = strstr(msg, "\n\n")) != NULL)
		msg = end + 2;
	root = cJSON_CreateObject();
	e = cJSON_AddObjectToObject(root, "error");
	cJSON_AddStringToObject(e, "code",
	    code > 0 && code < (int)(sizeof(codes) / sizeof(codes[0]))
	        ? codes[code]
	        : "failed");
	cJSON_AddNumberToObject(e, "exit", code);
	cJSON_AddStringToObject(
	    e, "message", *msg ? msg : "the command failed (see its --help)");
	cli_json_print_obj(stdout, root);
	fflush(stdout);
	return code;
}

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
