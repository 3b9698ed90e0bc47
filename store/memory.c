/*
 * memory.c - the memory commands as library calls (memory.h): what
 * `kclaw memory ...` prints, and what the API's Memory rpc can return.
 */
#include "memory.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kc_err.h"
#include "kc_util.h"
#include "kclaw.pb-c.h"
#include "lessons.h"

/* Prints a JSON document (and frees it) into *out. */
static int
memory_json_out(cJSON *doc, char **out)
{
	char *text;
	kc_str s = {0};
	int rv;

	if (doc == NULL)
		return KC_ENOMEM;
	text = cJSON_PrintUnformatted(doc);
	cJSON_Delete(doc);
	if (text == NULL)
		return KC_ENOMEM;
	rv = kc_str_printf(&s, "%s\n", text);
	free(text);
	if (rv != 0)
		return rv;
	*out = kc_str_take(&s);
	return *out != NULL ? 0 : KC_ENOMEM;
}

static int
memory_text_out(kc_str *s, int rv, char **out)
{
	if (rv != 0) {
		kc_str_free(s);
		return KC_ENOMEM;
	}
	*out = kc_str_take(s);
	return *out != NULL ? 0 : KC_ENOMEM;
}

static void
memory_time(uint64_t ms, char *buf, size_t len)
{
	time_t t = (time_t)(ms / 1000);
	struct tm tm;

	if (ms == 0 || gmtime_r(&t, &tm) == NULL) {
		snprintf(buf, len, "-");
		return;
	}
	strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* The knowledge given, else the store's current version (into *own, which
 * the caller frees). */
static int
memory_knowledge(store *s, const kb **k, kb **own)
{
	int rv;

	if (*k != NULL)
		return 0;
	if (s == NULL)
		return kc_seterr(KC_EINVAL, "no knowledge given");
	if ((rv = kb_load(s, 0, own)) != 0)
		return rv;
	*k = *own;
	return 0;
}

/* --------------------------------------------------- import and export */

/* Imports dir once; its report as text into *text and as JSON into *json
 * (either may be NULL). */
static int
memory_import_both(store *s, const char *dir, char **text, char **json)
{
	size_t nlessons = 0;
	uint64_t v;
	bool changed;
	kb *k = NULL;
	kc_str t = {0};
	int rv;

	if (text)
		*text = NULL;
	if (json)
		*json = NULL;
	if (dir == NULL)
		dir = kb_default_dir();
	if ((rv = kb_import(s, dir, &v, &changed)) != 0 ||
	    (rv = kb_load(s, v, &k)) != 0)
		return rv;
	/* Lessons of another deployment, when the folder has them. */
	if ((rv = lessons_import(s, dir, &nlessons)) != 0) {
		kb_free(k);
		return rv;
	}
	if (json) {
		cJSON *o = cJSON_CreateObject();
		int rj;
		cJSON_AddStringToObject(o, "dir", dir);
		cJSON_AddNumberToObject(o, "version", (double)v);
		cJSON_AddBoolToObject(o, "changed", changed);
		cJSON_AddStringToObject(o, "label", k->label);
		cJSON_AddStringToObject(o, "sha256", k->sha256);
		cJSON_AddNumberToObject(o, "methods", (double)k->nmethods);
		cJSON_AddNumberToObject(o, "classes", (double)k->nclasses);
		cJSON_AddNumberToObject(o, "rules", (double)k->nrules);
		cJSON_AddNumberToObject(o, "vetoes", (double)k->nvetoes);
		cJSON_AddNumberToObject(o, "lessons", (double)nlessons);
		if ((rj = memory_json_out(o, json)) != 0 || text == NULL) {
			kb_free(k);
			return rj;
		}
	}
	if (nlessons > 0)
		rv = kc_str_printf(&t, "imported %zu lessons from %s/%s\n",
		    nlessons, dir, LESSONS_FILE);
	if (rv == 0 && changed)
		rv = kc_str_printf(&t,
		    "imported %s as knowledge version %llu (%s): %zu methods, "
		    "%zu bottleneck classes, %zu rules, %zu vetoes\n",
		    dir, (unsigned long long)v, k->label, k->nmethods,
		    k->nclasses, k->nrules, k->nvetoes);
	else if (rv == 0)
		rv = kc_str_printf(&t,
		    "unchanged: knowledge version %llu (%s) already holds the "
		    "content of %s\n",
		    (unsigned long long)v, k->label, dir);
	kb_free(k);
	if ((rv = memory_text_out(&t, rv, text)) != 0 && json) {
		free(*json);
		*json = NULL;
	}
	return rv;
}

