/* Unit tests of strategies/: dp's chunks, the slowdown injection, dp under
 * autocast, the footprint's GEMM workspaces. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "config/config.h"
#include "strategies/dp.h"
#include "strategies/footprint.h"
#include "strategies/ptimer.h"
#include "strategies/scaler.h"

#include "expect.h"

static void expect_chunks(int batch, int n, const int *want, int want_chunks)
{
    int got[64];
    int k = dp_chunk_sizes(batch, n, got);
    EXPECT(k == want_chunks);
    for (int i = 0; i < n; i++)
        if (got[i] != want[i]) {
            fprintf(stderr, "chunk(%d, %d)[%d] = %d, expected %d\n", batch, n, i, got[i], want[i]);
            failures++;
        }
}

static void test_chunk(void)
{
    expect_chunks(10, 4, (int[]){3, 3, 3, 1}, 4);
    expect_chunks(5, 4, (int[]){2, 2, 1, 0}, 3);  /* torch.chunk: only 3 chunks */
    expect_chunks(8, 4, (int[]){2, 2, 2, 2}, 4);
    expect_chunks(2, 4, (int[]){1, 1, 0, 0}, 2);
    expect_chunks(7, 1, (int[]){7}, 1);
    expect_chunks(9, 2, (int[]){5, 4}, 2);
    expect_chunks(6, 4, (int[]){2, 2, 2, 0}, 3);
    expect_chunks(1, 3, (int[]){1, 0, 0}, 1);
    /* the sizes always add up to the batch */
    for (int b = 1; b < 70; b++)
        for (int n = 1; n <= 8; n++) {
            int got[8], sum = 0;
            dp_chunk_sizes(b, n, got);
            for (int i = 0; i < n; i++) sum += got[i];
            EXPECT(sum == b);
        }
}

/* One timed step of a phase whose work keeps the stream busy work_ms. */
static float timed_phase(phase_timer *t, dps_phase ph, double work_ms)
{
    float ms[PH_COUNT];
    ptimer_reset(t);
    EXPECT(ptimer_begin(t, 0, ph) == DPS_OK);
    EXPECT(t->be->ops->spin(t->be, t->stream[0], work_ms * 1e3) == DPS_OK);
    EXPECT(ptimer_end(t, 0, ph) == DPS_OK);
    EXPECT(t->be->ops->stream_sync(t->be, t->stream[0]) == DPS_OK);
    EXPECT(ptimer_read(t, 0, ms) == DPS_OK);
    return ms[ph];
}

/* --inject-slowdown: a compute phase is stretched by the fraction of its
 * unstretched time in the previous step (none in the first step), the
 * stretch does not compound, a copy phase is left alone, and a slowdown
 * of another slot leaves this one alone. */
static void test_slowdown(void)
{
    be_options o = {.kind = BE_HOST, .host_devices = 1, .quiet = 1};
    backend *be = NULL;
    be_stream *st = NULL;
    EXPECT(be_open(&o, &be) == DPS_OK);
    if (!be) return;
    EXPECT(be->ops->stream_create(be, 0, &st) == DPS_OK);
    phase_timer t;
    int dev = 0;
    EXPECT(ptimer_init(&t, be, 1, &dev, &st) == DPS_OK);
    ptimer_set_slowdown(&t, 0.5, 1); /* another slot's (--inject-slowdown 50@1): none here */
    timed_phase(&t, PH_FORWARD, 1.0);
    timed_phase(&t, PH_FORWARD, 1.0);
    EXPECT(t.spun_ms[0][PH_FORWARD] == 0.0f && t.base_ms[0][PH_FORWARD] > 0.0f);
    ptimer_set_slowdown(&t, 0.5, 0);
    float first = timed_phase(&t, PH_FORWARD, 4.0);
    EXPECT(first >= 4.0f);
    for (int step = 0; step < 3; step++) {
        float ms = timed_phase(&t, PH_FORWARD, 4.0);
        EXPECT(ms >= 4.0f * 1.5f * 0.999f); /* 4 ms of work, 2 of stretch (or more) */
        EXPECT(t.base_ms[0][PH_FORWARD] < ms - 1.9f); /* what comes next is not compounded */
    }
    timed_phase(&t, PH_SCATTER, 4.0);
    float copy = timed_phase(&t, PH_SCATTER, 4.0);
    EXPECT(copy >= 4.0f && t.spun_ms[0][PH_SCATTER] == 0.0f);
    ptimer_free(&t);
    be->ops->stream_destroy(be, st);
    be_close(be);
}

