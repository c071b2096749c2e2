/* Unit tests of backend/ and kernels/elementwise.h: the shared element-wise
 * math; the host backend's GELU, softmax, bias sums, autocast ops and bucket
 * copy; memory accounting, cuBLAS's workspace size, versions, NVML (absent,
 * its fields, through a stub), --backend auto's choice, the fork rule of
 * devices, the host GEMM and signals during it; on a GPU the CUDA
 * backend's GEMM with a bias, GELU and GELU's backward with the bias
 * gradient, and cuBLAS's workspace. */
#include <dirent.h>
#include <dlfcn.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/wait.h>

#include "build_config.h"
#include "backend/backend.h"
#include "elementwise.h"
#include "backend/nvml.h"
#include "launch/ranks.h"

#include "expect.h"
#ifdef DPS_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

/* Each activation's value and gradient at 1.7 and -0.6, as PyTorch 1.13
 * computes them (torch.nn.functional's fn, y.sum().backward()), and its
 * backward against central differences of its forward, away from kinks;
 * relu, tanh and sigmoid's backward read the output, the others the input. */
static void test_activations(void)
{
    static const struct { int fn; float y[2], dx[2]; } want[] = {
        {DPS_ACT_RELU, {1.70000005f, 0.0f}, {1.0f, 0.0f}},
        {DPS_ACT_GELU, {1.62423885f, -0.164551824f}, {1.11531794f, 0.0743183047f}},
        {DPS_ACT_TANH, {0.935409069f, -0.537049592f}, {0.125009879f, 0.711577713f}},
        {DPS_ACT_SIGMOID, {0.845534801f, 0.354343712f}, {0.130605698f, 0.228784248f}},
        {DPS_ACT_RELU6, {1.70000005f, 0.0f}, {1.0f, 0.0f}},
        {DPS_ACT_SILU, {1.43740916f, -0.212606221f}, {1.06756449f, 0.217073157f}},
        {DPS_ACT_HARDSWISH, {1.33166659f, -0.24000001f}, {1.0666666f, 0.300000012f}},
        {DPS_ACT_HARDSIGMOID, {0.783333302f, 0.400000006f}, {0.166666672f, 0.166666672f}},
        {DPS_ACT_MISH, {1.62076807f, -0.246936038f}, {1.08425736f, 0.234965429f}},
    };
    static const float xs[2] = {1.7f, -0.6f};
    for (size_t f = 0; f < sizeof want / sizeof want[0]; f++) {
        int fn = want[f].fn, out = dps_act_keeps_output(fn);
        EXPECT(out == (fn == DPS_ACT_RELU || fn == DPS_ACT_TANH || fn == DPS_ACT_SIGMOID));
        for (int k = 0; k < 2; k++) {
            float y = dps_act(fn, xs[k]);
            EXPECT_NEAR(y, want[f].y[k], 2e-7 + 2e-7 * fabsf(want[f].y[k]));
            EXPECT_NEAR(dps_act_bwd(fn, 1.0f, out ? y : xs[k]), want[f].dx[k], 3e-7);
        }
        for (float x = -5.1f; x <= 7.0f; x += 0.37f) {
            double h = 1e-3, num = (dps_act(fn, x + (float)h) - dps_act(fn, x - (float)h)) / (2 * h);
            if (fabsf(x) < 0.01f || fabsf(fabsf(x) - 3.0f) < 0.01f || fabsf(x - 6.0f) < 0.01f) continue;
            EXPECT_NEAR(dps_act_bwd(fn, 2.0f, out ? dps_act(fn, x) : x), 2.0 * num, 4e-3);
        }
    }
}

static void test_elementwise(void)
{
    for (float x = -4.0f; x <= 4.0f; x += 0.37f) {
        double h = 1e-3;
        double num = (dps_gelu(x + (float)h) - dps_gelu(x - (float)h)) / (2 * h);
        EXPECT_NEAR(dps_gelu_grad(x), num, 2e-3);
    }
    EXPECT_NEAR(dps_gelu(1.0f), 0.8413447, 1e-6); /* torch.nn.functional.gelu(1.0) */
    EXPECT(dps_f32_to_bf16(1.0f) == 0x3f80);
    EXPECT(dps_f32_to_bf16(1.00390625f) == 0x3f80);   /* tie rounds to even */
    EXPECT(dps_f32_to_bf16(1.01171875f) == 0x3f82);   /* tie rounds up to even */
    EXPECT(dps_bf16_to_f32(0x4049) == 3.140625f);
    /* AdamW, one step from zero state: p -= lr * sign(g) (approximately), decay first */
    dps_opt_hparams h = {.lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                         .weight_decay = 0.01f, .step = 1};
    float p = 1.0f, m = 0.0f, v = 0.0f;
    dps_adamw_update(&p, 0.5f, &m, &v, h);
    EXPECT_NEAR(p, 1.0 * (1 - 0.1 * 0.01) - 0.1 * (0.05 / 0.1) / (sqrt(0.00025) / sqrt(0.001) + 1e-8), 1e-6);
    /* SGD momentum: buf = g, then buf = m*buf + g */
    dps_opt_hparams s = {.lr = 0.1f, .momentum = 0.9f};
    float q = 1.0f, buf = 0.0f;
    dps_sgd_update(&q, 2.0f, &buf, s);
    dps_sgd_update(&q, 1.0f, &buf, s);
    EXPECT_NEAR(buf, 2.8, 1e-6);
    EXPECT_NEAR(q, 1.0 - 0.2 - 0.28, 1e-6);
    /* the generator is uniform in [-1, 1) and reproducible */
    double sum = 0;
    for (int i = 0; i < 10000; i++) {
        float u = dps_uniform(7, 1, (uint64_t)i);
        EXPECT(u >= -1.0f && u < 1.0f);
        sum += u;
    }
    EXPECT(fabs(sum / 10000) < 0.03);
    EXPECT(dps_uniform(7, 1, 42) == dps_uniform(7, 1, 42));
    /* golden values, shared with tests/test_torch_reference.py (the numpy copy) */
    EXPECT(dps_uniform(1234, 1, 0) == -0.651825905f);
    EXPECT(dps_uniform(1234, 1, 7919) == 0.878929496f);
    EXPECT(dps_uniform(42, 2 + (5u << 8), 123456789) == 0.278357625f);
    EXPECT(dps_uniform(7, 1, 42) != dps_uniform(8, 1, 42));
}

/* The host backend's GELU, its derivative and softmax cross-entropy (its own
 * vectorizable arithmetic) against dps_gelu / dps_gelu_grad (libm's erff and
 * expf, what the GPU kernels run) and a double-precision softmax. */
static void test_host_math(void)
{
    be_options o = {.kind = BE_HOST, .host_devices = 1, .quiet = 1};
    backend *be = NULL;
    EXPECT(be_open(&o, &be) == DPS_OK);
    if (!be) return;
    be_stream *st = expect_stream(be);
    const float special[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 30.0f, -30.0f, 1e30f, -1e30f, 87.5f,
                             -87.5f, INFINITY, NAN};
    int nsp = (int)(sizeof special / sizeof special[0]), n = 240001 + nsp;
    float *x = malloc((size_t)n * 4), *y = malloc((size_t)n * 4), *bias = calloc((size_t)n, 4);
    float *dh = malloc((size_t)n * 4), *g = malloc((size_t)n * 4);
    for (int i = 0; i < n - nsp; i++) x[i] = -12.0f + 24.0f * (float)i / (float)(n - nsp - 1);
    for (int i = 0; i < nsp; i++) x[n - nsp + i] = special[i];
    for (int i = 0; i < n; i++) dh[i] = 1.0f - (float)(i % 3);
    float *y2 = malloc((size_t)n * 4);
    EXPECT(be->ops->act(be, st, DPS_ACT_GELU, n, x, y2) == DPS_OK);
    EXPECT(be->ops->bias_act(be, st, 1, n, x, bias, y) == DPS_OK); /* x + 0: x, but -0 */
    for (int i = 0; i < n; i++)
        if (x[i] != 0.0f) EXPECT(memcmp(&y[i], &y2[i], 4) == 0 || (isnan(y[i]) && isnan(y2[i])));
    free(y2);
    EXPECT(be->ops->act_bwd(be, st, DPS_ACT_GELU, n, dh, x, g) == DPS_OK);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        double want = dps_gelu(x[i]), want_g = dh[i] * dps_gelu_grad(x[i]);
        int ok = y[i] == want || fabs(y[i] - want) <= 2e-7 + 2.5e-7 * fabs(want) ||
                 (isnan(want) && isnan(y[i]));
        ok &= g[i] == want_g || fabs(g[i] - want_g) <= 2e-7 + 2.5e-7 * fabs(want_g) ||
              (isnan(want_g) && isnan(g[i]));
        if (!ok && bad++ < 5)
            fprintf(stderr, "x = %.9g: gelu %.9g, dps_gelu %.9g; grad %.9g, want %.9g\n", x[i],
                    y[i], want, g[i], want_g);
    }
    EXPECT(bad == 0);
    /* softmax cross-entropy: rows of growing spread, the label anywhere */
    int rows = 6, classes = 1000;
    float *logits = malloc((size_t)rows * classes * 4), *dl = malloc((size_t)rows * classes * 4);
    float loss[6];
    int32_t labels[6] = {0, 999, 500, 3, 17, 998};
    for (int i = 0; i < rows * classes; i++)
        logits[i] = dps_uniform(9, 1, (uint64_t)i) * (float)(1 << (2 * (i / classes)));
    EXPECT(be->ops->xent(be, st, rows, classes, logits, labels, 0.25f, dl, loss) == DPS_OK);
    double worst = 0;
    for (int r = 0; r < rows; r++) {
        const float *z = logits + (size_t)r * classes;
        double mx = -INFINITY, sum = 0;
        for (int c = 0; c < classes; c++) mx = fmax(mx, z[c]);
        for (int c = 0; c < classes; c++) sum += exp(z[c] - mx);
        double want = log(sum) + mx - z[labels[r]];
        worst = fmax(worst, fabs(loss[r] - want) / (fabs(want) + 1e-3));
        for (int c = 0; c < classes; c++) {
            double d = (exp(z[c] - mx) / sum - (c == labels[r])) * 0.25;
            worst = fmax(worst, fabs(dl[(size_t)r * classes + c] - d) / (fabs(d) + 1e-9));
        }
    }
    if (worst > 2e-5) fprintf(stderr, "softmax cross-entropy: worst relative error %.3g\n", worst);
    EXPECT(worst <= 2e-5);
    logits[7] = NAN; /* a NaN logit is not hidden: the row's loss is NaN */
    EXPECT(be->ops->xent(be, st, 1, classes, logits, labels, 0.25f, dl, loss) == DPS_OK);
    EXPECT(isnan(loss[0]));
    free(x); free(y); free(bias); free(dh); free(g); free(logits); free(dl);
    expect_stream_free(be, st);
    be_close(be);
}
/* The CUDA bias-gradient kernels (kernels.cu) simulated thread by thread:
 * block (bx, run), thread (tx, lane); then the runs added in order. */