int
memory_cmd_import(store *s, const char *dir, bool json, char **out)
{
	*out = NULL;
	return memory_import_both(s, dir, json ? NULL : out, json ? out : NULL);
}

/* Exports to dir once; its report as text into *text and as JSON into
 * *json (either may be NULL). */
static int
memory_export_both(store *s, const char *dir, char **text, char **json)
{
	size_t nlessons = 0;
	kb *k;
	kc_str t = {0};
	int rv;

	if (text)
		*text = NULL;
	if (json)
		*json = NULL;
	if ((rv = kb_load(s, 0, &k)) != 0)
		return rv;
	if ((rv = kb_export(s, k->version, dir)) != 0 ||
	    (rv = lessons_export(s, dir, &nlessons)) != 0) {
		kb_free(k);
		return rv;
	}
	if (json) {
		cJSON *o = cJSON_CreateObject();
		int rj;
		cJSON_AddStringToObject(o, "dir", dir);
		cJSON_AddNumberToObject(o, "version", (double)k->version);
		cJSON_AddStringToObject(o, "label", k->label);
		cJSON_AddStringToObject(o, "sha256", k->sha256);
		cJSON_AddNumberToObject(o, "lessons", (double)nlessons);
		if ((rj = memory_json_out(o, json)) != 0 || text == NULL) {
			kb_free(k);
			return rj;
		}
	}
	rv = kc_str_printf(&t,
	    "exported knowledge version %llu (%s) to %s/%s and %s/%s, and "
	    "%zu lessons to %s/%s\n",
	    (unsigned long long)k->version, k->label, dir, KB_POLICY_FILE, dir,
	    KB_METHODS_FILE, nlessons, dir, LESSONS_FILE);
	kb_free(k);
	if ((rv = memory_text_out(&t, rv, text)) != 0 && json) {
		free(*json);
		*json = NULL;
	}
	return rv;
}

int
memory_cmd_export(store *s, const char *dir, bool json, char **out)
{
	*out = NULL;
	return memory_export_both(s, dir, json ? NULL : out, json ? out : NULL);
}

/* --------------------------------------------------------------- stats */

static cJSON *
memory_stat_json(const memlt_stat *st)
{
	cJSON *o = cJSON_CreateObject(), *b = cJSON_CreateObject();
	char when[32];

	cJSON_AddStringToObject(o, "signature", st->signature);
	cJSON_AddStringToObject(o, "method", st->method);
	cJSON_AddNumberToObject(o, "attempts", st->attempts);
	cJSON_AddNumberToObject(o, "correct", st->correct);
	cJSON_AddNumberToObject(o, "successes", st->successes);
	cJSON_AddNumberToObject(o, "mean_gain", st->gain_mean);
	cJSON_AddNumberToObject(o, "min_gain", st->gain_min);
	cJSON_AddNumberToObject(o, "max_gain", st->gain_max);
	cJSON_AddNumberToObject(o, "best_speedup", st->speedup_best);
	for (int i = 0; i < MEMLT_NBUCKETS; i++)
		cJSON_AddNumberToObject(
		    b, memlt_bucket_names[i], st->buckets[i]);
	cJSON_AddItemToObject(o, "speedup_buckets", b);
	memory_time(st->last_unix_ms, when, sizeof(when));
	if (st->last_unix_ms == 0)
		cJSON_AddNullToObject(o, "last");
	else
		cJSON_AddStringToObject(o, "last", when);
	return o;
}

