/*
 * compile.c - NVRTC, the PTX signature reader and the compile cache.
 */
#include "compile.h"

#include <nvrtc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kc_err.h"
#include "kc_log.h"
#include "kc_util.h"

#ifndef SBX_CUDA_INCLUDE
#define SBX_CUDA_INCLUDE "/usr/local/cuda/include"
#endif

#define COMPILE_MAX_ARTIFACT (256u << 20)

const char *
sbx_cuda_include_dir(void)
{
	static char dir[1024];
	const char *home;
	struct stat st;

	if (dir[0] != '\0')
		return dir;
	if ((home = getenv("CUDA_HOME")) != NULL ||
	    (home = getenv("CUDA_PATH")) != NULL) {
		snprintf(dir, sizeof(dir), "%s/include/cuda_runtime.h", home);
		if (stat(dir, &st) == 0) {
			snprintf(dir, sizeof(dir), "%s/include", home);
			return dir;
		}
	}
	snprintf(dir, sizeof(dir), "%s", SBX_CUDA_INCLUDE);
	if (stat(dir, &st) != 0)
		snprintf(dir, sizeof(dir), "/usr/local/cuda/include");
	return dir;
}

/* ---- PTX signatures ---- */

static uint32_t
ptx_param_size(const char *decl, const char *end)
{
	const char *b;

	/* ".param .align 8 .b8 name[24]": an aggregate of 24 bytes. */
	if ((b = memchr(decl, '[', (size_t)(end - decl))) != NULL)
		return (uint32_t)strtoul(b + 1, NULL, 10);
	if (strstr(decl, "64") != NULL && strstr(decl, "64") < end)
		return 8;
	if (strstr(decl, "32") != NULL && strstr(decl, "32") < end)
		return 4;
	if (strstr(decl, "16") != NULL && strstr(decl, "16") < end)
		return 2;
	return 1;
}

int
sbx_ptx_signatures(const char *ptx, sbx_sig **sigs, size_t *nsigs)
{
	size_t n = 0, cap = 8;
	sbx_sig *out = calloc(cap, sizeof(*out));
	const char *p = ptx;

	if (out == NULL)
		return KC_ENOMEM;
	while ((p = strstr(p, ".entry ")) != NULL) {
		const char *name = p + 7, *open, *close;
		sbx_sig *s;
		size_t len;

		while (*name == ' ')
			name++;
		if ((open = strchr(name, '(')) == NULL)
			break;
		close = strchr(open, ')');
		if (close == NULL)
			break;
		len = (size_t)(open - name);
		while (
		    len > 0 && (name[len - 1] == ' ' || name[len - 1] == '\n'))
			len--;
		if (n == cap) {
			sbx_sig *g = realloc(out, 2 * cap * sizeof(*out));
			if (g == NULL) {
				free(out);
				return KC_ENOMEM;
			}
			out = g;
			memset(out + cap, 0, cap * sizeof(*out));
			cap *= 2;
		}
		s = &out[n++];
		snprintf(s->name, sizeof(s->name), "%.*s", (int)len, name);
		for (const char *q = open; q != NULL && q < close;) {
			const char *decl = strstr(q, ".param");
			const char *end;
			if (decl == NULL || decl > close)
				break;
			end = strchr(decl, ',');
			if (end == NULL || end > close)
				end = close;
			if (s->nparams < SBX_MAX_ARGS)
				s->sizes[s->nparams++] =
				    ptx_param_size(decl, end);
			q = end + 1;
		}
		p = close;
	}
	*sigs = out;
	*nsigs = n;
	return 0;
}

/* ---- ptxas -v log ---- */

