/*
 * agent_error_test.c - a job whose model calls fail shows the error while
 * it is retried: the real kclawd, a real kclaw-agent (generator) and the
 * scripted LLM server answering 529 with retry-after. While the agent
 * waits to retry, the task's record (Status: TaskRecord.last_agent_error)
 * names the role, the HTTP status, the provider's message and what to do,
 * and an AGENT_RETRYING event says the same; once a job of the task
 * succeeds the error is cleared.
 */
#include "agent_testlib.h"
#include "agent_service.h"

#define SEED_REPLY                                                             \
	"### Candidate 1: copy\n```cuda\nextern \"C\" __global__ void "        \
	"copy(const float *x, float *y, int n)\n{\n\tint i = threadIdx.x;\n"   \
	"\tif (i < n)\n\t\ty[i] = x[i];\n}\n```\n```json\n{\"steps\": "        \
	"[{\"kernel\": \"copy\", \"grid\": [1, 1, 1], \"block\": [16, 1, 1], " \
	"\"args\": [\"x\", \"y\", {\"i32\": 16}]}]}\n```\n"

static kt_llm_server srv;

static cJSON *
overloaded(void)
{
	cJSON *a = cJSON_CreateObject();

	cJSON_AddNumberToObject(a, "status", 529);
	cJSON_AddStringToObject(a, "error", "Overloaded");
	cJSON_AddStringToObject(
	    cJSON_AddObjectToObject(a, "headers"), "Retry-After", "2");
	return a;
}

/* Waits until the task's last agent error is set (want) or cleared;
 * returns it (caller frees) when set. */
static char *
wait_agent_error(const char *id, bool want, int timeout_ms)
{
	uint64_t end = kc_mono_ms() + (uint64_t)timeout_ms;

	while (kc_mono_ms() < end) {
		Kclaw__StatusResponse *s = h_status(id);
		char *e = NULL;
		bool set;
		if (s == NULL) {
			kc_sleep_ms(20);
			continue;
		}
		set = s->task->last_agent_error != NULL &&
		    s->task->last_agent_error[0] != '\0';
		if (set == want) {
			if (set) {
				e = strdup(s->task->last_agent_error);
				KT_ASSERT(
				    s->task->last_agent_error_unix_ms > 0);
			}
			kclaw__status_response__free_unpacked(s, NULL);
			return set ? e : strdup("");
		}
		kclaw__status_response__free_unpacked(s, NULL);
		kc_sleep_ms(20);
	}
	KT_FAIL("task %s: last_agent_error never %s (see %s/children.log)", id,
	    want ? "set" : "cleared", h_home);
	return NULL;
}

int
main(void)
{
	Kclaw__EventsResponse *ev;
	char id[64], *err;
	bool seen = false;

	kt_llm_start(&srv);
	/* Two 529s, then a seed for every generator job. */
	kt_llm_script(&srv, overloaded(), overloaded(), kt_reply(SEED_REPLY),
	    kt_reply(SEED_REPLY), kt_reply(SEED_REPLY), kt_reply(SEED_REPLY),
	    NULL);
	as_start("agenterr", &srv, "generator");
	KT_OK(h_submit(h_spec("agent_error", "", 1), NULL, id));

	fprintf(stderr, "-- the error is in the task's status while retried\n");
	err = wait_agent_error(id, true, 20000);
	KT_CONTAINS(err, "generator: model call try ");
	KT_CONTAINS(err, " of 5 failed: HTTP 529 (Overloaded)");
	KT_CONTAINS(err, "retrying in 2.0 s");
	KT_CONTAINS(err, "status page");
	KT_ASSERT(strstr(err, KT_TEST_KEY) == NULL);
	free(err);

	fprintf(stderr, "-- and in an AGENT_RETRYING event\n");
	ev = h_events(id, 0);
	for (size_t i = 0; i < ev->n_events; i++)
		if (ev->events[i]->kind == KCLAW__EVENT_KIND__AGENT_RETRYING) {
			KT_CONTAINS(ev->events[i]->detail, "HTTP 529");
			KT_EQ_INT(ev->events[i]->role, KCLAW__ROLE__GENERATOR);
			seen = true;
		}
	kclaw__events_response__free_unpacked(ev, NULL);
	KT_ASSERT(seen);

	fprintf(stderr, "-- a job that succeeds clears it\n");
	free(wait_agent_error(id, false, 20000));

	h_reap_all();
	h_teardown();
	kt_llm_stop(&srv);
	return 0;
}
