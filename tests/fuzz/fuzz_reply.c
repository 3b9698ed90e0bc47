/* fuzz_reply.c - LLM replies are outside input: candidates, plans and the
 * JSON of planner and diagnoser replies must parse or be refused with an
 * error the model can act on. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "fuzz_task.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = fuzz_text(data, size);
	Kclaw__Candidate **cands = NULL;
	size_t n = 0;
	kc_str err = {0};
	cJSON *j = NULL;

	if (text == NULL)
		return 0;
	/* Valid candidates come back even when others were refused
	 * (KC_EINVAL): the caller owns them either way. */
	(void)agent_parse_candidates(fuzz_task(), text, 4, &cands, &n, &err);
	for (size_t i = 0; i < n; i++)
		kclaw__candidate__free_unpacked(cands[i], NULL);
	free(cands);
	kc_str_free(&err);
	if (agent_parse_json(text, &j, &err) == 0)
		cJSON_Delete(j);
	kc_str_free(&err);
	char *stripped = agent_strip_comments(text);
	free(stripped);
	free(text);
	return 0;
}
