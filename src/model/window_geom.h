/* A model file's resample window (model_file.h's mf_window) as the
 * backends' dps_window (kernels/windowed.h), whose functions give its
 * output's geometry. */
#ifndef DPS_WINDOW_GEOM_H
#define DPS_WINDOW_GEOM_H

#include "model/model_file.h"
#include "windowed.h"

_Static_assert(MF_POOL_NONE == DPS_POOL_NONE && MF_POOL_MAX == DPS_POOL_MAX &&
               MF_POOL_AVG == DPS_POOL_AVG, "mf_pool and DPS_POOL_* number the poolings alike");

static inline dps_window mf_window_geom(const mf_window *w)
{
    return (dps_window){.c = w->c, .h = w->h, .w = w->w, .kh = w->kh, .kw = w->kw, .sh = w->sh,
                        .sw = w->sw, .ph = w->ph, .pw = w->pw, .dh = w->dh, .dw = w->dw,
                        .pool = (int)w->pool, .groups = w->groups ? w->groups : 1};
}

#endif
