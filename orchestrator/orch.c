/*
 * orch.c - the loop, the tasks, their transitions and store records.
 *
 * Store layout (STORE_CF_TASKS keys never hold '/' except the per-task
 * records):
 *   TASKS       <task id>            TaskRecord (without its spec)
 *               <task id>/spec       TaskSpec
 *               <task id>/plan       the Planner's last OptPlan
 *               <task id>/diag       the Diagnoser's last Diagnosis
 *   CANDIDATES  <task id>/<cand id>  CandidateRecord ("<task id>-c0007")
 *   JOBS        <task id>-j<n>       orch_job_rec: a job in flight
 *   EVENTS      u64 seq (BE)         Event
 *   SHORT_TERM  through the memory seam
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kc_err.h"
#include "kc_log.h"
#include "kc_util.h"
#include "spec_check.h"
#include "api.h"
#include "blobs.h"
#include "orch_int.h"
#include "upload.h"

/* ---------------------------------------------------------- options */

static bool
orch_json_num(const cJSON *o, const char *key, double lo, double hi, double *v)
{
	const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);

	if (j == NULL)
		return true;
	if (!cJSON_IsNumber(j) || j->valuedouble < lo || j->valuedouble > hi)
		return false;
	*v = j->valuedouble;
	return true;
}

/* kclaw.json's "orchestrator" "role_timeout_ms": {"generator": ms, ...}. */
static int
orch_options_role_timeouts(
    orch_options *opt, const cJSON *obj, const char *path)
{
	const cJSON *rt =
	    cJSON_GetObjectItemCaseSensitive(obj, "role_timeout_ms");
	const cJSON *j;

	if (rt == NULL)
		return 0;
	if (!cJSON_IsObject(rt))
		return kc_seterr(KC_EINVAL,
		    "%s: orchestrator.role_timeout_ms must be an object of "
		    "role: milliseconds",
		    path);
	cJSON_ArrayForEach(j, rt)
	{
		Kclaw__Role r = orch_role_parse(j->string ? j->string : "");
		if (r == KCLAW__ROLE__ROLE_UNSPECIFIED ||
		    r == KCLAW__ROLE__SANDBOX)
			return kc_seterr(KC_EINVAL,
			    "%s: orchestrator.role_timeout_ms.%s: not an agent "
			    "role (generator, feature, planner, optimizer, "
			    "diagnoser, repairer)",
			    path, j->string ? j->string : "");
		if (!cJSON_IsNumber(j) || j->valuedouble < 100 ||
		    j->valuedouble > 864e5)
			return kc_seterr(KC_EINVAL,
			    "%s: orchestrator.role_timeout_ms.%s must be a "
			    "number in [100, 8.64e+07]",
			    path, j->string);
		opt->role_timeout_ms[r] = (uint32_t)j->valuedouble;
	}
	return 0;
}

/* kclaw.json's "orchestrator" object; absent file or object: defaults. */
static int
orch_options_json(orch_options *opt, const char *path)
{
	static const struct {
		const char *key;
		double lo, hi;
	} keys[] = {{"seeds", 1, ORCH_MAX_SEEDS}, {"rounds", 1, 1e6},
	    {"max_repairs", 1, 1000}, {"rt", 0, 100}, {"at", 0, 1e6},
	    {"job_retries", 0, 100}, {"agent_timeout_ms", 100, 864e5},
	    {"eval_timeout_ms", 100, 864e5}, {"poll_ms", 10, 600e3},
	    {"render_bytes", 256, 1 << 20}, {"tokens", 0, 1e15},
	    {"wall_seconds", 0, 1e9}, {"target_speedup", 0, 1e6},
	    {"profile", 0, 1}, {"max_duplicates", 0, 1000},
	    {"retry_backoff_ms", 0, 36e5}, {"retry_backoff_max_ms", 0, 36e5},
	    {"sm_count", 0, 1e5}, {"explore_share", 0, 1}, {"sol_stop", 0, 1},
	    {"reference_check", 0, 1}, {"upload_idle_ms", 100, 864e5},
	    {"upload_staged_bytes", 1 << 20, 1e15},
	    {"candidates_per_round", 1, ORCH_MAX_WAVE}, {"tune", 0, 1},
	    {"model_outage_ms", 0, 864e5}};
	double v[KC_ARRAY_LEN(keys)];
	const cJSON *obj;
	cJSON *root;
	char *text;
	size_t len;
	int rv = 0;

	if (kc_read_file(path, 1 << 20, &text, &len) != 0) {
		kc_clearerr();
		return 0;
	}
	root = cJSON_ParseWithLength(text, len);
	free(text);
	obj = cJSON_GetObjectItemCaseSensitive(root, "orchestrator");
	if (obj == NULL)
		goto out;
	v[0] = opt->defaults.seeds;
	v[1] = opt->defaults.max_rounds;
	v[2] = opt->defaults.max_repairs;
	v[3] = opt->defaults.rt;
	v[4] = opt->defaults.at;
	v[5] = opt->job_retries;
	v[6] = -1; /* agent_timeout_ms: every role's, when given */
	v[7] = opt->eval_timeout_ms;
	v[8] = opt->poll_ms;
	v[9] = opt->render_bytes;
	v[10] = (double)opt->defaults.token_budget;
	v[11] = opt->wall_seconds;
	v[12] = opt->defaults.target_speedup;
	v[13] = opt->profile;
	v[14] = opt->defaults.max_duplicates;
	v[15] = opt->retry_backoff_ms;
	v[16] = opt->retry_backoff_max_ms;
	v[17] = opt->sm_count;
	v[18] = opt->defaults.explore_share;
	v[19] = opt->defaults.sol_stop;
	v[20] = opt->reference_check;
	v[21] = opt->upload_idle_ms;
	v[22] = (double)opt->upload_staged_bytes;
	v[23] = opt->defaults.candidates_per_round;
	v[24] = opt->defaults.tune;
	v[25] = opt->model_outage_ms;
	for (size_t i = 0; i < KC_ARRAY_LEN(keys); i++)
		if (!orch_json_num(
		        obj, keys[i].key, keys[i].lo, keys[i].hi, &v[i])) {
			rv = kc_seterr(KC_EINVAL,
			    "%s: orchestrator.%s must be a number in "
			    "[%g, %g]",
			    path, keys[i].key, keys[i].lo, keys[i].hi);
			goto out;
		}
	opt->defaults.seeds = (uint32_t)v[0];
	opt->defaults.max_rounds = (uint32_t)v[1];
	opt->defaults.max_repairs = (uint32_t)v[2];
	opt->defaults.rt = v[3];
	opt->defaults.at = v[4];
	opt->job_retries = (uint32_t)v[5];
	if (v[6] >= 0)
		for (int r = KCLAW__ROLE__GENERATOR; r < KCLAW__ROLE__SANDBOX;
		     r++)
			opt->role_timeout_ms[r] = (uint32_t)v[6];
	opt->eval_timeout_ms = (uint32_t)v[7];
	opt->poll_ms = (uint32_t)v[8];
	opt->render_bytes = (uint32_t)v[9];
	opt->defaults.token_budget = (uint64_t)v[10];
	opt->wall_seconds = (uint64_t)v[11];
	opt->defaults.target_speedup = v[12];
	opt->profile = (uint32_t)v[13];
	opt->defaults.max_duplicates = (uint32_t)v[14];
	opt->retry_backoff_ms = (uint32_t)v[15];
	opt->retry_backoff_max_ms = (uint32_t)v[16];
	opt->sm_count = (uint32_t)v[17];
	opt->defaults.explore_share = v[18];
	opt->defaults.sol_stop = v[19];
	opt->reference_check = (uint32_t)v[20];
	opt->upload_idle_ms = (uint32_t)v[21];
	opt->upload_staged_bytes = (uint64_t)v[22];
	opt->defaults.candidates_per_round = (uint32_t)v[23];
	opt->defaults.tune = (uint32_t)v[24];
	opt->model_outage_ms = (uint32_t)v[25];
	rv = orch_options_role_timeouts(opt, obj, path);
out:
	cJSON_Delete(root);
	return rv;
}

/* Deadlines of agent jobs by role: reasoning models take minutes for the
 * roles that write kernels. */
static const uint32_t orch_role_timeout_default_ms[8] = {
    [KCLAW__ROLE__GENERATOR] = 20 * 60 * 1000,
    [KCLAW__ROLE__FEATURE] = 5 * 60 * 1000,
    [KCLAW__ROLE__PLANNER] = 10 * 60 * 1000,
    [KCLAW__ROLE__OPTIMIZER] = 20 * 60 * 1000,
    [KCLAW__ROLE__DIAGNOSER] = 10 * 60 * 1000,
    [KCLAW__ROLE__REPAIRER] = 20 * 60 * 1000,
};

int
orch_options_load(orch_options *opt, const kc_config *cfg)
{
	memset(opt, 0, sizeof(*opt));
	opt->cfg = *cfg;
	orch_params_default(&opt->defaults);
	opt->job_retries = 3;
	memcpy(opt->role_timeout_ms, orch_role_timeout_default_ms,
	    sizeof(opt->role_timeout_ms));
	opt->eval_timeout_ms = 120 * 1000;
	opt->retry_backoff_ms = 1000;
	opt->retry_backoff_max_ms = 30 * 1000;
	/* A provider down for half an hour costs no job its attempts (its
	 * rounds, its seeds): an outage is the provider's, not the task's. */
	opt->model_outage_ms = 30 * 60 * 1000;
	opt->poll_ms = 5000;
	opt->render_bytes = 6000;
	opt->profile = 1;
	opt->reference_check = 1;
	opt->upload_idle_ms = ORCH_UPLOAD_IDLE_DEFAULT_MS;
	opt->upload_staged_bytes = ORCH_UPLOAD_STAGED_DEFAULT;
	opt->memory = orch_memory_kc() ? orch_memory_kc() : orch_memory_basic();
	return orch_options_json(opt, cfg->config_path);
}

/* ------------------------------------------------------------ tasks */

static size_t
orch_hash(const char *id, size_t n)
{
	return (size_t)(kc_fnv1a64(id, strlen(id), 0) % n);
}

struct orch_task *
orch_task_find(orch *o, const char *id)
{
	struct orch_task *t;

	for (t = o->buckets[orch_hash(id, o->nbuckets)]; t; t = t->hnext)
		if (strcmp(t->id, id) == 0)
			return t;
	return NULL;
}

static int
orch_task_add(orch *o, const char *id, const char *name, struct orch_task **out)
{
	struct orch_task *t;
	size_t h;

	if (o->nall == o->capall) {
		size_t cap = o->capall ? o->capall * 2 : 64;
		struct orch_task **a = realloc(o->all, cap * sizeof(*a));
		if (a == NULL)
			return KC_ENOMEM;
		o->all = a;
		o->capall = cap;
	}
	if ((t = calloc(1, sizeof(*t))) == NULL ||
	    (t->name = strdup(name)) == NULL) {
		free(t);
		return KC_ENOMEM;
	}
	kc_strlcpy(t->id, id, sizeof(t->id));
	h = orch_hash(id, o->nbuckets);
	t->hnext = o->buckets[h];
	o->buckets[h] = t;
	o->all[o->nall++] = t;
	o->ntasks++;
	*out = t;
	return 0;
}

void
orch_cand_id(uint32_t n, char out[16])
{
	snprintf(out, 16, "c%04u", n);
}

static void
orch_cand_key(const char *task_id, uint32_t n, char *key, size_t sz)
{
	snprintf(key, sz, "%s/%s-c%04u", task_id, task_id, n);
}

int
orch_cand_get(
    orch *o, const char *task_id, uint32_t n, Kclaw__CandidateRecord **out)
{
	char key[64];
	void *val;
	size_t len;
	int rv;

	orch_cand_key(task_id, n, key, sizeof(key));
	if ((rv = store_get(o->db, STORE_CF_CANDIDATES, key, strlen(key), &val,
	         &len)) != 0)
		return kc_seterr(rv,
		    "task %s: candidate c%04u is not in the "
		    "store",
		    task_id, n);
	*out = kclaw__candidate_record__unpack(NULL, len, val);
	free(val);
	return *out ? 0
	            : kc_seterr(KC_EPROTO, "candidate %s did not decode", key);
}

