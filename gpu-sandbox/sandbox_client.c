/*
 * sandbox_client.c - a one-sandbox orchestrator (see sandbox_client.h).
 */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "api.h"
#include "bus.h"
#include "kc_err.h"
#include "kc_util.h"
#include "sandbox.h"
#include "sandbox_client.h"

#define CLIENT_QUEUE 8

struct sbx_session {
	bus_server *srv;
	pthread_mutex_t mtx;
	pthread_cond_t cv;
	bus_call *queue[CLIENT_QUEUE];
	int nqueue;
	bus_call *held; /* the sandbox's latest request, not yet answered */
	pid_t pid;
	char dir[256];
	char url[320];
};

static void
client_on_request(void *arg, bus_call *call)
{
	sbx_session *s = arg;

	pthread_mutex_lock(&s->mtx);
	if (s->nqueue == CLIENT_QUEUE) {
		pthread_mutex_unlock(&s->mtx);
		bus_call_drop(call);
		return;
	}
	s->queue[s->nqueue++] = call;
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mtx);
}

static int client_reply(bus_call *c, const Kclaw__WorkReply *rep);

/* A session holds no blob store: its tasks name tensors by path. */
static void
client_no_blobs(bus_call *c, const char *hash)
{
	Kclaw__WorkReply rep = KCLAW__WORK_REPLY__INIT;
	Kclaw__BlobChunk bc = KCLAW__BLOB_CHUNK__INIT;

	bc.hash = (char *)(hash ? hash : "");
	bc.error = "blob is not in this orchestrator's store: `kclaw eval` "
	           "serves no blobs; name the tensors by path";
	rep.blob = &bc;
	client_reply(c, &rep);
}

/* Waits for the sandbox's next request (decoded); checks it is alive. */
static int
client_next(
    sbx_session *s, int timeout_ms, bus_call **call, Kclaw__WorkRequest **wr)
{
	uint64_t deadline = kc_mono_ms() + (uint64_t)timeout_ms;
	const void *data;
	size_t len;

	for (;;) {
		bus_call *c = NULL;
		int status;

		pthread_mutex_lock(&s->mtx);
		if (s->nqueue == 0) {
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += 100 * 1000000L;
			if (ts.tv_nsec >= 1000000000L) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000L;
			}
			pthread_cond_timedwait(&s->cv, &s->mtx, &ts);
		}
		if (s->nqueue > 0) {
			c = s->queue[0];
			memmove(s->queue, s->queue + 1,
			    (size_t)(--s->nqueue) * sizeof(*s->queue));
		}
		pthread_mutex_unlock(&s->mtx);
		if (c != NULL) {
			data = bus_call_data(c, &len);
			*wr = kclaw__work_request__unpack(NULL, len, data);
			if (*wr == NULL) {
				bus_call_drop(c);
				continue;
			}
			if ((*wr)->blob != NULL) {
				client_no_blobs(c, (*wr)->blob->hash);
				kclaw__work_request__free_unpacked(*wr, NULL);
				continue;
			}
			*call = c;
			return 0;
		}
		if (s->pid > 0 && waitpid(s->pid, &status, WNOHANG) == s->pid) {
			s->pid = 0;
			return kc_seterr(KC_ECLOSED,
			    "the sandbox exited (%s %d); its log above says "
			    "why",
			    WIFEXITED(status) ? "status" : "signal",
			    WIFEXITED(status) ? WEXITSTATUS(status)
			                      : WTERMSIG(status));
		}
		if (kc_mono_ms() >= deadline)
			return kc_seterr(KC_ETIMEDOUT,
			    "the sandbox did not answer within %d ms",
			    timeout_ms);
	}
}

static int
client_reply(bus_call *c, const Kclaw__WorkReply *rep)
{
	uint8_t *buf;
	size_t len;
	int rv;

	if ((rv = kc_pb_pack(&rep->base, &buf, &len)) != 0) {
		bus_call_drop(c);
		return rv;
	}
	rv = bus_call_reply(c, buf, len);
	free(buf);
	return rv;
}

