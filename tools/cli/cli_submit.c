/*
 * cli_submit.c - `kclaw submit BUNDLE_DIR`: loads and checks the bundle
 * here (so mistakes are reported before anything is sent), uploads the
 * tensor files the orchestrator lacks (PutBlob, common/blobput.h), submits
 * the spec naming them by hash and prints the task's id. A bundle that is
 * already running (the same content, by fingerprint) is not submitted
 * twice unless --new says so, and a --task-id that names another bundle's
 * task is refused.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blobput.h"
#include "bundle.h"
#include "cli.h"
#include "cli_args.h"
#include "client.h"
#include "kc_err.h"
#include "kc_util.h"
#include "pbjson.h"

static void
submit_usage(FILE *f)
{
	fprintf(f,
	    "usage: kclaw submit BUNDLE_DIR [--task-id ID | --new] [--remote] "
	    "[--wait]\n            [--json] [--home DIR]\n\n"
	    "Submits a task bundle (a folder with task.json) to the running "
	    "orchestrator\nand prints the task's id. The bundle is loaded and "
	    "checked here; its tensor\nfiles are uploaded by content (those "
	    "the orchestrator lacks; an interrupted\nupload resumes when the "
	    "command is run again), so no folder need be shared.\n--remote "
	    "sends only its path, for an orchestrator that reads the same\n"
	    "folder (inside its bundle roots).\n\n"
	    "A bundle whose content is already running as a task is not "
	    "submitted again:\nthe command says so and prints that task's id "
	    "(--new submits it anyway).\n--task-id ID names the task (1-16 "
	    "letters, digits or '_') and makes the\nsubmission idempotent: "
	    "the same bundle again returns ID; another bundle\nunder an "
	    "existing ID is refused.\n--wait waits for the task to end and "
	    "exits 0 when it is DONE, 1 otherwise.\n--json prints "
	    "{\"task_id\": ..., \"duplicate\": true|false} (with --wait, the "
	    "final\nTaskRecord).\n\n"
	    "Exit codes: 0 submitted (or already there); 1 refused (the "
	    "bundle does not load,\n--task-id names another bundle's task, "
	    "the orchestrator says no); 2 usage;\n3 the bundle folder does "
	    "not exist; 4 the orchestrator is not reachable.\n");
}

static bool
submit_final(const char *s)
{
	return strcmp(s, "DONE") == 0 || strcmp(s, "FAILED") == 0 ||
	    strcmp(s, "CANCELLED") == 0;
}

static int
submit_wait(orch_client *c, const char *id, bool json)
{
	for (;;) {
		Kclaw__StatusRequest req = KCLAW__STATUS_REQUEST__INIT;
		Kclaw__StatusResponse *resp;
		int rv, code;
		req.task_id = (char *)id;
		if ((rv = orch_client_call(c, "Status", &req.base,
		         &kclaw__status_response__descriptor,
		         (ProtobufCMessage **)&resp)) != 0)
			return cli_fail("submit", rv);
		if (!submit_final(resp->task->state)) {
			kclaw__status_response__free_unpacked(resp, NULL);
			kc_sleep_ms(200);
			continue;
		}
		if (json) {
			char *s = kc_pb_to_json_public_text(&resp->task->base);
			cli_json_print(stdout, s);
			free(s);
		} else {
			char best[32];
			if (resp->task->best_ms > 0)
				snprintf(best, sizeof(best), "%.4f ms",
				    resp->task->best_ms);
			else
				snprintf(best, sizeof(best), "\u2013");
			printf("%s %s round %u best %s%s%s\n", id,
			    resp->task->state, resp->task->round, best,
			    *resp->task->error ? ": " : "", resp->task->error);
		}
		code =
		    strcmp(resp->task->state, "DONE") == 0 ? CLI_OK : CLI_FAIL;
		kclaw__status_response__free_unpacked(resp, NULL);
		return code;
	}
}

/* ------------------------------------------------------------ uploads */

