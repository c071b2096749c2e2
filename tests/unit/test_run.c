/* Unit tests of run/ and the results it writes: the GEMMs-alone reference,
 * the relative difference of a check, suite files, a step's all-reduce
 * time from the ranks' spans, a step's partition and a collective's wait. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "config/timeline.h"
#include "run/run.h"
#include "run/suite.h"
#include "results/results_ids.h"
#include "results/step_parts.h"

#include "expect.h"

/* The GEMMs-alone reference in fp32 and as under autocast (bf16 operands
 * on the host backend's emulation): a rate, every buffer freed. */
static void test_gemm_reference(void)
{
    be_options o = {.kind = BE_HOST, .host_devices = 1, .quiet = 1};
    backend *be = NULL;
    EXPECT(be_open(&o, &be) == DPS_OK);
    if (!be) return;
    model_shape s = {2, 64, 4, 96};
    for (int bf16 = 0; bf16 < 2; bf16++) {
        double tflops = 0;
        EXPECT(run_gemm_reference(be, 0, s, 32, bf16 ? PREC_BF16 : PREC_FP32, TF32_DEFAULT, &tflops) == DPS_OK &&
               tflops > 0);
        EXPECT(be->mem[0].in_use == 0);
    }
    be_close(be);
}

static void test_rel_diff(void)
{
    float a[] = {1.0f, 2.0f, -4.0f}, b[] = {1.0f, 2.0f, -4.0f}, c[] = {1.0f, 2.5f, -4.0f};
    EXPECT(run_max_rel_diff(a, b, 3) == 0.0);
    EXPECT_NEAR(run_max_rel_diff(c, b, 3), 0.5 / 4.0, 1e-12);
    float z[] = {0.0f}, nanv[] = {NAN};
    EXPECT(run_max_rel_diff(z, z, 1) == 0.0);
    EXPECT(isinf(run_max_rel_diff(a, z, 1)));
    EXPECT(isnan(run_max_rel_diff(nanv, b, 1)) || run_max_rel_diff(nanv, b, 1) > 1);
}

static dps_status load_suite_host(const char *path)
{
    suite s;
    dps_status rc = suite_load(path, BE_HOST, &s);
    suite_free(&s);
    return rc;
}

/* A suite file refused at "<path>:<needle>". */
static void expect_suite_error(const char *text, size_t len, const char *needle)
{
    char colon[256];
    snprintf(colon, sizeof colon, ":%s", needle);
    expect_data_refused(load_suite_host, text, len, colon);
}

/* Added sweeps: each a copy of what is above it on this backend, its own
 * keys over it; another backend's only checked. */
static void test_added_sweeps(void)
{
    const char *text = "models = tiny\ngpus = 2\n[host]\nsteps = 4\n[+ acc]\naccum = 1, 4\n"
                       "[cuda + half]\nprecisions = bf16\n[host + half]\nprecisions = fp16\n"
                       "[host]\nwarmup = 2\n";
    suite s;
    const char *path = write_tmp("added", text, strlen(text));
    EXPECT(suite_load(path, BE_HOST, &s) == DPS_OK);
    EXPECT(s.nadded == 2 && s.naccum == 0 && s.warmup == 2);
    if (s.nadded == 2) {
        EXPECT(strcmp(s.added[0].name, "acc") == 0 && s.added[0].naccum == 2 &&
               s.added[0].accum[1] == 4 && s.added[0].steps == 4 && s.added[0].warmup == 0);
        EXPECT(strcmp(s.added[1].name, "half") == 0 && s.added[1].precisions[0] == PREC_FP16 &&
               s.added[1].naccum == 0 && s.added[1].ngpus == 1);
    }
    suite_free(&s);
    EXPECT(suite_load(path, BE_CUDA, &s) == DPS_OK);
    EXPECT(s.nadded == 2 && s.added[1].precisions[0] == PREC_BF16 && s.added[1].steps == 0);
    suite_free(&s);
    unlink(path);
}

