/*
 * e2e_test.c - the real kclawd with test-double workers over real NNG and
 * a real store: tasks through seeding, repair and optimisation, the API
 * (and its refusals), events on PUB and in the log, cancel, a worker that
 * dies holding a job, and a host without a GPU.
 */
#include "harness.h"

static pid_t kclawd;
static pid_t workers[8];

static void
start(const char *name, const char *orch_json)
{
	h_setup(name, orch_json);
	kclawd = h_kclawd();
	h_wait_up();
}

static void
stop(int nworkers)
{
	for (int i = 0; i < nworkers; i++)
		h_kill(workers[i], SIGTERM);
	h_kill(kclawd, SIGTERM);
	h_teardown();
}

/* A role's usage in the task's record: calls replies of the doubles (10
 * prompt tokens, 4 of them cached; 5 completion tokens, 3 reasoning),
 * failed of them failed. */
static void
check_usage(const Kclaw__TaskRecord *t, Kclaw__Role role, uint32_t calls,
    uint32_t failed)
{
	for (size_t i = 0; i < t->n_usage; i++) {
		const Kclaw__RoleUsage *u = t->usage[i];
		if (u->role != role)
			continue;
		KT_EQ_INT(u->calls, calls);
		KT_EQ_INT(u->failed_calls, failed);
		KT_EQ_INT(u->prompt_tokens, 10 * calls);
		KT_EQ_INT(u->completion_tokens, 5 * calls);
		KT_EQ_INT(u->reasoning_tokens, 3 * calls);
		KT_EQ_INT(u->cached_tokens, 4 * calls);
		return;
	}
	KT_EQ_INT(calls, 0);
}

/* TaskRecord.tokens is the sum of every role's prompt and completion. */
static void
check_usage_sum(const Kclaw__TaskRecord *t)
{
	uint64_t sum = 0;

	for (size_t i = 0; i < t->n_usage; i++)
		sum +=
		    t->usage[i]->prompt_tokens + t->usage[i]->completion_tokens;
	KT_EQ_INT(sum, t->tokens);
}

