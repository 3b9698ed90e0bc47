/*
 * agent_prompt.c - prompt templates: variables, rendering, and the
 * variables every role gets from its job (task, kernels, evaluations,
 * memories) rendered as text a model reads well.
 */
#include <protobuf-c/protobuf-c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "api.h"
#include "bundle.h"
#include "kc_err.h"
#include "kc_util.h"

/* A compile log longer than this is cut: its start names the first error. */
#define AGENT_LOG_MAX 6000
#define AGENT_TEMPLATE_MAX (1u << 20)

/* ------------------------------------------------------------ variables */

int
agent_vars_take(agent_vars *vars, const char *name, char *value)
{
	size_t i;

	if (value == NULL)
		return KC_ENOMEM;
	for (i = 0; i < vars->n; i++) {
		if (strcmp(vars->v[i].name, name) == 0) {
			free(vars->v[i].value);
			vars->v[i].value = value;
			return 0;
		}
	}
	if (vars->n == vars->cap) {
		size_t cap = vars->cap ? vars->cap * 2 : 32;
		agent_var *v = realloc(vars->v, cap * sizeof(*v));
		if (v == NULL) {
			free(value);
			return KC_ENOMEM;
		}
		vars->v = v;
		vars->cap = cap;
	}
	if ((vars->v[vars->n].name = strdup(name)) == NULL) {
		free(value);
		return KC_ENOMEM;
	}
	vars->v[vars->n++].value = value;
	return 0;
}

int
agent_vars_set(agent_vars *vars, const char *name, const char *value)
{
	return agent_vars_take(vars, name, strdup(value ? value : ""));
}

const char *
agent_vars_get(const agent_vars *vars, const char *name)
{
	size_t i;

	for (i = 0; i < vars->n; i++)
		if (strcmp(vars->v[i].name, name) == 0)
			return vars->v[i].value;
	return NULL;
}

void
agent_vars_free(agent_vars *vars)
{
	size_t i;

	for (i = 0; i < vars->n; i++) {
		free(vars->v[i].name);
		free(vars->v[i].value);
	}
	free(vars->v);
	memset(vars, 0, sizeof(*vars));
}

/* ------------------------------------------------------------ rendering */

static unsigned
agent_line_of(const char *start, const char *p)
{
	unsigned line = 1;

	for (; start < p; start++)
		if (*start == '\n')
			line++;
	return line;
}

static int
agent_render_span(const char *base, const char *p, const char *end,
    const agent_vars *vars, const char *where, kc_str *out)
{
	char name[64];
	const char *open, *close, *body_end, *v;
	size_t nlen;
	int rv;

	while (p < end) {
		open = strstr(p, "{{");
		if (open == NULL || open >= end) {
			return kc_str_appendn(out, p, (size_t)(end - p));
		}
		if ((rv = kc_str_appendn(out, p, (size_t)(open - p))) != 0)
			return rv;
		close = strstr(open + 2, "}}");
		if (close == NULL || close >= end)
			return kc_seterr(KC_EINVAL,
			    "%s:%u: '{{' is never closed with '}}'", where,
			    agent_line_of(base, open));
		{
			const char *s = open + 2, *e = close;
			while (s < e && *s == ' ')
				s++;
			while (e > s && e[-1] == ' ')
				e--;
			nlen = (size_t)(e - s);
			if (nlen == 0 || nlen >= sizeof(name))
				return kc_seterr(KC_EINVAL,
				    "%s:%u: empty or too long template tag",
				    where, agent_line_of(base, open));
			memcpy(name, s, nlen);
			name[nlen] = '\0';
		}
		p = close + 2;
		if (name[0] == '#' || name[0] == '^') {
			char tag[80];
			bool want = name[0] == '#';
			snprintf(tag, sizeof(tag), "{{/%s}}", name + 1);
			body_end = strstr(p, tag);
			if (body_end == NULL || body_end >= end)
				return kc_seterr(KC_EINVAL,
				    "%s:%u: section {{%s}} is never closed "
				    "with %s",
				    where, agent_line_of(base, open), name,
				    tag);
			if ((v = agent_vars_get(vars, name + 1)) == NULL)
				return kc_seterr(KC_EINVAL,
				    "%s:%u: unknown variable '%s'", where,
				    agent_line_of(base, open), name + 1);
			if ((v[0] != '\0') == want &&
			    (rv = agent_render_span(
			         base, p, body_end, vars, where, out)) != 0)
				return rv;
			p = body_end + strlen(tag);
			continue;
		}
		if (name[0] == '/')
			return kc_seterr(KC_EINVAL,
			    "%s:%u: {{%s}} closes a section that was not "
			    "opened",
			    where, agent_line_of(base, open), name);
		if ((v = agent_vars_get(vars, name)) == NULL)
			return kc_seterr(KC_EINVAL,
			    "%s:%u: unknown variable '%s'; see docs/agents.md "
			    "for the variables a template may use",
			    where, agent_line_of(base, open), name);
		if ((rv = kc_str_append(out, v)) != 0)
			return rv;
	}
	return 0;
}