static void test_suite(void)
{
    const char *good = "# comment\nmodes = ddp   # trailing comment\ngpus = 1, 2\n"
                       "batch = weak, strong\n[cuda]\nmodels = resnet50\nprecisions = bf16\n"
                       "[host]\r\nmodels = tiny, small\r\nsteps = 4\n";
    suite s;
    const char *path = write_tmp("good", good, strlen(good));
    EXPECT(suite_load(path, BE_HOST, &s) == DPS_OK);
    EXPECT(s.nmodes == 1 && s.modes[0] == MODE_DDP && s.ngpus == 2 && s.gpus[1] == 2);
    EXPECT(s.nmodels == 2 && strcmp(s.models[1], "small") == 0 && s.steps == 4);
    EXPECT(s.nprecisions == 1 && s.precisions[0] == PREC_FP32 && s.npolicies == 2);
    EXPECT(suite_load(path, BE_CUDA, &s) == DPS_OK);
    EXPECT(s.nmodels == 1 && strcmp(s.models[0], "resnet50") == 0 && s.precisions[0] == PREC_BF16);
    unlink(path);
    expect_suite_error("modes = dp\ncolour = blue\n", 23, "2: unknown key");
    expect_suite_error("gpus = 1, x\n", 12, "1: gpus = x: expected an integer from 1 to 64");
    expect_suite_error("models = tiny,,small\n", 21, "1: models = tiny,,small: empty entry in the list");
    expect_suite_error("models = ,tiny\n", 15, "1: models = ,tiny: empty entry in the list");
    expect_suite_error("gpus = 1,\n", 10, "1: gpus = 1,: empty entry in the list");
    expect_suite_error("gpus = 1, 1\n", 12, "1: gpus = 1, 1: listed twice: '1'");
    expect_suite_error("models = tiny, small, tiny\n", 27,
                       "1: models = tiny, small, tiny: listed twice: 'tiny'");
    expect_suite_error("bucket_mb = 25, 25.0\n", 21, "1: bucket_mb = 25, 25.0: listed twice: '25.0'");
    expect_suite_error("\n\nmodels =\n", 12, "3: empty value for 'models'");
    expect_suite_error("models = huge\n", 14, "1: models = huge: unknown preset");
    expect_suite_error("modes = dp, dp\n", 15, "1: modes = dp, dp: listed twice: 'dp'");
    expect_suite_error("steps = 1, 2\n", 13, "1: steps = 1, 2: expected one value");
    expect_suite_error("[gpu]\n", 6, "1: unknown section");
    expect_suite_error("models = tiny\n[gpu + x]\n", 24, "2: unknown section");
    expect_suite_error("models = tiny\n[+ ]\n", 19, "2: an added sweep needs a short name");
    expect_suite_error("[+ a]\nsteps = 4\nsteps = 5\n", 26, "3: given again");
    expect_suite_error("steps = 0\n", 10, "1: steps = 0: expected an integer from 1");
    expect_suite_error("just words\n", 11, "1: expected key = value");
    expect_suite_error("[cuda]\nmodels = nope\n", 21, "2: models = nope: unknown preset"); /* checked off-backend too */
    static const unsigned char garbage[] = {0x7f, 'E', 'L', 'F', 0x02, 0x01, 0x00, 0x00, 0x03};
    expect_suite_error((const char *)garbage, sizeof garbage, "1: not a text");
    static const char nul[] = "modes = dp\nmo\0des = ddp\n";
    expect_suite_error(nul, sizeof nul - 1, "2: not a text file (NUL byte)");
    expect_suite_error("", 0, " no settings");
    expect_suite_error("# only a comment\n\n", 18, " no settings");
    expect_suite_error("steps = 4\nmodels = tiny\nsteps = 5\n", 33,
                       "3: given again (first at line 1): 'steps'");
    expect_suite_error("[host]\nsteps = 4\n[host]\nsteps = 5\n", 35, "4: given again");
    test_added_sweeps();
    static const char bom[] = "\xEF\xBB\xBFmodels = tiny\nsteps = 3\n";
    path = write_tmp("bom", bom, sizeof bom - 1);
    EXPECT(suite_load(path, BE_HOST, &s) == DPS_OK && s.steps == 3); /* a BOM is skipped */
    unlink(path);
    EXPECT(suite_load("/dev/null", BE_HOST, &s) == DPS_ERR_USAGE); /* not a regular file */
    EXPECT(strstr(dps_errmsg(), "not a regular file") != NULL);
    EXPECT(suite_load("/nonexistent/x.suite", BE_HOST, &s) == DPS_ERR_USAGE);
    EXPECT(strstr(dps_errmsg(), "/nonexistent/x.suite: cannot read the suite file") != NULL);
}

