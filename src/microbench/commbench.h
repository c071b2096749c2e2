/* `dpscale comm-bench`: the host collectives alone (all-reduce,
 * reduce-scatter, all-gather; shm's ring or Gloo), timed like nccl-tests'
 * all_reduce_perf and friends (in place, fp32 sum, slowest rank per
 * iteration, median over iterations), then checked on data whose result is
 * known exactly. */
#ifndef DPS_COMMBENCH_H
#define DPS_COMMBENCH_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "launch/ranks.h"
#include "results/results.h"

#define COMMBENCH_MAX_SIZES 16
#define COMMBENCH_MAX_OPS COMM_OP_COUNT

/* One collective at one size. bytes is nccl-tests' size, the whole buffer
 * (all-gather's output, reduce-scatter's input); algbw = bytes / time,
 * busbw = algbw x 2(n-1)/n for all-reduce and (n-1)/n for the others. */
typedef struct commbench_row {
    int nranks;
    const char *method;     /* the implementation: "shm", "gloo" */
    comm_op op;
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
                              * timed collectives, one size after another, each op's sizes
                              * after the op before's; NULL: none */
    const comm_op *ops;      /* [nops] the collectives timed; NULL or 0: all-reduce alone */
    int nops;
    const char *impl;        /* "shm" (NULL too) or "gloo": over loopback, met through a
                              * store this process serves */
} commbench_spec;

/* The steps of one run: warm-up and timed collectives of each op and size. */
int commbench_steps(const commbench_spec *spec);

/* Runs every op over every size with nranks rank processes; rows[o * nsizes
 * + s] for ops[o] and sizes[s] (COMMBENCH_MAX_OPS * COMMBENCH_MAX_SIZES at most). A rank
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
