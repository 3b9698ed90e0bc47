/*
 * agent_features.c - the Feature Extractor's rules: code features read from
 * the source text (comments removed), the launch plan and the evaluation.
 * Rules see syntax, not meaning; what they cannot see (how well accesses
 * coalesce, how much data is reused) the Feature Extractor asks the LLM.
 * Names are stable: long-term memory's decision policy refers to them.
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "kc_err.h"

typedef struct {
	Kclaw__Feature **v;
	size_t n;
} agent_feats;

static const char *const agent_vec_types[] = {"float2", "float4", "int2",
    "int4", "uint2", "uint4", "double2", "half2", "__half2", "__nv_bfloat162",
    "longlong2", "short4", "char4", "uchar4", "ushort4", NULL};

static bool
agent_idc(char c)
{
	return isalnum((unsigned char)c) || c == '_';
}

/* Occurrences of w in [s, e) as a whole token (w may end in '('). */
static unsigned
agent_count_word(const char *s, const char *e, const char *w)
{
	size_t n = strlen(w);
	bool open = n > 0 && !agent_idc(w[n - 1]);
	unsigned c = 0;
	const char *p;

	for (p = s; p + n <= e; p++) {
		if (memcmp(p, w, n) == 0 && (p == s || !agent_idc(p[-1])) &&
		    (open || p + n == e || !agent_idc(p[n]))) {
			c++;
			p += n - 1;
		}
	}
	return c;
}

/* Occurrences of a plain substring in [s, e). */
static unsigned
agent_count_sub(const char *s, const char *e, const char *w)
{
	size_t n = strlen(w);
	unsigned c = 0;
	const char *p;

	for (p = s; p + n <= e; p++)
		if (memcmp(p, w, n) == 0) {
			c++;
			p += n - 1;
		}
	return c;
}

static unsigned
agent_count_any(const char *s, const char *e, const char *const *words)
{
	unsigned c = 0;

	for (; *words != NULL; words++)
		c += agent_count_word(s, e, *words);
	return c;
}

static int
agent_feat(agent_feats *f, const char *name, double value, const char *note)
{
	Kclaw__Feature *x, **nv;

	if ((nv = realloc(f->v, (f->n + 1) * sizeof(*nv))) == NULL)
		return KC_ENOMEM;
	f->v = nv;
	if ((x = malloc(sizeof(*x))) == NULL)
		return KC_ENOMEM;
	kclaw__feature__init(x);
	x->value = value;
	f->v[f->n++] = x;
	if (agent_pb_setstr(&x->name, name) != 0 ||
	    agent_pb_setstr(&x->source, "rule") != 0 ||
	    agent_pb_setstr(&x->note, note) != 0)
		return KC_ENOMEM;
	return 0;
}

/* The end of the parenthesised header that starts at p ('('), or NULL.
 * Headers are short; the bound keeps unbalanced text linear. */
static const char *
agent_paren_end(const char *p)
{
	const char *end = p + 1024;
	int depth = 0;

	for (; *p != '\0' && p < end; p++) {
		if (*p == '(')
			depth++;
		else if (*p == ')' && --depth == 0)
			return p;
	}
	return NULL;
}

static bool
agent_is_k_ident(const char *s, size_t n)
{
	static const char *const exact[] = {"k", "K", "kk", "kt", "kb", "k0",
	    "ko", "ki", "ktile", "kTile", "k_tile", "num_k_tiles", NULL};
	size_t i;

	for (i = 0; exact[i] != NULL; i++)
		if (strlen(exact[i]) == n && memcmp(exact[i], s, n) == 0)
			return true;
	return (n > 2 &&
	           (memcmp(s, "k_", 2) == 0 || memcmp(s, "K_", 2) == 0)) ||
	    (n > 4 && memcmp(s, "tile", 4) == 0);
}

/*
 * Is the loop's condition bounded by a constant (k < 4, k < VEC, k < TILE)?
 * Such loops walk a vector or a tile, not the reduction dimension, whose
 * bound is a run-time value or a one-letter K.
 */
