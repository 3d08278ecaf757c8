/* perfkit collector runtime: accounting, send-late time, collective wait, matrices, output.
 * Built with the user's mpicc together with the wrappers generated from perfkit/collect/signatures.py.
 * See docs/collector.md for what is measured and how.
 */
#define _GNU_SOURCE
#include "pk_runtime.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#ifdef PK_TRACE /* the library built for --trace: every profiled call also goes to the OTF2 trace */
#include "pk_trace.h"
static int opt_trace;
#define TRACE(...)                    \
    do {                              \
        if (opt_trace) { __VA_ARGS__; } \
    } while (0)
#else
#define TRACE(...) \
    do {           \
    } while (0)
#endif

/* provided by the generated wrappers */
extern const int pk_nfunc;
extern const char *const pk_fnames[];
extern const int pk_fcollective[];

enum { PK_NMETRIC = 7 };              /* time, calls, bytes_sent, calls_sent, bytes_recv, calls_recv, cpu_time */
enum { M_TIME, M_CALLS, M_BSENT, M_CSENT, M_BRECV, M_CRECV, M_CPU };
enum { PART_MAIN, PART_W, PART_B, PK_NPART };
enum { PK_NBIN = 66 };                /* size bins: 0 bytes, then [2^k, 2^(k+1)) labelled 2^k */
enum { ROW = 11 };                    /* doubles per output record */

static int pk_on;                     /* profiling between the end of MPI_Init and MPI_Finalize */
static int pk_depth;                  /* > 0 inside a profiled call: nested MPI calls pass through */
static pthread_t pk_thread;           /* the thread that initialised MPI; others are not profiled */
static int opt_slt, opt_cw, opt_mat, opt_cpu;
static int world_rank, world_size;
static double clock_offset;           /* add to the local clock to get rank 0's clock [s] */
static double t_init_end, mpi_time;   /* [s] */
static double mpi_cpu;                /* the thread's CPU time inside profiled calls [s] */
/* the rank's CPU at the end of MPI_Init, then the change up to MPI_Finalize: thread CPU [s], run-queue wait [s],
 * voluntary and involuntary switches, the process's CPU (every thread) [s] */
enum { C_THREAD, C_DELAY, C_VOL, C_INVOL, C_PROC, PK_NCPU };
static double cpu_at_init[PK_NCPU];
static double cpu_init_start; /* the thread's CPU clock when MPI_Init was called [s] */
static double *stats;                 /* [nfunc][PK_NPART][PK_NMETRIC] */
static double *hist;                  /* [nfunc][PK_NBIN]: messages */
static int *call_src;                 /* world ranks of the receives completed by the current call */
static int call_src_cap;
static long unmatched_piggybacks;
static long other_thread_calls;

static inline double pk_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* the calling thread's CPU time (user + system) [s]: a system call here (0.8 us), taken twice a profiled call */
static inline double pk_cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* the thread's and process's CPU counters now (C_* order); the run-queue wait is NaN without schedstat */
static void cpu_counters(double out[PK_NCPU]) {
    struct rusage self, thread;
    unsigned long long on_cpu, delay;
    out[C_THREAD] = pk_cpu_now();
    out[C_DELAY] = NAN;
    FILE *fh = fopen("/proc/thread-self/schedstat", "r");
    if (fh) {
        if (fscanf(fh, "%llu %llu", &on_cpu, &delay) == 2) out[C_DELAY] = 1e-9 * (double)delay;
        fclose(fh);
    }
    getrusage(RUSAGE_THREAD, &thread);
    getrusage(RUSAGE_SELF, &self);
    out[C_VOL] = (double)thread.ru_nvcsw;
    out[C_INVOL] = (double)thread.ru_nivcsw;
    out[C_PROC] = (double)self.ru_utime.tv_sec + 1e-6 * (double)self.ru_utime.tv_usec + (double)self.ru_stime.tv_sec +
                  1e-6 * (double)self.ru_stime.tv_usec;
}

/* the CPU quota [cores] of the cgroup at `dir` under `root` and of its ancestors (the least), INFINITY when none:
 * cgroup v2 cpu.max "QUOTA PERIOD" or v1 cpu.cfs_quota_us / cpu.cfs_period_us (-1: none) */
static double cgroup_quota(const char *root, char *dir, int v2) {
    double least = INFINITY;
    for (;;) {
        char path[4096];
        long long quota = -1, period = 0;
        FILE *fh;
        if (v2) {
            snprintf(path, sizeof path, "%s%s/cpu.max", root, dir);
            if ((fh = fopen(path, "r"))) {
                if (fscanf(fh, "%lld %lld", &quota, &period) != 2) quota = -1; /* "max PERIOD" */
                fclose(fh);
            }
        } else {
            snprintf(path, sizeof path, "%s%s/cpu.cfs_quota_us", root, dir);
            if ((fh = fopen(path, "r"))) {
                if (fscanf(fh, "%lld", &quota) != 1) quota = -1;
                fclose(fh);
            }
            snprintf(path, sizeof path, "%s%s/cpu.cfs_period_us", root, dir);
            if ((fh = fopen(path, "r"))) {
                if (fscanf(fh, "%lld", &period) != 1) period = 0;
                fclose(fh);
            }
        }
        if (quota > 0 && period > 0 && (double)quota / (double)period < least) least = (double)quota / (double)period;
        char *slash = strrchr(dir, '/');
        if (!slash || slash == dir) break;
        *slash = '\0';
    }
    return least;
}

/* this process's CPU quota [cores] from its cgroup (v1 cpu controller or v2), NaN when unlimited or unknown */
static double cpu_quota(void) {
    FILE *fh = fopen("/proc/self/cgroup", "r");
    char line[4096];
    double least = INFINITY;
    if (!fh) return NAN;
    while (fgets(line, sizeof line, fh)) {
        line[strcspn(line, "\n")] = '\0';
        char *controllers = strchr(line, ':'), *dir = controllers ? strchr(controllers + 1, ':') : NULL;
        if (!dir) continue;
        *dir++ = '\0';
        controllers++;
        if (!*controllers) { /* v2 */
            double q = cgroup_quota("/sys/fs/cgroup", dir, 1);
            least = q < least ? q : least;
            continue;
        }
        for (char *c = strtok(controllers, ","); c; c = strtok(NULL, ","))
            if (strcmp(c, "cpu") == 0) {
                char copy[4096];
                snprintf(copy, sizeof copy, "%s", dir);
                double q = cgroup_quota("/sys/fs/cgroup/cpu", dir, 0);
                if (isinf(q)) q = cgroup_quota("/sys/fs/cgroup/cpu,cpuacct", copy, 0);
                least = q < least ? q : least;
            }
    }
    fclose(fh);
    return isinf(least) ? NAN : least;
}

/* CPUs allowed to any rank of this rank's node (the union of the affinity masks over MPI_COMM_TYPE_SHARED);
 * collective over MPI_COMM_WORLD */
static double node_cores_allowed(const cpu_set_t *mine) {
    MPI_Comm node;
    cpu_set_t all;
    PMPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    PMPI_Allreduce(mine, &all, (int)sizeof all, MPI_BYTE, MPI_BOR, node);
    PMPI_Comm_free(&node);
    return CPU_COUNT(&all);
}

static void *pk_calloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    if (!p) {
        fprintf(stderr, "perfkit collect: out of memory\n");
        PMPI_Abort(MPI_COMM_WORLD, 70);
    }
    return p;
}

static inline double *stat_of(int fid, int part) { return stats + ((size_t)fid * PK_NPART + part) * PK_NMETRIC; }

static inline int size_bin(double bytes) {
    if (bytes < 1) return 0;
    int b = 1 + (int)floor(log2(bytes));
    return b < PK_NBIN ? b : PK_NBIN - 1;
}

static inline void add_hist(int fid, double bytes) {
    if (opt_mat) hist[(size_t)fid * PK_NBIN + size_bin(bytes)] += 1;
}

