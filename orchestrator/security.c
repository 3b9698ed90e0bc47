/*
 * security.c - kclawd's start-up check of its addresses, and the roots a
 * Submit.bundle_dir may name. See security.h and docs/security.md.
 */
#include "security.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <nng/nng.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kc_err.h"
#include "kc_util.h"

/* ipc:// is guarded by file permissions (0600 sockets in a 0700 folder)
 * and inproc:// never leaves the process; every other transport of NNG
 * (tcp, tcp4, tcp6, ws, wss, tls+tcp) can be reached from other hosts. */
static bool
security_is_network(const char *url)
{
	return strncmp(url, "ipc://", 6) != 0 &&
	    strncmp(url, "inproc://", 9) != 0;
}

/* kclaw.json's top-level members; *root is NULL when there is no file. */
static int
security_config(const kc_config *cfg, cJSON **root)
{
	char *text = NULL;
	size_t len;
	int rv;

	*root = NULL;
	if ((rv = kc_read_file(cfg->config_path, 1 << 20, &text, &len)) != 0) {
		kc_clearerr();
		return rv == KC_ENOENT ? 0 : rv;
	}
	*root = cJSON_ParseWithLength(text, len);
	free(text);
	if (*root == NULL || !cJSON_IsObject(*root)) {
		cJSON_Delete(*root);
		*root = NULL;
		return kc_seterr(KC_EINVAL,
		    "%s is not a JSON object; fix or remove it",
		    cfg->config_path);
	}
	return 0;
}

/* An address other hosts can reach: a network transport whose host is not
 * a loopback one (127.0.0.0/8, localhost, ::1). The address is parsed as
 * NNG will bind it, so "http://127.0.0.1@0.0.0.0:8470" (user info
 * 127.0.0.1, host 0.0.0.0) is public, so are a star or an empty host
 * (every interface), and so is an address that does not parse. */
static bool
security_addr_public(const char *url)
{
	struct in_addr a4;
	struct in6_addr a6;
	nng_url *u;
	bool public = true;

	if (url[0] == '\0' || !security_is_network(url))
		return false;
	if (nng_url_parse(&u, url) != 0)
		return true;
	if (u->u_userinfo == NULL && u->u_hostname != NULL) {
		const char *h = u->u_hostname;
		if (strcmp(h, "localhost") == 0)
		public = false;
		else if (inet_pton(AF_INET, h, &a4) == 1) public =
		    (ntohl(a4.s_addr) >> 24) != 127;
		else if (inet_pton(AF_INET6, h, &a6) == 1) public =
		    !IN6_IS_ADDR_LOOPBACK(&a6);
	}
	nng_url_free(u);
	return public;
}

int
orch_security_check(const kc_config *cfg)
{
	const char *env = getenv("KCLAW_INSECURE_TCP");
	const char *what = NULL, *url = NULL;
	cJSON *root;
	bool insecure;
	int rv;

	if (security_is_network(cfg->api_url)) {
		what = "API";
		url = cfg->api_url;
	} else if (security_is_network(cfg->work_url)) {
		what = "work";
		url = cfg->work_url;
	}
	if (url != NULL && cfg->token[0] != '\0')
		url = NULL;
	/* The dashboard answers reads (specs, kernel sources, events)
	 * without a token. */
	if (url == NULL && security_addr_public(cfg->http_url)) {
		what = "dashboard (http_url)";
		url = cfg->http_url;
	}
	/* The events socket cannot ask for the token (NNG's PUB never reads
	 * from a subscriber): other hosts may reach it only where the
	 * deployment says its network is closed to strangers. */
	if (url == NULL && security_addr_public(cfg->events_url)) {
		what = "events";
		url = cfg->events_url;
	}
	if (url == NULL)
		return 0;
	if ((rv = security_config(cfg, &root)) != 0)
		return rv;
	insecure = (env != NULL && strcmp(env, "1") == 0) ||
	    cJSON_IsTrue(
	        cJSON_GetObjectItemCaseSensitive(root, "insecure_tcp"));
	if (url == cfg->events_url &&
	    ((getenv("KCLAW_EVENTS_PUBLIC") &&
	         strcmp(getenv("KCLAW_EVENTS_PUBLIC"), "1") == 0) ||
	        cJSON_IsTrue(
	            cJSON_GetObjectItemCaseSensitive(root, "events_public"))))
		insecure = true;
	cJSON_Delete(root);
	if (insecure)
		return 0;
	if (url == cfg->events_url)
		return kc_seterr(KC_EPERM,
		    "refusing to start: the events address %s can be reached "
		    "from other hosts, and the events socket cannot ask for "
		    "the "
		    "token (NNG's PUB never reads from a subscriber), so "
		    "anyone "
		    "who connects would read every task's events. Keep it on "
		    "ipc:// (the default) or tcp://127.0.0.1:PORT; workers on "
		    "other hosts need no events (a cancellation then waits for "
		    "the job's deadline), and `kclaw watch` or the API's "
		    "Events "
		    "method read the event log with the token. Where the "
		    "network is closed to strangers (a Kubernetes "
		    "NetworkPolicy, "
		    "a WireGuard mesh), set \"events_public\": true in %s or "
		    "KCLAW_EVENTS_PUBLIC=1 (docs/security.md)",
		    url, cfg->config_path);
	if (url == cfg->http_url)
		return kc_seterr(KC_EPERM,
		    "refusing to start: the dashboard address %s can be "
		    "reached from other hosts, and it shows every task's spec, "
		    "kernel sources and events without asking for a token. "
		    "Serve it on 127.0.0.1 (reach it through an SSH tunnel or "
		    "an authenticating proxy); or, on a network you trust "
		    "entirely, set \"insecure_tcp\": true in %s or "
		    "KCLAW_INSECURE_TCP=1",
		    url, cfg->config_path);
	return kc_seterr(KC_EPERM,
	    "refusing to start: the %s address %s can be reached from other "
	    "hosts and no token is set, so anyone who connects could submit "
	    "tasks (which run kernels on this host's GPUs) or take work. Set a "
	    "shared secret in KCLAW_TOKEN (or \"token\" in %s) for kclawd, its "
	    "workers and the CLI alike; or use ipc:// addresses; or, on a "
	    "network you trust entirely, set \"insecure_tcp\": true in "
	    "kclaw.json or KCLAW_INSECURE_TCP=1",
	    what, url, cfg->config_path);
}

