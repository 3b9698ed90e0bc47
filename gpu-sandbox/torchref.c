/*
 * torchref.c - the reference process client (torchref.h).
 */
#include "torchref.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kc_err.h"
#include "kc_log.h"
#include "kc_util.h"

/* The descriptor the reference process reads and writes. */
#define TR_CHILD_FD 3
/* How long a busy warm process is asked again before a private one is
 * started: TR_BUSY_TRIES times, TR_BUSY_MS apart. */
#define TR_BUSY_TRIES 20
#define TR_BUSY_MS 50

struct sbx_torchref {
	char python[PATH_MAX];
	char script[PATH_MAX];
	char warm_dir[PATH_MAX]; /* "" or the warm process's folder */
	pid_t pid;               /* the private process (our child) */
	pid_t peer;              /* the warm process (not our child) */
	int fd;
	char *buf; /* bytes read past the last reply */
	size_t len, cap;
	unsigned starts;
	char version[128];
	/* Requests sent whose replies are not yet read (sbx_torchref_send),
	 * oldest first: each one's op and the time its reply is due by. */
	struct {
		char op[32];
		int ms;
		uint64_t due;
	} pending[SBX_TORCHREF_PIPELINE];
	unsigned npending;
	/* Replies read ahead by sbx_torchref_settle, oldest first, all older
	 * than every pending request: each one's op, its reply, or the
	 * failure that stood for it. */
	struct {
		char op[32];
		cJSON *reply;
		int rv;
		char err[256];
	} ready[SBX_TORCHREF_PIPELINE];
	unsigned nready;
};

int
sbx_torchref_new(sbx_torchref **out, const char *python, const char *script)
{
	sbx_torchref *r = calloc(1, sizeof(*r));
	const char *env;
	char dir[PATH_MAX];

	if (r == NULL)
		return kc_seterr(KC_ENOMEM, "out of memory");
	r->fd = -1;
	if (python == NULL)
		python =
		    (env = getenv("KCLAW_PYTHON")) && *env ? env : "python3";
	snprintf(r->python, sizeof(r->python), "%s", python);
	if (script == NULL && (env = getenv("KCLAW_TORCHREF")) && *env)
		script = env;
	if (script != NULL)
		snprintf(r->script, sizeof(r->script), "%s", script);
	else if (kc_share_dir("torch", dir, sizeof(dir)) == 0)
		snprintf(r->script, sizeof(r->script), "%s/torchref.py", dir);
	/* An absolute path: the socket is found from any working folder. */
	if ((env = getenv("KCLAW_TORCHREF_WARM")) && *env &&
	    strcmp(env, "0") != 0 && strcmp(env, "off") != 0) {
		if (env[0] != '/' && getcwd(dir, sizeof(dir)) != NULL)
			snprintf(r->warm_dir, sizeof(r->warm_dir), "%s/%s", dir,
			    env);
		else
			snprintf(r->warm_dir, sizeof(r->warm_dir), "%s", env);
	}
	*out = r;
	return 0;
}

/*
 * Ends the connection. A private process is killed; the warm one only when
 * hard (it hung or sent garbage): otherwise it stays for the next sandbox.
 */
static void
tr_drop(sbx_torchref *r, int hard)
{
	if (r->pid > 0) {
		kill(r->pid, SIGKILL);
		waitpid(r->pid, NULL, 0);
	}
	if (r->peer > 0 && hard)
		kill(r->peer, SIGKILL);
	if (r->fd >= 0)
		close(r->fd);
	r->pid = 0;
	r->peer = 0;
	r->fd = -1;
	r->len = 0;
	r->version[0] = '\0';
	r->npending = 0;
}

void
sbx_torchref_kill(sbx_torchref *r)
{
	tr_drop(r, 1);
}

void
sbx_torchref_free(sbx_torchref *r)
{
	if (r == NULL)
		return;
	tr_drop(r, 0);
	for (unsigned i = 0; i < r->nready; i++)
		cJSON_Delete(r->ready[i].reply);
	free(r->buf);
	free(r);
}

pid_t
sbx_torchref_pid(const sbx_torchref *r)
{
	return r->pid > 0 ? r->pid : r->peer;
}

int
sbx_torchref_is_warm(const sbx_torchref *r)
{
	return r->peer > 0;
}

const char *
sbx_torchref_version(const sbx_torchref *r)
{
	return r->version;
}

unsigned
sbx_torchref_starts(const sbx_torchref *r)
{
	return r->starts;
}

