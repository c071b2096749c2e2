/* One configuration from start to written results (see run.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "elementwise.h"
#include "strategies/ddp.h"
#include "strategies/dp.h"
#include "strategies/footprint.h"
#include "core/stats.h"
#include "backend/nvml.h"
#include "run/run.h"
#include "core/strategy.h"
#include "results/trace_json.h"
#include "core/util.h"

double run_max_rel_diff(const float *a, const float *b, size_t n)
{
    double maxdiff = 0.0, maxref = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= maxdiff)) maxdiff = d; /* NaN propagates */
        if (fabs((double)b[i]) > maxref) maxref = fabs((double)b[i]);
    }
    if (maxref == 0.0) return maxdiff == 0.0 ? 0.0 : INFINITY;
    return maxdiff / maxref;
}

double run_check_tolerance(const dps_config *cfg)
{
    if (dps_precision_is_half(cfg->precision) && cfg->optimizer == OPT_ADAMW)
        return DPS_CHECK_TOL_HALF_ADAMW;
    if (cfg->precision == PREC_BF16) return DPS_CHECK_TOL_BF16;
    if (cfg->precision == PREC_FP16) return DPS_CHECK_TOL_FP16;
    return cfg->optimizer == OPT_ADAMW ? DPS_CHECK_TOL_FP32_ADAMW : DPS_CHECK_TOL_FP32;
}

/* The same steps on device 0 alone (dp with one device is single-device
 * training), compared with the run's final parameters. The capacity limit
 * of --device-mem is lifted for the reference. */
static dps_status run_check(const dps_config *cfg, backend *be, train_result *res)
{
    dps_config ref = *cfg;
    ref.mode = MODE_DP;
    ref.ngpus = 1;
    ref.check = 0;
    ref.profile_first = ref.profile_last = -1; /* the reference is not what is profiled */
    int d0 = cfg->devices[0];
    size_t cap = be->mem[d0].capacity;
    be->mem[d0].capacity = 0;
    train_result rr;
    dps_status rc = train_result_init(&rr, &ref, 1);
    if (!rc) rc = dp_train(&ref, be, &rr);
    be->mem[d0].capacity = cap;
    if (rc) {
        dps_status r2 = dps_fail(rc, "--check: the single-device reference failed: %s", rr.error);
        train_result_free(&rr);
        return r2;
    }
    res->check_max_rel_diff = run_max_rel_diff(res->final_params, rr.final_params, res->nparams);
    res->check = res->check_max_rel_diff <= run_check_tolerance(cfg);
    train_result_free(&rr);
    return DPS_OK;
}

/* A GEMM reference operand filled as the model's are: uniform in [-1, 1)
 * times `bound` (zeros multiply measurably faster on NVIDIA GPUs), through
 * a pinned host chunk of 1 MiB. */
static dps_status gemm_fill(backend *be, be_stream *st, dps_buf *b, float bound, uint64_t stream)
{
    enum { CHUNK = 1 << 18 }; /* floats */
    size_t n = b->bytes / sizeof(float);
    float *h = NULL;
    DPS_TRY(be->ops->host_alloc(be, CHUNK * sizeof(float), (void **)&h));
    dps_status rc = DPS_OK;
    for (size_t off = 0; !rc && off < n; off += CHUNK) {
        size_t len = n - off < CHUNK ? n - off : CHUNK;
        for (size_t i = 0; i < len; i++) h[i] = bound * dps_uniform(1, stream, off + i);
        rc = be->ops->copy(be, st, (float *)b->ptr + off, b->dev, h, DPS_HOST, len * sizeof(float));
        if (!rc && !dps_test_plant("free_while_read"))
            rc = be->ops->stream_sync(be, st); /* before the chunk is filled again */
    }
    be->ops->host_free(be, h);
    return rc;
}

/* The step's GEMMs of one device, in the model's order and shapes: x the
 * layers' inputs (rows x d), w their weights (d x max(d, c)), y the outputs
 * and the gradients that come back (rows x max(d, c)), dw and dx the
 * gradients' outputs, so that no GEMM reads what another wrote but y,
 * which keeps every operand in the model's range. */