int
memory_cmd_stats(store *s, const char *signature, bool json, char **out)
{
	memlt_stat *st;
	kb_version_info *vs = NULL;
	size_t n, nv = 0;
	kc_str t = {0};
	int rv;

	*out = NULL;
	if ((rv = memlt_stats(s, signature, true, &st, &n)) != 0)
		return rv;
	if ((rv = kb_versions(s, &vs, &nv)) != 0) {
		free(st);
		return rv;
	}
	if (json) {
		cJSON *o = cJSON_CreateObject(), *a = cJSON_CreateArray();
		cJSON *k = cJSON_CreateObject();
		if (nv > 0) {
			cJSON_AddNumberToObject(
			    k, "version", (double)vs[nv - 1].version);
			cJSON_AddStringToObject(k, "label", vs[nv - 1].label);
			cJSON_AddStringToObject(k, "sha256", vs[nv - 1].sha256);
		}
		cJSON_AddNumberToObject(k, "versions", (double)nv);
		cJSON_AddItemToObject(o, "knowledge", k);
		for (size_t i = 0; i < n; i++)
			cJSON_AddItemToArray(a, memory_stat_json(&st[i]));
		cJSON_AddItemToObject(o, "learned", a);
		free(st);
		free(vs);
		return memory_json_out(o, out);
	}
	if (nv > 0)
		rv |= kc_str_printf(&t,
		    "knowledge: version %llu (%s), %zu version%s stored\n",
		    (unsigned long long)vs[nv - 1].version, vs[nv - 1].label,
		    nv, nv == 1 ? "" : "s");
	else
		rv |= kc_str_printf(&t,
		    "knowledge: nothing imported yet (kclaw memory import)\n");
	if (n == 0)
		rv |= kc_str_printf(&t,
		    "learned: nothing yet%s; every optimisation attempt the "
		    "orchestrator finishes is recorded here\n",
		    signature ? " for this signature" : "");
	else
		rv |= kc_str_printf(&t,
		    "learned (faster = at least %.0f%% faster than its base; "
		    "gain = speedup - 1 over correct attempts):\n"
		    "%-28s %-28s %8s %7s %6s %9s %7s\n",
		    MEMLT_SUCCESS_GAIN * 100, "signature", "method", "attempts",
		    "correct", "faster", "mean gain", "best");
	for (size_t i = 0; i < n; i++)
		rv |= kc_str_printf(&t,
		    "%-28s %-28s %8u %7u %6u %+8.1f%% %6.2fx\n",
		    st[i].signature[0] == '*' ? "* (all signatures)"
		                              : st[i].signature,
		    st[i].method, st[i].attempts, st[i].correct,
		    st[i].successes, st[i].gain_mean * 100, st[i].speedup_best);
	free(st);
	free(vs);
	return memory_text_out(&t, rv, out);
}

/* ------------------------------------------------------------- methods */

int
memory_cmd_methods(store *s, const kb *k, bool json, char **out)
{
	kb *own = NULL;
	memlt_stat *st = NULL;
	size_t n = 0;
	kc_str t = {0};
	int rv = 0;

	*out = NULL;
	if ((rv = memory_knowledge(s, &k, &own)) != 0)
		return rv;
	if (s != NULL && (rv = memlt_stats(s, NULL, true, &st, &n)) != 0) {
		kb_free(own);
		return rv;
	}
	if (json) {
		cJSON *o = cJSON_CreateObject(), *a = cJSON_CreateArray();
		cJSON_AddNumberToObject(o, "version", (double)k->version);
		cJSON_AddStringToObject(o, "label", k->label);
		for (size_t i = 0; i < k->nmethods; i++) {
			const kb_method *m = &k->methods[i];
			cJSON *x = cJSON_CreateObject(),
			      *c = cJSON_CreateObject();
			cJSON *tags = cJSON_CreateArray();
			cJSON_AddStringToObject(x, "name", m->name);
			cJSON_AddStringToObject(x, "title", m->title);
			cJSON_AddStringToObject(x, "intent", m->intent);
			cJSON_AddStringToObject(
			    x, "applies_when", m->applies_when);
			cJSON_AddStringToObject(x, "requires", m->requires);
			cJSON_AddStringToObject(x, "expected", m->expected);
			cJSON_AddStringToObject(c, "ampere", m->cue_ampere);
			cJSON_AddStringToObject(c, "hopper", m->cue_hopper);
			cJSON_AddItemToObject(x, "cues", c);
			cJSON_AddStringToObject(x, "pitfalls", m->pitfalls);
			for (size_t j = 0; j < m->ntags; j++)
				cJSON_AddItemToArray(
				    tags, cJSON_CreateString(m->tags[j]));
			cJSON_AddItemToObject(x, "tags", tags);
			for (size_t j = 0; j < n; j++)
				if (st[j].signature[0] == '*' &&
				    strcmp(st[j].method, m->name) == 0)
					cJSON_AddItemToObject(x, "learned",
					    memory_stat_json(&st[j]));
			cJSON_AddItemToArray(a, x);
		}
		cJSON_AddItemToObject(o, "methods", a);
		free(st);
		kb_free(own);
		return memory_json_out(o, out);
	}
	rv |= kc_str_printf(&t, "knowledge version %llu (%s): %zu methods\n",
	    (unsigned long long)k->version, k->label, k->nmethods);
	for (size_t i = 0; i < k->nmethods; i++) {
		const kb_method *m = &k->methods[i];
		const memlt_stat *g = NULL;
		for (size_t j = 0; j < n; j++)
			if (st[j].signature[0] == '*' &&
			    strcmp(st[j].method, m->name) == 0)
				g = &st[j];
		rv |= kc_str_printf(&t, "  %-28s %s", m->name, m->title);
		if (g != NULL)
			rv |= kc_str_printf(&t,
			    "  [%u attempts, %u faster, mean gain %+.1f%%]",
			    g->attempts, g->successes, g->gain_mean * 100);
		rv |= kc_str_printf(&t, "\n");
	}
	free(st);
	kb_free(own);
	return memory_text_out(&t, rv, out);
}

