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
#include <sys/wait.h>
#include <unistd.h>

#include "kc_err.h"
#include "kc_log.h"
#include "kc_util.h"

/* The descriptor the reference process reads and writes. */
#define TR_CHILD_FD 3

struct sbx_torchref {
	char python[PATH_MAX];
	char script[PATH_MAX];
	pid_t pid;
	int fd;
	char *buf; /* bytes read past the last reply */
	size_t len, cap;
	unsigned starts;
	char version[128];
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
	*out = r;
	return 0;
}

void
sbx_torchref_kill(sbx_torchref *r)
{
	if (r->pid > 0) {
		kill(r->pid, SIGKILL);
		waitpid(r->pid, NULL, 0);
	}
	if (r->fd >= 0)
		close(r->fd);
	r->pid = 0;
	r->fd = -1;
	r->len = 0;
	r->version[0] = '\0';
}

void
sbx_torchref_free(sbx_torchref *r)
{
	if (r == NULL)
		return;
	sbx_torchref_kill(r);
	free(r->buf);
	free(r);
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
	pid_t pid = r->pid;
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
	sbx_torchref_kill(r);
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

/* One exchange on a running process; the process is killed on failure. */
static int
tr_exchange(sbx_torchref *r, const cJSON *req, int timeout_ms, cJSON **reply)
{
	uint64_t deadline = kc_mono_ns() + (uint64_t)timeout_ms * 1000000;
	char *text = cJSON_PrintUnformatted(req), *line = NULL;
	const char *op;
	size_t n;
	int rv;

	*reply = NULL;
	if (text == NULL)
		return kc_seterr(KC_ENOMEM, "out of memory");
	op = cJSON_GetStringValue(cJSON_GetObjectItem(req, "op"));
	n = strlen(text);
	text[n] = '\n';
	rv = tr_write_all(r->fd, text, n + 1, deadline);
	free(text);
	if (rv == 0)
		rv = tr_read_line(r, deadline, &line);
	if (rv == KC_ECLOSED)
		return tr_gone(r);
	if (rv == KC_ETIMEDOUT) {
		sbx_torchref_kill(r);
		return kc_seterr(KC_ETIMEDOUT,
		    "the PyTorch reference process did not answer '%s' within "
		    "%d ms; it was killed and will be started again",
		    op ? op : "?", timeout_ms);
	}
	if (rv == KC_EPROTO) {
		sbx_torchref_kill(r);
		return kc_seterr(KC_EPROTO,
		    "the PyTorch reference process sent a line over %u bytes "
		    "for '%s'; it was killed",
		    SBX_TORCHREF_LINE_MAX, op ? op : "?");
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
		    op ? op : "?", head);
	}
	free(line);
	return 0;
}

static int
tr_start(sbx_torchref *r)
{
	int sv[2];
	pid_t pid;
	cJSON *hello, *reply = NULL;
	int rv;

	if (r->script[0] == '\0')
		return kc_seterr(KC_ENOENT,
		    "no torchref.py: install kclaw (share/kclaw/torch) or set "
		    "KCLAW_TORCHREF to the script's path");
	if (access(r->script, R_OK) != 0)
		return kc_seterr(KC_ENOENT,
		    "the PyTorch reference script %s cannot be read (%s); set "
		    "KCLAW_TORCHREF to torchref.py",
		    r->script, strerror(errno));
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
	if ((hello = cJSON_CreateObject()) == NULL ||
	    cJSON_AddStringToObject(hello, "op", "hello") == NULL) {
		cJSON_Delete(hello);
		sbx_torchref_kill(r);
		return kc_seterr(KC_ENOMEM, "out of memory");
	}
	rv = tr_exchange(r, hello, SBX_TORCHREF_START_MS, &reply);
	cJSON_Delete(hello);
	if (rv != 0) {
		if (rv == KC_ECLOSED)
			kc_seterr(KC_ENOENT,
			    "the PyTorch reference process (%s %s) did not "
			    "start: %s",
			    r->python, r->script, kc_lasterr());
		return rv == KC_ECLOSED ? KC_ENOENT : rv;
	}
	snprintf(r->version, sizeof(r->version), "%s",
	    cJSON_GetStringValue(cJSON_GetObjectItem(reply, "torch"))
	        ? cJSON_GetStringValue(cJSON_GetObjectItem(reply, "torch"))
	        : "");
	if (!cJSON_IsTrue(cJSON_GetObjectItem(reply, "ok"))) {
		const char *err =
		    cJSON_GetStringValue(cJSON_GetObjectItem(reply, "error"));
		rv = kc_seterr(KC_ENODEV, "%s",
		    err ? err : "the PyTorch reference process refused hello");
		cJSON_Delete(reply);
		sbx_torchref_kill(r);
		return rv;
	}
	cJSON_Delete(reply);
	KC_INFO("PyTorch reference process %d started (torch %s)", (int)pid,
	    r->version);
	return 0;
}

int
sbx_torchref_call(
    sbx_torchref *r, const cJSON *req, int timeout_ms, cJSON **reply)
{
	int rv;

	*reply = NULL;
	if (r->pid <= 0 && (rv = tr_start(r)) != 0)
		return rv;
	return tr_exchange(r, req, timeout_ms, reply);
}