static int
orch_put_msg(orch *o, store_cf cf, const char *key, const ProtobufCMessage *m)
{
	uint8_t *buf;
	size_t len;
	int rv;

	if ((rv = kc_pb_pack(m, &buf, &len)) != 0)
		return rv;
	rv = store_batch_put(o->batch, cf, key, strlen(key), buf, len);
	free(buf);
	o->staged++;
	return rv;
}

static int
orch_cand_put(
    orch *o, const char *task_id, uint32_t n, const Kclaw__CandidateRecord *r)
{
	char key[64];

	orch_cand_key(task_id, n, key, sizeof(key));
	return orch_put_msg(o, STORE_CF_CANDIDATES, key, &r->base);
}

int
orch_task_aux_get(
    orch *o, const char *task_id, const char *what, void **val, size_t *len)
{
	char key[64];

	snprintf(key, sizeof(key), "%s/%s", task_id, what);
	return store_get(o->db, STORE_CF_TASKS, key, strlen(key), val, len);
}

ProtobufCMessage *
orch_task_aux_msg(orch *o, const char *task_id, const char *what,
    const ProtobufCMessageDescriptor *d)
{
	ProtobufCMessage *m = NULL;
	void *val;
	size_t len;

	if (orch_task_aux_get(o, task_id, what, &val, &len) == 0) {
		m = protobuf_c_message_unpack(d, NULL, len, val);
		free(val);
	}
	return m;
}

int
orch_spec_get(orch *o, const char *task_id, Kclaw__TaskSpec **out)
{
	void *val;
	size_t len;
	int rv;

	if ((rv = orch_task_aux_get(o, task_id, "spec", &val, &len)) != 0)
		return kc_seterr(
		    rv, "task %s has no spec in the store", task_id);
	*out = kclaw__task_spec__unpack(NULL, len, val);
	free(val);
	return *out
	    ? 0
	    : kc_seterr(KC_EPROTO, "task %s: spec did not decode", task_id);
}

const char *
orch_eval_status_name(Kclaw__EvalStatus st)
{
	const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(
	    &kclaw__eval_status__descriptor, st);

	return v ? v->name : "UNKNOWN";
}

/* -------------------------------------------------------------- events */

static char *
orch_lower(const char *s, char *out, size_t n)
{
	size_t i;

	for (i = 0; s[i] && i + 1 < n; i++)
		out[i] = (char)(s[i] >= 'A' && s[i] <= 'Z' ? s[i] + 32 : s[i]);
	out[i] = '\0';
	return out;
}

static void
orch_publish(orch *o, const Kclaw__Event *ev)
{
	const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(
	    &kclaw__event_kind__descriptor, ev->kind);
	char topic[160], kind[40];
	uint8_t *buf;
	size_t len;

	orch_lower(v ? v->name : "unknown", kind, sizeof(kind));
	if (ev->task_id && *ev->task_id)
		snprintf(topic, sizeof(topic), "task.%s.%s", ev->task_id, kind);
	else
		snprintf(topic, sizeof(topic), "system.%s", kind);
	if (kc_pb_pack(&ev->base, &buf, &len) != 0)
		return;
	if (bus_pub_send(o->pub, topic, buf, len) != 0)
		KC_DEBUG("event %llu not published: %s",
		    (unsigned long long)ev->seq, kc_lasterr());
	free(buf);
}

/* Takes ev (allocated with its strings by the caller's helpers). */
int
orch_event(orch *o, Kclaw__Event *ev)
{
	uint8_t key[8];
	int rv;

	ev->seq = ++o->last_seq;
	ev->time_unix_ms = kc_now_ms();
	store_key_u64(key, ev->seq);
	{
		uint8_t *buf;
		size_t len;
		if ((rv = kc_pb_pack(&ev->base, &buf, &len)) != 0)
			return rv;
		rv = store_batch_put(
		    o->batch, STORE_CF_EVENTS, key, sizeof(key), buf, len);
		free(buf);
	}
	o->staged++;
	if (o->npending == o->cappending) {
		size_t cap = o->cappending ? o->cappending * 2 : 64;
		Kclaw__Event **p = realloc(o->pending_events, cap * sizeof(*p));
		if (p == NULL)
			return KC_ENOMEM;
		o->pending_events = p;
		o->cappending = cap;
	}
	o->pending_events[o->npending++] = ev;
	return rv;
}

/* A new event with its own copies of the strings (freed with
 * kclaw__event__free_unpacked). */
static Kclaw__Event *
orch_event_new(
    Kclaw__EventKind kind, const struct orch_task *t, const char *detail)
{
	Kclaw__Event *ev = malloc(sizeof(*ev));

	if (ev == NULL)
		return NULL;
	kclaw__event__init(ev);
	ev->kind = kind;
	ev->task_id = strdup(t ? t->id : "");
	ev->state = strdup(t ? orch_state_name(t->fsm.state) : "");
	ev->round = t ? t->fsm.round : 0;
	ev->detail = strdup(detail ? detail : "");
	ev->candidate_id = strdup("");
	ev->process = strdup("");
	ev->job_id = strdup("");
	return ev;
}

static void
orch_event_set(char **field, const char *v)
{
	free(*field);
	*field = strdup(v ? v : "");
}

/* --------------------------------------------------------------- usage */

/* Prompt and completion tokens of every reply of the task: what the token
 * budget counts. */
static uint64_t
orch_usage_tokens(const struct orch_task *t)
{
	uint64_t n = 0;

	for (int r = 0; r < ORCH_NROLES; r++)
		n += t->usage[r].prompt + t->usage[r].completion;
	return n;
}

/* TaskRecord.usage: one RoleUsage per role that was called, in role order
 * (freed by orch_task_record_free). */
static int
orch_usage_record(const struct orch_task *t, Kclaw__TaskRecord *rec)
{
	size_t n = 0;

	for (int r = 0; r < ORCH_NROLES; r++)
		n += t->usage[r].calls > 0;
	if (n == 0)
		return 0;
	if ((rec->usage = calloc(n, sizeof(*rec->usage))) == NULL)
		return KC_ENOMEM;
	for (int r = 0; r < ORCH_NROLES; r++) {
		const struct orch_usage *u = &t->usage[r];
		Kclaw__RoleUsage *ru;
		if (u->calls == 0)
			continue;
		if ((ru = malloc(sizeof(*ru))) == NULL)
			return KC_ENOMEM;
		kclaw__role_usage__init(ru);
		ru->role = (Kclaw__Role)r;
		if (u->model[0] && (ru->model = strdup(u->model)) == NULL) {
			free(ru);
			return KC_ENOMEM;
		}
		ru->prompt_tokens = u->prompt;
		ru->completion_tokens = u->completion;
		ru->reasoning_tokens = u->reasoning;
		ru->cached_tokens = u->cached;
		ru->cache_write_tokens = u->cache_write;
		ru->calls = u->calls;
		ru->failed_calls = u->failed_calls;
		rec->usage[rec->n_usage++] = ru;
	}
	return 0;
}

/* A stored record's usage back into the task (a resumed orchestrator). */
static void
orch_usage_load(struct orch_task *t, const Kclaw__TaskRecord *rec)
{
	for (size_t i = 0; i < rec->n_usage; i++) {
		const Kclaw__RoleUsage *ru = rec->usage[i];
		struct orch_usage *u;
		if ((unsigned)ru->role >= ORCH_NROLES)
			continue;
		u = &t->usage[ru->role];
		if (ru->model && ru->model[0])
			snprintf(u->model, sizeof(u->model), "%s", ru->model);
		u->prompt += ru->prompt_tokens;
		u->completion += ru->completion_tokens;
		u->reasoning += ru->reasoning_tokens;
		u->cached += ru->cached_tokens;
		u->cache_write += ru->cache_write_tokens;
		u->calls += ru->calls;
		u->failed_calls += ru->failed_calls;
	}
}

/* --------------------------------------------------------- task record */

int
orch_task_record(orch *o, const struct orch_task *t, Kclaw__TaskRecord *rec,
    char **error_out)
{
	char b[16], id[48];
	(void)o;

	kclaw__task_record__init(rec);
	rec->id = strdup(t->id);
	rec->state = strdup(orch_state_name(t->fsm.state));
	rec->round = t->fsm.round;
	orch_cand_id(t->fsm.base, b);
	snprintf(id, sizeof(id), "%s-%s", t->id, b);
	rec->base_id = strdup(t->fsm.base ? id : "");
	orch_cand_id(t->fsm.best, b);
	snprintf(id, sizeof(id), "%s-%s", t->id, b);
	rec->best_id = strdup(t->fsm.best ? id : "");
	rec->base_ms = t->fsm.base_ms;
	rec->best_ms = t->fsm.best_ms;
	rec->reference_median_ms = orch_fsm_ref_median(&t->fsm);
	rec->reference_ms = t->fsm.best_ref_ms > 0 ? t->fsm.best_ref_ms
	                                           : rec->reference_median_ms;
	rec->speedup = t->fsm.best_speedup;
	rec->failed_rounds = t->fsm.failed_rounds;
	rec->reused_evaluations = t->fsm.reused;
	/* Usage not yet seen by the machine (a failed call) counts too. */
	rec->tokens = orch_usage_tokens(t) > t->fsm.tokens
	    ? orch_usage_tokens(t)
	    : t->fsm.tokens;
	rec->torch_compile_ms = t->compile_ms;
	rec->compile_speedup = t->compile_speedup;
	rec->state_detail = strdup(t->detail ? t->detail : "");
	rec->last_agent_error = strdup(t->agent_error ? t->agent_error : "");
	rec->last_agent_error_unix_ms = t->agent_error_ms;
	rec->max_rounds = t->fsm.p.max_rounds;
	rec->token_budget = t->fsm.p.token_budget;
	rec->tune_candidates = t->fsm.tunes;
	rec->tune_promotions = t->fsm.tune_promoted;
	rec->best_from_tune = t->fsm.best && t->fsm.best_tuned;
	rec->waves = t->fsm.waves;
	/* Borrowed: orch_task_record_free leaves it to the task. */
	rec->reference_check = t->refcheck;
	if (orch_usage_record(t, rec) != 0)
		return KC_ENOMEM;
	rec->created_unix_ms = t->created_ms;
	rec->finished_unix_ms = t->finished_ms;
	rec->error = strdup(*error_out ? *error_out : "");
	rec->fsm.data = malloc(sizeof(t->fsm));
	if (rec->fsm.data)
		memcpy(rec->fsm.data, &t->fsm, sizeof(t->fsm));
	rec->fsm.len = sizeof(t->fsm);
	if (!rec->id || !rec->state || !rec->base_id || !rec->best_id ||
	    !rec->error || !rec->fsm.data || !rec->state_detail ||
	    !rec->last_agent_error)
		return KC_ENOMEM;
	return 0;
}

void
orch_task_record_free(Kclaw__TaskRecord *rec)
{
	for (size_t i = 0; i < rec->n_usage; i++)
		free(rec->usage[i]);
	free(rec->usage);
	free(rec->state_detail);
	free(rec->last_agent_error);
	free(rec->id);
	free(rec->state);
	free(rec->base_id);
	free(rec->best_id);
	free(rec->error);
	free(rec->fsm.data);
	kclaw__task_record__init(rec);
}