static void
client_find_sandbox(const sbx_client_opts *o, char *out, size_t n)
{
	const char *bin = getenv("KCLAW_BIN");
	char self[PATH_MAX];
	ssize_t len;

	if (o->sandbox_bin != NULL) {
		snprintf(out, n, "%s", o->sandbox_bin);
		return;
	}
	if (bin != NULL && *bin != '\0') {
		snprintf(out, n, "%s/kclaw-sandbox", bin);
		if (access(out, X_OK) == 0)
			return;
	}
	if ((len = readlink("/proc/self/exe", self, sizeof(self) - 1)) > 0) {
		self[len] = '\0';
		snprintf(out, n, "%s/kclaw-sandbox", dirname(self));
		return;
	}
	snprintf(out, n, "kclaw-sandbox");
}

int
sbx_session_open(sbx_session **out, const sbx_client_opts *o)
{
	char bin[PATH_MAX], dev[16];
	const char *tmp = getenv("TMPDIR");
	Kclaw__WorkRequest *wr;
	sbx_session *s;
	char *argv[16];
	int argc = 0, rv;

	if ((s = calloc(1, sizeof(*s))) == NULL)
		return KC_ENOMEM;
	pthread_mutex_init(&s->mtx, NULL);
	pthread_cond_init(&s->cv, NULL);
	snprintf(s->dir, sizeof(s->dir), "%s/kclaw-eval-XXXXXX",
	    tmp && strlen(tmp) < 80 ? tmp : "/tmp");
	if (mkdtemp(s->dir) == NULL) {
		rv = kc_seterr(KC_EIO, "cannot create a folder in %s: %s",
		    tmp ? tmp : "/tmp", strerror(errno));
		free(s);
		return rv;
	}
	snprintf(s->url, sizeof(s->url), "ipc://%s/work.ipc", s->dir);
	if ((rv = bus_server_open(&s->srv, s->url, 4, BUS_DEFAULT_MAX_MSG,
	         client_on_request, s)) != 0) {
		rmdir(s->dir);
		free(s);
		return rv;
	}
	client_find_sandbox(o, bin, sizeof(bin));
	snprintf(dev, sizeof(dev), "%d", o->device);
	argv[argc++] = bin;
	argv[argc++] = "--work-url";
	argv[argc++] = s->url;
	argv[argc++] = "--device";
	argv[argc++] = dev;
	if (o->arch != NULL) {
		argv[argc++] = "--arch";
		argv[argc++] = (char *)o->arch;
	}
	if (o->home != NULL) {
		argv[argc++] = "--home";
		argv[argc++] = (char *)o->home;
	}
	if (o->events_url != NULL) {
		argv[argc++] = "--events-url";
		argv[argc++] = (char *)o->events_url;
	}
	if (o->child_path != NULL) {
		argv[argc++] = "--child";
		argv[argc++] = (char *)o->child_path;
	}
	argv[argc] = NULL;
	if ((s->pid = fork()) < 0) {
		rv = kc_seterr(KC_EIO, "fork: %s", strerror(errno));
		goto fail;
	}
	if (s->pid == 0) {
		/* Quiet unless asked: the caller prints the result. */
		setenv("KCLAW_LOG",
		    getenv("KCLAW_LOG") ? getenv("KCLAW_LOG") : "warn", 1);
		execv(bin, argv);
		fprintf(
		    stderr, "kclaw: cannot run %s: %s\n", bin, strerror(errno));
		_exit(127);
	}
	rv = client_next(s,
	    o->start_timeout_ms > 0 ? o->start_timeout_ms : 60000, &s->held,
	    &wr);
	if (rv != 0) {
		kc_seterr(rv, "%s (%s)", kc_lasterr(), bin);
		goto fail;
	}
	kclaw__work_request__free_unpacked(wr, NULL);
	*out = s;
	return 0;
fail:
	sbx_session_close(s);
	return rv;
}