static void
test_tasks_api_events(void)
{
	char a[32], b[32], c[32];
	Kclaw__StatusResponse *s;
	Kclaw__ResultRequest rreq = KCLAW__RESULT_REQUEST__INIT;
	Kclaw__ResultResponse *res;
	Kclaw__ListRequest lreq = KCLAW__LIST_REQUEST__INIT;
	Kclaw__ListResponse *list;
	Kclaw__SubmitRequest bad = KCLAW__SUBMIT_REQUEST__INIT;
	Kclaw__CancelRequest creq = KCLAW__CANCEL_REQUEST__INIT;
	Kclaw__CancelResponse *cresp;
	ProtobufCMessage *any;
	bus_sub *sub;
	char prefix[64], *topic;
	void *data;
	size_t len;
	size_t ntasks;

	start("e2e", "\"poll_ms\": 500");
	KT_OK(bus_sub_open(&sub, h_cfg.events_url, 0));
	KT_OK(bus_sub_subscribe(sub, "task."));
	h_doubles(workers, 2, "0");

	/* A: seed 2 correct; 1.0 promoted, 1.9 kept as history, 0.5 best. */
	KT_OK(h_submit(h_spec("task_a",
	                   "seeds=wrong,ok:2.0,ok:3.0;opt=1.0,1.9,0.5;ref=4.0;"
	                   "compile=6.0",
	                   3),
	    NULL, a));
	/* B: no correct seed; the second repair works, then one opt. */
	KT_OK(h_submit(h_spec("task_b",
	                   "seeds=wrong,compile,compile;repair=fault,ok:3.0;"
	                   "opt=2.0",
	                   3),
	    NULL, b));

	s = h_wait_final(a, 20000);
	KT_EQ_STR(s->task->state, "DONE");
	KT_EQ_INT(s->task->round, 3);
	KT_ASSERT(s->task->best_ms == 0.5);
	KT_ASSERT(s->task->reference_ms == 4.0);
	KT_EQ_STR(s->task->best_id, s->task->base_id);
	KT_CONTAINS(s->task->error, "round budget");
	KT_EQ_STR(s->task->spec->name, "task_a");
	KT_EQ_INT(s->task->tokens, 15 * 11); /* 3 gen, 2 feat, 3 plan, 3 opt */
	check_usage(s->task, KCLAW__ROLE__GENERATOR, 3, 0);
	check_usage(s->task, KCLAW__ROLE__FEATURE, 2, 0);
	check_usage(s->task, KCLAW__ROLE__PLANNER, 3, 0);
	check_usage(s->task, KCLAW__ROLE__OPTIMIZER, 3, 0);
	check_usage(s->task, KCLAW__ROLE__DIAGNOSER, 0, 0);
	check_usage_sum(s->task);
	/* The best kernel's (0.5 ms) evaluation: torch.compile 6 ms. */
	KT_ASSERT(s->task->torch_compile_ms == 6.0);
	KT_ASSERT(s->task->compile_speedup == 12.0);
	kclaw__status_response__free_unpacked(s, NULL);
	{
		/* Every AGENT_REPLIED carries its reply's tokens. */
		Kclaw__EventsResponse *ev = h_events(a, 0);
		unsigned replied = 0;
		for (size_t k = 0; k < ev->n_events; k++)
			if (ev->events[k]->kind ==
			    KCLAW__EVENT_KIND__AGENT_REPLIED) {
				KT_EQ_INT(ev->events[k]->tokens, 15);
				KT_CONTAINS(ev->events[k]->detail,
				    "15 tokens (3 reasoning, 4 cached)");
				replied++;
			}
		KT_EQ_INT(replied, 11);
		kclaw__events_response__free_unpacked(ev, NULL);
	}
	KT_EQ_INT(h_check_rounds(a), 3);

	s = h_wait_final(b, 20000);
	KT_EQ_STR(s->task->state, "DONE");
	KT_EQ_INT(s->task->round, 3);
	KT_ASSERT(s->task->best_ms == 2.0);
	kclaw__status_response__free_unpacked(s, NULL);
	KT_EQ_INT(h_check_rounds(b), 3);

	/* Result: the best kernel with its evaluation, the whole history. */
	rreq.task_id = a;
	KT_OK(h_call("Result", &rreq.base, &kclaw__result_response__descriptor,
	    (ProtobufCMessage **)&res));
	KT_EQ_INT(res->n_history, 6);
	KT_ASSERT(res->best != NULL && res->best->eval != NULL);
	KT_EQ_INT(res->best->eval->status, KCLAW__EVAL_STATUS__OK);
	KT_EQ_STR(res->best->candidate->source, "KC:ok:0.5");
	KT_EQ_STR(res->best->candidate->origin, "optimizer");
	KT_ASSERT(res->best->plan != NULL);
	/* The Planner of the last round was shown the optimisation history
	 * of its base (short-term memory through the memory seam). */
	KT_EQ_STR(res->best->plan->rationale, "history seen");
	kclaw__result_response__free_unpacked(res, NULL);

	/* B's second Diagnoser was shown the repair chain. */
	rreq.task_id = b;
	KT_OK(h_call("Result", &rreq.base, &kclaw__result_response__descriptor,
	    (ProtobufCMessage **)&res));
	{
		int seen = 0;
		for (size_t i = 0; i < res->n_history; i++)
			if (res->history[i]->diagnosis &&
			    strcmp(res->history[i]->diagnosis->root_cause,
			        "seen before") == 0)
				seen++;
		KT_EQ_INT(seen, 1);
	}
	kclaw__result_response__free_unpacked(res, NULL);

	/* Long-term memory answers through the API. */
	{
		Kclaw__MemoryRequest mreq = KCLAW__MEMORY_REQUEST__INIT;
		Kclaw__MemoryResponse *mresp;
		mreq.query = "methods";
		KT_OK(h_call("Memory", &mreq.base,
		    &kclaw__memory_response__descriptor,
		    (ProtobufCMessage **)&mresp));
		KT_ASSERT(strlen(mresp->text) > 100);
		kclaw__memory_response__free_unpacked(mresp, NULL);
		mreq.query = "bogus";
		KT_EQ_INT(h_call("Memory", &mreq.base,
		              &kclaw__memory_response__descriptor, &any),
		    KC_EINVAL);
		KT_CONTAINS(kc_lasterr(), "unknown memory query");
	}

	/* Events were published with their topics and sequence numbers. */
	snprintf(prefix, sizeof(prefix), "task.%s.", a);
	{
		bool seen = false;
		for (int i = 0; i < 2000 && !seen; i++) {
			Kclaw__Event *ev;
			if (bus_sub_recv(sub, 200, &topic, &data, &len) != 0)
				break;
			ev = kclaw__event__unpack(NULL, len, data);
			KT_ASSERT(ev != NULL && ev->seq > 0);
			if (strncmp(topic, prefix, strlen(prefix)) == 0)
				seen = true;
			kclaw__event__free_unpacked(ev, NULL);
			free(topic);
			free(data);
		}
		KT_ASSERT(seen);
	}
	bus_sub_close(sub);

	/* Bad requests are refused with a reason and change nothing. */
	KT_OK(h_call("List", &lreq.base, &kclaw__list_response__descriptor,
	    (ProtobufCMessage **)&list));
	ntasks = list->n_tasks;
	kclaw__list_response__free_unpacked(list, NULL);
	KT_EQ_INT(ntasks, 2);
	KT_EQ_INT(h_call("Submit", &bad.base,
	              &kclaw__submit_response__descriptor, &any),
	    KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "bundle_dir");
	bad.bundle_dir = "/nonexistent/bundle";
	KT_ASSERT(h_call("Submit", &bad.base,
	              &kclaw__submit_response__descriptor, &any) != 0);
	KT_CONTAINS(kc_lasterr(), "/nonexistent/bundle");
	KT_EQ_INT(h_submit(h_spec("bad name!", "", 3), NULL, NULL), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "name 'bad name!' may hold only");
	KT_ASSERT(h_status("0000000000000000") == NULL);
	KT_CONTAINS(kc_lasterr(), "no task");
	creq.task_id = a;
	KT_EQ_INT(h_call("Cancel", &creq.base,
	              &kclaw__cancel_response__descriptor, &any),
	    KC_EEXIST);
	KT_EQ_INT(kc_api_call(h_api, "Frobnicate", &creq.base, NULL, 3000,
	              &kclaw__cancel_response__descriptor, &any),
	    KC_ENOTSUP);
	KT_OK(h_call("List", &lreq.base, &kclaw__list_response__descriptor,
	    (ProtobufCMessage **)&list));
	KT_EQ_INT(list->n_tasks, ntasks);
	kclaw__list_response__free_unpacked(list, NULL);

	/* Garbage on the API and work sockets is refused, not fatal. */
	{
		static const char junk[] = "\x0a\xff\xff\xff\xff\x0f garbage";
		bus_client *raw;
		void *rep;
		size_t rlen;
		Kclaw__ApiResponse *ar;
		Kclaw__WorkReply *wr;
		KT_OK(bus_client_open(&raw, h_cfg.api_url, 0));
		KT_OK(bus_client_call(
		    raw, junk, sizeof(junk), 3000, &rep, &rlen));
		ar = kclaw__api_response__unpack(NULL, rlen, rep);
		KT_ASSERT(ar != NULL);
		KT_EQ_INT(ar->code, KCLAW__API_CODE__API_BAD_REQUEST);
		kclaw__api_response__free_unpacked(ar, NULL);
		free(rep);
		bus_client_close(raw);
		KT_OK(bus_client_open(&raw, h_cfg.work_url, 0));
		KT_OK(bus_client_call(
		    raw, junk, sizeof(junk), 3000, &rep, &rlen));
		wr = kclaw__work_reply__unpack(NULL, rlen, rep);
		KT_ASSERT(wr != NULL);
		KT_CONTAINS(wr->error, "did not decode");
		kclaw__work_reply__free_unpacked(wr, NULL);
		free(rep);
		bus_client_close(raw);
	}

	/* Idempotent resubmission by task_id. */
	KT_OK(h_submit(h_spec("task_c", "seeds=ok:2.0;opt=1.9;ref=4.0", 1000),
	    "mytask", c));
	KT_EQ_STR(c, "mytask");
	KT_OK(h_submit(h_spec("task_c", "seeds=ok:2.0;opt=1.9;ref=4.0", 1000),
	    "mytask", c));
	KT_EQ_INT(h_submit(h_spec("other", "", 3), "mytask", NULL), KC_EEXIST);

	/* Cancel a running task: it stops and rounds stop counting. */
	for (int i = 0; i < 200; i++) {
		s = h_status(c);
		if (s->task->round >= 3)
			i = 1000;
		kclaw__status_response__free_unpacked(s, NULL);
		kc_sleep_ms(10);
	}
	creq.task_id = c;
	KT_OK(h_call("Cancel", &creq.base, &kclaw__cancel_response__descriptor,
	    (ProtobufCMessage **)&cresp));
	KT_EQ_STR(cresp->state, "CANCELLED");
	kclaw__cancel_response__free_unpacked(cresp, NULL);
	s = h_status(c);
	KT_EQ_STR(s->task->state, "CANCELLED");
	{
		uint32_t r = s->task->round;
		kclaw__status_response__free_unpacked(s, NULL);
		kc_sleep_ms(300);
		s = h_status(c);
		KT_EQ_INT(s->task->round, r);
		KT_EQ_INT(h_check_rounds(c), r);
		kclaw__status_response__free_unpacked(s, NULL);
	}
	stop(8);
}

