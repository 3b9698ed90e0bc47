/*
 * agent_process_test.c - the real kclaw-agent process against a test
 * orchestrator (a bus_server on a temporary ipc:// address answering
 * WorkRequests, the process-boundary double) and the scripted LLM server.
 * It proves: a job pulled, answered through HTTP and returned with the next
 * request; idle replies and garbage survived; a SIGKILLed worker's job
 * finished by a fresh worker; shutdown honoured; the exchange recorded
 * without the API key and replayed by another process byte for byte; a
 * cancelled task's job stopped through the control events; with
 * KCLAW_LLM_PROVIDER=anthropic, a job through the Messages API whose
 * failing call is said to the orchestrator (WorkRequest.progress) while
 * it is retried.
 */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent_testlib.h"
#include "api.h"
#include "bus.h"
#include "kc_err.h"
#include "kc_test.h"
#include "kc_util.h"

#define PLAN_REPLY                                                             \
	"```json\n{\"method\": \"grid_stride\", \"steps\": [\"1. loop over "   \
	"the grid\"], \"rationale\": \"few blocks\"}\n```"

static kt_llm_server srv;
static char dir[256], url[400], rec[400], logf[400], events[400];
static const char *provider; /* KCLAW_LLM_PROVIDER of the next agent */

/* ---- the test orchestrator: requests queue up for the test thread ---- */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static bus_call *calls[16];
static int ncalls;

static void
on_request(void *arg, bus_call *call)
{
	(void)arg;
	pthread_mutex_lock(&mu);
	if (ncalls < 16)
		calls[ncalls++] = call;
	else
		bus_call_drop(call);
	pthread_cond_signal(&cv);
	pthread_mutex_unlock(&mu);
}

/* The next WorkRequest (decoded into *req), waiting up to timeout_ms. */
static bus_call *
next_request(int timeout_ms, Kclaw__WorkRequest **req)
{
	uint64_t until = kc_mono_ms() + (uint64_t)timeout_ms;
	const void *data;
	bus_call *c;
	size_t len;

	pthread_mutex_lock(&mu);
	while (ncalls == 0 && kc_mono_ms() < until) {
		pthread_mutex_unlock(&mu);
		kc_sleep_ms(10);
		pthread_mutex_lock(&mu);
	}
	if (ncalls == 0) {
		pthread_mutex_unlock(&mu);
		KT_FAIL("no work request within %d ms", timeout_ms);
	}
	c = calls[0];
	memmove(calls, calls + 1, (size_t)--ncalls * sizeof(*calls));
	pthread_mutex_unlock(&mu);
	data = bus_call_data(c, &len);
	*req = kclaw__work_request__unpack(NULL, len, data);
	KT_ASSERT(*req != NULL);
	return c;
}

static void
answer(bus_call *c, const Kclaw__WorkReply *rep)
{
	uint8_t *buf;
	size_t len;

	KT_OK(kc_pb_pack(&rep->base, &buf, &len));
	KT_OK(bus_call_reply(c, buf, len));
	free(buf);
}

/* ---- a planner job ---- */

static Kclaw__TensorSpec tout = KCLAW__TENSOR_SPEC__INIT;
static Kclaw__TensorSpec *tensors[] = {&tout};
static int64_t shape[] = {16};
static Kclaw__TaskSpec task = KCLAW__TASK_SPEC__INIT;
static Kclaw__Candidate base = KCLAW__CANDIDATE__INIT;

static void
give_job(bus_call *c, const char *job_id, const char *key)
{
	Kclaw__WorkReply rep = KCLAW__WORK_REPLY__INIT;
	Kclaw__AgentJob j = KCLAW__AGENT_JOB__INIT;

	tout.name = "out";
	tout.kind = KCLAW__TENSOR_KIND__OUTPUT;
	tout.dtype = KCLAW__DTYPE__F32;
	tout.n_shape = 1;
	tout.shape = shape;
	task.name = "fill";
	task.description = "out[i] = i";
	task.n_tensors = 1;
	task.tensors = tensors;
	base.id = "cb";
	base.source = "extern \"C\" __global__ void fill(float *out) { "
	              "out[threadIdx.x] = threadIdx.x; }";
	base.plan_json = "{\"steps\": [{\"kernel\": \"fill\", \"grid\": [1], "
	                 "\"block\": [16], \"args\": [\"out\"]}]}";
	j.job_id = (char *)job_id;
	j.task_id = "t1";
	j.role = KCLAW__ROLE__PLANNER;
	j.task = &task;
	j.base_kernel = &base;
	j.replay_key = (char *)key;
	rep.job_id = (char *)job_id;
	rep.agent = &j;
	answer(c, &rep);
}

