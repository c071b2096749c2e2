/* `dpscale sweep`: runs a list of configurations, each in its own child
 * process, so that an out-of-memory, a crash or a hang of one is recorded
 * and the sweep goes on; progress, --resume, --filter, --dry-run. */
#ifndef DPS_SWEEP_H
#define DPS_SWEEP_H

#include "backend/backend.h"
#include "run/results.h"
#include "run/results_ids.h"
#include "run/suite.h"

typedef struct sweep_opts {
    const results_ids *done;  /* --resume: configurations not run again; NULL: none */
    int dry_run;              /* list, run nothing */
    const char *filter;       /* substring or glob of config ids; NULL: all */
    double config_timeout_s;  /* a configuration running longer is killed */
} sweep_opts;

/* Marks items that --filter leaves out (skip = "-"); returns how many remain. */
int sweep_filter(sweep_item *items, int n, const char *filter);

/* Runs the items; returns how many failed. *interrupted is set when a
 * SIGINT/SIGTERM stopped the sweep. */
int sweep_run(sweep_item *items, int n, backend *be, const results_dir *rd,
              const sweep_opts *o, int *interrupted);

/* Points OUT/latest at NAME (a relative symbolic link, replaced atomically). */
dps_status sweep_link_latest(const char *out_dir, const char *name) DPS_MUST_USE;

#endif
