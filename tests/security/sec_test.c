/*
 * sec_test.c - what an outsider can do to a real kclawd: malformed and
 * oversized messages on the API and work sockets, owner-only ipc://
 * sockets, tcp:// with a shared token (and the refusal to start without
 * one), and a Submit.bundle_dir outside the allowed roots. One group per
 * argument: bad-input, tcp-token, tcp-start.
 */
#include <sys/stat.h>

#include "blobs.h"
#include "bundle.h"
#include "orchestrator/harness.h"
#include "security.h"
#include "upload.h"

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
	/* Over the API's 4 MiB and the work socket's 16 MiB limits. */
	const size_t big = ORCH_WORK_MAX_MSG + 4096,
	             api_big = ORCH_API_MAX_MSG + 4096;
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
	KT_ASSERT(
	    raw_call(h_cfg.api_url, huge, api_big, 2000, &rep, &rlen) != 0);
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

static void
tcp_env(void)
{
	char url[64];
	int port[2];

	kt_free_ports(port, 2);
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", port[0]);
	setenv("KCLAW_API_URL", url, 1);
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", port[1]);
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
	alive(); /* a kclawd that could not listen has exited */
	KT_ASSERT(h != NULL);
	kclaw__health_response__free_unpacked(h, NULL);

	/* The API: no token or a wrong one is refused (and the refused
	 * connection closed, so each try has a client of its own), the
	 * token served. */
	for (size_t i = 0; i < KC_ARRAY_LEN(bad); i++) {
		bus_client *c;
		KT_OK(bus_client_open(&c, h_cfg.api_url, 0));
		KT_EQ_INT(kc_api_call(c, "Health", &hreq.base, bad[i], 3000,
		              &kclaw__health_response__descriptor, &resp),
		    KC_EPERM);
		KT_CONTAINS(kc_lasterr(), "KCLAW_TOKEN");
		bus_client_close(c);
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
	/* The events socket cannot ask for the token: loopback only, unless
	 * the deployment says its network is closed. */
	kc_strlcpy(cfg.token, "t", sizeof(cfg.token));
	kc_strlcpy(
	    cfg.events_url, "tcp://0.0.0.0:8462", sizeof(cfg.events_url));
	KT_EQ_INT(orch_security_check(&cfg), KC_EPERM);
	KT_CONTAINS(kc_lasterr(), "events address");
	KT_CONTAINS(kc_lasterr(), "events_public");
	kc_strlcpy(cfg.events_url, "tcp://127.0.0.1@0.0.0.0:8462",
	    sizeof(cfg.events_url));
	KT_EQ_INT(orch_security_check(&cfg), KC_EPERM);
	kc_strlcpy(cfg.events_url, "tcp://*:8462", sizeof(cfg.events_url));
	KT_EQ_INT(orch_security_check(&cfg), KC_EPERM);
	setenv("KCLAW_EVENTS_PUBLIC", "1", 1);
	KT_OK(orch_security_check(&cfg));
	unsetenv("KCLAW_EVENTS_PUBLIC");
	KT_OK(kc_write_file(path, "{\"events_public\": true}", 23));
	KT_OK(orch_security_check(&cfg));
	KT_OK(kc_write_file(path, "{}", 2));
	kc_strlcpy(
	    cfg.events_url, "tcp://127.0.0.1:8462", sizeof(cfg.events_url));
	KT_OK(orch_security_check(&cfg));
	snprintf(cfg.events_url, sizeof(cfg.events_url), "ipc://%s/events.ipc",
	    cfg.run_dir);
	cfg.token[0] = '\0';

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

/* ------------------------------------------------- hostile clients */

#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include "spec_check.h"

static int h_ports[3]; /* api, work, dashboard of the hostile group */

/* A raw TCP connection to 127.0.0.1:port that has done the SP handshake
 * as a REQ peer (NNG's TCP framing: 8-byte header, then 8-byte sizes), or
 * -1 when the connection or handshake fails. A tiny receive buffer
 * (rcvbuf > 0) makes the server's replies back up quickly. */
static int
sp_try_connect(int port, int rcvbuf)
{
	static const unsigned char hello[8] = {0, 'S', 'P', 0, 0, 0x30, 0, 0};
	struct sockaddr_in a = {.sin_family = AF_INET,
	    .sin_port = htons((uint16_t)port),
	    .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct timeval tv = {.tv_sec = 2};
	unsigned char peer[8];
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	KT_ASSERT(fd >= 0);
	if (rcvbuf > 0)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
	    send(fd, hello, 8, MSG_NOSIGNAL) != 8 ||
	    recv(fd, peer, 8, MSG_WAITALL) != 8) {
		close(fd);
		return -1;
	}
	return fd;
}

static int
sp_connect(int port, int rcvbuf)
{
	int fd = sp_try_connect(port, rcvbuf);

	KT_ASSERT(fd >= 0);
	return fd;
}

/* One REQ frame: size, request id (high bit set), body. */
static bool
sp_send(int fd, uint32_t id, const void *body, size_t len)
{
	unsigned char hdr[12];
	uint64_t n = len + 4;

	for (int i = 0; i < 8; i++)
		hdr[i] = (unsigned char)(n >> (56 - 8 * i));
	id |= 0x80000000u;
	for (int i = 0; i < 4; i++)
		hdr[8 + i] = (unsigned char)(id >> (24 - 8 * i));
	return send(fd, hdr, 12, MSG_NOSIGNAL) == 12 &&
	    (len == 0 || send(fd, body, len, MSG_NOSIGNAL) == (ssize_t)len);
}

/* Whether the server closed fd within ms (reading and discarding). */
static bool
closed_within(int fd, int ms)
{
	char buf[4096];
	uint64_t end = kc_mono_ms() + (uint64_t)ms;

	while (kc_mono_ms() < end) {
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		if (poll(&pf, 1, 50) <= 0)
			continue;
		ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
			return true;
	}
	return false;
}

static long
rss_kib(pid_t pid)
{
	char path[64], line[256];
	long kib = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	if ((f = fopen(path, "r")) == NULL)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "VmRSS:", 6) == 0)
			kib = strtol(line + 6, NULL, 10);
	fclose(f);
	return kib;
}

