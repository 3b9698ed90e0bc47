/*
 * harness.h - what the orchestrator's integration tests share: a temporary
 * deployment home, the real kclawd and test-double workers as child
 * processes, and API calls.
 */
#ifndef ORCH_HARNESS_H
#define ORCH_HARNESS_H

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "api.h"
#include "kc_config.h"
#include "kc_err.h"
#include "kc_test.h"
#include "kc_util.h"

/*
 * A REQ socket closed while its request never found a connection keeps
 * that message inside NNG 1.5.2, which LeakSanitizer reports at exit; the
 * harness reopens its API client after a restarted orchestrator (below),
 * so it would report every time.
 */
const char *__lsan_default_suppressions(void);
const char *
__lsan_default_suppressions(void)
{
	return "leak:libnng.so\n";
}

static char h_home[256];
static pid_t h_children[64];
static int h_nchildren;

/* A failed check exits: the children must not outlive the test. */
static void
h_reap_all(void)
{
	if (getenv("KC_KEEP"))
		return; /* leave them running for a post-mortem */
	for (int i = 0; i < h_nchildren; i++)
		if (h_children[i] > 0) {
			kill(h_children[i], SIGKILL);
			waitpid(h_children[i], NULL, 0);
		}
	h_nchildren = 0;
}
static kc_config h_cfg;
static bus_client *h_api;
/* The token h_call and h_wait_up send (NULL: an ipc deployment's none). */
static const char *h_token;

/* A fresh home with kclaw.json's orchestrator settings (a JSON object's
 * members, e.g. "\"agent_timeout_ms\": 1500"). */
static void
h_setup(const char *name, const char *orch_json)
{
	char path[512], text[1024];

	snprintf(h_home, sizeof(h_home), "/tmp/kc-%s-XXXXXX", name);
	KT_ASSERT(mkdtemp(h_home) != NULL);
	snprintf(path, sizeof(path), "%s/kclaw.json", h_home);
	snprintf(text, sizeof(text), "{\"orchestrator\": {%s}}\n",
	    orch_json ? orch_json : "");
	KT_OK(kc_write_file(path, text, strlen(text)));
	setenv("KCLAW_HOME", h_home, 1);
	KT_OK(kc_config_load(&h_cfg, h_home));
	KT_OK(bus_client_open(&h_api, h_cfg.api_url, 0));
}

static pid_t
h_spawn(const char *prog, ...)
{
	const char *bin = getenv("KCLAW_BIN");
	char path[512], log[512];
	char *argv[16];
	va_list ap;
	int argc = 0;
	pid_t pid;

	snprintf(path, sizeof(path), "%s/%s", bin ? bin : ".", prog);
	argv[argc++] = path;
	va_start(ap, prog);
	while (argc < 15 && (argv[argc] = va_arg(ap, char *)) != NULL)
		argc++;
	va_end(ap);
	argv[argc] = NULL;
	snprintf(log, sizeof(log), "%s/children.log", h_home);
	if ((pid = fork()) == 0) {
		FILE *f = fopen(log, "a");
		if (f) {
			dup2(fileno(f), 1);
			dup2(fileno(f), 2);
		}
		execv(path, argv);
		_exit(127);
	}
	KT_ASSERT(pid > 0);
	static bool registered;
	if (!registered)
		atexit(h_reap_all);
	registered = true;
	for (int i = 0; i < h_nchildren; i++)
		if (h_children[i] == 0) {
			h_children[i] = pid;
			return pid;
		}
	if (h_nchildren < 64)
		h_children[h_nchildren++] = pid;
	return pid;
}

static pid_t
h_kclawd(void)
{
	return h_spawn("kclawd", "--home", h_home, (char *)NULL);
}

/* The six agent doubles answering after agent_ms, and nsandbox sandbox
 * doubles after sandbox_ms (a test that needs the sandbox's jobs done
 * before the agents' answers move the task on). */
static void
h_doubles_paced(
    pid_t *pids, int nsandbox, const char *agent_ms, const char *sandbox_ms)
{
	static const char *roles[] = {"generator", "feature", "planner",
	    "optimizer", "diagnoser", "repairer"};
	int k = 0;

	for (int i = 0; i < 6; i++)
		pids[k++] = h_spawn("kc-double", "--role", roles[i], "--home",
		    h_home, "--delay-ms", agent_ms, (char *)NULL);
	for (int i = 0; i < nsandbox; i++) {
		char dev[8];
		snprintf(dev, sizeof(dev), "%d", i);
		pids[k++] = h_spawn("kc-double", "--device", dev, "--home",
		    h_home, "--delay-ms", sandbox_ms, (char *)NULL);
	}
}

