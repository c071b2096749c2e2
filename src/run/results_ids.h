/* The configurations a results folder already holds (runs.csv), and what
 * --resume does to a folder before it continues: only configurations that
 * finished (ok, oom, skipped) stay; the rest are taken out to be run again. */
#ifndef DPS_RESULTS_IDS_H
#define DPS_RESULTS_IDS_H

#include "run/results.h"

typedef struct results_ids {
    char **ids;  /* sorted */
    int n;
    char *text;  /* the strings ids point into */
} results_ids;

/* Every config_id of DIR/runs.csv (none when it is missing). */
dps_status results_ids_load(const results_dir *r, results_ids *ids) DPS_MUST_USE;
int results_ids_has(const results_ids *ids, const char *id);
void results_ids_free(results_ids *ids);

/* Keeps in every file only the rows of configurations whose runs.csv row
 * says ok, oom or skipped (the first such row of each), and the complete
 * rows only; each file changed is replaced atomically, runs.csv first.
 * *done: the configurations kept; *rerun: those taken out. */
dps_status results_resume_prepare(const results_dir *r, results_ids *done, int *rerun) DPS_MUST_USE;

#endif