/* ------------------------------------------------------------- explain */

static cJSON *
memory_strs_json(char **v, size_t n)
{
	cJSON *a = cJSON_CreateArray();

	for (size_t i = 0; i < n; i++)
		cJSON_AddItemToArray(a, cJSON_CreateString(v[i]));
	return a;
}

/* The lessons of other tasks for an explained retrieval. */
typedef struct {
	char **lines;
	size_t n;
	bool shown; /* kept when the Planner was shown them */
} memory_lessons;

static void
memory_lessons_free(memory_lessons *l)
{
	if (l->shown)
		free(l->lines);
	else {
		for (size_t i = 0; i < l->n; i++)
			free(l->lines[i]);
		free(l->lines);
	}
	memset(l, 0, sizeof(*l));
}

/* The lessons kept for candidate_id when it was planned; else (or for
 * evidence, candidate_id NULL) the lessons closest to r now, skipping
 * the candidate's own task. */
static int
memory_lessons_get(store *s, const char *candidate_id, const memlt_result *r,
    memory_lessons *out)
{
	lesson *v = NULL;
	size_t n = 0;
	char *task = NULL;
	const char *p;
	int rv;

	memset(out, 0, sizeof(*out));
	if (s == NULL)
		return 0;
	if (candidate_id != NULL) {
		rv = lessons_used_get(s, candidate_id, &out->lines, &out->n);
		if (rv == 0) {
			out->shown = true;
			return 0;
		}
		if (rv != KC_ENOENT)
			return rv;
		kc_clearerr();
		p = strrchr(candidate_id, '-');
		task = p ? strndup(candidate_id, (size_t)(p - candidate_id))
		         : strdup(candidate_id);
		if (task == NULL)
			return KC_ENOMEM;
	}
	rv = lessons_similar(s, r, task, LESSONS_DEFAULT_SHOWN, &v, &n);
	free(task);
	if (rv == 0 && n > 0 &&
	    (out->lines = calloc(n, sizeof(*out->lines))) == NULL)
		rv = KC_ENOMEM;
	for (size_t i = 0; rv == 0 && i < n; i++) {
		if ((rv = lessons_render(&v[i], &out->lines[i])) == 0)
			out->n++;
	}
	lessons_free(v, n);
	if (rv != 0)
		memory_lessons_free(out);
	return rv;
}

