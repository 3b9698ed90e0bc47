/*
 * double.c - a deterministic test double of an agent or a sandbox: a real
 * process that pulls jobs over real NNG and answers by a script.
 *
 *   kc-double --role ROLE|sandbox [--device N] [--work-url URL]
 *             [--home DIR] [--delay-ms N] [--exit-after N] [--fail-every N]
 *             [--unavailable N] [--no-device]
 *
 * --unavailable N: its first N agent jobs fail as a provider that is down
 * fails them (AgentReply.model_unavailable, a connection error).
 *
 * It waits KC_DOUBLE_WAIT_MS (default 6000) for an answer, then reconnects
 * and asks again with its unsent result.
 *
 * The script is the task's context: "seeds=wrong,ok:2.0;repair=wrong,
 * ok:1.5;opt=1.0,compile,0.5;ref=4.0". A candidate's source is "KC:" and
 * its outcome, which the sandbox double reports (ok:<ms> is OK at that
 * median; wrong, compile, fault are the failures; compile=<ms> is
 * torch.compile's time that OK results report; matched=<x> their
 * speedup_matched_precision). The n-th generator,
 * repairer and optimizer job of a task (the replay key's number) takes the
 * n-th entry of seeds=, repair= and opt= (the last one repeats), so the
 * outcome never depends on which double answers.
 *
 * tag= (any value): a seed's source also names its seed, strategy and
 * warm start (dbl_tag_seed). launch= (any value): candidates' plans launch
 * a 1-D kernel step (tunable); tune=<ms>: a tune candidate's sweep is OK
 * at that median (dbl_tune).
 *
 * A reference-only request (a task's reference check, EvalOptions.
 * reference_only) is answered by refcheck=: absent, OK with the ref= time
 * and every output of the task varying by 0.5; "outputs:<name>@<variation>
 * /<name>@<variation>...", OK with those outputs' figures
 * (EvalResult.output_variations), and those under what the task's
 * tolerance admits named degenerate with the real sandbox's warning;
 * "old:outputs:...", the same from a sandbox older than per-output figures
 * (names and warnings only); "fail", INTERNAL_ERROR (the sandbox's own
 * failure: retried); "fault", RUNTIME_FAULT (the reference faulted: not
 * retried).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kc_config.h"
#include "kc_err.h"
#include "kc_util.h"
#include "spec_check.h"
#include "worker.h"

static const char *dbl_roles[] = {"", "generator", "feature", "planner",
    "optimizer", "diagnoser", "repairer", "sandbox"};

/* The n-th comma-separated entry of key= in the script (the last one
 * repeats; "" when absent). */
static void
dbl_entry(const char *script, const char *key, unsigned n, char *out, size_t sz)
{
	char pat[32];
	const char *p, *end;
	unsigned i = 0;

	out[0] = '\0';
	snprintf(pat, sizeof(pat), "%s=", key);
	if (script == NULL || (p = strstr(script, pat)) == NULL)
		return;
	p += strlen(pat);
	for (;;) {
		size_t len;
		end = p + strcspn(p, ",;");
		len = (size_t)(end - p) < sz - 1 ? (size_t)(end - p) : sz - 1;
		memcpy(out, p, len);
		out[len] = '\0';
		if (i == n || *end != ',')
			return;
		p = end + 1;
		i++;
	}
}

static unsigned
dbl_key_n(const char *replay_key)
{
	const char *slash = replay_key ? strrchr(replay_key, '/') : NULL;

	return slash ? (unsigned)atoi(slash + 1) : 0;
}

static Kclaw__Candidate *
dbl_cand(const char *outcome)
{
	Kclaw__Candidate *c = malloc(sizeof(*c));
	char src[96];

	kclaw__candidate__init(c);
	snprintf(src, sizeof(src), "KC:%s", *outcome ? outcome : "wrong");
	c->source = strdup(src);
	c->plan_json = strdup("{\"steps\":[]}");
	return c;
}

/* tag= in the script: a seed's source says which seed it is, its
 * strategy and its warm start ("KC:ok:2.0 seed 1 of 3: <strategy>
 * [warm:<task>]"), as a Generator writes the kernel its prompt asks for;
 * the sandbox double reads only the outcome before the space. */
