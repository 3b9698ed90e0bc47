/*
 * cli_report.c - `kclaw report [TASK_ID ...] [--json]`: per task its
 * state, speedup over the reference and over torch.compile where known,
 * rounds, repairs and tokens; over the set the success rate, fast_1 and the
 * mean and geometric-mean speedups (docs/mainjob.md defines each figure).
 *
 * Everything comes through the orchestrator's API: List for the finished
 * tasks, Result for each task (its record, spec and history).
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "client.h"
#include "kc_err.h"
#include "report.h"

typedef struct {
	char *id;
	char *name;
	char *state;
	char *error;
	double ref_ms, best_ms, compile_ms;
	double speedup, vs_compile; /* 0: unknown */
	uint32_t rounds;
	uint32_t repairs;
	uint64_t tokens;
	uint64_t created;
} rep_row;

typedef struct {
	size_t tasks, success, fast1, known_compile, fast1_compile;
	double mean, geomean, geomean_compile; /* over successful tasks */
} rep_set;

static bool
rep_final(const char *state)
{
	return strcmp(state, "DONE") == 0 || strcmp(state, "FAILED") == 0 ||
	    strcmp(state, "CANCELLED") == 0;
}

static void
rep_row_free(rep_row *r)
{
	free(r->id);
	free(r->name);
	free(r->state);
	free(r->error);
}

static char *
rep_dup(const char *s)
{
	return strdup(s ? s : "");
}

/* The finished tasks' ids, oldest first (List answers newest first). */
static int
rep_list(orch_client *c, char ***ids, size_t *n)
{
	Kclaw__ListRequest req = KCLAW__LIST_REQUEST__INIT;
	Kclaw__ListResponse *resp;
	int rv;

	*ids = NULL;
	*n = 0;
	if ((rv = orch_client_call(c, "List", &req.base,
	         &kclaw__list_response__descriptor,
	         (ProtobufCMessage **)&resp)) != 0)
		return rv;
	if ((*ids = calloc(resp->n_tasks + 1, sizeof(**ids))) == NULL) {
		kclaw__list_response__free_unpacked(resp, NULL);
		return KC_ENOMEM;
	}
	for (size_t i = resp->n_tasks; i-- > 0;) {
		const Kclaw__TaskRecord *t = resp->tasks[i];
		if (!rep_final(t->state))
			continue;
		if (((*ids)[*n] = strdup(t->id)) == NULL) {
			rv = KC_ENOMEM;
			break;
		}
		(*n)++;
	}
	kclaw__list_response__free_unpacked(resp, NULL);
	return rv;
}

static int
rep_fetch(orch_client *c, const char *id, rep_row *r)
{
	Kclaw__ResultRequest req = KCLAW__RESULT_REQUEST__INIT;
	Kclaw__ResultResponse *resp;
	const Kclaw__TaskRecord *t;
	int rv;

	memset(r, 0, sizeof(*r));
	req.task_id = (char *)id;
	if ((rv = orch_client_call(c, "Result", &req.base,
	         &kclaw__result_response__descriptor,
	         (ProtobufCMessage **)&resp)) != 0) {
		if (rv == KC_ENOENT)
			kc_seterr(KC_ENOENT,
			    "no task '%s'; `kclaw status` lists the tasks", id);
		return rv;
	}
	t = resp->task;
	r->id = rep_dup(t->id);
	r->name = rep_dup(t->spec ? t->spec->name : "");
	r->state = rep_dup(t->state);
	r->error = rep_dup(t->error);
	r->ref_ms = t->reference_ms;
	r->rounds = t->round;
	r->tokens = t->tokens;
	r->created = t->created_unix_ms;
	/* A best kernel exists only for a task that found a correct one. */
	if (*t->best_id && t->best_ms > 0) {
		r->best_ms = t->best_ms;
		if (r->ref_ms > 0)
			r->speedup = r->ref_ms / r->best_ms;
		if (t->spec && t->spec->reference &&
		    t->spec->reference->torch_compile_ms > 0) {
			r->compile_ms = t->spec->reference->torch_compile_ms;
			r->vs_compile = r->compile_ms / r->best_ms;
		}
	}
	for (size_t i = 0; i < resp->n_history; i++) {
		const Kclaw__CandidateRecord *h = resp->history[i];
		if (h->candidate && h->candidate->origin &&
		    strcmp(h->candidate->origin, "repairer") == 0)
			r->repairs++;
	}
	kclaw__result_response__free_unpacked(resp, NULL);
	if (!r->id || !r->name || !r->state || !r->error)
		return KC_ENOMEM;
	return 0;
}

static int
rep_cmp_created(const void *a, const void *b)
{
	const rep_row *x = a, *y = b;

	if (x->created != y->created)
		return x->created < y->created ? -1 : 1;
	return strcmp(x->id, y->id);
}

/*
 * A task succeeds when it is DONE with a correct kernel that has a speedup;
 * fast_1 counts those at least as fast as the reference, over all tasks
 * (KernelBench's fast_p with p = 1). Means are over successful tasks.
 */
