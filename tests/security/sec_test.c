/*
 * sec_test.c - what an outsider can do to a real kclawd: malformed and
 * oversized messages on the API and work sockets, owner-only ipc://
 * sockets, tcp:// with a shared token (and the refusal to start without
 * one), and a Submit.bundle_dir outside the allowed roots. One group per
 * argument: bad-input, tcp-token, tcp-start.
 */
#include <sys/stat.h>

#include "bundle.h"
#include "orchestrator/harness.h"
#include "security.h"

static pid_t kclawd;

static void
alive(void)
{
	int st;

	KT_ASSERT(waitpid(kclawd, &st, WNOHANG) == 0);
}

/* Sends raw bytes to url; *rep is the answer or NULL (dropped). */
static int
raw_call(const char *url, const void *data, size_t len, int timeout_ms,
    void **rep, size_t *rlen)
{
	bus_client *c;
	int rv;

	*rep = NULL;
	KT_OK(bus_client_open(&c, url, 0));
	rv = bus_client_call(c, data, len, timeout_ms, rep, rlen);
	bus_client_close(c);
	return rv;
}

/* An ApiRequest envelope around payload, answered by the real kclawd. */
static Kclaw__ApiResponse *
api_raw(const char *method, const void *payload, size_t plen, const char *token)
{
	Kclaw__ApiRequest env = KCLAW__API_REQUEST__INIT;
	Kclaw__ApiResponse *ar;
	uint8_t *buf;
	size_t len, rlen;
	void *rep;

	env.method = (char *)method;
	env.request_id = 7;
	env.token = (char *)(token ? token : "");
	env.payload.data = (uint8_t *)payload;
	env.payload.len = plen;
	KT_OK(kc_pb_pack(&env.base, &buf, &len));
	KT_OK(raw_call(h_cfg.api_url, buf, len, 3000, &rep, &rlen));
	free(buf);
	ar = kclaw__api_response__unpack(NULL, rlen, rep);
	free(rep);
	KT_ASSERT(ar != NULL);
	return ar;
}

static void
health_ok(const char *token)
{
	Kclaw__HealthRequest req = KCLAW__HEALTH_REQUEST__INIT;
	ProtobufCMessage *resp;

	KT_OK(kc_api_call(h_api, "Health", &req.base, token, 3000,
	    &kclaw__health_response__descriptor, &resp));
	protobuf_c_message_free_unpacked(resp, NULL);
	alive();
}

static void
mode_is(const char *path, unsigned mode, bool sock)
{
	struct stat st;

	KT_ASSERT(lstat(path, &st) == 0);
	if (sock)
		KT_ASSERT(S_ISSOCK(st.st_mode));
	if ((st.st_mode & 0777) != mode)
		KT_FAIL(
		    "%s has mode %o, want %o", path, st.st_mode & 0777, mode);
}

/* ------------------------------------------------------------ bad input */

