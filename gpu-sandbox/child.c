/*
 * child.c - the sandbox child's loop: announce the device, then answer each
 * request through the backend; exit after a fault.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kc_err.h"
#include "kc_log.h"
#include "sandbox.h"

/* Exit code of a child that reported a fault (its context is lost). */
#define CHILD_EXIT_FAULT 3

int
sbx_child_main(const sbx_backend *be, int argc, char **argv)
{
	sbx_child_config cfg = {.device = 0};
	Kclaw__EvalResult *ready;
	void *state = NULL;
	int rv, code = 0;

	for (int i = 1; i + 1 < argc; i++) {
		if (strcmp(argv[i], "--device") == 0)
			cfg.device = atoi(argv[++i]);
		else if (strcmp(argv[i], "--cache") == 0)
			cfg.cache_dir = argv[++i];
		else if (strcmp(argv[i], "--arch") == 0)
			cfg.arch = argv[++i];
	}
	/* The parent owns the lifecycle: a dead parent closes the pipe and
	 * this loop ends; SIGPIPE must not kill it mid-answer. */
	signal(SIGPIPE, SIG_IGN);
	if ((ready = sbx_result_new("")) == NULL)
		return 1;
	rv = be->init(&state, &cfg, ready);
	if (rv == 0)
		ready->status = KCLAW__EVAL_STATUS__OK;
	else
		sbx_result_status(
		    ready, KCLAW__EVAL_STATUS__NO_DEVICE, "%s", kc_lasterr());
	rv = sbx_frame_write(SBX_CHILD_OUT_FD, &ready->base);
	kclaw__eval_result__free_unpacked(ready, NULL);
	/* A parent that died while this child started: leave through fini
	 * all the same (LeakSanitizer reported the backend's state). */
	if (rv != 0)
		code = 1;
	while (rv == 0) {
		Kclaw__EvalRequest *req;
		Kclaw__EvalResult *res;
		void *buf;
		size_t len;
		int fatal = 0;

		rv = sbx_frame_read(SBX_CHILD_IN_FD, -1, &buf, &len);
		if (rv == KC_ECLOSED)
			break;
		if (rv != 0) {
			KC_ERROR("reading a request: %s", kc_lasterr());
			code = 1;
			break;
		}
		req = kclaw__eval_request__unpack(NULL, len, buf);
		free(buf);
		if (req == NULL) {
			KC_ERROR("a request from the parent did not decode");
			code = 1;
			break;
		}
		if ((res = sbx_result_new(req->job_id)) == NULL) {
			kclaw__eval_request__free_unpacked(req, NULL);
			code = 1;
			break;
		}
		be->evaluate(state, req, res, &fatal);
		kclaw__eval_request__free_unpacked(req, NULL);
		rv = sbx_frame_write(SBX_CHILD_OUT_FD, &res->base);
		kclaw__eval_result__free_unpacked(res, NULL);
		if (fatal) {
			/* The context is poisoned for good: leave without
			 * touching CUDA again (no fini, no unload). */
			_exit(CHILD_EXIT_FAULT);
		}
		if (rv != 0)
			break;
	}
	if (be->fini != NULL)
		be->fini(state);
	return code;
}
