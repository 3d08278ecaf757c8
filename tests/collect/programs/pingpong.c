/* Ping-pong with known message sizes and counts: for each size in SIZES, rank 0 sends REPS messages to
 * rank 1 with MPI_Send and receives each back with MPI_Recv; rank 1 answers with MPI_Isend/MPI_Irecv and
 * MPI_Wait. Ranks beyond 1 only take part in the closing MPI_Allreduce. */
#include <mpi.h>
#include <stdlib.h>

static const int SIZES[] = {0, 8, 1000, 65536};
enum { NSIZES = 4 };

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, reps = argc > 1 ? atoi(argv[1]) : 10;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char *buf = calloc(65536, 1);
    for (int s = 0; s < NSIZES; s++)
        for (int k = 0; k < reps; k++) {
            if (rank == 0) {
                MPI_Send(buf, SIZES[s], MPI_BYTE, 1, s, MPI_COMM_WORLD);
                MPI_Recv(buf, SIZES[s], MPI_BYTE, 1, s, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else if (rank == 1) {
                MPI_Request req;
                MPI_Irecv(buf, SIZES[s], MPI_BYTE, 0, s, MPI_COMM_WORLD, &req);
                MPI_Wait(&req, MPI_STATUS_IGNORE);
                MPI_Isend(buf, SIZES[s], MPI_BYTE, 0, s, MPI_COMM_WORLD, &req);
                MPI_Wait(&req, MPI_STATUS_IGNORE);
            }
        }
    double x = rank, sum;
    MPI_Allreduce(&x, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    free(buf);
    MPI_Finalize();
    return 0;
}
