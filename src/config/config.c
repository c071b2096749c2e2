/* Configuration defaults, names and identities, and the result record of a
 * configuration (see config.h). */
#include <inttypes.h>
#include <math.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "build_config.h"
#include "config/config.h"
#include "core/strategy.h"
#include "config/settings.h"
#include "core/util.h"
#include "model/net.h"

void config_optimizer_defaults(dps_config *c)
{
    c->hp.step = 0;
    if (c->optimizer == OPT_SGD) {
        c->hp.lr = 0.01f;
        c->hp.momentum = 0.9f;
        c->hp.weight_decay = 0.0f;
    } else {
        c->hp.lr = 1e-3f;
        c->hp.beta1 = 0.9f;
        c->hp.beta2 = 0.999f;
        c->hp.eps = 1e-8f;
        c->hp.weight_decay = 0.01f;
    }
}

void config_defaults(dps_config *c)
{
    const settings_entry *t = settings_table;
    memset(c, 0, sizeof *c);
    c->be.kind = (be_kind)t[SET_BACKEND].def.i;
    c->be.host_devices = (int)t[SET_HOST_DEVICES].def.i;
    c->mode = (dps_mode)t[SET_MODE].def.i;
    c->ngpus = (int)t[SET_GPUS].def.i;
    const model_preset *p = model_find_preset(t[SET_MODEL].def_text);
    dps_strlcpy(c->model, p->name, sizeof c->model);
    c->shape = p->shape;
    c->global_batch = 0; /* from the preset at validation */
    c->precision = (dps_precision)t[SET_PRECISION].def.i;
    c->tf32 = (dps_tf32)t[SET_TF32].def.i;
    c->accum = (int)t[SET_ACCUM].def.i;
    c->no_sync = (int)t[SET_NO_SYNC].def.i;
    c->init_scale = t[SET_INIT_SCALE].def.x;
    c->growth_interval = (int)t[SET_GROWTH_INTERVAL].def.i;
    c->overflow_step = -1;
    c->optimizer = (dps_optimizer)t[SET_OPTIMIZER].def.i;
    config_optimizer_defaults(c);
    c->steps = (int)t[SET_STEPS].def.i;
    c->warmup = (int)t[SET_WARMUP].def.i;
    c->seed = (uint64_t)t[SET_SEED].def.i;
    c->bucket_mb = t[SET_BUCKET_MB].def.x;
    c->first_bucket_mb = t[SET_FIRST_BUCKET_MB].def.x;
    c->overlap = (int)t[SET_OVERLAP].def.i;
    c->timeout_s = t[SET_TIMEOUT].def.x;
    c->dp_comm = (dps_dp_comm)t[SET_DP_COMM].def.i;
    c->dp_impl = (dps_dp_impl)t[SET_DP_IMPL].def.i;
    c->ddp_impl = (dps_dp_impl)t[SET_DDP_IMPL].def.i;
    c->fault_rank = -1;
    c->slowdown_rank = -1;
    c->profile_first = c->profile_last = -1;
    c->trace_steps = (int)t[SET_TRACE_STEPS].def.i;
    dps_strlcpy(c->out_dir, t[SET_OUT].def_text, sizeof c->out_dir);
}

dps_status config_net(const dps_config *c, net *own, const net **out)
{
    memset(own, 0, sizeof *own);
    if (c->net_file) {
        *out = c->net_file;
        return DPS_OK;
    }
    *out = own;
    return net_mlp(c->shape, own);
}

/* A model file's path: a preset's in the models folder, else `model`
 * itself, from dir when relative (dir NULL or "": the working directory). */
static dps_status file_path(const model_preset *p, const char *model, const char *dir, char *path,
                            size_t len)
{
    if (p) model_preset_path(p, path, len);
    else if (model[0] != '/' && dir && dir[0]) snprintf(path, len, "%s/%s", dir, model);
    else dps_strlcpy(path, model, len);
    if (path[0] && strlen(path) + 1 < len) return DPS_OK;
    return dps_fail(DPS_ERR_USAGE, "--model %s: its path is longer than %zu characters; move the "
                    "file nearer", model, len - 2);
}

