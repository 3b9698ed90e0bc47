// Row streaming: a block of 128 threads owns a 128-wide, 16-tall output
// tile. The 20 x 132 input halo is staged in shared memory; each thread
// then walks the input rows once, reading its five horizontal taps per row
// and adding them into the (up to) five output rows they feed, held in
// registers. Every staged value is read five times, not twenty-five.
#define TW 128
#define TH 16
#define R 2

extern "C" __global__ void __launch_bounds__(TW)
conv5x5_stream(const float *__restrict__ x, const float *__restrict__ w,
               float *__restrict__ y, int h, int wd)
{
	__shared__ float tile[TH + 2 * R][TW + 2 * R];
	int tx = threadIdx.x;
	int j0 = blockIdx.x * TW, i0 = blockIdx.y * TH, img = blockIdx.z;
	const float *in = x + (long long)img * h * wd;
	float f[25];
#pragma unroll
	for (int t = 0; t < 25; t++)
		f[t] = __ldg(&w[t]);
	for (int e = tx; e < (TH + 2 * R) * (TW + 2 * R); e += TW) {
		int r = e / (TW + 2 * R), c = e % (TW + 2 * R);
		int ii = i0 + r - R, jj = j0 + c - R;
		tile[r][c] = (ii >= 0 && ii < h && jj >= 0 && jj < wd)
		                 ? in[(long long)ii * wd + jj]
		                 : 0.0f;
	}
	__syncthreads();
	float acc[TH];
#pragma unroll
	for (int o = 0; o < TH; o++)
		acc[o] = 0.0f;
	/* Input row t feeds output row o = t - a through filter row a. */
#pragma unroll
	for (int t = 0; t < TH + 2 * R; t++) {
		float v0 = tile[t][tx], v1 = tile[t][tx + 1], v2 = tile[t][tx + 2],
		      v3 = tile[t][tx + 3], v4 = tile[t][tx + 4];
#pragma unroll
		for (int a = 0; a < 5; a++) {
			int o = t - a;
			if (o >= 0 && o < TH)
				acc[o] += f[a * 5 + 0] * v0 + f[a * 5 + 1] * v1 +
				          f[a * 5 + 2] * v2 + f[a * 5 + 3] * v3 +
				          f[a * 5 + 4] * v4;
		}
	}
	int j = j0 + tx;
#pragma unroll
	for (int o = 0; o < TH; o++) {
		int i = i0 + o;
		if (i < h && j < wd)
			y[(long long)img * h * wd + (long long)i * wd + j] = acc[o];
	}
}
