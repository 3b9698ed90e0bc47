/*
 * cli_memory.c - `kclaw memory import|export|stats|methods|explain`: the
 * long-term memory from the command line (store/memory.h does the work).
 *
 * At run time only the orchestrator opens the store; when it holds the
 * store, these commands ask it over the API (the Memory rpc) instead, and
 * say so clearly when nothing answers there.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <sys/stat.h>

#include "cli.h"
#include "client.h"
#include "kc_err.h"
#include "kc_util.h"
#include "memory.h"

static const char cli_memory_usage[] =
    "usage: kclaw [--home DIR] memory <command> [options]\n"
    "\n"
    "The two memories of kclaw (docs/memory.md): expert knowledge and the\n"
    "statistics learned from every optimisation attempt.\n"
    "\n"
    "commands:\n"
    "  import [DIR]        validate DIR/policy.json and DIR/methods.json "
    "and store\n"
    "                      them as a new knowledge version (default: the\n"
    "                      shipped store/knowledge)\n"
    "  export DIR          write the current knowledge to DIR\n"
    "  stats [--signature SIG]\n"
    "                      what has been learned, per evidence signature "
    "and method\n"
    "  methods             the optimisation methods of the knowledge\n"
    "  explain CANDIDATE_ID\n"
    "                      the retrieval trace for a stored candidate\n"
    "  explain --evidence FILE.json [--knowledge DIR]\n"
    "                      the retrieval trace for evidence in a file\n"
    "  short-term TASK_ID [--base KERNEL_ID]\n"
    "                      a task's repair chains and optimisation "
    "attempts, as\n"
    "                      the Diagnoser and the Planner see them\n"
    "\n"
    "options: --json (one JSON document on stdout), --help.\n"
    "`kclaw memory <command> --help` describes each command.\n";

static const struct cli_memory_help {
	const char *cmd;
	const char *text;
} cli_memory_helps[] = {
    {"import",
        "usage: kclaw memory import [DIR] [--json]\n\n"
        "Validates DIR/policy.json and DIR/methods.json (default: the "
        "shipped\nknowledge, or $KCLAW_KNOWLEDGE) and stores them as a new "
        "knowledge\nversion unless the current version holds the same "
        "content. An invalid\nfile is refused with the file, the place and "
        "the problem.\n"},
    {"export",
        "usage: kclaw memory export DIR [--json]\n\n"
        "Writes the current knowledge version to DIR/policy.json and\n"
        "DIR/methods.json; importing them again gives the same content.\n"},
    {"stats",
        "usage: kclaw memory stats [--signature SIG] [--json]\n\n"
        "Shows the learned statistics: per evidence signature and method, "
        "the\nattempts, the correct ones, the ones at least 3% faster than "
        "their\nbase, the mean gain and the best speedup; then the same over "
        "all\nsignatures.\n"},
    {"methods",
        "usage: kclaw memory methods [--knowledge DIR] [--json]\n\n"
        "Lists the optimisation methods of the stored knowledge (or of "
        "DIR),\nwith what was learned about each.\n"},
    {"explain",
        "usage: kclaw memory explain CANDIDATE_ID [--json]\n"
        "       kclaw memory explain --evidence FILE.json [--knowledge DIR] "
        "[--json]\n\n"
        "Prints the retrieval trace: normalised evidence fields, derived "
        "fields,\npredicates, bottleneck classes, the rules that fired, the "
        "vetoes and\nthe ranking. FILE.json holds {\"metrics\": {...}, "
        "\"runtime\": {...},\n\"features\": {...}} or one object of name: "
        "number. With --knowledge the\nknowledge comes from DIR instead of "
        "the store.\n"},
    {"short-term",
        "usage: kclaw memory short-term TASK_ID [--base KERNEL_ID] "
        "[--bytes N]\n\n"
        "Prints the task's short-term memory as the agents see it: the "
        "repair\nchain (AgentJob.repair_chain) and the optimisation "
        "attempts on the base\nkernel (AgentJob.opt_history; all bases "
        "without --base), each within\nN bytes (default 6000).\n"},
};

/* Options shared by the memory commands. */
typedef struct {
	bool json;
	const char *arg;       /* the positional argument */
	const char *evidence;  /* --evidence FILE */
	const char *knowledge; /* --knowledge DIR */
	const char *signature; /* --signature SIG */
	const char *base;      /* --base KERNEL_ID */
	const char *bytes;     /* --bytes N */
} cli_memory_opts;