static int
memory_result_out(const memlt_result *r, const char *candidate_id,
    Kclaw__Recommendation *const *stored, size_t nstored,
    const memory_lessons *les, bool json, char **out)
{
	kc_str t = {0};
	int rv = 0;

	if (json) {
		cJSON *o = cJSON_CreateObject(), *a = cJSON_CreateArray();
		if (candidate_id != NULL)
			cJSON_AddStringToObject(o, "candidate", candidate_id);
		cJSON_AddStringToObject(o, "primary", r->primary);
		cJSON_AddStringToObject(o, "signature", r->signature);
		cJSON_AddItemToObject(
		    o, "active", memory_strs_json(r->active, r->nactive));
		cJSON_AddItemToObject(
		    o, "fired", memory_strs_json(r->fired, r->nfired));
		cJSON_AddItemToObject(
		    o, "vetoes", memory_strs_json(r->vetoes, r->nvetoes));
		for (size_t i = 0; i < r->nrecs; i++) {
			const Kclaw__Recommendation *x = r->recs[i];
			cJSON *j = cJSON_CreateObject();
			cJSON_AddStringToObject(j, "method", x->method);
			cJSON_AddNumberToObject(j, "score", x->score);
			cJSON_AddStringToObject(j, "rule", x->rule);
			cJSON_AddItemToObject(j, "matched",
			    memory_strs_json(x->matched, x->n_matched));
			cJSON_AddItemToObject(j, "vetoed",
			    memory_strs_json(x->vetoed, x->n_vetoed));
			cJSON_AddNumberToObject(j, "attempts", x->attempts);
			cJSON_AddNumberToObject(j, "successes", x->successes);
			cJSON_AddNumberToObject(j, "mean_gain", x->mean_gain);
			cJSON_AddStringToObject(j, "knowledge", x->knowledge);
			cJSON_AddItemToArray(a, j);
		}
		cJSON_AddItemToObject(o, "recommendations", a);
		if (nstored > 0) {
			cJSON *sa = cJSON_CreateArray();
			for (size_t i = 0; i < nstored; i++)
				cJSON_AddItemToArray(
				    sa, cJSON_CreateString(stored[i]->method));
			cJSON_AddItemToObject(o, "recommended_then", sa);
		}
		cJSON_AddItemToObject(
		    o, "lessons", memory_strs_json(les->lines, les->n));
		cJSON_AddBoolToObject(o, "lessons_shown", les->shown);
		cJSON_AddStringToObject(o, "trace", r->trace);
		return memory_json_out(o, out);
	}
	if (candidate_id != NULL)
		rv |= kc_str_printf(&t, "candidate %s\n", candidate_id);
	rv |= kc_str_printf(&t, "%s\nrecommendations:\n", r->trace);
	for (size_t i = 0; i < r->nrecs; i++) {
		const Kclaw__Recommendation *x = r->recs[i];
		rv |= kc_str_printf(&t, "  %zu. %s (score %.3f, rule %s", i + 1,
		    x->method, x->score, x->rule);
		if (x->attempts > 0)
			rv |= kc_str_printf(&t,
			    "; learned: %u attempts, %u faster, mean gain "
			    "%+.1f%%",
			    x->attempts, x->successes, x->mean_gain * 100);
		rv |= kc_str_printf(&t, ")\n");
	}
	if (r->nrecs == 0)
		rv |= kc_str_printf(&t, "  none\n");
	else
		rv |= kc_str_printf(&t,
		    "\nwhat the Planner is shown for %s:\n%s\n",
		    r->recs[0]->method, r->recs[0]->knowledge);
	if (nstored > 0) {
		rv |= kc_str_printf(&t, "recommended when it was planned:");
		for (size_t i = 0; i < nstored; i++)
			rv |= kc_str_printf(&t, " %s", stored[i]->method);
		rv |= kc_str_printf(&t, "\n");
	}
	rv |= kc_str_printf(&t, "\nlessons from other tasks (%s):\n",
	    les->shown ? "shown to the Planner"
	               : "closest to this evidence now");
	for (size_t i = 0; i < les->n; i++)
		rv |= kc_str_printf(&t, "  %zu. %s\n", i + 1, les->lines[i]);
	if (les->n == 0)
		rv |= kc_str_printf(&t, "  none\n");
	return memory_text_out(&t, rv, out);
}

/* Retrieval for evidence JSON under k (NULL: the store's head). */
static int
memory_explain_evidence(
    store *s, const kb *k, const char *evidence_json, memlt_result *r)
{
	kb *own = NULL;
	memlt_evidence *ev = NULL;
	int rv;

	memset(r, 0, sizeof(*r));
	if ((rv = memory_knowledge(s, &k, &own)) != 0)
		return rv;
	if ((rv = memlt_evidence_new(&ev)) == 0 &&
	    (rv = memlt_evidence_add_json(ev, evidence_json)) == 0)
		rv = memlt_retrieve(s, k, ev, NULL, r);
	memlt_evidence_free(ev);
	kb_free(own);
	return rv;
}

int
memory_cmd_explain_evidence(
    store *s, const kb *k, const char *evidence_json, bool json, char **out)
{
	memlt_result r;
	memory_lessons les = {0};
	int rv;

	*out = NULL;
	if ((rv = memory_explain_evidence(s, k, evidence_json, &r)) == 0 &&
	    (rv = memory_lessons_get(s, NULL, &r, &les)) == 0)
		rv = memory_result_out(&r, NULL, NULL, 0, &les, json, out);
	memory_lessons_free(&les);
	memlt_result_free(&r);
	return rv;
}

