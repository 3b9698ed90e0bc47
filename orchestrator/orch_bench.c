/*
 * orch_bench.c - kclaw-orch-bench: the orchestrator under load (a program,
 * not a test). It runs the orchestrator in this process, submits N tasks
 * over the API, measures the resident memory per idle task (no worker
 * yet), then starts instant test-double workers (kc-double) and measures
 * transitions per second with synchronous durable commits until every
 * task has ended.
 *
 *   kclaw-orch-bench [--tasks N] [--rounds R] [--agents N] [--sandboxes N]
 *                    [--home DIR]
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "api.h"
#include "kc_err.h"
#include "kc_log.h"
#include "kc_util.h"
#include "orch.h"

static long
bench_rss_kb(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kb = -1;

	if (f == NULL)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "VmRSS:", 6) == 0)
			kb = strtol(line + 6, NULL, 10);
	fclose(f);
	return kb;
}

static void *
bench_loop(void *arg)
{
	orch_run(arg);
	return NULL;
}

static int
bench_call(bus_client *c, const char *method, const ProtobufCMessage *req,
    const ProtobufCMessageDescriptor *d, ProtobufCMessage **resp)
{
	return kc_api_call(c, method, req, NULL, 30000, d, resp);
}

static pid_t
bench_spawn(
    const char *bin, const char *home, const char *flag, const char *value)
{
	pid_t pid = fork();

	if (pid == 0) {
		execl(bin, bin, flag, value, "--home", home, (char *)NULL);
		_exit(127);
	}
	return pid;
}

int
main(int argc, char **argv)
{
	unsigned ntasks = 1000, rounds = 3, agents = 2, sandboxes = 4;
	const char *home = NULL;
	char tmp[] = "/tmp/kc-bench-XXXXXX", self[KC_PATH_MAX],
	     dbl[KC_PATH_MAX];
	static const char *roles[] = {"generator", "feature", "planner",
	    "optimizer", "diagnoser", "repairer"};
	pid_t pids[256];
	unsigned npids = 0;
	kc_config cfg;
	orch_options opt;
	orch_counters c0, c1;
	orch *o;
	pthread_t loop;
	bus_client *api;
	long rss0, rss1;
	uint64_t t0, t1, ts0, ts1;
	ssize_t n;

	kc_log_init("orch-bench");
	kc_log_set_level(KC_LOG_WARN);
	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--tasks") == 0)
			ntasks = (unsigned)atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--rounds") == 0)
			rounds = (unsigned)atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--agents") == 0)
			agents = (unsigned)atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--sandboxes") == 0)
			sandboxes = (unsigned)atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--home") == 0)
			home = argv[i + 1];
	}
	if (home == NULL && (home = mkdtemp(tmp)) == NULL) {
		perror("mkdtemp");
		return 1;
	}
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	self[n > 0 ? n : 0] = '\0';
	*strrchr(self, '/') = '\0';
	snprintf(dbl, sizeof(dbl), "%s/kc-double", self);
	if (access(dbl, X_OK) != 0) {
		fprintf(
		    stderr, "%s is missing: build the target kc-double\n", dbl);
		return 1;
	}
	signal(SIGPIPE, SIG_IGN);
	if (kc_config_load(&cfg, home) != 0 ||
	    orch_options_load(&opt, &cfg) != 0) {
		fprintf(stderr, "%s\n", kc_lasterr());
		return 1;
	}
	opt.poll_ms = 1000;
	if (orch_open(&o, &opt) != 0) {
		fprintf(stderr, "orch_open: %s\n", kc_lasterr());
		return 1;
	}
	pthread_create(&loop, NULL, bench_loop, o);
	if (bus_client_open(&api, cfg.api_url, 0) != 0)
		return 1;
	kc_sleep_ms(200);
	rss0 = bench_rss_kb();

	/* Phase 1: N idle tasks (nobody works yet). */
	ts0 = kc_mono_ms();
	for (unsigned i = 0; i < ntasks; i++) {
		Kclaw__SubmitRequest req = KCLAW__SUBMIT_REQUEST__INIT;
		Kclaw__TaskSpec spec = KCLAW__TASK_SPEC__INIT;
		Kclaw__TensorSpec x = KCLAW__TENSOR_SPEC__INIT,
		                  y = KCLAW__TENSOR_SPEC__INIT;
		Kclaw__TensorSpec *t[2] = {&x, &y};
		Kclaw__Reference ref = KCLAW__REFERENCE__INIT;
		Kclaw__Budget b = KCLAW__BUDGET__INIT;
		ProtobufCMessage *resp;
		char name[32];
		/* A spec kclawd's check accepts (common/spec_check.c): dtypes,
		 * shapes, one inline input set. The doubles never read it. */
		static int64_t shape[1] = {16};
		static float zeros[16];
		Kclaw__TensorData xin = KCLAW__TENSOR_DATA__INIT,
		                  yexp = KCLAW__TENSOR_DATA__INIT;
		Kclaw__TensorData *xins[1] = {&xin}, *yexps[1] = {&yexp};
		Kclaw__TensorSet set = KCLAW__TENSOR_SET__INIT;
		Kclaw__TensorSet *sets[1] = {&set};
		x.name = "x";
		x.kind = KCLAW__TENSOR_KIND__INPUT;
		x.dtype = y.dtype = KCLAW__DTYPE__F32;
		x.shape = y.shape = shape;
		x.n_shape = y.n_shape = 1;
		y.name = "y";
		y.kind = KCLAW__TENSOR_KIND__OUTPUT;
		spec.tensors = t;
		spec.n_tensors = 2;
		xin.name = "x";
		yexp.name = "y";
		xin.data.data = yexp.data.data = (uint8_t *)zeros;
		xin.data.len = yexp.data.len = sizeof(zeros);
		set.seed = 1;
		set.inputs = xins;
		set.n_inputs = 1;
		set.expected = yexps;
		set.n_expected = 1;
		ref.kind = KCLAW__REFERENCE__KIND__TENSORS;
		ref.baseline_ms = 4.0;
		ref.sets = sets;
		ref.n_sets = 1;
		spec.reference = &ref;
		b.rounds = rounds;
		spec.budget = &b;
		snprintf(name, sizeof(name), "bench_%u", i);
		spec.name = name;
		spec.context = "seeds=wrong,ok:2.0,ok:3.0;opt=1.0,1.9,0.5,0.4;"
		               "ref=4.0";
		req.spec = &spec;
		if (bench_call(api, "Submit", &req.base,
		        &kclaw__submit_response__descriptor, &resp) != 0) {
			fprintf(stderr, "submit: %s\n", kc_lasterr());
			return 1;
		}
		protobuf_c_message_free_unpacked(resp, NULL);
	}
	ts1 = kc_mono_ms();
	kc_sleep_ms(500);
	rss1 = bench_rss_kb();
	orch_get_counters(o, &c0);

	/* Phase 2: instant workers until every task has ended. */
	t0 = kc_mono_ms();
	for (unsigned r = 0; r < 6; r++)
		for (unsigned k = 0; k < agents; k++)
			pids[npids++] =
			    bench_spawn(dbl, home, "--role", roles[r]);
	for (unsigned d = 0; d < sandboxes; d++) {
		char dev[8];
		snprintf(dev, sizeof(dev), "%u", d);
		pids[npids++] = bench_spawn(dbl, home, "--device", dev);
	}
	for (;;) {
		Kclaw__HealthRequest req = KCLAW__HEALTH_REQUEST__INIT;
		Kclaw__HealthResponse *h;
		bool done;
		kc_sleep_ms(100);
		if (bench_call(api, "Health", &req.base,
		        &kclaw__health_response__descriptor,
		        (ProtobufCMessage **)&h) != 0)
			continue;
		done = h->tasks_active == 0;
		kclaw__health_response__free_unpacked(h, NULL);
		if (done)
			break;
	}
	t1 = kc_mono_ms();
	for (unsigned i = 0; i < npids; i++) {
		kill(pids[i], SIGTERM);
		waitpid(pids[i], NULL, 0);
	}
	orch_stop(o);
	pthread_join(loop, NULL);
	orch_get_counters(o, &c1);
	printf(
	    "tasks                      %u (rounds %u each)\n", ntasks, rounds);
	printf("submit                     %.0f tasks/s (one synced commit "
	       "each, sequential)\n",
	    ntasks * 1000.0 / (double)(ts1 - ts0 ? ts1 - ts0 : 1));
	printf("resident memory            %ld KB before, %ld KB with %u "
	       "idle tasks\n",
	    rss0, rss1, ntasks);
	printf("per idle task              %.1f KB\n",
	    (double)(rss1 - rss0) / ntasks);
	printf("transitions                %llu in %.2f s: %.0f /s\n",
	    (unsigned long long)(c1.transitions - c0.transitions),
	    (t1 - t0) / 1000.0,
	    (c1.transitions - c0.transitions) * 1000.0 /
	        (double)(t1 - t0 ? t1 - t0 : 1));
	printf("synced commits             %llu (%.1f transitions each)\n",
	    (unsigned long long)(c1.commits - c0.commits),
	    (double)(c1.transitions - c0.transitions) /
	        (double)(c1.commits - c0.commits ? c1.commits - c0.commits
	                                         : 1));
	printf("dropped late replies       %llu, retries %llu\n",
	    (unsigned long long)c1.dropped_replies,
	    (unsigned long long)c1.retries);
	bus_client_close(api);
	orch_close(o);
	if (home == tmp) {
		char cmd[128];
		snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", tmp);
	}
	return 0;
}