static void col_sum_as_gpu(int rows, int cols, const float *x, float *out)
{
    dps_col_sum_plan p = dps_col_sum_plan_for(rows, cols);
    float *part = malloc((size_t)p.chunks * (size_t)cols * sizeof(float));
    for (int run = 0; run < p.chunks; run++)
        for (int bx = 0; bx < (cols + 31) / 32; bx++) {
            float lane[DPS_COLSUM_LANES][32];
            int r0 = run * p.chunk_rows, r1 = r0 + p.chunk_rows < rows ? r0 + p.chunk_rows : rows;
            for (int ty = 0; ty < DPS_COLSUM_LANES; ty++)
                for (int tx = 0; tx < 32; tx++) {
                    int c = bx * 32 + tx;
                    float acc = 0.0f;
                    for (int r = r0 + ty; c < cols && r < r1; r += DPS_COLSUM_LANES)
                        acc += x[(size_t)r * cols + c];
                    lane[ty][tx] = acc;
                }
            for (int tx = 0; tx < 32 && bx * 32 + tx < cols; tx++)
                part[(size_t)run * cols + bx * 32 + tx] = dps_col_sum_lanes(&lane[0][tx], 32);
        }
    for (int c = 0; c < cols; c++) {
        float acc = part[c];
        for (int k = 1; k < p.chunks; k++) acc += part[(size_t)k * cols + c];
        out[c] = acc;
    }
    free(part);
}

/* The bias gradient's plan, and the host backend's col_sum: the sums
 * within float rounding of exact ones, bit for bit the GPU kernels' order,
 * the same on every call; fused with GELU's backward, the same values. */
static void test_col_sum(void)
{
    dps_col_sum_plan g = dps_col_sum_plan_for(8192, 1536); /* gpt2's hidden layers */
    EXPECT(g.chunks == 64 && g.chunk_rows == 128);
    g = dps_col_sum_plan_for(8192, 50257); /* its classifier: the workspace bounded */
    EXPECT(dps_col_sum_workspace(8192, 50257) <= DPS_COLSUM_WORKSPACE_FLOATS && g.chunks > 1);
    EXPECT(dps_col_sum_workspace(64, 1536) == 0 && dps_col_sum_plan_for(0, 4).chunks == 1);
    be_options o = {.kind = BE_HOST, .host_devices = 1, .quiet = 1};
    backend *be = NULL;
    EXPECT(be_open(&o, &be) == DPS_OK);
    if (!be) return;
    be_stream *st = expect_stream(be);
    static const int shapes[][2] = {{0, 3}, {1, 1}, {7, 33}, {64, 300}, {65, 257}, {1000, 31},
                                    {4099, 513}, {8192, 40}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int rows = shapes[i][0], cols = shapes[i][1];
        dps_col_sum_plan p = dps_col_sum_plan_for(rows, cols);
        EXPECT((int64_t)p.chunks * p.chunk_rows >= rows && (p.chunks - 1) * p.chunk_rows < rows + (rows == 0));
        float *x = malloc(((size_t)rows * cols + 1) * sizeof(float));
        float *out = malloc((size_t)cols * sizeof(float)), *again = malloc((size_t)cols * sizeof(float));
        float *gpu = malloc((size_t)cols * sizeof(float));
        for (size_t k = 0; k < (size_t)rows * cols; k++) x[k] = dps_uniform(3, 9, k) * 1e3f;
        EXPECT(be->ops->col_sum(be, st, rows, cols, x, out) == DPS_OK);
        EXPECT(be->ops->col_sum(be, st, rows, cols, x, again) == DPS_OK);
        col_sum_as_gpu(rows, cols, x, gpu);
        EXPECT(memcmp(out, again, (size_t)cols * sizeof(float)) == 0);
        EXPECT(memcmp(out, gpu, (size_t)cols * sizeof(float)) == 0);
        /* GELU's backward fused with the sums: gelu_bwd's values, col_sum's sums */
        size_t n = (size_t)rows * cols;
        float *pre = malloc((n + 1) * sizeof(float)), *want = malloc((n + 1) * sizeof(float));
        float *dh = malloc((n + 1) * sizeof(float)), *fused_db = malloc((size_t)cols * sizeof(float));
        float *want_db = malloc((size_t)cols * sizeof(float));
        for (size_t k = 0; k < n; k++) pre[k] = dps_uniform(3, 10, k) * 4.0f;
        memcpy(dh, x, n * sizeof(float));
        EXPECT(be->ops->act_bwd(be, st, DPS_ACT_GELU, (int64_t)n, x, pre, want) == DPS_OK);
        EXPECT(be->ops->col_sum(be, st, rows, cols, want, want_db) == DPS_OK);
        EXPECT(be->ops->gelu_bwd_col_sum(be, st, rows, cols, dh, pre, dh, fused_db) == DPS_OK);
        EXPECT(memcmp(dh, want, n * sizeof(float)) == 0);
        EXPECT(memcmp(fused_db, want_db, (size_t)cols * sizeof(float)) == 0);
        free(pre); free(want); free(dh); free(fused_db); free(want_db);
        for (int c = 0; c < cols; c++) {
            double exact = 0.0, mag = 0.0;
            for (int r = 0; r < rows; r++) {
                exact += x[(size_t)r * cols + c];
                mag += fabs(x[(size_t)r * cols + c]);
            }
            EXPECT_NEAR(out[c], exact, 1e-6 * mag + 1e-30);
        }
        free(x); free(out); free(again); free(gpu);
    }
    expect_stream_free(be, st);
    be_close(be);
}

/* The autocast ops on the host backend (an exact emulation), in half type
 * H: casts as elementwise.h rounds; a half GEMM is the fp32 GEMM of the
 * rounded operands, its half output rounded once; Linear + GELU and GELU's
 * backward per element; half bias gradients in col_sum's order. */