static dps_status gemm_step(backend *be, be_stream *st, model_shape s, int rows, float *x,
                            float *w, float *y, float *dw, float *dx)
{
    const be_ops *o = be->ops;
    int d = s.width, c = s.classes;
    for (int l = 0; l < s.layers; l++) /* forward */
        DPS_TRY(o->gemm(be, st, 0, 0, rows, d, d, 1.0f, x, d, w, d, 0.0f, y, d));
    DPS_TRY(o->gemm(be, st, 0, 0, rows, c, d, 1.0f, x, d, w, c, 0.0f, y, c));
    DPS_TRY(o->gemm(be, st, 1, 0, d, c, rows, 1.0f, x, d, y, c, 0.0f, dw, c));
    if (s.layers) DPS_TRY(o->gemm(be, st, 0, 1, rows, d, c, 1.0f, y, c, w, c, 0.0f, dx, d));
    for (int l = s.layers - 1; l >= 0; l--) { /* backward */
        DPS_TRY(o->gemm(be, st, 1, 0, d, d, rows, 1.0f, x, d, y, d, 0.0f, dw, d));
        if (l > 0) DPS_TRY(o->gemm(be, st, 0, 1, rows, d, d, 1.0f, y, d, w, d, 0.0f, dx, d));
    }
    return o->stream_sync(be, st);
}

static be_dtype half_type(dps_precision p) { return p == PREC_FP16 ? BE_F16 : BE_BF16; }

/* The same GEMMs as the model runs them under autocast (model.c's
 * forward_bf16, backward_bf16): half operands, fp32 accumulation, the
 * hidden layers' and logits' products and the weights' gradients in fp32,
 * the activations' gradients in bf16; x16, w16 and y16 are x, w and the
 * gradients that come back, cast once. */
static dps_status gemm_step_half(backend *be, be_stream *st, model_shape s, be_dtype H, int rows,
                                 const uint16_t *x16, const uint16_t *w16, const uint16_t *y16,
                                 float *y, float *dw, uint16_t *dx16)
{
    const be_ops *o = be->ops;
    int d = s.width, c = s.classes;
    const be_dtype F = BE_F32;
    for (int l = 0; l < s.layers; l++) /* forward */
        DPS_TRY(o->gemm_ex(be, st, 0, 0, rows, d, d, 1.0f, x16, H, d, w16, H, d, 0.0f, y, F, d));
    DPS_TRY(o->gemm_ex(be, st, 0, 0, rows, c, d, 1.0f, x16, H, d, w16, H, c, 0.0f, y, F, c));
    DPS_TRY(o->gemm_ex(be, st, 1, 0, d, c, rows, 1.0f, x16, H, d, y16, H, c, 0.0f, dw, F, c));
    if (s.layers)
        DPS_TRY(o->gemm_ex(be, st, 0, 1, rows, d, c, 1.0f, y16, H, c, w16, H, c, 0.0f, dx16, H, d));
    for (int l = s.layers - 1; l >= 0; l--) { /* backward */
        DPS_TRY(o->gemm_ex(be, st, 1, 0, d, d, rows, 1.0f, x16, H, d, y16, H, d, 0.0f, dw, F, d));
        if (l > 0)
            DPS_TRY(o->gemm_ex(be, st, 0, 1, rows, d, d, 1.0f, y16, H, d, w16, H, d, 0.0f, dx16, H,
                               d));
    }
    return o->stream_sync(be, st);
}

/* The reference's buffers: x, w, y, dw, dx of gemm_step, and under
 * autocast the bf16 x, w and returning gradients of gemm_step_bf16. */
enum { GX, GW, GY, GDW, GDX, GX16, GW16, GY16, GBUFS };

/* bf16 copies of x and w, and gradients that come back as uniform as the
 * inputs (y is then only written). */
static dps_status gemm_buffers_half(backend *be, be_stream *st, int dev, be_dtype H, dps_buf *b)
{
    const be_ops *o = be->ops;
    for (int i = GX16; i <= GY16; i++)
        DPS_TRY(be_buf_alloc(be, dev, b[i - GX16].bytes / 2, "GEMM reference (half)", &b[i]));
    DPS_TRY(gemm_fill(be, st, &b[GY], 1.0f, 3));
    for (int i = GX16; i <= GY16; i++)
        DPS_TRY(o->cast(be, st, (int64_t)(b[i].bytes / 2), b[i - GX16].ptr, BE_F32, b[i].ptr, H));
    return o->stream_sync(be, st);
}

