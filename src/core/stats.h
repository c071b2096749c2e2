/* Statistics over step samples (as numpy computes them) and nccl-tests'
 * bus-bandwidth definition. */
#ifndef DPS_STATS_H
#define DPS_STATS_H

typedef struct dps_stats {
    int n;
    double median, p10, p90, mean, stdev, min, max;
} dps_stats;

/* Summary of x[0..n); percentiles by linear interpolation between closest
 * ranks (numpy's default); stdev is the sample standard deviation (n - 1). */
void stats_compute(const double *x, int n, dps_stats *out);
/* The median of x[0..n); `none` when n is 0. */
double stats_median_or(const double *x, int n, double none);
double stats_percentile_sorted(const double *sorted, int n, double q);
/* Quantile q (0..1) of x[0..n), which it sorts in place; NaN when n is 0. */
double stats_quantile_in_place(double *x, int n, double q);

/* nccl-tests' all-reduce bus bandwidth: algbw * 2 (n - 1) / n. */
double stats_busbw_allreduce(double algbw_gbps, int nranks);

#endif