int
sbx_session_eval(sbx_session *s, Kclaw__EvalRequest *req, int timeout_ms,
    Kclaw__EvalResult **res)
{
	Kclaw__WorkReply rep = KCLAW__WORK_REPLY__INIT;
	char id[17];
	int rv;

	if (s->held == NULL)
		return kc_seterr(KC_ECLOSED, "the sandbox is not waiting");
	if (req->job_id == NULL || req->job_id[0] == '\0') {
		kc_new_id(id);
		req->job_id = strdup(id);
		if (req->job_id == NULL)
			return KC_ENOMEM;
	}
	rep.job_id = req->job_id;
	rep.eval = req;
	rv = client_reply(s->held, &rep);
	s->held = NULL;
	if (rv != 0)
		return rv;
	for (;;) {
		Kclaw__WorkRequest *wr;
		bus_call *c;

		if ((rv = client_next(s, timeout_ms, &c, &wr)) != 0)
			return rv;
		if (s->held != NULL)
			bus_call_drop(s->held);
		s->held = c;
		if (wr->eval_result != NULL &&
		    wr->eval_result->job_id != NULL &&
		    strcmp(wr->eval_result->job_id, req->job_id) == 0) {
			*res = wr->eval_result;
			wr->eval_result = NULL;
			kclaw__work_request__free_unpacked(wr, NULL);
			return 0;
		}
		kclaw__work_request__free_unpacked(wr, NULL);
	}
}

pid_t
sbx_session_pid(const sbx_session *s)
{
	return s->pid;
}

void
sbx_session_close(sbx_session *s)
{
	Kclaw__WorkReply rep = KCLAW__WORK_REPLY__INIT;
	char path[400];

	if (s == NULL)
		return;
	rep.shutdown = 1;
	if (s->held != NULL)
		client_reply(s->held, &rep);
	s->held = NULL;
	for (int i = 0; s->pid > 0 && i < 500; i++) {
		bus_call *c = NULL;
		pthread_mutex_lock(&s->mtx);
		if (s->nqueue > 0) {
			c = s->queue[0];
			memmove(s->queue, s->queue + 1,
			    (size_t)(--s->nqueue) * sizeof(*s->queue));
		}
		pthread_mutex_unlock(&s->mtx);
		if (c != NULL)
			client_reply(c, &rep);
		if (waitpid(s->pid, NULL, WNOHANG) == s->pid) {
			s->pid = 0;
			break;
		}
		if (i == 300)
			kill(s->pid, SIGTERM);
		kc_sleep_ms(10);
	}
	if (s->pid > 0) {
		kill(s->pid, SIGKILL);
		waitpid(s->pid, NULL, 0);
	}
	/* Calls still queued are the server's to free. */
	bus_server_close(s->srv);
	snprintf(path, sizeof(path), "%s/work.ipc", s->dir);
	unlink(path);
	rmdir(s->dir);
	pthread_mutex_destroy(&s->mtx);
	pthread_cond_destroy(&s->cv);
	free(s);
}

/* ---- printing ---- */

