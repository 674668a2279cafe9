/* A C extension's stand-in for tests/tests/stacks.rs: with
 * STAND_IN_HOLD_IN_C=path-to-this-library, stand_in_lock.py's loader calls
 * hold_in_c() through ctypes (which lets go of the GIL) while it holds
 * model_lock, so the lock's holder is in native code, running on a CPU. */
#include <time.h>

volatile unsigned long c_spun;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Computes for `seconds`. */
__attribute__((noinline)) void hold_in_c(double seconds) {
    double end = now() + seconds;
    while (now() < end)
        for (int i = 0; i < 10000; i++)
            c_spun++; /* computes holding the lock */
}
