/* host_gemm_bench: the rate of the host backend's GEMM (the library this
 * build was configured with, src/backend/host_gemm.h) on the shapes one
 * training step of a preset runs on one device (src/model/model.c), each
 * timed alone on this thread, and the step's mix of them.
 *
 * usage: host_gemm_bench PRESET [ROWS] [SAMPLES]
 *   ROWS     rows per device (default: the preset's batch per device x tokens)
 *   SAMPLES  timed samples per shape (default 15); a sample repeats the call
 *            for at least 5 ms and counts the time per call
 *
 * Prints CSV: library, preset, shape, op (NN, TN, NT), m, n, k, calls per
 * step, median ms per call (wall clock), GFLOP/s from it, and GFLOP/s from
 * the thread's CPU time (less sensitive to other processes on the machine).
 * The last row, shape "step", is the step's GEMMs together: their FLOPs
 * over the sum of calls x median ms; dpscale run --gemm-ref measures the
 * same sequence back to back. dev/host_gemm_bench.sh runs this for
 * every library, interleaved. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/host_gemm.h"
#include "core/stats.h"
#include "core/util.h"
#include "model/model.h"

typedef struct shape {
    const char *name;
    int ta, tb, m, n, k, calls;
} shape;

static double thread_cpu_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static float *operand(size_t n, unsigned seed)
{
    float *p = aligned_alloc(64, (n * sizeof(float) + 63) & ~(size_t)63);
    if (!p) return NULL;
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (float)(seed >> 8) / 16777216.0f - 0.5f;
    }
    return p;
}

static double median(double *x, int n)
{
    dps_stats st;
    stats_compute(x, n, &st);
    return st.median;
}

typedef struct operands { float *a, *b, *c; double *wall, *cpu; int samples; } operands;

/* One shape: a warm-up, then `samples` medians of back-to-back calls for
 * at least 5 ms each; wall and thread-CPU milliseconds per call. */
static int time_shape(const shape *g, operands *o, double *ms, double *cpu_ms)
{
    /* row-major leading dimensions of the stored operands */
    int lda = g->ta ? g->m : g->k, ldb = g->tb ? g->k : g->n, ldc = g->n;
    for (int w = 0; w < 3; w++) /* warm-up: packing buffers, JIT kernels */
        if (host_sgemm(g->ta, g->tb, g->m, g->n, g->k, 1.0f, o->a, lda, o->b, ldb, 0.0f, o->c, ldc))
            return 1;
    for (int r = 0; r < o->samples; r++) {
        double t0 = dps_now_ms(), c0 = thread_cpu_ms(), t1;
        int calls = 0;
        do {
            if (host_sgemm(g->ta, g->tb, g->m, g->n, g->k, 1.0f, o->a, lda, o->b, ldb, 0.0f, o->c,
                           ldc))
                return 1;
            calls++;
            t1 = dps_now_ms();
        } while (t1 - t0 < 5.0);
        o->wall[r] = (t1 - t0) / calls;
        o->cpu[r] = (thread_cpu_ms() - c0) / calls;
    }
    *ms = median(o->wall, o->samples);
    *cpu_ms = median(o->cpu, o->samples);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 4) {
        fprintf(stderr, "usage: host_gemm_bench PRESET [ROWS] [SAMPLES]\n");
        return 2;
    }
    const model_preset *p = model_find_preset(argv[1]);
    if (!p) {
        fprintf(stderr, "host_gemm_bench: no preset %s\n", argv[1]);
        return 2;
    }
    model_shape s = p->shape;
    int rows = argc > 2 ? atoi(argv[2]) : p->batch_per_gpu * s.tokens;
    int samples = argc > 3 ? atoi(argv[3]) : 15;
    if (rows <= 0 || samples <= 0 || samples > 1000) {
        fprintf(stderr, "host_gemm_bench: ROWS and SAMPLES must be positive (SAMPLES at most 1000)\n");
        return 2;
    }
    int d = s.width, c = s.classes, L = s.layers;
    /* model_forward and model_backward, in their order */
    const shape shapes[] = {
        {"fwd hidden h.W", 0, 0, rows, d, d, L},
        {"fwd classifier h.W", 0, 0, rows, c, d, 1},
        {"bwd classifier dW=hT.dY", 1, 0, d, c, rows, 1},
        {"bwd classifier dX=dY.WT", 0, 1, rows, d, c, L ? 1 : 0},
        {"bwd hidden dW=hT.dY", 1, 0, d, d, rows, L},
        {"bwd hidden dX=dY.WT", 0, 1, rows, d, d, L ? L - 1 : 0},
    };
    int big = d > c ? d : c;
    size_t most = (size_t)(rows > big ? rows : big) * (size_t)big;
    operands o = {operand(most, 1), operand(most, 2), operand(most, 3),
                  malloc((size_t)samples * sizeof(double)), malloc((size_t)samples * sizeof(double)),
                  samples};
    if (!o.a || !o.b || !o.c || !o.wall || !o.cpu) {
        fprintf(stderr, "host_gemm_bench: out of memory\n");
        return 1;
    }
    host_sgemm_init();
    char lib[256];
    host_sgemm_library(lib, sizeof lib);
    for (char *q = lib; *q; q++)
        if (*q == ',') *q = ';';
    printf("library,preset,shape,op,m,n,k,calls,ms,gflops,cpu_gflops\n");
    double step_flops = 0, step_ms = 0, step_cpu_ms = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const shape *g = &shapes[i];
        double flops = 2.0 * g->m * g->n * g->k, ms, cms;
        if (!g->calls) continue;
        if (time_shape(g, &o, &ms, &cms)) {
            fprintf(stderr, "host_gemm_bench: %s\n", dps_errmsg());
            return 1;
        }
        printf("%s,%s,%s,%s%s,%d,%d,%d,%d,%.4f,%.1f,%.1f\n", lib, p->name, g->name,
               g->ta ? "T" : "N", g->tb ? "T" : "N", g->m, g->n, g->k, g->calls, ms,
               flops / ms / 1e6, flops / cms / 1e6);
        step_flops += flops * g->calls;
        step_ms += ms * g->calls;
        step_cpu_ms += cms * g->calls;
    }
    printf("%s,%s,step,-,%d,%d,%d,1,%.4f,%.1f,%.1f\n", lib, p->name, rows, d, c, step_ms,
           step_flops / step_ms / 1e6, step_flops / step_cpu_ms / 1e6);
    free(o.a); free(o.b); free(o.c); free(o.wall); free(o.cpu);
    return 0;
}
