/* MACHINE and WORKLOAD files (see predict_input.h): one table of keys per
 * file (type, range, unit, where the value goes), read by
 * keyfile_read_keys; then the defaults and the checks that need the whole
 * file. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/keyfile.h"
#include "core/util.h"
#include "model/model_file.h"
#include "predict/predict_input.h"
#include "predict/tensor_list.h"

const char *const predict_link_names[PLINK_COUNT] = {"nvlink", "pcie", "host"};

static dps_status tensors_value(void *obj, const char *path, int line, const char *val)
{
    predict_workload *w = (predict_workload *)obj;
    char why[160];
    if (tensor_list_parse(val, &w->tensors, &w->ntensors, why, sizeof why))
        return keyfile_fail(path, line, "tensor_params: %s (expected element counts in "
                            "model.parameters() order, e.g. 768, 12 x (2304, 768))", why);
    return DPS_OK;
}

#define M(f) offsetof(predict_machine, f)
#define W(f) offsetof(predict_workload, f)

static const char *const grad_bytes_words[] = {"4", "2"}; /* KEY_CHOICE: the integers allowed */
static const char *const no_sync_words[] = {"on", "off"};  /* into sync_all: off is 1 */

static const keyfile_key machine_keys[] = {
    KEYFILE_TEXT("name", M(name), DPS_NAME_MAX - 1),
    KEYFILE_INT("gpus_per_node", M(gpus_per_node), 1, 1024, "devices"),
    KEYFILE_INT("nodes", M(nodes), 1, 1 << 20, "nodes"),
    KEYFILE_ABOVE("gpu_mem_gib", M(gpu_mem_gib), 0, 1 << 20, "GiB"),
    KEYFILE_WORD("intra_link", M(intra_link), predict_link_names),
    KEYFILE_ABOVE("intra_busbw_gbps", M(intra_busbw_gbps), 0, 1e6, "GB/s"),
    KEYFILE_ABOVE("p2p_gbps", M(p2p_gbps), 0, 1e6, "GB/s"),
    KEYFILE_ABOVE("h2d_gbps", M(h2d_gbps), 0, 1e6, "GB/s"),
    KEYFILE_ABOVE("inter_gbps", M(inter_gbps), 0, 1e6, "GB/s"),
    KEYFILE_FROM("intra_latency_us", M(intra_latency_us), 0, 1e6, "us"),
    KEYFILE_FROM("inter_latency_us", M(inter_latency_us), 0, 1e6, "us"),
    KEYFILE_ABOVE("mem_gbps", M(mem_gbps), 0, 1e6, "GB/s"),
};

static const keyfile_key workload_keys[] = {
    KEYFILE_TEXT("name", W(name), DPS_NAME_MAX - 1),
    KEYFILE_ABOVE("params", W(params), 0, 1e15, "parameters"),
    KEYFILE_CUSTOM("tensor_params", W(tensors), tensors_value, "elements"),
    KEYFILE_CHOICE("bytes_per_grad", W(bytes_per_grad), grad_bytes_words),
    KEYFILE_ABOVE("step_ms_1gpu", W(step_ms_1gpu), 0, 1e9, "ms"),
    KEYFILE_ABOVE("forward_ms", W(forward_ms), 0, 1e9, "ms"),
    KEYFILE_ABOVE("backward_ms", W(backward_ms), 0, 1e9, "ms"),
    KEYFILE_FROM("optimizer_ms", W(optimizer_ms), 0, 1e9, "ms"),
    KEYFILE_FROM("load_ms", W(load_ms), 0, 1e9, "ms"),
    KEYFILE_INT("batch_per_gpu", W(batch_per_gpu), 1, 1 << 24, "samples"),
    KEYFILE_FROM("input_bytes_per_sample", W(input_bytes_per_sample), 0, 1e15, "bytes"),
    KEYFILE_FROM("output_bytes_per_sample", W(output_bytes_per_sample), 0, 1e15, "bytes"),
    KEYFILE_FROM("activation_bytes_per_sample", W(activation_bytes_per_sample), 0, 1e15, "bytes"),
    KEYFILE_WORD("optimizer", W(optimizer), dps_optimizer_names),
    KEYFILE_ABOVE("bucket_mb", W(bucket_mb), 0, 65536, "MiB"),
    KEYFILE_ABOVE("first_bucket_mb", W(first_bucket_mb), 0, 65536, "MiB"),
    KEYFILE_INT("units", W(units), 1, 1 << 20, "units"),
    KEYFILE_WORD("precision", W(precision), dps_precision_names),
    KEYFILE_INT("accum", W(accum), 1, 4096, "micro-batches"),
    KEYFILE_WORD("no_sync", W(sync_all), no_sync_words),
    KEYFILE_TEXT("model", W(model_file), PREDICT_PATH_MAX - 1),
};
#define LINE_TENSORS 2 /* workload_keys' index of tensor_params */
#define LINE_GRAD_BYTES 3
#define LINE_PRECISION (KEYFILE_COUNT(workload_keys) - 4)
#define LINE_MODEL (KEYFILE_COUNT(workload_keys) - 1)

