/* perfkit collector: the OTF2 trace (compiled only into the library built for --trace, with -DPK_TRACE).
 *
 * Times given to these functions are seconds of the rank's monotonic clock; the trace stores them as
 * nanoseconds on rank 0's clock (plus the offset measured at MPI_Init). Communicators are the trace's local
 * ids (pkt_comm_define; 0 is MPI_COMM_WORLD, 1 MPI_COMM_SELF), peers and roots ranks in that communicator.
 */
#ifndef PK_TRACE_H
#define PK_TRACE_H

#include <mpi.h>
#include <stdint.h>

enum { PKT_WORLD = 0, PKT_SELF = 1 };

/* collective over MPI_COMM_WORLD: open the archive `dir`/traces.otf2 with a buffer of `buffer_mb` MiB */
int pkt_open(const char *dir, double buffer_mb, int rank, int size, double clock_offset);
/* a local id for a communicator every member defines alike: (seq, leader) names it across ranks */
int pkt_comm_define(int seq, int leader, int size, const int *world);
uint64_t pkt_request_id(void);

void pkt_enter(int region, double t);
void pkt_leave(int region, double t);
void pkt_send(double t, int peer, int comm, int tag, double bytes, uint64_t request); /* request 0: blocking */
void pkt_isend_complete(double t, uint64_t request);
void pkt_irecv_request(double t, uint64_t request);
void pkt_recv(double t, int peer, int comm, int tag, double bytes, uint64_t request); /* request 0: blocking */
void pkt_coll_begin(double t);
void pkt_coll_end(double t, int fid, int comm, int root, double sent, double received); /* root -1: none */

/* regions beyond the profiled functions: MPI_Finalize and the program itself */
int pkt_region_finalize(void);
int pkt_region_program(void);

/* collective over MPI_COMM_WORLD: close the rank's events, write the definitions (rank 0: `hosts`, one
 * MPI_MAX_PROCESSOR_NAME slot per rank) and the clock offsets and error bounds [s] each rank applied */
void pkt_close(double t, const char *hosts, double clock_bound);

#endif
