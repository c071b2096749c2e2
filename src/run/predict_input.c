/* MACHINE and WORKLOAD files (see predict_input.h): one table of keys per
 * file (type, range, unit, where the value goes), read by keyfile.c; then
 * the defaults and the checks that need the whole file. */
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

typedef enum key_type { K_TEXT, K_INT, K_NUM, K_WORD, K_CHOICE, K_TENSORS } key_type;

typedef struct key_spec {
    const char *key;
    key_type type;
    double lo, hi;              /* INT: lo..hi; NUM: above lo (at least lo if zero_ok), at most hi */
    int zero_ok;
    size_t off;                 /* where the value goes in the struct */
    const char *const *words;   /* WORD: stored as the index (an int) */
    int nwords;
    const char *unit;           /* after the range in a refusal: "GB/s" */
} key_spec;

#define M(f) offsetof(predict_machine, f)
#define W(f) offsetof(predict_workload, f)
#define WORDS(w) .words = (w), .nwords = (int)(sizeof(w) / sizeof((w)[0]))

static const char *const grad_bytes_words[] = {"4", "2"}; /* K_CHOICE: the integers allowed */

static const key_spec machine_keys[] = {
    {"name", K_TEXT, 0, DPS_NAME_MAX - 1, 0, M(name), NULL, 0, "characters"},
    {"gpus_per_node", K_INT, 1, 1024, 0, M(gpus_per_node), NULL, 0, "devices"},
    {"nodes", K_INT, 1, 1 << 20, 0, M(nodes), NULL, 0, "nodes"},
    {"gpu_mem_gib", K_NUM, 0, 1 << 20, 0, M(gpu_mem_gib), NULL, 0, "GiB"},
    {"intra_link", K_WORD, 0, 0, 0, M(intra_link), WORDS(predict_link_names), NULL},
    {"intra_busbw_gbps", K_NUM, 0, 1e6, 0, M(intra_busbw_gbps), NULL, 0, "GB/s"},
    {"p2p_gbps", K_NUM, 0, 1e6, 0, M(p2p_gbps), NULL, 0, "GB/s"},
    {"h2d_gbps", K_NUM, 0, 1e6, 0, M(h2d_gbps), NULL, 0, "GB/s"},
    {"inter_gbps", K_NUM, 0, 1e6, 0, M(inter_gbps), NULL, 0, "GB/s"},
    {"intra_latency_us", K_NUM, 0, 1e6, 1, M(intra_latency_us), NULL, 0, "us"},
    {"inter_latency_us", K_NUM, 0, 1e6, 1, M(inter_latency_us), NULL, 0, "us"},
    {"mem_gbps", K_NUM, 0, 1e6, 0, M(mem_gbps), NULL, 0, "GB/s"},
};

static const key_spec workload_keys[] = {
    {"name", K_TEXT, 0, DPS_NAME_MAX - 1, 0, W(name), NULL, 0, "characters"},
    {"params", K_NUM, 0, 1e15, 0, W(params), NULL, 0, "parameters"},
    {"tensor_params", K_TENSORS, 0, 0, 0, W(tensors), NULL, 0, "elements"},
    {"bytes_per_grad", K_CHOICE, 0, 0, 0, W(bytes_per_grad), WORDS(grad_bytes_words), NULL},
    {"step_ms_1gpu", K_NUM, 0, 1e9, 0, W(step_ms_1gpu), NULL, 0, "ms"},
    {"forward_ms", K_NUM, 0, 1e9, 0, W(forward_ms), NULL, 0, "ms"},
    {"backward_ms", K_NUM, 0, 1e9, 0, W(backward_ms), NULL, 0, "ms"},
    {"optimizer_ms", K_NUM, 0, 1e9, 1, W(optimizer_ms), NULL, 0, "ms"},
    {"load_ms", K_NUM, 0, 1e9, 1, W(load_ms), NULL, 0, "ms"},
    {"batch_per_gpu", K_INT, 1, 1 << 24, 0, W(batch_per_gpu), NULL, 0, "samples"},
    {"input_bytes_per_sample", K_NUM, 0, 1e15, 1, W(input_bytes_per_sample), NULL, 0, "bytes"},
    {"output_bytes_per_sample", K_NUM, 0, 1e15, 1, W(output_bytes_per_sample), NULL, 0, "bytes"},
    {"activation_bytes_per_sample", K_NUM, 0, 1e15, 1, W(activation_bytes_per_sample), NULL, 0,
     "bytes"},
    {"optimizer", K_WORD, 0, 0, 0, W(optimizer), WORDS(dps_optimizer_names), NULL},
    {"bucket_mb", K_NUM, 0, 65536, 0, W(bucket_mb), NULL, 0, "MiB"},
    {"first_bucket_mb", K_NUM, 0, 65536, 0, W(first_bucket_mb), NULL, 0, "MiB"},
};

#define MAX_KEYS 20

typedef struct parse_ctx {
    const key_spec *keys;
    int nkeys;
    char *obj;
    int line_of[MAX_KEYS];   /* where each key was given; 0: not given */
} parse_ctx;

static dps_status unknown_key(const parse_ctx *p, const char *path, int line, const char *key)
{
    char known[512] = "";
    for (int i = 0; i < p->nkeys; i++) {
        size_t used = strlen(known);
        snprintf(known + used, sizeof known - used, "%s%s", i ? ", " : "", p->keys[i].key);
    }
    return keyfile_fail(path, line, "unknown key '%s' (expected %s)", key, known);
}