static int
cli_memory_parse(int argc, char **argv, cli_memory_opts *o)
{
	memset(o, 0, sizeof(*o));
	for (int i = 1; i < argc; i++) {
		const char **want = NULL;
		if (strcmp(argv[i], "--json") == 0) {
			o->json = true;
			continue;
		}
		if (strcmp(argv[i], "--home") == 0) {
			i++;
			continue;
		}
		if (strcmp(argv[i], "--evidence") == 0)
			want = &o->evidence;
		else if (strcmp(argv[i], "--knowledge") == 0)
			want = &o->knowledge;
		else if (strcmp(argv[i], "--signature") == 0)
			want = &o->signature;
		else if (strcmp(argv[i], "--base") == 0)
			want = &o->base;
		else if (strcmp(argv[i], "--bytes") == 0)
			want = &o->bytes;
		if (want != NULL) {
			if (i + 1 >= argc) {
				fprintf(stderr,
				    "kclaw memory %s: %s needs a value\n",
				    argv[0], argv[i]);
				return CLI_USAGE;
			}
			*want = argv[++i];
			continue;
		}
		if (argv[i][0] == '-' && argv[i][1] != '\0') {
			fprintf(stderr,
			    "kclaw memory %s: unknown option %s (see kclaw "
			    "memory %s --help)\n",
			    argv[0], argv[i], argv[0]);
			return CLI_USAGE;
		}
		if (o->arg != NULL) {
			fprintf(stderr,
			    "kclaw memory %s: unexpected argument '%s'\n",
			    argv[0], argv[i]);
			return CLI_USAGE;
		}
		o->arg = argv[i];
	}
	return CLI_OK;
}

/*
 * Opens the store of the configured home. create: make the home first
 * (import); otherwise a missing store is KC_ENOENT with advice.
 */
static int
cli_memory_open(int argc, char **argv, bool create, store **out)
{
	kc_config cfg;
	struct stat st;
	int rv;

	*out = NULL;
	if ((rv = cli_config(argc, argv, &cfg)) != 0)
		return rv;
	if (!create && stat(cfg.db_dir, &st) != 0)
		return kc_seterr(KC_ENOENT,
		    "no store at %s: nothing imported or learned yet (run "
		    "`kclaw memory import`, or pass --home DIR)",
		    cfg.db_dir);
	if (create && (rv = kc_config_prepare(&cfg)) != 0)
		return rv;
	rv = store_open(out, cfg.db_dir);
	if (rv == KC_EBUSY)
		return kc_seterr(KC_EBUSY,
		    "the store %s is held by the running orchestrator; stop "
		    "the service or use the API (Memory rpc) instead",
		    cfg.db_dir);
	return rv;
}

/* Empty strings of j (recursively) become null: nothing to say. */
static void
memory_json_nulls(cJSON *j)
{
	cJSON *c, *next;

	for (c = j ? j->child : NULL; c != NULL; c = next) {
		next = c->next;
		if (cJSON_IsString(c) && *c->valuestring == '\0' &&
		    c->string != NULL)
			cJSON_ReplaceItemInObjectCaseSensitive(
			    j, c->string, cJSON_CreateNull());
		else if (cJSON_IsString(c) && *c->valuestring == '\0')
			cJSON_ReplaceItemViaPointer(j, c, cJSON_CreateNull());
		else
			memory_json_nulls(c);
	}
}

/* A memory command's JSON document, in --json's convention. */
static int
memory_json_print(const char *text, size_t len)
{
	cJSON *j = cJSON_ParseWithLength(text, len);

	if (j == NULL)
		return kc_seterr(KC_EPROTO,
		    "the memory command's answer is not JSON; report it as a "
		    "bug");
	memory_json_nulls(j);
	return cli_json_print_obj(stdout, j);
}

/*
 * The store is held (by the running orchestrator): asks it over the API.
 * data is the request's data (a signature, a folder, evidence JSON).
 */
