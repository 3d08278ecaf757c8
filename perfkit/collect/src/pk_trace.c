/* perfkit collector: the OTF2 trace of every profiled call, written with the OTF2 library.
 *
 * Each rank writes its own event file (traces/<rank>.evt) through OTF2's buffer, whose chunks come from a
 * budget of PERFKIT_COLLECT_TRACE_BUFFER_MB MiB per rank: when the budget is spent OTF2 flushes the buffer
 * to disk (a BufferFlush event marks it) and reuses it. An event OTF2 could not take is counted and named
 * in the trace (location property perfkit::events_dropped), never lost silently. At MPI_Finalize each
 * communicator's leader gives it a global id (a prefix sum over ranks) and sends the id to its members and its
 * members to rank 0, which writes the global definitions: regions, ranks with their hosts, communicators, the
 * clock. With CPU measurement, a Metric event (cpu_time, the thread's CPU clock in ns since MPI_Init's start) just
 * before every Enter and Leave, at its timestamp, as Score-P records its strictly synchronous metrics.
 */
#define _GNU_SOURCE
#define OTF2_MPI_USE_PMPI
#include "pk_trace.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <otf2/otf2.h>
#include <otf2/OTF2_MPI_Collectives.h>

/* provided by the generated wrappers */
extern const int pk_nfunc;
extern const char *const pk_fnames[];
extern const int pk_fcollective[];

static OTF2_Archive *archive;
static OTF2_EvtWriter *writer;
static int t_rank, t_size;
static double t_offset;               /* add to the local clock to get rank 0's [s] */
static uint64_t t_first = UINT64_MAX, t_last;
static uint64_t next_request = 1;
static uint64_t dropped, flushes;
static double cpu_origin = NAN;       /* the CPU reading at MPI_Init's start [s]; NaN: no CPU metric */
enum { CPU_METRIC = 0 };              /* the metric class (and its one member) cpu_time */
static size_t budget, in_use;         /* chunk memory per rank [B] */

/* communicators: local id -> (seq, leader) name and world ranks of the members */
typedef struct {
    int seq, leader, size;
    int *world;
} pkt_comm;
static pkt_comm *comms_def;
static int ncomms, comms_cap;

static inline uint64_t ticks(double t) {
    double ns = (t + t_offset) * 1e9;
    uint64_t v = ns > 0 ? (uint64_t)llround(ns) : 0;
    if (v < t_first) t_first = v;
    if (v > t_last) t_last = v;
    return v;
}

static inline void check(OTF2_ErrorCode rc) {
    if (rc != OTF2_SUCCESS) dropped++;
}

/* ---------- memory: chunks from a fixed budget; exhausted, OTF2 flushes and frees them ---------- */

typedef struct {
    void **chunks;
    size_t n, cap, size;
} pkt_pool;

static void *chunk_alloc(void *user, OTF2_FileType type, OTF2_LocationRef loc, void **per_buffer, uint64_t size) {
    (void)user, (void)loc;
    /* definitions are few and must not be refused: only event chunks count against the budget */
    if (type == OTF2_FILETYPE_EVENTS && in_use + size > budget) return NULL;
    pkt_pool *pool = *per_buffer;
    if (!pool) *per_buffer = pool = calloc(1, sizeof *pool);
    if (!pool) return NULL;
    if (pool->n == pool->cap) {
        size_t cap = pool->cap ? 2 * pool->cap : 16;
        void **grown = realloc(pool->chunks, cap * sizeof(void *));
        if (!grown) return NULL;
        pool->chunks = grown;
        pool->cap = cap;
    }
    void *chunk = malloc(size);
    if (!chunk) return NULL;
    pool->chunks[pool->n++] = chunk;
    if (type == OTF2_FILETYPE_EVENTS) {
        in_use += size;
        pool->size += size;
    }
    return chunk;
}

static void chunk_free_all(void *user, OTF2_FileType type, OTF2_LocationRef loc, void **per_buffer, bool final) {
    (void)user, (void)type, (void)loc;
    pkt_pool *pool = *per_buffer;
    if (!pool) return;
    for (size_t i = 0; i < pool->n; i++) free(pool->chunks[i]);
    in_use -= pool->size;
    pool->n = pool->size = 0;
    if (final) {
        free(pool->chunks);
        free(pool);
        *per_buffer = NULL;
    }
}