static void autocast_ops(be_dtype H)
{
    be_options o = {.kind = BE_HOST, .host_devices = 1, .quiet = 1};
    backend *be = NULL;
    int f16 = H == BE_F16;
    EXPECT(be_open(&o, &be) == DPS_OK);
    if (!be) return;
    be_stream *st = expect_stream(be);
    const be_ops *op = be->ops;
    enum { M = 37, N = 45, K = 29 };
    float a[M * K], b[K * N], ar[M * K], br[K * N], want[M * N], got[M * N], c0[M * N];
    uint16_t a16[M * K], b16[K * N], c16[M * N];
    for (int i = 0; i < M * K; i++) a[i] = dps_uniform(11, 1, (uint64_t)i);
    for (int i = 0; i < K * N; i++) b[i] = dps_uniform(11, 2, (uint64_t)i);
    for (int i = 0; i < M * N; i++) c0[i] = dps_uniform(11, 3, (uint64_t)i);
    EXPECT(op->cast(be, st, M * K, a, BE_F32, a16, H) == DPS_OK);
    EXPECT(op->cast(be, st, K * N, b, BE_F32, b16, H) == DPS_OK);
    EXPECT(op->cast(be, st, M * K, a16, H, ar, BE_F32) == DPS_OK);
    EXPECT(op->cast(be, st, K * N, b16, H, br, BE_F32) == DPS_OK);
    EXPECT(a16[5] == dps_to_half(a[5], f16) && ar[5] == dps_from_half(a16[5], f16));
    memcpy(want, c0, sizeof want);
    EXPECT(op->gemm(be, st, 0, 0, M, N, K, 1.0f, ar, K, br, N, 0.5f, want, N) == DPS_OK);
    memcpy(got, c0, sizeof got);
    EXPECT(op->gemm_ex(be, st, 0, 0, M, N, K, 1.0f, a16, H, K, b16, H, N, 0.5f, got,
                       BE_F32, N) == DPS_OK);
    EXPECT(memcmp(got, want, sizeof got) == 0);
    memcpy(got, c0, sizeof got); /* an fp32 A beside a half B is rounded first */
    EXPECT(op->gemm_ex(be, st, 0, 0, M, N, K, 1.0f, a, BE_F32, K, b16, H, N, 0.5f, got,
                       BE_F32, N) == DPS_OK);
    EXPECT(memcmp(got, want, sizeof got) == 0);
    EXPECT(op->cast(be, st, M * N, c0, BE_F32, c16, H) == DPS_OK);
    for (int i = 0; i < M * N; i++) want[i] = dps_from_half(c16[i], f16);
    EXPECT(op->gemm(be, st, 0, 0, M, N, K, 1.0f, ar, K, br, N, 1.0f, want, N) == DPS_OK);
    EXPECT(op->gemm_ex(be, st, 0, 0, M, N, K, 1.0f, a16, H, K, b16, H, N, 1.0f, c16,
                       H, N) == DPS_OK);
    int rounded_once = 1;
    for (int i = 0; i < M * N; i++) rounded_once &= c16[i] == dps_to_half(want[i], f16);
    EXPECT(rounded_once);
    EXPECT(op->gemm_ex(be, st, 0, 0, M, N, K, 1.0f, a, BE_F32, K, b, BE_F32, N, 0.0f, c16,
                       H, N) == DPS_ERR_RUNTIME && strstr(dps_errmsg(), "cast A or B"));
    EXPECT(op->gemm_ex(be, st, 0, 0, M, N, K, 1.0f, a16, BE_BF16, K, b16, BE_F16, N, 0.0f, got,
                       BE_F32, N) == DPS_ERR_RUNTIME && strstr(dps_errmsg(), "two half types"));
    /* Linear (addmm: the product plus the bias, rounded once) + GELU, GELU's
     * backward, the bias gradient */
    enum { LD = N + 3 }; /* C's rows padded: the padding is left alone */
    uint16_t bias[N], pre[M * LD], post[M * N], dpre[M * N], wide_pre[M * N];
    float acc[M * N], biasf[N], out[M * LD];
    for (int c = 0; c < N; c++) bias[c] = dps_to_half(dps_uniform(11, 4, (uint64_t)c), f16);
    for (int c = 0; c < N; c++) biasf[c] = dps_uniform(11, 5, (uint64_t)c);
    for (int i = 0; i < M * LD; i++) pre[i] = 0x7777;
    for (int i = 0; i < M * LD; i++) out[i] = 7.0f;
    EXPECT(op->gemm(be, st, 0, 0, M, N, K, 1.0f, ar, K, br, N, 0.0f, acc, N) == DPS_OK);
    EXPECT(op->gemm_bias(be, st, 0, 0, M, N, K, a16, H, K, b16, H, N, bias, pre, H, LD) == DPS_OK);
    EXPECT(op->gemm_bias(be, st, 0, 0, M, N, K, ar, BE_F32, K, br, BE_F32, N, biasf, out, BE_F32,
                         LD) == DPS_OK);
    int added = 1, padding = 1;
    for (int r = 0; r < M; r++)
        for (int c = 0; c < LD; c++) {
            int i = r * LD + c;
            if (c >= N) {
                padding &= pre[i] == 0x7777 && out[i] == 7.0f;
                continue;
            }
            added &= pre[i] == dps_add_bias_half(acc[r * N + c], bias[c], f16);
            added &= out[i] == acc[r * N + c] + biasf[c];
            wide_pre[r * N + c] = pre[i];
        }
    EXPECT(added && padding);
    EXPECT(wide_pre[7] == dps_to_half(acc[7] + dps_from_half(bias[7], f16), f16));
    EXPECT(op->gemm_bias(be, st, 0, 0, M, N, K, a, BE_F32, K, b, BE_F32, N, bias, pre, H,
                         N) == DPS_ERR_RUNTIME && strstr(dps_errmsg(), "cast A or B"));
    EXPECT(op->act_half(be, st, DPS_ACT_GELU, H, M * N, wide_pre, post) == DPS_OK);
    int gelu_ok = 1;
    for (int i = 0; i < M * N; i++) gelu_ok &= post[i] == dps_gelu_half(wide_pre[i], f16);
    EXPECT(gelu_ok);
    memcpy(pre, wide_pre, sizeof wide_pre);
    EXPECT(op->act_bwd_half(be, st, DPS_ACT_GELU, H, M * N, post, pre, dpre) == DPS_OK);
    EXPECT(dpre[9] == dps_gelu_bwd_half(post[9], pre[9], f16));
    float sums[N], sums_wide[N], fused[N];
    EXPECT(op->cast(be, st, M * N, dpre, H, got, BE_F32) == DPS_OK);
    EXPECT(op->col_sum(be, st, M, N, got, sums_wide) == DPS_OK);
    EXPECT(op->col_sum_half(be, st, H, M, N, dpre, sums) == DPS_OK);
    EXPECT(memcmp(sums, sums_wide, sizeof sums) == 0);
    EXPECT(op->gelu_bwd_col_sum_half(be, st, H, M, N, post, pre, post, fused) == DPS_OK);
    EXPECT(memcmp(post, dpre, sizeof dpre) == 0 && memcmp(fused, sums, sizeof sums) == 0);
    expect_stream_free(be, st);
    be_close(be);
}

static void test_autocast_ops(void)
{
    autocast_ops(BE_BF16);
    autocast_ops(BE_F16);
}

/* IEEE binary16 as torch.float16 rounds: to nearest even, inf from 65520
 * up (the largest finite is 65504), subnormals down to 2^-24, NaN kept;
 * and back exactly. */
static void test_f16(void)
{
    EXPECT(dps_f32_to_f16(1.0f) == 0x3c00 && dps_f16_to_f32(0x3c00) == 1.0f);
    EXPECT(dps_f32_to_f16(-2.0f) == 0xc000);
    EXPECT(dps_f32_to_f16(65504.0f) == 0x7bff && dps_f16_to_f32(0x7bff) == 65504.0f);
    EXPECT(dps_f32_to_f16(65519.0f) == 0x7bff);          /* below the tie: the largest */
    EXPECT(dps_f32_to_f16(65520.0f) == 0x7c00);          /* the tie rounds to even: inf */
    EXPECT(dps_f32_to_f16(1e9f) == 0x7c00 && dps_f32_to_f16(-1e9f) == 0xfc00);
    EXPECT(dps_f32_to_f16(1.0f + 1.0f / 2048) == 0x3c00); /* tie at 1 + 2^-11: to even */
    EXPECT(dps_f32_to_f16(1.0f + 3.0f / 2048) == 0x3c02); /* tie: up to even */
    EXPECT(dps_f32_to_f16(5.9604645e-8f) == 0x0001);     /* 2^-24, the smallest subnormal */
    EXPECT(dps_f16_to_f32(0x0001) == 5.9604645e-8f);
    EXPECT(dps_f32_to_f16(2.0e-8f) == 0x0000);           /* below half of 2^-24: zero */
    EXPECT(dps_f16_to_f32(0x0200) == 3.0517578e-5f);     /* a subnormal back exactly */
    EXPECT(dps_f16_to_f32(0x7c00) == INFINITY && dps_f16_to_f32(0xfc00) == -INFINITY);
    uint16_t nan = dps_f32_to_f16(NAN);
    EXPECT((nan & 0x7c00) == 0x7c00 && (nan & 0x3ff) != 0);
    float back = dps_f16_to_f32(nan);
    EXPECT(back != back);
    int exact = 1; /* every finite half survives the round trip */
    for (uint32_t h = 0; h < 0x10000; h++)
        if ((h & 0x7c00) != 0x7c00) exact &= dps_f32_to_f16(dps_f16_to_f32((uint16_t)h)) == h;
    EXPECT(exact);
}

/* GradScaler's unscale on the host backend: g / scale by one multiply, the
 * flag set by an inf or NaN and left alone otherwise. */
static void test_unscale(void)
{
    be_options o = {.kind = BE_HOST, .host_devices = 1, .quiet = 1};
    backend *be = NULL;
    EXPECT(be_open(&o, &be) == DPS_OK);
    if (!be) return;
    be_stream *st = expect_stream(be);
    float g[4] = {2.0f, -6.0f, 0.5f, 0.0f}, found = 0.0f;
    EXPECT(be->ops->unscale(be, st, 4, g, 0.25f, &found) == DPS_OK);
    EXPECT(g[0] == 0.5f && g[1] == -1.5f && g[2] == 0.125f && found == 0.0f);
    g[2] = INFINITY;
    EXPECT(be->ops->unscale(be, st, 4, g, 0.25f, &found) == DPS_OK && found == 1.0f);
    found = 0.0f;
    g[2] = NAN;
    EXPECT(be->ops->unscale(be, st, 4, g, 1.0f, &found) == DPS_OK && found == 1.0f);
    expect_stream_free(be, st);
    be_close(be);
}

/* A NULL stream is refused by every operation that takes one, naming the
 * operation, as the cuda backend would crash on it (it reads the stream's
 * device and queue); nothing is written. */
static void test_null_stream(void)
{
    be_options o = {.kind = BE_HOST, .host_devices = 1, .quiet = 1};
    backend *be = NULL;
    EXPECT(be_open(&o, &be) == DPS_OK);
    if (!be) return;
    float x[4] = {1, 2, 3, 4}, y[4] = {5, 6, 7, 8};
    be_event *e = NULL;
    EXPECT(be->ops->event_create(be, 0, &e) == DPS_OK);
    EXPECT(be->ops->memset0(be, NULL, x, sizeof x) == DPS_ERR_RUNTIME);
    EXPECT(strstr(dps_errmsg(), "memset0 called with no stream") && x[0] == 1.0f);
    EXPECT(be->ops->copy(be, NULL, y, 0, x, 0, sizeof x) == DPS_ERR_RUNTIME && y[0] == 5.0f);
    EXPECT(strstr(dps_errmsg(), "copy called with no stream"));
    EXPECT(be->ops->gemm(be, NULL, 0, 0, 2, 2, 2, 1.0f, x, 2, x, 2, 0.0f, y, 2) == DPS_ERR_RUNTIME);
    EXPECT(be->ops->scale(be, NULL, 4, x, 2.0f) == DPS_ERR_RUNTIME && x[3] == 4.0f);
    EXPECT(be->ops->stream_sync(be, NULL) == DPS_ERR_RUNTIME);
    EXPECT(be->ops->event_record(be, e, NULL) == DPS_ERR_RUNTIME);
    EXPECT(be->ops->stream_wait(be, NULL, e) == DPS_ERR_RUNTIME);
    be_stream *st = expect_stream(be);
    EXPECT(be->ops->memset0(be, st, x, sizeof x) == DPS_OK && x[0] == 0.0f);
    expect_stream_free(be, st);
    if (e) be->ops->event_destroy(be, e);
    be_close(be);
}

