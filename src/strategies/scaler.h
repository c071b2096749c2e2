/* GradScaler, as torch.cuda.amp.GradScaler runs it: the loss scaled before
 * backward, the gradients unscaled and checked for inf or NaN once a step
 * (the host waits for that check, as scaler.step does), the step skipped
 * and the scale halved on one, the scale doubled after growth_interval
 * clean steps. The scale lives on the host: every rank of a ddp group
 * checks the same all-reduced gradients, so every rank decides the same;
 * a rank of ZeRO-2 or FSDP checks its gradient shard and all-reduces what
 * it found, as torch.distributed.fsdp's ShardedGradScaler does. */
#ifndef DPS_SCALER_H
#define DPS_SCALER_H

#include "backend/backend.h"
#include "comm/comm.h"
#include "config/config.h"

typedef struct grad_scaler {
    int on;                 /* config_scaler: 0 leaves every step alone, scale 1 */
    float scale;            /* the scale this step's loss is multiplied by */
    int tracker;            /* clean steps since the scale last changed */
    int growth_interval;
    dps_buf found;          /* one float on the device: an inf or NaN was found */
    float *found_host;      /* pinned: [0] the flag read back, [1] +inf (--inject-overflow's) */
} grad_scaler;

/* c's scaler on device dev (its flag buffer allocated only when on). */
dps_status scaler_init(grad_scaler *g, const dps_config *c, backend *be, int dev) DPS_MUST_USE;
void scaler_free(grad_scaler *g, backend *be);
/* The loss's factor this step: the scale, or 1 without a scaler. */
float scaler_loss_factor(const grad_scaler *g);
/* unscale_: n gradients times 1 / scale on st, then the host waits for
 * whether one was inf or NaN (*found): st's work alone, so a step's
 * collectives must be waited for (watched) before. shards (NULL: none):
 * the gradients are this rank's shard, and what each rank found is
 * all-reduced over it (ShardedGradScaler's all_reduce of found_inf). */
dps_status scaler_unscale(grad_scaler *g, backend *be, be_stream *st, float *grads, int64_t n,
                          comm *shards, int *found) DPS_MUST_USE;
/* update(): the scale after a step that found (1) or did not find an inf. */
void scaler_update(grad_scaler *g, int found);
/* A +inf written into the device float at p on st (--inject-overflow). */
dps_status scaler_plant_inf(grad_scaler *g, backend *be, be_stream *st, float *p,
                            int dev) DPS_MUST_USE;

#endif