static void
test_bad_messages(void)
{
	static const char junk[] = "\x0a\xff\xff\xff\xff\x0f not protobuf";
	static const char *const methods[] = {"Submit", "Cancel", "Status",
	    "List", "Result", "Events", "Supervise", "Memory"};
	const size_t big = (64u << 20) + 4096; /* over the 64 MiB limit */
	char path[512];
	Kclaw__ApiResponse *ar;
	Kclaw__WorkReply *wr;
	Kclaw__WorkRequest wreq = KCLAW__WORK_REQUEST__INIT;
	uint8_t *buf;
	size_t len, rlen;
	void *rep;
	char *huge;

	/* A run/ folder left world-readable by someone else is tightened. */
	h_setup("sec-bad", "");
	snprintf(path, sizeof(path), "%s/run", h_home);
	KT_ASSERT(mkdir(path, 0755) == 0 && chmod(path, 0755) == 0);
	kclawd = h_kclawd();
	h_wait_up();

	/* Owner-only: the folder and every socket kclawd listens on. */
	mode_is(path, 0700, false);
	mode_is(h_cfg.api_url + 6, 0600, true);
	mode_is(h_cfg.events_url + 6, 0600, true);
	mode_is(h_cfg.work_url + 6, 0600, true);

	/* Each method, with a payload that is not its request message. */
	for (size_t i = 0; i < KC_ARRAY_LEN(methods); i++) {
		ar = api_raw(methods[i], junk, sizeof(junk), NULL);
		fprintf(
		    stderr, "  %s: %d %s\n", methods[i], ar->code, ar->error);
		KT_ASSERT(ar->code != KCLAW__API_CODE__API_OK);
		KT_ASSERT(ar->error && *ar->error);
		if (ar->code != KCLAW__API_CODE__API_UNKNOWN_METHOD) {
			KT_EQ_INT(ar->code, KCLAW__API_CODE__API_BAD_REQUEST);
			KT_CONTAINS(ar->error, "payload is not");
		}
		KT_EQ_INT(ar->request_id, 7);
		kclaw__api_response__free_unpacked(ar, NULL);
	}
	/* An envelope that is not one, an empty one, an unknown method. */
	KT_OK(raw_call(h_cfg.api_url, junk, sizeof(junk), 3000, &rep, &rlen));
	ar = kclaw__api_response__unpack(NULL, rlen, rep);
	KT_ASSERT(ar != NULL);
	KT_EQ_INT(ar->code, KCLAW__API_CODE__API_BAD_REQUEST);
	KT_CONTAINS(ar->error, "not a kclaw.ApiRequest");
	kclaw__api_response__free_unpacked(ar, NULL);
	free(rep);
	KT_OK(raw_call(h_cfg.api_url, "", 0, 3000, &rep, &rlen));
	ar = kclaw__api_response__unpack(NULL, rlen, rep);
	KT_ASSERT(ar != NULL && ar->code != KCLAW__API_CODE__API_OK);
	KT_CONTAINS(ar->error, "unknown method");
	kclaw__api_response__free_unpacked(ar, NULL);
	free(rep);
	ar = api_raw("Status\n/../../etc", "", 0, NULL);
	KT_EQ_INT(ar->code, KCLAW__API_CODE__API_UNKNOWN_METHOD);
	kclaw__api_response__free_unpacked(ar, NULL);

	/* A WorkRequest that is garbage, and one that decodes but says
	 * nothing sensible. */
	KT_OK(raw_call(h_cfg.work_url, junk, sizeof(junk), 3000, &rep, &rlen));
	wr = kclaw__work_reply__unpack(NULL, rlen, rep);
	KT_ASSERT(wr != NULL);
	KT_CONTAINS(wr->error, "did not decode");
	kclaw__work_reply__free_unpacked(wr, NULL);
	free(rep);
	wreq.role = (Kclaw__Role)99;
	wreq.worker_id = "w";
	KT_OK(kc_pb_pack(&wreq.base, &buf, &len));
	KT_OK(raw_call(h_cfg.work_url, buf, len, 3000, &rep, &rlen));
	free(buf);
	wr = kclaw__work_reply__unpack(NULL, rlen, rep);
	KT_ASSERT(wr != NULL);
	KT_CONTAINS(wr->error, "worker_id and a role");
	kclaw__work_reply__free_unpacked(wr, NULL);
	free(rep);

	/* Over the size limit: the connection is dropped, nothing answers,
	 * and the next caller is served. */
	KT_ASSERT((huge = calloc(1, big)) != NULL);
	KT_ASSERT(raw_call(h_cfg.api_url, huge, big, 2000, &rep, &rlen) != 0);
	KT_ASSERT(rep == NULL);
	KT_ASSERT(raw_call(h_cfg.work_url, huge, big, 2000, &rep, &rlen) != 0);
	KT_ASSERT(rep == NULL);
	free(huge);
	health_ok(NULL);
}

