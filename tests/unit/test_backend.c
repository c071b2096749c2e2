/* Unit tests of backend/ and kernels/elementwise.h: the shared element-wise
 * math; the host backend's GELU, softmax, bias sums, autocast ops and bucket
 * copy; memory accounting, cuBLAS's workspace size, versions, NVML (absent,
 * its fields, through a stub), --backend auto's choice, the fork rule of
 * devices, the host GEMM and signals during it, strict mode's device memory
 * the host cannot touch and its asynchronous streams (waits, event_ms not
 * ready, a race, an error reported at the synchronisation); on a GPU the
 * CUDA backend's GEMM with a bias, GELU and GELU's backward with the bias
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

#include <sys/mman.h>
#include <sys/wait.h>

#include "build_config.h"
#include "backend/backend.h"
#include "backend/conv_algo.h"
#include "backend/strict.h"
#include "backend/host_devmem.h"
#include "elementwise.h"
#include "backend/nvml.h"
#include "core/util.h"
#include "launch/ranks.h"

#include "dev_buf.h"
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

/* Windowed resamples (backend.h's window) on the host against PyTorch 1.13
 * (F.unfold, F.max_pool2d with return_indices, F.avg_pool2d, their input
 * gradients of sum(y * dy)), one 4 x 4 sample of 2 channels held pixel by
 * pixel, x[j] = ((7 j) mod 13 - 6) / 4 (ties among the maxima: the first
 * kept), dy[i] = ((5 i) mod 9 - 4) / 8: im2col with padding and stride 2,
 * dilated; max pool with padding and stride 2, dilated; avg pool with
 * padding (count_include_pad) and a whole-input window; ceil_mode off.
 * The bf16 forward against PyTorch's fp32 output rounded to bf16. */
typedef struct window_case {
    dps_window w;
    int n;
    float y[128], y16[128];
    int64_t idx[8];
    float dx[32];
} window_case;

static const window_case window_cases[] = {
    {{.c = 2, .h = 4, .w = 4, .kh = 3, .kw = 3, .sh = 2, .sw = 2,
      .ph = 1, .pw = 1, .dh = 1, .dw = 1, .pool = DPS_POOL_NONE}, 72,
     {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f,
      -1.5f, 0.25f, -1.25f, 0.5f, 0.0f, 0.0f, -0.5f, 1.25f,
      -0.25f, 1.5f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f,
      -1.25f, 0.5f, -1.0f, 0.75f, -0.75f, 1.0f, -0.25f, 1.5f,
      0.0f, -1.5f, 0.25f, -1.25f, 0.0f, 0.0f, -0.5f, 1.25f,
      -0.25f, 1.5f, 0.0f, 0.0f, 0.5f, -1.0f, 0.75f, -0.75f,
      0.0f, 0.0f, 1.5f, 0.0f, -1.5f, 0.25f, -0.25f, 1.5f,
      0.0f, -1.5f, 0.25f, -1.25f, 0.75f, -0.75f, 1.0f, -0.5f,
      1.25f, -0.25f, -1.5f, 0.25f, -1.25f, 0.5f, -1.0f, 0.75f},
     {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f,
      -1.5f, 0.25f, -1.25f, 0.5f, 0.0f, 0.0f, -0.5f, 1.25f,
      -0.25f, 1.5f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f,
      -1.25f, 0.5f, -1.0f, 0.75f, -0.75f, 1.0f, -0.25f, 1.5f,
      0.0f, -1.5f, 0.25f, -1.25f, 0.0f, 0.0f, -0.5f, 1.25f,
      -0.25f, 1.5f, 0.0f, 0.0f, 0.5f, -1.0f, 0.75f, -0.75f,
      0.0f, 0.0f, 1.5f, 0.0f, -1.5f, 0.25f, -0.25f, 1.5f,
      0.0f, -1.5f, 0.25f, -1.25f, 0.75f, -0.75f, 1.0f, -0.5f,
      1.25f, -0.25f, -1.5f, 0.25f, -1.25f, 0.5f, -1.0f, 0.75f},
     {0},
     {0.0f, -0.5f, 0.0f, 0.125f, 0.0f, -0.5f, 0.125f, -0.375f,
      0.0f, 0.125f, 0.0f, 0.25f, 0.0f, 0.125f, 0.25f, 0.375f,
      0.0f, -0.5f, 0.0f, 0.125f, 0.0f, -0.5f, 0.125f, -0.375f,
      0.375f, -0.125f, 0.75f, -0.25f, 0.375f, -0.125f, 0.5f, 0.0f}},
    {{.c = 2, .h = 4, .w = 4, .kh = 2, .kw = 2, .sh = 1, .sw = 1,
      .ph = 1, .pw = 1, .dh = 2, .dw = 2, .pool = DPS_POOL_NONE}, 128,
     {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, -0.25f, 1.5f,
      0.0f, 0.0f, 0.0f, 0.0f, -0.5f, 1.25f, 0.0f, -1.5f,
      0.0f, 0.0f, 0.0f, 0.0f, -0.25f, 1.5f, 0.25f, -1.25f,
      0.0f, 0.0f, 0.0f, 0.0f, 0.0f, -1.5f, 0.0f, 0.0f,
      0.0f, 0.0f, -1.25f, 0.5f, 0.0f, 0.0f, 0.75f, -0.75f,
      -1.5f, 0.25f, -1.0f, 0.75f, 0.5f, -1.0f, 1.0f, -0.5f,
      -1.25f, 0.5f, -0.75f, 1.0f, 0.75f, -0.75f, 1.25f, -0.25f,
      -1.0f, 0.75f, 0.0f, 0.0f, 1.0f, -0.5f, 0.0f, 0.0f,
      0.0f, 0.0f, -0.25f, 1.5f, 0.0f, 0.0f, -1.5f, 0.25f,
      -0.5f, 1.25f, 0.0f, -1.5f, 1.5f, 0.0f, -1.25f, 0.5f,
      -0.25f, 1.5f, 0.25f, -1.25f, -1.5f, 0.25f, -1.0f, 0.75f,
      0.0f, -1.5f, 0.0f, 0.0f, -1.25f, 0.5f, 0.0f, 0.0f,
      0.0f, 0.0f, 0.75f, -0.75f, 0.0f, 0.0f, 0.0f, 0.0f,
      0.5f, -1.0f, 1.0f, -0.5f, 0.0f, 0.0f, 0.0f, 0.0f,
      0.75f, -0.75f, 1.25f, -0.25f, 0.0f, 0.0f, 0.0f, 0.0f,
      1.0f, -0.5f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f},
     {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, -0.25f, 1.5f,
      0.0f, 0.0f, 0.0f, 0.0f, -0.5f, 1.25f, 0.0f, -1.5f,
      0.0f, 0.0f, 0.0f, 0.0f, -0.25f, 1.5f, 0.25f, -1.25f,
      0.0f, 0.0f, 0.0f, 0.0f, 0.0f, -1.5f, 0.0f, 0.0f,
      0.0f, 0.0f, -1.25f, 0.5f, 0.0f, 0.0f, 0.75f, -0.75f,
      -1.5f, 0.25f, -1.0f, 0.75f, 0.5f, -1.0f, 1.0f, -0.5f,
      -1.25f, 0.5f, -0.75f, 1.0f, 0.75f, -0.75f, 1.25f, -0.25f,
      -1.0f, 0.75f, 0.0f, 0.0f, 1.0f, -0.5f, 0.0f, 0.0f,
      0.0f, 0.0f, -0.25f, 1.5f, 0.0f, 0.0f, -1.5f, 0.25f,
      -0.5f, 1.25f, 0.0f, -1.5f, 1.5f, 0.0f, -1.25f, 0.5f,
      -0.25f, 1.5f, 0.25f, -1.25f, -1.5f, 0.25f, -1.0f, 0.75f,
      0.0f, -1.5f, 0.0f, 0.0f, -1.25f, 0.5f, 0.0f, 0.0f,
      0.0f, 0.0f, 0.75f, -0.75f, 0.0f, 0.0f, 0.0f, 0.0f,
      0.5f, -1.0f, 1.0f, -0.5f, 0.0f, 0.0f, 0.0f, 0.0f,
      0.75f, -0.75f, 1.25f, -0.25f, 0.0f, 0.0f, 0.0f, 0.0f,
      1.0f, -0.5f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f},
     {0},
     {-0.25f, 0.375f, 0.75f, -0.25f, -0.5f, 0.75f, 0.375f, -0.125f,
      -0.25f, -0.125f, -0.25f, 0.0f, 0.625f, -0.25f, -0.125f, 0.0f,
      0.375f, -0.625f, -0.125f, 0.125f, 0.75f, -0.125f, -0.625f, 0.625f,
      -0.25f, 0.375f, 0.75f, -0.25f, -0.5f, 0.75f, 0.375f, -0.125f}},
    {{.c = 2, .h = 4, .w = 4, .kh = 3, .kw = 3, .sh = 2, .sw = 2,
      .ph = 1, .pw = 1, .dh = 1, .dw = 1, .pool = DPS_POOL_MAX}, 8,
     {-0.25f, 1.5f, 0.25f, 1.5f, 1.5f, 1.5f, 1.25f, 1.5f},
     {-0.25f, 1.5f, 0.25f, 1.5f, 1.5f, 1.5f, 1.25f, 1.5f},
     {5, 5, 7, 5, 12, 5, 11, 5},
     {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f,
      0.0f, 0.0f, -0.5f, 1.25f, 0.0f, 0.0f, -0.375f, 0.0f,
      0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, -0.125f, 0.0f,
      -0.25f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f}},
    {{.c = 2, .h = 4, .w = 4, .kh = 2, .kw = 2, .sh = 1, .sw = 1,
      .ph = 0, .pw = 0, .dh = 2, .dw = 2, .pool = DPS_POOL_MAX}, 8,
     {1.0f, 0.75f, 1.25f, 1.0f, 1.5f, 1.25f, 0.25f, 1.5f},
     {1.0f, 0.75f, 1.25f, 1.0f, 1.5f, 1.25f, 0.25f, 1.5f},
     {10, 2, 11, 3, 12, 4, 7, 5},
     {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.125f, 0.0f, 0.25f,
      0.0f, 0.375f, 0.0f, 0.5f, 0.0f, 0.0f, -0.125f, 0.0f,
      0.0f, 0.0f, 0.0f, 0.0f, -0.5f, 0.0f, -0.375f, 0.0f,
      -0.25f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f}},
    {{.c = 2, .h = 4, .w = 4, .kh = 3, .kw = 3, .sh = 2, .sw = 2,
      .ph = 1, .pw = 1, .dh = 1, .dw = 1, .pool = DPS_POOL_AVG}, 8,
     {-0.3888888888888889f, 0.3888888888888889f, -0.3333333333333333f, 0.1111111111111111f, 0.05555555555555555f, 0.1388888888888889f, -0.08333333333333333f, -0.1388888888888889f},
     {-0.388671875f, 0.388671875f, -0.333984375f, 0.111328125f, 0.0556640625f, 0.138671875f, -0.08349609375f, -0.138671875f},
     {10, 2, 11, 3, 12, 4, 7, 5},
     {-0.05555555555555555f, 0.013888888888888888f, -0.09722222222222221f, 0.041666666666666664f, -0.041666666666666664f, 0.027777777777777776f, -0.041666666666666664f, 0.027777777777777776f,
      -0.08333333333333333f, 0.05555555555555555f, -0.13888888888888887f, 0.1388888888888889f, -0.05555555555555555f, 0.08333333333333333f, -0.05555555555555555f, 0.08333333333333333f,
      -0.027777777777777776f, 0.041666666666666664f, -0.041666666666666664f, 0.09722222222222221f, -0.013888888888888888f, 0.05555555555555555f, -0.013888888888888888f, 0.05555555555555555f,
      -0.027777777777777776f, 0.041666666666666664f, -0.041666666666666664f, 0.09722222222222221f, -0.013888888888888888f, 0.05555555555555555f, -0.013888888888888888f, 0.05555555555555555f}},
    {{.c = 2, .h = 4, .w = 4, .kh = 4, .kw = 4, .sh = 4, .sw = 4,
      .ph = 0, .pw = 0, .dh = 1, .dw = 1, .pool = DPS_POOL_AVG}, 2,
     {-0.234375f, 0.09375f},
     {-0.234375f, 0.09375f},
     {10, 2, 11, 3, 12, 4, 7, 5},
     {-0.03125f, 0.0078125f, -0.03125f, 0.0078125f, -0.03125f, 0.0078125f, -0.03125f, 0.0078125f,
      -0.03125f, 0.0078125f, -0.03125f, 0.0078125f, -0.03125f, 0.0078125f, -0.03125f, 0.0078125f,
      -0.03125f, 0.0078125f, -0.03125f, 0.0078125f, -0.03125f, 0.0078125f, -0.03125f, 0.0078125f,
      -0.03125f, 0.0078125f, -0.03125f, 0.0078125f, -0.03125f, 0.0078125f, -0.03125f, 0.0078125f}},
};