dps_status config_set_model(dps_config *c, const char *model, const char *dir, int *per_gpu)
{
    const model_preset *p = model_find_preset(model);
    c->net_file = NULL;
    if (p && !p->file) {
        dps_strlcpy(c->model, p->name, sizeof c->model);
        c->shape = p->shape;
        *per_gpu = p->batch_per_gpu;
        return DPS_OK;
    }
    char path[DPS_PATH_MAX];
    DPS_TRY(file_path(p, model, dir, path, sizeof path));
    const net *n = NULL;
    DPS_TRY(net_load(path, &n));
    c->net_file = n;
    dps_strlcpy(c->model, p ? p->name : n->file.name, sizeof c->model);
    c->shape = n->shape;
    *per_gpu = p ? p->batch_per_gpu : CONFIG_FILE_BATCH_PER_GPU;
    return DPS_OK;
}

const char *config_model_copy_name(const char *model, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%s.model", model);
    if (n < 0 || (size_t)n >= len) return buf[0] = '\0', buf;
    for (char *c = buf; *c; c++)
        if (*c == '/') *c = '_';
    return buf;
}

size_t config_params(const dps_config *c)
{
    return c->net_file ? c->net_file->params : model_param_count(c->shape);
}

int config_rows(const dps_config *c)
{
    return c->net_file ? c->net_file->rows : c->shape.tokens;
}

double config_fwd_flops(const dps_config *c)
{
    return c->net_file ? c->net_file->fwd_flops : model_fwd_flops_per_sample(c->shape);
}

dps_status config_profile_hook(const dps_config *c, backend *be, int step, int before)
{
    if (c->profile_first < 0) return DPS_OK;
    if (before && step == c->profile_first) return be->ops->profile(be, 1);
    if (!before && step == c->profile_last) return be->ops->profile(be, 0);
    return DPS_OK;
}

int config_shares_device(const dps_config *c)
{
    for (int i = 0; i < c->ngpus; i++)
        for (int j = 0; j < i; j++)
            if (c->devices[i] == c->devices[j]) return 1;
    return 0;
}

int config_batch_per_gpu(const dps_config *c)
{
    return (c->global_batch + c->ngpus - 1) / c->ngpus;
}

void config_id(const dps_config *c, char *buf, size_t len)
{
    int dp = !dps_strategy_of(c->mode)->per_rank; /* dp's implementation and collectives */
    int n = snprintf(buf, len, "%s%s%s-%s-%s-%s-g%d-b%d", dps_mode_name(c->mode),
                     (dp ? c->dp_impl : c->ddp_impl) == DPIMPL_LEAN ? "-lean" : "",
                     dp && c->dp_comm == DPCOMM_P2P ? "-p2p" : "", c->model,
                     dps_precision_name(c->precision), dps_optimizer_name(c->optimizer),
                     c->ngpus, c->global_batch);
    if (c->strong && n > 0 && (size_t)n < len) n += snprintf(buf + n, len - (size_t)n, "-strong");
    if (c->accum > 1 && n > 0 && (size_t)n < len)
        n += snprintf(buf + n, len - (size_t)n, "-acc%d%s", c->accum, c->no_sync ? "" : "-syncall");
    if (dps_strategy_of(c->mode)->buckets && n > 0 && (size_t)n < len)
        n += snprintf(buf + n, len - (size_t)n, "-bk%g%s%s%s", c->bucket_mb,
                      c->first_bucket_mb != 1.0 ? "-fb" : "", c->overlap ? "" : "-nooverlap",
                      c->grad_view ? "-view" : "");
    if (c->precision == PREC_FP32 && c->tf32 != TF32_DEFAULT && n > 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, "-tf32%s", dps_tf32_names[c->tf32]);
}

