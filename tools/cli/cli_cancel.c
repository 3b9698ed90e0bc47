/*
 * cli_cancel.c - `kclaw cancel TASK_ID`.
 */
#include <stdio.h>

#include "cli.h"
#include "cli_args.h"
#include "client.h"
#include "kc_err.h"

static void
cancel_usage(FILE *f)
{
	fprintf(f,
	    "usage: kclaw cancel TASK_ID [--json] [--home DIR]\n\n"
	    "Cancels a task: its jobs are dropped and it ends CANCELLED, "
	    "keeping what it\nfound so far. Cancelling a CANCELLED task is "
	    "fine; a DONE or FAILED one is\nrefused (exit 1). Exit 3: no such "
	    "task.\n");
}

int
cli_cancel(int argc, char **argv)
{
	const char *task = NULL;
	bool json = false;
	Kclaw__CancelRequest req = KCLAW__CANCEL_REQUEST__INIT;
	Kclaw__CancelResponse *resp;
	kc_config cfg;
	orch_client c;
	int rv, code = CLI_OK;
	const cli_opt opts[] = {{"--json", &json, NULL}};

	if ((rv = cli_args(argc, argv, opts, CLI_NOPTS(opts), &task,
	         "which task? (`kclaw status` lists them)", cancel_usage)) !=
	    CLI_ARGS_GO)
		return rv;
	if ((rv = cli_config(argc, argv, &cfg)) != 0 ||
	    (rv = orch_client_open(&c, &cfg)) != 0)
		return cli_fail("cancel", rv);
	req.task_id = (char *)task;
	rv = orch_client_call(&c, "Cancel", &req.base,
	    &kclaw__cancel_response__descriptor, (ProtobufCMessage **)&resp);
	if (rv != 0) {
		code = cli_fail("cancel", rv);
		if (code == CLI_USAGE)
			code = CLI_FAIL;
	} else {
		if (json) {
			cJSON *o = cJSON_CreateObject();
			cli_json_str(o, "task_id", task);
			cli_json_enum(o, "state", resp->state);
			cli_json_print_obj(stdout, o);
		} else
			printf("%s %s\n", task, resp->state);
		kclaw__cancel_response__free_unpacked(resp, NULL);
	}
	orch_client_close(&c);
	return code;
}
