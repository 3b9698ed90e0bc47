#include "agent_testlib.h"

#include <curl/curl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kc_err.h"
#include "kc_test.h"
#include "kc_util.h"

void
kt_tmpdir(char *out, const char *prefix)
{
	const char *t = getenv("TMPDIR");

	snprintf(out, 256, "%s/%s-XXXXXX", t && *t ? t : "/tmp", prefix);
	if (mkdtemp(out) == NULL)
		KT_FAIL("mkdtemp %s failed", out);
}

void
kt_rmtree(const char *dir)
{
	pid_t pid = fork();
	int st;

	if (pid == 0) {
		execlp("rm", "rm", "-rf", dir, (char *)NULL);
		_exit(127);
	}
	if (pid > 0)
		waitpid(pid, &st, 0);
}

void
kt_llm_start(kt_llm_server *s)
{
	char port_file[300], script[1024], *text = NULL;
	const char *src = getenv("KCLAW_SRC");
	size_t len;
	int i;

	memset(s, 0, sizeof(*s));
	KT_ASSERT(src != NULL);
	kt_tmpdir(s->dir, "kt-llm");
	snprintf(port_file, sizeof(port_file), "%s/port", s->dir);
	snprintf(script, sizeof(script), "%s/tests/agents/llm_server.py", src);
	if ((s->pid = fork()) == 0) {
		/* A test that fails exits at once: take the server along. */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		execlp("python3", "python3", script, "--port-file", port_file,
		    (char *)NULL);
		_exit(127);
	}
	KT_ASSERT(s->pid > 0);
	for (i = 0; i < 500; i++) {
		if (kc_read_file(port_file, 64, &text, &len) == 0)
			break;
		kc_sleep_ms(10);
	}
	if (text == NULL)
		KT_FAIL("the LLM test server did not start (%s)", script);
	s->port = atoi(text);
	free(text);
	snprintf(s->base_url, sizeof(s->base_url), "http://127.0.0.1:%d/v1",
	    s->port);
}

void
kt_llm_stop(kt_llm_server *s)
{
	int st;

	if (s->pid > 0) {
		kill(s->pid, SIGTERM);
		waitpid(s->pid, &st, 0);
		s->pid = 0;
	}
	kt_rmtree(s->dir);
}

cJSON *
kt_reply(const char *content)
{
	cJSON *o = cJSON_CreateObject();

	cJSON_AddStringToObject(o, "content", content);
	return o;
}

cJSON *
kt_status(int status, const char *retry_after)
{
	cJSON *o = cJSON_CreateObject();

	cJSON_AddNumberToObject(o, "status", status);
	cJSON_AddStringToObject(o, "error", "scripted failure");
	if (retry_after != NULL)
		cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "headers"),
		    "Retry-After", retry_after);
	return o;
}

cJSON *
kt_raw(int status, const char *raw)
{
	cJSON *o = cJSON_CreateObject();

	cJSON_AddNumberToObject(o, "status", status);
	cJSON_AddStringToObject(o, "raw", raw);
	return o;
}

cJSON *
kt_hang(double seconds, const char *content)
{
	cJSON *o = kt_reply(content);

	cJSON_AddNumberToObject(o, "delay_s", seconds);
	return o;
}

/* One HTTP exchange with the server's control endpoints. */
static char *
kt_http(kt_llm_server *s, const char *path, const char *post)
{
	char url[256];
	kc_str body = {0};
	CURL *c = curl_easy_init();
	long status = 0;
	CURLcode cc;

	KT_ASSERT(c != NULL);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", s->port, path);
	curl_easy_setopt(c, CURLOPT_URL, url);
	if (post != NULL)
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, post);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, NULL);
	{
		FILE *f = open_memstream(&body.buf, &body.len);
		curl_easy_setopt(c, CURLOPT_WRITEDATA, f);
		cc = curl_easy_perform(c);
		fclose(f);
	}
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_cleanup(c);
	if (cc != CURLE_OK || status != 200)
		KT_FAIL("test server %s: %s, HTTP %ld", path,
		    curl_easy_strerror(cc), status);
	return body.buf;
}

static void
kt_llm_vscript(kt_llm_server *s, cJSON *opts, va_list ap)
{
	cJSON *root = opts != NULL ? opts : cJSON_CreateObject();
	cJSON *arr = cJSON_AddArrayToObject(root, "actions");
	cJSON *a;
	char *text;

	while ((a = va_arg(ap, cJSON *)) != NULL)
		cJSON_AddItemToArray(arr, a);
	text = cJSON_PrintUnformatted(root);
	cJSON_Delete(root);
	free(kt_http(s, "/_script", text));
	cJSON_free(text);
}

void
kt_llm_script(kt_llm_server *s, ...)
{
	va_list ap;

	va_start(ap, s);
	kt_llm_vscript(s, NULL, ap);
	va_end(ap);
}

void
kt_llm_script_with(kt_llm_server *s, cJSON *opts, ...)
{
	va_list ap;

	va_start(ap, opts);
	kt_llm_vscript(s, opts, ap);
	va_end(ap);
}

cJSON *
kt_llm_log(kt_llm_server *s)
{
	char *text = kt_http(s, "/_log", NULL);
	cJSON *log = cJSON_Parse(text);

	free(text);
	KT_ASSERT(cJSON_IsArray(log));
	return log;
}

void
kt_llm_config(llm_config *c, const kt_llm_server *s)
{
	llm_config_default(c);
	kc_strlcpy(c->base_url, s->base_url, sizeof(c->base_url));
	kc_strlcpy(c->model, "test-model", sizeof(c->model));
	kc_strlcpy(c->api_key, KT_TEST_KEY, sizeof(c->api_key));
	c->timeout_ms = 1500;
	c->max_tries = 3;
	c->backoff_ms = 20;
	c->backoff_max_ms = 100;
	c->temperature = 0.25;
	c->max_tokens = 1234;
}