int
sbx_ptxas_parse(const char *log, sbx_ptxas_info **info, size_t *ninfo)
{
	size_t n = 0, cap = 8;
	sbx_ptxas_info *out = calloc(cap, sizeof(*out)), *cur = NULL;
	const char *line = log;

	if (out == NULL)
		return KC_ENOMEM;
	while (line != NULL && *line != '\0') {
		const char *nl = strchr(line, '\n'), *q;
		char name[SBX_NAME_MAX];

		if (sscanf(line,
		        "ptxas info : Compiling entry function '%127[^']'",
		        name) == 1 ||
		    sscanf(line,
		        "ptxas info    : Compiling entry function '%127[^']'",
		        name) == 1) {
			if (n == cap) {
				sbx_ptxas_info *g =
				    realloc(out, 2 * cap * sizeof(*out));
				if (g == NULL) {
					free(out);
					return KC_ENOMEM;
				}
				out = g;
				cap *= 2;
			}
			cur = &out[n++];
			memset(cur, 0, sizeof(*cur));
			snprintf(cur->name, sizeof(cur->name), "%s", name);
		} else if (cur != NULL) {
			if ((q = strstr(line, "bytes stack frame")) != NULL &&
			    (nl == NULL || q < nl)) {
				const char *s = strstr(line, ".");
				int a = 0, b = 0, c = 0;
				if (s != NULL &&
				    sscanf(s + 1,
				        " %d bytes stack frame, %d bytes spill "
				        "stores, %d bytes spill loads",
				        &a, &b, &c) == 3) {
					cur->stack_bytes = a;
					cur->spill_store_bytes = b;
					cur->spill_load_bytes = c;
				}
			}
			if ((q = strstr(line, "Used ")) != NULL &&
			    (nl == NULL || q < nl)) {
				const char *sm = strstr(q, " bytes smem");
				const char *cm = strstr(q, " bytes cmem[0]");
				cur->registers = atoi(q + 5);
				if (sm != NULL && (nl == NULL || sm < nl)) {
					const char *b = sm;
					while (b > q && b[-1] != ' ')
						b--;
					cur->shared_bytes = atoi(b);
				}
				if (cm != NULL && (nl == NULL || cm < nl)) {
					const char *b = cm;
					while (b > q && b[-1] != ' ')
						b--;
					cur->const_bytes = atoi(b);
				}
			}
		}
		line = nl ? nl + 1 : NULL;
	}
	*info = out;
	*ninfo = n;
	return 0;
}

/* ---- what a candidate may include ---- */

/*
 * A candidate's source comes from an LLM, and NVRTC's preprocessor would
 * read any file the sandbox can: `#include "/etc/passwd"` (or a relative
 * one, searched from the working folder) puts the file into the compile
 * log, which travels back to the agents. So before NVRTC runs, every
 * #include must be a literal <name> that can only be found on the
 * toolkit's -I folders: letters, digits and _./- without "..", not
 * absolute. A macro operand (`#include F`) is refused too: what it expands
 * to is only known to the preprocessor. The scan is deliberately coarse:
 * it does not know about comments or strings, so it may refuse a harmless
 * "#include" spelled inside one, never accept a real one.
 *
 * `__has_include("/any/path")` (and _next, and __has_embed) reads no file
 * but tells whether one exists, so it obeys the same rule: only
 * `__has_include(<name>)` with an allowed name, or `defined` asking
 * whether the feature exists. Token pasting (`##`) can spell it from
 * pieces no scan sees, so a #define may not paste.
 */

static bool
compile_is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r';
}

/* Skips blanks and comments forward (within the line). */
static size_t
compile_skip_fwd(const char *s, size_t i, size_t n)
{
	for (;;) {
		while (i < n && compile_is_space(s[i]))
			i++;
		if (i + 1 < n && s[i] == '/' && s[i + 1] == '*') {
			const char *e = strstr(s + i + 2, "*/");
			i = e ? (size_t)(e - s) + 2 : n;
			continue;
		}
		return i;
	}
}

/* True when the directive name at s[i] is preceded by '#' (or the digraph
 * "%:" or trigraph "??="), allowing blanks and comments in between. */
static bool
compile_after_hash(const char *s, size_t i)
{
	for (;;) {
		while (i > 0 && compile_is_space(s[i - 1]))
			i--;
		if (i >= 2 && s[i - 1] == '/' && s[i - 2] == '*') {
			size_t j = i - 2;
			while (j >= 2 && !(s[j - 2] == '/' && s[j - 1] == '*'))
				j--;
			if (j < 2)
				return false;
			i = j - 2;
			continue;
		}
		break;
	}
	if (i >= 1 && s[i - 1] == '#')
		return true;
	if (i >= 2 && s[i - 2] == '%' && s[i - 1] == ':')
		return true;
	return i >= 3 && s[i - 3] == '?' && s[i - 2] == '?' && s[i - 1] == '=';
}

static bool
compile_ident_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	    (c >= '0' && c <= '9') || c == '_';
}

/* Checks the operand at s[i]: "<name>" with an allowed name. */
static bool
compile_operand_ok(const char *s, size_t i, size_t n)
{
	size_t b;

	if (i >= n || s[i] != '<')
		return false;
	b = ++i;
	while (i < n && s[i] != '>') {
		if (!compile_ident_char(s[i]) && s[i] != '.' && s[i] != '/' &&
		    s[i] != '-')
			return false;
		i++;
	}
	if (i >= n || i == b || s[b] == '/')
		return false;
	for (size_t k = b; k + 1 < i; k++)
		if (s[k] == '.' && s[k + 1] == '.')
			return false;
	return true;
}