static void
dbl_tag_seed(
    const char *script, const Kclaw__AgentJob *job, Kclaw__Candidate *c)
{
	char tag[8], *src;
	size_t n;

	dbl_entry(script, "tag", 0, tag, sizeof(tag));
	if (tag[0] == '\0' || job->seeds == 0)
		return;
	n = strlen(c->source) + strlen(job->strategy ? job->strategy : "") +
	    (job->warm_task ? strlen(job->warm_task) : 0) + 64;
	if ((src = malloc(n)) == NULL)
		return;
	snprintf(src, n, "%s seed %u of %u: %s%s%s", c->source,
	    job->seed_index + 1, job->seeds, job->strategy ? job->strategy : "",
	    job->warm_start ? " warm:" : "",
	    job->warm_start && job->warm_task ? job->warm_task : "");
	free(c->source);
	c->source = src;
}

/* launch= in the script: candidates launch one 1-D kernel step, a plan
 * whose launch configuration the orchestrator can tune. */
static void
dbl_launch_plan(const char *script, Kclaw__Candidate *c)
{
	char v[8];

	dbl_entry(script, "launch", 0, v, sizeof(v));
	if (v[0] == '\0')
		return;
	free(c->plan_json);
	c->plan_json = strdup("{\"steps\": [{\"kernel\": \"k\", \"grid\": "
	                      "[64, 1, 1], \"block\": [256, 1, 1], \"args\": "
	                      "[\"x\", \"y\"]}]}");
}

static void
dbl_agent(const Kclaw__AgentJob *job, Kclaw__AgentReply *r)
{
	const char *script = job->task ? job->task->context : NULL;
	unsigned n = dbl_key_n(job->replay_key);
	char e[64];

	r->job_id = strdup(job->job_id);
	r->role = job->role;
	r->ok = 1;
	r->usage = malloc(sizeof(*r->usage));
	kclaw__usage__init(r->usage);
	r->usage->prompt_tokens = 10;
	r->usage->completion_tokens = 5;
	r->usage->reasoning_tokens = 3; /* of the completion's */
	r->usage->cached_tokens = 4;    /* of the prompt's */
	r->usage->calls = 1;
	r->usage->latency_ms = 1;
	switch (job->role) {
	case KCLAW__ROLE__GENERATOR:
		r->n_candidates = job->count;
		r->candidates = calloc(job->count, sizeof(*r->candidates));
		for (unsigned i = 0; i < job->count; i++) {
			dbl_entry(script, "seeds", n + i, e, sizeof(e));
			r->candidates[i] = dbl_cand(e);
			dbl_tag_seed(script, job, r->candidates[i]);
			dbl_launch_plan(script, r->candidates[i]);
		}
		break;
	case KCLAW__ROLE__OPTIMIZER:
	case KCLAW__ROLE__REPAIRER:
		dbl_entry(script,
		    job->role == KCLAW__ROLE__OPTIMIZER ? "opt" : "repair", n,
		    e, sizeof(e));
		if (job->role == KCLAW__ROLE__OPTIMIZER &&
		    strchr(e, ':') == NULL && e[0] >= '0' && e[0] <= '9') {
			char ok[64];
			snprintf(ok, sizeof(ok), "ok:%s", e);
			snprintf(e, sizeof(e), "%s", ok);
		}
		r->n_candidates = 1;
		r->candidates = calloc(1, sizeof(*r->candidates));
		r->candidates[0] = dbl_cand(e);
		dbl_launch_plan(script, r->candidates[0]);
		break;
	case KCLAW__ROLE__FEATURE:
		r->n_features = 1;
		r->features = calloc(1, sizeof(*r->features));
		r->features[0] = malloc(sizeof(Kclaw__Feature));
		kclaw__feature__init(r->features[0]);
		r->features[0]->name = strdup("uses_shared_memory");
		r->features[0]->source = strdup("rule");
		break;
	case KCLAW__ROLE__PLANNER:
		r->plan = malloc(sizeof(*r->plan));
		kclaw__opt_plan__init(r->plan);
		snprintf(e, sizeof(e), "method_%u", n);
		r->plan->method = strdup(e);
		r->plan->rationale = strdup(
		    job->opt_history && *job->opt_history ? "history seen"
		                                          : "first plan");
		break;
	case KCLAW__ROLE__DIAGNOSER:
		r->diagnosis = malloc(sizeof(*r->diagnosis));
		kclaw__diagnosis__init(r->diagnosis);
		r->diagnosis->category = strdup("wrong_result");
		r->diagnosis->root_cause = strdup(
		    job->repair_chain && *job->repair_chain ? "seen before"
		                                            : "off by one");
		r->diagnosis->fix = strdup("fix the index");
		break;
	default: break;
	}
}

/* Appends one entry of a string list (protobuf-c's repeated string). */
static void
dbl_strv_add(char ***v, size_t *n, const char *s)
{
	char **g = realloc(*v, (*n + 1) * sizeof(*g));

	if (g == NULL)
		return;
	*v = g;
	if ((g[*n] = strdup(s)) != NULL)
		(*n)++;
}