/* One double per agent role and n sandboxes (device 0..n-1). */
static void
h_doubles(pid_t *pids, int nsandbox, const char *delay_ms)
{
	h_doubles_paced(pids, nsandbox, delay_ms, delay_ms);
}

static void
h_kill(pid_t pid, int sig)
{
	if (pid > 0) {
		kill(pid, sig);
		waitpid(pid, NULL, 0);
		for (int i = 0; i < h_nchildren; i++)
			if (h_children[i] == pid)
				h_children[i] = 0;
	}
}

static int
h_call(const char *method, const ProtobufCMessage *req,
    const ProtobufCMessageDescriptor *d, ProtobufCMessage **resp)
{
	return kc_api_call(h_api, method, req, h_token, 3000, d, resp);
}

/* Waits until the orchestrator answers Health. */
static void
h_wait_up(void)
{
	Kclaw__HealthRequest req = KCLAW__HEALTH_REQUEST__INIT;
	ProtobufCMessage *resp;

	for (int i = 0; i < 100; i++) {
		if (i % 10 == 9) {
			/* After many restarts of the listener an NNG dialer
			 * can stop reconnecting: dial afresh. */
			bus_client_close(h_api);
			KT_OK(bus_client_open(&h_api, h_cfg.api_url, 0));
		}
		if (kc_api_call(h_api, "Health", &req.base, h_token, 300,
		        &kclaw__health_response__descriptor, &resp) == 0) {
			protobuf_c_message_free_unpacked(resp, NULL);
			return;
		}
	}
	KT_FAIL("kclawd did not answer Health (see %s/children.log)", h_home);
}

/* n deterministic bytes: the content is its seed's (xorshift). */
static inline uint8_t *
h_bytes(size_t n, uint32_t seed)
{
	uint8_t *b = malloc(n);
	uint32_t x = seed * 2654435761u + 1;

	KT_ASSERT(b != NULL);
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		b[i] = (uint8_t)x;
	}
	return b;
}

/* The file at path holds exactly the n bytes of want. */
static inline void
h_same_file(const char *path, const uint8_t *want, size_t n)
{
	char *got;
	size_t len;

	KT_OK(kc_read_file(path, n + 1, &got, &len));
	KT_ASSERT(len == n);
	KT_ASSERT(memcmp(got, want, n) == 0);
	free(got);
}

/* A minimal valid spec whose context is the doubles' script. */
static Kclaw__TaskSpec *
h_spec(const char *name, const char *script, uint32_t rounds)
{
	static Kclaw__TaskSpec spec;
	static Kclaw__TensorSpec x, y;
	static Kclaw__TensorSpec *tensors[2];
	static Kclaw__Reference ref;
	static Kclaw__Budget budget;
	static char nbuf[64], sbuf[256];
	static int64_t shape[1] = {16};
	static float zeros[16];
	static Kclaw__TensorSet set;
	static Kclaw__TensorSet *sets[1];
	static Kclaw__TensorData xin, yexp;
	static Kclaw__TensorData *xins[1], *yexps[1];

	kclaw__task_spec__init(&spec);
	kclaw__tensor_spec__init(&x);
	kclaw__tensor_spec__init(&y);
	kclaw__reference__init(&ref);
	kclaw__budget__init(&budget);
	/* kclawd checks every spec it is sent (common/spec_check.c). */
	x.name = "x";
	x.kind = KCLAW__TENSOR_KIND__INPUT;
	x.dtype = KCLAW__DTYPE__F32;
	x.shape = shape;
	x.n_shape = 1;
	y.name = "y";
	y.kind = KCLAW__TENSOR_KIND__OUTPUT;
	y.dtype = KCLAW__DTYPE__F32;
	y.shape = shape;
	y.n_shape = 1;
	tensors[0] = &x;
	tensors[1] = &y;
	spec.tensors = tensors;
	spec.n_tensors = 2;
	ref.kind = KCLAW__REFERENCE__KIND__TENSORS;
	ref.baseline_ms = 4.0;
	/* One input set, inline (the doubles never read it). */
	kclaw__tensor_set__init(&set);
	kclaw__tensor_data__init(&xin);
	kclaw__tensor_data__init(&yexp);
	xin.name = "x";
	xin.data.data = (uint8_t *)zeros;
	xin.data.len = sizeof(zeros);
	yexp.name = "y";
	yexp.data.data = (uint8_t *)zeros;
	yexp.data.len = sizeof(zeros);
	xins[0] = &xin;
	yexps[0] = &yexp;
	set.seed = 1;
	set.inputs = xins;
	set.n_inputs = 1;
	set.expected = yexps;
	set.n_expected = 1;
	sets[0] = &set;
	ref.sets = sets;
	ref.n_sets = 1;
	spec.reference = &ref;
	budget.rounds = rounds;
	spec.budget = &budget;
	snprintf(nbuf, sizeof(nbuf), "%s", name);
	snprintf(sbuf, sizeof(sbuf), "%s", script);
	spec.name = nbuf;
	spec.context = sbuf;
	return &spec;
}

