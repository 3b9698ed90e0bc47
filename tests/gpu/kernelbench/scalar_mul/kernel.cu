/* C = A * s over 65536 x 16384 floats (1G elements, 4 GB); s is the
 * problem's scalar input, passed by the plan as an f32 argument. */
extern "C" __global__ void
scale4(
    const float4 *__restrict__ a, float4 *__restrict__ c, float s, long long n4)
{
	long long stride = (long long)gridDim.x * blockDim.x;
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	     i < n4; i += stride) {
		float4 v = __ldcs(a + i);
		v.x *= s;
		v.y *= s;
		v.z *= s;
		v.w *= s;
		__stcs(c + i, v);
	}
}
