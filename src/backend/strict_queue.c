/* Strict mode's streams run asynchronously, as a GPU's do: each stream slot
 * has a worker thread that runs its queue of closures (a wrapped op and a
 * copy of its arguments) in issue order, concurrently with the other
 * streams and the host. Tickets number the queue's points: an event is a
 * ticket, a wait or a synchronisation waits until the worker has passed
 * it. The first op that fails is kept, the later ones are skipped (CUDA's
 * sticky error), and strict.c reports it at the next synchronisation. */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "backend/strict_queue.h"
#include "core/util.h"

typedef struct sq_item {
    sq_fn fn;
    be_stream *inner;
    const char *op;
    void *args;       /* the copy, freed once run */
    int dev;
} sq_item;

struct squeue {
    backend *be;
    const be_ops *inner;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work, done_cv;
    sq_item *ring;    /* item t (1-based ticket) at ring[(t - 1) % cap] */
    uint64_t cap, issued, done;
    int stop;
    const char *failed_op;
    int reported;     /* sq_failed has returned it */
    char failed_msg[DPS_ERRMSG_MAX];
};

/* The worker takes no asynchronous signal: they go to the host's threads,
 * as they would with a GPU doing the work. */
static void hold_signals(void)
{
    static const int faults[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT, SIGSYS};
    sigset_t held;
    sigfillset(&held);
    for (size_t i = 0; i < sizeof faults / sizeof faults[0]; i++) sigdelset(&held, faults[i]);
    pthread_sigmask(SIG_BLOCK, &held, NULL);
}

/* Runs it, bound to its device, unless an earlier op failed. */
static void run_item(squeue *q, const sq_item *it, int *bound)
{
    pthread_mutex_lock(&q->mu);
    int skip = q->failed_op != NULL;
    pthread_mutex_unlock(&q->mu);
    if (skip) return;
    dps_status rc = DPS_OK;
    if (*bound != it->dev) {
        rc = q->inner->set_device(q->be, it->dev);
        if (!rc) *bound = it->dev;
    }
    if (!rc) rc = it->fn(q->be, it->inner, it->args);
    if (!rc) return;
    pthread_mutex_lock(&q->mu);
    q->failed_op = it->op;
    dps_strlcpy(q->failed_msg, dps_errmsg(), sizeof q->failed_msg);
    pthread_mutex_unlock(&q->mu);
}

static void *worker(void *arg)
{
    squeue *q = arg;
    int bound = -100; /* no device yet */
    hold_signals();
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->stop && q->done == q->issued) pthread_cond_wait(&q->work, &q->mu);
        if (q->done == q->issued) break; /* stopped, and drained */
        sq_item it = q->ring[q->done % q->cap];
        pthread_mutex_unlock(&q->mu);
        run_item(q, &it, &bound);
        free(it.args);
        pthread_mutex_lock(&q->mu);
        q->done++;
        pthread_cond_broadcast(&q->done_cv);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

squeue *sq_start(backend *be, const be_ops *inner)
{
    squeue *q = calloc(1, sizeof *q);
    if (!q) {
        (void)dps_fail(DPS_ERR_RUNTIME, "out of host memory for a strict-mode stream's queue");
        return NULL;
    }
    q->be = be;
    q->inner = inner;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->work, NULL);
    pthread_cond_init(&q->done_cv, NULL);
    if (pthread_create(&q->thread, NULL, worker, q) != 0) {
        pthread_mutex_destroy(&q->mu);
        pthread_cond_destroy(&q->work);
        pthread_cond_destroy(&q->done_cv);
        free(q);
        (void)dps_fail(DPS_ERR_RUNTIME, "cannot start a strict-mode stream's worker thread "
                       "(too many threads?); destroy streams no longer used");
        return NULL;
    }
    return q;
}

void sq_stop(squeue *q)
{
    if (!q) return;
    pthread_mutex_lock(&q->mu);
    q->stop = 1;
    pthread_cond_signal(&q->work);
    pthread_mutex_unlock(&q->mu);
    pthread_join(q->thread, NULL);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->work);
    pthread_cond_destroy(&q->done_cv);
    free(q->ring);
    free(q);
}

/* Room for one more item. Lock held. */
static int grow(squeue *q)
{
    if (q->issued - q->done < q->cap) return 1;
    uint64_t cap = q->cap ? 2 * q->cap : 64;
    sq_item *r = malloc((size_t)cap * sizeof *r);
    if (!r) return 0;
    for (uint64_t t = q->done; t < q->issued; t++) r[t % cap] = q->ring[t % q->cap];
    free(q->ring);
    q->ring = r;
    q->cap = cap;
    return 1;
}

dps_status sq_push(squeue *q, const char *op, sq_fn fn, be_stream *inner, int dev,
                   const void *args, size_t bytes, uint64_t *ticket)
{
    void *copy = bytes ? malloc(bytes) : NULL;
    if (bytes && !copy)
        return dps_fail(DPS_ERR_RUNTIME, "out of host memory queueing %s on its stream", op);
    if (bytes) memcpy(copy, args, bytes);
    pthread_mutex_lock(&q->mu);
    if (!grow(q)) {
        pthread_mutex_unlock(&q->mu);
        free(copy);
        return dps_fail(DPS_ERR_RUNTIME, "out of host memory queueing %s on its stream", op);
    }
    q->ring[q->issued % q->cap] = (sq_item){fn, inner, op, copy, dev};
    q->issued++;
    if (ticket) *ticket = q->issued;
    pthread_cond_signal(&q->work);
    pthread_mutex_unlock(&q->mu);
    return DPS_OK;
}

uint64_t sq_issued(squeue *q)
{
    pthread_mutex_lock(&q->mu);
    uint64_t t = q->issued;
    pthread_mutex_unlock(&q->mu);
    return t;
}

int sq_reached(squeue *q, uint64_t ticket)
{
    pthread_mutex_lock(&q->mu);
    int yes = q->done >= ticket;
    pthread_mutex_unlock(&q->mu);
    return yes;
}

void sq_wait(squeue *q, uint64_t ticket)
{
    pthread_mutex_lock(&q->mu);
    while (q->done < ticket) pthread_cond_wait(&q->done_cv, &q->mu);
    pthread_mutex_unlock(&q->mu);
}

const char *sq_failed(squeue *q, char *msg, size_t len, int *earlier)
{
    pthread_mutex_lock(&q->mu);
    const char *op = q->failed_op;
    if (op) dps_strlcpy(msg, q->failed_msg, len);
    if (earlier) *earlier = q->reported;
    q->reported = op != NULL;
    pthread_mutex_unlock(&q->mu);
    return op;
}

void sq_clear(squeue *q)
{
    pthread_mutex_lock(&q->mu);
    q->failed_op = NULL;
    q->reported = 0;
    q->failed_msg[0] = '\0';
    pthread_mutex_unlock(&q->mu);
}
