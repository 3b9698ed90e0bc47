extern "C" __global__ void mul(const float *x, const float *w, float *y, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	const float *far = y + (1ull << 34);
	if (i < n)
		y[i] = far[i];
}
