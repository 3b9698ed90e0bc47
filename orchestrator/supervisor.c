/*
 * supervisor.c - `kclaw up`'s process supervision. See supervisor.h.
 *
 * kclawd is started first and stopped last, so workers always have an
 * orchestrator to ask and the table of processes and their events reach
 * it. Events that cannot be delivered (kclawd itself is restarting) wait
 * and go with the next report.
 */
#include "supervisor.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "api.h"
#include "kc_err.h"
#include "kc_log.h"
#include "kc_util.h"
#include "worker.h"

static const char *const sup_roles[SUP_NROLES] = {"", "generator", "feature",
    "planner", "optimizer", "diagnoser", "repairer", "sandbox"};

#define SUP_MAX_PROCS 128
#define SUP_GRACE_MS 5000
#define SUP_HEALTHY_MS 30000 /* a process up this long starts backoff over */
#define SUP_LOOPING 3        /* short lives in a row: the process crash-loops */
#define SUP_TAIL 16384       /* bytes of a log read for its last error */

struct sup_proc {
	char name[64];
	int role; /* 0: kclawd */
	int device;
	pid_t pid;
	uint32_t restarts;
	uint32_t failures; /* consecutive short lives: the backoff's exponent */
	uint64_t started_mono, since_unix_ms;
	uint64_t restart_at;  /* mono ms; 0: running */
	off_t log_start;      /* its log's size when it was last started */
	char last_error[256]; /* the last error line of its last life */
	char killed_why[128]; /* why the watchdog killed it ("" if not) */
};

struct sup {
	const sup_options *opt;
	struct sup_proc procs[SUP_MAX_PROCS];
	size_t n;
	Kclaw__Event *pending[256];
	size_t npending;
	bus_client *api;
	uint64_t last_report;
	unsigned failed_reports;
	/* The watchdog: the last Health asked, the misses in a row, and
	 * whether kclawd answered once since it was started. */
	uint64_t last_health;
	unsigned health_misses;
	bool health_seen;
	char host[64]; /* as the workers it starts name theirs */
};

/* ------------------------------------------------------------- options */

static void
sup_bin(char *dst, const char *env, const char *dir, const char *name)
{
	const char *v = getenv(env);

	if (v && *v)
		snprintf(dst, KC_PATH_MAX, "%s", v);
	else
		snprintf(dst, KC_PATH_MAX, "%s/%s", dir, name);
}

/* A non-negative number from the environment, when set. */
static void
sup_env_u32(const char *name, uint32_t *dst)
{
	const char *v = getenv(name);
	char *end;
	unsigned long n;

	if (v == NULL || *v == '\0')
		return;
	n = strtoul(v, &end, 10);
	if (*end == '\0' && n <= UINT32_MAX)
		*dst = (uint32_t)n;
	else
		KC_WARN("%s=%s is not a number; ignored", name, v);
}

int
sup_set_agents(sup_options *opt, const char *role, unsigned n)
{
	if (strcmp(role, "all") == 0) {
		for (int r = 1; r <= 6; r++)
			opt->agents[r] = n;
		return 0;
	}
	for (int r = 1; r <= 6; r++)
		if (strcmp(role, sup_roles[r]) == 0) {
			opt->agents[r] = n;
			return 0;
		}
	return kc_seterr(KC_EINVAL,
	    "unknown role '%s': use generator, feature, planner, optimizer, "
	    "diagnoser, repairer or all",
	    role);
}

