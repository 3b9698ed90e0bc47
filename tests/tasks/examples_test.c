/*
 * examples_test.c - every shipped example under examples/ loads as a bundle,
 * and its reference and every hand-written candidate (correct ones under
 * candidates/, broken ones under broken/) compile with NVRTC for
 * sm_90 (no GPU needed). Each kernel a plan launches must be an entry of the
 * compiled PTX whose parameters match the step's arguments in number, size
 * and kind, and each launch must fit the hardware's block and shared-memory
 * limits.
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <limits.h>
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bundle.h"
#include "kc_err.h"
#include "kc_test.h"
#include "kc_util.h"

#define MAX_PARAMS 64

/* One parameter of a PTX entry: its size and whether it is a float. */
struct ptx_param {
	int bytes;
	int is_float;
};

static const char *arch = "-arch=sm_90";

/*
 * Finds ".entry name(" in ptx and reads its parameter list and the static
 * shared memory it declares. Returns -1 when there is no such entry.
 */
static int
ptx_entry(const char *ptx, const char *name, struct ptx_param *params,
    int *nparams, long *shared)
{
	char pat[160];
	const char *p, *end, *body_end;

	snprintf(pat, sizeof(pat), ".entry %s(", name);
	if ((p = strstr(ptx, pat)) == NULL)
		return -1;
	p += strlen(pat);
	if ((end = strchr(p, ')')) == NULL)
		return -1;
	*nparams = 0;
	while ((p = strstr(p, ".param")) != NULL && p < end) {
		struct ptx_param *pp = &params[*nparams];
		p += strlen(".param");
		while (*p == ' ' || *p == '\t')
			p++;
		if (strncmp(p, ".align", 6) == 0) {
			/* A by-value struct: .param .align A .b8 name[N] */
			const char *br = strchr(p, '[');
			KT_ASSERT(br != NULL && br < end);
			pp->bytes = atoi(br + 1);
			pp->is_float = 0;
		} else {
			/* .u64 .u32 .f32 .s32 .b64 ... */
			pp->is_float = p[1] == 'f';
			pp->bytes = atoi(p + 2) / 8;
		}
		KT_ASSERT(++*nparams < MAX_PARAMS);
	}
	/* The body runs to the next entry (or the end of the module). */
	body_end = strstr(end, ".entry ");
	if (body_end == NULL)
		body_end = end + strlen(end);
	*shared = 0;
	for (p = end; (p = strstr(p, ".shared .align")) != NULL && p < body_end;
	     p++) {
		const char *br = strchr(p, '[');
		const char *nl = strchr(p, '\n');
		if (br != NULL && (nl == NULL || br < nl))
			*shared += atol(br + 1);
	}
	return 0;
}

static void
check_dims(const cJSON *step, const char *key, const char *where, int idx,
    long *product)
{
	const cJSON *d = cJSON_GetObjectItemCaseSensitive(step, key);
	long lim[3] = {2147483647L, 65535, 65535};

	if (strcmp(key, "block") == 0)
		lim[0] = lim[1] = 1024, lim[2] = 64;
	if (!cJSON_IsArray(d) || cJSON_GetArraySize(d) != 3)
		KT_FAIL(
		    "%s: steps[%d]: '%s' must be [x, y, z]", where, idx, key);
	*product = 1;
	for (int i = 0; i < 3; i++) {
		double v = cJSON_GetArrayItem(d, i)->valuedouble;
		if (v < 1 || v > lim[i])
			KT_FAIL("%s: steps[%d]: %s[%d] = %g is out of range",
			    where, idx, key, i, v);
		*product *= (long)v;
	}
}

