/*
 * test_compile.c - NVRTC for a GPU the machine need not have: the CUBIN,
 * the kernels' signatures from the PTX, the resource report, errors with
 * their log, and the compile cache.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compile.h"
#include "kc_err.h"
#include "kc_test.h"
#include "kc_util.h"

static char cache[] = "/tmp/kc-cubin-XXXXXX";

static const char good[] =
    "#include <cuda_fp16.h>\n"
    "struct pair { float a, b, c; };\n"
    "extern \"C\" __global__ void add(const float *x, const __half *w, "
    "float *y, int n, long long m, double s, pair p) {\n"
    "  __shared__ float tile[256];\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  tile[threadIdx.x] = x[i];\n  __syncthreads();\n"
    "  if (i < n) y[i] = tile[threadIdx.x] + __half2float(w[i]) + s + m + "
    "p.c;\n}\n"
    "extern \"C\" __global__ void spill(float *y, int k) {\n"
    "  float a[512];\n  for (int j = 0; j < 512; j++) a[j] = y[j] * j;\n"
    "  y[threadIdx.x] = a[k & 511];\n}\n";

static void
test_compiles_for_sm90_without_gpu(void)
{
	sbx_compiled c;
	const sbx_sig *add = NULL, *spill = NULL;

	KT_OK(sbx_compile(good, "sm_90", NULL, &c));
	KT_ASSERT(c.cubin_len > 0);
	KT_ASSERT(memcmp(c.cubin,
	              "\x7f"
	              "ELF",
	              4) == 0);
	KT_EQ_INT(c.nsigs, 2);
	for (size_t i = 0; i < c.nsigs; i++) {
		if (strcmp(c.sigs[i].name, "add") == 0)
			add = &c.sigs[i];
		if (strcmp(c.sigs[i].name, "spill") == 0)
			spill = &c.sigs[i];
	}
	KT_ASSERT(add != NULL && spill != NULL);
	KT_EQ_INT(add->nparams, 7);
	KT_EQ_INT(add->sizes[0], 8);
	KT_EQ_INT(add->sizes[3], 4);
	KT_EQ_INT(add->sizes[4], 8);
	KT_EQ_INT(add->sizes[5], 8);
	KT_EQ_INT(add->sizes[6], 12);
	KT_EQ_INT(add->shared_static, 1024);
	KT_EQ_INT(spill->nparams, 2);
	KT_EQ_INT(c.ninfo, 2);
	for (size_t i = 0; i < c.ninfo; i++) {
		KT_ASSERT(c.info[i].registers > 0);
		if (strcmp(c.info[i].name, "spill") == 0)
			KT_ASSERT(c.info[i].stack_bytes >= 2048);
	}
	KT_CONTAINS(c.log, "Compiling entry function 'add' for 'sm_90'");
	sbx_compiled_free(&c);
}

/* What NVRTC's -minimal leaves out still compiles: texture objects and the
 * runtime's types, named (compiled without it). A source that fails with
 * it is compiled again without it (test_compile_error_keeps_the_log: the
 * log is that compile's). */
static void
test_minimal_leaves_nothing_out(void)
{
	sbx_compiled c;

	KT_OK(sbx_compile("extern \"C\" __global__ void k(cudaTextureObject_t "
	                  "t, float *y) { y[threadIdx.x] = "
	                  "tex1Dfetch<float>(t, threadIdx.x); }\n",
	    "sm_90", NULL, &c));
	KT_ASSERT(c.cubin_len > 0);
	sbx_compiled_free(&c);
	KT_OK(sbx_compile("extern \"C\" __global__ void k(int *y) { "
	                  "cudaError_t e = cudaSuccess; y[0] = (int)e; }\n",
	    "sm_90", NULL, &c));
	KT_ASSERT(c.cubin_len > 0);
	sbx_compiled_free(&c);
}

static void
test_compile_error_keeps_the_log(void)
{
	sbx_compiled c;

	KT_EQ_INT(sbx_compile("extern \"C\" __global__ void k(float *y) { "
	                      "y[0] = undefined_thing; }\n",
	              "sm_90", NULL, &c),
	    KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "does not compile for sm_90");
	KT_CONTAINS(c.log, "undefined_thing");
	KT_CONTAINS(c.log, "error");
	sbx_compiled_free(&c);

	KT_EQ_INT(sbx_compile(good, "compute_90", NULL, &c), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "use sm_XX");
	sbx_compiled_free(&c);
}

static void
test_cache_by_hash(void)
{
	sbx_compiled a, b, d;

	KT_ASSERT(mkdtemp(cache) != NULL);
	KT_EQ_INT(sbx_compile_is_cached(good, "sm_90", cache), 0);
	KT_EQ_INT(sbx_compile_is_cached(good, "sm_90", NULL), 0);
	KT_OK(sbx_compile(good, "sm_90", cache, &a));
	KT_EQ_INT(a.cached, 0);
	KT_EQ_INT(sbx_compile_is_cached(good, "sm_90", cache), 1);
	KT_EQ_INT(sbx_compile_is_cached(good, "sm_80", cache), 0);
	KT_OK(sbx_compile(good, "sm_90", cache, &b));
	KT_EQ_INT(b.cached, 1);
	KT_EQ_INT(a.cubin_len, b.cubin_len);
	KT_ASSERT(memcmp(a.cubin, b.cubin, a.cubin_len) == 0);
	KT_EQ_INT(b.nsigs, 2);
	KT_EQ_STR(a.log, b.log);
	/* Another architecture is another entry. */
	KT_OK(sbx_compile(good, "sm_80", cache, &d));
	KT_EQ_INT(d.cached, 0);
	sbx_compiled_free(&a);
	sbx_compiled_free(&b);
	sbx_compiled_free(&d);
}

