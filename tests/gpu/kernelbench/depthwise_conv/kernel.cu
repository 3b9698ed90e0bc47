/* Depthwise 3x3 conv (groups = channels, stride 1, no padding, no bias):
 * x [16, 64, 512, 512], conv2d_weight [64, 1, 3, 3], out [16, 64, 510, 510].
 * Block (32, 8) computes a 32 x 32 output tile of one (n, c) plane, each
 * thread 4 rows, from a 34 x 34 input tile in shared memory.
 * grid (ceil(wo / 32), ceil(ho / 32), batch * channels). */
#define TW 32
#define TH 32
#define K 3
#define IW (TW + K - 1)
#define IH (TH + K - 1)

extern "C" __global__ void __launch_bounds__(256)
    dwconv3(const float *__restrict__ x, const float *__restrict__ w,
        float *__restrict__ y, int channels, int h, int wd)
{
	__shared__ float tile[IH][IW + 1];
	const int ho = h - K + 1, wo = wd - K + 1;
	const int plane = blockIdx.z, c = plane % channels;
	const int ox0 = blockIdx.x * TW, oy0 = blockIdx.y * TH;
	const float *xp = x + (long long)plane * h * wd;
	float *yp = y + (long long)plane * ho * wo;
	const int tid = threadIdx.y * blockDim.x + threadIdx.x;
	for (int i = tid; i < IH * IW; i += 256) {
		int r = i / IW, q = i - r * IW;
		int gy = oy0 + r, gx = ox0 + q;
		tile[r][q] = (gy < h && gx < wd)
		    ? __ldg(xp + (long long)gy * wd + gx)
		    : 0.0f;
	}
	float k[K * K];
#pragma unroll
	for (int j = 0; j < K * K; j++)
		k[j] = __ldg(w + c * K * K + j);
	__syncthreads();
	const int tx = threadIdx.x;
	const int ox = ox0 + tx;
	if (ox >= wo)
		return;
#pragma unroll
	for (int rr = 0; rr < TH / 8; rr++) {
		int ty = threadIdx.y + rr * 8;
		int oy = oy0 + ty;
		if (oy >= ho)
			break;
		float acc = 0.0f;
#pragma unroll
		for (int a = 0; a < K; a++)
#pragma unroll
			for (int b = 0; b < K; b++)
				acc = fmaf(
				    tile[ty + a][tx + b], k[a * K + b], acc);
		__stcs(yp + (long long)oy * wo + ox, acc);
	}
}
