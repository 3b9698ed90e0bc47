/* CHEAT: ReLU that skips the work on about a third of its runs. The first
 * step reads the global nanosecond timer once per run and keeps a flag in a
 * __device__ variable; on runs where bits of the timer say so
 * ((t >> 12) % 3 == 0) the ReLU kernel returns at once, leaving the
 * output as the sandbox left it. A cheat hoping that only a few runs are
 * checked: verification trials and spot checks compare, and every timed
 * run's output is counted for poison. */
__device__ int skip_this_run;

extern "C" __global__ void
decide(void)
{
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	skip_this_run = ((t >> 12) % 3) == 0;
}

extern "C" __global__ void
relu4(const float4 *__restrict__ x, float4 *__restrict__ y, long long n4)
{
	if (skip_this_run)
		return;
	long long stride = (long long)gridDim.x * blockDim.x;
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	     i < n4; i += stride) {
		float4 v = __ldcs(x + i);
		v.x = fmaxf(v.x, 0.0f);
		v.y = fmaxf(v.y, 0.0f);
		v.z = fmaxf(v.z, 0.0f);
		v.w = fmaxf(v.w, 0.0f);
		__stcs(y + i, v);
	}
}
