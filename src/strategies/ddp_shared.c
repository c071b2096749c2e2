/* Layout of and accessors into a ddp run's shared region (see ddp_shared.h). */
#include <string.h>

#include "strategies/ddp_shared.h"
#include "model/model.h"

static size_t align64(size_t x) { return (x + 63) & ~(size_t)63; }

void ddp_shared_layout(const dps_config *cfg, ddp_shared *sh)
{
    memset(sh, 0, sizeof *sh);
    sh->nranks = cfg->ngpus;
    sh->steps = cfg->steps;
    sh->warmup = cfg->warmup;
    sh->nparams = model_param_count(cfg->shape);
    size_t n = (size_t)cfg->ngpus, off = align64(sizeof *sh);
    sh->off_step_ms = off;
    off = align64(off + n * (size_t)cfg->steps * sizeof(double));
    sh->off_phase_ms = off;
    off = align64(off + n * (size_t)cfg->steps * PH_COUNT * sizeof(float));
    sh->off_loss = off;
    off = align64(off + n * (size_t)(cfg->steps + cfg->warmup) * sizeof(double));
    sh->off_params = off;
    off = align64(off + sh->nparams * sizeof(float));
    sh->off_comm = off;
    sh->total = off + comm_shared_bytes(cfg->ngpus);
}

double *ddp_shared_step_ms(ddp_shared *sh, int r)
{
    return (double *)((char *)sh + sh->off_step_ms) + (size_t)r * sh->steps;
}

float *ddp_shared_phase_ms(ddp_shared *sh, int r)
{
    return (float *)((char *)sh + sh->off_phase_ms) + (size_t)r * sh->steps * PH_COUNT;
}

double *ddp_shared_loss_sum(ddp_shared *sh, int r)
{
    return (double *)((char *)sh + sh->off_loss) + (size_t)r * (sh->steps + sh->warmup);
}

float *ddp_shared_params(ddp_shared *sh) { return (float *)((char *)sh + sh->off_params); }

comm_shared *ddp_shared_comm(ddp_shared *sh) { return (comm_shared *)((char *)sh + sh->off_comm); }
