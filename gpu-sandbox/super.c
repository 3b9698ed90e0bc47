/*
 * super.c - the parent's side of one child: start it, hand it requests,
 * notice when it dies or overruns, and replace it.
 *
 * A spare child waits beside the current one, its CUDA context made and
 * the common modules loaded (it measures nothing on the GPU until it gets
 * work, so it does not disturb the current child's timing). When the
 * current child faults, hangs or is killed, the spare takes the next
 * request at once and a new spare starts in the background: a fault costs
 * the next evaluation milliseconds, not a CUDA start-up. KCLAW_SANDBOX_SPARE=0
 * turns it off (one context per GPU, e.g. under exclusive-process mode).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kc_err.h"
#include "kc_log.h"
#include "kc_util.h"
#include "sandbox.h"

#define SUPER_MAX_REAP 16
#define SUPER_START_TRIES 3
/* How long a spare may take to measure the device (16-22 ms on the H200). */
#define SUPER_MEASURE_MS 5000

/* A child that waits, ready or starting, to replace the current one:
 * whether its ready frame was read, whether it was asked to measure the
 * device (its reply not yet read) and whether it did. */
typedef struct {
	pid_t pid;
	int to_child, from_child;
	int ready, measuring, measured;
} super_spare;

struct sbx_super {
	sbx_super_config cfg;
	char child_path[1024];
	char cache_dir[1024];
	char arch[32];
	pid_t pid;
	int to_child, from_child;
	int ready;
	int use_spare;
	super_spare spare;
	unsigned starts;
	char device_name[256];
	char dev_arch[32];
	Kclaw__EvalStatus ready_status;
	pid_t reap[SUPER_MAX_REAP]; /* killed children not yet reaped */
	int cancel_fd;
};

static void super_spare_settle(sbx_super *s);

static void
super_reap(sbx_super *s)
{
	for (int i = 0; i < SUPER_MAX_REAP; i++)
		if (s->reap[i] > 0 && waitpid(s->reap[i], NULL, WNOHANG) != 0)
			s->reap[i] = 0;
}

/* Puts pid on the list of children to reap later. */
static void
super_defer_reap(sbx_super *s, pid_t pid)
{
	for (int j = 0; j < SUPER_MAX_REAP; j++)
		if (s->reap[j] <= 0) {
			s->reap[j] = pid;
			return;
		}
	KC_WARN("sandbox child %d left unreaped (too many dying)", (int)pid);
}

/* Forgets the current child; kills it if asked. Returns its wait status,
 * or -1 when it was not reaped (still dying: reaped later). */
static int
super_drop(sbx_super *s, int kill_it)
{
	int status = -1;

	if (s->pid <= 0)
		return -1;
	close(s->to_child);
	close(s->from_child);
	s->to_child = s->from_child = -1;
	if (kill_it)
		kill(s->pid, SIGKILL);
	/* A child killed inside a kernel can take a while to leave the
	 * driver; wait briefly, then leave it to super_reap. */
	for (int i = 0; i < 300; i++) {
		pid_t r = waitpid(s->pid, &status, WNOHANG);
		if (r == s->pid || (r < 0 && errno == ECHILD))
			break;
		if (i == 299) {
			status = -1;
			super_defer_reap(s, s->pid);
			break;
		}
		if (!kill_it && i == 100)
			kill(s->pid, SIGKILL);
		kc_sleep_ms(10);
	}
	s->pid = 0;
	s->ready = 0;
	return status;
}

/* Starts a child; its pid and pipes go to the out parameters. alone: no
 * other child of this sandbox runs (it is not a spare), so the child may
 * measure the device as it starts (sbx_child_config's alone). */