static int
cli_memory_via_api(int argc, char **argv, const char *query,
    const cli_memory_opts *o, const char *candidate, const char *task,
    const char *data)
{
	Kclaw__MemoryRequest req = KCLAW__MEMORY_REQUEST__INIT;
	Kclaw__MemoryResponse *resp = NULL;
	char busy[512];
	kc_config cfg;
	orch_client c;
	int rv;

	kc_strlcpy(busy, kc_lasterr(), sizeof(busy));
	if ((rv = cli_config(argc, argv, &cfg)) != 0)
		return rv;
	req.query = (char *)query;
	req.candidate_id = (char *)(candidate ? candidate : "");
	req.task_id = (char *)(task ? task : "");
	if (data != NULL) {
		req.data.data = (uint8_t *)data;
		req.data.len = strlen(data);
	}
	if ((rv = orch_client_open(&c, &cfg)) == 0) {
		rv = orch_client_call(&c, "Memory", &req.base,
		    &kclaw__memory_response__descriptor,
		    (ProtobufCMessage **)&resp);
		orch_client_close(&c);
	}
	if (rv == KC_ECLOSED || rv == KC_ETIMEDOUT) {
		/* kc_seterr writes the buffer kc_lasterr reads: copy first. */
		char why[512];
		kc_strlcpy(why, kc_lasterr(), sizeof(why));
		return kc_seterr(
		    KC_EBUSY, "%s; and the API did not answer: %s", busy, why);
	}
	if (rv != 0)
		return rv;
	if (o->json && resp->data.len > 0)
		rv = memory_json_print(
		    (const char *)resp->data.data, resp->data.len);
	else if (o->json)
		rv = kc_seterr(KC_ENOTSUP,
		    "the orchestrator answered '%s' without JSON (an older "
		    "kclawd?); run it without --json",
		    query);
	else
		fputs(resp->text, stdout);
	kclaw__memory_response__free_unpacked(resp, NULL);
	return rv;
}

/* Whether the running memory command has --json. */
static bool cmd_json;

static int
cli_memory_print(const char *cmd, int rv, char *text)
{
	if (rv != 0) {
		char prefix[64];
		int code;
		free(text);
		snprintf(prefix, sizeof(prefix), "memory %s", cmd);
		code = cli_fail(prefix, rv);
		/* Invalid files are a failure of their content, not of how
		 * the command was called. */
		return rv == KC_EINVAL ? CLI_FAIL : code;
	}
	if (text != NULL && cmd_json)
		rv = memory_json_print(text, strlen(text));
	else if (text != NULL)
		fputs(text, stdout);
	free(text);
	return rv != 0 ? cli_fail("memory", rv) : CLI_OK;
}

static int
cli_memory_explain(int argc, char **argv, const cli_memory_opts *o)
{
	store *s = NULL;
	kb *k = NULL;
	char *text = NULL, *ev = NULL;
	size_t len;
	int rv = 0;

	if ((o->arg == NULL) == (o->evidence == NULL)) {
		fprintf(stderr,
		    "kclaw memory explain: give a CANDIDATE_ID or --evidence "
		    "FILE.json (see --help)\n");
		return CLI_USAGE;
	}
	if (o->evidence != NULL &&
	    (rv = kc_read_file(o->evidence, 1 << 20, &ev, &len)) != 0) {
		kc_seterr(rv, "cannot read evidence file %s: %s", o->evidence,
		    kc_strerror(rv));
		return cli_memory_print("explain", rv, NULL);
	}
	if (o->knowledge != NULL && (rv = kb_load_dir(o->knowledge, &k)) != 0) {
		free(ev);
		return cli_memory_print("explain", rv, NULL);
	}
	rv = cli_memory_open(argc, argv, false, &s);
	if (rv == KC_EBUSY && k == NULL) {
		rv = cli_memory_via_api(
		    argc, argv, "explain", o, o->arg, NULL, ev);
		free(ev);
		return rv == 0 ? CLI_OK : cli_memory_print("explain", rv, NULL);
	}
	if (rv != 0 && k != NULL && o->evidence != NULL) {
		/* Knowledge from files needs no store: explain without the
		 * learned statistics rather than not at all. */
		fprintf(stderr,
		    "kclaw memory explain: learned statistics not shown: "
		    "%s\n",
		    kc_lasterr());
		rv = 0;
	}
	if (rv == 0 && o->evidence != NULL)
		rv = memory_cmd_explain_evidence(s, k, ev, o->json, &text);
	else if (rv == 0)
		rv = memory_cmd_explain_candidate(s, k, o->arg, o->json, &text);
	store_close(s);
	kb_free(k);
	free(ev);
	return cli_memory_print("explain", rv, text);
}

