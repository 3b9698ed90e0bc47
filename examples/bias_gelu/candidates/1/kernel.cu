// Fused: one pass over x, one thread per element.
extern "C" __global__ void bias_gelu(const float *__restrict__ x,
                                     const float *__restrict__ w,
                                     const float *__restrict__ b,
                                     float *__restrict__ y, int rows, int cols)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < rows * cols) {
		int c = i % cols;
		float v = x[i] * w[c] + b[c];
		y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
	}
}
