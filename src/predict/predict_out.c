/* predictions.csv and the table (see predict_out.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "predict/predict_out.h"
#include "core/csv.h"
#include "core/strategy.h"

/* machine, workload, the series plot.py matches (model, precision,
 * optimizer), source .. batch_per_gpu, the largest batch that fits (empty
 * without gpu_mem_gib), the accumulation (accum, the bucketed strategies'
 * no_sync), status .. efficiency; then <phase>_ms; then memory, the
 * model's terms and constants, the collectives' bytes, the bucket cap
 * (row() writes them in this order) */
static const char *const head[] = {"machine", "workload", "model", "precision", "optimizer",
    "source", "mode", "ngpus", "nodes", "batch_per_gpu", "max_batch_per_gpu", "accum", "no_sync",
    "status", "note", "step_ms", "samples_per_s", "efficiency"};
static const char *const tail[] = {"gpu0_mem_bytes", "other_mem_bytes", "nbuckets",
    "busbw_gbps", "allreduce_end_ms", "bucket_copy_ms", "sync_ms", "bus_eff", "base_latency_us",
    "bucket_overhead_us", "dp_sync_ms", "compute_scale", "overlap_eff", "nunits",
    "allreduce_bytes", "reduce_scatter_bytes", "all_gather_bytes", "comm_bytes_per_step",
    "bucket_mb"};
#define NHEAD ((int)(sizeof head / sizeof head[0]))
#define NTAIL ((int)(sizeof tail / sizeof tail[0]))
#define NCOLS (NHEAD + PH_COUNT + NTAIL)
#define NFIGURES_HEAD 3 /* step_ms, samples_per_s, efficiency: empty in a skipped row, as all after */

static void columns(const char **cols)
{
    static char phase[PH_COUNT][48];
    int k = 0;
    for (int i = 0; i < NHEAD; i++) cols[k++] = head[i];
    for (int p = 0; p < PH_COUNT; p++) {
        snprintf(phase[p], sizeof phase[p], "%s_ms", dps_phase_names[p]);
        cols[k++] = phase[p];
    }
    for (int i = 0; i < NTAIL; i++) cols[k++] = tail[i];
}

/* A figure with `decimals` places, or more (at most 9, the readers' finest)
 * where fewer would show a value above 0 as 0. */
static void figure(csv_buf *b, double v, int decimals)
{
    while (decimals < 9 && v > 0 && v < 0.5 * pow(10.0, -decimals)) decimals++;
    csv_num(b, v, decimals);
}

static void row(csv_buf *b, const predict_machine *m, const predict_consts *c,
                const predict_row *r)
{
    const predict_workload *w = r->w;
    const dps_strategy *st = dps_strategy_of(r->mode);
    int ok = r->status != PRED_SKIPPED;
    csv_str(b, m->name);
    csv_str(b, w->name);
    csv_str(b, w->model[0] ? w->model : w->name);
    csv_str(b, dps_precision_names[w->precision]);
    csv_str(b, dps_optimizer_names[w->optimizer]);
    csv_str(b, w->source);
    csv_str(b, dps_mode_name(r->mode));
    csv_int(b, r->ngpus);
    csv_int(b, r->nodes);
    csv_int(b, r->batch_per_gpu);
    if (ok && r->max_batch_per_gpu >= 0) csv_int(b, r->max_batch_per_gpu);
    else csv_empty(b);
    csv_int(b, predict_accum(w));
    if (st->buckets) csv_str(b, w->sync_all ? "off" : "on");
    else csv_empty(b);
    csv_str(b, predict_status_names[r->status]);
    csv_str(b, r->note);
    if (!ok) {
        for (int i = 0; i < NCOLS - (NHEAD - NFIGURES_HEAD); i++) csv_empty(b);
        csv_end_row(b);
        return;
    }
    figure(b, r->step_ms, 4);
    figure(b, r->samples_per_s, 3);
    figure(b, r->efficiency, 4);
    for (int p = 0; p < PH_COUNT; p++) figure(b, r->phase_ms[p], 4);
    csv_num(b, r->gpu0_mem_bytes, 0); /* whole bytes */
    csv_num(b, r->other_mem_bytes, 0);
    csv_int(b, r->nbuckets);
    figure(b, st->per_rank ? r->busbw_gbps : 0.0, 3);
    figure(b, r->allreduce_end_ms, 4);
    figure(b, r->bucket_copy_ms, 4);
    figure(b, r->sync_ms, 4);
    figure(b, c->bus_eff, 4);
    figure(b, c->base_latency_us, 3);
    figure(b, c->bucket_overhead_us, 3);
    figure(b, c->dp_sync_ms, 4);
    figure(b, c->compute_scale, 4);
    figure(b, c->overlap_eff, 4);
    csv_int(b, r->nunits);
    for (int k = 0; k < 3; k++) csv_num(b, r->coll_bytes[k], 0); /* whole bytes */
    csv_num(b, r->comm_bytes, 0);
    if (st->buckets) figure(b, w->bucket_mb, 3);
    else csv_empty(b);
    csv_end_row(b);
}

