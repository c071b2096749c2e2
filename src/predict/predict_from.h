/* A dpscale results folder as the predictor's inputs (`predict --from`):
 * one WORKLOAD per weak-scaling series with an ok one-device row (its phase
 * medians, its model's tensors, bytes per sample from phases.csv and
 * memory.csv), and the MACHINE it was measured on (links.csv, allreduce.csv
 * from `dpscale comm-bench`, devices.csv). */
#ifndef DPS_PREDICT_FROM_H
#define DPS_PREDICT_FROM_H

#include "predict/predict_input.h"

/* A results folder's files the predictor reads (runs.csv, phases.csv and,
 * when there, memory.csv and buckets.csv), each read once. */
typedef struct predict_folder predict_folder;
dps_status predict_folder_open(const char *dir, predict_folder **f) DPS_MUST_USE;
void predict_folder_close(predict_folder *f);
const char *predict_folder_dir(const predict_folder *f);

/* *w: nw workloads (calloc'd; predict_from_free). */
dps_status predict_from_workloads(const predict_folder *f, predict_workload **w, int *nw)
    DPS_MUST_USE;
void predict_from_free(predict_workload *w, int nw);

/* A measured configuration on several devices, for calibration: the
 * workload of its series, its step and forward medians, the all-reduce bus
 * bandwidth it reached (0: none), and forward_1, its series' one-device
 * forward median. */
#define PREDICT_MEASURED_BUCKETS 64

typedef struct predict_measured {
    int workload;
    dps_mode mode;
    int ngpus;
    char id[PREDICT_ID_MAX];
    double step_ms, forward_ms, forward_1, busbw_gbps;
    double bucket_mb;          /* its bucket cap (25 without one) */
    double p10_ms, p90_ms;     /* its steps' 10th and 90th percentiles (NAN: not in runs.csv) */
    /* ddp, traced (buckets.csv, the last micro-step that all-reduced):
     * each bucket's bytes and, of the rank whose all-reduce began last,
     * its ready time, all-reduce begin (NAN: none; both ms after that
     * micro-step's backward began) and time; the slowest device's backward
     * median (phases.csv) over the micro-steps: one micro-step's */
    int nbk;
    double bk_bytes[PREDICT_MEASURED_BUCKETS], bk_ready[PREDICT_MEASURED_BUCKETS];
    double bk_begin[PREDICT_MEASURED_BUCKETS], bk_ms[PREDICT_MEASURED_BUCKETS];
    double backward_ms;
} predict_measured;

/* The ok weak-scaling rows of 2 or more devices whose series is among w,
 * ddp's only when they overlap and have the workload's bucket cap (*m
 * calloc'd, caller frees). */
dps_status predict_from_measured(const predict_folder *f, const predict_workload *w, int nw,
                                 predict_measured **m, int *n) DPS_MUST_USE;

/* The ok weak-scaling rows of 2 or more devices with DDP's buckets (ddp,
 * zero1) that overlap, whose series is among w, at any bucket cap (with
 * the workload's no_sync): the sizes a folder ran, for `predict
 * --bucket-mb` (*m calloc'd, caller frees). */
dps_status predict_from_bucketed(const predict_folder *f, const predict_workload *w, int nw,
                                 predict_measured **m, int *n) DPS_MUST_USE;

/* The machine of the folder: its devices, link bandwidths and latency, and
 * the all-reduce bus bandwidth at the message size nearest bucket_mb. */
dps_status predict_from_machine(const char *dir, double bucket_mb, predict_machine *m) DPS_MUST_USE;

#endif