static dps_status gemm_buffers(backend *be, be_stream *st, int dev, model_shape s, int rows,
                               dps_precision prec, dps_buf *b)
{
    size_t d = (size_t)s.width, big = (size_t)(s.width > s.classes ? s.width : s.classes);
    size_t floats[GX16] = {(size_t)rows * d, d * big, (size_t)rows * big, d * big, (size_t)rows * d};
    for (int i = 0; i < GX16; i++)
        DPS_TRY(be_buf_alloc(be, dev, floats[i] * sizeof(float), "GEMM reference", &b[i]));
    DPS_TRY(gemm_fill(be, st, &b[GX], 1.0f, 1));                        /* as the inputs */
    DPS_TRY(gemm_fill(be, st, &b[GW], 1.0f / sqrtf((float)s.width), 2)); /* as nn.Linear's */
    if (dps_precision_is_half(prec)) DPS_TRY(gemm_buffers_half(be, st, dev, half_type(prec), b));
    DPS_TRY(be->ops->memset0(be, st, b[GY].ptr, b[GY].bytes));
    DPS_TRY(be->ops->memset0(be, st, b[GDW].ptr, b[GDW].bytes));
    return be->ops->memset0(be, st, b[GDX].ptr, b[GDX].bytes);
}

/* One repetition of the reference, as the model's precision runs it. */
static dps_status gemm_rep(backend *be, be_stream *st, model_shape s, int rows, dps_precision prec,
                           dps_buf *b)
{
    if (dps_precision_is_half(prec))
        return gemm_step_half(be, st, s, half_type(prec), rows, b[GX16].ptr, b[GW16].ptr, b[GY16].ptr, b[GY].ptr,
                              b[GDW].ptr, b[GDX].ptr);
    return gemm_step(be, st, s, rows, b[GX].ptr, b[GW].ptr, b[GY].ptr, b[GDW].ptr, b[GDX].ptr);
}

dps_status run_gemm_reference(backend *be, int dev, model_shape s, int rows, dps_precision prec,
                              dps_tf32 tf32, double *tflops)
{
    dps_buf b[GBUFS] = {{0}};
    be_stream *st = NULL;
    dps_status rc = be->ops->stream_create(be, dev, &st);
    if (!rc) rc = be->ops->gemm_tf32(be, st, dps_tf32_for(tf32, 0)); /* the MLP's Linears */
    if (!rc) rc = gemm_buffers(be, st, dev, s, rows, prec, b);
    double times[6];
    for (int rep = 0; !rc && rep < 6; rep++) {
        double t0 = dps_now_ms();
        rc = gemm_rep(be, st, s, rows, prec, b);
        times[rep] = dps_now_ms() - t0;
    }
    if (!rc) {
        dps_stats stt;
        stats_compute(times + 1, 5, &stt); /* the first repetition warms up */
        double dd = (double)s.width * s.width, dc = (double)s.width * s.classes;
        double flops = 2.0 * rows * (3.0 * s.layers * dd - (s.layers ? dd : 0.0) + 2.0 * dc +
                                     (s.layers ? dc : 0.0));
        *tflops = flops / (stt.median * 1e-3) / 1e12;
    }
    for (int i = 0; i < GBUFS; i++) be_buf_free(be, &b[i]);
    if (st) be->ops->stream_destroy(be, st);
    return rc;
}