typedef struct {
	const char *id;
	Kclaw__CandidateRecord *found;
} memory_find_ctx;

static int
memory_find_fn(
    void *arg, const void *key, size_t klen, const void *val, size_t vlen)
{
	memory_find_ctx *c = arg;
	Kclaw__CandidateRecord *rec;

	(void)key;
	(void)klen;
	rec = kclaw__candidate_record__unpack(NULL, vlen, val);
	if (rec == NULL)
		return 0;
	if (rec->candidate != NULL && rec->candidate->id != NULL &&
	    strcmp(rec->candidate->id, c->id) == 0) {
		c->found = rec;
		return 1;
	}
	kclaw__candidate_record__free_unpacked(rec, NULL);
	return 0;
}

/* Retrieval for a stored candidate; *rec is the caller's on success. */
static int
memory_explain_candidate(store *s, const kb *k, const char *candidate_id,
    memlt_result *r, Kclaw__CandidateRecord **rec)
{
	memory_find_ctx c = {.id = candidate_id};
	kb *own = NULL;
	memlt_evidence *ev = NULL;
	int rv;

	memset(r, 0, sizeof(*r));
	*rec = NULL;
	if (candidate_id == NULL || *candidate_id == '\0')
		return kc_seterr(KC_EINVAL, "no candidate id given");
	/* The candidates' key layout belongs to the orchestrator, so the
	 * record is found by its content. */
	if ((rv = store_scan(s, STORE_CF_CANDIDATES, NULL, 0, NULL, 0,
	         memory_find_fn, &c)) != 0)
		return rv;
	if (c.found == NULL)
		return kc_seterr(KC_ENOENT,
		    "no candidate '%s' in the store (kclaw result TASK lists "
		    "a task's candidates)",
		    candidate_id);
	if (c.found->eval == NULL)
		rv = kc_seterr(KC_ENOENT,
		    "candidate '%s' has not been evaluated yet", candidate_id);
	if (rv == 0 && k == NULL && (rv = kb_load(s, 0, &own)) == 0)
		k = own;
	if (rv == 0 && (rv = memlt_evidence_new(&ev)) == 0 &&
	    (rv = memlt_evidence_add_eval(ev, c.found->eval)) == 0 &&
	    (rv = memlt_evidence_add_features(
	         ev, c.found->features, c.found->n_features)) == 0)
		rv = memlt_retrieve(s, k, ev, NULL, r);
	memlt_evidence_free(ev);
	kb_free(own);
	if (rv != 0)
		kclaw__candidate_record__free_unpacked(c.found, NULL);
	else
		*rec = c.found;
	return rv;
}

int
memory_cmd_explain_candidate(
    store *s, const kb *k, const char *candidate_id, bool json, char **out)
{
	Kclaw__CandidateRecord *rec;
	memlt_result r;
	int rv;

	*out = NULL;
	if ((rv = memory_explain_candidate(s, k, candidate_id, &r, &rec)) ==
	    0) {
		memory_lessons les = {0};
		if ((rv = memory_lessons_get(s, candidate_id, &r, &les)) == 0)
			rv = memory_result_out(&r, candidate_id, rec->methods,
			    rec->n_methods, &les, json, out);
		memory_lessons_free(&les);
		kclaw__candidate_record__free_unpacked(rec, NULL);
	}
	memlt_result_free(&r);
	return rv;
}

/* ----------------------------------------------------- the Memory rpc */

/* Moves a text into a response's bytes. */
static void
memory_take_data(ProtobufCBinaryData *d, char *text)
{
	d->data = (uint8_t *)text;
	d->len = text != NULL ? strlen(text) : 0;
}

static int
memory_serve_cmd(int rv_text, char *text, int rv_json, char *json,
    Kclaw__MemoryResponse *resp)
{
	if (rv_text != 0 || rv_json != 0) {
		free(text);
		free(json);
		return rv_text != 0 ? rv_text : rv_json;
	}
	resp->text = text;
	memory_take_data(&resp->data, json);
	return 0;
}