/* The error text a task's record carries: why it stopped. */
static char *
orch_task_error(const struct orch_task *t, const char *detail)
{
	kc_str s = {0};

	if (!orch_state_final(t->fsm.state) || t->fsm.stop == ORCH_STOP_NONE)
		return NULL;
	if (t->fsm.state == ORCH_ST_DONE && t->fsm.stop != ORCH_STOP_JOB_FAILED)
		kc_str_printf(&s, "stopped: %s", orch_stop_text(t->fsm.stop));
	else
		kc_str_append(&s, orch_stop_text(t->fsm.stop));
	if (t->fsm.stop == ORCH_STOP_SOL)
		kc_str_printf(&s,
		    " (its sol_fraction %.3f >= sol_stop %.3f: within %.0f%% "
		    "of the speed of light)",
		    t->fsm.best_sol, t->fsm.p.sol_stop,
		    100 * (1 - t->fsm.p.sol_stop));
	if (detail && *detail)
		kc_str_printf(&s, ": %s", detail);
	return kc_str_take(&s);
}

static int
orch_task_put(orch *o, struct orch_task *t, const char *detail)
{
	Kclaw__TaskRecord rec;
	char *err = orch_task_error(t, detail);
	int rv;

	if ((rv = orch_task_record(o, t, &rec, &err)) == 0)
		rv = orch_put_msg(o, STORE_CF_TASKS, t->id, &rec.base);
	orch_task_record_free(&rec);
	free(err);
	return rv;
}

void
orch_task_usage(orch *o, struct orch_task *t, const Kclaw__AgentReply *r)
{
	const Kclaw__Usage *u = r->usage;
	struct orch_usage *x;

	if ((unsigned)r->role >= ORCH_NROLES)
		return;
	x = &t->usage[r->role];
	/* A reply without counts was one call; a failed one, one failed
	 * call. */
	x->calls += u && u->calls ? u->calls : 1;
	x->failed_calls += u && u->failed_calls ? u->failed_calls : !r->ok;
	if (u && u->model && u->model[0] && x->model[0] == '\0')
		snprintf(x->model, sizeof(x->model), "%s", u->model);
	if (u) {
		x->prompt += u->prompt_tokens;
		x->completion += u->completion_tokens;
		x->reasoning += u->reasoning_tokens;
		x->cached += u->cached_tokens;
		x->cache_write += u->cache_write_tokens;
	}
	/* Committed with the cycle, whether or not a transition follows (a
	 * failed call is retried without one). */
	if (orch_task_put(o, t, NULL) != 0)
		KC_ERROR(
		    "task %s: usage not recorded: %s", t->id, kc_lasterr());
}

/* ----------------------------------------------------- reference check */

/*
 * Job 0 of every task (docs/orchestrator.md "The reference check"): the
 * reference alone, evaluated once when the task starts seeding, beside the
 * Generator jobs. Its answer is stored with the task and published; the
 * state machine never sees it, so rounds, job numbers and every decision
 * are what they were without it, and its failure fails nothing.
 */

/* rc (strings borrowed) as an unpacked copy the task owns. */
static Kclaw__ReferenceCheck *
orch_refcheck_copy(const Kclaw__ReferenceCheck *rc)
{
	Kclaw__ReferenceCheck *out;
	uint8_t *buf;
	size_t len;

	if (kc_pb_pack(&rc->base, &buf, &len) != 0)
		return NULL;
	out = kclaw__reference_check__unpack(NULL, len, buf);
	free(buf);
	return out;
}

static void
orch_refcheck_set(struct orch_task *t, Kclaw__ReferenceCheck *rc)
{
	if (t->refcheck)
		kclaw__reference_check__free_unpacked(t->refcheck, NULL);
	t->refcheck = rc;
}

/* Queues the reference check (after the commit, with the transition that
 * starts the seeding) and marks it pending. */
static int
orch_refcheck_schedule(orch *o, struct orch_task *t)
{
	orch_action a = {.kind = ORCH_ACT_EVAL,
	    .role = KCLAW__ROLE__SANDBOX,
	    .job = ORCH_REFCHECK_JOB};
	Kclaw__ReferenceCheck rc = KCLAW__REFERENCE_CHECK__INIT, *copy;
	int rv;

	rc.state = KCLAW__REFERENCE_CHECK_STATE__CHECK_PENDING;
	if ((copy = orch_refcheck_copy(&rc)) == NULL)
		return KC_ENOMEM;
	if ((rv = orch_job_new(o, t, &a, true)) != 0) {
		kclaw__reference_check__free_unpacked(copy, NULL);
		return rv;
	}
	orch_refcheck_set(t, copy);
	return 0;
}

/* How many outputs r names degenerate: those of its per-output figures,
 * else (a sandbox older than them) its list of names. */
static size_t
orch_refcheck_ndegen(const Kclaw__EvalResult *r)
{
	size_t n = 0;

	for (size_t i = 0; i < r->n_output_variations; i++)
		n += r->output_variations[i]->degenerate;
	return r->n_output_variations ? n : r->n_degenerate;
}

void
orch_refcheck_done(
    orch *o, struct orch_task *t, const Kclaw__EvalResult *r, const char *why)
{
	Kclaw__ReferenceCheck rc = KCLAW__REFERENCE_CHECK__INIT, *copy;
	Kclaw__DegenerateOutput *dv = NULL, **dp = NULL;
	Kclaw__TaskSpec *spec = NULL;
	size_t nd = 0;
	Kclaw__Event *ev;
	kc_str text = {0};
	char jid[64];

	if (r) {
		rc.state = r->status == KCLAW__EVAL_STATUS__OK
		    ? KCLAW__REFERENCE_CHECK_STATE__CHECK_DONE
		    : KCLAW__REFERENCE_CHECK_STATE__CHECK_FAILED;
		rc.status = r->status;
		rc.message = r->message ? r->message : "";
		rc.output_variation = r->output_variation;
		rc.warnings = r->warnings;
		rc.n_warnings = r->n_warnings;
		rc.reference_ms = r->reference_ms > 0 ? r->reference_ms
		    : r->baseline                     ? r->baseline->median_ms
		                                      : 0;
		rc.torch_compile_ms = r->torch_compile_ms;
		rc.device_name = r->device_name ? r->device_name : "";
		rc.wall_ms = r->wall_ms;
		rc.metrics = r->metrics;
		rc.n_metrics = r->n_metrics;
		rc.output_variations = r->output_variations;
		rc.n_output_variations = r->n_output_variations;
	} else {
		rc.state = KCLAW__REFERENCE_CHECK_STATE__CHECK_FAILED;
		rc.status = KCLAW__EVAL_STATUS__INTERNAL_ERROR;
		rc.message = (char *)(why ? why : "");
	}
	if (r && (nd = orch_refcheck_ndegen(r)) > 0 &&
	    (dv = calloc(nd, sizeof(*dv))) != NULL &&
	    (dp = calloc(nd, sizeof(*dp))) != NULL) {
		size_t n = 0;
		/* The sandbox's own figures per output; from an older one
		 * only the names, their variation unknown (its warnings' text
		 * is for people, not parsed). */
		for (size_t i = 0; i < r->n_output_variations && n < nd; i++) {
			const Kclaw__OutputVariation *v =
			    r->output_variations[i];
			if (!v->degenerate)
				continue;
			kclaw__degenerate_output__init(&dv[n]);
			dv[n].name = v->name;
			dv[n].variation = v->variation;
			dv[n].admits = v->admits;
			n++;
		}
		if (r->n_output_variations == 0) {
			double admits;
			if (orch_spec_get(o, t->id, &spec) != 0)
				kc_clearerr();
			admits =
			    kc_tolerance_admits(spec ? spec->tolerance : NULL);
			for (size_t i = 0; i < r->n_degenerate && n < nd; i++) {
				kclaw__degenerate_output__init(&dv[n]);
				dv[n].name =
				    r->degenerate[i] ? r->degenerate[i] : "";
				dv[n].variation_unknown = 1;
				dv[n].admits = admits;
				n++;
			}
		}
		for (size_t i = 0; i < n; i++)
			dp[i] = &dv[i];
		rc.degenerate = dp;
		rc.n_degenerate = n;
	}
	/* The event's one line; the WARNING when a constant could pass. */
	if (rc.n_degenerate > 0) {
		kc_str_append(&text, "warning: degenerate outputs: ");
		for (size_t i = 0; i < rc.n_degenerate; i++) {
			if (dv[i].variation_unknown)
				kc_str_printf(&text,
				    "%s%s (variation unknown: the sandbox "
				    "reports none per output; tolerance admits "
				    "%.3g)",
				    i ? ", " : "", dv[i].name, dv[i].admits);
			else
				kc_str_printf(&text,
				    "%s%s (varies %.3g between input sets; "
				    "tolerance admits %.3g)",
				    i ? ", " : "", dv[i].name, dv[i].variation,
				    dv[i].admits);
		}
		kc_str_append(&text,
		    ": a constant could pass; tighten the tolerance or widen "
		    "the inputs");
	} else if (rc.state == KCLAW__REFERENCE_CHECK_STATE__CHECK_DONE) {
		kc_str_printf(&text, "reference check: baseline %.4f ms",
		    rc.reference_ms);
		if (rc.torch_compile_ms > 0)
			kc_str_printf(&text, ", torch.compile %.4f ms",
			    rc.torch_compile_ms);
		kc_str_printf(&text,
		    "; outputs vary by %.3g (relative) between input sets",
		    rc.output_variation);
	} else {
		kc_str_printf(&text,
		    "reference check failed (the task goes on): %s%s%.300s",
		    orch_eval_status_name(rc.status), *rc.message ? ": " : "",
		    rc.message);
	}
	if (rc.n_degenerate > 0)
		KC_WARN("task %s: %s", t->id, text.buf ? text.buf : "");
	else
		KC_INFO("task %s: %s", t->id, text.buf ? text.buf : "");
	if ((copy = orch_refcheck_copy(&rc)) != NULL)
		orch_refcheck_set(t, copy);
	else
		KC_ERROR("task %s: reference check not recorded (out of "
		         "memory)",
		    t->id);
	if ((ev = orch_event_new(KCLAW__EVENT_KIND__REFERENCE_CHECKED, t,
	         text.buf ? text.buf : "")) != NULL) {
		ev->role = KCLAW__ROLE__SANDBOX;
		ev->eval_status = rc.status;
		ev->value = rc.reference_ms;
		ev->latency_ms = r ? r->wall_ms : 0;
		orch_job_id(t, ORCH_REFCHECK_JOB, jid, sizeof(jid));
		orch_event_set(&ev->job_id, jid);
		if (orch_event(o, ev) != 0)
			KC_ERROR("task %s: %s", t->id, kc_lasterr());
	}
	if (orch_task_put(o, t, NULL) != 0)
		KC_ERROR("task %s: reference check not recorded: %s", t->id,
		    kc_lasterr());
	kc_str_free(&text);
	free(dv);
	free(dp);
	if (spec)
		kclaw__task_spec__free_unpacked(spec, NULL);
}

/* -------------------------------------------------------- transitions */

static int
orch_aux_put(
    orch *o, const char *task_id, const char *what, const ProtobufCMessage *m)
{
	char key[64];

	snprintf(key, sizeof(key), "%s/%s", task_id, what);
	return orch_put_msg(o, STORE_CF_TASKS, key, m);
}

/* SHA-256 (hex) of a candidate's source, a NUL byte and its plan. */
static void
orch_cand_hash(const Kclaw__Candidate *c, char out[65])
{
	const char *src = c->source ? c->source : "";
	const char *plan = c->plan_json ? c->plan_json : "";
	size_t ls = strlen(src), lp = strlen(plan);
	char *buf = malloc(ls + lp + 1);

	out[0] = '\0';
	if (buf == NULL)
		return;
	memcpy(buf, src, ls);
	buf[ls] = '\0';
	memcpy(buf + ls + 1, plan, lp);
	kc_sha256_hex(buf, ls + lp + 1, out);
	free(buf);
}

/*
 * Stores candidate `cand` of an agent reply as candidate number n. reuse
 * (0: none) is the earlier candidate whose evaluation it takes over; then
 * *staged gets a copy of the record (the transition's own records read it
 * before the batch is committed).
 */
/* The key of the plan for an Optimizer job (or a Planner's): "plan", or
 * "plan.<slot>" in a wave. */
