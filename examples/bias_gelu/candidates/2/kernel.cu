// Fused and vectorized: each thread handles four consecutive elements with
// 16-byte loads and stores (cols is a multiple of 4).
__device__ __forceinline__ float gelu_erf(float v)
{
	return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

extern "C" __global__ void bias_gelu_vec4(const float4 *__restrict__ x,
                                          const float4 *__restrict__ w,
                                          const float4 *__restrict__ b,
                                          float4 *__restrict__ y, int rows,
                                          int cols)
{
	int cols4 = cols / 4;
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= rows * cols4)
		return;
	int c = i % cols4;
	float4 v = x[i], s = __ldg(&w[c]), t = __ldg(&b[c]), o;
	o.x = gelu_erf(v.x * s.x + t.x);
	o.y = gelu_erf(v.y * s.y + t.y);
	o.z = gelu_erf(v.z * s.z + t.z);
	o.w = gelu_erf(v.w * s.w + t.w);
	y[i] = o;
}