double run_allreduce_span_ms(const timeline *tl, int t, double bytes)
{
    int n = *timeline_nspans(tl, t, 0);
    double base = tl->ref_wall_ms[0], covered = 0.0, total = 0.0;
    for (int r = 1; r < tl->nranks; r++) {
        if (*timeline_nspans(tl, t, r) != n) return -1.0; /* a span left out */
        if (tl->ref_wall_ms[r] < base) base = tl->ref_wall_ms[r];
    }
    for (int i = 0; i < n; i++) {
        if (timeline_spans(tl, t, 0)[i].op != 0) continue; /* a sharded unit's collective */
        double last_begin = -INFINITY, last_end = -INFINITY;
        for (int r = 0; r < tl->nranks; r++) {
            const tl_span *sp = timeline_spans(tl, t, r) + i;
            double at = tl->ref_wall_ms[r] - base + sp->begin_ms; /* on the trace's clock */
            if (at > last_begin) last_begin = at;
            if (at + sp->ms > last_end) last_end = at + sp->ms;
        }
        total += last_end - last_begin;
        covered += (double)timeline_spans(tl, t, 0)[i].bytes;
    }
    return covered > 0 && covered == bytes ? total : -1.0;
}

/* algbw and busbw from the traced steps' all-reduce time
 * (run_allreduce_span_ms), at its median, over the gradients' bytes each
 * step all-reduces (every micro-step's with --no-sync off); none without a
 * trace, or when a traced step lacks a span: the slowest rank's own time
 * would count its wait for the others as transfer. */
static void allreduce_bandwidth(const dps_config *c, const train_result *res, run_summary *s)
{
    const timeline *tl = &res->tl;
    int n = tl->steps;
    double bytes = res->allreduce_bytes * (c->no_sync ? 1 : c->accum);
    double *t = malloc(((size_t)n + 1) * sizeof *t);
    int ok = t && n > 0 && tl->nranks > 1 && bytes > 0;
    for (int k = 0; ok && k < n; k++) {
        t[k] = run_allreduce_span_ms(tl, k, bytes);
        ok = t[k] > 0.0;
    }
    double median = ok ? stats_median_or(t, n, 0.0) : 0.0;
    free(t);
    if (median > 0) {
        s->algbw_gbps = bytes / (median * 1e-3) / 1e9;
        s->busbw_gbps = stats_busbw_allreduce(s->algbw_gbps, c->ngpus);
    }
}

static void summarize(const dps_config *c, const train_result *res, run_summary *s)
{
    stats_compute(res->step_ms, res->steps_done, &s->step);
    double sec = s->step.median * 1e-3;
    double tokens = (double)c->global_batch * c->shape.tokens;
    s->samples_per_s = res->steps_done ? c->global_batch / sec : NAN;
    s->tokens_per_s = res->steps_done ? tokens / sec : NAN;
    s->model_tflops = res->steps_done /* forward and backward: three forward GEMMs' FLOPs */
        ? 3.0 * config_fwd_flops(c) * c->global_batch / sec / 1e12 : NAN;
    s->comm_bytes_per_step = 0.0;
    for (int i = 0; i < c->ngpus; i++) s->comm_bytes_per_step += res->dev[i].link_bytes[LINK_P2P_SENT];
    if (!res->steps_done) s->comm_bytes_per_step = NAN;
    s->algbw_gbps = NAN;
    s->busbw_gbps = NAN;
    if (dps_strategy_of(c->mode)->per_rank && c->ngpus > 1) allreduce_bandwidth(c, res, s);
}

/* What the NVML sampler saw, beside the bytes the harness counted. */
static void record_nvml(nvml_sampler *nv, const dps_config *cfg, train_result *res)
{
    nvml_counters c[DPS_MAX_DEVICES];
    memset(c, 0, sizeof c);
    nvml_stop(nv, c);
    for (int i = 0; i < cfg->ngpus; i++) {
        dev_stats *d = &res->dev[i];
        d->nvml_pcie_tx = c[i].have_pcie ? c[i].pcie_tx_bytes : NAN;
        d->nvml_pcie_rx = c[i].have_pcie ? c[i].pcie_rx_bytes : NAN;
        d->nvml_nvlink_tx = c[i].have_nvlink ? c[i].nvlink_tx_bytes : NAN;
        d->nvml_nvlink_rx = c[i].have_nvlink ? c[i].nvlink_rx_bytes : NAN;
        d->nvml_clock = c[i].have_clock;
        d->sm_clock_min_mhz = c[i].sm_clock_min_mhz;
        d->sm_clock_max_mhz = c[i].sm_clock_max_mhz;
        d->throttle_reasons = c[i].throttle_reasons;
    }
}

/* A run that failed after a signal failed because of it, whatever broke
 * first (under a launcher another rank's abort can reach a rank before its
 * own signal's handler has run): the row says so. */