static int
super_spawn(sbx_super *s, int alone, pid_t *opid, int *oto, int *ofrom)
{
	int in[2], out[2];
	char dev[16];
	char *argv[11];
	int argc = 0;
	pid_t pid, parent;

	super_reap(s);
	if (pipe2(in, O_CLOEXEC) != 0)
		return kc_seterr(KC_EIO, "pipe: %s", strerror(errno));
	if (pipe2(out, O_CLOEXEC) != 0) {
		close(in[0]);
		close(in[1]);
		return kc_seterr(KC_EIO, "pipe: %s", strerror(errno));
	}
	snprintf(dev, sizeof(dev), "%d", s->cfg.device);
	argv[argc++] = s->child_path;
	argv[argc++] = "--device";
	argv[argc++] = dev;
	if (s->cache_dir[0]) {
		argv[argc++] = "--cache";
		argv[argc++] = s->cache_dir;
	}
	if (s->arch[0]) {
		argv[argc++] = "--arch";
		argv[argc++] = s->arch;
	}
	if (alone)
		argv[argc++] = "--alone";
	argv[argc] = NULL;
	parent = getpid();
	if ((pid = fork()) < 0) {
		close(in[0]);
		close(in[1]);
		close(out[0]);
		close(out[1]);
		return kc_seterr(KC_EIO, "fork: %s", strerror(errno));
	}
	if (pid == 0) {
		/* The child dies with this process (a sandbox killed with
		 * SIGKILL cannot kill it): a child busy in a hung kernel
		 * would otherwise hold its GPU context and memory for good.
		 * The signal follows the thread that forked, the main one. */
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 ||
		    getppid() != parent)
			_exit(125);
		/* dup2 clears O_CLOEXEC on the new descriptors. */
		if (dup2(in[0], SBX_CHILD_IN_FD) < 0 ||
		    dup2(out[1], SBX_CHILD_OUT_FD) < 0)
			_exit(126);
		execv(s->child_path, argv);
		fprintf(stderr, "kclaw-sandbox: cannot run %s: %s\n",
		    s->child_path, strerror(errno));
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	*opid = pid;
	*oto = in[1];
	*ofrom = out[0];
	s->starts++;
	KC_INFO("started sandbox child %d (%s)", (int)pid, s->child_path);
	return 0;
}

static int
super_start(sbx_super *s)
{
	int rv = super_spawn(s, 1, &s->pid, &s->to_child, &s->from_child);

	s->ready = 0;
	return rv;
}

/* The current child after it reported a fault: it exits by itself, and
 * nothing waits for it (its context's teardown overlaps the next
 * evaluation, which the spare serves). */
static void
super_retire(sbx_super *s)
{
	if (s->pid <= 0)
		return;
	close(s->to_child);
	close(s->from_child);
	s->to_child = s->from_child = -1;
	kill(s->pid, SIGKILL);
	if (waitpid(s->pid, NULL, WNOHANG) != s->pid)
		super_defer_reap(s, s->pid);
	s->pid = 0;
	s->ready = 0;
}

/* No spare: its state as at the start (the pipes now another's, or
 * closed). */
static void
super_spare_clear(super_spare *sp)
{
	memset(sp, 0, sizeof(*sp));
	sp->to_child = sp->from_child = -1;
}

/* A spare that has exited and been reaped: its pipes closed, its state
 * cleared. */
static void
super_spare_forget(super_spare *sp)
{
	close(sp->to_child);
	close(sp->from_child);
	super_spare_clear(sp);
}

/* Starts a spare if there is none (and spares are on). */
static void
super_spare_ensure(sbx_super *s)
{
	super_spare *sp = &s->spare;

	/* No GPU: nothing a spare would make faster. */
	if (!s->use_spare || s->ready_status != KCLAW__EVAL_STATUS__OK)
		return;
	if (sp->pid > 0 && waitpid(sp->pid, NULL, WNOHANG) == sp->pid)
		super_spare_forget(sp);
	if (sp->pid <= 0 &&
	    super_spawn(s, 0, &sp->pid, &sp->to_child, &sp->from_child) != 0) {
		KC_WARN("cannot start a spare sandbox child: %s", kc_lasterr());
		sp->pid = 0;
	}
}

/* The spare becomes the current child (its ready frame still to read).
 * 0, or -1 when there is no live spare. */
