/* Unit tests of predict/: the predictor's input files, constants and model. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "predict/predict_calib.h"
#include "predict/predict_input.h"
#include "predict/predict_model.h"

#include "expect.h"

static dps_status load_machine(const char *path)
{
    predict_machine m;
    return predict_machine_load(path, &m);
}

static dps_status load_workload(const char *path)
{
    predict_workload w;
    dps_status rc = predict_workload_load(path, &w);
    if (!rc) predict_workload_free(&w);
    return rc;
}

static dps_status load_consts(const char *path)
{
    predict_consts c;
    predict_consts_default(&c);
    return predict_consts_load(path, &c);
}

static void test_predict_files(void)
{
    const char *mtext = "# a DGX-1\nname = dgx1  # comment\ngpus_per_node = 8\nnodes = 2\n"
                        "gpu_mem_gib = 16\nintra_link = nvlink\nintra_busbw_gbps = 120\r\n"
                        "inter_gbps = 50\n";
    predict_machine m;
    const char *path = write_tmp("m", mtext, strlen(mtext));
    EXPECT(predict_machine_load(path, &m) == DPS_OK);
    EXPECT(strcmp(m.name, "dgx1") == 0 && m.gpus_per_node == 8 && m.nodes == 2);
    EXPECT(m.intra_link == PLINK_NVLINK && m.intra_busbw_gbps == 120 && m.inter_gbps == 50);
    EXPECT(m.p2p_gbps == 120 && m.h2d_gbps == 12 && m.mem_gbps == 900); /* defaults */
    EXPECT(m.intra_latency_us == 3.4 && m.inter_latency_us == 9.6 && m.gpu_mem_gib == 16);
    unlink(path);
    const char *wtext = "params = 25.6e6\nstep_ms_1gpu = 97\nbatch_per_gpu = 32\noptimizer = adamw\n"
                        "bytes_per_grad = 2\n";
    predict_workload w;
    path = write_tmp("resnet.workload", wtext, strlen(wtext));
    EXPECT(predict_workload_load(path, &w) == DPS_OK);
    EXPECT(strstr(w.name, "resnet") != NULL && strstr(w.name, ".workload") == NULL);
    EXPECT(w.params == 25.6e6 && w.step_ms_1gpu == 97 && w.batch_per_gpu == 32);
    EXPECT(w.optimizer == OPT_ADAMW && w.bytes_per_grad == 2 && w.bucket_mb == 25);
    EXPECT(w.first_bucket_mb == 1 && w.forward_ms < 0 && w.optimizer_ms < 0);
    unlink(path);
    mtext = "gpus_per_node = 8\nintra_busbw_gbps = 10\n";
    path = write_tmp("m", mtext, strlen(mtext));
    EXPECT(predict_machine_load(path, &m) == DPS_OK && m.nodes == 0 && m.inter_gbps == 0);
    unlink(path);
    expect_file_refused(load_machine, "gpus_per_node = 8\ncolour = blue\n", ":2: unknown key 'colour' (expected name,");
    expect_file_refused(load_machine, "gpus_per_node = 8\nintra_busbw_gbps = 0\n",
                         ":2: intra_busbw_gbps = 0: expected a number above 0, at most 1e+06 (GB/s)");
    expect_file_refused(load_machine, "intra_link = ib\n", ":1: intra_link = ib: expected one of nvlink, pcie, host");
    expect_file_refused(load_machine, "gpus_per_node = 2.5\n", ":1: gpus_per_node = 2.5: expected an integer from 1");
    expect_file_refused(load_machine, "inter_latency_us = -1\n", ":1: inter_latency_us = -1: expected a number from 0");
    expect_file_refused(load_machine, "nodes = 2\n\nnodes = 3\n", ":3: 'nodes' given again (first at line 1)");
    expect_file_refused(load_machine, "gpus_per_node 8\n", ":1: expected key = value");
    expect_file_refused(load_machine, "gpus_per_node =\n", ":1: empty value for 'gpus_per_node'");
    expect_file_refused(load_machine, "intra_busbw_gbps = 10\n", ": missing key 'gpus_per_node'");
    expect_file_refused(load_machine, "gpus_per_node = 8\n", ": missing key 'intra_busbw_gbps'");
    expect_file_refused(load_machine, "gpus_per_node = 8\nintra_busbw_gbps = 10\nnodes = 2\n",
                         ": missing key 'inter_gbps'");
    expect_file_refused(load_workload, "params = 1e6\nstep_ms_1gpu = 10\nbytes_per_grad = 3\n",
                         ":3: bytes_per_grad = 3: expected one of 4, 2");
    expect_file_refused(load_workload, "params = 1e6\nstep_ms_1gpu = x\n", ":2: step_ms_1gpu = x: expected a number");
    expect_file_refused(load_workload, "params = 1e6\noptimizer = lamb\n", ":2: optimizer = lamb: expected one of sgd, adamw");
    expect_file_refused(load_workload, "step_ms_1gpu = 10\n", ": missing key 'params'");
    expect_file_refused(load_workload, "params = 1e6\nstep_ms_1gpu = 10\nforward_ms = 4\nbackward_ms = 7\n",
                         ": load_ms + forward_ms + backward_ms + optimizer_ms = 11 ms, more than step_ms_1gpu = 10 ms");
    expect_file_refused(load_workload, "params = 10\ntensor_params = 4, 2 x (2)\nstep_ms_1gpu = 1\n",
                         ":2: tensor_params add up to 8 parameters, params = 10");
    expect_file_refused(load_workload, "tensor_params = 4, 2 x (2\nstep_ms_1gpu = 1\n",
                         ":1: tensor_params: expected ')' at 'the end'");
    expect_file_refused(load_workload, "tensor_params = 4,, 2\nstep_ms_1gpu = 1\n",
                         ":1: tensor_params: expected a whole number at ', 2'");
    expect_file_refused(load_workload, "tensor_params = 0\nstep_ms_1gpu = 1\n",
                        ":1: tensor_params: a tensor of 0 elements");
    wtext = "tensor_params = 10, 3 x (2, 2 x (1)), 5\nstep_ms_1gpu = 4\nload_ms = 0.5\n";
    path = write_tmp("t.workload", wtext, strlen(wtext));
    EXPECT(predict_workload_load(path, &w) == DPS_OK);
    static const size_t want[] = {10, 2, 1, 1, 2, 1, 1, 2, 1, 1, 5};
    EXPECT(w.ntensors == 11 && w.params == 27 && w.load_ms == 0.5);
    for (int i = 0; i < w.ntensors && i < 11; i++) EXPECT(w.tensors[i] == want[i]);
    predict_workload_free(&w);
    unlink(path);
    static const char nul[] = "params = 1\nst\0ep = 2\n";
    path = write_tmp("nul", nul, sizeof nul - 1);
    EXPECT(predict_workload_load(path, &w) == DPS_ERR_USAGE && strstr(dps_errmsg(), ":2: not a text file"));
    unlink(path);
    EXPECT(predict_machine_load("/dev/null", &m) == DPS_ERR_USAGE);
    EXPECT(strstr(dps_errmsg(), "not a regular file (a machine file is a text file)") != NULL);
    EXPECT(predict_workload_load("/nonexistent/w", &w) == DPS_ERR_USAGE);
    EXPECT(strstr(dps_errmsg(), "/nonexistent/w: cannot read the workload file") != NULL);
}