static void
test_worker_dies_holding_a_job(void)
{
	char id[32];
	Kclaw__StatusResponse *s;
	Kclaw__EventsResponse *ev;
	pid_t planner;
	bool retried = false;
	Kclaw__FsmParams params = KCLAW__FSM_PARAMS__INIT;
	Kclaw__TaskSpec *spec;

	/* The task's own deadline for agent jobs (1 s) overrides the
	 * orchestrator's (300 s). */
	start("e2e-die", "\"poll_ms\": 300");
	/* Every role but the Planner; the only Planner dies with its job. */
	workers[0] = h_spawn(
	    "kc-double", "--role", "generator", "--home", h_home, (char *)NULL);
	workers[1] = h_spawn(
	    "kc-double", "--role", "feature", "--home", h_home, (char *)NULL);
	workers[2] = h_spawn(
	    "kc-double", "--role", "optimizer", "--home", h_home, (char *)NULL);
	workers[3] = h_spawn(
	    "kc-double", "--device", "0", "--home", h_home, (char *)NULL);
	planner = h_spawn("kc-double", "--role", "planner", "--home", h_home,
	    "--exit-after", "1", (char *)NULL);
	params.agent_timeout_s = 1;
	spec = h_spec("dies", "seeds=ok:2.0;opt=1.0;ref=4.0", 1);
	spec->params = &params;
	KT_OK(h_submit(spec, NULL, id));
	waitpid(planner, NULL, 0); /* it took the job and died */
	for (int i = 0; i < 100 && !retried; i++) {
		ev = h_events(id, 0);
		for (size_t k = 0; k < ev->n_events; k++)
			retried |= ev->events[k]->kind ==
			    KCLAW__EVENT_KIND__JOB_RETRIED;
		kclaw__events_response__free_unpacked(ev, NULL);
		kc_sleep_ms(50);
	}
	KT_ASSERT(retried);
	workers[4] = h_spawn(
	    "kc-double", "--role", "planner", "--home", h_home, (char *)NULL);
	s = h_wait_final(id, 20000);
	KT_EQ_STR(s->task->state, "DONE");
	KT_ASSERT(s->task->best_ms == 1.0);
	kclaw__status_response__free_unpacked(s, NULL);
	stop(5);
}

