/* The predictor's inputs: a MACHINE file (what the hardware
 * offers) and a WORKLOAD file (what one device measured), each `key = value`
 * lines with `#` comments (keyfile.h). Unknown keys, a key given twice and
 * bad values are DPS_ERR_USAGE with FILE:LINE; a missing required key names
 * the file. Units: bandwidths in GB/s (1e9 bytes per second, as nccl-tests
 * and links.csv report them), latencies in microseconds, times in
 * milliseconds, sizes in bytes (the bucket caps in MiB, as DDP's
 * bucket_cap_mb). */
#ifndef DPS_PREDICT_INPUT_H
#define DPS_PREDICT_INPUT_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "model/model_file.h"

#define PREDICT_ID_MAX 192     /* a configuration id and its NUL, as runs.csv's */
#define PREDICT_PATH_MAX 1024  /* a workload's model file path and its NUL */

typedef enum predict_link { PLINK_NVLINK, PLINK_PCIE, PLINK_HOST, PLINK_COUNT } predict_link;
extern const char *const predict_link_names[PLINK_COUNT]; /* "nvlink", "pcie", "host" */

typedef struct predict_machine {
    char name[DPS_NAME_MAX];     /* default: the file's name */
    int gpus_per_node;           /* required */
    int nodes;                   /* the nodes the machine has; 0: not given. A device count
                                  * needs ceil(n / gpus_per_node) nodes; more than these are
                                  * predicted all the same, with a note */
    double gpu_mem_gib;          /* 0: not given, no out-of-memory forecast */
    predict_link intra_link;     /* default pcie */
    double intra_busbw_gbps;     /* required: all-reduce bus bandwidth in a node */
    double p2p_gbps;             /* device-to-device copies; default intra_busbw_gbps */
    double h2d_gbps;             /* host to device; default 12 (PCIe 3.0 x16, pinned) */
    double inter_gbps;           /* network per node, all NICs; required when nodes > 1;
                                  * 0: none (counts past one node skipped) */
    double intra_latency_us;     /* per ring step in a node; default NCCL's for intra_link */
    double inter_latency_us;     /* per ring step across nodes; default NCCL's */
    double mem_gbps;             /* device memory bandwidth (optimizer, loss, copies); default 900 */
} predict_machine;

typedef struct predict_workload {
    char name[DPS_NAME_MAX];     /* default: the file's name */
    char source[PREDICT_ID_MAX]; /* --from: the measured configuration's id; "" from a file */
    char model[DPS_NAME_MAX];    /* --from: the measured model; from a file: name */
    double params;               /* required (or the tensors' sum): parameter count */
    size_t *tensors;             /* element counts in the order bucket_assign takes them, the
                                  * reverse of the order backward readies them: tensor_params'
                                  * model.parameters() order, or a model file's reverse ready
                                  * order (owned; predict_workload_free); NULL: equal pieces */
    int ntensors;
    double *tensor_ready;        /* model file: where in backward each tensor's gradient is
                                  * complete, as a fraction of its GEMM FLOPs (owned); NULL:
                                  * at a pace proportional to the parameters */
    char model_file[PREDICT_PATH_MAX]; /* model: a model file (docs/model-file.md), relative
                                        * to the workload file's folder */
    int *tensor_unit;            /* the sharded strategies' unit of each tensor, the same for
                                  * a run of tensors (--from a preset: a layer's weight and
                                  * bias; owned); NULL: a model file's tensors grouped by where
                                  * backward completes them, else each tensor a unit */
    int units;                   /* `units = N`: the parameters in N equal units (FSDP's
                                  * wrapping, ZeRO's partitions); 0: from the tensors */
    double *ready;               /* --from: each bucket's measured ready time as a fraction of
                                  * backward (buckets.csv; owned); NULL: from the tensors */
    int nready;
    int bytes_per_grad;          /* 4 or 2; default predict_grad_bytes(precision): 4 */
    double step_ms_1gpu;         /* required: one device, no strategy */
    double forward_ms, backward_ms, optimizer_ms; /* < 0: not given */
    double load_ms;              /* host-to-device input per step; < 0: from the input bytes */
    int batch_per_gpu;           /* default 1 */
    double input_bytes_per_sample, output_bytes_per_sample, activation_bytes_per_sample;
    dps_optimizer optimizer;     /* default sgd (momentum: one state tensor) */
    dps_precision precision;     /* the compute precision named in predictions.csv: --from, the
                                  * run's; a file's `precision`, else bf16 when bytes_per_grad
                                  * is 2; fp16 adds the GradScaler's unscale */
    double unscale_ms;           /* fp16: the GradScaler's unscale a step; < 0: from the
                                  * gradients over mem_gbps */
    int accum;                   /* micro-batches of batch_per_gpu / accum samples per optimizer
                                  * step (gradient accumulation); 0 or 1: none */
    int sync_all;                /* ddp with accum > 1: every micro-step all-reduces (`no_sync =
                                  * off`); 0 (default): all but the last under no_sync */
    double bucket_mb, first_bucket_mb; /* DDP's caps; default 25 and 1 */
} predict_workload;

dps_status predict_machine_load(const char *path, predict_machine *m) DPS_MUST_USE;
dps_status predict_workload_load(const char *path, predict_workload *w) DPS_MUST_USE;
void predict_workload_free(predict_workload *w);
/* The workload's tensors (and when not given, its name, output and
 * activation bytes) from a model file, each tensor ready where backward
 * completes it. */
dps_status predict_workload_from_model(const model_file *mf, predict_workload *w) DPS_MUST_USE;
/* A workload's defaults, as a file without optional keys gets them. */
void predict_workload_defaults(predict_workload *w);
/* Bytes a gradient of precision p takes: 4. Autocast (bf16, fp16) runs the
 * ops in half precision but keeps the parameters, and so their gradients
 * (.grad has the parameter's dtype), in fp32: DDP's buckets and dp's reduce
 * move fp32 whatever the precision. */
int predict_grad_bytes(dps_precision p);
/* Micro-steps per optimizer step: accum, at least 1. */
int predict_accum(const predict_workload *w);
/* DPS_ERR_USAGE naming `where` when the batch per device does not split
 * into accum equal micro-batches. */
dps_status predict_check_accum(const predict_workload *w, const char *where) DPS_MUST_USE;

#endif