/* Calibration files: the constants read over the defaults, refusals. */
static void test_predict_consts(void)
{
    predict_consts c;
    predict_consts_default(&c);
    const char *path;
    const char *ctext = "# fitted\nbus_eff = 0.5\nsync_ms = 1.25\ncompute_scale = 0.1\n";
    path = write_tmp("calibration", ctext, strlen(ctext));
    EXPECT(predict_consts_load(path, &c) == DPS_OK);
    EXPECT(c.bus_eff == 0.5 && c.sync_ms == 1.25 && c.compute_scale == 0.1 && c.base_latency_us == 8.4);
    unlink(path);
    expect_file_refused(load_consts, "bus_eff = 0.5\nspeed = 3\n", ":2: unknown key 'speed'");
    expect_file_refused(load_consts, "bus_eff = 0\n", ":1: bus_eff = 0: expected a number above 0");
    /* the efficiencies' physical range: (0, 1] */
    expect_file_refused(load_consts, "bus_eff = 1.8\n", ":1: bus_eff = 1.8: expected a number above 0, at most 1 (ratio)");
    expect_file_refused(load_consts, "overlap_eff = 1.01\n", ":1: overlap_eff = 1.01: expected a number above 0, at most 1");
    expect_file_refused(load_consts, "sync_ms = 1\nsync_ms = 2\n", ":2: 'sync_ms' given again");
}

