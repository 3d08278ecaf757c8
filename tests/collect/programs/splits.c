/* Communicators of every shape, a ring of messages on each, and the truth of both.
 *
 * Made with MPI_Comm_dup and MPI_Comm_split: DUPS duplicates of MPI_COMM_WORLD (argv[3], default 4), the two
 * halves of the world in reversed order (key -rank: each half's rank 0, its leader, is its highest world rank),
 * the ranks of each parity, each half's ranks of each parity (a split of a split), and one communicator per
 * rank alone. On each communicator of more than one member, its rank p sends its rank p + 1 (mod size) 1 + w
 * ints with MPI_Sendrecv, w the sender's world rank; a rank alone makes a barrier. The duplicates are freed
 * before MPI_Finalize, the others not. Rank 0 writes the truth, computed here: "comm m0 m1 ..." per
 * communicator of more than one member (world ranks in the communicator's rank order) and "p2p sender receiver
 * bytes" per pair (world ranks, summed over the communicators) into argv[1] (none without it, or "-"); given
 * argv[2] (not "-"), its own view of MPI_Finalize into that file: the call's duration [s], its resident memory before
 * it and its peak resident memory during it [KiB] (the peak reset just before the call, /proc/self/clear_refs). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long status_kib(const char *key) {
    FILE *fh = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    size_t n = strlen(key);
    if (!fh) return -1;
    while (fgets(line, sizeof line, fh))
        if (strncmp(line, key, n) == 0 && sscanf(line + n, ": %ld", &kib) == 1) break;
    fclose(fh);
    return kib;
}

static int reset_peak(void) {
    FILE *fh = fopen("/proc/self/clear_refs", "w");
    if (!fh) return 0;
    int ok = fputs("5", fh) >= 0;
    return fclose(fh) == 0 && ok;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* a ring on `comm`: each rank sends the next 1 + its world rank ints */
static void ring(MPI_Comm comm, int world_rank) {
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    if (size == 1) {
        MPI_Barrier(comm);
        return;
    }
    int next = (rank + 1) % size, prev = (rank + size - 1) % size, world_size, n_out = 1 + world_rank;
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    int *out = calloc(n_out, sizeof(int)), *in = calloc(world_size, sizeof(int)); /* at most world_size ints */
    MPI_Sendrecv(out, n_out, MPI_INT, next, 1, in, world_size, MPI_INT, prev, 1, comm, MPI_STATUS_IGNORE);
    free(out), free(in);
}

/* rank 0's truth: a communicator's members (world ranks, in its rank order) and its ring's messages */
static void truth(FILE *fh, double *bytes, int size, const int *members, int n) {
    if (n < 2) return;
    fprintf(fh, "comm");
    for (int p = 0; p < n; p++) fprintf(fh, " %d", members[p]);
    fprintf(fh, "\n");
    for (int p = 0; p < n; p++) bytes[(size_t)members[p] * size + members[(p + 1) % n]] += (1 + members[p]) * sizeof(int);
}

int main(int argc, char **argv) {
    int rank, size, dups = argc > 3 ? atoi(argv[3]) : 4;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int half = size / 2;
    MPI_Comm *dup = malloc((dups ? dups : 1) * sizeof(MPI_Comm)), halves, parity, quarter, alone;
    for (int k = 0; k < dups; k++) {
        MPI_Comm_dup(MPI_COMM_WORLD, &dup[k]);
        ring(dup[k], rank);
    }
    MPI_Comm_split(MPI_COMM_WORLD, rank < half, -rank, &halves);
    ring(halves, rank);
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &parity);
    ring(parity, rank);
    MPI_Comm_split(halves, rank % 2, rank, &quarter);
    ring(quarter, rank);
    MPI_Comm_split(MPI_COMM_WORLD, rank, 0, &alone);
    ring(alone, rank);
    for (int k = 0; k < dups; k++) MPI_Comm_free(&dup[k]);

    if (rank == 0 && argc > 1 && strcmp(argv[1], "-") != 0) {
        FILE *fh = fopen(argv[1], "w");
        double *bytes = calloc((size_t)size * size, sizeof(double));
        int *m = malloc(size * sizeof(int)), n;
        for (int k = 0; k < dups; k++) {
            for (n = 0; n < size; n++) m[n] = n;
            truth(fh, bytes, size, m, size);
        }
        for (int low = 1; low >= 0; low--) { /* halves: descending world ranks */
            n = 0;
            for (int r = size - 1; r >= 0; r--)
                if ((r < half) == low) m[n++] = r;
            truth(fh, bytes, size, m, n);
        }
        for (int par = 0; par < 2; par++) {
            n = 0;
            for (int r = par; r < size; r += 2) m[n++] = r;
            truth(fh, bytes, size, m, n);
        }
        for (int low = 1; low >= 0; low--)
            for (int par = 0; par < 2; par++) { /* key rank: ascending */
                n = 0;
                for (int r = par; r < size; r += 2)
                    if ((r < half) == low) m[n++] = r;
                truth(fh, bytes, size, m, n);
            }
        for (size_t i = 0; i < (size_t)size * size; i++)
            if (bytes[i] > 0) fprintf(fh, "p2p %zu %zu %.0f\n", i / size, i % size, bytes[i]);
        fclose(fh);
        free(bytes), free(m);
    }
    free(dup);
    long before = -1;
    if (rank == 0 && reset_peak()) before = status_kib("VmRSS");
    double t = now();
    MPI_Finalize();
    t = now() - t;
    if (rank == 0 && argc > 2 && strcmp(argv[2], "-") != 0) {
        FILE *fh = fopen(argv[2], "w");
        fprintf(fh, "finalize_seconds %.9g\nrss_before_kib %ld\npeak_kib %ld\n", t, before, status_kib("VmHWM"));
        fclose(fh);
    }
    return 0;
}
