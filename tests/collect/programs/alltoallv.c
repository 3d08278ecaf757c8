/* An all-to-all with a different count per pair, plus point to point, and the truth of both per pair.
 *
 * Rank i sends rank j (j != i) count(i, j) = 1 + (7 * i + 3 * j) % 11 ints in each of STEPS MPI_Alltoallv
 * calls (and its own block to itself, which is no traffic), then once count(i, j) elements of type(i, j) (ints
 * or doubles by the pair) in an MPI_Alltoallw, then an MPI_Allgather of 2 ints among the ranks of its parity
 * (a communicator split off and freed), then a ring of point-to-point messages: rank i
 * sends ring(i) = 8 * (i + 1) doubles to rank i + 1 (mod N) with MPI_Sendrecv, and rank 0 broadcasts
 * BCAST_N doubles. Rank 0 then writes the truth, computed here and never read from the collector:
 * "p2p sender receiver bytes" and "coll sender receiver bytes" lines into argv[1] (none without it, or "-"),
 * and, given argv[2], its own view of MPI_Finalize into that file: the call's duration [s] and the process's
 * peak resident memory (VmHWM) before and after it [KiB]. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define STEPS 3
#define BCAST_N 5

static int count(int i, int j) { return 1 + (7 * i + 3 * j) % 11; }
static MPI_Datatype type(int i, int j) { return (i + j) % 2 ? MPI_DOUBLE : MPI_INT; }
static size_t type_size(int i, int j) { return (i + j) % 2 ? sizeof(double) : sizeof(int); }

static long peak_kib(void) {
    FILE *fh = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    if (!fh) return -1;
    while (fgets(line, sizeof line, fh))
        if (sscanf(line, "VmHWM: %ld", &kib) == 1) break;
    fclose(fh);
    return kib;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int *scounts = malloc(size * sizeof(int)), *rcounts = malloc(size * sizeof(int));
    int *sdispls = malloc(size * sizeof(int)), *rdispls = malloc(size * sizeof(int));
    int stotal = 0, rtotal = 0;
    for (int j = 0; j < size; j++) {
        scounts[j] = count(rank, j);
        rcounts[j] = count(j, rank);
        sdispls[j] = stotal, stotal += scounts[j];
        rdispls[j] = rtotal, rtotal += rcounts[j];
    }
    int *sbuf = calloc(stotal, sizeof(int)), *rbuf = calloc(rtotal, sizeof(int));
    for (int k = 0; k < STEPS; k++)
        MPI_Alltoallv(sbuf, scounts, sdispls, MPI_INT, rbuf, rcounts, rdispls, MPI_INT, MPI_COMM_WORLD);

    MPI_Datatype *stypes = malloc(size * sizeof(MPI_Datatype)), *rtypes = malloc(size * sizeof(MPI_Datatype));
    size_t sbytes = 0, rbytes = 0;
    for (int j = 0; j < size; j++) { /* byte displacements */
        stypes[j] = type(rank, j), rtypes[j] = type(j, rank);
        sdispls[j] = (int)sbytes, sbytes += scounts[j] * type_size(rank, j);
        rdispls[j] = (int)rbytes, rbytes += rcounts[j] * type_size(j, rank);
    }
    char *swbuf = calloc(sbytes, 1), *rwbuf = calloc(rbytes, 1);
    MPI_Alltoallw(swbuf, scounts, sdispls, stypes, rwbuf, rcounts, rdispls, rtypes, MPI_COMM_WORLD);

    MPI_Comm parity;
    int pair[2] = {rank, rank}, *gathered = malloc(size * 2 * sizeof(int));
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &parity);
    MPI_Allgather(pair, 2, MPI_INT, gathered, 2, MPI_INT, parity);
    MPI_Comm_free(&parity);

    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    int n_out = 8 * (rank + 1), n_in = 8 * (prev + 1);
    double *out = calloc(n_out, sizeof(double)), *in = calloc(n_in, sizeof(double)), b[BCAST_N] = {0};
    MPI_Sendrecv(out, n_out, MPI_DOUBLE, next, 1, in, n_in, MPI_DOUBLE, prev, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Bcast(b, BCAST_N, MPI_DOUBLE, 0, MPI_COMM_WORLD);

    if (rank == 0 && argc > 1 && strcmp(argv[1], "-") != 0) {
        FILE *fh = fopen(argv[1], "w");
        for (int i = 0; i < size; i++) {
            if (size > 1) fprintf(fh, "p2p %d %d %zu\n", i, (i + 1) % size, 8 * (size_t)(i + 1) * sizeof(double));
            for (int j = 0; j < size; j++) {
                size_t bytes = i == j ? 0 : (STEPS * sizeof(int) + type_size(i, j)) * count(i, j);
                if (i != j && i % 2 == j % 2) bytes += 2 * sizeof(int);
                if (i == 0 && j != 0) bytes += BCAST_N * sizeof(double);
                if (bytes) fprintf(fh, "coll %d %d %zu\n", i, j, bytes);
            }
        }
        fclose(fh);
    }
    free(scounts), free(rcounts), free(sdispls), free(rdispls), free(sbuf), free(rbuf), free(out), free(in);
    free(stypes), free(rtypes), free(swbuf), free(rwbuf), free(gathered);
    long before = peak_kib();
    double t = now();
    MPI_Finalize();
    t = now() - t;
    if (rank == 0 && argc > 2) {
        FILE *fh = fopen(argv[2], "w");
        fprintf(fh, "finalize_seconds %.9g\npeak_before_kib %ld\npeak_after_kib %ld\n", t, before, peak_kib());
        fclose(fh);
    }
    return 0;
}
