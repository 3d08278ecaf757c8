/* perfkit lab: small MPI programs whose performance causes are known by construction.
 *
 * Usage: lab SCENARIO [key=value ...]
 *   steps=N        time steps                                     (default 10)
 *   step=S         compute per step [s], a sleep                  (default 0.01)
 *   extra=S        extra compute of the late rank(s) [s]          (default 0.01)
 *   root_extra=S   collective_imbalance: root's compute before MPI_Bcast [s] (default 0)
 *   bytes=B        message size [B]                               (default 1024)
 *   late_rank=R    static_imbalance: the late rank                (default 0)
 *   ppn=P          static_imbalance: ranks per node               (default 0: one late rank)
 *   late_node=K    static_imbalance: ranks r with r / ppn == K are late (when ppn > 0)
 *   work=N         oversubscribed: busy-loop iterations per step  (default 1000000)
 *   fail_rank=R    abort / segfault: the failing rank             (default 0)
 *   fail_step=K    abort / segfault: the step at which it fails   (default 0)
 *   record=PATH    write each rank's realised compute intervals to PATH.<rank>, "start end" [s] per line
 *
 * Scenarios: balanced, static_imbalance, dynamic_imbalance, pipeline, collective_imbalance,
 * oversubscribed, abort, segfault, any_source. The exact sequence of MPI calls of each one is
 * mirrored by perfkit/collect/lab/scenarios.py, which derives the ground truth from it.
 * Compute is a sleep (lab_sleep.c), so the truth holds with more ranks than cores; with record=PATH
 * each rank also writes when each compute actually started and ended, for the truth of that very run. */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pk_lab_timed_sleep(double seconds);
void pk_lab_timed_busy(long iterations);
int pk_lab_write_record(const char *path, int rank);

enum { TAG_RIGHTWARD = 1, TAG_LEFTWARD = 2, TAG_TOKEN = 3, TAG_GATHER = 4, TAG_RELEASE = 5 };

typedef struct {
    const char *scenario, *record;
    long steps, bytes, late_rank, ppn, late_node, work, fail_rank, fail_step;
    double step, extra, root_extra;
} lab_params;

static int parse(int argc, char **argv, lab_params *p)
{
    int i;

    p->scenario = argc > 1 ? argv[1] : "";
    p->record = "";
    p->steps = 10;
    p->bytes = 1024;
    p->late_rank = 0;
    p->ppn = 0;
    p->late_node = 0;
    p->work = 1000000;
    p->fail_rank = 0;
    p->fail_step = 0;
    p->step = 0.01;
    p->extra = 0.01;
    p->root_extra = 0.0;
    for (i = 2; i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        const char *v;
        if (eq == NULL) {
            fprintf(stderr, "lab: expected key=value, got '%s'\n", argv[i]);
            return 0;
        }
        *eq = '\0';
        v = eq + 1;
        if (!strcmp(argv[i], "steps")) p->steps = atol(v);
        else if (!strcmp(argv[i], "bytes")) p->bytes = atol(v);
        else if (!strcmp(argv[i], "late_rank")) p->late_rank = atol(v);
        else if (!strcmp(argv[i], "ppn")) p->ppn = atol(v);
        else if (!strcmp(argv[i], "late_node")) p->late_node = atol(v);
        else if (!strcmp(argv[i], "work")) p->work = atol(v);
        else if (!strcmp(argv[i], "fail_rank")) p->fail_rank = atol(v);
        else if (!strcmp(argv[i], "fail_step")) p->fail_step = atol(v);
        else if (!strcmp(argv[i], "step")) p->step = atof(v);
        else if (!strcmp(argv[i], "extra")) p->extra = atof(v);
        else if (!strcmp(argv[i], "root_extra")) p->root_extra = atof(v);
        else if (!strcmp(argv[i], "record")) p->record = v;
        else {
            fprintf(stderr, "lab: unknown parameter '%s'\n", argv[i]);
            return 0;
        }
    }
    return p->steps >= 0 && p->bytes >= 0;
}

/* One 1-D periodic halo exchange: receive from both neighbours, send to both, wait for all. */
static void halo(int rank, int size, char *bufs, long bytes)
{
    int left = (rank - 1 + size) % size, right = (rank + 1) % size;
    int n = (int)bytes;
    MPI_Request req[4];

    MPI_Irecv(bufs, n, MPI_BYTE, left, TAG_RIGHTWARD, MPI_COMM_WORLD, &req[0]);
    MPI_Irecv(bufs + bytes, n, MPI_BYTE, right, TAG_LEFTWARD, MPI_COMM_WORLD, &req[1]);
    MPI_Isend(bufs + 2 * bytes, n, MPI_BYTE, right, TAG_RIGHTWARD, MPI_COMM_WORLD, &req[2]);
    MPI_Isend(bufs + 3 * bytes, n, MPI_BYTE, left, TAG_LEFTWARD, MPI_COMM_WORLD, &req[3]);
    MPI_Waitall(4, req, MPI_STATUSES_IGNORE);
}