static OTF2_FlushType pre_flush(void *user, OTF2_FileType type, OTF2_LocationRef loc, void *caller, bool final) {
    (void)user, (void)loc, (void)caller;
    if (type == OTF2_FILETYPE_EVENTS && !final) flushes++;
    return OTF2_FLUSH;
}

static OTF2_TimeStamp post_flush(void *user, OTF2_FileType type, OTF2_LocationRef loc) {
    (void)user, (void)type, (void)loc;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ticks((double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec);
}

static OTF2_FlushCallbacks flush_callbacks = {pre_flush, post_flush};
static OTF2_MemoryCallbacks memory_callbacks = {chunk_alloc, chunk_free_all};

/* ---------- opening ---------- */

int pkt_open(const char *dir, double buffer_mb, int rank, int size, double clock_offset, double cpu_at_start) {
    t_rank = rank;
    t_size = size;
    t_offset = clock_offset;
    cpu_origin = cpu_at_start;
    budget = (size_t)(buffer_mb * 1024 * 1024);
    /* chunks of 1 MiB, smaller for a small budget (at least two chunks, at least OTF2's minimum) */
    uint64_t chunk = OTF2_CHUNK_SIZE_EVENTS_DEFAULT;
    while (chunk > OTF2_CHUNK_SIZE_MIN && 2 * chunk > budget) chunk /= 2;
    if (budget < 2 * chunk) budget = 2 * chunk;
    archive = OTF2_Archive_Open(dir, "traces", OTF2_FILEMODE_WRITE, chunk, OTF2_CHUNK_SIZE_DEFINITIONS_DEFAULT,
                                OTF2_SUBSTRATE_POSIX, OTF2_COMPRESSION_NONE);
    if (!archive) {
        fprintf(stderr, "perfkit collect: rank %d cannot open the trace archive %s\n", rank, dir);
        return -1;
    }
    OTF2_Archive_SetFlushCallbacks(archive, &flush_callbacks, NULL);
    OTF2_Archive_SetMemoryCallbacks(archive, &memory_callbacks, NULL);
    OTF2_Archive_SetCreator(archive, "perfkit collect");
    OTF2_MPI_Archive_SetCollectiveCallbacks(archive, MPI_COMM_WORLD, MPI_COMM_NULL);
    OTF2_Archive_OpenEvtFiles(archive);
    writer = OTF2_Archive_GetEvtWriter(archive, (OTF2_LocationRef)rank);
    pkt_comm_define(0, 0, size, NULL);   /* PKT_WORLD */
    pkt_comm_define(0, -1, 1, NULL);     /* PKT_SELF */
    return writer ? 0 : -1;
}

int pkt_comm_define(int seq, int leader, int size, const int *world) {
    if (ncomms == comms_cap) {
        comms_cap = comms_cap ? 2 * comms_cap : 16;
        comms_def = realloc(comms_def, (size_t)comms_cap * sizeof *comms_def);
    }
    pkt_comm *c = &comms_def[ncomms];
    c->seq = seq, c->leader = leader, c->size = size, c->world = NULL;
    if (world) {
        c->world = malloc((size_t)size * sizeof(int));
        memcpy(c->world, world, (size_t)size * sizeof(int));
    }
    return ncomms++;
}

uint64_t pkt_request_id(void) { return next_request++; }

int pkt_region_finalize(void) { return pk_nfunc; }
int pkt_region_program(void) { return pk_nfunc + 1; }

/* ---------- events ---------- */

/* the metric cpu_time at `time` (ticks): CPU reading `cpu` [s] as ns since MPI_Init's start */
static void cpu_metric(uint64_t time, double cpu) {
    if (isnan(cpu_origin)) return;
    double ns = (cpu - cpu_origin) * 1e9;
    OTF2_Type type = OTF2_TYPE_UINT64;
    OTF2_MetricValue value = {.unsigned_int = ns > 0 ? (uint64_t)llround(ns) : 0};
    check(OTF2_EvtWriter_Metric(writer, NULL, time, CPU_METRIC, 1, &type, &value));
}

void pkt_enter(int region, double t, double cpu) {
    if (!writer) return;
    uint64_t time = ticks(t);
    cpu_metric(time, cpu);
    check(OTF2_EvtWriter_Enter(writer, NULL, time, (OTF2_RegionRef)region));
}

void pkt_leave(int region, double t, double cpu) {
    if (!writer) return;
    uint64_t time = ticks(t);
    cpu_metric(time, cpu);
    check(OTF2_EvtWriter_Leave(writer, NULL, time, (OTF2_RegionRef)region));
}

void pkt_send(double t, int peer, int comm, int tag, double bytes, uint64_t request) {
    if (!writer) return;
    if (request)
        check(OTF2_EvtWriter_MpiIsend(writer, NULL, ticks(t), (uint32_t)peer, (OTF2_CommRef)comm, (uint32_t)tag,
                                      (uint64_t)bytes, request));
    else
        check(OTF2_EvtWriter_MpiSend(writer, NULL, ticks(t), (uint32_t)peer, (OTF2_CommRef)comm, (uint32_t)tag,
                                     (uint64_t)bytes));
}

void pkt_isend_complete(double t, uint64_t request) {
    if (writer) check(OTF2_EvtWriter_MpiIsendComplete(writer, NULL, ticks(t), request));
}

void pkt_irecv_request(double t, uint64_t request) {
    if (writer) check(OTF2_EvtWriter_MpiIrecvRequest(writer, NULL, ticks(t), request));
}

void pkt_recv(double t, int peer, int comm, int tag, double bytes, uint64_t request) {
    if (!writer) return;
    if (request)
        check(OTF2_EvtWriter_MpiIrecv(writer, NULL, ticks(t), (uint32_t)peer, (OTF2_CommRef)comm, (uint32_t)tag,
                                      (uint64_t)bytes, request));
    else
        check(OTF2_EvtWriter_MpiRecv(writer, NULL, ticks(t), (uint32_t)peer, (OTF2_CommRef)comm, (uint32_t)tag,
                                     (uint64_t)bytes));
}

void pkt_coll_begin(double t) {
    if (writer) check(OTF2_EvtWriter_MpiCollectiveBegin(writer, NULL, ticks(t)));
}

/* the OTF2 operation of a collective, by its function name */
static OTF2_CollectiveOp coll_op(int fid) {
    static const struct { const char *name; OTF2_CollectiveOp op; } ops[] = {
        {"MPI_Barrier", OTF2_COLLECTIVE_OP_BARRIER}, {"MPI_Bcast", OTF2_COLLECTIVE_OP_BCAST},
        {"MPI_Gather", OTF2_COLLECTIVE_OP_GATHER}, {"MPI_Gatherv", OTF2_COLLECTIVE_OP_GATHERV},
        {"MPI_Scatter", OTF2_COLLECTIVE_OP_SCATTER}, {"MPI_Scatterv", OTF2_COLLECTIVE_OP_SCATTERV},
        {"MPI_Allgather", OTF2_COLLECTIVE_OP_ALLGATHER}, {"MPI_Allgatherv", OTF2_COLLECTIVE_OP_ALLGATHERV},
        {"MPI_Alltoall", OTF2_COLLECTIVE_OP_ALLTOALL}, {"MPI_Alltoallv", OTF2_COLLECTIVE_OP_ALLTOALLV},
        {"MPI_Allreduce", OTF2_COLLECTIVE_OP_ALLREDUCE}, {"MPI_Reduce", OTF2_COLLECTIVE_OP_REDUCE},
        {"MPI_Reduce_scatter", OTF2_COLLECTIVE_OP_REDUCE_SCATTER}, {"MPI_Scan", OTF2_COLLECTIVE_OP_SCAN},
        {"MPI_Exscan", OTF2_COLLECTIVE_OP_EXSCAN},
        {"MPI_Reduce_scatter_block", OTF2_COLLECTIVE_OP_REDUCE_SCATTER_BLOCK},
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (strcmp(pk_fnames[fid], ops[i].name) == 0) return ops[i].op;
    return OTF2_COLLECTIVE_OP_BARRIER;
}

void pkt_coll_end(double t, int fid, int comm, int root, double sent, double received) {
    static OTF2_CollectiveOp *op_of;
    if (!writer) return;
    if (!op_of) {
        op_of = calloc((size_t)pk_nfunc, sizeof *op_of);
        for (int f = 0; f < pk_nfunc; f++) op_of[f] = pk_fcollective[f] ? coll_op(f) : OTF2_COLLECTIVE_OP_BARRIER;
    }
    check(OTF2_EvtWriter_MpiCollectiveEnd(writer, NULL, ticks(t), op_of[fid], (OTF2_CommRef)comm,
                                          root < 0 ? OTF2_UNDEFINED_UINT32 : (uint32_t)root, (uint64_t)sent,
                                          (uint64_t)received));
}

/* ---------- closing: global communicator ids, local mapping tables, global definitions ---------- */

/* Each communicator beyond WORLD and SELF is defined for the trace by its leader (the world rank of its rank
 * 0, which every member knows): global ids run in the order of leaders' world ranks, then of the leader's
 * definitions, which is the order of (leader, seq) since a leader's seq grows with each communicator it makes.
 * The leader sends each other member its communicator's id, and rank 0 receives each communicator's members
 * once, from its leader, one communicator at a time: rank 0 holds its own communicators and one other at a
 * time, never every rank's (a communicator of n members is sent once, not by each of its n members); a leader
 * sends when rank 0 asks, at most GO_WINDOW leaders ahead of the one it reads, so that rank 0's MPI does not
 * buffer every leader's messages unexpected (with a communicator per rank, N of them at once). Every
 * member expects its id from the leader: members define a communicator alike, since each took part in the
 * reduction that named it (trace_comm). */
enum { TAG_ID = 1, TAG_SIZE = 2, TAG_MEMBERS = 3, TAG_GO = 4 };
#define MEMBERS_CHUNK (1 << 24) /* ints per message of members: each message's count far below INT_MAX */
#define GO_WINDOW 64            /* leaders told to send their members to rank 0 ahead of the one it reads */

static int owned(int i) { return i >= 2 && comms_def[i].leader == t_rank; }

typedef struct {
    int leader, seq, local;
} pkt_key;

static int by_key(const void *a, const void *b) {
    const pkt_key *x = a, *y = b;
    if (x->leader != y->leader) return x->leader < y->leader ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* the global id of each of this rank's communicators (map[local]), from the ids of the ones it leads and
 * messages from the leaders of the others, over `comm` (a private duplicate of MPI_COMM_WORLD). The receives
 * are posted first, so that the sends, at most ID_BATCH at a time, complete whatever the MPI's protocol;
 * a leader of communicators of many members (rank 0 of duplicates of the world) holds ID_BATCH requests, not
 * one per member. */
#define ID_BATCH 256
static void exchange_ids(uint64_t *map, uint64_t first, MPI_Comm comm) {
    size_t nkeys = 0;
    for (int i = 2; i < ncomms; i++) nkeys += !owned(i);
    uint32_t *ids = malloc((size_t)(ncomms ? ncomms : 1) * 2 * sizeof(uint32_t));
    uint32_t *got = malloc((nkeys ? nkeys : 1) * 2 * sizeof(uint32_t));
    MPI_Request *recv = malloc((nkeys ? nkeys : 1) * sizeof *recv), send[ID_BATCH];
    pkt_key *keys = malloc((nkeys ? nkeys : 1) * sizeof *keys);
    size_t k = 0;
    for (int i = 2; i < ncomms; i++)
        if (!owned(i)) keys[k++] = (pkt_key){comms_def[i].leader, comms_def[i].seq, i};
    qsort(keys, nkeys, sizeof *keys, by_key);
    for (size_t n = 0; n < nkeys; n++) PMPI_Irecv(got + 2 * n, 2, MPI_UINT32_T, MPI_ANY_SOURCE, TAG_ID, comm, &recv[n]);
    uint64_t next = first;
    int b = 0;
    for (int i = 2; i < ncomms; i++) {
        const pkt_comm *c = &comms_def[i];
        if (!owned(i)) continue;
        map[i] = next++;
        ids[2 * i] = (uint32_t)c->seq, ids[2 * i + 1] = (uint32_t)map[i];
        for (int m = 0; m < c->size; m++) {
            if (c->world[m] == t_rank) continue;
            PMPI_Isend(ids + 2 * i, 2, MPI_UINT32_T, c->world[m], TAG_ID, comm, &send[b++]);
            if (b == ID_BATCH)
                for (; b > 0; b--) PMPI_Wait(&send[b - 1], MPI_STATUS_IGNORE);
        }
    }
    for (; b > 0; b--) PMPI_Wait(&send[b - 1], MPI_STATUS_IGNORE);
    for (size_t n = 0; n < nkeys; n++) {
        MPI_Status st;
        PMPI_Wait(&recv[n], &st);
        pkt_key want = {st.MPI_SOURCE, (int)got[2 * n], 0}, *hit = bsearch(&want, keys, nkeys, sizeof *keys, by_key);
        if (hit) map[hit->local] = got[2 * n + 1];
    }
    free(ids), free(got), free(recv), free(keys);
}

/* leaders other than rank 0: the members of each communicator they lead, to rank 0 once it asks, in definition
 * order */
static void send_members(uint64_t led, MPI_Comm comm) {
    if (!led) return;
    PMPI_Recv(NULL, 0, MPI_BYTE, 0, TAG_GO, comm, MPI_STATUS_IGNORE);
    for (int i = 2; i < ncomms; i++) {
        if (!owned(i)) continue;
        const pkt_comm *c = &comms_def[i];
        PMPI_Send(&c->size, 1, MPI_INT, 0, TAG_SIZE, comm);
        for (int at = 0; at < c->size; at += MEMBERS_CHUNK) {
            int n = c->size - at < MEMBERS_CHUNK ? c->size - at : MEMBERS_CHUNK;
            PMPI_Send(c->world + at, n, MPI_INT, 0, TAG_MEMBERS, comm);
        }
    }
}

/* rank 0: the world ranks of the next communicator `leader` leads (own: local id `*own`, advanced) into
 * `*members` (grown as needed; capacity `*cap`); its size */
static int next_members(int leader, int *own, MPI_Comm comm, uint64_t **members, size_t *cap) {
    int size;
    const int *world = NULL;
    int *got = NULL;
    if (leader == 0) {
        while (!owned(*own)) ++*own;
        size = comms_def[*own].size, world = comms_def[*own].world;
        ++*own;
    } else {
        PMPI_Recv(&size, 1, MPI_INT, leader, TAG_SIZE, comm, MPI_STATUS_IGNORE);
        got = malloc((size_t)(size ? size : 1) * sizeof(int));
        for (int at = 0; at < size; at += MEMBERS_CHUNK) {
            int n = size - at < MEMBERS_CHUNK ? size - at : MEMBERS_CHUNK;
            PMPI_Recv(got + at, n, MPI_INT, leader, TAG_MEMBERS, comm, MPI_STATUS_IGNORE);
        }
        world = got;
    }
    if ((size_t)size > *cap) {
        free(*members);
        *cap = (size_t)size;
        *members = malloc(*cap * sizeof(uint64_t));
    }
    for (int k = 0; k < size; k++) (*members)[k] = (uint64_t)world[k];
    free(got);
    return size;
}

static OTF2_StringRef string_ref(OTF2_GlobalDefWriter *w, const char *text) {
    static OTF2_StringRef next;
    OTF2_GlobalDefWriter_WriteString(w, next, text);
    return next++;
}

static void property(OTF2_GlobalDefWriter *w, OTF2_LocationRef loc, OTF2_StringRef name, double value, int integer) {
    OTF2_AttributeValue v;
    if (integer) {
        v.uint64 = (uint64_t)value;
        OTF2_GlobalDefWriter_WriteLocationProperty(w, loc, name, OTF2_TYPE_UINT64, v);
    } else {
        v.float64 = value;
        OTF2_GlobalDefWriter_WriteLocationProperty(w, loc, name, OTF2_TYPE_DOUBLE, v);
    }
}

/* what rank 0 gathers from every rank, NINFO doubles (exact integers below 2^53): the per-rank part of the
 * global definitions; INFO_LED, the number of communicators the rank leads */
enum { INFO_EVENTS, INFO_FIRST, INFO_LAST, INFO_OFFSET, INFO_BOUND, INFO_FLUSHES, INFO_DROPPED, INFO_LED, NINFO };

static void write_global(const double *info, const char *hosts, MPI_Comm comm) {
    OTF2_GlobalDefWriter *w = OTF2_Archive_GetGlobalDefWriter(archive);
    uint64_t first = UINT64_MAX, last = 0;
    for (int r = 0; r < t_size; r++) {
        const double *x = info + (size_t)r * NINFO;
        if (x[INFO_EVENTS] > 0 && (uint64_t)x[INFO_FIRST] < first) first = (uint64_t)x[INFO_FIRST];
        if ((uint64_t)x[INFO_LAST] > last) last = (uint64_t)x[INFO_LAST];
    }
    if (first == UINT64_MAX) first = last;
    OTF2_GlobalDefWriter_WriteClockProperties(w, 1000000000, first, last - first, OTF2_UNDEFINED_TIMESTAMP);
    OTF2_StringRef empty = string_ref(w, "");
    OTF2_GlobalDefWriter_WriteParadigm(w, OTF2_PARADIGM_MPI, string_ref(w, "MPI"), OTF2_PARADIGM_CLASS_PROCESS);
    for (int f = 0; f <= pk_nfunc + 1; f++) {
        const char *name = f < pk_nfunc ? pk_fnames[f] : f == pk_nfunc ? "MPI_Finalize" : program_invocation_short_name;
        OTF2_StringRef s = string_ref(w, name);
        int mpi = f <= pk_nfunc;
        OTF2_RegionRole role = OTF2_REGION_ROLE_FUNCTION;
        if (f < pk_nfunc && pk_fcollective[f]) {
            OTF2_CollectiveOp op = coll_op(f);
            role = op == OTF2_COLLECTIVE_OP_BARRIER ? OTF2_REGION_ROLE_BARRIER
                   : op == OTF2_COLLECTIVE_OP_BCAST || op == OTF2_COLLECTIVE_OP_SCATTER ||
                           op == OTF2_COLLECTIVE_OP_SCATTERV ? OTF2_REGION_ROLE_COLL_ONE2ALL
                   : op == OTF2_COLLECTIVE_OP_REDUCE || op == OTF2_COLLECTIVE_OP_GATHER ||
                           op == OTF2_COLLECTIVE_OP_GATHERV ? OTF2_REGION_ROLE_COLL_ALL2ONE
                   : OTF2_REGION_ROLE_COLL_ALL2ALL;
        }
        OTF2_GlobalDefWriter_WriteRegion(w, (OTF2_RegionRef)f, s, s, empty, role,
                                         mpi ? OTF2_PARADIGM_MPI : OTF2_PARADIGM_USER, OTF2_REGION_FLAG_NONE, empty,
                                         0, 0);
    }
    if (!isnan(cpu_origin)) { /* cpu_time: accumulated since the start (MPI_Init's), at every Enter and Leave */
        OTF2_MetricMemberRef member = CPU_METRIC;
        OTF2_GlobalDefWriter_WriteMetricMember(w, member, string_ref(w, "cpu_time"),
                                               string_ref(w, "CPU time of the rank's thread since MPI_Init's start "
                                                             "(CLOCK_THREAD_CPUTIME_ID)"),
                                               OTF2_METRIC_TYPE_OTHER, OTF2_METRIC_ACCUMULATED_START, OTF2_TYPE_UINT64,
                                               OTF2_BASE_DECIMAL, -9, string_ref(w, "s"));
        OTF2_GlobalDefWriter_WriteMetricClass(w, CPU_METRIC, 1, &member, OTF2_METRIC_SYNCHRONOUS_STRICT,
                                              OTF2_RECORDER_KIND_CPU);
    }
    /* the machine, one node per host name, one process per rank on its node */
    OTF2_GlobalDefWriter_WriteSystemTreeNode(w, 0, string_ref(w, "machine"), string_ref(w, "machine"),
                                             OTF2_UNDEFINED_SYSTEM_TREE_NODE);
    OTF2_StringRef node_class = string_ref(w, "node");
    int *node_of = malloc((size_t)t_size * sizeof(int)), nnodes = 0;
    for (int r = 0; r < t_size; r++) {
        const char *h = hosts + (size_t)r * MPI_MAX_PROCESSOR_NAME;
        if (r > 0 && strncmp(h - MPI_MAX_PROCESSOR_NAME, h, MPI_MAX_PROCESSOR_NAME) == 0) { /* the usual case */
            node_of[r] = node_of[r - 1];
            continue;
        }
        int q = 0;
        while (q < r && strncmp(hosts + (size_t)q * MPI_MAX_PROCESSOR_NAME, h, MPI_MAX_PROCESSOR_NAME) != 0) q++;
        if (q < r) {
            node_of[r] = node_of[q];
            continue;
        }
        node_of[r] = ++nnodes;
        OTF2_GlobalDefWriter_WriteSystemTreeNode(w, (OTF2_SystemTreeNodeRef)nnodes, string_ref(w, h), node_class, 0);
    }
    OTF2_StringRef thread = string_ref(w, "Master thread");
    OTF2_StringRef p_offset = string_ref(w, "perfkit::clock_offset_s");
    OTF2_StringRef p_bound = string_ref(w, "perfkit::clock_offset_bound_s");
    OTF2_StringRef p_flushes = string_ref(w, "perfkit::buffer_flushes");
    OTF2_StringRef p_dropped = string_ref(w, "perfkit::events_dropped");
    uint64_t *members = malloc((size_t)t_size * sizeof(uint64_t));
    for (int r = 0; r < t_size; r++) {
        char name[64];
        snprintf(name, sizeof name, "MPI Rank %d", r);
        OTF2_GlobalDefWriter_WriteLocationGroup(w, (OTF2_LocationGroupRef)r, string_ref(w, name),
                                                OTF2_LOCATION_GROUP_TYPE_PROCESS, (OTF2_SystemTreeNodeRef)node_of[r],
                                                OTF2_UNDEFINED_LOCATION_GROUP);
    }
    for (int r = 0; r < t_size; r++) {
        const double *x = info + (size_t)r * NINFO;
        OTF2_GlobalDefWriter_WriteLocation(w, (OTF2_LocationRef)r, thread, OTF2_LOCATION_TYPE_CPU_THREAD,
                                           (uint64_t)x[INFO_EVENTS], (OTF2_LocationGroupRef)r);
        property(w, r, p_offset, x[INFO_OFFSET], 0);
        property(w, r, p_bound, x[INFO_BOUND], 0);
        property(w, r, p_flushes, x[INFO_FLUSHES], 1);
        property(w, r, p_dropped, x[INFO_DROPPED], 1);
        members[r] = (uint64_t)r;
    }
    /* groups: 0 the ranks' locations, 1 MPI_COMM_WORLD, 2 MPI_COMM_SELF, 3.. the other communicators */
    OTF2_GlobalDefWriter_WriteGroup(w, 0, string_ref(w, "MPI ranks"), OTF2_GROUP_TYPE_COMM_LOCATIONS,
                                    OTF2_PARADIGM_MPI, OTF2_GROUP_FLAG_NONE, (uint32_t)t_size, members);
    OTF2_GlobalDefWriter_WriteGroup(w, 1, string_ref(w, "MPI_COMM_WORLD"), OTF2_GROUP_TYPE_COMM_GROUP,
                                    OTF2_PARADIGM_MPI, OTF2_GROUP_FLAG_NONE, (uint32_t)t_size, members);
    OTF2_GlobalDefWriter_WriteGroup(w, 2, string_ref(w, "MPI_COMM_SELF"), OTF2_GROUP_TYPE_COMM_SELF,
                                    OTF2_PARADIGM_MPI, OTF2_GROUP_FLAG_NONE, 0, NULL);
    OTF2_GlobalDefWriter_WriteComm(w, PKT_WORLD, string_ref(w, "MPI_COMM_WORLD"), 1, OTF2_UNDEFINED_COMM,
                                   OTF2_COMM_FLAG_NONE);
    OTF2_GlobalDefWriter_WriteComm(w, PKT_SELF, string_ref(w, "MPI_COMM_SELF"), 2, OTF2_UNDEFINED_COMM,
                                   OTF2_COMM_FLAG_NONE);
    /* the other communicators, received one at a time from their leaders, in the order of their global ids */
    uint64_t id = 2, *m = NULL;
    size_t cap = 0;
    int own = 2;
    for (int r = 0, ahead = 1; r < t_size; r++)
        for (uint64_t k = 0, nled = (uint64_t)info[(size_t)r * NINFO + INFO_LED]; k < nled; k++, id++) {
            for (; ahead < t_size && ahead <= r + GO_WINDOW; ahead++)
                if (info[(size_t)ahead * NINFO + INFO_LED] > 0) PMPI_Send(NULL, 0, MPI_BYTE, ahead, TAG_GO, comm);
            int size = next_members(r, &own, comm, &m, &cap);
            char name[64];
            snprintf(name, sizeof name, "MPI communicator %llu", (unsigned long long)id);
            OTF2_StringRef s = string_ref(w, name);
            OTF2_GlobalDefWriter_WriteGroup(w, (OTF2_GroupRef)(id + 1), s, OTF2_GROUP_TYPE_COMM_GROUP,
                                            OTF2_PARADIGM_MPI, OTF2_GROUP_FLAG_NONE, (uint32_t)size, m);
            OTF2_GlobalDefWriter_WriteComm(w, (OTF2_CommRef)id, s, (OTF2_GroupRef)(id + 1), OTF2_UNDEFINED_COMM,
                                           OTF2_COMM_FLAG_NONE);
        }
    free(m);
    OTF2_Archive_CloseGlobalDefWriter(archive, w);
    free(members);
    free(node_of);
}

void pkt_close(double t, double cpu, const char *hosts, double clock_bound) {
    if (!archive) return;
    uint64_t nevents = 0;
    if (writer) {
        pkt_leave(pkt_region_finalize(), t, cpu);
        pkt_leave(pkt_region_program(), t, cpu);
        OTF2_EvtWriter_GetNumberOfEvents(writer, &nevents);
        OTF2_Archive_CloseEvtWriter(archive, writer);
        writer = NULL;
    }
    OTF2_Archive_CloseEvtFiles(archive);

    /* communicators: global ids by an exclusive prefix sum of the numbers each rank leads */
    MPI_Comm comm;
    PMPI_Comm_dup(MPI_COMM_WORLD, &comm);
    uint64_t led = 0, first = 0;
    for (int i = 2; i < ncomms; i++) led += (uint64_t)owned(i);
    PMPI_Exscan(&led, &first, 1, MPI_UINT64_T, MPI_SUM, comm);
    if (t_rank == 0) first = 0; /* MPI_Exscan leaves rank 0's result undefined */
    if (2 + first + led >= OTF2_UNDEFINED_COMM)
        fprintf(stderr, "perfkit collect: rank %d: more communicators than the trace's 32-bit ids hold\n", t_rank);
    uint64_t *map = calloc((size_t)ncomms, sizeof(uint64_t));
    map[PKT_WORLD] = PKT_WORLD, map[PKT_SELF] = PKT_SELF;
    exchange_ids(map, 2 + first, comm);

    OTF2_Archive_OpenDefFiles(archive);
    OTF2_DefWriter *dw = OTF2_Archive_GetDefWriter(archive, (OTF2_LocationRef)t_rank);
    OTF2_IdMap *idmap = OTF2_IdMap_CreateFromUint64Array((uint64_t)ncomms, map, false);
    OTF2_DefWriter_WriteMappingTable(dw, OTF2_MAPPING_COMM, idmap);
    OTF2_IdMap_Free(idmap);
    OTF2_Archive_CloseDefWriter(archive, dw);
    OTF2_Archive_CloseDefFiles(archive);

    /* NINFO doubles per rank: a count of t_size * NINFO, within an int for up to 268 million ranks */
    double info[NINFO] = {(double)nevents, (double)t_first, (double)t_last, t_offset, clock_bound,
                          (double)flushes, (double)dropped, (double)led};
    double *infos = t_rank == 0 ? malloc((size_t)t_size * NINFO * sizeof(double)) : NULL;
    PMPI_Gather(info, NINFO, MPI_DOUBLE, infos, NINFO, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (t_rank == 0) {
        write_global(infos, hosts, comm);
        uint64_t lost = 0;
        for (int r = 0; r < t_size; r++) lost += (uint64_t)infos[(size_t)r * NINFO + INFO_DROPPED];
        if (lost) fprintf(stderr, "perfkit collect: %llu trace events dropped (see perfkit::events_dropped)\n",
                          (unsigned long long)lost);
    } else {
        send_members(led, comm);
    }
    PMPI_Comm_free(&comm);
    OTF2_Archive_Close(archive);
    archive = NULL;
    free(map), free(infos);
}
