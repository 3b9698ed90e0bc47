/*
 * agent_roles.c - the six roles as a table: what each needs from its job,
 * what it adds to the prompt, and how its reply is validated into an
 * AgentReply. Generator, Optimizer and Repairer answer with candidates
 * (code + plan), Feature Extractor with features, Planner with an OptPlan
 * and Diagnoser with a Diagnosis, the last three as JSON.
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "kc_err.h"

#define AGENT_PLAN_MAX_STEPS 20
#define AGENT_TEXT_MAX 4000

/* ------------------------------------------------------------- helpers */

static int
agent_need(
    const void *field, const char *job_id, const char *role, const char *what)
{
	if (field != NULL)
		return 0;
	return kc_seterr(KC_EINVAL,
	    "%s job %s has no %s; the orchestrator must send it with every "
	    "%s job",
	    role, job_id, what, role);
}

/* A required string field of a JSON reply, not empty and bounded. */
static int
agent_json_text(const cJSON *o, const char *key, const char **out, kc_str *err)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	const char *s;

	if (!cJSON_IsString(v)) {
		kc_str_printf(
		    err, "field \"%s\" is missing or not a string", key);
		return KC_EINVAL;
	}
	for (s = v->valuestring; isspace((unsigned char)*s); s++)
		;
	if (*s == '\0') {
		kc_str_printf(err, "field \"%s\" is empty", key);
		return KC_EINVAL;
	}
	if (strlen(v->valuestring) > AGENT_TEXT_MAX) {
		kc_str_printf(err,
		    "field \"%s\" is longer than %d characters; be "
		    "concise",
		    key, AGENT_TEXT_MAX);
		return KC_EINVAL;
	}
	*out = v->valuestring;
	return 0;
}

static const char *
agent_json_opt(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsString(v) ? v->valuestring : "";
}

/*
 * Candidates from a reply into reply->candidates. want is how many are
 * asked for; on the last ask fewer (but at least one) are accepted.
 */
static int
agent_accept_candidates(const Kclaw__AgentJob *job, const char *text, bool last,
    size_t want, const char *origin, const char *parent, const char *method,
    Kclaw__AgentReply *reply, kc_str *err)
{
	Kclaw__Candidate **c;
	size_t n, i;
	int rv;

	rv = agent_parse_candidates(job->task, text, want, &c, &n, err);
	if (rv == KC_ENOMEM)
		return rv;
	if (rv == 0 && n < want) {
		kc_str_printf(err,
		    "%zu candidate(s) given, %zu asked for; give each as a "
		    "```cuda block followed by its ```json plan block",
		    n, want);
		rv = KC_EINVAL;
	}
	if (rv != 0 && (!last || n == 0)) {
		for (i = 0; i < n; i++)
			kclaw__candidate__free_unpacked(c[i], NULL);
		free(c);
		return KC_EINVAL;
	}
	for (i = 0; i < n; i++) {
		c[i]->round = job->round;
		if (agent_pb_setstr(&c[i]->origin, origin) != 0 ||
		    (parent &&
		        agent_pb_setstr(&c[i]->parent_id, parent) != 0) ||
		    (method && agent_pb_setstr(&c[i]->method, method) != 0))
			rv = KC_ENOMEM;
	}
	reply->candidates = c;
	reply->n_candidates = n;
	return rv == KC_ENOMEM ? rv : 0;
}

/* ----------------------------------------------------------- generator */

static int
agent_generator_prepare(const Kclaw__AgentJob *job, agent_vars *vars)
{
	(void)vars;
	if (job->count > 16)
		return kc_seterr(KC_EINVAL,
		    "generator job %s asks for %u seeds; at most 16 per job",
		    job->job_id, job->count);
	return 0;
}

static int
agent_generator_accept(const Kclaw__AgentJob *job, const char *text, bool last,
    Kclaw__AgentReply *reply, kc_str *err)
{
	return agent_accept_candidates(job, text, last,
	    job->count ? job->count : 1, "generator", NULL, NULL, reply, err);
}

/* ------------------------------------------------------------- feature */

static bool
agent_is_feature_name(const char *s)
{
	size_t n = 0;

	if (!islower((unsigned char)s[0]))
		return false;
	for (; s[n] != '\0'; n++)
		if (!islower((unsigned char)s[n]) &&
		    !isdigit((unsigned char)s[n]) && s[n] != '_')
			return false;
	return n <= 48;
}

