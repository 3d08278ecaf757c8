/* Compute that needs a core, for the lab's exchange program (perfkit/collect/lab/programs/exchange.c): its
 * pk_lab_sleep(S) replaced by a spin loop until the calling thread's CPU clock has advanced S seconds. The
 * work per step is fixed in CPU time, so on a shared core its wall time stretches, as a real code's does.
 * Built with -DPK_LATE_FACTOR=F, rank 0 does F times the work of the others (a static imbalance). */
#include <mpi.h>
#include <time.h>

#ifndef PK_LATE_FACTOR
#define PK_LATE_FACTOR 1.0
#endif

static volatile double sink;

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void pk_lab_sleep(double seconds)
{
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    double until = cpu_s() + seconds * (rank == 0 ? PK_LATE_FACTOR : 1.0), x = 0;
    while (cpu_s() < until)
        for (int i = 0; i < 10000; i++)
            x += (double)i * 1e-9;
    sink = x;
}