void
orch_plan_key(const orch_fsm *f, uint32_t job, char *key, size_t sz)
{
	int slot = orch_fsm_wave_slot(f, job, false);

	if (slot < 0)
		snprintf(key, sz, "plan");
	else
		snprintf(key, sz, "plan.%d", slot);
}

static int
orch_store_candidate(orch *o, struct orch_task *t, const orch_fsm *prev,
    const Kclaw__AgentReply *reply, const Kclaw__Candidate *cand, uint32_t n,
    uint32_t reuse, uint32_t job, Kclaw__CandidateRecord **staged)
{
	Kclaw__OptPlan *plan = NULL;
	Kclaw__Diagnosis *diag = NULL;
	Kclaw__CandidateRecord r = KCLAW__CANDIDATE_RECORD__INIT;
	Kclaw__CandidateRecord *from = NULL;
	Kclaw__Candidate c = *cand;
	char parent[48] = "", b[16], id[48], hash[65], reused[48] = "";
	int rv;

	if (prev->state == ORCH_ST_OPTIMIZE || prev->state == ORCH_ST_WAVE) {
		char pk[24];
		orch_plan_key(prev, job, pk, sizeof(pk));
		plan = (Kclaw__OptPlan *)orch_task_aux_msg(
		    o, t->id, pk, &kclaw__opt_plan__descriptor);
	}
	if (prev->state == ORCH_ST_REPAIR)
		diag = (Kclaw__Diagnosis *)orch_task_aux_msg(
		    o, t->id, "diag", &kclaw__diagnosis__descriptor);
	if (prev->state != ORCH_ST_SEEDING) {
		orch_cand_id(
		    prev->state == ORCH_ST_REPAIR ? prev->cur : prev->base, b);
		snprintf(parent, sizeof(parent), "%s-%s", t->id, b);
	}
	if (reuse && (rv = orch_cand_get(o, t->id, reuse, &from)) != 0)
		goto out;
	orch_cand_id(n, b);
	snprintf(id, sizeof(id), "%s-%s", t->id, b);
	orch_cand_hash(cand, hash);
	c.id = id;
	c.parent_id = parent;
	c.origin = (char *)orch_role_name(reply->role);
	c.method = plan && plan->method ? plan->method : "";
	c.round = prev->round + 1;
	r.candidate = &c;
	r.plan = plan;
	r.diagnosis = diag;
	r.content_hash = hash;
	if (from) {
		orch_cand_id(reuse, b);
		snprintf(reused, sizeof(reused), "%s-%s", t->id, b);
		r.eval = from->eval;
	}
	r.reused_from = reused;
	rv = orch_cand_put(o, t->id, n, &r);
	if (rv == 0 && reuse) {
		uint8_t *buf;
		size_t len;
		if ((rv = kc_pb_pack(&r.base, &buf, &len)) == 0) {
			*staged =
			    kclaw__candidate_record__unpack(NULL, len, buf);
			free(buf);
			rv = *staged ? 0 : KC_ENOMEM;
		}
	}
out:
	if (from)
		kclaw__candidate_record__free_unpacked(from, NULL);
	if (plan)
		kclaw__opt_plan__free_unpacked(plan, NULL);
	if (diag)
		kclaw__diagnosis__free_unpacked(diag, NULL);
	return rv;
}

struct orch_dup_scan {
	const char *hash;
	uint32_t found;
	Kclaw__EvalStatus status;
	double ms, ref_ms, sol;
};

static int
orch_dup_visit(
    void *arg, const void *key, size_t klen, const void *val, size_t vlen)
{
	struct orch_dup_scan *d = arg;
	Kclaw__CandidateRecord *r =
	    kclaw__candidate_record__unpack(NULL, vlen, val);
	const Kclaw__EvalResult *e;

	(void)key;
	(void)klen;
	if (r == NULL)
		return 0;
	e = r->eval;
	/* The first (lowest-numbered) evaluated one: keys sort by number. */
	if (d->found == 0 && e && r->content_hash &&
	    strcmp(r->content_hash, d->hash) == 0 && r->candidate &&
	    r->candidate->id) {
		const char *num = strrchr(r->candidate->id, 'c');
		d->found = num ? (uint32_t)strtoul(num + 1, NULL, 10) : 0;
		d->status = e->status;
		d->ms = e->timing ? e->timing->median_ms : 0;
		d->ref_ms = e->reference_ms > 0 ? e->reference_ms
		    : e->baseline               ? e->baseline->median_ms
		                                : 0;
		d->sol = e->sol_fraction;
	}
	kclaw__candidate_record__free_unpacked(r, NULL);
	return 0;
}

/*
 * An answer identical (same source and plan) to an earlier candidate of
 * the task that has an evaluation: that candidate's number and result go
 * into in (in->reuse), so the machine reuses it instead of evaluating the
 * same kernel again.
 */
static void
orch_find_duplicate(orch *o, const struct orch_task *t,
    const Kclaw__Candidate *cand, orch_input *in)
{
	struct orch_dup_scan d = {0};
	char hash[65], prefix[ORCH_ID_LEN + 2];

	orch_cand_hash(cand, hash);
	if (!hash[0])
		return;
	d.hash = hash;
	snprintf(prefix, sizeof(prefix), "%s/", t->id);
	if (store_scan(o->db, STORE_CF_CANDIDATES, prefix, strlen(prefix), NULL,
	        0, orch_dup_visit, &d) != 0) {
		kc_clearerr();
		return;
	}
	if (d.found) {
		in->reuse = d.found;
		in->status = d.status;
		in->ms = d.ms;
		in->ref_ms = d.ref_ms;
		in->sol = d.sol;
	}
}

/* Stores what an input brought, numbered as the new state says. A
 * candidate that reuses an earlier evaluation is also left in *staged. */
static int
orch_store_input(orch *o, struct orch_task *t, const orch_fsm *prev,
    const orch_input *in, const Kclaw__AgentReply *reply,
    const Kclaw__EvalResult *eval, const struct orch_msg *retrieved,
    Kclaw__CandidateRecord **staged)
{
	Kclaw__CandidateRecord *r = NULL;
	int rv = 0;

	switch (in->kind) {
	case ORCH_IN_SEEDS:
		if (in->n > 0)
			rv = orch_store_candidate(o, t, prev, reply,
			    reply->candidates[0],
			    prev->seed_first + (in->job - prev->await_first), 0,
			    in->job, staged);
		break;
	case ORCH_IN_CANDIDATE:
		/* Its number: the machine's next one before the answer (cur
		 * may already name another kernel, a reused result having
		 * moved the machine on). */
		if (in->n > 0)
			rv = orch_store_candidate(o, t, prev, reply,
			    reply->candidates[0],
			    orch_fsm_cand_of(prev, in->job), in->reuse, in->job,
			    staged);
		break;
	case ORCH_IN_EVALUATED:
	case ORCH_IN_TUNED:
		if ((rv = orch_cand_get(o, t->id, in->cand, &r)) != 0)
			break;
		if (r->eval)
			kclaw__eval_result__free_unpacked(r->eval, NULL);
		r->eval = (Kclaw__EvalResult *)eval;
		/* A sweep's candidate is the configuration it chose. */
		if (in->kind == ORCH_IN_TUNED && eval->tuned_source &&
		    *eval->tuned_source && r->candidate) {
			char *src = strdup(eval->tuned_source);
			char *plan = strdup(eval->tuned_plan);
			char *cfg = strdup(eval->tuned_config);
			if (src == NULL || plan == NULL || cfg == NULL) {
				free(src);
				free(plan);
				free(cfg);
				r->eval = NULL;
				rv = KC_ENOMEM;
				break;
			}
			free(r->candidate->source);
			free(r->candidate->plan_json);
			free(r->candidate->method);
			r->candidate->source = src;
			r->candidate->plan_json = plan;
			r->candidate->method = cfg;
		}
		rv = orch_cand_put(o, t->id, in->cand, r);
		r->eval = NULL;
		break;
	case ORCH_IN_FEATURES:
		if ((rv = orch_cand_get(o, t->id, prev->base, &r)) != 0)
			break;
		{
			size_t nf = r->n_features;
			Kclaw__Feature **f = r->features;
			r->n_features = reply->n_features;
			r->features = reply->features;
			rv = orch_cand_put(o, t->id, prev->base, r);
			r->n_features = nf;
			r->features = f;
		}
		break;
	case ORCH_IN_RETRIEVED:
		if ((rv = orch_cand_get(o, t->id, prev->base, &r)) != 0)
			break;
		{
			size_t nm = r->n_methods;
			Kclaw__Recommendation **m = r->methods;
			r->n_methods = retrieved->retrieved->n_methods;
			r->methods = retrieved->retrieved->methods;
			rv = orch_cand_put(o, t->id, prev->base, r);
			r->n_methods = nm;
			r->methods = m;
		}
		break;
	case ORCH_IN_PLANNED: {
		char pk[24];
		orch_plan_key(prev, in->job, pk, sizeof(pk));
		rv = orch_aux_put(o, t->id, pk, &reply->plan->base);
		break;
	}
	case ORCH_IN_DIAGNOSED:
		rv = orch_aux_put(o, t->id, "diag", &reply->diagnosis->base);
		break;
	default: break;
	}
	if (r)
		kclaw__candidate_record__free_unpacked(r, NULL);
	return rv;
}

static char *
orch_plan_text(const Kclaw__OptPlan *p)
{
	kc_str s = {0};

	if (p == NULL)
		return NULL;
	kc_str_printf(&s, "%s", p->rationale ? p->rationale : "");
	for (size_t i = 0; i < p->n_steps; i++)
		kc_str_printf(&s, "%s- %s", s.len ? "\n" : "", p->steps[i]);
	return kc_str_take(&s);
}

/* The short-term record of a finished round, and what long-term memory
 * learns from it. */