static bool
agent_const_bound(const char *h, const char *e)
{
	const char *c, *b, *end, *tok;
	bool upper = true;
	size_t n = 0;

	if ((c = memchr(h, ';', (size_t)(e - h))) == NULL ||
	    (end = memchr(c + 1, ';', (size_t)(e - c - 1))) == NULL)
		return false;
	for (b = c + 1; b < end && *b != '<' && *b != '>'; b++)
		;
	if (b == end)
		return false;
	for (b++; b < end && (*b == '=' || isspace((unsigned char)*b)); b++)
		;
	for (tok = b; b < end && !isspace((unsigned char)*b); b++, n++) {
		if (!agent_idc(*b))
			return false; /* an expression: n - k0, K / 4 */
		if (islower((unsigned char)*b))
			upper = false;
	}
	for (; b < end; b++)
		if (!isspace((unsigned char)*b))
			return false;
	if (n == 0)
		return false;
	if (isdigit((unsigned char)tok[0]))
		return true;
	return upper && n > 1;
}

/* for-loops whose header names a K-like variable, and if-statements with a
 * comparison (the usual bounds check). */
static void
agent_count_control(const char *src, unsigned *k_loops, unsigned *bounds)
{
	const char *p = src, *h, *e, *q;
	bool is_for;

	*k_loops = *bounds = 0;
	while (*p != '\0') {
		if (!((strncmp(p, "for", 3) == 0 && !agent_idc(p[3])) ||
		        (strncmp(p, "if", 2) == 0 && !agent_idc(p[2]))) ||
		    (p > src && agent_idc(p[-1]))) {
			p++;
			continue;
		}
		is_for = p[0] == 'f';
		for (h = p + (is_for ? 3 : 2); isspace((unsigned char)*h); h++)
			;
		if (*h != '(' || (e = agent_paren_end(h)) == NULL) {
			p++;
			continue;
		}
		if (is_for) {
			for (q = h; q < e; q++) {
				const char *s = q;
				if (!agent_idc(*q) ||
				    (q > h && agent_idc(q[-1])))
					continue;
				while (q < e && agent_idc(*q))
					q++;
				if (agent_is_k_ident(s, (size_t)(q - s))) {
					if (!agent_const_bound(h, e))
						(*k_loops)++;
					break;
				}
			}
		} else {
			for (q = h; q < e; q++) {
				if ((*q == '<' && q[1] != '<' &&
				        q[-1] != '<') ||
				    (*q == '>' && q[1] != '>' && q[-1] != '>' &&
				        q[-1] != '-'))
					break;
			}
			if (q < e)
				(*bounds)++;
		}
		p = h;
	}
}

#define AGENT_VEC_NAMES 64

/* Pointers declared with a vector type: "const float4 *__restrict__ x". */
typedef struct {
	char names[AGENT_VEC_NAMES][48];
	unsigned n;
} agent_vec_names;

static void
agent_collect_vec_ptrs(const char *src, agent_vec_names *v)
{
	const char *const *t;
	const char *p, *q;
	bool ptr;
	size_t n, tn;

	v->n = 0;
	for (t = agent_vec_types; *t != NULL; t++) {
		tn = strlen(*t);
		for (p = src; (p = strstr(p, *t)) != NULL; p += tn) {
			if ((p > src && agent_idc(p[-1])) || agent_idc(p[tn]))
				continue;
			for (ptr = false, q = p + tn;;) {
				while (
				    isspace((unsigned char)*q) || *q == '*') {
					ptr |= *q == '*';
					q++;
				}
				if (strncmp(q, "const", 5) == 0 &&
				    !agent_idc(q[5]))
					q += 5;
				else if (strncmp(q, "__restrict__", 12) == 0)
					q += 12;
				else
					break;
			}
			for (n = 0; agent_idc(q[n]); n++)
				;
			if (ptr && n > 0 && n < 48 && v->n < AGENT_VEC_NAMES) {
				memcpy(v->names[v->n], q, n);
				v->names[v->n++][n] = '\0';
			}
		}
	}
}