/* True when the identifier at s[i] is the operand of `defined`, with or
 * without parentheses. */
static bool
compile_after_defined(const char *s, size_t i)
{
	while (i > 0 && (compile_is_space(s[i - 1]) || s[i - 1] == '('))
		i--;
	return i >= 7 && memcmp(s + i - 7, "defined", 7) == 0 &&
	    (i == 7 || !compile_ident_char(s[i - 8]));
}

/* Checks a probe's operand at s[i]: "( <name> )" with an allowed name. */
static bool
compile_probe_ok(const char *s, size_t i, size_t n)
{
	i = compile_skip_fwd(s, i, n);
	if (i >= n || s[i] != '(')
		return false;
	i = compile_skip_fwd(s, i + 1, n);
	if (!compile_operand_ok(s, i, n))
		return false;
	while (s[i] != '>')
		i++;
	i = compile_skip_fwd(s, i + 1, n);
	return i < n && s[i] == ')';
}

/* The refusal of a probe or a pasting #define at line (NULL: none). */
static const char *
compile_probe_check(const char *t, size_t i, size_t e, size_t n)
{
	static const char *const probes[] = {
	    "__has_include", "__has_include_next", "__has_embed"};

	for (size_t k = 0; k < KC_ARRAY_LEN(probes); k++)
		if (e - i == strlen(probes[k]) &&
		    memcmp(t + i, probes[k], e - i) == 0 &&
		    !compile_after_defined(t, i) && !compile_probe_ok(t, e, n))
			return probes[k];
	if (e - i == 6 && memcmp(t + i, "define", 6) == 0 &&
	    compile_after_hash(t, i)) {
		for (size_t j = e; j + 1 < n && t[j] != '\n'; j++)
			if ((t[j] == '#' && t[j + 1] == '#') ||
			    (j + 3 < n && memcmp(t + j, "%:%:", 4) == 0))
				return "##";
	}
	return NULL;
}

int
sbx_check_includes(const char *source, char *why, size_t whylen)
{
	static const char *const names[] = {
	    "include", "include_next", "import", "embed"};
	size_t n = 0, line = 1;
	char *t = malloc(strlen(source) + 1);
	int rv = 0;

	if (t == NULL)
		return KC_ENOMEM;
	/* Line splices first: the preprocessor joins them before it reads a
	 * directive. */
	for (const char *p = source; *p; p++) {
		if (p[0] == '\\' && p[1] == '\n') {
			p++;
			continue;
		}
		if (p[0] == '\\' && p[1] == '\r' && p[2] == '\n') {
			p += 2;
			continue;
		}
		t[n++] = *p;
	}
	t[n] = '\0';
	for (size_t i = 0; i < n && rv == 0; i++) {
		if (t[i] == '\n')
			line++;
		if (!compile_ident_char(t[i]) ||
		    (i > 0 && compile_ident_char(t[i - 1])))
			continue;
		size_t e = i;
		while (e < n && compile_ident_char(t[e]))
			e++;
		const char *probe = compile_probe_check(t, i, e, n);
		if (probe != NULL) {
			snprintf(why, whylen,
			    "kernel.cu:%zu: %s is not allowed: %s", line,
			    strcmp(probe, "##") == 0 ? "a #define that "
			                               "pastes tokens (##)"
			                             : probe,
			    strcmp(probe, "##") == 0
			        ? "pasting can spell __has_include, which "
			          "tells whether a file exists on the sandbox "
			          "host; write the names out"
			        : "it tells whether a file exists on the "
			          "sandbox host; a kernel may only ask for "
			          "toolkit headers as a literal <name>, e.g. "
			          "__has_include(<cuda_fp16.h>)");
			rv = KC_EINVAL;
			break;
		}
		for (size_t k = 0; k < KC_ARRAY_LEN(names); k++) {
			if (e - i != strlen(names[k]) ||
			    memcmp(t + i, names[k], e - i) != 0 ||
			    !compile_after_hash(t, i))
				continue;
			size_t o = compile_skip_fwd(t, e, n);
			if (compile_operand_ok(t, o, n))
				continue;
			size_t oe = o;
			while (oe < n && oe - o < 60 && t[oe] != '\n')
				oe++;
			snprintf(why, whylen,
			    "kernel.cu:%zu: #%s %.*s is not allowed: a kernel "
			    "may only include toolkit headers as a literal "
			    "<name> (letters, digits, _ . / -, no \"..\", not "
			    "absolute), e.g. #include <cuda_fp16.h>; paste "
			    "anything else into the source",
			    line, names[k], (int)(oe - o), t + o);
			rv = KC_EINVAL;
			break;
		}
		i = e - 1;
	}
	free(t);
	return rv;
}

