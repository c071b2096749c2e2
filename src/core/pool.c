/* Worker threads for dp's per-device forward and backward (see pool.h). */
#include <stdio.h>
#include <string.h>

#include "core/pool.h"
#include "core/nvtx.h"

static void *worker_main(void *arg)
{
    pool_arg *a = arg;
    worker_pool *p = a->p;
    char name[32];
    snprintf(name, sizeof name, "%s%d", p->name_prefix, a->dev);
    nvtx_name_thread(name);
    unsigned long seen = 0;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (!p->stop && p->gen == seen) pthread_cond_wait(&p->cv_job, &p->mu);
        if (p->stop) {
            pthread_mutex_unlock(&p->mu);
            return NULL;
        }
        seen = p->gen;
        int job = p->job;
        pthread_mutex_unlock(&p->mu);

        dps_status rc = p->fn(p->ctx, a->slot, job);

        pthread_mutex_lock(&p->mu);
        p->rc[a->slot] = rc;
        if (rc) snprintf(p->msg[a->slot], DPS_ERRMSG_MAX, "%s", dps_errmsg());
        if (--p->pending == 0) pthread_cond_signal(&p->cv_done);
        pthread_mutex_unlock(&p->mu);
    }
}

dps_status pool_start(worker_pool *p, int n, pool_fn fn, void *ctx, const char *prefix,
                      const int *devs)
{
    memset(p, 0, sizeof *p);
    if (n > 64) return dps_fail(DPS_ERR_RUNTIME, "worker pool: %d threads, at most 64", n);
    p->fn = fn;
    p->ctx = ctx;
    p->name_prefix = prefix;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_job, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    p->started = 1;
    for (int i = 0; i < n; i++) {
        pool_arg *a = &p->arg[i];
        a->p = p;
        a->slot = i;
        a->dev = devs[i];
        int err = pthread_create(&p->thread[i], NULL, worker_main, a);
        if (err) {
            pool_stop(p);
            return dps_fail(DPS_ERR_RUNTIME, "cannot start worker thread %d: %s", i,
                            strerror(err));
        }
        p->n = i + 1;
    }
    return DPS_OK;
}

dps_status pool_run(worker_pool *p, int job)
{
    pthread_mutex_lock(&p->mu);
    p->job = job;
    p->pending = p->n;
    p->gen++;
    pthread_cond_broadcast(&p->cv_job);
    while (p->pending > 0) pthread_cond_wait(&p->cv_done, &p->mu);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n; i++)
        if (p->rc[i]) return dps_fail_copy(p->rc[i], p->msg[i]);
    return DPS_OK;
}

void pool_stop(worker_pool *p)
{
    if (!p->started) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->cv_job);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n; i++) pthread_join(p->thread[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv_job);
    pthread_cond_destroy(&p->cv_done);
    p->started = 0;
}
