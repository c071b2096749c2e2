/* The results folder (docs/DESIGN.md, "Results"): meta.json, runs.csv,
 * steps.csv, devices.csv, phases.csv, and the table printed on stdout.
 * Rows of a configuration are appended and flushed when it ends, details
 * first and runs.csv last, so a row in runs.csv means its details are there. */
#ifndef DPS_RESULTS_H
#define DPS_RESULTS_H

#include <stdio.h>

#include "backend/backend.h"
#include "config/config.h"
#include "core/stats.h"

typedef struct run_summary {
    char config_id[192];
    dps_stats step;             /* step_ms over timed steps */
    double samples_per_s, tokens_per_s, model_tflops;
    double comm_bytes_per_step; /* device-to-device bytes per step, all devices */
    double algbw_gbps, busbw_gbps; /* all-reduce (ddp); NaN otherwise */
    char start_time[32], end_time[32];
} run_summary;

typedef struct results_dir {
    char dir[DPS_PATH_MAX];
} results_dir;

/* Creates (or reuses) out_dir/name; DPS_ERR_USAGE when it cannot be written. */
dps_status results_open(results_dir *r, const char *out_dir, const char *name) DPS_MUST_USE;
/* Writes meta.json atomically (temporary file, then rename). */
dps_status results_write_meta(const results_dir *r, const backend *be, int argc, char **argv,
                              const char *start_time, const char *end_time) DPS_MUST_USE;
dps_status results_append(const results_dir *r, const dps_config *c, const backend *be,
                          const train_result *res, const run_summary *s) DPS_MUST_USE;

void results_table_header(FILE *f, const backend *be);
void results_table_row(FILE *f, const dps_config *c, const train_result *res,
                       const run_summary *s);

/* Column lists, exported for the tests. */
extern const char *const results_runs_cols[];
extern const int results_runs_ncols;

#endif
