// The filter in registers (read once per thread through the read-only
// path), warp-wide rows (32 x 8 blocks) so each of the 25 taps is a
// coalesced load served by L1.
extern "C" __global__ void conv5x5_regw(const float *__restrict__ x,
                                        const float *__restrict__ w,
                                        float *__restrict__ y, int h, int wd)
{
	int j = blockIdx.x * blockDim.x + threadIdx.x;
	int i = blockIdx.y * blockDim.y + threadIdx.y;
	int img = blockIdx.z;
	float f[25];
#pragma unroll
	for (int t = 0; t < 25; t++)
		f[t] = __ldg(&w[t]);
	if (i >= h || j >= wd)
		return;
	const float *in = x + (long long)img * h * wd;
	float s = 0.0f;
#pragma unroll
	for (int a = 0; a < 5; a++) {
		int ii = i + a - 2;
		if (ii < 0 || ii >= h)
			continue;
#pragma unroll
		for (int b = 0; b < 5; b++) {
			int jj = j + b - 2;
			if (jj >= 0 && jj < wd)
				s += f[a * 5 + b] * __ldg(&in[(long long)ii * wd + jj]);
		}
	}
	y[(long long)img * h * wd + (long long)i * wd + j] = s;
}
