/*
 * pbjson_test.c - messages become the JSON other programs read.
 */
#include <stdlib.h>
#include <string.h>

#include "kc_err.h"
#include "kc_test.h"
#include "kclaw.pb-c.h"
#include "pbjson.h"

static void
test_eval_result(void)
{
	Kclaw__EvalResult r = KCLAW__EVAL_RESULT__INIT;
	Kclaw__Timing t = KCLAW__TIMING__INIT;
	Kclaw__Metric m1 = KCLAW__METRIC__INIT, m2 = KCLAW__METRIC__INIT;
	Kclaw__Metric *ms[] = {&m1, &m2};

	r.status = KCLAW__EVAL_STATUS__WRONG_RESULT;
	r.message = "y[3]: expected 1, got 2";
	t.median_ms = 1.5;
	t.iterations = 50;
	r.timing = &t;
	m1.name = "dram_throughput_pct";
	m1.value = 81.5;
	m2.name = "sm_throughput_pct";
	m2.value = 12;
	r.n_metrics = 2;
	r.metrics = ms;
	char *text = kc_pb_to_json_text(&r.base);
	KT_ASSERT(text != NULL);
	cJSON *j = cJSON_Parse(text);
	KT_ASSERT(j != NULL);
	KT_EQ_STR(
	    cJSON_GetObjectItem(j, "status")->valuestring, "WRONG_RESULT");
	KT_EQ_STR(cJSON_GetObjectItem(j, "message")->valuestring,
	    "y[3]: expected 1, got 2");
	cJSON *timing = cJSON_GetObjectItem(j, "timing");
	KT_ASSERT(cJSON_GetObjectItem(timing, "median_ms")->valuedouble == 1.5);
	KT_EQ_INT(cJSON_GetObjectItem(timing, "iterations")->valueint, 50);
	cJSON *metrics = cJSON_GetObjectItem(j, "metrics");
	KT_EQ_INT(cJSON_GetArraySize(metrics), 2);
	KT_EQ_STR(cJSON_GetObjectItem(cJSON_GetArrayItem(metrics, 1), "name")
	              ->valuestring,
	    "sm_throughput_pct");
	/* Unset sub-messages are left out, not null. */
	KT_ASSERT(cJSON_GetObjectItem(j, "mismatch") == NULL);
	cJSON_Delete(j);
	free(text);
}

static void
test_bytes_and_repeated_scalars(void)
{
	Kclaw__TensorSpec ts = KCLAW__TENSOR_SPEC__INIT;
	int64_t shape[] = {4096, 1024};
	Kclaw__ApiRequest ar = KCLAW__API_REQUEST__INIT;

	ts.name = "x";
	ts.dtype = KCLAW__DTYPE__BF16;
	ts.n_shape = 2;
	ts.shape = shape;
	char *text = kc_pb_to_json_text(&ts.base);
	KT_CONTAINS(text, "\"shape\":[4096,1024]");
	KT_CONTAINS(text, "\"dtype\":\"BF16\"");
	free(text);
	ar.method = "Health";
	ar.payload.data = (uint8_t *)"hello";
	ar.payload.len = 5;
	text = kc_pb_to_json_text(&ar.base);
	KT_CONTAINS(text, "\"payload\":\"aGVsbG8=\"");
	free(text);
}