static void name_interrupt(train_result *res)
{
    int sig = dps_interrupted();
    if (!res->status || !sig || strstr(res->error, dps_signal_name(sig))) return;
    char why[sizeof res->error];
    snprintf(why, sizeof why, "interrupted by %s: %.*s", dps_signal_name(sig),
             (int)sizeof why - 32, res->error);
    dps_strlcpy(res->error, why, sizeof res->error);
}

/* The mode's training loop; ranks of ddp open the backend the parent chose
 * (under a launcher in dw, the joined world). */
static dps_status train(const dps_config *cfg, ddp_world *dw, backend *be, train_result *res)
{
    if (!dps_strategy_of(cfg->mode)->per_rank) return dp_train(cfg, be, res);
    dps_config c = *cfg;
    c.be.kind = be->kind;
    dps_status rc = ddp_train(&c, dw, res);
    if (rc && !res->error[0]) dps_strlcpy(res->error, dps_errmsg(), sizeof res->error);
    return rc;
}

/* The host backend's devices are host memory: a configuration that cannot
 * fit in what is free is refused before it allocates (under a launcher a
 * process holds its own rank only, and the hosts may differ). */
static dps_status fits_host(const dps_config *cfg, const backend *be)
{
    if (be->kind != BE_HOST || cfg->world.launcher != WORLD_NONE) return DPS_OK;
    return footprint_check(cfg, be, footprint_available());
}

dps_status run_untimed(const dps_config *cfg, backend *be)
{
    dps_config c = *cfg;
    c.warmup = c.steps = 1;
    c.check = c.gemm_ref = c.trace_steps = 0;
    c.save_params[0] = '\0';
    c.profile_first = c.profile_last = c.fault_rank = -1;
    c.no_nvml = 1;
    DPS_TRY(fits_host(&c, be));
    train_result res;
    DPS_TRY(train_result_init(&res, &c, c.ngpus));
    dps_status rc = train(&c, NULL, be, &res);
    train_result_free(&res);
    return rc;
}

/* The table's line of cfg, and of its twin (NULL: none), once their rows are in. */
static void table_rows(const dps_config *cfg, const dps_config *twin, const train_result *res,
                       const run_summary *s)
{
    results_table_row(stdout, cfg, res, s);
    if (!twin) return;
    run_summary as_twin = *s;
    config_id(twin, as_twin.config_id, sizeof as_twin.config_id);
    results_table_row(stdout, twin, res, &as_twin);
}

dps_status run_record(const dps_config *cfg, const dps_config *twin, const backend *be,
                      const results_dir *rd, dps_status status, const char *why)
{
    run_summary sum;
    memset(&sum, 0, sizeof sum);
    config_id(cfg, sum.config_id, sizeof sum.config_id);
    dps_utc_iso8601(sum.start_time, sizeof sum.start_time);
    dps_strlcpy(sum.end_time, sum.start_time, sizeof sum.end_time);
    train_result res;
    DPS_TRY(train_result_init_empty(&res, cfg->ngpus));
    res.status = status;
    dps_strlcpy(res.error, why, sizeof res.error);
    for (int i = 0; i < cfg->ngpus; i++) {
        res.dev[i].dev = cfg->devices[i];
        if (cfg->devices[i] < be->ndev)
            dps_strlcpy(res.dev[i].name, be->info[cfg->devices[i]].name, sizeof res.dev[i].name);
    }
    summarize(cfg, &res, &sum);
    dps_status rc = results_append(rd, cfg, twin, be, &res, &sum);
    if (!rc) table_rows(cfg, twin, &res, &sum);
    train_result_free(&res);
    return rc;
}