/* Records for steps timed steps after warmup ones on nranks ranks. */
static dps_status result_alloc(train_result *r, size_t steps, size_t warmup, int nranks)
{
    memset(r, 0, sizeof *r);
    r->nranks = nranks;
    r->check = -1;
    for (int i = 0; i < DPS_MAX_DEVICES; i++) /* not sampled unless NVML says otherwise */
        r->dev[i].nvml_pcie_tx = r->dev[i].nvml_pcie_rx = r->dev[i].nvml_nvlink_tx =
            r->dev[i].nvml_nvlink_rx = NAN;
    size_t per_step = sizeof(double) + (size_t)nranks * (sizeof(double) + PH_COUNT * sizeof(float));
    r->step_ms = calloc(steps + 1, sizeof *r->step_ms);
    r->rank_step_ms = calloc(steps * (size_t)nranks + 1, sizeof *r->rank_step_ms);
    r->phase_ms = calloc(steps * (size_t)nranks * PH_COUNT + 1, sizeof *r->phase_ms);
    r->loss = calloc(steps + warmup + 1, sizeof *r->loss);
    r->scaler = calloc(steps + 1, sizeof *r->scaler);
    if (!r->step_ms || !r->rank_step_ms || !r->phase_ms || !r->loss || !r->scaler) {
        train_result_free(r);
        char need[24];
        dps_fmt_bytes((uint64_t)(per_step * (double)steps), need, sizeof need);
        return dps_fail(DPS_ERR_RUNTIME, "out of host memory for the step records: %zu steps on "
                        "%d ranks need %s; run fewer --steps", steps, nranks, need);
    }
    return DPS_OK;
}

dps_status train_result_init(train_result *r, const dps_config *c, int nranks)
{
    return result_alloc(r, (size_t)c->steps, (size_t)c->warmup, nranks);
}

dps_status train_result_init_empty(train_result *r, int nranks)
{
    return result_alloc(r, 0, 0, nranks);
}

void train_result_free(train_result *r)
{
    free(r->step_ms);
    free(r->rank_step_ms);
    free(r->phase_ms);
    free(r->loss);
    free(r->scaler);
    free(r->final_params);
    timeline_free(&r->tl);
    r->step_ms = NULL;
    r->rank_step_ms = NULL;
    r->phase_ms = NULL;
    r->loss = NULL;
    r->scaler = NULL;
    r->final_params = NULL;
}

float *train_result_phases(train_result *r, int step, int rank)
{
    return r->phase_ms + ((size_t)step * (size_t)r->nranks + (size_t)rank) * PH_COUNT;
}

/* Whether dev appears in c's device list before place i. */
static int listed_before(const dps_config *c, int i)
{
    for (int j = 0; j < i; j++)
        if (c->devices[j] == c->devices[i]) return 1;
    return 0;
}

/* The devices a configuration names exist; one named twice is a second dp
 * replica on it (not a second rank: NCCL refuses two ranks on one GPU), so
 * the count that must fit the backend is that of distinct devices. */
static dps_status check_devices(const dps_config *c, const backend *be)
{
    /* under a launcher each rank takes its host's device of its local rank
     * (checked where the rank opens it): the world may have more ranks */
    if (c->world.launcher != WORLD_NONE) return DPS_OK;
    int distinct = 0;
    for (int i = 0; i < c->ngpus; i++) distinct += !listed_before(c, i);
    if (distinct > be->ndev)
        return dps_fail(DPS_ERR_USAGE, "--gpus %d: the %s backend has %d device%s%s", distinct,
                        be->ops->name, be->ndev, be->ndev == 1 ? "" : "s",
                        be->kind == BE_HOST ? " (see --host-devices)" : "");
    int replicas_may_share = !dps_strategy_of(c->mode)->per_rank && c->dp_comm != DPCOMM_NCCL;
    for (int i = 0; i < c->ngpus; i++) {
        if (c->devices[i] >= be->ndev)
            return dps_fail(DPS_ERR_USAGE, "--devices: device %d does not exist; the %s backend "
                            "has devices 0..%d", c->devices[i], be->ops->name, be->ndev - 1);
        if (listed_before(c, i) && !replicas_may_share)
            return dps_fail(DPS_ERR_USAGE, "--devices: device %d is listed twice (only dp, "
                            "without --dp-comm nccl, runs several replicas on one device)",
                            c->devices[i]);
    }
    return DPS_OK;
}

/* A model file's: the batch's input and logits under 2^40 elements. */
static dps_status check_file(const dps_config *c)
{
    const net *n = c->net_file;
    if (c->gemm_ref)
        return dps_fail(DPS_ERR_USAGE, "--gemm-ref times the MLP's GEMMs alone; %s is a model "
                        "file: leave --gemm-ref out", n->path);
    int64_t rows = (int64_t)c->global_batch * n->rows;
    if (rows > INT_MAX || (int64_t)c->global_batch * (int64_t)n->input > ((int64_t)1 << 40) ||
        rows * n->classes > ((int64_t)1 << 40))
        return dps_fail(DPS_ERR_USAGE, "--batch %d with %s (%zu input elements and %d rows of %d "
                        "classes a sample): the batch is too large; use a smaller --batch",
                        c->global_batch, n->path, n->input, n->rows, n->classes);
    return DPS_OK;
}