static int
cli_memory_methods(int argc, char **argv, const cli_memory_opts *o)
{
	store *s = NULL;
	kb *k = NULL;
	char *text = NULL;
	int rv;

	if (o->knowledge != NULL && (rv = kb_load_dir(o->knowledge, &k)) != 0)
		return cli_memory_print("methods", rv, NULL);
	rv = cli_memory_open(argc, argv, false, &s);
	if (rv == KC_EBUSY && k == NULL) {
		rv = cli_memory_via_api(
		    argc, argv, "methods", o, NULL, NULL, NULL);
		return rv == 0 ? CLI_OK : cli_memory_print("methods", rv, NULL);
	}
	if (rv != 0 && k != NULL)
		rv = 0; /* files alone are enough for a listing */
	if (rv == 0)
		rv = memory_cmd_methods(s, k, o->json, &text);
	store_close(s);
	kb_free(k);
	return cli_memory_print("methods", rv, text);
}

/* 0 when the running orchestrator knows task id; KC_ENOENT (exit 3)
 * with what to do when it does not. */
static int
memory_task_known(int argc, char **argv, const char *id)
{
	Kclaw__StatusRequest req = KCLAW__STATUS_REQUEST__INIT;
	ProtobufCMessage *resp = NULL;
	kc_config cfg;
	orch_client c;
	int rv;

	if ((rv = cli_config(argc, argv, &cfg)) != 0 ||
	    (rv = orch_client_open(&c, &cfg)) != 0)
		return rv;
	req.task_id = (char *)id;
	rv = orch_client_call(&c, "Status", &req.base,
	    &kclaw__status_response__descriptor, &resp);
	orch_client_close(&c);
	if (resp != NULL)
		protobuf_c_message_free_unpacked(resp, NULL);
	if (rv == KC_ENOENT)
		kc_seterr(KC_ENOENT,
		    "no task %s in this deployment; `kclaw status` lists the "
		    "tasks",
		    id);
	return rv;
}

static int
cli_memory_short_term(int argc, char **argv, const cli_memory_opts *o)
{
	store *s = NULL;
	char *chain = NULL, *hist = NULL, *end = NULL;
	unsigned long bytes = MEMST_DEFAULT_BYTES;
	int rv;

	if (o->arg == NULL) {
		fprintf(stderr,
		    "kclaw memory short-term: give the task id "
		    "(kclaw memory short-term TASK_ID)\n");
		return CLI_USAGE;
	}
	if (o->bytes != NULL) {
		bytes = strtoul(o->bytes, &end, 10);
		if (*o->bytes == '\0' || *end != '\0' || bytes < 64 ||
		    bytes > (1ul << 20)) {
			fprintf(stderr,
			    "kclaw memory short-term: --bytes wants a number "
			    "from 64 to 1048576, not '%s'\n",
			    o->bytes);
			return CLI_USAGE;
		}
	}
	rv = cli_memory_open(argc, argv, false, &s);
	if (rv == KC_EBUSY) {
		/* An unknown task is not an empty memory (exit 3). */
		if ((rv = memory_task_known(argc, argv, o->arg)) != 0)
			return cli_memory_print("short-term", rv, NULL);
		rv = cli_memory_via_api(
		    argc, argv, "short_term", o, o->base, o->arg, NULL);
		return rv == 0 ? CLI_OK
		               : cli_memory_print("short-term", rv, NULL);
	}
	if (rv == 0 &&
	    (rv = memst_repair_chain_text(s, o->arg, bytes, &chain)) == 0)
		rv = memst_opt_history_text(s, o->arg, o->base, bytes, &hist);
	/* Nothing remembered and no such task: an unknown task (exit 3),
	 * not an empty memory. */
	if (rv == 0 && !*chain && !*hist) {
		void *rec = NULL;
		size_t rlen;
		if (store_get(s, STORE_CF_TASKS, o->arg, strlen(o->arg), &rec,
		        &rlen) == KC_ENOENT)
			rv = kc_seterr(KC_ENOENT,
			    "no task %s in this deployment's store; `kclaw "
			    "status` lists the tasks",
			    o->arg);
		free(rec);
	}
	store_close(s);
	if (rv == 0 && o->json) {
		cJSON *doc = cJSON_CreateObject();
		cli_json_str(doc, "task", o->arg);
		cli_json_str(doc, "repair_chain", chain);
		cli_json_str(doc, "opt_history", hist);
		rv = cli_json_print_obj(stdout, doc);
	} else if (rv == 0) {
		printf("== repair chain (Diagnoser) ==\n%s\n== optimisation "
		       "history (Planner) ==\n%s\n",
		    *chain ? chain : "(none)\n", *hist ? hist : "(none)\n");
	}
	free(chain);
	free(hist);
	return rv != 0 ? cli_memory_print("short-term", rv, NULL) : CLI_OK;
}

