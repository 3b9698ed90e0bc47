/*
 * sandbox_main.c - kclaw-sandbox, the parent: pulls evaluation jobs from
 * the orchestrator (common/worker.h) and runs each in the GPU child.
 *
 *   kclaw-sandbox [--device N] [--arch sm_XX] [--work-url URL] [--home DIR]
 *                 [--events-url URL] [--child PATH]
 *
 * It also listens to the orchestrator's events (DESIGN.md "Processes"): a
 * cancelled task aborts its evaluation in flight (CANCELLED) and a
 * shutdown stops the sandbox, instead of either running to its deadline.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "blobcache.h"
#include "bus.h"
#include "kc_config.h"
#include "kc_err.h"
#include "kc_log.h"
#include "kc_util.h"
#include "sandbox.h"
#include "worker.h"

/* Long-poll wait for a job before asking again. */
#define SANDBOX_POLL_MS 30000
/* Deadline when neither the request nor the task gives one. */
#define SANDBOX_DEFAULT_TIMEOUT_MS 120000

static volatile sig_atomic_t sandbox_stop;

/* The control-event listener: a thread that turns "task.<id>.
 * task_cancelled" for the task in flight, or "system.shutdown", into a
 * byte on a pipe that the supervision loop polls. */
typedef struct {
	bus_sub *sub;
	pthread_t thread;
	pthread_mutex_t mtx;
	char task_id[160]; /* the evaluation in flight; "" when idle */
	int pipe[2];
	volatile int quit;
} sandbox_ctl;

static void *
sandbox_ctl_run(void *arg)
{
	sandbox_ctl *c = arg;

	while (!c->quit) {
		char *topic = NULL, want[200];
		void *data = NULL;
		size_t len;
		int fire = 0;

		if (bus_sub_recv(c->sub, 200, &topic, &data, &len) != 0)
			continue;
		if (strcmp(topic, "system.shutdown") == 0) {
			sandbox_stop = 1;
			fire = 1;
		} else {
			pthread_mutex_lock(&c->mtx);
			snprintf(want, sizeof(want), "task.%s.task_cancelled",
			    c->task_id);
			fire =
			    c->task_id[0] != '\0' && strcmp(topic, want) == 0;
			pthread_mutex_unlock(&c->mtx);
		}
		if (fire && write(c->pipe[1], "x", 1) < 0 && errno != EAGAIN)
			KC_WARN("control pipe: %s", strerror(errno));
		free(topic);
		free(data);
	}
	return NULL;
}

static int
sandbox_ctl_open(sandbox_ctl *c, const char *url)
{
	memset(c, 0, sizeof(*c));
	c->pipe[0] = c->pipe[1] = -1;
	pthread_mutex_init(&c->mtx, NULL);
	if (pipe2(c->pipe, O_CLOEXEC | O_NONBLOCK) != 0)
		return kc_seterr(KC_EIO, "pipe: %s", strerror(errno));
	if (bus_sub_open(&c->sub, url, 0) != 0 ||
	    bus_sub_subscribe(c->sub, "task.") != 0 ||
	    bus_sub_subscribe(c->sub, "system.shutdown") != 0 ||
	    pthread_create(&c->thread, NULL, sandbox_ctl_run, c) != 0) {
		if (c->sub != NULL)
			bus_sub_close(c->sub);
		c->sub = NULL;
		close(c->pipe[0]);
		close(c->pipe[1]);
		c->pipe[0] = c->pipe[1] = -1;
		return kc_seterr(KC_EBUS, "cannot listen to %s", url);
	}
	return 0;
}

/* Names the task in flight (NULL: none) and forgets earlier signals. */
static void
sandbox_ctl_track(sandbox_ctl *c, const char *task_id)
{
	char junk[64];

	pthread_mutex_lock(&c->mtx);
	snprintf(c->task_id, sizeof(c->task_id), "%s", task_id ? task_id : "");
	pthread_mutex_unlock(&c->mtx);
	while (c->pipe[0] >= 0 && read(c->pipe[0], junk, sizeof(junk)) > 0)
		;
}

