/* The predictor's fitted constants (predict_consts): `predict --calibrate
 * DIR` fits them to the measured runs of a results folder and writes a
 * calibration file (key = value lines, the fit's evidence in comments);
 * `--calibration FILE` reads one. */
#ifndef DPS_PREDICT_CALIB_H
#define DPS_PREDICT_CALIB_H

#include <stdio.h>

#include "predict/predict_from.h"
#include "predict/predict_model.h"

/* Fits c (from its defaults) to the measured rows of several devices of
 * folder f, predicted from its one-device profiles w[0..nw)
 * (predict_from_workloads of f) on machine m:
 * compute_scale from their forward against one device's; dp_sync_ms, dp's
 * median residual; from buckets.csv, bus_eff and overlap_eff (the model's
 * all-reduce time at the full bus against each measured one after and
 * beside backward) and bucket_overhead_us (bucket 0's wait from ready to
 * begin), or without it bus_eff as the efficiency that explains ddp's
 * median residual; then sync_ms, what is left of ddp's.
 * A constant fitted outside its physical range (the one the file accepts:
 * efficiencies in (0, 1], the rest at least 0) is held to it, and a mode
 * with fewer step times than constants fitted to them is warned of: both
 * to warn, naming what to measure. A mode with no more step times than
 * constants has its rows' errors reported as n/a, with a note to report.
 * Writes the file to path (constants, the points each came from, the
 * warnings and notes as comments) and a table of the fit to report. */
dps_status predict_calibrate(const predict_folder *f, const predict_machine *m,
                             const predict_workload *w, int nw, const char *path,
                             FILE *report, FILE *warn, predict_consts *c) DPS_MUST_USE;

/* A calibration file into c (keys absent keep c's values). */
dps_status predict_consts_load(const char *path, predict_consts *c) DPS_MUST_USE;

#endif