/* A sandbox dies holding an evaluation; its replacement on the same GPU
 * gets the job at once, long before the evaluation's deadline (120 s). */
static void
test_sandbox_replaced(void)
{
	char id[32];
	Kclaw__StatusResponse *s;
	pid_t first;

	start("e2e-gpu", "\"poll_ms\": 300");
	workers[0] = h_spawn(
	    "kc-double", "--role", "generator", "--home", h_home, (char *)NULL);
	first = h_spawn("kc-double", "--device", "0", "--home", h_home,
	    "--exit-after", "1", (char *)NULL);
	KT_OK(h_submit(h_spec("gpu", "seeds=ok:1.5", 1), NULL, id));
	waitpid(first, NULL, 0);
	workers[1] = h_spawn(
	    "kc-double", "--device", "0", "--home", h_home, (char *)NULL);
	for (int i = 0; i < 400; i++) {
		bool reviewing;
		s = h_status(id);
		reviewing = strcmp(s->task->state, "REVIEW_SEEDS") == 0 ||
		    strcmp(s->task->state, "SEEDING") == 0;
		kclaw__status_response__free_unpacked(s, NULL);
		if (!reviewing)
			break;
		kc_sleep_ms(10);
	}
	s = h_status(id);
	KT_EQ_STR(s->task->state, "FEATURES");
	KT_ASSERT(s->task->best_ms == 1.5);
	kclaw__status_response__free_unpacked(s, NULL);
	stop(2);
}

