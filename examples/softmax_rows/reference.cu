// Naive reference: one thread per row, three sequential passes over the row
// (max, sum of exponentials, normalise). Threads of a warp walk different
// rows, so no load is coalesced.
/* -inf without math.h, which NVRTC does not provide. */
#define NEG_INF __int_as_float(0xff800000)

extern "C" __global__ void softmax_row_per_thread(const float *x, float *y,
                                                  int rows, int cols)
{
	int r = blockIdx.x * blockDim.x + threadIdx.x;
	if (r >= rows)
		return;
	const float *in = x + (long long)r * cols;
	float *out = y + (long long)r * cols;
	float m = NEG_INF;
	for (int c = 0; c < cols; c++)
		m = fmaxf(m, in[c]);
	float s = 0.0f;
	for (int c = 0; c < cols; c++)
		s += expf(in[c] - m);
	for (int c = 0; c < cols; c++)
		out[c] = expf(in[c] - m) / s;
}