static int
orch_record(orch *o, struct orch_task *t, const orch_action *a,
    const Kclaw__EvalResult *eval, const Kclaw__CandidateRecord *staged)
{
	const orch_memory_ops *m = o->opt.memory;
	orch_memory_record r = {0};
	Kclaw__CandidateRecord *cur = NULL, *failing = NULL, *base = NULL;
	Kclaw__CandidateRecord *attempt = NULL;
	char kid[48], aux[48], b[16], *plan_text = NULL, outcome[512];
	int rv;

	if (staged && staged->candidate &&
	    (uint32_t)atoi(strrchr(staged->candidate->id, 'c') + 1) ==
	        a->cand) {
		uint8_t *buf;
		size_t len;
		if ((rv = kc_pb_pack(&staged->base, &buf, &len)) != 0)
			return rv;
		cur = kclaw__candidate_record__unpack(NULL, len, buf);
		free(buf);
		if (cur == NULL)
			return KC_ENOMEM;
	} else if ((rv = orch_cand_get(o, t->id, a->cand, &cur)) != 0) {
		return rv;
	}
	/* A reused evaluation is in the candidate's record, not the input. */
	if (eval == NULL)
		eval = cur->eval;
	orch_cand_id(a->cand, b);
	snprintf(kid, sizeof(kid), "%s-%s", t->id, b);
	orch_cand_id(a->aux, b);
	snprintf(aux, sizeof(aux), "%s-%s", t->id, b);
	snprintf(outcome, sizeof(outcome), "%s%s%s",
	    orch_eval_status_name(a->status),
	    eval && eval->message && *eval->message ? ": " : "",
	    eval && eval->message ? eval->message : "");
	r.round = a->round ? a->round : t->fsm.round;
	r.outcome = outcome;
	r.ms = eval && eval->timing ? eval->timing->median_ms : 0;
	if (a->repaired) {
		/* The failed attempt, recorded again under its own round with
		 * what its repair achieved: its method and plan, the repaired
		 * kernel's outcome. Learning saw the attempt once already. */
		const Kclaw__EvalResult *fe;
		char fid[48];
		if ((rv = orch_cand_get(o, t->id, a->repaired, &attempt)) != 0)
			goto out;
		fe = attempt->eval;
		orch_cand_id(a->repaired, b);
		snprintf(fid, sizeof(fid), "%s-%s", t->id, b);
		snprintf(outcome, sizeof(outcome),
		    "%s, repaired as %s: %s (%.3fx the base)",
		    fe ? orch_eval_status_name(fe->status) : "failed", kid,
		    orch_eval_status_name(a->status), a->value);
		r.kind = 2;
		r.kernel_id = fid;
		r.status = orch_eval_status_name(a->status);
		r.base_id = aux;
		r.method = attempt->plan ? attempt->plan->method
		                         : attempt->candidate->method;
		plan_text = orch_plan_text(attempt->plan);
		r.plan = plan_text;
		r.speedup = a->value;
		r.result_id = kid;
		rv = m->record(o->opt.memory_arg, o->db, o->batch, t->id, &r);
		o->staged++;
		goto out;
	}
	if (a->origin == ORCH_ORIGIN_REPAIR) {
		const char *pid = cur->candidate->parent_id;
		size_t plen = strlen(t->id) + 2;
		r.kind = 1;
		r.kernel_id = pid;
		if (strlen(pid) > plen)
			orch_cand_get(
			    o, t->id, (uint32_t)atoi(pid + plen), &failing);
		r.status = failing && failing->eval
		    ? orch_eval_status_name(failing->eval->status)
		    : "";
		r.failure =
		    failing && failing->eval ? failing->eval->message : "";
		r.diagnosis = cur->diagnosis ? cur->diagnosis->root_cause : "";
		r.fix = cur->diagnosis ? cur->diagnosis->fix : "";
		r.result_id = kid;
		r.passed = a->status == KCLAW__EVAL_STATUS__OK;
	} else {
		r.kind = 2;
		r.kernel_id = kid;
		r.status = orch_eval_status_name(a->status);
		r.base_id = aux;
		r.method =
		    cur->plan ? cur->plan->method : cur->candidate->method;
		plan_text = orch_plan_text(cur->plan);
		r.plan = plan_text;
		r.speedup = a->value;
	}
	rv = m->record(o->opt.memory_arg, o->db, o->batch, t->id, &r);
	o->staged++;
	/* Learn from optimisation attempts on a base that had a retrieval:
	 * its method was among the recommendations (screening binds it
	 * there), or an exploration round chose one outside them, which is
	 * learned under the same evidence signature. */
	if (rv == 0 && r.kind == 2 && m->learn && r.method && *r.method &&
	    orch_cand_get(o, t->id, a->aux, &base) == 0 &&
	    base->n_methods > 0) {
		const char *sig = NULL;
		for (size_t i = 0; i < base->n_methods && !sig; i++)
			if (strcmp(base->methods[i]->method, r.method) == 0)
				sig = base->methods[i]->signature;
		if (sig == NULL && cur->plan && cur->plan->exploration)
			sig = base->methods[0]->signature;
		if (sig != NULL)
			rv = m->learn(o->opt.memory_arg, o->db, o->batch, sig,
			    r.method, kid, a->status == KCLAW__EVAL_STATUS__OK,
			    a->value);
	}
out:
	free(plan_text);
	if (cur)
		kclaw__candidate_record__free_unpacked(cur, NULL);
	if (failing)
		kclaw__candidate_record__free_unpacked(failing, NULL);
	if (base)
		kclaw__candidate_record__free_unpacked(base, NULL);
	if (attempt)
		kclaw__candidate_record__free_unpacked(attempt, NULL);
	return rv;
}

static void
orch_queue_retrieve(orch *o, struct orch_task *t, uint32_t job)
{
	struct orch_msg *m = calloc(1, sizeof(*m));

	if (m == NULL)
		return;
	m->kind = ORCH_MSG_RETRIEVED;
	m->task = t;
	m->job = job;
	m->next = o->to_retrieve;
	o->to_retrieve = m;
}

/* The import starts once the spec it reads is committed. */
static int
orch_queue_import(orch *o, struct orch_task *t)
{
	if (o->nto_import == o->capto_import) {
		size_t cap = o->capto_import ? o->capto_import * 2 : 16;
		struct orch_task **q = realloc(o->to_import, cap * sizeof(*q));
		if (q == NULL)
			return KC_ENOMEM;
		o->to_import = q;
		o->capto_import = cap;
	}
	o->to_import[o->nto_import++] = t;
	free(t->detail);
	t->detail = strdup("waiting to import its tensor files");
	return 0;
}

/*
 * The tune candidate a->cand of candidate a->aux: its source, its plan
 * with the launch configuration declared tunable (tune.c), origin "tune";
 * then its evaluation, job a->job, which the sandbox makes a sweep of.
 */
static int
orch_tune_new(orch *o, struct orch_task *t, const orch_action *a)
{
	Kclaw__CandidateRecord *of = NULL, r = KCLAW__CANDIDATE_RECORD__INIT;
	Kclaw__Candidate c = KCLAW__CANDIDATE__INIT;
	orch_action eval = *a;
	char id[48], parent[48], b[16], hash[65], *plan = NULL;
	int rv;

	if ((rv = orch_cand_get(o, t->id, a->aux, &of)) != 0)
		return rv;
	if ((rv = orch_tune_plan(of->candidate->plan_json, &plan)) != 0)
		goto out;
	orch_cand_id(a->cand, b);
	snprintf(id, sizeof(id), "%s-%s", t->id, b);
	orch_cand_id(a->aux, b);
	snprintf(parent, sizeof(parent), "%s-%s", t->id, b);
	c.id = id;
	c.source = of->candidate->source;
	c.plan_json = plan ? plan : of->candidate->plan_json;
	c.parent_id = parent;
	c.origin = "tune";
	c.method = "tune";
	c.round = t->fsm.round;
	orch_cand_hash(&c, hash);
	r.candidate = &c;
	r.content_hash = hash;
	if ((rv = orch_cand_put(o, t->id, a->cand, &r)) != 0)
		goto out;
	eval.kind = ORCH_ACT_EVAL;
	rv = orch_job_new(o, t, &eval, true);
out:
	free(plan);
	kclaw__candidate_record__free_unpacked(of, NULL);
	return rv;
}

static int
orch_run_action(orch *o, struct orch_task *t, const orch_fsm *prev,
    const orch_action *a, const Kclaw__EvalResult *eval, const char *detail,
    const Kclaw__CandidateRecord *staged)
{
	Kclaw__Event *ev;
	char text[256], b[16], cid[48];

	switch (a->kind) {
	case ORCH_ACT_AGENT:
	case ORCH_ACT_EVAL: return orch_job_new(o, t, a, true);
	case ORCH_ACT_RETRIEVE: orch_queue_retrieve(o, t, a->job); return 0;
	case ORCH_ACT_RECORD: return orch_record(o, t, a, eval, staged);
	case ORCH_ACT_DROP_JOBS:
		orch_jobs_drop(o, t);
		orch_import_cancel(o, t);
		return 0;
	case ORCH_ACT_IMPORT: return orch_queue_import(o, t);
	case ORCH_ACT_TUNE: return orch_tune_new(o, t, a);
	case ORCH_ACT_EVENT: break;
	}
	text[0] = '\0';
	switch (a->event) {
	case KCLAW__EVENT_KIND__STATE_CHANGED:
		snprintf(text, sizeof(text), "%s -> %s",
		    orch_state_name(prev->state),
		    orch_state_name(t->fsm.state));
		break;
	case KCLAW__EVENT_KIND__BASE_PROMOTED:
		snprintf(text, sizeof(text), "base %.4f ms", a->value);
		break;
	case KCLAW__EVENT_KIND__ROUND_FINISHED:
		if (a->round) /* one of a wave's rounds */
			snprintf(text, sizeof(text), "round %u: %s", a->round,
			    a->status == KCLAW__EVAL_STATUS__INTERNAL_ERROR
			        ? "failed: no kernel (its job failed or "
			          "answered none)"
			        : orch_eval_status_name(a->status));
		else if (eval == NULL &&
		    a->status == KCLAW__EVAL_STATUS__INTERNAL_ERROR)
			snprintf(text, sizeof(text), "round %u: failed: %.200s",
			    t->fsm.round,
			    detail && *detail
			        ? detail
			        : "the agent answered without a candidate");
		else
			snprintf(text, sizeof(text), "round %u: %s%s",
			    t->fsm.round, orch_eval_status_name(a->status),
			    eval ? "" : " (reused)");
		break;
	case KCLAW__EVENT_KIND__EVAL_FINISHED:
		orch_cand_id(a->aux, b);
		snprintf(text, sizeof(text),
		    "reused the evaluation of %s-%s (same source and plan)",
		    t->id, b);
		break;
	case KCLAW__EVENT_KIND__TASK_FINISHED:
	case KCLAW__EVENT_KIND__TASK_CANCELLED: {
		char *e = orch_task_error(t, detail);
		size_t len;
		snprintf(text, sizeof(text), "%s: %s (best speedup %.3fx)",
		    orch_state_name(t->fsm.state), e ? e : "", a->value);
		free(e);
		/* The reference check named an output a constant could pass:
		 * the result says so, whatever the kernel did. */
		if (t->refcheck && t->refcheck->n_degenerate > 0 &&
		    (len = strlen(text)) < sizeof(text)) {
			const Kclaw__DegenerateOutput *d =
			    t->refcheck->degenerate[0];
			snprintf(text + len, sizeof(text) - len,
			    "; degenerate problem: %s varies %.3g between "
			    "input "
			    "sets, the tolerance admits %.3g%s",
			    d->name, d->variation, d->admits,
			    t->refcheck->n_degenerate > 1 ? " (and more)" : "");
		}
		break;
	}
	default: break;
	}
	if ((ev = orch_event_new(a->event, t, text)) == NULL)
		return KC_ENOMEM;
	ev->value = a->value;
	ev->tokens = t->fsm.tokens;
	if (a->event == KCLAW__EVENT_KIND__ROUND_FINISHED && a->round)
		ev->round = a->round;
	if (a->cand) {
		orch_cand_id(a->cand, b);
		snprintf(cid, sizeof(cid), "%s-%s", t->id, b);
		orch_event_set(&ev->candidate_id, cid);
	}
	return orch_event(o, ev);
}

/* The fact that a reply came: AGENT_REPLIED or EVAL_FINISHED. */
static int
orch_reply_event(orch *o, struct orch_task *t, const orch_input *in,
    const Kclaw__AgentReply *reply, const Kclaw__EvalResult *eval)
{
	Kclaw__Event *ev;
	char text[256], jid[64], b[16], cid[48];

	if (reply) {
		const Kclaw__Usage *u = reply->usage;
		char extra[96] = "";
		if (u && (u->reasoning_tokens || u->cached_tokens))
			snprintf(extra, sizeof(extra),
			    " (%llu reasoning, %llu cached)",
			    (unsigned long long)u->reasoning_tokens,
			    (unsigned long long)u->cached_tokens);
		snprintf(text, sizeof(text),
		    "%s replied: %zu candidate(s), %llu tokens%s, %.0f ms",
		    orch_role_name(reply->role), reply->n_candidates,
		    (unsigned long long)(u
		            ? u->prompt_tokens + u->completion_tokens
		            : 0),
		    extra, u ? u->latency_ms : 0);
		if ((ev = orch_event_new(
		         KCLAW__EVENT_KIND__AGENT_REPLIED, t, text)) == NULL)
			return KC_ENOMEM;
		ev->role = reply->role;
		ev->tokens = u ? u->prompt_tokens + u->completion_tokens : 0;
		ev->value = u ? u->latency_ms : 0;
	} else {
		snprintf(text, sizeof(text), "%s %.4f ms%s%.200s",
		    orch_eval_status_name(eval->status),
		    eval->timing ? eval->timing->median_ms : 0,
		    eval->message && *eval->message ? ": " : "",
		    eval->message ? eval->message : "");
		if ((ev = orch_event_new(
		         KCLAW__EVENT_KIND__EVAL_FINISHED, t, text)) == NULL)
			return KC_ENOMEM;
		ev->role = KCLAW__ROLE__SANDBOX;
		ev->eval_status = eval->status;
		ev->value = eval->timing ? eval->timing->median_ms : 0;
		ev->latency_ms = eval->wall_ms;
		orch_cand_id(in->cand, b);
		snprintf(cid, sizeof(cid), "%s-%s", t->id, b);
		orch_event_set(&ev->candidate_id, cid);
	}
	orch_job_id(t, in->job, jid, sizeof(jid));
	orch_event_set(&ev->job_id, jid);
	return orch_event(o, ev);
}