/* The time a good client takes for Health, in ms; fails past limit_ms. */
static uint64_t
health_ms(const char *token, int limit_ms)
{
	Kclaw__HealthRequest req = KCLAW__HEALTH_REQUEST__INIT;
	ProtobufCMessage *resp;
	uint64_t t0 = kc_mono_ms();

	KT_OK(kc_api_call(h_api, "Health", &req.base, token, limit_ms,
	    &kclaw__health_response__descriptor, &resp));
	protobuf_c_message_free_unpacked(resp, NULL);
	alive();
	return kc_mono_ms() - t0;
}

/* An ApiRequest for Health whose token field is exactly tok (tlen bytes,
 * NULs included): protobuf-c would stop a char * at the first NUL. */
static void
health_env(const void *tok, size_t tlen, uint8_t **buf, size_t *len)
{
	Kclaw__ApiRequest env = KCLAW__API_REQUEST__INIT;
	uint8_t *b;
	size_t n;

	env.method = "Health";
	env.request_id = 9;
	KT_OK(kc_pb_pack(&env.base, &b, &n));
	KT_ASSERT(tlen < 128);
	KT_ASSERT((b = realloc(b, n + 2 + tlen)) != NULL);
	b[n] = (5 << 3) | 2;
	b[n + 1] = (uint8_t)tlen;
	memcpy(b + n + 2, tok, tlen);
	*buf = b;
	*len = n + 2 + tlen;
}

static void
test_token_bytes(void)
{
	static const char good[] = "s3cret-token";
	static const char nul[] = "s3cret-token\0zzz";
	Kclaw__ApiResponse *ar;
	uint8_t *buf;
	size_t len, rlen;
	void *rep;

	/* The comparison itself: lengths count, a prefix is no match. */
	health_env(good, sizeof(good) - 1, &buf, &len);
	KT_OK(kc_token_check(buf, len, KC_API_TOKEN_FIELD, good));
	KT_EQ_INT(kc_token_check(buf, len, KC_API_TOKEN_FIELD, "s3cret-tokenX"),
	    KC_EPERM);
	KT_EQ_INT(
	    kc_token_check(buf, len, KC_API_TOKEN_FIELD, "s3cret"), KC_EPERM);
	free(buf);
	/* Through the real kclawd: "token\0zzz" refused, the token served. */
	health_env(nul, sizeof(nul) - 1, &buf, &len);
	KT_EQ_INT(kc_token_check(buf, len, KC_API_TOKEN_FIELD, good), KC_EPERM);
	KT_OK(raw_call(h_cfg.api_url, buf, len, 3000, &rep, &rlen));
	free(buf);
	KT_ASSERT((ar = kclaw__api_response__unpack(NULL, rlen, rep)) != NULL);
	KT_EQ_INT(ar->code, KCLAW__API_CODE__API_UNAUTHORIZED);
	kclaw__api_response__free_unpacked(ar, NULL);
	free(rep);
	health_env(good, sizeof(good) - 1, &buf, &len);
	KT_OK(raw_call(h_cfg.api_url, buf, len, 3000, &rep, &rlen));
	free(buf);
	KT_ASSERT((ar = kclaw__api_response__unpack(NULL, rlen, rep)) != NULL);
	KT_EQ_INT(ar->code, KCLAW__API_CODE__API_OK);
	kclaw__api_response__free_unpacked(ar, NULL);
	free(rep);
	/* The work socket reads the token off the wire too (WorkRequest
	 * field 8): a worker with "token\0zzz" gets no job. */
	{
		Kclaw__WorkRequest wq = KCLAW__WORK_REQUEST__INIT;
		Kclaw__WorkReply *wr;
		wq.role = KCLAW__ROLE__GENERATOR;
		wq.worker_id = "intruder";
		KT_OK(kc_pb_pack(&wq.base, &buf, &len));
		KT_ASSERT(
		    (buf = realloc(buf, len + 2 + sizeof(nul) - 1)) != NULL);
		buf[len] = (8 << 3) | 2;
		buf[len + 1] = (uint8_t)(sizeof(nul) - 1);
		memcpy(buf + len + 2, nul, sizeof(nul) - 1);
		KT_EQ_INT(kc_token_check(buf, len + 2 + sizeof(nul) - 1,
		              KC_WORK_TOKEN_FIELD, good),
		    KC_EPERM);
		KT_OK(raw_call(h_cfg.work_url, buf, len + 2 + sizeof(nul) - 1,
		    3000, &rep, &rlen));
		free(buf);
		KT_ASSERT(
		    (wr = kclaw__work_reply__unpack(NULL, rlen, rep)) != NULL);
		KT_ASSERT(wr->error != NULL);
		KT_CONTAINS(wr->error, "token");
		KT_ASSERT(wr->agent == NULL && wr->eval == NULL);
		kclaw__work_reply__free_unpacked(wr, NULL);
		free(rep);
	}
}

/* A peer that floods wrong-token requests and never reads the replies:
 * the others are still served, within the send timeout, and the peer's
 * connection is closed. */
