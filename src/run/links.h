/* `dpscale links`: the bandwidth and latency of every path between host and
 * devices and between devices, measured the way nvbandwidth does (copies
 * timed by events on their stream, the median of several samples, every
 * copy verified). Pairs that cannot be measured are WAIVED, not errors. */
#ifndef DPS_LINKS_H
#define DPS_LINKS_H

#include "backend/backend.h"
#include "run/results.h"

typedef struct link_row {
    int src, dst;            /* device index or DPS_HOST */
    char method[24];         /* h2d, d2h, d2d_write, d2d_read, d2d_bidir, latency */
    uint64_t bytes;
    double gbps, latency_us; /* NaN where not measured */
    char status[48];         /* ok, WAIVED (why) or FAILED (what) */
} link_row;

/* Measures ndev devices with copies of `bytes`; rows[] gets every entry
 * (at most links_max_rows(ndev)); returns how many. */
int links_max_rows(int ndev);
dps_status links_measure(backend *be, int ndev, uint64_t bytes, int samples, link_row *rows,
                         int *nrows) DPS_MUST_USE;
dps_status links_write(const results_dir *rd, const backend *be, const link_row *rows, int n) DPS_MUST_USE;
void links_print(FILE *f, const backend *be, int ndev, const link_row *rows, int n);

#endif
