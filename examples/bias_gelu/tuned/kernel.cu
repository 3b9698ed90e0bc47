// Fused bias + GELU with its block size and per-thread work as tunables:
// BLOCK threads per block, PER elements per thread (the sandbox defines
// both for every configuration of plan.json's "tunables").
extern "C" __global__ void __launch_bounds__(BLOCK)
    bias_gelu(const float *__restrict__ x, const float *__restrict__ w,
        const float *__restrict__ b, float *__restrict__ y, int rows,
        int cols)
{
	long long base = ((long long)blockIdx.x * BLOCK) * PER + threadIdx.x;
	long long n = (long long)rows * cols;
#pragma unroll
	for (int j = 0; j < PER; j++) {
		long long i = base + (long long)j * BLOCK;
		if (i < n) {
			int c = (int)(i % cols);
			float v = x[i] * w[c] + b[c];
			y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
		}
	}
}
