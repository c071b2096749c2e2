/* `dpscale comm-bench`: the host all-reduce alone, timed like nccl-tests'
 * all_reduce_perf (in place, fp32 sum, slowest rank per iteration, median
 * over iterations), then checked on data whose sum is known exactly. */
#ifndef DPS_COMMBENCH_H
#define DPS_COMMBENCH_H

#include <stddef.h>
#include <stdint.h>

#include "launch/ranks.h"
#include "results/results.h"

#define COMMBENCH_MAX_SIZES 16

typedef struct commbench_row {
    int nranks;
    uint64_t bytes;
    double time_us, algbw_gbps, busbw_gbps;
    int check_ok;
} commbench_row;

typedef struct commbench_spec {
    int nranks;
    const uint64_t *sizes;   /* [nsizes] bytes, multiples of 4 */
    int nsizes, warmup, iters;
    double timeout_s;        /* an iteration longer than this ends the ranks */
    const rank_fault *fault; /* --inject-fault: its step counts every size's warm-up and
                              * timed all-reduces, one size after another; NULL: none */
} commbench_spec;

/* The steps of one run of sizes: warm-up and timed all-reduces of each size. */
int commbench_steps(const commbench_spec *spec);

/* Runs every size with nranks rank processes; rows[i] for sizes[i]. A rank
 * that fails, dies or hangs past the timeout ends the run with one message
 * naming it (its own message when it gave one). */
dps_status commbench_run(const commbench_spec *spec, commbench_row *rows)
    DPS_MUST_USE;
/* Appends rows to DIR/allreduce.csv. */
dps_status commbench_write(const results_dir *rd, const commbench_row *rows, int n) DPS_MUST_USE;
/* DPS_ERR_USAGE, naming the file, when the folder's allreduce.csv exists
 * with another header than commbench_write's (checked before measuring). */
dps_status commbench_check_header(const results_dir *rd) DPS_MUST_USE;

#endif