/* ---------- open-addressing maps: handle -> record (linear probing, backward-shift deletion) ---------- */

typedef struct {
    uint64_t key;
    int used;
    int kind;                        /* requests: 1 receive, 2 persistent send, 3 send (traced); comms: unused */
    int persistent, fid, count, dest, tag;
    MPI_Datatype type;
    MPI_Comm comm;                   /* requests: the user communicator */
    MPI_Comm shadow;                 /* comms: the piggyback communicator (MPI_COMM_NULL if none) */
    int *world;                      /* comms: world rank of each (remote) rank, NULL until needed */
    int size, inter;
    int tid;                         /* comms: the trace's id, -1 if none */
    double *cw_arrival, *cw_span;    /* comms: collectives whose wait is not yet known: arrival [s, rank 0's
                                        clock] and duration [s] of each, with its function id */
    int *cw_fid, cw_n;
    double coll_each;                /* comms: collective bytes received from every other member, not yet
                                        spread over the partners [B] (uniform collectives, see coll_spread) */
    int coll_me;                     /* comms: this rank's rank in it (-1 for an intercommunicator) */
    unsigned long long rid;          /* requests: the trace's id of the current operation */
} pk_rec;

typedef struct {
    pk_rec *slots;
    size_t cap, n;
} pk_map;

static pk_map requests, comms;

static inline uint64_t key_of(const void *handle, size_t size) {
    uint64_t k = 0;
    memcpy(&k, handle, size < sizeof k ? size : sizeof k);
    return k;
}
#define REQ_KEY(r) key_of(&(r), sizeof(MPI_Request))
#define COMM_KEY(c) key_of(&(c), sizeof(MPI_Comm))

static inline size_t hash64(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return (size_t)k;
}

static pk_rec *map_find(pk_map *m, uint64_t key) {
    if (!m->n) return NULL;
    for (size_t i = hash64(key) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (!m->slots[i].used) return NULL;
        if (m->slots[i].key == key) return &m->slots[i];
    }
}

static pk_rec *map_put(pk_map *m, uint64_t key);

static void map_grow(pk_map *m) {
    pk_map old = *m;
    m->cap = old.cap ? old.cap * 2 : 64;
    m->n = 0;
    m->slots = pk_calloc(m->cap, sizeof(pk_rec));
    for (size_t i = 0; i < old.cap; i++)
        if (old.slots[i].used) *map_put(m, old.slots[i].key) = old.slots[i];
    free(old.slots);
}

static pk_rec *map_put(pk_map *m, uint64_t key) {
    if (2 * (m->n + 1) > m->cap) map_grow(m);
    size_t i = hash64(key) & (m->cap - 1);
    while (m->slots[i].used && m->slots[i].key != key) i = (i + 1) & (m->cap - 1);
    if (!m->slots[i].used) m->n++;
    memset(&m->slots[i], 0, sizeof(pk_rec));
    m->slots[i].used = 1;
    m->slots[i].key = key;
    return &m->slots[i];
}

static void map_del(pk_map *m, pk_rec *r) {
    size_t i = (size_t)(r - m->slots), j = i;
    m->slots[i].used = 0;
    m->n--;
    for (;;) {
        j = (j + 1) & (m->cap - 1);
        if (!m->slots[j].used) return;
        size_t home = hash64(m->slots[j].key) & (m->cap - 1);
        /* move j back to i if its home is not in (i, j] cyclically */
        if ((j > i && (home <= i || home > j)) || (j < i && (home <= i && home > j))) {
            m->slots[i] = m->slots[j];
            m->slots[j].used = 0;
            i = j;
        }
    }
}

/* ---------- partners: what this rank received from each world rank (open addressing on the rank) ---------- */

typedef struct {
    int rank;          /* the sender's world rank; -1: an empty slot */
    uint64_t count;    /* point-to-point messages */
    double bytes;      /* point-to-point bytes [B] */
    double time;       /* time spent receiving them [s] */
    double coll;       /* bytes of collectives, by the rule of pk_coll_* [B] */
} pk_partner;

static pk_partner *partners; /* grows with the number of partners, never with the number of ranks */
static size_t partners_cap, partners_n;

static pk_partner *partner(int rank);

static void partners_grow(void) {
    pk_partner *old = partners;
    size_t old_cap = partners_cap;
    partners_cap = old_cap ? 2 * old_cap : 16;
    partners = pk_calloc(partners_cap, sizeof(pk_partner));
    for (size_t i = 0; i < partners_cap; i++) partners[i].rank = -1;
    partners_n = 0;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].rank >= 0) *partner(old[i].rank) = old[i];
    free(old);
}

/* the record of world rank `rank`, made empty on first use */
static pk_partner *partner(int rank) {
    if (2 * (partners_n + 1) > partners_cap) partners_grow();
    size_t mask = partners_cap - 1;
    for (size_t i = hash64((uint64_t)(uint32_t)rank) & mask;; i = (i + 1) & mask) {
        if (partners[i].rank == rank) return &partners[i];
        if (partners[i].rank < 0) {
            memset(&partners[i], 0, sizeof(pk_partner));
            partners[i].rank = rank;
            partners_n++;
            return &partners[i];
        }
    }
}

/* ---------- communicators ---------- */

static pk_rec *comm_rec(MPI_Comm comm) {
    pk_rec *r = map_find(&comms, COMM_KEY(comm));
    if (r) return r;
    r = map_put(&comms, COMM_KEY(comm));
    r->shadow = MPI_COMM_NULL;
    r->comm = comm;
    r->tid = -1;
    PMPI_Comm_test_inter(comm, &r->inter);
    if (r->inter)
        PMPI_Comm_remote_size(comm, &r->size);
    else
        PMPI_Comm_size(comm, &r->size);
    return r;
}

static int to_world(pk_rec *r, int rank) {
    if (r->comm == MPI_COMM_WORLD) return rank;
    if (!r->world) {
        MPI_Group g, wg;
        int *idx = pk_calloc((size_t)r->size, sizeof(int));
        r->world = pk_calloc((size_t)r->size, sizeof(int));
        for (int i = 0; i < r->size; i++) idx[i] = i;
        if (r->inter)
            PMPI_Comm_remote_group(r->comm, &g);
        else
            PMPI_Comm_group(r->comm, &g);
        PMPI_Comm_group(MPI_COMM_WORLD, &wg);
        PMPI_Group_translate_ranks(g, r->size, idx, wg, r->world);
        PMPI_Group_free(&g);
        PMPI_Group_free(&wg);
        free(idx);
    }
    return rank >= 0 && rank < r->size ? r->world[rank] : MPI_UNDEFINED;
}

#ifdef PK_TRACE
/* Give an intracommunicator made collectively a trace id every member names alike: the largest count of
 * communicators made so far among its members (one max-reduction), and the world rank of its rank 0. */
static void trace_comm(pk_rec *r) {
    static int made;
    if (r->comm == MPI_COMM_WORLD || r->comm == MPI_COMM_SELF) {
        r->tid = r->comm == MPI_COMM_WORLD ? PKT_WORLD : PKT_SELF;
        return;
    }
    if (r->inter || r->tid >= 0) return; /* intercommunicators: recorded in MPI_COMM_WORLD's terms */
    int seq;
    PMPI_Allreduce(&made, &seq, 1, MPI_INT, MPI_MAX, r->comm);
    made = seq + 1;
    int leader = to_world(r, 0);
    r->tid = pkt_comm_define(made, leader, r->size, r->world);
}

/* the trace's communicator and peer of `rank` in `r`: its own when it has one, else MPI_COMM_WORLD's */
static int trace_peer(pk_rec *r, int rank, int *tid) {
    if (r->tid >= 0) {
        *tid = r->tid;
        return rank;
    }
    *tid = PKT_WORLD;
    return to_world(r, rank);
}
#endif