static int
agent_feature_prepare(const Kclaw__AgentJob *job, agent_vars *vars)
{
	Kclaw__Feature **f = NULL;
	kc_str s = {0};
	size_t n = 0, i;
	int rv;

	if ((rv = agent_need(
	         job->base_kernel, job->job_id, "feature", "base_kernel")) != 0)
		return rv;
	rv = agent_rule_features(job->base_kernel->source,
	    job->base_kernel->plan_json, job->base_eval, &f, &n);
	for (i = 0; rv == 0 && i < n; i++)
		rv = kc_str_printf(&s, "- %s = %g (%s)\n", f[i]->name,
		    f[i]->value, f[i]->note);
	for (i = 0; i < n; i++)
		kclaw__feature__free_unpacked(f[i], NULL);
	free(f);
	if (rv == 0)
		rv = agent_vars_take(vars, "rule_features", kc_str_take(&s));
	kc_str_free(&s);
	return rv;
}

static int
agent_feature_accept(const Kclaw__AgentJob *job, const char *text, bool last,
    Kclaw__AgentReply *reply, kc_str *err)
{
	const cJSON *arr, *it, *name, *value, *note;
	Kclaw__Feature **f = NULL, *x, **nv;
	size_t n = 0, nrule, i;
	cJSON *root;
	int rv, j = 0;

	(void)last;
	if ((rv = agent_parse_json(text, &root, err)) != 0)
		return rv;
	arr = cJSON_GetObjectItemCaseSensitive(root, "features");
	if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) < 1) {
		kc_str_printf(err,
		    "\"features\" must be a non-empty array of "
		    "{\"name\": ..., \"value\": ..., \"note\": "
		    "...}");
		cJSON_Delete(root);
		return KC_EINVAL;
	}
	if ((rv = agent_rule_features(job->base_kernel->source,
	         job->base_kernel->plan_json, job->base_eval, &f, &n)) != 0)
		goto out;
	nrule = n;
	cJSON_ArrayForEach(it, arr)
	{
		double v;
		name = cJSON_GetObjectItemCaseSensitive(it, "name");
		value = cJSON_GetObjectItemCaseSensitive(it, "value");
		note = cJSON_GetObjectItemCaseSensitive(it, "note");
		if (!cJSON_IsString(name) ||
		    !agent_is_feature_name(name->valuestring)) {
			kc_str_printf(err,
			    "features[%d]: \"name\" must be snake_case "
			    "([a-z][a-z0-9_]*, at most 48 characters)",
			    j);
			rv = KC_EINVAL;
			goto out;
		}
		if (cJSON_IsBool(value))
			v = cJSON_IsTrue(value) ? 1 : 0;
		else if (cJSON_IsNumber(value) && isfinite(value->valuedouble))
			v = value->valuedouble;
		else {
			kc_str_printf(err,
			    "features[%d] '%s': \"value\" must be a number", j,
			    name->valuestring);
			rv = KC_EINVAL;
			goto out;
		}
		for (i = 0; i < n; i++) {
			if (strcmp(f[i]->name, name->valuestring) == 0) {
				kc_str_printf(err,
				    "features[%d]: '%s' is %s; give each "
				    "semantic feature once and do not repeat "
				    "the measured ones",
				    j, name->valuestring,
				    i < nrule ? "a rule feature already "
				                "measured"
				              : "given twice");
				rv = KC_EINVAL;
				goto out;
			}
		}
		if ((nv = realloc(f, (n + 1) * sizeof(*f))) == NULL ||
		    (x = malloc(sizeof(*x))) == NULL) {
			if (nv != NULL)
				f = nv;
			rv = KC_ENOMEM;
			goto out;
		}
		f = nv;
		kclaw__feature__init(x);
		f[n++] = x;
		x->value = v;
		if (agent_pb_setstr(&x->name, name->valuestring) != 0 ||
		    agent_pb_setstr(&x->source, "llm") != 0 ||
		    agent_pb_setstr(&x->note,
		        cJSON_IsString(note) ? note->valuestring : "") != 0) {
			rv = KC_ENOMEM;
			goto out;
		}
		j++;
	}
out:
	cJSON_Delete(root);
	if (rv != 0) {
		for (i = 0; i < n; i++)
			kclaw__feature__free_unpacked(f[i], NULL);
		free(f);
		return rv;
	}
	reply->features = f;
	reply->n_features = n;
	return 0;
}

/* ------------------------------------------------------------- planner */

/* Method names match ignoring case and the choice of '_', '-' or ' '
 * ("Warp Shuffle Reduction" is warp_shuffle_reduction). */