static void predict_fixture(predict_machine *m, predict_workload *w)
{
    *m = (predict_machine){.name = "m", .gpus_per_node = 8, .nodes = 2, .gpu_mem_gib = 16,
                           .intra_link = PLINK_NVLINK, .intra_busbw_gbps = 120, .p2p_gbps = 100,
                           .h2d_gbps = 10, .inter_gbps = 50, .intra_latency_us = 3.4,
                           .inter_latency_us = 9.6, .mem_gbps = 900};
    *w = (predict_workload){.name = "w", .params = 26.0 * 1048576 / 4, .bytes_per_grad = 4,
                            .step_ms_1gpu = 90, .forward_ms = -1, .backward_ms = -1,
                            .optimizer_ms = -1, .load_ms = -1, .batch_per_gpu = 32,
                            .optimizer = OPT_SGD, .bucket_mb = 25, .first_bucket_mb = 1,
                            .input_bytes_per_sample = 602112, .output_bytes_per_sample = 4000,
                            .activation_bytes_per_sample = 1e8};
}

/* The model's pieces: the ring, the buckets, one stream's overlap. */
static void test_predict_model(void)
{
    predict_machine m;
    predict_workload w;
    predict_consts c;
    predict_fixture(&m, &w);
    predict_consts_default(&c);
    /* the ring: 2(n-1)/n bytes over the bus, NCCL's latencies */
    EXPECT(predict_allreduce_ms(1e9, 1, 1, &m, &c) == 0.0);
    EXPECT_NEAR(predict_allreduce_ms(1.2e9, 2, 1, &m, &c), 10.0 + (8.4 + 2 * 3.4) / 1000, 1e-9);
    EXPECT_NEAR(predict_busbw_gbps(&m, 2, &c), 50.0, 1e-12);    /* the network is slower */
    EXPECT_NEAR(predict_allreduce_ms(1e8, 16, 2, &m, &c),
                30.0 / 16 * 1e8 / 50e6 + (8.4 + 28 * 3.4 + 2 * 9.6) * 1.9 / 1000, 1e-9);
    /* buckets: 26 MiB of fp32 gradients: a first of 1 MiB, then the rest (< 25 MiB) */
    static double bytes[PREDICT_MAX_BUCKETS], ready[PREDICT_MAX_BUCKETS];
    int nb = predict_buckets(&w, bytes, ready, PREDICT_MAX_BUCKETS);
    EXPECT(nb == 2);
    EXPECT(bytes[0] >= 1048576 && bytes[0] < 1048576 + 26.0 * 1048576 / 4096);
    EXPECT_NEAR(bytes[0] + bytes[1], 26.0 * 1048576, 0.5);
    EXPECT(ready[0] > 0.03 && ready[0] < 0.05 && ready[1] == 1.0);
    w.bucket_mb = 5;
    nb = predict_buckets(&w, bytes, ready, PREDICT_MAX_BUCKETS);
    EXPECT(nb == 6 && ready[1] > ready[0] && ready[nb - 1] == 1.0);
    EXPECT(predict_buckets(&w, bytes, ready, 3) == -1);
    w.bucket_mb = 25;
    /* one stream: each starts when ready and after the one before */
    double busy;
    EXPECT_NEAR(predict_overlap_end((double[]){0.25, 1.0}, (double[]){1, 3}, 2, 8, 1.0, &busy), 11, 1e-12);
    EXPECT_NEAR(busy, 4, 1e-12);
    EXPECT_NEAR(predict_overlap_end((double[]){0.1, 0.2}, (double[]){5, 5}, 2, 10, 1.0, &busy), 11, 1e-12);
    /* beside backward at half speed: 4 ms of work from 4 ms, 2 done by 8, 2 after */
    EXPECT_NEAR(predict_overlap_end((double[]){0.5}, (double[]){4}, 1, 8, 0.5, &busy), 10, 1e-12);
    EXPECT_NEAR(busy, 6, 1e-12);
    EXPECT_NEAR(predict_overlap_end((double[]){0.25}, (double[]){1}, 1, 8, 0.5, &busy), 4, 1e-12);
    /* tensors: a large first tensor (a tied embedding) is a bucket of its
     * own, ready only at the end of backward */
    size_t tensors[] = {6 * 262144, 262144, 262144, 262144, 262144};
    w.tensors = tensors;
    w.ntensors = 5;
    w.params = 10 * 262144;
    w.bucket_mb = w.first_bucket_mb = 2;
    nb = predict_buckets(&w, bytes, ready, PREDICT_MAX_BUCKETS);
    EXPECT(nb == 3 && bytes[0] == 2 * 1048576 && bytes[1] == 2 * 1048576 && bytes[2] == 6 * 1048576);
    EXPECT_NEAR(ready[0], 0.2, 1e-12);
    EXPECT_NEAR(ready[1], 0.4, 1e-12);
    EXPECT(ready[2] == 1.0);
}