static void
test_flood_no_read(void)
{
	uint8_t *buf;
	size_t len;
	int fd, sent = 0;
	uint64_t ms;

	health_env("nope", 4, &buf, &len);
	fd = sp_connect(h_ports[0], 1024);
	/* Until kclawd stops reading: its replies fill the socket buffers,
	 * then every context that answers this peer waits. */
	for (int i = 0; i < 2000000 && sp_send(fd, (uint32_t)i, buf, len); i++)
		sent++;
	free(buf);
	KT_ASSERT(sent > 200);
	/* Let the replies back up and the contexts wait on them. */
	kc_sleep_ms(1000);
	ms = health_ms("s3cret-token", BUS_SEND_MS + 4000);
	printf("  flood of %d unread requests: a good client answered in "
	       "%llu ms\n",
	    sent, (unsigned long long)ms);
	/* Still without reading (reading would unblock the server), then
	 * the connection must be gone: drained, it ends. */
	kc_sleep_ms(BUS_SEND_MS + 1000 > ms ? BUS_SEND_MS + 1000 - ms : 0);
	KT_ASSERT(closed_within(fd, 3000));
	close(fd);
	health_ms("s3cret-token", 1000);
}

static bool sp_recv_frame(int fd);

/* The attack of issue 16 on the API socket: sixteen connections that each
 * send part of a declared 64 MiB message and stop, every other one after a
 * wrong-token request. 64 MiB is over the API's 4 MiB limit (tensors come
 * in pieces with PutBlob), so NNG closes every one as soon as the size is
 * read: kclawd buffers none of it, and the connected client is served. */
static void
test_half_sent(void)
{
	enum { N = 16, PART = 8 << 20 };
	unsigned char hdr[8];
	uint64_t n = (64u << 20) - 16;
	char *junk = calloc(1, PART);
	uint8_t *req;
	size_t rlen;
	long before, after;
	int fd[N], refused = 0;

	KT_ASSERT(junk != NULL);
	health_env("nope", 4, &req, &rlen);
	health_ms("s3cret-token", 1000);
	before = rss_kib(kclawd);
	for (int i = 0; i < 8; i++)
		hdr[i] = (unsigned char)(n >> (56 - 8 * i));
	for (int i = 0; i < N; i++) {
		if ((fd[i] = sp_try_connect(h_ports[0], 0)) < 0)
			continue;
		if (i % 2 == 1 &&
		    (!sp_send(fd[i], (uint32_t)i, req, rlen) ||
		        !sp_recv_frame(fd[i])))
			continue;
		if (send(fd[i], hdr, 8, MSG_NOSIGNAL) == 8)
			(void)!send(fd[i], junk, PART, MSG_NOSIGNAL);
	}
	health_ms("s3cret-token", 2000);
	for (int i = 0; i < N; i++)
		refused += fd[i] < 0 || closed_within(fd[i], 1000);
	after = rss_kib(kclawd);
	printf("  %d half-sent 64 MiB messages of 8 MiB (half after a "
	       "wrong-token request): %d connections closed at once; kclawd "
	       "%ld -> %ld MiB\n",
	    N, refused, before / 1024, after / 1024);
	KT_EQ_INT(refused, N);
	KT_ASSERT(after - before < PART / 1024);
	for (int i = 0; i < N; i++)
		if (fd[i] >= 0)
			close(fd[i]);
	free(req);
	free(junk);
}

/* Reads one REP frame (size, request id, body) and discards it; false
 * when the connection ended first. */
static bool
sp_recv_frame(int fd)
{
	unsigned char hdr[8], buf[4096];
	uint64_t n = 0;

	if (recv(fd, hdr, 8, MSG_WAITALL) != 8)
		return false;
	for (int i = 0; i < 8; i++)
		n = n << 8 | hdr[i];
	while (n > 0) {
		ssize_t r = recv(fd, buf, n < sizeof(buf) ? n : sizeof(buf), 0);
		if (r <= 0)
			return false;
		n -= (uint64_t)r;
	}
	return true;
}

/*
 * A request with a wrong token proves nothing (issue 16, "authenticate
 * before buffering"). On each of the API and the work socket, sixteen
 * connections one after the other each send a wrong-token request, read
 * the refusal, then send most of a message as large as the socket admits
 * and stop. Only BUS_MAX_NEW_CONNS of each may stay open (a refused
 * request leaves its connection unproven, so the cap on new connections
 * still counts it), every one is closed within BUS_NEW_CONN_MS, kclawd's
 * memory grows by at most what the kept ones sent, and a good client is
 * served throughout. Before the fix, the refused request made a connection
 * 'active': all sixteen stayed open, pinning 16 x 15 MiB with no deadline.
 */
