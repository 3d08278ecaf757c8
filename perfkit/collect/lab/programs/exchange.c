/* perfkit exchange: a bulk-synchronous program whose communication pattern is read from a file.
 *
 * Usage: exchange PATTERN [steps=N] [step=S] [warmup=N] [allreduce=N]
 *   PATTERN   text file, one "sender receiver bytes" per line (world ranks): what each step sends
 *   steps=N   time steps (default 10)
 *   step=S    compute per step and rank [s], a sleep (default 0.01)
 *   warmup=N  untimed steps before the loop (default 1)
 *   allreduce=N  8-byte MPI_Allreduce calls after each step's exchange (default 0)
 *
 * Each step: compute, then every rank posts MPI_Irecv for each message it receives and MPI_Isend for
 * each it sends, then MPI_Waitall (then the step's allreduces). Rank 0 prints "exchange: host R NAME" for every rank (where it ran)
 * and "exchange: loop_s T" (the timed steps, between barriers, by MPI_Wtime). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void pk_lab_sleep(double seconds);

typedef struct { int peer; long bytes; } message;

static long read_pattern(const char *path, int rank, message **sends, long *nsend, message **recvs, long *nrecv,
                         int size)
{
    FILE *fh = fopen(path, "r");
    long s, r, b, line = 0, cap_s = 16, cap_r = 16, biggest = 1;
    if (!fh) {
        fprintf(stderr, "exchange: cannot open pattern %s\n", path);
        return -1;
    }
    *sends = malloc(cap_s * sizeof **sends);
    *recvs = malloc(cap_r * sizeof **recvs);
    *nsend = *nrecv = 0;
    while (fscanf(fh, "%ld %ld %ld", &s, &r, &b) == 3) {
        line++;
        if (s < 0 || s >= size || r < 0 || r >= size || b < 0) {
            fprintf(stderr, "exchange: %s line %ld: expected ranks below %d and bytes >= 0\n", path, line, size);
            fclose(fh);
            return -1;
        }
        if (b > biggest)
            biggest = b;
        if (s == rank) {
            if (*nsend == cap_s)
                *sends = realloc(*sends, (cap_s *= 2) * sizeof **sends);
            (*sends)[(*nsend)++] = (message){(int)r, b};
        }
        if (r == rank) {
            if (*nrecv == cap_r)
                *recvs = realloc(*recvs, (cap_r *= 2) * sizeof **recvs);
            (*recvs)[(*nrecv)++] = (message){(int)s, b};
        }
    }
    fclose(fh);
    return biggest;
}

static void step_exchange(message *sends, long nsend, message *recvs, long nrecv, char *out, char *in, long biggest,
                          MPI_Request *req)
{
    long i;
    for (i = 0; i < nrecv; i++)
        MPI_Irecv(in + i * biggest, (int)recvs[i].bytes, MPI_BYTE, recvs[i].peer, 7, MPI_COMM_WORLD, &req[i]);
    for (i = 0; i < nsend; i++)
        MPI_Isend(out, (int)sends[i].bytes, MPI_BYTE, sends[i].peer, 7, MPI_COMM_WORLD, &req[nrecv + i]);
    MPI_Waitall((int)(nsend + nrecv), req, MPI_STATUSES_IGNORE);
}

int main(int argc, char **argv)
{
    int rank, size, i;
    long steps = 10, warmup = 1, allreduces = 0, k, j, nsend, nrecv, biggest;
    double step = 0.01, t0, t1, one = 1, sum;
    message *sends, *recvs;
    char host[256] = "", *hosts = NULL, *out, *in;
    MPI_Request *req;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 2) {
        if (rank == 0)
            fprintf(stderr, "usage: exchange PATTERN [steps=N] [step=S] [warmup=N] [allreduce=N]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    for (i = 2; i < argc; i++) {
        if (!strncmp(argv[i], "steps=", 6)) steps = atol(argv[i] + 6);
        else if (!strncmp(argv[i], "step=", 5)) step = atof(argv[i] + 5);
        else if (!strncmp(argv[i], "warmup=", 7)) warmup = atol(argv[i] + 7);
        else if (!strncmp(argv[i], "allreduce=", 10)) allreduces = atol(argv[i] + 10);
        else {
            if (rank == 0)
                fprintf(stderr, "exchange: unknown parameter '%s'\n", argv[i]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    biggest = read_pattern(argv[1], rank, &sends, &nsend, &recvs, &nrecv, size);
    if (biggest < 0)
        MPI_Abort(MPI_COMM_WORLD, 2);
    out = calloc((size_t)biggest, 1);
    in = calloc((size_t)biggest * (size_t)(nrecv > 0 ? nrecv : 1), 1);
    req = malloc((size_t)(nsend + nrecv + 1) * sizeof *req);

    gethostname(host, sizeof host - 1);
    if (rank == 0)
        hosts = malloc((size_t)size * sizeof host);
    MPI_Gather(host, sizeof host, MPI_CHAR, hosts, sizeof host, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        for (i = 0; i < size; i++)
            printf("exchange: host %d %s\n", i, hosts + (size_t)i * sizeof host);
        fflush(stdout);
    }
    for (k = 0; k < warmup; k++)
        step_exchange(sends, nsend, recvs, nrecv, out, in, biggest, req);
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    for (k = 0; k < steps; k++) {
        pk_lab_sleep(step);
        step_exchange(sends, nsend, recvs, nrecv, out, in, biggest, req);
        for (j = 0; j < allreduces; j++)
            MPI_Allreduce(&one, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    t1 = MPI_Wtime();
    if (rank == 0)
        printf("exchange: loop_s %.6f\n", t1 - t0);
    free(out); free(in); free(req); free(sends); free(recvs); free(hosts);
    MPI_Finalize();
    return 0;
}
