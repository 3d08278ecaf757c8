/* Compute stand-ins for the perfkit lab programs: a sleep of a prescribed length and a busy loop
 * of a prescribed number of iterations, optionally timed and recorded. Shared by the C and the
 * Fortran programs. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
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

/* Realised compute: every timed call appends its start and end [s, CLOCK_MONOTONIC, shared by the ranks
 * of one node]; written at the end so that the truth can be recomputed from the run's own event times
 * (a loaded machine wakes sleepers late and delivers messages late). */

static double *pk_lab_times;
static size_t pk_lab_count, pk_lab_capacity;

static double pk_lab_now(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void pk_lab_append(double seconds)
{
    if (pk_lab_count == pk_lab_capacity) {
        size_t cap = pk_lab_capacity ? 2 * pk_lab_capacity : 1024;
        double *grown = realloc(pk_lab_times, cap * sizeof *grown);
        if (grown == NULL)
            return; /* the record will be short, and refused as such */
        pk_lab_times = grown;
        pk_lab_capacity = cap;
    }
    pk_lab_times[pk_lab_count++] = seconds;
}

/* pk_lab_sleep, its realised interval recorded. */
void pk_lab_timed_sleep(double seconds)
{
    pk_lab_append(pk_lab_now());
    pk_lab_sleep(seconds);
    pk_lab_append(pk_lab_now());
}

/* pk_lab_busy, its realised interval recorded. */
void pk_lab_timed_busy(long iterations)
{
    pk_lab_append(pk_lab_now());
    pk_lab_busy(iterations);
    pk_lab_append(pk_lab_now());
}

/* Write the recorded intervals as text, "start end" per line, to "<path>.<rank>" (nothing when path is empty).
 * Returns 0 on success. */
int pk_lab_write_record(const char *path, int rank)
{
    char name[4096];
    FILE *f;
    size_t i;

    if (path == NULL || path[0] == '\0')
        return 0;
    snprintf(name, sizeof name, "%s.%d", path, rank);
    f = fopen(name, "w");
    if (f == NULL)
        return 1;
    for (i = 0; i + 1 < pk_lab_count; i += 2)
        fprintf(f, "%.9f %.9f\n", pk_lab_times[i], pk_lab_times[i + 1]);
    return fclose(f) != 0;
}
