/* Keeps a UCX worker progressing while MPICH's MPI_Finalize waits in its PMI barrier.
 *
 * MPICH 4.0 (ch4:ucx) closes every endpoint with ucp_disconnect_nb, progresses until its own closes
 * are done, then blocks in a PMI barrier without progressing UCX. Over TCP, a close on one rank can
 * need an answer from a peer that already sits in that barrier (the peer's listening thread accepts
 * the connection, but only the worker's progress answers it), so the two wait for each other
 * forever. Newer MPICH releases moved the barrier before the closes. Preloaded, this library starts
 * a thread at the first ucp_disconnect_nb that progresses the worker every millisecond until
 * ucp_worker_destroy; a mutex serialises it with the MPI library's own calls into the worker.
 * It links against nothing: the UCX functions are looked up when first called, so any process may
 * preload it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

typedef void *pk_ptr;

static pthread_mutex_t lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static pk_ptr worker;           /* the worker MPI progresses (the last one seen) */
static pthread_t thread;
static int running;             /* 1 while the progress thread runs */
static volatile int stopping;

static void *next(const char *name)
{
    void *fn = dlsym(RTLD_NEXT, name);
    if (!fn)
        abort(); /* only reached from inside UCX's own callers, so UCX is loaded */
    return fn;
}

#define REAL(ret, name, ...)                                        \
    static ret (*real)(__VA_ARGS__);                                \
    if (!real)                                                      \
        real = (ret (*)(__VA_ARGS__))next(name)

static void *progress_loop(void *arg)
{
    REAL(unsigned, "ucp_worker_progress", pk_ptr);
    struct timespec pause = {0, 1000000};
    (void)arg;
    while (!stopping) {
        pthread_mutex_lock(&lock);
        if (worker)
            real(worker);
        pthread_mutex_unlock(&lock);
        nanosleep(&pause, NULL);
    }
    return NULL;
}

unsigned ucp_worker_progress(pk_ptr w)
{
    REAL(unsigned, "ucp_worker_progress", pk_ptr);
    pthread_mutex_lock(&lock);
    worker = w;
    unsigned done = real(w);
    pthread_mutex_unlock(&lock);
    return done;
}

pk_ptr ucp_disconnect_nb(pk_ptr ep)
{
    REAL(pk_ptr, "ucp_disconnect_nb", pk_ptr);
    pthread_mutex_lock(&lock);
    if (!running && worker) {
        stopping = 0;
        running = pthread_create(&thread, NULL, progress_loop, NULL) == 0;
    }
    pk_ptr request = real(ep);
    pthread_mutex_unlock(&lock);
    return request;
}

int ucp_request_is_completed(pk_ptr request)
{
    REAL(int, "ucp_request_is_completed", pk_ptr);
    pthread_mutex_lock(&lock);
    int done = real(request);
    pthread_mutex_unlock(&lock);
    return done;
}

void ucp_request_release(pk_ptr request)
{
    REAL(void, "ucp_request_release", pk_ptr);
    pthread_mutex_lock(&lock);
    real(request);
    pthread_mutex_unlock(&lock);
}

void ucp_worker_release_address(pk_ptr w, pk_ptr address)
{
    REAL(void, "ucp_worker_release_address", pk_ptr, pk_ptr);
    pthread_mutex_lock(&lock);
    real(w, address);
    pthread_mutex_unlock(&lock);
}

void ucp_worker_destroy(pk_ptr w)
{
    REAL(void, "ucp_worker_destroy", pk_ptr);
    if (running) {
        stopping = 1;
        pthread_join(thread, NULL);
        running = 0;
    }
    pthread_mutex_lock(&lock);
    if (worker == w)
        worker = NULL;
    real(w);
    pthread_mutex_unlock(&lock);
}