int
agent_render(
    const char *tmpl, const agent_vars *vars, const char *where, char **out)
{
	kc_str s = {0};
	int rv;

	if ((rv = agent_render_span(
	         tmpl, tmpl, tmpl + strlen(tmpl), vars, where, &s)) != 0 ||
	    (rv = kc_str_append(&s, "")) != 0) {
		kc_str_free(&s);
		return rv;
	}
	*out = kc_str_take(&s);
	return 0;
}

int
agent_render_file(const char *prompts_dir, const char *file,
    const agent_vars *vars, char **out)
{
	char path[KC_PATH_MAX * 2], *text;
	size_t len;
	int rv;

	snprintf(path, sizeof(path), "%s/%s", prompts_dir, file);
	if ((rv = kc_read_file(path, AGENT_TEMPLATE_MAX, &text, &len)) != 0)
		return kc_seterr(rv,
		    "cannot read prompt template %s (%s); check the prompts "
		    "folder (--prompts or KCLAW_PROMPTS_DIR)",
		    path, kc_strerror(rv));
	rv = agent_render(text, vars, path, out);
	free(text);
	return rv;
}

/* ------------------------------------------------ job -> variables */

static const char *
agent_enum_name(const ProtobufCEnumDescriptor *d, int value)
{
	const ProtobufCEnumValue *v =
	    protobuf_c_enum_descriptor_get_value(d, value);

	return v != NULL ? v->name : "UNKNOWN";
}

static int
agent_put(agent_vars *vars, const char *name, kc_str *s)
{
	if (s->buf == NULL && kc_str_append(s, "") != 0)
		return KC_ENOMEM;
	return agent_vars_take(vars, name, kc_str_take(s));
}

static int
agent_render_tensors(const Kclaw__TaskSpec *t, kc_str *s, kc_str *names)
{
	size_t i, d;
	int rv = 0;

	for (i = 0; i < t->n_tensors && rv == 0; i++) {
		const Kclaw__TensorSpec *ts = t->tensors[i];
		if (ts->kind == KCLAW__TENSOR_KIND__SCALAR) {
			/* Passed by value: a plan names it in a step's args. */
			rv = kc_str_printf(s,
			    "- %s: scalar %s = %.17g (name it in a step's "
			    "args; "
			    "the kernel gets the value)\n",
			    ts->name, kc_dtype_name(ts->dtype),
			    ts->scalar_value);
			if (rv == 0)
				rv = kc_str_printf(
				    names, "%s%s", i ? ", " : "", ts->name);
			continue;
		}
		rv = kc_str_printf(s, "- %s: %s %s [", ts->name,
		    kc_tensor_kind_name(ts->kind), kc_dtype_name(ts->dtype));
		for (d = 0; d < ts->n_shape && rv == 0; d++)
			rv = kc_str_printf(s, "%s%lld", d ? ", " : "",
			    (long long)ts->shape[d]);
		if (rv == 0)
			rv = kc_str_append(s, "]\n");
		if (rv == 0)
			rv = kc_str_printf(
			    names, "%s%s", i ? ", " : "", ts->name);
	}
	return rv;
}

/* The GPU: its name and architecture, and what the sandbox measured and
 * read of it (device.* metrics): SMs, memory, bandwidth, L2, shared
 * memory, registers, the arithmetic peak. */
