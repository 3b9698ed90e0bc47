extern "C" __global__ void mul(const float *x, const float *w, float *y, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	printf("element %d of %d: %f * %f\n", i, n, x[i], w[i]);
	y[i] = x[i] * w[i];
}
