/* nn.LayerNorm((64, 256, 256)) on x of [16, 64, 256, 256]: each sample's
 * N = 4194304 elements are normalised together, then scaled by ln_weight
 * and shifted by ln_bias (both [64, 256, 256]); eps 1e-5, biased variance.
 * Deterministic, no atomics:
 *   ln_stats: grid (PARTS, batch), block 256: sums of (x - k) and
 *     (x - k)^2 over a slice (k = the sample's first element, a shift that
 *     keeps the variance from cancelling), reduced in a fixed tree, in
 *     double, into part[b][p][2];
 *   ln_finish: one block per sample adds its PARTS partials in a fixed
 *     tree: stats[b] = (mean, rstd);
 *   ln_apply: y = (x - mean) * rstd * w + b, float4. */
#define PARTS 128
#define THREADS 256

__device__ __forceinline__ double
warp_sum(double v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_down_sync(0xffffffffu, v, o);
	return v;
}

extern "C" __global__ void
__launch_bounds__(THREADS)
    ln_stats(const float *__restrict__ x, double *__restrict__ part, int n)
{
	__shared__ double s1[THREADS / 32], s2[THREADS / 32];
	const int b = blockIdx.y, p = blockIdx.x;
	const float *xs = x + (long long)b * n;
	const float k = xs[0];
	const int per = n / PARTS / 4; /* float4s per block */
	const float4 *x4 = reinterpret_cast<const float4 *>(xs) + p * per;
	float a = 0.0f, q = 0.0f;
	for (int i = threadIdx.x; i < per; i += THREADS) {
		float4 v = x4[i];
		float d0 = v.x - k, d1 = v.y - k, d2 = v.z - k, d3 = v.w - k;
		a += (d0 + d1) + (d2 + d3);
		q += (d0 * d0 + d1 * d1) + (d2 * d2 + d3 * d3);
	}
	double da = warp_sum((double)a), dq = warp_sum((double)q);
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	if (lane == 0) {
		s1[warp] = da;
		s2[warp] = dq;
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		double ta = 0.0, tq = 0.0;
		for (int w = 0; w < THREADS / 32; w++) {
			ta += s1[w];
			tq += s2[w];
		}
		part[((long long)b * PARTS + p) * 2] = ta;
		part[((long long)b * PARTS + p) * 2 + 1] = tq;
	}
}

/* block PARTS threads, grid batch. */
extern "C" __global__ void
ln_finish(const float *__restrict__ x, const double *__restrict__ part,
    float *__restrict__ stats, int n, float eps)
{
	__shared__ double s1[PARTS], s2[PARTS];
	const int b = blockIdx.x, t = threadIdx.x;
	s1[t] = part[((long long)b * PARTS + t) * 2];
	s2[t] = part[((long long)b * PARTS + t) * 2 + 1];
	__syncthreads();
	for (int h = PARTS / 2; h > 0; h >>= 1) {
		if (t < h) {
			s1[t] += s1[t + h];
			s2[t] += s2[t + h];
		}
		__syncthreads();
	}
	if (t == 0) {
		double m = s1[0] / n; /* mean of x - k */
		double var = s2[0] / n - m * m;
		if (var < 0.0)
			var = 0.0;
		stats[2 * b] = (float)(m + (double)x[(long long)b * n]);
		stats[2 * b + 1] = (float)(1.0 / sqrt(var + (double)eps));
	}
}

extern "C" __global__ void
ln_apply(const float *__restrict__ x, const float *__restrict__ w,
    const float *__restrict__ bias, const float *__restrict__ stats,
    float *__restrict__ y, int n)
{
	const int b = blockIdx.y;
	const float mean = stats[2 * b], rstd = stats[2 * b + 1];
	const int n4 = n / 4;
	const float4 *x4 =
	    reinterpret_cast<const float4 *>(x) + (long long)b * n4;
	float4 *y4 = reinterpret_cast<float4 *>(y) + (long long)b * n4;
	const float4 *w4 = reinterpret_cast<const float4 *>(w);
	const float4 *b4 = reinterpret_cast<const float4 *>(bias);
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n4;
	     i += gridDim.x * blockDim.x) {
		float4 v = __ldcs(x4 + i), g = w4[i], c = b4[i];
		v.x = (v.x - mean) * rstd * g.x + c.x;
		v.y = (v.y - mean) * rstd * g.y + c.y;
		v.z = (v.z - mean) * rstd * g.z + c.z;
		v.w = (v.w - mean) * rstd * g.w + c.w;
		__stcs(y4 + i, v);
	}
}
