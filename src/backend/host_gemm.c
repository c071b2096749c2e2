/* The host backend's GEMM (host_gemm.h). One library is compiled in, chosen
 * by meson's host-gemm option:
 *   DPS_HOST_GEMM_DNNL      oneDNN's dnnl_sgemm (row-major); with its OpenMP
 *                           runtime every calling thread sets its own OpenMP
 *                           team size to 1 before its first GEMM
 *   DPS_HOST_GEMM_OPENBLAS  cblas_sgemm, openblas_set_num_threads(1)
 *   DPS_HOST_GEMM_BLIS      bli_sgemm with row strides, bli_thread_set_num_threads(1)
 *   DPS_HOST_GEMM_CBLAS     cblas_sgemm of another CBLAS (its threading as it comes)
 *   none of them            a portable C loop: correct, not fast */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "build_config.h"
#include "backend/host_gemm.h"
#include "core/util.h"

#if defined(DPS_HOST_GEMM_DNNL)
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
#include <omp.h>
#elif DNNL_CPU_RUNTIME != DNNL_RUNTIME_SEQ
#error "oneDNN built with a CPU runtime other than OpenMP or sequential: its GEMM cannot be kept to the calling thread (configure with -Dhost-gemm=openblas)"
#endif
#elif defined(DPS_HOST_GEMM_BLIS)
#include <blis.h>
#elif defined(DPS_HOST_GEMM_OPENBLAS) || defined(DPS_HOST_GEMM_CBLAS)
#include <cblas.h>
#endif

#if defined(DPS_HOST_GEMM_DNNL)
#include <pthread.h>
#include <signal.h>

/* oneDNN's generated AVX2 and AVX-512 sgemm kernels (before oneDNN 3.11.2:
 * uxlfoundation/oneDNN issue 4845) point rsp into their heap workspace while
 * they run, so a signal handled on the thread then would write its frame
 * over the heap (a launcher's SIGINT reaching a rank in a step, the
 * two-signal rule's SIGALRM). The calling thread holds back every signal but
 * the faults for the call: one sent meanwhile goes to another thread of the
 * process, or to this one as the GEMM returns. */
static void hold_signals(sigset_t *old)
{
    static const int faults[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT, SIGSYS};
    sigset_t held;
    sigfillset(&held);
    for (size_t i = 0; i < sizeof faults / sizeof faults[0]; i++) sigdelset(&held, faults[i]);
    pthread_sigmask(SIG_BLOCK, &held, old);
}
#endif

#if defined(DPS_HOST_GEMM_DNNL) && DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
/* OpenMP's team size is an internal control variable of each thread: a
 * thread that never set it would run dnnl_sgemm on every core. */
static _Thread_local int omp_single;
#endif

void host_sgemm_init(void)
{
#if defined(DPS_HOST_GEMM_OPENBLAS)
    openblas_set_num_threads(1); /* one thread per emulated device */
#elif defined(DPS_HOST_GEMM_BLIS)
    bli_thread_set_num_threads(1); /* overrides BLIS_NUM_THREADS / OMP_NUM_THREADS */
#endif
}

#if !defined(DPS_HOST_GEMM_DNNL) && !defined(DPS_HOST_GEMM_BLIS) && \
    !defined(DPS_HOST_GEMM_OPENBLAS) && !defined(DPS_HOST_GEMM_CBLAS)
static void gemm_portable(int ta, int tb, int m, int n, int k, float alpha, const float *a,
                          int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    for (int i = 0; i < m; i++) {
        float *crow = c + (size_t)i * ldc;
        for (int j = 0; j < n; j++) crow[j] = beta == 0.0f ? 0.0f : beta * crow[j];
        for (int p = 0; p < k; p++) {
            float av = alpha * (ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p]);
            if (av == 0.0f) continue;
            if (!tb) {
                const float *brow = b + (size_t)p * ldb;
                for (int j = 0; j < n; j++) crow[j] += av * brow[j];
            } else {
                for (int j = 0; j < n; j++) crow[j] += av * b[(size_t)j * ldb + p];
            }
        }
    }
}
#endif

