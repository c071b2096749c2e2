/* The results folder (docs/DESIGN.md, "Results"): meta.json, runs.csv,
 * steps.csv, devices.csv, phases.csv, and the table printed on stdout.
 * A configuration's rows are one transaction: appended when it ends, details
 * first and runs.csv last, and cut back out of every file on any failure,
 * so a configuration is wholly in the folder or not at all. */
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

/* An open results folder. Every file in it is opened through dir_fd, never
 * by path again, and each write first checks that dir still names it
 * (results_check_folder). */
typedef struct results_dir {
    char dir[DPS_PATH_MAX];  /* its path, for messages and the check */
    int dir_fd;              /* the folder, opened once; -1: none */
    int lock_fd;             /* holds the folder's lock; -1: none */
    volatile int *committed; /* set to 1 as a transaction's rows are all in (a sweep's
                                child tells its parent, in shared memory); NULL: unused */
} results_dir;

/* A file of a configuration's rows and its columns. */
typedef struct results_file {
    const char *name;
    const char *const *cols;
    int ncols;
    int nkey;    /* its first nkey columns name a row: no two rows of a folder share them */
} results_file;

/* The lock file in a results folder; it holds its writer's pid. */
#define RESULTS_LOCK_FILE ".dpscale.lock"

/* Creates (or reuses) out_dir/name, opens it and takes its lock for this
 * process and its children until results_close, then takes back the rows
 * of a writer that died mid-commit (results_settle); DPS_ERR_USAGE when it
 * cannot be written or another process holds the lock (named by its pid). */
dps_status results_open(results_dir *r, const char *out_dir, const char *name) DPS_MUST_USE;
void results_close(results_dir *r);
/* The files of a configuration's rows, runs.csv last; *n of them. */
const results_file *results_files(int *n);
/* DPS_ERR_USAGE, naming the file, when one of them has another header. */
dps_status results_check_headers(const results_dir *r) DPS_MUST_USE;
/* The same for one file of the folder (links.csv, allreduce.csv) and its columns. */
dps_status results_check_header(const results_dir *r, const char *name, const char *const *cols,
                                int ncols) DPS_MUST_USE;
/* A command line (meta.json's "command_line") and the one that chose the
 * folder's configurations ("plan": itself, or on --resume the folder's). */
typedef struct results_cmd {
    int argc, plan_argc;
    char **argv, **plan_argv;
} results_cmd;
/* Writes meta.json atomically (temporary file, then rename); cfg's world
 * says who started the ranks (NULL: dpscale forks its ranks) and nodes on
 * which hosts they joined (NULL: not joined, or forked). */
dps_status results_write_meta(const results_dir *r, const backend *be, const dps_config *cfg,
                              const world_nodes *nodes, int most_devices, const results_cmd *cmd,
                              const char *start_time, const char *end_time) DPS_MUST_USE;
/* A configuration's rows, in every file, as one transaction (results_txn.h).
 * twin: another configuration this run stands for too (a sweep's twin, see
 * sweep.h: the same run under the other scaling label), whose rows are the
 * same measurement under its own id and scaling, in the same transaction;
 * NULL: none. */
dps_status results_append(const results_dir *r, const dps_config *c, const dps_config *twin,
                          const backend *be, const train_result *res, const run_summary *s)
    DPS_MUST_USE;

/* The table's head; most_devices: the largest configuration's device
 * count (an oversubscribed host says so). */
void results_table_header(FILE *f, const backend *be, int most_devices);
void results_table_row(FILE *f, const dps_config *c, const train_result *res,
                       const run_summary *s);

/* Column lists, exported for the tests. */
extern const char *const results_runs_cols[];
extern const int results_runs_ncols;

#endif