/* Whether two jobs of the joblog (KC_DOUBLE_JOBLOG: "start end" in ms
 * per job, written by the sandbox doubles) overlapped in time; *njobs is
 * how many there were. */
static bool
jobs_overlap(const char *path, int *njobs)
{
	unsigned long long st[64], en[64];
	int n = 0;
	FILE *f = fopen(path, "r");

	KT_ASSERT(f != NULL);
	while (n < 64 && fscanf(f, "%llu %llu", &st[n], &en[n]) == 2)
		n++;
	fclose(f);
	*njobs = n;
	for (int i = 0; i < n; i++)
		for (int j = i + 1; j < n; j++)
			if (st[i] < en[j] && st[j] < en[i])
				return true;
	return false;
}

/* A GPU is a device number of a host: two sandboxes of device 0 on two
 * hosts (pods, nodes) evaluate at the same time, and when the one on host
 * b dies holding a job and comes back, only its own job is re-issued, not
 * the one host a's sandbox is running (keyed by device alone, it was: the
 * job ran twice). */
static void
test_gpus_by_host(void)
{
	char a[32], b[32], log[1024];
	int njobs = 0;
	bool done = false;
	pid_t dying;

	start("e2e-hosts", "\"poll_ms\": 300");
	snprintf(log, sizeof(log), "%s/joblog", h_home);
	workers[0] = h_spawn(
	    "kc-double", "--role", "generator", "--home", h_home, (char *)NULL);
	setenv("KC_DOUBLE_JOBLOG", log, 1);
	setenv("KCLAW_WORKER_HOST", "host-a", 1);
	workers[1] = h_spawn("kc-double", "--device", "0", "--home", h_home,
	    "--delay-ms", "600", (char *)NULL);
	setenv("KCLAW_WORKER_HOST", "host-b", 1);
	dying = h_spawn("kc-double", "--device", "0", "--home", h_home,
	    "--exit-after", "1", (char *)NULL);
	KT_OK(h_submit(h_spec("ga", "seeds=ok:1.5", 1), NULL, a));
	KT_OK(h_submit(h_spec("gb", "seeds=ok:1.5", 1), NULL, b));
	waitpid(dying, NULL, 0);
	/* Host a's sandbox is inside a 600 ms job now; host b's comes back. */
	kc_sleep_ms(100);
	workers[2] = h_spawn("kc-double", "--device", "0", "--home", h_home,
	    "--delay-ms", "600", (char *)NULL);
	unsetenv("KCLAW_WORKER_HOST");
	unsetenv("KC_DOUBLE_JOBLOG");
	for (int i = 0; i < 2000 && !done; i++) {
		Kclaw__StatusResponse *sa = h_status(a), *sb = h_status(b);
		/* Each task's reference check done too (docs/orchestrator.md
		 * "The reference check"). */
		done = strcmp(sa->task->state, "FEATURES") == 0 &&
		    strcmp(sb->task->state, "FEATURES") == 0 &&
		    sa->task->reference_check &&
		    sa->task->reference_check->state ==
		        KCLAW__REFERENCE_CHECK_STATE__CHECK_DONE &&
		    sb->task->reference_check &&
		    sb->task->reference_check->state ==
		        KCLAW__REFERENCE_CHECK_STATE__CHECK_DONE;
		kclaw__status_response__free_unpacked(sa, NULL);
		kclaw__status_response__free_unpacked(sb, NULL);
		kc_sleep_ms(10);
	}
	KT_ASSERT(done);
	/* On both GPUs at once, and every seed and reference check
	 * evaluated exactly once: 2 x (3 + 1) (the dying sandbox logged
	 * nothing: it died on receipt). */
	KT_ASSERT(jobs_overlap(log, &njobs));
	KT_EQ_INT(njobs, 8);
	stop(3);
}

/* One sandbox, a task with 16 seeds and one with 1: fair share runs the
 * small task's evaluation next, not after the 16 queued before it. */