/* DDP's bucket copy: one pass, the same bits as a copy then a scale, in place too. */
static void test_scale_copy(void)
{
    be_options o = {.kind = BE_HOST, .host_devices = 1, .quiet = 1};
    backend *be = NULL;
    EXPECT(be_open(&o, &be) == DPS_OK);
    if (!be) return;
    be_stream *st = expect_stream(be);
    enum { N = 1001 };
    float g[N], two_pass[N], one_pass[N], in_place[N];
    for (int i = 0; i < N; i++) in_place[i] = g[i] = dps_uniform(5, 1, (uint64_t)i) * 7.0f;
    const float a = 1.0f / 3.0f;
    EXPECT(be->ops->copy(be, st, two_pass, 0, g, 0, sizeof g) == DPS_OK);
    EXPECT(be->ops->scale(be, st, N, two_pass, a) == DPS_OK);
    EXPECT(be->ops->scale_copy(be, st, N, one_pass, g, a) == DPS_OK);
    EXPECT(be->ops->scale_copy(be, st, N, in_place, in_place, a) == DPS_OK);
    EXPECT(memcmp(one_pass, two_pass, sizeof g) == 0 && memcmp(in_place, two_pass, sizeof g) == 0);
    EXPECT(be->ops->scale_copy(be, st, 0, NULL, NULL, a) == DPS_OK);
    EXPECT(dps_scale_copy(3.0f, 0.5f) == 1.5f);
    expect_stream_free(be, st);
    be_close(be);
}

/* cuBLAS's workspace as PyTorch sizes it (CublasHandlePool.cpp,
 * parseChosenWorkspaceSize): by compute capability, or the pairs of
 * CUBLAS_WORKSPACE_CONFIG; none on the host backend. */
static void test_cublas_workspace(void)
{
    static const struct { int major; const char *config; size_t bytes; } cases[] = {
        {7, NULL, 8519680}, {8, NULL, 8519680}, {9, NULL, 33554432}, {10, NULL, 33554432},
        {11, NULL, 8519680}, {12, NULL, 33554432}, {0, NULL, 8519680},
        {8, ":4096:8", 33554432}, {9, ":4096:2:16:8", 8519680}, {9, ":16:8", 131072},
        {8, ":4096:1:4096:1", 8388608}, {9, ":0:0", 0},
        {9, "", 33554432}, {8, "garbage", 8519680}, {9, ":4096", 33554432},
        {8, "x:1:2y", 2048}, {8, ":1:2:3", 2048}, {8, "::1:2", 2048},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t got = be_cublas_workspace_bytes(cases[i].major, cases[i].config);
        if (got != cases[i].bytes)
            fprintf(stderr, "major %d, CUBLAS_WORKSPACE_CONFIG %s: %zu bytes, want %zu\n",
                    cases[i].major, cases[i].config ? cases[i].config : "unset", got, cases[i].bytes);
        EXPECT(got == cases[i].bytes);
    }
    EXPECT(be_cublas_workspace_bytes(9, ":99999999999999999999999:2") == SIZE_MAX);
    be_options o = {.kind = BE_HOST, .host_devices = 1, .quiet = 1};
    backend *be = NULL;
    EXPECT(be_open(&o, &be) == DPS_OK);
    if (be) EXPECT(be_gemm_workspace_bytes(be, 0) == 0);
    be_close(be);
}

/* ---- On a GPU (the cuda_ops group; skipped without one) ---- */
#ifdef DPS_HAVE_CUDA

/* A device buffer of bytes on GPU 0 filled from host memory (src NULL: left as it is). */
static void *gpu_put(backend *be, be_stream *st, dps_buf *b, const void *src, size_t bytes)
{
    EXPECT(be_buf_alloc(be, 0, bytes ? bytes : 1, "test operands", b) == DPS_OK);
    if (src && b->ptr) EXPECT(be->ops->copy(be, st, b->ptr, 0, src, DPS_HOST, bytes) == DPS_OK);
    return b->ptr;
}

static void gpu_get(backend *be, be_stream *st, void *dst, const dps_buf *b, size_t bytes)
{
    if (b->ptr) EXPECT(be->ops->copy(be, st, dst, DPS_HOST, b->ptr, 0, bytes) == DPS_OK);
    EXPECT(be->ops->stream_sync(be, st) == DPS_OK);
}

/* An element of type t as fp32 (its bits at x[i]). */
static float elem(const void *x, be_dtype t, size_t i)
{
    return t == BE_F32 ? ((const float *)x)[i] : dps_from_half(((const uint16_t *)x)[i], t == BE_F16);
}

static void put_elem(void *x, be_dtype t, size_t i, float v)
{
    if (t == BE_F32) ((float *)x)[i] = v;
    else ((uint16_t *)x)[i] = dps_to_half(v, t == BE_F16);
}

/* One gemm_bias on the GPU against the exact sum in double: C within one
 * rounding of C's type (and fp32 summation's error) of op(A) op(B) + bias
 * along C's columns, the padding of C's rows left alone. shift: A, the
 * bias and C one element past an aligned address (as a model's biases lie
 * in its flat buffer). */
static void gpu_gemm_bias_case(backend *be, be_stream *st, be_dtype t, int ta, int tb, int m,
                               int n, int k, int shift)
{
    size_t es = be_dtype_bytes(t), off = shift ? es : 0;
    int lda = ta ? m : k, ldb = tb ? k : n, ldc = n + 5;
    size_t na = (size_t)m * k, nb = (size_t)k * n, nc = (size_t)m * ldc;
    char *a = malloc(na * es + 1), *b = malloc(nb * es + 1), *bias = malloc((size_t)n * es);
    char *c = malloc(nc * es), *want_pad = malloc(nc * es);
    double *af = malloc((na + 1) * sizeof(double)), *bf = malloc((nb + 1) * sizeof(double));
    for (size_t i = 0; i < na; i++) put_elem(a, t, i, dps_uniform(21, 1, i));
    for (size_t i = 0; i < nb; i++) put_elem(b, t, i, dps_uniform(21, 2, i));
    for (size_t i = 0; i < na; i++) af[i] = elem(a, t, i);
    for (size_t i = 0; i < nb; i++) bf[i] = elem(b, t, i);
    for (int j = 0; j < n; j++) put_elem(bias, t, (size_t)j, 2.0f * dps_uniform(21, 3, (uint64_t)j));
    memset(want_pad, 0x5a, nc * es);
    dps_buf da, db, dbias, dc;
    gpu_put(be, st, &da, NULL, na * es + off);
    gpu_put(be, st, &db, b, nb * es);
    gpu_put(be, st, &dbias, NULL, (size_t)n * es + off);
    gpu_put(be, st, &dc, NULL, nc * es + off);
    char *pa = (char *)da.ptr + off, *pbias = (char *)dbias.ptr + off, *pc = (char *)dc.ptr + off;
    if (da.ptr && dbias.ptr && dc.ptr) {
        EXPECT(be->ops->copy(be, st, pa, 0, a, DPS_HOST, na * es) == DPS_OK);
        EXPECT(be->ops->copy(be, st, pbias, 0, bias, DPS_HOST, (size_t)n * es) == DPS_OK);
        EXPECT(be->ops->copy(be, st, pc, 0, want_pad, DPS_HOST, nc * es) == DPS_OK);
        EXPECT(be->ops->gemm_bias(be, st, ta, tb, m, n, k, pa, t, lda, db.ptr, t, ldb, pbias, pc, t,
                                  ldc) == DPS_OK);
        EXPECT(be->ops->copy(be, st, c, DPS_HOST, pc, 0, nc * es) == DPS_OK);
    }
    EXPECT(be->ops->stream_sync(be, st) == DPS_OK);
    double rel = t == BE_BF16 ? 1.0 / 128 : t == BE_F16 ? 1.0 / 1024 : 0.0;
    int bad = 0;
    for (int r = 0; r < m; r++)
        for (int j = 0; j < ldc; j++) {
            size_t i = (size_t)r * ldc + (size_t)j;
            if (j >= n) {
                bad += memcmp(c + i * es, want_pad + i * es, es) != 0;
                continue;
            }
            double exact = elem(bias, t, (size_t)j), mag = fabs(exact);
            for (int q = 0; q < k; q++) {
                double p = af[ta ? (size_t)q * lda + r : (size_t)r * lda + q] *
                           bf[tb ? (size_t)j * ldb + q : (size_t)q * ldb + j];
                exact += p;
                mag += fabs(p);
            }
            double got = elem(c, t, i);
            if (fabs(got - exact) <= rel * fabs(exact) + 4e-6 * mag + 1e-6) continue;
            if (bad++ < 3)
                fprintf(stderr, "gemm_bias %s ta %d tb %d %dx%dx%d%s: C[%d,%d] = %.9g, exact %.9g\n",
                        t == BE_F32 ? "fp32" : t == BE_BF16 ? "bf16" : "fp16", ta, tb, m, n, k,
                        shift ? " shifted" : "", r, j, got, exact);
        }
    EXPECT(bad == 0);
    dps_buf *all[] = {&da, &db, &dbias, &dc};
    for (int i = 0; i < 4; i++) be_buf_free(be, all[i]);
    free(a); free(b); free(bias); free(c); free(want_pad); free(af); free(bf);
}

/* gemm_tf32 on the GPU: A (every element 1 + 2^-11 + 2^-20, below TF32's
 * precision) times the identity, N x N x N, as gemm and as gemm_bias (a
 * zero bias: cuBLASLt's plan): fp32 gives A back, TF32 A rounded by the
 * tensor cores, to 1 + 2^-10 or (truncated) 1, never A itself. */