int
sup_options_load(sup_options *opt, const kc_config *cfg)
{
	char self[KC_PATH_MAX], *dir;
	ssize_t n;
	char *text;
	size_t len;
	int rv = 0;

	memset(opt, 0, sizeof(*opt));
	opt->cfg = *cfg;
	opt->gpus = -1;
	opt->backoff_min_ms = 200;
	opt->backoff_max_ms = 30000;
	for (int r = 1; r <= 6; r++)
		opt->agents[r] = 1;
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	self[n > 0 ? n : 0] = '\0';
	dir = dirname(self);
	sup_bin(opt->orch_bin, "KCLAW_ORCH_BIN", dir, "kclawd");
	sup_bin(opt->agent_bin, "KCLAW_AGENT_BIN", dir, "kclaw-agent");
	sup_bin(opt->sandbox_bin, "KCLAW_SANDBOX_BIN", dir, "kclaw-sandbox");
	opt->health_interval_ms = 5000;
	opt->health_misses = 3;
	sup_env_u32("KCLAW_UP_HEALTH_MS", &opt->health_interval_ms);
	sup_env_u32("KCLAW_UP_HEALTH_MISSES", &opt->health_misses);
	if (kc_read_file(cfg->config_path, 1 << 20, &text, &len) != 0) {
		kc_clearerr();
		return 0;
	}
	{
		cJSON *root = cJSON_ParseWithLength(text, len);
		const cJSON *up = cJSON_GetObjectItemCaseSensitive(root, "up");
		const cJSON *agents =
		    cJSON_GetObjectItemCaseSensitive(up, "agents");
		const cJSON *a;
		a = cJSON_GetObjectItemCaseSensitive(up, "health_interval_ms");
		if (cJSON_IsNumber(a) && a->valuedouble >= 0 &&
		    getenv("KCLAW_UP_HEALTH_MS") == NULL)
			opt->health_interval_ms = (uint32_t)a->valuedouble;
		a = cJSON_GetObjectItemCaseSensitive(up, "health_misses");
		if (cJSON_IsNumber(a) && a->valuedouble >= 0 &&
		    getenv("KCLAW_UP_HEALTH_MISSES") == NULL)
			opt->health_misses = (uint32_t)a->valuedouble;
		cJSON_ArrayForEach(a, agents)
		{
			if (!cJSON_IsNumber(a) || a->valuedouble < 0 ||
			    a->valuedouble > 64) {
				rv = kc_seterr(KC_EINVAL,
				    "%s: up.agents.%s must be a number "
				    "0..64",
				    cfg->config_path, a->string);
				break;
			}
			if ((rv = sup_set_agents(opt, a->string,
			         (unsigned)a->valuedouble)) != 0) {
				kc_seterr(rv, "%s: up.agents: %s",
				    cfg->config_path, kc_lasterr());
				break;
			}
		}
		cJSON_Delete(root);
	}
	free(text);
	return rv;
}

int
sup_gpu_count(void)
{
	DIR *d = opendir("/proc/driver/nvidia/gpus");
	struct dirent *e;
	int n = 0;
	FILE *p;
	char line[256];

	if (d) {
		while ((e = readdir(d)) != NULL)
			if (e->d_name[0] != '.')
				n++;
		closedir(d);
		if (n > 0)
			return n;
	}
	if ((p = popen("nvidia-smi -L 2>/dev/null", "r")) == NULL)
		return 0;
	while (fgets(line, sizeof(line), p))
		if (strncmp(line, "GPU ", 4) == 0)
			n++;
	pclose(p);
	return n;
}

/* ------------------------------------------------------------- events */

static void
sup_event(struct sup *s, Kclaw__EventKind kind, const struct sup_proc *p,
    const char *detail, pid_t pid)
{
	Kclaw__Event *ev;

	if (s->npending == KC_ARRAY_LEN(s->pending) ||
	    (ev = malloc(sizeof(*ev))) == NULL) {
		KC_WARN("supervisor: event for %s lost (kclawd unreachable)",
		    p->name);
		return;
	}
	kclaw__event__init(ev);
	ev->kind = kind;
	ev->role = (Kclaw__Role)p->role;
	ev->process = strdup(p->name);
	ev->detail = strdup(detail);
	ev->value = pid; /* PROCESS_CRASHED: kclawd re-issues its jobs */
	ev->time_unix_ms = kc_now_ms();
	s->pending[s->npending++] = ev;
}

