/* After the plan's matmul step (out = x @ gemm_weight^T + gemm_bias, the
 * nn.Linear), in place on out: y = y * 2.0, then LeakyReLU with negative
 * slope 0.1 (the problem's multiplier and negative_slope). */
extern "C" __global__ void
mul_leaky4(float4 *__restrict__ y, long long n4, float mul, float slope)
{
	long long stride = (long long)gridDim.x * blockDim.x;
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	     i < n4; i += stride) {
		float4 v = y[i];
		v.x *= mul;
		v.y *= mul;
		v.z *= mul;
		v.w *= mul;
		v.x = v.x > 0.0f ? v.x : v.x * slope;
		v.y = v.y > 0.0f ? v.y : v.y * slope;
		v.z = v.z > 0.0f ? v.z : v.z * slope;
		v.w = v.w > 0.0f ? v.w : v.w * slope;
		y[i] = v;
	}
}
