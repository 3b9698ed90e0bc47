/*
 * agent_unfit_test.c - a model that cannot take the task's prompts stops
 * the task at once: the real kclawd, a real kclaw-agent (generator) and
 * the scripted LLM server answering as Ollama does when it cuts a prompt
 * to its default context (prompt_tokens far below what was sent). The
 * task ends FAILED within seconds, not after every job's retries, its
 * error naming the fix (OLLAMA_CONTEXT_LENGTH, num_ctx); no job of it is
 * retried.
 */
#include "agent_testlib.h"
#include "agent_service.h"

static kt_llm_server srv;

static cJSON *
ollama_cut(int tokens)
{
	cJSON *a = kt_reply("### Candidate 1: an answer to a fragment");

	cJSON_AddNumberToObject(a, "ollama_cut", tokens);
	return a;
}

int
main(void)
{
	Kclaw__StatusResponse *s;
	Kclaw__EventsResponse *ev;
	uint64_t t0;
	cJSON *log;
	char id[64];

	kt_llm_start(&srv);
	kt_llm_script(&srv, ollama_cut(50), ollama_cut(50), ollama_cut(50),
	    ollama_cut(50), ollama_cut(50), ollama_cut(50), NULL);
	as_start("agentunfit", &srv, "generator");
	t0 = kc_mono_ms();
	KT_OK(h_submit(h_spec("agent_unfit", "", 3), NULL, id));

	fprintf(stderr, "-- the task fails at once, with the fix\n");
	s = h_wait_final(id, 30000);
	KT_EQ_STR(s->task->state, "FAILED");
	KT_CONTAINS(s->task->error, "generator job failed, not retried");
	KT_CONTAINS(s->task->error, "counted 50 prompt tokens");
	KT_CONTAINS(s->task->error, "OLLAMA_CONTEXT_LENGTH");
	KT_CONTAINS(s->task->error, "num_ctx");
	KT_CONTAINS(s->task->error, "context window is too small");
	fprintf(stderr, "   failed after %llu ms\n",
	    (unsigned long long)(kc_mono_ms() - t0));
	kclaw__status_response__free_unpacked(s, NULL);

	fprintf(stderr, "-- no job of it was retried\n");
	ev = h_events(id, 0);
	for (size_t i = 0; i < ev->n_events; i++)
		KT_ASSERT(
		    ev->events[i]->kind != KCLAW__EVENT_KIND__JOB_RETRIED);
	kclaw__events_response__free_unpacked(ev, NULL);
	/* At most one call per seed (the jobs dispatched before the stop);
	 * retries would have made more. */
	log = kt_llm_log(&srv);
	KT_ASSERT(cJSON_GetArraySize(log) >= 1);
	KT_ASSERT(cJSON_GetArraySize(log) <= 3);
	cJSON_Delete(log);

	h_reap_all();
	h_teardown();
	kt_llm_stop(&srv);
	return 0;
}