/* A vector pointer of v indexed (x4[i]) or dereferenced (*x4) in [s, e). */
static bool
agent_vec_ptr_access(const char *s, const char *e, const agent_vec_names *v)
{
	const char *p, *q;
	unsigned i;
	size_t n;

	for (i = 0; i < v->n; i++) {
		n = strlen(v->names[i]);
		for (p = s; p + n <= e; p++) {
			if (memcmp(p, v->names[i], n) != 0 ||
			    (p > s && agent_idc(p[-1])) ||
			    (p + n < e && agent_idc(p[n])))
				continue;
			for (q = p + n; q < e && isspace((unsigned char)*q);
			     q++)
				;
			if ((q < e && *q == '[') || (p > s && p[-1] == '*'))
				return true;
		}
	}
	return false;
}

/* A vector pointer type in [s, e): "float4 *", "const float4*" (a cast or
 * a declaration). */
static bool
agent_vec_ptr_type(const char *s, const char *e)
{
	const char *const *t;
	const char *p, *q;
	size_t n;

	for (t = agent_vec_types; *t != NULL; t++) {
		n = strlen(*t);
		for (p = s; p + n <= e; p++) {
			if (memcmp(p, *t, n) != 0 ||
			    (p > s && agent_idc(p[-1])) ||
			    (p + n < e && agent_idc(p[n])))
				continue;
			for (q = p + n; q < e && isspace((unsigned char)*q);
			     q++)
				;
			if (q + 5 <= e && strncmp(q, "const", 5) == 0)
				for (q += 5;
				     q < e && isspace((unsigned char)*q); q++)
					;
			if (q < e && *q == '*')
				return true;
		}
	}
	return false;
}

/*
 * Statements moving vector types to or from memory (syntax only, as the
 * file's comment says). A store: the left side indexes or dereferences a
 * vector pointer, or dereferences or indexes a cast to one. A load: the
 * same on the right side. Declaring a vector pointer is neither.
 */
static void
agent_count_vector_io(const char *src, unsigned *loads, unsigned *stores)
{
	const char *p = src, *end, *eq, *q, *l;
	agent_vec_names vp;
	bool lmem, rmem;

	agent_collect_vec_ptrs(src, &vp);
	*loads = *stores = 0;
	while (*p != '\0') {
		end = strpbrk(p, ";{}");
		if (end == NULL)
			end = p + strlen(p);
		for (eq = NULL, q = p; q < end; q++) {
			if (*q == '=' && q[1] != '=' && q > p &&
			    strchr("=!<>+-*/%&|^", q[-1]) == NULL) {
				eq = q;
				break;
			}
		}
		if (eq == NULL) {
			p = *end ? end + 1 : end;
			continue;
		}
		for (l = p; l < eq &&
		     (isspace((unsigned char)*l) || *l == '{' || *l == '}' ||
		         *l == ')');
		     l++)
			;
		lmem = memchr(l, '[', (size_t)(eq - l)) != NULL || *l == '*';
		if (!lmem && agent_vec_ptr_type(l, eq)) {
			p = *end ? end + 1 : end;
			continue; /* float4 *x4 = ...: a declaration */
		}
		if (lmem &&
		    (agent_vec_ptr_access(l, eq, &vp) ||
		        agent_vec_ptr_type(l, eq)))
			(*stores)++;
		rmem = memchr(eq + 1, '[', (size_t)(end - eq - 1)) != NULL ||
		    memchr(eq + 1, '*', (size_t)(end - eq - 1)) != NULL;
		if (rmem &&
		    (agent_vec_ptr_access(eq + 1, end, &vp) ||
		        agent_vec_ptr_type(eq + 1, end)))
			(*loads)++;
		p = *end ? end + 1 : end;
	}
}

