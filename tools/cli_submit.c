/*
 * cli_submit.c - `kclaw submit BUNDLE_DIR`: loads and checks the bundle
 * here (so mistakes are reported before anything is sent), submits its
 * content and prints the task's id.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bundle.h"
#include "cli.h"
#include "cli_args.h"
#include "client.h"
#include "kc_err.h"
#include "kc_util.h"
#include "pbjson.h"

/* Tensors sent inline with a spec, at most (the bus takes 64 MiB). */
#define SUBMIT_INLINE_MAX ((size_t)48 << 20)

static void
submit_usage(FILE *f)
{
	fprintf(f,
	    "usage: kclaw submit BUNDLE_DIR [--task-id ID] [--remote] [--wait]"
	    " [--json]\n            [--home DIR]\n\n"
	    "Submits a task bundle (a folder with task.json) to the running "
	    "orchestrator\nand prints the task's id. The bundle is loaded and "
	    "checked here and sent with its tensors (up to 48 MiB; larger "
	    "ones go by\npath, inside the orchestrator's bundle roots); "
	    "--remote sends only its path,\nfor an orchestrator that reads "
	    "the same folder (inside its bundle roots).\n--task-id makes the "
	    "submission "
	    "idempotent (1-16 letters, digits or '_').\n--wait waits for the "
	    "task to end and exits 0 when it is DONE, 1 otherwise.\n--json "
	    "prints {\"task_id\": ...} (with --wait, the final TaskRecord).\n");
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
			char *s = kc_pb_to_json_text(&resp->task->base);
			printf("%s\n", s ? s : "null");
			free(s);
		} else {
			printf("%s %s round %u best %.4f ms%s%s\n", id,
			    resp->task->state, resp->task->round,
			    resp->task->best_ms, *resp->task->error ? ": " : "",
			    resp->task->error);
		}
		code =
		    strcmp(resp->task->state, "DONE") == 0 ? CLI_OK : CLI_FAIL;
		kclaw__status_response__free_unpacked(resp, NULL);
		return code;
	}
}

int
cli_submit(int argc, char **argv)
{
	const char *dir = NULL, *task_id = NULL;
	bool json = false, wait = false, remote = false;
	Kclaw__SubmitRequest req = KCLAW__SUBMIT_REQUEST__INIT;
	Kclaw__SubmitResponse *resp;
	Kclaw__TaskSpec *spec = NULL;
	char abs[PATH_MAX];
	kc_config cfg;
	orch_client c;
	int rv, code;
	const cli_opt opts[] = {{"--json", &json, NULL},
	    {"--wait", &wait, NULL}, {"--remote", &remote, NULL},
	    {"--task-id", NULL, &task_id}};

	if ((rv = cli_args(argc, argv, opts, CLI_NOPTS(opts), &dir,
	         "which bundle? give its folder", submit_usage)) != CLI_ARGS_GO)
		return rv;
	if (remote) {
		if (realpath(dir, abs) == NULL)
			snprintf(abs, sizeof(abs), "%s", dir);
		req.bundle_dir = abs;
	} else if ((rv = kc_bundle_load(dir, &spec)) != 0) {
		code = cli_fail("submit", rv);
		return code == CLI_USAGE ? CLI_FAIL : code;
	} else if ((rv = kc_bundle_inline(spec, SUBMIT_INLINE_MAX)) != 0 &&
	    rv != KC_ENOSPC) {
		/* Tensors up to the limit travel with the spec (the
		 * orchestrator stores them by content); larger ones keep
		 * their paths, which the orchestrator must be allowed to
		 * read (its bundle roots). */
		code = cli_fail("submit", rv);
		kclaw__task_spec__free_unpacked(spec, NULL);
		return code == CLI_USAGE ? CLI_FAIL : code;
	}
	req.spec = spec;
	req.task_id = (char *)(task_id ? task_id : "");
	if ((rv = cli_config(argc, argv, &cfg)) != 0 ||
	    (rv = orch_client_open(&c, &cfg)) != 0) {
		code = cli_fail("submit", rv);
		goto out;
	}
	rv = orch_client_call(&c, "Submit", &req.base,
	    &kclaw__submit_response__descriptor, (ProtobufCMessage **)&resp);
	if (rv != 0) {
		code = cli_fail("submit", rv);
		if (code == CLI_USAGE)
			code = CLI_FAIL; /* the bundle, not the command line */
	} else {
		if (!wait && json)
			printf("{\"task_id\":\"%s\"}\n", resp->task_id);
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
