/*
 * cu.h - the CUDA driver API, loaded at run time with dlopen("libcuda.so.1")
 * so every kclaw binary starts on a machine without a GPU driver. Only the
 * sandbox child calls sbx_cu_load; the parent never touches CUDA.
 */
#ifndef SBX_CU_H
#define SBX_CU_H

#include <cuda.h>

/* X(name, parameters): every driver function the sandbox uses. */
#define SBX_CU_FUNCS(X)                                                        \
	X(cuInit, (unsigned int))                                              \
	X(cuDriverGetVersion, (int *))                                         \
	X(cuDeviceGet, (CUdevice *, int))                                      \
	X(cuDeviceGetCount, (int *))                                           \
	X(cuDeviceGetName, (char *, int, CUdevice))                            \
	X(cuDeviceGetAttribute, (int *, CUdevice_attribute, CUdevice))         \
	X(cuDevicePrimaryCtxRetain, (CUcontext *, CUdevice))                   \
	X(cuCtxSetCurrent, (CUcontext))                                        \
	X(cuCtxSynchronize, (void))                                            \
	X(cuModuleLoadData, (CUmodule *, const void *))                        \
	X(cuModuleUnload, (CUmodule))                                          \
	X(cuModuleGetFunction, (CUfunction *, CUmodule, const char *))         \
	X(cuModuleGetGlobal,                                                   \
	    (CUdeviceptr *, size_t *, CUmodule, const char *))                 \
	X(cuFuncGetAttribute, (int *, CUfunction_attribute, CUfunction))       \
	X(cuFuncSetAttribute, (CUfunction, CUfunction_attribute, int))         \
	X(cuFuncGetParamInfo, (CUfunction, size_t, size_t *, size_t *))        \
	X(cuLaunchKernel,                                                      \
	    (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,     \
	        unsigned, unsigned, CUstream, void **, void **))               \
	X(cuOccupancyMaxActiveBlocksPerMultiprocessor,                         \
	    (int *, CUfunction, int, size_t))                                  \
	X(cuMemAlloc, (CUdeviceptr *, size_t))                                 \
	X(cuMemFree, (CUdeviceptr))                                            \
	X(cuMemAllocHost, (void **, size_t))                                   \
	X(cuMemFreeHost, (void *))                                             \
	X(cuMemHostAlloc, (void **, size_t, unsigned int))                     \
	X(cuMemHostGetDevicePointer, (CUdeviceptr *, void *, unsigned int))    \
	X(cuMemGetInfo, (size_t *, size_t *))                                  \
	X(cuMemcpyHtoD, (CUdeviceptr, const void *, size_t))                   \
	X(cuMemcpyHtoDAsync, (CUdeviceptr, const void *, size_t, CUstream))    \
	X(cuIpcOpenMemHandle, (CUdeviceptr *, CUipcMemHandle, unsigned int))   \
	X(cuIpcCloseMemHandle, (CUdeviceptr))                                  \
	X(cuMemcpyDtoH, (void *, CUdeviceptr, size_t))                         \
	X(cuMemcpyDtoDAsync, (CUdeviceptr, CUdeviceptr, size_t, CUstream))     \
	X(cuMemsetD8Async, (CUdeviceptr, unsigned char, size_t, CUstream))     \
	X(cuMemsetD32Async, (CUdeviceptr, unsigned int, size_t, CUstream))     \
	X(cuStreamCreate, (CUstream *, unsigned int))                          \
	X(cuStreamSynchronize, (CUstream))                                     \
	X(cuEventCreate, (CUevent *, unsigned int))                            \
	X(cuEventRecord, (CUevent, CUstream))                                  \
	X(cuEventSynchronize, (CUevent))                                       \
	X(cuEventElapsedTime, (float *, CUevent, CUevent))                     \
	X(cuGetErrorName, (CUresult, const char **))                           \
	X(cuGetErrorString, (CUresult, const char **))

typedef struct {
	void *lib;
#define SBX_CU_MEMBER(name, params) CUresult(CUDAAPI *name) params;
	SBX_CU_FUNCS(SBX_CU_MEMBER)
#undef SBX_CU_MEMBER
} sbx_cu;

/*
 * Loads libcuda.so.1 and resolves every function (through cuGetProcAddress,
 * so each gets the current ABI version). KC_ENODEV with a message when the
 * driver is absent or too old.
 */
int sbx_cu_load(sbx_cu *cu);

/* "CUDA_ERROR_ILLEGAL_ADDRESS" for an error code (never NULL). */
const char *sbx_cu_errname(const sbx_cu *cu, CUresult r);

/*
 * True for errors that leave the context unusable (a kernel fault): the
 * process must report and exit (DESIGN.md "Pitfalls").
 */
int sbx_cu_sticky(CUresult r);

#endif
