/* The command line that chose a results folder's configurations, read back
 * from its meta.json ("plan"; "command_line" in folders written before it),
 * so that `sweep --resume` continues the folder's own set. */
#ifndef DPS_RESULTS_PLAN_H
#define DPS_RESULTS_PLAN_H

#include "core/err.h"

typedef struct results_plan {
    int argc;
    char **argv;   /* argc strings, then NULL */
    char *text;    /* the strings argv points into */
    double duration_s; /* end_time less start_time; 0 when either is missing */
} results_plan;

/* dir/meta.json's plan and how long its command ran; DPS_ERR_USAGE, naming
 * the file, when it is missing, damaged or holds no plan. */
dps_status results_plan_read(const char *dir, results_plan *p) DPS_MUST_USE;
void results_plan_free(results_plan *p);

#endif
