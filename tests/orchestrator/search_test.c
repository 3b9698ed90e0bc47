/*
 * search_test.c - how a task's search spends the model's calls, with the
 * real kclawd and test-double workers over real NNG and a real store:
 * every seed of a task is asked for with its own index and strategy (no
 * two seed requests equal, so no two seeds the same kernel), and a new
 * task's last seed adapts the best kernel of the most similar solved task;
 * K candidates per round run at once and the best of the round is
 * promoted; a correct kernel's tune candidate, swept by the sandbox while
 * the agents work, is promoted like any other.
 */
#include "harness.h"

static pid_t kclawd;
static pid_t workers[8];

static void
start(const char *name)
{
	h_setup(name, "\"poll_ms\": 500");
	kclawd = h_kclawd();
	h_wait_up();
	h_doubles(workers, 1, "0");
}

static void
stop(void)
{
	for (int i = 0; i < 7; i++)
		h_kill(workers[i], SIGTERM);
	h_kill(kclawd, SIGTERM);
	h_teardown();
}

/* The task's history (caller frees). */
static Kclaw__ResultResponse *
result(const char *id)
{
	Kclaw__ResultRequest req = KCLAW__RESULT_REQUEST__INIT;
	Kclaw__ResultResponse *res;

	req.task_id = (char *)id;
	KT_OK(h_call("Result", &req.base, &kclaw__result_response__descriptor,
	    (ProtobufCMessage **)&res));
	return res;
}

/* The source of seed i (1-based) of a task's history, or NULL. */
static const char *
seed_source(const Kclaw__ResultResponse *res, unsigned i, unsigned k)
{
	char want[32];

	snprintf(want, sizeof(want), " seed %u of %u: ", i, k);
	for (size_t n = 0; n < res->n_history; n++) {
		const Kclaw__Candidate *c = res->history[n]->candidate;
		if (c && strcmp(c->origin, "generator") == 0 &&
		    strstr(c->source, want))
			return c->source;
	}
	return NULL;
}

/* Submits a task and waits for it to be DONE; id_out gets its id. */
static void
solve(Kclaw__TaskSpec *spec, char *id_out)
{
	Kclaw__StatusResponse *s;

	KT_OK(h_submit(spec, NULL, id_out));
	s = h_wait_final(id_out, 20000);
	KT_EQ_STR(s->task->state, "DONE");
	kclaw__status_response__free_unpacked(s, NULL);
}

static void
test_seeds_differ(void)
{
	Kclaw__FsmParams params = KCLAW__FSM_PARAMS__INIT;
	Kclaw__ResultResponse *res;
	Kclaw__TaskSpec *spec;
	const char *src[4];
	char id[32];

	start("search-seeds");
	spec = h_spec(
	    "seeds4", "seeds=ok:2.0,ok:2.0,ok:2.0,ok:2.0;tag=1;opt=1.0", 1);
	params.seeds = 4;
	spec->params = &params;
	solve(spec, id);
	KT_EQ_INT(h_check_rounds(id), 1);
	res = result(id);
	/* Four seeds asked as four distinct requests: each names its index
	 * and a strategy of its own, so even one outcome scripted four
	 * times gives four different kernels. */
	for (unsigned i = 0; i < 4; i++) {
		src[i] = seed_source(res, i + 1, 4);
		KT_ASSERT(src[i] != NULL);
		KT_ASSERT(strchr(src[i], ':') != NULL);
	}
	for (unsigned i = 0; i < 4; i++)
		for (unsigned k = i + 1; k < 4; k++) {
			const char *a = strstr(src[i], " of 4: ") + 7;
			const char *b = strstr(src[k], " of 4: ") + 7;
			KT_ASSERT(strcmp(src[i], src[k]) != 0);
			KT_ASSERT(strcmp(a, b) != 0); /* strategies differ */
		}
	kclaw__result_response__free_unpacked(res, NULL);
	stop();
}

static void
test_warm_start_picks_similar(void)
{
	static int64_t square[2] = {4, 4};
	Kclaw__ResultResponse *res;
	Kclaw__TaskSpec *spec;
	char norm[32], gemm[32], id[32];
	const char *src;

	start("search-warm");
	/* A norm over a row of 16, and a GEMM over 4 x 4. */
	spec = h_spec("rms_norm", "seeds=ok:2.0;tag=1;opt=1.0", 1);
	spec->description = "rms norm of each row, then scaled";
	solve(spec, norm);
	spec = h_spec("gemm_bias", "seeds=ok:2.0;tag=1;opt=1.0", 1);
	spec->description = "matrix multiply with a bias epilogue";
	spec->tensors[0]->shape = square;
	spec->tensors[0]->n_shape = 2;
	spec->tensors[1]->shape = square;
	spec->tensors[1]->n_shape = 2;
	solve(spec, gemm);
	/* A layer norm over the same rows: the norm is the similar task. */
	spec =
	    h_spec("layer_norm", "seeds=ok:2.0,ok:2.0,ok:2.0;tag=1;opt=1.0", 1);
	spec->description = "layer norm of each row, then scaled";
	solve(spec, id);
	res = result(id);
	src = seed_source(res, 3, 3);
	KT_ASSERT(src != NULL);
	KT_CONTAINS(src, "warm:rms_norm");
	KT_CONTAINS(src,
	    "adapt the best kernel of the similar solved task "
	    "rms_norm");
	/* Only the last seed adapts it; the others keep their strategies. */
	KT_ASSERT(strstr(seed_source(res, 1, 3), "warm:") == NULL);
	KT_ASSERT(strstr(seed_source(res, 2, 3), "warm:") == NULL);
	kclaw__result_response__free_unpacked(res, NULL);
	stop();
}