/* Rows of the global batch and the largest buffer must fit the GEMM's int
 * dimensions and size_t (a model file: check_file). */
static dps_status check_sizes(const dps_config *c)
{
    if (c->net_file) return check_file(c);
    int64_t rows = (int64_t)c->global_batch * c->shape.tokens;
    int64_t widest = c->shape.width > c->shape.classes ? c->shape.width : c->shape.classes;
    if (rows > INT_MAX || rows * widest > ((int64_t)1 << 40))
        return dps_fail(DPS_ERR_USAGE, "--batch %d with %d tokens and width %" PRId64 ": the "
                        "batch is too large (batch x tokens x width must stay under 2^40)",
                        c->global_batch, c->shape.tokens, widest);
    if ((int64_t)c->shape.width * widest > ((int64_t)1 << 34))
        return dps_fail(DPS_ERR_USAGE, "--width %d --classes %d: the model is too large",
                        c->shape.width, c->shape.classes);
    return DPS_OK;
}

static dps_status check_ddp(const dps_config *c)
{
    const dps_strategy *st = dps_strategy_of(c->mode);
    if (c->slowdown_rank >= c->ngpus)
        return dps_fail(DPS_ERR_USAGE, "--inject-slowdown %g@%d: there are only %s 0..%d; name one "
                        "of them, or leave @RANK out to slow every device", c->inject_slowdown_pct,
                        c->slowdown_rank, st->per_rank ? "ranks" : "devices", c->ngpus - 1);
    if (!st->per_rank) {
        if (c->global_batch < c->ngpus)
            return dps_fail(DPS_ERR_USAGE, "--batch %d on %d devices: DataParallel's chunks would "
                            "fill only %d of them and leave the rest idle; use a batch of at "
                            "least %d, or --gpus %d", c->global_batch, c->ngpus, c->global_batch,
                            c->ngpus, c->global_batch);
        if (c->fault_rank >= 0)
            return dps_fail(DPS_ERR_USAGE, "--inject-fault: only the strategies of one process a "
                            "device have ranks to fail (add --mode ddp)");
        return DPS_OK;
    }
    if (c->global_batch < c->ngpus)
        return dps_fail(DPS_ERR_USAGE, "--batch %d: %s gives every one of the %d ranks at least "
                        "one sample; use a batch of at least %d", c->global_batch, st->name,
                        c->ngpus, c->ngpus);
    if (st->shard >= 2 && c->precision != PREC_FP32 && !c->net_file)
        return dps_fail(DPS_ERR_USAGE, "--mode %s --precision %s: %s runs the MLP presets in fp32 "
                        "for now (their units' half-precision casts are not built; a model "
                        "file's ops cast their own); use --precision fp32, a model file, or "
                        "--mode zero1 for sharding under autocast", st->name,
                        dps_precision_name(c->precision), st->name);
    if (c->fault_rank >= c->ngpus)
        return dps_fail(DPS_ERR_USAGE, "--inject-fault %d:...: there are only ranks 0..%d",
                        c->fault_rank, c->ngpus - 1);
    if (c->fault_rank >= 0 && c->fault_step >= c->warmup + c->steps)
        return dps_fail(DPS_ERR_USAGE, "--inject-fault ...:%d:...: the run has steps 0..%d "
                        "(warm-up included)", c->fault_step, c->warmup + c->steps - 1);
    return DPS_OK;
}

/* --accum: the batch splits into equal micro-batches on every device;
 * --no-sync off is ddp's, with micro-steps to sync. */
