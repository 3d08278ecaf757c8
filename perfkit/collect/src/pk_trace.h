/* perfkit collector: the OTF2 trace (compiled only into the library built for --trace, with -DPK_TRACE).
 *
 * Times given to these functions are seconds of the rank's monotonic clock; the trace stores them as
 * nanoseconds on rank 0's clock (plus the offset measured at MPI_Init). Communicators are the trace's local
 * ids (pkt_comm_define; 0 is MPI_COMM_WORLD, 1 MPI_COMM_SELF), peers and roots ranks in that communicator.
 * CPU readings are seconds of the thread's CPU clock (CLOCK_THREAD_CPUTIME_ID); with CPU measurement every
 * Enter and Leave carries one (metric cpu_time, nanoseconds since MPI_Init's start), NaN without.
 */
#ifndef PK_TRACE_H
#define PK_TRACE_H

#include <mpi.h>
#include <stdint.h>

enum { PKT_WORLD = 0, PKT_SELF = 1 };

/* collective over MPI_COMM_WORLD: open the archive `dir`/traces.otf2 with a buffer of `buffer_mb` MiB; `cpu_origin`,
 * the CPU reading at MPI_Init's start (NaN: no CPU metric) */
int pkt_open(const char *dir, double buffer_mb, int rank, int size, double clock_offset, double cpu_origin);
/* a local id for a communicator every member defines alike: (seq, leader) names it across ranks */
int pkt_comm_define(int seq, int leader, int size, const int *world);
uint64_t pkt_request_id(void);

void pkt_enter(int region, double t, double cpu); /* cpu: the CPU reading at t */
void pkt_leave(int region, double t, double cpu);
void pkt_send(double t, int peer, int comm, int tag, double bytes, uint64_t request); /* request 0: blocking */
void pkt_isend_complete(double t, uint64_t request);
void pkt_irecv_request(double t, uint64_t request);
void pkt_recv(double t, int peer, int comm, int tag, double bytes, uint64_t request); /* request 0: blocking */
void pkt_coll_begin(double t);
void pkt_coll_end(double t, int fid, int comm, int root, double sent, double received); /* root -1: none */

/* regions beyond the profiled functions: MPI_Finalize and the program itself */
int pkt_region_finalize(void);
int pkt_region_program(void);

/* collective over MPI_COMM_WORLD: leave MPI_Finalize and the program at `t` (CPU reading `cpu`), close the rank's
 * events, write the definitions (rank 0: `hosts`, one MPI_MAX_PROCESSOR_NAME slot per rank) and the clock offsets
 * and error bounds [s] each rank applied */
void pkt_close(double t, double cpu, const char *hosts, double clock_bound);

#endif