/* Why the process is gone, for messages. */
static int
tr_gone(sbx_torchref *r)
{
	int st = 0;
	pid_t pid = r->pid; /* 0 for the warm process: not our child */
	char how[96] = "it closed its socket";

	/* End of file comes a moment before the exit status: wait for it
	 * briefly, so the message can say how the process ended. */
	for (int i = 0; pid > 0 && i < 200; i++) {
		if (waitpid(pid, &st, WNOHANG) == pid) {
			r->pid = 0;
			break;
		}
		kc_sleep_ms(5);
	}
	if (pid > 0 && r->pid == 0) {
		if (WIFEXITED(st))
			snprintf(how, sizeof(how), "it exited with status %d",
			    WEXITSTATUS(st));
		else if (WIFSIGNALED(st))
			snprintf(how, sizeof(how), "it was killed by signal %d",
			    WTERMSIG(st));
	}
	tr_drop(r, 0);
	return kc_seterr(KC_ECLOSED,
	    "the PyTorch reference process (%s %s) died: %s; its stderr is in "
	    "the sandbox's log",
	    r->python, r->script, how);
}

static int
tr_write_all(int fd, const char *p, size_t n, uint64_t deadline)
{
	while (n > 0) {
		struct pollfd pf = {.fd = fd, .events = POLLOUT};
		int left = (int)((deadline - kc_mono_ns()) / 1000000);
		ssize_t w;

		if (left <= 0 || poll(&pf, 1, left) <= 0)
			return KC_ETIMEDOUT;
		if ((w = send(fd, p, n, MSG_NOSIGNAL)) < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return KC_ECLOSED;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Reads one line (without its newline) into a malloc'd string. */
static int
tr_read_line(sbx_torchref *r, uint64_t deadline, char **line)
{
	for (;;) {
		char *nl = r->len ? memchr(r->buf, '\n', r->len) : NULL;
		struct pollfd pf = {.fd = r->fd, .events = POLLIN};
		int left;
		ssize_t got;

		if (nl != NULL) {
			size_t n = (size_t)(nl - r->buf);
			if ((*line = malloc(n + 1)) == NULL)
				return KC_ENOMEM;
			memcpy(*line, r->buf, n);
			(*line)[n] = '\0';
			memmove(r->buf, nl + 1, r->len - n - 1);
			r->len -= n + 1;
			return 0;
		}
		if (r->len >= SBX_TORCHREF_LINE_MAX)
			return KC_EPROTO;
		if (r->cap - r->len < 65536) {
			size_t cap = r->cap ? r->cap * 2 : 131072;
			char *nb = realloc(r->buf, cap);
			if (nb == NULL)
				return KC_ENOMEM;
			r->buf = nb;
			r->cap = cap;
		}
		left = (int)(((int64_t)deadline - (int64_t)kc_mono_ns()) /
		    1000000);
		if (left <= 0)
			return KC_ETIMEDOUT;
		if (poll(&pf, 1, left) <= 0)
			return KC_ETIMEDOUT;
		got = recv(r->fd, r->buf + r->len, r->cap - r->len, 0);
		if (got < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (got <= 0)
			return KC_ECLOSED;
		r->len += (size_t)got;
	}
}

/* Sends req (one line) by deadline; KC_ECLOSED or KC_ETIMEDOUT as read. */
static int
tr_send(sbx_torchref *r, const cJSON *req, uint64_t deadline)
{
	char *text = cJSON_PrintUnformatted(req);
	size_t n;
	int rv;

	if (text == NULL)
		return kc_seterr(KC_ENOMEM, "out of memory");
	n = strlen(text);
	text[n] = '\n';
	rv = tr_write_all(r->fd, text, n + 1, deadline);
	free(text);
	return rv;
}

/* The reply to op, sent before and due by deadline (rv: what sending it
 * returned); the process is killed on failure. */
static int
tr_reply(sbx_torchref *r, int rv, const char *op, int timeout_ms,
    uint64_t deadline, cJSON **reply)
{
	char *line = NULL;

	*reply = NULL;
	if (rv == 0)
		rv = tr_read_line(r, deadline, &line);
	if (rv == KC_ECLOSED)
		return tr_gone(r);
	if (rv == KC_ETIMEDOUT) {
		sbx_torchref_kill(r);
		return kc_seterr(KC_ETIMEDOUT,
		    "the PyTorch reference process did not answer '%s' within "
		    "%d ms; it was killed and will be started again",
		    op, timeout_ms);
	}
	if (rv == KC_EPROTO) {
		sbx_torchref_kill(r);
		return kc_seterr(KC_EPROTO,
		    "the PyTorch reference process sent a line over %u bytes "
		    "for '%s'; it was killed",
		    SBX_TORCHREF_LINE_MAX, op);
	}
	if (rv != 0) {
		sbx_torchref_kill(r);
		return kc_seterr(
		    rv, "talking to the PyTorch reference process");
	}
	*reply = cJSON_Parse(line);
	if (*reply == NULL || !cJSON_IsObject(*reply)) {
		char head[81];
		snprintf(head, sizeof(head), "%s", line);
		cJSON_Delete(*reply);
		*reply = NULL;
		free(line);
		sbx_torchref_kill(r);
		return kc_seterr(KC_EPROTO,
		    "the PyTorch reference process answered '%s' with a line "
		    "that is not a JSON object (\"%s\"); it was killed",
		    op, head);
	}
	free(line);
	return 0;
}

/* The op a request names, for messages. */
static const char *
tr_op(const cJSON *req)
{
	const char *op = cJSON_GetStringValue(cJSON_GetObjectItem(req, "op"));

	return op ? op : "?";
}

/* One exchange on a running process; the process is killed on failure. */
static int
tr_exchange(sbx_torchref *r, const cJSON *req, int timeout_ms, cJSON **reply)
{
	uint64_t deadline = kc_mono_ns() + (uint64_t)timeout_ms * 1000000;

	return tr_reply(r, tr_send(r, req, deadline), tr_op(req), timeout_ms,
	    deadline, reply);
}

/* hello on a fresh connection: KC_ENODEV when refused (no PyTorch or no
 * GPU), KC_EBUSY when the warm process serves another sandbox. */
static int
tr_hello(sbx_torchref *r)
{
	cJSON *hello, *reply = NULL;
	const char *code, *v;
	int rv;

	if ((hello = cJSON_CreateObject()) == NULL ||
	    cJSON_AddStringToObject(hello, "op", "hello") == NULL) {
		cJSON_Delete(hello);
		tr_drop(r, 0);
		return kc_seterr(KC_ENOMEM, "out of memory");
	}
	rv = tr_exchange(r, hello, SBX_TORCHREF_START_MS, &reply);
	cJSON_Delete(hello);
	if (rv != 0)
		return rv;
	v = cJSON_GetStringValue(cJSON_GetObjectItem(reply, "torch"));
	snprintf(r->version, sizeof(r->version), "%s", v ? v : "");
	if (!cJSON_IsTrue(cJSON_GetObjectItem(reply, "ok"))) {
		const char *err =
		    cJSON_GetStringValue(cJSON_GetObjectItem(reply, "error"));
		code = cJSON_GetStringValue(cJSON_GetObjectItem(reply, "code"));
		rv = kc_seterr(
		    code && strcmp(code, "BUSY") == 0 ? KC_EBUSY : KC_ENODEV,
		    "%s",
		    err ? err : "the PyTorch reference process refused hello");
		cJSON_Delete(reply);
		tr_drop(r, 0);
		return rv;
	}
	cJSON_Delete(reply);
	return 0;
}

static int
tr_script_ok(const sbx_torchref *r)
{
	if (r->script[0] == '\0')
		return kc_seterr(KC_ENOENT,
		    "no torchref.py: install kclaw (share/kclaw/torch) or set "
		    "KCLAW_TORCHREF to the script's path");
	if (access(r->script, R_OK) != 0)
		return kc_seterr(KC_ENOENT,
		    "the PyTorch reference script %s cannot be read (%s); set "
		    "KCLAW_TORCHREF to torchref.py",
		    r->script, strerror(errno));
	return 0;
}

static int
tr_start_private(sbx_torchref *r)
{
	int sv[2];
	pid_t pid;
	int rv;

	if ((rv = tr_script_ok(r)) != 0)
		return rv;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
		return kc_seterr(KC_EIO, "socketpair: %s", strerror(errno));
	if ((pid = fork()) < 0) {
		close(sv[0]);
		close(sv[1]);
		return kc_seterr(KC_EIO, "fork: %s", strerror(errno));
	}
	if (pid == 0) {
		char *argv[] = {r->python, r->script, "--fd", "3", NULL};
		if (dup2(sv[1], TR_CHILD_FD) < 0)
			_exit(126);
		execvp(r->python, argv);
		fprintf(stderr, "kclaw-sandbox-child: cannot run %s: %s\n",
		    r->python, strerror(errno));
		_exit(127);
	}
	close(sv[1]);
	r->pid = pid;
	r->fd = sv[0];
	r->len = 0;
	r->starts++;
	if ((rv = tr_hello(r)) != 0) {
		if (rv == KC_ECLOSED)
			kc_seterr(KC_ENOENT,
			    "the PyTorch reference process (%s %s) did not "
			    "start: %s",
			    r->python, r->script, kc_lasterr());
		return rv == KC_ECLOSED ? KC_ENOENT : rv;
	}
	KC_INFO("PyTorch reference process %d started (torch %s)", (int)pid,
	    r->version);
	return 0;
}

/* ----------------------------------------------------- the warm process */

/* Creates dir (and its parent) owner-only, and refuses a folder that is
 * someone else's or open to others: its socket must be ours alone. */
static int
tr_private_dir(const char *dir)
{
	char parent[PATH_MAX];
	char *slash;
	struct stat sb;

	snprintf(parent, sizeof(parent), "%s", dir);
	if ((slash = strrchr(parent, '/')) != NULL && slash != parent) {
		*slash = '\0';
		if (mkdir(parent, 0700) != 0 && errno != EEXIST)
			return kc_seterr(
			    KC_EIO, "mkdir %s: %s", parent, strerror(errno));
	}
	if (mkdir(dir, 0700) != 0 && errno != EEXIST)
		return kc_seterr(KC_EIO, "mkdir %s: %s", dir, strerror(errno));
	if (stat(dir, &sb) != 0)
		return kc_seterr(KC_EIO, "stat %s: %s", dir, strerror(errno));
	if (!S_ISDIR(sb.st_mode) || sb.st_uid != getuid() ||
	    (sb.st_mode & 077) != 0)
		return kc_seterr(KC_EPERM,
		    "%s is not a folder of this user's alone (mode %o); the "
		    "warm reference process's socket lives only in one "
		    "(chmod 700 it)",
		    dir, (unsigned)(sb.st_mode & 0777));
	return 0;
}

/*
 * The socket's name: one warm process per interpreter, script (its size
 * and time, so an updated script gets a fresh process) and the environment
 * that decides what the process computes and where.
 */
static int
tr_warm_path(const sbx_torchref *r, const char *ext, char *out, size_t n)
{
	static const char *vars[] = {"CUDA_VISIBLE_DEVICES",
	    "KCLAW_TORCHREF_TF32", "KCLAW_TORCHREF_KERNELS",
	    "PYTORCH_CUDA_ALLOC_CONF", NULL};
	uint64_t h = 1469598103934665603ull;
	struct stat sb;
	char extra[64];
	int w;

#define TR_FNV(str)                                                            \
	for (const char *p_ = (str); p_ && *p_; p_++)                          \
		h = (h ^ (unsigned char)*p_) * 1099511628211ull;               \
	h = (h ^ 0xff) * 1099511628211ull
	TR_FNV(r->python);
	TR_FNV(r->script);
	if (stat(r->script, &sb) == 0) {
		snprintf(extra, sizeof(extra), "%lld.%lld",
		    (long long)sb.st_size, (long long)sb.st_mtime);
		TR_FNV(extra);
	}
	for (int i = 0; vars[i] != NULL; i++) {
		TR_FNV(vars[i]);
		TR_FNV(getenv(vars[i]));
	}
#undef TR_FNV
	w = snprintf(out, n, "%s/torchref-%016llx.%s", r->warm_dir,
	    (unsigned long long)h, ext);
	if (w < 0 || (size_t)w >= n)
		return kc_seterr(KC_ENOSPC,
		    "the warm reference process's socket path under %s is "
		    "too long for a Unix socket; use a shorter KCLAW_HOME",
		    r->warm_dir);
	return 0;
}

/* A connection to the warm process at path, or -1 (errno set). */
static int
tr_connect(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

/* Starts the warm process, detached (its own session; not our child, so
 * it outlives this sandbox), its stderr appended to the log beside the
 * socket. */
static int
tr_spawn_warm(const sbx_torchref *r, const char *sock, const char *logpath)
{
	const char *idle_env = getenv("KCLAW_TORCHREF_IDLE_S");
	char idle[24];
	pid_t pid;
	int st;

	snprintf(
	    idle, sizeof(idle), "%s", idle_env && *idle_env ? idle_env : "600");
	if ((pid = fork()) < 0)
		return kc_seterr(KC_EIO, "fork: %s", strerror(errno));
	if (pid == 0) {
		char *argv[] = {(char *)r->python, (char *)r->script,
		    "--listen", (char *)sock, "--idle-s", idle, NULL};
		int nul, lg;
		setsid();
		if (fork() != 0)
			_exit(0);
		nul = open("/dev/null", O_RDWR);
		lg = open(
		    logpath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
		if (nul >= 0) {
			dup2(nul, 0);
			dup2(nul, 1);
		}
		if (lg >= 0)
			dup2(lg, 2);
		/* Nothing of the sandbox child's (its sockets, its CUDA
		 * driver's descriptors) goes with it. */
		for (int fd = 3; fd < 1024; fd++)
			close(fd);
		execvp(argv[0], argv);
		_exit(127);
	}
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	return 0;
}

/*
 * A connection to the warm reference process (docs/torchref.md "Warm
 * process"), started when none listens. 0 with hello done; KC_EBUSY when
 * it serves another sandbox; KC_ENODEV when hello is refused; other codes
 * when it cannot be used (the caller starts a private process).
 */
static int
tr_start_warm(sbx_torchref *r)
{
	char sock[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char logpath[PATH_MAX];
	int rv;

	if ((rv = tr_script_ok(r)) != 0 ||
	    (rv = tr_private_dir(r->warm_dir)) != 0 ||
	    (rv = tr_warm_path(r, "sock", sock, sizeof(sock))) != 0 ||
	    (rv = tr_warm_path(r, "log", logpath, sizeof(logpath))) != 0)
		return rv;
	for (int attempt = 0, busy = 0; attempt < 2; attempt++) {
		uint64_t until = 0;
		struct ucred cred;
		socklen_t cl = sizeof(cred);
		int fd;

		while ((fd = tr_connect(sock)) < 0) {
			if (errno != ENOENT && errno != ECONNREFUSED)
				return kc_seterr(KC_EIO, "connect %s: %s", sock,
				    strerror(errno));
			if (until == 0) {
				/* It binds before importing PyTorch: the
				 * socket is there within a moment. */
				if ((rv = tr_spawn_warm(r, sock, logpath)) != 0)
					return rv;
				until = kc_mono_ns() + 10000000000ull;
			} else if (kc_mono_ns() > until) {
				return kc_seterr(KC_ETIMEDOUT,
				    "the warm PyTorch reference process did "
				    "not "
				    "listen on %s within 10 s; see %s",
				    sock, logpath);
			}
			kc_sleep_ms(10);
		}
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0 ||
		    cred.uid != getuid() || cred.pid <= 0) {
			close(fd);
			return kc_seterr(KC_EPERM,
			    "the process on %s is not this user's; remove the "
			    "socket",
			    sock);
		}
		r->fd = fd;
		r->peer = cred.pid;
		r->len = 0;
		rv = tr_hello(r);
		if (rv == 0) {
			r->starts++;
			KC_INFO("PyTorch reference process %d (warm, %s) "
			        "connected (torch %s)",
			    (int)cred.pid, sock, r->version);
			return 0;
		}
		/* Busy: the last sandbox may have gone a moment ago, before
		 * the process saw its end of file; a private process costs
		 * seconds, so ask again for a while first. */
		if (rv == KC_EBUSY && busy++ < TR_BUSY_TRIES) {
			kc_sleep_ms(TR_BUSY_MS);
			attempt--;
			continue;
		}
		/* End of file at hello: it was exiting for idleness when we
		 * connected; once more with a fresh one. */
		if (rv != KC_ECLOSED)
			return rv;
	}
	return rv;
}

static int
tr_start(sbx_torchref *r)
{
	int rv;

	if (r->warm_dir[0] != '\0') {
		if ((rv = tr_start_warm(r)) == 0 || rv == KC_ENODEV)
			return rv;
		KC_INFO("no warm PyTorch reference process (%s); starting a "
		        "private one",
		    kc_lasterr());
	}
	return tr_start_private(r);
}

/*
 * Replies sent for and never read (an evaluation that stopped before it
 * needed them) come first on the connection: read and dropped. Where that
 * fails the process was killed, and the next request starts a fresh one.
 */
void
sbx_torchref_drop(sbx_torchref *r)
{
	while (r->npending > 0 || r->nready > 0) {
		cJSON *old = NULL;
		if (sbx_torchref_receive(r, &old) != 0)
			KC_INFO("the reply to an earlier request was lost: %s",
			    kc_lasterr());
		cJSON_Delete(old);
	}
}

int
sbx_torchref_send(sbx_torchref *r, const cJSON *req, int timeout_ms)
{
	uint64_t due = kc_mono_ns() + (uint64_t)timeout_ms * 1000000;
	int rv;

	if (r->npending + r->nready == SBX_TORCHREF_PIPELINE)
		return kc_seterr(KC_EBUSY,
		    "%u requests to the PyTorch reference process already "
		    "wait for their replies",
		    r->npending + r->nready);
	if (r->fd < 0 && (rv = tr_start(r)) != 0)
		return rv;
	if ((rv = tr_send(r, req, due)) != 0) {
		cJSON *none = NULL;
		return tr_reply(r, rv, tr_op(req), timeout_ms, due, &none);
	}
	snprintf(r->pending[r->npending].op, sizeof(r->pending[0].op), "%s",
	    tr_op(req));
	r->pending[r->npending].ms = timeout_ms;
	r->pending[r->npending++].due = due;
	return 0;
}

/* The reply to the oldest pending request, read from the process. */
static int
tr_receive(sbx_torchref *r, cJSON **reply)
{
	char op[sizeof(r->pending[0].op)];
	uint64_t due;
	int ms;

	*reply = NULL;
	if (r->npending == 0 || r->fd < 0) {
		r->npending = 0;
		return kc_seterr(KC_EINVAL,
		    "no request to the PyTorch reference process is waiting "
		    "for its reply");
	}
	snprintf(op, sizeof(op), "%s", r->pending[0].op);
	ms = r->pending[0].ms;
	due = r->pending[0].due;
	r->npending--;
	memmove(&r->pending[0], &r->pending[1],
	    r->npending * sizeof(r->pending[0]));
	return tr_reply(r, 0, op, ms, due, reply);
}

int
sbx_torchref_receive(sbx_torchref *r, cJSON **reply)
{
	int rv;

	if (r->nready == 0)
		return tr_receive(r, reply);
	rv = r->ready[0].rv;
	*reply = r->ready[0].reply;
	if (rv != 0)
		kc_seterr(rv, "%s", r->ready[0].err);
	r->nready--;
	memmove(&r->ready[0], &r->ready[1], r->nready * sizeof(r->ready[0]));
	return rv;
}

void
sbx_torchref_settle(sbx_torchref *r)
{
	while (r->npending > 0) {
		unsigned i = r->nready;
		snprintf(r->ready[i].op, sizeof(r->ready[i].op), "%s",
		    r->pending[0].op);
		r->ready[i].rv = tr_receive(r, &r->ready[i].reply);
		snprintf(r->ready[i].err, sizeof(r->ready[i].err), "%s",
		    r->ready[i].rv != 0 ? kc_lasterr() : "");
		r->nready++;
	}
}

const char *
sbx_torchref_pending(const sbx_torchref *r)
{
	return r->nready > 0  ? r->ready[0].op
	    : r->npending > 0 ? r->pending[0].op
	                      : NULL;
}

int
sbx_torchref_call(
    sbx_torchref *r, const cJSON *req, int timeout_ms, cJSON **reply)
{
	int rv;

	*reply = NULL;
	sbx_torchref_drop(r);
	if (r->fd < 0 && (rv = tr_start(r)) != 0)
		return rv;
	return tr_exchange(r, req, timeout_ms, reply);
}

const char *
sbx_torchref_precision(const char *what)
{
	/* Ranks, lowest precision last: tf32, f16, bf16, fp8. */
	static const char *mode[] = {NULL, "tf32", "f16", "bf16", "bf16"};
	int rank = 0;

	for (const char *p = what; p != NULL && *p != '\0';) {
		const char *end = strstr(p, ", ");
		size_t n = end ? (size_t)(end - p) : strlen(p);
		char item[96];
		int k = 0;

		snprintf(item, sizeof(item), "%.*s", (int)n, p);
		if (strstr(item, "fp8") || strstr(item, "e4m3") ||
		    strstr(item, "e5m2"))
			k = 4;
		else if (strncmp(item, "16-bit", 6) == 0 ||
		    strncmp(item, "a 16-bit", 8) == 0)
			k = 2; /* f16 or bf16, the plan does not say which */
		else if (strstr(item, "bfloat16"))
			k = 3;
		else if (strstr(item, "half") || strncmp(item, "__h", 3) == 0)
			k = 2;
		else if (strstr(item, "tf32"))
			k = 1;
		if (k > rank)
			rank = k;
		p = end ? end + 2 : NULL;
	}
	return mode[rank];
}