/* Sends the process table and pending events to kclawd. */
static void
sup_report(struct sup *s)
{
	Kclaw__SuperviseRequest req = KCLAW__SUPERVISE_REQUEST__INIT;
	Kclaw__ProcessInfo info[SUP_MAX_PROCS], *pinfo[SUP_MAX_PROCS];
	ProtobufCMessage *resp;

	for (size_t i = 0; i < s->n; i++) {
		struct sup_proc *p = &s->procs[i];
		kclaw__process_info__init(&info[i]);
		info[i].name = p->name;
		info[i].role = (Kclaw__Role)p->role;
		info[i].pid = (uint32_t)(p->pid > 0 ? p->pid : 0);
		/* Died young SUP_LOOPING times in a row, and not up long
		 * since: crash-looping. */
		bool looping = p->failures >= SUP_LOOPING &&
		    (p->restart_at ||
		        kc_mono_ms() - p->started_mono < SUP_HEALTHY_MS);
		info[i].state = looping ? "crash-looping"
		    : p->pid > 0        ? "running"
		    : p->restart_at     ? "restarting"
		                        : "stopped";
		info[i].last_error = p->last_error;
		info[i].restarts = p->restarts;
		info[i].since_unix_ms = p->since_unix_ms;
		info[i].device =
		    p->role == KCLAW__ROLE__SANDBOX ? p->device : -1;
		pinfo[i] = &info[i];
	}
	req.processes = pinfo;
	req.n_processes = s->n;
	req.host = s->host;
	req.events = s->pending;
	req.n_events = s->npending;
	if (kc_api_call(s->api, "Supervise", &req.base, s->opt->cfg.token, 1000,
	        &kclaw__supervise_response__descriptor, &resp) != 0) {
		/* kclawd is down or busy: try again later. After a few
		 * misses dial afresh: an NNG dialer can stop reconnecting to
		 * a listener that restarted many times. */
		if (++s->failed_reports % 3 == 0) {
			bus_client *c;
			if (bus_client_open(&c, s->opt->cfg.api_url, 0) == 0) {
				bus_client_close(s->api);
				s->api = c;
			}
		}
		return;
	}
	s->failed_reports = 0;
	protobuf_c_message_free_unpacked(resp, NULL);
	for (size_t i = 0; i < s->npending; i++)
		kclaw__event__free_unpacked(s->pending[i], NULL);
	s->npending = 0;
	s->last_report = kc_mono_ms();
}

/* ----------------------------------------------------------- processes */

static int
sup_spawn(struct sup *s, struct sup_proc *p)
{
	const sup_options *o = s->opt;
	char log[KC_PATH_MAX], dev[16];
	const char *argv[12];
	int argc = 0;
	pid_t pid;

	if (p->role == 0) {
		argv[argc++] = o->orch_bin;
	} else if (p->role == KCLAW__ROLE__SANDBOX) {
		argv[argc++] = o->sandbox_bin;
		snprintf(dev, sizeof(dev), "%d", p->device);
		argv[argc++] = "--device";
		argv[argc++] = dev;
	} else {
		argv[argc++] = o->agent_bin;
		argv[argc++] = "--role";
		argv[argc++] = sup_roles[p->role];
	}
	if (p->role != 0) {
		argv[argc++] = "--work-url";
		argv[argc++] = o->cfg.work_url;
	}
	argv[argc++] = "--home";
	argv[argc++] = o->cfg.home;
	argv[argc] = NULL;
	snprintf(log, sizeof(log), "%s/%s.log", o->cfg.run_dir, p->name);
	{
		struct stat st;
		p->log_start = stat(log, &st) == 0 ? st.st_size : 0;
	}
	if ((pid = fork()) < 0)
		return kc_seterr(KC_EIO, "cannot start %s: fork: %s", p->name,
		    strerror(errno));
	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
			close(fd);
		}
		/* The supervisor's signals are its own: Ctrl-C in a terminal
		 * reaches the whole group, and the supervisor orders the
		 * shutdown. */
		setpgid(0, 0);
		execv(argv[0], (char *const *)argv);
		fprintf(
		    stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	p->pid = pid;
	p->started_mono = kc_mono_ms();
	p->since_unix_ms = kc_now_ms();
	p->restart_at = 0;
	return 0;
}