/* One made-up span of rank r in traced step t. */
static void put_span(timeline *tl, int t, int r, int i, double begin_ms, double ms, uint64_t bytes)
{
    timeline_spans(tl, t, r)[i] = (tl_span){begin_ms, ms, bytes, i, 0.0, 0, 0, PH_BACKWARD};
    if (*timeline_nspans(tl, t, r) <= i) *timeline_nspans(tl, t, r) = i + 1;
}

/* A step's all-reduce time from the ranks' spans: per bucket the last
 * rank's end minus the last rank's begin, on the clock the references
 * align; rank 0 waits 2 ms in bucket 0 for rank 1, which the slowest
 * rank's own sum (4 ms) would count as transfer. */
static void test_busbw(void)
{
    timeline tl;
    EXPECT(timeline_alloc(&tl, 2, 2, 4, 1) == DPS_OK);
    tl.ref_wall_ms[0] = 1.7e12;
    tl.ref_wall_ms[1] = 1.7e12 + 0.5; /* rank 1's reference half a ms later */
    put_span(&tl, 0, 0, 0, 1.0, 3.0, 600); /* 1..4 */
    put_span(&tl, 0, 1, 0, 2.5, 1.0, 600); /* 3..4 on rank 0's clock */
    put_span(&tl, 0, 0, 1, 5.0, 1.0, 400); /* 5..6 */
    put_span(&tl, 0, 1, 1, 5.0, 0.5, 400); /* 5.5..6 */
    EXPECT_NEAR(run_allreduce_span_ms(&tl, 0, 1000.0), 1.0 + 0.5, 1e-9);
    EXPECT(run_allreduce_span_ms(&tl, 0, 1200.0) == -1.0); /* spans short of the bytes */
    EXPECT(run_allreduce_span_ms(&tl, 1, 1000.0) == -1.0); /* a step without spans */
    put_span(&tl, 1, 0, 0, 0.0, 2.0, 1000);
    EXPECT(run_allreduce_span_ms(&tl, 1, 1000.0) == -1.0); /* rank 1 lacks its span */
    put_span(&tl, 1, 1, 0, 1.0, 2.0, 1000); /* 1.5..3.5: ends after rank 0 */
    EXPECT_NEAR(run_allreduce_span_ms(&tl, 1, 1000.0), 3.5 - 1.5, 1e-9);
    timeline_free(&tl);
}

/* A step's partition, known: ddp rank 0 ran 10 ms of phases in a 12 ms
 * step (2 ms waiting for rank 1), its collectives 3 ms, 1 of them exposed
 * after backward, so 2 overlapped; dp's device 1 idles while device 0
 * runs its serial part (loss and optimizer), and beyond it in host gaps.
 * The parts sum to the step. */
static void test_partition(void)
{
    double step[1] = {12.0}, rank_step[2] = {10.0, 12.0};
    float ph[2][PH_COUNT] = {{0}};
    ph[0][PH_LOAD] = 0.5f;
    ph[0][PH_FORWARD] = 3.0f;
    ph[0][PH_LOSS] = 0.5f;
    ph[0][PH_BACKWARD] = 4.0f;
    ph[0][PH_ALLREDUCE] = 3.0f;
    ph[0][PH_ALLREDUCE_EXPOSED] = 1.0f;
    ph[0][PH_OPTIMIZER] = 1.0f;
    ph[1][PH_FORWARD] = 5.0f;
    train_result res = {.nranks = 2, .steps_done = 1, .step_ms = step, .rank_step_ms = rank_step,
                        .phase_ms = &ph[0][0]};
    dps_config c = {.mode = MODE_DDP};
    double p[PART_COUNT], want[PART_COUNT] = {8.5 - 2.0, 2.0, 1.0, 0.5, 2.0, 0.0};
    step_partition(&c, &res, 0, 0, p);
    double sum = 0.0;
    for (int i = 0; i < PART_COUNT; i++) {
        EXPECT_NEAR(p[i], want[i], 1e-6);
        sum += p[i];
    }
    EXPECT_NEAR(sum, 12.0, 1e-6);
    step_partition(&c, &res, 0, 1, p); /* rank 1: 5 ms of compute, 7 ms of host gaps */
    EXPECT_NEAR(p[PART_COMPUTE], 5.0, 1e-6);
    EXPECT_NEAR(p[PART_WAIT_PEER], 0.0, 1e-6);
    EXPECT_NEAR(p[PART_IDLE_HOST], 7.0, 1e-6);
    c.mode = MODE_DP; /* dp: device 1 waits for device 0's loss and optimizer (1.5 ms) */
    rank_step[0] = 12.0;
    step_partition(&c, &res, 0, 1, p);
    EXPECT_NEAR(p[PART_WAIT_PEER], 1.5, 1e-6);
    EXPECT_NEAR(p[PART_IDLE_HOST], 7.0 - 1.5, 1e-6);
    step_partition(&c, &res, 0, 0, p);
    EXPECT_NEAR(p[PART_WAIT_PEER], 0.0, 1e-6);
    EXPECT_NEAR(p[PART_IDLE_HOST], 12.0 - 10.0, 1e-6);
}