/* The file's name without its folders and its last extension. */
static void name_from_path(const char *path, char *name, size_t len)
{
    dps_strlcpy(name, dps_path_base(path), len);
    char *dot = strrchr(name, '.');
    if (dot && dot != name) *dot = '\0';
}

static dps_status missing(const char *path, const char *key, const char *why)
{
    return dps_fail(DPS_ERR_USAGE, "%s: missing key '%s'%s", path, key, why);
}

/* NCCL's ring latency per step for the Simple protocol: hwLat of
 * src/graph/tuning.cc (NCCL 2.7-2.18: NVLink 3.4 us, PCI 5.7 us, network
 * 9.6 us). The host backend has no figure of NCCL's; PCI's is used. */
static double nccl_step_latency_us(predict_link link)
{
    return link == PLINK_NVLINK ? 3.4 : 5.7;
}

dps_status predict_machine_load(const char *path, predict_machine *m)
{
    int line_of[KEYFILE_COUNT(machine_keys)];
    *m = (predict_machine){.intra_link = PLINK_PCIE, .p2p_gbps = -1, .h2d_gbps = -1,
                           .intra_latency_us = -1, .inter_latency_us = -1, .mem_gbps = -1};
    DPS_TRY(keyfile_read_keys(path, "machine file", machine_keys, KEYFILE_COUNT(machine_keys), m, line_of));
    if (!m->name[0]) name_from_path(path, m->name, sizeof m->name);
    if (!m->gpus_per_node) return missing(path, "gpus_per_node", "");
    if (m->intra_busbw_gbps <= 0) return missing(path, "intra_busbw_gbps", " (GB/s, as nccl-tests' busbw)");
    if (m->nodes > 1 && m->inter_gbps <= 0)
        return missing(path, "inter_gbps", " (network GB/s per node; needed as nodes > 1)");
    if (m->p2p_gbps < 0) m->p2p_gbps = m->intra_busbw_gbps;
    if (m->h2d_gbps < 0) m->h2d_gbps = 12.0;   /* PCIe 3.0 x16, pinned: ~12 GB/s in bandwidthTest */
    if (m->mem_gbps < 0) m->mem_gbps = 900.0;  /* V100 SXM2's HBM2 (NVIDIA's V100 datasheet) */
    if (m->intra_latency_us < 0) m->intra_latency_us = nccl_step_latency_us(m->intra_link);
    if (m->inter_latency_us < 0) m->inter_latency_us = 9.6; /* tuning.cc, hwLat NET Ring Simple */
    return DPS_OK;
}

void predict_workload_defaults(predict_workload *w)
{
    *w = (predict_workload){.bytes_per_grad = predict_grad_bytes(PREC_FP32), .forward_ms = -1,
                            .backward_ms = -1, .optimizer_ms = -1, .load_ms = -1,
                            .unscale_ms = -1, .batch_per_gpu = 1, .optimizer = OPT_SGD,
                            .precision = PREC_FP32, .accum = 1, .bucket_mb = 25.0,
                            .first_bucket_mb = 1.0}; /* DDP's defaults */
}

int predict_grad_bytes(dps_precision p)
{
    (void)p; /* fp32, and autocast's bf16 and fp16 alike: fp32 gradients */
    return (int)sizeof(float);
}

int predict_accum(const predict_workload *w)
{
    return w->accum > 1 ? w->accum : 1;
}

dps_status predict_check_accum(const predict_workload *w, const char *where)
{
    if (w->batch_per_gpu % predict_accum(w) == 0) return DPS_OK;
    return dps_fail(DPS_ERR_USAGE, "%s: batch_per_gpu %d does not split into accum = %d equal "
                    "micro-batches (give a multiple of %d)", where, w->batch_per_gpu, w->accum,
                    w->accum);
}

/* The precision given, or as files before the key had it (bytes_per_grad 2:
 * bf16 gradients, a model cast to bf16); bytes_per_grad, when not given,
 * the precision's. */
static void precision_and_grads(const int *line_of, predict_workload *w)
{
    if (!line_of[LINE_PRECISION]) w->precision = w->bytes_per_grad == 2 ? PREC_BF16 : PREC_FP32;
    else if (!line_of[LINE_GRAD_BYTES]) w->bytes_per_grad = predict_grad_bytes(w->precision);
}

void predict_workload_free(predict_workload *w)
{
    free(w->tensors);
    free(w->ready);
    free(w->tensor_ready);
    free(w->tensor_unit);
    w->tensors = NULL;
    w->ready = NULL;
    w->tensor_ready = NULL;
    w->tensor_unit = NULL;
    w->ntensors = w->nready = 0;
}

/* params from the tensors when only they are given; both must agree. */
static dps_status tensors_agree(const char *path, const int *line_of, predict_workload *w)
{
    double sum = 0;
    for (int i = 0; i < w->ntensors; i++) sum += (double)w->tensors[i];
    if (w->params <= 0) w->params = sum;
    if (w->params == sum) return DPS_OK;
    int line = line_of[w->model_file[0] ? LINE_MODEL : LINE_TENSORS];
    return keyfile_fail(path, line, "%s add up to %.0f parameters, params = %.0f "
                        "(give one, or make them agree)", w->model_file[0] ? "the model file's tensors" : "tensor_params",
                        sum, w->params);
}