static dps_status word_value(const key_spec *s, char *dst, const char *path, int line,
                             const char *val)
{
    char expected[160];
    int i = dps_match_word(val, s->words, s->nwords, expected, sizeof expected);
    if (i < 0) return keyfile_fail(path, line, "%s = %s: expected one of %s", s->key, val, expected);
    if (s->type == K_CHOICE) *(int *)dst = atoi(s->words[i]);
    else *(int *)dst = i;
    return DPS_OK;
}

static dps_status number_value(const key_spec *s, char *dst, const char *path, int line,
                               const char *val)
{
    double x;
    int ok = dps_parse_f64(val, &x) == 0 && (s->zero_ok ? x >= s->lo : x > s->lo) && x <= s->hi;
    if (s->type == K_INT) {
        int64_t i;
        ok = dps_parse_i64(val, (int64_t)s->lo, (int64_t)s->hi, &i) == 0;
        if (ok) *(int *)dst = (int)i;
        if (!ok)
            return keyfile_fail(path, line, "%s = %s: expected an integer from %.0f to %.0f (%s)",
                                s->key, val, s->lo, s->hi, s->unit);
        return DPS_OK;
    }
    if (!ok)
        return keyfile_fail(path, line, "%s = %s: expected a number %s %g, at most %g (%s)", s->key,
                            val, s->zero_ok ? "from" : "above", s->lo, s->hi, s->unit);
    *(double *)dst = x;
    return DPS_OK;
}

static dps_status tensors_value(char *obj, const char *path, int line, const char *val)
{
    predict_workload *w = (predict_workload *)obj;
    char why[160];
    if (tensor_list_parse(val, &w->tensors, &w->ntensors, why, sizeof why))
        return keyfile_fail(path, line, "tensor_params: %s (expected element counts in "
                            "model.parameters() order, e.g. 768, 12 x (2304, 768))", why);
    return DPS_OK;
}

static dps_status set_key(void *ctx, const char *path, int line, const char *key, const char *val)
{
    parse_ctx *p = ctx;
    int i = 0;
    while (i < p->nkeys && strcmp(p->keys[i].key, key) != 0) i++;
    if (i == p->nkeys) return unknown_key(p, path, line, key);
    if (p->line_of[i])
        return keyfile_fail(path, line, "'%s' given again (first at line %d)", key, p->line_of[i]);
    p->line_of[i] = line;
    const key_spec *s = &p->keys[i];
    char *dst = p->obj + s->off;
    if (s->type == K_WORD || s->type == K_CHOICE) return word_value(s, dst, path, line, val);
    if (s->type == K_TENSORS) return tensors_value(p->obj, path, line, val);
    if (s->type != K_TEXT) return number_value(s, dst, path, line, val);
    if (strlen(val) > (size_t)s->hi || !dps_utf8_valid(val))
        return keyfile_fail(path, line, "%s: expected text of at most %.0f characters", key, s->hi);
    dps_strlcpy(dst, val, (size_t)s->hi + 1);
    return DPS_OK;
}

/* The file's name without its folders and its last extension. */
static void name_from_path(const char *path, char *name, size_t len)
{
    const char *base = strrchr(path, '/');
    dps_strlcpy(name, base ? base + 1 : path, len);
    char *dot = strrchr(name, '.');
    if (dot && dot != name) *dot = '\0';
}

static dps_status load(const char *path, const char *what, const key_spec *keys, int nkeys,
                       void *obj, parse_ctx *p)
{
    *p = (parse_ctx){.keys = keys, .nkeys = nkeys, .obj = obj};
    return keyfile_read(path, what, set_key, p);
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
    parse_ctx p;
    *m = (predict_machine){.nodes = 1, .intra_link = PLINK_PCIE, .p2p_gbps = -1, .h2d_gbps = -1,
                           .intra_latency_us = -1, .inter_latency_us = -1, .mem_gbps = -1};
    DPS_TRY(load(path, "machine file", machine_keys,
                 (int)(sizeof machine_keys / sizeof machine_keys[0]), m, &p));
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
static dps_status tensors_agree(const char *path, const parse_ctx *p, predict_workload *w)
{
    double sum = 0;
    for (int i = 0; i < w->ntensors; i++) sum += (double)w->tensors[i];
    if (w->params <= 0) w->params = sum;
    if (w->params == sum) return DPS_OK;
    int line = p->line_of[2]; /* tensor_params */
    return keyfile_fail(path, line, "tensor_params add up to %.0f parameters, params = %.0f "
                        "(give one, or make them agree)", sum, w->params);
}

static dps_status workload_checks(const char *path, const parse_ctx *p, predict_workload *w)
{
    if (!w->name[0]) name_from_path(path, w->name, sizeof w->name);
    w->precision = w->bytes_per_grad == 2 ? PREC_BF16 : PREC_FP32;
    if (w->ntensors) DPS_TRY(tensors_agree(path, p, w));
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
    parse_ctx p;
    predict_workload_defaults(w);
    dps_status rc = load(path, "workload file", workload_keys,
                         (int)(sizeof workload_keys / sizeof workload_keys[0]), w, &p);
    if (!rc) rc = workload_checks(path, &p, w);
    if (rc) predict_workload_free(w);
    return rc;
}