/* Output name at variation var, as the real sandbox reports it
 * (gpu-sandbox/eval.c ev_note_degenerate): its figures unless old, and
 * when it is degenerate its name and the sandbox's warning. */
static void
dbl_output(Kclaw__EvalResult *r, const Kclaw__Tolerance *tol, const char *name,
    double var, bool old)
{
	double admits = kc_tolerance_admits(tol);
	char text[512];

	if (r->output_variation == 0 || var < r->output_variation)
		r->output_variation = var;
	if (!old)
		kc_result_add_variation(r, name, 1, var, tol);
	if (var >= admits)
		return;
	dbl_strv_add(&r->degenerate, &r->n_degenerate, name);
	snprintf(text, sizeof(text),
	    "degenerate task: output '%s' changes by only %.3g (relative) "
	    "between two input sets, less than the tolerance admits",
	    name, var);
	dbl_strv_add(&r->warnings, &r->n_warnings, text);
}

/* A reference-only evaluation, as refcheck= says (the file's comment). */
static void
dbl_refcheck(const Kclaw__TaskSpec *task, const char *script, bool no_compile,
    Kclaw__EvalResult *r)
{
	const Kclaw__Tolerance *tol = task ? task->tolerance : NULL;
	char rc[128], text[512];
	const char *list = NULL;
	bool old = false;

	dbl_entry(script, "refcheck", 0, rc, sizeof(rc));
	if (strcmp(rc, "fail") == 0) {
		r->status = KCLAW__EVAL_STATUS__INTERNAL_ERROR;
		r->message = strdup("scripted sandbox failure");
		return;
	}
	if (strcmp(rc, "fault") == 0) {
		r->status = KCLAW__EVAL_STATUS__RUNTIME_FAULT;
		r->message = strdup("the reference faulted: "
		                    "CUDA_ERROR_ILLEGAL_ADDRESS");
		return;
	}
	r->status = KCLAW__EVAL_STATUS__OK;
	r->baseline = malloc(sizeof(*r->baseline));
	kclaw__timing__init(r->baseline);
	r->baseline->median_ms = r->reference_ms;
	r->device_name = strdup("double GPU");
	/* As the sandbox: torch.compile timed unless the request says not,
	 * the evaluation's wall time and a metric. */
	if (!no_compile)
		r->torch_compile_ms = r->reference_ms / 2;
	r->wall_ms = 12.5;
	if ((r->metrics = calloc(1, sizeof(*r->metrics))) != NULL &&
	    (r->metrics[0] = malloc(sizeof(**r->metrics))) != NULL) {
		kclaw__metric__init(r->metrics[0]);
		r->metrics[0]->name = strdup("sandbox.load_ms");
		r->metrics[0]->value = 3.0;
		r->metrics[0]->unit = strdup("ms");
		r->n_metrics = 1;
	}
	if (strncmp(rc, "old:", 4) == 0) {
		old = true;
		memmove(rc, rc + 4, strlen(rc + 4) + 1);
	}
	if (strncmp(rc, "outputs:", 8) == 0)
		list = rc + 8;
	for (const char *p = list; p && *p;) {
		size_t len = strcspn(p, "/");
		char item[128], *at;
		snprintf(item, sizeof(item), "%.*s", (int)len, p);
		if ((at = strchr(item, '@')) != NULL) {
			*at = '\0';
			dbl_output(r, tol, item, atof(at + 1), old);
		}
		p += len + (p[len] == '/');
	}
	/* No list: every output of the task varies by 0.5. */
	for (size_t i = 0; list == NULL && task && i < task->n_tensors; i++)
		if (task->tensors[i]->kind == KCLAW__TENSOR_KIND__OUTPUT)
			dbl_output(r, tol, task->tensors[i]->name, 0.5, old);
	if (r->output_variation == 0)
		r->output_variation = 0.5;
	snprintf(text, sizeof(text),
	    "reference only (double): baseline %.4f ms; outputs change by "
	    "%.3g (relative) between two input sets of one distribution%s",
	    r->reference_ms, r->output_variation,
	    r->n_degenerate ? "; DEGENERATE (see warnings)" : "");
	r->message = strdup(text);
}

/* A tune candidate's sweep, as the sandbox answers one (the fastest
 * configuration's result with its source, plan and name): OK at tune=
 * ms with KC_BLOCK_0=512 when the plan declares the launch tunable the
 * orchestrator adds, else WRONG_RESULT (no sweep to make). */