static void
test_unproven_half_sent(void)
{
	enum { N = 16 };
	struct {
		const char *what;
		int port;
		uint64_t declared; /* just under the socket's limit */
		size_t part;
		uint8_t *req;
		size_t rlen;
		int fd[N];
		int kept;
	} s[2] = {{.what = "API",
	              .port = h_ports[0],
	              .declared = (4u << 20) - 64,
	              .part = 3u << 20},
	    {.what = "work",
	        .port = h_ports[1],
	        .declared = ORCH_WORK_MAX_MSG - 64,
	        .part = 12u << 20}};
	Kclaw__WorkRequest wq = KCLAW__WORK_REQUEST__INIT;
	char *junk = calloc(1, 12u << 20);
	uint64_t t0, waited;
	long before, during;
	int answered = 0;

	KT_ASSERT(junk != NULL);
	health_env("nope", 4, &s[0].req, &s[0].rlen);
	wq.role = KCLAW__ROLE__GENERATOR;
	wq.worker_id = "intruder";
	wq.token = "nope";
	KT_OK(kc_pb_pack(&wq.base, &s[1].req, &s[1].rlen));
	health_ms("s3cret-token", 1000);
	before = rss_kib(kclawd);
	t0 = kc_mono_ms();
	for (int i = 0; i < N; i++)
		for (int k = 0; k < 2; k++) {
			unsigned char hdr[8];
			int fd = sp_try_connect(s[k].port, 0);
			s[k].fd[i] = fd;
			if (fd < 0)
				continue;
			/* The refusal is read, so the request was handled
			 * before the large message starts. */
			if (!sp_send(fd, (uint32_t)i, s[k].req, s[k].rlen) ||
			    !sp_recv_frame(fd))
				continue;
			answered++;
			for (int b = 0; b < 8; b++)
				hdr[b] = (unsigned char)(s[k].declared >>
				    (56 - 8 * b));
			if (send(fd, hdr, 8, MSG_NOSIGNAL) == 8)
				(void)!send(fd, junk, s[k].part, MSG_NOSIGNAL);
		}
	kc_sleep_ms(300);
	during = rss_kib(kclawd);
	for (int k = 0; k < 2; k++)
		for (int i = 0; i < N; i++)
			if (s[k].fd[i] >= 0 && !closed_within(s[k].fd[i], 20))
				s[k].kept++;
	printf("  %d connections per socket, each a wrong-token request (%d "
	       "refused with an answer), then part of a large message: "
	       "API %d kept (%zu MiB each), work %d kept (%zu MiB each); "
	       "kclawd %ld -> %ld MiB\n",
	    N, answered, s[0].kept, s[0].part >> 20, s[1].kept, s[1].part >> 20,
	    before / 1024, during / 1024);
	/* The connected client is served while they hold their buffers. */
	health_ms("s3cret-token", 2000);
	KT_ASSERT(answered > 0);
	for (int k = 0; k < 2; k++)
		if (s[k].kept > BUS_MAX_NEW_CONNS)
			KT_FAIL("%s socket: %d unproven connections kept, at "
			        "most %d allowed",
			    s[k].what, s[k].kept, BUS_MAX_NEW_CONNS);
	KT_ASSERT(during - before < (long)(BUS_MAX_NEW_CONNS + 2) *
	        (long)(s[0].part + s[1].part) / 1024);
	/* And every one is gone by the deadline of a new connection. */
	for (int k = 0; k < 2; k++)
		for (int i = 0; i < N; i++) {
			uint64_t end = t0 + BUS_NEW_CONN_MS + 3000, now;
			if (s[k].fd[i] < 0)
				continue;
			now = kc_mono_ms();
			if (!closed_within(
			        s[k].fd[i], now < end ? (int)(end - now) : 1))
				KT_FAIL("%s socket: an unproven connection "
				        "was still open after %d ms",
				    s[k].what, BUS_NEW_CONN_MS + 3000);
			close(s[k].fd[i]);
		}
	waited = kc_mono_ms() - t0;
	printf("  all closed within %llu ms of the first\n",
	    (unsigned long long)waited);
	health_ms("s3cret-token", 1000);
	free(s[0].req);
	free(s[1].req);
	free(junk);
}

/* ------------------------------------------- floods and lock-outs */

#include <dirent.h>
#include <pthread.h>

/*
 * kclawd's open sockets: what a flood could leak are connections. All
 * its descriptors were counted once, and under load that count stayed at
 * 55 after the workers left, 53 before; its store (RocksDB) opens and
 * keeps table and log files of its own accord. With list, each
 * descriptor's target is printed.
 */
static int
sock_count(pid_t pid, bool list)
{
	char path[64], fdp[320], to[256];
	struct dirent *e;
	DIR *d;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	KT_ASSERT((d = opendir(path)) != NULL);
	while ((e = readdir(d)) != NULL) {
		ssize_t len;
		if (e->d_name[0] == '.')
			continue;
		snprintf(fdp, sizeof(fdp), "%s/%s", path, e->d_name);
		len = readlink(fdp, to, sizeof(to) - 1);
		to[len > 0 ? len : 0] = '\0';
		n += strncmp(to, "socket:", 7) == 0;
		if (list)
			printf("    fd %s -> %s\n", e->d_name, to);
	}
	closedir(d);
	return n;
}

/* Waits until kclawd holds no more sockets than base. */
static void
socks_back_to(int base, const char *after)
{
	int n = sock_count(kclawd, false);

	for (int i = 0; i < 100 && n > base; i++) {
		kc_sleep_ms(50);
		n = sock_count(kclawd, false);
	}
	printf("  after %s: %d sockets (base %d)\n", after, n, base);
	if (n > base) {
		sock_count(kclawd, true);
		KT_FAIL("after %s kclawd holds %d sockets, %d before", after, n,
		    base);
	}
}

static int
sec_cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * Token holders' latency for run_ms: Health on the long-lived client
 * and, every fourth call, on a fresh one (a newcomer must be admitted
 * too). Returns p99 in ms; *worst the max.
 */