static int
agent_source_features(const char *src, agent_feats *f)
{
	static const char *const tc[] = {
	    "wmma", "mma_sync", "load_matrix_sync", "__hmma", "wgmma", NULL};
	static const char *const shfl[] = {"__shfl_sync", "__shfl_down_sync",
	    "__shfl_up_sync", "__shfl_xor_sync", "__reduce_add_sync",
	    "__reduce_max_sync", "__reduce_min_sync", NULL};
	static const char *const half[] = {"__half", "half", "half2", "__half2",
	    "__nv_bfloat16", "__nv_bfloat162", NULL};
	static const char *const fast[] = {"__expf", "__logf", "__fdividef",
	    "__sinf", "__cosf", "__powf", "rsqrtf", "__frcp_rn", "__fmaf_rn",
	    "exp2f", NULL};
	static const char *const async[] = {
	    "__pipeline_memcpy_async", "memcpy_async", "cp_async", NULL};
	const char *e = src + strlen(src);
	unsigned kernels, smem, sync, k_loops, bounds, vl, vs, tcores, at;
	char note[160];
	int rv;

	kernels = agent_count_word(src, e, "__global__");
	smem = agent_count_word(src, e, "__shared__");
	sync = agent_count_word(src, e, "__syncthreads") +
	    agent_count_word(src, e, "__syncwarp") +
	    agent_count_sub(src, e, ".sync()");
	agent_count_control(src, &k_loops, &bounds);
	agent_count_vector_io(src, &vl, &vs);
	tcores = agent_count_any(src, e, tc) + agent_count_sub(src, e, "mma.") +
	    agent_count_sub(src, e, "ldmatrix");
	at =
	    agent_count_sub(src, e, "atomic") + agent_count_sub(src, e, "red.");

	snprintf(note, sizeof(note), "%u __shared__ declarations, %u barriers",
	    smem, sync);
	if ((rv = agent_feat(f, "kernels", kernels, "__global__ functions")) ||
	    (rv = agent_feat(
	         f, "smem_arrays", smem, "__shared__ declarations")) ||
	    (rv = agent_feat(f, "smem_dynamic",
	         agent_count_sub(src, e, "extern __shared__") > 0,
	         "dynamic shared memory (extern __shared__)")) ||
	    (rv = agent_feat(f, "smem_tiling", smem > 0 && sync > 0, note)) ||
	    (rv = agent_feat(f, "barriers", sync,
	         "__syncthreads, __syncwarp, group syncs")) ||
	    (rv = agent_feat(f, "vector_loads", vl,
	         "statements loading float4/int4/half2/... from memory")) ||
	    (rv = agent_feat(f, "vector_stores", vs,
	         "statements storing float4/int4/half2/... to memory")) ||
	    (rv = agent_feat(f, "tensor_core", tcores,
	         "wmma, mma.sync, ldmatrix, wgmma uses")) ||
	    (rv = agent_feat(f, "k_loops", k_loops,
	         "for-loops over a K-like index (reduction dimension)")) ||
	    (rv = agent_feat(f, "unrolled_loops",
	         agent_count_sub(src, e, "#pragma unroll"),
	         "#pragma unroll")) ||
	    (rv = agent_feat(
	         f, "atomics", at, "atomic* calls and red. instructions")) ||
	    (rv = agent_feat(f, "warp_shuffles",
	         agent_count_any(src, e, shfl) +
	             agent_count_sub(src, e, ".shfl"),
	         "warp shuffles and warp reductions")) ||
	    (rv = agent_feat(f, "bounds_checks", bounds,
	         "if-statements with a comparison")) ||
	    (rv = agent_feat(f, "grid_stride_loops",
	         agent_count_sub(src, e, "gridDim.x * blockDim.x") +
	             agent_count_sub(src, e, "blockDim.x * gridDim.x"),
	         "loops striding by the whole grid")) ||
	    (rv = agent_feat(f, "half_precision",
	         agent_count_any(src, e, half) > 0, "fp16/bf16 types used")) ||
	    (rv = agent_feat(f, "async_copy",
	         agent_count_any(src, e, async) +
	             agent_count_sub(src, e, "cp.async"),
	         "asynchronous global-to-shared copies")) ||
	    (rv = agent_feat(f, "readonly_hints",
	         agent_count_word(src, e, "__ldg") +
	             agent_count_word(src, e, "__restrict__"),
	         "__ldg and __restrict__")) ||
	    (rv = agent_feat(f, "fast_math", agent_count_any(src, e, fast),
	         "fast-math intrinsics")))
		return rv;
	return 0;
}