/* The best kernel changed: torch.compile's time and the speedup over it
 * come from its evaluation (this input's, a reused one's, or the store's). */
static void
orch_best_compile(orch *o, struct orch_task *t, const orch_input *in,
    const Kclaw__EvalResult *eval, const Kclaw__CandidateRecord *staged)
{
	Kclaw__CandidateRecord *r = NULL;
	const Kclaw__EvalResult *e = NULL;
	const char *num;

	if (eval && in->kind == ORCH_IN_EVALUATED && in->cand == t->fsm.best)
		e = eval;
	else if (staged && staged->candidate && staged->candidate->id &&
	    (num = strrchr(staged->candidate->id, 'c')) != NULL &&
	    (uint32_t)atoi(num + 1) == t->fsm.best)
		e = staged->eval;
	else if (orch_cand_get(o, t->id, t->fsm.best, &r) == 0)
		e = r->eval;
	else
		kc_clearerr();
	t->compile_ms = e ? e->torch_compile_ms : 0;
	t->compile_speedup = e ? e->compile_speedup : 0;
	if (r)
		kclaw__candidate_record__free_unpacked(r, NULL);
}

/* A solved task leaves its best kernel, with the task's feature vector,
 * for the warm starts of similar tasks (committed with its last
 * transition); a task solved without it only loses the warm start. */
static void
orch_solved(orch *o, struct orch_task *t)
{
	const orch_memory_ops *m = o->opt.memory;
	Kclaw__CandidateRecord *best = NULL;
	Kclaw__TaskSpec *spec = NULL;

	if (m->solved == NULL || t->fsm.best == 0)
		return;
	if (orch_spec_get(o, t->id, &spec) != 0 ||
	    orch_cand_get(o, t->id, t->fsm.best, &best) != 0 ||
	    best->candidate == NULL ||
	    m->solved(o->opt.memory_arg, o->db, o->batch, t->id, spec,
	        best->candidate, t->fsm.best_speedup) != 0) {
		KC_WARN("task %s: its best kernel is not kept for warm starts "
		        "(%s)",
		    t->id, kc_lasterr());
		kc_clearerr();
	} else {
		o->staged++;
	}
	if (best)
		kclaw__candidate_record__free_unpacked(best, NULL);
	if (spec)
		kclaw__task_spec__free_unpacked(spec, NULL);
}

static void orch_commit(orch *o, bool sync);

int
orch_task_input(orch *o, struct orch_task *t, const orch_input *in,
    const Kclaw__AgentReply *reply, const Kclaw__EvalResult *eval,
    const struct orch_msg *retrieved)
{
	orch_actions acts;
	orch_fsm prev, next;
	orch_input dup, counted;
	Kclaw__CandidateRecord *staged = NULL;
	uint64_t used = orch_usage_tokens(t);
	int rv;

	/* A second input of one task in a batch (a wave's answers arriving
	 * together) reads what the first wrote, which is in the batch and
	 * not yet in the store: that batch is committed first. */
	if (t->batch_gen == o->batch_gen + 1) {
		orch_commit(o, true);
		if (store_batch_new(&o->batch) != 0)
			return KC_ENOMEM;
	}
	t->batch_gen = o->batch_gen + 1;
	prev = t->fsm;

	/* The budget counts every call's tokens, failed ones too: whatever
	 * the machine has not seen yet comes with this input. */
	if (in->kind != ORCH_IN_TICK) {
		counted = *in;
		counted.tokens = used > prev.tokens ? used - prev.tokens : 0;
		in = &counted;
	}
	if (in->kind == ORCH_IN_CANDIDATE && reply && in->n > 0 &&
	    orch_fsm_step(&prev, in, &next, &acts)) {
		dup = *in;
		orch_find_duplicate(o, t, reply->candidates[0], &dup);
		in = &dup;
	}
	if (!orch_fsm_step(&prev, in, &next, &acts)) {
		o->counters.dropped_replies += reply || eval ? 1 : 0;
		return 0;
	}
	if ((reply || eval) &&
	    (rv = orch_reply_event(o, t, in, reply, eval)) != 0)
		return rv;
	if ((rv = orch_store_input(
	         o, t, &prev, in, reply, eval, retrieved, &staged)) != 0)
		goto out;
	t->fsm = next;
	if (next.best != prev.best)
		orch_best_compile(o, t, in, eval, staged);
	if (prev.state == ORCH_ST_IMPORTING &&
	    next.state != ORCH_ST_IMPORTING) {
		free(t->detail);
		t->detail = NULL;
	}
	for (unsigned i = 0; i < acts.n; i++)
		if ((rv = orch_run_action(
		         o, t, &prev, &acts.a[i], eval, t->why, staged)) != 0)
			goto out;
	/* The task starts seeding: its reference check goes to a sandbox
	 * beside the Generator jobs (once: a resumed task has its record). */
	if (o->opt.reference_check && t->refcheck == NULL &&
	    (prev.state == ORCH_ST_SUBMITTED ||
	        prev.state == ORCH_ST_IMPORTING) &&
	    next.state == ORCH_ST_SEEDING &&
	    (rv = orch_refcheck_schedule(o, t)) != 0)
		goto out;
	if (orch_state_final(next.state) && !orch_state_final(prev.state)) {
		t->finished_ms = kc_now_ms();
		o->nactive--;
		if (next.state == ORCH_ST_DONE)
			orch_solved(o, t);
		/* Its jobs are dropped, the reference check's too. */
		if (t->refcheck &&
		    t->refcheck->state ==
		        KCLAW__REFERENCE_CHECK_STATE__CHECK_PENDING) {
			Kclaw__ReferenceCheck rc = KCLAW__REFERENCE_CHECK__INIT;
			rc.state = KCLAW__REFERENCE_CHECK_STATE__CHECK_FAILED;
			rc.message = "not run: the task ended first";
			orch_refcheck_set(t, orch_refcheck_copy(&rc));
		}
	}
	o->counters.transitions++;
	rv = orch_task_put(o, t,
	    in->kind != ORCH_IN_JOB_FAILED &&
	            in->kind != ORCH_IN_IMPORT_FAILED &&
	            in->kind != ORCH_IN_MODEL_UNFIT
	        ? NULL
	        : t->why ? t->why
	                 : kc_lasterr());
out:
	if (staged)
		kclaw__candidate_record__free_unpacked(staged, NULL);
	return rv;
}

/* ----------------------------------------------------- submit, cancel */

static void
orch_params_from_spec(
    const orch_options *opt, const Kclaw__TaskSpec *spec, orch_params *p)
{
	*p = opt->defaults;
	if (opt->wall_seconds)
		p->deadline_ms = kc_now_ms() + opt->wall_seconds * 1000;
	if (spec->params) {
		const Kclaw__FsmParams *f = spec->params;
		if (f->seeds)
			p->seeds = f->seeds;
		if (f->rt > 0)
			p->rt = f->rt;
		if (f->at > 0)
			p->at = f->at;
		if (f->max_repairs)
			p->max_repairs = f->max_repairs;
		if (f->max_duplicates)
			p->max_duplicates = f->max_duplicates;
		/* 0: the default; negative: off. */
		if (f->explore_share != 0)
			p->explore_share =
			    f->explore_share > 0 ? f->explore_share : 0;
		if (f->sol_stop != 0)
			p->sol_stop = f->sol_stop > 0 ? f->sol_stop : 0;
		if (f->candidates_per_round)
			p->candidates_per_round = f->candidates_per_round;
		if (f->tune != 0)
			p->tune = f->tune > 0;
	}
	if (spec->budget) {
		const Kclaw__Budget *b = spec->budget;
		if (b->rounds)
			p->max_rounds = b->rounds;
		if (b->tokens)
			p->token_budget = b->tokens;
		if (b->wall_seconds)
			p->deadline_ms = kc_now_ms() + b->wall_seconds * 1000;
		if (b->target_speedup > 0)
			p->target_speedup = b->target_speedup;
	}
}

/* The task's own job retries and timeouts. */
static void
orch_task_limits(struct orch_task *t, const Kclaw__TaskSpec *spec)
{
	if (spec->params) {
		uint32_t a = spec->params->agent_timeout_s;
		uint32_t e = spec->params->eval_timeout_s;

		t->job_retries = spec->params->job_retries;
		/* Bounded at Submit (kc_spec_check); a spec stored before
		 * the bound still must not wrap. */
		t->agent_timeout_ms =
		    (a < KC_SPEC_MAX_TIMEOUT_S ? a : KC_SPEC_MAX_TIMEOUT_S) *
		    1000;
		t->eval_timeout_ms =
		    (e < KC_SPEC_MAX_TIMEOUT_S ? e : KC_SPEC_MAX_TIMEOUT_S) *
		    1000;
	}
}

static bool
orch_name_ok(const char *s, size_t max)
{
	size_t n = 0;

	for (; s[n]; n++)
		if (!((s[n] >= 'a' && s[n] <= 'z') ||
		        (s[n] >= 'A' && s[n] <= 'Z') ||
		        (s[n] >= '0' && s[n] <= '9') || s[n] == '_' ||
		        s[n] == '-' || s[n] == '.'))
			return false;
	return n > 0 && n <= max;
}

static int
orch_spec_check(const Kclaw__TaskSpec *spec)
{
	bool output = false;

	if (spec->name == NULL || !orch_name_ok(spec->name, 100))
		return kc_seterr(KC_EINVAL,
		    "task name '%s' is invalid: use 1-100 letters, digits, "
		    "'_', '-' or '.'",
		    spec->name ? spec->name : "");
	for (size_t i = 0; i < spec->n_tensors; i++) {
		if (spec->tensors[i]->name == NULL || !*spec->tensors[i]->name)
			return kc_seterr(KC_EINVAL,
			    "task %s: tensor %zu has no name", spec->name, i);
		output |= spec->tensors[i]->kind == KCLAW__TENSOR_KIND__OUTPUT;
	}
	if (!output)
		return kc_seterr(KC_EINVAL,
		    "task %s has no output tensor: declare at least one tensor "
		    "with kind OUTPUT",
		    spec->name);
	if (spec->reference == NULL ||
	    spec->reference->kind == KCLAW__REFERENCE__KIND__KIND_UNSPECIFIED)
		return kc_seterr(KC_EINVAL,
		    "task %s has no reference: set reference.kind to CUDA or "
		    "TENSORS",
		    spec->name);
	if (spec->params &&
	    (spec->params->seeds > ORCH_MAX_SEEDS || spec->params->rt < 0 ||
	        spec->params->at < 0))
		return kc_seterr(KC_EINVAL,
		    "task %s: params out of range: seeds 0..%d, rt and at >= 0",
		    spec->name, ORCH_MAX_SEEDS);
	if (spec->params &&
	    (!(spec->params->explore_share <= 1) ||
	        !(spec->params->sol_stop <= 1)))
		return kc_seterr(KC_EINVAL,
		    "task %s: params.explore_share and params.sol_stop must "
		    "be at most 1 (0: the default; negative: off)",
		    spec->name);
	if (spec->budget && spec->budget->target_speedup < 0)
		return kc_seterr(KC_EINVAL,
		    "task %s: budget.target_speedup must be >= 0", spec->name);
	return 0;
}