static struct sup_proc *
sup_add(struct sup *s, int role, int device, unsigned index)
{
	struct sup_proc *p;

	if (s->n == SUP_MAX_PROCS)
		return NULL;
	p = &s->procs[s->n++];
	memset(p, 0, sizeof(*p));
	p->role = role;
	p->device = device;
	if (role == 0)
		snprintf(p->name, sizeof(p->name), "kclawd");
	else if (role == KCLAW__ROLE__SANDBOX)
		snprintf(p->name, sizeof(p->name), "sandbox-%d", device);
	else
		snprintf(p->name, sizeof(p->name), "agent-%s-%u",
		    sup_roles[role], index);
	return p;
}

/* Whether line (NUL-terminated) says something went wrong: a kc_log error
 * line, a sanitizer's report, or the supervisor's own exec failure. */
static const char *
sup_error_text(const char *line)
{
	const char *e;

	if ((e = strstr(line, "] error: ")) != NULL)
		return e + 9; /* kc_log: "TIME name[pid] error: MESSAGE" */
	if (strstr(line, "ERROR: ") != NULL ||
	    strncmp(line, "cannot run ", 11) == 0 ||
	    strstr(line, "fatal") != NULL)
		return line;
	return NULL;
}

/*
 * The last error line p's log got since p was started, into p->last_error
 * ("" when it wrote none): a process that crash-loops says why there
 * ("no LLM model configured"), and `kclaw status` shows it.
 */
static void
sup_last_error(const struct sup *s, struct sup_proc *p)
{
	char path[KC_PATH_MAX], buf[SUP_TAIL + 1], *line, *save = NULL;
	struct stat st;
	off_t from;
	ssize_t n;
	int fd;

	p->last_error[0] = '\0';
	snprintf(path, sizeof(path), "%s/%s.log", s->opt->cfg.run_dir, p->name);
	if ((fd = open(path, O_RDONLY)) < 0)
		return;
	if (fstat(fd, &st) != 0 || st.st_size <= p->log_start) {
		close(fd);
		return;
	}
	from = st.st_size - p->log_start > SUP_TAIL ? st.st_size - SUP_TAIL
	                                            : p->log_start;
	n = pread(fd, buf, SUP_TAIL, from);
	close(fd);
	if (n <= 0)
		return;
	buf[n] = '\0';
	for (line = strtok_r(buf, "\n", &save); line != NULL;
	     line = strtok_r(NULL, "\n", &save)) {
		const char *e = sup_error_text(line);
		if (e != NULL)
			kc_strlcpy(p->last_error, e, sizeof(p->last_error));
	}
}

static void
sup_exited(struct sup *s, struct sup_proc *p, int status)
{
	char text[512];
	uint64_t lived = kc_mono_ms() - p->started_mono;
	uint64_t backoff;
	pid_t pid = p->pid;

	if (p->killed_why[0] != '\0')
		snprintf(text, sizeof(text), "%s (pid %d) killed: %s", p->name,
		    (int)pid, p->killed_why);
	else if (WIFSIGNALED(status))
		snprintf(text, sizeof(text), "%s (pid %d) killed by signal %d",
		    p->name, (int)pid, WTERMSIG(status));
	else
		snprintf(text, sizeof(text), "%s (pid %d) exited with %d",
		    p->name, (int)pid, WEXITSTATUS(status));
	sup_last_error(s, p);
	if (p->last_error[0] != '\0') {
		size_t k = strlen(text);
		snprintf(text + k, sizeof(text) - k, "; last error: %s",
		    p->last_error);
	}
	p->failures = lived >= SUP_HEALTHY_MS ? 0 : p->failures + 1;
	backoff = s->opt->backoff_min_ms;
	for (uint32_t i = 1;
	     i < p->failures && backoff < s->opt->backoff_max_ms; i++)
		backoff *= 2;
	if (backoff > s->opt->backoff_max_ms)
		backoff = s->opt->backoff_max_ms;
	p->pid = 0;
	p->restart_at = kc_mono_ms() + backoff;
	KC_WARN("%s; restarting in %llu ms", text, (unsigned long long)backoff);
	sup_event(s, KCLAW__EVENT_KIND__PROCESS_CRASHED, p, text, pid);
}