static int
agent_plan_features(const char *plan_json, agent_feats *f)
{
	const cJSON *steps, *scratch, *s, *d, *x;
	double nsteps = 0, lib = 0, scratch_bytes = 0, max_block = 0;
	double max_grid = 0, dyn_smem = 0;
	cJSON *root;
	int rv;

	if (plan_json == NULL || (root = cJSON_Parse(plan_json)) == NULL)
		return 0;
	steps = cJSON_GetObjectItemCaseSensitive(root, "steps");
	scratch = cJSON_GetObjectItemCaseSensitive(root, "scratch");
	cJSON_ArrayForEach(s, scratch)
	{
		x = cJSON_GetObjectItemCaseSensitive(s, "bytes");
		if (cJSON_IsNumber(x))
			scratch_bytes += x->valuedouble;
	}
	cJSON_ArrayForEach(s, steps)
	{
		double g = 1, b = 1;
		nsteps++;
		if (cJSON_GetObjectItemCaseSensitive(s, "kernel") == NULL) {
			lib++;
			continue;
		}
		cJSON_ArrayForEach(
		    d, cJSON_GetObjectItemCaseSensitive(s, "grid"))
		{
			if (cJSON_IsNumber(d))
				g *= d->valuedouble;
		}
		cJSON_ArrayForEach(
		    d, cJSON_GetObjectItemCaseSensitive(s, "block"))
		{
			if (cJSON_IsNumber(d))
				b *= d->valuedouble;
		}
		x = cJSON_GetObjectItemCaseSensitive(s, "shared_bytes");
		if (cJSON_IsNumber(x) && x->valuedouble > dyn_smem)
			dyn_smem = x->valuedouble;
		if (g > max_grid)
			max_grid = g;
		if (b > max_block)
			max_block = b;
	}
	cJSON_Delete(root);
	if ((rv = agent_feat(f, "launch_steps", nsteps, "steps in the plan")) ||
	    (rv = agent_feat(f, "library_steps", lib,
	         "library steps (e.g. cuBLASLt matmul)")) ||
	    (rv = agent_feat(
	         f, "scratch_bytes", scratch_bytes, "scratch memory")) ||
	    (rv = agent_feat(f, "max_block_threads", max_block,
	         "largest block of a step")) ||
	    (rv = agent_feat(
	         f, "max_grid_blocks", max_grid, "largest grid of a step")) ||
	    (rv = agent_feat(f, "dynamic_smem_bytes", dyn_smem,
	         "largest dynamic shared memory of a step")))
		return rv;
	return 0;
}

static int
agent_eval_features(const Kclaw__EvalResult *e, agent_feats *f)
{
	double regs = 0, spill = 0, local = 0, smem = 0, occ = 1;
	size_t i;
	int rv;

	if (e == NULL || e->n_kernels == 0)
		return 0;
	for (i = 0; i < e->n_kernels; i++) {
		const Kclaw__KernelResources *k = e->kernels[i];
		if (k->registers > regs)
			regs = k->registers;
		spill += k->spill_bytes;
		if (k->local_bytes > local)
			local = k->local_bytes;
		if (k->shared_static_bytes > smem)
			smem = k->shared_static_bytes;
		if (k->occupancy > 0 && k->occupancy < occ)
			occ = k->occupancy;
	}
	if ((rv = agent_feat(f, "max_registers", regs,
	         "most registers per thread of a kernel")) ||
	    (rv = agent_feat(f, "spill_bytes", spill, "register spills")) ||
	    (rv = agent_feat(
	         f, "max_local_bytes", local, "local memory per thread")) ||
	    (rv = agent_feat(f, "max_static_smem_bytes", smem,
	         "static shared memory of a kernel")) ||
	    (rv = agent_feat(f, "min_occupancy", occ,
	         "lowest theoretical occupancy of a kernel")))
		return rv;
	return 0;
}

int
agent_rule_features(const char *source, const char *plan_json,
    const Kclaw__EvalResult *eval, Kclaw__Feature ***feats, size_t *n_feats)
{
	agent_feats f = {*feats, *n_feats};
	char *clean;
	int rv;

	if ((clean = agent_strip_comments(source ? source : "")) == NULL)
		return KC_ENOMEM;
	rv = agent_source_features(clean, &f);
	free(clean);
	if (rv == 0)
		rv = agent_plan_features(plan_json, &f);
	if (rv == 0)
		rv = agent_eval_features(eval, &f);
	*feats = f.v;
	*n_feats = f.n;
	return rv;
}
