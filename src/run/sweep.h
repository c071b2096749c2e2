/* `dpscale sweep`: runs a list of configurations, each in its own child
 * process, so that an out-of-memory, a crash or a hang of one is recorded
 * and the sweep goes on; progress, --resume, --filter, --dry-run. */
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

/* What a sweep did with its items. */
typedef struct sweep_tally {
    int ran, failed;        /* configurations run, and those that failed */
    int skipped;            /* recorded as skipped: this machine cannot run them */
    int first_skipped;      /* the index of the first of them; -1: none */
    int done_before;        /* --resume: already in the folder */
    int interrupted;        /* a SIGINT/SIGTERM stopped the sweep */
} sweep_tally;

/* Runs the items (those --filter left, see sweep_filter) into *t. */
void sweep_run(sweep_item *items, int n, backend *be, const results_dir *rd,
               const sweep_opts *o, sweep_tally *t);

/* Points OUT/latest at NAME (a relative symbolic link, replaced atomically). */
dps_status sweep_link_latest(const char *out_dir, const char *name) DPS_MUST_USE;

#endif
