/*
 * cli_report.c - `kclaw report [TASK_ID ...] [--by level] [--json]`: per
 * task its state, speedup over the reference and over torch.compile where
 * known, rounds, repairs, tokens and cost; over the set (and with --by
 * level, per KernelBench level) the success rate, fast_p for p = 1, 1.5, 2
 * and the mean and geometric-mean speedups (docs/mainjob.md and
 * docs/cli.md define each figure); the LLM usage per role and its cost.
 *
 * Everything comes through the orchestrator's API: List for the finished
 * tasks, Result for each task (its record, spec and history). Prices come
 * from kclaw.json (common/kc_config.h).
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "client.h"
#include "kc_err.h"
#include "kc_util.h"
#include "pbjson.h"
#include "report.h"

/* KernelBench's fast_p: the thresholds reported. */
#define REP_NFAST 3
static const double rep_fast_p[REP_NFAST] = {1, 1.5, 2};
static const char *const rep_fast_key[REP_NFAST] = {
    "fast_1", "fast_1_5", "fast_2"};
static const char *const rep_fast_label[REP_NFAST] = {
    "fast_1", "fast_1.5", "fast_2"};

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
	Kclaw__RoleUsage **usage; /* copies: models malloc'd */
	size_t nusage;
} rep_row;

/* The figures over a set of tasks: all of them, or one level's. */
typedef struct {
	char level[16]; /* "L1", ..., "other"; "" for all */
	size_t tasks, success, fast[REP_NFAST], known_compile, fast1_compile;
	/* over successful tasks; vs compile over those where it is known */
	double mean, geomean, mean_compile, geomean_compile;
} rep_set;

static bool
rep_final(const char *state)
{
	return strcmp(state, "DONE") == 0 || strcmp(state, "FAILED") == 0 ||
	    strcmp(state, "CANCELLED") == 0;
}

static void
rep_usage_free(Kclaw__RoleUsage **u, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (u[i])
			free(u[i]->model);
		free(u[i]);
	}
	free(u);
}

static void
rep_row_free(rep_row *r)
{
	free(r->id);
	free(r->name);
	free(r->state);
	free(r->error);
	rep_usage_free(r->usage, r->nusage);
}

/* A copy of a RoleUsage that outlives its response (model malloc'd). */
static Kclaw__RoleUsage *
rep_usage_dup(const Kclaw__RoleUsage *u)
{
	Kclaw__RoleUsage *c = malloc(sizeof(*c));

	if (c == NULL)
		return NULL;
	*c = *u;
	c->base.unknown_fields = NULL;
	c->base.n_unknown_fields = 0;
	if ((c->model = strdup(u->model ? u->model : "")) == NULL) {
		free(c);
		return NULL;
	}
	return c;
}