dps_status predict_write_csv(const char *dir, const predict_machine *m, const predict_consts *c,
                             const predict_row *rows, int n)
{
    const char *cols[NCOLS];
    columns(cols);
    csv_buf b;
    csv_init(&b);
    csv_header(&b, cols, NCOLS);
    csv_end_row(&b);
    for (int i = 0; i < n; i++) row(&b, m, c, &rows[i]);
    char path[DPS_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/predictions.csv", dir);
    dps_status rc = csv_replace(path, &b);
    csv_free(&b);
    return rc;
}

void predict_print(FILE *f, const predict_machine *m, const predict_workload *w,
                   const predict_row *rows, int n)
{
    char nodes[32] = "";
    if (m->nodes) snprintf(nodes, sizeof nodes, ", %d node%s", m->nodes, m->nodes == 1 ? "" : "s");
    char accum[64] = "";
    if (predict_accum(w) > 1)
        snprintf(accum, sizeof accum, " in %d micro-batches (ddp: %s)", w->accum,
                 w->sync_all ? "every one all-reduced, no_sync off" : "no_sync but the last");
    fprintf(f, "# dpscale predict: %s on %s (%d per node%s), %d samples per device%s\n", w->name,
            m->name, m->gpus_per_node, nodes, w->batch_per_gpu, accum);
    fprintf(f, "# %-5s %4s %5s %10s %11s %6s %10s %10s %11s %9s %9s  %s\n", "mode", "gpus",
            "nodes", "step_ms", "samples/s", "eff", "comm_ms", "exposed_ms", "gpu0_GiB",
            "max_batch", "status", "note");
    for (int i = 0; i < n; i++) {
        const predict_row *r = &rows[i];
        double comm = dps_strategy_of(r->mode)->per_rank
                          ? r->phase_ms[PH_ALLREDUCE]
                          : r->phase_ms[PH_REPLICATE] + r->phase_ms[PH_REDUCE];
        char fits[16] = "-";
        if (r->status == PRED_SKIPPED) {
            fprintf(f, "  %-5s %4d %5d %10s %11s %6s %10s %10s %11s %9s %9s  %s\n",
                    dps_mode_name(r->mode), r->ngpus, r->nodes, "-", "-", "-", "-", "-", "-", "-",
                    "skipped", r->note);
            continue;
        }
        if (r->max_batch_per_gpu >= 0) snprintf(fits, sizeof fits, "%d", r->max_batch_per_gpu);
        fprintf(f, "  %-5s %4d %5d %10.3f %11.1f %5.1f%% %10.3f %10.3f %11.2f %9s %9s  %s\n",
                dps_mode_name(r->mode), r->ngpus, r->nodes, r->step_ms, r->samples_per_s,
                100 * r->efficiency, comm, r->exposed_comm_ms, r->gpu0_mem_bytes / 1073741824.0,
                fits, predict_status_names[r->status], r->note);
    }
}
