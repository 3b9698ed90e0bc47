/*
 * agent_check.c - checks a recording folder offline: every reply in it is
 * parsed and validated as its role's runtime would, so hand-written
 * recordings (docs/agents.md "Recordings") are known good before a replayed
 * run trips over them.
 */
#include <cjson/cJSON.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "kc_err.h"
#include "kc_util.h"

#define AGENT_CHECK_MAX (64u << 20)

/* nftw has no user argument: one check at a time per process. */
static struct {
	const Kclaw__TaskSpec *task;
	FILE *out;
	size_t root_len;
	unsigned files;
	unsigned bad;
} agent_chk;

/* The reply text of a recording file; NULL with err set when unreadable. */
static char *
agent_check_content(const char *path, bool json, kc_str *err)
{
	const cJSON *c;
	char *text = NULL, *content;
	cJSON *root;
	size_t len;
	int rv;

	if ((rv = kc_read_file(path, AGENT_CHECK_MAX, &text, &len)) != 0) {
		kc_str_printf(err, "cannot read it: %s", kc_lasterr());
		return NULL;
	}
	if (!json)
		return text;
	root = cJSON_ParseWithLength(text, len);
	free(text);
	c = cJSON_GetObjectItemCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(root, "response"), "content");
	if (!cJSON_IsString(c)) {
		kc_str_printf(err, "%s",
		    root == NULL ? "not valid JSON"
		                 : "no \"response\": {\"content\": "
		                   "\"...\"} string");
		cJSON_Delete(root);
		return NULL;
	}
	content = strdup(c->valuestring);
	cJSON_Delete(root);
	return content;
}

/* Validates text as a reply of role; what it found goes to note. */
static int
agent_check_reply(
    const agent_role *role, const char *text, kc_str *note, kc_str *err)
{
	static Kclaw__Candidate base = KCLAW__CANDIDATE__INIT;
	Kclaw__AgentJob job = KCLAW__AGENT_JOB__INIT;
	Kclaw__AgentReply *r;
	Kclaw__Candidate **c;
	size_t n, i;
	int rv;

	if (role->role == KCLAW__ROLE__GENERATOR ||
	    role->role == KCLAW__ROLE__OPTIMIZER ||
	    role->role == KCLAW__ROLE__REPAIRER) {
		rv = agent_parse_candidates(
		    agent_chk.task, text, 64, &c, &n, err);
		if (rv == 0 && role->role != KCLAW__ROLE__GENERATOR && n != 1) {
			kc_str_printf(err,
			    "%zu candidates; the %s answers with "
			    "exactly one",
			    n, role->name);
			rv = KC_EINVAL;
		}
		if (rv == 0)
			kc_str_printf(note, "%zu candidate(s)", n);
		for (i = 0; rv != KC_ENOMEM && i < n; i++)
			kclaw__candidate__free_unpacked(c[i], NULL);
		if (rv != KC_ENOMEM)
			free(c);
		return rv;
	}
	/* JSON roles: their own validation with a neutral job (no method
	 * list, so any method name is accepted). */
	base.source = "extern \"C\" __global__ void k() {}";
	base.plan_json = "{\"steps\": []}";
	job.job_id = "check";
	job.role = role->role;
	job.task = (Kclaw__TaskSpec *)agent_chk.task;
	job.base_kernel = &base;
	if ((r = calloc(1, sizeof(*r))) == NULL)
		return KC_ENOMEM;
	kclaw__agent_reply__init(r);
	rv = role->accept(&job, agent_reply_body(text), true, r, err);
	if (rv == 0 && r->plan != NULL)
		kc_str_printf(note, "method %s, %zu steps", r->plan->method,
		    r->plan->n_steps);
	else if (rv == 0 && r->diagnosis != NULL)
		kc_str_printf(note, "category %s", r->diagnosis->category);
	else if (rv == 0)
		kc_str_printf(note, "%zu features", r->n_features);
	kclaw__agent_reply__free_unpacked(r, NULL);
	return rv;
}

static int
agent_check_one(
    const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	const char *rel = path + agent_chk.root_len, *ext, *slash, *prev;
	kc_str err = {0}, note = {0};
	const agent_role *role = NULL;
	char rname[32];
	char *text;
	bool json;
	int rv;

	(void)st;
	(void)ftw;
	while (*rel == '/')
		rel++;
	if (type != FTW_F || (ext = strrchr(rel, '.')) == NULL)
		return 0;
	json = strcmp(ext, ".json") == 0;
	if (!json && strcmp(ext, ".txt") != 0)
		return 0;
	if (strncmp(rel, "by-hash/", 8) == 0)
		return 0;
	/* <task>/<role>/<n>[.reaskK].(json|txt) */
	slash = strrchr(rel, '/');
	for (prev = slash; prev != NULL && prev > rel && prev[-1] != '/';
	     prev--)
		;
	if (slash != NULL && prev != NULL &&
	    (size_t)(slash - prev) < sizeof(rname)) {
		snprintf(
		    rname, sizeof(rname), "%.*s", (int)(slash - prev), prev);
		role = agent_role_by_name(rname);
	}
	agent_chk.files++;
	if (role == NULL) {
		kc_str_printf(&err,
		    "the folder above the file does not name "
		    "a role; use <task>/<role>/<n>.json");
		rv = KC_EINVAL;
	} else if ((text = agent_check_content(path, json, &err)) == NULL) {
		rv = KC_EINVAL;
	} else {
		rv = agent_check_reply(role, text, &note, &err);
		free(text);
	}
	if (rv == KC_ENOMEM) {
		kc_str_free(&err);
		kc_str_free(&note);
		return -1;
	}
	if (rv != 0)
		agent_chk.bad++;
	fprintf(agent_chk.out, "%s %s: %s\n", rv == 0 ? "ok  " : "FAIL", rel,
	    rv == 0 ? (note.buf ? note.buf : "") : (err.buf ? err.buf : ""));
	kc_str_free(&err);
	kc_str_free(&note);
	return 0;
}

int
agent_check_recording(const char *dir, const Kclaw__TaskSpec *task, FILE *out,
    unsigned *files, unsigned *bad)
{
	agent_chk.task = task;
	agent_chk.out = out;
	agent_chk.root_len = strlen(dir);
	agent_chk.files = agent_chk.bad = 0;
	if (nftw(dir, agent_check_one, 16, FTW_PHYS) != 0)
		return kc_seterr(KC_EIO,
		    "cannot walk the recording folder %s (missing, or out of "
		    "memory)",
		    dir);
	*files = agent_chk.files;
	*bad = agent_chk.bad;
	return 0;
}