void pk_comm_new(pk_call *c, MPI_Comm comm) {
    if (c->fid < 0 || comm == MPI_COMM_NULL) return;
    pk_rec *r = comm_rec(comm);
    if (opt_slt && r->shadow == MPI_COMM_NULL) PMPI_Comm_dup(comm, &r->shadow);
    TRACE(trace_comm(r));
}

static void cw_settle(pk_rec *r);

/* Add the bytes a uniform collective (the same from every member) received from each other member of r to
 * each member's partner record: done once, when the communicator is freed or at MPI_Finalize, so that such a
 * collective costs one addition per call whatever the communicator's size. */
static void coll_spread(pk_rec *r) {
    if (!opt_mat || r->coll_each == 0) return;
    for (int i = 0; i < r->size; i++) {
        int w = to_world(r, i); /* from the map made by coll_uniform: the communicator may be gone */
        if (i != r->coll_me && w >= 0) partner(w)->coll += r->coll_each;
    }
    r->coll_each = 0;
}

/* bytes received from every other member of r, spread at coll_spread; what it needs is taken now */
static void coll_uniform(pk_rec *r, double bytes) {
    if (!opt_mat || bytes == 0) return;
    if (r->coll_each == 0) {
        r->coll_me = -1;
        if (!r->inter) PMPI_Comm_rank(r->comm, &r->coll_me);
        to_world(r, 0); /* the map to world ranks */
    }
    r->coll_each += bytes;
}

void pk_comm_free(pk_call *c, MPI_Comm comm) {
    if (c->fid < 0) return;
    pk_rec *r = map_find(&comms, COMM_KEY(comm));
    if (!r) return;
    cw_settle(r);
    coll_spread(r);
    if (r->shadow != MPI_COMM_NULL) PMPI_Comm_free(&r->shadow);
    free(r->world);
    free(r->cw_arrival);
    free(r->cw_span);
    free(r->cw_fid);
    map_del(&comms, r);
}

/* ---------- send-late time: piggybacked send start times on the shadow communicator ---------- */

typedef struct {
    double when;
    MPI_Request req;
} pk_piggyback;

static pk_piggyback **pb_chunks;
static int pb_nchunks;
static size_t pb_cursor;
enum { PB_CHUNK = 1024 };

static pk_piggyback *pb_slot(void) {
    size_t total = (size_t)pb_nchunks * PB_CHUNK;
    for (size_t probe = 0; probe < total; probe++) {
        pk_piggyback *s = &pb_chunks[pb_cursor / PB_CHUNK][pb_cursor % PB_CHUNK];
        pb_cursor = (pb_cursor + 1) % total;
        if (s->req != MPI_REQUEST_NULL) {
            int done = 0;
            PMPI_Test(&s->req, &done, MPI_STATUS_IGNORE);
            if (!done) continue;
        }
        return s;
    }
    pb_chunks = realloc(pb_chunks, (size_t)(pb_nchunks + 1) * sizeof *pb_chunks);
    pb_chunks[pb_nchunks] = pk_calloc(PB_CHUNK, sizeof(pk_piggyback));
    for (int i = 0; i < PB_CHUNK; i++) pb_chunks[pb_nchunks][i].req = MPI_REQUEST_NULL;
    pb_cursor = total + 1;
    return &pb_chunks[pb_nchunks++][0];
}

static void piggyback_send(double when, int dest, int tag, MPI_Comm comm) {
    if (!opt_slt || dest < 0) return; /* MPI_PROC_NULL */
    pk_rec *r = map_find(&comms, COMM_KEY(comm));
    if (!r || r->shadow == MPI_COMM_NULL) return;
    pk_piggyback *s = pb_slot();
    s->when = when + clock_offset;
    PMPI_Isend(&s->when, 1, MPI_DOUBLE, dest, tag, r->shadow, &s->req);
}

/* the send start time of the message just received, on this rank's clock; NAN without one */
static double piggyback_recv(MPI_Comm comm, int source, int tag) {
    if (!opt_slt || source < 0) return NAN;
    pk_rec *r = map_find(&comms, COMM_KEY(comm));
    if (!r || r->shadow == MPI_COMM_NULL) return NAN;
    double when;
    PMPI_Recv(&when, 1, MPI_DOUBLE, source, tag, r->shadow, MPI_STATUS_IGNORE);
    return when - clock_offset;
}

static void piggyback_drain(void) {
    double deadline = pk_now() + 2.0;
    for (int k = 0; k < pb_nchunks; k++)
        for (int i = 0; i < PB_CHUNK; i++) {
            MPI_Request *req = &pb_chunks[k][i].req;
            int done = *req == MPI_REQUEST_NULL;
            while (!done && pk_now() < deadline) PMPI_Test(req, &done, MPI_STATUS_IGNORE);
            if (!done) { /* its receive never completed a matching message */
                unmatched_piggybacks++;
                PMPI_Cancel(req);
                PMPI_Request_free(req);
            }
        }
}

/* ---------- collective wait, settled in batches ---------- */

/* A collective's wait is the last member's arrival less this rank's (on rank 0's clock), at most the
 * call's duration. Arrivals are kept per communicator and the last ones found by one max-reduction per
 * CW_BATCH collectives (every member makes the same collectives on a communicator in the same order, so
 * every member reaches a batch's end at the same call), when the communicator is freed, and in
 * MPI_Finalize: nothing is added to the collectives themselves. The wait then moves from the call's
 * own time to its b_ part. */
enum { CW_BATCH = 4096 };

static void cw_apply(pk_rec *r, const double *last) {
    for (int i = 0; i < r->cw_n; i++) {
        double wait = last[i] - r->cw_arrival[i], span = r->cw_span[i];
        wait = wait < 0 ? 0 : (wait > span ? span : wait);
        stat_of(r->cw_fid[i], PART_B)[M_TIME] += wait;
        stat_of(r->cw_fid[i], PART_MAIN)[M_TIME] -= wait;
    }
    r->cw_n = 0;
}

static void cw_settle(pk_rec *r) {
    if (!r->cw_n) return;
    double *last = pk_calloc((size_t)r->cw_n, sizeof(double));
    PMPI_Allreduce(r->cw_arrival, last, r->cw_n, MPI_DOUBLE, MPI_MAX, r->comm);
    cw_apply(r, last);
    free(last);
}

/* MPI_Finalize: every communicator's pending collectives, one non-blocking reduction each (members may
 * hold their communicators in different orders) */
static void cw_settle_all(void) {
    size_t n = 0, k = 0;
    for (size_t i = 0; i < comms.cap; i++) n += comms.slots && comms.slots[i].used && comms.slots[i].cw_n;
    if (!n) return;
    MPI_Request *reqs = pk_calloc(n, sizeof(MPI_Request));
    double **last = pk_calloc(n, sizeof(double *));
    pk_rec **recs = pk_calloc(n, sizeof(pk_rec *));
    for (size_t i = 0; i < comms.cap; i++) {
        pk_rec *r = &comms.slots[i];
        if (!r->used || !r->cw_n) continue;
        recs[k] = r;
        last[k] = pk_calloc((size_t)r->cw_n, sizeof(double));
        PMPI_Iallreduce(r->cw_arrival, last[k], r->cw_n, MPI_DOUBLE, MPI_MAX, r->comm, &reqs[k]);
        k++;
    }
    for (k = 0; k < n; k++) PMPI_Wait(&reqs[k], MPI_STATUS_IGNORE); /* (MPICH's Waitall warns with -O2) */
    for (k = 0; k < n; k++) {
        cw_apply(recs[k], last[k]);
        free(last[k]);
    }
    free(reqs);
    free(last);
    free(recs);
}

static void cw_record(pk_call *c, double span) {
    pk_rec *r = map_find(&comms, COMM_KEY(c->cw_comm));
    if (!r) return; /* the call freed its communicator: its wait stays in its own time */
    if (!r->cw_arrival) {
        r->cw_arrival = pk_calloc(CW_BATCH, sizeof(double));
        r->cw_span = pk_calloc(CW_BATCH, sizeof(double));
        r->cw_fid = pk_calloc(CW_BATCH, sizeof(int));
    }
    r->cw_arrival[r->cw_n] = c->cw_arrival;
    r->cw_span[r->cw_n] = span;
    r->cw_fid[r->cw_n] = c->fid;
    if (++r->cw_n == CW_BATCH) cw_settle(r);
}