static int
super_promote(sbx_super *s)
{
	super_spare *sp = &s->spare;

	super_spare_settle(s);
	if (sp->pid <= 0)
		return -1;
	if (waitpid(sp->pid, NULL, WNOHANG) == sp->pid) {
		super_spare_forget(sp);
		return -1;
	}
	s->pid = sp->pid;
	s->to_child = sp->to_child;
	s->from_child = sp->from_child;
	s->ready = sp->ready;
	super_spare_clear(sp);
	KC_INFO("the spare sandbox child %d takes over", (int)s->pid);
	return 0;
}

/* One result frame from fd within timeout_ms, decoded into *out: 0 (*out
 * NULL where the frame does not decode) or the frame read's error. */
static int
super_read_result(int fd, int timeout_ms, Kclaw__EvalResult **out)
{
	void *buf;
	size_t len;
	int rv = sbx_frame_read(fd, timeout_ms, &buf, &len);

	*out = NULL;
	if (rv != 0)
		return rv;
	*out = kclaw__eval_result__unpack(NULL, len, buf);
	free(buf);
	return 0;
}

/* What a child's ready frame r says (r is freed): 0, or KC_EBUSY where a
 * GPU the last child had was refused to this one: a second context on it
 * is not allowed (exclusive-process mode), so a spare started beside the
 * last child could not get one. Without spares from then on. */
static int
super_take_ready(sbx_super *s, Kclaw__EvalResult *r)
{
	if (r->status != KCLAW__EVAL_STATUS__OK &&
	    s->ready_status == KCLAW__EVAL_STATUS__OK && s->device_name[0] &&
	    s->use_spare) {
		KC_WARN("sandbox child: %s; the GPU takes one process at a "
		        "time, so no spare child from now on",
		    r->message);
		kclaw__eval_result__free_unpacked(r, NULL);
		s->use_spare = 0;
		return kc_seterr(KC_EBUSY, "the spare child had no GPU");
	}
	snprintf(s->device_name, sizeof(s->device_name), "%s", r->device_name);
	snprintf(s->dev_arch, sizeof(s->dev_arch), "%s", r->arch);
	s->ready_status = r->status;
	if (r->status != KCLAW__EVAL_STATUS__OK)
		KC_WARN("sandbox child: %s", r->message);
	kclaw__eval_result__free_unpacked(r, NULL);
	return 0;
}

static int
super_wait_ready(sbx_super *s)
{
	Kclaw__EvalResult *r = NULL;
	int rv = super_read_result(s->from_child, s->cfg.ready_timeout_ms, &r);

	if (rv != 0) {
		int st = super_drop(s, 1);
		int code = st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
		return kc_seterr(KC_EINTERNAL,
		    "the sandbox child %s did not start (%s; exit status "
		    "%d)%s",
		    s->child_path,
		    rv == KC_ETIMEDOUT ? "no ready message in time"
		                       : "it exited",
		    code,
		    code == 127 ? "; it could not be run or its libraries "
		                  "were not found: put the CUDA toolkit's "
		                  "lib64 (NVRTC, CUPTI, cuBLASLt) on "
		                  "LD_LIBRARY_PATH"
		                : "");
	}
	if (r == NULL) {
		super_drop(s, 1);
		return kc_seterr(KC_EPROTO, "the child's ready frame is bad");
	}
	if ((rv = super_take_ready(s, r)) != 0) {
		super_drop(s, 1);
		return rv;
	}
	s->ready = 1;
	return 0;
}

/* ---- the spare's measurement of the device ---- */

/* The spare is gone or useless: it ends, and a new one starts when one is
 * next wanted. */
static void
super_spare_drop(sbx_super *s)
{
	super_spare *sp = &s->spare;

	if (sp->pid <= 0)
		return;
	kill(sp->pid, SIGKILL);
	if (waitpid(sp->pid, NULL, WNOHANG) != sp->pid)
		super_defer_reap(s, sp->pid);
	super_spare_forget(sp);
}

/* The reply to the spare's measure_device, waited for: a current child
 * may time nothing while the spare measures. A spare that does not
 * answer in time is dropped. */