dps_status run_save_params(const char *path, const float *params, size_t n)
{
    char header[128];
    int len = snprintf(header, sizeof header,
                       "{'descr': '<f4', 'fortran_order': False, 'shape': (%zu,), }", n);
    int total = (10 + len + 1 + 63) / 64 * 64; /* magic, version, length, dict, '\n': x64 */
    FILE *f = fopen(path, "wb");
    if (!f)
        return dps_fail(DPS_ERR_RUNTIME, "--save-params %s: cannot create the file: %s", path,
                        strerror(errno));
    unsigned char magic[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                               (unsigned char)((total - 10) & 0xff), (unsigned char)((total - 10) >> 8)};
    int ok = fwrite(magic, 1, sizeof magic, f) == sizeof magic &&
             fprintf(f, "%s%*s\n", header, total - 10 - len - 1, "") == total - 10 &&
             fwrite(params, sizeof(float), n, f) == n;
    if (fclose(f) != 0) ok = 0;
    if (!ok) return dps_fail(DPS_ERR_RUNTIME, "--save-params %s: writing failed: %s", path, strerror(errno));
    return DPS_OK;
}

/* The timeline of cfg's run into trace/, under cfg's id and its twin's. */
static dps_status write_traces(const results_dir *rd, const dps_config *cfg,
                               const dps_config *twin, const train_result *res, const char *id)
{
    DPS_TRY(trace_json_write(rd, cfg, res, id));
    if (!twin) return DPS_OK;
    char twin_id[192];
    config_id(twin, twin_id, sizeof twin_id);
    return trace_json_write(rd, twin, res, twin_id);
}

dps_status run_config(const dps_config *cfg, const dps_config *twin, ddp_world *dw, backend *be,
                      const results_dir *rd, int *written)
{
    run_summary sum;
    memset(&sum, 0, sizeof sum);
    config_id(cfg, sum.config_id, sizeof sum.config_id);
    dps_utc_iso8601(sum.start_time, sizeof sum.start_time);
    be_reset_peaks(be);
    if (config_shares_device(cfg))
        dps_warn("%s: several replicas share a GPU: the copies between them are local, so "
                 "the timings say nothing about a multi-GPU machine", sum.config_id);
    train_result res;
    *written = 0;
    DPS_TRY(train_result_init(&res, cfg, cfg->ngpus));
    nvml_sampler *nv = cfg->no_nvml ? NULL : nvml_start(be, cfg->devices, cfg->ngpus, 20);
    res.status = fits_host(cfg, be);
    if (res.status) dps_strlcpy(res.error, dps_errmsg(), sizeof res.error);
    else res.status = train(cfg, dw, be, &res);
    record_nvml(nv, cfg, &res);
    if (!res.status && cfg->check) {
        res.status = run_check(cfg, be, &res);
        if (res.status) dps_strlcpy(res.error, dps_errmsg(), sizeof res.error);
    }
    if (!res.status && cfg->save_params[0]) {
        res.status = run_save_params(cfg->save_params, res.final_params, res.nparams);
        if (res.status) dps_strlcpy(res.error, dps_errmsg(), sizeof res.error);
    }
    if (!res.status && cfg->gemm_ref) { /* device 0's rows, as the strategy split the batch */
        res.status = run_gemm_reference(be, cfg->devices[0], cfg->shape,
                                        res.dev[0].samples * cfg->shape.tokens, cfg->precision,
                                        cfg->tf32, &res.gemm_ref_tflops);
        if (res.status) dps_strlcpy(res.error, dps_errmsg(), sizeof res.error);
    }
    if (!res.status && res.tl.steps && res.steps_done == cfg->steps) {
        res.status = write_traces(rd, cfg, twin, &res, sum.config_id);
        if (res.status) dps_strlcpy(res.error, dps_errmsg(), sizeof res.error);
    }
    name_interrupt(&res);
    dps_utc_iso8601(sum.end_time, sizeof sum.end_time);
    summarize(cfg, &res, &sum);
    dps_status rc = results_append(rd, cfg, twin, be, &res, &sum);
    *written = rc == DPS_OK;
    if (rc) { /* the message is the write's failure */
        train_result_free(&res);
        return rc;
    }
    table_rows(cfg, twin, &res, &sum);
    rc = res.status;
    if (rc == DPS_OK && res.check == 0)
        rc = dps_fail(DPS_ERR_RUNTIME, "%s: --check failed: max relative difference %.3g "
                      "above the tolerance %g", sum.config_id, res.check_max_rel_diff,
                      run_check_tolerance(cfg));
    else if (res.status) dps_fail_copy(res.status, res.error);
    train_result_free(&res);
    return rc;
}
