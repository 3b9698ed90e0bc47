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
	char *degenerate; /* "degenerate problem: ..." or NULL */
	char *precision;  /* the spec's policy ("" = warn) */
	double ref_ms, best_ms, compile_ms;
	double speedup, vs_compile; /* 0: unknown */
	/* The best kernel's speedup over eager at its own (lower) precision,
	 * EvalResult.speedup_matched_precision; 0: not measured. */
	double matched;
	double atol, rtol, max_rel_norm; /* the spec's tolerance; -1: none */
	uint32_t rounds;
	uint32_t repairs;
	uint64_t tokens;
	uint64_t created, finished;
	Kclaw__RoleUsage **usage; /* copies: models malloc'd */
	size_t nusage;
} rep_row;

/* The figures over a set of tasks: all of them, or one level's. Degenerate
 * problems are left out of every figure but their count. */
typedef struct {
	char level[16]; /* "L1", ..., "other"; "" for all */
	size_t tasks, success, fast[REP_NFAST], known_compile, fast1_compile;
	/* over successful tasks; vs compile over those where it is known */
	double mean, geomean, mean_compile, geomean_compile;
	/* fast_p over torch.compile, over all tasks (KernelBench's form) */
	size_t fast_compile[REP_NFAST];
	/* geometric means over every task, a failure counted as 1.0x; over
	 * torch.compile every task but the correct ones without its time */
	double geomean_all, geomean_compile_all;
	size_t degenerate, matched;
	uint64_t tokens;
	double cost_usd, wall_s, task_wall_s;
	bool priced;
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
	free(r->degenerate);
	free(r->precision);
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

/* "degenerate problem: out varies 3e-09 between input sets, the tolerance
 * admits 0.01: a constant could pass" from the task's reference check. */
static int
rep_degenerate_reason(const Kclaw__ReferenceCheck *rc, char **out)
{
	kc_str s = {0};

	kc_str_append(&s, "degenerate problem: ");
	for (size_t i = 0; i < rc->n_degenerate; i++) {
		const Kclaw__DegenerateOutput *d = rc->degenerate[i];
		if (d->variation_unknown)
			kc_str_printf(&s,
			    "%s%s varies less than the tolerance "
			    "admits (%.3g)",
			    i ? "; " : "", d->name, d->admits);
		else
			kc_str_printf(&s,
			    "%s%s varies %.3g between input sets, the "
			    "tolerance admits %.3g",
			    i ? "; " : "", d->name, d->variation, d->admits);
	}
	kc_str_append(&s, ": a constant could pass");
	if ((*out = kc_str_take(&s)) == NULL)
		return KC_ENOMEM;
	return 0;
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
	r->finished = t->finished_unix_ms;
	r->precision = rep_dup(t->spec ? t->spec->precision : "");
	r->atol = r->rtol = r->max_rel_norm = -1;
	if (t->spec && t->spec->tolerance) {
		r->atol = t->spec->tolerance->atol;
		r->rtol = t->spec->tolerance->rtol;
		r->max_rel_norm = t->spec->tolerance->max_rel_norm;
	}
	if (t->reference_check && t->reference_check->n_degenerate > 0 &&
	    (rv = rep_degenerate_reason(t->reference_check, &r->degenerate)) !=
	        0) {
		kclaw__result_response__free_unpacked(resp, NULL);
		return rv;
	}
	if (*t->best_id && resp->best && resp->best->eval &&
	    resp->best->eval->speedup_matched_precision > 0)
		r->matched = resp->best->eval->speedup_matched_precision;
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
	if (!r->id || !r->name || !r->state || !r->error || !r->precision ||
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

static bool rep_usage_total(
    const kc_config *cfg, Kclaw__RoleUsage *const *u, size_t n, double *usd);

/* The speedup over eager a report counts: at matched precision where the
 * sandbox measured it (a kernel in lower precision than its task's), else
 * against the task's own precision. */
static double
rep_eager(const rep_row *r)
{
	return r->matched > 0 ? r->matched : r->speedup;
}

static bool
rep_correct(const rep_row *r)
{
	return strcmp(r->state, "DONE") == 0 && r->speedup > 0;
}

/*
 * The figures over the tasks of level (NULL: all of them), degenerate
 * problems counted apart and left out of the rest. A task is correct when
 * it is DONE with a correct kernel that has a speedup; fast_p counts those
 * at least p times as fast as the baseline, over all tasks (KernelBench's
 * fast_p). Means and the "correct" geometric means are over the correct
 * tasks (over torch.compile: those where its time is known); the "all"
 * geometric means count every other task as 1.0x.
 */
static void
rep_summarize(const kc_config *cfg, const rep_row *rows, size_t n,
    const char *level, rep_set *s)
{
	double sum = 0, logs = 0, sum_c = 0, logs_c = 0, one;
	uint64_t first = 0, last = 0;
	size_t all_c = 0;
	bool used = false;
	char lv[16];

	memset(s, 0, sizeof(*s));
	s->priced = true;
	if (level)
		kc_strlcpy(s->level, level, sizeof(s->level));
	for (size_t i = 0; i < n; i++) {
		const rep_row *r = &rows[i];
		double e;
		if (level) {
			rep_level(r->name, lv, sizeof(lv));
			if (strcmp(lv, level) != 0)
				continue;
		}
		s->tokens += r->tokens;
		if (r->nusage) {
			s->priced &=
			    rep_usage_total(cfg, r->usage, r->nusage, &one);
			s->cost_usd += one;
			used = true;
		}
		if (r->created && (first == 0 || r->created < first))
			first = r->created;
		if (r->finished > last)
			last = r->finished;
		if (r->finished > r->created && r->created)
			s->task_wall_s +=
			    (double)(r->finished - r->created) / 1000;
		if (r->degenerate) {
			s->degenerate++;
			continue;
		}
		s->tasks++;
		if (!rep_correct(r)) {
			all_c++;
			continue;
		}
		e = rep_eager(r);
		s->success++;
		s->matched += r->matched > 0;
		sum += e;
		logs += log(e);
		for (size_t k = 0; k < REP_NFAST; k++)
			if (e >= rep_fast_p[k])
				s->fast[k]++;
		if (r->vs_compile > 0) {
			s->known_compile++;
			all_c++;
			sum_c += r->vs_compile;
			logs_c += log(r->vs_compile);
			for (size_t k = 0; k < REP_NFAST; k++)
				if (r->vs_compile >= rep_fast_p[k])
					s->fast_compile[k]++;
		}
	}
	s->fast1_compile = s->fast_compile[0];
	s->priced &= used;
	if (last > first && first)
		s->wall_s = (double)(last - first) / 1000;
	if (s->success) {
		s->mean = sum / (double)s->success;
		s->geomean = exp(logs / (double)s->success);
	}
	if (s->tasks)
		s->geomean_all = exp(logs / (double)s->tasks);
	if (s->known_compile) {
		s->mean_compile = sum_c / (double)s->known_compile;
		s->geomean_compile = exp(logs_c / (double)s->known_compile);
	}
	if (all_c)
		s->geomean_compile_all = exp(logs_c / (double)all_c);
}

/* The figures per level present in rows, in level order; *out malloc'd. */
static int
rep_levels(const kc_config *cfg, const rep_row *rows, size_t n, rep_set **out,
    size_t *nout)
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
			rep_summarize(cfg, rows, n, lv, &sets[k++]);
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
	const cli_report_opts *opts;
	char tolerance[160]; /* the tasks' tolerance, or "mixed: ..." */
	char precision[160]; /* their precision policy, said in words */
} rep_report;

/* ------------------------------------------------- published figures */

/*
 * Published KernelBench figures for --compare, each with the conditions it
 * was measured under as far as its source says them. Only figures found in
 * the cited text are given; a cell a source does not give is -1 and shows
 * as "-". (docs/kernelbench.md "Comparing with published figures" gives the
 * sources in full.)
 */
typedef struct {
	const char *who, *level;
	double pass, fast1_compile, geomean_compile, mean_eager; /* -1: - */
	int note;
} rep_published;

static const rep_published rep_pub[] = {
    {"CUDA Agent", "L1", -1, 1.00, -1, -1, 1},
    {"CUDA Agent", "L2", -1, 1.00, -1, -1, 1},
    {"CUDA Agent", "L3", -1, 0.92, -1, -1, 1},
    {"CUDA Agent (project page)", "all", 0.988, 0.968, 2.11, -1, 2},
    {"CUDA Agent (project page)", "L3", 0.94, 0.90, 1.52, -1, 2},
    {"CudaForge (OpenAI-o3)", "all", 0.976, -1, -1, 1.68, 3},
    {"KernelBench leaderboard", "-", -1, -1, -1, -1, 4},
};

static const char *const rep_pub_note[] = {
    "",
    "arXiv 2602.24286v1 (CUDA Agent, 27 Feb 2026), abstract: \"100%, 100%, "
    "and 92%\n     faster rate over torch.compile on KernelBench Level-1, "
    "Level-2, and Level-3\". Table 1's\n     other columns, tolerance, "
    "precision, timer and attempts: not verified here.",
    "cuda-agent.github.io as summarised by a secondary source "
    "(insights.marvin-42.com,\n     6 Mar 2026): pass rate, faster-than-"
    "compile rate, geomean over torch.compile;\n     NOT VERIFIED against "
    "the paper (its Level-3 faster rate, 90%, differs from the\n     "
    "abstract's 92%); which problems the geomean covers is not stated.",
    "arXiv 2511.01884v2 (CudaForge), abstract: 97.6% correct, \"an average "
    "1.68\n     speedup over PyTorch baselines\" (a mean over eager, not a "
    "geomean), OpenAI-o3,\n     Levels 1-3; 2.27x with more rounds; "
    "tolerance, precision and timer: not verified.",
    "KernelBench leaderboard (github.com/AffectionateCurry/KernelBench-"
    "Leaderboard):\n     geomean over the correctly solved problems only, "
    "one sample per problem, H100\n     via Modal; NO FIGURES could be "
    "sourced, so none are shown.",
};

static void
rep_cell(char *buf, size_t n, double v, bool pct)
{
	if (v < 0)
		snprintf(buf, n, "-");
	else if (pct)
		snprintf(buf, n, "%.1f%%", 100 * v);
	else
		snprintf(buf, n, "%.2fx", v);
}

static void
rep_print_compare(const rep_report *rp, FILE *out)
{
	char c[4][32];

	fprintf(out,
	    "\npublished figures beside kclaw's (conditions in the notes; "
	    "compare like with like):\n");
	fprintf(out, "%-28s %-6s %8s %10s %10s %10s  %s\n", "who", "level",
	    "pass", "fast_1 tc", "geo tc", "mean eager", "note");
	for (size_t i = 0; i <= rp->nlevels; i++) {
		const rep_set *s;
		if (rp->levels == NULL && i < rp->nlevels)
			continue;
		s = i < rp->nlevels ? &rp->levels[i] : &rp->set;
		rep_cell(
		    c[0], sizeof(c[0]), rep_share(s->success, s->tasks), true);
		rep_cell(c[1], sizeof(c[1]),
		    s->tasks ? rep_share(s->fast_compile[0], s->tasks) : -1,
		    true);
		rep_cell(c[2], sizeof(c[2]),
		    s->known_compile ? s->geomean_compile : -1, false);
		rep_cell(c[3], sizeof(c[3]), s->success ? s->mean : -1, false);
		fprintf(out, "%-28s %-6s %8s %10s %10s %10s  %s\n", "kclaw",
		    i < rp->nlevels ? s->level : "all", c[0], c[1], c[2], c[3],
		    "[0]");
	}
	for (size_t i = 0; i < sizeof(rep_pub) / sizeof(rep_pub[0]); i++) {
		const rep_published *p = &rep_pub[i];
		char note[8];
		rep_cell(c[0], sizeof(c[0]), p->pass, true);
		rep_cell(c[1], sizeof(c[1]), p->fast1_compile, true);
		rep_cell(c[2], sizeof(c[2]), p->geomean_compile, false);
		rep_cell(c[3], sizeof(c[3]), p->mean_eager, false);
		snprintf(note, sizeof(note), "[%d]", p->note);
		fprintf(out, "%-28s %-6s %8s %10s %10s %10s  %s\n", p->who,
		    p->level, c[0], c[1], c[2], c[3], note);
	}
	fprintf(out,
	    "[0] kclaw: %s; %s; timer: device events around every timed run, "
	    "L2 flushed\n     between runs, median; geo tc over the correct "
	    "problems; attempts: the\n     round budget of each task; "
	    "degenerate problems left out.\n",
	    rp->tolerance, rp->precision);
	for (size_t i = 1; i < sizeof(rep_pub_note) / sizeof(rep_pub_note[0]);
	     i++)
		fprintf(out, "[%zu] %s\n", i, rep_pub_note[i]);
}

static int
rep_compare_json(cJSON *root)
{
	cJSON *arr = cJSON_AddArrayToObject(root, "published");

	if (arr == NULL)
		return KC_ENOMEM;
	for (size_t i = 0; i < sizeof(rep_pub) / sizeof(rep_pub[0]); i++) {
		const rep_published *p = &rep_pub[i];
		cJSON *o = cJSON_CreateObject();
		if (o == NULL || !cJSON_AddItemToArray(arr, o)) {
			cJSON_Delete(o);
			return KC_ENOMEM;
		}
		cJSON_AddStringToObject(o, "who", p->who);
		cJSON_AddStringToObject(o, "level", p->level);
		rep_json_num(o, "pass_rate", p->pass, p->pass >= 0);
		rep_json_num(o, "fast_1_vs_torch_compile", p->fast1_compile,
		    p->fast1_compile >= 0);
		rep_json_num(o, "geomean_vs_torch_compile", p->geomean_compile,
		    p->geomean_compile >= 0);
		rep_json_num(
		    o, "mean_vs_eager", p->mean_eager, p->mean_eager >= 0);
		cJSON_AddStringToObject(o, "conditions", rep_pub_note[p->note]);
	}
	return 0;
}

/* The tolerance and precision policy of the tasks, in words: one value,
 * or "mixed" with the first two that differ. */
static void
rep_conditions(rep_report *rp)
{
	const rep_row *first = NULL;
	bool tol_mixed = false, prec_mixed = false;
	const char *prec;

	for (size_t i = 0; i < rp->n; i++) {
		const rep_row *r = &rp->rows[i];
		if (first == NULL) {
			first = r;
			continue;
		}
		tol_mixed |= r->atol != first->atol || r->rtol != first->rtol ||
		    r->max_rel_norm != first->max_rel_norm;
		prec_mixed |= strcmp(r->precision, first->precision) != 0;
	}
	if (first == NULL) {
		snprintf(rp->tolerance, sizeof(rp->tolerance), "tolerance -");
		snprintf(rp->precision, sizeof(rp->precision), "precision -");
		return;
	}
	if (tol_mixed)
		snprintf(rp->tolerance, sizeof(rp->tolerance),
		    "tolerance mixed (the tasks differ)");
	else if (first->atol < 0)
		snprintf(rp->tolerance, sizeof(rp->tolerance),
		    "tolerance the service's default");
	else
		snprintf(rp->tolerance, sizeof(rp->tolerance),
		    "tolerance atol %g, rtol %g, max_rel_norm %g", first->atol,
		    first->rtol, first->max_rel_norm);
	prec = *first->precision ? first->precision : "warn";
	if (prec_mixed)
		snprintf(rp->precision, sizeof(rp->precision),
		    "precision mixed (the tasks differ)");
	else
		snprintf(rp->precision, sizeof(rp->precision),
		    "precision %s (%s)", prec,
		    strcmp(prec, "strict") == 0
		        ? "lower precision than the task's fails"
		        : strcmp(prec, "loose") == 0
		        ? "lower precision passes, unflagged"
		        : "lower precision passes with a warning");
}

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
	/* The KernelBench form, each figure labelled by what it covers. */
	cJSON_AddNumberToObject(o, "problems", (double)s->tasks);
	cJSON_AddNumberToObject(o, "correct", (double)s->success);
	cJSON_AddNumberToObject(
	    o, "pass_rate", rep_share(s->success, s->tasks));
	cJSON_AddNumberToObject(o, "degenerate", (double)s->degenerate);
	cJSON_AddNumberToObject(o, "matched_precision", (double)s->matched);
	cJSON *e = cJSON_AddObjectToObject(o, "eager");
	cJSON *c = cJSON_AddObjectToObject(o, "torch_compile");
	if (e == NULL || c == NULL)
		return;
	for (size_t k = 0; k < REP_NFAST; k++) {
		cJSON_AddNumberToObject(
		    e, rep_fast_key[k], rep_share(s->fast[k], s->tasks));
		cJSON_AddNumberToObject(c, rep_fast_key[k],
		    rep_share(s->fast_compile[k], s->tasks));
	}
	rep_json_num(e, "mean_correct", s->mean, s->success > 0);
	rep_json_num(e, "geomean_correct", s->geomean, s->success > 0);
	rep_json_num(e, "geomean_all_failure_1x", s->geomean_all, s->tasks > 0);
	cJSON_AddNumberToObject(c, "known", (double)s->known_compile);
	rep_json_num(c, "mean_correct", s->mean_compile, s->known_compile > 0);
	rep_json_num(
	    c, "geomean_correct", s->geomean_compile, s->known_compile > 0);
	rep_json_num(c, "geomean_all_failure_1x", s->geomean_compile_all,
	    s->geomean_compile_all > 0);
	cJSON_AddNumberToObject(o, "tokens", (double)s->tokens);
	if (*s->level) /* the set's comes with its usage */
		rep_json_num(o, "cost_usd", s->cost_usd, s->priced);
	rep_json_num(o, "wall_s", s->wall_s, s->wall_s > 0);
	cJSON_AddNumberToObject(o, "task_wall_s", s->task_wall_s);
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
		rep_json_num(
		    o, "speedup_matched_precision", r->matched, r->matched > 0);
		rep_json_num(o, "wall_s",
		    (double)(r->finished - r->created) / 1000,
		    r->created && r->finished > r->created);
		cli_json_str(o, "degenerate", r->degenerate);
		rv = cli_usage_json(o, rp->cfg, r->usage, r->nusage);
		cli_json_str(o, "error", r->error);
	}
	if (rv == 0) {
		cJSON *cond = cJSON_AddObjectToObject(root, "conditions");
		cJSON *deg = cJSON_AddArrayToObject(root, "degenerate");
		if (cond == NULL || deg == NULL)
			rv = KC_ENOMEM;
		else {
			cJSON_AddStringToObject(
			    cond, "tolerance", rp->tolerance);
			cJSON_AddStringToObject(
			    cond, "precision", rp->precision);
			cJSON_AddStringToObject(cond, "eager_speedup",
			    "at matched precision where the sandbox measured "
			    "it (speedup_matched_precision), else against the "
			    "task's precision");
			cJSON_AddStringToObject(cond, "geomean_all",
			    "every problem, a failure counted as 1.0x");
			cJSON_AddNumberToObject(cond, "not_run",
			    rp->opts ? (double)rp->opts->not_run : 0);
		}
		for (size_t i = 0; i < rp->n && deg; i++)
			if (rp->rows[i].degenerate) {
				cJSON *d = cJSON_CreateObject();
				if (d == NULL ||
				    !cJSON_AddItemToArray(deg, d)) {
					cJSON_Delete(d);
					rv = KC_ENOMEM;
					break;
				}
				cJSON_AddStringToObject(
				    d, "id", rp->rows[i].id);
				cJSON_AddStringToObject(
				    d, "name", rp->rows[i].name);
				cJSON_AddStringToObject(
				    d, "reason", rp->rows[i].degenerate);
			}
		if (rv == 0 && rp->opts && rp->opts->compare)
			rv = rep_compare_json(root);
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
rep_wall(char *buf, size_t n, double s)
{
	if (!(s > 0))
		snprintf(buf, n, "-");
	else if (s >= 3600)
		snprintf(buf, n, "%.1fh", s / 3600);
	else if (s >= 60)
		snprintf(buf, n, "%.1fm", s / 60);
	else
		snprintf(buf, n, "%.1fs", s);
}

/* The per-level tables: over eager, over torch.compile, and what the set
 * cost; then the degenerate problems, apart. */
static void
rep_print_levels(const rep_report *rp, FILE *out)
{
	char c[4][32], sp[3][32];
	const char *hdr = "%-6s %8s %14s %14s %14s %14s %8s %9s %9s\n";
	const char *row = "%-6s %8zu %14s %14s %14s %14s %8s %9s %9s\n";

	fprintf(out,
	    "KernelBench report: %s; %s\nspeedups over eager at matched "
	    "precision where measured (%zu task(s)), else\nagainst the "
	    "task's own precision; degenerate problems (%zu) left out of "
	    "every\nfigure and listed below%s\n\n",
	    rp->tolerance, rp->precision, rp->set.matched, rp->set.degenerate,
	    rp->opts && rp->opts->not_run ? "; problems that never became a "
	                                    "task: see run.json"
	                                  : "");
	for (int v = 0; v < 2; v++) {
		fprintf(out, "over %s\n",
		    v ? "torch.compile (fast_p over all problems; correct "
		        "ones without its time count as not fast)"
		      : "PyTorch eager");
		fprintf(out, hdr, "level", "problems", v ? "known" : "correct",
		    rep_fast_label[0], rep_fast_label[1], rep_fast_label[2],
		    "mean", "geo.corr", "geo.all");
		for (size_t i = 0; i <= rp->nlevels; i++) {
			const rep_set *s =
			    i < rp->nlevels ? &rp->levels[i] : &rp->set;
			const size_t *f = v ? s->fast_compile : s->fast;
			if (v)
				snprintf(c[0], sizeof(c[0]), "%zu/%zu",
				    s->known_compile, s->success);
			else
				rep_pct(
				    c[0], sizeof(c[0]), s->success, s->tasks);
			for (size_t k = 0; k < REP_NFAST; k++)
				rep_pct(c[k + 1], sizeof(c[0]), f[k], s->tasks);
			rep_ratio(sp[0], sizeof(sp[0]),
			    v ? s->mean_compile : s->mean);
			rep_ratio(sp[1], sizeof(sp[1]),
			    v ? s->geomean_compile : s->geomean);
			rep_ratio(sp[2], sizeof(sp[2]),
			    v ? s->geomean_compile_all : s->geomean_all);
			fprintf(out, row, i < rp->nlevels ? s->level : "all",
			    s->tasks, c[0], c[1], c[2], c[3], sp[0], sp[1],
			    sp[2]);
		}
		fprintf(out, "\n");
	}
	fprintf(out, "%-6s %8s %10s %12s %10s %12s\n", "level", "problems",
	    "tokens", "cost", "wall", "task time");
	for (size_t i = 0; i <= rp->nlevels; i++) {
		const rep_set *s = i < rp->nlevels ? &rp->levels[i] : &rp->set;
		rep_cost(c[0], sizeof(c[0]), s->cost_usd, s->priced);
		rep_wall(c[1], sizeof(c[1]), s->wall_s);
		rep_wall(c[2], sizeof(c[2]), s->task_wall_s);
		fprintf(out, "%-6s %8zu %10llu %12s %10s %12s\n",
		    i < rp->nlevels ? s->level : "all",
		    s->tasks + s->degenerate, (unsigned long long)s->tokens,
		    c[0], c[1], c[2]);
	}
	fprintf(out,
	    "(fast_p: share of the problems whose correct kernel is at least "
	    "p times as fast;\nmean and geo.corr over the correct problems; "
	    "geo.all over every problem, a\nfailure counted as 1.0x; wall: "
	    "first submitted to last finished; task time:\nthe tasks' wall "
	    "times summed)\n");
	if (rp->set.degenerate) {
		fprintf(out,
		    "\ndegenerate problems (left out of the figures "
		    "above):\n");
		for (size_t i = 0; i < rp->n; i++)
			if (rp->rows[i].degenerate)
				fprintf(out, "  %-24s %-16s %s\n",
				    rp->rows[i].name, rp->rows[i].id,
				    rp->rows[i].degenerate);
	}
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
	if (rp->opts && rp->opts->compare)
		rep_print_compare(rp, out);
}

int
cli_report_print_opts(orch_client *c, char *const *ids, size_t n,
    const cli_report_opts *opts, FILE *out)
{
	bool json = opts->json, by_level = opts->by_level;
	char **listed = NULL;
	rep_row *rows = NULL;
	size_t nrows = 0;
	rep_report rp;
	int rv = 0;

	memset(&rp, 0, sizeof(rp));
	rp.cfg = &c->cfg;
	rp.opts = opts;
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
	rep_summarize(&c->cfg, rows, nrows, NULL, &rp.set);
	rep_conditions(&rp);
	if (by_level &&
	    (rv = rep_levels(&c->cfg, rows, nrows, &rp.levels, &rp.nlevels)) !=
	        0)
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
cli_report_print_by(orch_client *c, char *const *ids, size_t n, bool json,
    bool by_level, FILE *out)
{
	cli_report_opts o = {.json = json, .by_level = by_level};

	return cli_report_print_opts(c, ids, n, &o, out);
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
	    "usage: kclaw report [TASK_ID ...] [--by level] [--compare] "
	    "[--json] [--home DIR]\n\n"
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
	    "Under --by level the figures follow KernelBench: pass rate, "
	    "fast_1, fast_1.5,\nfast_2 over eager and over torch.compile, "
	    "mean and geometric mean over the\ncorrect problems and the "
	    "geometric mean over all (a failure as 1.0x), tokens,\ncost and "
	    "wall time; the header states the tolerance and precision "
	    "policy; a\nkernel in lower precision counts at matched "
	    "precision where the sandbox\nmeasured it; degenerate problems "
	    "(the reference check found an output a\nconstant could pass) "
	    "are listed apart and left out of every figure.\n"
	    "--compare adds published figures (CUDA Agent, CudaForge, the "
	    "KernelBench\nleaderboard) with the conditions they were "
	    "measured under.\n"
	    "--json prints one JSON document {\"tasks\": [...], \"set\": "
	    "{...}, \"conditions\",\n\"degenerate\"}, with \"levels\": "
	    "[...] under --by level and \"published\" under\n--compare.\n");
}

int
cli_report(int argc, char **argv)
{
	char **ids;
	size_t n = 0;
	cli_report_opts o = {0};
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
			o.json = true;
		} else if (strcmp(argv[i], "--compare") == 0) {
			o.compare = true;
		} else if (strcmp(argv[i], "--by") == 0 && i + 1 < argc &&
		    strcmp(argv[i + 1], "level") == 0) {
			o.by_level = true;
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
	if ((rv = cli_report_print_opts(&c, ids, n, &o, stdout)) != 0)
		code = cli_fail("report", rv);
	orch_client_close(&c);
	free(ids);
	return code;
}
