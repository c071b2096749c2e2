/* Layout of and accessors into a ddp run's shared region, and its records
 * read back as one result (see ddp_shared.h). */
#include <stdlib.h>
#include <string.h>

#include "strategies/ddp_shared.h"
#include "strategies/sharded.h"
#include "model/net.h"

static size_t align64(size_t x) { return (x + 63) & ~(size_t)63; }

void ddp_shared_layout(const dps_config *cfg, ddp_shared *sh)
{
    memset(sh, 0, sizeof *sh);
    sh->nranks = cfg->ngpus;
    sh->steps = cfg->steps;
    sh->warmup = cfg->warmup;
    sh->nparams = config_params(cfg);
    sh->trace_steps = timeline_steps(cfg->trace_steps, cfg->steps);
    net own; /* the ranks' buckets, as ddp.c makes them; none without host memory, which the
              * ranks' own set-up then reports */
    const net *m = NULL;
    int nbk = config_net(cfg, &own, &m) == DPS_OK
        ? net_buckets(m, cfg->first_bucket_mb, cfg->bucket_mb, NULL, DPS_MAX_BUCKETS) : 0;
    int nunits = m ? m->nunits : 0;
    net_free(&own);
    sh->micro = cfg->accum;
    /* every micro-step all-reduces without no_sync; the sharded strategies' units' */
    sh->max_spans = nbk > 0 ? shard_max_collectives(shard_level_of(cfg->mode), nunits, nbk,
                                                    cfg->accum, cfg->no_sync) : 0;
    size_t n = (size_t)cfg->ngpus, t = (size_t)sh->trace_steps, off = align64(sizeof *sh);
    sh->off_step_ms = off;
    off = align64(off + n * (size_t)cfg->steps * sizeof(double));
    sh->off_phase_ms = off;
    off = align64(off + n * (size_t)cfg->steps * PH_COUNT * sizeof(float));
    sh->off_loss = off;
    off = align64(off + n * (size_t)(cfg->steps + cfg->warmup) * sizeof(double));
    sh->off_params = off;
    off = align64(off + sh->nparams * sizeof(float));
    sh->off_tl_phase = off;
    off = align64(off + n * t * (size_t)sh->micro * PH_COUNT * sizeof(tl_phase));
    sh->off_tl_span = off;
    off = align64(off + n * t * (size_t)sh->max_spans * sizeof(tl_span));
    sh->off_tl_nspans = off;
    off = align64(off + n * t * sizeof(int));
    sh->off_scaler = off;
    off = align64(off + n * (size_t)cfg->steps * sizeof(step_scaler));
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

tl_phase *ddp_shared_tl_phase(ddp_shared *sh, int r)
{
    return (tl_phase *)((char *)sh + sh->off_tl_phase) +
           (size_t)r * sh->trace_steps * (size_t)sh->micro * PH_COUNT;
}

step_scaler *ddp_shared_scaler(ddp_shared *sh, int r)
{
    return (step_scaler *)((char *)sh + sh->off_scaler) + (size_t)r * sh->steps;
}

tl_span *ddp_shared_tl_span(ddp_shared *sh, int r)
{
    return (tl_span *)((char *)sh + sh->off_tl_span) + (size_t)r * sh->trace_steps * sh->max_spans;
}

int *ddp_shared_tl_nspans(ddp_shared *sh, int r)
{
    return (int *)((char *)sh + sh->off_tl_nspans) + (size_t)r * sh->trace_steps;
}

comm_shared *ddp_shared_comm(ddp_shared *sh) { return (comm_shared *)((char *)sh + sh->off_comm); }

/* The ranks' trace records into res->tl. */
static void collect_trace(ddp_shared *sh, train_result *res)
{
    int n = sh->nranks, t = sh->trace_steps, m = sh->max_spans;
    size_t phases = (size_t)sh->micro * PH_COUNT;
    if (timeline_alloc(&res->tl, t, n, m, sh->micro)) {
        dps_warn("%s; the configuration has no trace", dps_errmsg());
        return;
    }
    for (int r = 0; r < n && t; r++) {
        res->tl.ref_wall_ms[r] = sh->rank[r].trace_ref_wall_ms;
        for (int k = 0; k < t; k++) {
            memcpy(timeline_phases(&res->tl, k, r), ddp_shared_tl_phase(sh, r) + (size_t)k * phases,
                   phases * sizeof(tl_phase));
            memcpy(timeline_spans(&res->tl, k, r), ddp_shared_tl_span(sh, r) + (size_t)k * m,
                   (size_t)m * sizeof(tl_span));
            *timeline_nspans(&res->tl, k, r) = ddp_shared_tl_nspans(sh, r)[k];
        }
    }
}

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
    for (int k = 0; k < steps; k++) res->scaler[k] = ddp_shared_scaler(sh, 0)[k];
    double rows = (double)c->global_batch * config_rows(c);
    for (int k = 0; k < losses; k++) {
        double sum = 0.0;
        for (int r = 0; r < n; r++) sum += ddp_shared_loss_sum(sh, r)[k];
        res->loss[k] = (float)(sum / rows);
    }
    res->steps_done = steps;
    res->losses_done = losses;
    res->allreduce_bytes = sh->rank[0].allreduce_bytes;
    res->ops = sh->rank[0].ops;
    collect_trace(sh, res);
}

