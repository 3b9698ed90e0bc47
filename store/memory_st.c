/*
 * memory_st.c - short-term memory: records per task, and the bounded
 * renderings for the Diagnoser's and the Planner's prompts. See
 * memory_st.h.
 */
#include "memory_st.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kc_err.h"
#include "kc_util.h"

#define MEMST_MAX_TASK_ID 128
/* Field limits inside one detailed entry of a rendering. */
#define MEMST_DETAIL_FIELD 700
#define MEMST_SHORT_FIELD 120
/* Room kept for the "(n older ... omitted)" line. */
#define MEMST_OMIT_RESERVE 72

/* ------------------------------------------------------------- records */

static int
memst_check_task(const char *task_id)
{
	if (task_id == NULL || *task_id == '\0' ||
	    strlen(task_id) > MEMST_MAX_TASK_ID)
		return kc_seterr(KC_EINVAL,
		    "short-term memory: task id must be 1 to %d characters",
		    MEMST_MAX_TASK_ID);
	return 0;
}

/* task id + '\0' (+ seq); returns the length written. */
static size_t
memst_key(uint8_t *key, const char *task_id, bool with_seq, uint64_t seq)
{
	size_t n = strlen(task_id) + 1;

	memcpy(key, task_id, n);
	if (with_seq) {
		store_key_u64(key + n, seq);
		n += 8;
	}
	return n;
}

/* Cuts s to at most max bytes without splitting a UTF-8 sequence. */
static size_t
memst_utf8_cut(const char *s, size_t len, size_t max)
{
	if (len <= max)
		return len;
	while (max > 0 && ((unsigned char)s[max] & 0xC0) == 0x80)
		max--;
	return max;
}

static int
memst_add_str(cJSON *o, const char *key, const char *v)
{
	char *cut;
	size_t n;
	cJSON *item;

	if (v == NULL)
		return 0;
	n = memst_utf8_cut(v, strlen(v), MEMST_MAX_FIELD_BYTES);
	if ((cut = strndup(v, n)) == NULL)
		return KC_ENOMEM;
	item = cJSON_AddStringToObject(o, key, cut);
	free(cut);
	return item != NULL ? 0 : KC_ENOMEM;
}

static int
memst_encode(const memst_record *r, char **out)
{
	cJSON *o = cJSON_CreateObject();
	int rv = 0;

	*out = NULL;
	if (o == NULL)
		return KC_ENOMEM;
	if (cJSON_AddNumberToObject(o, "kind", r->kind) == NULL ||
	    cJSON_AddNumberToObject(o, "time",
	        (double)(r->time_unix_ms ? r->time_unix_ms : kc_now_ms())) ==
	        NULL ||
	    cJSON_AddNumberToObject(o, "round", r->round) == NULL ||
	    cJSON_AddBoolToObject(o, "passed", r->passed) == NULL ||
	    cJSON_AddNumberToObject(
	        o, "speedup", isfinite(r->speedup) ? r->speedup : 0) == NULL ||
	    cJSON_AddNumberToObject(o, "ms", isfinite(r->ms) ? r->ms : 0) ==
	        NULL)
		rv = KC_ENOMEM;
	if (rv == 0)
		rv = memst_add_str(o, "kernel_id", r->kernel_id);
	if (rv == 0)
		rv = memst_add_str(o, "status", r->status);
	if (rv == 0)
		rv = memst_add_str(o, "failure", r->failure);
	if (rv == 0)
		rv = memst_add_str(o, "diagnosis", r->diagnosis);
	if (rv == 0)
		rv = memst_add_str(o, "fix", r->fix);
	if (rv == 0)
		rv = memst_add_str(o, "result_id", r->result_id);
	if (rv == 0)
		rv = memst_add_str(o, "outcome", r->outcome);
	if (rv == 0)
		rv = memst_add_str(o, "base_id", r->base_id);
	if (rv == 0)
		rv = memst_add_str(o, "method", r->method);
	if (rv == 0)
		rv = memst_add_str(o, "plan", r->plan);
	if (rv == 0 && (*out = cJSON_PrintUnformatted(o)) == NULL)
		rv = KC_ENOMEM;
	cJSON_Delete(o);
	return rv;
}