int
cli_memory(int argc, char **argv)
{
	cli_memory_opts o;
	const char *cmd;
	store *s = NULL;
	char *text = NULL;
	int rv;

	/* kclaw memory [--home DIR] <command> ...: find the command. */
	int c = 1;
	while (c < argc && strcmp(argv[c], "--home") == 0)
		c += 2;
	if (c >= argc || strcmp(argv[c], "--help") == 0 ||
	    strcmp(argv[c], "-h") == 0) {
		fputs(cli_memory_usage, c >= argc ? stderr : stdout);
		return c >= argc ? CLI_USAGE : CLI_OK;
	}
	cmd = argv[c];
	for (size_t i = 0; i < KC_ARRAY_LEN(cli_memory_helps); i++)
		if (strcmp(cli_memory_helps[i].cmd, cmd) == 0 &&
		    cli_wants_help(argc - c, argv + c)) {
			fputs(cli_memory_helps[i].text, stdout);
			return CLI_OK;
		}
	if ((rv = cli_memory_parse(argc - c, argv + c, &o)) != CLI_OK)
		return rv;
	cmd_json = o.json;
	if (strcmp(cmd, "explain") == 0)
		return cli_memory_explain(argc, argv, &o);
	if (strcmp(cmd, "methods") == 0)
		return cli_memory_methods(argc, argv, &o);
	if (strcmp(cmd, "short-term") == 0)
		return cli_memory_short_term(argc, argv, &o);
	if (strcmp(cmd, "export") == 0 && o.arg == NULL) {
		fprintf(stderr,
		    "kclaw memory export: give the folder to write "
		    "to (kclaw memory export DIR)\n");
		return CLI_USAGE;
	}
	if (strcmp(cmd, "import") != 0 && strcmp(cmd, "export") != 0 &&
	    strcmp(cmd, "stats") != 0) {
		fprintf(stderr, "kclaw memory: unknown command '%s'\n\n%s", cmd,
		    cli_memory_usage);
		return CLI_USAGE;
	}
	rv = cli_memory_open(argc, argv, strcmp(cmd, "import") == 0, &s);
	if (rv == KC_EBUSY) {
		/* The orchestrator reads folders relative to its own working
		 * folder: send absolute ones. */
		char abs[PATH_MAX];
		const char *data = o.signature;
		if (strcmp(cmd, "stats") != 0 && o.arg != NULL) {
			if (strcmp(cmd, "export") == 0)
				kc_mkdirs(o.arg, 0755);
			data = realpath(o.arg, abs) ? abs : o.arg;
		}
		rv = cli_memory_via_api(argc, argv, cmd, &o, NULL, NULL, data);
		return rv == 0 ? CLI_OK : cli_memory_print(cmd, rv, NULL);
	}
	if (rv != 0)
		return cli_memory_print(cmd, rv, NULL);
	if (strcmp(cmd, "import") == 0)
		rv = memory_cmd_import(s, o.arg, o.json, &text);
	else if (strcmp(cmd, "export") == 0)
		rv = memory_cmd_export(s, o.arg, o.json, &text);
	else
		rv = memory_cmd_stats(s, o.signature, o.json, &text);
	store_close(s);
	return cli_memory_print(cmd, rv, text);
}
