/* Compute stand-ins for the perfkit lab programs: a sleep of a prescribed length and a busy loop
 * of a prescribed number of iterations. Shared by the C and the Fortran programs. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <time.h>

/* Sleep `seconds` [s] against an absolute CLOCK_MONOTONIC deadline (signals do not shorten it). */
void pk_lab_sleep(double seconds)
{
    struct timespec until;
    time_t whole;

    if (!(seconds > 0.0))
        return;
    clock_gettime(CLOCK_MONOTONIC, &until);
    whole = (time_t)seconds;
    until.tv_sec += whole;
    until.tv_nsec += (long)((seconds - (double)whole) * 1e9);
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec += 1;
        until.tv_nsec -= 1000000000L;
    }
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR) {
    }
}

volatile double pk_lab_sink;

/* Busy loop of `iterations` floating-point additions: CPU work, not wall time. */
void pk_lab_busy(long iterations)
{
    double acc = 0.0;
    long i;

    for (i = 0; i < iterations; i++)
        acc += 1e-9 * (double)(i & 1023);
    pk_lab_sink = acc;
}