static int
agent_render_device(const Kclaw__EvalResult *e, kc_str *s)
{
	double sms = kc_eval_metric(e, "device.sm_count");
	double bw = kc_eval_metric(e, "device.bandwidth_gbs");
	double l2 = kc_eval_metric(e, "device.l2_bytes");
	double shb = kc_eval_metric(e, "device.shared_per_block_optin");
	double shsm = kc_eval_metric(e, "device.shared_per_sm");
	double regs = kc_eval_metric(e, "device.registers_per_sm");
	double thr = kc_eval_metric(e, "device.max_threads_per_sm");
	double mem = kc_eval_metric(e, "device.memory_bytes");
	double peak = kc_eval_metric(e, "device.peak_tflops");
	int rv = kc_str_printf(
	    s, "device: %s (%s)", e->device_name, e->arch ? e->arch : "");

	if (rv == 0 && sms > 0)
		rv = kc_str_printf(s, ", %.0f SMs", sms);
	if (rv == 0 && mem > 0)
		rv = kc_str_printf(s, ", %.0f GiB memory", mem / (1 << 30));
	if (rv == 0 && bw > 0)
		rv =
		    kc_str_printf(s, ", %.0f GB/s measured copy bandwidth", bw);
	if (rv == 0 && l2 > 0)
		rv = kc_str_printf(s, ", L2 %.0f MiB", l2 / (1 << 20));
	if (rv == 0 && shb > 0)
		rv = kc_str_printf(s,
		    ", shared memory %.0f KiB per block (opt-in) and %.0f KiB "
		    "per SM",
		    shb / 1024, shsm / 1024);
	if (rv == 0 && regs > 0)
		rv = kc_str_printf(
		    s, ", %.0f registers and %.0f threads per SM", regs, thr);
	if (rv == 0 && peak > 0)
		rv = kc_str_printf(
		    s, ", arithmetic peak about %.0f TFLOP/s", peak);
	return rv == 0 ? kc_str_append(s, "\n") : rv;
}

static int
agent_render_timing(const char *what, const Kclaw__Timing *t, kc_str *s)
{
	if (t == NULL || t->iterations == 0)
		return 0;
	return kc_str_printf(s,
	    "%s: median %.4f ms, mean %.4f ms, min %.4f ms, stddev %.4f ms "
	    "over %u iterations%s\n",
	    what, t->median_ms, t->mean_ms, t->min_ms, t->stddev_ms,
	    t->iterations, t->l2_flushed ? " (L2 flushed)" : "");
}