/* The tensor's content is named by its hash (a copy replaces the old). */
static int
submit_set_blob(Kclaw__TensorData *td, const char *hash)
{
	char *v = strdup(hash);

	if (v == NULL)
		return KC_ENOMEM;
	if (td->blob != NULL && td->blob != protobuf_c_empty_string)
		free(td->blob);
	td->blob = v;
	return 0;
}

/* Names a tensor file by the sha256 of its content (the path stays until
 * the content is uploaded). */
static int
submit_hash_tensor(Kclaw__TensorData *td, void *arg)
{
	char hash[65];

	(void)arg;
	if (td->path == NULL || *td->path == '\0' ||
	    (td->blob != NULL && strlen(td->blob) == 64))
		return 0;
	if (kc_blob_hash_file(td->path, hash, NULL) != 0) {
		char why[512];
		kc_strlcpy(why, kc_lasterr(), sizeof(why));
		return kc_seterr(KC_EIO, "tensor '%s': %s", td->name, why);
	}
	return submit_set_blob(td, hash);
}

/* Sends the content of a tensor file the orchestrator lacks; the spec
 * then names it by hash only. */
static int
submit_upload_tensor(Kclaw__TensorData *td, void *arg)
{
	orch_client *c = arg;
	int rv;

	if (td->path == NULL || *td->path == '\0' || td->blob == NULL ||
	    strlen(td->blob) != 64)
		return 0;
	if ((rv = kc_blob_put_file(
	         c->bus, c->cfg.token, td->path, td->blob, NULL)) != 0)
		return rv;
	if (td->path != protobuf_c_empty_string)
		free(td->path);
	td->path = (char *)protobuf_c_empty_string;
	return 0;
}

static int
submit_has_file(Kclaw__TensorData *td, void *arg)
{
	(void)arg;
	return td->path != NULL && *td->path != '\0' ? 1 : 0;
}

/* Uploads what the orchestrator lacks. A Health call first, so that an
 * orchestrator that is not there is reported as quickly and in the same
 * words as for any command. */
static int
submit_uploads(orch_client *c, Kclaw__TaskSpec *spec)
{
	Kclaw__HealthRequest hr = KCLAW__HEALTH_REQUEST__INIT;
	ProtobufCMessage *resp;
	int rv;

	if (kc_spec_each_tensor_data(spec, submit_has_file, NULL) != 1)
		return 0;
	if ((rv = orch_client_call(c, "Health", &hr.base,
	         &kclaw__health_response__descriptor, &resp)) != 0)
		return rv;
	protobuf_c_message_free_unpacked(resp, NULL);
	return kc_spec_each_tensor_data(spec, submit_upload_tensor, c);
}

/* ---------------------------------------------------- same bundle twice */

/* One tensor's content as its sha256: the stored blob's name, else the
 * inline bytes, else the file. What it cannot read keeps its path. */
static int
submit_norm_tensor(Kclaw__TensorData *td, void *arg)
{
	char hash[65], *data;
	size_t len;

	(void)arg;
	if (td->blob != NULL && strlen(td->blob) == 64)
		return 0;
	if (td->data.len > 0) {
		kc_sha256_hex(td->data.data, td->data.len, hash);
	} else if (td->path != NULL && *td->path != '\0' &&
	    kc_read_file(td->path, (size_t)1 << 40, &data, &len) == 0) {
		kc_sha256_hex(data, len, hash);
		free(data);
	} else {
		kc_clearerr();
		return 0;
	}
	return submit_set_blob(td, hash);
}

/* Clears what a stored spec and the loaded one may hold differently for
 * the same content: inline bytes and file paths (the blob name stays). */
