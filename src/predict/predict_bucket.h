/* `dpscale predict --from DIR --bucket-mb LIST`: the bucket size to use.
 * For each family of a folder's bucketed runs (a series, a mode with DDP's
 * buckets, a device count), the step time at each size: measured where the
 * folder ran it, predicted at every size, with the model's error on the
 * measured sizes as its uncertainty, and the size recommended. */
#ifndef DPS_PREDICT_BUCKET_H
#define DPS_PREDICT_BUCKET_H

#include <stdio.h>

#include "predict/predict_from.h"
#include "predict/predict_model.h"

#define BUCKET_TIE 0.01 /* sizes within 1 % of the fastest tie: the smallest wins */

/* One bucket size of a family. */
typedef struct bucket_point {
    double bucket_mb;
    double predicted_ms;   /* the model's step time; NAN: skipped */
    double measured_ms;    /* the folder's median; NAN: not run */
    double spread_pct;     /* measured: (p90 - p10) / 2 over the median, %; NAN: none */
} bucket_point;

/* What the points say. */
typedef struct bucket_advice {
    double scale;      /* median of measured / predicted over the measured sizes; 1: none */
    double error_pct;  /* the largest |predicted / measured - 1| over them, %; NAN: none */
    int best;          /* the recommended point: the lowest expected step time (measured where
                        * run, else predicted x scale), the smallest within BUCKET_TIE of it */
} bucket_advice;


/* What --bucket-mb predicts: the families, each's points, the rows
 * behind the predictions (for predictions.csv; each row's workload one of
 * ws, the workloads at each size, owned: predict_bucket_free). */
typedef struct bucket_run {
    predict_row *rows;
    predict_workload *ws;
    int nrows;
} bucket_run;

/* The bucket sizes to ask for: sizes[0..nsizes); the families: gpus x
 * modes (those with buckets; ddp when nmodes is 0) of every workload when
 * ngpus > 0, else those the folder ran. With machine_path "" the machine
 * is the folder's at each size (the all-reduce measured nearest it). The
 * tables and recommendations go to out. */
typedef struct bucket_ask {
    const double *sizes;
    int nsizes;
    const int *gpus;
    int ngpus;
    const dps_mode *modes;
    int nmodes;
    const char *machine_path;
} bucket_ask;

dps_status predict_bucket_sizes(const predict_folder *f, const predict_workload *w, int nw,
                                const predict_machine *m, const predict_consts *c,
                                const bucket_ask *ask, FILE *out, bucket_run *run) DPS_MUST_USE;
void predict_bucket_free(bucket_run *run);

#endif
