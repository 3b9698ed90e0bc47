/*
 * agent_testlib.h - helpers shared by the agent tests: the scripted LLM test
 * server (tests/agents/llm_server.py, a separate process on loopback),
 * temporary folders and an LLM configuration pointing at the server.
 */
#ifndef AGENT_TESTLIB_H
#define AGENT_TESTLIB_H

#include <cjson/cJSON.h>
#include <sys/types.h>

#include "llm.h"

typedef struct {
	pid_t pid;
	int port;
	char base_url[128];
	char dir[256];
} kt_llm_server;

/* Starts the server and waits until it accepts connections. */
void kt_llm_start(kt_llm_server *s);
void kt_llm_stop(kt_llm_server *s);

/* Script actions (see llm_server.py); each returns a new cJSON object. */
cJSON *kt_reply(const char *content);
cJSON *kt_status(int status, const char *retry_after);
cJSON *kt_raw(int status, const char *raw);
cJSON *kt_hang(double seconds, const char *content);

/* Replaces the server's script with the actions (NULL-terminated; takes
 * them) and clears its request log. */
void kt_llm_script(kt_llm_server *s, ...);
/* The same with the server's behaviour set by the fields of opts (takes
 * it; see llm_server.py: "refuse", "models", "model_info", ...). */
void kt_llm_script_with(kt_llm_server *s, cJSON *opts, ...);
/* The requests the server received since the last script (caller frees). */
cJSON *kt_llm_log(kt_llm_server *s);

/* A new empty folder under $TMPDIR (or /tmp); out is at least 256 bytes. */
void kt_tmpdir(char *out, const char *prefix);
/* Removes a folder tree made by a test. */
void kt_rmtree(const char *dir);

/* Defaults pointing at s with a test key, short timeouts and backoffs. */
void kt_llm_config(llm_config *c, const kt_llm_server *s);

#define KT_TEST_KEY "sk-kclaw-test-SECRET-0123456789"

#endif