/* Each tensor's place in backward: backward runs the ops from the last, each
 * taking twice its forward GEMM FLOPs; a tensor is ready after the first
 * op that names it. ready[t] indexes the file's tensors. */
static void tensor_ready_at(const model_file *mf, double *ready)
{
    double total = 2.0 * model_file_fwd_flops(mf), done = 0;
    for (int i = mf->nops - 1; i >= 0; i--) {
        const mf_op *o = &mf->ops[i];
        done += 2.0 * mf_op_flops(o);
        for (int t = 0; t < mf->ntensors; t++)
            if (mf->tensors[t].first_op == i) ready[t] = total > 0 ? done / total : 1.0;
    }
}

dps_status predict_workload_from_model(const model_file *mf, predict_workload *w)
{
    int n = mf->ntensors, *order = malloc((size_t)n * sizeof *order);
    double *at = malloc((size_t)n * sizeof *at);
    w->tensors = malloc((size_t)n * sizeof *w->tensors);
    w->tensor_ready = malloc((size_t)n * sizeof *w->tensor_ready);
    dps_status rc = order && at && w->tensors && w->tensor_ready ? DPS_OK
                  : dps_fail(DPS_ERR_RUNTIME, "out of host memory reading a model file");
    if (!rc) {
        model_file_bucket_order(mf, order);
        tensor_ready_at(mf, at);
        for (int i = 0; i < n; i++) {
            w->tensors[i] = mf->tensors[order[i]].numel;
            w->tensor_ready[i] = at[order[i]];
        }
        w->ntensors = n;
    }
    free(order);
    free(at);
    if (!w->model[0]) dps_strlcpy(w->model, mf->name, sizeof w->model);
    double saved = 0;
    for (int i = 0; i < mf->nops; i++) saved += (double)mf->ops[i].saved;
    if (w->output_bytes_per_sample <= 0)
        w->output_bytes_per_sample = (double)mf->ops[mf->nops - 1].out_elems * sizeof(float);
    if (w->activation_bytes_per_sample <= 0) w->activation_bytes_per_sample = saved;
    return rc;
}

/* model = FILE: read relative to the workload's folder; not with tensor_params. */
static dps_status load_model_file(const char *path, const int *line_of, predict_workload *w)
{
    if (w->ntensors)
        return keyfile_fail(path, line_of[LINE_MODEL], "model and tensor_params (line %d) both give "
                            "the tensors: keep one", line_of[LINE_TENSORS]);
    char file[PREDICT_PATH_MAX + 512];
    const char *base = dps_path_base(path);
    if (w->model_file[0] == '/' || base == path)
        snprintf(file, sizeof file, "%s", w->model_file);
    else
        snprintf(file, sizeof file, "%.*s%s", (int)(base - path), path, w->model_file);
    model_file mf;
    dps_status rc = model_file_read(file, &mf);
    if (rc)
        return dps_fail(DPS_ERR_USAGE, "%s:%d: model = %s: %s", path, line_of[LINE_MODEL],
                        w->model_file, dps_errmsg());
    rc = predict_workload_from_model(&mf, w);
    model_file_free(&mf);
    return rc;
}

static dps_status workload_checks(const char *path, const int *line_of, predict_workload *w)
{
    if (!w->name[0]) name_from_path(path, w->name, sizeof w->name);
    if (w->model_file[0]) DPS_TRY(load_model_file(path, line_of, w));
    precision_and_grads(line_of, w);
    DPS_TRY(predict_check_accum(w, path));
    if (w->ntensors) DPS_TRY(tensors_agree(path, line_of, w));
    if (w->params <= 0) return missing(path, "params", " (the parameter count)");
    if (w->step_ms_1gpu <= 0) return missing(path, "step_ms_1gpu", " (one device's step, ms)");
    double given = (w->forward_ms > 0 ? w->forward_ms : 0) + (w->backward_ms > 0 ? w->backward_ms : 0) +
                   (w->optimizer_ms > 0 ? w->optimizer_ms : 0) + (w->load_ms > 0 ? w->load_ms : 0);
    if (given > w->step_ms_1gpu)
        return dps_fail(DPS_ERR_USAGE, "%s: load_ms + forward_ms + backward_ms + optimizer_ms = %g "
                        "ms, more than step_ms_1gpu = %g ms", path, given, w->step_ms_1gpu);
    return DPS_OK;
}

dps_status predict_workload_load(const char *path, predict_workload *w)
{
    int line_of[KEYFILE_COUNT(workload_keys)];
    predict_workload_defaults(w);
    dps_status rc = keyfile_read_keys(path, "workload file", workload_keys, KEYFILE_COUNT(workload_keys), w,
                                      line_of);
    if (!rc) rc = workload_checks(path, line_of, w);
    if (rc) predict_workload_free(w);
    return rc;
}