static int
memst_get_str(const cJSON *o, const char *key, char **out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	*out = NULL;
	if (!cJSON_IsString(v))
		return 0;
	return (*out = strdup(v->valuestring)) != NULL ? 0 : KC_ENOMEM;
}

static double
memst_get_num(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static void
memst_record_free(memst_record *r)
{
	free(r->kernel_id);
	free(r->status);
	free(r->failure);
	free(r->diagnosis);
	free(r->fix);
	free(r->result_id);
	free(r->outcome);
	free(r->base_id);
	free(r->method);
	free(r->plan);
}

static int
memst_decode(const void *val, size_t vlen, memst_record *r)
{
	char *text = strndup(val, vlen);
	cJSON *o;
	int rv = 0;

	memset(r, 0, sizeof(*r));
	if (text == NULL)
		return KC_ENOMEM;
	o = cJSON_Parse(text);
	free(text);
	if (o == NULL)
		return kc_seterr(
		    KC_ESTORE, "short-term memory: a record does not parse");
	r->kind = (memst_kind)(int)memst_get_num(o, "kind");
	r->time_unix_ms = (uint64_t)memst_get_num(o, "time");
	r->round = (uint32_t)memst_get_num(o, "round");
	r->passed = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "passed"));
	r->speedup = memst_get_num(o, "speedup");
	r->ms = memst_get_num(o, "ms");
	if ((rv = memst_get_str(o, "kernel_id", &r->kernel_id)) != 0 ||
	    (rv = memst_get_str(o, "status", &r->status)) != 0 ||
	    (rv = memst_get_str(o, "failure", &r->failure)) != 0 ||
	    (rv = memst_get_str(o, "diagnosis", &r->diagnosis)) != 0 ||
	    (rv = memst_get_str(o, "fix", &r->fix)) != 0 ||
	    (rv = memst_get_str(o, "result_id", &r->result_id)) != 0 ||
	    (rv = memst_get_str(o, "outcome", &r->outcome)) != 0 ||
	    (rv = memst_get_str(o, "base_id", &r->base_id)) != 0 ||
	    (rv = memst_get_str(o, "method", &r->method)) != 0 ||
	    (rv = memst_get_str(o, "plan", &r->plan)) != 0)
		memst_record_free(r);
	cJSON_Delete(o);
	return rv;
}

int
memst_next_seq(store *s, const char *task_id, uint64_t *seq)
{
	uint8_t prefix[MEMST_MAX_TASK_ID + 1];
	void *key = NULL;
	size_t plen, klen = 0;
	int rv;

	*seq = 1;
	if ((rv = memst_check_task(task_id)) != 0)
		return rv;
	plen = memst_key(prefix, task_id, false, 0);
	rv = store_last_key(s, STORE_CF_SHORT_TERM, prefix, plen, &key, &klen);
	if (rv == KC_ENOENT)
		return 0;
	if (rv != 0)
		return rv;
	if (klen == plen + 8)
		*seq = store_key_get_u64((const uint8_t *)key + plen) + 1;
	free(key);
	return 0;
}

static int
memst_check_record(const memst_record *r)
{
	if (r == NULL || (r->kind != MEMST_REPAIR && r->kind != MEMST_OPT))
		return kc_seterr(KC_EINVAL,
		    "short-term memory: a record is MEMST_REPAIR or MEMST_OPT");
	return 0;
}

int
memst_put(
    store_batch *b, const char *task_id, uint64_t seq, const memst_record *r)
{
	uint8_t key[MEMST_MAX_TASK_ID + 9];
	size_t klen;
	char *val;
	int rv;

	if ((rv = memst_check_task(task_id)) != 0 ||
	    (rv = memst_check_record(r)) != 0)
		return rv;
	klen = memst_key(key, task_id, true, seq);
	if ((rv = memst_encode(r, &val)) != 0)
		return rv;
	rv = store_batch_put(
	    b, STORE_CF_SHORT_TERM, key, klen, val, strlen(val));
	free(val);
	return rv;
}

int
memst_append(
    store *s, const char *task_id, const memst_record *r, uint64_t *seq)
{
	store_batch *b = NULL;
	uint64_t n;
	int rv;

	if ((rv = memst_next_seq(s, task_id, &n)) != 0 ||
	    (rv = store_batch_new(&b)) != 0)
		return rv;
	if ((rv = memst_put(b, task_id, n, r)) == 0 &&
	    (rv = store_batch_commit(s, b, true)) == 0 && seq != NULL)
		*seq = n;
	store_batch_free(b);
	return rv;
}