static void
sandbox_ctl_close(sandbox_ctl *c)
{
	if (c->sub != NULL) {
		c->quit = 1;
		pthread_join(c->thread, NULL);
		bus_sub_close(c->sub);
	}
	if (c->pipe[0] >= 0) {
		close(c->pipe[0]);
		close(c->pipe[1]);
	}
	pthread_mutex_destroy(&c->mtx);
}

static void
sandbox_on_signal(int sig)
{
	(void)sig;
	sandbox_stop = 1;
}

static void
sandbox_usage(FILE *f)
{
	fprintf(f,
	    "usage: kclaw-sandbox [--device N] [--arch sm_XX] [--work-url "
	    "URL] [--home DIR]\n                     [--events-url URL] "
	    "[--child "
	    "PATH]\n\n"
	    "Serves GPU evaluations for the orchestrator at URL (default: the "
	    "deployment's work address). Without a GPU it still starts and "
	    "answers NO_DEVICE (compile-only requests are served).\n");
}

/* The evaluation's deadline: the request's, else the task's, else the
 * job's, else the default. */
static int
sandbox_timeout_ms(const Kclaw__WorkReply *job)
{
	const Kclaw__EvalRequest *req = job->eval;
	uint64_t now = kc_now_ms();

	if (req->options != NULL && req->options->timeout_ms > 0)
		return (int)req->options->timeout_ms;
	if (req->task != NULL && req->task->params != NULL &&
	    req->task->params->eval_timeout_s > 0)
		return (int)req->task->params->eval_timeout_s * 1000;
	if (job->deadline_unix_ms > now + 1000)
		return (int)(job->deadline_unix_ms - now - 500);
	return SANDBOX_DEFAULT_TIMEOUT_MS;
}

