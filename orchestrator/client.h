/*
 * client.h - what the CLI's orchestrator commands share: an API client for
 * the deployment in cfg, and one call with the CLI's timeout.
 */
#ifndef ORCH_CLIENT_H
#define ORCH_CLIENT_H

#include "api.h"
#include "kc_config.h"

#define ORCH_CLIENT_TIMEOUT_MS 3000

typedef struct {
	kc_config cfg;
	bus_client *bus;
} orch_client;

int orch_client_open(orch_client *c, const kc_config *cfg);
void orch_client_close(orch_client *c);
/* kc_api_call with the deployment's token; KC_ETIMEDOUT says how to start
 * the orchestrator. */
int orch_client_call(orch_client *c, const char *method,
    const ProtobufCMessage *req, const ProtobufCMessageDescriptor *d,
    ProtobufCMessage **resp);

#endif
