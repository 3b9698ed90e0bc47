/*
 * compile.h - NVRTC compilation of candidate sources, with a cache on disk
 * keyed by the hash of (source, options, architecture, NVRTC version).
 * NVRTC needs no GPU, so this works on any machine with the toolkit.
 */
#ifndef SBX_COMPILE_H
#define SBX_COMPILE_H

#include <stddef.h>

#include "plan.h"

/* What ptxas reported for one kernel (its -v log). */
typedef struct {
	char name[SBX_NAME_MAX];
	int registers;
	int stack_bytes;
	int spill_store_bytes;
	int spill_load_bytes;
	int shared_bytes;
	int const_bytes;
} sbx_ptxas_info;

typedef struct {
	char *log; /* NVRTC's full log (never NULL after sbx_compile) */
	void *cubin;
	size_t cubin_len;
	char *ptx;
	sbx_sig *sigs; /* every extern "C" __global__ kernel, from the PTX */
	size_t nsigs;
	sbx_ptxas_info *info;
	size_t ninfo;
	int cached;
	double ms; /* time spent compiling or reading the cache */
	char arch[16];
} sbx_compiled;

/*
 * Compiles source for arch ("sm_90"). cache_dir may be NULL (no cache).
 * Returns 0, or KC_EINVAL when the source does not compile (out->log holds
 * NVRTC's log, kc_lasterr() a summary), or another KC_E* code when NVRTC
 * itself failed. out must be released with sbx_compiled_free either way.
 */
int sbx_compile(const char *source, const char *arch, const char *cache_dir,
    sbx_compiled *out);
void sbx_compiled_free(sbx_compiled *c);
/* Whether sbx_compile would read source's entry from cache_dir (its CUBIN,
 * written last, is there) rather than run NVRTC: 1 or 0. */
int sbx_compile_is_cached(
    const char *source, const char *arch, const char *cache_dir);

/* At most this many compile threads for sbx_compile_many. */
#define SBX_COMPILE_MAX_THREADS 8

/*
 * Compiles sources[0..n) for arch into cache_dir (not NULL), in parallel:
 * min(n, online CPUs, SBX_COMPILE_MAX_THREADS) threads, each running
 * sbx_compile on the next source (NVRTC is thread-safe for separate
 * programs; every cache file is written under a temporary name of its own
 * and renamed). It only warms the cache: the results are dropped, and a
 * source that does not compile is left for its own sbx_compile to report.
 * Returns how many compiled (or were already cached); *threads (may be
 * NULL) gets the number of threads used.
 */
size_t sbx_compile_many(const char *const *sources, size_t n, const char *arch,
    const char *cache_dir, unsigned *threads);

/*
 * Refuses a source whose #include is not a literal <name> of the toolkit's
 * headers (KC_EINVAL, why says which line and what to do), so that a
 * candidate cannot read the sandbox's files into its compile log.
 * sbx_compile calls it before NVRTC; exposed for tests.
 */
int sbx_check_includes(const char *source, char *why, size_t whylen);
/* Parses the .entry signatures of a PTX text (exposed for tests). */
int sbx_ptx_signatures(const char *ptx, sbx_sig **sigs, size_t *nsigs);
/* Parses ptxas -v lines of a log (exposed for tests). */
int sbx_ptxas_parse(const char *log, sbx_ptxas_info **info, size_t *ninfo);

/* The folder of the toolkit's headers, for NVRTC's -I. */
const char *sbx_cuda_include_dir(void);

#endif