int
main(int argc, char **argv)
{
	const char *work_url = NULL, *home = NULL, *arch = NULL;
	const char *child_path = NULL, *events_url = NULL;
	sandbox_ctl ctl;
	int have_ctl = 0;
	char self[PATH_MAX], child_buf[PATH_MAX + 32], cache[KC_PATH_MAX + 32];
	Kclaw__EvalResult *last = NULL;
	sbx_super_config scfg = {0};
	sbx_super *sup = NULL;
	kc_worker *w = NULL;
	kc_blob_cache blobs;
	kc_config cfg;
	char name[64];
	int device = 0, rv, code = 0;
	ssize_t n;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		int more = i + 1 < argc;
		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			sandbox_usage(stdout);
			return 0;
		} else if (strcmp(a, "--device") == 0 && more) {
			char *end;
			long d = strtol(argv[++i], &end, 10);
			if (*end != '\0' || d < 0 || d > 1024) {
				fprintf(stderr,
				    "kclaw-sandbox: --device needs a GPU "
				    "index (0, 1, ...), not '%s'\n",
				    argv[i]);
				return 2;
			}
			device = (int)d;
		} else if (strcmp(a, "--arch") == 0 && more) {
			arch = argv[++i];
		} else if (strcmp(a, "--work-url") == 0 && more) {
			work_url = argv[++i];
		} else if (strcmp(a, "--home") == 0 && more) {
			home = argv[++i];
		} else if (strcmp(a, "--events-url") == 0 && more) {
			events_url = argv[++i];
		} else if (strcmp(a, "--child") == 0 && more) {
			child_path = argv[++i];
		} else {
			fprintf(stderr,
			    "kclaw-sandbox: unknown argument '%s'\n", a);
			sandbox_usage(stderr);
			return 2;
		}
	}
	snprintf(name, sizeof(name), "sandbox-%d", device);
	kc_log_init(name);
	if ((rv = kc_config_load(&cfg, home)) != 0) {
		fprintf(stderr, "kclaw-sandbox: %s\n", kc_lasterr());
		return 1;
	}
	if (work_url == NULL)
		work_url = cfg.work_url;
	if (child_path == NULL) {
		/* The child lives beside this binary. */
		if ((n = readlink("/proc/self/exe", self, sizeof(self) - 1)) <
		    0) {
			fprintf(stderr, "kclaw-sandbox: cannot find myself\n");
			return 1;
		}
		self[n] = '\0';
		snprintf(child_buf, sizeof(child_buf), "%s/kclaw-sandbox-child",
		    dirname(self));
		child_path = child_buf;
	}
	snprintf(cache, sizeof(cache), "%s/cache/cubin", cfg.home);
	scfg.child_path = child_path;
	scfg.device = device;
	scfg.cache_dir = cache;
	scfg.arch = arch;
	if ((rv = sbx_super_open(&sup, &scfg)) != 0) {
		fprintf(stderr, "kclaw-sandbox: %s\n", kc_lasterr());
		return 1;
	}
	if ((rv = kc_worker_open(&w, work_url, KCLAW__ROLE__SANDBOX, device,
	         NULL, cfg.token)) != 0) {
		fprintf(stderr, "kclaw-sandbox: cannot use %s: %s\n", work_url,
		    kc_lasterr());
		sbx_super_close(sup);
		return 1;
	}
	/* Tensors by hash come from the orchestrator into this home's cache:
	 * no folder is shared with its host (common/blobcache.h). */
	if ((rv = kc_blob_cache_init(&blobs, &cfg)) != 0) {
		fprintf(stderr, "kclaw-sandbox: %s\n", kc_lasterr());
		kc_worker_close(w);
		sbx_super_close(sup);
		return 1;
	}
	if (events_url == NULL)
		events_url = cfg.events_url;
	if (sandbox_ctl_open(&ctl, events_url) == 0) {
		have_ctl = 1;
		sbx_super_set_cancel_fd(sup, ctl.pipe[0]);
	} else {
		KC_WARN("no control events from %s (%s): cancellations wait "
		        "for the deadline",
		    events_url, kc_lasterr());
	}
	signal(SIGINT, sandbox_on_signal);
	signal(SIGTERM, sandbox_on_signal);
	KC_INFO("serving GPU %d for %s", device, work_url);
	while (!sandbox_stop) {
		Kclaw__WorkReply *job = NULL;

		rv = kc_worker_next(w, NULL, last, SANDBOX_POLL_MS, &job);
		if (rv == KC_ETIMEDOUT)
			continue; /* keep `last` to send again */
		if (last != NULL) {
			kclaw__eval_result__free_unpacked(last, NULL);
			last = NULL;
		}
		if (rv == KC_ECANCELED) {
			KC_INFO("the orchestrator asked this sandbox to stop");
			break;
		}
		if (rv != 0) {
			KC_ERROR("work: %s", kc_lasterr());
			code = 1;
			break;
		}
		if (job->job_id == NULL || job->job_id[0] == '\0' ||
		    job->eval == NULL) {
			kclaw__work_reply__free_unpacked(job, NULL);
			continue;
		}
		if (job->eval->job_id == NULL || job->eval->job_id[0] == '\0')
			job->eval->job_id = job->job_id;
		if (have_ctl)
			sandbox_ctl_track(&ctl, job->eval->task_id);
		if (kc_blob_resolve_spec(&blobs, w, job->eval->task) != 0) {
			/* The sandbox's failure, not the candidate's: the
			 * orchestrator gives the job to a worker again. */
			last = sbx_result_new(job->job_id);
			sbx_result_status(last,
			    KCLAW__EVAL_STATUS__INTERNAL_ERROR,
			    "cannot fetch the task's tensors from %s: %s",
			    work_url, kc_lasterr());
		} else {
			sbx_super_eval(
			    sup, job->eval, sandbox_timeout_ms(job), &last);
		}
		if (have_ctl)
			sandbox_ctl_track(&ctl, NULL);
		if (strcmp(last->job_id, job->job_id) != 0)
			sbx_result_set(&last->job_id, "%s", job->job_id);
		KC_INFO("job %s: %s (%.0f ms)", job->job_id,
		    sbx_status_name(last->status), last->wall_ms);
		if (job->eval->job_id == job->job_id)
			job->eval->job_id = NULL;
		kclaw__work_reply__free_unpacked(job, NULL);
	}
	if (last != NULL)
		kclaw__eval_result__free_unpacked(last, NULL);
	kc_worker_close(w);
	sbx_super_close(sup);
	if (have_ctl)
		sandbox_ctl_close(&ctl);
	return code;
}
