/*
 * orch_memory.c - the orchestrator's own memory seam (orch.h orch_memory_ops):
 * short-term records in STORE_CF_SHORT_TERM under task id + '\0' + the
 * round (big-endian), kept as the text the agents are shown, and bounded
 * renderings of the open repair chain and of a base's optimisation
 * attempts. It does no long-term retrieval: the Planner then plans from
 * the kernel, its evaluation and its history alone.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kc_err.h"
#include "kc_util.h"
#include "orch.h"

static void
mem_key(const char *task_id, uint32_t round, uint8_t *key, size_t *klen)
{
	size_t n = strlen(task_id);

	memcpy(key, task_id, n);
	key[n] = '\0';
	store_key_u64(key + n + 1, round);
	*klen = n + 9;
}

static const char *
mem_s(const char *s)
{
	return s ? s : "";
}

/* Value: kind, tab, base id, tab, passed, newline, the text. */
static int
mem_record(void *arg, store *s, store_batch *b, const char *task_id,
    const orch_memory_record *r)
{
	uint8_t key[64];
	size_t klen;
	kc_str v = {0};
	int rv;

	(void)arg;
	(void)s;
	mem_key(task_id, r->round, key, &klen);
	kc_str_printf(
	    &v, "%d\t%s\t%d\n", r->kind, mem_s(r->base_id), r->passed);
	if (r->kind == 1)
		kc_str_printf(&v,
		    "round %u: kernel %s failed (%s): %.600s\n  diagnosis: "
		    "%.600s\n  fix: %.600s\n  -> %s: %.600s\n",
		    r->round, mem_s(r->kernel_id), mem_s(r->status),
		    mem_s(r->failure), mem_s(r->diagnosis), mem_s(r->fix),
		    mem_s(r->result_id), mem_s(r->outcome));
	else
		kc_str_printf(&v,
		    "round %u: %s on base %s -> %s: %s, %.4f ms, %.3fx over "
		    "the base\n  plan: %.800s\n",
		    r->round, mem_s(r->method), mem_s(r->base_id),
		    mem_s(r->kernel_id), mem_s(r->status), r->ms, r->speedup,
		    mem_s(r->plan));
	if (v.buf == NULL)
		return KC_ENOMEM;
	rv = store_batch_put(b, STORE_CF_SHORT_TERM, key, klen, v.buf, v.len);
	kc_str_free(&v);
	return rv;
}

struct mem_scan {
	char **vals;
	size_t n, cap;
};

static int
mem_collect(
    void *arg, const void *key, size_t klen, const void *val, size_t vlen)
{
	struct mem_scan *m = arg;
	char *v;

	(void)key;
	(void)klen;
	if (m->n == m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 16;
		char **p = realloc(m->vals, cap * sizeof(*p));
		if (p == NULL)
			return KC_ENOMEM;
		m->vals = p;
		m->cap = cap;
	}
	if ((v = strndup(val, vlen)) == NULL)
		return KC_ENOMEM;
	m->vals[m->n++] = v;
	return 0;
}

static int
mem_load(store *s, const char *task_id, struct mem_scan *m)
{
	uint8_t prefix[64];
	size_t n = strlen(task_id);

	memcpy(prefix, task_id, n);
	prefix[n] = '\0';
	return store_scan(
	    s, STORE_CF_SHORT_TERM, prefix, n + 1, NULL, 0, mem_collect, m);
}

static void
mem_free(struct mem_scan *m)
{
	for (size_t i = 0; i < m->n; i++)
		free(m->vals[i]);
	free(m->vals);
}

/* Renders the selected records newest first within max bytes; the ones
 * that do not fit are counted. */
static int
mem_render(struct mem_scan *m, const bool *sel, size_t max, const char *what,
    char **out)
{
	kc_str s = {0};
	size_t dropped = 0;

	for (size_t i = m->n; i-- > 0;) {
		const char *text;
		if (!sel[i])
			continue;
		text = strchr(m->vals[i], '\n');
		text = text ? text + 1 : "";
		if (s.len + strlen(text) + 80 > max) {
			dropped++;
			continue;
		}
		kc_str_append(&s, text);
	}
	if (dropped)
		kc_str_printf(&s, "(%zu older %s not shown)\n", dropped, what);
	*out = s.buf ? kc_str_take(&s) : strdup("");
	return *out ? 0 : KC_ENOMEM;
}

static int
mem_repair_chain(
    void *arg, store *s, const char *task_id, size_t max, char **out)
{
	struct mem_scan m = {0};
	bool *sel;
	size_t open = 0;
	int rv;

	(void)arg;
	if ((rv = mem_load(s, task_id, &m)) != 0) {
		mem_free(&m);
		return rv;
	}
	/* The open chain: repair records after the last one that passed. */
	for (size_t i = 0; i < m.n; i++) {
		int kind = 0, passed = 0;
		char base[64];
		if (sscanf(m.vals[i], "%d\t%63[^\t]\t%d", &kind, base,
		        &passed) < 1)
			continue;
		if (kind == 1 && passed)
			open = i + 1;
	}
	if ((sel = calloc(m.n + 1, sizeof(*sel))) == NULL) {
		mem_free(&m);
		return KC_ENOMEM;
	}
	for (size_t i = open; i < m.n; i++)
		sel[i] = m.vals[i][0] == '1';
	rv = mem_render(&m, sel, max, "repair attempts", out);
	free(sel);
	mem_free(&m);
	return rv;
}

static int
mem_opt_history(void *arg, store *s, const char *task_id, const char *base_id,
    size_t max, char **out)
{
	struct mem_scan m = {0};
	bool *sel;
	int rv;

	(void)arg;
	if ((rv = mem_load(s, task_id, &m)) != 0) {
		mem_free(&m);
		return rv;
	}
	if ((sel = calloc(m.n + 1, sizeof(*sel))) == NULL) {
		mem_free(&m);
		return KC_ENOMEM;
	}
	for (size_t i = 0; i < m.n; i++) {
		const char *tab = strchr(m.vals[i], '\t');
		size_t bl = strlen(base_id);
		sel[i] = m.vals[i][0] == '2' && tab &&
		    strncmp(tab + 1, base_id, bl) == 0 && tab[1 + bl] == '\t';
	}
	rv = mem_render(&m, sel, max, "attempts on this base", out);
	free(sel);
	mem_free(&m);
	return rv;
}

static int
mem_retrieve(void *arg, store *s, const Kclaw__CandidateRecord *base,
    const orch_retrieve_ctx *ctx, Kclaw__Recommendation ***recs, size_t *n,
    char **signature)
{
	(void)arg;
	(void)s;
	(void)base;
	(void)ctx;
	*recs = NULL;
	*n = 0;
	*signature = strdup("");
	return *signature ? 0 : KC_ENOMEM;
}

static const orch_memory_ops mem_basic_ops = {
    .name = "basic",
    .retrieve = mem_retrieve,
    .record = mem_record,
    .repair_chain = mem_repair_chain,
    .opt_history = mem_opt_history,
    .learn = NULL,
    .query = NULL,
};

const orch_memory_ops *
orch_memory_basic(void)
{
	return &mem_basic_ops;
}
