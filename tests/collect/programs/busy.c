/* A program that computes (a spin loop of fixed work, never a sleep) between a ring exchange and an allreduce
 * each step, and measures its own compute: around each step's loop, the thread's CPU clock and the monotonic
 * clock. Every rank writes "compute_cpu_s C compute_wall_s W" to OUT.R (R its rank) at the end.
 *
 * Usage: busy WORK STEPS OUT: WORK loop iterations per step, STEPS steps. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static volatile double sink;

static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void spin(long n) {
    double x = 0;
    for (long i = 0; i < n; i++) x += (double)i * 1e-9;
    sink = x;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 4) {
        fprintf(stderr, "usage: busy WORK STEPS OUT\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    long work = atol(argv[1]);
    int steps = atoi(argv[2]);
    static double out[1024], in[1024];
    double cpu = 0, wall = 0;
    for (int k = 0; k < steps; k++) {
        double c0 = clock_s(CLOCK_THREAD_CPUTIME_ID), w0 = clock_s(CLOCK_MONOTONIC);
        spin(work);
        cpu += clock_s(CLOCK_THREAD_CPUTIME_ID) - c0;
        wall += clock_s(CLOCK_MONOTONIC) - w0;
        MPI_Sendrecv(out, 1024, MPI_DOUBLE, (rank + 1) % size, 0, in, 1024, MPI_DOUBLE, (rank + size - 1) % size, 0,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Allreduce(MPI_IN_PLACE, out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    }
    char path[4096];
    snprintf(path, sizeof path, "%s.%d", argv[3], rank);
    FILE *fh = fopen(path, "w");
    if (!fh || fprintf(fh, "compute_cpu_s %.6f compute_wall_s %.6f\n", cpu, wall) < 0 || fclose(fh) != 0)
        MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Finalize();
    return 0;
}