static void
super_spare_settle(sbx_super *s)
{
	super_spare *sp = &s->spare;
	void *buf;
	size_t len;

	if (!sp->measuring)
		return;
	sp->measuring = 0;
	if (sbx_frame_read(sp->from_child, SUPER_MEASURE_MS, &buf, &len) != 0) {
		KC_WARN("the spare sandbox child did not measure the device "
		        "within %d ms: %s; it is replaced",
		    SUPER_MEASURE_MS, kc_lasterr());
		super_spare_drop(s);
		return;
	}
	free(buf);
	sp->measured = 1;
}

/*
 * While no child runs anything: a spare that has started is asked to
 * measure the device now (its ceilings and the events' cost), so that no
 * evaluation of its own waits for that later and nothing it runs lands
 * beside another child's timing. wait: its reply is read before this
 * returns (a request is about to go to the current child); else the next
 * request's super_spare_settle reads it. A spare still starting (its ready
 * frame not yet sent) is left alone.
 */
static void
super_spare_measure(sbx_super *s, int wait)
{
	Kclaw__EvalRequest m = KCLAW__EVAL_REQUEST__INIT;
	super_spare *sp = &s->spare;
	struct pollfd p = {.fd = sp->from_child, .events = POLLIN};

	if (sp->pid <= 0 || sp->measuring || sp->measured)
		return;
	if (!sp->ready) {
		Kclaw__EvalResult *r = NULL;
		if (poll(&p, 1, 0) != 1)
			return;
		if (super_read_result(sp->from_child, 1000, &r) != 0 ||
		    r == NULL || super_take_ready(s, r) != 0) {
			super_spare_drop(s);
			return;
		}
		sp->ready = 1;
	}
	m.job_id = "measure";
	m.measure_device = 1;
	if (sbx_frame_write(sp->to_child, &m.base) != 0) {
		super_spare_drop(s);
		return;
	}
	sp->measuring = 1;
	if (wait)
		super_spare_settle(s);
}

static int
super_ensure(sbx_super *s)
{
	int rv = 0;

	if (s->pid > 0 && waitpid(s->pid, NULL, WNOHANG) == s->pid) {
		/* Died while idle: its pipes are stale. */
		close(s->to_child);
		close(s->from_child);
		s->pid = 0;
		s->ready = 0;
	}
	if (s->pid <= 0)
		super_promote(s);
	for (int i = 0; i < SUPER_START_TRIES; i++) {
		if (s->pid <= 0 && (rv = super_start(s)) != 0)
			continue;
		if (s->ready || (rv = super_wait_ready(s)) == 0) {
			super_spare_ensure(s);
			return 0;
		}
	}
	return rv;
}

int
sbx_super_open(sbx_super **out, const sbx_super_config *cfg)
{
	sbx_super *s = calloc(1, sizeof(*s));

	if (s == NULL)
		return KC_ENOMEM;
	s->cfg = *cfg;
	snprintf(s->child_path, sizeof(s->child_path), "%s", cfg->child_path);
	snprintf(s->cache_dir, sizeof(s->cache_dir), "%s",
	    cfg->cache_dir ? cfg->cache_dir : "");
	snprintf(s->arch, sizeof(s->arch), "%s", cfg->arch ? cfg->arch : "");
	if (s->cfg.ready_timeout_ms <= 0)
		s->cfg.ready_timeout_ms = 60000;
	s->to_child = s->from_child = -1;
	s->spare.to_child = s->spare.from_child = -1;
	s->cancel_fd = -1;
	s->use_spare = !cfg->no_spare;
	if (getenv("KCLAW_SANDBOX_SPARE") != NULL &&
	    strcmp(getenv("KCLAW_SANDBOX_SPARE"), "0") == 0)
		s->use_spare = 0;
	if (access(s->child_path, X_OK) != 0) {
		free(s);
		return kc_seterr(KC_ENOENT,
		    "sandbox child %s is not executable; build it or pass "
		    "its path",
		    cfg->child_path);
	}
	signal(SIGPIPE, SIG_IGN);
	*out = s;
	return 0;
}