/* dp over 2 host devices for 3 steps of a small model, in fp32 or as
 * under autocast (the host backend's exact half-precision emulation), in
 * `accum` micro-steps, into *r; its peaks checked against footprint.c's.
 * 0 if it failed to run. */
static int dp_two_devices(dps_precision prec, int accum, train_result *r)
{
    be_options o = {.kind = BE_HOST, .host_devices = 2, .quiet = 1};
    backend *be = NULL;
    if (be_open(&o, &be) != DPS_OK || !be) return 0;
    dps_config c;
    config_defaults(&c);
    c.mode = MODE_DP;
    c.shape = (model_shape){2, 64, 4, 48};
    c.ngpus = 2;
    c.devices[0] = 0;
    c.devices[1] = 1;
    c.global_batch = 6;
    c.accum = accum;
    c.warmup = 0;
    c.steps = 3;
    c.trace_steps = 0;
    c.precision = prec;
    dps_status rc = train_result_init(r, &c, c.ngpus);
    if (!rc) rc = dp_train(&c, be, r);
    if (!rc) {
        footprint fp;
        footprint_of(&c, be, &fp);
        for (int i = 0; i < 2; i++) EXPECT(r->dev[i].alloc_peak == fp.device[i]);
        for (int i = 0; i < 2; i++) EXPECT(be->mem[i].in_use == 0);
    }
    be_close(be);
    if (rc) fprintf(stderr, "dp %s accum %d: %s\n", dps_precision_name(prec), accum, dps_errmsg());
    return rc == DPS_OK;
}

/* dp under autocast gathers half-precision logits and scatters their
 * gradient in it, as DataParallel does: half the logits' bytes between the
 * devices, losses within 3 % of fp32's, memory as footprint.c says. */
static void test_dp_bf16(void)
{
    static train_result res[3];
    train_result *f32 = &res[0];
    EXPECT(dp_two_devices(PREC_FP32, 1, f32));
    for (int h = 1; h <= 2; h++) {
        train_result *half = &res[h];
        EXPECT(dp_two_devices(h == 1 ? PREC_BF16 : PREC_FP16, 1, half));
        for (int k = 0; k < 3; k++) EXPECT(fabs(half->loss[k] - f32->loss[k]) <= 0.03 * f32->loss[k]);
        /* device 1: 3 samples of 4 tokens, 48 classes: its logits sent, their gradient received */
        double bytes = 3 * 4 * 48 * 2.0;
        EXPECT(half->dev[1].link_bytes[LINK_P2P_SENT] == f32->dev[1].link_bytes[LINK_P2P_SENT] - bytes);
        EXPECT(half->dev[1].link_bytes[LINK_P2P_RECV] == f32->dev[1].link_bytes[LINK_P2P_RECV] - bytes);
    }
    for (int i = 0; i < 3; i++) train_result_free(&res[i]);
}

/* dp with gradient accumulation: 3 micro-steps of the 6 samples a step
 * has without it train the same (the step's mean gradient, to fp32's
 * rounding) with micro-batch-sized buffers, the accumulated gradients
 * beside them, and fp16's GradScaler, as footprint.c says. */
