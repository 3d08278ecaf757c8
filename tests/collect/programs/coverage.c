/* Exercises the collector's wrappers with known counts and bytes (4 ranks; see test_collector.py).
 * Rank pairs (0,1) and (2,3) exchange; rank 0's partner sends LATE_S seconds late on a split
 * communicator, received with MPI_ANY_SOURCE. */
#include <mpi.h>
#include <stdlib.h>
#include <time.h>

#define N 256
#define LATE_S 0.05

static void nap(double s) {
    struct timespec t = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
    nanosleep(&t, NULL);
}

int main(int argc, char **argv) {
    int provided, rank, size, flag = 0, index, outcount, indices[2];
    double a[N] = {0}, b[4 * N] = {0};
    MPI_Request req[2];
    MPI_Status st[2];
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 4) MPI_Abort(MPI_COMM_WORLD, 2);
    int peer = rank ^ 1;

    /* persistent: 3 rounds of Startall + Waitall (N doubles each way) */
    MPI_Send_init(a, N, MPI_DOUBLE, peer, 1, MPI_COMM_WORLD, &req[0]);
    MPI_Recv_init(b, N, MPI_DOUBLE, peer, 1, MPI_COMM_WORLD, &req[1]);
    for (int k = 0; k < 3; k++) {
        MPI_Startall(2, req);
        MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
    }
    MPI_Request_free(&req[0]);
    MPI_Request_free(&req[1]);

    /* Waitany twice, Waitsome, Test loop, Testsome loop: 1 double each */
    MPI_Irecv(b, 1, MPI_DOUBLE, peer, 2, MPI_COMM_WORLD, &req[0]);
    MPI_Isend(a, 1, MPI_DOUBLE, peer, 2, MPI_COMM_WORLD, &req[1]);
    MPI_Waitany(2, req, &index, &st[0]);
    MPI_Waitany(2, req, &index, &st[0]);
    MPI_Irecv(b, 2, MPI_DOUBLE, peer, 3, MPI_COMM_WORLD, &req[0]);
    MPI_Issend(a, 2, MPI_DOUBLE, peer, 3, MPI_COMM_WORLD, &req[1]);
    int left = 2;
    while (left > 0) {
        MPI_Waitsome(2, req, &outcount, indices, st);
        left -= outcount;
    }
    MPI_Irecv(b, 3, MPI_DOUBLE, peer, 4, MPI_COMM_WORLD, &req[0]);
    MPI_Send(a, 3, MPI_DOUBLE, peer, 4, MPI_COMM_WORLD);
    while (!flag) MPI_Test(&req[0], &flag, MPI_STATUS_IGNORE);

    /* Sendrecv_replace of 4 doubles, Ssend/Probe/Recv of 5 */
    MPI_Sendrecv_replace(b, 4, MPI_DOUBLE, peer, 5, peer, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (rank % 2 == 0) {
        MPI_Ssend(a, 5, MPI_DOUBLE, peer, 6, MPI_COMM_WORLD);
    } else {
        MPI_Probe(peer, 6, MPI_COMM_WORLD, &st[0]);
        MPI_Recv(b, 5, MPI_DOUBLE, peer, 6, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }

    /* collectives on the world: Bcast 8 doubles from 0, Gather 1 int to 3, Alltoall 2 ints */
    int ints[8] = {0}, got[8];
    MPI_Bcast(a, 8, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Gather(ints, 1, MPI_INT, got, 1, MPI_INT, 3, MPI_COMM_WORLD);
    MPI_Alltoall(ints, 2, MPI_INT, got, 2, MPI_INT, MPI_COMM_WORLD);

    /* a late sender on a split communicator {0,1} / {2,3}, received with MPI_ANY_SOURCE */
    MPI_Comm pair;
    MPI_Comm_split(MPI_COMM_WORLD, rank / 2, rank, &pair);
    int prank;
    MPI_Comm_rank(pair, &prank);
    if (prank == 1) {
        if (rank == 1) nap(LATE_S);
        MPI_Send(a, 16, MPI_DOUBLE, 0, 7, pair);
    } else {
        MPI_Recv(b, 16, MPI_DOUBLE, MPI_ANY_SOURCE, MPI_ANY_TAG, pair, MPI_STATUS_IGNORE);
    }
    MPI_Comm_free(&pair);
    MPI_Finalize();
    return 0;
}