/* True when path is root or below it (both real paths). */
static bool
security_inside(const char *path, const char *root)
{
	size_t n = strlen(root);

	/* `/` is never a root: a kclawd started in `/` (systemd's default
	 * working folder) would otherwise hand out every file of the host,
	 * /etc/shadow included. */
	if (n == 0 || (n == 1 && root[0] == '/'))
		return false;
	return strncmp(path, root, n) == 0 &&
	    (path[n] == '\0' || path[n] == '/');
}

static bool
security_root_holds(const char *root, const char *path)
{
	char real[PATH_MAX];

	return realpath(root, real) != NULL && security_inside(path, real);
}

/* The LLM key file kclaw.json or the environment names, if any. */
static void
security_key_file(const cJSON *root, char out[PATH_MAX])
{
	const cJSON *llm = cJSON_GetObjectItemCaseSensitive(root, "llm");
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(llm, "api_key_file");
	const char *env = getenv("KCLAW_LLM_API_KEY_FILE");

	out[0] = '\0';
	if (env != NULL && *env && realpath(env, out) != NULL)
		return;
	out[0] = '\0';
	if (cJSON_IsString(f) && realpath(f->valuestring, out) == NULL)
		out[0] = '\0';
}

static bool
security_same_file(const struct stat *st, const char *path)
{
	struct stat o;

	return stat(path, &o) == 0 && o.st_dev == st->st_dev &&
	    o.st_ino == st->st_ino;
}

/*
 * Whether real is one of the deployment's own files: they hold the token,
 * the LLM key, the store and the logs, and are never task data, even where
 * a root (the home, or a working folder above it) holds them.
 */
static bool
security_private(const kc_config *cfg, const cJSON *root, const char *real)
{
	static const char *const own[] = {"db", "run", "cache", "recordings"};
	char home[PATH_MAX], path[PATH_MAX + 32], key[PATH_MAX];
	struct stat st;
	bool have = stat(real, &st) == 0;

	/* A hard link has a path of its own: the files are compared too. */
	if ((realpath(cfg->config_path, path) != NULL &&
	        strcmp(path, real) == 0) ||
	    (have && security_same_file(&st, cfg->config_path)))
		return true;
	if (security_root_holds(cfg->run_dir, real) ||
	    security_root_holds(cfg->db_dir, real))
		return true;
	if (realpath(cfg->home, home) != NULL) {
		for (size_t i = 0; i < KC_ARRAY_LEN(own); i++) {
			snprintf(path, sizeof(path), "%s/%s", home, own[i]);
			if (security_inside(real, path))
				return true;
		}
		snprintf(path, sizeof(path), "%s/kclaw.json", home);
		if (strcmp(path, real) == 0)
			return true;
	}
	security_key_file(root, key);
	return key[0] != '\0' &&
	    (strcmp(key, real) == 0 || (have && security_same_file(&st, key)));
}

/* Whether real (a real path) lies inside one of the allowed roots;
 * KC_EPERM when it is one of the deployment's own files. */