static void
rep_summarize(const rep_row *rows, size_t n, rep_set *s)
{
	double sum = 0, logs = 0, logs_c = 0;

	memset(s, 0, sizeof(*s));
	s->tasks = n;
	for (size_t i = 0; i < n; i++) {
		const rep_row *r = &rows[i];
		if (strcmp(r->state, "DONE") != 0 || !(r->speedup > 0))
			continue;
		s->success++;
		sum += r->speedup;
		logs += log(r->speedup);
		if (r->speedup >= 1)
			s->fast1++;
		if (r->vs_compile > 0) {
			s->known_compile++;
			logs_c += log(r->vs_compile);
			if (r->vs_compile >= 1)
				s->fast1_compile++;
		}
	}
	if (s->success) {
		s->mean = sum / (double)s->success;
		s->geomean = exp(logs / (double)s->success);
	}
	if (s->known_compile)
		s->geomean_compile = exp(logs_c / (double)s->known_compile);
}

static void
rep_json_num(cJSON *o, const char *k, double v, bool known)
{
	if (known)
		cJSON_AddNumberToObject(o, k, v);
	else
		cJSON_AddNullToObject(o, k);
}

static double
rep_share(size_t k, size_t n)
{
	return n ? (double)k / (double)n : 0;
}

static int
rep_print_json(const rep_row *rows, size_t n, const rep_set *s, FILE *out)
{
	cJSON *root = cJSON_CreateObject(), *tasks, *set;
	char *text;

	if (root == NULL)
		return KC_ENOMEM;
	tasks = cJSON_AddArrayToObject(root, "tasks");
	for (size_t i = 0; i < n && tasks; i++) {
		const rep_row *r = &rows[i];
		cJSON *o = cJSON_CreateObject();
		if (o == NULL || !cJSON_AddItemToArray(tasks, o))
			break;
		cJSON_AddStringToObject(o, "id", r->id);
		cJSON_AddStringToObject(o, "name", r->name);
		cJSON_AddStringToObject(o, "state", r->state);
		rep_json_num(o, "reference_ms", r->ref_ms, r->ref_ms > 0);
		rep_json_num(o, "best_ms", r->best_ms, r->best_ms > 0);
		rep_json_num(o, "speedup", r->speedup, r->speedup > 0);
		rep_json_num(
		    o, "torch_compile_ms", r->compile_ms, r->compile_ms > 0);
		rep_json_num(o, "speedup_vs_torch_compile", r->vs_compile,
		    r->vs_compile > 0);
		cJSON_AddNumberToObject(o, "rounds", r->rounds);
		cJSON_AddNumberToObject(o, "repairs", r->repairs);
		cJSON_AddNumberToObject(o, "tokens", (double)r->tokens);
		cJSON_AddStringToObject(o, "error", r->error);
	}
	set = cJSON_AddObjectToObject(root, "set");
	if (set) {
		cJSON_AddNumberToObject(set, "tasks", (double)s->tasks);
		cJSON_AddNumberToObject(set, "success", (double)s->success);
		cJSON_AddNumberToObject(
		    set, "success_rate", rep_share(s->success, s->tasks));
		cJSON_AddNumberToObject(
		    set, "fast_1", rep_share(s->fast1, s->tasks));
		rep_json_num(set, "mean_speedup", s->mean, s->success > 0);
		rep_json_num(
		    set, "geomean_speedup", s->geomean, s->success > 0);
		cJSON_AddNumberToObject(
		    set, "torch_compile_known", (double)s->known_compile);
		rep_json_num(set, "fast_1_vs_torch_compile",
		    rep_share(s->fast1_compile, s->known_compile),
		    s->known_compile > 0);
		rep_json_num(set, "geomean_speedup_vs_torch_compile",
		    s->geomean_compile, s->known_compile > 0);
	}
	text = cJSON_PrintUnformatted(root);
	cJSON_Delete(root);
	if (text == NULL || tasks == NULL || set == NULL) {
		free(text);
		return KC_ENOMEM;
	}
	fprintf(out, "%s\n", text);
	free(text);
	return 0;
}

static void
rep_ratio(char *buf, size_t n, double v)
{
	if (v > 0)
		snprintf(buf, n, "%.2fx", v);
	else
		snprintf(buf, n, "-");
}

static void
rep_ms(char *buf, size_t n, double v)
{
	if (v > 0)
		snprintf(buf, n, "%.4f", v);
	else
		snprintf(buf, n, "-");
}

