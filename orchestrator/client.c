/*
 * client.c - the CLI's API client. See client.h.
 */
#include "client.h"

#include <string.h>
#include <unistd.h>

#include "kc_err.h"

int
orch_client_open(orch_client *c, const kc_config *cfg)
{
	c->cfg = *cfg;
	c->bus = NULL;
	/* An ipc:// address without its socket file has no orchestrator:
	 * say so at once instead of after the timeout. */
	if (strncmp(cfg->api_url, "ipc://", 6) == 0 &&
	    access(cfg->api_url + 6, F_OK) != 0)
		return kc_seterr(KC_ECLOSED,
		    "no orchestrator runs in %s (%s does not exist); start "
		    "one with `kclaw up --detach`",
		    cfg->home, cfg->api_url + 6);
	return bus_client_open(&c->bus, cfg->api_url, 0);
}

void
orch_client_close(orch_client *c)
{
	bus_client_close(c->bus);
	c->bus = NULL;
}

int
orch_client_call(orch_client *c, const char *method,
    const ProtobufCMessage *req, const ProtobufCMessageDescriptor *d,
    ProtobufCMessage **resp)
{
	int rv = kc_api_call(
	    c->bus, method, req, c->cfg.token, ORCH_CLIENT_TIMEOUT_MS, d, resp);

	if (rv == KC_ETIMEDOUT)
		kc_seterr(KC_ETIMEDOUT,
		    "no orchestrator answers on %s; start one with `kclaw up "
		    "--detach` (or `kclaw --home DIR ...` for another "
		    "deployment)",
		    c->cfg.api_url);
	return rv;
}
