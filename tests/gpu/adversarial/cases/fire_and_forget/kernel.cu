__device__ float poly1(float a, float b, int k)
{
	float v = a;
	for (int j = 0; j < k; j++)
		v = fmaf(v, b, a);
	return v;
}

extern "C" __global__ void work(const float *x, const float *w, float *y, int n,
    int k)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		y[i] = poly1(x[i], w[i], k);
}
extern "C" __global__ void poly(const float *x, const float *w, float *y, int n,
    int k)
{
	if (blockIdx.x == 0 && threadIdx.x == 0)
		work<<<(n + 255) / 256, 256, 0, cudaStreamFireAndForget>>>(
		    x, w, y, n, k);
}