static void test_dp_accum(void)
{
    static train_result one, three, f16;
    EXPECT(dp_two_devices(PREC_FP32, 1, &one));
    EXPECT(dp_two_devices(PREC_FP32, 3, &three));
    EXPECT(dp_two_devices(PREC_FP16, 3, &f16));
    if (one.losses_done == 3 && three.losses_done == 3) {
        for (int k = 0; k < 3; k++) EXPECT(fabs(three.loss[k] - one.loss[k]) <= 1e-5 * one.loss[k]);
        EXPECT(three.dev[0].alloc_peak != one.dev[0].alloc_peak);
    }
    for (int k = 0; k < f16.steps_done; k++)
        EXPECT(f16.scaler[k].scale == 65536.0f && f16.scaler[k].skipped == 0);
    train_result_free(&one);
    train_result_free(&three);
    train_result_free(&f16);
}

/* On the cuda backend each stream that runs GEMMs holds cuBLAS's workspace,
 * sized by its device's compute capability (a backend described, not
 * opened: the footprint reads only its kind and the probe's devices): dp's
 * replicas and ddp's ranks one each, the --check reference's on device 0;
 * the host backend none. */
static void test_footprint_workspace(void)
{
    static backend cuda; /* zeroed: no ops, never opened */
    cuda.kind = BE_CUDA;
    cuda.ndev = 3;
    int major[3] = {9, 8, 12};
    for (int d = 0; d < 3; d++) cuda.info[d].cc_major = major[d];
    be_options o = {.kind = BE_HOST, .host_devices = 3, .quiet = 1};
    backend *host = NULL;
    EXPECT(be_open(&o, &host) == DPS_OK);
    if (!host) return;
    unsetenv("CUBLAS_WORKSPACE_CONFIG");
    const uint64_t want[3] = {33554432, 8519680, 33554432};
    for (int mode = 0; mode < 2; mode++) {
        dps_config c;
        config_defaults(&c);
        c.mode = mode ? MODE_DDP : MODE_DP;
        c.shape = (model_shape){2, 64, 4, 48};
        c.ngpus = 3;
        for (int d = 0; d < 3; d++) c.devices[d] = d;
        c.global_batch = 6;
        c.precision = PREC_BF16;
        footprint on_gpu, on_host;
        footprint_of(&c, &cuda, &on_gpu);
        footprint_of(&c, host, &on_host);
        for (int d = 0; d < 3; d++) EXPECT(on_gpu.device[d] - on_host.device[d] == want[d]);
        EXPECT(on_gpu.total == on_gpu.host && on_host.total == on_host.host + on_host.devices);
    }
    setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8", 1);
    dps_config c;
    config_defaults(&c);
    c.shape = (model_shape){2, 64, 4, 48};
    c.ngpus = 1;
    c.global_batch = 2;
    footprint on_gpu, on_host;
    footprint_of(&c, &cuda, &on_gpu);
    footprint_of(&c, host, &on_host);
    EXPECT(on_gpu.device[0] - on_host.device[0] == 131072);
    unsetenv("CUBLAS_WORKSPACE_CONFIG");
    be_close(host);
}

/* GradScaler's update rules (torch.cuda.amp.GradScaler, growth 2, backoff
 * 0.5): an overflow halves the scale and restarts the count; growth_interval
 * clean steps in a row double it. */
static void test_scaler(void)
{
    grad_scaler g = {.on = 1, .scale = 65536.0f, .growth_interval = 3};
    static const int found[] = {0, 0, 0, 0, 1, 0, 0, 1, 1, 0, 0, 0};
    static const float want[] = {65536, 65536, 65536, 131072, 131072, 65536, 65536, 65536,
                                 32768, 16384, 16384, 16384};
    for (size_t k = 0; k < sizeof found / sizeof found[0]; k++) {
        EXPECT(g.scale == want[k]); /* the scale step k's loss is multiplied by */
        scaler_update(&g, found[k]);
    }
    EXPECT(g.scale == 32768.0f);
    grad_scaler off = {.on = 0, .scale = 65536.0f};
    EXPECT(scaler_loss_factor(&off) == 1.0f && scaler_loss_factor(&g) == g.scale);
}

EXPECT_GROUPS(GROUP(chunk), GROUP(slowdown), GROUP(dp_bf16), GROUP(dp_accum),
              GROUP(footprint_workspace), GROUP(scaler));