static int
memst_load_fn(
    void *arg, const void *key, size_t klen, const void *val, size_t vlen)
{
	memst_list *l = arg;
	memst_record *nv;
	int rv;

	if (klen < 9)
		return 0;
	if ((nv = realloc(l->recs, (l->n + 1) * sizeof(*nv))) == NULL)
		return KC_ENOMEM;
	l->recs = nv;
	if ((rv = memst_decode(val, vlen, &l->recs[l->n])) != 0)
		return rv == KC_ENOMEM ? rv : 0; /* skip a damaged record */
	l->recs[l->n].seq = store_key_get_u64((const uint8_t *)key + klen - 8);
	l->n++;
	return 0;
}

int
memst_load(store *s, const char *task_id, memst_list *out)
{
	uint8_t prefix[MEMST_MAX_TASK_ID + 1];
	size_t plen;
	int rv;

	memset(out, 0, sizeof(*out));
	if ((rv = memst_check_task(task_id)) != 0)
		return rv;
	plen = memst_key(prefix, task_id, false, 0);
	rv = store_scan(
	    s, STORE_CF_SHORT_TERM, prefix, plen, NULL, 0, memst_load_fn, out);
	if (rv != 0)
		memst_list_free(out);
	return rv;
}

void
memst_list_free(memst_list *l)
{
	if (l == NULL)
		return;
	for (size_t i = 0; i < l->n; i++)
		memst_record_free(&l->recs[i]);
	free(l->recs);
	l->recs = NULL;
	l->n = 0;
}

typedef struct {
	store_batch *b;
} memst_delete_ctx;

static int
memst_delete_fn(
    void *arg, const void *key, size_t klen, const void *val, size_t vlen)
{
	memst_delete_ctx *c = arg;

	(void)val;
	(void)vlen;
	return store_batch_delete(c->b, STORE_CF_SHORT_TERM, key, klen);
}

int
memst_delete_task(store *s, store_batch *b, const char *task_id)
{
	uint8_t prefix[MEMST_MAX_TASK_ID + 1];
	memst_delete_ctx c = {.b = b};
	size_t plen;
	int rv;

	if ((rv = memst_check_task(task_id)) != 0)
		return rv;
	if (b == NULL && (rv = store_batch_new(&c.b)) != 0)
		return rv;
	plen = memst_key(prefix, task_id, false, 0);
	rv = store_scan(
	    s, STORE_CF_SHORT_TERM, prefix, plen, NULL, 0, memst_delete_fn, &c);
	if (rv == 0 && b == NULL)
		rv = store_batch_commit(s, c.b, true);
	if (b == NULL)
		store_batch_free(c.b);
	return rv;
}

/* ----------------------------------------------------------- rendering */

/* Appends at most max bytes of v on one line (newlines become spaces),
 * marking a cut with "...". */
static int
memst_append_field(kc_str *s, const char *v, size_t max)
{
	size_t len, n;
	int rv = 0;

	if (v == NULL || *v == '\0')
		return kc_str_append(s, "-");
	len = strlen(v);
	n = memst_utf8_cut(v, len, max);
	for (size_t i = 0; i < n && rv == 0; i++) {
		char c =
		    v[i] == '\n' || v[i] == '\r' || v[i] == '\t' ? ' ' : v[i];
		rv = kc_str_appendn(s, &c, 1);
	}
	if (rv == 0 && n < len)
		rv = kc_str_append(s, "...");
	return rv;
}

/* One entry of a rendering in two sizes. */
typedef struct {
	kc_str full;
	kc_str brief;
} memst_entry;