/* ---------- calls ---------- */

int pk_enter(pk_call *c, int fid) {
    c->fid = -1;
    if (!pk_on || pk_depth) return 0;
    if (!pthread_equal(pthread_self(), pk_thread)) {
        other_thread_calls++;
        return 0;
    }
    pk_depth = 1;
    c->fid = fid;
    c->tb = c->slt = 0;
    c->slt_measured = c->nsrc = 0;
    c->cw_pending = 0;
    c->cw_req = MPI_REQUEST_NULL;
    if (opt_cpu) c->c0 = pk_cpu_now();
    c->t0 = pk_now();
    TRACE({
        c->t_enter = c->t0;
        c->coll_comm = c->coll_root = -1;
        c->coll_sent = c->coll_recv = 0;
        c->rid = 0;
        pkt_enter(fid, c->t0, opt_cpu ? c->c0 : NAN);
    });
    return 1;
}

void pk_leave(pk_call *c) {
    if (c->fid < 0) return;
    if (c->cw_req != MPI_REQUEST_NULL) { /* a rooted collective's wait, from the reduction of arrival times */
        PMPI_Wait(&c->cw_req, MPI_STATUS_IGNORE);
        double span = pk_now() - c->t0, wait = c->cw_last - c->cw_arrival;
        c->tb = wait < 0 ? 0 : (wait > span ? span : wait);
        c->t0 += c->tb;
    }
    double t_end = pk_now(), dur = t_end - c->t0;
    double cpu = opt_cpu ? pk_cpu_now() - c->c0 : 0; /* the whole call's, its waits included */
    TRACE({
        if (c->coll_comm >= 0) pkt_coll_end(t_end, c->fid, c->coll_comm, c->coll_root, c->coll_sent, c->coll_recv);
        pkt_leave(c->fid, t_end, opt_cpu ? c->c0 + cpu : NAN);
    });
    double w = c->slt < dur ? c->slt : dur;
    double *s = stat_of(c->fid, PART_MAIN);
    s[M_TIME] += dur - w;
    s[M_CALLS] += 1;
    s[M_CPU] += cpu;
    mpi_cpu += cpu;
    if (c->slt_measured) {
        double *sw = stat_of(c->fid, PART_W);
        sw[M_TIME] += w;
        sw[M_CALLS] += 1;
    }
    if (opt_cw && pk_fcollective[c->fid]) {
        double *sb = stat_of(c->fid, PART_B);
        sb[M_TIME] += c->tb;
        sb[M_CALLS] += 1;
    }
    if (opt_mat)
        for (int i = 0; i < c->nsrc; i++) partner(call_src[i])->time += dur / c->nsrc;
    mpi_time += dur + c->tb;
    if (c->cw_pending) cw_record(c, dur);
    pk_depth = 0;
}

static inline double *main_stat(pk_call *c) { return stat_of(c->fid, PART_MAIN); }

void pk_send(pk_call *c, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
    if (c->fid < 0 || dest == MPI_PROC_NULL) return;
    double bytes = (double)count * pk_tsize(type);
    double *s = main_stat(c);
    s[M_BSENT] += bytes;
    s[M_CSENT] += 1;
    add_hist(c->fid, bytes);
    piggyback_send(c->t0, dest, tag, comm);
    TRACE({
        int tid, peer = trace_peer(comm_rec(comm), dest, &tid);
        c->rid = pk_fnames[c->fid][4] == 'I' ? pkt_request_id() : 0; /* MPI_Isend, _Ibsend, _Issend, _Irsend */
        pkt_send(pk_now(), peer, tid, tag, bytes, c->rid);
    });
}

/* rid: the trace's id of the receive request (0 for a blocking receive) */
static void received(pk_call *c, int fid_post, MPI_Comm comm, MPI_Status *st, unsigned long long rid) {
    int cancelled = 0;
    if (st->MPI_SOURCE < 0) return; /* MPI_PROC_NULL, or an inactive request */
    PMPI_Test_cancelled(st, &cancelled);
    if (cancelled) return;
    double t_data = pk_now();
    int nbytes = 0;
    PMPI_Get_count(st, MPI_BYTE, &nbytes);
    double *s = stat_of(fid_post, PART_MAIN);
    s[M_BRECV] += nbytes;
    s[M_CRECV] += 1;
    add_hist(fid_post, nbytes);
    pk_rec *r = comm_rec(comm);
    int src = to_world(r, st->MPI_SOURCE);
    if (opt_mat && src >= 0 && src < world_size) {
        pk_partner *p = partner(src);
        p->bytes += nbytes;
        p->count += 1;
        if (c->nsrc == call_src_cap) {
            call_src_cap = call_src_cap ? 2 * call_src_cap : 16;
            call_src = realloc(call_src, (size_t)call_src_cap * sizeof(int));
        }
        call_src[c->nsrc++] = src;
    }
    TRACE({
        int tid, peer = trace_peer(r, st->MPI_SOURCE, &tid);
        pkt_recv(t_data, peer, tid, st->MPI_TAG, nbytes, rid);
    });
    double sent = piggyback_recv(comm, st->MPI_SOURCE, st->MPI_TAG);
    if (!isnan(sent)) {
        double late = sent - c->t0, span = t_data - c->t0;
        late = late < 0 ? 0 : (late > span ? span : late);
        if (late > c->slt) c->slt = late;
        c->slt_measured = 1;
    }
}

void pk_recv_done(pk_call *c, int fid_post, MPI_Comm comm, MPI_Status *status) {
    if (c->fid < 0) return;
    received(c, fid_post, comm, status, 0);
}

void pk_sendrecv_done(pk_call *c, MPI_Comm comm, MPI_Status *status) {
    if (c->fid < 0) return;
    received(c, c->fid, comm, status, 0);
}

void pk_req_recv(pk_call *c, MPI_Request req, MPI_Comm comm, int persistent) {
    if (c->fid < 0 || req == MPI_REQUEST_NULL) return;
    pk_rec *r = map_put(&requests, REQ_KEY(req));
    r->kind = 1;
    r->persistent = persistent;
    r->fid = c->fid;
    r->comm = comm;
    TRACE(if (!persistent) pkt_irecv_request(pk_now(), r->rid = pkt_request_id()));
}

void pk_req_isend(pk_call *c, MPI_Request req) {
    TRACE({
        if (c->fid < 0 || req == MPI_REQUEST_NULL || !c->rid) return;
        pk_rec *r = map_put(&requests, REQ_KEY(req));
        r->kind = 3;
        r->rid = c->rid;
    });
}

void pk_req_psend(pk_call *c, MPI_Request req, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
    if (c->fid < 0 || req == MPI_REQUEST_NULL) return;
    pk_rec *r = map_put(&requests, REQ_KEY(req));
    r->kind = 2;
    r->persistent = 1;
    r->fid = c->fid;
    r->count = count;
    r->type = type;
    r->dest = dest;
    r->tag = tag;
    r->comm = comm;
}

void pk_start(pk_call *c, int n, const MPI_Request reqs[]) {
    if (c->fid < 0) return;
    for (int i = 0; i < n; i++) {
        pk_rec *r = map_find(&requests, REQ_KEY(reqs[i]));
        TRACE(if (r && r->kind == 1) pkt_irecv_request(pk_now(), r->rid = pkt_request_id()));
        if (!r || r->kind != 2 || r->dest == MPI_PROC_NULL) continue;
        double bytes = (double)r->count * pk_tsize(r->type);
        double *s = stat_of(r->fid, PART_MAIN);
        s[M_BSENT] += bytes;
        s[M_CSENT] += 1;
        add_hist(r->fid, bytes);
        piggyback_send(c->t0, r->dest, r->tag, r->comm);
        TRACE({
            int tid, peer = trace_peer(comm_rec(r->comm), r->dest, &tid);
            pkt_send(pk_now(), peer, tid, r->tag, bytes, r->rid = pkt_request_id());
        });
    }
}

