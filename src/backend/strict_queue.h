/* Strict mode's asynchronous streams (strict_queue.c): a worker thread a
 * stream slot that runs the slot's queue of closures in issue order, with
 * tickets that say how far it has come. Used by strict.c and strict_ops.c. */
#ifndef DPS_BACKEND_STRICT_QUEUE_H
#define DPS_BACKEND_STRICT_QUEUE_H

#include <stdint.h>

#include "backend/backend.h"

typedef struct squeue squeue;
/* A closure's body: the wrapped op on the wrapped backend's stream inner,
 * its arguments the copy sq_push made. */
typedef dps_status (*sq_fn)(backend *be, be_stream *inner, const void *args);

/* A queue and its worker, which binds itself to each item's device. NULL
 * with the failure set when out of memory or threads. */
squeue *sq_start(backend *be, const be_ops *inner) DPS_MUST_USE;
/* Drains the queue, ends the worker and frees everything. */
void sq_stop(squeue *q);
/* Queues op (its name, a string literal) on inner of device dev: fn with
 * a copy of args' bytes; *ticket (may be NULL) is the point it completes. */
dps_status sq_push(squeue *q, const char *op, sq_fn fn, be_stream *inner, int dev,
                   const void *args, size_t bytes, uint64_t *ticket) DPS_MUST_USE;
/* The ticket of everything queued so far. */
uint64_t sq_issued(squeue *q);
/* Whether the worker has run the queue up to ticket. */
int sq_reached(squeue *q, uint64_t ticket);
/* Blocks the calling thread until the worker has run the queue up to ticket. */
void sq_wait(squeue *q, uint64_t ticket);
/* The first op that failed as it ran (NULL: none) and its message; the
 * ops queued after it were skipped. *earlier (may be NULL): whether an
 * earlier call returned it already. */
const char *sq_failed(squeue *q, char *msg, size_t len, int *earlier);
/* Forgets the failure (the slot's stream was destroyed). */
void sq_clear(squeue *q);

#endif
