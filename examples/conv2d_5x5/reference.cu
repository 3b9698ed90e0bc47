// Naive reference: one thread per output pixel, 25 bounds-checked global
// loads of x and 25 of w per pixel.
extern "C" __global__ void conv5x5_naive(const float *x, const float *w,
                                         float *y, int h, int wd)
{
	int j = blockIdx.x * blockDim.x + threadIdx.x;
	int i = blockIdx.y * blockDim.y + threadIdx.y;
	int img = blockIdx.z;
	if (i >= h || j >= wd)
		return;
	const float *in = x + (long long)img * h * wd;
	float s = 0.0f;
	for (int a = 0; a < 5; a++) {
		for (int b = 0; b < 5; b++) {
			int ii = i + a - 2, jj = j + b - 2;
			if (ii >= 0 && ii < h && jj >= 0 && jj < wd)
				s += w[a * 5 + b] * in[(long long)ii * wd + jj];
		}
	}
	y[(long long)img * h * wd + (long long)i * wd + j] = s;
}