void pk_request_free(pk_call *c, MPI_Request req) {
    if (c->fid < 0) return;
    pk_rec *r = map_find(&requests, REQ_KEY(req));
    if (r) map_del(&requests, r);
}

static MPI_Request *snap;
static int snap_cap;

MPI_Request *pk_snapshot(pk_call *c, int n, const MPI_Request reqs[]) {
    if (c->fid < 0 || n <= 0) return NULL;
    if (n > snap_cap) {
        snap_cap = n > 2 * snap_cap ? n : 2 * snap_cap;
        snap = realloc(snap, (size_t)snap_cap * sizeof(MPI_Request));
    }
    memcpy(snap, reqs, (size_t)n * sizeof(MPI_Request));
    return snap;
}

/* done == NULL: all n completed; else done[k] are the indices of the completed requests (n of them) */
void pk_completed(pk_call *c, const MPI_Request *snapshot, int n, const int *done, MPI_Status *statuses) {
    if (c->fid < 0 || !snapshot) return;
    for (int k = 0; k < n; k++) {
        int i = done ? done[k] : k;
        if (i < 0) continue;
        pk_rec *r = map_find(&requests, REQ_KEY(snapshot[i]));
        if (!r) continue;
        if (r->kind == 1) received(c, r->fid, r->comm, &statuses[done ? k : i], r->rid);
        TRACE(if (r->kind >= 2 && r->rid) {
            pkt_isend_complete(pk_now(), r->rid);
            r->rid = 0; /* a persistent send completes once per start */
        });
        if (!r->persistent) map_del(&requests, r);
    }
}

static MPI_Status *status_buf;
static int status_cap;
MPI_Status *pk_statuses(int n) {
    if (n > status_cap) {
        status_cap = n;
        status_buf = realloc(status_buf, (size_t)n * sizeof(MPI_Status));
    }
    return status_buf;
}

static int *int_buf;
static int int_cap;
int *pk_ints(int n) {
    if (n > int_cap) {
        int_cap = n;
        int_buf = realloc(int_buf, (size_t)n * sizeof(int));
    }
    return int_buf;
}

/* ---------- collectives ---------- */

/* The collective wait, "last arrival - own arrival" (on rank 0's clock) at most the call's duration.
 * A collective that makes every member wait for every other (``synchronising``: Barrier, Allreduce,
 * Allgather(v), Alltoall(v), Reduce_scatter(_block)) ends after the last arrival anyway: its arrival is
 * recorded and settled later in batches (cw_settle), nothing added to the call. A rooted or prefix
 * collective (Bcast, Reduce, Gather(v), Scatter(v), Scan, Exscan) may let a rank leave before the last
 * arrival: a max-reduction of the arrival times runs with it (started here, completed in pk_leave), so
 * that the call ends no earlier than the last arrival, as after a barrier, and the wait is the same
 * quantity. Intercommunicators get a plain barrier before the collective, timed whole. */
void pk_coll_wait(pk_call *c, MPI_Comm comm, int synchronising) {
    TRACE({
        if (c->fid >= 0 && (c->coll_comm = comm_rec(comm)->tid) >= 0) pkt_coll_begin(c->t_enter);
    });
    if (c->fid < 0 || !opt_cw) return;
    double t = pk_now();
    if (comm_rec(comm)->inter) {
        PMPI_Barrier(comm);
        c->t0 = pk_now();
        c->tb = c->t0 - t;
        return;
    }
    c->t0 = t;
    c->cw_arrival = t + clock_offset;
    if (synchronising) {
        c->cw_comm = comm;
        c->cw_pending = 1;
    } else {
        PMPI_Iallreduce(&c->cw_arrival, &c->cw_last, 1, MPI_DOUBLE, MPI_MAX, comm, &c->cw_req);
    }
}

double pk_tsize(MPI_Datatype type) {
    static MPI_Datatype last = MPI_DATATYPE_NULL;
    static int last_size;
    if (type == MPI_DATATYPE_NULL) return 0;
    if (type != last) {
        PMPI_Type_size(type, &last_size);
        last = type;
    }
    return last_size;
}

double pk_bytes(const void *sendbuf, int count, MPI_Datatype type, int alt_count, MPI_Datatype alt_type) {
    if (sendbuf == MPI_IN_PLACE) return (double)alt_count * pk_tsize(alt_type);
    return (double)count * pk_tsize(type);
}

static void coll_account(pk_call *c, double sent, double recv) {
    double *s = main_stat(c);
    TRACE({
        c->coll_sent = sent;
        c->coll_recv = recv;
    });
    if (sent > 0) {
        s[M_BSENT] += sent;
        s[M_CSENT] += 1;
    }
    if (recv > 0) {
        s[M_BRECV] += recv;
        s[M_CRECV] += 1;
    }
    add_hist(c->fid, sent > recv ? sent : recv);
}

/* Collective bytes per pair (with --matrices), recorded by the receiving rank as point-to-point bytes are:
 * what the call's arguments say each member receives from each other member. Bcast and Scatter(v): each
 * member from the root; Reduce and Gather(v): the root from each member (a reduction as if every member sent
 * its buffer to the root); Allgather(v), Alltoall(v/w), Reduce_scatter_block: each member from each other. Not
 * per pair (the payload between two members is the algorithm's): Allreduce, Reduce_scatter, Scan, Exscan,
 * non-blocking collectives; rooted collectives on intercommunicators. A member's own block is not traffic. */
static void coll_from(pk_rec *r, int rank, double bytes) {
    if (!opt_mat || bytes == 0) return;
    int w = to_world(r, rank);
    if (w >= 0) partner(w)->coll += bytes;
}

/* Bcast/Scatter (root_sends=1): root sends bytes_each to every other rank; Reduce/Gather: the reverse */
void pk_coll_rooted(pk_call *c, double bytes_each, int root, MPI_Comm comm, int root_sends) {
    if (c->fid < 0) return;
    pk_rec *r = comm_rec(comm);
    if (r->inter) return;
    int me;
    PMPI_Comm_rank(comm, &me);
    TRACE(c->coll_root = root);
    double many = bytes_each * (r->size - 1);
    if (me == root)
        coll_account(c, root_sends ? many : 0, root_sends ? 0 : many);
    else
        coll_account(c, root_sends ? 0 : bytes_each, root_sends ? bytes_each : 0);
    if (me != root && root_sends)
        coll_from(r, root, bytes_each);
    else if (me == root && !root_sends)
        coll_uniform(r, bytes_each);
}

void pk_coll_rooted_v(pk_call *c, const int counts[], MPI_Datatype type, double own_bytes, int root, MPI_Comm comm,
                      int root_sends) {
    if (c->fid < 0) return;
    pk_rec *r = comm_rec(comm);
    if (r->inter) return;
    int me;
    PMPI_Comm_rank(comm, &me);
    TRACE(c->coll_root = root);
    if (me != root) {
        coll_account(c, root_sends ? 0 : own_bytes, root_sends ? own_bytes : 0);
        if (root_sends) coll_from(r, root, own_bytes);
        return;
    }
    double total = 0, size = pk_tsize(type);
    for (int i = 0; i < r->size; i++)
        if (i != root) {
            total += (double)counts[i] * size;
            if (!root_sends) coll_from(r, i, (double)counts[i] * size);
        }
    coll_account(c, root_sends ? total : 0, root_sends ? 0 : total);
}

/* to_all: the rank exchanges with every other rank (Allgather, Alltoall); else one logical transfer each way */
void pk_coll_all(pk_call *c, double sent_each, double recv_each, MPI_Comm comm, int to_all) {
    if (c->fid < 0) return;
    pk_rec *r = comm_rec(comm);
    double k = to_all ? (double)(r->inter ? r->size : r->size - 1) : 1.0;
    coll_account(c, sent_each * k, recv_each * k);
    if (to_all) coll_uniform(r, recv_each);
}

