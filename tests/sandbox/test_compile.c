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
	KT_OK(sbx_compile(good, "sm_90", cache, &a));
	KT_EQ_INT(a.cached, 0);
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

int
main(void)
{
	KT_RUN(test_compiles_for_sm90_without_gpu);
	KT_RUN(test_compile_error_keeps_the_log);
	KT_RUN(test_cache_by_hash);
	return 0;
}