/* Whole configurations: one device's split, dp and ddp on 1 to 24
 * devices, the skipped ones, memory and the out-of-memory forecast. */
static void test_predict_configs(void)
{
    predict_machine m;
    predict_workload w;
    predict_consts c;
    predict_fixture(&m, &w);
    predict_consts_default(&c);
    /* one device's split: load over h2d, optimizer over memory, 1:2 */
    predict_split s;
    EXPECT(predict_split_step(&m, &w, &s) == DPS_OK);
    double load = 32 * 602112 / 10e6, opt = w.params * 4 * 5 / 900e6;
    EXPECT_NEAR(s.load_ms, load, 1e-9);
    EXPECT_NEAR(s.optimizer_ms, opt, 1e-9);
    EXPECT_NEAR(s.forward_ms, (90 - load - opt) / 3, 1e-9);
    EXPECT_NEAR(s.load_ms + s.forward_ms + s.backward_ms + s.optimizer_ms, 90, 1e-9);
    w.forward_ms = 80;
    w.backward_ms = 9;
    EXPECT(predict_split_step(&m, &w, &s) == DPS_ERR_USAGE); /* no room for the load */
    w.forward_ms = w.backward_ms = -1;
    EXPECT(predict_split_step(&m, &w, &s) == DPS_OK);
    predict_row r;
    /* dp on one device is the device's step */
    predict_config(&m, &w, &s, &c, MODE_DP, 1, &r);
    EXPECT(r.status == PRED_OK && r.nodes == 1);
    EXPECT_NEAR(r.step_ms, 90, 1e-9);
    EXPECT_NEAR(r.efficiency, 1, 1e-12);
    /* ddp on one device: the bucket copies only */
    predict_config(&m, &w, &s, &c, MODE_DDP, 1, &r);
    EXPECT_NEAR(r.step_ms, 90 + 4 * 26.0 * 1048576 / 900e6, 1e-9);
    EXPECT(r.nbuckets == 2 && r.phase_ms[PH_ALLREDUCE] == 0);
    /* ddp on 8: overlapped, exposed only the last bucket; 16 over two nodes */
    predict_config(&m, &w, &s, &c, MODE_DDP, 8, &r);
    EXPECT(r.status == PRED_OK && r.nodes == 1 && r.phase_ms[PH_ALLREDUCE] > 0);
    EXPECT(r.step_ms > 90 && r.efficiency < 1 && r.efficiency > 0.9);
    EXPECT_NEAR(r.samples_per_s, 8 * 32 * 1000 / r.step_ms, 1e-9);
    double eight = r.step_ms;
    predict_config(&m, &w, &s, &c, MODE_DDP, 16, &r);
    EXPECT(r.nodes == 2 && r.busbw_gbps == 50 && r.step_ms > eight);
    /* dp: serial through device 0, slower than ddp; not across nodes */
    predict_config(&m, &w, &s, &c, MODE_DP, 8, &r);
    EXPECT(r.status == PRED_OK && r.step_ms > eight && r.phase_ms[PH_REPLICATE] > 0);
    EXPECT(r.phase_ms[PH_REDUCE] > r.phase_ms[PH_REPLICATE] && r.phase_ms[PH_LOAD] > 8 * s.load_ms - 1e-9);
    EXPECT(r.gpu0_mem_bytes > r.other_mem_bytes && r.other_mem_bytes > 0);
    predict_config(&m, &w, &s, &c, MODE_DP, 16, &r);
    EXPECT(r.status == PRED_SKIPPED && strstr(r.note, "one node"));
    /* nodes follow from the count: past the machine's 2, predicted with a
     * note; without a network, more than one node is skipped */
    predict_config(&m, &w, &s, &c, MODE_DDP, 24, &r);
    EXPECT(r.status == PRED_OK && r.nodes == 3 && r.busbw_gbps == 50 && r.step_ms > eight);
    EXPECT(strstr(r.note, "3 nodes of 8, more than the machine file's nodes = 2") != NULL);
    m.nodes = 0;
    predict_config(&m, &w, &s, &c, MODE_DDP, 64, &r);
    EXPECT(r.status == PRED_OK && r.nodes == 8 && r.note[0] == '\0');
    m.inter_gbps = 0;
    predict_config(&m, &w, &s, &c, MODE_DDP, 9, &r);
    EXPECT(r.status == PRED_SKIPPED && strstr(r.note, "9 devices need 2 nodes of 8 and the machine has no network"));
    m.inter_gbps = 50;
    m.nodes = 2;
    /* memory: ddp the same everywhere; an out-of-memory forecast */
    double g0, other;
    predict_memory(&w, MODE_DDP, 4, &g0, &other);
    /* logits, their gradient, the log-probabilities and theirs: 4 x 4000 a sample */
    EXPECT(g0 == other && g0 == 3 * 26.0 * 1048576 + 26.0 * 1048576 + 32 * (602112 + 16000 + 1e8));
    /* dp on 4: device 0 the batch, the gathered logits' four buffers, two
     * coalescing buffers (no tensor listed: groups of 10 MiB) and the
     * reduce output */
    double P = 26.0 * 1048576, F = 10.0 * 1048576;
    predict_memory(&w, MODE_DP, 4, &g0, &other);
    EXPECT(g0 == 3 * P + P + 2 * F + 4 * 32 * 602112.0 + 16 * 32 * 4000.0 + 32 * 1e8);
    EXPECT(other == 2 * P + F + 32 * (602112 + 4000 + 1e8));
    predict_memory(&w, MODE_DP, 1, &g0, &other);
    EXPECT(g0 == 2 * P + P + 32 * (602112 + 16000 + 1e8) && other == 0);
    m.gpu_mem_gib = 3;
    predict_config(&m, &w, &s, &c, MODE_DDP, 2, &r);
    EXPECT(r.status == PRED_OOM && strstr(r.note, "more than gpu_mem_gib 3"));
    /* calibrated constants: compute shared by the devices of a node, dp's
     * and ddp's synchronisation */
    m.gpu_mem_gib = 0;
    predict_config(&m, &w, &s, &c, MODE_DP, 4, &r);
    double dp4 = r.step_ms, fwd4 = r.phase_ms[PH_FORWARD];
    c.compute_scale = 0.1;
    c.dp_sync_ms = 2;
    c.sync_ms = 0.5;
    predict_config(&m, &w, &s, &c, MODE_DP, 4, &r);
    EXPECT_NEAR(r.sync_ms, 2, 1e-12);
    EXPECT(r.phase_ms[PH_FORWARD] > 1.29 * fwd4 && r.phase_ms[PH_FORWARD] < 1.31 * fwd4);
    EXPECT(r.step_ms > dp4 + 2 + 0.3 * s.backward_ms - 1e-9);
    predict_config(&m, &w, &s, &c, MODE_DDP, 16, &r); /* 8 a node: scaled by 1 + 0.1 x 7 */
    EXPECT_NEAR(r.phase_ms[PH_FORWARD], 1.7 * s.forward_ms, 1e-9);
    EXPECT_NEAR(r.sync_ms, 0.5, 1e-12);
    predict_config(&m, &w, &s, &c, MODE_DDP, 1, &r);
    EXPECT(r.sync_ms == 0 && r.phase_ms[PH_FORWARD] == s.forward_ms);
}

