/*
 * tune.c - the tune candidate of a correct kernel (docs/orchestrator.md
 * "The GPU works while the model thinks"): its source and a plan whose
 * launch configuration is declared tunable, so that the sandbox sweeps it
 * (common/tunables.h) between rounds without asking the model.
 *
 * A one-dimensional kernel step (grid [gx, 1, 1], block [bx, 1, 1], no
 * dynamic shared memory, whose block is not already an expression) gets
 * a parameter KC_BLOCK_<i> over bx and the other sizes of 128, 256, 512
 * and 1024, and its grid becomes the expression that keeps gx * bx
 * threads covered. The tunables the source declares stay, and the product
 * of all is kept within KC_TUNE_MAX_CONFIGS (launch parameters are left
 * out from the last step back). A kernel whose index does not follow its
 * block size fails verification in those configurations; the sweep keeps
 * the fastest correct one.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kc_err.h"
#include "kc_util.h"
#include "orch_int.h"
#include "tunables.h"

#define TUNE_MAX_STEPS 4

static const int tune_blocks[] = {128, 256, 512, 1024};

/* The integer at a of a [x, 1, 1] triple (or a bare integer); false when
 * it is not a one-dimensional literal launch. */
static bool
tune_dim(const cJSON *v, int *x)
{
	if (cJSON_IsNumber(v)) {
		*x = v->valueint;
		return *x > 0;
	}
	if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) < 1)
		return false;
	for (int i = 0; i < cJSON_GetArraySize(v); i++) {
		const cJSON *e = cJSON_GetArrayItem(v, i);
		if (!cJSON_IsNumber(e) || (i > 0 && e->valueint != 1))
			return false;
	}
	*x = cJSON_GetArrayItem(v, 0)->valueint;
	return *x > 0;
}

/* How many configurations the tunables already declared give. */
static size_t
tune_declared(const cJSON *tun)
{
	size_t n = 1;
	const cJSON *p;

	cJSON_ArrayForEach(p, tun) n *=
	    cJSON_IsArray(p) ? (size_t)cJSON_GetArraySize(p) : 1;
	return n;
}

int
orch_tune_plan(const char *plan_json, char **out)
{
	cJSON *root = cJSON_Parse(plan_json ? plan_json : ""), *tun, *steps;
	cJSON *cand[TUNE_MAX_STEPS];
	int bx[TUNE_MAX_STEPS], gx[TUNE_MAX_STEPS];
	size_t n = 0, configs;
	int rv = 0;

	*out = NULL;
	if (root == NULL)
		return 0; /* not a plan this can read: nothing to tune */
	steps = cJSON_GetObjectItemCaseSensitive(root, "steps");
	tun = cJSON_GetObjectItemCaseSensitive(root, "tunables");
	configs = tun ? tune_declared(tun) : 1;
	for (int i = 0; cJSON_IsArray(steps) && i < cJSON_GetArraySize(steps) &&
	     n < TUNE_MAX_STEPS;
	     i++) {
		cJSON *s = cJSON_GetArrayItem(steps, i);
		const cJSON *shm =
		    cJSON_GetObjectItemCaseSensitive(s, "shared_bytes");
		if (cJSON_GetObjectItemCaseSensitive(s, "kernel") == NULL ||
		    (shm && !(cJSON_IsNumber(shm) && shm->valueint == 0)) ||
		    !tune_dim(
		        cJSON_GetObjectItemCaseSensitive(s, "block"), &bx[n]) ||
		    !tune_dim(
		        cJSON_GetObjectItemCaseSensitive(s, "grid"), &gx[n]))
			continue;
		{
			size_t vals = KC_ARRAY_LEN(tune_blocks) + 1;
			for (size_t b = 0; b < KC_ARRAY_LEN(tune_blocks); b++)
				vals -= tune_blocks[b] == bx[n];
			if (configs * vals > KC_TUNE_MAX_CONFIGS)
				break;
			configs *= vals;
		}
		cand[n++] = s;
	}
	if (n == 0 && tun == NULL)
		goto out; /* nothing the sandbox could sweep */
	if (tun == NULL &&
	    (tun = cJSON_AddObjectToObject(root, "tunables")) == NULL) {
		rv = KC_ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		char name[24], expr[96], ref[32];
		cJSON *vals = cJSON_CreateArray();
		snprintf(name, sizeof(name), "KC_BLOCK_%zu", i);
		snprintf(ref, sizeof(ref), "$%s", name);
		snprintf(expr, sizeof(expr), "(%lld + $%s - 1) / $%s",
		    (long long)gx[i] * bx[i], name, name);
		/* The kernel's own block size first: the default. */
		if (vals == NULL ||
		    !cJSON_AddItemToArray(vals, cJSON_CreateNumber(bx[i]))) {
			cJSON_Delete(vals);
			rv = KC_ENOMEM;
			goto out;
		}
		for (size_t b = 0; b < KC_ARRAY_LEN(tune_blocks); b++)
			if (tune_blocks[b] != bx[i])
				cJSON_AddItemToArray(
				    vals, cJSON_CreateNumber(tune_blocks[b]));
		if (!cJSON_AddItemToObject(tun, name, vals) ||
		    !cJSON_ReplaceItemInObjectCaseSensitive(
		        cand[i], "block", cJSON_CreateString(ref)) ||
		    !cJSON_ReplaceItemInObjectCaseSensitive(
		        cand[i], "grid", cJSON_CreateString(expr))) {
			rv = KC_ENOMEM;
			goto out;
		}
	}
	if ((*out = cJSON_PrintUnformatted(root)) == NULL)
		rv = KC_ENOMEM;
out:
	cJSON_Delete(root);
	return rv;
}
