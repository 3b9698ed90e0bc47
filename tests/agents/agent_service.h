/*
 * agent_service.h - the service as the agent tests start it: the real
 * kclawd in a fresh home, pointed at the scripted LLM server, with one
 * real kclaw-agent of a role. Include after agent_testlib.h.
 */
#ifndef KC_AGENT_SERVICE_H
#define KC_AGENT_SERVICE_H

/* The harness's helpers a test has no use for. */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "orchestrator/harness.h"

static void
as_start(const char *home_name, const kt_llm_server *srv, const char *role)
{
	h_setup(home_name, NULL);
	setenv("KCLAW_LLM_BASE_URL", srv->base_url, 1);
	setenv("KCLAW_LLM_MODEL", "test-model", 1);
	setenv("KCLAW_LLM_API_KEY", KT_TEST_KEY, 1);
	setenv("KCLAW_LLM_BACKOFF_MS", "20", 1);
	h_kclawd();
	h_wait_up();
	h_spawn("kclaw-agent", "--role", role, "--home", h_home, (char *)NULL);
}

#endif