static void window_case_check(backend *be, be_stream *st, const window_case *k)
{
    float x[32], y[128], dy[128], dx[32], w16[128];
    uint16_t x16[32], y16[128];
    int64_t idx[16];
    for (int j = 0; j < 32; j++) {
        x[j] = (float)((7 * j) % 13 - 6) / 4.0f;
        x16[j] = dps_f32_to_bf16(x[j]);
    }
    for (int i = 0; i < k->n; i++) dy[i] = (float)((5 * i) % 9 - 4) / 8.0f;
    EXPECT(dps_window_in_elems(&k->w) == 32 && dps_window_out_elems(&k->w) == k->n);
    int max = k->w.pool == DPS_POOL_MAX;
    dev_bufs d = dev_bufs_on(be, st, 0);
    float *dx_ = dev_put(&d, x, sizeof x), *dy_ = dev_put(&d, dy, sizeof dy);
    float *y_ = dev_zeros(&d, sizeof y), *dxo = dev_zeros(&d, sizeof dx);
    uint16_t *x16_ = dev_put(&d, x16, sizeof x16), *y16_ = dev_zeros(&d, sizeof y16);
    int64_t *idx_ = dev_zeros(&d, sizeof idx);
    EXPECT(be->ops->window(be, st, &k->w, 1, BE_F32, dx_, y_, max ? idx_ : NULL) == DPS_OK);
    EXPECT(be->ops->window(be, st, &k->w, 1, BE_BF16, x16_, y16_, max ? idx_ + 8 : NULL) == DPS_OK);
    dev_get(&d, y, y_, sizeof y);
    dev_get(&d, y16, y16_, sizeof y16);
    dev_get(&d, idx, idx_, sizeof idx);
    for (int i = 0; i < k->n; i++) {
        EXPECT_NEAR(y[i], k->y[i], 1e-6);
        w16[i] = dps_bf16_to_f32(y16[i]);
        EXPECT_NEAR(w16[i], k->y16[i], 4e-3 * fabsf(k->y16[i]));
        if (max) EXPECT(idx[i] == k->idx[i] && idx[8 + i] == k->idx[i]);
    }
    EXPECT(be->ops->window_bwd(be, st, &k->w, 1, dy_, max ? idx_ : NULL, dxo) == DPS_OK);
    dev_get(&d, dx, dxo, sizeof dx);
    dev_bufs_free(&d);
    for (int j = 0; j < 32; j++) EXPECT_NEAR(dx[j], k->dx[j], 1e-6);
}

static void test_windows(void)
{
    be_options o = {.kind = BE_HOST, .host_devices = 1, .quiet = 1};
    backend *be = NULL;
    EXPECT(be_open(&o, &be) == DPS_OK);
    if (!be) return;
    be_stream *st = expect_stream(be);
    for (size_t c = 0; c < sizeof window_cases / sizeof window_cases[0]; c++)
        window_case_check(be, st, &window_cases[c]);
    expect_stream_free(be, st);
    be_close(be);
}

/* A convolution of g groups as a model file runs it (im2col's columns in
 * (g, kh, kw, c/g) order, then g GEMMs of each k/g columns by its n/g
 * filters, KRSC) against PyTorch 1.13's F.conv2d(x, W, stride=2,
 * padding=1, groups=g), W the filters permuted to OIHW: one 3 x 3 sample of
 * 12 channels held pixel by pixel, x[j] = ((7 j) mod 13 - 6) / 4, 12
 * filters of 2 x 2, w[i] = ((5 i) mod 11 - 5) / 8 in KRSC order; g = 2, 3,
 * 4 and 12 (depthwise). bf16 (im2col and the GEMMs of bf16 operands, fp32
 * accumulation, the output rounded once) against the same values rounded
 * to bf16 (every product and sum is exact in fp32). The im2col's gradient
 * (col2im) is its adjoint: sum(im2col(x) dy) = sum(x col2im(dy)). */
static const struct { int g; float y[48]; } grouped_cases[] = {
    {2, {
      1.9375f, 0.84375f, -0.59375f, -2.375f, -2.09375f, -1.8125f, -0.59375f, 0.84375f,
      1.9375f, 1.65625f, 1.375f, 1.09375f, -1.09375f, -2.375f, -4.0f, -1.5f,
      -0.375f, 0.40625f, 1.1875f, 2.28125f, 3.03125f, 2.40625f, 1.4375f, 0.125f,
      -1.1875f, -1.0625f, -1.625f, 1.59375f, 1.375f, 1.15625f, -2.03125f, 0.3125f,
      1.96875f, 2.9375f, 3.21875f, 3.5f, -1.0625f, -0.375f, 2.375f, 4.4375f,
      3.75f, 2.375f, 1.65625f, 3.75f, 5.15625f, 4.84375f, 2.8125f, 0.09375f}},
    {3, {
      0.5625f, -1.21875f, 0.09375f, 1.0625f, 0.03125f, -1.34375f, 1.0625f, 1.0625f,
      -1.71875f, -0.96875f, 0.8125f, 1.5625f, 1.875f, 0.6875f, -2.5625f, -1.34375f,
      1.125f, -1.15625f, 0.34375f, 1.15625f, -0.34375f, -2.5f, 0.15625f, 2.125f,
      -0.53125f, 1.3125f, 0.40625f, -0.84375f, 1.15625f, -0.6875f, -1.15625f, 1.46875f,
      -0.9375f, -2.5f, 1.4375f, 1.9375f, -3.4375f, -0.5f, 2.78125f, -0.125f,
      2.59375f, 1.75f, -3.90625f, -3.03125f, 1.34375f, -2.21875f, -0.96875f, 3.03125f}},
    {4, {
      1.5625f, -0.34375f, 0.15625f, -0.71875f, 0.8125f, -0.75f, -0.8125f, 0.75f,
      -0.78125f, -1.28125f, 0.625f, -1.59375f, 0.8125f, -0.3125f, -1.09375f, 0.46875f,
      0.09375f, -0.625f, -1.5625f, 1.875f, -1.5625f, -1.78125f, 1.34375f, -2.0625f,
      -0.5625f, -0.0625f, 0.78125f, -0.03125f, 0.90625f, 0.125f, -2.125f, 1.625f,
      -0.8125f, -0.125f, -0.125f, -0.125f, -0.96875f, 0.34375f, 1.65625f, -1.40625f,
      0.375f, 0.4375f, -2.28125f, 2.40625f, -1.15625f, -2.3125f, 1.09375f, -0.65625f}},
    {12, {
      0.1875f, -0.09375f, 0.78125f, 0.25f, -0.25f, 0.0f, 0.1875f, -0.5f,
      -0.3125f, 0.46875f, -0.03125f, -0.1875f, -0.1875f, -0.5625f, 0.96875f, 0.28125f,
      -0.5f, 0.625f, 0.625f, -0.5625f, -0.46875f, 0.5f, -0.6875f, -0.3125f,
      -0.125f, -0.1875f, -0.78125f, -1.0625f, 0.46875f, -0.15625f, 0.3125f, 0.25f,
      -1.25f, -0.1875f, 0.125f, -0.09375f, -1.34375f, 0.21875f, -0.1875f, 0.53125f,
      0.78125f, -1.25f, -1.1875f, 0.28125f, -1.375f, -0.1875f, 0.0625f, -1.3125f}},
};