/* Adds u into the set's usage: summed per role and model. */
static int
rep_usage_add(Kclaw__RoleUsage ***set, size_t *n, const Kclaw__RoleUsage *u)
{
	Kclaw__RoleUsage *s = NULL, **grown;

	for (size_t i = 0; i < *n && s == NULL; i++)
		if ((*set)[i]->role == u->role &&
		    strcmp((*set)[i]->model, u->model ? u->model : "") == 0)
			s = (*set)[i];
	if (s == NULL) {
		if ((grown = realloc(*set, (*n + 1) * sizeof(**set))) == NULL)
			return KC_ENOMEM;
		*set = grown;
		if ((s = rep_usage_dup(u)) == NULL)
			return KC_ENOMEM;
		(*set)[(*n)++] = s;
		return 0;
	}
	s->prompt_tokens += u->prompt_tokens;
	s->completion_tokens += u->completion_tokens;
	s->reasoning_tokens += u->reasoning_tokens;
	s->cached_tokens += u->cached_tokens;
	s->calls += u->calls;
	s->failed_calls += u->failed_calls;
	return 0;
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
	/* A best kernel exists only for a task that found a correct one.
	 * The record's speedups were measured in the best kernel's own
	 * evaluation; older records have only the times. */
	if (*t->best_id && t->best_ms > 0) {
		r->best_ms = t->best_ms;
		if (t->speedup > 0)
			r->speedup = t->speedup;
		else if (r->ref_ms > 0)
			r->speedup = r->ref_ms / r->best_ms;
		if (t->torch_compile_ms > 0)
			r->compile_ms = t->torch_compile_ms;
		else if (t->spec && t->spec->reference &&
		    t->spec->reference->torch_compile_ms > 0)
			r->compile_ms = t->spec->reference->torch_compile_ms;
		if (t->compile_speedup > 0)
			r->vs_compile = t->compile_speedup;
		else if (r->compile_ms > 0)
			r->vs_compile = r->compile_ms / r->best_ms;
	}
	if (t->n_usage &&
	    (r->usage = calloc(t->n_usage, sizeof(*r->usage))) != NULL)
		for (; r->nusage < t->n_usage; r->nusage++)
			if ((r->usage[r->nusage] =
			            rep_usage_dup(t->usage[r->nusage])) == NULL)
				break;
	for (size_t i = 0; i < resp->n_history; i++) {
		const Kclaw__CandidateRecord *h = resp->history[i];
		if (h->candidate && h->candidate->origin &&
		    strcmp(h->candidate->origin, "repairer") == 0)
			r->repairs++;
	}
	if (!r->id || !r->name || !r->state || !r->error ||
	    r->nusage != t->n_usage)
		rv = KC_ENOMEM;
	kclaw__result_response__free_unpacked(resp, NULL);
	return rv;
}

static int
rep_cmp_created(const void *a, const void *b)
{
	const rep_row *x = a, *y = b;

	if (x->created != y->created)
		return x->created < y->created ? -1 : 1;
	return strcmp(x->id, y->id);
}

/* ---------------------------------------------------------- the figures */

/* The KernelBench level of a task name: "L<n>" for a name that starts
 * L<n>_ (kb2bundle names problems of level<n>/ so), else "other". */
static void
rep_level(const char *name, char *buf, size_t n)
{
	char *end;
	unsigned long v;

	if (name[0] == 'L' && isdigit((unsigned char)name[1])) {
		v = strtoul(name + 1, &end, 10);
		if (*end == '_' && v <= 9999) {
			snprintf(buf, n, "L%lu", v);
			return;
		}
	}
	snprintf(buf, n, "other");
}

static unsigned long
rep_level_order(const char *level)
{
	return strcmp(level, "other") == 0 ? ULONG_MAX
	                                   : strtoul(level + 1, NULL, 10);
}

static int
rep_cmp_level(const void *a, const void *b)
{
	unsigned long x = rep_level_order(((const rep_set *)a)->level);
	unsigned long y = rep_level_order(((const rep_set *)b)->level);

	return x < y ? -1 : x > y;
}

/*
 * The figures over the tasks of level (NULL: all of them). A task succeeds
 * when it is DONE with a correct kernel that has a speedup; fast_p counts
 * those at least p times as fast as the reference, over all tasks
 * (KernelBench's fast_p). Means are over successful tasks; the ones over
 * torch.compile over the successful tasks where its time is known.
 */
static void
rep_summarize(const rep_row *rows, size_t n, const char *level, rep_set *s)
{
	double sum = 0, logs = 0, sum_c = 0, logs_c = 0;
	char lv[16];

	memset(s, 0, sizeof(*s));
	if (level)
		kc_strlcpy(s->level, level, sizeof(s->level));
	for (size_t i = 0; i < n; i++) {
		const rep_row *r = &rows[i];
		if (level) {
			rep_level(r->name, lv, sizeof(lv));
			if (strcmp(lv, level) != 0)
				continue;
		}
		s->tasks++;
		if (strcmp(r->state, "DONE") != 0 || !(r->speedup > 0))
			continue;
		s->success++;
		sum += r->speedup;
		logs += log(r->speedup);
		for (size_t k = 0; k < REP_NFAST; k++)
			if (r->speedup >= rep_fast_p[k])
				s->fast[k]++;
		if (r->vs_compile > 0) {
			s->known_compile++;
			sum_c += r->vs_compile;
			logs_c += log(r->vs_compile);
			if (r->vs_compile >= 1)
				s->fast1_compile++;
		}
	}
	if (s->success) {
		s->mean = sum / (double)s->success;
		s->geomean = exp(logs / (double)s->success);
	}
	if (s->known_compile) {
		s->mean_compile = sum_c / (double)s->known_compile;
		s->geomean_compile = exp(logs_c / (double)s->known_compile);
	}
}

