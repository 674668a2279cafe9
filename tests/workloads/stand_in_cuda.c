/*
 * A stand-in for CUDA's libraries, for timing only: the GPU tests' known
 * durations (there is no GPU or driver here, and NVIDIA's real runtime
 * library returns at once without one: it serves the tests of symbol
 * resolution and exact counts).
 *
 * Built as libcuda.so.1 (the driver API): cuStreamSynchronize blocks in
 * nanosleep for SP_BLOCK_MS, or for as many milliseconds as its stream
 * argument's value when it is not null (a wait with blocking sync: the
 * thread sleeps in the kernel), cuCtxSynchronize spins on the CPU for SP_SPIN_MS (CUDA's
 * default: the thread spins in the library). Built with -DSP_RUNTIME as
 * libcudart.so.12 linked to it: cudaDeviceSynchronize calls
 * cuCtxSynchronize, as the real runtime calls the driver (one wait, the
 * outer call's).
 */
#include <time.h>

#define SP_BLOCK_MS 50
#define SP_SPIN_MS 100

#ifndef SP_RUNTIME
int cuStreamSynchronize(void *stream)
{
	long ms = stream ? (long)stream : SP_BLOCK_MS;
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	nanosleep(&ts, 0);
	return 0;
}

int cuCtxSynchronize(void)
{
	struct timespec start, now;
	clock_gettime(CLOCK_MONOTONIC, &start);
	do {
		clock_gettime(CLOCK_MONOTONIC, &now);
	} while ((now.tv_sec - start.tv_sec) * 1000000000L + (now.tv_nsec - start.tv_nsec) <
		 SP_SPIN_MS * 1000000L);
	return 0;
}
#else
int cuCtxSynchronize(void);

int cudaDeviceSynchronize(void)
{
	return cuCtxSynchronize();
}
#endif
