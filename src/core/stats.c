/* Statistics over step samples and the bus-bandwidth definition (see stats.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/stats.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double stats_percentile_sorted(const double *sorted, int n, double q)
{
    if (n <= 0) return NAN;
    double pos = q * (double)(n - 1);
    int lo = (int)floor(pos);
    int hi = lo + 1 < n ? lo + 1 : lo;
    double frac = pos - lo;
    return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

void stats_compute(const double *x, int n, dps_stats *out)
{
    memset(out, 0, sizeof *out);
    out->n = n;
    if (n <= 0) {
        out->median = out->p10 = out->p90 = out->mean = out->stdev = NAN;
        out->min = out->max = NAN;
        return;
    }
    double *s = malloc((size_t)n * sizeof *s);
    if (!s) {
        out->n = 0;
        return;
    }
    memcpy(s, x, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += s[i];
    out->mean = sum / n;
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (s[i] - out->mean) * (s[i] - out->mean);
    out->stdev = n > 1 ? sqrt(ss / (n - 1)) : 0.0;
    out->median = stats_percentile_sorted(s, n, 0.5);
    out->p10 = stats_percentile_sorted(s, n, 0.1);
    out->p90 = stats_percentile_sorted(s, n, 0.9);
    out->min = s[0];
    out->max = s[n - 1];
    free(s);
}

double stats_busbw_allreduce(double algbw_gbps, int nranks)
{
    if (nranks <= 1) return 0.0;
    return algbw_gbps * 2.0 * (nranks - 1) / nranks;
}

double stats_quantile_in_place(double *x, int n, double q)
{
    if (n > 0) qsort(x, (size_t)n, sizeof *x, cmp_double);
    return stats_percentile_sorted(x, n, q);
}

double stats_median_or(const double *x, int n, double none)
{
    dps_stats st;
    stats_compute(x, n, &st);
    return n > 0 && st.n == n ? st.median : none;
}
