/* `dpscale links`: the bandwidth and latency of every path between host and
 * devices and between devices, measured the way nvbandwidth does (copies
 * timed by events on their stream, the median of several samples, every
 * copy verified). Pairs that cannot be measured are WAIVED, not errors. */
#ifndef DPS_LINKS_H
#define DPS_LINKS_H

#include "backend/backend.h"
#include "config/config.h"
#include "results/results.h"

typedef struct link_row {
    int src, dst;            /* device index or DPS_HOST */
    char method[24];         /* h2d, d2h, d2d_write, d2d_read, d2d_bidir, latency */
    uint64_t bytes;
    double gbps, latency_us; /* NaN where not measured */
    char status[48];         /* ok, WAIVED (why) or FAILED (what) */
} link_row;

/* The copy sizes, as nccl-tests' -b/-e/-f: min, min*factor, ... up to max
 * (max itself always measured). */
#define LINKS_MAX_SIZES 40
typedef struct links_sizes {
    uint64_t min, max;
    int factor;
} links_sizes;

/* The sizes of s into out[] (at most LINKS_MAX_SIZES, ascending); how many. */
int links_size_list(const links_sizes *s, uint64_t *out);
/* The largest single copy a phase of configuration c moves: a batch loaded,
 * a chunk scattered, logits gathered, a group of dp's replicate or reduce,
 * a ring chunk of a ddp bucket. */
uint64_t links_config_copy_bytes(const dps_config *c);

/* Measures ndev devices with copies of every size of `sizes`; rows[] gets
 * every entry (at most links_max_rows(ndev, sizes)); returns how many. */
int links_max_rows(int ndev, const links_sizes *sizes);
dps_status links_measure(backend *be, int ndev, const links_sizes *sizes, int samples,
                         link_row *rows, int *nrows) DPS_MUST_USE;
dps_status links_write(const results_dir *rd, const backend *be, const link_row *rows, int n) DPS_MUST_USE;
/* DPS_ERR_USAGE, naming the file, when the folder's links.csv exists with
 * another header than links_write's (checked before anything is measured). */
dps_status links_check_header(const results_dir *rd) DPS_MUST_USE;
void links_print(FILE *f, const backend *be, int ndev, const link_row *rows, int n);

#endif
