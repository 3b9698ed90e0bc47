// Naive reference: one element per thread, an interleaved shared-memory tree
// per block (divergent, bank-conflicted), and one double-precision atomic
// per block into a scratch accumulator, so the expected value is exact to
// float rounding whatever the block order.
extern "C" __global__ void clear_acc(double *acc)
{
	*acc = 0.0;
}

extern "C" __global__ void block_sum_atomic(const float *x, double *acc, int n)
{
	__shared__ float s[256];
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	s[threadIdx.x] = i < n ? x[i] : 0.0f;
	__syncthreads();
	for (int stride = 1; stride < blockDim.x; stride *= 2) {
		if (threadIdx.x % (2 * stride) == 0)
			s[threadIdx.x] += s[threadIdx.x + stride];
		__syncthreads();
	}
	if (threadIdx.x == 0)
		atomicAdd(acc, (double)s[0]);
}

extern "C" __global__ void store_sum(const double *acc, float *y)
{
	*y = (float)*acc;
}