static void grouped_conv(backend *be, be_stream *st, int g, const float *x, const float *w,
                         const uint16_t *x16, const uint16_t *w16, float *y, uint16_t *y16)
{
    dps_window win = {.c = 12, .h = 3, .w = 3, .kh = 2, .kw = 2, .sh = 2, .sw = 2, .ph = 1, .pw = 1,
                      .dh = 1, .dw = 1, .pool = DPS_POOL_NONE, .groups = g};
    float cols[192];
    int k = 48, kg = k / g, ng = 12 / g;
    dev_bufs d = dev_bufs_on(be, st, 0);
    float *dx_ = dev_put(&d, x, 108 * 4), *w_ = dev_put(&d, w, 576 * 4);
    uint16_t *x16_ = dev_put(&d, x16, 108 * 2), *w16_ = dev_put(&d, w16, 576 * 2);
    float *cols_ = dev_zeros(&d, sizeof cols), *y_ = dev_zeros(&d, 48 * 4);
    uint16_t *cols16_ = dev_zeros(&d, 192 * 2), *y16_ = dev_zeros(&d, 48 * 2);
    EXPECT(dps_window_out_elems(&win) == 4 * k);
    EXPECT(be->ops->window(be, st, &win, 1, BE_F32, dx_, cols_, NULL) == DPS_OK);
    EXPECT(be->ops->window(be, st, &win, 1, BE_BF16, x16_, cols16_, NULL) == DPS_OK);
    for (int j = 0; j < g; j++) {
        EXPECT(be->ops->gemm(be, st, 0, 1, 4, ng, kg, 1.0f, cols_ + j * kg, k, w_ + j * ng * kg, kg,
                             0.0f, y_ + j * ng, 12) == DPS_OK);
        EXPECT(be->ops->gemm_ex(be, st, 0, 1, 4, ng, kg, 1.0f, cols16_ + j * kg, BE_BF16, k,
                                w16_ + j * ng * kg, BE_BF16, kg, 0.0f, y16_ + j * ng, BE_BF16, 12) == DPS_OK);
    }
    float dy[192], dx[108], lhs = 0.0f, rhs = 0.0f;
    for (int i = 0; i < 192; i++) dy[i] = (float)((5 * i) % 9 - 4) / 8.0f;
    float *dy_ = dev_put(&d, dy, sizeof dy), *dxo = dev_zeros(&d, sizeof dx);
    EXPECT(be->ops->window_bwd(be, st, &win, 1, dy_, NULL, dxo) == DPS_OK);
    dev_get(&d, cols, cols_, sizeof cols);
    dev_get(&d, y, y_, 48 * 4);
    dev_get(&d, y16, y16_, 48 * 2);
    dev_get(&d, dx, dxo, sizeof dx);
    dev_bufs_free(&d);
    for (int i = 0; i < 192; i++) lhs += cols[i] * dy[i];
    for (int j = 0; j < 108; j++) rhs += x[j] * dx[j];
    EXPECT_NEAR(lhs, rhs, 1e-5);
}

static void test_grouped_windows(void)
{
    be_options o = {.kind = BE_HOST, .host_devices = 1, .quiet = 1};
    backend *be = NULL;
    EXPECT(be_open(&o, &be) == DPS_OK);
    if (!be) return;
    be_stream *st = expect_stream(be);
    float x[108], w[576], y[48];
    uint16_t x16[108], w16[576], y16[48];
    for (int j = 0; j < 108; j++) x16[j] = dps_f32_to_bf16(x[j] = (float)((7 * j) % 13 - 6) / 4.0f);
    for (int i = 0; i < 576; i++) w16[i] = dps_f32_to_bf16(w[i] = (float)((5 * i) % 11 - 5) / 8.0f);
    for (size_t c = 0; c < sizeof grouped_cases / sizeof grouped_cases[0]; c++) {
        grouped_conv(be, st, grouped_cases[c].g, x, w, x16, w16, y, y16);
        for (int i = 0; i < 48; i++) {
            float want = grouped_cases[c].y[i];
            EXPECT_NEAR(y[i], want, 1e-6);
            EXPECT_NEAR(dps_bf16_to_f32(y16[i]), want, 4e-3 * fabsf(want));
        }
    }
    expect_stream_free(be, st);
    be_close(be);
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
    size_t nb = (size_t)n * 4;
    dev_bufs dv = dev_bufs_on(be, st, 0);
    float *x_ = dev_put(&dv, x, nb), *y_ = dev_zeros(&dv, nb), *y2_ = dev_zeros(&dv, nb);
    float *bias_ = dev_put(&dv, bias, nb), *dh_ = dev_put(&dv, dh, nb), *g_ = dev_zeros(&dv, nb);
    EXPECT(be->ops->act(be, st, DPS_ACT_GELU, n, x_, y2_) == DPS_OK);
    EXPECT(be->ops->bias_act(be, st, 1, n, x_, bias_, y_) == DPS_OK); /* x + 0: x, but -0 */
    const float *y2 = dev_read(&dv, y2_, nb);
    dev_get(&dv, y, y_, nb);
    for (int i = 0; i < n; i++)
        if (x[i] != 0.0f) EXPECT(memcmp(&y[i], &y2[i], 4) == 0 || (isnan(y[i]) && isnan(y2[i])));
    EXPECT(be->ops->act_bwd(be, st, DPS_ACT_GELU, n, dh_, x_, g_) == DPS_OK);
    dev_get(&dv, g, g_, nb);
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
    size_t lb = (size_t)rows * classes * 4;
    float *logits_ = dev_put(&dv, logits, lb), *dl_ = dev_zeros(&dv, lb), *loss_ = dev_zeros(&dv, sizeof loss);
    int32_t *labels_ = dev_put(&dv, labels, sizeof labels);
    EXPECT(be->ops->xent(be, st, rows, classes, logits_, labels_, 0.25f, dl_, loss_) == DPS_OK);
    dev_get(&dv, dl, dl_, lb);
    dev_get(&dv, loss, loss_, sizeof loss);
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
    dev_set(&dv, logits_, logits, lb);
    EXPECT(be->ops->xent(be, st, 1, classes, logits_, labels_, 0.25f, dl_, loss_) == DPS_OK);
    dev_get(&dv, loss, loss_, sizeof loss);
    EXPECT(isnan(loss[0]));
    dev_bufs_free(&dv);
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
        size_t n = (size_t)rows * cols, nb = (n + 1) * sizeof(float), cb = (size_t)cols * sizeof(float);
        float *x = malloc(nb), *gpu = malloc(cb), *pre = malloc(nb);
        for (size_t k = 0; k < n; k++) x[k] = dps_uniform(3, 9, k) * 1e3f;
        dev_bufs d = dev_bufs_on(be, st, 0);
        float *x_ = dev_put(&d, x, nb), *out_ = dev_zeros(&d, cb), *again_ = dev_zeros(&d, cb);
        EXPECT(be->ops->col_sum(be, st, rows, cols, x_, out_) == DPS_OK);
        EXPECT(be->ops->col_sum(be, st, rows, cols, x_, again_) == DPS_OK);
        col_sum_as_gpu(rows, cols, x, gpu);
        const float *out = dev_read(&d, out_, cb);
        EXPECT(memcmp(out, dev_read(&d, again_, cb), cb) == 0);
        EXPECT(memcmp(out, gpu, cb) == 0);
        /* GELU's backward fused with the sums: gelu_bwd's values, col_sum's sums */
        for (size_t k = 0; k < n; k++) pre[k] = dps_uniform(3, 10, k) * 4.0f;
        float *pre_ = dev_put(&d, pre, nb), *want_ = dev_zeros(&d, nb), *dh_ = dev_put(&d, x, nb);
        float *fused_db_ = dev_zeros(&d, cb), *want_db_ = dev_zeros(&d, cb);
        EXPECT(be->ops->act_bwd(be, st, DPS_ACT_GELU, (int64_t)n, x_, pre_, want_) == DPS_OK);
        EXPECT(be->ops->col_sum(be, st, rows, cols, want_, want_db_) == DPS_OK);
        EXPECT(be->ops->gelu_bwd_col_sum(be, st, rows, cols, dh_, pre_, dh_, fused_db_) == DPS_OK);
        EXPECT(memcmp(dev_read(&d, dh_, n * 4), dev_read(&d, want_, n * 4), n * sizeof(float)) == 0);
        EXPECT(memcmp(dev_read(&d, fused_db_, cb), dev_read(&d, want_db_, cb), cb) == 0);
        for (int c = 0; c < cols; c++) {
            double exact = 0.0, mag = 0.0;
            for (int r = 0; r < rows; r++) {
                exact += x[(size_t)r * cols + c];
                mag += fabs(x[(size_t)r * cols + c]);
            }
            EXPECT_NEAR(out[c], exact, 1e-6 * mag + 1e-30);
        }
        dev_bufs_free(&d);
        free(x); free(gpu); free(pre);
    }
    expect_stream_free(be, st);
    be_close(be);
}

/* The old two-step sums of a norm's backward on backend be: dgamma +=
 * col_sum(g·x), dbeta += col_sum(g), dx += the rounded col_scale(g, γ),
 * each through a full-size temporary; x (type xt) widened first. */
static void norm_bwd_two_step(backend *be, be_stream *st, be_dtype xt, be_dtype rt, int rows,
                              int cols, const float *g, const void *x, const float *gamma,
                              float *dx, float *dgamma, float *dbeta)
{
    size_t n = (size_t)rows * cols;
    dev_bufs d = dev_bufs_on(be, st, 0);
    float *wide = dev_zeros(&d, (n + 1) * sizeof(float)), *tmp = dev_zeros(&d, (n + 1) * sizeof(float));
    float *sums = dev_zeros(&d, (size_t)cols * sizeof(float));
    EXPECT(be->ops->cast(be, st, (int64_t)n, x, xt, wide, BE_F32) == DPS_OK);
    EXPECT(be->ops->mul(be, st, (int64_t)n, g, wide, tmp) == DPS_OK);
    EXPECT(be->ops->col_sum(be, st, rows, cols, tmp, sums) == DPS_OK);
    EXPECT(be->ops->add(be, st, cols, dgamma, sums) == DPS_OK);
    EXPECT(be->ops->col_sum(be, st, rows, cols, g, sums) == DPS_OK);
    EXPECT(be->ops->add(be, st, cols, dbeta, sums) == DPS_OK);
    EXPECT(be->ops->col_scale(be, st, rows, cols, g, gamma, tmp) == DPS_OK);
    if (rt != BE_F32) EXPECT(be->ops->round_half(be, st, rt, (int64_t)n, tmp) == DPS_OK);
    EXPECT(be->ops->add(be, st, (int64_t)n, dx, tmp) == DPS_OK);
    dev_bufs_free(&d);
}

