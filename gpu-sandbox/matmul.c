/*
 * matmul.c - the plan's cuBLASLt step (docs/plan.md "matmul").
 *
 * The plan speaks row-major: D[m,n] = alpha * op(A)[m,k] @ op(B)[k,n] +
 * beta * C + bias[n]. cuBLASLt is column-major, and a row-major matrix is
 * its transpose in column-major, so we ask for D^T = op(B)^T op(A)^T:
 * cuBLASLt's "A" is our B, its "B" is our A, its m and n are our n and m,
 * and a bias over our columns is a bias over its rows, which is what its
 * bias epilogues add.
 */
#include <cublasLt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"
#include "kc_err.h"

struct sbx_lt {
	cublasLtHandle_t h;
	void *workspace;
	size_t workspace_bytes;
};

int
sbx_lt_open(sbx_lt **out)
{
	sbx_lt *lt = calloc(1, sizeof(*lt));
	cublasStatus_t st;

	if (lt == NULL)
		return KC_ENOMEM;
	if ((st = cublasLtCreate(&lt->h)) != CUBLAS_STATUS_SUCCESS) {
		free(lt);
		return kc_seterr(
		    KC_ECUDA, "cublasLtCreate: status %d", (int)st);
	}
	*out = lt;
	return 0;
}

void
sbx_lt_close(sbx_lt *lt)
{
	if (lt == NULL)
		return;
	cublasLtDestroy(lt->h);
	free(lt);
}

void
sbx_lt_set_workspace(sbx_lt *lt, CUdeviceptr ws, size_t bytes)
{
	lt->workspace = (void *)(uintptr_t)ws;
	lt->workspace_bytes = bytes;
}

#define LT_CHECK(call, what)                                                   \
	do {                                                                   \
		cublasStatus_t lt_st_ = (call);                                \
		if (lt_st_ != CUBLAS_STATUS_SUCCESS) {                         \
			rv = kc_seterr(KC_ECUDA, "%s: cuBLASLt status %d",     \
			    (what), (int)lt_st_);                              \
			goto out;                                              \
		}                                                              \
	} while (0)