static const char *
super_signame(int sig)
{
	switch (sig) {
	case SIGSEGV: return "SIGSEGV";
	case SIGABRT: return "SIGABRT";
	case SIGBUS: return "SIGBUS";
	case SIGFPE: return "SIGFPE";
	case SIGILL: return "SIGILL";
	case SIGKILL: return "SIGKILL";
	case SIGTERM: return "SIGTERM";
	default: return "signal";
	}
}

void
sbx_super_set_cancel_fd(sbx_super *s, int fd)
{
	s->cancel_fd = fd;
}

/*
 * Waits until the child's answer starts to arrive, the cancel fd fires or
 * the deadline passes: 0, KC_ECANCELED or KC_ETIMEDOUT.
 */
static int
super_wait(sbx_super *s, uint64_t deadline)
{
	for (;;) {
		struct pollfd pfd[2] = {{.fd = s->from_child, .events = POLLIN},
		    {.fd = s->cancel_fd, .events = POLLIN}};
		uint64_t now = kc_mono_ms();
		int r;

		if (now >= deadline)
			return KC_ETIMEDOUT;
		r = poll(pfd, s->cancel_fd >= 0 ? 2 : 1, (int)(deadline - now));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return kc_seterr(KC_EIO, "poll: %s", strerror(errno));
		if (r == 0)
			return KC_ETIMEDOUT;
		if (s->cancel_fd >= 0 && (pfd[1].revents & POLLIN))
			return KC_ECANCELED;
		if (pfd[0].revents != 0)
			return 0;
	}
}