static int
submit_strip_tensor(Kclaw__TensorData *td, void *arg)
{
	(void)arg;
	if (td->blob == NULL || strlen(td->blob) != 64)
		return 0;
	free(td->data.data);
	td->data.data = NULL;
	td->data.len = 0;
	if (td->path != NULL && td->path != protobuf_c_empty_string)
		free(td->path);
	td->path = (char *)protobuf_c_empty_string;
	return 0;
}

/*
 * The fingerprint of a bundle's content (sha256 hex): the spec with every
 * tensor named by the hash of its bytes, so a spec loaded here and the one
 * the orchestrator stored (tensors as blobs) compare equal.
 */
static int
submit_fingerprint(const Kclaw__TaskSpec *spec, char out[65])
{
	size_t len = protobuf_c_message_get_packed_size(&spec->base);
	uint8_t *buf = malloc(len ? len : 1);
	Kclaw__TaskSpec *copy = NULL;
	int rv = KC_ENOMEM;

	if (buf == NULL)
		return KC_ENOMEM;
	protobuf_c_message_pack(&spec->base, buf);
	if ((copy = kclaw__task_spec__unpack(NULL, len, buf)) == NULL)
		goto out;
	free(buf);
	buf = NULL;
	if ((rv = kc_spec_each_tensor_data(copy, submit_norm_tensor, NULL)) !=
	        0 ||
	    (rv = kc_spec_each_tensor_data(copy, submit_strip_tensor, NULL)) !=
	        0)
		goto out;
	len = protobuf_c_message_get_packed_size(&copy->base);
	if ((buf = malloc(len ? len : 1)) == NULL) {
		rv = KC_ENOMEM;
		goto out;
	}
	protobuf_c_message_pack(&copy->base, buf);
	kc_sha256_hex(buf, len, out);
	rv = 0;
out:
	free(buf);
	if (copy != NULL)
		kclaw__task_spec__free_unpacked(copy, NULL);
	return rv;
}

/* The stored record of task id (with its spec), or NULL if there is none. */
static Kclaw__StatusResponse *
submit_status(orch_client *c, const char *id)
{
	Kclaw__StatusRequest req = KCLAW__STATUS_REQUEST__INIT;
	Kclaw__StatusResponse *resp;

	req.task_id = (char *)id;
	if (orch_client_call(c, "Status", &req.base,
	        &kclaw__status_response__descriptor,
	        (ProtobufCMessage **)&resp) != 0) {
		kc_clearerr();
		return NULL;
	}
	if (resp->task == NULL) {
		kclaw__status_response__free_unpacked(resp, NULL);
		return NULL;
	}
	return resp;
}

/* Whether task rec holds the bundle whose fingerprint is fp. */
static bool
submit_same(const Kclaw__TaskRecord *rec, const char *fp)
{
	char other[65];

	return rec->spec != NULL && submit_fingerprint(rec->spec, other) == 0 &&
	    strcmp(other, fp) == 0;
}

/* The id of an unfinished task with the same bundle (name, then content),
 * into id; false if there is none. */
static bool
submit_find_running(orch_client *c, const Kclaw__TaskSpec *spec, const char *fp,
    char *id, size_t n, char *state, size_t sn)
{
	Kclaw__ListRequest req = KCLAW__LIST_REQUEST__INIT;
	Kclaw__ListResponse *list;
	bool found = false;

	req.state = "active";
	if (orch_client_call(c, "List", &req.base,
	        &kclaw__list_response__descriptor,
	        (ProtobufCMessage **)&list) != 0) {
		kc_clearerr();
		return false;
	}
	for (size_t i = 0; i < list->n_tasks && !found; i++) {
		const Kclaw__TaskRecord *t = list->tasks[i];
		Kclaw__StatusResponse *st;
		if (t->spec == NULL || t->spec->name == NULL ||
		    strcmp(t->spec->name, spec->name) != 0)
			continue;
		if ((st = submit_status(c, t->id)) == NULL)
			continue;
		if (submit_same(st->task, fp)) {
			found = true;
			kc_strlcpy(id, t->id, n);
			kc_strlcpy(state, st->task->state, sn);
		}
		kclaw__status_response__free_unpacked(st, NULL);
	}
	kclaw__list_response__free_unpacked(list, NULL);
	return found;
}

