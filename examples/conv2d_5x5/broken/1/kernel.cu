// Shared-memory tiling: a 32 x 32 output tile per 32 x 8 block, its
// 36 x 36 input halo staged once in shared memory (zero outside the image),
// four output rows per thread, the filter in registers.
#define TW 32
#define TH 32
#define R 2

extern "C" __global__ void conv5x5_tile(const float *__restrict__ x,
                                        const float *__restrict__ w,
                                        float *__restrict__ y, int h, int wd)
{
	__shared__ float tile[TH + 2 * R][TW + 2 * R + 1];
	int tx = threadIdx.x, ty = threadIdx.y;
	int j0 = blockIdx.x * TW, i0 = blockIdx.y * TH, img = blockIdx.z;
	const float *in = x + (long long)img * h * wd;
	float f[25];
#pragma unroll
	for (int t = 0; t < 25; t++)
		f[t] = __ldg(&w[t]);
	for (int r = ty; r < TH; r += blockDim.y) {
		for (int c = tx; c < TW + 2 * R; c += blockDim.x) {
			int ii = i0 + r - R, jj = j0 + c - R;
			tile[r][c] = (ii >= 0 && ii < h && jj >= 0 && jj < wd)
			                 ? in[(long long)ii * wd + jj]
			                 : 0.0f;
		}
	}
	__syncthreads();
	for (int r = ty; r < TH; r += blockDim.y) {
		int i = i0 + r, j = j0 + tx;
		float s = 0.0f;
#pragma unroll
		for (int a = 0; a < 5; a++)
#pragma unroll
			for (int b = 0; b < 5; b++)
				s += f[a * 5 + b] * tile[r + a][tx + b];
		if (i < h && j < wd)
			y[(long long)img * h * wd + (long long)i * wd + j] = s;
	}
}
