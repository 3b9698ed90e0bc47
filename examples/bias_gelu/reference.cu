// Naive reference: one kernel per operation, as an unfused framework runs
// it. Each pass reads and writes the whole tensor through scratch buffers.

extern "C" __global__ void scale_cols(const float *x, const float *w,
                                      float *t, int rows, int cols)
{
	long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < (long long)rows * cols)
		t[i] = x[i] * w[i % cols];
}

extern "C" __global__ void shift_cols(const float *t, const float *b,
                                      float *u, int rows, int cols)
{
	long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < (long long)rows * cols)
		u[i] = t[i] + b[i % cols];
}

extern "C" __global__ void gelu(const float *u, float *y, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) {
		float v = u[i];
		y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
	}
}
