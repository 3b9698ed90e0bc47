// Shared-memory tiling (32 x 32 tiles, one output per thread) with the
// bias and ReLU fused into the store.
#define T 32

extern "C" __global__ void matmul_tiled(const float *__restrict__ a,
                                        const float *__restrict__ b,
                                        const float *__restrict__ bias,
                                        float *__restrict__ y, int m, int n,
                                        int k)
{
	__shared__ float as[T][T];
	__shared__ float bs[T][T];
	int tx = threadIdx.x, ty = threadIdx.y;
	int row = blockIdx.y * T + ty, col = blockIdx.x * T + tx;
	float s = 0.0f;
	for (int k0 = 0; k0 < k; k0 += T) {
		as[ty][tx] = (row < m && k0 + tx < k)
		                 ? a[(long long)row * k + k0 + tx]
		                 : 0.0f;
		bs[ty][tx] = (k0 + ty < k && col < n)
		                 ? b[(long long)(k0 + ty) * n + col]
		                 : 0.0f;
		__syncthreads();
#pragma unroll
		for (int i = 0; i < T; i++)
			s += as[ty][i] * bs[i][tx];
		__syncthreads();
	}
	if (row < m && col < n)
		y[(long long)row * n + col] = fmaxf(s + bias[row], 0.0f);
}