void pk_coll_all_v(pk_call *c, const int scounts[], MPI_Datatype stype, double sent_each, const int rcounts[],
                   MPI_Datatype rtype, MPI_Comm comm) {
    if (c->fid < 0) return;
    pk_rec *r = comm_rec(comm);
    int me = -1;
    if (!r->inter) PMPI_Comm_rank(comm, &me);
    double sent = 0, recv = 0, ss = pk_tsize(stype), rs = pk_tsize(rtype);
    for (int i = 0; i < r->size; i++) {
        if (i == me) continue;
        sent += scounts ? (double)scounts[i] * ss : sent_each;
        recv += (double)rcounts[i] * rs;
        coll_from(r, i, (double)rcounts[i] * rs);
    }
    coll_account(c, sent, recv);
}

/* Alltoallw: a count and a type per member, each way */
void pk_coll_all_w(pk_call *c, const int scounts[], const MPI_Datatype stypes[], const int rcounts[],
                   const MPI_Datatype rtypes[], MPI_Comm comm) {
    if (c->fid < 0) return;
    pk_rec *r = comm_rec(comm);
    int me = -1;
    if (!r->inter) PMPI_Comm_rank(comm, &me);
    double sent = 0, recv = 0;
    for (int i = 0; i < r->size; i++) {
        if (i == me) continue;
        double in = (double)rcounts[i] * pk_tsize(rtypes[i]);
        sent += (double)scounts[i] * pk_tsize(stypes[i]);
        recv += in;
        coll_from(r, i, in);
    }
    coll_account(c, sent, recv);
}

/* ---------- clocks ---------- */

/* Offset of this rank's clock to rank 0's. Ranks with one host name share a clock (CLOCK_MONOTONIC is per
 * machine); the first rank of each host, its leader, measures the offset and sends it to the others. Leaders
 * take turns: rank 0 hands the turn to each in order, the leader ping-pongs with rank 0 (ping_rank0) and
 * stops once the offset is known within SYNC_GOOD (after SYNC_MIN_ROUNDS), once it has pinged for
 * SYNC_BUDGET, or after SYNC_MAX_ROUNDS. Ranks not ping-ponging wait asleep, so that where ranks outnumber
 * cores the two in a round trip get the processors. Messages go on a private duplicate of MPI_COMM_WORLD,
 * made once, with the leaders, for the measurement at finalize. */
enum { SYNC_MIN_ROUNDS = 2, SYNC_MAX_ROUNDS = 16, TAG_TURN = 1, TAG_PING, TAG_DONE, TAG_SHARE };
static const double SYNC_GOOD = 25e-6, SYNC_BUDGET = 0.03; /* [s] */
static MPI_Comm sync_comm = MPI_COMM_NULL;
static int *sync_leader_of;                                /* world rank -> world rank of its host's leader */
static double clock_bound;                                 /* the most the offset can be off [s] */

/* complete req polling without pause (an MPI library's blocking wait may yield the processor between polls,
 * which costs a round trip a scheduler slice where ranks outnumber cores) */
static void wait_spinning(MPI_Request *req, MPI_Status *st) {
    int done = 0;
    while (!done) PMPI_Test(req, &done, st);
}

/* complete req polling every 1 ms, asleep in between */
static void wait_asleep(MPI_Request *req) {
    const struct timespec pause = {0, 1000000};
    int done = 0;
    for (PMPI_Test(req, &done, MPI_STATUS_IGNORE); !done; PMPI_Test(req, &done, MPI_STATUS_IGNORE))
        nanosleep(&pause, NULL);
}

/* a leader's side: its offset to rank 0's clock [s]; *bound = the most the true offset can differ from it [s].
 * Each round trip (sent at t1, answered with rank 0's time t0, back at t2) puts the true offset in
 * [t0 - t2, t0 - t1]; the answer is the middle of the intersection of these intervals (the shortest round
 * trip's alone if they do not intersect, as when a clock steps). */
static double ping_rank0(double *bound) {
    double best = INFINITY, offset = 0, low = -INFINITY, high = INFINITY, none = 0;
    MPI_Request turn;
    PMPI_Irecv(NULL, 0, MPI_DOUBLE, 0, TAG_TURN, sync_comm, &turn);
    wait_asleep(&turn);
    double start = pk_now();
    for (int k = 0; k < SYNC_MAX_ROUNDS; k++) {
        double t0;
        MPI_Request reply;
        PMPI_Irecv(&t0, 1, MPI_DOUBLE, 0, TAG_PING, sync_comm, &reply);
        double t1 = pk_now();
        PMPI_Send(&t1, 1, MPI_DOUBLE, 0, TAG_PING, sync_comm);
        wait_spinning(&reply, MPI_STATUS_IGNORE);
        double t2 = pk_now();
        low = fmax(low, t0 - t2);
        high = fmin(high, t0 - t1);
        if (t2 - t1 < best) {
            best = t2 - t1;
            offset = t0 - 0.5 * (t1 + t2);
        }
        if (k + 1 >= SYNC_MIN_ROUNDS && (0.5 * (high - low) <= SYNC_GOOD || t2 - start >= SYNC_BUDGET)) break;
    }
    PMPI_Send(&none, 1, MPI_DOUBLE, 0, TAG_DONE, sync_comm);
    if (low <= high) {
        *bound = 0.5 * (high - low);
        return 0.5 * (low + high);
    }
    *bound = 0.5 * best;
    return offset;
}

/* rank 0's side: answer each leader's pings with its clock, one leader after another */
static void answer_leaders(void) {
    for (int peer = 1; peer < world_size; peer++) {
        if (sync_leader_of[peer] != peer) continue;
        PMPI_Send(NULL, 0, MPI_DOUBLE, peer, TAG_TURN, sync_comm);
        for (;;) {
            double t;
            MPI_Status st;
            MPI_Request ping;
            PMPI_Irecv(&t, 1, MPI_DOUBLE, peer, MPI_ANY_TAG, sync_comm, &ping);
            wait_spinning(&ping, &st);
            if (st.MPI_TAG == TAG_DONE) break;
            t = pk_now();
            PMPI_Send(&t, 1, MPI_DOUBLE, peer, TAG_PING, sync_comm);
        }
    }
}

/* the host names of all ranks, each rank's leader */
static void find_leaders(void) {
    char *names = pk_calloc((size_t)world_size, MPI_MAX_PROCESSOR_NAME);
    char *mine = names + (size_t)world_rank * MPI_MAX_PROCESSOR_NAME;
    int len;
    MPI_Request req;
    PMPI_Get_processor_name(mine, &len);
    PMPI_Comm_idup(MPI_COMM_WORLD, &sync_comm, &req);
    wait_asleep(&req);
    PMPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, names, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, sync_comm, &req);
    wait_asleep(&req);
    sync_leader_of = pk_calloc((size_t)world_size, sizeof(int));
    int *leaders = pk_calloc((size_t)world_size, sizeof(int)), nleaders = 0;
    for (int r = 0; r < world_size; r++) {
        const char *name = names + (size_t)r * MPI_MAX_PROCESSOR_NAME;
        int i = 0;
        while (i < nleaders && strncmp(names + (size_t)leaders[i] * MPI_MAX_PROCESSOR_NAME, name,
                                       MPI_MAX_PROCESSOR_NAME) != 0)
            i++;
        if (i == nleaders) leaders[nleaders++] = r;
        sync_leader_of[r] = leaders[i];
    }
    free(leaders);
    free(names);
}

