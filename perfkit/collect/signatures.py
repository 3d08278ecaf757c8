"""The MPI functions the collector wraps: one table, from which the C and Fortran wrappers are generated.

Each entry gives the C parameter list (MPI-3.1 spelling) and the calls to the runtime's hooks
(``src/pk_runtime.h``) before and after the ``PMPI_`` call, in terms of the C parameter names;
``{fid}`` is replaced by the function's id. ``collective`` functions get the barrier of
``--collective-wait`` (column ``b_<name>``). ``handles_in`` marks functions whose request or
communicator pointers are inputs (converted from Fortran before the call, not after).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Signature:
    """One wrapped MPI function."""

    name: str  # without the MPI_ prefix
    params: str
    pre: str = ""
    post: str = ""
    collective: bool = False
    handles_in: bool = False

    @property
    def mpi_name(self) -> str:
        return "MPI_" + self.name


_P2P = "int count, MPI_Datatype datatype, int {peer}, int tag, MPI_Comm comm"
SEND = "const void *buf, " + _P2P.format(peer="dest")
RECV = "void *buf, " + _P2P.format(peer="source")
SEND_HOOK = "pk_send(&pk, count, datatype, dest, tag, comm);"
COLL_WAIT = "pk_coll_wait(&pk, comm, 0); "  # rooted and prefix collectives (see pk_coll_wait)
COLL_WAIT_ALL = "pk_coll_wait(&pk, comm, 1); "  # collectives where every member waits for every other
GATHER = ("const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount, "
          "MPI_Datatype recvtype, {tail}")
REDUCE = "const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, {tail}"
TYPED = "count * pk_tsize(datatype)"
NO_INFO = "MPI_Info info, "


def _sends() -> list[Signature]:
    modes = ("", "b", "s", "r")  # standard, buffered, synchronous, ready
    out = [Signature(f"{m.upper()}send" if m else "Send", SEND, pre=SEND_HOOK) for m in modes]
    out += [Signature(f"I{m}send", SEND + ", MPI_Request *request", pre=SEND_HOOK,
                      post="pk_req_isend(&pk, *request);") for m in modes]
    out += [Signature(f"{m.upper()}send_init" if m else "Send_init", SEND + ", MPI_Request *request",
                      post="pk_req_psend(&pk, *request, count, datatype, dest, tag, comm);") for m in modes]
    return out


def _completions() -> list[Signature]:
    snap1 = "MPI_Request *pk_snap = pk_snapshot(&pk, 1, request);"
    snapn = "MPI_Request *pk_snap = pk_snapshot(&pk, {n}, array_of_requests);"
    return [
        Signature("Wait", "MPI_Request *request, MPI_Status *status", pre=snap1,
                  post="pk_completed(&pk, pk_snap, 1, NULL, status);", handles_in=True),
        Signature("Waitall", "int count, MPI_Request array_of_requests[], MPI_Status array_of_statuses[]",
                  pre=snapn.format(n="count"), post="pk_completed(&pk, pk_snap, count, NULL, array_of_statuses);",
                  handles_in=True),
        Signature("Waitany", "int count, MPI_Request array_of_requests[], int *index, MPI_Status *status",
                  pre=snapn.format(n="count"),
                  post="if (*index != MPI_UNDEFINED) pk_completed(&pk, pk_snap, 1, index, status);", handles_in=True),
        Signature("Waitsome", "int incount, MPI_Request array_of_requests[], int *outcount, int array_of_indices[], "
                  "MPI_Status array_of_statuses[]", pre=snapn.format(n="incount"),
                  post="if (*outcount != MPI_UNDEFINED) "
                       "pk_completed(&pk, pk_snap, *outcount, array_of_indices, array_of_statuses);", handles_in=True),
        Signature("Test", "MPI_Request *request, int *flag, MPI_Status *status", pre=snap1,
                  post="if (*flag) pk_completed(&pk, pk_snap, 1, NULL, status);", handles_in=True),
        Signature("Testall", "int count, MPI_Request array_of_requests[], int *flag, MPI_Status array_of_statuses[]",
                  pre=snapn.format(n="count"),
                  post="if (*flag) pk_completed(&pk, pk_snap, count, NULL, array_of_statuses);", handles_in=True),
        Signature("Testany", "int count, MPI_Request array_of_requests[], int *index, int *flag, MPI_Status *status",
                  pre=snapn.format(n="count"),
                  post="if (*flag && *index != MPI_UNDEFINED) pk_completed(&pk, pk_snap, 1, index, status);",
                  handles_in=True),
        Signature("Testsome", "int incount, MPI_Request array_of_requests[], int *outcount, int array_of_indices[], "
                  "MPI_Status array_of_statuses[]", pre=snapn.format(n="incount"),
                  post="if (*outcount != MPI_UNDEFINED) "
                       "pk_completed(&pk, pk_snap, *outcount, array_of_indices, array_of_statuses);", handles_in=True),
        Signature("Start", "MPI_Request *request", pre="pk_start(&pk, 1, request);", handles_in=True),
        Signature("Startall", "int count, MPI_Request array_of_requests[]",
                  pre="pk_start(&pk, count, array_of_requests);", handles_in=True),
        Signature("Request_free", "MPI_Request *request", pre="pk_request_free(&pk, *request);", handles_in=True),
        Signature("Cancel", "MPI_Request *request", handles_in=True),
    ]


def _collectives() -> list[Signature]:
    gather_bytes = "pk_bytes(sendbuf, sendcount, sendtype, recvcount, recvtype)"
    return [
        Signature("Barrier", "MPI_Comm comm", pre=COLL_WAIT_ALL, collective=True),
        Signature("Bcast", "void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm",
                  pre=COLL_WAIT + f"pk_coll_rooted(&pk, {TYPED}, root, comm, 1);", collective=True),
        Signature("Reduce", REDUCE.format(tail="int root, MPI_Comm comm"),
                  pre=COLL_WAIT + f"pk_coll_rooted(&pk, {TYPED}, root, comm, 0);", collective=True),
        Signature("Allreduce", REDUCE.format(tail="MPI_Comm comm"),
                  pre=COLL_WAIT_ALL + f"pk_coll_all(&pk, {TYPED}, {TYPED}, comm, 0);", collective=True),
        Signature("Scan", REDUCE.format(tail="MPI_Comm comm"),
                  pre=COLL_WAIT + f"pk_coll_all(&pk, {TYPED}, {TYPED}, comm, 0);", collective=True),
        Signature("Exscan", REDUCE.format(tail="MPI_Comm comm"),
                  pre=COLL_WAIT + f"pk_coll_all(&pk, {TYPED}, {TYPED}, comm, 0);", collective=True),
        Signature("Reduce_scatter_block",
                  "const void *sendbuf, void *recvbuf, int recvcount, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm",
                  pre=COLL_WAIT_ALL + "pk_coll_all(&pk, recvcount * pk_tsize(datatype), "
                                      "recvcount * pk_tsize(datatype), comm, 1);", collective=True),
        Signature("Reduce_scatter", "const void *sendbuf, void *recvbuf, const int recvcounts[], "
                  "MPI_Datatype datatype, MPI_Op op, MPI_Comm comm", pre=COLL_WAIT_ALL, collective=True),
        Signature("Gather", GATHER.format(tail="int root, MPI_Comm comm"),
                  pre=COLL_WAIT + f"pk_coll_rooted(&pk, {gather_bytes}, root, comm, 0);", collective=True),
        Signature("Scatter", GATHER.format(tail="int root, MPI_Comm comm"),
                  pre=COLL_WAIT + "pk_coll_rooted(&pk, pk_bytes(recvbuf, recvcount, recvtype, sendcount, sendtype), "
                                  "root, comm, 1);", collective=True),
        Signature("Allgather", GATHER.format(tail="MPI_Comm comm"),
                  pre=COLL_WAIT_ALL + f"pk_coll_all(&pk, {gather_bytes}, recvcount * pk_tsize(recvtype), comm, 1);",
                  collective=True),
        Signature("Alltoall", GATHER.format(tail="MPI_Comm comm"),
                  pre=COLL_WAIT_ALL + f"pk_coll_all(&pk, {gather_bytes}, recvcount * pk_tsize(recvtype), comm, 1);",
                  collective=True),
        Signature("Gatherv", "const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, "
                  "const int recvcounts[], const int displs[], MPI_Datatype recvtype, int root, MPI_Comm comm",
                  pre=COLL_WAIT + "pk_coll_rooted_v(&pk, recvcounts, recvtype, "
                                  "pk_bytes(sendbuf, sendcount, sendtype, 0, MPI_DATATYPE_NULL), root, comm, 0);",
                  collective=True),
        Signature("Scatterv", "const void *sendbuf, const int sendcounts[], const int displs[], MPI_Datatype sendtype, "
                  "void *recvbuf, int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm",
                  pre=COLL_WAIT + "pk_coll_rooted_v(&pk, sendcounts, sendtype, "
                                  "pk_bytes(recvbuf, recvcount, recvtype, 0, MPI_DATATYPE_NULL), root, comm, 1);",
                  collective=True),
        Signature("Allgatherv", "const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, "
                  "const int recvcounts[], const int displs[], MPI_Datatype recvtype, MPI_Comm comm",
                  pre=COLL_WAIT_ALL + "pk_coll_all_v(&pk, NULL, MPI_DATATYPE_NULL, "
                                  "pk_bytes(sendbuf, sendcount, sendtype, 0, MPI_DATATYPE_NULL), recvcounts, recvtype, "
                                  "comm);", collective=True),
        Signature("Alltoallv", "const void *sendbuf, const int sendcounts[], const int sdispls[], "
                  "MPI_Datatype sendtype, void *recvbuf, const int recvcounts[], const int rdispls[], "
                  "MPI_Datatype recvtype, MPI_Comm comm",
                  pre=COLL_WAIT_ALL + "pk_coll_all_v(&pk, sendbuf == MPI_IN_PLACE ? recvcounts : sendcounts, "
                                  "sendbuf == MPI_IN_PLACE ? recvtype : sendtype, 0, recvcounts, recvtype, comm);",
                  collective=True),
        Signature("Alltoallw", "const void *sendbuf, const int sendcounts[], const int sdispls[], "
                  "const MPI_Datatype sendtypes[], void *recvbuf, const int recvcounts[], const int rdispls[], "
                  "const MPI_Datatype recvtypes[], MPI_Comm comm",
                  pre=COLL_WAIT_ALL + "pk_coll_all_w(&pk, sendbuf == MPI_IN_PLACE ? recvcounts : sendcounts, "
                                  "sendbuf == MPI_IN_PLACE ? recvtypes : sendtypes, recvcounts, recvtypes, comm);",
                  collective=True),
    ]


def _communicators() -> list[Signature]:
    def new(name: str, params: str) -> Signature:
        out = params.rsplit("*", 1)[1]
        return Signature(name, params, post=f"pk_comm_new(&pk, *{out});")

    return [
        new("Comm_dup", "MPI_Comm comm, MPI_Comm *newcomm"),
        new("Comm_dup_with_info", "MPI_Comm comm, MPI_Info info, MPI_Comm *newcomm"),
        new("Comm_split", "MPI_Comm comm, int color, int key, MPI_Comm *newcomm"),
        new("Comm_split_type", "MPI_Comm comm, int split_type, int key, MPI_Info info, MPI_Comm *newcomm"),
        new("Comm_create", "MPI_Comm comm, MPI_Group group, MPI_Comm *newcomm"),
        new("Comm_create_group", "MPI_Comm comm, MPI_Group group, int tag, MPI_Comm *newcomm"),
        new("Cart_create", "MPI_Comm comm_old, int ndims, const int dims[], const int periods[], int reorder, "
                           "MPI_Comm *comm_cart"),
        new("Cart_sub", "MPI_Comm comm, const int remain_dims[], MPI_Comm *newcomm"),
        new("Graph_create", "MPI_Comm comm_old, int nnodes, const int index[], const int edges[], int reorder, "
                            "MPI_Comm *comm_graph"),
        new("Dist_graph_create_adjacent", "MPI_Comm comm_old, int indegree, const int sources[], "
                                          "const int sourceweights[], int outdegree, const int destinations[], "
                                          "const int destweights[], MPI_Info info, int reorder, "
                                          "MPI_Comm *comm_dist_graph"),
        new("Intercomm_create", "MPI_Comm local_comm, int local_leader, MPI_Comm peer_comm, int remote_leader, "
                                "int tag, MPI_Comm *newintercomm"),
        new("Intercomm_merge", "MPI_Comm intercomm, int high, MPI_Comm *newintracomm"),
        Signature("Comm_free", "MPI_Comm *comm", pre="pk_comm_free(&pk, *comm);", handles_in=True),
    ]


#: Functions with hand-written wrappers (life cycle); their ids come first, MPI_Init is 0.
LIFECYCLE = ("Init", "Init_thread")

SIGNATURES: tuple[Signature, ...] = (
    *_sends(),
    Signature("Recv", RECV + ", MPI_Status *status", post="pk_recv_done(&pk, {fid}, comm, status);"),
    Signature("Irecv", RECV + ", MPI_Request *request", post="pk_req_recv(&pk, *request, comm, 0);"),
    Signature("Recv_init", RECV + ", MPI_Request *request", post="pk_req_recv(&pk, *request, comm, 1);"),
    Signature("Sendrecv", "const void *sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag, "
              "void *recvbuf, int recvcount, MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm, "
              "MPI_Status *status", pre="pk_send(&pk, sendcount, sendtype, dest, sendtag, comm);",
              post="pk_sendrecv_done(&pk, comm, status);"),
    Signature("Sendrecv_replace", "void *buf, int count, MPI_Datatype datatype, int dest, int sendtag, int source, "
              "int recvtag, MPI_Comm comm, MPI_Status *status",
              pre="pk_send(&pk, count, datatype, dest, sendtag, comm);", post="pk_sendrecv_done(&pk, comm, status);"),
    Signature("Probe", "int source, int tag, MPI_Comm comm, MPI_Status *status"),
    Signature("Iprobe", "int source, int tag, MPI_Comm comm, int *flag, MPI_Status *status"),
    *_completions(),
    *_collectives(),
    Signature("Ibarrier", "MPI_Comm comm, MPI_Request *request"),
    Signature("Ibcast", "void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm, "
              "MPI_Request *request"),
    Signature("Iallreduce", REDUCE.format(tail="MPI_Comm comm, MPI_Request *request")),
    Signature("Ireduce", REDUCE.format(tail="int root, MPI_Comm comm, MPI_Request *request")),
    *_communicators(),
    Signature("Comm_rank", "MPI_Comm comm, int *rank"),
    Signature("Comm_size", "MPI_Comm comm, int *size"),
)


def function_names() -> list[str]:
    """All profiled function labels in id order (``MPI_Init`` first)."""
    return ["MPI_" + n for n in LIFECYCLE] + [s.mpi_name for s in SIGNATURES]
