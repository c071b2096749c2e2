/* A fixed set of host threads, one per device, that run the same job on
 * every slot and report back: parallel_apply's threads in dp. Errors are
 * carried back with their messages; the first one wins. */
#ifndef DPS_POOL_H
#define DPS_POOL_H

#include <pthread.h>

#include "core/err.h"

typedef dps_status (*pool_fn)(void *ctx, int slot, int job);

typedef struct pool_arg {
    struct worker_pool *p;
    int slot, dev;
} pool_arg;

typedef struct worker_pool {
    int n;
    pool_arg arg[64];
    pthread_t thread[64];
    pthread_mutex_t mu;
    pthread_cond_t cv_job, cv_done;
    unsigned long gen;
    int job, pending, stop, started;
    pool_fn fn;
    void *ctx;
    const char *name_prefix;
    dps_status rc[64];
    char msg[64][DPS_ERRMSG_MAX];
} worker_pool;

/* Starts n threads named "<prefix><device>" in traces (devs[slot]). */
dps_status pool_start(worker_pool *p, int n, pool_fn fn, void *ctx, const char *prefix,
                      const int *devs) DPS_MUST_USE;
/* Runs job on every slot and waits; returns the first slot's error. */
dps_status pool_run(worker_pool *p, int job) DPS_MUST_USE;
void pool_stop(worker_pool *p);

#endif