/* An evaluation as the agents read it: what happened and the numbers. */
static int
agent_render_eval(const Kclaw__EvalResult *e, kc_str *s)
{
	size_t i;
	int rv;

	if (e == NULL)
		return 0;
	rv = kc_str_printf(s, "status: %s\n",
	    agent_enum_name(&kclaw__eval_status__descriptor, e->status));
	if (rv == 0 && e->message && e->message[0])
		rv = kc_str_printf(s, "message: %s\n", e->message);
	if (rv == 0 && e->fault_name && e->fault_name[0])
		rv = kc_str_printf(s, "fault: %s\n", e->fault_name);
	if (rv == 0)
		rv = agent_render_timing("time", e->timing, s);
	if (rv == 0)
		rv = agent_render_timing("baseline", e->baseline, s);
	if (rv == 0 && e->speedup > 0)
		rv = kc_str_printf(
		    s, "speedup over the reference: %.3fx\n", e->speedup);
	if (rv == 0 && e->compile_speedup > 0)
		rv = kc_str_printf(s,
		    "speedup over torch.compile: %.3fx (torch.compile %.4f "
		    "ms)\n",
		    e->compile_speedup, e->torch_compile_ms);
	/* The roofline (sol_fraction's numerator) where the sandbox gives
	 * it; an older one's loose speed of light otherwise. */
	if (rv == 0 && e->sol_fraction > 0)
		rv = kc_str_printf(s,
		    "speed of light: %.4f ms, so this kernel is at %.0f%% of "
		    "what the memory bandwidth and peak arithmetic allow\n",
		    e->roofline_ms > 0 ? e->roofline_ms : e->speed_of_light_ms,
		    100 * e->sol_fraction);
	if (rv == 0 && e->status == KCLAW__EVAL_STATUS__OK &&
	    (e->rel_norm > 0 || e->max_abs_err > 0))
		rv = kc_str_printf(s,
		    "error against the reference: max abs %.3g, max rel %.3g, "
		    "relative norm %.3g\n",
		    e->max_abs_err, e->max_rel_err, e->rel_norm);
	for (i = 0; rv == 0 && i < e->n_warnings; i++)
		rv = kc_str_printf(s, "warning: %s\n", e->warnings[i]);
	if (rv == 0 && e->device_name && e->device_name[0])
		rv = agent_render_device(e, s);
	for (i = 0; rv == 0 && i < e->n_kernels; i++) {
		const Kclaw__KernelResources *k = e->kernels[i];
		rv = kc_str_printf(s,
		    "kernel %s: %d registers, %d spill bytes, %d local bytes, "
		    "%d B static shared, block %d threads, occupancy %.2f\n",
		    k->kernel, k->registers, k->spill_bytes, k->local_bytes,
		    k->shared_static_bytes, k->block_threads, k->occupancy);
	}
	if (rv == 0 && e->mismatch != NULL) {
		const Kclaw__Mismatch *m = e->mismatch;
		rv = kc_str_printf(s,
		    "mismatch in '%s' at %s (flat index %llu), trial %u: "
		    "expected %g, got %g; max abs err %g, max rel err %g, "
		    "relative norm error %g; %llu bad elements, %llu still "
		    "NaN (never written)%s%s\n",
		    m->tensor, m->coords, (unsigned long long)m->index,
		    m->trial, m->expected, m->got, m->max_abs_err,
		    m->max_rel_err, m->rel_norm,
		    (unsigned long long)m->bad_count,
		    (unsigned long long)m->nan_count,
		    m->note && m->note[0] ? "; " : "", m->note ? m->note : "");
	}
	for (i = 0; rv == 0 && i < e->n_metrics; i++)
		if (e->metrics[i]->name == NULL ||
		    strncmp(e->metrics[i]->name, "device.", 7) != 0)
			rv = kc_str_printf(s, "metric %s = %g %s\n",
			    e->metrics[i]->name, e->metrics[i]->value,
			    e->metrics[i]->unit);
	for (i = 0; rv == 0 && i < e->n_activities; i++)
		rv = kc_str_printf(s, "profiled %s: %.2f us\n",
		    e->activities[i]->kernel, e->activities[i]->duration_us);
	if (rv == 0 && e->counters_note && e->counters_note[0])
		rv = kc_str_printf(s, "counters: %s\n", e->counters_note);
	if (rv == 0 && e->compile_log && e->compile_log[0]) {
		size_t n = strlen(e->compile_log);
		rv = kc_str_append(s, "compile log:\n");
		if (rv == 0)
			rv = kc_str_appendn(s, e->compile_log,
			    n < AGENT_LOG_MAX ? n : AGENT_LOG_MAX);
		if (rv == 0 && n > AGENT_LOG_MAX)
			rv = kc_str_printf(
			    s, "\n[... %zu more bytes cut]", n - AGENT_LOG_MAX);
		if (rv == 0)
			rv = kc_str_append(s, "\n");
	}
	return rv;
}

static int
agent_render_methods(const Kclaw__AgentJob *job, kc_str *s, kc_str *names)
{
	size_t i, j;
	int rv = 0;

	for (i = 0; rv == 0 && i < job->n_methods; i++) {
		const Kclaw__Recommendation *m = job->methods[i];
		rv = kc_str_printf(
		    s, "%zu. %s (score %.3f", i + 1, m->method, m->score);
		if (rv == 0 && m->rule && m->rule[0])
			rv = kc_str_printf(s, ", rule %s", m->rule);
		if (rv == 0 && m->attempts > 0)
			rv = kc_str_printf(s,
			    ", learned: %u of %u attempts succeeded, mean gain "
			    "%.3fx",
			    m->successes, m->attempts, m->mean_gain);
		if (rv == 0)
			rv = kc_str_append(s, ")\n");
		for (j = 0; rv == 0 && j < m->n_matched; j++)
			rv =
			    kc_str_printf(s, "   matched: %s\n", m->matched[j]);
		for (j = 0; rv == 0 && j < m->n_vetoed; j++)
			rv = kc_str_printf(s, "   vetoed: %s\n", m->vetoed[j]);
		if (rv == 0 && m->knowledge && m->knowledge[0])
			rv = kc_str_printf(
			    s, "   knowledge: %s\n", m->knowledge);
		if (rv == 0)
			rv = kc_str_printf(
			    names, "%s%s", i ? ", " : "", m->method);
	}
	return rv;
}