static uint64_t
health_p99(int run_ms, uint64_t *worst, int *calls)
{
	enum { MAX = 20000 };
	static uint64_t ms[MAX];
	Kclaw__HealthRequest req = KCLAW__HEALTH_REQUEST__INIT;
	uint64_t t_end = kc_mono_ms() + (uint64_t)run_ms;
	int n = 0;

	while (kc_mono_ms() < t_end && n < MAX) {
		ProtobufCMessage *resp;
		bus_client *c = h_api;
		uint64_t t0 = kc_mono_ms();
		if (n % 4 == 3)
			KT_OK(bus_client_open(&c, h_cfg.api_url, 0));
		KT_OK(kc_api_call(c, "Health", &req.base, "s3cret-token", 5000,
		    &kclaw__health_response__descriptor, &resp));
		protobuf_c_message_free_unpacked(resp, NULL);
		ms[n++] = kc_mono_ms() - t0;
		if (c != h_api)
			bus_client_close(c);
		kc_sleep_ms(10);
	}
	qsort(ms, (size_t)n, sizeof(ms[0]), sec_cmp_u64);
	*worst = ms[n - 1];
	*calls = n;
	return ms[(size_t)n * 99 / 100];
}

struct flooder {
	int port;
	uint8_t *req;
	size_t rlen;
	volatile bool *stop;
	int conns, refused;
};

/* Connects, pipelines eight wrong-token requests, reads until kclawd
 * closes, and again, until told to stop (issue 27's flood). */
static void *
flooder_main(void *arg)
{
	struct flooder *f = arg;

	while (!*f->stop) {
		int fd = sp_try_connect(f->port, 0);
		if (fd < 0)
			continue;
		f->conns++;
		for (uint32_t i = 0; i < 8; i++)
			if (!sp_send(fd, i, f->req, f->rlen))
				break;
		if (sp_recv_frame(fd))
			f->refused++;
		closed_within(fd, 3000);
		close(fd);
	}
	return NULL;
}

/*
 * Four clients flood the API and work sockets with wrong-token requests,
 * reconnecting whenever they are cut off. Every refused connection is
 * closed at once (the flooders read their refusal, then the end); token
 * holders are served throughout with p99 under 500 ms (the 5 s send
 * timeout was the p99 before); kclawd's sockets return to their
 * count before the flood.
 */
static void
test_flood_reconnect(void)
{
	Kclaw__WorkRequest wq = KCLAW__WORK_REQUEST__INIT;
	struct flooder f[4];
	pthread_t t[4];
	volatile bool stop = false;
	uint64_t p99, worst;
	int base, calls, conns = 0, refused = 0;
	uint8_t *api_req, *work_req;
	size_t alen, wlen;

	health_ms("s3cret-token", 2000);
	base = sock_count(kclawd, false);
	health_env("nope", 4, &api_req, &alen);
	wq.role = KCLAW__ROLE__GENERATOR;
	wq.worker_id = "intruder";
	wq.token = "nope";
	KT_OK(kc_pb_pack(&wq.base, &work_req, &wlen));
	for (int i = 0; i < 4; i++) {
		f[i] = (struct flooder){.port = h_ports[i % 2],
		    .req = i % 2 ? work_req : api_req,
		    .rlen = i % 2 ? wlen : alen,
		    .stop = &stop};
		KT_ASSERT(
		    pthread_create(&t[i], NULL, flooder_main, &f[i]) == 0);
	}
	kc_sleep_ms(300);
	p99 = health_p99(4000, &worst, &calls);
	stop = true;
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		conns += f[i].conns;
		refused += f[i].refused;
	}
	printf("  wrong-token flood: %d connections, %d refusals read; token "
	       "holders: %d calls, p99 %llu ms, worst %llu ms\n",
	    conns, refused, calls, (unsigned long long)p99,
	    (unsigned long long)worst);
	KT_ASSERT(conns > 20);
	KT_ASSERT(refused > conns / 2);
	KT_ASSERT(p99 < 500);
	socks_back_to(base, "the flood");
	free(api_req);
	free(work_req);
	health_ms("s3cret-token", 1000);
}

/*
 * Idle outsiders: 150 connections that never send, then 150 that send
 * only the SP header, to each socket. Nobody is locked out: token
 * holders (the long-lived client and newcomers) are served with p99
 * under 500 ms while they sit there; the outsiders are evicted or closed
 * at their deadlines, and kclawd's sockets return to their base.
 */