/* ---- NVRTC ---- */

/*
 * Whether source may be compiled with NVRTC's -minimal, which leaves out
 * of what every program parses the texture and surface functions, the
 * device runtime (cudadevrt: cudaMalloc and the like, launches from device
 * code) and the runtime's types (cudaStream_t): relu's kernel compiled in
 * 52.2 ms instead of 60.8 (the same cubin; 5-18 % less over the kernels of
 * tests/gpu/kernelbench, median of five each on the development machine).
 * Not where the source names any of them; and a
 * source that does not compile with it is compiled again without it
 * (compile_nvrtc), so no source that compiles without it fails with it.
 */
static int
compile_minimal_ok(const char *source)
{
	static const char *const uses[] = {"tex1D", "tex2D", "tex3D",
	    "texCubemap", "texture", "surf1D", "surf2D", "surf3D",
	    "surfCubemap", "surface", "<<<", "cooperative_groups"};

	for (size_t i = 0; i < sizeof(uses) / sizeof(uses[0]); i++)
		if (strstr(source, uses[i]) != NULL)
			return 0;
	for (const char *p = source; (p = strstr(p, "cuda")) != NULL; p += 4)
		if (p[4] >= 'A' && p[4] <= 'Z')
			return 0;
	return 1;
}

static int
compile_nvrtc_with(
    const char *source, const char *arch, int minimal, sbx_compiled *out)
{
	char arch_opt[64], inc[1100], inc_cccl[1100];
	const char *opts[11];
	int nopts = 0;
	nvrtcProgram prog;
	nvrtcResult r;
	size_t n;
	int rv = 0;

	snprintf(arch_opt, sizeof(arch_opt), "-arch=%s", arch);
	snprintf(inc, sizeof(inc), "-I%s", sbx_cuda_include_dir());
	snprintf(
	    inc_cccl, sizeof(inc_cccl), "-I%s/cccl", sbx_cuda_include_dir());
	opts[nopts++] = arch_opt;
	opts[nopts++] = "--ptxas-options=-v";
	opts[nopts++] = "-lineinfo";
	opts[nopts++] = "--std=c++17";
	opts[nopts++] = inc;
	opts[nopts++] = inc_cccl;
	/* No define tells a candidate it is being evaluated: what it
	 * compiles to here is what runs in production. */
	/* Never search the source's folder (the sandbox's working folder):
	 * only the toolkit's headers may be included. */
	opts[nopts++] = "--no-source-include";
	if (minimal)
		opts[nopts++] = "-minimal";

	r = nvrtcCreateProgram(&prog, source, "kernel.cu", 0, NULL, NULL);
	if (r != NVRTC_SUCCESS)
		return kc_seterr(
		    KC_ECUDA, "nvrtcCreateProgram: %s", nvrtcGetErrorString(r));
	r = nvrtcCompileProgram(prog, nopts, opts);
	if (nvrtcGetProgramLogSize(prog, &n) == NVRTC_SUCCESS &&
	    (out->log = malloc(n + 1)) != NULL) {
		nvrtcGetProgramLog(prog, out->log);
		out->log[n] = '\0';
	}
	if (r == NVRTC_ERROR_COMPILATION) {
		rv = kc_seterr(
		    KC_EINVAL, "kernel.cu does not compile for %s", arch);
		goto out;
	}
	if (r == NVRTC_ERROR_INVALID_OPTION) {
		rv = kc_seterr(KC_EINVAL,
		    "NVRTC refused architecture '%s'; use sm_XX, e.g. sm_90",
		    arch);
		goto out;
	}
	if (r != NVRTC_SUCCESS) {
		rv = kc_seterr(KC_ECUDA, "nvrtcCompileProgram: %s",
		    nvrtcGetErrorString(r));
		goto out;
	}
	if (nvrtcGetCUBINSize(prog, &out->cubin_len) != NVRTC_SUCCESS ||
	    out->cubin_len == 0) {
		rv = kc_seterr(KC_EINVAL,
		    "NVRTC made no CUBIN for '%s'; use a real architecture "
		    "(sm_XX), not a virtual one (compute_XX)",
		    arch);
		goto out;
	}
	if ((out->cubin = malloc(out->cubin_len)) == NULL) {
		rv = KC_ENOMEM;
		goto out;
	}
	nvrtcGetCUBIN(prog, out->cubin);
	if (nvrtcGetPTXSize(prog, &n) == NVRTC_SUCCESS &&
	    (out->ptx = malloc(n + 1)) != NULL) {
		nvrtcGetPTX(prog, out->ptx);
		out->ptx[n] = '\0';
	}
out:
	nvrtcDestroyProgram(&prog);
	return rv;
}