/* Submit.bundle_dir may only name folders inside the allowed roots. */
static void
test_bundle_dir_roots(void)
{
	const char *src = getenv("KCLAW_SRC");
	Kclaw__SubmitRequest req = KCLAW__SUBMIT_REQUEST__INIT;
	Kclaw__SubmitResponse *resp;
	char inside[512], outside[] = "/tmp/kc-sec-roots-XXXXXX", link[512],
	                  cmd[1400], json[1200], up[600];

	KT_ASSERT(src != NULL);
	KT_ASSERT(mkdtemp(outside) != NULL);
	snprintf(inside, sizeof(inside), "%s/bundles/softmax", h_home);
	snprintf(cmd, sizeof(cmd),
	    "mkdir -p '%s/bundles' && cp -r '%s/examples/softmax_rows' '%s' "
	    "&& cp -r '%s/examples/softmax_rows' '%s/b'",
	    h_home, src, inside, src, outside);
	KT_ASSERT(system(cmd) == 0);

	/* Outside: the host's /etc, a way up out of the home, a link in
	 * the home that leads out, the source tree, a bundle elsewhere. */
	snprintf(link, sizeof(link), "%s/bundles/etc", h_home);
	KT_ASSERT(symlink("/etc", link) == 0);
	snprintf(up, sizeof(up), "%s/../../../../../../etc", h_home);
	const char *refused[] = {"/etc", up, link, outside, "/"};
	for (size_t i = 0; i < KC_ARRAY_LEN(refused); i++) {
		req.bundle_dir = (char *)refused[i];
		KT_EQ_INT(h_call("Submit", &req.base,
		              &kclaw__submit_response__descriptor,
		              (ProtobufCMessage **)&resp),
		    KC_EPERM);
		KT_CONTAINS(kc_lasterr(), "outside the allowed roots");
		KT_CONTAINS(kc_lasterr(), "bundle_roots");
	}
	snprintf(cmd, sizeof(cmd), "%s/examples/softmax_rows", src);
	req.bundle_dir = cmd;
	KT_EQ_INT(
	    h_call("Submit", &req.base, &kclaw__submit_response__descriptor,
	        (ProtobufCMessage **)&resp),
	    KC_EPERM);

	/* Inside the home: read. */
	req.bundle_dir = inside;
	KT_OK(h_call("Submit", &req.base, &kclaw__submit_response__descriptor,
	    (ProtobufCMessage **)&resp));
	KT_ASSERT(resp->task_id && *resp->task_id);
	kclaw__submit_response__free_unpacked(resp, NULL);

	/* A root added in kclaw.json admits its folders (read per request,
	 * no restart). */
	snprintf(json, sizeof(json), "{\"bundle_roots\": [\"%s\"]}\n", outside);
	snprintf(cmd, sizeof(cmd), "%s/kclaw.json", h_home);
	KT_OK(kc_write_file(cmd, json, strlen(json)));
	snprintf(cmd, sizeof(cmd), "%s/b", outside);
	req.bundle_dir = cmd;
	KT_OK(h_call("Submit", &req.base, &kclaw__submit_response__descriptor,
	    (ProtobufCMessage **)&resp));
	kclaw__submit_response__free_unpacked(resp, NULL);
	req.bundle_dir = "/etc";
	KT_EQ_INT(
	    h_call("Submit", &req.base, &kclaw__submit_response__descriptor,
	        (ProtobufCMessage **)&resp),
	    KC_EPERM);

	/* A spec sent whole may not name .npy files outside the roots. */
	{
		Kclaw__TaskSpec *spec;
		Kclaw__TensorData td = KCLAW__TENSOR_DATA__INIT,
		                  *tds[1] = {&td};
		Kclaw__TensorSet set = KCLAW__TENSOR_SET__INIT,
		                 *sets[1] = {&set};
		Kclaw__TensorSet **old_sets;
		size_t old_n;

		KT_OK(kc_bundle_load(inside, &spec));
		KT_ASSERT(spec->reference != NULL);
		old_sets = spec->reference->sets;
		old_n = spec->reference->n_sets;
		td.name = "x";
		td.path = "/etc/passwd";
		set.inputs = tds;
		set.n_inputs = 1;
		spec->reference->sets = sets;
		spec->reference->n_sets = 1;
		req.bundle_dir = NULL;
		req.spec = spec;
		KT_EQ_INT(h_call("Submit", &req.base,
		              &kclaw__submit_response__descriptor,
		              (ProtobufCMessage **)&resp),
		    KC_EPERM);
		KT_CONTAINS(kc_lasterr(), "input tensor 'x'");
		KT_CONTAINS(kc_lasterr(), "outside the allowed roots");
		set.inputs = NULL;
		set.n_inputs = 0;
		set.expected = tds;
		set.n_expected = 1;
		td.path = up;
		KT_EQ_INT(h_call("Submit", &req.base,
		              &kclaw__submit_response__descriptor,
		              (ProtobufCMessage **)&resp),
		    KC_EPERM);
		KT_CONTAINS(kc_lasterr(), "expected tensor 'x'");
		spec->reference->sets = old_sets;
		spec->reference->n_sets = old_n;
		req.spec = NULL;
		kclaw__task_spec__free_unpacked(spec, NULL);
	}
	health_ok(NULL);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", outside);
	KT_ASSERT(system(cmd) == 0);
}

/* ------------------------------------------------------------ tcp:// */

static int
tcp_port(int k)
{
	return 20000 + (int)(getpid() % 20000) * 2 + k;
}

