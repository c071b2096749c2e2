/* The batches of the coming steps on a helper thread (see batches.h). */
#include <string.h>

#include "core/nvtx.h"
#include "model/batches.h"

/* Step k's pieces, one after another in its buffers. */
static void make_pieces(batches *b, int k)
{
    size_t xs = (size_t)b->samples * b->net->input, ls = (size_t)b->samples * (size_t)b->net->rows;
    for (int p = 0; p < b->pieces; p++)
        net_make_batch(b->net, b->seed, k, b->sample0 + p * b->stride, b->samples,
                       b->x[k % 2] + p * xs, b->labels[k % 2] + p * ls);
}

static void *batches_thread(void *arg)
{
    batches *b = arg;
    nvtx_name_thread("batches");
    pthread_mutex_lock(&b->mu);
    while (!b->stop) {
        if (b->asked <= b->made) {
            pthread_cond_wait(&b->cv, &b->mu);
            continue;
        }
        int k = b->asked;
        pthread_mutex_unlock(&b->mu);
        make_pieces(b, k);
        pthread_mutex_lock(&b->mu);
        b->made = k;
        pthread_cond_broadcast(&b->cv);
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

/* Asks for step k (lock held). */
static void ask(batches *b, int k)
{
    if (k >= b->steps || k <= b->asked) return;
    b->asked = k;
    pthread_cond_broadcast(&b->cv);
}

static dps_status buffers(batches *b)
{
    size_t n = (size_t)b->samples * (size_t)b->pieces;
    size_t xb = n * b->net->input * sizeof(float);
    size_t lb = n * (size_t)b->net->rows * sizeof(int32_t);
    for (int i = 0; i < 2; i++) {
        DPS_TRY(b->be->ops->host_alloc(b->be, xb, (void **)&b->x[i]));
        DPS_TRY(b->be->ops->host_alloc(b->be, lb,
                                       (void **)&b->labels[i]));
    }
    return DPS_OK;
}

dps_status batches_start(batches *b, backend *be, const net *n, uint64_t seed, int64_t sample0,
                         int samples, int pieces, int64_t stride, int steps, int ahead)
{
    *b = (batches){.be = be, .net = n, .seed = seed, .sample0 = sample0, .samples = samples,
                   .pieces = pieces, .stride = stride, .steps = steps, .ahead = ahead,
                   .asked = -1, .made = -1};
    DPS_TRY(buffers(b));
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    int err = pthread_create(&b->thread, NULL, batches_thread, b);
    if (err) {
        pthread_cond_destroy(&b->cv);
        pthread_mutex_destroy(&b->mu);
        return dps_fail(DPS_ERR_RUNTIME, "%s:%d: cannot start the thread that makes the batches: "
                        "%s; the process may be at its thread limit (ulimit -u)", __FILE__,
                        __LINE__, strerror(err));
    }
    b->started = 1;
    pthread_mutex_lock(&b->mu);
    if (ahead) ask(b, 0);
    pthread_mutex_unlock(&b->mu);
    return DPS_OK;
}

void batches_get(batches *b, int step, const float **x, const int32_t **labels)
{
    pthread_mutex_lock(&b->mu);
    ask(b, step);
    while (b->made < step) pthread_cond_wait(&b->cv, &b->mu);
    if (b->ahead) ask(b, step + 1);
    pthread_mutex_unlock(&b->mu);
    *x = b->x[step % 2];
    *labels = b->labels[step % 2];
}

void batches_stop(batches *b)
{
    if (b->started) {
        pthread_mutex_lock(&b->mu);
        b->stop = 1;
        pthread_cond_broadcast(&b->cv);
        pthread_mutex_unlock(&b->mu);
        pthread_join(b->thread, NULL);
        pthread_cond_destroy(&b->cv);
        pthread_mutex_destroy(&b->mu);
        b->started = 0;
    }
    for (int i = 0; i < 2; i++) {
        if (b->x[i]) b->be->ops->host_free(b->be, b->x[i]);
        if (b->labels[i]) b->be->ops->host_free(b->be, b->labels[i]);
        b->x[i] = NULL;
        b->labels[i] = NULL;
    }
}