int
memory_serve(store *s, const kb *k, const Kclaw__MemoryRequest *req,
    Kclaw__MemoryResponse *resp)
{
	const char *q = req->query ? req->query : "";
	char *arg = NULL, *text = NULL, *json = NULL;
	int rv, rj = 0;

	if (req->data.len > (1u << 20))
		return kc_seterr(KC_ENOSPC,
		    "memory request data is %zu bytes (limit 1 MiB)",
		    req->data.len);
	if (req->data.len > 0 &&
	    (arg = strndup((const char *)req->data.data, req->data.len)) ==
	        NULL)
		return KC_ENOMEM;
	if (strcmp(q, "stats") == 0) {
		rv = memory_cmd_stats(s, arg, false, &text);
		if (rv == 0)
			rj = memory_cmd_stats(s, arg, true, &json);
		rv = memory_serve_cmd(rv, text, rj, json, resp);
	} else if (strcmp(q, "methods") == 0) {
		rv = memory_cmd_methods(s, k, false, &text);
		if (rv == 0)
			rj = memory_cmd_methods(s, k, true, &json);
		rv = memory_serve_cmd(rv, text, rj, json, resp);
	} else if (strcmp(q, "import") == 0 || strcmp(q, "export") == 0) {
		bool imp = q[0] == 'i';
		if (!imp && arg == NULL)
			rv = kc_seterr(KC_EINVAL,
			    "export needs the folder to write to in data");
		else if (imp)
			rv = memory_import_both(s, arg, &text, &json);
		else
			rv = memory_export_both(s, arg, &text, &json);
		rv = memory_serve_cmd(rv, text, 0, json, resp);
	} else if (strcmp(q, "explain") == 0) {
		memlt_result r = {0};
		Kclaw__CandidateRecord *rec = NULL;
		if (req->candidate_id != NULL && *req->candidate_id != '\0')
			rv = memory_explain_candidate(
			    s, k, req->candidate_id, &r, &rec);
		else if (arg != NULL)
			rv = memory_explain_evidence(s, k, arg, &r);
		else
			rv = kc_seterr(KC_EINVAL,
			    "explain needs candidate_id or evidence JSON in "
			    "data");
		memory_lessons les = {0};
		const char *cid = rec ? req->candidate_id : NULL;
		if (rv == 0)
			rv = memory_lessons_get(s, cid, &r, &les);
		if (rv == 0)
			rv = memory_result_out(&r, req->candidate_id,
			    rec ? rec->methods : NULL, rec ? rec->n_methods : 0,
			    &les, false, &text);
		if (rv == 0)
			rj = memory_result_out(&r, req->candidate_id,
			    rec ? rec->methods : NULL, rec ? rec->n_methods : 0,
			    &les, true, &json);
		memory_lessons_free(&les);
		rv = memory_serve_cmd(rv, text, rj, json, resp);
		if (rv == 0) {
			/* The recommendations move into the response. */
			resp->recommendations = r.recs;
			resp->n_recommendations = r.nrecs;
			r.recs = NULL;
			r.nrecs = 0;
		}
		if (rec != NULL)
			kclaw__candidate_record__free_unpacked(rec, NULL);
		memlt_result_free(&r);
	} else if (strcmp(q, "short_term") == 0) {
		char *chain = NULL, *hist = NULL;
		kc_str t = {0};
		rv = memst_repair_chain_text(s, req->task_id, 0, &chain);
		if (rv == 0)
			rv = memst_opt_history_text(s, req->task_id,
			    req->candidate_id && *req->candidate_id
			        ? req->candidate_id
			        : NULL,
			    0, &hist);
		if (rv == 0 &&
		    (rv = kc_str_printf(&t, "%s%s%s", chain,
		         *chain && *hist ? "\n" : "", hist)) == 0)
			resp->text = kc_str_take(&t);
		if (rv == 0 && resp->text == NULL)
			rv = KC_ENOMEM;
		if (rv == 0) {
			/* --json: the two parts apart. */
			cJSON *o = cJSON_CreateObject();
			cJSON_AddStringToObject(o, "task", req->task_id);
			cJSON_AddStringToObject(o, "repair_chain", chain);
			cJSON_AddStringToObject(o, "opt_history", hist);
			if ((rv = memory_json_out(o, &json)) == 0)
				memory_take_data(&resp->data, json);
		}
		free(chain);
		free(hist);
	} else {
		rv = kc_seterr(KC_EINVAL,
		    "unknown memory query '%s' (use stats, methods, explain, "
		    "import, export, short_term)",
		    q);
	}
	free(arg);
	return rv;
}