static int
memst_repair_entry(const memst_record *r, size_t n, memst_entry *e)
{
	int rv = 0;

	rv |= kc_str_printf(&e->full, "attempt %zu (round %u): kernel %s ", n,
	    r->round, r->kernel_id ? r->kernel_id : "?");
	rv |=
	    kc_str_printf(&e->full, "failed %s: ", r->status ? r->status : "?");
	rv |= memst_append_field(&e->full, r->failure, MEMST_DETAIL_FIELD);
	rv |= kc_str_append(&e->full, "\n  diagnosis: ");
	rv |= memst_append_field(&e->full, r->diagnosis, MEMST_DETAIL_FIELD);
	rv |= kc_str_append(&e->full, "\n  fix: ");
	rv |= memst_append_field(&e->full, r->fix, MEMST_DETAIL_FIELD);
	rv |= kc_str_printf(&e->full, "\n  outcome: %s%s",
	    r->result_id ? r->result_id : "", r->result_id ? " " : "");
	rv |= kc_str_append(&e->full, r->passed ? "PASSED " : "");
	rv |= memst_append_field(&e->full, r->outcome, MEMST_DETAIL_FIELD);
	rv |= kc_str_append(&e->full, "\n");

	rv |= kc_str_printf(&e->brief, "attempt %zu: %s; fix: ", n,
	    r->status ? r->status : "?");
	rv |= memst_append_field(&e->brief, r->fix, MEMST_SHORT_FIELD);
	rv |= kc_str_append(&e->brief, r->passed ? " -> PASSED: " : " -> ");
	rv |= memst_append_field(&e->brief, r->outcome, MEMST_SHORT_FIELD);
	rv |= kc_str_append(&e->brief, "\n");
	return rv != 0 ? KC_ENOMEM : 0;
}

static int
memst_opt_entry(
    const memst_record *r, size_t n, bool other_base, memst_entry *e)
{
	char sp[48] = "";
	int rv = 0;

	if (r->speedup > 0)
		snprintf(sp, sizeof(sp), ", %.3gx vs its base", r->speedup);
	if (r->ms > 0)
		snprintf(sp + strlen(sp), sizeof(sp) - strlen(sp), ", %.4g ms",
		    r->ms);
	rv |= kc_str_printf(&e->full, "attempt %zu (round %u): method %s", n,
	    r->round, r->method ? r->method : "?");
	if (other_base)
		rv |= kc_str_printf(
		    &e->full, " on base %s", r->base_id ? r->base_id : "?");
	rv |= kc_str_append(&e->full, "\n  plan: ");
	rv |= memst_append_field(&e->full, r->plan, MEMST_DETAIL_FIELD);
	rv |= kc_str_printf(&e->full,
	    "\n  result: kernel %s %s%s: ", r->kernel_id ? r->kernel_id : "?",
	    r->status ? r->status : "?", sp);
	rv |= memst_append_field(&e->full, r->outcome, MEMST_DETAIL_FIELD);
	rv |= kc_str_append(&e->full, "\n");

	rv |= kc_str_printf(&e->brief, "- %s%s%s: %s%s",
	    r->method ? r->method : "?", other_base ? " on base " : "",
	    other_base ? (r->base_id ? r->base_id : "?") : "",
	    r->status ? r->status : "?", sp);
	rv |= kc_str_append(&e->brief, "; ");
	rv |= memst_append_field(&e->brief, r->outcome, MEMST_SHORT_FIELD);
	rv |= kc_str_append(&e->brief, "\n");
	return rv != 0 ? KC_ENOMEM : 0;
}

static void
memst_entries_free(memst_entry *e, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		kc_str_free(&e[i].full);
		kc_str_free(&e[i].brief);
	}
	free(e);
}

/*
 * Renders entries (oldest first) into out within budget bytes: the newest
 * in full while they fit, then brief, and a count of the dropped oldest.
 * detailed says how many of the newest may be shown in full at most.
 */
