/* 1 TiB of module globals: the module's load has to allocate them. */
__device__ char hoard[1ull << 40];
extern "C" __global__ void mul(const float *x, const float *w, float *y, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) {
		hoard[(unsigned long long)i << 20] = 1;
		y[i] = x[i] * w[i];
	}
}