/* The sums into gradients on the host backend against the two-step ops
 * they replace, bit for bit: a norm's backward in fp32 and reading half x
 * (dx rounded to the half type), a bias gradient's column sums from half
 * values rounded once (col_sum_half, cast, widened and added), strided
 * column sums, and dst += src rounded. */
static void test_grad_sums(void)
{
    be_options o = {.kind = BE_HOST, .host_devices = 1, .quiet = 1};
    backend *be = NULL;
    EXPECT(be_open(&o, &be) == DPS_OK);
    if (!be) return;
    be_stream *st = expect_stream(be);
    static const int shapes[][2] = {{1, 1}, {7, 33}, {65, 257}, {4099, 64}};
    static const be_dtype types[] = {BE_F32, BE_BF16, BE_F16};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (size_t t = 0; t < 3; t++) {
            int rows = shapes[i][0], cols = shapes[i][1];
            be_dtype xt = types[t];
            size_t n = (size_t)rows * cols, cb = (size_t)cols * sizeof(float);
            float *g = malloc(n * 4), *x = malloc(n * 4), *gamma = malloc(cb);
            float *dx[2] = {malloc(n * 4), malloc(n * 4)}, *dgb[2] = {malloc(2 * cb), malloc(2 * cb)};
            for (size_t k = 0; k < n; k++) {
                g[k] = dps_round_as(dps_uniform(5, 1, k), (int)xt);
                x[k] = dps_uniform(5, 2, k) * 3.0f;
                dx[0][k] = dx[1][k] = dps_round_as(dps_uniform(5, 3, k), (int)xt);
            }
            for (int c = 0; c < 2 * cols; c++) dgb[0][c] = dgb[1][c] = dps_uniform(5, 4, (uint64_t)c);
            for (int c = 0; c < cols; c++) gamma[c] = dps_uniform(5, 5, (uint64_t)c) + 1.0f;
            dev_bufs d = dev_bufs_on(be, st, 0);
            float *g_ = dev_put(&d, g, n * 4), *x_ = dev_put(&d, x, n * 4), *gamma_ = dev_put(&d, gamma, cb);
            float *dx_[2] = {dev_put(&d, dx[0], n * 4), dev_put(&d, dx[1], n * 4)};
            float *dgb_[2] = {dev_put(&d, dgb[0], 2 * cb), dev_put(&d, dgb[1], 2 * cb)};
            if (xt != BE_F32) EXPECT(be->ops->cast(be, st, (int64_t)n, x_, BE_F32, x_, xt) == DPS_OK);
            norm_bwd_two_step(be, st, xt, xt, rows, cols, g_, x_, gamma_, dx_[0], dgb_[0], dgb_[0] + cols);
            EXPECT(be->ops->norm_bwd(be, st, xt, xt, rows, cols, g_, x_, gamma_, dx_[1], dgb_[1],
                                     dgb_[1] + cols) == DPS_OK);
            EXPECT(memcmp(dev_read(&d, dx_[0], n * 4), dev_read(&d, dx_[1], n * 4), n * 4) == 0 &&
                   memcmp(dev_read(&d, dgb_[0], 2 * cb), dev_read(&d, dgb_[1], 2 * cb), 2 * cb) == 0);
            /* a bias's gradient from half values: col_sum_half, rounded once, widened */
            if (xt != BE_F32) {
                uint16_t *h = dev_zeros(&d, n * 2 + 2), *r = dev_zeros(&d, cb);
                EXPECT(be->ops->cast(be, st, (int64_t)n, g_, BE_F32, h, xt) == DPS_OK);
                EXPECT(be->ops->col_sum_half(be, st, xt, rows, cols, h, gamma_) == DPS_OK);
                EXPECT(be->ops->cast(be, st, cols, gamma_, BE_F32, r, xt) == DPS_OK);
                EXPECT(be->ops->add_ex(be, st, cols, dgb_[0], BE_F32, r, xt, dgb_[0], BE_F32) == DPS_OK);
                EXPECT(be->ops->col_sum_add(be, st, xt, xt, rows, cols, cols, h, dgb_[1]) == DPS_OK);
                EXPECT(memcmp(dev_read(&d, dgb_[0], cb), dev_read(&d, dgb_[1], cb), cb) == 0);
            }
            /* columns [0, cols - 1) of rows cols apart: col_sum's of the narrower copy */
            int w = cols > 1 ? cols - 1 : 1;
            for (size_t k = 0; xt == BE_F32 && k < (size_t)rows * w; k++)
                x[k] = g[(k / w) * cols + k % w];
            if (xt == BE_F32 && cols > 1) {
                dev_set(&d, x_, x, n * 4);
                EXPECT(be->ops->col_sum(be, st, rows, w, x_, gamma_) == DPS_OK);
                EXPECT(be->ops->add(be, st, w, dgb_[0], gamma_) == DPS_OK);
                EXPECT(be->ops->col_sum_add(be, st, BE_F32, BE_F32, rows, w, cols, g_, dgb_[1]) == DPS_OK);
                EXPECT(memcmp(dev_read(&d, dgb_[0], cb), dev_read(&d, dgb_[1], cb), cb) == 0);
            }
            /* dst += src rounded: round_half then add */
            memcpy(x, g, n * 4);
            for (size_t k = 0; k < n; k++) x[k] *= 1.0f + 1.0f / 3.0f;
            dev_set(&d, x_, x, n * 4);
            EXPECT(be->ops->add_round(be, st, xt, (int64_t)n, dx_[1], x_) == DPS_OK);
            if (xt != BE_F32) EXPECT(be->ops->round_half(be, st, xt, (int64_t)n, x_) == DPS_OK);
            EXPECT(be->ops->add(be, st, (int64_t)n, dx_[0], x_) == DPS_OK);
            EXPECT(memcmp(dev_read(&d, dx_[0], n * 4), dev_read(&d, dx_[1], n * 4), n * 4) == 0);
            dev_bufs_free(&d);
            free(g); free(x); free(gamma); free(dx[0]); free(dx[1]); free(dgb[0]); free(dgb[1]);
        }
    expect_stream_free(be, st);
    be_close(be);
}

/* The two-step forward of a norm that norm_fwd replaces: x (type xt)
 * widened into want, col_scale by γ, bias_act's shift by β (γ or β NULL:
 * that step left out), then cast to type yt into out. */
static void norm_fwd_two_step(backend *be, be_stream *st, be_dtype xt, be_dtype yt, int rows,
                              int cols, const void *x, const float *gamma, const float *beta,
                              float *want, void *out)
{
    size_t n = (size_t)rows * cols;
    EXPECT(be->ops->cast(be, st, (int64_t)n, x, xt, want, BE_F32) == DPS_OK);
    if (gamma) EXPECT(be->ops->col_scale(be, st, rows, cols, want, gamma, want) == DPS_OK);
    if (beta) EXPECT(be->ops->bias_act(be, st, rows, cols, want, beta, NULL) == DPS_OK);
    EXPECT(be->ops->cast(be, st, (int64_t)n, want, BE_F32, out, yt) == DPS_OK);
}

/* A norm's forward in one pass on the host backend, bit for bit the
 * two-step result, for x in fp32, bf16 and fp16, y in fp32 and in x's
 * type, with and without γ and β; in place when x and y share a type. */