static bool
agent_same_method(const char *a, const char *b)
{
	for (; *a != '\0' && *b != '\0'; a++, b++) {
		char x = (char)tolower((unsigned char)*a);
		char y = (char)tolower((unsigned char)*b);
		if (x == '-' || x == ' ')
			x = '_';
		if (y == '-' || y == ' ')
			y = '_';
		if (x != y)
			return false;
	}
	return *a == *b;
}

static int
agent_planner_prepare(const Kclaw__AgentJob *job, agent_vars *vars)
{
	(void)vars;
	return agent_need(
	    job->base_kernel, job->job_id, "planner", "base_kernel");
}

static int
agent_planner_accept(const Kclaw__AgentJob *job, const char *text, bool last,
    Kclaw__AgentReply *reply, kc_str *err)
{
	const char *method, *rationale;
	const cJSON *steps, *st;
	Kclaw__OptPlan *p = NULL;
	cJSON *root;
	size_t i;
	int rv, n;
	bool outside;

	(void)last;
	if ((rv = agent_parse_json(text, &root, err)) != 0)
		return rv;
	if ((rv = agent_json_text(root, "method", &method, err)) != 0 ||
	    (rv = agent_json_text(root, "rationale", &rationale, err)) != 0)
		goto out;
	for (i = 0; i < job->n_methods; i++)
		if (agent_same_method(job->methods[i]->method, method))
			break;
	if (i < job->n_methods)
		method = job->methods[i]->method; /* the memory's spelling */
	/*
	 * A method outside the retrieved list is accepted, not re-asked: the
	 * list depends on measured metrics and learned statistics, so a
	 * recorded session (or a model that knows better) must not fail on
	 * it. The plan says so, the orchestrator records the attempt, and
	 * the learned memory scores the method like any other.
	 */
	outside = job->n_methods > 0 && i == job->n_methods;
	steps = cJSON_GetObjectItemCaseSensitive(root, "steps");
	n = cJSON_GetArraySize(steps);
	if (!cJSON_IsArray(steps) || n < 1 || n > AGENT_PLAN_MAX_STEPS) {
		kc_str_printf(err,
		    "\"steps\" must be an array of 1 to %d concrete steps "
		    "(strings), in order",
		    AGENT_PLAN_MAX_STEPS);
		rv = KC_EINVAL;
		goto out;
	}
	i = 0;
	cJSON_ArrayForEach(st, steps)
	{
		if (!cJSON_IsString(st) || st->valuestring[0] == '\0') {
			kc_str_printf(err,
			    "steps[%zu] must be a non-empty "
			    "string",
			    i);
			rv = KC_EINVAL;
			goto out;
		}
		i++;
	}
	if ((p = malloc(sizeof(*p))) == NULL) {
		rv = KC_ENOMEM;
		goto out;
	}
	kclaw__opt_plan__init(p);
	if ((p->steps = calloc((size_t)n, sizeof(char *))) == NULL) {
		rv = KC_ENOMEM;
		goto out;
	}
	i = 0;
	cJSON_ArrayForEach(st, steps)
	{
		if ((p->steps[i] = strdup(st->valuestring)) == NULL) {
			rv = KC_ENOMEM;
			goto out;
		}
		p->n_steps = ++i;
	}
	if (outside) {
		kc_str note = {0};
		if (kc_str_printf(&note,
		        "%s [chosen outside the retrieved "
		        "methods]",
		        rationale) != 0) {
			rv = KC_ENOMEM;
			goto out;
		}
		p->rationale = kc_str_take(&note);
	}
	if (agent_pb_setstr(&p->method, method) != 0 ||
	    (!outside && agent_pb_setstr(&p->rationale, rationale) != 0) ||
	    agent_pb_setstr(&p->expected_effect,
	        agent_json_opt(root, "expected_effect")) != 0) {
		rv = KC_ENOMEM;
		goto out;
	}
	reply->plan = p;
	p = NULL;
out:
	if (p != NULL)
		kclaw__opt_plan__free_unpacked(p, NULL);
	cJSON_Delete(root);
	return rv;
}

/* ----------------------------------------------------------- optimizer */

static int
agent_optimizer_prepare(const Kclaw__AgentJob *job, agent_vars *vars)
{
	int rv;

	(void)vars;
	if ((rv = agent_need(job->base_kernel, job->job_id, "optimizer",
	         "base_kernel")) != 0)
		return rv;
	return agent_need(job->plan, job->job_id, "optimizer", "plan");
}