static void
test_idle_outsiders(void)
{
	enum { N = 150 };
	static int fd[2][2 * N];
	struct sockaddr_in a = {
	    .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	uint64_t p99, worst;
	int base, calls, open_now = 0;

	health_ms("s3cret-token", 2000);
	base = sock_count(kclawd, false);
	for (int k = 0; k < 2; k++)
		for (int i = 0; i < 2 * N; i++) {
			a.sin_port = htons((uint16_t)h_ports[k]);
			if (i < N) {
				fd[k][i] = socket(AF_INET, SOCK_STREAM, 0);
				KT_ASSERT(fd[k][i] >= 0);
				if (connect(fd[k][i], (struct sockaddr *)&a,
				        sizeof(a)) != 0) {
					close(fd[k][i]);
					fd[k][i] = -1;
				}
			} else
				fd[k][i] = sp_try_connect(h_ports[k], 0);
		}
	p99 = health_p99(3000, &worst, &calls);
	for (int k = 0; k < 2; k++)
		for (int i = 0; i < 2 * N; i++)
			open_now +=
			    fd[k][i] >= 0 && !closed_within(fd[k][i], 1);
	printf("  %d idle outsiders per socket: token holders %d calls, p99 "
	       "%llu ms, worst %llu ms; %d outsiders still connected\n",
	    2 * N, calls, (unsigned long long)p99, (unsigned long long)worst,
	    open_now);
	KT_ASSERT(p99 < 500);
	/* At most the caps of connections not yet proved remain. */
	KT_ASSERT(open_now <= 2 * (BUS_MAX_PRE_CONNS + BUS_MAX_NEW_CONNS));
	for (int k = 0; k < 2; k++)
		for (int i = 0; i < 2 * N; i++)
			if (fd[k][i] >= 0)
				close(fd[k][i]);
	socks_back_to(base, "the idle outsiders");
}

struct worker_try {
	int ok;
	char id[32];
};

static void *
worker_try_main(void *arg)
{
	struct worker_try *w = arg;
	Kclaw__WorkRequest wq = KCLAW__WORK_REQUEST__INIT;
	bus_client *c;
	uint8_t *buf;
	size_t len, rlen;
	void *rep = NULL;
	int rv;

	wq.role = KCLAW__ROLE__OPTIMIZER;
	wq.worker_id = w->id;
	wq.token = "s3cret-token";
	if (kc_pb_pack(&wq.base, &buf, &len) != 0 ||
	    bus_client_open(&c, h_cfg.work_url, 0) != 0)
		return NULL;
	/* No work to hand out: a request that got in waits (long poll)
	 * until it times out or kclawd answers it without a job; refused,
	 * the answer says why. */
	rv = bus_client_call(c, buf, len, 6000, &rep, &rlen);
	if (rv == KC_ETIMEDOUT)
		w->ok = 1;
	else if (rv == 0) {
		Kclaw__WorkReply *wr =
		    kclaw__work_reply__unpack(NULL, rlen, rep);
		w->ok = wr != NULL && (wr->error == NULL || !*wr->error);
		if (wr)
			kclaw__work_reply__free_unpacked(wr, NULL);
	} else
		fprintf(stderr, "  worker %s: %s\n", w->id, kc_lasterr());
	free(rep);
	free(buf);
	bus_client_close(c);
	return NULL;
}

/* A fleet's 100 workers (one host: one peer) reconnect at once: every one
 * gets in and waits for work, none refused. */
static void
test_workers_reconnect(void)
{
	enum { N = 100 };
	static struct worker_try w[N];
	static pthread_t t[N];
	Kclaw__HealthRequest req = KCLAW__HEALTH_REQUEST__INIT;
	Kclaw__HealthResponse *h = NULL;
	uint32_t waiting = 0;
	int ok = 0, base;

	health_ms("s3cret-token", 2000);
	base = sock_count(kclawd, false);
	for (int i = 0; i < N; i++) {
		snprintf(w[i].id, sizeof(w[i].id), "fleet-%d", i);
		KT_ASSERT(
		    pthread_create(&t[i], NULL, worker_try_main, &w[i]) == 0);
	}
	for (int i = 0; i < 200 && waiting < N; i++) {
		KT_OK(kc_api_call(h_api, "Health", &req.base, "s3cret-token",
		    2000, &kclaw__health_response__descriptor,
		    (ProtobufCMessage **)&h));
		waiting = h->workers_waiting;
		kclaw__health_response__free_unpacked(h, NULL);
		if (waiting < N)
			kc_sleep_ms(25);
	}
	for (int i = 0; i < N; i++) {
		pthread_join(t[i], NULL);
		ok += w[i].ok;
	}
	printf("  %d workers reconnecting at once: %u waiting for work at "
	       "once, %d served without a refusal\n",
	    N, waiting, ok);
	KT_EQ_INT(waiting, N);
	KT_EQ_INT(ok, N);
	socks_back_to(base, "the workers left");
}

/* SIGTERM stops kclawd after all of that, promptly. */
static void
test_sigterm_stops(void)
{
	uint64_t t0 = kc_mono_ms();
	int st;

	KT_ASSERT(kill(kclawd, SIGTERM) == 0);
	while (waitpid(kclawd, &st, WNOHANG) == 0) {
		if (kc_mono_ms() - t0 > 10000)
			KT_FAIL("kclawd did not stop within 10 s of SIGTERM");
		kc_sleep_ms(20);
	}
	printf("  SIGTERM: kclawd stopped in %llu ms\n",
	    (unsigned long long)(kc_mono_ms() - t0));
	KT_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	kclawd = 0;
}

/* Specs kclaw submit would never send, straight to Submit. */
static void
test_bad_specs(void)
{
	Kclaw__TensorSpec x = KCLAW__TENSOR_SPEC__INIT,
	                  y = KCLAW__TENSOR_SPEC__INIT, *ts[2] = {&x, &y},
	                  **many;
	Kclaw__TaskSpec spec = KCLAW__TASK_SPEC__INIT;
	Kclaw__Tolerance tol = KCLAW__TOLERANCE__INIT;
	Kclaw__SubmitRequest req = KCLAW__SUBMIT_REQUEST__INIT;
	ProtobufCMessage *resp;
	int64_t sx[2] = {1024, 1024}, sy[2] = {1024, 1024};
	uint64_t bytes;
	struct {
		const char *what, *expect;
	} cases[] = {
	    {"negative dim", "dimensions must be positive"},
	    {"empty shape", "shape has 0 dimensions"},
	    {"2^61 elements", "more than 2^40 elements"},
	    {"bad dtype", "unknown dtype"},
	    {"20000 tensors", "a task has 1 to 1024"},
	    {"../ name", "not a C identifier"},
	    {"NaN tolerance", "finite number"},
	    {"negative tolerance", "finite number"},
	    {"bad task name", "may hold only"},
	};

	/* Sizes with overflow checks, as the sandbox needs them. */
	int64_t big[3] = {1 << 30, 1 << 30, 4};
	KT_EQ_INT(
	    kc_spec_tensor_bytes(KCLAW__DTYPE__F32, big, 3, &bytes), KC_EINVAL);
	int64_t wrap[2] = {INT64_MAX, INT64_MAX};
	KT_EQ_INT(kc_spec_tensor_bytes(KCLAW__DTYPE__F32, wrap, 2, &bytes),
	    KC_EINVAL);
	KT_OK(kc_spec_tensor_bytes(KCLAW__DTYPE__F16, sx, 2, &bytes));
	KT_EQ_INT(bytes, 2 << 20);

	KT_ASSERT((many = calloc(20000, sizeof(*many))) != NULL);
	for (size_t c = 0; c < KC_ARRAY_LEN(cases); c++) {
		x = (Kclaw__TensorSpec)KCLAW__TENSOR_SPEC__INIT;
		y = (Kclaw__TensorSpec)KCLAW__TENSOR_SPEC__INIT;
		x.name = "x";
		x.kind = KCLAW__TENSOR_KIND__INPUT;
		x.dtype = KCLAW__DTYPE__F32;
		x.shape = sx;
		x.n_shape = 2;
		y.name = "y";
		y.kind = KCLAW__TENSOR_KIND__OUTPUT;
		y.dtype = KCLAW__DTYPE__F32;
		y.shape = sy;
		y.n_shape = 2;
		sx[0] = 1024;
		sx[1] = 1024;
		tol.atol = 1e-5;
		tol.rtol = 1e-5;
		spec = (Kclaw__TaskSpec)KCLAW__TASK_SPEC__INIT;
		spec.name = "hostile";
		spec.tensors = ts;
		spec.n_tensors = 2;
		spec.tolerance = &tol;
		switch (c) {
		case 0: sx[1] = -4; break;
		case 1: x.n_shape = 0; break;
		case 2:
			sx[0] = 1ll << 31;
			sx[1] = 1ll << 30;
			break;
		case 3: x.dtype = (Kclaw__DType)99; break;
		case 4:
			for (int i = 0; i < 20000; i++)
				many[i] = &x;
			spec.tensors = many;
			spec.n_tensors = 20000;
			break;
		case 5: x.name = "../../x"; break;
		case 6: tol.atol = NAN; break;
		case 7: tol.rtol = -1; break;
		case 8: spec.name = "../etc"; break;
		}
		req.spec = &spec;
		KT_EQ_INT(
		    kc_api_call(h_api, "Submit", &req.base, "s3cret-token",
		        5000, &kclaw__submit_response__descriptor, &resp),
		    KC_EINVAL);
		if (strstr(kc_lasterr(), cases[c].expect) == NULL)
			KT_FAIL("%s: '%s' does not say '%s'", cases[c].what,
			    kc_lasterr(), cases[c].expect);
	}
	free(many);
	health_ms("s3cret-token", 1000);
}

/* The dashboard's address check parses the URL; `/` is never a root. */
static void
test_addresses(void)
{
	kc_config cfg;
	char real[PATH_MAX], cwd[PATH_MAX];
	const char *public[] = {"http://127.0.0.1@0.0.0.0:8470",
	    "http://127.0.0.1.example.com:8470", "http://0.0.0.0:8470",
	    "http://localhost@10.0.0.1:8470", "not a url"};
	const char *loop[] = {"http://127.0.0.1:8470", "http://127.9.8.7:1",
	    "http://localhost:8470", "http://[::1]:8470"};

	unsetenv("KCLAW_INSECURE_TCP");
	cfg = h_cfg;
	cfg.token[0] = '\0';
	snprintf(cfg.api_url, sizeof(cfg.api_url), "ipc://%s/a.ipc", h_home);
	snprintf(cfg.work_url, sizeof(cfg.work_url), "ipc://%s/w.ipc", h_home);
	for (size_t i = 0; i < KC_ARRAY_LEN(public); i++) {
		kc_strlcpy(cfg.http_url, public[i], sizeof(cfg.http_url));
		KT_EQ_INT(orch_security_check(&cfg), KC_EPERM);
	}
	for (size_t i = 0; i < KC_ARRAY_LEN(loop); i++) {
		kc_strlcpy(cfg.http_url, loop[i], sizeof(cfg.http_url));
		KT_OK(orch_security_check(&cfg));
	}
	/* A kclawd whose working folder is `/`. */
	unsetenv("KCLAW_BUNDLE_ROOTS");
	KT_ASSERT(getcwd(cwd, sizeof(cwd)) != NULL);
	KT_ASSERT(chdir("/") == 0);
	KT_EQ_INT(
	    orch_bundle_dir_check(&cfg, "/etc", real, sizeof(real)), KC_EPERM);
	KT_OK(orch_bundle_dir_check(&cfg, h_home, real, sizeof(real)));
	KT_ASSERT(chdir(cwd) == 0);
}

/* A header line every http_status request carries (NULL: none). */
static const char *http_auth;

/* Sends an HTTP request to the dashboard; its status code (0: none). */
static int
http_status(const char *host, const char *origin, const char *path, bool ws)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
	    .sin_port = htons((uint16_t)h_ports[2]),
	    .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct timeval tv = {.tv_sec = 3};
	char req[1024], rep[512];
	int fd = socket(AF_INET, SOCK_STREAM, 0), code = 0;
	ssize_t n;

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	KT_ASSERT(connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
	snprintf(req, sizeof(req),
	    "GET %s HTTP/1.1\r\nHost: %s\r\n%s%s%s%s%s\r\n", path, host,
	    http_auth ? http_auth : "", origin ? "Origin: " : "",
	    origin ? origin : "", origin ? "\r\n" : "",
	    ws ? "Upgrade: websocket\r\nConnection: Upgrade\r\n"
	         "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
	         "Sec-WebSocket-Version: 13\r\n"
	         "Sec-WebSocket-Protocol: pub.sp.nanomsg.org\r\n"
	       : "Connection: close\r\n");
	KT_ASSERT(
	    send(fd, req, strlen(req), MSG_NOSIGNAL) == (ssize_t)strlen(req));
	if ((n = recv(fd, rep, sizeof(rep) - 1, 0)) > 12) {
		rep[n] = '\0';
		code = atoi(rep + 9);
	}
	/* An upgraded connection the dashboard refused is closed. */
	if (ws && code == 101 && closed_within(fd, 1500))
		code = -101;
	close(fd);
	return code;
}

static void
test_dashboard(void)
{
	char self[64], other[64];

	snprintf(self, sizeof(self), "127.0.0.1:%d", h_ports[2]);
	snprintf(other, sizeof(other), "http://127.0.0.1:%d", h_ports[2] + 7);
	for (int i = 0; i < 100 && http_status(self, NULL, "/", false) != 303;
	     i++)
		kc_sleep_ms(50);
	/* With a token, nothing without it: the page goes to the login,
	 * the API, /metrics and the WebSocket refuse. */
	http_auth = NULL;
	KT_EQ_INT(http_status(self, NULL, "/", false), 303);
	KT_EQ_INT(http_status(self, NULL, "/app.js", false), 401);
	KT_EQ_INT(http_status(self, NULL, "/api/health", false), 401);
	KT_EQ_INT(http_status(self, NULL, "/api/tasks", false), 401);
	KT_EQ_INT(http_status(self, NULL, "/metrics", false), 401);
	KT_EQ_INT(http_status(self, NULL, "/login", false), 200);
	KT_EQ_INT(http_status(self, NULL, "/ws", true), -101);
	http_auth = "Authorization: Bearer s3cret-tokem\r\n";
	KT_EQ_INT(http_status(self, NULL, "/api/health", false), 401);
	KT_EQ_INT(http_status(self, NULL, "/ws", true), -101);
	http_auth = "Authorization: Bearer s3cret-token\r\n";
	KT_EQ_INT(http_status(self, NULL, "/api/health", false), 200);
	KT_EQ_INT(http_status(self, NULL, "/metrics", false), 200);
	KT_EQ_INT(http_status(self, NULL, "/", false), 200);
	/* DNS rebinding: the attacker's name in Host. */
	KT_EQ_INT(
	    http_status("evil.example:8470", NULL, "/api/tasks", false), 403);
	KT_EQ_INT(http_status("evil.example", NULL, "/", false), 403);
	KT_EQ_INT(http_status("127.0.0.1:1", NULL, "/metrics", false), 403);
	KT_EQ_INT(
	    http_status(self, "http://evil.example", "/api/tasks", false), 403);
	/* The WebSocket: another site's Origin closes it; its own does not. */
	KT_EQ_INT(http_status(self, "http://evil.example", "/ws", true), -101);
	KT_EQ_INT(http_status(self, other, "/ws", true), -101);
	/* (NNG's WebSocket handler answers only its own host: 404.) */
	KT_ASSERT(http_status("evil.example:1", NULL, "/ws", true) != 101);
	char own[80];
	snprintf(own, sizeof(own), "http://%s", self);
	KT_EQ_INT(http_status(self, own, "/ws", true), 101);
	http_auth = NULL;
	health_ms("s3cret-token", 1000);
}

static void
hostile_setup(void)
{
	char url[64];

	kt_free_ports(h_ports, 3);
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", h_ports[0]);
	setenv("KCLAW_API_URL", url, 1);
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", h_ports[1]);
	setenv("KCLAW_WORK_URL", url, 1);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", h_ports[2]);
	setenv("KCLAW_HTTP_URL", url, 1);
	setenv("KCLAW_TOKEN", "s3cret-token", 1);
	h_setup("sec-hostile", "");
	kclawd = h_kclawd();
	for (int i = 0; i < 100; i++) {
		Kclaw__HealthRequest req = KCLAW__HEALTH_REQUEST__INIT;
		ProtobufCMessage *resp;
		if (kc_api_call(h_api, "Health", &req.base, "s3cret-token", 300,
		        &kclaw__health_response__descriptor, &resp) == 0) {
			protobuf_c_message_free_unpacked(resp, NULL);
			return;
		}
		kc_sleep_ms(50);
	}
	KT_FAIL("kclawd did not answer");
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
	} else if (strcmp(group, "hostile") == 0) {
		/* A second argument runs one test of the group (to measure
		 * an attack against another build's kclawd, KCLAW_BIN). */
		const char *only = argc > 2 ? argv[2] : NULL;
#define SEC_RUN(fn)                                                            \
	do {                                                                   \
		if (only == NULL || strcmp(only, #fn) == 0)                    \
			KT_RUN(fn);                                            \
	} while (0)
		hostile_setup();
		SEC_RUN(test_token_bytes);
		SEC_RUN(test_bad_specs);
		SEC_RUN(test_addresses);
		SEC_RUN(test_dashboard);
		SEC_RUN(test_flood_no_read);
		SEC_RUN(test_half_sent);
		SEC_RUN(test_unproven_half_sent);
#undef SEC_RUN
	} else if (strcmp(group, "flood") == 0) {
		hostile_setup();
		KT_RUN(test_flood_reconnect);
		KT_RUN(test_idle_outsiders);
		KT_RUN(test_workers_reconnect);
		KT_RUN(test_sigterm_stops);
	} else {
		fprintf(stderr,
		    "usage: sec_test "
		    "bad-input|tcp-token|tcp-start|hostile|flood "
		    "[TEST]\n");
		return 2;
	}
	h_kill(kclawd, SIGTERM);
	h_teardown();
	return 0;
}
