/* Reference for `dpscale comm-bench`: MPI_Allreduce timed the same way
 * (in place, fp32 sum, slowest rank per iteration, median of iterations,
 * busbw = algbw * 2 (n - 1) / n). Built and run by dev/allreduce_vs_mpi.sh;
 * not part of dpscale. Usage: mpi_allreduce WARMUP ITERS BYTES... */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (argc < 4) {
        if (rank == 0) fprintf(stderr, "usage: mpi_allreduce WARMUP ITERS BYTES...\n");
        MPI_Finalize();
        return 2;
    }
    int warmup = atoi(argv[1]), iters = atoi(argv[2]);
    double *t = calloc((size_t)iters, sizeof *t);
    for (int a = 3; a < argc; a++) {
        long long bytes = atoll(argv[a]);
        int count = (int)(bytes / 4);
        float *buf = calloc((size_t)count, sizeof(float));
        for (int it = -warmup; it < iters; it++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            double dt = MPI_Wtime() - t0, slowest;
            MPI_Reduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
            if (it >= 0) t[it] = slowest;
        }
        if (rank == 0) {
            qsort(t, (size_t)iters, sizeof *t, cmp);
            double med = iters % 2 ? t[iters / 2] : 0.5 * (t[iters / 2 - 1] + t[iters / 2]);
            double algbw = (double)bytes / med / 1e9;
            printf("%d,%lld,%.1f,%.3f,%.3f\n", n, bytes, med * 1e6, algbw, algbw * 2.0 * (n - 1) / n);
        }
        free(buf);
    }
    free(t);
    MPI_Finalize();
    return 0;
}