/*
 * Before submitting: whether the bundle is there already. Returns
 * CLI_ARGS_GO to submit, CLI_OK with id filled when it is a duplicate, or
 * an exit code when --task-id names another bundle's task.
 */
static int
submit_check_duplicate(orch_client *c, const Kclaw__TaskSpec *spec,
    const char *task_id, bool fresh, char *id, size_t n)
{
	Kclaw__StatusResponse *st;
	char fp[65], state[32];
	int code = CLI_ARGS_GO;

	if (spec == NULL || submit_fingerprint(spec, fp) != 0)
		return CLI_ARGS_GO; /* the orchestrator decides */
	if (task_id != NULL) {
		if ((st = submit_status(c, task_id)) == NULL)
			return CLI_ARGS_GO;
		if (submit_same(st->task, fp)) {
			fprintf(stderr,
			    "kclaw submit: task %s already holds this bundle "
			    "(%s); not submitted again\n",
			    task_id, st->task->state);
			kc_strlcpy(id, task_id, n);
			code = CLI_OK;
		} else {
			fprintf(stderr,
			    "kclaw submit: task %s exists with a different "
			    "bundle (%s, %s); choose another --task-id, or "
			    "leave it out for a new id\n",
			    task_id,
			    st->task->spec && st->task->spec->name
			        ? st->task->spec->name
			        : "?",
			    st->task->state);
			code = CLI_FAIL;
		}
		kclaw__status_response__free_unpacked(st, NULL);
		return code;
	}
	if (fresh ||
	    !submit_find_running(c, spec, fp, id, n, state, sizeof(state)))
		return CLI_ARGS_GO;
	fprintf(stderr,
	    "kclaw submit: this bundle is a duplicate of the running task %s "
	    "(%s); not submitted again. `kclaw watch %s` follows it; --new "
	    "submits another\n",
	    id, state, id);
	return CLI_OK;
}

/* --json without --wait: {"task_id": ID, "duplicate": BOOL}. */
static void
submit_json(const char *id, bool duplicate)
{
	cJSON *o = cJSON_CreateObject();

	cli_json_str(o, "task_id", id);
	cJSON_AddBoolToObject(o, "duplicate", duplicate);
	cli_json_print_obj(stdout, o);
}

/* Submit stores the spec (and its tensors' records) before it answers. */
#define SUBMIT_TIMEOUT_MS 60000