static int
compile_nvrtc(const char *source, const char *arch, sbx_compiled *out)
{
	int rv;

	if (!compile_minimal_ok(source))
		return compile_nvrtc_with(source, arch, 0, out);
	if ((rv = compile_nvrtc_with(source, arch, 1, out)) != KC_EINVAL)
		return rv;
	/* What it says without -minimal is the candidate's compile log. */
	free(out->log);
	free(out->cubin);
	free(out->ptx);
	out->log = out->ptx = NULL;
	out->cubin = NULL;
	out->cubin_len = 0;
	return compile_nvrtc_with(source, arch, 0, out);
}

/* ---- the cache ---- */

static void
compile_key(const char *source, const char *arch, char key[65])
{
	kc_str s = {0};
	int major = 0, minor = 0;

	nvrtcVersion(&major, &minor);
	/* The options are fixed in compile_nvrtc; bump v2 when they change. */
	kc_str_printf(&s, "v2\n%s\nnvrtc %d.%d\n%s\n", arch, major, minor,
	    sbx_cuda_include_dir());
	kc_str_append(&s, source);
	kc_sha256_hex(s.buf ? s.buf : "", s.len, key);
	kc_str_free(&s);
}

static int
compile_cache_read(const char *dir, const char *key, sbx_compiled *out)
{
	char path[1200];
	size_t len;
	char *buf;

	snprintf(path, sizeof(path), "%s/%s.cubin", dir, key);
	if (kc_read_file(path, COMPILE_MAX_ARTIFACT, &buf, &len) != 0)
		return -1;
	out->cubin = buf;
	out->cubin_len = len;
	snprintf(path, sizeof(path), "%s/%s.ptx", dir, key);
	if (kc_read_file(path, COMPILE_MAX_ARTIFACT, &out->ptx, &len) != 0)
		goto miss;
	snprintf(path, sizeof(path), "%s/%s.log", dir, key);
	if (kc_read_file(path, COMPILE_MAX_ARTIFACT, &out->log, &len) != 0)
		goto miss;
	return 0;
miss:
	free(out->cubin);
	free(out->ptx);
	out->cubin = out->ptx = NULL;
	return -1;
}

static void
compile_cache_write(const char *dir, const char *key, const sbx_compiled *c)
{
	char path[1200];

	if (kc_mkdirs(dir, 0700) != 0)
		return;
	snprintf(path, sizeof(path), "%s/%s.ptx", dir, key);
	kc_write_file(path, c->ptx ? c->ptx : "", c->ptx ? strlen(c->ptx) : 0);
	snprintf(path, sizeof(path), "%s/%s.log", dir, key);
	kc_write_file(path, c->log ? c->log : "", c->log ? strlen(c->log) : 0);
	/* The CUBIN last: its presence marks a complete entry. */
	snprintf(path, sizeof(path), "%s/%s.cubin", dir, key);
	if (kc_write_file(path, c->cubin, c->cubin_len) != 0)
		KC_WARN(
		    "compile cache: cannot write %s: %s", path, kc_lasterr());
}

int
sbx_compile_is_cached(
    const char *source, const char *arch, const char *cache_dir)
{
	char key[65], path[1200];

	if (cache_dir == NULL)
		return 0;
	compile_key(source, arch, key);
	snprintf(path, sizeof(path), "%s/%s.cubin", cache_dir, key);
	return access(path, R_OK) == 0;
}

