#include "worker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api.h"
#include "kc_config.h"
#include "bus.h"
#include "kc_err.h"
#include "kc_util.h"

#define KC_WORKER_MAX_WAIT_MS 15000

struct kc_worker {
	bus_client *client;
	char url[KC_URL_MAX];
	Kclaw__Role role;
	int device;
	char id[128];
	char host[64];
	char token[128];
};

void
kc_worker_host(char *buf, size_t n)
{
	const char *v = getenv("KCLAW_WORKER_HOST");

	if (v && *v)
		snprintf(buf, n, "%s", v);
	else if (n < 2 || gethostname(buf, n - 1) != 0)
		snprintf(buf, n, "localhost");
	else
		buf[n - 1] = '\0';
}

int
kc_worker_open(kc_worker **out, const char *work_url, Kclaw__Role role,
    int device, const char *worker_id, const char *token)
{
	kc_worker *w;
	int rv;

	if ((w = calloc(1, sizeof(*w))) == NULL)
		return KC_ENOMEM;
	/* The host names the GPU with the device number (one evaluation per
	 * GPU). */
	kc_worker_host(w->host, sizeof(w->host));
	if (worker_id != NULL)
		snprintf(w->id, sizeof(w->id), "%s", worker_id);
	else
		snprintf(w->id, sizeof(w->id), "%s-%d-%d", w->host, (int)role,
		    (int)getpid());
	snprintf(w->token, sizeof(w->token), "%s", token ? token : "");
	w->role = role;
	w->device = device;
	snprintf(w->url, sizeof(w->url), "%s", work_url);
	if ((rv = bus_client_open(&w->client, work_url, 0)) != 0) {
		free(w);
		return rv;
	}
	*out = w;
	return 0;
}

void
kc_worker_close(kc_worker *w)
{
	if (w == NULL)
		return;
	bus_client_close(w->client);
	free(w);
}

const char *
kc_worker_id(const kc_worker *w)
{
	return w->id;
}

/* A fresh socket after a broken or timed-out call (see kc_worker_next). */
static void
kc_worker_reopen(kc_worker *w)
{
	bus_client *fresh;

	if (bus_client_open(&fresh, w->url, 0) == 0) {
		bus_client_close(w->client);
		w->client = fresh;
	}
}

/*
 * One WorkRequest (the worker's identity and token filled in) and its
 * decoded reply. A broken or timed-out call reopens the socket and is
 * KC_ETIMEDOUT with `gone` as its message (printf-style, the url first);
 * a refusal (WorkReply.error) is KC_EPERM.
 */
static int
kc_worker_call(kc_worker *w, Kclaw__WorkRequest *req, int timeout_ms,
    const char *what, Kclaw__WorkReply **out)
{
	Kclaw__WorkReply *rep;
	uint8_t *buf;
	size_t len, rlen;
	void *rbuf;
	int rv;

	req->worker_id = w->id;
	req->role = w->role;
	req->device = w->device;
	req->host = w->host;
	req->pid = (uint32_t)getpid();
	req->token = w->token;
	if ((rv = kc_pb_pack(&req->base, &buf, &len)) != 0)
		return rv;
	rv = bus_client_call(w->client, buf, len, timeout_ms, &rbuf, &rlen);
	free(buf);
	if (rv == KC_EBUS || rv == KC_ECLOSED || rv == KC_ETIMEDOUT) {
		kc_worker_reopen(w);
		return kc_seterr(KC_ETIMEDOUT,
		    "%s: no answer from %s within %d ms", what, w->url,
		    timeout_ms);
	}
	if (rv != 0)
		return rv;
	rep = kclaw__work_reply__unpack(NULL, rlen, rbuf);
	free(rbuf);
	if (rep == NULL)
		return kc_seterr(
		    KC_EPROTO, "%s: the reply did not decode", what);
	if (rep->error != NULL && *rep->error != '\0') {
		rv = kc_seterr(KC_EPERM, "orchestrator refused worker %s: %s",
		    w->id, rep->error);
		kclaw__work_reply__free_unpacked(rep, NULL);
		return rv;
	}
	*out = rep;
	return 0;
}

int
kc_worker_blob(kc_worker *w, const char *hash, uint64_t offset, uint32_t length,
    int timeout_ms, Kclaw__BlobChunk **out)
{
	Kclaw__WorkRequest req = KCLAW__WORK_REQUEST__INIT;
	Kclaw__BlobRequest br = KCLAW__BLOB_REQUEST__INIT;
	Kclaw__WorkReply *rep;
	char what[96];
	int rv;

	br.hash = (char *)hash;
	br.offset = offset;
	br.length = length;
	req.blob = &br;
	snprintf(what, sizeof(what), "blob %.16s...", hash ? hash : "");
	if ((rv = kc_worker_call(w, &req, timeout_ms, what, &rep)) != 0)
		return rv;
	if (rep->blob == NULL) {
		rv = kc_seterr(KC_EPROTO,
		    "the orchestrator at %s does not serve blobs (an older "
		    "version?)",
		    w->url);
	} else if (rep->blob->error != NULL && *rep->blob->error != '\0') {
		rv = kc_seterr(strstr(rep->blob->error, "not in this") != NULL
		        ? KC_ENOENT
		        : KC_EINVAL,
		    "%s", rep->blob->error);
	} else {
		*out = rep->blob;
		rep->blob = NULL;
	}
	kclaw__work_reply__free_unpacked(rep, NULL);
	return rv;
}

int
kc_worker_next(kc_worker *w, const Kclaw__AgentReply *agent_reply,
    const Kclaw__EvalResult *eval_result, int wait_ms, Kclaw__WorkReply **job)
{
	Kclaw__WorkRequest req = KCLAW__WORK_REQUEST__INIT;
	Kclaw__WorkReply *rep;
	int rv;

	req.agent_reply = (Kclaw__AgentReply *)agent_reply;
	req.eval_result = (Kclaw__EvalResult *)eval_result;
	/* Never forever: a dialer NNG 1.5.2 stopped redialling waits for a
	 * connection for good (tests/chaos saw it). kclawd answers a held
	 * request within its poll_ms; a call that outlives the bound gets a
	 * fresh socket. */
	rv = kc_worker_call(w, &req,
	    wait_ms < 0 || wait_ms > KC_WORKER_MAX_WAIT_MS
	        ? KC_WORKER_MAX_WAIT_MS
	        : wait_ms,
	    "work request", &rep);
	if (rv == KC_ETIMEDOUT) {
		/*
		 * The orchestrator went away mid-call (it restarted), or the
		 * bound passed: the client is fresh now (kc_worker_call);
		 * tell the caller to send its result again, as after a
		 * timeout.
		 */
		kc_sleep_ms(100);
		return kc_seterr(KC_ETIMEDOUT,
		    "orchestrator at %s went away; asking again", w->url);
	}
	if (rv != 0)
		return rv;
	if (rep->shutdown) {
		kclaw__work_reply__free_unpacked(rep, NULL);
		return KC_ECANCELED;
	}
	*job = rep;
	return 0;
}

int
kc_worker_progress(
    kc_worker *w, const Kclaw__AgentProgress *progress, int timeout_ms)
{
	Kclaw__WorkRequest req = KCLAW__WORK_REQUEST__INIT;
	Kclaw__WorkReply *rep;
	int rv;

	req.progress = (Kclaw__AgentProgress *)progress;
	if ((rv = kc_worker_call(w, &req, timeout_ms, "progress", &rep)) != 0)
		return rv;
	kclaw__work_reply__free_unpacked(rep, NULL);
	return 0;
}