int
orch_submit(orch *o, const Kclaw__TaskSpec *spec, const char *task_id,
    char out_id[ORCH_ID_LEN + 1])
{
	struct orch_task *t;
	orch_params p;
	/* Tensors not in the store yet are imported first, off the loop. */
	orch_input start = {
	    .kind = orch_blobs_pending(spec) ? ORCH_IN_IMPORT : ORCH_IN_START};
	Kclaw__Event *ev;
	char id[ORCH_ID_LEN + 1], key[64], text[160];
	int rv;

	if ((rv = orch_spec_check(spec)) != 0)
		return rv;
	if (task_id && *task_id) {
		if (!orch_name_ok(task_id, ORCH_ID_LEN) ||
		    strchr(task_id, '.') || strchr(task_id, '-'))
			return kc_seterr(KC_EINVAL,
			    "task_id '%s' is invalid: use 1-%d letters, "
			    "digits or '_'",
			    task_id, ORCH_ID_LEN);
		if ((t = orch_task_find(o, task_id)) != NULL) {
			if (strcmp(t->name, spec->name) != 0)
				return kc_seterr(KC_EEXIST,
				    "task %s exists with another name (%s); "
				    "choose another task_id",
				    task_id, t->name);
			kc_strlcpy(out_id, task_id, ORCH_ID_LEN + 1);
			return 0; /* idempotent resubmission */
		}
		kc_strlcpy(id, task_id, sizeof(id));
	} else {
		do
			kc_new_id(id);
		while (orch_task_find(o, id));
	}
	if ((rv = orch_task_add(o, id, spec->name, &t)) != 0)
		return rv;
	orch_params_from_spec(&o->opt, spec, &p);
	orch_fsm_init(&t->fsm, &p);
	orch_task_limits(t, spec);
	t->created_ms = kc_now_ms();
	o->nactive++;
	snprintf(key, sizeof(key), "%s/spec", id);
	if ((rv = orch_put_msg(o, STORE_CF_TASKS, key, &spec->base)) != 0)
		return rv;
	snprintf(text, sizeof(text), "%s submitted", spec->name);
	if ((ev = orch_event_new(KCLAW__EVENT_KIND__TASK_SUBMITTED, t, text)) ==
	    NULL)
		return KC_ENOMEM;
	if ((rv = orch_event(o, ev)) != 0 ||
	    (rv = orch_task_input(o, t, &start, NULL, NULL, NULL)) != 0)
		return rv;
	kc_strlcpy(out_id, id, ORCH_ID_LEN + 1);
	return 0;
}

int
orch_cancel(orch *o, struct orch_task *t)
{
	orch_input in = {.kind = ORCH_IN_CANCEL};

	kc_clearerr();
	return orch_task_input(o, t, &in, NULL, NULL, NULL);
}

/* ------------------------------------------------------------ resume */

static int
orch_load_task(
    void *arg, const void *key, size_t klen, const void *val, size_t vlen)
{
	orch *o = arg;
	Kclaw__TaskRecord *rec;
	Kclaw__TaskSpec *spec = NULL;
	struct orch_task *t;
	orch_fsm fsm;
	char id[ORCH_ID_LEN + 1];
	int rv;

	if (klen > ORCH_ID_LEN || memchr(key, '/', klen))
		return 0; /* a task's own records */
	memcpy(id, key, klen);
	id[klen] = '\0';
	if ((rec = kclaw__task_record__unpack(NULL, vlen, val)) == NULL ||
	    !orch_fsm_load(
	        rec->fsm.data, rec->fsm.len, &o->opt.defaults, &fsm)) {
		KC_ERROR("task %s: record does not decode, or its state is of "
		         "another version; skipped",
		    id);
		if (rec)
			kclaw__task_record__free_unpacked(rec, NULL);
		return 0;
	}
	rv = orch_spec_get(o, id, &spec);
	if (rv == 0 && (rv = orch_task_add(o, id, spec->name, &t)) == 0)
		orch_task_limits(t, spec);
	if (spec)
		kclaw__task_spec__free_unpacked(spec, NULL);
	if (rv != 0) {
		kclaw__task_record__free_unpacked(rec, NULL);
		return rv;
	}
	t->fsm = fsm;
	t->created_ms = rec->created_unix_ms;
	t->finished_ms = rec->finished_unix_ms;
	t->compile_ms = rec->torch_compile_ms;
	t->compile_speedup = rec->compile_speedup;
	t->refcheck = rec->reference_check; /* taken from the record */
	rec->reference_check = NULL;
	orch_usage_load(t, rec);
	if (!orch_state_final(t->fsm.state))
		o->nactive++;
	kclaw__task_record__free_unpacked(rec, NULL);
	return 0;
}

static int
orch_load_job(
    void *arg, const void *key, size_t klen, const void *val, size_t vlen)
{
	orch *o = arg;
	orch_job_rec rec;
	orch_action a = {0};
	struct orch_task *t;
	char id[ORCH_ID_LEN + 1];
	const char *dash = memchr(key, '-', klen);

	if (dash == NULL || (size_t)(dash - (const char *)key) > ORCH_ID_LEN ||
	    vlen != sizeof(rec))
		return 0;
	memcpy(id, key, dash - (const char *)key);
	id[dash - (const char *)key] = '\0';
	memcpy(&rec, val, sizeof(rec));
	if ((t = orch_task_find(o, id)) == NULL ||
	    orch_state_final(t->fsm.state) || rec.magic != ORCH_JOB_MAGIC) {
		store_batch_delete(o->batch, STORE_CF_JOBS, key, klen);
		o->staged++;
		return 0;
	}
	a.kind =
	    rec.role == KCLAW__ROLE__SANDBOX ? ORCH_ACT_EVAL : ORCH_ACT_AGENT;
	a.job = rec.n;
	a.role = (Kclaw__Role)rec.role;
	a.cand = rec.cand;
	a.count = rec.count;
	a.key_n = rec.key_n;
	return orch_job_new(o, t, &a, false);
}

static int
orch_resume(orch *o)
{
	uint8_t *key = NULL;
	size_t klen;
	int rv;

	if (store_last_key(
	        o->db, STORE_CF_EVENTS, NULL, 0, (void **)&key, &klen) == 0) {
		if (klen == 8)
			o->last_seq = store_key_get_u64(key);
		free(key);
	}
	kc_clearerr();
	if ((rv = store_scan(o->db, STORE_CF_TASKS, NULL, 0, NULL, 0,
	         orch_load_task, o)) != 0 ||
	    (rv = store_scan(o->db, STORE_CF_JOBS, NULL, 0, NULL, 0,
	         orch_load_job, o)) != 0)
		return rv;
	for (size_t i = 0; i < o->nall; i++) {
		struct orch_task *t = o->all[i];
		orch_actions acts;
		orch_fsm_resume(&t->fsm, &acts);
		for (unsigned k = 0; k < acts.n; k++) {
			if (acts.a[k].kind == ORCH_ACT_RETRIEVE) {
				orch_queue_retrieve(o, t, acts.a[k].job);
				continue;
			}
			/* An interrupted import is done again from the
			 * start (the spec in the store is as submitted). */
			free(t->detail);
			t->detail = strdup("importing its tensor files again "
			                   "after a restart");
			if ((rv = orch_import_queue(o, t)) != 0)
				return rv;
		}
	}
	o->committed_seq = o->last_seq;
	KC_INFO("resumed %zu task(s), %zu unfinished; last event %llu",
	    o->ntasks, o->nactive, (unsigned long long)o->last_seq);
	return 0;
}

/* ---------------------------------------------------------- the loop */

void
orch_post(orch *o, struct orch_msg *m)
{
	nng_mtx_lock(o->mtx);
	if (o->in_tail)
		o->in_tail->next = m;
	else
		o->in_head = m;
	o->in_tail = m;
	nng_cv_wake(o->cv);
	nng_mtx_unlock(o->mtx);
}

static void
orch_on_call(orch *o, bus_call *call, enum orch_msg_kind kind)
{
	struct orch_msg *m = calloc(1, sizeof(*m));

	if (m == NULL) {
		bus_call_drop(call);
		return;
	}
	m->kind = kind;
	m->call = call;
	orch_post(o, m);
}

static void
orch_on_api(void *arg, bus_call *call)
{
	orch *o = arg;
	const void *data;
	size_t len;

	/* PutBlob writes and hashes tensor contents: the upload thread
	 * serves it, never the loop (ApiRequest.method is field 1). */
	data = bus_call_data(call, &len);
	if (o->upload != NULL && kc_pb_field_is(data, len, 1, "PutBlob")) {
		orch_upload_post(o->upload, call);
		return;
	}
	orch_on_call(arg, call, ORCH_MSG_API);
}

static void
orch_on_work(void *arg, bus_call *call)
{
	orch *o = arg;
	const void *data;
	size_t len;

	/* A Blob request (WorkRequest.blob) is served by the blob threads:
	 * it asks for no work and must not wait for the loop. */
	data = bus_call_data(call, &len);
	if (o->blobsrv != NULL && kc_pb_has_field(data, len, 9)) {
		orch_blob_server_post(o->blobsrv, call);
		return;
	}
	orch_on_call(arg, call, ORCH_MSG_WORK);
}

int
orch_open(orch **out, const orch_options *opt)
{
	orch *o;
	int rv, nrv;

	if ((o = calloc(1, sizeof(*o))) == NULL)
		return KC_ENOMEM;
	o->opt = *opt;
	o->started_mono = kc_mono_ms();
	o->nbuckets = 4096;
	o->replies_tail = &o->replies;
	o->wake_fd[0] = o->wake_fd[1] = -1;
	if ((o->buckets = calloc(o->nbuckets, sizeof(*o->buckets))) == NULL) {
		free(o);
		return KC_ENOMEM;
	}
	if ((nrv = nng_mtx_alloc(&o->mtx)) != 0 ||
	    (nrv = nng_cv_alloc(&o->cv, o->mtx)) != 0) {
		rv =
		    kc_seterr(KC_ENOMEM, "orchestrator: %s", nng_strerror(nrv));
		goto fail;
	}
	if (pipe(o->wake_fd) != 0) {
		rv = kc_seterr(
		    KC_EIO, "orchestrator: pipe: %s", strerror(errno));
		goto fail;
	}
	fcntl(o->wake_fd[0], F_SETFL, O_NONBLOCK);
	fcntl(o->wake_fd[1], F_SETFL, O_NONBLOCK);
	if ((rv = kc_config_prepare(&opt->cfg)) != 0 ||
	    (rv = store_open(&o->db, opt->cfg.db_dir)) != 0 ||
	    (rv = store_batch_new(&o->batch)) != 0 ||
	    (rv = orch_import_open(o)) != 0 || (rv = orch_resume(o)) != 0)
		goto fail;
	if (o->staged && (rv = store_batch_commit(o->db, o->batch, true)) != 0)
		goto fail;
	store_batch_free(o->batch);
	o->batch = NULL;
	o->staged = 0;
	{
		char blobs[KC_PATH_MAX];
		snprintf(blobs, sizeof(blobs), "%s/blobs", opt->cfg.run_dir);
		orch_upload_limits ul = {.staged_max = opt->upload_staged_bytes,
		    .idle_ms = opt->upload_idle_ms};
		if ((rv = orch_blob_server_open(
		         &o->blobsrv, o->db, blobs, opt->cfg.token)) != 0 ||
		    (rv = orch_upload_open(
		         &o->upload, o->db, blobs, opt->cfg.token, &ul)) != 0)
			goto fail;
	}
	/* Listen last: a worker's request is only taken once every task is
	 * loaded. */
	/* A connection is proved only by a request whose token matched
	 * (bus_call_prove in orch_api.c, sched.c, blobs.c): until then it
	 * counts among the few unproven ones that may hold a partial message,
	 * and is closed at their deadline (docs/security.md). */
	if ((rv = bus_pub_open(&o->pub, opt->cfg.events_url)) != 0 ||
	    /* Work requests are results and Blob requests, never tensors
	     * (blobs travel from kclawd in chunks): a smaller limit keeps
	     * what unproven connections may make NNG buffer at 4 x 16 MiB
	     * (bus.h). */
	    (rv = bus_server_open_proof(&o->work, opt->cfg.work_url, 512,
	         ORCH_WORK_MAX_MSG, BUS_PROVE_BY_HANDLER, kc_work_proof,
	         o->opt.cfg.token, orch_on_work, o)) != 0 ||
	    /* Tensors come with PutBlob in pieces of at most 2 MiB, not
	     * with Submit: 4 MiB admits every request (upload.h). */
	    (rv = bus_server_open_proof(&o->api, opt->cfg.api_url, 64,
	         ORCH_API_MAX_MSG, BUS_PROVE_BY_HANDLER, kc_api_proof,
	         o->opt.cfg.token, orch_on_api, o)) != 0)
		goto fail;
	*out = o;
	return 0;
fail:
	orch_close(o);
	return rv;
}

