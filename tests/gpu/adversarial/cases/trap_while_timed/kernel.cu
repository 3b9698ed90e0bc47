/* Counts the runs: the plan launches it after every run. */
__device__ unsigned calls;
extern "C" __global__ void tick() { calls++; }

__device__ float poly1(float a, float b, int k)
{
	float v = a;
	for (int j = 0; j < k; j++)
		v = fmaf(v, b, a);
	return v;
}

extern "C" __global__ void poly(const float *x, const float *w, float *y, int n,
    int k)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (x[0] < 0)
		__trap();
	if (i < n)
		y[i] = poly1(x[i], w[i], k);
}