/* ddp's step of accum micro-steps from the model's pieces: forward and
 * backward of the whole batch, the buckets' all-reduces beside one
 * micro-step's backward (plus half the bucket copies) in each of `syncing`
 * micro-steps. */
static double ddp_accum_step(const predict_machine *m, const predict_workload *w,
                             const predict_consts *c, const predict_split *s, int n, int syncing,
                             double *busy)
{
    static double bytes[PREDICT_MAX_BUCKETS], ready[PREDICT_MAX_BUCKETS], ar[PREDICT_MAX_BUCKETS];
    int nb = predict_buckets(w, bytes, ready, PREDICT_MAX_BUCKETS);
    for (int i = 0; i < nb; i++) ar[i] = predict_allreduce_ms(bytes[i], n, 1, m, c);
    double copy = 4.0 * w->params * 4 / (m->mem_gbps * 1e6);
    double bwd = s->backward_ms / w->accum + copy / 2;
    double end = predict_overlap_end(ready, ar, nb, bwd, c->overlap_eff, busy);
    *busy *= syncing;
    return s->load_ms + s->forward_ms + s->backward_ms + s->optimizer_ms +
           syncing * (copy / 2 + fmax(0.0, end - bwd) + copy / 2);
}

/* Gradient accumulation: ddp all-reduces the buckets once a step under
 * no_sync, accum times without; dp replicates and reduces every
 * micro-step; memory holds a micro-batch; gradients stay fp32 under
 * autocast; fp16's unscale. */