void
orch_stop(orch *o)
{
	ssize_t n;

	o->stopping = 1;
	n = write(o->wake_fd[1], "x", 1);
	(void)n;
}

static void
orch_flush_replies(orch *o)
{
	struct orch_reply *r, *next;

	for (r = o->replies; r; r = next) {
		Kclaw__ApiResponse ar = KCLAW__API_RESPONSE__INIT;
		next = r->next;
		ar.request_id = r->request_id;
		ar.code = r->code;
		ar.error = r->error ? r->error : "";
		ar.payload.data = r->payload;
		ar.payload.len = r->plen;
		kc_call_reply_msg(r->call, &ar.base);
		free(r->error);
		free(r->payload);
		free(r);
	}
	o->replies = NULL;
	o->replies_tail = &o->replies;
}

/* The GPU's SM count for retrieval: what the base's evaluation reports (the
 * sandbox's metric device.sm_count), else kclaw.json's; 0: unknown. */
static uint32_t
orch_sm_count(const orch *o, const Kclaw__CandidateRecord *base)
{
	double sms = kc_eval_metric(base->eval, "device.sm_count");

	return sms > 0 ? (uint32_t)sms : o->opt.sm_count;
}

/*
 * Commits the cycle's batch (synced when it holds transitions), then runs
 * what waited for it: events go out, API answers, new jobs are queued,
 * retrievals run. A failed commit stops the process: the store is the
 * truth, and a restart resumes from it.
 */
static void
orch_commit(orch *o, bool sync)
{
	struct orch_msg *m, *next;

	if (o->staged) {
		int rv = store_batch_commit(o->db, o->batch, sync);
		if (rv != 0) {
			KC_ERROR("store commit failed: %s; exiting so that a "
			         "restart resumes from the store",
			    kc_lasterr());
			_exit(1);
		}
		if (sync)
			o->counters.commits++;
	}
	o->committed_seq = o->last_seq;
	store_batch_free(o->batch);
	o->batch = NULL;
	o->staged = 0;
	o->batch_gen++;
	for (size_t i = 0; i < o->npending; i++) {
		orch_publish(o, o->pending_events[i]);
		kclaw__event__free_unpacked(o->pending_events[i], NULL);
	}
	o->npending = 0;
	orch_flush_replies(o);
	for (size_t i = 0; i < o->nto_queue; i++)
		orch_job_enqueue(o, o->to_queue[i]);
	o->nto_queue = 0;
	for (size_t i = 0; i < o->nto_import; i++)
		if (orch_import_queue(o, o->to_import[i]) != 0)
			KC_ERROR("task %s: import not started (out of memory); "
			         "a restart starts it",
			    o->to_import[i]->id);
	o->nto_import = 0;
	for (m = o->to_retrieve; m; m = next) {
		const orch_memory_ops *mem = o->opt.memory;
		Kclaw__CandidateRecord *base = NULL;
		Kclaw__Recommendation **recs = NULL;
		Kclaw__TaskSpec *spec = NULL;
		orch_retrieve_ctx ctx = {0};
		size_t n = 0;
		next = m->next;
		if (orch_spec_get(o, m->task->id, &spec) != 0)
			kc_clearerr();
		ctx.task = spec;
		if (orch_cand_get(o, m->task->id, m->task->fsm.base, &base) ==
		    0)
			ctx.sm_count = orch_sm_count(o, base);
		if (base &&
		    mem->retrieve(o->opt.memory_arg, o->db, base, &ctx, &recs,
		        &n, &m->signature) != 0) {
			KC_WARN("task %s: retrieval failed (%s); planning "
			        "without recommendations",
			    m->task->id, kc_lasterr());
			recs = NULL;
			n = 0;
		}
		if (base)
			kclaw__candidate_record__free_unpacked(base, NULL);
		if (spec)
			kclaw__task_spec__free_unpacked(spec, NULL);
		m->retrieved = malloc(sizeof(*m->retrieved));
		if (m->retrieved == NULL) {
			free(m);
			continue;
		}
		kclaw__candidate_record__init(m->retrieved);
		m->retrieved->methods = recs;
		m->retrieved->n_methods = n;
		m->next = NULL;
		if (o->loop_tail)
			o->loop_tail->next = m;
		else
			o->loop_head = m;
		o->loop_tail = m;
	}
	o->to_retrieve = NULL;
}

static void
orch_msg_free(struct orch_msg *m)
{
	if (m->retrieved)
		kclaw__candidate_record__free_unpacked(m->retrieved, NULL);
	if (m->spec)
		kclaw__task_spec__free_unpacked(m->spec, NULL);
	free(m->signature);
	free(m->text);
	free(m);
}

/* The importer's answer: the spec with its blobs is committed with the
 * IMPORTED transition (the task seeds), or the task fails with the
 * reason. A task no longer IMPORTING (cancelled) ignores it. */
static void
orch_imported(orch *o, struct orch_msg *m)
{
	struct orch_task *t = m->task;
	orch_input in = {.kind = ORCH_IN_IMPORTED};
	char key[64];
	int rv = 0;

	if (t->fsm.state != ORCH_ST_IMPORTING)
		return;
	kc_clearerr();
	if (m->spec) {
		snprintf(key, sizeof(key), "%s/spec", t->id);
		rv = orch_put_msg(o, STORE_CF_TASKS, key, &m->spec->base);
	} else {
		in.kind = ORCH_IN_IMPORT_FAILED;
		t->why = m->text;
	}
	if (rv == 0)
		rv = orch_task_input(o, t, &in, NULL, NULL, NULL);
	t->why = NULL;
	if (rv != 0)
		KC_ERROR("task %s: %s", t->id, kc_lasterr());
}

static void
orch_handle(orch *o, struct orch_msg *m)
{
	switch (m->kind) {
	case ORCH_MSG_API: orch_api_call(o, m->call); break;
	case ORCH_MSG_WORK: orch_work_call(o, m->call); break;
	case ORCH_MSG_RETRIEVED: {
		orch_input in = {.kind = ORCH_IN_RETRIEVED, .job = m->job};
		if (orch_task_input(o, m->task, &in, NULL, NULL, m) != 0)
			KC_ERROR("task %s: %s", m->task->id, kc_lasterr());
		break;
	}
	case ORCH_MSG_IMPORT_PROGRESS:
		if (m->task->fsm.state == ORCH_ST_IMPORTING) {
			free(m->task->detail);
			m->task->detail = m->text;
			m->text = NULL;
		}
		break;
	case ORCH_MSG_IMPORTED: orch_imported(o, m); break;
	}
	orch_msg_free(m);
}

/* Deadlines of tasks: a tick once a second. */
static void
orch_ticks(orch *o)
{
	uint64_t now = kc_now_ms();

	if (kc_mono_ms() - o->last_tick_mono < 1000)
		return;
	o->last_tick_mono = kc_mono_ms();
	for (size_t i = 0; i < o->nall; i++) {
		struct orch_task *t = o->all[i];
		if (!orch_state_final(t->fsm.state) && t->fsm.p.deadline_ms &&
		    now >= t->fsm.p.deadline_ms) {
			orch_input in = {.kind = ORCH_IN_TICK, .now_ms = now};
			kc_clearerr();
			orch_task_input(o, t, &in, NULL, NULL, NULL);
		}
	}
}

int
orch_run(orch *o)
{
	while (!o->stopping) {
		struct orch_msg *m, *next, *api = NULL, **api_tail;
		uint64_t before;
		struct pollfd pfd = {.fd = o->wake_fd[0], .events = POLLIN};
		char drain[64];

		nng_mtx_lock(o->mtx);
		if (o->in_head == NULL && o->loop_head == NULL)
			nng_cv_until(o->cv, nng_clock() + 50);
		m = o->in_head;
		o->in_head = o->in_tail = NULL;
		nng_mtx_unlock(o->mtx);
		if (poll(&pfd, 1, 0) > 0)
			while (read(o->wake_fd[0], drain, sizeof(drain)) > 0)
				;
		if (o->stopping) {
			for (; m; m = next) {
				next = m->next;
				if (m->call)
					bus_call_drop(m->call);
				orch_msg_free(m);
			}
			break;
		}
		if (store_batch_new(&o->batch) != 0)
			return KC_ENOMEM;
		/* Inputs the loop made itself first, then the new ones. */
		if (o->loop_tail) {
			o->loop_tail->next = m;
			m = o->loop_head;
			o->loop_head = o->loop_tail = NULL;
		}
		/* Results and retrievals first; API calls after their commit,
		 * so that what a call reads from the store agrees with the
		 * tasks in memory. */
		for (api_tail = &api; m; m = next) {
			next = m->next;
			if (m->kind == ORCH_MSG_API) {
				m->next = NULL;
				*api_tail = m;
				api_tail = &m->next;
				continue;
			}
			orch_handle(o, m);
		}
		orch_sched_timers(o);
		orch_ticks(o);
		orch_commit(o, true);
		/* API calls and dispatch write events and, for Submit, Cancel
		 * or a job that cannot be built, transitions: then the commit
		 * is synced too. */
		if (store_batch_new(&o->batch) != 0)
			return KC_ENOMEM;
		before = o->counters.transitions;
		for (m = api; m; m = next) {
			next = m->next;
			orch_handle(o, m);
		}
		orch_dispatch(o);
		orch_commit(o, o->counters.transitions != before);
	}
	return 0;
}

void
orch_get_counters(orch *o, orch_counters *c)
{
	*c = o->counters;
	c->tasks_active = (uint32_t)o->nactive;
	c->tasks_total = (uint32_t)o->ntasks;
}

void
orch_close(orch *o)
{
	struct orch_msg *m, *next;

	if (o == NULL)
		return;
	/* First: the importer posts inputs and reads the store. */
	orch_import_close(o);
	/* The blob and upload threads hold calls of the work and API
	 * sockets: they stop first. */
	orch_blob_server_stop(o->blobsrv);
	orch_upload_stop(o->upload);
	bus_server_close(o->api);
	bus_server_close(o->work);
	o->api = o->work = NULL;
	orch_blob_server_close(o->blobsrv);
	o->blobsrv = NULL;
	orch_upload_close(o->upload);
	o->upload = NULL;
	orch_sched_close(o);
	bus_pub_close(o->pub);
	for (m = o->in_head; m; m = next) {
		next = m->next;
		orch_msg_free(m);
	}
	for (m = o->loop_head; m; m = next) {
		next = m->next;
		orch_msg_free(m);
	}
	for (m = o->to_retrieve; m; m = next) {
		next = m->next;
		orch_msg_free(m);
	}
	for (size_t i = 0; i < o->npending; i++)
		kclaw__event__free_unpacked(o->pending_events[i], NULL);
	free(o->pending_events);
	free(o->to_queue);
	free(o->to_import);
	for (size_t i = 0; i < o->nall; i++) {
		free(o->all[i]->name);
		free(o->all[i]->detail);
		free(o->all[i]->agent_error);
		if (o->all[i]->refcheck)
			kclaw__reference_check__free_unpacked(
			    o->all[i]->refcheck, NULL);
		free(o->all[i]);
	}
	free(o->all);
	free(o->buckets);
	if (o->batch)
		store_batch_free(o->batch);
	store_close(o->db);
	if (o->cv)
		nng_cv_free(o->cv);
	if (o->mtx)
		nng_mtx_free(o->mtx);
	if (o->wake_fd[0] >= 0) {
		close(o->wake_fd[0]);
		close(o->wake_fd[1]);
	}
	free(o);
}