static void
rep_print_table(const rep_row *rows, size_t n, const rep_set *s, FILE *out)
{
	char sp[32], vc[32], ref[32], best[32];

	fprintf(out, "%-18s %-16s %-9s %8s %10s %9s %9s %6s %7s %8s\n", "task",
	    "id", "state", "speedup", "vs compile", "ref ms", "best ms",
	    "rounds", "repairs", "tokens");
	for (size_t i = 0; i < n; i++) {
		const rep_row *r = &rows[i];
		rep_ratio(sp, sizeof(sp), r->speedup);
		rep_ratio(vc, sizeof(vc), r->vs_compile);
		rep_ms(ref, sizeof(ref), r->ref_ms);
		rep_ms(best, sizeof(best), r->best_ms);
		fprintf(out,
		    "%-18.18s %-16.16s %-9s %8s %10s %9s %9s %6u %7u %8llu\n",
		    r->name, r->id, r->state, sp, vc, ref, best, r->rounds,
		    r->repairs, (unsigned long long)r->tokens);
	}
	for (size_t i = 0; i < n; i++)
		if (strcmp(rows[i].state, "DONE") != 0 && *rows[i].error)
			fprintf(out, "  %s: %s\n", rows[i].name, rows[i].error);
	fprintf(out,
	    "\n%zu task(s): success %zu/%zu (%.0f%%), fast_1 %zu/%zu "
	    "(%.0f%%)",
	    s->tasks, s->success, s->tasks,
	    100 * rep_share(s->success, s->tasks), s->fast1, s->tasks,
	    100 * rep_share(s->fast1, s->tasks));
	if (s->success)
		fprintf(out, ", speedup mean %.2fx, geomean %.2fx", s->mean,
		    s->geomean);
	if (s->known_compile)
		fprintf(out,
		    "; over torch.compile (%zu known): fast_1 %zu/%zu, "
		    "geomean %.2fx",
		    s->known_compile, s->fast1_compile, s->known_compile,
		    s->geomean_compile);
	fprintf(out, "\n");
}

int
cli_report_print(
    orch_client *c, char *const *ids, size_t n, bool json, FILE *out)
{
	char **listed = NULL;
	rep_row *rows = NULL;
	size_t nrows = 0;
	rep_set set;
	int rv = 0;

	if (n == 0) {
		if ((rv = rep_list(c, &listed, &n)) != 0)
			goto out;
		ids = listed;
	}
	if ((rows = calloc(n + 1, sizeof(*rows))) == NULL) {
		rv = KC_ENOMEM;
		goto out;
	}
	for (; nrows < n; nrows++)
		if ((rv = rep_fetch(c, ids[nrows], &rows[nrows])) != 0) {
			rep_row_free(&rows[nrows]);
			goto out;
		}
	qsort(rows, nrows, sizeof(*rows), rep_cmp_created);
	rep_summarize(rows, nrows, &set);
	if (json)
		rv = rep_print_json(rows, nrows, &set, out);
	else
		rep_print_table(rows, nrows, &set, out);
	fflush(out);
out:
	for (size_t i = 0; i < nrows; i++)
		rep_row_free(&rows[i]);
	free(rows);
	for (size_t i = 0; listed && listed[i]; i++)
		free(listed[i]);
	free(listed);
	return rv;
}

static void
report_usage(FILE *f)
{
	fprintf(f,
	    "usage: kclaw report [TASK_ID ...] [--json] [--home DIR]\n\n"
	    "Reports over finished tasks (all of them, or the ones named): "
	    "per task its\nstate, speedup over the reference and over "
	    "torch.compile where the bundle\nrecorded it, rounds, repairs and "
	    "LLM tokens; over the set the success rate\n(DONE with a correct "
	    "kernel), fast_1 (share of all tasks at least as fast\nas the "
	    "reference) and the mean and geometric-mean speedup of the "
	    "successful\ntasks. --json prints one JSON document "
	    "{\"tasks\": [...], \"set\": {...}}.\n");
}

int
cli_report(int argc, char **argv)
{
	char **ids;
	size_t n = 0;
	bool json = false;
	kc_config cfg;
	orch_client c;
	int rv, code = CLI_OK;

	if ((ids = calloc((size_t)argc + 1, sizeof(*ids))) == NULL)
		return cli_fail("report", KC_ENOMEM);
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--help") == 0 ||
		    strcmp(argv[i], "-h") == 0) {
			report_usage(stdout);
			free(ids);
			return CLI_OK;
		} else if (strcmp(argv[i], "--json") == 0) {
			json = true;
		} else if (strcmp(argv[i], "--home") == 0 && i + 1 < argc) {
			i++;
		} else if (argv[i][0] != '-') {
			ids[n++] = argv[i];
		} else {
			fprintf(stderr,
			    "kclaw report: unknown argument '%s'\n\n", argv[i]);
			report_usage(stderr);
			free(ids);
			return CLI_USAGE;
		}
	}
	if ((rv = cli_config(argc, argv, &cfg)) != 0 ||
	    (rv = orch_client_open(&c, &cfg)) != 0) {
		free(ids);
		return cli_fail("report", rv);
	}
	if ((rv = cli_report_print(&c, ids, n, json, stdout)) != 0)
		code = cli_fail("report", rv);
	orch_client_close(&c);
	free(ids);
	return code;
}