static dps_status check_accum(const dps_config *c)
{
    if (!c->no_sync && !dps_strategy_of(c->mode)->buckets)
        return dps_fail(DPS_ERR_USAGE, "--no-sync off: %s has no no_sync (%s every micro-step "
                        "whatever it is told); leave --no-sync out or use --mode ddp",
                        dps_mode_name(c->mode), !dps_strategy_of(c->mode)->per_rank ? "DataParallel reduces"
                        : "it reduce-scatters the gradients");
    if (!c->no_sync && c->accum == 1)
        return dps_fail(DPS_ERR_USAGE, "--no-sync off: with one micro-step every step all-reduces "
                        "anyway; add --accum N (N > 1) to measure the loop without no_sync");
    if (c->accum == 1) return DPS_OK;
    int64_t unit = (int64_t)c->ngpus * c->accum;
    if (c->global_batch % unit)
        return dps_fail(DPS_ERR_USAGE, "--batch %d --gpus %d --accum %d: the batch does not split "
                        "into %d micro-batches of equal shares for %d device%s; use a batch that "
                        "is a multiple of %" PRId64 " (for example %" PRId64 ")", c->global_batch,
                        c->ngpus, c->accum, c->accum, c->ngpus, c->ngpus == 1 ? "" : "s", unit,
                        (c->global_batch / unit + 1) * unit);
    return DPS_OK;
}

int config_scaler(const dps_config *c)
{
    return c->scaler == 0 ? c->precision == PREC_FP16 : c->scaler == 2;
}

/* fp16 needs its GradScaler; --inject-overflow needs one to skip the step. */
static dps_status check_scaler(const dps_config *c)
{
    if (c->precision == PREC_FP16 && !config_scaler(c))
        return dps_fail(DPS_ERR_USAGE, "--precision fp16 --scaler off: fp16 gradients underflow "
                        "to zero and overflow to inf without dynamic loss scaling; leave --scaler "
                        "out (fp16 uses one) or use --precision bf16");
    if (c->overflow_step < 0) return DPS_OK;
    if (!config_scaler(c))
        return dps_fail(DPS_ERR_USAGE, "--inject-overflow: without a GradScaler an inf gradient "
                        "ruins the parameters; use --precision fp16 or --scaler on");
    if (c->overflow_step >= c->warmup + c->steps)
        return dps_fail(DPS_ERR_USAGE, "--inject-overflow %d: the run has steps 0..%d (warm-up "
                        "included)", c->overflow_step, c->warmup + c->steps - 1);
    return DPS_OK;
}

dps_status config_check_values(const dps_config *c)
{
    if (c->profile_last >= c->warmup + c->steps)
        return dps_fail(DPS_ERR_USAGE, "--profile-steps %d:%d: the run has steps 0..%d "
                        "(warm-up included)", c->profile_first, c->profile_last,
                        c->warmup + c->steps - 1);
    DPS_TRY(check_sizes(c));
    DPS_TRY(check_accum(c));
    DPS_TRY(check_scaler(c));
    return check_ddp(c);
}

dps_status config_check(const dps_config *c, const backend *be)
{
    DPS_TRY(check_devices(c, be));
    if (c->dp_comm == DPCOMM_NCCL && (be->kind != BE_CUDA || dps_strategy_of(c->mode)->per_rank))
        return dps_fail(DPS_ERR_USAGE, "--dp-comm nccl: only dp on the cuda backend uses it");
#ifndef DPS_HAVE_NCCL
    if (c->dp_comm == DPCOMM_NCCL)
        return dps_fail(DPS_ERR_USAGE, "--dp-comm nccl: this dpscale was built without NCCL");
    if (be->kind == BE_CUDA && dps_strategy_of(c->mode)->per_rank && c->ngpus > 1)
        return dps_fail(DPS_ERR_USAGE, "--mode %s --gpus %d: %s across GPUs needs NCCL, and "
                        "this dpscale was built without it (-Dnccl-root=DIR); use --gpus 1 or "
                        "--mode dp", dps_mode_name(c->mode), c->ngpus, dps_mode_name(c->mode));
#endif
    if (c->net_file) DPS_TRY(check_file(c)); /* its fp32 before the host's */
    return config_check_values(c);
}

void dev_stats_memory(dev_stats *d, const backend *be, int dev)
{
    const be_mem *m = &be->mem[dev];
    d->alloc_peak = m->peak;
    d->device_peak = m->device_peak;
    d->device_base = m->device_base;
    d->capacity = m->capacity;
    d->nmem_cat = 0;
    d->peak_phase = m->peak_phase_on - 1;
    for (int i = 0; i < m->ncat; i++) {
        if (!m->cat[i].at_peak) continue;
        dps_strlcpy(d->mem_cat[d->nmem_cat].what, m->cat[i].what, sizeof d->mem_cat[0].what);
        d->mem_cat[d->nmem_cat++].bytes = m->cat[i].at_peak;
    }
}
