extern "C" __global__ void mul(const float *x, float *w, float *y, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	y[i] = x[i] * w[i];
	w[i] = 2.0f * w[i];
}
