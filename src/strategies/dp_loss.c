/* dp's loss on device 0 over the whole gathered batch (see dp_state.h). As
 * nn.CrossEntropyLoss runs it under DataParallel (torch): log-softmax
 * materialised and kept for backward, then the negative log-likelihood and
 * its gradient, then log-softmax's backward into the logits' gradient, each
 * an n x C tensor alive beside the gathered logits; under autocast the
 * logits' fp32 cast first (freed once read, so the gradient takes its
 * buffer) and the gradient's cast back last (docs/method.md, "The loss's
 * tensors"). Lean: one fused pass writing only the logits' gradient. */
#include <stdlib.h>
#include <string.h>

#include "strategies/dp_state.h"

static dps_status loss_torch(dp_state *st, int n, int classes, float scale)
{
    backend *be = st->be;
    be_stream *s0 = st->s[0].st;
    DPS_TRY(be->ops->log_softmax(be, s0, n, classes, st->logitsv, st->logp.ptr));
    DPS_TRY(be->ops->nll(be, s0, n, classes, st->logp.ptr, st->labels_full.ptr, scale,
                         st->row_loss.ptr, st->dlogp.ptr));
    return be->ops->log_softmax_bwd(be, s0, n, classes, st->logp.ptr, st->dlogp.ptr,
                                    st->dlogitsv);
}

/* Test-only, read here alone: DPSCALE_TEST_PLANT=host_read makes dp memcpy
 * the loss from device memory on the host instead of having the backend
 * copy it, the mistake the host backend's strict device memory must catch
 * (tests/test_strict_devmem.py); without strict mode the host backend's
 * devices are host memory and the read goes unnoticed. Never set it
 * outside that test. */
static int plant_host_read(void)
{
    const char *v = getenv("DPSCALE_TEST_PLANT");
    return v && strcmp(v, "host_read") == 0;
}

dps_status dp_loss(dp_state *st)
{
    backend *be = st->be;
    dp_slot *s0 = &st->s[0];
    int n = st->rows_total, classes = st->net->classes;
    /* the step's mean over its micro-steps (loss / accum), scaled by the GradScaler */
    float scale = scaler_loss_factor(&st->scaler) / (float)st->rows_step;
    DPS_TRY(ptimer_begin(st->timer, 0, PH_LOSS));
    DPS_TRY(op_trace_loss(&st->optr, n, classes));
    int64_t nc = (int64_t)n * classes;
    if (dp_autocast(st)) /* logits.float(): autocast's cross_entropy runs in fp32 */
        DPS_TRY(be->ops->cast(be, s0->st, nc, st->logits16v, st->half, st->logitsv, BE_F32));
    if (st->cfg->dp_impl == DPIMPL_TORCH)
        DPS_TRY(loss_torch(st, n, classes, scale));
    else
        DPS_TRY(be->ops->xent(be, s0->st, n, classes, st->logitsv, st->labels_full.ptr, scale,
                              st->dlogitsv, st->row_loss.ptr));
    if (st->step == st->cfg->overflow_step && st->micro == st->cfg->accum - 1)
        DPS_TRY(scaler_plant_inf(&st->scaler, be, s0->st, st->dlogitsv, s0->dev));
    if (dp_autocast(st)) /* that cast's backward: the gradient in half precision, for the scatter */
        DPS_TRY(be->ops->cast(be, s0->st, nc, st->dlogitsv, BE_F32, st->logits16v, st->half));
    float *loss = (float *)st->loss.ptr + st->micro;
    DPS_TRY(be->ops->sum(be, s0->st, n, st->row_loss.ptr, loss));
    if (plant_host_read()) { /* test-only: a host memcpy from the device's loss */
        DPS_TRY(be->ops->stream_sync(be, s0->st));
        memcpy(st->h_loss + st->micro, loss, sizeof(float));
    } else {
        DPS_TRY(be->ops->copy(be, s0->st, st->h_loss + st->micro, DPS_HOST, loss, s0->dev,
                              sizeof(float)));
    }
    dp_count(st, 0, PH_LOSS, LINK_D2H, sizeof(float));
    DPS_TRY(op_trace_end(&st->optr));
    return ptimer_end(st->timer, 0, PH_LOSS);
}