dps_status host_sgemm(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                      const float *b, int ldb, float beta, float *c, int ldc)
{
    if (m <= 0 || n <= 0) return DPS_OK;
    if (k <= 0) { /* C = beta C; dnnl_sgemm leaves C as it was (a device with no rows) */
        for (int i = 0; i < m; i++) {
            float *crow = c + (size_t)i * ldc;
            for (int j = 0; j < n; j++) crow[j] = beta == 0.0f ? 0.0f : beta * crow[j];
        }
        return DPS_OK;
    }
#if defined(DPS_HOST_GEMM_DNNL)
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
    if (!omp_single) {
        omp_set_num_threads(1);
        omp_single = 1;
    }
#endif
    sigset_t old;
    hold_signals(&old);
    dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb,
                                  beta, c, ldc);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (st != dnnl_success)
        return dps_fail(DPS_ERR_RUNTIME, "dnnl_sgemm(%c%c, m=%d n=%d k=%d, lda=%d ldb=%d ldc=%d): %s",
                        ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, lda, ldb, ldc,
                        dnnl_status2str(st));
#elif defined(DPS_HOST_GEMM_BLIS)
    float al = alpha, be = beta;
    /* BLIS takes non-const operands but does not write A or B */
    bli_sgemm(ta ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, tb ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE,
              m, n, k, &al, (float *)a, lda, 1, (float *)b, ldb, 1, &be, c, ldc, 1);
#elif defined(DPS_HOST_GEMM_OPENBLAS) || defined(DPS_HOST_GEMM_CBLAS)
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
#else
    gemm_portable(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
#endif
    return DPS_OK;
}

double host_gemm_gflops(void)
{
    enum { N = 512 };
    float *m = calloc(3 * (size_t)N * N, sizeof *m);
    if (!m) return 0;
    host_sgemm_init();
    int calls = 0; /* a first call, untimed: the library may generate its kernel */
    if (host_sgemm(0, 0, N, N, N, 1.0f, m, N, m + N * N, N, 0.0f, m + 2 * N * N, N)) calls = -1;
    double t0 = dps_now_ms(), t = t0;
    while (calls >= 0 && t - t0 < 50) {
        if (host_sgemm(0, 0, N, N, N, 1.0f, m, N, m + N * N, N, 0.0f, m + 2 * N * N, N)) break;
        calls++;
        t = dps_now_ms();
    }
    free(m);
    return calls > 0 && t > t0 ? 2.0 * N * N * N * calls / ((t - t0) * 1e6) : 0;
}

void host_sgemm_library(char *buf, size_t len)
{
#if defined(DPS_HOST_GEMM_DNNL)
    const dnnl_version_t *v = dnnl_version();
    const char *isa = dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa());
    if (strncmp(isa, "cpu_isa_", 8) == 0) isa += 8;
    snprintf(buf, len, "oneDNN %d.%d.%d dnnl_sgemm (%s runtime, one thread per device, ISA %s)",
             v->major, v->minor, v->patch, dnnl_runtime2str(v->cpu_runtime), isa);
#elif defined(DPS_HOST_GEMM_BLIS)
    snprintf(buf, len, "BLIS %s bli_sgemm (%s kernels, one thread per device)",
             bli_info_get_version_str(), bli_arch_string(bli_arch_query_id()));
#elif defined(DPS_HOST_GEMM_OPENBLAS)
    dps_strlcpy(buf, openblas_get_config(), len);
#elif defined(DPS_HOST_GEMM_CBLAS)
    dps_strlcpy(buf, "CBLAS", len);
#else
    dps_strlcpy(buf, "portable C GEMM (no GEMM library)", len);
#endif
}
