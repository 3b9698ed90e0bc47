/*
 * cli.h - the kclaw command line. Each subcommand lives in cli_<name>.c as
 * `int cli_<name>(int argc, char **argv)` where argv[0] is the subcommand's
 * name; it returns the process exit code:
 *
 *   0  success              3  not found (task, file)
 *   1  failure (see stderr) 4  the orchestrator is not reachable
 *   2  usage error          5  not implemented yet
 *
 * Output for humans goes to stdout; with --json, one JSON document (or JSON
 * lines for streams) goes to stdout instead, in one convention
 * (docs/cli.md "JSON output"). Errors go to stderr and say what to do; with
 * --json a command that fails without printing its document prints
 * {"error": {"code": ..., "exit": N, "message": ...}} on stdout too.
 */
#ifndef KC_CLI_H
#define KC_CLI_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "client.h"
#include "kc_config.h"

enum {
	CLI_OK = 0,
	CLI_FAIL = 1,
	CLI_USAGE = 2,
	CLI_NOT_FOUND = 3,
	CLI_UNREACHABLE = 4,
	CLI_NOT_IMPLEMENTED = 5,
};

/* True if argv holds --help or -h; then the caller prints its help. */
bool cli_wants_help(int argc, char **argv);
/* Maps a KC_E* code to an exit code, printing kc_lasterr() with prefix. */
int cli_fail(const char *prefix, int err);
/* Loads the configuration (honours --home DIR anywhere in argv). */
int cli_config(int argc, char **argv, kc_config *cfg);

/*
 * Why a finished task ended, in full, as a malloc'd string (caller frees),
 * or NULL when it has no reason to give. The record's error says what
 * stopped it; the reason behind a failed job (which job, what it said) is
 * in the task's TASK_FINISHED event, read from the event log through c
 * (NULL: only the record's text).
 */
char *cli_task_why(orch_client *c, const Kclaw__TaskRecord *t);
/* Puts cli_task_why's reason into t->error, so --json shows it too. */
void cli_task_why_fill(orch_client *c, Kclaw__TaskRecord *t);
/* Whether a usable NVIDIA GPU is here, as the sandbox finds it
 * (KCLAW_CUDA_DRIVER may name the driver library); why says what is
 * missing. */
bool cli_have_gpu(char *why, size_t n);

/*
 * --json's conventions. kclaw.c calls cli_json_begin with the command's
 * arguments (--json among them turns it on: what the command writes to
 * stderr is kept for the error document) and cli_json_end with its exit
 * code (prints the error document when the command failed and printed no
 * document). Commands print their documents with cli_json_print (text) or
 * cli_json_print_obj (takes o), which mark that one was printed;
 * cli_json_stream marks a stream (watch): its error line comes after the
 * lines already printed.
 */
void cli_json_begin(int argc, char **argv);
int cli_json_end(int code);
void cli_json_print(FILE *out, const char *text);
int cli_json_print_obj(FILE *out, cJSON *o);
void cli_json_stream(void);
/* Runs this kclaw binary with args (NULL-terminated, at most 14), its
 * stdout to /dev/null; returns its exit status (kclaw up --detach). */
int cli_self(const char *const *args);
/* Stops the service a job started in home (`kclaw up --stop`) and says so
 * on progress as "WHO: service stopped", or where to look when it did not
 * stop cleanly. kclaw main and kclaw kernelbench share it. */
void cli_service_stop(const char *home, const char *who, FILE *progress);
/* Opens c on the service of home, starting one (`kclaw up --detach`, with
 * --agents and --gpus where not 0) when none answers Health; *started says
 * whether it did. "WHO: using the service already running in HOME" goes to
 * progress when one answered. kclaw main and kclaw kernelbench share it. */
int cli_service_open(const char *home, const kc_config *cfg, orch_client *c,
    unsigned agents, unsigned gpus, const char *who, FILE *progress,
    bool *started);
/* Health of the service c is open on. */
int cli_health(orch_client *c, Kclaw__HealthResponse **h);
/* Whether path is a folder. */
bool cli_is_dir(const char *path);
/* stderr itself, for progress that is no error (kclaw main's). */
FILE *cli_stderr_raw(void);
/* Adds s to o under k, null when s is NULL or empty. */
cJSON *cli_json_str(cJSON *o, const char *k, const char *s);
/* The same, lower-cased (a state: "DONE" -> "done"). */
cJSON *cli_json_enum(cJSON *o, const char *k, const char *s);

int cli_up(int argc, char **argv);
int cli_submit(int argc, char **argv);
int cli_status(int argc, char **argv);
int cli_watch(int argc, char **argv);
int cli_result(int argc, char **argv);
int cli_cancel(int argc, char **argv);
int cli_eval(int argc, char **argv);
int cli_memory(int argc, char **argv);
int cli_report(int argc, char **argv);
int cli_main_job(int argc, char **argv);
int cli_kernelbench(int argc, char **argv);

#endif