static void
tcp_env(void)
{
	char url[64];

	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", tcp_port(0));
	setenv("KCLAW_API_URL", url, 1);
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", tcp_port(1));
	setenv("KCLAW_WORK_URL", url, 1);
}

/* Runs `kclaw status` with KCLAW_TOKEN=token (NULL: unset); its exit code,
 * with its stderr in err. */
static int
cli_status(const char *token, char *err, size_t n)
{
	char cmd[1200], path[512];
	char *text = NULL;
	size_t len;
	int st;

	snprintf(path, sizeof(path), "%s/status.err", h_home);
	/* The CLI reads the token from its environment only. */
	snprintf(cmd, sizeof(cmd),
	    "env -u KCLAW_TOKEN %s%s '%s/kclaw' status --home '%s' "
	    ">/dev/null 2>'%s'",
	    token ? "KCLAW_TOKEN=" : "", token ? token : "",
	    getenv("KCLAW_BIN"), h_home, path);
	st = system(cmd);
	err[0] = '\0';
	if (kc_read_file(path, 1 << 16, &text, &len) == 0) {
		kc_strlcpy(err, text, n);
		free(text);
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void
test_tcp_token(void)
{
	Kclaw__HealthRequest hreq = KCLAW__HEALTH_REQUEST__INIT;
	Kclaw__HealthResponse *h = NULL;
	Kclaw__WorkRequest wreq = KCLAW__WORK_REQUEST__INIT;
	Kclaw__WorkReply *wr;
	ProtobufCMessage *resp;
	const char *bad[] = {"", "wrong-token"};
	char err[4096];
	uint8_t *buf;
	size_t len, rlen;
	void *rep;

	tcp_env();
	setenv("KCLAW_TOKEN", "s3cret-token", 1);
	h_setup("sec-tcp", "");
	KT_ASSERT(strncmp(h_cfg.api_url, "tcp://127.0.0.1:", 16) == 0);
	KT_EQ_STR(h_cfg.token, "s3cret-token");
	kclawd = h_kclawd();
	for (int i = 0; i < 100 && h == NULL; i++)
		if (kc_api_call(h_api, "Health", &hreq.base, "s3cret-token",
		        300, &kclaw__health_response__descriptor,
		        (ProtobufCMessage **)&h) != 0)
			kc_sleep_ms(50);
	KT_ASSERT(h != NULL);
	kclaw__health_response__free_unpacked(h, NULL);

	/* The API: no token or a wrong one is refused, the token served. */
	for (size_t i = 0; i < KC_ARRAY_LEN(bad); i++) {
		KT_EQ_INT(kc_api_call(h_api, "Health", &hreq.base, bad[i], 3000,
		              &kclaw__health_response__descriptor, &resp),
		    KC_EPERM);
		KT_CONTAINS(kc_lasterr(), "KCLAW_TOKEN");
	}
	KT_EQ_INT(cli_status(NULL, err, sizeof(err)), 1);
	KT_CONTAINS(err, "KCLAW_TOKEN");
	KT_EQ_INT(cli_status("wrong-token", err, sizeof(err)), 1);
	KT_CONTAINS(err, "KCLAW_TOKEN");
	KT_EQ_INT(cli_status("s3cret-token", err, sizeof(err)), 0);
	health_ok("s3cret-token");

	/* A worker: refused without the token, waits for work with it. */
	wreq.role = KCLAW__ROLE__GENERATOR;
	wreq.worker_id = "intruder";
	for (size_t i = 0; i < KC_ARRAY_LEN(bad); i++) {
		wreq.token = (char *)bad[i];
		KT_OK(kc_pb_pack(&wreq.base, &buf, &len));
		KT_OK(raw_call(h_cfg.work_url, buf, len, 3000, &rep, &rlen));
		free(buf);
		wr = kclaw__work_reply__unpack(NULL, rlen, rep);
		KT_ASSERT(wr != NULL);
		KT_CONTAINS(wr->error, "token");
		KT_ASSERT(wr->agent == NULL && wr->eval == NULL);
		kclaw__work_reply__free_unpacked(wr, NULL);
		free(rep);
	}
	wreq.token = "s3cret-token";
	wreq.worker_id = "member";
	KT_OK(kc_pb_pack(&wreq.base, &buf, &len));
	/* No work to hand out: the request waits (long poll), not refused. */
	KT_EQ_INT(
	    raw_call(h_cfg.work_url, buf, len, 500, &rep, &rlen), KC_ETIMEDOUT);
	free(buf);
	KT_OK(kc_api_call(h_api, "Health", &hreq.base, "s3cret-token", 3000,
	    &kclaw__health_response__descriptor, (ProtobufCMessage **)&h));
	KT_EQ_INT(h->workers_waiting, 1);
	kclaw__health_response__free_unpacked(h, NULL);
	alive();
}

/* The start-up check itself, and the real kclawd refusing to start. */
static void
test_tcp_start(void)
{
	kc_config cfg;
	char path[600], *log = NULL;
	size_t len;
	int st = 0;

	unsetenv("KCLAW_TOKEN");
	unsetenv("KCLAW_INSECURE_TCP");
	tcp_env();
	h_setup("sec-start", "");
	KT_OK(kc_config_load(&cfg, h_home));
	KT_EQ_INT(orch_security_check(&cfg), KC_EPERM);
	KT_CONTAINS(kc_lasterr(), "KCLAW_TOKEN");
	KT_CONTAINS(kc_lasterr(), "insecure_tcp");
	KT_CONTAINS(kc_lasterr(), cfg.api_url);
	setenv("KCLAW_INSECURE_TCP", "1", 1);
	KT_OK(orch_security_check(&cfg));
	unsetenv("KCLAW_INSECURE_TCP");
	snprintf(path, sizeof(path), "%s/kclaw.json", h_home);
	KT_OK(kc_write_file(path, "{\"insecure_tcp\": true}", 22));
	KT_OK(orch_security_check(&cfg));
	KT_OK(kc_write_file(path, "{}", 2));
	kc_strlcpy(cfg.token, "t", sizeof(cfg.token));
	KT_OK(orch_security_check(&cfg));
	cfg.token[0] = '\0';
	/* The work address alone is enough to need a token. */
	snprintf(
	    cfg.api_url, sizeof(cfg.api_url), "ipc://%s/api.ipc", cfg.run_dir);
	KT_EQ_INT(orch_security_check(&cfg), KC_EPERM);
	KT_CONTAINS(kc_lasterr(), "work address");
	snprintf(cfg.work_url, sizeof(cfg.work_url), "ipc://%s/work.ipc",
	    cfg.run_dir);
	KT_OK(orch_security_check(&cfg));
	/* The dashboard asks for no token: loopback only. */
	kc_strlcpy(cfg.http_url, "http://0.0.0.0:8470", sizeof(cfg.http_url));
	KT_EQ_INT(orch_security_check(&cfg), KC_EPERM);
	KT_CONTAINS(kc_lasterr(), "dashboard");
	kc_strlcpy(cfg.token, "t", sizeof(cfg.token));
	KT_EQ_INT(orch_security_check(&cfg), KC_EPERM);
	cfg.token[0] = '\0';
	kc_strlcpy(cfg.http_url, "http://127.0.0.1:8470", sizeof(cfg.http_url));
	KT_OK(orch_security_check(&cfg));
	kc_strlcpy(cfg.http_url, "http://localhost:8470", sizeof(cfg.http_url));
	KT_OK(orch_security_check(&cfg));

	/* The daemon: exits 1 at once, saying why. */
	kclawd = h_kclawd();
	for (int i = 0; i < 100; i++) {
		if (waitpid(kclawd, &st, WNOHANG) == kclawd)
			break;
		KT_ASSERT(i < 99);
		kc_sleep_ms(50);
	}
	h_children[0] = 0;
	KT_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 1);
	snprintf(path, sizeof(path), "%s/children.log", h_home);
	KT_OK(kc_read_file(path, 1 << 20, &log, &len));
	KT_CONTAINS(log, "KCLAW_TOKEN");
	free(log);
}

int
main(int argc, char **argv)
{
	const char *group = argc > 1 ? argv[1] : "";

	if (strcmp(group, "bad-input") == 0) {
		KT_RUN(test_bad_messages);
		KT_RUN(test_bundle_dir_roots);
	} else if (strcmp(group, "tcp-token") == 0) {
		KT_RUN(test_tcp_token);
	} else if (strcmp(group, "tcp-start") == 0) {
		KT_RUN(test_tcp_start);
	} else {
		fprintf(
		    stderr, "usage: sec_test bad-input|tcp-token|tcp-start\n");
		return 2;
	}
	h_kill(kclawd, SIGTERM);
	h_teardown();
	return 0;
}