int
sbx_lt_matmul(sbx_lt *lt, const sbx_matmul *mm, CUdeviceptr a, CUdeviceptr b,
    CUdeviceptr c, CUdeviceptr d, CUdeviceptr bias, CUstream stream)
{
	cublasLtMatmulDesc_t op = NULL;
	cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL, ld = NULL;
	cublasLtMatmulPreference_t pref = NULL;
	cublasLtMatmulHeuristicResult_t heur;
	cublasComputeType_t ct = CUBLAS_COMPUTE_32F;
	cudaDataType_t dt = CUDA_R_32F;
	cublasOperation_t opa, opb;
	cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
	float alpha = (float)mm->alpha, beta = (float)mm->beta;
	uint64_t lda, ldb;
	int found = 0, rv = 0;

	if (mm->dtype == KCLAW__DTYPE__F16)
		dt = CUDA_R_16F;
	else if (mm->dtype == KCLAW__DTYPE__BF16)
		dt = CUDA_R_16BF;
	else if (mm->tf32)
		ct = CUBLAS_COMPUTE_32F_FAST_TF32;
	switch (mm->epilogue) {
	case SBX_EPI_NONE: epi = CUBLASLT_EPILOGUE_DEFAULT; break;
	case SBX_EPI_RELU: epi = CUBLASLT_EPILOGUE_RELU; break;
	case SBX_EPI_GELU: epi = CUBLASLT_EPILOGUE_GELU; break;
	case SBX_EPI_BIAS: epi = CUBLASLT_EPILOGUE_BIAS; break;
	case SBX_EPI_BIAS_RELU: epi = CUBLASLT_EPILOGUE_RELU_BIAS; break;
	case SBX_EPI_BIAS_GELU: epi = CUBLASLT_EPILOGUE_GELU_BIAS; break;
	}
	/* cuBLASLt's A is our B (n x k column-major when B is k x n
	 * row-major), its B is our A. */
	opa = mm->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
	opb = mm->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
	lda = mm->trans_b ? (uint64_t)mm->k : (uint64_t)mm->n;
	ldb = mm->trans_a ? (uint64_t)mm->m : (uint64_t)mm->k;

	LT_CHECK(cublasLtMatmulDescCreate(&op, ct, CUDA_R_32F), "matmul desc");
	LT_CHECK(cublasLtMatmulDescSetAttribute(
	             op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)),
	    "transa");
	LT_CHECK(cublasLtMatmulDescSetAttribute(
	             op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)),
	    "transb");
	LT_CHECK(cublasLtMatmulDescSetAttribute(
	             op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)),
	    "epilogue");
	if (bias != 0) {
		void *bp = (void *)(uintptr_t)bias;
		LT_CHECK(
		    cublasLtMatmulDescSetAttribute(
		        op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof(bp)),
		    "bias");
		LT_CHECK(
		    cublasLtMatmulDescSetAttribute(op,
		        CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &dt, sizeof(dt)),
		    "bias dtype");
	}
	LT_CHECK(cublasLtMatrixLayoutCreate(&la, dt,
	             opa == CUBLAS_OP_N ? (uint64_t)mm->n : (uint64_t)mm->k,
	             opa == CUBLAS_OP_N ? (uint64_t)mm->k : (uint64_t)mm->n,
	             (int64_t)lda),
	    "layout of b");
	LT_CHECK(cublasLtMatrixLayoutCreate(&lb, dt,
	             opb == CUBLAS_OP_N ? (uint64_t)mm->k : (uint64_t)mm->m,
	             opb == CUBLAS_OP_N ? (uint64_t)mm->m : (uint64_t)mm->k,
	             (int64_t)ldb),
	    "layout of a");
	LT_CHECK(cublasLtMatrixLayoutCreate(
	             &lc, dt, (uint64_t)mm->n, (uint64_t)mm->m, mm->n),
	    "layout of c");
	LT_CHECK(cublasLtMatrixLayoutCreate(
	             &ld, dt, (uint64_t)mm->n, (uint64_t)mm->m, mm->n),
	    "layout of d");
	LT_CHECK(cublasLtMatmulPreferenceCreate(&pref), "preference");
	LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref,
	             CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
	             &lt->workspace_bytes, sizeof(lt->workspace_bytes)),
	    "workspace");
	LT_CHECK(cublasLtMatmulAlgoGetHeuristic(
	             lt->h, op, la, lb, lc, ld, pref, 1, &heur, &found),
	    "choosing an algorithm");
	if (found == 0) {
		rv = kc_seterr(KC_ECUDA,
		    "cuBLASLt has no algorithm for m=%lld n=%lld k=%lld %s "
		    "with this epilogue",
		    (long long)mm->m, (long long)mm->n, (long long)mm->k,
		    sbx_dtype_name(mm->dtype));
		goto out;
	}
	LT_CHECK(cublasLtMatmul(lt->h, op, &alpha, (const void *)(uintptr_t)b,
	             la, (const void *)(uintptr_t)a, lb, &beta,
	             (const void *)(uintptr_t)(c ? c : d), lc,
	             (void *)(uintptr_t)d, ld, &heur.algo, lt->workspace,
	             lt->workspace_bytes, (cudaStream_t)stream),
	    "cublasLtMatmul");
out:
	if (pref)
		cublasLtMatmulPreferenceDestroy(pref);
	if (ld)
		cublasLtMatrixLayoutDestroy(ld);
	if (lc)
		cublasLtMatrixLayoutDestroy(lc);
	if (lb)
		cublasLtMatrixLayoutDestroy(lb);
	if (la)
		cublasLtMatrixLayoutDestroy(la);
	if (op)
		cublasLtMatmulDescDestroy(op);
	return rv;
}
