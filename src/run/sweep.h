/* `dpscale sweep`: runs a list of configurations, each in its own child
 * process, so that an out-of-memory, a crash or a hang of one is recorded
 * and the sweep goes on; two that are one run (twins) once; progress,
 * --resume, --filter, --dry-run. */
#ifndef DPS_SWEEP_H
#define DPS_SWEEP_H

#include "backend/backend.h"
#include "results/results.h"
#include "results/results_ids.h"
#include "run/suite.h"

typedef struct sweep_opts {
    const results_ids *done;  /* --resume: configurations not run again; NULL: none */
    int dry_run;              /* list, run nothing */
    const char *filter;       /* substring or glob of config ids; NULL: all */
    double config_timeout_s;  /* a configuration running longer is killed */
} sweep_opts;

/* Marks items that --filter leaves out (skip = "-"); returns how many remain. */
int sweep_filter(sweep_item *items, int n, const char *filter);

/* Pairs the items that are one run under two ids: the same configuration
 * but for its scaling label (batch = weak, strong at a device count where
 * the strong global batch is the weak one: every count of a sweep of one
 * device, or the count whose weak batch is the suite's global_batch). The
 * earlier (its twin: the later's index) runs once and
 * writes both ids' rows in one transaction; the later (same_as: the
 * earlier's index) does not run. Only items that would run are paired: not
 * those --filter left out or that are skipped, nor with done (--resume;
 * NULL: none) those the folder holds, so one of a pair alone runs alone. */
void sweep_pair(sweep_item *items, int n, const results_ids *done);

/* What a sweep did with its items. */
typedef struct sweep_tally {
    int ran, failed;        /* runs, and the configurations that failed (a twin's too) */
    int twins;              /* configurations written from another's run (sweep_pair) */
    int skipped;            /* recorded as skipped: this machine cannot run them */
    int first_skipped;      /* the index of the first of them; -1: none */
    int done_before;        /* --resume: already in the folder */
    int interrupted;        /* a SIGINT/SIGTERM stopped the sweep */
} sweep_tally;

/* Runs the items (those --filter left, see sweep_filter; each pair of
 * sweep_pair's once) into *t. */
void sweep_run(sweep_item *items, int n, backend *be, const results_dir *rd,
               const sweep_opts *o, sweep_tally *t);

/* Points OUT/latest at NAME (a relative symbolic link, replaced atomically). */
dps_status sweep_link_latest(const char *out_dir, const char *name) DPS_MUST_USE;

#endif
