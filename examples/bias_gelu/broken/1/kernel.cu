// Fused and vectorized, with the fast tanh form of GELU.
__device__ __forceinline__ float gelu_fast(float v)
{
	float u = 0.7978845608f * (v + 0.044715f * v * v * v);
	return 0.5f * v * (1.0f + tanhf(u));
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
	o.x = gelu_fast(v.x * s.x + t.x);
	o.y = gelu_fast(v.y * s.y + t.y);
	o.z = gelu_fast(v.z * s.z + t.z);
	o.w = gelu_fast(v.w * s.w + t.w);
	y[i] = o;
}