static void
dbl_tune(
    const Kclaw__EvalRequest *req, const char *script, Kclaw__EvalResult *r)
{
	const char *plan = req->candidate->plan_json;
	char ms[32];

	dbl_entry(script, "tune", 0, ms, sizeof(ms));
	if (plan == NULL || strstr(plan, "\"KC_BLOCK_0\"") == NULL || !*ms) {
		r->status = KCLAW__EVAL_STATUS__WRONG_RESULT;
		r->message = strdup("no tunable launch configuration to sweep");
		return;
	}
	r->status = KCLAW__EVAL_STATUS__OK;
	r->timing = malloc(sizeof(*r->timing));
	kclaw__timing__init(r->timing);
	r->timing->median_ms = atof(ms);
	r->message = strdup("");
	r->tuned_config = strdup("KC_BLOCK_0=512");
	r->tuned_source = strdup(req->candidate->source);
	r->tuned_plan = strdup("{\"steps\": [{\"kernel\": \"k\", \"grid\": "
	                       "32, \"block\": 512, \"args\": [\"x\", "
	                       "\"y\"]}]}");
}

static void
dbl_eval(const Kclaw__EvalRequest *req, bool no_device, Kclaw__EvalResult *r)
{
	const char *src = req->candidate ? req->candidate->source : NULL;
	const char *script = req->task ? req->task->context : NULL;
	char ref[32], tc[32];

	r->job_id = strdup(req->job_id);
	r->candidate_id = strdup(req->candidate ? req->candidate->id : "");
	dbl_entry(script, "ref", 0, ref, sizeof(ref));
	r->reference_ms = *ref ? atof(ref) : 4.0;
	if (no_device) {
		r->status = KCLAW__EVAL_STATUS__NO_DEVICE;
		r->message = strdup("no NVIDIA driver on this host");
		return;
	}
	if (req->options && req->options->reference_only) {
		dbl_refcheck(
		    req->task, script, req->options->no_compile_baseline, r);
		return;
	}
	if (req->candidate && req->candidate->origin &&
	    strcmp(req->candidate->origin, "tune") == 0) {
		dbl_tune(req, script, r);
		return;
	}
	if (src && strncmp(src, "KC:ok:", 6) == 0) {
		r->status = KCLAW__EVAL_STATUS__OK;
		r->timing = malloc(sizeof(*r->timing));
		kclaw__timing__init(r->timing);
		r->timing->median_ms = atof(src + 6);
		r->message = strdup("");
		/* As the sandbox: every output's variation (0.5 each). */
		for (size_t i = 0; req->task && i < req->task->n_tensors; i++)
			if (req->task->tensors[i]->kind ==
			    KCLAW__TENSOR_KIND__OUTPUT)
				dbl_output(r, req->task->tolerance,
				    req->task->tensors[i]->name, 0.5, false);
		/* compile=<ms>: torch.compile's time in the same evaluation. */
		dbl_entry(script, "compile", 0, tc, sizeof(tc));
		if (*tc) {
			r->torch_compile_ms = atof(tc);
			r->compile_speedup =
			    r->torch_compile_ms / r->timing->median_ms;
		}
		/* matched=<x>: the speedup at the kernel's own precision. */
		dbl_entry(script, "matched", 0, tc, sizeof(tc));
		if (*tc)
			r->speedup_matched_precision = atof(tc);
	} else if (src && strcmp(src, "KC:compile") == 0) {
		r->status = KCLAW__EVAL_STATUS__COMPILE_ERROR;
		r->message = strdup("error: expected ';'");
	} else if (src && strcmp(src, "KC:fault") == 0) {
		r->status = KCLAW__EVAL_STATUS__RUNTIME_FAULT;
		r->message = strdup("CUDA_ERROR_ILLEGAL_ADDRESS");
	} else {
		r->status = KCLAW__EVAL_STATUS__WRONG_RESULT;
		r->message = strdup("output y[3] = 1.0, expected 2.0");
	}
}

