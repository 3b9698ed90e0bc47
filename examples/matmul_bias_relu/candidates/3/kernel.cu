// A 128 x 128 tile of y per block of 256 threads, 8 x 8 outputs per thread
// (rows 4ty..4ty+3 and 64+4ty.., columns 4tx.. and 64+4tx..), 8-deep k
// slices loaded with 16-byte loads; a is transposed into shared memory so
// both operands are read as float4. Specialised to m and n multiples of 128
// and k a multiple of 8 (2048, 2048, 1024 here).
#define BM 128
#define BN 128
#define BK 8

extern "C" __global__ void __launch_bounds__(256)
matmul_reg8x8(const float *__restrict__ a, const float *__restrict__ b,
              const float *__restrict__ bias, float *__restrict__ y, int m,
              int n, int k)
{
	__shared__ __align__(16) float as[BK][BM];
	__shared__ __align__(16) float bs[BK][BN];
	int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
	int bm = blockIdx.y * BM, bn = blockIdx.x * BN;
	if (bm + BM > m || bn + BN > n || k % BK != 0)
		return;
	float acc[8][8] = {};
	int ar = tid / 2, ak = (tid % 2) * 4;  /* a: 128 rows x 2 float4 */
	int bk = tid / 32, bc = (tid % 32) * 4; /* b: 8 rows x 32 float4 */
	const float *ap = a + (long long)(bm + ar) * k + ak;
	const float *bp = b + (long long)bk * n + bn + bc;
	for (int k0 = 0; k0 < k; k0 += BK) {
		float4 va = *(const float4 *)(ap + k0);
		as[ak + 0][ar] = va.x;
		as[ak + 1][ar] = va.y;
		as[ak + 2][ar] = va.z;
		as[ak + 3][ar] = va.w;
		*(float4 *)&bs[bk][bc] = *(const float4 *)(bp + (long long)k0 * n);
		__syncthreads();
#pragma unroll
		for (int kk = 0; kk < BK; kk++) {
			float4 a0 = *(const float4 *)&as[kk][4 * ty];
			float4 a1 = *(const float4 *)&as[kk][64 + 4 * ty];
			float4 b0 = *(const float4 *)&bs[kk][4 * tx];
			float4 b1 = *(const float4 *)&bs[kk][64 + 4 * tx];
			float ra[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
			float rb[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
			for (int i = 0; i < 8; i++)
#pragma unroll
				for (int j = 0; j < 8; j++)
					acc[i][j] += ra[i] * rb[j];
		}
		__syncthreads();
	}
	float4 bias0 = *(const float4 *)(bias + bn + 4 * tx);
	float4 bias1 = *(const float4 *)(bias + bn + 64 + 4 * tx);
#pragma unroll
	for (int i = 0; i < 8; i++) {
		int row = bm + (i < 4 ? 4 * ty + i : 64 + 4 * ty + (i - 4));
		float *yr = y + (long long)row * n + bn;
		float4 o0 = {fmaxf(acc[i][0] + bias0.x, 0.0f),
		             fmaxf(acc[i][1] + bias0.y, 0.0f),
		             fmaxf(acc[i][2] + bias0.z, 0.0f),
		             fmaxf(acc[i][3] + bias0.w, 0.0f)};
		float4 o1 = {fmaxf(acc[i][4] + bias1.x, 0.0f),
		             fmaxf(acc[i][5] + bias1.y, 0.0f),
		             fmaxf(acc[i][6] + bias1.z, 0.0f),
		             fmaxf(acc[i][7] + bias1.w, 0.0f)};
		*(float4 *)(yr + 4 * tx) = o0;
		*(float4 *)(yr + 64 + 4 * tx) = o1;
	}
}