static void gpu_gemm_tf32(backend *be, be_stream *st)
{
    enum { N = 256 };
    const float x = 1.0f + 0x1p-11f + 0x1p-20f;
    float *a = malloc(N * N * sizeof *a), *id = calloc(N * N, sizeof *id), *c = malloc(N * N * sizeof *c);
    float *zero = calloc(N, sizeof *zero);
    for (int i = 0; i < N * N; i++) a[i] = x;
    for (int i = 0; i < N; i++) id[i * N + i] = 1.0f;
    dps_buf da, db, dc, dz;
    gpu_put(be, st, &da, a, sizeof(float) * N * N);
    gpu_put(be, st, &db, id, sizeof(float) * N * N);
    gpu_put(be, st, &dc, NULL, sizeof(float) * N * N);
    gpu_put(be, st, &dz, zero, sizeof(float) * N);
    for (int on = 0; on < 2 && da.ptr && db.ptr && dc.ptr && dz.ptr; on++)
        for (int bias = 0; bias < 2; bias++) {
            EXPECT(be->ops->gemm_tf32(be, st, on) == DPS_OK);
            if (bias)
                EXPECT(be->ops->gemm_bias(be, st, 0, 0, N, N, N, da.ptr, BE_F32, N, db.ptr, BE_F32,
                                          N, dz.ptr, dc.ptr, BE_F32, N) == DPS_OK);
            else
                EXPECT(be->ops->gemm(be, st, 0, 0, N, N, N, 1.0f, da.ptr, N, db.ptr, N, 0.0f,
                                     dc.ptr, N) == DPS_OK);
            gpu_get(be, st, c, &dc, sizeof(float) * N * N);
            int bad = 0;
            for (int i = 0; i < N * N; i++)
                bad += on ? !(c[i] == 1.0f + 0x1p-10f || c[i] == 1.0f) : c[i] != x;
            if (bad)
                fprintf(stderr, "gemm%s with TF32 %s: %d of %d elements wrong, C[0] = %.9g\n",
                        bias ? "_bias" : "", on ? "on" : "off", bad, N * N, c[0]);
            EXPECT(bad == 0);
        }
    EXPECT(be->ops->gemm_tf32(be, st, 0) == DPS_OK);
    dps_buf *all[] = {&da, &db, &dc, &dz};
    for (int i = 0; i < 4; i++) be_buf_free(be, all[i]);
    free(a); free(id); free(c); free(zero);
}

/* gemm_bias in every type on odd shapes, the classifier's 50257 columns,
 * every transposition and shifted pointers; through cuBLASLt (st) and
 * unfused (st_unfused). */
static void gpu_gemm_bias(backend *be, be_stream *st, be_stream *st_unfused)
{
    static const int shapes[][3] = {{37, 45, 29}, {7, 5, 3}, {129, 1537, 65}, {3, 8, 0},
                                    {64, 50257, 40}};
    const be_dtype types[] = {BE_F32, BE_BF16, BE_F16};
    for (int u = 0; u < 2; u++)
        for (int ti = 0; ti < 3; ti++)
            for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
                for (int tr = 0; tr < 8; tr++) {
                    int ta = (tr >> 1) & 1, tb = tr & 1, shift = tr >> 2;
                    if (shapes[i][1] > 10000 && (ta || shift)) continue; /* the model's, unshifted */
                    gpu_gemm_bias_case(be, u ? st_unfused : st, types[ti], ta, tb, shapes[i][0],
                                       shapes[i][1], shapes[i][2], shift);
                }
}

/* GELU on the GPU against dps_gelu here (erff of another library: 2 ulp). */
static void gpu_gelu(backend *be, be_stream *st)
{
    enum { N = 100003 };
    float *x = malloc(N * 4), *y = malloc(N * 4);
    uint16_t *x16 = malloc(N * 2), *y16 = malloc(N * 2);
    for (int i = 0; i < N; i++) x[i] = -10.0f + 20.0f * (float)i / N;
    dps_buf dx, dy;
    gpu_put(be, st, &dx, x, N * 4);
    gpu_put(be, st, &dy, NULL, N * 4);
    EXPECT(be->ops->act(be, st, DPS_ACT_GELU, N, dx.ptr, dy.ptr) == DPS_OK);
    gpu_get(be, st, y, &dy, N * 4);
    int bad = 0; /* erff's error times x / 2, and the product's rounding */
    for (int i = 0; i < N; i++)
        bad += !(fabsf(y[i] - dps_gelu(x[i])) <= 3e-7f * fabsf(y[i]) + 1.3e-7f * fabsf(x[i]));
    for (int h = 0; h < 2; h++) {
        for (int i = 0; i < N; i++) x16[i] = dps_to_half(x[i], h);
        EXPECT(be->ops->copy(be, st, dx.ptr, 0, x16, DPS_HOST, N * 2) == DPS_OK);
        EXPECT(be->ops->act_half(be, st, DPS_ACT_GELU, h ? BE_F16 : BE_BF16, N, dx.ptr, dy.ptr) == DPS_OK);
        gpu_get(be, st, y16, &dy, N * 2);
        for (int i = 0; i < N; i++) { /* the same half value, or a neighbour */
            double g = dps_from_half(y16[i], h), w = dps_from_half(dps_gelu_half(x16[i], h), h);
            bad += !(fabs(g - w) <= fmax(fabs(g), fabs(w)) / (h ? 1024 : 128) + 1e-6);
        }
    }
    EXPECT(bad == 0);
    be_buf_free(be, &dx);
    be_buf_free(be, &dy);
    free(x); free(y); free(x16); free(y16);
}

/* GELU's backward fused with the bias gradient on the GPU: the bits of
 * gelu_bwd then col_sum there, and the sums the host's col_sum makes of
 * the same values. */
static void gpu_gelu_bwd_col_sum(backend *be, be_stream *st, backend *host)
{
    be_stream *hs = expect_stream(host);
    static const int shapes[][2] = {{8192, 1536}, {4099, 513}, {65, 257}, {7, 33}, {1, 1}, {0, 3}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int ti = 0; ti < 3; ti++) {
            be_dtype t = ti == 0 ? BE_F32 : ti == 1 ? BE_BF16 : BE_F16;
            int rows = shapes[si][0], cols = shapes[si][1];
            size_t n = (size_t)rows * cols, es = be_dtype_bytes(t), cb = (size_t)cols * 4;
            char *dh = malloc(n * es + 1), *pre = malloc(n * es + 1);
            char *want = malloc(n * es + 1), *got = malloc(n * es + 1);
            float *want_db = malloc(cb), *got_db = malloc(cb), *host_db = malloc(cb);
            for (size_t i = 0; i < n; i++) put_elem(dh, t, i, dps_uniform(22, 1, i));
            for (size_t i = 0; i < n; i++) put_elem(pre, t, i, 3.0f * dps_uniform(22, 2, i));
            dps_buf ddh, dpre, dout, ddb;
            gpu_put(be, st, &ddh, dh, n * es);
            gpu_put(be, st, &dpre, pre, n * es);
            gpu_put(be, st, &dout, NULL, n * es);
            gpu_put(be, st, &ddb, NULL, cb);
            const be_ops *o = be->ops;
            if (t == BE_F32) {
                EXPECT(o->act_bwd(be, st, DPS_ACT_GELU, (int64_t)n, ddh.ptr, dpre.ptr, dout.ptr) == DPS_OK);
                EXPECT(o->col_sum(be, st, rows, cols, dout.ptr, ddb.ptr) == DPS_OK);
            } else {
                EXPECT(o->act_bwd_half(be, st, DPS_ACT_GELU, t, (int64_t)n, ddh.ptr, dpre.ptr, dout.ptr) == DPS_OK);
                EXPECT(o->col_sum_half(be, st, t, rows, cols, dout.ptr, ddb.ptr) == DPS_OK);
            }
            gpu_get(be, st, want, &dout, n * es);
            gpu_get(be, st, want_db, &ddb, cb);
            if (t == BE_F32) /* in place, as the model runs it */
                EXPECT(o->gelu_bwd_col_sum(be, st, rows, cols, ddh.ptr, dpre.ptr, ddh.ptr, ddb.ptr) == DPS_OK);
            else
                EXPECT(o->gelu_bwd_col_sum_half(be, st, t, rows, cols, ddh.ptr, dpre.ptr, ddh.ptr,
                                                ddb.ptr) == DPS_OK);
            gpu_get(be, st, got, &ddh, n * es);
            gpu_get(be, st, got_db, &ddb, cb);
            EXPECT(memcmp(got, want, n * es) == 0);
            EXPECT(memcmp(got_db, want_db, cb) == 0);
            if (t == BE_F32)
                EXPECT(host->ops->col_sum(host, hs, rows, cols, (float *)got, host_db) == DPS_OK);
            else
                EXPECT(host->ops->col_sum_half(host, hs, t, rows, cols, (uint16_t *)got, host_db) ==
                       DPS_OK);
            EXPECT(memcmp(host_db, got_db, cb) == 0);
            dps_buf *all[] = {&ddh, &dpre, &dout, &ddb};
            for (int i = 0; i < 4; i++) be_buf_free(be, all[i]);
            free(dh); free(pre); free(want); free(got); free(want_db); free(got_db); free(host_db);
        }
    expect_stream_free(host, hs);
}

/* What the category `what` of device 0 holds now. */
static size_t in_use_as(const backend *be, const char *what)
{
    for (int i = 0; i < be->mem[0].ncat; i++)
        if (strcmp(be->mem[0].cat[i].what, what) == 0) return be->mem[0].cat[i].in_use;
    return 0;
}

#endif /* DPS_HAVE_CUDA */

/* The CUDA backend's GEMMs and the kernels beside them, on GPU 0:
 * gemm_bias (cuBLASLt's bias epilogue, and its unfused path) against exact
 * sums, GELU, GELU's backward fused with the bias gradient against the two
 * passes it replaces, and each stream's cuBLAS workspace in the accounting. */