static void
give_idle(bus_call *c, bool shutdown)
{
	Kclaw__WorkReply rep = KCLAW__WORK_REPLY__INIT;

	rep.shutdown = shutdown;
	answer(c, &rep);
}

/* ---- the agent process ---- */

static pid_t
start_agent(const char *id, bool replay)
{
	pid_t pid = fork();
	char bin[512];
	int fd;

	KT_ASSERT(pid >= 0);
	if (pid > 0)
		return pid;
	snprintf(bin, sizeof(bin), "%s/kclaw-agent", getenv("KCLAW_BIN"));
	fd = open(logf, O_WRONLY | O_CREAT | O_APPEND, 0600);
	dup2(fd, 2);
	setenv("KCLAW_LLM_BASE_URL", srv.base_url, 1);
	setenv("KCLAW_LLM_MODEL", "test-model", 1);
	setenv("KCLAW_LLM_API_KEY", KT_TEST_KEY, 1);
	setenv("KCLAW_LLM_TIMEOUT_MS", "20000", 1);
	setenv("KCLAW_LLM_BACKOFF_MS", "20", 1);
	setenv("KCLAW_LOG", "debug", 1);
	setenv("KCLAW_EVENTS_URL", events, 1);
	if (provider != NULL)
		setenv("KCLAW_LLM_PROVIDER", provider, 1);
	setenv(replay ? "KCLAW_LLM_REPLAY" : "KCLAW_LLM_RECORD", rec, 1);
	execl(bin, bin, "--role", "planner", "--work-url", url, "--home", dir,
	    "--id", id, (char *)NULL);
	_exit(127);
}

