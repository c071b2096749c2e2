/* The configurations a results folder already holds (runs.csv), and the
 * tidying before it is written to: rows cut short or stray go, and with
 * --resume so do configurations that did not finish (ok, oom, skipped stay),
 * to be run again. */
#ifndef DPS_RESULTS_IDS_H
#define DPS_RESULTS_IDS_H

#include "results/results.h"

typedef struct results_ids {
    char **ids;  /* sorted */
    int n;
    char *text;  /* the strings ids point into */
    /* results_ids.c's hash index of the ids while they are appended, before
     * they are sorted: slots of ids, NULL where empty, the first `indexed` in */
    const char **slots;
    int nslots, indexed;
    long probes; /* slots the index compared, building and searching it: O(n) for n ids */
} results_ids;

int results_ids_has(const results_ids *ids, const char *id);
void results_ids_free(results_ids *ids);

/* Before a folder is written to: takes out of every file the rows cut short
 * by a crash and the detail rows of configurations runs.csv lacks; with
 * resume, also every row of configurations whose runs.csv row does not say
 * ok, oom or skipped (and a second row of one that does). Each file that
 * changes is replaced atomically, runs.csv first. *done: the configurations
 * in runs.csv after it; *rerun: those taken out. */
dps_status results_tidy(const results_dir *r, int resume, results_ids *done, int *rerun) DPS_MUST_USE;

/* The configurations of dir's runs.csv that --resume would not run again
 * (those that finished), read without changing the folder. */
dps_status results_ids_finished(const char *dir, results_ids *done) DPS_MUST_USE;

#endif