static int is_late_static(const lab_params *p, int rank)
{
    return p->ppn > 0 ? rank / p->ppn == p->late_node : rank == p->late_rank;
}

static int run(const lab_params *p, int rank, int size, char *bufs)
{
    const char *s = p->scenario;
    long k;
    int i;

    if (!strcmp(s, "balanced") || !strcmp(s, "static_imbalance") || !strcmp(s, "dynamic_imbalance")) {
        for (k = 0; k < p->steps; k++) {
            int late = !strcmp(s, "static_imbalance") ? is_late_static(p, rank)
                     : !strcmp(s, "dynamic_imbalance") ? rank == (int)(k % size) : 0;
            pk_lab_timed_sleep(p->step + (late ? p->extra : 0.0));
            halo(rank, size, bufs, p->bytes);
        }
    } else if (!strcmp(s, "oversubscribed")) {
        for (k = 0; k < p->steps; k++) {
            pk_lab_timed_busy(p->work);
            halo(rank, size, bufs, p->bytes);
        }
    } else if (!strcmp(s, "abort") || !strcmp(s, "segfault")) {
        for (k = 0; k < p->steps; k++) {
            if (rank == p->fail_rank && k == p->fail_step) {
                if (!strcmp(s, "abort"))
                    MPI_Abort(MPI_COMM_WORLD, 3);
                else
                    raise(SIGSEGV);
            }
            pk_lab_timed_sleep(p->step);
            halo(rank, size, bufs, p->bytes);
        }
    } else if (!strcmp(s, "pipeline")) {
        /* A token ring: rank 0 computes and passes on, each rank waits for its predecessor. */
        for (k = 0; k < p->steps; k++) {
            if (rank == 0) {
                pk_lab_timed_sleep(p->step);
                MPI_Send(bufs, (int)p->bytes, MPI_BYTE, 1 % size, TAG_TOKEN, MPI_COMM_WORLD);
                MPI_Recv(bufs + p->bytes, (int)p->bytes, MPI_BYTE, size - 1, TAG_TOKEN, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(bufs + p->bytes, (int)p->bytes, MPI_BYTE, rank - 1, TAG_TOKEN, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
                pk_lab_timed_sleep(p->step);
                MPI_Send(bufs, (int)p->bytes, MPI_BYTE, (rank + 1) % size, TAG_TOKEN, MPI_COMM_WORLD);
            }
        }
    } else if (!strcmp(s, "collective_imbalance")) {
        double in = rank, out = 0.0;
        for (k = 0; k < p->steps; k++) {
            pk_lab_timed_sleep(p->step + (size > 1 ? p->extra * rank / (size - 1) : 0.0));
            MPI_Allreduce(&in, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            if (rank == 0)
                pk_lab_timed_sleep(p->root_extra);
            MPI_Bcast(bufs, (int)p->bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
        }
    } else if (!strcmp(s, "any_source")) {
        /* Rank 0 gathers with MPI_ANY_SOURCE; rank r is late by extra * (size - r) / (size - 1). */
        for (k = 0; k < p->steps; k++) {
            if (rank == 0) {
                pk_lab_timed_sleep(p->step);
                for (i = 1; i < size; i++)
                    MPI_Recv(bufs, (int)p->bytes, MPI_BYTE, MPI_ANY_SOURCE, TAG_GATHER, MPI_COMM_WORLD,
                             MPI_STATUS_IGNORE);
                for (i = 1; i < size; i++)
                    MPI_Send(bufs + p->bytes, (int)p->bytes, MPI_BYTE, i, TAG_RELEASE, MPI_COMM_WORLD);
            } else {
                pk_lab_timed_sleep(p->step + p->extra * (size - rank) / (size - 1));
                MPI_Send(bufs, (int)p->bytes, MPI_BYTE, 0, TAG_GATHER, MPI_COMM_WORLD);
                MPI_Recv(bufs + p->bytes, (int)p->bytes, MPI_BYTE, 0, TAG_RELEASE, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
            }
        }
    } else {
        if (rank == 0)
            fprintf(stderr, "lab: unknown scenario '%s'\n", s);
        return 0;
    }
    return 1;
}

int main(int argc, char **argv)
{
    lab_params p;
    int rank, size, ok;
    char *bufs;

    if (!parse(argc, argv, &p))
        return 2;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    bufs = calloc(4 * (size_t)p.bytes + 1, 1);
    MPI_Barrier(MPI_COMM_WORLD); /* leave start-up skew out of the first step */
    ok = run(&p, rank, size, bufs);
    free(bufs);
    if (pk_lab_write_record(p.record, rank) != 0) {
        fprintf(stderr, "lab: cannot write %s.%d\n", p.record, rank);
        ok = 0;
    }
    MPI_Finalize();
    return ok ? 0 : 2;
}