static int
agent_render_plan(const Kclaw__OptPlan *p, kc_str *s)
{
	size_t i;
	int rv;

	if (p == NULL)
		return 0;
	rv = kc_str_printf(s, "method: %s\n", p->method);
	for (i = 0; rv == 0 && i < p->n_steps; i++)
		rv = kc_str_printf(s, "%zu. %s\n", i + 1, p->steps[i]);
	if (rv == 0 && p->rationale && p->rationale[0])
		rv = kc_str_printf(s, "rationale: %s\n", p->rationale);
	if (rv == 0 && p->expected_effect && p->expected_effect[0])
		rv = kc_str_printf(
		    s, "expected effect: %s\n", p->expected_effect);
	return rv;
}

static int
agent_render_features(const Kclaw__AgentJob *job, kc_str *s)
{
	size_t i;
	int rv = 0;

	for (i = 0; rv == 0 && i < job->n_features; i++) {
		const Kclaw__Feature *f = job->features[i];
		rv = kc_str_printf(s, "- %s = %g (%s)%s%s\n", f->name, f->value,
		    f->source, f->note && f->note[0] ? ": " : "",
		    f->note ? f->note : "");
	}
	return rv;
}

static int
agent_render_reference(const Kclaw__TaskSpec *t, kc_str *s)
{
	const Kclaw__Reference *r = t->reference;

	if (r == NULL)
		return kc_str_append(s, "(no reference given)\n");
	if (r->kind == KCLAW__REFERENCE__KIND__CUDA && r->cuda != NULL)
		return kc_str_printf(s,
		    "A CUDA reference (same contract as a candidate).\n"
		    "```cuda\n%s\n```\n```json\n%s\n```\n",
		    r->cuda->source, r->cuda->plan_json);
	if (r->kind == KCLAW__REFERENCE__KIND__TORCH && r->torch_source != NULL)
		return kc_str_printf(s,
		    "A PyTorch problem, run live on the same GPU: "
		    "Model(*get_init_inputs()).eval() under torch.no_grad(), "
		    "fresh get_inputs() for every run; the baselines are eager "
		    "PyTorch and torch.compile, timed in the same evaluation. "
		    "The tensors above are its forward's inputs (in order), "
		    "its state_dict's parameters and its outputs.\n"
		    "```python\n%s\n```\n",
		    r->torch_source);
	return kc_str_printf(s,
	    "Expected outputs are stored for %zu input sets; the reference "
	    "runs in %.4f ms%s. What it computes is the task's description "
	    "and context.\n",
	    r->n_sets, r->baseline_ms,
	    r->torch_compile_ms > 0 ? " (eager PyTorch)" : "");
}

static int
agent_put_str(agent_vars *vars, const char *name, const char *v)
{
	return agent_vars_set(vars, name, v ? v : "");
}

/* A Generator's own seed: seed (1-based, "" for a job that names none),
 * seeds, strategy, avoid (the other seeds' strategies, one a line) and the
 * warm start's kernel. */
static int
agent_render_seed(const Kclaw__AgentJob *job, agent_vars *vars, kc_str *s)
{
	const Kclaw__Candidate *w = job->warm_start;
	int rv = 0;

	if (job->seeds > 0)
		rv = kc_str_printf(s, "%u", job->seed_index + 1);
	if (rv != 0 || (rv = agent_put(vars, "seed", s)) != 0)
		return rv;
	if (job->seeds > 0)
		rv = kc_str_printf(s, "%u", job->seeds);
	if (rv != 0 || (rv = agent_put(vars, "seeds", s)) != 0 ||
	    (rv = agent_put_str(vars, "strategy", job->strategy)) != 0)
		return rv;
	for (size_t i = 0; rv == 0 && i < job->n_avoid; i++)
		rv = kc_str_printf(s, "- %s\n", job->avoid[i]);
	if (rv != 0 || (rv = agent_put(vars, "avoid", s)) != 0)
		return rv;
	if ((rv = agent_put_str(vars, "warm_task",
	         w ? (job->warm_task ? job->warm_task : "") : "")) != 0 ||
	    (rv = agent_put_str(vars, "warm_source", w ? w->source : "")) !=
	        0 ||
	    (rv = agent_put_str(vars, "warm_plan", w ? w->plan_json : "")) != 0)
		return rv;
	return 0;
}