int
sbx_super_eval(sbx_super *s, const Kclaw__EvalRequest *req, int timeout_ms,
    Kclaw__EvalResult **res)
{
	uint64_t t0 = kc_mono_ns();
	Kclaw__EvalResult *r = NULL;
	uint64_t deadline;
	void *buf;
	size_t len;
	int rv, st;

	if ((r = sbx_result_new(req->job_id)) == NULL)
		return KC_ENOMEM;
	if (req->measure_device) {
		sbx_result_status(r, KCLAW__EVAL_STATUS__INTERNAL_ERROR,
		    "measure_device is the sandbox's own request to its spare "
		    "child; leave it unset");
		goto done;
	}
	/* Nothing runs now: a spare measures the device first, unless its
	 * measurement is under way (then it is waited for). */
	super_spare_settle(s);
	super_spare_measure(s, 1);
	if ((rv = super_ensure(s)) != 0) {
		sbx_result_status(r, KCLAW__EVAL_STATUS__INTERNAL_ERROR,
		    "the sandbox could not start its GPU process: %s",
		    kc_lasterr());
		goto done;
	}
	if ((rv = sbx_frame_write(s->to_child, &req->base)) != 0) {
		/* Gone between requests: one fresh start, one more try. */
		super_drop(s, 1);
		if ((rv = super_ensure(s)) != 0 ||
		    (rv = sbx_frame_write(s->to_child, &req->base)) != 0) {
			sbx_result_status(r, KCLAW__EVAL_STATUS__INTERNAL_ERROR,
			    "cannot hand the request to the GPU process: %s",
			    kc_lasterr());
			goto done;
		}
	}
	deadline = kc_mono_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);
	rv = super_wait(s, deadline);
	if (rv == 0) {
		uint64_t now = kc_mono_ms();
		rv = sbx_frame_read(s->from_child,
		    now < deadline ? (int)(deadline - now) : 0, &buf, &len);
	}
	if (rv == KC_ECANCELED) {
		super_drop(s, 1);
		sbx_result_status(r, KCLAW__EVAL_STATUS__CANCELLED,
		    "the evaluation was aborted: its task was cancelled or "
		    "the orchestrator is shutting down");
		goto restart;
	}
	if (rv == 0) {
		Kclaw__EvalResult *got =
		    kclaw__eval_result__unpack(NULL, len, buf);
		free(buf);
		if (got == NULL) {
			super_drop(s, 1);
			sbx_result_status(r, KCLAW__EVAL_STATUS__INTERNAL_ERROR,
			    "the GPU process sent a result that did not "
			    "decode");
			goto restart;
		}
		kclaw__eval_result__free_unpacked(r, NULL);
		r = got;
		if (r->status == KCLAW__EVAL_STATUS__RUNTIME_FAULT) {
			/* The child exits after a fault; replace it. */
			super_retire(s);
			goto restart;
		}
		goto done;
	}
	if (rv == KC_ETIMEDOUT) {
		super_drop(s, 1);
		sbx_result_status(r, KCLAW__EVAL_STATUS__TIMEOUT,
		    "the evaluation did not finish within %d ms (a kernel "
		    "that never ends, or far too slow); the sandbox killed "
		    "it. Check loop bounds and termination conditions",
		    timeout_ms);
		goto restart;
	}
	st = super_drop(s, 0);
	if (st >= 0 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) {
		/* Not the kernel's doing: a fault ends in the child's own
		 * report or SIGSEGV/SIGBUS/SIGABRT, and the watchdog's kill is
		 * a TIMEOUT above. Someone else killed it (the OOM killer, an
		 * operator): the sandbox's failure, so the job is retried
		 * rather than the candidate blamed. */
		sbx_result_status(r, KCLAW__EVAL_STATUS__INTERNAL_ERROR,
		    "the GPU process was killed from outside (SIGKILL) while "
		    "evaluating this candidate; a fresh one was started");
	} else if (st >= 0 && WIFSIGNALED(st)) {
		sbx_result_set(
		    &r->fault_name, "%s", super_signame(WTERMSIG(st)));
		sbx_result_status(r, KCLAW__EVAL_STATUS__RUNTIME_FAULT,
		    "the GPU process died (%s, signal %d) while evaluating "
		    "this candidate; a fresh one was started",
		    super_signame(WTERMSIG(st)), WTERMSIG(st));
	} else {
		sbx_result_set(&r->fault_name, "EXIT_%d",
		    st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1);
		sbx_result_status(r, KCLAW__EVAL_STATUS__RUNTIME_FAULT,
		    "the GPU process exited (status %d) without a result "
		    "while evaluating this candidate; a fresh one was "
		    "started",
		    st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	}
restart:
	/* The spare takes over and a new spare starts; without one, start
	 * the replacement now, so its CUDA start-up overlaps the reply's trip
	 * (the next request waits for its ready frame). */
	if (super_promote(s) == 0)
		super_spare_ensure(s);
	else if (super_start(s) != 0)
		KC_WARN("cannot start a fresh sandbox child: %s", kc_lasterr());
done:
	if (r->device_name == NULL || r->device_name[0] == '\0')
		sbx_result_set(&r->device_name, "%s", s->device_name);
	if (r->arch == NULL || r->arch[0] == '\0')
		sbx_result_set(&r->arch, "%s", s->dev_arch);
	if (r->wall_ms == 0)
		r->wall_ms = (double)(kc_mono_ns() - t0) / 1e6;
	/* Nothing runs until the next request: a spare that is ready
	 * measures now (read by the next request's super_spare_settle). */
	super_spare_measure(s, 0);
	*res = r;
	return 0;
}

const char *
sbx_super_device_name(const sbx_super *s)
{
	return s->device_name;
}

unsigned
sbx_super_starts(const sbx_super *s)
{
	return s->starts;
}

void
sbx_super_close(sbx_super *s)
{
	if (s == NULL)
		return;
	super_drop(s, 0);
	if (s->spare.pid > 0) {
		/* Idle: closing its pipe ends it. */
		close(s->spare.to_child);
		close(s->spare.from_child);
		for (int i = 0; i < 100; i++) {
			if (waitpid(s->spare.pid, NULL, WNOHANG) != 0)
				break;
			if (i == 50)
				kill(s->spare.pid, SIGKILL);
			kc_sleep_ms(10);
		}
	}
	for (int i = 0; i < SUPER_MAX_REAP; i++)
		if (s->reap[i] > 0)
			waitpid(s->reap[i], NULL, 0);
	free(s);
}