static int
wait_exit(pid_t pid, int timeout_ms)
{
	uint64_t until = kc_mono_ms() + (uint64_t)timeout_ms;
	int st;

	while (kc_mono_ms() < until) {
		if (waitpid(pid, &st, WNOHANG) == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
		kc_sleep_ms(10);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	KT_FAIL("kclaw-agent %d did not exit in %d ms", (int)pid, timeout_ms);
	return -1;
}

/* Waits until the LLM server has received n requests. */
static void
wait_llm_requests(int n)
{
	int i, got = 0;

	for (i = 0; i < 500 && got < n; i++) {
		cJSON *log = kt_llm_log(&srv);
		got = cJSON_GetArraySize(log);
		cJSON_Delete(log);
		if (got < n)
			kc_sleep_ms(10);
	}
	KT_EQ_INT(got, n);
}

static uint8_t *
packed_reply(const Kclaw__WorkRequest *req, size_t *len)
{
	uint8_t *buf;

	KT_ASSERT(req->agent_reply != NULL);
	KT_OK(kc_pb_pack(&req->agent_reply->base, &buf, len));
	return buf;
}

int
main(void)
{
	Kclaw__WorkRequest *req;
	bus_server *s;
	bus_pub *pub;
	bus_call *c;
	uint8_t *recorded, *replayed;
	size_t lrec, lrep;
	char path[600], *text;
	size_t len;
	pid_t a;

	kt_llm_start(&srv);
	kt_tmpdir(dir, "kt-agentp");
	snprintf(url, sizeof(url), "ipc://%s/work.ipc", dir);
	snprintf(rec, sizeof(rec), "%s/rec", dir);
	snprintf(logf, sizeof(logf), "%s/agent.log", dir);
	snprintf(events, sizeof(events), "ipc://%s/events.ipc", dir);
	KT_OK(bus_server_open(&s, url, 4, 0, on_request, NULL));
	KT_OK(bus_pub_open(&pub, events));

	/* 1. A job through HTTP, with a re-ask; garbage and idle survived. */
	kt_llm_script(
	    &srv, kt_reply("no JSON here"), kt_reply(PLAN_REPLY), NULL);
	a = start_agent("agent-p1", false);
	c = next_request(10000, &req);
	KT_EQ_INT(req->role, KCLAW__ROLE__PLANNER);
	KT_EQ_STR(req->worker_id, "agent-p1");
	KT_ASSERT(req->agent_reply == NULL);
	kclaw__work_request__free_unpacked(req, NULL);
	KT_OK(bus_call_reply(c, "\x01garbage", 8));
	c = next_request(10000, &req);
	kclaw__work_request__free_unpacked(req, NULL);
	give_idle(c, false);
	c = next_request(10000, &req);
	KT_ASSERT(req->agent_reply == NULL);
	kclaw__work_request__free_unpacked(req, NULL);
	give_job(c, "j1", "fill/planner/0");
	c = next_request(20000, &req);
	KT_ASSERT(req->agent_reply != NULL);
	KT_EQ_STR(req->agent_reply->job_id, "j1");
	KT_ASSERT(req->agent_reply->ok);
	KT_EQ_INT(req->agent_reply->role, KCLAW__ROLE__PLANNER);
	KT_EQ_STR(req->agent_reply->plan->method, "grid_stride");
	KT_EQ_INT(req->agent_reply->usage->calls, 2);
	KT_ASSERT(req->agent_reply->usage->prompt_tokens > 0);
	KT_EQ_STR(req->agent_reply->exchange_id, "fill/planner/0.reask1");
	recorded = packed_reply(req, &lrec);
	kclaw__work_request__free_unpacked(req, NULL);
	give_idle(c, true);
	KT_EQ_INT(wait_exit(a, 10000), 0);

	/* 2. A worker killed mid-call; a fresh one finishes the job. */
	kt_llm_script(
	    &srv, kt_hang(3.0, "too late"), kt_reply(PLAN_REPLY), NULL);
	a = start_agent("agent-p2", false);
	c = next_request(10000, &req);
	kclaw__work_request__free_unpacked(req, NULL);
	give_job(c, "j2", "fill/planner/1");
	wait_llm_requests(1);
	kill(a, SIGKILL);
	KT_EQ_INT(wait_exit(a, 5000), 128);
	a = start_agent("agent-p3", false);
	c = next_request(10000, &req);
	KT_EQ_STR(req->worker_id, "agent-p3");
	KT_ASSERT(req->agent_reply == NULL);
	kclaw__work_request__free_unpacked(req, NULL);
	give_job(c, "j2", "fill/planner/1");
	c = next_request(20000, &req);
	KT_EQ_STR(req->agent_reply->job_id, "j2");
	KT_ASSERT(req->agent_reply->ok);
	KT_EQ_INT(req->agent_reply->usage->calls, 1);
	kclaw__work_request__free_unpacked(req, NULL);
	give_idle(c, true);
	KT_EQ_INT(wait_exit(a, 10000), 0);

	/* 3. The recording holds no key; a replaying process answers the
	 * same job byte for byte without the LLM server. */
	snprintf(path, sizeof(path), "%s/fill/planner/0.reask1.json", rec);
	KT_OK(kc_read_file(path, 1 << 20, &text, &len));
	KT_ASSERT(strstr(text, KT_TEST_KEY) == NULL);
	KT_CONTAINS(text, "grid_stride");
	free(text);
	kt_llm_script(&srv, NULL);
	a = start_agent("agent-p4", true);
	c = next_request(10000, &req);
	kclaw__work_request__free_unpacked(req, NULL);
	give_job(c, "j1", "fill/planner/0");
	c = next_request(10000, &req);
	replayed = packed_reply(req, &lrep);
	kclaw__work_request__free_unpacked(req, NULL);
	give_idle(c, true);
	KT_EQ_INT(wait_exit(a, 10000), 0);
	KT_EQ_INT(lrep, lrec);
	KT_ASSERT(memcmp(recorded, replayed, lrec) == 0);
	wait_llm_requests(0);
	free(recorded);
	free(replayed);

	/* 4. A cancelled task stops its job's LLM call; another task's
	 * cancellation does not. */
	{
		Kclaw__Event ev = KCLAW__EVENT__INIT;
		uint8_t *eb;
		size_t el;
		int i, waiting;

		ev.kind = KCLAW__EVENT_KIND__TASK_CANCELLED;
		ev.task_id = "t1";
		KT_OK(kc_pb_pack(&ev.base, &eb, &el));
		kt_llm_script(&srv, kt_hang(10.0, "late"), NULL);
		a = start_agent("agent-p5", false);
		c = next_request(10000, &req);
		kclaw__work_request__free_unpacked(req, NULL);
		give_job(c, "j5", "fill/planner/5");
		wait_llm_requests(1);
		KT_OK(bus_pub_send(pub, "task.t2.task_cancelled", eb, el));
		kc_sleep_ms(300);
		pthread_mutex_lock(&mu);
		waiting = ncalls;
		pthread_mutex_unlock(&mu);
		KT_EQ_INT(waiting, 0);
		/* PUB/SUB may drop: publish until the reply comes. */
		for (i = 0; i < 50; i++) {
			KT_OK(bus_pub_send(
			    pub, "task.t1.task_cancelled", eb, el));
			pthread_mutex_lock(&mu);
			waiting = ncalls;
			pthread_mutex_unlock(&mu);
			if (waiting > 0)
				break;
			kc_sleep_ms(100);
		}
		free(eb);
		c = next_request(1000, &req);
		KT_EQ_STR(req->agent_reply->job_id, "j5");
		KT_ASSERT(!req->agent_reply->ok);
		KT_CONTAINS(req->agent_reply->error, "cancelled");
		kclaw__work_request__free_unpacked(req, NULL);
		give_idle(c, true);
		KT_EQ_INT(wait_exit(a, 10000), 0);
	}

	/* 5. Anthropic: a 529 is said at once, while it is retried after its
	 * retry-after; the job's usage counts the cache write. */
	{
		cJSON *busy = cJSON_CreateObject();
		cJSON_AddNumberToObject(busy, "status", 529);
		cJSON_AddStringToObject(busy, "error", "Overloaded");
		cJSON_AddStringToObject(
		    cJSON_AddObjectToObject(busy, "headers"), "retry-after",
		    "1");
		kt_llm_script(&srv, busy, kt_reply(PLAN_REPLY), NULL);
		provider = "anthropic";
		a = start_agent("agent-p6", false);
		provider = NULL;
		c = next_request(10000, &req);
		kclaw__work_request__free_unpacked(req, NULL);
		give_job(c, "j6", "fill/planner/6");
		c = next_request(10000, &req);
		KT_ASSERT(req->progress != NULL);
		KT_ASSERT(req->agent_reply == NULL);
		KT_EQ_STR(req->progress->job_id, "j6");
		KT_EQ_INT(req->progress->role, KCLAW__ROLE__PLANNER);
		KT_EQ_INT(req->progress->http_status, 529);
		KT_EQ_INT(req->progress->failed_try, 1);
		KT_EQ_INT(req->progress->retry_in_ms, 1000);
		KT_CONTAINS(req->progress->error, "HTTP 529 (Overloaded)");
		KT_CONTAINS(req->progress->error, "retrying in 1.0 s");
		KT_CONTAINS(req->progress->error, "status page");
		KT_ASSERT(strstr(req->progress->error, KT_TEST_KEY) == NULL);
		kclaw__work_request__free_unpacked(req, NULL);
		give_idle(c, false);
		c = next_request(10000, &req);
		KT_ASSERT(req->progress == NULL);
		KT_EQ_STR(req->agent_reply->job_id, "j6");
		KT_ASSERT(req->agent_reply->ok);
		KT_EQ_STR(req->agent_reply->plan->method, "grid_stride");
		KT_EQ_INT(req->agent_reply->usage->retries, 1);
		KT_ASSERT(req->agent_reply->usage->cache_write_tokens > 0);
		kclaw__work_request__free_unpacked(req, NULL);
		give_idle(c, true);
		KT_EQ_INT(wait_exit(a, 10000), 0);
	}

	/* 6. Logs never show the key; a bad role is refused with usage. */
	KT_OK(kc_read_file(logf, 1 << 22, &text, &len));
	KT_ASSERT(strstr(text, KT_TEST_KEY) == NULL);
	KT_CONTAINS(text, "did not decode");
	free(text);
	{
		char cmd[1024];
		snprintf(cmd, sizeof(cmd),
		    "%s/kclaw-agent --role painter 2>%s/usage.txt",
		    getenv("KCLAW_BIN"), dir);
		KT_EQ_INT(WEXITSTATUS(system(cmd)), 2);
		snprintf(path, sizeof(path), "%s/usage.txt", dir);
		KT_OK(kc_read_file(path, 1 << 16, &text, &len));
		KT_CONTAINS(text, "unknown role");
		KT_CONTAINS(text, "generator, feature, planner");
		free(text);
	}

	bus_server_close(s);
	bus_pub_close(pub);
	kt_rmtree(dir);
	kt_llm_stop(&srv);
	return 0;
}