/* the offset [s]; sets clock_bound */
static double clock_sync(void) {
    if (sync_comm == MPI_COMM_NULL) find_leaders();
    double result[2] = {0, 0}; /* offset, bound */
    int leader = sync_leader_of[world_rank];
    if (world_rank == 0) {
        answer_leaders();
    } else if (leader == world_rank) {
        result[0] = ping_rank0(&result[1]);
    } else {
        MPI_Request req;
        PMPI_Irecv(result, 2, MPI_DOUBLE, leader, TAG_SHARE, sync_comm, &req);
        wait_asleep(&req);
    }
    if (leader == world_rank)
        for (int r = world_rank + 1; r < world_size; r++)
            if (sync_leader_of[r] == world_rank) PMPI_Send(result, 2, MPI_DOUBLE, r, TAG_SHARE, sync_comm);
    clock_bound = result[1];
    return result[0];
}

static void clock_sync_free(void) {
    if (sync_comm != MPI_COMM_NULL) PMPI_Comm_free(&sync_comm);
    free(sync_leader_of);
    sync_leader_of = NULL;
}

/* ---------- life cycle ---------- */

static int env_flag(const char *name) {
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

void pk_init_begin(double *t_start) {
    cpu_init_start = pk_cpu_now();
    *t_start = pk_now();
}

void pk_init_end(double t_start, int fid) {
    static int done;
    if (done) return;
    done = 1;
    opt_slt = env_flag("PERFKIT_COLLECT_SLT");
    opt_cw = env_flag("PERFKIT_COLLECT_COLLECTIVE_WAIT");
    opt_mat = env_flag("PERFKIT_COLLECT_MATRICES");
    const char *cpu_flag = getenv("PERFKIT_COLLECT_CPU");
    opt_cpu = !cpu_flag || !*cpu_flag || strcmp(cpu_flag, "0") != 0; /* on unless PERFKIT_COLLECT_CPU=0 */
#ifdef PK_TRACE
    const char *trace_dir = getenv("PERFKIT_COLLECT_TRACE");
    opt_trace = trace_dir && *trace_dir;
#endif
    int aligned = opt_slt || opt_cw;
    TRACE(aligned = 1); /* the trace's timestamps are on rank 0's clock */
    pk_thread = pthread_self();
    PMPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &world_size);
    stats = pk_calloc((size_t)pk_nfunc * PK_NPART * PK_NMETRIC, sizeof(double));
    hist = pk_calloc((size_t)pk_nfunc * PK_NBIN, sizeof(double));
    clock_offset = aligned ? clock_sync() : 0;
    pk_call c = {.fid = 0};
    TRACE({
        const char *mb = getenv("PERFKIT_COLLECT_TRACE_BUFFER_MB");
        if (pkt_open(trace_dir, mb && *mb ? atof(mb) : 64, world_rank, world_size, clock_offset,
                     opt_cpu ? cpu_init_start : NAN) != 0)
            PMPI_Abort(MPI_COMM_WORLD, 74);
    });
    if (opt_slt) { /* the world's shadow, made asleep while the ranks arrive */
        MPI_Request req;
        PMPI_Comm_idup(MPI_COMM_WORLD, &comm_rec(MPI_COMM_WORLD)->shadow, &req);
        wait_asleep(&req);
    }
    pk_comm_new(&c, MPI_COMM_WORLD);
    pk_comm_new(&c, MPI_COMM_SELF);
    if (opt_cpu) cpu_counters(cpu_at_init);
    t_init_end = pk_now();
    TRACE({
        pkt_enter(pkt_region_program(), t_start, cpu_init_start);
        pkt_enter(fid, t_start, cpu_init_start);
        pkt_leave(fid, t_init_end, opt_cpu ? cpu_at_init[C_THREAD] : NAN);
    });
    double *s = stat_of(fid, PART_MAIN);
    s[M_TIME] += t_init_end - t_start;
    s[M_CALLS] += 1;
    s[M_CPU] += opt_cpu ? cpu_at_init[C_THREAD] - cpu_init_start : 0;
    pk_on = 1;
}

/* this rank's records, ROW doubles each: (0, rank, fid, part, time, calls, bytes_sent, calls_sent, bytes_recv,
 * calls_recv, cpu_time) with fid -1 for Compute (cpu_time NaN without CPU measurement); (1, rank, fid, bin,
 * messages); (2, rank, source, 0, bytes, count, time, collective bytes) per partner, in the partner table's order;
 * with CPU measurement, (3, rank, cores allowed, cores online, run-queue wait, voluntary switches, involuntary
 * switches, process CPU time, cores allowed to the node's ranks, CPU quota) over the profiled interval. cpu[] is the change of the C_* counters over it. */
static double *pack(size_t *nrows, double compute, const double cpu[PK_NCPU]) {
    size_t n = 1, cap = 64;
    double *rows = pk_calloc(cap * ROW, sizeof(double));
    double *row = rows;
    row[0] = 0, row[1] = world_rank, row[2] = -1, row[3] = 0, row[4] = compute, row[5] = 1;
    row[4 + M_CPU] = opt_cpu ? cpu[C_THREAD] - mpi_cpu : NAN;
#define NEW_ROW()                                                          \
    do {                                                                   \
        if (n == cap) {                                                    \
            cap *= 2;                                                      \
            rows = realloc(rows, cap * ROW * sizeof(double));              \
            if (!rows) PMPI_Abort(MPI_COMM_WORLD, 70);                     \
        }                                                                  \
        row = rows + n++ * ROW;                                            \
        memset(row, 0, ROW * sizeof(double));                              \
    } while (0)
    for (int f = 0; f < pk_nfunc; f++)
        for (int p = 0; p < PK_NPART; p++) {
            double *s = stat_of(f, p);
            if (s[M_CALLS] == 0) continue;
            NEW_ROW();
            row[0] = 0, row[1] = world_rank, row[2] = f, row[3] = p;
            memcpy(row + 4, s, PK_NMETRIC * sizeof(double));
            if (!opt_cpu || p != PART_MAIN) row[4 + M_CPU] = NAN; /* a call's CPU time is all on its main part */
        }
    for (int f = 0; opt_mat && f < pk_nfunc; f++)
        for (int b = 0; b < PK_NBIN; b++) {
            double messages = hist[(size_t)f * PK_NBIN + b];
            if (messages == 0) continue;
            NEW_ROW();
            row[0] = 1, row[1] = world_rank, row[2] = f, row[3] = b, row[4] = messages;
        }
    for (size_t i = 0; opt_mat && i < partners_cap; i++) {
        const pk_partner *m = &partners[i];
        if (m->rank < 0) continue;
        NEW_ROW();
        row[0] = 2, row[1] = world_rank, row[2] = m->rank;
        row[4] = m->bytes, row[5] = (double)m->count, row[6] = m->time, row[7] = m->coll;
    }
    if (opt_cpu) {
        cpu_set_t mask;
        CPU_ZERO(&mask);
        int known = sched_getaffinity(0, sizeof mask, &mask) == 0;
        double node_cores = node_cores_allowed(&mask); /* collective: every rank measures CPU or none */
        NEW_ROW();
        row[0] = 3, row[1] = world_rank;
        row[2] = known ? CPU_COUNT(&mask) : NAN;
        row[3] = (double)sysconf(_SC_NPROCESSORS_ONLN);
        row[4] = cpu[C_DELAY], row[5] = cpu[C_VOL], row[6] = cpu[C_INVOL], row[7] = cpu[C_PROC];
        row[8] = known ? node_cores : NAN, row[9] = cpu_quota();
    }
#undef NEW_ROW
    *nrows = n;
    return rows;
}

/* this process's peak resident memory so far [KiB] (VmHWM), -1 without /proc */
static long peak_kib(void) {
    FILE *fh = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    if (!fh) return -1;
    while (fgets(line, sizeof line, fh))
        if (sscanf(line, "VmHWM: %ld", &kib) == 1) break;
    fclose(fh);
    return kib;
}