static int
memst_render_entries(kc_str *out, memst_entry *e, size_t n, size_t budget,
    size_t detailed, const char *what)
{
	/* form[i]: 0 dropped, 1 brief, 2 full */
	unsigned char *form = calloc(n + 1, 1);
	size_t used = 0, dropped = 0, nfull = 0;
	bool brief_only = false;
	int rv = 0;

	if (form == NULL)
		return KC_ENOMEM;
	if (budget > MEMST_OMIT_RESERVE)
		budget -= MEMST_OMIT_RESERVE;
	else
		budget = 0;
	for (size_t i = n; i > 0; i--) {
		memst_entry *x = &e[i - 1];
		if (!brief_only && nfull < detailed &&
		    used + x->full.len <= budget) {
			form[i - 1] = 2;
			used += x->full.len;
			nfull++;
			continue;
		}
		/* The newest entry matters most: rather than summarise it,
		 * cut its detail to two thirds of the budget. */
		if (i == n && detailed > 0 && budget >= 3 * x->brief.len) {
			size_t keep = memst_utf8_cut(
			    x->full.buf, x->full.len, budget * 2 / 3 - 5);
			x->full.buf[keep] = '\0';
			x->full.len = keep;
			if (kc_str_append(&x->full, "...\n") != 0) {
				free(form);
				return KC_ENOMEM;
			}
			form[i - 1] = 2;
			used += x->full.len;
			nfull++;
			continue;
		}
		/* Once one is summarised, older ones are too: detail goes
		 * to the newest. */
		brief_only = true;
		if (used + x->brief.len <= budget) {
			form[i - 1] = 1;
			used += x->brief.len;
			continue;
		}
		dropped = i;
		break;
	}
	if (dropped > 0)
		rv |= kc_str_printf(
		    out, "(%zu older %s omitted)\n", dropped, what);
	for (size_t i = 0; i < n && rv == 0; i++) {
		if (form[i] == 2)
			rv = kc_str_appendn(out, e[i].full.buf, e[i].full.len);
		else if (form[i] == 1)
			rv =
			    kc_str_appendn(out, e[i].brief.buf, e[i].brief.len);
	}
	free(form);
	return rv != 0 ? KC_ENOMEM : 0;
}

/* Hands out the text, cut to max bytes as the last guarantee. */
static int
memst_finish(kc_str *s, size_t max, char **out)
{
	if (s->len > max) {
		size_t n = memst_utf8_cut(s->buf, s->len, max);
		s->buf[n] = '\0';
		s->len = n;
	}
	*out = kc_str_take(s);
	return *out != NULL ? 0 : KC_ENOMEM;
}

int
memst_render_repair_chain(const memst_list *l, size_t max_bytes, char **out)
{
	memst_entry *open = NULL, *closed = NULL;
	size_t nopen = 0, nclosed = 0, chain_len = 0, first_open = 0;
	kc_str s = {0}, closed_text = {0};
	int rv = 0;

	*out = NULL;
	if (max_bytes == 0)
		max_bytes = MEMST_DEFAULT_BYTES;
	/* The open chain starts after the last record that passed. */
	for (size_t i = 0; i < l->n; i++)
		if (l->recs[i].kind == MEMST_REPAIR && l->recs[i].passed)
			first_open = i + 1;
	open = calloc(l->n + 1, sizeof(*open));
	closed = calloc(l->n + 1, sizeof(*closed));
	if (open == NULL || closed == NULL) {
		rv = KC_ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < l->n && rv == 0; i++) {
		const memst_record *r = &l->recs[i];
		if (r->kind != MEMST_REPAIR)
			continue;
		chain_len++;
		if (i >= first_open) {
			rv = memst_repair_entry(r, chain_len, &open[nopen++]);
			continue;
		}
		if (!r->passed)
			continue;
		/* One line per closed chain: how long, what fixed it. */
		memst_entry *e = &closed[nclosed++];
		rv |= kc_str_printf(&e->brief,
		    "- %zu attempt%s, ended when kernel %s passed; last fix: ",
		    chain_len, chain_len == 1 ? "" : "s",
		    r->result_id ? r->result_id : "?");
		rv |= memst_append_field(&e->brief, r->fix, MEMST_SHORT_FIELD);
		rv |= kc_str_append(&e->brief, "\n");
		rv |= kc_str_appendn(&e->full, e->brief.buf, e->brief.len);
		chain_len = 0;
	}
	if (rv != 0) {
		rv = KC_ENOMEM;
		goto out;
	}
	if (nopen == 0 && nclosed == 0)
		goto done;
	/* Closed chains get at most a quarter of the budget. */
	if (nclosed > 0 &&
	    ((rv = kc_str_append(&closed_text,
	          "Earlier repair chains of this task:\n")) != 0 ||
	        (rv = memst_render_entries(&closed_text, closed, nclosed,
	             max_bytes / 4 > 40 ? max_bytes / 4 - 40 : 0, nclosed,
	             "chains")) != 0))
		goto out;
	if (nopen > 0) {
		size_t budget = max_bytes - closed_text.len;
		rv = kc_str_printf(&s,
		    "Current repair chain: %zu earlier attempt%s failed; do "
		    "not "
		    "repeat a fix that did not work.\n",
		    nopen, nopen == 1 ? "" : "s");
		if (rv == 0)
			rv = memst_render_entries(&s, open, nopen,
			    budget > s.len ? budget - s.len : 0, nopen,
			    "attempts");
	} else {
		rv = kc_str_append(&s,
		    "No open repair chain: the last failing kernel was "
		    "repaired.\n");
	}
	if (rv == 0 && closed_text.len > 0)
		rv = kc_str_appendn(&s, closed_text.buf, closed_text.len);
	if (rv != 0)
		goto out;
done:
	rv = memst_finish(&s, max_bytes, out);
out:
	kc_str_free(&s);
	kc_str_free(&closed_text);
	if (open != NULL)
		memst_entries_free(open, nopen);
	if (closed != NULL)
		memst_entries_free(closed, nclosed);
	return rv;
}