/* Waiting vs moving and lateness, known: three ranks begin their step at
 * 0, 1 and 0 ms on their own clocks; rank 2's bucket is ready 4 ms after
 * its step began, the others' after 1 ms, so rank 2 arrives last and its
 * collective is the shortest (the transfer), the others' excess their wait. */
static void test_span_parts(void)
{
    timeline tl;
    EXPECT(timeline_alloc(&tl, 1, 3, 2, 1) == DPS_OK);
    const double begin[3] = {0.0, 1.0, 0.0}, ready[3] = {1.0, 2.0, 4.0}, ms[3] = {4.5, 4.0, 1.5};
    for (int r = 0; r < 3; r++) {
        timeline_micro(&tl, 0, r, 0)[PH_LOAD] = (tl_phase){.begin_ms = (float)begin[r], .on = 0, .ms = 0.1f};
        put_span(&tl, 0, r, 0, ready[r], ms[r], 1000);
        timeline_spans(&tl, 0, r)[0].ready_ms = ready[r];
    }
    span_parts p = step_span_parts(&tl, 0, 0, 0);
    EXPECT_NEAR(p.transfer_ms, 1.5, 1e-9);
    EXPECT_NEAR(p.wait_ms, 3.0, 1e-9);
    EXPECT_NEAR(p.late_ms, 1.0 - 2.5, 1e-9); /* against the median of 1 and 4 */
    EXPECT_NEAR(p.ready_step_ms, 1.0, 1e-9);
    EXPECT_NEAR(step_span_parts(&tl, 0, 1, 0).ready_step_ms, 2.0 - 1.0, 1e-9);
    p = step_span_parts(&tl, 0, 2, 0);
    EXPECT_NEAR(p.wait_ms, 0.0, 1e-9);
    EXPECT_NEAR(p.late_ms, 4.0 - 1.0, 1e-9);
    p = step_span_parts(&tl, 0, 0, 1); /* no span 1 */
    EXPECT(isnan(p.wait_ms) && isnan(p.late_ms));
    timeline_free(&tl);
}

/* --resume reads a runs.csv of n rows in O(n): 100 000 finished
 * configurations (and one twice, kept once) found with fewer than 10 slot
 * comparisons a row (the index built, rebuilt as it doubles, and searched:
 * about 5 here), where comparing each with those before it would take 5e9.
 * A count, not a time: the same on any machine. */
static void test_resume_rows(void)
{
    enum { ROWS = 100000 };
    char dir[] = "/tmp/dpscale-resume-XXXXXX", path[64];
    EXPECT(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/runs.csv", dir);
    FILE *f = fopen(path, "w");
    EXPECT(f != NULL);
    if (!f) return;
    fprintf(f, "config_id,status\n");
    for (int i = 0; i < ROWS; i++) fprintf(f, "c%06d,ok\n", i);
    fprintf(f, "c000007,ok\n");
    fclose(f);
    results_ids done = {0};
    EXPECT(results_ids_finished(dir, &done) == DPS_OK);
    EXPECT(done.n == ROWS);
    EXPECT(done.probes > 0 && done.probes < 10L * ROWS);
    if (done.probes >= 10L * ROWS) fprintf(stderr, "%ld probes for %d rows\n", done.probes, ROWS);
    EXPECT(results_ids_has(&done, "c099999") && results_ids_has(&done, "c000007"));
    results_ids_free(&done);
    unlink(path);
    rmdir(dir);
}

EXPECT_GROUPS(GROUP(gemm_reference), GROUP(rel_diff), GROUP(suite), GROUP(busbw),
              GROUP(partition), GROUP(span_parts), GROUP(resume_rows));