/* The [start, end] ms of each job a double logged (KC_DOUBLE_JOBLOG). */
static int
joblog(const char *path, unsigned long long (*t)[2], int max)
{
	FILE *f = fopen(path, "r");
	int n = 0;

	KT_ASSERT(f != NULL);
	while (n < max && fscanf(f, "%llu %llu", &t[n][0], &t[n][1]) == 2)
		n++;
	fclose(f);
	return n;
}

/*
 * Three candidates per round on three Optimizer processes: the three
 * calls run at once (each takes 400 ms; their spans overlap), every
 * kernel is evaluated as it arrives, and the round's best (1.0 ms against
 * the base's 2.0) is promoted; the round budget counts each candidate.
 */
static void
test_parallel_candidates(void)
{
	Kclaw__FsmParams params = KCLAW__FSM_PARAMS__INIT;
	static const char *roles[] = {
	    "generator", "feature", "planner", "diagnoser", "repairer"};
	unsigned long long t[8][2];
	Kclaw__StatusResponse *s;
	Kclaw__ResultResponse *res;
	Kclaw__TaskSpec *spec;
	pid_t pids[16];
	char id[32], log[300];
	int k = 0, n;

	h_setup("search-wave", "\"poll_ms\": 500");
	kclawd = h_kclawd();
	h_wait_up();
	for (int i = 0; i < 5; i++)
		pids[k++] = h_spawn("kc-double", "--role", roles[i], "--home",
		    h_home, (char *)NULL);
	pids[k++] = h_spawn(
	    "kc-double", "--device", "0", "--home", h_home, (char *)NULL);
	snprintf(log, sizeof(log), "%s/optimizers.log", h_home);
	setenv("KC_DOUBLE_JOBLOG", log, 1);
	for (int i = 0; i < 3; i++)
		pids[k++] = h_spawn("kc-double", "--role", "optimizer",
		    "--home", h_home, "--delay-ms", "400", (char *)NULL);
	unsetenv("KC_DOUBLE_JOBLOG");
	spec = h_spec("wave3", "seeds=ok:2.0;opt=1.5,1.0,1.8;ref=4.0", 3);
	params.seeds = 1;
	params.candidates_per_round = 3;
	spec->params = &params;
	KT_OK(h_submit(spec, NULL, id));
	s = h_wait_final(id, 20000);
	KT_EQ_STR(s->task->state, "DONE");
	KT_EQ_INT(s->task->round, 3);
	KT_ASSERT(s->task->best_ms == 1.0);
	KT_EQ_STR(s->task->best_id, s->task->base_id);
	KT_CONTAINS(s->task->error, "round budget");
	kclaw__status_response__free_unpacked(s, NULL);
	KT_EQ_INT(h_check_rounds(id), 3);
	res = result(id);
	KT_EQ_STR(res->best->candidate->source, "KC:ok:1.0");
	KT_EQ_STR(res->best->candidate->origin, "optimizer");
	kclaw__result_response__free_unpacked(res, NULL);
	/* The three Optimizer calls overlapped: each began before any
	 * ended. */
	n = joblog(log, t, 8);
	KT_EQ_INT(n, 3);
	for (int i = 0; i < 3; i++)
		for (int j = 0; j < 3; j++)
			KT_ASSERT(t[i][0] < t[j][1]);
	for (int i = 0; i < k; i++)
		h_kill(pids[i], SIGTERM);
	h_kill(kclawd, SIGTERM);
	h_teardown();
}

/*
 * The GPU works while the model thinks: the promoted seed (2.0 ms, a
 * tunable launch) gets a tune candidate at once, whose sweep (1.2 ms at
 * block 512) is judged with the next round's kernel (1.9 ms) and, as the
 * round's best under the rule, becomes the base and the best; the task's
 * record says the best came from tuning.
 */
static void
test_tune_candidate(void)
{
	Kclaw__FsmParams params = KCLAW__FSM_PARAMS__INIT;
	Kclaw__ResultResponse *res;
	Kclaw__StatusResponse *s;
	Kclaw__TaskSpec *spec;
	char id[32];
	int tunes = 0;

	start("search-tune");
	spec = h_spec(
	    "tune1", "seeds=ok:2.0;launch=1;tune=1.2;opt=1.9;ref=4.0", 1);
	params.seeds = 1;
	params.tune = 1;
	spec->params = &params;
	KT_OK(h_submit(spec, NULL, id));
	s = h_wait_final(id, 20000);
	KT_EQ_STR(s->task->state, "DONE");
	KT_ASSERT(s->task->best_ms == 1.2);
	KT_EQ_STR(s->task->best_id, s->task->base_id);
	KT_ASSERT(s->task->best_from_tune);
	KT_EQ_INT(s->task->tune_promotions, 1);
	KT_ASSERT(s->task->tune_candidates >= 1);
	KT_EQ_INT(s->task->round, 1); /* a sweep spends no round */
	kclaw__status_response__free_unpacked(s, NULL);
	res = result(id);
	KT_EQ_STR(res->best->candidate->origin, "tune");
	KT_EQ_STR(res->best->candidate->method, "KC_BLOCK_0=512");
	KT_CONTAINS(res->best->candidate->plan_json, "\"block\": 512");
	KT_CONTAINS(res->best->candidate->parent_id, "-c0001");
	for (size_t i = 0; i < res->n_history; i++)
		tunes +=
		    strcmp(res->history[i]->candidate->origin, "tune") == 0;
	KT_ASSERT(tunes >= 1);
	kclaw__result_response__free_unpacked(res, NULL);
	stop();
}

int
main(void)
{
	KT_RUN(test_seeds_differ);
	KT_RUN(test_warm_start_picks_similar);
	KT_RUN(test_parallel_candidates);
	KT_RUN(test_tune_candidate);
	return 0;
}