/*
 * The watchdog: a kclawd that is running but does not answer Health (a
 * wedged loop, a stopped process) or lists an unhealthy listener is not
 * restarted by waitpid alone. After health_misses such answers in a row
 * it is killed; sup_exited restarts it and the restart says why. Misses
 * count only once this life of kclawd answered, so a slow start is not
 * taken for a wedge.
 */
static void
sup_watchdog(struct sup *s, struct sup_proc *p)
{
	Kclaw__HealthRequest req = KCLAW__HEALTH_REQUEST__INIT;
	Kclaw__HealthResponse *h = NULL;
	const uint32_t every = s->opt->health_interval_ms;
	char why[128] = "";

	if (every == 0 || s->opt->health_misses == 0 || p->pid <= 0 ||
	    kc_mono_ms() - s->last_health < every)
		return;
	s->last_health = kc_mono_ms();
	if (kc_api_call(s->api, "Health", &req.base, s->opt->cfg.token,
	        every < 1000 ? 1000 : every,
	        &kclaw__health_response__descriptor,
	        (ProtobufCMessage **)&h) != 0) {
		kc_clearerr();
		snprintf(why, sizeof(why),
		    "kclawd did not answer Health for "
		    "%.3g s",
		    (double)every * (s->health_misses + 1) / 1000);
	} else {
		for (size_t i = 0; i < h->n_listeners; i++)
			if (!h->listeners[i]->healthy) {
				snprintf(why, sizeof(why),
				    "kclawd's %s listener (%s) is unhealthy",
				    h->listeners[i]->name,
				    h->listeners[i]->url);
				break;
			}
		kclaw__health_response__free_unpacked(h, NULL);
		s->health_seen = true;
	}
	if (why[0] == '\0') {
		s->health_misses = 0;
		return;
	}
	if (!s->health_seen || ++s->health_misses < s->opt->health_misses)
		return;
	KC_WARN("%s (pid %d): killed to be restarted", why, (int)p->pid);
	kc_strlcpy(p->killed_why, why, sizeof(p->killed_why));
	kill(p->pid, SIGKILL);
	s->health_misses = 0;
	s->health_seen = false;
}

static void
sup_stop_all(struct sup *s)
{
	uint64_t end;

	/* Workers first, kclawd last: it records that they stopped. */
	for (int pass = 0; pass < 2; pass++) {
		for (size_t i = 0; i < s->n; i++)
			if ((s->procs[i].role == 0) == (pass == 1) &&
			    s->procs[i].pid > 0)
				kill(s->procs[i].pid, SIGTERM);
		end = kc_mono_ms() + SUP_GRACE_MS;
		for (;;) {
			bool left = false;
			for (size_t i = 0; i < s->n; i++) {
				struct sup_proc *p = &s->procs[i];
				if ((p->role == 0) != (pass == 1) ||
				    p->pid <= 0)
					continue;
				if (waitpid(p->pid, NULL, WNOHANG) == p->pid)
					p->pid = 0;
				else
					left = true;
			}
			if (!left)
				break;
			if (kc_mono_ms() >= end) {
				for (size_t i = 0; i < s->n; i++) {
					struct sup_proc *p = &s->procs[i];
					if ((p->role == 0) == (pass == 1) &&
					    p->pid > 0) {
						KC_WARN(
						    "%s did not stop; killed",
						    p->name);
						kill(p->pid, SIGKILL);
						waitpid(p->pid, NULL, 0);
						p->pid = 0;
					}
				}
				break;
			}
			kc_sleep_ms(20);
		}
		if (pass == 0) {
			for (size_t i = 0; i < s->n; i++)
				if (s->procs[i].role != 0)
					s->procs[i].restart_at = 0;
			sup_report(s);
		}
	}
}

