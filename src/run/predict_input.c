/* MACHINE and WORKLOAD files (see predict_input.h): one table of keys per
 * file (type, range, unit, where the value goes), read by
 * keyfile_read_keys; then the defaults and the checks that need the whole
 * file. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run/keyfile.h"
#include "run/predict_input.h"
#include "run/tensor_list.h"
#include "core/util.h"

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
#define WORDS(w) .words = (w), .nwords = (int)(sizeof(w) / sizeof((w)[0]))
#define NKEYS(t) ((int)(sizeof(t) / sizeof((t)[0])))

static const char *const grad_bytes_words[] = {"4", "2"}; /* KEY_CHOICE: the integers allowed */

static const keyfile_key machine_keys[] = {
    {"name", KEY_TEXT, 0, DPS_NAME_MAX - 1, 0, M(name), NULL, 0, "characters", NULL},
    {"gpus_per_node", KEY_INT, 1, 1024, 0, M(gpus_per_node), NULL, 0, "devices", NULL},
    {"nodes", KEY_INT, 1, 1 << 20, 0, M(nodes), NULL, 0, "nodes", NULL},
    {"gpu_mem_gib", KEY_NUM, 0, 1 << 20, 0, M(gpu_mem_gib), NULL, 0, "GiB", NULL},
    {"intra_link", KEY_WORD, 0, 0, 0, M(intra_link), WORDS(predict_link_names), NULL, NULL},
    {"intra_busbw_gbps", KEY_NUM, 0, 1e6, 0, M(intra_busbw_gbps), NULL, 0, "GB/s", NULL},
    {"p2p_gbps", KEY_NUM, 0, 1e6, 0, M(p2p_gbps), NULL, 0, "GB/s", NULL},
    {"h2d_gbps", KEY_NUM, 0, 1e6, 0, M(h2d_gbps), NULL, 0, "GB/s", NULL},
    {"inter_gbps", KEY_NUM, 0, 1e6, 0, M(inter_gbps), NULL, 0, "GB/s", NULL},
    {"intra_latency_us", KEY_NUM, 0, 1e6, 1, M(intra_latency_us), NULL, 0, "us", NULL},
    {"inter_latency_us", KEY_NUM, 0, 1e6, 1, M(inter_latency_us), NULL, 0, "us", NULL},
    {"mem_gbps", KEY_NUM, 0, 1e6, 0, M(mem_gbps), NULL, 0, "GB/s", NULL},
};

static const keyfile_key workload_keys[] = {
    {"name", KEY_TEXT, 0, DPS_NAME_MAX - 1, 0, W(name), NULL, 0, "characters", NULL},
    {"params", KEY_NUM, 0, 1e15, 0, W(params), NULL, 0, "parameters", NULL},
    {"tensor_params", KEY_CUSTOM, 0, 0, 0, W(tensors), NULL, 0, "elements", tensors_value},
    {"bytes_per_grad", KEY_CHOICE, 0, 0, 0, W(bytes_per_grad), WORDS(grad_bytes_words), NULL, NULL},
    {"step_ms_1gpu", KEY_NUM, 0, 1e9, 0, W(step_ms_1gpu), NULL, 0, "ms", NULL},
    {"forward_ms", KEY_NUM, 0, 1e9, 0, W(forward_ms), NULL, 0, "ms", NULL},
    {"backward_ms", KEY_NUM, 0, 1e9, 0, W(backward_ms), NULL, 0, "ms", NULL},
    {"optimizer_ms", KEY_NUM, 0, 1e9, 1, W(optimizer_ms), NULL, 0, "ms", NULL},
    {"load_ms", KEY_NUM, 0, 1e9, 1, W(load_ms), NULL, 0, "ms", NULL},
    {"batch_per_gpu", KEY_INT, 1, 1 << 24, 0, W(batch_per_gpu), NULL, 0, "samples", NULL},
    {"input_bytes_per_sample", KEY_NUM, 0, 1e15, 1, W(input_bytes_per_sample), NULL, 0, "bytes",
     NULL},
    {"output_bytes_per_sample", KEY_NUM, 0, 1e15, 1, W(output_bytes_per_sample), NULL, 0, "bytes",
     NULL},
    {"activation_bytes_per_sample", KEY_NUM, 0, 1e15, 1, W(activation_bytes_per_sample), NULL, 0,
     "bytes", NULL},
    {"optimizer", KEY_WORD, 0, 0, 0, W(optimizer), WORDS(dps_optimizer_names), NULL, NULL},
    {"bucket_mb", KEY_NUM, 0, 65536, 0, W(bucket_mb), NULL, 0, "MiB", NULL},
    {"first_bucket_mb", KEY_NUM, 0, 65536, 0, W(first_bucket_mb), NULL, 0, "MiB", NULL},
};

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
    int line_of[NKEYS(machine_keys)];
    *m = (predict_machine){.nodes = 1, .intra_link = PLINK_PCIE, .p2p_gbps = -1, .h2d_gbps = -1,
                           .intra_latency_us = -1, .inter_latency_us = -1, .mem_gbps = -1};
    DPS_TRY(keyfile_read_keys(path, "machine file", machine_keys, NKEYS(machine_keys), m, line_of));
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
    *w = (predict_workload){.bytes_per_grad = 4, .forward_ms = -1, .backward_ms = -1,
                            .optimizer_ms = -1, .load_ms = -1, .batch_per_gpu = 1,
                            .optimizer = OPT_SGD, .bucket_mb = 25.0,
                            .first_bucket_mb = 1.0}; /* DDP's defaults */
}

void predict_workload_free(predict_workload *w)
{
    free(w->tensors);
    free(w->ready);
    w->tensors = NULL;
    w->ready = NULL;
    w->ntensors = w->nready = 0;
}

/* params from the tensors when only they are given; both must agree. */
static dps_status tensors_agree(const char *path, const int *line_of, predict_workload *w)
{
    double sum = 0;
    for (int i = 0; i < w->ntensors; i++) sum += (double)w->tensors[i];
    if (w->params <= 0) w->params = sum;
    if (w->params == sum) return DPS_OK;
    int line = line_of[2]; /* tensor_params */
    return keyfile_fail(path, line, "tensor_params add up to %.0f parameters, params = %.0f "
                        "(give one, or make them agree)", sum, w->params);
}

static dps_status workload_checks(const char *path, const int *line_of, predict_workload *w)
{
    if (!w->name[0]) name_from_path(path, w->name, sizeof w->name);
    w->precision = w->bytes_per_grad == 2 ? PREC_BF16 : PREC_FP32;
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
    int line_of[NKEYS(workload_keys)];
    predict_workload_defaults(w);
    dps_status rc = keyfile_read_keys(path, "workload file", workload_keys, NKEYS(workload_keys), w,
                                      line_of);
    if (!rc) rc = workload_checks(path, line_of, w);
    if (rc) predict_workload_free(w);
    return rc;
}