static void test_norm_fwd(void)
{
    be_options o = {.kind = BE_HOST, .host_devices = 1, .quiet = 1};
    backend *be = NULL;
    EXPECT(be_open(&o, &be) == DPS_OK);
    if (!be) return;
    be_stream *st = expect_stream(be);
    static const int shapes[][2] = {{1, 1}, {7, 33}, {129, 64}};
    static const be_dtype types[] = {BE_F32, BE_BF16, BE_F16};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (size_t t = 0; t < 3 * 2 * 4; t++) {
            int rows = shapes[i][0], cols = shapes[i][1], with_g = t & 1, with_b = (t >> 1) & 1;
            be_dtype xt = types[t / 8], yt = (t >> 2) & 1 ? xt : BE_F32;
            size_t n = (size_t)rows * cols, yb = yt == BE_F32 ? 4 : 2;
            float *x = malloc(n * 4), *want = malloc(n * 4), *gb = malloc((size_t)cols * 8);
            unsigned char *y[2] = {malloc(n * 4), malloc(n * 4)};
            for (size_t k = 0; k < n; k++) x[k] = dps_uniform(9, 1, k) * 37.0f + 0.1f;
            for (int c = 0; c < 2 * cols; c++) gb[c] = dps_uniform(9, 2, (uint64_t)c) * 3.0f + 0.7f;
            dev_bufs d = dev_bufs_on(be, st, 0);
            float *x_ = dev_put(&d, x, n * 4), *want_ = dev_zeros(&d, n * 4);
            float *gb_ = dev_put(&d, gb, (size_t)cols * 8);
            void *y_[2] = {dev_zeros(&d, n * 4), dev_zeros(&d, n * 4)};
            if (xt != BE_F32) EXPECT(be->ops->cast(be, st, (int64_t)n, x_, BE_F32, x_, xt) == DPS_OK);
            const float *g = with_g ? gb_ : NULL, *b = with_b ? gb_ + cols : NULL;
            norm_fwd_two_step(be, st, xt, yt, rows, cols, x_, g, b, want_, y_[0]);
            EXPECT(be->ops->norm_fwd(be, st, xt, yt, rows, cols, x_, g, b, y_[1]) == DPS_OK);
            dev_get(&d, y[0], y_[0], n * yb);
            dev_get(&d, y[1], y_[1], n * yb);
            EXPECT(memcmp(y[0], y[1], n * yb) == 0);
            if (xt == yt) { /* in place: x overwritten by y */
                EXPECT(be->ops->norm_fwd(be, st, xt, yt, rows, cols, x_, g, b, x_) == DPS_OK);
                dev_get(&d, x, x_, n * yb);
                EXPECT(memcmp(y[0], x, n * yb) == 0);
            }
            dev_bufs_free(&d);
            free(x); free(want); free(gb); free(y[0]); free(y[1]);
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
    dev_bufs d = dev_bufs_on(be, st, 0);
    float *a_ = dev_put(&d, a, sizeof a), *b_ = dev_put(&d, b, sizeof b), *c0_ = dev_put(&d, c0, sizeof c0);
    float *ar_ = dev_zeros(&d, sizeof ar), *br_ = dev_zeros(&d, sizeof br);
    float *want_ = dev_zeros(&d, sizeof want), *got_ = dev_zeros(&d, sizeof got);
    uint16_t *a16_ = dev_zeros(&d, sizeof a16), *b16_ = dev_zeros(&d, sizeof b16);
    uint16_t *c16_ = dev_zeros(&d, sizeof c16);
    EXPECT(op->cast(be, st, M * K, a_, BE_F32, a16_, H) == DPS_OK);
    EXPECT(op->cast(be, st, K * N, b_, BE_F32, b16_, H) == DPS_OK);
    EXPECT(op->cast(be, st, M * K, a16_, H, ar_, BE_F32) == DPS_OK);
    EXPECT(op->cast(be, st, K * N, b16_, H, br_, BE_F32) == DPS_OK);
    dev_get(&d, a16, a16_, sizeof a16);
    dev_get(&d, ar, ar_, sizeof ar);
    EXPECT(a16[5] == dps_to_half(a[5], f16) && ar[5] == dps_from_half(a16[5], f16));
    dev_set(&d, want_, c0, sizeof want);
    EXPECT(op->gemm(be, st, 0, 0, M, N, K, 1.0f, ar_, K, br_, N, 0.5f, want_, N) == DPS_OK);
    dev_set(&d, got_, c0, sizeof got);
    EXPECT(op->gemm_ex(be, st, 0, 0, M, N, K, 1.0f, a16_, H, K, b16_, H, N, 0.5f, got_,
                       BE_F32, N) == DPS_OK);
    dev_get(&d, want, want_, sizeof want);
    dev_get(&d, got, got_, sizeof got);
    EXPECT(memcmp(got, want, sizeof got) == 0);
    dev_set(&d, got_, c0, sizeof got); /* an fp32 A beside a half B is rounded first */
    EXPECT(op->gemm_ex(be, st, 0, 0, M, N, K, 1.0f, a_, BE_F32, K, b16_, H, N, 0.5f, got_,
                       BE_F32, N) == DPS_OK);
    dev_get(&d, got, got_, sizeof got);
    EXPECT(memcmp(got, want, sizeof got) == 0);
    EXPECT(op->cast(be, st, M * N, c0_, BE_F32, c16_, H) == DPS_OK);
    dev_get(&d, c16, c16_, sizeof c16);
    for (int i = 0; i < M * N; i++) want[i] = dps_from_half(c16[i], f16);
    dev_set(&d, want_, want, sizeof want);
    EXPECT(op->gemm(be, st, 0, 0, M, N, K, 1.0f, ar_, K, br_, N, 1.0f, want_, N) == DPS_OK);
    EXPECT(op->gemm_ex(be, st, 0, 0, M, N, K, 1.0f, a16_, H, K, b16_, H, N, 1.0f, c16_,
                       H, N) == DPS_OK);
    dev_get(&d, want, want_, sizeof want);
    dev_get(&d, c16, c16_, sizeof c16);
    int rounded_once = 1;
    for (int i = 0; i < M * N; i++) rounded_once &= c16[i] == dps_to_half(want[i], f16);
    EXPECT(rounded_once);
    /* refused as the op runs: at once on the plain host backend; in strict
     * mode, whose streams run asynchronously, at the stream's next
     * synchronisation (strict_async_error tests that), after which the
     * stream is spent */
    if (!be_strict_on(be)) {
        EXPECT(op->gemm_ex(be, st, 0, 0, M, N, K, 1.0f, a_, BE_F32, K, b_, BE_F32, N, 0.0f, c16_,
                           H, N) == DPS_ERR_RUNTIME && strstr(dps_errmsg(), "cast A or B"));
        EXPECT(op->gemm_ex(be, st, 0, 0, M, N, K, 1.0f, a16_, BE_BF16, K, b16_, BE_F16, N, 0.0f,
                           got_, BE_F32, N) == DPS_ERR_RUNTIME && strstr(dps_errmsg(), "two half types"));
    }
    /* Linear (addmm: the product plus the bias, rounded once) + GELU, GELU's
     * backward, the bias gradient */
    enum { LD = N + 3 }; /* C's rows padded: the padding is left alone */
    uint16_t bias[N], pre[M * LD], post[M * N], dpre[M * N], wide_pre[M * N];
    float acc[M * N], biasf[N], out[M * LD];
    for (int c = 0; c < N; c++) bias[c] = dps_to_half(dps_uniform(11, 4, (uint64_t)c), f16);
    for (int c = 0; c < N; c++) biasf[c] = dps_uniform(11, 5, (uint64_t)c);
    for (int i = 0; i < M * LD; i++) pre[i] = 0x7777;
    for (int i = 0; i < M * LD; i++) out[i] = 7.0f;
    uint16_t *bias_ = dev_put(&d, bias, sizeof bias), *pre_ = dev_put(&d, pre, sizeof pre);
    float *biasf_ = dev_put(&d, biasf, sizeof biasf), *out_ = dev_put(&d, out, sizeof out);
    float *acc_ = dev_zeros(&d, sizeof acc);
    EXPECT(op->gemm(be, st, 0, 0, M, N, K, 1.0f, ar_, K, br_, N, 0.0f, acc_, N) == DPS_OK);
    EXPECT(op->gemm_bias(be, st, 0, 0, M, N, K, a16_, H, K, b16_, H, N, bias_, pre_, H, LD) == DPS_OK);
    EXPECT(op->gemm_bias(be, st, 0, 0, M, N, K, ar_, BE_F32, K, br_, BE_F32, N, biasf_, out_, BE_F32,
                         LD) == DPS_OK);
    dev_get(&d, acc, acc_, sizeof acc);
    dev_get(&d, pre, pre_, sizeof pre);
    dev_get(&d, out, out_, sizeof out);
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
    if (!be_strict_on(be)) /* as above */
        EXPECT(op->gemm_bias(be, st, 0, 0, M, N, K, a_, BE_F32, K, b_, BE_F32, N, bias_, pre_, H,
                             N) == DPS_ERR_RUNTIME && strstr(dps_errmsg(), "cast A or B"));
    uint16_t *wide_pre_ = dev_put(&d, wide_pre, sizeof wide_pre), *post_ = dev_zeros(&d, sizeof post);
    EXPECT(op->act_half(be, st, DPS_ACT_GELU, H, M * N, wide_pre_, post_) == DPS_OK);
    dev_get(&d, post, post_, sizeof post);
    int gelu_ok = 1;
    for (int i = 0; i < M * N; i++) gelu_ok &= post[i] == dps_gelu_half(wide_pre[i], f16);
    EXPECT(gelu_ok);
    memcpy(pre, wide_pre, sizeof wide_pre);
    dev_set(&d, pre_, wide_pre, sizeof wide_pre);
    uint16_t *dpre_ = dev_zeros(&d, sizeof dpre);
    EXPECT(op->act_bwd_half(be, st, DPS_ACT_GELU, H, M * N, post_, pre_, dpre_) == DPS_OK);
    dev_get(&d, dpre, dpre_, sizeof dpre);
    EXPECT(dpre[9] == dps_gelu_bwd_half(post[9], pre[9], f16));
    float sums[N], sums_wide[N], fused[N];
    float *sums_ = dev_zeros(&d, sizeof sums), *sums_wide_ = dev_zeros(&d, sizeof sums_wide);
    float *fused_ = dev_zeros(&d, sizeof fused);
    EXPECT(op->cast(be, st, M * N, dpre_, H, got_, BE_F32) == DPS_OK);
    EXPECT(op->col_sum(be, st, M, N, got_, sums_wide_) == DPS_OK);
    EXPECT(op->col_sum_half(be, st, H, M, N, dpre_, sums_) == DPS_OK);
    dev_get(&d, sums, sums_, sizeof sums);
    dev_get(&d, sums_wide, sums_wide_, sizeof sums_wide);
    EXPECT(memcmp(sums, sums_wide, sizeof sums) == 0);
    EXPECT(op->gelu_bwd_col_sum_half(be, st, H, M, N, post_, pre_, post_, fused_) == DPS_OK);
    dev_get(&d, post, post_, sizeof post);
    dev_get(&d, fused, fused_, sizeof fused);
    EXPECT(memcmp(post, dpre, sizeof dpre) == 0 && memcmp(fused, sums, sizeof sums) == 0);
    dev_bufs_free(&d);
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
    dev_bufs d = dev_bufs_on(be, st, 0);
    float *g_ = dev_put(&d, g, sizeof g), *found_ = dev_put(&d, &found, sizeof found);
    EXPECT(be->ops->unscale(be, st, 4, g_, 0.25f, found_) == DPS_OK);
    dev_get(&d, g, g_, sizeof g);
    dev_get(&d, &found, found_, sizeof found);
    EXPECT(g[0] == 0.5f && g[1] == -1.5f && g[2] == 0.125f && found == 0.0f);
    g[2] = INFINITY;
    dev_set(&d, g_, g, sizeof g);
    EXPECT(be->ops->unscale(be, st, 4, g_, 0.25f, found_) == DPS_OK);
    dev_get(&d, &found, found_, sizeof found);
    EXPECT(found == 1.0f);
    found = 0.0f;
    dev_set(&d, found_, &found, sizeof found);
    g[2] = NAN;
    dev_set(&d, g_, g, sizeof g);
    EXPECT(be->ops->unscale(be, st, 4, g_, 1.0f, found_) == DPS_OK);
    dev_get(&d, &found, found_, sizeof found);
    EXPECT(found == 1.0f);
    dev_bufs_free(&d);
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
    be_stream *st = expect_stream(be);
    dev_bufs d = dev_bufs_on(be, st, 0);
    float *x_ = dev_put(&d, x, sizeof x), *y_ = dev_put(&d, y, sizeof y);
    EXPECT(be->ops->event_create(be, 0, &e) == DPS_OK);
    EXPECT(be->ops->memset0(be, NULL, x_, sizeof x) == DPS_ERR_RUNTIME);
    dev_get(&d, x, x_, sizeof x);
    EXPECT(strstr(dps_errmsg(), "memset0 called with no stream") && x[0] == 1.0f);
    EXPECT(be->ops->copy(be, NULL, y_, 0, x_, 0, sizeof x) == DPS_ERR_RUNTIME);
    EXPECT(strstr(dps_errmsg(), "copy called with no stream"));
    dev_get(&d, y, y_, sizeof y);
    EXPECT(y[0] == 5.0f);
    EXPECT(be->ops->gemm(be, NULL, 0, 0, 2, 2, 2, 1.0f, x_, 2, x_, 2, 0.0f, y_, 2) == DPS_ERR_RUNTIME);
    EXPECT(be->ops->scale(be, NULL, 4, x_, 2.0f) == DPS_ERR_RUNTIME);
    dev_get(&d, x, x_, sizeof x);
    EXPECT(x[3] == 4.0f);
    EXPECT(be->ops->stream_sync(be, NULL) == DPS_ERR_RUNTIME);
    EXPECT(be->ops->event_record(be, e, NULL) == DPS_ERR_RUNTIME);
    EXPECT(be->ops->stream_wait(be, NULL, e) == DPS_ERR_RUNTIME);
    EXPECT(be->ops->memset0(be, st, x_, sizeof x) == DPS_OK);
    dev_get(&d, x, x_, sizeof x);
    EXPECT(x[0] == 0.0f);
    dev_bufs_free(&d);
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
    dev_bufs d = dev_bufs_on(be, st, 0);
    float *g_ = dev_put(&d, g, sizeof g), *in_place_ = dev_put(&d, in_place, sizeof in_place);
    float *two_pass_ = dev_zeros(&d, sizeof two_pass), *one_pass_ = dev_zeros(&d, sizeof one_pass);
    EXPECT(be->ops->copy(be, st, two_pass_, 0, g_, 0, sizeof g) == DPS_OK);
    EXPECT(be->ops->scale(be, st, N, two_pass_, a) == DPS_OK);
    EXPECT(be->ops->scale_copy(be, st, N, one_pass_, g_, a) == DPS_OK);
    EXPECT(be->ops->scale_copy(be, st, N, in_place_, in_place_, a) == DPS_OK);
    dev_get(&d, two_pass, two_pass_, sizeof two_pass);
    dev_get(&d, one_pass, one_pass_, sizeof one_pass);
    dev_get(&d, in_place, in_place_, sizeof in_place);
    dev_bufs_free(&d);
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

/* ---- Strict mode's asynchronous streams (DPSCALE_STRICT=1) ---- */

enum { STRICT_SPIN_US = 200000 }; /* longer than the host takes to look, on an idle machine */

static backend *strict_open(void)
{
    setenv("DPSCALE_STRICT", "1", 1);
    be_options o = {.kind = BE_HOST, .host_devices = 1, .quiet = 1};
    backend *be = NULL;
    EXPECT(be_open(&o, &be) == DPS_OK);
    unsetenv("DPSCALE_STRICT");
    EXPECT(!be || be_strict_on(be));
    return be;
}

/* Stream a spins `us`, then zeroes x; stream b waits for a's event and
 * copies x into pinned memory. The host sees the copy only after
 * synchronising; b copies the zeroes, so it waited for a; event_ms refuses
 * events that the streams have not reached (cudaErrorNotReady) and times
 * them after. What the host sees before synchronising is judged only when
 * it looked within the spin (its own clock says so): 1 then, 0 when it
 * looked too late (a loaded machine) to tell. */
static int strict_wait_orders_once(backend *be, be_stream *a, be_stream *b, float *x, float *pin,
                                   double us)
{
    const be_ops *o = be->ops;
    const float ones[4] = {1, 1, 1, 1};
    be_event *e = NULL, *done = NULL;
    EXPECT(o->event_create(be, 0, &e) == DPS_OK && o->event_create(be, 0, &done) == DPS_OK);
    if (!e || !done) return 1;
    EXPECT(o->copy(be, a, x, 0, ones, DPS_HOST, sizeof ones) == DPS_OK); /* pageable: the host waits */
    EXPECT(o->copy(be, a, pin, DPS_HOST, x, 0, sizeof ones) == DPS_OK);
    EXPECT(o->stream_sync(be, a) == DPS_OK && pin[3] == 1.0f);
    double t0 = dps_now_ms(); /* the spin begins after this */
    EXPECT(o->spin(be, a, us) == DPS_OK);
    EXPECT(o->memset0(be, a, x, sizeof ones) == DPS_OK);
    EXPECT(o->event_record(be, e, a) == DPS_OK);
    EXPECT(o->stream_wait(be, b, e) == DPS_OK);
    EXPECT(o->copy(be, b, pin, DPS_HOST, x, 0, sizeof ones) == DPS_OK);
    EXPECT(o->event_record(be, done, b) == DPS_OK);
    float seen = ((volatile float *)pin)[3], ms = -1.0f;
    dps_status early = o->event_ms(be, e, done, &ms);
    int named = strstr(dps_errmsg(), "not reached yet (CUDA: cudaErrorNotReady)") != NULL;
    int within = (dps_now_ms() - t0) * 1e3 < us;
    if (within) {
        EXPECT(seen == 1.0f); /* not synchronised: the old value */
        EXPECT(early == DPS_ERR_RUNTIME && ms == -1.0f && named);
    }
    EXPECT(o->event_sync(be, done) == DPS_OK && pin[0] == 0.0f && pin[3] == 0.0f);
    EXPECT(o->event_ms(be, e, done, &ms) == DPS_OK && ms >= 0.0f);
    o->event_destroy(be, e);
    o->event_destroy(be, done);
    return within;
}

/* strict_wait_orders_once, its spin 4 times longer each time the host
 * looked too late, to a hang guard of 300 s. */
static void strict_wait_orders(backend *be, be_stream *a, be_stream *b, float *x, float *pin)
{
    double us = STRICT_SPIN_US;
    while (!strict_wait_orders_once(be, a, b, x, pin, us)) {
        us *= 4;
        if (us > 300e6) {
            fprintf(stderr, "strict_wait_orders: the host never looked within a spin: hung\n");
            EXPECT(us <= 300e6);
            return;
        }
    }
}

/* The same two streams without the wait: b's read of x is refused as a
 * race with a's write, naming both ops. */
static void strict_missing_wait(backend *be, be_stream *a, be_stream *b, float *x, float *pin)
{
    const be_ops *o = be->ops;
    EXPECT(o->spin(be, a, 1000) == DPS_OK);
    EXPECT(o->memset0(be, a, x, 4 * sizeof *x) == DPS_OK);
    EXPECT(o->copy(be, b, pin, DPS_HOST, x, 0, 4 * sizeof *x) == DPS_ERR_RUNTIME);
    EXPECT(strstr(dps_errmsg(), "race on device 0's allocation") &&
           strstr(dps_errmsg(), "memset0 on stream") && strstr(dps_errmsg(), "copy on stream"));
    EXPECT(o->stream_sync(be, a) == DPS_OK && o->stream_sync(be, b) == DPS_OK);
}

static void test_strict_async(void)
{
    backend *be = strict_open();
    if (!be) return;
    const be_ops *o = be->ops;
    be_stream *a = NULL, *b = NULL;
    float *x = NULL, *pin = NULL;
    EXPECT(o->stream_create(be, 0, &a) == DPS_OK && o->stream_create(be, 0, &b) == DPS_OK);
    EXPECT(o->raw_alloc(be, 0, 4 * sizeof *x, (void **)&x) == DPS_OK);
    EXPECT(o->host_alloc(be, 4 * sizeof *pin, (void **)&pin) == DPS_OK);
    if (a && b && x && pin) {
        strict_wait_orders(be, a, b, x, pin);
        strict_missing_wait(be, a, b, x, pin);
    }
    if (x) o->raw_free(be, 0, x);
    if (pin) o->host_free(be, pin);
    if (a) o->stream_destroy(be, a);
    if (b) o->stream_destroy(be, b);
    be_close(be);
}

/* An op that passes strict mode's checks but fails as it runs (gemm_ex of
 * two half types) returns at once; the next synchronisation of its stream
 * reports it, naming the op, every later one too, and the stream's later
 * ops are skipped. */
static void test_strict_async_error(void)
{
    backend *be = strict_open();
    if (!be) return;
    const be_ops *o = be->ops;
    be_stream *a = NULL, *b = NULL;
    uint16_t *h = NULL;
    float *c = NULL, five = 5.0f, back = 0.0f;
    EXPECT(o->stream_create(be, 0, &a) == DPS_OK && o->stream_create(be, 0, &b) == DPS_OK);
    EXPECT(o->raw_alloc(be, 0, 4 * sizeof *h, (void **)&h) == DPS_OK);
    EXPECT(o->raw_alloc(be, 0, sizeof *c, (void **)&c) == DPS_OK);
    if (a && b && h && c) {
        EXPECT(o->memset0(be, a, h, 4 * sizeof *h) == DPS_OK);
        EXPECT(o->copy(be, a, c, 0, &five, DPS_HOST, sizeof five) == DPS_OK);
        EXPECT(o->gemm_ex(be, a, 0, 0, 1, 1, 1, 1.0f, h, BE_BF16, 1, h + 2, BE_F16, 1, 0.0f, c,
                          BE_F32, 1) == DPS_OK);
        EXPECT(o->memset0(be, a, c, sizeof *c) == DPS_OK);
        EXPECT(o->stream_sync(be, a) == DPS_ERR_RUNTIME);
        EXPECT(strstr(dps_errmsg(), "gemm_ex failed as it ran on stream") &&
               strstr(dps_errmsg(), "A and B of two half types"));
        EXPECT(o->stream_sync(be, a) == DPS_ERR_RUNTIME && strstr(dps_errmsg(), "gemm_ex"));
        EXPECT(o->copy(be, b, &back, DPS_HOST, c, 0, sizeof back) == DPS_OK && back == 5.0f);
    }
    if (h) o->raw_free(be, 0, h);
    if (c) o->raw_free(be, 0, c);
    if (a) o->stream_destroy(be, a);
    if (b) o->stream_destroy(be, b);
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
/* A norm's forward on the GPU: bit for bit the host's (dps_norm_affine's
 * product and sum each rounded, no fma), x of each type, y in fp32 and in
 * x's type, with and without γ and β. */
static void gpu_norm_fwd(backend *be, be_stream *st, backend *host)
{
    be_stream *hs = expect_stream(host);
    enum { ROWS = 1031, COLS = 97 };
    size_t n = (size_t)ROWS * COLS;
    float *x = malloc(n * 4), *gb = malloc(2 * COLS * 4);
    char *want = malloc(n * 4), *got = malloc(n * 4);
    for (int c = 0; c < 2 * COLS; c++) gb[c] = dps_uniform(23, 2, (uint64_t)c) * 3.0f + 0.7f;
    dps_buf dx, dgb, dy;
    gpu_put(be, st, &dgb, gb, 2 * COLS * 4);
    gpu_put(be, st, &dy, NULL, n * 4);
    for (int t = 0; t < 3 * 2 * 4; t++) {
        be_dtype xt = (be_dtype)(t / 8), yt = (t >> 2) & 1 ? xt : BE_F32;
        int with_g = t & 1, with_b = (t >> 1) & 1;
        for (size_t k = 0; k < n; k++) x[k] = dps_uniform(23, 1, k) * 37.0f + 0.1f;
        if (xt != BE_F32) EXPECT(host->ops->cast(host, hs, (int64_t)n, x, BE_F32, x, xt) == DPS_OK);
        const float *g = with_g ? gb : NULL, *b = with_b ? gb + COLS : NULL;
        EXPECT(host->ops->norm_fwd(host, hs, xt, yt, ROWS, COLS, x, g, b, want) == DPS_OK);
        gpu_put(be, st, &dx, x, n * be_dtype_bytes(xt));
        const float *dg = with_g ? (const float *)dgb.ptr : NULL;
        const float *db = with_b ? (const float *)dgb.ptr + COLS : NULL;
        EXPECT(be->ops->norm_fwd(be, st, xt, yt, ROWS, COLS, dx.ptr, dg, db, dy.ptr) == DPS_OK);
        gpu_get(be, st, got, &dy, n * be_dtype_bytes(yt));
        EXPECT(memcmp(got, want, n * be_dtype_bytes(yt)) == 0);
        be_buf_free(be, &dx);
    }
    be_buf_free(be, &dgb);
    be_buf_free(be, &dy);
    free(x); free(gb); free(want); free(got);
    expect_stream_free(host, hs);
}

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
        gpu_norm_fwd(be, st, host);
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
    /* the cause: the host's memory, or strict device memory's address space */
    EXPECT(strstr(dps_errmsg(), be_strict_on(be) ? "strict device memory: device 0 has no room"
                                                 : "host memory exhausted allocating 256.00 TiB of device 0") != NULL);
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
    /* a hang guard: a loaded machine's set-up never takes 300 s */
    ranks_spec spec = {.nranks = 1, .rank_main = child_uses_device, .ctx = be, .timeout_s = 300};
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
        dev_bufs d = dev_bufs_on(g->be, g->st, 0);
        float *a_ = dev_put(&d, a, nn * 4), *b_ = dev_put(&d, b, nn * 4), *c_ = dev_zeros(&d, nn * 4);
        g->rc = DPS_OK;
        for (int t = 0; t < 4 && !g->rc; t++)
            g->rc = g->be->ops->gemm(g->be, g->st, t & 1, t >> 1, g->n, g->n, g->n, 1.0f, a_, g->n,
                                     b_, g->n, 0.0f, c_, g->n);
        dev_bufs_free(&d);
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
    dev_bufs d = dev_bufs_on(be, st, 0);
    float *a_ = dev_put(&d, a, na * 4), *b_ = dev_put(&d, b, nb * 4), *c_ = dev_put(&d, c, nc * 4);
    EXPECT(be->ops->gemm(be, st, ta, tb, m, n, k, 0.75f, a_, lda, b_, ldb, beta, c_, ldc) == DPS_OK);
    dev_get(&d, c, c_, nc * 4);
    dev_bufs_free(&d);
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
    float a1 = 1.0f, b1[2] = {1.0f, 1.0f}, c2[2] = {NAN, NAN}, c3[2] = {4.0f, -2.0f};
    dev_bufs d = dev_bufs_on(be, st, 0);
    float *a1_ = dev_put(&d, &a1, 4), *b1_ = dev_put(&d, b1, sizeof b1); /* B: 1 x 2 for m = 0 */
    float *c2_ = dev_put(&d, c2, sizeof c2), *c3_ = dev_put(&d, c3, sizeof c3);
    EXPECT(be->ops->gemm(be, st, 0, 0, 1, 2, 0, 1.0f, a1_, 1, b1_, 2, 0.0f, c2_, 2) == DPS_OK);
    dev_get(&d, c2, c2_, sizeof c2);
    EXPECT(c2[0] == 0.0f && c2[1] == 0.0f);
    EXPECT(be->ops->gemm(be, st, 1, 0, 1, 2, 0, 1.0f, a1_, 1, b1_, 2, 0.5f, c3_, 2) == DPS_OK);
    dev_get(&d, c3, c3_, sizeof c3);
    EXPECT(c3[0] == 2.0f && c3[1] == -1.0f);
    c2[0] = NAN;
    dev_set(&d, c2_, c2, sizeof c2);
    EXPECT(be->ops->gemm(be, st, 0, 0, 0, 2, 1, 1.0f, a1_, 1, b1_, 2, 0.0f, c2_, 2) == DPS_OK);
    EXPECT(be->ops->gemm(be, st, 0, 0, 1, 0, 1, 1.0f, a1_, 1, b1_, 1, 0.0f, c2_, 1) == DPS_OK);
    dev_get(&d, c2, c2_, sizeof c2);
    EXPECT(isnan(c2[0]));
    dev_bufs_free(&d);
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
    dev_bufs d = dev_bufs_on(be, st, 0);
    float *a_ = dev_put(&d, a, sizeof a), *b_ = dev_put(&d, b, sizeof b), *c_ = dev_zeros(&d, 4);
    const float *bias_ = dev_put(&d, bias, sizeof bias);
    EXPECT(be->ops->gemm(be, st, 0, 0, 1, 1, 2, 1.0f, a_, 2, b_, 1, 0.0f, c_, 1) == DPS_OK);
    dev_get(&d, &c, c_, 4);
    EXPECT(c == want_off); /* a stream starts with TF32 off */
    EXPECT(be->ops->gemm_tf32(be, st, 1) == DPS_OK);
    EXPECT(be->ops->gemm(be, st, 0, 0, 1, 1, 2, 1.0f, a_, 2, b_, 1, 0.0f, c_, 1) == DPS_OK);
    dev_get(&d, &c, c_, 4);
    EXPECT(c == want_on && want_on != want_off);
    EXPECT(be->ops->gemm(be, st, 1, 1, 1, 1, 2, 1.0f, a_, 1, b_, 2, 0.0f, c_, 1) == DPS_OK);
    dev_get(&d, &c, c_, 4);
    EXPECT(c == want_on);
    EXPECT(be->ops->gemm_ex(be, st, 0, 0, 1, 1, 2, 1.0f, a_, BE_F32, 2, b_, BE_F32, 1, 0.0f, c_,
                            BE_F32, 1) == DPS_OK);
    dev_get(&d, &c, c_, 4);
    EXPECT(c == want_on);
    EXPECT(be->ops->gemm_bias(be, st, 0, 0, 1, 1, 2, a_, BE_F32, 2, b_, BE_F32, 1, bias_, c_, BE_F32,
                              1) == DPS_OK);
    dev_get(&d, &c, c_, 4);
    EXPECT(c == want_on + 0.5f);
    dev_get(&d, a, a_, sizeof a);
    dev_get(&d, b, b_, sizeof b);
    EXPECT(a[0] == x && b[1] == x); /* the operands themselves untouched */
    EXPECT(be->ops->gemm_tf32(be, st, 0) == DPS_OK);
    EXPECT(be->ops->gemm(be, st, 0, 0, 1, 1, 2, 1.0f, a_, 2, b_, 1, 0.0f, c_, 1) == DPS_OK);
    dev_get(&d, &c, c_, 4);
    EXPECT(c == want_off);
    dev_bufs_free(&d);
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
    /* the sender running before the GEMMs, however late a loaded machine starts it */
    for (int ms = 0; ms < 300 * 1000 && !atomic_load(&gemm_signals_seen); ms++)
        nanosleep(&(struct timespec){0, 1000 * 1000}, NULL);
    if (!atomic_load(&gemm_signals_seen)) fprintf(stderr, "no signal came within 300 s: hung\n");
    dev_bufs d = dev_bufs_on(be, st, 0);
    float *a_ = a ? dev_put(&d, a, (size_t)N * N * 4) : NULL, *b_ = b ? dev_put(&d, b, (size_t)N * N * 4) : NULL;
    float *c_ = dev_zeros(&d, (size_t)N * N * 4);
    for (int r = 0; a_ && b_ && c_ && r < 8; r++)
        EXPECT(be->ops->gemm(be, st, r & 1, (r >> 1) & 1, N, N, N, 1.0f, a_, N, b_, N, 0.0f, c_,
                             N) == DPS_OK);
    dev_bufs_free(&d);
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

/* A 3x3 convolution of 64 channels on 56x56 pixels, 8 samples, fp32. */
static be_conv conv_example(void)
{
    be_conv cv = {.n = 8, .c = 64, .h = 56, .w = 56, .k = 64, .r = 3, .s = 3, .pad_h = 1,
                  .pad_w = 1, .str_h = 1, .str_w = 1, .dil_h = 1, .dil_w = 1, .groups = 1,
                  .t = BE_F32, .tf32 = 1};
    return cv;
}

/* cudnn.benchmark's choice: the fastest algorithm that ran within the
 * workspace, once per (shape, type, TF32, direction); the workspace Find
 * gets; the output size; the cache's keys, replacement and growth. */
static void test_conv_algo(void)
{
    be_conv cv = conv_example();
    EXPECT(be_conv_out_h(&cv) == 56 && be_conv_out_w(&cv) == 56);
    be_conv st = cv;
    st.str_h = st.str_w = 2;
    st.dil_h = 2;
    EXPECT(be_conv_out_h(&st) == 27 && be_conv_out_w(&st) == 28);
    conv_perf perf[] = {
        {.algo = 0, .math = 0, .ok = 1, .ms = 2.0f, .bytes = 0},
        {.algo = 1, .math = 1, .ok = 0, .ms = 0.1f, .bytes = 0},       /* failed */
        {.algo = 6, .math = 1, .ok = 1, .ms = 0.5f, .bytes = 900},     /* fastest, large */
        {.algo = 7, .math = 1, .ok = 1, .ms = 0.8f, .bytes = 100},
        {.algo = 2, .math = 0, .ok = 1, .ms = 0.8f, .bytes = 50},      /* ties 7: 7 comes first */
    };
    int n = (int)(sizeof perf / sizeof perf[0]);
    EXPECT(conv_algo_pick(perf, n, SIZE_MAX) == 2);
    EXPECT(conv_algo_pick(perf, n, 900) == 2);
    EXPECT(conv_algo_pick(perf, n, 899) == 3);
    EXPECT(conv_algo_pick(perf, n, 60) == 4);
    EXPECT(conv_algo_pick(perf, n, 0) == 0);
    perf[0].ok = 0;
    EXPECT(conv_algo_pick(perf, n, 0) == -1);
    EXPECT(conv_algo_pick(perf, 0, SIZE_MAX) == -1);

    size_t need[] = {0, 4096, SIZE_MAX, 1 << 20, 300};
    EXPECT(conv_find_workspace(need, 5, SIZE_MAX - 1) == 1 << 20);
    EXPECT(conv_find_workspace(need, 5, 5000) == 4096);
    EXPECT(conv_find_workspace(need, 5, 100) == 0);

    conv_cache c = {0};
    conv_key fwd = {cv, CONV_FWD}, bwd = {cv, CONV_BWD_FILTER};
    EXPECT(conv_cache_find(&c, &fwd) == NULL);
    EXPECT(conv_cache_put(&c, &fwd, (conv_choice){6, 1, 900}) == DPS_OK);
    EXPECT(conv_cache_find(&c, &bwd) == NULL);
    EXPECT(conv_cache_put(&c, &bwd, (conv_choice){1, 3, 100}) == DPS_OK);
    const conv_choice *got = conv_cache_find(&c, &fwd);
    EXPECT(got && got->algo == 6 && got->math == 1 && got->bytes == 900);
    EXPECT(conv_cache_max_bytes(&c) == 900);
    /* another type, TF32 setting, group count or padding is another key */
    be_conv other[4] = {cv, cv, cv, cv};
    other[0].t = BE_BF16;
    other[1].tf32 = 0;
    other[2].groups = 2;
    other[3].pad_w = 0;
    for (int i = 0; i < 4; i++) {
        conv_key k = {other[i], CONV_FWD};
        EXPECT(!conv_key_eq(&k, &fwd) && conv_cache_find(&c, &k) == NULL);
    }
    conv_key same = {cv, CONV_FWD};
    same.cv.tf32 = 7; /* any nonzero is on */
    EXPECT(conv_key_eq(&same, &fwd));
    EXPECT(conv_cache_put(&c, &same, (conv_choice){0, 0, 0}) == DPS_OK);
    EXPECT(c.n == 2 && conv_cache_max_bytes(&c) == 100);
    for (int i = 0; i < 40; i++) { /* grows past its first room */
        conv_key k = {cv, CONV_BWD_DATA};
        k.cv.n = 100 + i;
        EXPECT(conv_cache_put(&c, &k, (conv_choice){i, 0, (size_t)i}) == DPS_OK);
    }
    conv_key k39 = {cv, CONV_BWD_DATA};
    k39.cv.n = 139;
    got = conv_cache_find(&c, &k39);
    EXPECT(c.n == 42 && got && got->algo == 39);
    conv_cache_free(&c);
    EXPECT(c.n == 0 && conv_cache_find(&c, &fwd) == NULL);
}

/* Strict mode wraps exactly the host backend's ops: an op the host has and
 * strict mode lacks would be a NULL call under --strict, and one strict mode
 * has where the host has none (a convolution) would send the graph down a
 * path the host cannot run. */
static void test_strict_table(void)
{
    be_options o = {.kind = BE_HOST, .host_devices = 1, .quiet = 1};
    backend *be = NULL;
    EXPECT(be_open(&o, &be) == DPS_OK);
    if (!be) return;
    const be_ops *host = be->strict ? strict_inner(be) : be->ops;
    enum { SLOTS = sizeof(be_ops) / sizeof(void (*)(void)) };
    void (*h[SLOTS])(void), (*w[SLOTS])(void);
    memcpy(h, host, sizeof h);
    memcpy(w, &strict_ops, sizeof w);
    for (int i = 0; i < SLOTS; i++) {
        if ((h[i] == NULL) != (w[i] == NULL))
            fprintf(stderr, "be_ops slot %d: the host's is %s, strict mode's %s (src/backend/strict_ops.c)\n",
                    i, h[i] ? "set" : "NULL", w[i] ? "set" : "NULL");
        EXPECT((h[i] == NULL) == (w[i] == NULL));
    }
    be_close(be);
}

/* A child that dereferences p on the host; its exit status, its stderr in err. */
static int child_reads(const void *p, char *err, size_t len)
{
    int fds[2];
    if (pipe(fds) != 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        float v = *(const volatile float *)p;
        _exit(v == 12345.0f ? 1 : 0); /* not reached when the read faults */
    }
    close(fds[1]);
    size_t n = 0;
    for (ssize_t r; n + 1 < len && (r = read(fds[0], err + n, len - 1 - n)) > 0;) n += (size_t)r;
    err[n] = '\0';
    close(fds[0]);
    int ws = 0;
    waitpid(pid, &ws, 0);
    return ws;
}

/* Strict device memory (backend/host_devmem.h): two devices' allocations in
 * the device view, reached by the host ops through the alias, an op on
 * another device's memory refused, what an address is, and a host read of
 * device memory ending its process with the allocation named, while any
 * other fault still reaches the handler before it. */
static void test_strict_devmem(void)
{
    float *d0 = NULL, *d1 = NULL, local = 0.0f;
    EXPECT(host_devmem_alloc(0, 1000, (void **)&d0) == DPS_OK);
    EXPECT(host_devmem_alloc(1, 64, (void **)&d1) == DPS_OK);
    if (!d0 || !d1) return;
    host_devmem_name(d0, "gradients");
    EXPECT(host_dev_of(d0) == 0 && host_dev_of(d1) == 1 && host_dev_of(&local) == -1);
    EXPECT(host_dev_rw(&local) == &local && host_dev_rw(d0) != d0 && host_dev_rw(NULL) == NULL);
    float *a0 = host_dev_rw(d0);
    for (int i = 0; i < 250; i++) a0[i] = (float)i;
    backend *be = NULL;
    be_options bo = {.kind = BE_HOST, .host_devices = 2, .quiet = 1};
    EXPECT(be_open(&bo, &be) == DPS_OK);
    be_stream *st = expect_stream(be);
    if (st) {
        EXPECT(be->ops->scale(be, st, 250, d0, 2.0f) == DPS_OK);
        EXPECT(a0[0] == 0.0f && a0[249] == 498.0f);
        EXPECT(be->ops->add(be, st, 16, d0, d1) == DPS_ERR_RUNTIME &&
               strstr(dps_errmsg(), "add on a stream of device 0") &&
               strstr(dps_errmsg(), "device 1's") && strstr(dps_errmsg(), "peer access"));
    }
    char what[256];
    host_devmem_describe((char *)d0 + 12, what, sizeof what);
    EXPECT(strcmp(what, "12 bytes into device 0's \"gradients\" (1000 bytes)") == 0);
    host_devmem_describe((char *)d0 + 1010, what, sizeof what);
    EXPECT(strstr(what, "outside every live allocation, 10 bytes past the end of device 0's"));
    EXPECT(host_devmem_free(d1) && !host_devmem_free(&local));
    host_devmem_describe(d1, what, sizeof what);
    EXPECT(strstr(what, "0 bytes into a freed allocation, device 1's \"unnamed\" (64 bytes)"));
    char err[4096];
    int ws = child_reads(d0 + 1, err, sizeof err);
    EXPECT(WIFEXITED(ws) && WEXITSTATUS(ws) == HOST_DEVMEM_EXIT);
    EXPECT(strstr(err, "the host dereferenced a device pointer") &&
           strstr(err, "4 bytes into device 0's \"gradients\" (1000 bytes) (SIGSEGV)"));
    void *guard = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (guard != MAP_FAILED) { /* not device memory: the earlier handler's fault */
        ws = child_reads(guard, err, sizeof err);
        EXPECT(!(WIFEXITED(ws) && WEXITSTATUS(ws) == HOST_DEVMEM_EXIT) &&
               !strstr(err, "device pointer"));
        munmap(guard, 4096);
    }
    expect_stream_free(be, st);
    be_close(be);
    EXPECT(host_devmem_free(d0));
}

EXPECT_GROUPS(GROUP(elementwise), GROUP(activations), GROUP(windows), GROUP(grouped_windows), GROUP(host_math), GROUP(col_sum), GROUP(grad_sums), GROUP(norm_fwd),
              GROUP(autocast_ops),
              GROUP(f16), GROUP(unscale),
              GROUP(scale_copy), GROUP(accounting), GROUP(cublas_workspace), GROUP(versions),
              GROUP(nvml),
              GROUP(backend_auto), GROUP(nvml_fields), GROUP(nvml_stub), GROUP(context),
              GROUP(gemm), GROUP(gemm_signals), GROUP(null_stream), GROUP(strict_async),
              GROUP(strict_async_error), GROUP(cuda_ops),
              GROUP(conv_algo), GROUP(strict_table), GROUP(strict_devmem));
