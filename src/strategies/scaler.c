/* GradScaler's dynamic loss scaling (see scaler.h). */
#include <math.h>

#include "strategies/scaler.h"

#define SCALER_GROWTH 2.0f  /* GradScaler's growth_factor */
#define SCALER_BACKOFF 0.5f /* and backoff_factor */

dps_status scaler_init(grad_scaler *g, const dps_config *c, backend *be, int dev)
{
    *g = (grad_scaler){.on = config_scaler(c), .scale = (float)c->init_scale,
                       .growth_interval = c->growth_interval};
    if (!g->on) return DPS_OK;
    DPS_TRY(be_buf_alloc(be, dev, sizeof(float), "GradScaler's inf flag", &g->found));
    DPS_TRY(be->ops->host_alloc(be, 2 * sizeof(float), (void **)&g->found_host));
    g->found_host[1] = INFINITY;
    return DPS_OK;
}

void scaler_free(grad_scaler *g, backend *be)
{
    be_buf_free(be, &g->found);
    if (g->found_host) be->ops->host_free(be, g->found_host);
    g->found_host = NULL;
}

float scaler_loss_factor(const grad_scaler *g) { return g->on ? g->scale : 1.0f; }

dps_status scaler_unscale(grad_scaler *g, backend *be, be_stream *st, float *grads, int64_t n,
                          comm *shards, int *found)
{
    const be_ops *o = be->ops;
    DPS_TRY(o->memset0(be, st, g->found.ptr, sizeof(float)));
    DPS_TRY(o->unscale(be, st, n, grads, 1.0f / g->scale, g->found.ptr));
    if (shards) { /* the flag complete before the communicator's stream reads it */
        DPS_TRY(o->stream_sync(be, st));
        DPS_TRY(comm_allreduce(shards, g->found.ptr, 1, COMM_F32));
    }
    DPS_TRY(o->copy(be, st, g->found_host, DPS_HOST, g->found.ptr, g->found.dev, sizeof(float)));
    DPS_TRY(o->stream_sync(be, st));
    *found = *g->found_host != 0.0f;
    return DPS_OK;
}

void scaler_update(grad_scaler *g, int found)
{
    if (found) {
        g->scale *= SCALER_BACKOFF;
        g->tracker = 0;
        return;
    }
    if (++g->tracker == g->growth_interval) {
        float grown = g->scale * SCALER_GROWTH;
        if (isfinite(grown)) g->scale = grown; /* as _amp_update_scale_: never to inf */
        g->tracker = 0;
    }
}

dps_status scaler_plant_inf(grad_scaler *g, backend *be, be_stream *st, float *p, int dev)
{
    return be->ops->copy(be, st, p, dev, &g->found_host[1], DPS_HOST, sizeof(float));
}