int
memst_render_opt_history(
    const memst_list *l, const char *base_id, size_t max_bytes, char **out)
{
	memst_entry *cur = NULL, *old = NULL;
	size_t ncur = 0, nold = 0;
	kc_str s = {0}, old_text = {0};
	int rv = 0;

	*out = NULL;
	if (max_bytes == 0)
		max_bytes = MEMST_DEFAULT_BYTES;
	cur = calloc(l->n + 1, sizeof(*cur));
	old = calloc(l->n + 1, sizeof(*old));
	if (cur == NULL || old == NULL) {
		rv = KC_ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < l->n && rv == 0; i++) {
		const memst_record *r = &l->recs[i];
		bool mine;
		if (r->kind != MEMST_OPT)
			continue;
		mine = base_id == NULL ||
		    (r->base_id != NULL && strcmp(r->base_id, base_id) == 0);
		if (mine) {
			rv = memst_opt_entry(r, ncur + 1, false, &cur[ncur]);
			ncur++;
			continue;
		}
		rv = memst_opt_entry(r, nold + 1, true, &old[nold]);
		nold++;
	}
	if (rv != 0)
		goto out;
	if (ncur == 0 && nold == 0)
		goto done;
	if (nold > 0 &&
	    ((rv = kc_str_printf(&old_text,
	          "Attempts on earlier base kernels (%zu):\n", nold)) != 0 ||
	        (rv = memst_render_entries(&old_text, old, nold,
	             max_bytes / 3 > 48 ? max_bytes / 3 - 48 : 0, 0,
	             "attempts")) != 0))
		goto out;
	if (ncur > 0) {
		size_t budget = max_bytes - old_text.len;
		rv = kc_str_printf(&s,
		    "Optimisation attempts on base %s (%zu); do not repeat one "
		    "that failed or did not help:\n",
		    base_id ? base_id : "(all)", ncur);
		if (rv == 0)
			rv = memst_render_entries(&s, cur, ncur,
			    budget > s.len ? budget - s.len : 0, ncur,
			    "attempts");
	} else {
		rv = kc_str_printf(&s, "No attempts on base %s yet.\n",
		    base_id ? base_id : "?");
	}
	if (rv == 0 && old_text.len > 0)
		rv = kc_str_appendn(&s, old_text.buf, old_text.len);
	if (rv != 0)
		goto out;
done:
	rv = memst_finish(&s, max_bytes, out);
out:
	kc_str_free(&s);
	kc_str_free(&old_text);
	if (cur != NULL)
		memst_entries_free(cur, ncur);
	if (old != NULL)
		memst_entries_free(old, nold);
	return rv;
}

int
memst_repair_chain_text(
    store *s, const char *task_id, size_t max_bytes, char **out)
{
	memst_list l;
	int rv;

	*out = NULL;
	if ((rv = memst_load(s, task_id, &l)) != 0)
		return rv;
	rv = memst_render_repair_chain(&l, max_bytes, out);
	memst_list_free(&l);
	return rv;
}

int
memst_opt_history_text(store *s, const char *task_id, const char *base_id,
    size_t max_bytes, char **out)
{
	memst_list l;
	int rv;

	*out = NULL;
	if ((rv = memst_load(s, task_id, &l)) != 0)
		return rv;
	rv = memst_render_opt_history(&l, base_id, max_bytes, out);
	memst_list_free(&l);
	return rv;
}
