// Fused, vectorized, and w/b held in registers across rows: each block
// walks ROWS rows; each thread keeps the float4 of w and b of its columns
// and streams x with 16-byte loads.
#define ROWS 8

__device__ __forceinline__ float gelu_erf(float v)
{
	return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

extern "C" __global__ void bias_gelu_rows(const float4 *__restrict__ x,
                                          const float4 *__restrict__ w,
                                          const float4 *__restrict__ b,
                                          float4 *__restrict__ y, int rows,
                                          int cols)
{
	int cols4 = cols / 4;
	int r0 = blockIdx.x * ROWS;
	for (int c = threadIdx.x; c < cols4; c += blockDim.x) {
		float4 s = __ldg(&w[c]), t = __ldg(&b[c]);
#pragma unroll
		for (int r = 0; r < ROWS; r++) {
			if (r0 + r >= rows)
				break;
			long long i = (long long)(r0 + r) * cols4 + c;
			float4 v = __ldcs(&x[i]), o;
			o.x = gelu_erf(v.x * s.x + t.x);
			o.y = gelu_erf(v.y * s.y + t.y);
			o.z = gelu_erf(v.z * s.z + t.z);
			o.w = gelu_erf(v.w * s.w + t.w);
			__stcs(&y[i], o);
		}
	}
}
