/* A sharded strategy's view of the flat parameter and gradient buffers:
 * before each unit of layers runs its forward or its backward, the
 * strategy makes that unit's parameters (and, in backward, its gradients)
 * addressable at their flat offsets, from bases it sets, so that the model
 * never needs the whole model's parameters or gradients at once. */
#ifndef DPS_WINDOW_H
#define DPS_WINDOW_H

#include "core/err.h"

typedef struct net_window {
    /* Unit `unit` is about to run its forward (backward 0) or backward (1):
     * *params (and *grads in backward) become bases from which the unit's
     * tensors are at their flat offsets: base + offset lies in the unit's
     * buffer for every offset of the unit (the bases themselves may point
     * outside any buffer and are never read). */
    dps_status (*enter)(void *ctx, int unit, int backward, const float **params, float **grads);
    void *ctx;
    const int *unit_of;   /* a model file's: each op's unit, -1 for an op without parameters;
                             the MLP's layer l (the classifier: layers) is unit l */
} net_window;

#endif