static int
h_submit(const Kclaw__TaskSpec *spec, const char *task_id, char *id_out)
{
	Kclaw__SubmitRequest req = KCLAW__SUBMIT_REQUEST__INIT;
	Kclaw__SubmitResponse *resp;
	int rv;

	req.spec = (Kclaw__TaskSpec *)spec;
	req.task_id = (char *)(task_id ? task_id : "");
	rv = h_call("Submit", &req.base, &kclaw__submit_response__descriptor,
	    (ProtobufCMessage **)&resp);
	if (rv == 0) {
		if (id_out)
			strcpy(id_out, resp->task_id);
		kclaw__submit_response__free_unpacked(resp, NULL);
	}
	return rv;
}

/* The task's record (caller frees), or NULL when the call failed. */
static Kclaw__StatusResponse *
h_status(const char *id)
{
	Kclaw__StatusRequest req = KCLAW__STATUS_REQUEST__INIT;
	Kclaw__StatusResponse *resp;

	req.task_id = (char *)id;
	if (h_call("Status", &req.base, &kclaw__status_response__descriptor,
	        (ProtobufCMessage **)&resp) != 0)
		return NULL;
	return resp;
}

static bool
h_final(const char *state)
{
	return strcmp(state, "DONE") == 0 || strcmp(state, "FAILED") == 0 ||
	    strcmp(state, "CANCELLED") == 0;
}

/* Waits up to timeout_ms for the task to end; returns its record. */
static Kclaw__StatusResponse *
h_wait_final(const char *id, int timeout_ms)
{
	uint64_t end = kc_mono_ms() + (uint64_t)timeout_ms;

	while (kc_mono_ms() < end) {
		Kclaw__StatusResponse *s = h_status(id);
		if (s && h_final(s->task->state))
			return s;
		if (s)
			kclaw__status_response__free_unpacked(s, NULL);
		kc_sleep_ms(50);
	}
	KT_FAIL("task %s did not finish within %d ms (see %s/children.log)", id,
	    timeout_ms, h_home);
	return NULL;
}

static Kclaw__EventsResponse *
h_events(const char *task_id, uint64_t since)
{
	Kclaw__EventsRequest req = KCLAW__EVENTS_REQUEST__INIT;
	Kclaw__EventsResponse *resp;

	req.task_id = (char *)(task_id ? task_id : "");
	req.since_seq = since;
	req.limit = 10000;
	KT_OK(h_call("Events", &req.base, &kclaw__events_response__descriptor,
	    (ProtobufCMessage **)&resp));
	return resp;
}

/* Every ROUND_FINISHED of the task, in order, must count 1, 2, 3, ...: no
 * round counted twice or skipped. Returns the number of rounds. */
static uint32_t
h_check_rounds(const char *task_id)
{
	Kclaw__EventsResponse *ev = h_events(task_id, 0);
	uint32_t rounds = 0;
	uint64_t seq = 0;

	for (size_t i = 0; i < ev->n_events; i++) {
		KT_ASSERT(ev->events[i]->seq > seq);
		seq = ev->events[i]->seq;
		if (ev->events[i]->kind != KCLAW__EVENT_KIND__ROUND_FINISHED)
			continue;
		if (ev->events[i]->round != rounds + 1)
			KT_FAIL("task %s: ROUND_FINISHED %u after round %u",
			    task_id, ev->events[i]->round, rounds);
		rounds++;
	}
	kclaw__events_response__free_unpacked(ev, NULL);
	return rounds;
}

static void
h_teardown(void)
{
	char cmd[400];

	bus_client_close(h_api);
	if (getenv("KC_KEEP") == NULL) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", h_home);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", h_home);
	}
}

#endif