static void test_cuda_ops(void)
{
#ifdef DPS_HAVE_CUDA
    be_options o = {.kind = BE_CUDA, .quiet = 1}, h = {.kind = BE_HOST, .host_devices = 1, .quiet = 1};
    backend *be = NULL, *host = NULL;
    if (be_open(&o, &be) != DPS_OK || !be) {
        char why[DPS_ERRMSG_MAX + 32];
        snprintf(why, sizeof why, "no CUDA device (%s)", dps_errmsg());
        expect_skip(why);
        return;
    }
    EXPECT(be_open(&h, &host) == DPS_OK);
    be_stream *st = NULL, *st_unfused = NULL;
    EXPECT(be->ops->stream_create(be, 0, &st) == DPS_OK);
    EXPECT(be->ops->stream_create(be, 0, &st_unfused) == DPS_OK);
    struct cudaDeviceProp p;
    EXPECT(cudaGetDeviceProperties(&p, 0) == cudaSuccess);
    size_t ws = be_cublas_workspace_bytes(p.major, getenv("CUBLAS_WORKSPACE_CONFIG"));
    EXPECT(be_gemm_workspace_bytes(be, 0) == ws);
    if (st && st_unfused && host) {
        gpu_gelu(be, st);
        gpu_gelu_bwd_col_sum(be, st, host);
        EXPECT(in_use_as(be, "cuBLAS workspace") == 0); /* no GEMM yet */
        gpu_gemm_bias_case(be, st, BE_BF16, 0, 0, 5, 3, 4, 0);
        EXPECT(in_use_as(be, "cuBLAS workspace") == ws);
        setenv("DPSCALE_UNFUSED_BIAS", "1", 1); /* read as the stream makes its handle */
        gpu_gemm_bias_case(be, st_unfused, BE_F32, 0, 0, 5, 3, 4, 0);
        unsetenv("DPSCALE_UNFUSED_BIAS");
        EXPECT(in_use_as(be, "cuBLAS workspace") == 2 * ws);
        gpu_gemm_bias(be, st, st_unfused);
        gpu_gemm_tf32(be, st);
    }
    if (st) be->ops->stream_destroy(be, st);
    if (st_unfused) be->ops->stream_destroy(be, st_unfused);
    EXPECT(in_use_as(be, "cuBLAS workspace") == 0 && be->mem[0].in_use == 0);
    be_close(host);
    be_close(be);
#else
    expect_skip("built without CUDA");
#endif
}

/* An allocation the host itself refuses (more than the address space):
 * both the harness's reason and the allocator's reach the message intact. */
static void test_accounting_refused(void)
{
#ifndef __SANITIZE_ADDRESS__ /* the sanitizer's allocator aborts on such a request */
    be_options o = {.kind = BE_HOST, .host_devices = 1, .quiet = 1};
    backend *be = NULL;
    dps_buf d;
    EXPECT(be_open(&o, &be) == DPS_OK);
    if (!be) return;
    EXPECT(be_buf_alloc(be, 0, (size_t)1 << 48, "pre-activations", &d) == DPS_ERR_OOM);
    EXPECT(strstr(dps_errmsg(), "device 0: out of memory allocating 256.00 TiB for "
                                "pre-activations") != NULL);
    EXPECT(strstr(dps_errmsg(), "host memory exhausted allocating 256.00 TiB of device 0") != NULL);
    be_close(be);
#endif
}

static void test_accounting(void)
{
    be_options o = {.kind = BE_HOST, .host_devices = 2, .device_mem = 1000};
    backend *be = NULL;
    EXPECT(be_open(&o, &be) == DPS_OK);
    dps_buf a, b, c;
    EXPECT(be_buf_alloc(be, 1, 600, "first", &a) == DPS_OK);
    EXPECT(be_buf_alloc(be, 1, 500, "second", &b) == DPS_ERR_OOM);
    EXPECT(strstr(dps_errmsg(), "device 1: out of memory allocating 500 B for second") != NULL);
    EXPECT(be_buf_alloc(be, 0, 500, "other device", &c) == DPS_OK);
    be_buf_free(be, &a);
    EXPECT(be_buf_alloc(be, 1, 900, "third", &b) == DPS_OK);
    EXPECT(be->mem[1].peak == 900 && be->mem[1].in_use == 900 && be->mem[0].peak == 500);
    be_buf_free(be, &b);
    be_buf_free(be, &c);
    EXPECT(be->mem[0].in_use == 0 && be->mem[1].in_use == 0);
    be_close(be);
    test_accounting_refused();
}

static void test_versions(void)
{
    be_options o = {.kind = BE_HOST, .host_devices = 1, .quiet = 1};
    backend *be = NULL;
    EXPECT(be_open(&o, &be) == DPS_OK);
    if (!be) return;
    be_version_info v;
    be_versions(be, &v);
    be_version_field f[BE_VERSION_NFIELDS];
    be_version_fields(&v, f);
    EXPECT(strcmp(f[0].key, "driver") == 0 && f[0].value == v.cuda.driver);
    EXPECT(strcmp(f[4].key, "nccl_build") == 0 && f[4].value == v.nccl_build);
    EXPECT(strcmp(f[5].key, "blas") == 0 && f[5].value == v.blas && v.blas[0]);
    EXPECT(strcmp(v.nccl_build, DPS_NCCL_BUILD_VERSION) == 0);
#ifdef DPS_HAVE_CUDA
    /* from the probe's child process: the runtime this test is linked with */
    char rt[32];
    snprintf(rt, sizeof rt, "%d.%d", CUDART_VERSION / 1000, (CUDART_VERSION % 1000) / 10);
    EXPECT(strcmp(v.cuda.runtime, rt) == 0);
    EXPECT(v.cuda.driver[0] && v.cuda.cublas[0] && v.cuda.nccl[0]);
#else
    EXPECT(!v.cuda.driver[0] && !v.cuda.runtime[0] && !v.cuda.cublas[0] && !v.cuda.nccl[0]);
#endif
    be_close(be);
}

/* Without libnvidia-ml.so.1 (as on machines without a driver) NVML is
 * reported absent and the sampler is simply not started. */
static void test_nvml(void)
{
    char why[256];
    if (nvml_available(why, sizeof why)) {
        fprintf(stderr, "NVML is present here; only the absent case is tested\n");
        return;
    }
    EXPECT(strstr(why, "libnvidia-ml.so.1") != NULL);
    be_options o = {.kind = BE_HOST, .host_devices = 2};
    backend *be = NULL;
    EXPECT(be_open(&o, &be) == DPS_OK);
    int devs[2] = {0, 1};
    nvml_sampler *s = nvml_start(be, devs, 2, 20);
    EXPECT(s == NULL);
    nvml_counters c[2];
    memset(c, 0, sizeof c);
    nvml_stop(s, c); /* a NULL sampler is a no-op */
    EXPECT(!c[0].have_pcie && !c[1].have_nvlink);
    be_close(be);
}

/* --backend auto's choice without a CUDA device: the host only where no
 * NVIDIA GPU shows; else a failure naming what was seen, CUDA's reason and
 * --backend host. */
static void test_backend_auto(void)
{
    be_auto_signs none = {.cuda_why = "no NVIDIA driver is installed", .nvml_gpus = -1,
                          .built_with_cuda = 1};
    EXPECT(be_auto_decide(&none) == DPS_OK);
    be_auto_signs nodes = none;
    nodes.dev_nodes = 8;
    EXPECT(be_auto_decide(&nodes) == DPS_ERR_RUNTIME);
    EXPECT(strstr(dps_errmsg(), "8 /dev/nvidiaN device nodes") && strstr(dps_errmsg(), "no NVIDIA "
           "driver is installed") && strstr(dps_errmsg(), "--backend host"));
    be_auto_signs nvml = none;
    nvml.nvml_gpus = 1;
    nvml.visible = "";
    nvml.cuda_why = "cudaGetDeviceCount: no CUDA-capable device is detected";
    EXPECT(be_auto_decide(&nvml) == DPS_ERR_RUNTIME);
    EXPECT(strstr(dps_errmsg(), "NVML sees 1 GPU)") && strstr(dps_errmsg(), "no CUDA-capable") &&
           strstr(dps_errmsg(), "CUDA_VISIBLE_DEVICES=\"\" may hide them"));
    nvml.built_with_cuda = 0;
    EXPECT(be_auto_decide(&nvml) == DPS_ERR_RUNTIME && strstr(dps_errmsg(), "built without CUDA"));
    char dir[] = "/tmp/dps-devXXXXXX";
    EXPECT(mkdtemp(dir) != NULL);
    static const char *const names[] = {"nvidia0", "nvidia12", "nvidiactl", "nvidia-uvm",
                                        "nvidia-caps", "nvidia", "nvme0", "nvidia3x"};
    char path[64];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        FILE *f = fopen(path, "w");
        EXPECT(f != NULL);
        if (f) fclose(f);
    }
    EXPECT(be_nvidia_dev_nodes(dir) == 2 && be_nvidia_dev_nodes("/nonexistent") == 0);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

/* The counters' arithmetic: a field's integer, a wrapped counter's
 * difference, per-link reads added up or, all alike, taken once. */
static void test_nvml_fields(void)
{
    nvml_field f;
    memset(&f, 0, sizeof f);
    unsigned long long v = 0;
    int bits = 0;
    f.value_type = NVML_VALUE_UINT;
    f.value.u = 4000000000u;
    EXPECT(nvml_field_u64(&f, &v, &bits) && v == 4000000000ull && bits == 32);
    f.value_type = NVML_VALUE_ULONGLONG;
    f.value.ull = 1ull << 40;
    EXPECT(nvml_field_u64(&f, &v, &bits) && v == 1ull << 40 && bits == 64);
    f.ret = 3; /* NVML_ERROR_NOT_SUPPORTED */
    EXPECT(!nvml_field_u64(&f, &v, &bits));
    f.ret = 0;
    f.value_type = 0; /* a double */
    EXPECT(!nvml_field_u64(&f, &v, &bits));
    EXPECT(nvml_counter_delta(0xffffff00u, 0x100u, 32) == 0x200);
    EXPECT(nvml_counter_delta(10, 25, 32) == 15 && nvml_counter_delta(10, 25, 64) == 15);
    EXPECT(nvml_counter_delta(~0ull - 4, 5, 64) == 10);
    const unsigned long long alike[3] = {7, 7, 7}, apart[3] = {1, 2, 3}, one[1] = {9};
    EXPECT(nvml_links_total(alike, 3) == 7 && nvml_links_total(apart, 3) == 6);
    EXPECT(nvml_links_total(one, 1) == 9 && nvml_links_total(one, 0) == 0);
}

typedef struct nvml_stub {
    int (*inits)(void), (*init_pid)(void);
    void (*set_pcie)(unsigned, unsigned long long, unsigned long long);
    void (*set_nvlink)(int, int, int, unsigned long long);
} nvml_stub;

