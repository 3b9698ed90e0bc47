// One block of 256 threads per row; the row (4096 floats) is read once into
// registers (four float4 per thread), reduced through warp shuffles and a
// small shared array, and written once.
/* -inf without math.h, which NVRTC does not provide. */
#define NEG_INF __int_as_float(0xff800000)

#define THREADS 256
#define VEC 4 /* float4 per thread: 256 * 4 * 4 = 4096 columns */

__device__ __forceinline__ float block_reduce(float v, bool is_max,
                                              float *red)
{
	int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
	for (int o = 16; o > 0; o >>= 1) {
		float t = __shfl_xor_sync(0xffffffffu, v, o);
		v = is_max ? fmaxf(v, t) : v + t;
	}
	if (lane == 0)
		red[warp] = v;
	__syncthreads();
	v = red[0];
	for (int w = 1; w < THREADS / 32; w++)
		v = is_max ? fmaxf(v, red[w]) : v + red[w];
	__syncthreads();
	return v;
}

extern "C" __global__ void __launch_bounds__(THREADS)
softmax_block(const float4 *__restrict__ x, float4 *__restrict__ y, int rows,
              int cols)
{
	__shared__ float red[THREADS / 32];
	int r = blockIdx.x;
	if (r >= rows || cols != THREADS * VEC * 4)
		return;
	const float4 *in = x + (long long)r * (cols / 4);
	float4 *out = y + (long long)r * (cols / 4);
	float4 v[VEC];
	float m = NEG_INF;
#pragma unroll
	for (int k = 0; k < VEC; k++) {
		v[k] = in[threadIdx.x + k * THREADS];
		m = fmaxf(m, fmaxf(fmaxf(v[k].x, v[k].y), fmaxf(v[k].z, v[k].w)));
	}
	m = block_reduce(m, true, red);
	float s = 0.0f;
#pragma unroll
	for (int k = 0; k < VEC; k++) {
		v[k].x = expf(v[k].x - m);
		v[k].y = expf(v[k].y - m);
		v[k].z = expf(v[k].z - m);
		v[k].w = expf(v[k].w - m);
		s += (v[k].x + v[k].y) + (v[k].z + v[k].w);
	}
	s = block_reduce(s, false, red);
	float inv = 1.0f / s;
#pragma unroll
	for (int k = 0; k < VEC; k++) {
		float4 o = {v[k].x * inv, v[k].y * inv, v[k].z * inv,
		            v[k].w * inv};
		out[threadIdx.x + k * THREADS] = o;
	}
}