static void
test_fair_share(void)
{
	char big[32], small[32];
	Kclaw__FsmParams p16 = KCLAW__FSM_PARAMS__INIT, p1 = p16;
	Kclaw__TaskSpec *spec;
	Kclaw__StatusResponse *s;
	bool small_done = false;

	start("e2e-fair", "\"poll_ms\": 300");
	workers[0] = h_spawn(
	    "kc-double", "--role", "generator", "--home", h_home, (char *)NULL);
	workers[1] = h_spawn("kc-double", "--device", "0", "--home", h_home,
	    "--delay-ms", "40", (char *)NULL);
	p16.seeds = 16;
	p1.seeds = 1;
	spec = h_spec("big", "seeds=ok:1.0", 3);
	spec->params = &p16;
	KT_OK(h_submit(spec, NULL, big));
	for (int i = 0; i < 200; i++) { /* its 16 evaluations are queued */
		s = h_status(big);
		small_done = strcmp(s->task->state, "REVIEW_SEEDS") == 0;
		kclaw__status_response__free_unpacked(s, NULL);
		if (small_done)
			break;
		kc_sleep_ms(5);
	}
	spec = h_spec("small", "seeds=ok:1.0", 3);
	spec->params = &p1;
	KT_OK(h_submit(spec, NULL, small));
	small_done = false;
	for (int i = 0; i < 400 && !small_done; i++) {
		s = h_status(small);
		small_done = strcmp(s->task->state, "FEATURES") == 0;
		kclaw__status_response__free_unpacked(s, NULL);
		kc_sleep_ms(5);
	}
	KT_ASSERT(small_done);
	s = h_status(big);
	KT_EQ_STR(s->task->state, "REVIEW_SEEDS"); /* still evaluating */
	kclaw__status_response__free_unpacked(s, NULL);
	stop(2);
}

static void
test_no_gpu(void)
{
	char id[32];
	Kclaw__StatusResponse *s;

	start("e2e-nogpu", NULL);
	workers[0] = h_spawn(
	    "kc-double", "--role", "generator", "--home", h_home, (char *)NULL);
	workers[1] = h_spawn("kc-double", "--device", "0", "--no-device",
	    "--home", h_home, (char *)NULL);
	KT_OK(h_submit(h_spec("nogpu", "seeds=ok:1.0", 3), NULL, id));
	s = h_wait_final(id, 20000);
	KT_EQ_STR(s->task->state, "FAILED");
	KT_CONTAINS(s->task->error, "NO_DEVICE");
	kclaw__status_response__free_unpacked(s, NULL);
	stop(2);
}

/* Failure policy: a Planner that always fails. Each of its jobs is
 * retried after a doubling backoff, then the round is recorded as failed
 * and the task goes on; the round budget ends it DONE with the seed as its
 * best. A Generator failing for good is the one failure that fails a
 * task. */
