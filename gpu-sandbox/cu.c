/*
 * cu.c - resolves the driver API at run time.
 */
#include "cu.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kc_err.h"

/* The ABI asked of the driver: 12.4 brought cuFuncGetParamInfo. */
#define CU_ABI_VERSION 12040

typedef CUresult(CUDAAPI *cu_getproc_fn)(
    const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

int
sbx_cu_load(sbx_cu *cu)
{
	cu_getproc_fn getproc;
	CUdriverProcAddressQueryResult st;
	void *fn;

	const char *path = getenv("KCLAW_CUDA_DRIVER");

	/* KCLAW_CUDA_DRIVER names a driver library elsewhere (or none, to
	 * run as if the machine had no GPU). */
	if (path == NULL || *path == '\0')
		path = "libcuda.so.1";
	memset(cu, 0, sizeof(*cu));
	if ((cu->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL)) == NULL)
		return kc_seterr(KC_ENODEV,
		    "no NVIDIA driver: %s cannot be loaded (%s)", path,
		    dlerror());
	getproc = (cu_getproc_fn)dlsym(cu->lib, "cuGetProcAddress_v2");
	if (getproc == NULL)
		return kc_seterr(KC_ENODEV,
		    "the NVIDIA driver is too old (no cuGetProcAddress_v2); "
		    "install a driver for CUDA 12 or later");
#define SBX_CU_RESOLVE(name, params)                                           \
	fn = NULL;                                                             \
	if (getproc(#name, &fn, CU_ABI_VERSION, CU_GET_PROC_ADDRESS_DEFAULT,   \
	        &st) != CUDA_SUCCESS ||                                        \
	    fn == NULL)                                                        \
		return kc_seterr(KC_ENODEV,                                    \
		    "the NVIDIA driver lacks %s; install a driver for CUDA "   \
		    "%d.%d or later",                                          \
		    #name, CU_ABI_VERSION / 1000, CU_ABI_VERSION % 1000 / 10); \
	*(void **)&cu->name = fn;
	SBX_CU_FUNCS(SBX_CU_RESOLVE)
#undef SBX_CU_RESOLVE
	return 0;
}

const char *
sbx_cu_errname(const sbx_cu *cu, CUresult r)
{
	const char *s = NULL;

	if (cu->cuGetErrorName == NULL || cu->cuGetErrorName(r, &s) != 0 ||
	    s == NULL)
		return "CUDA_ERROR_UNKNOWN";
	return s;
}

int
sbx_cu_sticky(CUresult r)
{
	switch (r) {
	case CUDA_ERROR_ILLEGAL_ADDRESS:
	case CUDA_ERROR_MISALIGNED_ADDRESS:
	case CUDA_ERROR_ILLEGAL_INSTRUCTION:
	case CUDA_ERROR_INVALID_ADDRESS_SPACE:
	case CUDA_ERROR_INVALID_PC:
	case CUDA_ERROR_LAUNCH_FAILED:
	case CUDA_ERROR_HARDWARE_STACK_ERROR:
	case CUDA_ERROR_ASSERT:
	case CUDA_ERROR_LAUNCH_TIMEOUT:
	case CUDA_ERROR_ECC_UNCORRECTABLE:
	case CUDA_ERROR_CONTEXT_IS_DESTROYED:
	case CUDA_ERROR_TENSOR_MEMORY_LEAK: return 1;
	default: return 0;
	}
}
