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

/*
 * Binding screening (docs/orchestrator.md "Screening"). A method outside
 * the retrieved list is taken only in an exploration round (job->explore).
 * Otherwise the Planner is asked once more, naming the list; its reply
 * stands if it chooses among them. If it insists, or the ask cannot be
 * answered (a failed call, a replay recorded without it), or this was the
 * last ask, the plan is bound to the best retrieved method: the first,
 * with the Planner's steps replaced (they were for another method). The
 * bound plan waits in reply->plan meanwhile, so agent_converse keeps it.
 */
static int
agent_plan_bound(const Kclaw__AgentJob *job, const char *chosen,
    const char *rationale, const char *effect, Kclaw__OptPlan **out)
{
	const Kclaw__Recommendation *best = job->methods[0];
	Kclaw__OptPlan *p = malloc(sizeof(*p));
	kc_str step = {0}, why = {0};
	const char *know = best->knowledge ? best->knowledge : "";
	size_t kn = strcspn(know, "\n");
	int rv = KC_ENOMEM;

	if (p == NULL)
		return KC_ENOMEM;
	kclaw__opt_plan__init(p);
	if (kn > 300)
		kn = 300;
	if (kc_str_printf(&step,
	        "1. Apply %s to the base kernel%s%.*s (the Planner's steps "
	        "were for %s, which is not among the retrieved methods, and "
	        "are not used).",
	        best->method, kn ? ": " : "", (int)kn, know, chosen) != 0 ||
	    kc_str_printf(&why,
	        "%s [screened: %s is outside the retrieved methods in a "
	        "round that does not explore; bound to %s, the best "
	        "retrieved method]",
	        rationale, chosen, best->method) != 0 ||
	    (p->steps = calloc(1, sizeof(char *))) == NULL)
		goto out;
	p->steps[0] = kc_str_take(&step);
	p->n_steps = 1;
	p->rationale = kc_str_take(&why);
	p->exploration = false;
	if (agent_pb_setstr(&p->method, best->method) != 0 ||
	    agent_pb_setstr(&p->expected_effect, effect) != 0 ||
	    agent_pb_setstr(&p->screening, "bound") != 0 ||
	    agent_pb_setstr(&p->planner_method, chosen) != 0)
		goto out;
	*out = p;
	p = NULL;
	rv = 0;
out:
	kc_str_free(&step);
	kc_str_free(&why);
	if (p != NULL)
		kclaw__opt_plan__free_unpacked(p, NULL);
	return rv;
}

/* The names of the retrieved methods, ", "-separated, into err's text. */
static void
agent_screen_error(const Kclaw__AgentJob *job, const char *method, kc_str *err)
{
	kc_str_printf(err,
	    "\"%s\" is not among the methods retrieved from long-term memory, "
	    "and this round is not an exploration round: choose one of ",
	    method);
	for (size_t i = 0; i < job->n_methods; i++)
		kc_str_printf(
		    err, "%s%s", i ? ", " : "", job->methods[i]->method);
	kc_str_printf(err,
	    " and write the plan for it (otherwise the plan is bound to %s)",
	    job->methods[0]->method);
}

static int
agent_planner_accept(const Kclaw__AgentJob *job, const char *text, bool last,
    Kclaw__AgentReply *reply, kc_str *err)
{
	const char *method, *rationale, *screening = "";
	const cJSON *steps, *st;
	Kclaw__OptPlan *p = NULL, *bound = reply->plan;
	cJSON *root;
	size_t i;
	int rv, n;
	bool outside;

	/* A reply to the screening ask that is not usable: the bound plan
	 * stands. */
	if ((rv = agent_parse_json(text, &root, err)) != 0)
		return bound ? 0 : rv;
	if ((rv = agent_json_text(root, "method", &method, err)) != 0 ||
	    (rv = agent_json_text(root, "rationale", &rationale, err)) != 0)
		goto out;
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
	for (i = 0; i < job->n_methods; i++)
		if (agent_same_method(job->methods[i]->method, method))
			break;
	if (i < job->n_methods)
		method = job->methods[i]->method; /* the memory's spelling */
	/* Without recommendations there is nothing to screen against. */
	outside = job->n_methods > 0 && i == job->n_methods;
	if (outside && job->explore) {
		screening = "explored";
	} else if (outside && bound) {
		rv = 0; /* it insists: bound */
		goto out;
	} else if (outside) {
		if ((rv = agent_plan_bound(job, method, rationale,
		         agent_json_opt(root, "expected_effect"),
		         &reply->plan)) != 0)
			goto out;
		if (!last) {
			agent_screen_error(job, method, err);
			rv = KC_EINVAL;
		}
		goto out;
	} else if (bound) {
		screening = "asked again";
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
	p->exploration = job->explore;
	if (agent_pb_setstr(&p->method, method) != 0 ||
	    agent_pb_setstr(&p->rationale, rationale) != 0 ||
	    agent_pb_setstr(&p->expected_effect,
	        agent_json_opt(root, "expected_effect")) != 0 ||
	    agent_pb_setstr(&p->screening, screening) != 0 ||
	    agent_pb_setstr(&p->planner_method,
	        bound ? bound->planner_method : method) != 0) {
		rv = KC_ENOMEM;
		goto out;
	}
	if (bound)
		kclaw__opt_plan__free_unpacked(bound, NULL);
	reply->plan = p;
	p = NULL;
out:
	if (p != NULL)
		kclaw__opt_plan__free_unpacked(p, NULL);
	cJSON_Delete(root);
	/* A malformed screening answer: the bound plan stands. */
	if (rv == KC_EINVAL && bound && reply->plan == bound) {
		err->len = 0;
		if (err->buf != NULL)
			err->buf[0] = '\0';
		rv = 0;
	}
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