static void
test_failed_rounds_with_backoff(void)
{
	char id[32], gid[32];
	Kclaw__StatusResponse *s;
	Kclaw__EventsResponse *ev;
	Kclaw__FsmParams p1 = KCLAW__FSM_PARAMS__INIT;
	Kclaw__TaskSpec *spec;
	uint64_t called[8];
	unsigned ncalled = 0, retried = 0, failed = 0;

	start("e2e-fail",
	    "\"poll_ms\": 300, \"job_retries\": 2, \"retry_backoff_ms\": 200");
	workers[0] = h_spawn(
	    "kc-double", "--role", "generator", "--home", h_home, (char *)NULL);
	workers[1] = h_spawn(
	    "kc-double", "--role", "feature", "--home", h_home, (char *)NULL);
	workers[2] = h_spawn("kc-double", "--role", "planner", "--home", h_home,
	    "--fail-every", "1", (char *)NULL);
	workers[3] = h_spawn(
	    "kc-double", "--device", "0", "--home", h_home, (char *)NULL);
	p1.seeds = 1;
	spec = h_spec("failing", "seeds=ok:2.0;ref=4.0", 2);
	spec->params = &p1;
	KT_OK(h_submit(spec, NULL, id));
	s = h_wait_final(id, 20000);
	KT_EQ_STR(s->task->state, "DONE");
	KT_EQ_INT(s->task->round, 2);
	KT_EQ_INT(s->task->failed_rounds, 2);
	KT_ASSERT(s->task->best_ms == 2.0);
	KT_ASSERT(s->task->speedup == 2.0);
	KT_CONTAINS(s->task->error, "round budget");
	/* Failed calls count: six Planner calls, all failed, with their
	 * tokens. */
	check_usage(s->task, KCLAW__ROLE__GENERATOR, 1, 0);
	check_usage(s->task, KCLAW__ROLE__FEATURE, 1, 0);
	check_usage(s->task, KCLAW__ROLE__PLANNER, 6, 6);
	KT_EQ_INT(s->task->tokens, 15 * 8);
	check_usage_sum(s->task);
	kclaw__status_response__free_unpacked(s, NULL);
	KT_EQ_INT(h_check_rounds(id), 2);
	ev = h_events(id, 0);
	for (size_t k = 0; k < ev->n_events; k++) {
		const Kclaw__Event *e = ev->events[k];
		if (e->kind == KCLAW__EVENT_KIND__AGENT_CALLED &&
		    e->role == KCLAW__ROLE__PLANNER && ncalled < 8)
			called[ncalled++] = e->time_unix_ms;
		if (e->kind == KCLAW__EVENT_KIND__JOB_RETRIED) {
			KT_CONTAINS(e->detail,
			    retried % 2 ? "retried in 0.4 s"
			                : "retried in 0.2 s");
			retried++;
		}
		if (e->kind == KCLAW__EVENT_KIND__ROUND_FINISHED) {
			KT_CONTAINS(
			    e->detail, "failed: planner job failed 3 times");
			failed++;
		}
	}
	kclaw__events_response__free_unpacked(ev, NULL);
	KT_EQ_INT(retried, 4); /* two rounds, two retries each */
	KT_EQ_INT(failed, 2);
	KT_EQ_INT(ncalled, 6);
	/* The first retry waited 200 ms, the second 400 ms. */
	KT_ASSERT(called[1] - called[0] >= 190);
	KT_ASSERT(called[2] - called[1] >= 390);
	stop(4);

	/* The token budget counts failed calls: 30 tokens of answers and 45
	 * of three failed Planner calls spend a budget of 50 after round 1,
	 * where answers alone would go on to round 3. */
	start("e2e-tokens",
	    "\"poll_ms\": 300, \"job_retries\": 2, \"retry_backoff_ms\": 10");
	workers[0] = h_spawn(
	    "kc-double", "--role", "generator", "--home", h_home, (char *)NULL);
	workers[1] = h_spawn(
	    "kc-double", "--role", "feature", "--home", h_home, (char *)NULL);
	workers[2] = h_spawn("kc-double", "--role", "planner", "--home", h_home,
	    "--fail-every", "1", (char *)NULL);
	workers[3] = h_spawn(
	    "kc-double", "--device", "0", "--home", h_home, (char *)NULL);
	p1.seeds = 1;
	spec = h_spec("tokens", "seeds=ok:2.0;ref=4.0", 3);
	spec->params = &p1;
	spec->budget->tokens = 50;
	KT_OK(h_submit(spec, NULL, id));
	s = h_wait_final(id, 20000);
	KT_EQ_STR(s->task->state, "DONE");
	KT_EQ_INT(s->task->round, 1);
	KT_CONTAINS(s->task->error, "token budget");
	KT_EQ_INT(s->task->tokens, 75);
	check_usage(s->task, KCLAW__ROLE__PLANNER, 3, 3);
	kclaw__status_response__free_unpacked(s, NULL);
	stop(4);

	/* Every Generator job failing for good fails the task. */
	start("e2e-genfail", "\"job_retries\": 1, \"retry_backoff_ms\": 10");
	workers[0] = h_spawn("kc-double", "--role", "generator", "--home",
	    h_home, "--fail-every", "1", (char *)NULL);
	p1.seeds = 2;
	spec = h_spec("nogen", "seeds=ok:2.0", 3);
	spec->params = &p1;
	KT_OK(h_submit(spec, NULL, gid));
	s = h_wait_final(gid, 20000);
	KT_EQ_STR(s->task->state, "FAILED");
	KT_CONTAINS(s->task->error, "every Generator job");
	KT_CONTAINS(s->task->error, "generator job failed 2 times");
	kclaw__status_response__free_unpacked(s, NULL);
	stop(1);
}

int
main(void)
{
	signal(SIGPIPE, SIG_IGN);
	KT_RUN(test_tasks_api_events);
	KT_RUN(test_worker_dies_holding_a_job);
	KT_RUN(test_sandbox_replaced);
	KT_RUN(test_fair_share);
	KT_RUN(test_gpus_by_host);
	KT_RUN(test_no_gpu);
	KT_RUN(test_failed_rounds_with_backoff);
	return 0;
}
