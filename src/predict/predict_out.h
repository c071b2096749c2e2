/* What `dpscale predict` writes: predictions.csv (one row per mode and
 * device count, written whole: temporary file, fsync, rename) and the table
 * on stdout. */
#ifndef DPS_PREDICT_OUT_H
#define DPS_PREDICT_OUT_H

#include <stdio.h>

#include "predict/predict_model.h"

/* dir/predictions.csv, replacing a file of that name; each row names its
 * workload. */
dps_status predict_write_csv(const char *dir, const predict_machine *m, const predict_consts *c,
                             const predict_row *rows, int n) DPS_MUST_USE;

/* The table of rows, all of workload w. */
void predict_print(FILE *f, const predict_machine *m, const predict_workload *w,
                   const predict_row *rows, int n);

#endif
