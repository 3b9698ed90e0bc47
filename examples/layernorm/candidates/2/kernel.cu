// One block of 256 threads per row, the row held in registers (two float4
// per thread for 2048 columns): one read of x, two block reductions (mean,
// then the centred sum of squares), one write.
#define THREADS 256
#define VEC 2

__device__ __forceinline__ float block_sum(float v, float *red)
{
	int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	if (lane == 0)
		red[warp] = v;
	__syncthreads();
	v = 0.0f;
	for (int w = 0; w < THREADS / 32; w++)
		v += red[w];
	__syncthreads();
	return v;
}

extern "C" __global__ void __launch_bounds__(THREADS)
layernorm_block(const float4 *__restrict__ x, const float4 *__restrict__ gamma,
                const float4 *__restrict__ beta, float4 *__restrict__ y,
                int rows, int cols, float eps)
{
	__shared__ float red[THREADS / 32];
	int r = blockIdx.x;
	if (r >= rows || cols != THREADS * VEC * 4)
		return;
	const float4 *in = x + (long long)r * (cols / 4);
	float4 *out = y + (long long)r * (cols / 4);
	float4 v[VEC];
	float s = 0.0f;
#pragma unroll
	for (int k = 0; k < VEC; k++) {
		v[k] = in[threadIdx.x + k * THREADS];
		s += (v[k].x + v[k].y) + (v[k].z + v[k].w);
	}
	float mean = block_sum(s, red) / cols;
	float q = 0.0f;
#pragma unroll
	for (int k = 0; k < VEC; k++) {
		v[k].x -= mean;
		v[k].y -= mean;
		v[k].z -= mean;
		v[k].w -= mean;
		q += (v[k].x * v[k].x + v[k].y * v[k].y) +
		     (v[k].z * v[k].z + v[k].w * v[k].w);
	}
	float rstd = rsqrtf(block_sum(q, red) / cols + eps);
#pragma unroll
	for (int k = 0; k < VEC; k++) {
		int c = threadIdx.x + k * THREADS;
		float4 g = __ldg(&gamma[c]), b = __ldg(&beta[c]), o;
		o.x = v[k].x * rstd * g.x + b.x;
		o.y = v[k].y * rstd * g.y + b.y;
		o.z = v[k].z * rstd * g.z + b.z;
		o.w = v[k].w * rstd * g.w + b.w;
		out[c] = o;
	}
}