static void test_predict_accum(void)
{
    predict_machine m;
    predict_workload w;
    predict_consts c;
    predict_split s;
    predict_row one, r;
    double busy;
    predict_fixture(&m, &w);
    predict_consts_default(&c);
    EXPECT(predict_split_step(&m, &w, &s) == DPS_OK && s.unscale_ms == 0);
    predict_config(&m, &w, &s, &c, MODE_DDP, 8, &one);
    predict_config(&m, &w, &s, &c, MODE_DP, 8, &r);
    double dp_rep = r.phase_ms[PH_REPLICATE], dp_red = r.phase_ms[PH_REDUCE], dp_step = r.step_ms;
    w.accum = 4; /* no_sync: one all-reduce of each bucket a step */
    predict_config(&m, &w, &s, &c, MODE_DDP, 8, &r);
    EXPECT(r.status == PRED_OK && r.nbuckets == 2 && r.allreduces == r.nbuckets);
    EXPECT(r.allreduces == one.allreduces);
    EXPECT_NEAR(r.step_ms, ddp_accum_step(&m, &w, &c, &s, 8, 1, &busy), 1e-9);
    EXPECT_NEAR(r.phase_ms[PH_ALLREDUCE], busy, 1e-12);
    double sync_once = r.step_ms, ar_once = r.phase_ms[PH_ALLREDUCE];
    w.sync_all = 1; /* no_sync off: every micro-step all-reduces */
    predict_config(&m, &w, &s, &c, MODE_DDP, 8, &r);
    EXPECT(r.allreduces == 4 * r.nbuckets);
    EXPECT_NEAR(r.phase_ms[PH_ALLREDUCE], 4 * ar_once, 1e-9);
    EXPECT_NEAR(r.step_ms, ddp_accum_step(&m, &w, &c, &s, 8, 4, &busy), 1e-9);
    EXPECT(r.step_ms > sync_once);
    w.sync_all = 0;
    /* dp: DataParallel's replicate and reduce each micro-step, and its threads */
    c.dp_sync_ms = 0.5;
    predict_config(&m, &w, &s, &c, MODE_DP, 8, &r);
    EXPECT_NEAR(r.phase_ms[PH_REPLICATE], 4 * dp_rep, 1e-9);
    EXPECT_NEAR(r.phase_ms[PH_REDUCE], 4 * dp_red, 1e-9);
    EXPECT_NEAR(r.sync_ms, 4 * 0.5, 1e-12);
    EXPECT_NEAR(r.step_ms, dp_step + 3 * (dp_rep + dp_red) + 4 * 0.5, 1e-9);
    EXPECT(predict_syncs(&w, MODE_DP) == 4 && predict_syncs(&w, MODE_DDP) == 1);
    c.dp_sync_ms = 0;
    /* memory: a micro-batch of 8 samples, and the accumulated gradients apart */
    double g0, other, P = 26.0 * 1048576;
    predict_memory(&w, MODE_DDP, 4, &g0, &other);
    EXPECT(g0 == other && g0 == 4 * P + P + 8 * (602112 + 16000 + 1e8));
    EXPECT(predict_check_accum(&w, "w") == DPS_OK);
    w.accum = 3;
    EXPECT(predict_check_accum(&w, "w") == DPS_ERR_USAGE &&
           strstr(dps_errmsg(), "batch_per_gpu 32 does not split into accum = 3") != NULL);
    w.accum = 1;
    /* autocast keeps fp32 gradients: the same buckets and all-reduces */
    EXPECT(predict_grad_bytes(PREC_BF16) == 4 && predict_grad_bytes(PREC_FP16) == 4 &&
           predict_grad_bytes(PREC_FP32) == 4);
    const char *text = "params = 1e6\nstep_ms_1gpu = 10\nbatch_per_gpu = 8\nprecision = bf16\n"
                       "accum = 4\nno_sync = off\n";
    const char *path = write_tmp("a.workload", text, strlen(text));
    predict_workload f;
    EXPECT(predict_workload_load(path, &f) == DPS_OK);
    EXPECT(f.precision == PREC_BF16 && f.bytes_per_grad == 4 && f.accum == 4 && f.sync_all == 1);
    predict_workload_free(&f);
    unlink(path);
    expect_file_refused(load_workload,
                        "params = 1e6\nstep_ms_1gpu = 10\nbatch_per_gpu = 8\naccum = 3\n",
                        ": batch_per_gpu 8 does not split into accum = 3 equal micro-batches");
    /* fp16: the GradScaler's unscale, a read and a write of each gradient */
    w.precision = PREC_FP16;
    w.unscale_ms = -1;
    EXPECT(predict_split_step(&m, &w, &s) == DPS_OK);
    EXPECT_NEAR(s.unscale_ms, 2 * P / 900e6, 1e-12);
    EXPECT_NEAR(s.load_ms + s.forward_ms + s.backward_ms + s.unscale_ms + s.optimizer_ms, 90, 1e-9);
    predict_config(&m, &w, &s, &c, MODE_DDP, 8, &r);
    EXPECT(r.phase_ms[PH_UNSCALE] == s.unscale_ms && r.nbuckets == one.nbuckets);
}

EXPECT_GROUPS(GROUP(predict_files), GROUP(predict_consts), GROUP(predict_model),
              GROUP(predict_configs), GROUP(predict_accum));