int
sup_run(const sup_options *opt, volatile sig_atomic_t *stop)
{
	struct sup *s = calloc(1, sizeof(*s));
	int gpus = opt->gpus >= 0 ? opt->gpus : sup_gpu_count();
	int rv;

	if (s == NULL)
		return KC_ENOMEM;
	s->opt = opt;
	kc_worker_host(s->host, sizeof(s->host));
	if ((rv = kc_config_prepare(&opt->cfg)) != 0 ||
	    (rv = bus_client_open(&s->api, opt->cfg.api_url, 0)) != 0)
		goto out;
	sup_add(s, 0, 0, 0);
	for (int r = 1; r <= 6; r++)
		for (unsigned i = 0; i < opt->agents[r]; i++)
			sup_add(s, r, 0, i);
	/* Without a GPU one sandbox still runs: it answers NO_DEVICE, and
	 * tasks fail saying so instead of waiting forever. */
	for (int g = 0; g < (gpus > 0 ? gpus : 1); g++)
		sup_add(s, KCLAW__ROLE__SANDBOX, g, 0);
	if (gpus == 0)
		KC_WARN("no NVIDIA GPU visible; one sandbox runs anyway and "
		        "answers NO_DEVICE");
	for (size_t i = 0; i < s->n; i++) {
		if ((rv = sup_spawn(s, &s->procs[i])) != 0)
			goto out;
		sup_event(s, KCLAW__EVENT_KIND__PROCESS_STARTED, &s->procs[i],
		    s->procs[i].name, s->procs[i].pid);
	}
	KC_INFO("supervising %zu processes (%d GPU(s))", s->n, gpus);
	while (!*stop) {
		int status;
		pid_t pid;
		while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
			for (size_t i = 0; i < s->n; i++)
				if (s->procs[i].pid == pid)
					sup_exited(s, &s->procs[i], status);
		for (size_t i = 0; i < s->n && !*stop; i++) {
			struct sup_proc *p = &s->procs[i];
			char text[320];
			if (p->pid > 0 || p->restart_at == 0 ||
			    kc_mono_ms() < p->restart_at)
				continue;
			if (sup_spawn(s, p) != 0) {
				KC_ERROR("%s", kc_lasterr());
				p->restart_at =
				    kc_mono_ms() + opt->backoff_max_ms;
				continue;
			}
			p->restarts++;
			snprintf(text, sizeof(text),
			    "%s restarted (pid %d, "
			    "restart %u)%s%s",
			    p->name, (int)p->pid, p->restarts,
			    p->killed_why[0] ? ": " : "", p->killed_why);
			p->killed_why[0] = '\0';
			sup_event(s, KCLAW__EVENT_KIND__PROCESS_RESTARTED, p,
			    text, p->pid);
		}
		if (s->npending || kc_mono_ms() - s->last_report >= 1000)
			sup_report(s);
		sup_watchdog(s, &s->procs[0]);
		kc_sleep_ms(50);
	}
	{
		Kclaw__Event *ev;
		sup_event(s, KCLAW__EVENT_KIND__SHUTDOWN, &s->procs[0],
		    "kclaw up: shutting down", 0);
		ev = s->npending ? s->pending[s->npending - 1] : NULL;
		if (ev && ev->kind == KCLAW__EVENT_KIND__SHUTDOWN) {
			free(ev->process);
			ev->process = strdup("supervisor");
		}
		sup_report(s);
	}
	rv = 0;
out:
	sup_stop_all(s);
	for (size_t i = 0; i < s->npending; i++)
		kclaw__event__free_unpacked(s->pending[i], NULL);
	bus_client_close(s->api);
	free(s);
	return rv;
}
