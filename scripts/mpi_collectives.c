/* Open MPI's side of scripts/allreduce_vs_mpi.sh: MPI_Allreduce,
 * MPI_Reduce_scatter_block and MPI_Allgather timed as `dpscale comm-bench`
 * times its collectives (in place, fp32 sum; a barrier, then one collective
 * per iteration, the slowest rank's time; the median of the iterations),
 * and memcpy's bandwidth, the script's yardstick. Not part of dpscale: the
 * script builds it with mpicc.
 *   mpi_collectives all-reduce|reduce-scatter|all-gather WARMUP ITERS BYTES...
 *   mpi_collectives memcpy WARMUP ITERS BYTES...      (one process)
 * Prints one CSV line per size: op,nranks,bytes,time_us,algbw_gbps,busbw_gbps.
 * BYTES is the whole buffer as nccl-tests counts it (all-gather's output,
 * reduce-scatter's input): each rank's chunk is BYTES / 4 / nranks floats. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* One collective of `op` on buf (count floats, chunk floats a rank). */
static void collective(const char *op, float *buf, int count, int chunk, float *scratch)
{
    if (!strcmp(op, "all-reduce"))
        MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    else if (!strcmp(op, "reduce-scatter"))
        MPI_Reduce_scatter_block(MPI_IN_PLACE, buf, chunk, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    else if (!strcmp(op, "all-gather"))
        MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, chunk, MPI_FLOAT, MPI_COMM_WORLD);
    else {
        memcpy(scratch, buf, (size_t)count * sizeof *buf);
        __asm__ volatile("" : : "r"(scratch) : "memory"); /* the copy is used */
    }
}

/* Seconds of each timed iteration, the slowest rank's (rank 0 gets them). */
static void time_size(const char *op, long long bytes, int warmup, int iters, double *t)
{
    int nranks;
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    int chunk = (int)(bytes / 4 / nranks), count = chunk * nranks;
    int copy = !strcmp(op, "memcpy");
    float *buf = malloc((size_t)count * sizeof(float) + 64);
    float *scratch = copy ? malloc((size_t)count * sizeof(float) + 64) : NULL;
    for (int i = 0; i < count; i++) buf[i] = (float)(i % 7);
    if (scratch) memset(scratch, 0, (size_t)count * sizeof(float));
    for (int it = -warmup; it < iters; it++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        collective(op, buf, count, chunk, scratch);
        double dt = MPI_Wtime() - t0, slowest;
        MPI_Reduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (it >= 0) t[it] = slowest;
    }
    free(scratch);
    free(buf);
}

/* nccl-tests' bus bandwidth factor (doc/PERFORMANCE.md). */
static double bus_factor(const char *op, int n)
{
    if (!strcmp(op, "all-reduce")) return 2.0 * (n - 1) / n;
    if (!strcmp(op, "memcpy")) return 1.0;
    return (double)(n - 1) / n;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, nranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    const char *ops[] = {"all-reduce", "reduce-scatter", "all-gather", "memcpy"};
    int known = 0;
    for (int i = 0; argc > 1 && i < 4; i++) known |= !strcmp(argv[1], ops[i]);
    int iters = argc > 3 ? atoi(argv[3]) : 0;
    if (argc < 5 || !known || iters < 1) {
        if (rank == 0)
            fprintf(stderr, "usage: mpi_collectives all-reduce|reduce-scatter|all-gather|memcpy "
                            "WARMUP ITERS BYTES...\n");
        MPI_Finalize();
        return 2;
    }
    double *t = calloc((size_t)iters, sizeof *t);
    for (int a = 4; a < argc; a++) {
        long long bytes = atoll(argv[a]);
        time_size(argv[1], bytes, atoi(argv[2]), iters, t);
        if (rank == 0) {
            long long moved = bytes / 4 / nranks * 4 * nranks;
            double med = median(t, iters), algbw = (double)moved / med / 1e9;
            printf("%s,%d,%lld,%.2f,%.3f,%.3f\n", argv[1], nranks, moved, med * 1e6, algbw,
                   algbw * bus_factor(argv[1], nranks));
        }
    }
    free(t);
    MPI_Finalize();
    return 0;
}