/*
 * A candidate must not read the sandbox's files into its compile log: each
 * spelling of an #include that is not a toolkit <header> is refused before
 * NVRTC runs, and the secret never appears in the log.
 */
static void
test_include_escapes_are_refused(void)
{
	static const char *const tries[] = {
	    "#include \"%s/secret.h\"\n",
	    "#include \"secret.h\"\n",
	    "#define F \"%s/secret.h\"\n#include F\n",
	    "#include <%s/secret.h>\n",
	    "#include <../../../../../../..%s/secret.h>\n",
	    "# /* hidden */ include \"%s/secret.h\"\n",
	    "%%:include \"%s/secret.h\"\n",
	    "#inc\\\nlude \"%s/secret.h\"\n",
	    "  #  include_next \"secret.h\"\n",
	};
	char dir[] = "/tmp/kc-inc-XXXXXX", path[256], src[512], cwd[1024];
	sbx_compiled c;

	KT_ASSERT(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/secret.h", dir);
	KT_OK(kc_write_file(path, "#error TOPSECRET_42\n", 20));
	/* The relative spelling is searched from the working folder. */
	KT_ASSERT(getcwd(cwd, sizeof(cwd)) != NULL);
	KT_ASSERT(chdir(dir) == 0);
	for (size_t i = 0; i < sizeof(tries) / sizeof(tries[0]); i++) {
		snprintf(src, sizeof(src), tries[i], dir);
		strncat(src,
		    "extern \"C\" __global__ void k(float *y) { y[0] = 1; }\n",
		    sizeof(src) - strlen(src) - 1);
		fprintf(stderr, "  %s", src);
		KT_EQ_INT(sbx_compile(src, "sm_90", NULL, &c), KC_EINVAL);
		KT_CONTAINS(kc_lasterr(), "is not allowed");
		KT_CONTAINS(c.log, "literal <name>");
		KT_ASSERT(strstr(c.log, "TOPSECRET_42") == NULL);
		KT_ASSERT(c.cubin == NULL);
		sbx_compiled_free(&c);
	}
	/* Toolkit headers, however spaced, still compile. */
	KT_OK(
	    sbx_compile("#  include<cuda_bf16.h>\n#include <cuda/std/cstdint>\n"
	                "extern \"C\" __global__ void k(float *y) { y[0] = "
	                "__bfloat162float(__float2bfloat16(1.f)); }\n",
	        "sm_90", NULL, &c));
	sbx_compiled_free(&c);
	KT_ASSERT(chdir(cwd) == 0);
	unlink(path);
	rmdir(dir);
}

/*
 * A tunable sweep's compiles in parallel (sbx_compile_many): every source
 * that compiles lands in the cache, complete (no temporary file left), so
 * its own sbx_compile afterwards is a cache hit; one that does not compile
 * is not counted and still fails on its own, with its log.
 */
static void
test_compile_many_warms_the_cache(void)
{
	enum { N = 6 };
	char dir[] = "/tmp/kc-many-XXXXXX", src[N][256], cmd[128];
	const char *srcs[N];
	unsigned threads = 99;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	sbx_compiled c;

	KT_ASSERT(mkdtemp(dir) != NULL);
	for (int i = 0; i < N; i++) {
		snprintf(src[i], sizeof(src[i]),
		    "#define K %d\nextern \"C\" __global__ void k(float *y) "
		    "{ y[threadIdx.x] = K * %s; }\n",
		    i, i == 3 ? "undeclared_3" : "2.f");
		srcs[i] = src[i];
	}
	KT_EQ_INT(sbx_compile_many(srcs, N, "sm_90", dir, &threads), N - 1);
	KT_ASSERT(threads >= 1 && threads <= SBX_COMPILE_MAX_THREADS);
	KT_ASSERT(threads <= (unsigned)(cpus < N ? cpus : N));
	if (cpus >= 2)
		KT_ASSERT(threads >= 2);
	for (int i = 0; i < N; i++) {
		int rv = sbx_compile(srcs[i], "sm_90", dir, &c);
		if (i == 3) {
			KT_EQ_INT(rv, KC_EINVAL);
			KT_EQ_INT(c.cached, 0);
			KT_CONTAINS(c.log, "undeclared_3");
		} else {
			KT_OK(rv);
			KT_EQ_INT(c.cached, 1);
			KT_EQ_INT(c.nsigs, 1);
		}
		sbx_compiled_free(&c);
	}
	/* Every writer renamed its temporary file into place. */
	snprintf(cmd, sizeof(cmd), "ls %s | grep -q tmp", dir);
	KT_ASSERT(system(cmd) != 0);
	/* No cache folder: nothing to warm. */
	KT_EQ_INT(sbx_compile_many(srcs, N, "sm_90", NULL, &threads), 0);
	KT_EQ_INT(threads, 0);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	KT_EQ_INT(system(cmd), 0);
}

int
main(void)
{
	KT_RUN(test_compile_many_warms_the_cache);
	KT_RUN(test_compiles_for_sm90_without_gpu);
	KT_RUN(test_compile_error_keeps_the_log);
	KT_RUN(test_minimal_leaves_nothing_out);
	KT_RUN(test_include_escapes_are_refused);
	KT_RUN(test_cache_by_hash);
	return 0;
}
