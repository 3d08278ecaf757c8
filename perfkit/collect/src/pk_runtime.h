/* perfkit collector runtime: the hooks the generated MPI wrappers call.
 *
 * A wrapper brackets its PMPI call with pk_enter/pk_leave and calls the hooks of its role in
 * between (send, receive completion, request bookkeeping, collective wait and bytes, new
 * communicators). All times are seconds of the rank's monotonic clock; timestamps exchanged
 * between ranks are shifted by the rank's clock offset to rank 0 (see docs/collector.md).
 */
#ifndef PK_RUNTIME_H
#define PK_RUNTIME_H

#include <mpi.h>

typedef struct pk_call {
    int fid;          /* function id, -1 when the call is not profiled (nested, other thread) */
    double t0;        /* start of the measured part [s] */
    double c0;        /* the thread's CPU clock at the call's start [s] (with CPU measurement) */
    double tb;        /* collective wait: time waiting for the last rank to arrive [s] */
    double slt;       /* send-late time found while completing receives [s] */
    int slt_measured; /* a receive completed with a piggybacked send time */
    int nsrc;         /* receives completed by this call (matrix time is shared among them) */
    int cw_pending;            /* collective wait: the call's arrival is to be recorded at its end */
    MPI_Comm cw_comm;          /* its communicator */
    MPI_Request cw_req;        /* or the max-reduction of arrival times, running with the call */
    double cw_arrival, cw_last; /* this rank's arrival and the last one, on rank 0's clock [s] */
    /* --trace only */
    double t_enter;             /* the call's start, before any collective wait [s] */
    int coll_comm;              /* the collective's communicator in the trace, -1 if none */
    int coll_root;              /* its root (rank in the communicator), -1 if none */
    double coll_sent, coll_recv; /* its bytes [B] */
    unsigned long long rid;     /* the trace's id of the request a non-blocking send is making */
} pk_call;

int pk_enter(pk_call *c, int fid);
void pk_leave(pk_call *c);

/* point to point */
void pk_send(pk_call *c, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm);
void pk_recv_done(pk_call *c, int fid_post, MPI_Comm comm, MPI_Status *status);
void pk_sendrecv_done(pk_call *c, MPI_Comm comm, MPI_Status *status);
void pk_req_recv(pk_call *c, MPI_Request req, MPI_Comm comm, int persistent);
void pk_req_isend(pk_call *c, MPI_Request req);
void pk_req_psend(pk_call *c, MPI_Request req, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm);
void pk_start(pk_call *c, int n, const MPI_Request reqs[]);
void pk_request_free(pk_call *c, MPI_Request req);
MPI_Request *pk_snapshot(pk_call *c, int n, const MPI_Request reqs[]);
void pk_completed(pk_call *c, const MPI_Request *snap, int n, const int *done, MPI_Status *statuses);
MPI_Status *pk_statuses(int n);
int *pk_ints(int n);

/* collectives */
void pk_coll_wait(pk_call *c, MPI_Comm comm, int synchronising);
double pk_bytes(const void *sendbuf, int count, MPI_Datatype type, int alt_count, MPI_Datatype alt_type);
double pk_tsize(MPI_Datatype type);
void pk_coll_rooted(pk_call *c, double bytes_each, int root, MPI_Comm comm, int root_sends);
void pk_coll_rooted_v(pk_call *c, const int counts[], MPI_Datatype type, double own_bytes, int root, MPI_Comm comm,
                      int root_sends);
void pk_coll_all(pk_call *c, double sent_each, double recv_each, MPI_Comm comm, int to_all);
void pk_coll_all_v(pk_call *c, const int scounts[], MPI_Datatype stype, double sent_each, const int rcounts[],
                   MPI_Datatype rtype, MPI_Comm comm);
void pk_coll_all_w(pk_call *c, const int scounts[], const MPI_Datatype stypes[], const int rcounts[],
                   const MPI_Datatype rtypes[], MPI_Comm comm);

/* communicators */
void pk_comm_new(pk_call *c, MPI_Comm comm);
void pk_comm_free(pk_call *c, MPI_Comm comm);

/* life cycle */
void pk_init_begin(double *t_start);
void pk_init_end(double t_start, int fid);
void pk_finalize(void);

/* Fortran support */
const void *pk_f_buf(const void *buf);

#endif