/* The public convention of every `kclaw --json` (docs/cli.md). */
static void
test_public_convention(void)
{
	Kclaw__TaskRecord t = KCLAW__TASK_RECORD__INIT;
	Kclaw__RoleUsage u = KCLAW__ROLE_USAGE__INIT, *us[] = {&u};
	Kclaw__TensorData td = KCLAW__TENSOR_DATA__INIT;
	Kclaw__EvalResult r = KCLAW__EVAL_RESULT__INIT;
	Kclaw__Timing tm = KCLAW__TIMING__INIT;
	uint8_t fsm[] = {1, 2, 3};
	cJSON *j, *e;
	char *text2;

	t.id = "t1";
	t.state = "OPTIMIZING";
	t.round = 0;
	t.best_ms = 0;
	t.reference_ms = 2.5;
	t.fsm.data = fsm;
	t.fsm.len = 3;
	u.role = KCLAW__ROLE__GENERATOR;
	t.usage = us;
	t.n_usage = 1;
	char *text = kc_pb_to_json_public_text(&t.base);
	KT_ASSERT(text != NULL);
	KT_ASSERT(strstr(text, "AAEC") == NULL); /* no base64 */
	j = cJSON_Parse(text);
	KT_EQ_STR(cJSON_GetObjectItem(j, "state")->valuestring, "optimizing");
	KT_ASSERT(cJSON_IsNull(cJSON_GetObjectItem(j, "best_ms")));
	KT_ASSERT(cJSON_IsNull(cJSON_GetObjectItem(j, "speedup")));
	KT_ASSERT(cJSON_IsNull(cJSON_GetObjectItem(j, "finished_unix_ms")));
	KT_ASSERT(cJSON_GetObjectItem(j, "reference_ms")->valuedouble == 2.5);
	/* A count of 0 is a count. */
	KT_ASSERT(cJSON_IsNumber(cJSON_GetObjectItem(j, "round")));
	KT_ASSERT(cJSON_IsNull(cJSON_GetObjectItem(j, "error")));
	KT_ASSERT(cJSON_IsNull(cJSON_GetObjectItem(j, "spec")));
	KT_ASSERT(cJSON_GetObjectItem(j, "fsm") == NULL);
	KT_EQ_INT(cJSON_GetObjectItem(j, "fsm_bytes")->valueint, 3);
	e = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "usage"), 0);
	KT_EQ_STR(cJSON_GetObjectItem(e, "role")->valuestring, "generator");
	cJSON_Delete(j);
	free(text);

	td.name = "x";
	text = kc_pb_to_json_public_text(&td.base);
	KT_CONTAINS(text, "\"data_bytes\":null");
	free(text);

	r.status = KCLAW__EVAL_STATUS__WRONG_RESULT;
	tm.median_ms = 1.5;
	tm.stddev_ms = 0; /* a spread of 0 is a measurement */
	r.timing = &tm;
	text = kc_pb_to_json_public_text(&r.base);
	j = cJSON_Parse(text);
	KT_EQ_STR(
	    cJSON_GetObjectItem(j, "status")->valuestring, "wrong_result");
	e = cJSON_GetObjectItem(j, "timing");
	KT_ASSERT(cJSON_GetObjectItem(e, "stddev_ms")->valuedouble == 0);
	KT_ASSERT(cJSON_IsNull(cJSON_GetObjectItem(j, "baseline")));
	KT_ASSERT(cJSON_IsNull(cJSON_GetObjectItem(j, "mismatch")));
	/* Not measured at a matched precision: null, like any speedup. */
	KT_ASSERT(
	    cJSON_IsNull(cJSON_GetObjectItem(j, "speedup_matched_precision")));
	cJSON_Delete(j);
	r.speedup_matched_precision = 1.25;
	text2 = kc_pb_to_json_public_text(&r.base);
	j = cJSON_Parse(text2);
	KT_ASSERT(
	    cJSON_GetObjectItem(j, "speedup_matched_precision")->valuedouble ==
	    1.25);
	r.speedup_matched_precision = 0;
	free(text2);
	cJSON_Delete(j);
	free(text);

	/* UNSPECIFIED is no value. */
	r.status = KCLAW__EVAL_STATUS__EVAL_STATUS_UNSPECIFIED;
	text = kc_pb_to_json_public_text(&r.base);
	KT_CONTAINS(text, "\"status\":null");
	free(text);
}

/* Text from task files need not be UTF-8; the JSON printed always is. */
static void
test_invalid_utf8(void)
{
	Kclaw__TaskRecord t = KCLAW__TASK_RECORD__INIT;
	char *text;
	cJSON *j;

	t.id = "t1";
	t.error =
	    "bad \xff byte, cut \xe2\x82, overlong \xc0\xaf, ok \xe2\x82\xac";
	text = kc_pb_to_json_public_text(&t.base);
	KT_ASSERT(text != NULL);
	j = cJSON_Parse(text);
	KT_ASSERT(j != NULL);
	KT_EQ_STR(cJSON_GetObjectItem(j, "error")->valuestring,
	    "bad \xef\xbf\xbd byte, cut \xef\xbf\xbd\xef\xbf\xbd, overlong "
	    "\xef\xbf\xbd\xef\xbf\xbd, ok \xe2\x82\xac");
	cJSON_Delete(j);
	free(text);
}

int
main(void)
{
	KT_RUN(test_eval_result);
	KT_RUN(test_bytes_and_repeated_scalars);
	KT_RUN(test_public_convention);
	KT_RUN(test_invalid_utf8);
	return 0;
}