int
main(int argc, char **argv)
{
	const char *role_name = NULL, *home = NULL, *url = NULL;
	int device = 0, delay_ms = 0, exit_after = 0, fail_every = 0;
	int unavailable = 0;
	bool no_device = false;
	Kclaw__Role role = KCLAW__ROLE__ROLE_UNSPECIFIED;
	Kclaw__AgentReply *reply = NULL;
	Kclaw__EvalResult *result = NULL;
	kc_config cfg;
	kc_worker *w;
	int jobs = 0;
	int wait_ms = getenv("KC_DOUBLE_WAIT_MS")
	    ? atoi(getenv("KC_DOUBLE_WAIT_MS"))
	    : 6000;

	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : "";
		if (strcmp(argv[i], "--role") == 0)
			role_name = v, i++;
		else if (strcmp(argv[i], "--device") == 0)
			device = atoi(v), i++, role_name = "sandbox";
		else if (strcmp(argv[i], "--work-url") == 0)
			url = v, i++;
		else if (strcmp(argv[i], "--home") == 0)
			home = v, i++;
		else if (strcmp(argv[i], "--delay-ms") == 0)
			delay_ms = atoi(v), i++;
		else if (strcmp(argv[i], "--exit-after") == 0)
			exit_after = atoi(v), i++;
		else if (strcmp(argv[i], "--fail-every") == 0)
			fail_every = atoi(v), i++;
		else if (strcmp(argv[i], "--unavailable") == 0)
			unavailable = atoi(v), i++;
		else if (strcmp(argv[i], "--no-device") == 0)
			no_device = true;
	}
	for (unsigned r = 1; role_name && r < 8; r++)
		if (strcmp(role_name, dbl_roles[r]) == 0)
			role = (Kclaw__Role)r;
	if (role == KCLAW__ROLE__ROLE_UNSPECIFIED) {
		fprintf(stderr,
		    "kc-double: --role generator..repairer|sandbox "
		    "or --device N\n");
		return 2;
	}
	if (kc_config_load(&cfg, home) != 0 ||
	    kc_worker_open(&w, url ? url : cfg.work_url, role, device, NULL,
	        cfg.token) != 0) {
		fprintf(stderr, "kc-double: %s\n", kc_lasterr());
		return 1;
	}
	signal(SIGPIPE, SIG_IGN);
	for (;;) {
		Kclaw__WorkReply *job = NULL;
		int rv = kc_worker_next(w, reply, result, wait_ms, &job);
		if (rv == KC_ECANCELED)
			break;
		if (rv != 0 && rv != KC_EPERM) {
			/* The orchestrator restarted or is gone (NNG does not
			 * resend a request whose connection broke): a fresh
			 * socket, and the result goes again. */
			kc_worker_close(w);
			kc_sleep_ms(50);
			if (kc_worker_open(&w, url ? url : cfg.work_url, role,
			        device, NULL, cfg.token) != 0) {
				fprintf(
				    stderr, "kc-double: %s\n", kc_lasterr());
				return 1;
			}
			continue;
		}
		if (reply)
			kclaw__agent_reply__free_unpacked(reply, NULL);
		if (result)
			kclaw__eval_result__free_unpacked(result, NULL);
		reply = NULL;
		result = NULL;
		if (rv != 0) {
			fprintf(stderr, "kc-double: %s\n", kc_lasterr());
			kc_sleep_ms(50);
			continue;
		}
		if (job->job_id == NULL || !*job->job_id) {
			kclaw__work_reply__free_unpacked(job, NULL);
			continue;
		}
		jobs++;
		if (exit_after && jobs >= exit_after)
			_exit(3); /* dies holding the job */
		/* KC_DOUBLE_JOBLOG: one line per job, "start end" in ms, so a
		 * test can tell whether two workers' jobs overlapped. */
		{
			uint64_t t0 = kc_now_ms();
			const char *jl = getenv("KC_DOUBLE_JOBLOG");
			if (delay_ms)
				kc_sleep_ms((uint32_t)delay_ms);
			if (jl != NULL && *jl) {
				FILE *f = fopen(jl, "a");
				if (f != NULL) {
					fprintf(f, "%llu %llu\n",
					    (unsigned long long)t0,
					    (unsigned long long)kc_now_ms());
					fclose(f);
				}
			}
		}
		if (job->agent) {
			reply = malloc(sizeof(*reply));
			kclaw__agent_reply__init(reply);
			dbl_agent(job->agent, reply);
			if (fail_every && jobs % fail_every == 0) {
				/* A failed call still spent its tokens. */
				reply->ok = 0;
				reply->error = strdup("scripted failure");
				reply->usage->failed_calls = 1;
			} else if (jobs <= unavailable) {
				reply->ok = 0;
				reply->error = strdup(
				    "the LLM call failed: LLM call to "
				    "http://127.0.0.1:9/v1 failed after 5 "
				    "tries: Couldn't connect to server "
				    "(scripted outage)");
				reply->usage->failed_calls = 1;
				reply->model_unavailable = 1;
			}
		} else if (job->eval) {
			result = malloc(sizeof(*result));
			kclaw__eval_result__init(result);
			dbl_eval(job->eval, no_device, result);
		}
		kclaw__work_reply__free_unpacked(job, NULL);
	}
	kc_worker_close(w);
	return 0;
}