void
sbx_result_print(FILE *f, const Kclaw__EvalResult *r)
{
	fprintf(f, "status: %s\n", sbx_status_name(r->status));
	if (r->message && *r->message)
		fprintf(f, "%s\n", r->message);
	if (r->fault_name && *r->fault_name)
		fprintf(f, "fault: %s\n", r->fault_name);
	if (r->device_name && *r->device_name)
		fprintf(f, "device: %s (%s)\n", r->device_name, r->arch);
	else if (r->arch && *r->arch)
		fprintf(f, "arch: %s\n", r->arch);
	fprintf(f, "compile: %.1f ms%s\n", r->compile_ms,
	    r->compile_cached ? " (cached)" : "");
	for (size_t i = 0; i < r->n_kernels; i++) {
		const Kclaw__KernelResources *k = r->kernels[i];
		fprintf(f,
		    "kernel %s: %d registers, %d B static shared, %d B "
		    "local, %d B spilled",
		    k->kernel, k->registers, k->shared_static_bytes,
		    k->local_bytes, k->spill_bytes);
		if (k->block_threads > 0)
			fprintf(f, ", occupancy %.0f%% at %d threads/block",
			    k->occupancy * 100, k->block_threads);
		fprintf(f, "\n");
	}
	if (r->mismatch != NULL) {
		const Kclaw__Mismatch *m = r->mismatch;
		fprintf(f,
		    "mismatch: tensor %s%s (index %llu), trial %u: expected "
		    "%.9g, got %.9g; %llu bad, %llu NaN; max abs %.3g, max "
		    "rel %.3g, rel norm %.3g\n",
		    m->tensor, m->coords ? m->coords : "",
		    (unsigned long long)m->index, m->trial, m->expected, m->got,
		    (unsigned long long)m->bad_count,
		    (unsigned long long)m->nan_count, m->max_abs_err,
		    m->max_rel_err, m->rel_norm);
		if (m->note && *m->note)
			fprintf(f, "note: %s\n", m->note);
	}
	if (r->timing != NULL)
		fprintf(f,
		    "time: median %.4f ms, mean %.4f, min %.4f, max %.4f, "
		    "stddev %.4f over %u iterations (L2 %s, %u spot "
		    "checks)\n",
		    r->timing->median_ms, r->timing->mean_ms, r->timing->min_ms,
		    r->timing->max_ms, r->timing->stddev_ms,
		    r->timing->iterations,
		    r->timing->l2_flushed ? "flushed" : "warm",
		    r->timing->spot_checks);
	if (r->baseline != NULL)
		fprintf(f, "reference: median %.4f ms; speedup %.2fx\n",
		    r->baseline->median_ms, r->speedup);
	else if (r->reference_ms > 0)
		fprintf(f, "reference: %.4f ms (recorded); speedup %.2fx\n",
		    r->reference_ms, r->speedup);
	/* The variation rule's figures, per output: what a reference-only
	 * evaluation is for. */
	for (size_t i = 0; i < r->n_output_variations; i++) {
		const Kclaw__OutputVariation *v = r->output_variations[i];
		if (!v->measured)
			fprintf(f,
			    "output %s: variation not measured (one input "
			    "set); the tolerance admits %.3g\n",
			    v->name, v->admits);
		else
			fprintf(f,
			    "output %s: varies %.3g (relative) between two "
			    "input sets; the tolerance admits %.3g%s\n",
			    v->name, v->variation, v->admits,
			    v->degenerate
			        ? ": DEGENERATE, a constant could pass"
			        : "");
	}
	for (size_t i = 0; i < r->n_warnings; i++)
		fprintf(f, "warning: %s\n", r->warnings[i]);
	for (size_t i = 0; i < r->n_activities; i++) {
		const Kclaw__KernelActivity *a = r->activities[i];
		fprintf(f, "activity %s: %.2f us, %d registers\n", a->kernel,
		    a->duration_us, a->registers);
	}
	for (size_t i = 0; i < r->n_metrics; i++)
		fprintf(f, "metric %s: %.4g %s\n", r->metrics[i]->name,
		    r->metrics[i]->value, r->metrics[i]->unit);
	if (r->counters_note && *r->counters_note)
		fprintf(f, "counters: %s\n", r->counters_note);
	if (r->status == KCLAW__EVAL_STATUS__COMPILE_ERROR && r->compile_log)
		fprintf(f, "compile log:\n%s\n", r->compile_log);
	fprintf(f, "wall: %.0f ms\n", r->wall_ms);
}