/* The figures per level present in rows, in level order; *out malloc'd. */
static int
rep_levels(const rep_row *rows, size_t n, rep_set **out, size_t *nout)
{
	rep_set *sets;
	char lv[16];
	size_t k = 0;

	if ((sets = calloc(n + 1, sizeof(*sets))) == NULL)
		return KC_ENOMEM;
	for (size_t i = 0; i < n; i++) {
		bool seen = false;
		rep_level(rows[i].name, lv, sizeof(lv));
		for (size_t j = 0; j < k && !seen; j++)
			seen = strcmp(sets[j].level, lv) == 0;
		if (!seen)
			rep_summarize(rows, n, lv, &sets[k++]);
	}
	qsort(sets, k, sizeof(*sets), rep_cmp_level);
	*out = sets;
	*nout = k;
	return 0;
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

/* ------------------------------------------------------- usage and cost */

static const char *
rep_role_name(int role, char *buf, size_t n)
{
	const ProtobufCEnumValue *ev = protobuf_c_enum_descriptor_get_value(
	    &kclaw__role__descriptor, role);

	snprintf(buf, n, "%s", ev ? ev->name : "unknown");
	for (char *p = buf; *p; p++)
		*p = (char)tolower((unsigned char)*p);
	return buf;
}

bool
cli_usage_cost(const kc_config *cfg, const Kclaw__RoleUsage *u, double *usd)
{
	const kc_price *p = kc_config_price(cfg, u->model);

	*usd = 0;
	if (p == NULL)
		return false;
	*usd = kc_price_usd(p, u->prompt_tokens, u->completion_tokens,
	    u->reasoning_tokens, u->cached_tokens, u->cache_write_tokens);
	return true;
}

/* Whether u[i] is the first of u[0..i] without a price for its model. */
static bool
rep_first_unpriced(const kc_config *cfg, Kclaw__RoleUsage *const *u, size_t i)
{
	double usd;

	if (cli_usage_cost(cfg, u[i], &usd))
		return false;
	for (size_t j = 0; j < i; j++)
		if (strcmp(u[j]->model, u[i]->model) == 0)
			return false;
	return true;
}

/* The cost of u[0..n): false when there is none or a model has no price. */
static bool
rep_usage_total(
    const kc_config *cfg, Kclaw__RoleUsage *const *u, size_t n, double *usd)
{
	bool all = n > 0;
	double one;

	*usd = 0;
	for (size_t i = 0; i < n; i++) {
		all &= cli_usage_cost(cfg, u[i], &one);
		*usd += one;
	}
	return all;
}

static void
rep_cost(char *buf, size_t n, double usd, bool known)
{
	if (known)
		snprintf(buf, n, "$%.4f", usd);
	else
		snprintf(buf, n, "-");
}

void
cli_usage_print(FILE *out, const kc_config *cfg, Kclaw__RoleUsage *const *u,
    size_t n, const char *indent)
{
	Kclaw__RoleUsage t = KCLAW__ROLE_USAGE__INIT;
	char role[32], cost[32];
	double usd;
	bool priced;

	if (n == 0)
		return;
	fprintf(out, "%s%-10s %-20s %10s %10s %10s %10s %6s %6s %10s\n", indent,
	    "role", "model", "prompt", "completion", "reasoning", "cached",
	    "calls", "failed", "cost");
	for (size_t i = 0; i < n; i++) {
		const Kclaw__RoleUsage *r = u[i];
		priced = cli_usage_cost(cfg, r, &usd);
		rep_cost(cost, sizeof(cost), usd, priced);
		fprintf(out,
		    "%s%-10s %-20.20s %10llu %10llu %10llu %10llu %6u %6u "
		    "%10s\n",
		    indent, rep_role_name(r->role, role, sizeof(role)),
		    *r->model ? r->model : "-",
		    (unsigned long long)r->prompt_tokens,
		    (unsigned long long)r->completion_tokens,
		    (unsigned long long)r->reasoning_tokens,
		    (unsigned long long)r->cached_tokens, r->calls,
		    r->failed_calls, cost);
		t.prompt_tokens += r->prompt_tokens;
		t.completion_tokens += r->completion_tokens;
		t.reasoning_tokens += r->reasoning_tokens;
		t.cached_tokens += r->cached_tokens;
		t.calls += r->calls;
		t.failed_calls += r->failed_calls;
	}
	if (n > 1) {
		priced = rep_usage_total(cfg, u, n, &usd);
		rep_cost(cost, sizeof(cost), usd, priced);
		fprintf(out,
		    "%s%-10s %-20s %10llu %10llu %10llu %10llu %6u %6u "
		    "%10s\n",
		    indent, "total", "", (unsigned long long)t.prompt_tokens,
		    (unsigned long long)t.completion_tokens,
		    (unsigned long long)t.reasoning_tokens,
		    (unsigned long long)t.cached_tokens, t.calls,
		    t.failed_calls, cost);
	}
	for (size_t i = 0; i < n; i++)
		if (rep_first_unpriced(cfg, u, i))
			fprintf(out,
			    "%sno price for model %s; add it to \"prices\" in "
			    "%s\n",
			    indent, *u[i]->model ? u[i]->model : "(unnamed)",
			    cfg->config_path);
}

int
cli_usage_json(
    cJSON *o, const kc_config *cfg, Kclaw__RoleUsage *const *u, size_t n)
{
	cJSON *arr = cJSON_AddArrayToObject(o, "usage"), *unpriced, *e;
	double usd;
	bool priced;

	unpriced = cJSON_AddArrayToObject(o, "unpriced");
	if (arr == NULL || unpriced == NULL)
		return KC_ENOMEM;
	for (size_t i = 0; i < n; i++) {
		if ((e = kc_pb_to_json_public(&u[i]->base)) == NULL ||
		    !cJSON_AddItemToArray(arr, e)) {
			cJSON_Delete(e);
			return KC_ENOMEM;
		}
		priced = cli_usage_cost(cfg, u[i], &usd);
		rep_json_num(e, "cost_usd", usd, priced);
		if (rep_first_unpriced(cfg, u, i) &&
		    !cJSON_AddItemToArray(unpriced,
		        u[i]->model && *u[i]->model
		            ? cJSON_CreateString(u[i]->model)
		            : cJSON_CreateNull()))
			return KC_ENOMEM;
	}
	priced = rep_usage_total(cfg, u, n, &usd);
	rep_json_num(o, "cost_usd", usd, priced);
	return 0;
}

/* ------------------------------------------------------------- output */

/* What the printers share: the rows, the set's figures and usage. */
typedef struct {
	const rep_row *rows;
	size_t n;
	rep_set set;
	rep_set *levels; /* NULL without --by level */
	size_t nlevels;
	Kclaw__RoleUsage **usage; /* the set's, per role and model */
	size_t nusage;
	const kc_config *cfg;
} rep_report;

static void
rep_set_json(cJSON *o, const rep_set *s)
{
	if (*s->level)
		cJSON_AddStringToObject(o, "level", s->level);
	cJSON_AddNumberToObject(o, "tasks", (double)s->tasks);
	cJSON_AddNumberToObject(o, "success", (double)s->success);
	cJSON_AddNumberToObject(
	    o, "success_rate", rep_share(s->success, s->tasks));
	for (size_t k = 0; k < REP_NFAST; k++)
		cJSON_AddNumberToObject(
		    o, rep_fast_key[k], rep_share(s->fast[k], s->tasks));
	rep_json_num(o, "mean_speedup", s->mean, s->success > 0);
	rep_json_num(o, "geomean_speedup", s->geomean, s->success > 0);
	cJSON_AddNumberToObject(
	    o, "torch_compile_known", (double)s->known_compile);
	rep_json_num(o, "fast_1_vs_torch_compile",
	    rep_share(s->fast1_compile, s->known_compile),
	    s->known_compile > 0);
	rep_json_num(o, "mean_speedup_vs_torch_compile", s->mean_compile,
	    s->known_compile > 0);
	rep_json_num(o, "geomean_speedup_vs_torch_compile", s->geomean_compile,
	    s->known_compile > 0);
}

static int
rep_print_json(const rep_report *rp, FILE *out)
{
	cJSON *root = cJSON_CreateObject(), *tasks, *set, *levels = NULL;
	char *text, level[16];
	int rv = 0;

	if (root == NULL)
		return KC_ENOMEM;
	tasks = cJSON_AddArrayToObject(root, "tasks");
	for (size_t i = 0; i < rp->n && tasks && rv == 0; i++) {
		const rep_row *r = &rp->rows[i];
		cJSON *o = cJSON_CreateObject();
		if (o == NULL || !cJSON_AddItemToArray(tasks, o)) {
			cJSON_Delete(o);
			rv = KC_ENOMEM;
			break;
		}
		cJSON_AddStringToObject(o, "id", r->id);
		cli_json_str(o, "name", r->name);
		rep_level(r->name, level, sizeof(level));
		cJSON_AddStringToObject(o, "level", level);
		cli_json_enum(o, "state", r->state);
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
		rv = cli_usage_json(o, rp->cfg, r->usage, r->nusage);
		cli_json_str(o, "error", r->error);
	}
	set = cJSON_AddObjectToObject(root, "set");
	if (set && rv == 0) {
		rep_set_json(set, &rp->set);
		rv = cli_usage_json(set, rp->cfg, rp->usage, rp->nusage);
	}
	if (rp->levels && rv == 0 &&
	    (levels = cJSON_AddArrayToObject(root, "levels")) != NULL)
		for (size_t i = 0; i < rp->nlevels; i++) {
			cJSON *o = cJSON_CreateObject();
			if (o == NULL || !cJSON_AddItemToArray(levels, o)) {
				cJSON_Delete(o);
				rv = KC_ENOMEM;
				break;
			}
			rep_set_json(o, &rp->levels[i]);
		}
	text = rv == 0 ? cJSON_PrintUnformatted(root) : NULL;
	cJSON_Delete(root);
	if (text == NULL || tasks == NULL || set == NULL ||
	    (rp->levels && levels == NULL)) {
		free(text);
		return KC_ENOMEM;
	}
	cli_json_print(out, text);
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
rep_print_tasks(const rep_report *rp, FILE *out)
{
	char sp[32], vc[32], ref[32], best[32], usd_s[32], cost[40];
	/* Costs need a price table: without one, no column of dashes. */
	bool costs = rp->cfg->nprices > 0, priced;
	double usd;

	fprintf(out, "%-18s %-16s %-9s %8s %10s %9s %9s %6s %7s %8s%s\n",
	    "task", "id", "state", "speedup", "vs compile", "ref ms", "best ms",
	    "rounds", "repairs", "tokens", costs ? "      cost" : "");
	for (size_t i = 0; i < rp->n; i++) {
		const rep_row *r = &rp->rows[i];
		rep_ratio(sp, sizeof(sp), r->speedup);
		rep_ratio(vc, sizeof(vc), r->vs_compile);
		rep_ms(ref, sizeof(ref), r->ref_ms);
		rep_ms(best, sizeof(best), r->best_ms);
		priced = rep_usage_total(rp->cfg, r->usage, r->nusage, &usd);
		rep_cost(usd_s, sizeof(usd_s), usd, priced);
		cost[0] = '\0';
		if (costs)
			snprintf(cost, sizeof(cost), " %9s", usd_s);
		fprintf(out,
		    "%-18.18s %-16.16s %-9s %8s %10s %9s %9s %6u %7u %8llu%s\n",
		    r->name, r->id, r->state, sp, vc, ref, best, r->rounds,
		    r->repairs, (unsigned long long)r->tokens, cost);
	}
	for (size_t i = 0; i < rp->n; i++)
		if (strcmp(rp->rows[i].state, "DONE") != 0 &&
		    *rp->rows[i].error)
			fprintf(out, "  %s: %s\n", rp->rows[i].name,
			    rp->rows[i].error);
}

/* A share as "k/n (x%)"; one decimal, the precision papers report. */
static void
rep_pct(char *buf, size_t n, size_t k, size_t of)
{
	snprintf(buf, n, "%zu/%zu %.1f%%", k, of, 100 * rep_share(k, of));
}

static void
rep_print_levels(const rep_report *rp, FILE *out)
{
	char c[6][32], sp[2][32], vc[3][32];

	fprintf(out, "%-6s %5s %15s %15s %15s %15s %8s %8s %9s %9s %9s\n",
	    "level", "tasks", "success", rep_fast_label[0], rep_fast_label[1],
	    rep_fast_label[2], "mean", "geomean", "compile", "c.mean",
	    "c.geomean");
	for (size_t i = 0; i <= rp->nlevels; i++) {
		const rep_set *s = i < rp->nlevels ? &rp->levels[i] : &rp->set;
		rep_pct(c[0], sizeof(c[0]), s->success, s->tasks);
		for (size_t k = 0; k < REP_NFAST; k++)
			rep_pct(c[k + 1], sizeof(c[0]), s->fast[k], s->tasks);
		rep_ratio(sp[0], sizeof(sp[0]), s->mean);
		rep_ratio(sp[1], sizeof(sp[1]), s->geomean);
		snprintf(vc[0], sizeof(vc[0]), "%zu/%zu", s->known_compile,
		    s->success);
		rep_ratio(vc[1], sizeof(vc[1]), s->mean_compile);
		rep_ratio(vc[2], sizeof(vc[2]), s->geomean_compile);
		fprintf(out,
		    "%-6s %5zu %15s %15s %15s %15s %8s %8s %9s %9s %9s\n",
		    i < rp->nlevels ? s->level : "all", s->tasks, c[0], c[1],
		    c[2], c[3], sp[0], sp[1], vc[0], vc[1], vc[2]);
	}
	fprintf(out,
	    "(fast_p: share of the tasks whose correct kernel is at least p "
	    "times as fast as\nPyTorch eager; means over the successful "
	    "tasks; compile: tasks whose torch.compile\nspeedup is known, of "
	    "the successful ones)\n");
}

static void
rep_print_table(const rep_report *rp, FILE *out)
{
	const rep_set *s = &rp->set;

	if (rp->levels)
		rep_print_levels(rp, out);
	else
		rep_print_tasks(rp, out);
	fprintf(out,
	    "\n%zu task(s): success %zu/%zu (%.0f%%), fast_1 %zu/%zu "
	    "(%.0f%%)",
	    s->tasks, s->success, s->tasks,
	    100 * rep_share(s->success, s->tasks), s->fast[0], s->tasks,
	    100 * rep_share(s->fast[0], s->tasks));
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
	fprintf(out, "fast_1.5 %zu/%zu (%.0f%%), fast_2 %zu/%zu (%.0f%%)\n",
	    s->fast[1], s->tasks, 100 * rep_share(s->fast[1], s->tasks),
	    s->fast[2], s->tasks, 100 * rep_share(s->fast[2], s->tasks));
	if (rp->nusage) {
		fprintf(out, "\nLLM usage over the set:\n");
		cli_usage_print(out, rp->cfg, rp->usage, rp->nusage, "  ");
	}
}

int
cli_report_print_by(orch_client *c, char *const *ids, size_t n, bool json,
    bool by_level, FILE *out)
{
	char **listed = NULL;
	rep_row *rows = NULL;
	size_t nrows = 0;
	rep_report rp;
	int rv = 0;

	memset(&rp, 0, sizeof(rp));
	rp.cfg = &c->cfg;
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
	rp.rows = rows;
	rp.n = nrows;
	rep_summarize(rows, nrows, NULL, &rp.set);
	if (by_level &&
	    (rv = rep_levels(rows, nrows, &rp.levels, &rp.nlevels)) != 0)
		goto out;
	for (size_t i = 0; i < nrows; i++)
		for (size_t j = 0; j < rows[i].nusage; j++)
			if ((rv = rep_usage_add(
			         &rp.usage, &rp.nusage, rows[i].usage[j])) != 0)
				goto out;
	if (json)
		rv = rep_print_json(&rp, out);
	else
		rep_print_table(&rp, out);
	fflush(out);
out:
	for (size_t i = 0; i < nrows; i++)
		rep_row_free(&rows[i]);
	free(rows);
	free(rp.levels);
	rep_usage_free(rp.usage, rp.nusage);
	for (size_t i = 0; listed && listed[i]; i++)
		free(listed[i]);
	free(listed);
	return rv;
}

int
cli_report_print(
    orch_client *c, char *const *ids, size_t n, bool json, FILE *out)
{
	return cli_report_print_by(c, ids, n, json, false, out);
}

static void
report_usage(FILE *f)
{
	fprintf(f,
	    "usage: kclaw report [TASK_ID ...] [--by level] [--json] "
	    "[--home DIR]\n\n"
	    "Reports over finished tasks (all of them, or the ones named): "
	    "per task its\nstate, speedup over the reference and over "
	    "torch.compile where known, rounds,\nrepairs, LLM tokens and "
	    "their cost (kclaw.json's \"prices\"); over the set the\nsuccess "
	    "rate (DONE with a correct kernel), fast_p for p = 1, 1.5, 2 "
	    "(share of\nall tasks whose kernel is at least p times as fast "
	    "as the reference), the\nmean and geometric-mean speedup of the "
	    "successful tasks, over the reference\nand over torch.compile, "
	    "and the tokens per role with their cost.\n"
	    "--by level gives these figures per KernelBench level (the task "
	    "name's L<n>_\nprefix, as kb2bundle names level<n>/ problems; "
	    "\"other\" for the rest) in\nplace of the task table.\n"
	    "--json prints one JSON document {\"tasks\": [...], \"set\": "
	    "{...}}, with\n\"levels\": [...] under --by level.\n");
}

int
cli_report(int argc, char **argv)
{
	char **ids;
	size_t n = 0;
	bool json = false, by_level = false;
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
		} else if (strcmp(argv[i], "--by") == 0 && i + 1 < argc &&
		    strcmp(argv[i + 1], "level") == 0) {
			by_level = true;
			i++;
		} else if (strcmp(argv[i], "--home") == 0 && i + 1 < argc) {
			i++;
		} else if (argv[i][0] != '-') {
			ids[n++] = argv[i];
		} else {
			fprintf(stderr,
			    "kclaw report: unknown argument '%s'%s\n\n",
			    argv[i],
			    strcmp(argv[i], "--by") == 0
			        ? " (--by takes 'level')"
			        : "");
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
	if ((rv = cli_report_print_by(&c, ids, n, json, by_level, stdout)) != 0)
		code = cli_fail("report", rv);
	orch_client_close(&c);
	free(ids);
	return code;
}