/* One sampling of two GPUs through the stub: PCIe counters from `tx0`/`rx0`
 * to `tx1`/`rx1` (of `type`), NVLink from 1000 to 1500 KiB a link. */
static void nvml_stub_sample(const nvml_stub *st, unsigned type, const unsigned long long pcie[4],
                             int links, int agg, int ignores, nvml_counters c[2])
{
    static backend fake; /* a cuda backend in all but name: NVML reads bus ids only */
    memset(&fake, 0, sizeof fake);
    fake.kind = BE_CUDA;
    fake.ndev = 2;
    snprintf(fake.info[0].bus_id, sizeof fake.info[0].bus_id, "0000:01:00.0");
    snprintf(fake.info[1].bus_id, sizeof fake.info[1].bus_id, "0000:02:00.0");
    st->set_pcie(type, pcie[0], pcie[1]);
    st->set_nvlink(links, agg, ignores, 1000);
    const int devs[2] = {0, 1};
    nvml_sampler *s = nvml_start(&fake, devs, 2, 5);
    EXPECT(s != NULL);
    usleep(30 * 1000);
    st->set_pcie(type, pcie[2], pcie[3]);
    st->set_nvlink(links, agg, ignores, 1500);
    memset(c, 0, 2 * sizeof *c);
    nvml_stop(s, c);
}

/* NVML through tests/nvml_stub.c (DPSCALE_NVML_STUB names it): initialised
 * again in a forked child; PCIe bytes from the cumulative counters, 32-bit
 * ones across a wrap; NVLink from the aggregate, or the links added, or
 * taken once where the driver answers each link with the total. */
static void test_nvml_stub(void)
{
    const char *path = getenv("DPSCALE_NVML_STUB");
    EXPECT(path != NULL);
    if (!path) return;
    nvml_use_library(path);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    EXPECT(h != NULL);
    if (!h) return;
    nvml_stub st;
    *(void **)&st.inits = dlsym(h, "nvml_stub_inits");
    *(void **)&st.init_pid = dlsym(h, "nvml_stub_init_pid");
    *(void **)&st.set_pcie = dlsym(h, "nvml_stub_set_pcie");
    *(void **)&st.set_nvlink = dlsym(h, "nvml_stub_set_nvlink");
    char why[256];
    EXPECT(nvml_available(why, sizeof why) && st.inits() == 1 && st.init_pid() == (int)getpid());
    pid_t pid = fork();
    if (pid == 0) _exit(nvml_available(NULL, 0) && st.init_pid() == (int)getpid() ? 0 : 1);
    int ws = 0;
    EXPECT(pid > 0 && waitpid(pid, &ws, 0) == pid && WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    EXPECT(nvml_available(NULL, 0) && st.inits() == 1); /* the parent's is kept */
    nvml_counters c[2];
    const unsigned long long wrap[4] = {0xffffff00u, 100, 0x100, 3000000100u};
    nvml_stub_sample(&st, NVML_VALUE_UINT, wrap, 4, 0, 1, c);
    for (int i = 0; i < 2; i++) {
        EXPECT(c[i].have_pcie && c[i].pcie_tx_bytes == 512.0 && c[i].pcie_rx_bytes == 3e9);
        EXPECT(c[i].have_nvlink && c[i].nvlink_tx_bytes == 500.0 * 1024 &&
               c[i].nvlink_rx_bytes == 1000.0 * 1024);
    }
    const unsigned long long wide[4] = {1ull << 40, 7, (1ull << 40) + 5000000000ull, 7};
    nvml_stub_sample(&st, NVML_VALUE_ULONGLONG, wide, 3, 0, 0, c);
    EXPECT(c[0].pcie_tx_bytes == 5e9 && c[0].pcie_rx_bytes == 0.0);
    EXPECT(c[0].nvlink_tx_bytes == 6 * 500.0 * 1024); /* links 1 + 2 + 3 times 500 KiB */
    nvml_stub_sample(&st, NVML_VALUE_ULONGLONG, wide, 18, 1, 0, c);
    EXPECT(c[1].nvlink_tx_bytes == 171 * 500.0 * 1024 && c[1].nvlink_rx_bytes == 342 * 500.0 * 1024);
    dlclose(h);
}

static int child_uses_device(void *ctx, int rank, rank_beat *beat)
{
    (void)rank, (void)beat;
    backend *be = ctx;
    be_stream *st = NULL;
    dps_status rc = be->ops->stream_create(be, 0, &st);
    if (st) be->ops->stream_destroy(be, st);
    return rc == DPS_OK ? 0 : 3;
}

/* The host backend keeps CUDA's rule: devices used by a parent cannot be
 * used by a child it forks afterwards; a child of a parent that never used
 * them can. */
static void test_context(void)
{
    backend *be = NULL;
    be_options bo = {.kind = BE_HOST, .host_devices = 2, .quiet = 1};
    EXPECT(be_open(&bo, &be) == DPS_OK);
    if (!be) return;
    ranks_spec spec = {.nranks = 1, .rank_main = child_uses_device, .ctx = be, .timeout_s = 30};
    EXPECT(ranks_run(&spec) == DPS_OK);
    be_stream *st = NULL;
    EXPECT(be->ops->stream_create(be, 0, &st) == DPS_OK);
    EXPECT(ranks_run(&spec) != DPS_OK && strstr(dps_errmsg(), "exited with status 3"));
    be->ops->stream_destroy(be, st);
    be_close(be);
}

/* C = alpha op(A) op(B) + beta C in double, row-major (the GEMM's definition). */
static void gemm_reference(int ta, int tb, int m, int n, int k, double alpha, const float *a,
                           int lda, const float *b, int ldb, double beta, const float *c0,
                           int ldc, double *out)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double acc = 0;
            for (int p = 0; p < k; p++)
                acc += (double)(ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p]) *
                       (tb ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j]);
            out[(size_t)i * n + j] = alpha * acc + (beta == 0 ? 0 : beta * c0[(size_t)i * ldc + j]);
        }
}

static int thread_count(void)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

typedef struct gemm_thread_args {
    backend *be;
    be_stream *st; /* the thread's device's */
    int n;         /* square GEMM size */
    int threads;   /* /proc/self/task after the GEMMs, from inside the thread */
    dps_status rc;
} gemm_thread_args;

static void *gemm_thread(void *arg)
{
    gemm_thread_args *g = arg;
    size_t nn = (size_t)g->n * g->n;
    float *a = calloc(nn, 4), *b = calloc(nn, 4), *c = calloc(nn, 4);
    g->rc = DPS_ERR_RUNTIME;
    if (a && b && c) {
        for (size_t i = 0; i < nn; i++) a[i] = b[i] = (float)(i % 7) - 3.0f;
        g->rc = DPS_OK;
        for (int t = 0; t < 4 && !g->rc; t++)
            g->rc = g->be->ops->gemm(g->be, g->st, t & 1, t >> 1, g->n, g->n, g->n, 1.0f, a, g->n,
                                     b, g->n, 0.0f, c, g->n);
    }
    g->threads = thread_count();
    free(a); free(b); free(c);
    return NULL;
}

/* The host GEMM, whichever library the build uses: row-major with leading
 * dimensions wider than the matrices, every transpose, alpha and beta, C
 * unread when beta is 0 (NaN there stays out), k = 0, m = 0; and it runs on
 * the calling thread alone (an emulated device is one thread: a library
 * that starts its own threads for a GEMM shows in /proc/self/task). */
/* One GEMM with padded leading dimensions against a double-precision
 * reference; the padding past each row of C must stay untouched. */
static void gemm_case(backend *be, int ta, int tb, int m, int n, int k, int with_beta)
{
    be_stream *st = expect_stream(be);
    int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 5, ldc = n + 2;
    size_t na = (size_t)(ta ? k : m) * lda, nb = (size_t)(tb ? n : k) * ldb;
    size_t nc = (size_t)m * ldc;
    float *a = malloc(na * 4), *b = malloc(nb * 4), *c = malloc(nc * 4);
    double *want = malloc((size_t)m * n * sizeof *want);
    for (size_t i = 0; i < na; i++) a[i] = dps_uniform(5, 1, i);
    for (size_t i = 0; i < nb; i++) b[i] = dps_uniform(5, 2, i);
    for (size_t i = 0; i < nc; i++) c[i] = with_beta ? dps_uniform(5, 3, i) : NAN;
    float beta = with_beta ? 0.5f : 0.0f;
    gemm_reference(ta, tb, m, n, k, 0.75, a, lda, b, ldb, beta, c, ldc, want);
    EXPECT(be->ops->gemm(be, st, ta, tb, m, n, k, 0.75f, a, lda, b, ldb, beta, c, ldc) == DPS_OK);
    double worst = 0;
    int pad_kept = 1;
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < n; j++) {
            double err = fabs(c[(size_t)i * ldc + j] - want[(size_t)i * n + j]);
            if (!(err <= worst)) worst = isnan(err) ? INFINITY : err;
        }
        for (int j = n; j < ldc; j++) /* past the row: not C's */
            pad_kept &= with_beta ? c[(size_t)i * ldc + j] == dps_uniform(5, 3, (uint64_t)i * ldc + j)
                                  : isnan(c[(size_t)i * ldc + j]);
    }
    if (worst > 1e-5 * k)
        fprintf(stderr, "gemm %c%c m=%d n=%d k=%d beta=%g: max error %g\n", ta ? 'T' : 'N',
                tb ? 'T' : 'N', m, n, k, beta, worst);
    EXPECT(worst <= 1e-5 * k);
    EXPECT(pad_kept);
    free(a); free(b); free(c); free(want);
    expect_stream_free(be, st);
}

