/* Layout of and accessors into a ddp run's shared region, and its records
 * read back as one result (see ddp_shared.h). */
#include <stdlib.h>
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

/* The ranks' records as one result (see ddp.h). */
void ddp_collect(const dps_config *c, ddp_shared *sh, train_result *res)
{
    int n = c->ngpus, steps = c->steps, losses = c->steps + c->warmup;
    for (int r = 0; r < n; r++) {
        if (sh->rank[r].steps_done < steps) steps = sh->rank[r].steps_done;
        if (sh->rank[r].losses_done < losses) losses = sh->rank[r].losses_done;
        res->dev[r] = sh->rank[r].dev;
        res->dev[r].dev = c->devices[r];
    }
    for (int k = 0; k < steps; k++) {
        res->step_ms[k] = 0.0;
        for (int r = 0; r < n; r++) {
            double ms = ddp_shared_step_ms(sh, r)[k];
            res->rank_step_ms[(size_t)k * n + r] = ms;
            if (ms > res->step_ms[k]) res->step_ms[k] = ms;
            memcpy(train_result_phases(res, k, r), ddp_shared_phase_ms(sh, r) + (size_t)k * PH_COUNT,
                   PH_COUNT * sizeof(float));
        }
    }
    double rows = (double)c->global_batch * c->shape.tokens;
    for (int k = 0; k < losses; k++) {
        double sum = 0.0;
        for (int r = 0; r < n; r++) sum += ddp_shared_loss_sum(sh, r)[k];
        res->loss[k] = (float)(sum / rows);
    }
    res->steps_done = steps;
    res->losses_done = losses;
    res->allreduce_bytes = sh->rank[0].allreduce_bytes;
}

/* What pack writes first: the shapes the receiver checks. */
typedef struct pack_head { uint32_t magic, report_bytes; int32_t rank, steps, warmup; } pack_head;
#define PACK_MAGIC 0x64707372u

static size_t pack_bytes(const ddp_shared *sh)
{
    return sizeof(pack_head) + sizeof(ddp_report) + (size_t)sh->steps * sizeof(double) +
           (size_t)sh->steps * PH_COUNT * sizeof(float) +
           (size_t)(sh->steps + sh->warmup) * sizeof(double);
}

/* The three record arrays of rank r, with their sizes. */
static void records(ddp_shared *sh, int r, void *at[3], size_t bytes[3])
{
    at[0] = ddp_shared_step_ms(sh, r);
    at[1] = ddp_shared_phase_ms(sh, r);
    at[2] = ddp_shared_loss_sum(sh, r);
    bytes[0] = (size_t)sh->steps * sizeof(double);
    bytes[1] = (size_t)sh->steps * PH_COUNT * sizeof(float);
    bytes[2] = (size_t)(sh->steps + sh->warmup) * sizeof(double);
}

void *ddp_shared_pack(ddp_shared *sh, int r, size_t *len)
{
    *len = pack_bytes(sh);
    char *buf = malloc(*len), *p = buf;
    if (!buf) return NULL;
    pack_head h = {PACK_MAGIC, sizeof(ddp_report), r, sh->steps, sh->warmup};
    memcpy(p, &h, sizeof h);
    memcpy(p += sizeof h, &sh->rank[r], sizeof(ddp_report));
    p += sizeof(ddp_report);
    void *at[3];
    size_t bytes[3];
    records(sh, r, at, bytes);
    for (int i = 0; i < 3; p += bytes[i], i++) memcpy(p, at[i], bytes[i]);
    return buf;
}

dps_status ddp_shared_unpack(ddp_shared *sh, int r, const void *buf, size_t len)
{
    pack_head h;
    const char *p = buf;
    if (len >= sizeof h) memcpy(&h, p, sizeof h);
    if (len != pack_bytes(sh) || h.magic != PACK_MAGIC || h.report_bytes != sizeof(ddp_report) ||
        h.rank != r || h.steps != sh->steps || h.warmup != sh->warmup)
        return dps_fail(DPS_ERR_RUNTIME, "rank %d's records do not fit rank 0's (%zu bytes): is "
                        "every rank the same dpscale build with the same options?", r, len);
    memcpy(&sh->rank[r], p += sizeof h, sizeof(ddp_report));
    p += sizeof(ddp_report);
    void *at[3];
    size_t bytes[3];
    records(sh, r, at, bytes);
    for (int i = 0; i < 3; p += bytes[i], i++) memcpy(at[i], p, bytes[i]);
    return DPS_OK;
}

dps_status ddp_copy_params(ddp_shared *sh, train_result *res)
{
    res->nparams = sh->nparams;
    res->final_params = malloc(sh->nparams * sizeof(float));
    if (!res->final_params)
        return dps_fail(DPS_ERR_RUNTIME, "out of host memory for the final parameters");
    memcpy(res->final_params, ddp_shared_params(sh), sh->nparams * sizeof(float));
    return DPS_OK;
}