int
cli_submit(int argc, char **argv)
{
	const char *dir = NULL, *task_id = NULL;
	bool json = false, wait = false, remote = false, fresh = false;
	char dup[64];
	Kclaw__SubmitRequest req = KCLAW__SUBMIT_REQUEST__INIT;
	Kclaw__SubmitResponse *resp;
	Kclaw__TaskSpec *spec = NULL;
	char abs[PATH_MAX];
	kc_config cfg;
	orch_client c;
	int rv, code;
	const cli_opt opts[] = {{"--json", &json, NULL},
	    {"--wait", &wait, NULL}, {"--remote", &remote, NULL},
	    {"--new", &fresh, NULL}, {"--task-id", NULL, &task_id}};

	if ((rv = cli_args(argc, argv, opts, CLI_NOPTS(opts), &dir,
	         "which bundle? give its folder", submit_usage)) != CLI_ARGS_GO)
		return rv;
	if (fresh && task_id != NULL) {
		fprintf(stderr,
		    "kclaw submit: --new and --task-id exclude each other (a "
		    "task id names one task)\n");
		return CLI_USAGE;
	}
	if (remote) {
		if (realpath(dir, abs) == NULL)
			snprintf(abs, sizeof(abs), "%s", dir);
		req.bundle_dir = abs;
		/* Only to recognise a duplicate; the orchestrator loads it. */
		if (kc_bundle_load(abs, &spec) != 0)
			kc_clearerr();
	} else if ((rv = kc_bundle_load(dir, &spec)) != 0) {
		code = cli_fail("submit", rv);
		return code == CLI_USAGE ? CLI_FAIL : code;
	} else if ((rv = kc_spec_each_tensor_data(
	                spec, submit_hash_tensor, NULL)) != 0) {
		/* Tensors travel by content, named by their hash (the
		 * fingerprint below reads no file again). */
		code = cli_fail("submit", rv);
		kclaw__task_spec__free_unpacked(spec, NULL);
		return code == CLI_USAGE ? CLI_FAIL : code;
	}
	req.spec = remote ? NULL : spec;
	req.task_id = (char *)(task_id ? task_id : "");
	if ((rv = cli_config(argc, argv, &cfg)) != 0 ||
	    (rv = orch_client_open(&c, &cfg)) != 0) {
		code = cli_fail("submit", rv);
		goto out;
	}
	code =
	    submit_check_duplicate(&c, spec, task_id, fresh, dup, sizeof(dup));
	if (code != CLI_ARGS_GO) {
		if (code == CLI_OK && !wait && json)
			submit_json(dup, true);
		else if (code == CLI_OK && !wait)
			printf("%s\n", dup);
		if (code == CLI_OK && wait)
			code = submit_wait(&c, dup, json);
		orch_client_close(&c);
		goto out;
	}
	/* Each tensor file the orchestrator lacks, then the spec that names
	 * them: Submit carries no tensor (the API takes 4 MiB). */
	if (!remote && (rv = submit_uploads(&c, spec)) != 0) {
		code = cli_fail("submit", rv);
		if (code == CLI_USAGE)
			code = CLI_FAIL;
		orch_client_close(&c);
		goto out;
	}
	/* Once an orchestrator answered, a Submit without an answer is a
	 * slow one (a large bundle stored), not a missing orchestrator: wait
	 * longer, and on a timeout say the task may have been created rather
	 * than invite a retry that duplicates it. */
	{
		Kclaw__HealthRequest hq = KCLAW__HEALTH_REQUEST__INIT;
		ProtobufCMessage *hr;
		if ((rv = orch_client_call(&c, "Health", &hq.base,
		         &kclaw__health_response__descriptor, &hr)) != 0) {
			code = cli_fail("submit", rv);
			orch_client_close(&c);
			goto out;
		}
		protobuf_c_message_free_unpacked(hr, NULL);
	}
	rv = kc_api_call(c.bus, "Submit", &req.base, c.cfg.token,
	    SUBMIT_TIMEOUT_MS, &kclaw__submit_response__descriptor,
	    (ProtobufCMessage **)&resp);
	if (rv == KC_ETIMEDOUT) {
		fprintf(stderr,
		    "kclaw submit: the orchestrator on %s took the bundle but "
		    "gave no answer within %d s; the task may exist: `kclaw "
		    "status` lists it (submitting again would find it as a "
		    "duplicate)\n",
		    c.cfg.api_url, SUBMIT_TIMEOUT_MS / 1000);
		code = CLI_FAIL;
	} else if (rv != 0) {
		code = cli_fail("submit", rv);
		if (code == CLI_USAGE)
			code = CLI_FAIL; /* the bundle, not the command line */
	} else {
		if (!wait && json)
			submit_json(resp->task_id, false);
		else if (!wait)
			printf("%s\n", resp->task_id);
		code = wait ? submit_wait(&c, resp->task_id, json) : CLI_OK;
		kclaw__submit_response__free_unpacked(resp, NULL);
	}
	orch_client_close(&c);
out:
	if (spec)
		kclaw__task_spec__free_unpacked(spec, NULL);
	return code;
}
