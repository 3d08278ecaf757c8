/* spin: a program that computes. Usage: spin ITERATIONS STEPS
 *
 * Each of STEPS steps: MPI_Barrier, then ITERATIONS of a dependent floating-point recurrence (the same
 * work on every rank; registers only, no memory traffic), timed on each rank by MPI_Wtime (wall) and
 * CLOCK_THREAD_CPUTIME_ID (CPU). Rank 0 prints one line per rank:
 *   spin: rank R compute_s WALL cpu_s CPU
 * (both summed over the steps [s]). */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double cpu_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

volatile double spin_sink;

int main(int argc, char **argv)
{
    int rank, size;
    long iterations, steps;
    double times[2] = {0.0, 0.0}, *all = NULL;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 3) {
        if (rank == 0)
            fprintf(stderr, "usage: spin ITERATIONS STEPS\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    iterations = atol(argv[1]);
    steps = atol(argv[2]);
    for (long s = 0; s < steps; s++) {
        double x = 1.0 + rank, wall, cpu;
        MPI_Barrier(MPI_COMM_WORLD);
        wall = MPI_Wtime();
        cpu = cpu_seconds();
        for (long i = 0; i < iterations; i++)
            x = x * 0.999999999 + 1e-9;
        spin_sink = x;
        times[0] += MPI_Wtime() - wall;
        times[1] += cpu_seconds() - cpu;
    }
    if (rank == 0)
        all = malloc(2 * (size_t)size * sizeof *all);
    MPI_Gather(times, 2, MPI_DOUBLE, all, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        for (int r = 0; r < size; r++)
            printf("spin: rank %d compute_s %.6f cpu_s %.6f\n", r, all[2 * r], all[2 * r + 1]);
        free(all);
    }
    MPI_Finalize();
    return 0;
}