/* k = 0: C = beta C (zeros from NaN when beta is 0); m = 0 or n = 0: nothing */
static void gemm_edges(backend *be)
{
    be_stream *st = expect_stream(be);
    float a1 = 1.0f, b1 = 1.0f, c2[2] = {NAN, NAN}, c3[2] = {4.0f, -2.0f};
    EXPECT(be->ops->gemm(be, st, 0, 0, 1, 2, 0, 1.0f, &a1, 1, &b1, 2, 0.0f, c2, 2) == DPS_OK);
    EXPECT(c2[0] == 0.0f && c2[1] == 0.0f);
    EXPECT(be->ops->gemm(be, st, 1, 0, 1, 2, 0, 1.0f, &a1, 1, &b1, 2, 0.5f, c3, 2) == DPS_OK);
    EXPECT(c3[0] == 2.0f && c3[1] == -1.0f);
    c2[0] = NAN;
    EXPECT(be->ops->gemm(be, st, 0, 0, 0, 2, 1, 1.0f, &a1, 1, &b1, 2, 0.0f, c2, 2) == DPS_OK);
    EXPECT(be->ops->gemm(be, st, 0, 0, 1, 0, 1, 1.0f, &a1, 1, &b1, 1, 0.0f, c2, 1) == DPS_OK);
    EXPECT(isnan(c2[0]));
    expect_stream_free(be, st);
}

/* dps_round_tf32: the 13 low mantissa bits rounded to nearest even. */
static void tf32_rounding(void)
{
    const float ulp = 0x1p-10f; /* TF32's at 1 */
    EXPECT(dps_round_tf32(1.0f + 0x1p-11f) == 1.0f);             /* a tie: to even, down */
    EXPECT(dps_round_tf32(1.0f + 3 * 0x1p-11f) == 1.0f + 2 * ulp); /* a tie: to even, up */
    EXPECT(dps_round_tf32(1.0f + 0x1p-11f + 0x1p-20f) == 1.0f + ulp);
    EXPECT(dps_round_tf32(-1.0f - 0x1p-11f - 0x1p-20f) == -1.0f - ulp);
    EXPECT(dps_round_tf32(1.0f + ulp) == 1.0f + ulp);               /* a TF32 value kept */
    /* subnormals: TF32's step there is 2^-136 */
    EXPECT(dps_round_tf32(0x1p-140f * 3.0f) == 0.0f);
    EXPECT(dps_round_tf32(0x1p-137f * 3.0f) == 0x1p-135f);          /* a tie: to even, up */
    EXPECT(isinf(dps_round_tf32(FLT_MAX)));                        /* rounds past the largest */
    EXPECT(isinf(dps_round_tf32(-INFINITY)) && dps_round_tf32(-INFINITY) < 0);
    EXPECT(isnan(dps_round_tf32(NAN)));
}

/* gemm_tf32 on the host: a stream's fp32 GEMMs (gemm, gemm_ex, gemm_bias)
 * take their operands rounded to TF32 while it is on, exact fp32 when off. */
static void gemm_tf32_case(backend *be)
{
    be_stream *st = expect_stream(be);
    /* x rounds up to 1 + 2^-10 (exact products and sums: a tie of no order) */
    const float x = 1.0f + 0x1p-11f + 0x1p-20f, bias[1] = {0.5f};
    float a[2] = {x, 3.0f}, b[2] = {3.0f, x}, c = 0, want_off = 6 * x;
    float want_on = 6 * dps_round_tf32(x);
    EXPECT(be->ops->gemm(be, st, 0, 0, 1, 1, 2, 1.0f, a, 2, b, 1, 0.0f, &c, 1) == DPS_OK);
    EXPECT(c == want_off); /* a stream starts with TF32 off */
    EXPECT(be->ops->gemm_tf32(be, st, 1) == DPS_OK);
    EXPECT(be->ops->gemm(be, st, 0, 0, 1, 1, 2, 1.0f, a, 2, b, 1, 0.0f, &c, 1) == DPS_OK);
    EXPECT(c == want_on && want_on != want_off);
    EXPECT(be->ops->gemm(be, st, 1, 1, 1, 1, 2, 1.0f, a, 1, b, 2, 0.0f, &c, 1) == DPS_OK);
    EXPECT(c == want_on);
    EXPECT(be->ops->gemm_ex(be, st, 0, 0, 1, 1, 2, 1.0f, a, BE_F32, 2, b, BE_F32, 1, 0.0f, &c,
                            BE_F32, 1) == DPS_OK);
    EXPECT(c == want_on);
    EXPECT(be->ops->gemm_bias(be, st, 0, 0, 1, 1, 2, a, BE_F32, 2, b, BE_F32, 1, bias, &c, BE_F32,
                              1) == DPS_OK);
    EXPECT(c == want_on + 0.5f);
    EXPECT(a[0] == x && b[1] == x); /* the operands themselves untouched */
    EXPECT(be->ops->gemm_tf32(be, st, 0) == DPS_OK);
    EXPECT(be->ops->gemm(be, st, 0, 0, 1, 1, 2, 1.0f, a, 2, b, 1, 0.0f, &c, 1) == DPS_OK);
    EXPECT(c == want_off);
    EXPECT(be->ops->gemm_tf32(be, NULL, 1) == DPS_ERR_RUNTIME);
    expect_stream_free(be, st);
}

static void test_gemm(void)
{
    be_options o = {.kind = BE_HOST, .host_devices = 1, .quiet = 1};
    backend *be = NULL;
    EXPECT(be_open(&o, &be) == DPS_OK);
    if (!be) return;
    const int dims[][3] = {{1, 1, 1}, {5, 7, 3}, {33, 17, 65}, {64, 48, 130}, {7, 129, 40}};
    for (size_t s = 0; s < sizeof dims / sizeof dims[0]; s++)
        for (int t = 0; t < 8; t++)
            gemm_case(be, t & 1, (t >> 1) & 1, dims[s][0], dims[s][1], dims[s][2], t >> 2);
    gemm_edges(be);
    tf32_rounding();
    gemm_tf32_case(be);
    /* two device threads one after the other, GEMMs big enough to be split */
    be_stream *st = expect_stream(be);
    for (int i = 0; i < 2; i++) {
        int before = thread_count();
        gemm_thread_args g = {.be = be, .st = st, .n = 384};
        pthread_t th;
        EXPECT(pthread_create(&th, NULL, gemm_thread, &g) == 0);
        pthread_join(th, NULL);
        EXPECT(g.rc == DPS_OK);
        if (g.threads != before + 1)
            fprintf(stderr, "a GEMM thread saw %d threads, %d before it started\n", g.threads,
                    before);
        EXPECT(g.threads == before + 1);
    }
    expect_stream_free(be, st);
    be_close(be);
}

/* A signal that reaches a thread inside a host GEMM runs its handler on the
 * thread's own stack. oneDNN's generated AVX-512 and AVX2 sgemm kernels
 * (before oneDNN 3.11.2) point rsp into their heap workspace, so a handler
 * run there writes its signal frame over the heap (a launcher's SIGINT to a
 * rank in a step, then "corrupted size vs. prev_size" or "munmap_chunk():
 * invalid pointer"). The handler compares its frame with the caller's;
 * signals arrive from another thread every 50 us during the GEMMs. On a
 * library or CPU without such kernels this passes either way. */
static _Atomic uintptr_t gemm_caller_sp;
static _Atomic int gemm_signals_seen, gemm_signals_off_stack, gemm_signals_stop;

static void gemm_signal_handler(int sig)
{
    (void)sig;
    char here;
    uintptr_t sp = (uintptr_t)&here, caller = atomic_load(&gemm_caller_sp);
    uintptr_t apart = sp > caller ? sp - caller : caller - sp;
    atomic_fetch_add(&gemm_signals_seen, 1);
    if (apart > ((uintptr_t)8 << 20)) atomic_fetch_add(&gemm_signals_off_stack, 1);
}

static void *gemm_signal_sender(void *arg)
{
    pthread_t target = *(pthread_t *)arg;
    while (!atomic_load(&gemm_signals_stop)) {
        pthread_kill(target, SIGUSR1);
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static void test_gemm_signals(void)
{
    be_options o = {.kind = BE_HOST, .host_devices = 1, .quiet = 1};
    backend *be = NULL;
    EXPECT(be_open(&o, &be) == DPS_OK);
    if (!be) return;
    be_stream *st = expect_stream(be);
    enum { N = 512 };
    float *a = calloc((size_t)N * N, 4), *b = calloc((size_t)N * N, 4), *c = calloc((size_t)N * N, 4);
    for (size_t i = 0; a && b && i < (size_t)N * N; i++) a[i] = b[i] = (float)(i % 7) - 3.0f;
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = gemm_signal_handler;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, &old);
    char caller;
    atomic_store(&gemm_caller_sp, (uintptr_t)&caller);
    pthread_t self = pthread_self(), sender;
    EXPECT(pthread_create(&sender, NULL, gemm_signal_sender, &self) == 0);
    for (int r = 0; a && b && c && r < 8; r++)
        EXPECT(be->ops->gemm(be, st, r & 1, (r >> 1) & 1, N, N, N, 1.0f, a, N, b, N, 0.0f, c,
                             N) == DPS_OK);
    atomic_store(&gemm_signals_stop, 1);
    pthread_join(sender, NULL);
    sigaction(SIGUSR1, &old, NULL);
    if (atomic_load(&gemm_signals_off_stack))
        fprintf(stderr, "%d of %d signals ran their handler off the GEMM thread's stack\n",
                atomic_load(&gemm_signals_off_stack), atomic_load(&gemm_signals_seen));
    EXPECT(atomic_load(&gemm_signals_seen) > 0);
    EXPECT(atomic_load(&gemm_signals_off_stack) == 0);
    free(a); free(b); free(c);
    expect_stream_free(be, st);
    be_close(be);
}

EXPECT_GROUPS(GROUP(elementwise), GROUP(activations), GROUP(host_math), GROUP(col_sum), GROUP(autocast_ops),
              GROUP(f16), GROUP(unscale),
              GROUP(scale_copy), GROUP(accounting), GROUP(cublas_workspace), GROUP(versions),
              GROUP(nvml),
              GROUP(backend_auto), GROUP(nvml_fields), GROUP(nvml_stub), GROUP(context),
              GROUP(gemm), GROUP(gemm_signals), GROUP(null_stream), GROUP(cuda_ops));