static int
security_allowed(const kc_config *cfg, const char *real, bool *ok)
{
	char cwd[PATH_MAX], rel[PATH_MAX * 2];
	const char *env = getenv("KCLAW_BUNDLE_ROOTS");
	const cJSON *roots, *r;
	cJSON *root;
	int rv;

	if ((rv = security_config(cfg, &root)) != 0)
		return rv;
	if (security_private(cfg, root, real)) {
		cJSON_Delete(root);
		*ok = false;
		return kc_seterr(KC_EPERM,
		    "%s is one of the deployment's own files (kclaw.json, "
		    "db/, run/, cache/, recordings/, the LLM key file), never "
		    "task data; name a file of a bundle",
		    real);
	}
	*ok = (getcwd(cwd, sizeof(cwd)) != NULL &&
	          security_root_holds(cwd, real)) ||
	    security_root_holds(cfg->home, real);
	/* KCLAW_BUNDLE_ROOTS: folders separated by ':', like PATH. */
	for (const char *p = env; p && *p && !*ok;) {
		size_t n = strcspn(p, ":");
		if (n > 0 && n < sizeof(rel)) {
			memcpy(rel, p, n);
			rel[n] = '\0';
			*ok = security_root_holds(rel, real);
		}
		p += n + (p[n] == ':');
	}
	roots = cJSON_GetObjectItemCaseSensitive(root, "bundle_roots");
	cJSON_ArrayForEach(r, roots)
	{
		if (*ok)
			break;
		if (!cJSON_IsString(r) || r->valuestring[0] == '\0')
			continue;
		/* A relative root is relative to the home. */
		if (r->valuestring[0] == '/')
			snprintf(rel, sizeof(rel), "%s", r->valuestring);
		else
			snprintf(rel, sizeof(rel), "%s/%s", cfg->home,
			    r->valuestring);
		*ok = security_root_holds(rel, real);
	}
	cJSON_Delete(root);
	return 0;
}

static const char *
security_cwd(char *buf, size_t n)
{
	return getcwd(buf, n) ? buf : "?";
}

int
orch_bundle_dir_check(
    const kc_config *cfg, const char *dir, char *real, size_t n)
{
	char path[PATH_MAX], cwd[PATH_MAX];
	bool ok;
	int rv;

	if (realpath(dir, path) == NULL)
		return kc_seterr(errno == ENOENT ? KC_ENOENT : KC_EINVAL,
		    "bundle_dir %s: %s on the orchestrator's host; submit the "
		    "bundle's content (kclaw submit without --remote)",
		    dir, strerror(errno));
	if ((rv = security_allowed(cfg, path, &ok)) != 0)
		return rv;
	if (!ok)
		return kc_seterr(KC_EPERM,
		    "bundle_dir %s is outside the allowed roots (kclawd's "
		    "working folder %s, the deployment home %s, "
		    "KCLAW_BUNDLE_ROOTS and \"bundle_roots\" in %s); submit "
		    "the bundle's content (kclaw submit without --remote) or "
		    "add the folder to bundle_roots",
		    path, security_cwd(cwd, sizeof(cwd)), cfg->home,
		    cfg->config_path);
	if (!kc_strlcpy(real, path, n))
		return kc_seterr(KC_EINVAL, "bundle_dir %s is too long", path);
	return 0;
}

int
orch_data_rule(void *arg, const char *what, const char *real)
{
	const kc_config *cfg = arg;
	char cwd[PATH_MAX];
	bool ok;
	int rv;

	if ((rv = security_allowed(cfg, real, &ok)) != 0)
		return kc_seterr(rv, "%s: %s", what, kc_lasterr());
	if (!ok)
		return kc_seterr(KC_EPERM,
		    "%s: %s is outside the allowed roots (kclawd's working "
		    "folder %s, the deployment home %s, KCLAW_BUNDLE_ROOTS and "
		    "\"bundle_roots\" in %s); add the bundle's folder to "
		    "bundle_roots or send the data inline",
		    what, real, security_cwd(cwd, sizeof(cwd)), cfg->home,
		    cfg->config_path);
	return 0;
}

int
orch_data_open(const kc_config *cfg, const char *path, const char *what,
    kc_bundle_file *out)
{
	kc_path_rule rule = {.allow = orch_data_rule, .arg = (void *)cfg};
	int rv = kc_bundle_open(path, what, KC_OPEN_NPY, &rule, out);

	if (rv == KC_ENOENT || rv == KC_EIO)
		return kc_seterr(KC_EINVAL,
		    "%s; send the data inline, or run the orchestrator where "
		    "the bundle is",
		    kc_lasterr());
	return rv;
}

static int
security_tensor_path(const kc_config *cfg, const Kclaw__TensorData *td,
    size_t set, const char *kind)
{
	char what[160];
	kc_bundle_file f;
	int rv;

	if (td->path == NULL || td->path[0] == '\0')
		return 0;
	snprintf(what, sizeof(what), "reference set %zu: %s tensor '%s'",
	    set + 1, kind, td->name ? td->name : "");
	if ((rv = orch_data_open(cfg, td->path, what, &f)) != 0)
		return rv;
	kc_bundle_close(&f);
	return 0;
}

int
orch_spec_paths_check(const kc_config *cfg, const Kclaw__TaskSpec *spec)
{
	const Kclaw__Reference *ref = spec->reference;
	int rv;

	for (size_t i = 0; ref && i < ref->n_sets; i++) {
		const Kclaw__TensorSet *s = ref->sets[i];
		for (size_t k = 0; k < s->n_inputs; k++)
			if ((rv = security_tensor_path(
			         cfg, s->inputs[k], i, "input")) != 0)
				return rv;
		for (size_t k = 0; k < s->n_expected; k++)
			if ((rv = security_tensor_path(
			         cfg, s->expected[k], i, "expected")) != 0)
				return rv;
	}
	return 0;
}