static int
agent_optimizer_accept(const Kclaw__AgentJob *job, const char *text, bool last,
    Kclaw__AgentReply *reply, kc_str *err)
{
	return agent_accept_candidates(job, text, last, 1, "optimizer",
	    job->base_kernel->id, job->plan->method, reply, err);
}

/* ----------------------------------------------------------- diagnoser */

static const char *const agent_categories[] = {"compile", "plan", "launch",
    "fault", "timeout", "wrong_result", "other", NULL};

static int
agent_diagnoser_prepare(const Kclaw__AgentJob *job, agent_vars *vars)
{
	int rv;

	(void)vars;
	if ((rv = agent_need(job->failing, job->job_id, "diagnoser",
	         "failing candidate")) != 0)
		return rv;
	return agent_need(job->failure, job->job_id, "diagnoser", "failure");
}

static int
agent_diagnoser_accept(const Kclaw__AgentJob *job, const char *text, bool last,
    Kclaw__AgentReply *reply, kc_str *err)
{
	const char *cat, *cause, *fix;
	Kclaw__Diagnosis *d;
	cJSON *root;
	size_t i;
	int rv;

	(void)job;
	(void)last;
	if ((rv = agent_parse_json(text, &root, err)) != 0)
		return rv;
	if ((rv = agent_json_text(root, "category", &cat, err)) != 0 ||
	    (rv = agent_json_text(root, "root_cause", &cause, err)) != 0 ||
	    (rv = agent_json_text(root, "fix", &fix, err)) != 0)
		goto out;
	for (i = 0; agent_categories[i] != NULL; i++)
		if (strcmp(agent_categories[i], cat) == 0)
			break;
	if (agent_categories[i] == NULL) {
		kc_str_printf(err,
		    "\"category\" '%s' is unknown; use one of compile, plan, "
		    "launch, fault, timeout, wrong_result, other",
		    cat);
		rv = KC_EINVAL;
		goto out;
	}
	if ((d = malloc(sizeof(*d))) == NULL) {
		rv = KC_ENOMEM;
		goto out;
	}
	kclaw__diagnosis__init(d);
	reply->diagnosis = d;
	if (agent_pb_setstr(&d->category, cat) != 0 ||
	    agent_pb_setstr(&d->root_cause, cause) != 0 ||
	    agent_pb_setstr(&d->fix, fix) != 0)
		rv = KC_ENOMEM;
out:
	cJSON_Delete(root);
	return rv;
}

/* ------------------------------------------------------------ repairer */

static int
agent_repairer_prepare(const Kclaw__AgentJob *job, agent_vars *vars)
{
	int rv;

	(void)vars;
	if ((rv = agent_need(job->failing, job->job_id, "repairer",
	         "failing candidate")) != 0)
		return rv;
	return agent_need(job->diagnosis, job->job_id, "repairer", "diagnosis");
}

static int
agent_repairer_accept(const Kclaw__AgentJob *job, const char *text, bool last,
    Kclaw__AgentReply *reply, kc_str *err)
{
	return agent_accept_candidates(job, text, last, 1, "repairer",
	    job->failing->id, job->failing->method, reply, err);
}

/* --------------------------------------------------------------- table */

static const agent_role agent_roles[] = {
    {KCLAW__ROLE__GENERATOR, "generator", "Generator", agent_generator_prepare,
        agent_generator_accept},
    {KCLAW__ROLE__FEATURE, "feature", "Feature Extractor",
        agent_feature_prepare, agent_feature_accept},
    {KCLAW__ROLE__PLANNER, "planner", "Planner", agent_planner_prepare,
        agent_planner_accept},
    {KCLAW__ROLE__OPTIMIZER, "optimizer", "Optimizer", agent_optimizer_prepare,
        agent_optimizer_accept},
    {KCLAW__ROLE__DIAGNOSER, "diagnoser", "Diagnoser", agent_diagnoser_prepare,
        agent_diagnoser_accept},
    {KCLAW__ROLE__REPAIRER, "repairer", "Repairer", agent_repairer_prepare,
        agent_repairer_accept},
};

const agent_role *
agent_role_by_name(const char *name)
{
	size_t i;

	for (i = 0; i < KC_ARRAY_LEN(agent_roles); i++)
		if (strcmp(agent_roles[i].name, name) == 0)
			return &agent_roles[i];
	return NULL;
}

const agent_role *
agent_role_by_id(Kclaw__Role role)
{
	size_t i;

	for (i = 0; i < KC_ARRAY_LEN(agent_roles); i++)
		if (agent_roles[i].role == role)
			return &agent_roles[i];
	return NULL;
}
