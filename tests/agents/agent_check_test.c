/*
 * agent_check_test.c - `kclaw-agent --check-recording`: hand-written
 * recordings are validated offline as their roles would validate them,
 * and every bad one is named with its problem.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "agent_testlib.h"
#include "kc_err.h"
#include "kc_test.h"
#include "kc_util.h"

static char dir[256];

static void
put(const char *rel, const char *text)
{
	char path[600], *slash;

	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	slash = strrchr(path, '/');
	*slash = '\0';
	KT_OK(kc_mkdirs(path, 0700));
	*slash = '/';
	KT_OK(kc_write_file(path, text, strlen(text)));
}

/* Runs the check; returns the exit status, output in *out. */
static int
check(char **out)
{
	char cmd[1024], path[600];
	size_t len;
	int st;

	snprintf(path, sizeof(path), "%s.out", dir);
	snprintf(cmd, sizeof(cmd),
	    "%s/kclaw-agent --check-recording %s >%s 2>&1", getenv("KCLAW_BIN"),
	    dir, path);
	st = system(cmd);
	KT_OK(kc_read_file(path, 1 << 20, out, &len));
	remove(path);
	return WEXITSTATUS(st);
}

int
main(void)
{
	char *out;

	kt_tmpdir(dir, "kt-check");
	put("t/generator/0.txt",
	    "```cuda\nextern \"C\" __global__ void k(float *y) { y[0] = 1; }\n"
	    "```\n```json\n{\"steps\": [{\"kernel\": \"k\", \"grid\": [1], "
	    "\"block\": [1], \"args\": [\"y\"]}]}\n```\n");
	put("t/planner/0.json",
	    "{\"response\": {\"content\": \"```json\\n{\\\"method\\\": "
	    "\\\"tiling\\\", \\\"steps\\\": [\\\"1. a\\\"], \\\"rationale\\\": "
	    "\\\"r\\\"}\\n```\"}}");
	put("t/diagnoser/0.txt",
	    "{\"category\": \"compile\", \"root_cause\": \"x\", \"fix\": "
	    "\"y\"}");
	put("t/feature/0.txt",
	    "```json\n{\"features\": [{\"name\": \"coalescing\", \"value\": "
	    "0.5}]}\n```");
	KT_EQ_INT(check(&out), 0);
	KT_CONTAINS(out, "ok   t/generator/0.txt: 1 candidate(s)");
	KT_CONTAINS(out, "ok   t/planner/0.json: method tiling, 1 steps");
	KT_CONTAINS(out, "ok   t/diagnoser/0.txt: category compile");
	KT_CONTAINS(out, "4 of 4 replies usable");
	free(out);

	put("t/optimizer/0.txt",
	    "```cuda\nint main() {}\n```\n```json\n{}\n```");
	put("t/repairer/0.reask1.txt", "no code");
	put("t/painter/0.txt", "x");
	put("t/planner/1.json", "{\"response\": {\"text\": \"x\"}}");
	KT_EQ_INT(check(&out), 1);
	KT_CONTAINS(out,
	    "FAIL t/optimizer/0.txt: candidate 1: the source "
	    "contains host code");
	KT_CONTAINS(out, "FAIL t/repairer/0.reask1.txt: no ```cuda code block");
	KT_CONTAINS(out,
	    "FAIL t/painter/0.txt: the folder above the file does "
	    "not name a role");
	KT_CONTAINS(out, "FAIL t/planner/1.json: no \"response\"");
	KT_CONTAINS(out, "4 of 8 replies usable");
	free(out);
	kt_rmtree(dir);
	return 0;
}