int
agent_job_vars(const Kclaw__AgentJob *job, agent_vars *vars)
{
	const Kclaw__TaskSpec *t = job->task;
	kc_str s = {0}, names = {0};
	const Kclaw__Tolerance *tol;
	int rv = 0;

	if (t == NULL)
		return kc_seterr(KC_EINVAL,
		    "job %s has no task; the orchestrator must send the task "
		    "spec with every agent job",
		    job->job_id);
	tol = t->tolerance;
	if ((rv = agent_put_str(vars, "task_name", t->name)) != 0 ||
	    (rv = agent_put_str(vars, "task_description", t->description)) !=
	        0 ||
	    (rv = agent_put_str(vars, "context", t->context)) != 0)
		goto out;
	if ((rv = agent_render_tensors(t, &s, &names)) != 0 ||
	    (rv = agent_put(vars, "tensors", &s)) != 0 ||
	    (rv = agent_put(vars, "tensor_names", &names)) != 0)
		goto out;
	if (tol != NULL)
		rv = kc_str_printf(&s, "atol %g, rtol %g, max relative norm %g",
		    tol->atol, tol->rtol, tol->max_rel_norm);
	if (rv != 0 || (rv = agent_put(vars, "tolerance", &s)) != 0)
		goto out;
	if ((rv = agent_render_reference(t, &s)) != 0 ||
	    (rv = agent_put(vars, "reference", &s)) != 0)
		goto out;
	if ((rv = kc_str_printf(&s, "%u", job->count ? job->count : 1)) != 0 ||
	    (rv = agent_put(vars, "count", &s)) != 0 ||
	    (rv = kc_str_printf(&s, "%u", job->round)) != 0 ||
	    (rv = agent_put(vars, "round", &s)) != 0)
		goto out;

	rv = agent_put_str(vars, "base_source",
	    job->base_kernel ? job->base_kernel->source : NULL);
	if (rv == 0)
		rv = agent_put_str(vars, "base_plan",
		    job->base_kernel ? job->base_kernel->plan_json : NULL);
	if (rv != 0 || (rv = agent_render_eval(job->base_eval, &s)) != 0 ||
	    (rv = agent_put(vars, "base_eval", &s)) != 0)
		goto out;
	rv = agent_put_str(
	    vars, "failing_source", job->failing ? job->failing->source : NULL);
	if (rv == 0)
		rv = agent_put_str(vars, "failing_plan",
		    job->failing ? job->failing->plan_json : NULL);
	if (rv != 0 || (rv = agent_render_eval(job->failure, &s)) != 0 ||
	    (rv = agent_put(vars, "failure", &s)) != 0)
		goto out;
	if ((rv = agent_put_str(vars, "repair_chain", job->repair_chain)) !=
	        0 ||
	    (rv = agent_put_str(vars, "opt_history", job->opt_history)) != 0)
		goto out;
	if ((rv = agent_render_methods(job, &s, &names)) != 0 ||
	    (rv = agent_put(vars, "methods", &s)) != 0 ||
	    (rv = agent_put(vars, "method_names", &names)) != 0)
		goto out;
	/* Binding screening: an exploration round may leave the list. */
	if ((rv = agent_put_str(vars, "explore",
	         job->explore && job->n_methods ? "yes" : "")) != 0 ||
	    (rv = agent_put_str(vars, "bound",
	         !job->explore && job->n_methods ? "yes" : "")) != 0)
		goto out;
	for (size_t i = 0; rv == 0 && i < job->n_lessons; i++)
		rv = kc_str_printf(&s, "- %s\n", job->lessons[i]);
	if (rv != 0 || (rv = agent_put(vars, "lessons", &s)) != 0)
		goto out;
	if ((rv = agent_render_plan(job->plan, &s)) != 0 ||
	    (rv = agent_put(vars, "plan", &s)) != 0)
		goto out;
	if (job->diagnosis != NULL)
		rv =
		    kc_str_printf(&s, "category: %s\nroot cause: %s\nfix: %s\n",
		        job->diagnosis->category, job->diagnosis->root_cause,
		        job->diagnosis->fix);
	if (rv != 0 || (rv = agent_put(vars, "diagnosis", &s)) != 0)
		goto out;
	if ((rv = agent_render_features(job, &s)) != 0 ||
	    (rv = agent_put(vars, "features", &s)) != 0)
		goto out;
	if ((rv = agent_render_seed(job, vars, &s)) != 0 ||
	    (rv = agent_put_str(vars, "assigned", job->assigned_method)) != 0)
		goto out;
out:
	kc_str_free(&s);
	kc_str_free(&names);
	return rv;
}