/* rank 0's header: what every record means, the options and the clocks; its length [B] in *len */
static char *header(size_t *len, uint64_t nrows, int host_width, const double clock[3], long unmatched,
                    long other) {
    char *text = NULL;
    FILE *fh = open_memstream(&text, len);
    if (!fh) PMPI_Abort(MPI_COMM_WORLD, 70);
    fprintf(fh, "perfkit-collect 3\nranks %d\nfunctions %d\n", world_size, pk_nfunc);
    for (int f = 0; f < pk_nfunc; f++) fprintf(fh, "%s %d\n", pk_fnames[f], pk_fcollective[f]);
    fprintf(fh, "options slt=%d collective_wait=%d matrices=%d cpu=%d\n", opt_slt, opt_cw, opt_mat, opt_cpu);
    fprintf(fh, "clock_drift %.9g\nclock_offset %.9g\nclock_bound %.9g\n", clock[0], clock[1], clock[2]);
    fprintf(fh, "unmatched_piggybacks %ld\nother_thread_calls %ld\n", unmatched, other);
    fprintf(fh, "rows %llu\nhost_width %d\ndata\n", (unsigned long long)nrows, host_width);
    if (fclose(fh) != 0) PMPI_Abort(MPI_COMM_WORLD, 70);
    return text;
}

/* all of buf at offset, whatever the pieces pwrite takes; 0 when written */
static int write_at(int fd, const void *buf, size_t len, off_t offset) {
    const char *p = buf;
    while (len > 0) {
        ssize_t done = pwrite(fd, p, len, offset);
        if (done < 0 && errno == EINTR) continue;
        if (done <= 0) return 1;
        p += done, len -= (size_t)done, offset += done;
    }
    return 0;
}

/* Write the output into PATH.tmp, every rank its own part at its own offset, renamed to PATH once all have
 * written and closed it: rank 0's header (text, ending with the line "data"), then every rank's records in rank
 * order (ROW doubles each), then every rank's host name (host_width bytes, NUL-padded), then rank 0's trailer
 * (text lines: its time in this function, its peak memory before and at the end [KiB]). Offsets are 64-bit (an
 * exclusive prefix sum of the record counts); no rank holds more than its own records. Rank 0 creates the file
 * before the broadcast of the header's length, which every other rank waits for before opening it. 0 when
 * written. */
static int write_output(const char *path, const double *rows, size_t nrows, const double clock[3], long unmatched,
                        long other, double t_start, long peak_before) {
    enum { HOST_WIDTH = MPI_MAX_PROCESSOR_NAME };
    char tmp[4096], host[HOST_WIDTH], *head = NULL;
    int namelen, bad = 0, bad_any = 0, fd = -1;
    uint64_t mine = nrows, total = 0, before = 0;
    size_t head_len = 0;
    long long start = 0; /* where the records begin [B]; -1: rank 0 could not create the file */
    memset(host, 0, sizeof host);
    PMPI_Get_processor_name(host, &namelen);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    PMPI_Allreduce(&mine, &total, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    PMPI_Exscan(&mine, &before, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    if (world_rank == 0) {
        before = 0; /* MPI_Exscan leaves rank 0's undefined */
        head = header(&head_len, total, HOST_WIDTH, clock, unmatched, other);
        fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        start = fd < 0 ? -1 : (long long)head_len;
    }
    PMPI_Bcast(&start, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
    if (start < 0) {
        if (world_rank == 0) fprintf(stderr, "perfkit collect: cannot create %s: %s\n", tmp, strerror(errno));
        free(head);
        return 1;
    }
    if (world_rank != 0) fd = open(tmp, O_WRONLY);
    off_t hosts_at = (off_t)start + (off_t)(total * ROW * sizeof(double));
    off_t end_at = hosts_at + (off_t)world_size * HOST_WIDTH;
    bad = fd < 0;
    if (!bad && world_rank == 0) bad |= write_at(fd, head, head_len, 0);
    off_t rows_at = (off_t)start + (off_t)(before * ROW * sizeof(double));
    if (!bad) bad |= write_at(fd, rows, nrows * ROW * sizeof(double), rows_at);
    if (!bad) bad |= write_at(fd, host, HOST_WIDTH, hosts_at + (off_t)world_rank * HOST_WIDTH);
    if (!bad && world_rank == 0) {
        char trailer[256];
        int n = snprintf(trailer, sizeof trailer, "finalize_seconds %.9g\nfinalize_peak_before_kib %ld\n"
                         "finalize_peak_kib %ld\nend\n", pk_now() - t_start, peak_before, peak_kib());
        bad |= write_at(fd, trailer, (size_t)n, end_at);
    }
    if (fd >= 0) bad |= close(fd) != 0;
    if (bad) fprintf(stderr, "perfkit collect: rank %d could not write its part of %s\n", world_rank, tmp);
    PMPI_Allreduce(&bad, &bad_any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD); /* every part written and closed */
    free(head);
    if (world_rank != 0) return bad_any;
    if (bad_any || rename(tmp, path) != 0) {
        fprintf(stderr, "perfkit collect: could not write %s\n", path);
        unlink(tmp);
        return 1;
    }
    return 0;
}

void pk_finalize(void) {
    if (!pk_on) return;
    double t_fin = pk_now();
    long peak_before = world_rank == 0 ? peak_kib() : -1;
    pk_on = 0;
    double compute = (t_fin - t_init_end) - mpi_time, cpu[PK_NCPU] = {0};
    if (opt_cpu) {
        cpu_counters(cpu);
        for (int k = 0; k < PK_NCPU; k++) cpu[k] -= cpu_at_init[k];
    }
    TRACE(pkt_enter(pkt_region_finalize(), t_fin, opt_cpu ? cpu[C_THREAD] + cpu_at_init[C_THREAD] : NAN));
    piggyback_drain();
    if (opt_cw) cw_settle_all();
    for (size_t i = 0; opt_mat && i < comms.cap; i++)
        if (comms.slots[i].used) coll_spread(&comms.slots[i]);
    int aligned = opt_slt || opt_cw;
    TRACE(aligned = 1);
    double bound_init = clock_bound, offset_now = aligned ? clock_sync() : 0;
    clock_sync_free();
    /* drift, the largest offset measured (init or finalize) and the largest bound of its error [s] */
    double clock[3] = {fabs(offset_now - clock_offset), fmax(fabs(clock_offset), fabs(offset_now)),
                       fmax(bound_init, clock_bound)}, clock_max[3];
    long counts[2] = {unmatched_piggybacks, other_thread_calls}, totals[2];
    PMPI_Reduce(clock, clock_max, 3, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    PMPI_Reduce(counts, totals, 2, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);

    size_t nrows;
    double *rows = pack(&nrows, compute, cpu);
    const char *path = getenv("PERFKIT_COLLECT_OUT");
    if (path && *path) write_output(path, rows, nrows, clock_max, totals[0], totals[1], t_fin, peak_before);
    free(rows);
#ifdef PK_TRACE
    if (opt_trace) { /* the trace's definitions name every rank's host: gathered on rank 0 */
        char name[MPI_MAX_PROCESSOR_NAME] = {0}, *hosts = NULL;
        int namelen;
        PMPI_Get_processor_name(name, &namelen);
        if (world_rank == 0) hosts = pk_calloc((size_t)world_size, MPI_MAX_PROCESSOR_NAME);
        PMPI_Gather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, hosts, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0,
                    MPI_COMM_WORLD);
        pkt_close(pk_now(), opt_cpu ? pk_cpu_now() : NAN, hosts, bound_init);
        free(hosts);
    }
#endif
}

/* ---------- Fortran ---------- */

/* Open MPI's Fortran MPI_IN_PLACE is the address of a common block */
extern int mpi_fortran_in_place_ __attribute__((weak));
extern int mpi_fortran_in_place __attribute__((weak));
extern int mpi_fortran_in_place__ __attribute__((weak));

const void *pk_f_buf(const void *buf) {
    if ((&mpi_fortran_in_place_ && buf == (const void *)&mpi_fortran_in_place_) ||
        (&mpi_fortran_in_place && buf == (const void *)&mpi_fortran_in_place) ||
        (&mpi_fortran_in_place__ && buf == (const void *)&mpi_fortran_in_place__))
        return MPI_IN_PLACE;
    return buf;
}
