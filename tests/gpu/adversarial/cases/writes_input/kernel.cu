extern "C" __global__ void mul(float *x, const float *w, float *y, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	x[i] *= w[i];
	y[i] = x[i];
}