/* Checks one launch step against the kernel's PTX entry. */
static void
check_step(const char *ptx, const cJSON *step, int idx, const char *where)
{
	const cJSON *kernel = cJSON_GetObjectItemCaseSensitive(step, "kernel");
	const cJSON *args = cJSON_GetObjectItemCaseSensitive(step, "args");
	const cJSON *sh =
	    cJSON_GetObjectItemCaseSensitive(step, "shared_bytes");
	struct ptx_param params[MAX_PARAMS];
	int nparams = 0, i = 0;
	long shared = 0, grid, block;
	const cJSON *a;

	KT_ASSERT(cJSON_IsString(kernel));
	if (ptx_entry(ptx, kernel->valuestring, params, &nparams, &shared) != 0)
		KT_FAIL("%s: steps[%d] launches '%s', which is not an extern "
		        "\"C\" __global__ kernel of the source",
		    where, idx, kernel->valuestring);
	if (cJSON_GetArraySize(args) != nparams)
		KT_FAIL("%s: steps[%d] '%s' passes %d arguments; the kernel "
		        "takes %d",
		    where, idx, kernel->valuestring, cJSON_GetArraySize(args),
		    nparams);
	cJSON_ArrayForEach(a, args)
	{
		int bytes = 8, is_float = 0;
		if (cJSON_IsObject(a)) {
			const char *t = a->child->string;
			bytes = strcmp(t, "i64") == 0 || strcmp(t, "f64") == 0
			    ? 8
			    : 4;
			is_float = t[0] == 'f';
		}
		if (params[i].bytes != bytes || params[i].is_float != is_float)
			KT_FAIL(
			    "%s: steps[%d] '%s': args[%d] is %d bytes%s but "
			    "the kernel's parameter %d is %d bytes%s",
			    where, idx, kernel->valuestring, i, bytes,
			    is_float ? " (float)" : "", i, params[i].bytes,
			    params[i].is_float ? " (float)" : "");
		i++;
	}
	check_dims(step, "grid", where, idx, &grid);
	check_dims(step, "block", where, idx, &block);
	if (block > 1024)
		KT_FAIL("%s: steps[%d]: %ld threads per block, over 1024",
		    where, idx, block);
	/* Without the opt-in attribute a block gets at most 48 KiB. */
	if (shared + (sh ? (long)sh->valuedouble : 0) > 48 * 1024)
		KT_FAIL(
		    "%s: steps[%d]: %ld bytes of shared memory, over 48 KiB",
		    where, idx, shared + (sh ? (long)sh->valuedouble : 0));
}

/* Compiles source with NVRTC and checks every launch of plan against it. */
static void
compile_and_check(const char *where, const char *source, const char *plan)
{
	char inc[PATH_MAX + 4];
	const char *opts[] = {arch, "--std=c++17", inc};
	nvrtcProgram prog;
	nvrtcResult r;
	size_t len = 0;
	char *ptx, *log;
	cJSON *root;
	const cJSON *step;
	int idx = 0;

	snprintf(inc, sizeof(inc), "-I%s", KC_CUDA_INCLUDE);
	KT_ASSERT(nvrtcCreateProgram(&prog, source, "kernel.cu", 0, NULL,
	              NULL) == NVRTC_SUCCESS);
	r = nvrtcCompileProgram(prog, (int)KC_ARRAY_LEN(opts), opts);
	if (r != NVRTC_SUCCESS) {
		nvrtcGetProgramLogSize(prog, &len);
		KT_ASSERT((log = malloc(len + 1)) != NULL);
		nvrtcGetProgramLog(prog, log);
		KT_FAIL("%s does not compile for sm_90: %s\n%s", where,
		    nvrtcGetErrorString(r), log);
	}
	KT_ASSERT(nvrtcGetCUBINSize(prog, &len) == NVRTC_SUCCESS && len > 0);
	KT_ASSERT(nvrtcGetPTXSize(prog, &len) == NVRTC_SUCCESS && len > 1);
	KT_ASSERT((ptx = malloc(len)) != NULL);
	KT_ASSERT(nvrtcGetPTX(prog, ptx) == NVRTC_SUCCESS);
	nvrtcDestroyProgram(&prog);

	KT_ASSERT((root = cJSON_Parse(plan)) != NULL);
	cJSON_ArrayForEach(
	    step, cJSON_GetObjectItemCaseSensitive(root, "steps"))
	{
		if (cJSON_GetObjectItemCaseSensitive(step, "kernel") != NULL)
			check_step(ptx, step, idx, where);
		idx++;
	}
	cJSON_Delete(root);
	free(ptx);
}

static int
cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted names of the sub-folders of dir; returns how many. */
static int
list_dirs(const char *dir, char ***out)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char **names = NULL, path[PATH_MAX];
	int n = 0;
	struct stat st;

	if (d == NULL)
		KT_FAIL("cannot open %s", dir);
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
			continue;
		KT_ASSERT(
		    (names = realloc(names, sizeof(*names) * (n + 1))) != NULL);
		KT_ASSERT((names[n++] = strdup(e->d_name)) != NULL);
	}
	closedir(d);
	qsort(names, (size_t)n, sizeof(*names), cmp_names);
	*out = names;
	return n;
}

/*
 * Loads and compiles every candidate folder under dir/sub; returns how many.
 * Broken ones (examples/<name>/broken/) compile too: their fault is one the
 * sandbox's verification must catch, not the compiler.
 */