int
sbx_compile(const char *source, const char *arch, const char *cache_dir,
    sbx_compiled *out)
{
	uint64_t t0 = kc_mono_ns();
	char key[65], why[400];
	int rv;

	memset(out, 0, sizeof(*out));
	snprintf(out->arch, sizeof(out->arch), "%s", arch);
	if (strncmp(arch, "sm_", 3) != 0 || strlen(arch) > 8) {
		out->log = strdup("");
		return kc_seterr(KC_EINVAL,
		    "architecture '%s' is not a real GPU architecture; use "
		    "sm_XX, e.g. sm_90",
		    arch);
	}
	if ((rv = sbx_check_includes(source, why, sizeof(why))) != 0) {
		out->log = strdup(rv == KC_EINVAL ? why : "");
		out->ms = (double)(kc_mono_ns() - t0) / 1e6;
		return rv == KC_EINVAL ? kc_seterr(KC_EINVAL, "%s", why) : rv;
	}
	compile_key(source, arch, key);
	if (cache_dir != NULL && compile_cache_read(cache_dir, key, out) == 0) {
		out->cached = 1;
	} else {
		rv = compile_nvrtc(source, arch, out);
		if (out->log == NULL)
			out->log = strdup("");
		if (rv != 0) {
			out->ms = (double)(kc_mono_ns() - t0) / 1e6;
			return rv;
		}
		if (cache_dir != NULL)
			compile_cache_write(cache_dir, key, out);
	}
	if ((rv = sbx_ptx_signatures(
	         out->ptx ? out->ptx : "", &out->sigs, &out->nsigs)) != 0)
		return rv;
	if ((rv = sbx_ptxas_parse(out->log, &out->info, &out->ninfo)) != 0)
		return rv;
	for (size_t i = 0; i < out->nsigs; i++)
		for (size_t j = 0; j < out->ninfo; j++)
			if (strcmp(out->sigs[i].name, out->info[j].name) == 0)
				out->sigs[i].shared_static =
				    out->info[j].shared_bytes;
	out->ms = (double)(kc_mono_ns() - t0) / 1e6;
	return 0;
}

void
sbx_compiled_free(sbx_compiled *c)
{
	if (c == NULL)
		return;
	free(c->log);
	free(c->cubin);
	free(c->ptx);
	free(c->sigs);
	free(c->info);
	memset(c, 0, sizeof(*c));
}

/* ---- parallel compiles (tunable sweeps) ---- */

typedef struct {
	const char *const *sources;
	size_t n;
	const char *arch;
	const char *cache_dir;
	pthread_mutex_t mu;
	size_t next; /* the next source to take (under mu) */
	size_t ok;   /* how many compiled (under mu) */
} compile_pool;

static void *
compile_worker(void *arg)
{
	compile_pool *p = arg;

	for (;;) {
		sbx_compiled c;
		size_t i;
		int rv;

		pthread_mutex_lock(&p->mu);
		i = p->next < p->n ? p->next++ : p->n;
		pthread_mutex_unlock(&p->mu);
		if (i == p->n)
			return NULL;
		rv = sbx_compile(p->sources[i], p->arch, p->cache_dir, &c);
		sbx_compiled_free(&c);
		if (rv == 0) {
			pthread_mutex_lock(&p->mu);
			p->ok++;
			pthread_mutex_unlock(&p->mu);
		}
	}
}

size_t
sbx_compile_many(const char *const *sources, size_t n, const char *arch,
    const char *cache_dir, unsigned *threads)
{
	compile_pool p = {
	    .sources = sources, .n = n, .arch = arch, .cache_dir = cache_dir};
	pthread_t tid[SBX_COMPILE_MAX_THREADS];
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	size_t want = n, started = 0;

	if (threads != NULL)
		*threads = 0;
	if (n == 0 || cache_dir == NULL)
		return 0;
	if (cpus < 1)
		cpus = 1;
	if (want > (size_t)cpus)
		want = (size_t)cpus;
	if (want > SBX_COMPILE_MAX_THREADS)
		want = SBX_COMPILE_MAX_THREADS;
	/* Its first call fills a static buffer: not from several threads. */
	(void)sbx_cuda_include_dir();
	/* One folder for all the writers (kc_mkdirs tolerates a race, but
	 * once is enough). */
	(void)kc_mkdirs(cache_dir, 0700);
	pthread_mutex_init(&p.mu, NULL);
	/* This thread is one of the workers; a thread that cannot start
	 * only means fewer of them. */
	for (size_t t = 1; t < want; t++)
		if (pthread_create(&tid[started], NULL, compile_worker, &p) ==
		    0)
			started++;
	compile_worker(&p);
	for (size_t t = 0; t < started; t++)
		pthread_join(tid[t], NULL);
	pthread_mutex_destroy(&p.mu);
	if (threads != NULL)
		*threads = (unsigned)(started + 1);
	return p.ok;
}
