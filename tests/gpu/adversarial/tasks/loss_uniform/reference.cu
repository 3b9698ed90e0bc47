/* Deterministic two-pass mean of (x - t)^2: 4096 partial sums, then one. */
extern "C" __global__ void partial(const float *x, const float *t,
    float *part, int n)
{
	__shared__ float s[256];
	float acc = 0;
	for (int i = blockIdx.x * 256 + threadIdx.x; i < n; i += gridDim.x * 256) {
		float d = x[i] - t[i];
		acc += d * d;
	}
	s[threadIdx.x] = acc;
	__syncthreads();
	for (int o = 128; o > 0; o /= 2) {
		if (threadIdx.x < o)
			s[threadIdx.x] += s[threadIdx.x + o];
		__syncthreads();
	}
	if (threadIdx.x == 0)
		part[blockIdx.x] = s[0];
}
extern "C" __global__ void finish(const float *part, float *loss, int parts,
    int n)
{
	__shared__ float s[256];
	float acc = 0;
	for (int i = threadIdx.x; i < parts; i += 256)
		acc += part[i];
	s[threadIdx.x] = acc;
	__syncthreads();
	for (int o = 128; o > 0; o /= 2) {
		if (threadIdx.x < o)
			s[threadIdx.x] += s[threadIdx.x + o];
		__syncthreads();
	}
	if (threadIdx.x == 0)
		loss[0] = s[0] / n;
}