/* What pack writes first: the shapes the receiver checks. */
typedef struct pack_head {
    uint32_t magic, report_bytes;
    int32_t rank, steps, warmup, trace_steps, max_spans, micro;
} pack_head;
#define PACK_MAGIC 0x64707372u

enum { NRECORDS = 7 };

/* The record arrays of rank r (steps, phases, losses, the trace's phases,
 * spans and span counts, the GradScaler's steps), with their sizes. */
static void records(ddp_shared *sh, int r, void *at[NRECORDS], size_t bytes[NRECORDS])
{
    size_t t = (size_t)sh->trace_steps;
    at[0] = ddp_shared_step_ms(sh, r);
    at[1] = ddp_shared_phase_ms(sh, r);
    at[2] = ddp_shared_loss_sum(sh, r);
    at[3] = ddp_shared_tl_phase(sh, r);
    at[4] = ddp_shared_tl_span(sh, r);
    at[5] = ddp_shared_tl_nspans(sh, r);
    at[6] = ddp_shared_scaler(sh, r);
    bytes[0] = (size_t)sh->steps * sizeof(double);
    bytes[1] = (size_t)sh->steps * PH_COUNT * sizeof(float);
    bytes[2] = (size_t)(sh->steps + sh->warmup) * sizeof(double);
    bytes[3] = t * (size_t)sh->micro * PH_COUNT * sizeof(tl_phase);
    bytes[4] = t * (size_t)sh->max_spans * sizeof(tl_span);
    bytes[5] = t * sizeof(int);
    bytes[6] = (size_t)sh->steps * sizeof(step_scaler);
}

size_t ddp_shared_pack_bytes(ddp_shared *sh)
{
    void *at[NRECORDS];
    size_t bytes[NRECORDS], total = sizeof(pack_head) + sizeof(ddp_report);
    records(sh, 0, at, bytes);
    for (int i = 0; i < NRECORDS; i++) total += bytes[i];
    return total;
}

void *ddp_shared_pack(ddp_shared *sh, int r, size_t *len)
{
    *len = ddp_shared_pack_bytes(sh);
    char *buf = malloc(*len), *p = buf;
    if (!buf) return NULL;
    pack_head h = {PACK_MAGIC, sizeof(ddp_report), r, sh->steps, sh->warmup, sh->trace_steps,
                   sh->max_spans, sh->micro};
    memcpy(p, &h, sizeof h);
    memcpy(p += sizeof h, &sh->rank[r], sizeof(ddp_report));
    p += sizeof(ddp_report);
    void *at[NRECORDS];
    size_t bytes[NRECORDS];
    records(sh, r, at, bytes);
    for (int i = 0; i < NRECORDS; p += bytes[i], i++) memcpy(p, at[i], bytes[i]);
    return buf;
}

dps_status ddp_shared_unpack(ddp_shared *sh, int r, const void *buf, size_t len)
{
    pack_head h;
    const char *p = buf;
    if (len >= sizeof h) memcpy(&h, p, sizeof h);
    if (len != ddp_shared_pack_bytes(sh) || h.magic != PACK_MAGIC || h.report_bytes != sizeof(ddp_report) ||
        h.rank != r || h.steps != sh->steps || h.warmup != sh->warmup ||
        h.trace_steps != sh->trace_steps || h.max_spans != sh->max_spans || h.micro != sh->micro)
        return dps_fail(DPS_ERR_RUNTIME, "rank %d's records do not fit rank 0's (%zu bytes): is "
                        "every rank the same dpscale build with the same options?", r, len);
    memcpy(&sh->rank[r], p += sizeof h, sizeof(ddp_report));
    p += sizeof(ddp_report);
    void *at[NRECORDS];
    size_t bytes[NRECORDS];
    records(sh, r, at, bytes);
    for (int i = 0; i < NRECORDS; p += bytes[i], i++) memcpy(at[i], p, bytes[i]);
    return DPS_OK;
}

dps_status ddp_scalers_agree(ddp_shared *sh, int steps)
{
    for (int k = 0; k < steps; k++)
        for (int r = 1; r < sh->nranks; r++) {
            const step_scaler *a = &ddp_shared_scaler(sh, 0)[k], *b = &ddp_shared_scaler(sh, r)[k];
            if (a->skipped == b->skipped && a->scale == b->scale) continue;
            return dps_fail(DPS_ERR_RUNTIME, "timed step %d: rank 0's GradScaler %s (scale %g) and "
                            "rank %d's %s (scale %g): the ranks' gradients after the all-reduce "
                            "differ, which is a bug in the collectives; report it", k,
                            a->skipped ? "skipped it" : "took it", a->scale, r,
                            b->skipped ? "skipped it" : "took it", b->scale);
        }
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
