// Register blocking: a 64 x 64 tile of y per block of 256 threads, each
// thread accumulating a 4 x 4 sub-tile (rows ty + 16i, columns tx + 16j)
// from 16-deep slices of a and b staged in shared memory; a is stored
// k-major so the inner loop reads both operands as broadcasts or
// consecutive words. Bias and ReLU are fused into the store.
#define BM 64
#define BN 64
#define BK 16

extern "C" __global__ void __launch_bounds__(256)
matmul_reg4x4(const float *__restrict__ a, const float *__restrict__ b,
              const float *__restrict__ bias, float *__restrict__ y, int m,
              int n, int k)
{
	__shared__ float as[BK][BM];
	__shared__ float bs[BK][BN];
	int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
	int bm = blockIdx.y * BM, bn = blockIdx.x * BN;
	float acc[4][4] = {};
	for (int k0 = 0; k0 < k; k0 += BK) {
#pragma unroll
		for (int l = 0; l < 4; l++) {
			int e = tid + 256 * l;
			int r = e / BK, kk = e % BK;
			as[kk][r] = (bm + r < m && k0 + kk < k)
			                ? a[(long long)(bm + r) * k + k0 + kk]
			                : 0.0f;
			int kb = e / BN, c = e % BN;
			bs[kb][c] = (k0 + kb < k && bn + c < n)
			                ? b[(long long)(k0 + kb) * n + bn + c]
			                : 0.0f;
		}
		__syncthreads();
#pragma unroll
		for (int kk = 0; kk < BK; kk++) {
			float ra[4], rb[4];
#pragma unroll
			for (int i = 0; i < 4; i++) {
				ra[i] = as[kk][ty + 16 * i];
				rb[i] = bs[kk][tx + 16 * i];
			}
#pragma unroll
			for (int i = 0; i < 4; i++)
#pragma unroll
				for (int j = 0; j < 4; j++)
					acc[i][j] += ra[i] * rb[j];
		}
		__syncthreads();
	}
#pragma unroll
	for (int i = 0; i < 4; i++) {
		int row = bm + ty + 16 * i;
#pragma unroll
		for (int j = 0; j < 4; j++) {
			int col = bn + tx + 16 * j;
			if (row < m && col < n)
				y[(long long)row * n + col] =
				    fmaxf(acc[i][j] + bias[col], 0.0f);
		}
	}
}