static int
check_candidates(const Kclaw__TaskSpec *spec, const char *dir, const char *sub,
    const char *name)
{
	char cands[PATH_MAX], cdir[PATH_MAX * 2], where[PATH_MAX * 2 + 16];
	char **names = NULL;
	int n;

	snprintf(cands, sizeof(cands), "%s/%s", dir, sub);
	n = list_dirs(cands, &names);
	for (int i = 0; i < n; i++) {
		Kclaw__Candidate *c = NULL;
		snprintf(cdir, sizeof(cdir), "%s/%s", cands, names[i]);
		snprintf(where, sizeof(where), "%s %s/%s", name, sub, names[i]);
		KT_OK(kc_candidate_load(cdir, &c));
		KT_OK(kc_plan_check(spec, c->plan_json, where, 1));
		compile_and_check(where, c->source, c->plan_json);
		fprintf(stderr, "   %s: ok\n", where);
		kclaw__candidate__free_unpacked(c, NULL);
		free(names[i]);
	}
	free(names);
	return n;
}

static void
check_example(const char *dir, const char *name)
{
	Kclaw__TaskSpec *spec = NULL;
	char where[PATH_MAX];
	int n;

	KT_OK(kc_bundle_load(dir, &spec));
	KT_EQ_STR(spec->name, name);
	KT_EQ_INT(spec->reference->kind, KCLAW__REFERENCE__KIND__CUDA);
	KT_ASSERT(spec->context[0] != '\0');
	snprintf(where, sizeof(where), "%s reference", name);
	compile_and_check(where, spec->reference->cuda->source,
	    spec->reference->cuda->plan_json);
	if ((n = check_candidates(spec, dir, "candidates", name)) < 2)
		KT_FAIL(
		    "%s/candidates has %d candidates; ship at least 2", dir, n);
	if ((n = check_candidates(spec, dir, "broken", name)) < 1)
		KT_FAIL("%s/broken has %d candidates; ship at least 1 (for "
		        "repairs)",
		    dir, n);
	kclaw__task_spec__free_unpacked(spec, NULL);
}

/* The checker itself must catch what it is there to catch. */
static void
test_checker(void)
{
	const char *src = "extern \"C\" __global__ void k(const float *x, "
	                  "float *y, int n, float a) { __shared__ float "
	                  "s[64]; s[threadIdx.x] = x[0]; __syncthreads(); "
	                  "if (threadIdx.x < n) y[threadIdx.x] = a * "
	                  "s[threadIdx.x]; }";
	struct ptx_param p[MAX_PARAMS];
	nvrtcProgram prog;
	const char *opts[] = {arch};
	size_t len;
	char *ptx;
	int np;
	long shared;

	KT_ASSERT(nvrtcCreateProgram(&prog, src, "k.cu", 0, NULL, NULL) ==
	    NVRTC_SUCCESS);
	KT_ASSERT(nvrtcCompileProgram(prog, 1, opts) == NVRTC_SUCCESS);
	KT_ASSERT(nvrtcGetPTXSize(prog, &len) == NVRTC_SUCCESS);
	KT_ASSERT((ptx = malloc(len)) != NULL);
	KT_ASSERT(nvrtcGetPTX(prog, ptx) == NVRTC_SUCCESS);
	nvrtcDestroyProgram(&prog);
	KT_EQ_INT(ptx_entry(ptx, "k", p, &np, &shared), 0);
	KT_EQ_INT(np, 4);
	KT_ASSERT(p[0].bytes == 8 && !p[0].is_float);
	KT_ASSERT(p[2].bytes == 4 && !p[2].is_float);
	KT_ASSERT(p[3].bytes == 4 && p[3].is_float);
	KT_EQ_INT(shared, 256);
	KT_EQ_INT(ptx_entry(ptx, "kk", p, &np, &shared), -1);
	free(ptx);
}

int
main(void)
{
	const char *src = getenv("KCLAW_SRC");
	char dir[PATH_MAX], path[PATH_MAX * 2];
	char **names = NULL;
	int n;

	KT_RUN(test_checker);
	KT_ASSERT(src != NULL);
	snprintf(dir, sizeof(dir), "%s/examples", src);
	n = list_dirs(dir, &names);
	if (n < 6)
		KT_FAIL("%s holds %d examples; at least 6 must ship", dir, n);
	for (int i = 0; i < n; i++) {
		struct stat st;
		snprintf(path, sizeof(path), "%s/%s/task.json", dir, names[i]);
		/* Folders beside the tasks (recordings/) are not tasks. */
		if (stat(path, &st) == 0) {
			snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
			fprintf(stderr, "-- example %s\n", names[i]);
			check_example(path, names[i]);
		}
		free(names[i]);
	}
	free(names);
	return 0;
}
