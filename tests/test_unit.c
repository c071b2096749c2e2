/* Unit tests of the harness pieces that need no GPU, on the host backend:
 * chunking, statistics, the CSV writer and reader, CLI errors, the settings
 * table, suites, presets, number parsing, the shared element-wise math, the
 * model's gradients against finite differences and its bf16 paths, the host
 * GEMM and its signals, memory accounting, DDP's buckets, the shared-memory
 * ring, the collectives' abort and watchdog, bus bandwidth, versions,
 * --backend auto's choice, the fork rule of devices, NVML (through a stub),
 * the launchers' world, the ranks' TCP store, the batch thread, the
 * slowdown injection and the predictor's inputs, constants and model.
 * Usage: test_unit GROUP (one meson test per group; main() lists them). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "build_config.h"
#include "elementwise.h"
#include "backend/backend.h"
#include "model/batches.h"
#include "model/bucket.h"
#include "comm/comm.h"
#include "comm/comm_watch.h"
#include "comm/store_keys.h"
#include "comm/store_wire.h"
#include "strategies/ddp.h"
#include "launch/ranks.h"
#include "cli/cli.h"
#include "core/csv.h"
#include "core/csv_read.h"
#include "strategies/ptimer.h"
#include "config/world.h"
#include "strategies/dp.h"
#include "strategies/footprint.h"
#include "core/stats.h"
#include "model/model.h"
#include "backend/nvml.h"
#include "predict/predict_input.h"
#include "predict/predict_model.h"
#include "predict/predict_calib.h"
#include "core/csv_table.h"
#include "run/run.h"
#include "config/settings.h"
#include "run/suite.h"
#include "core/util.h"
#ifdef DPS_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

static int failures;

#define EXPECT(cond)                                                        \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                     \
        }                                                                   \
    } while (0)

#define EXPECT_NEAR(a, b, tol)                                              \
    do {                                                                    \
        double a_ = (a), b_ = (b);                                          \
        if (!(fabs(a_ - b_) <= (tol))) {                                    \
            fprintf(stderr, "%s:%d: %s = %.9g, expected %.9g (tol %g)\n",   \
                    __FILE__, __LINE__, #a, a_, b_, (double)(tol));         \
            failures++;                                                     \
        }                                                                   \
    } while (0)

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

static void test_stats(void)
{
    double x[] = {5, 1, 4, 2, 3}; /* unsorted on purpose */
    dps_stats s;
    stats_compute(x, 5, &s);
    EXPECT_NEAR(s.median, 3.0, 1e-12);
    EXPECT_NEAR(s.mean, 3.0, 1e-12);
    EXPECT_NEAR(s.p10, 1.4, 1e-12);     /* numpy.percentile(x, 10) */
    EXPECT_NEAR(s.p90, 4.6, 1e-12);
    EXPECT_NEAR(s.stdev, sqrt(2.5), 1e-12);
    EXPECT_NEAR(s.min, 1.0, 0);
    EXPECT_NEAR(s.max, 5.0, 0);
    double y[] = {1, 2, 3, 4};
    stats_compute(y, 4, &s);
    EXPECT_NEAR(s.median, 2.5, 1e-12);
    EXPECT_NEAR(s.p10, 1.3, 1e-12);
    double one = 7.0;
    stats_compute(&one, 1, &s);
    EXPECT(s.median == 7.0 && s.p10 == 7.0 && s.p90 == 7.0 && s.stdev == 0.0);
    stats_compute(NULL, 0, &s);
    EXPECT(isnan(s.median));
    EXPECT_NEAR(stats_busbw_allreduce(10.0, 4), 15.0, 1e-12);
    EXPECT_NEAR(stats_busbw_allreduce(10.0, 2), 10.0, 1e-12);
    EXPECT_NEAR(stats_busbw_allreduce(10.0, 1), 0.0, 0);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    static char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* The records of text written by test_csv read back, field by field. */
static void test_csv_read(const char *path)
{
    char *data, field[32];
    size_t len, pos = 0;
    EXPECT(csv_read_file(path, &data, &len) == DPS_OK && data && len == strlen(data));
    if (!data) return;
    size_t n[4];
    for (int i = 0; i < 4; i++) {
        n[i] = csv_record_len(data + pos, len - pos);
        EXPECT(n[i] > 0);
        if (i == 2) {
            EXPECT(csv_field(data + pos, n[i], 0, field, sizeof field) && !strcmp(field, "quote\"d"));
            EXPECT(csv_field(data + pos, n[i], 1, field, sizeof field) && !field[0]);
            EXPECT(csv_field(data + pos, n[i], 2, field, sizeof field) &&
                   !strcmp(field, "line break \xef\xbf\xbd\xef\xbf\xbd[0m"));
            EXPECT(!csv_field(data + pos, n[i], 3, field, sizeof field)); /* three fields */
            EXPECT(!csv_field(data + pos, n[i], 2, field, 4));             /* does not fit */
        }
        pos += n[i];
    }
    EXPECT(pos == len);
    EXPECT(csv_record_len("plain,1.5", 9) == 0);        /* cut short: no end */
    EXPECT(csv_record_len("\"a\nb\",1\n", 8) == 8); /* a newline inside quotes */
    free(data);
    char *none;
    EXPECT(csv_read_file("/nonexistent/dir/x.csv", &none, &len) == DPS_OK && !none && !len);
}

static void test_csv(void)
{
    char dir[] = "/tmp/dpscale-csv-XXXXXX";
    EXPECT(mkdtemp(dir) != NULL);
    char path[256];
    snprintf(path, sizeof path, "%s/t.csv", dir);
    static const char *const cols[] = {"name", "value_ms", "note"};
    csv_buf b;
    csv_init(&b);
    csv_str(&b, "plain");
    csv_num(&b, 1.5, 2);
    csv_str(&b, "has,comma");
    csv_end_row(&b);
    csv_str(&b, "quote\"d");
    csv_num(&b, NAN, 2);
    csv_str(&b, "line\nbreak\t\xff\x1b[0m"); /* csv_clean_text: spaces, U+FFFD */
    csv_end_row(&b);
    csv_str(&b, " padded");
    csv_int(&b, -3);
    csv_empty(&b);
    csv_end_row(&b);
    EXPECT(csv_append(path, cols, 3, &b) == DPS_OK);
    const char *want = "name,value_ms,note\nplain,1.50,\"has,comma\"\n"
                       "\"quote\"\"d\",,line break \xef\xbf\xbd\xef\xbf\xbd[0m\n\" padded\",-3,\n";
    char *got = slurp(path);
    EXPECT(got && strcmp(got, want) == 0);
    test_csv_read(path);
    /* a second append adds rows without a second header */
    EXPECT(csv_append(path, cols, 3, &b) == DPS_OK);
    got = slurp(path);
    EXPECT(got && strlen(got) == 2 * strlen(want) - strlen("name,value_ms,note\n"));
    /* a file with other columns is refused and left alone */
    static const char *const other[] = {"name", "value_s"};
    EXPECT(csv_append(path, other, 2, &b) == DPS_ERR_USAGE);
    EXPECT(strstr(dps_errmsg(), "header differs") != NULL);
    csv_free(&b);
    unlink(path);
    rmdir(dir);
}

static dps_status parse(const char *line, cli_args *a)
{
    char buf[512], *argv[32];
    int argc = 0;
    snprintf(buf, sizeof buf, "dpscale %s", line);
    for (char *t = strtok(buf, " "); t && argc < 31; t = strtok(NULL, " ")) argv[argc++] = t;
    argv[argc] = NULL;
    return cli_parse(argc, argv, a);
}

static void expect_usage(const char *line, const char *needle)
{
    static cli_args a;
    dps_status rc = parse(line, &a);
    if (rc != DPS_ERR_USAGE || !strstr(dps_errmsg(), needle)) {
        fprintf(stderr, "'%s': rc %d, message '%s', expected '%s'\n", line, rc, dps_errmsg(), needle);
        failures++;
    }
    EXPECT(strchr(dps_errmsg(), '\n') == NULL); /* one line */
}

static void test_cli(void)
{
    static cli_args a;
    EXPECT(parse("run --gpus 3 --batch 10 --model tiny --optimizer adamw", &a) == DPS_OK);
    EXPECT(a.cmd == CMD_RUN && a.cfg.ngpus == 3 && a.cfg.global_batch == 10);
    EXPECT(a.cfg.optimizer == OPT_ADAMW && fabsf(a.cfg.hp.lr - 1e-3f) < 1e-9f);
    EXPECT(parse("run --optimizer adamw --lr 0.5", &a) == DPS_OK && a.cfg.hp.lr == 0.5f);
    EXPECT(parse("run --device-mem 1536K", &a) == DPS_OK && a.cfg.be.device_mem == 1536u * 1024);
    EXPECT(parse("sweep --gpus 1,2,4", &a) == DPS_OK && a.sweep_ngpus_n == 3);
    EXPECT(parse("--help", &a) == DPS_OK && a.cmd == CMD_HELP);
    expect_usage("run --bogus", "unknown option '--bogus'");
    expect_usage("run --gpus", "needs a value");
    expect_usage("run --gpus abc", "--gpus abc: expected an integer from 1 to 64");
    expect_usage("run --gpus 0", "--gpus 0:");
    expect_usage("run --gpus -1", "--gpus -1:");
    expect_usage("run --gpus 99999999999999999999", "out of range");
    expect_usage("run --gpus 1,2", "--gpus 1,2: one value for `dpscale run` (lists are for sweep "
                 "and comm-bench)");
    EXPECT(parse("predict --machine m.machine --workload w --gpus 1,8,256 --modes ddp --name p", &a) == DPS_OK);
    EXPECT(a.cmd == CMD_PREDICT && strcmp(a.machine_path, "m.machine") == 0 && a.name_set);
    EXPECT(strcmp(a.workload_path, "w") == 0 && a.sweep_ngpus_n == 3 && a.sweep_ngpus[2] == 256);
    EXPECT(a.sweep_modes_n == 1 && a.sweep_modes[0] == MODE_DDP && !a.out_set);
    expect_usage("run --gpus 256", "--gpus 256: expected an integer from 1 to 64");
    expect_usage("info --gpus 2", "--gpus: not an option of `dpscale info` (only of run, sweep, "
                 "comm-bench, links and predict)");
    EXPECT(parse("predict --from r --gpu 2", &a) == DPS_OK && a.sweep_ngpus[0] == 2); /* getopt's prefix */
    expect_usage("predict --gpus 0", "--gpus 0: expected an integer from 1 to 1048576");
    EXPECT(parse("predict --from r --calibration c.txt --gpus 8", &a) == DPS_OK);
    EXPECT(strcmp(a.from_dir, "r") == 0 && strcmp(a.calibration_path, "c.txt") == 0);
    expect_usage("run --machine m", "--machine: not an option of `dpscale run` (only of predict)");
    expect_usage("predict --steps 3", "--steps: not an option of `dpscale predict`");
    expect_usage("run --model tiny,small", "--model tiny,small: one value for `dpscale run` "
                 "(lists are for sweep)");
    expect_usage("links --sizes 1M,2M", "--sizes 1M,2M: one value for `dpscale links`");
    /* an option another subcommand takes: refused, naming the ones that take it */
    expect_usage("links --dry-run", "--dry-run: not an option of `dpscale links` (only of run and sweep)");
    expect_usage("info --inject-fault 1:1:exit", "--inject-fault: not an option of `dpscale info`");
    expect_usage("sweep --save-params p.npy", "--save-params: not an option of `dpscale sweep` "
                 "(only of run)");
    expect_usage("run --resume", "--resume: not an option of `dpscale run` (only of sweep)");
    expect_usage("comm-bench --backend host", "--backend: not an option of `dpscale comm-bench` "
                 "(only of run, sweep, info and links)");
    expect_usage("info --out x", "--out: not an option of `dpscale info`");
    EXPECT(parse("links --backend host --gpus 2 --sizes 1M --steps 3 --device-mem 4M "
                 "--host-devices 2 --out x --name y", &a) == DPS_OK && a.cmd == CMD_LINKS);
    EXPECT(parse("comm-bench --gpus 2,3 --sizes 4,1M --steps 2 --warmup 1 --timeout 5 --out x", &a) == DPS_OK);
    EXPECT(parse("info --backend host --host-devices 2 --device-mem 1M --help", &a) == DPS_OK &&
           a.cmd == CMD_HELP);
    expect_usage("run --steps 0", "--steps 0:");
    expect_usage("run --batch 2.5", "--batch 2.5:");
    expect_usage("run --model nope", "--model nope: unknown preset");
    expect_usage("run --precision fp8", "--precision fp8: expected one of: fp32, bf16");
    expect_usage("run --mode fsdp", "--mode fsdp: expected one of: dp, ddp");
    expect_usage("run --inject-fault 1:3", "--inject-fault 1:3: expected RANK:STEP:exit");
    expect_usage("run --inject-fault 1:3:crash", "--inject-fault 1:3:crash:");
    expect_usage("run --inject-fault x:3:exit", "--inject-fault x:3:exit:");
    expect_usage("run --bucket-mb 0", "--bucket-mb 0: expected a number above 0");
    expect_usage("run --timeout -5", "--timeout -5:");
    expect_usage("run --profile-steps 5", "--profile-steps 5: expected FIRST:LAST");
    expect_usage("run --profile-steps 9:5", "--profile-steps 9:5: the last step comes before");
    expect_usage("run --profile-steps a:5", "--profile-steps a:5: expected FIRST:LAST");
    expect_usage("run --profile-steps -1:5", "--profile-steps -1:5:");
    EXPECT(parse("run --profile-steps 4:7", &a) == DPS_OK && a.cfg.profile_first == 4 &&
           a.cfg.profile_last == 7);
    EXPECT(parse("run --mode ddp --inject-fault 2:7:hang --bucket-mb 0.5 --no-overlap", &a) == DPS_OK);
    EXPECT(a.cfg.mode == MODE_DDP && a.cfg.fault_rank == 2 && a.cfg.fault_step == 7 &&
           a.cfg.fault_kind == FAULT_HANG && a.cfg.bucket_mb == 0.5 && !a.cfg.overlap);
    expect_usage("run --backend gpu", "--backend gpu:");
    expect_usage("run --device-mem 12Q", "--device-mem 12Q:");
    expect_usage("run --device-mem 99999999999T", "--device-mem 99999999999T: too large");
    expect_usage("run --devices 0,,1", "--devices 0,,1:");
    expect_usage("run --lr -1", "--lr -1:");
    expect_usage("run --name a/b", "--name a/b:");
    expect_usage("jump", "unknown command 'jump'");
    expect_usage("", "no command");
    expect_usage("run extra", "unexpected argument 'extra'");
    expect_usage("run --gpus 2 --devices 0,1,2", "disagree");
    /* a value twice in a list: the same configuration twice */
    expect_usage("sweep --gpus 1,1", "--gpus 1,1: listed twice: '1'");
    expect_usage("sweep --model tiny,tiny", "--model tiny,tiny: listed twice: 'tiny'");
    EXPECT(parse("run --devices 0,0", &a) == DPS_OK && a.cfg.ngpus == 2); /* replicas on one GPU */
    expect_usage("comm-bench --sizes 1M,1048576", "--sizes 1M,1048576: listed twice: '1048576'");
    /* an empty entry, in every list, refused in the same words */
    expect_usage("run --model ,tiny", "--model ,tiny: empty entry in the list");
    expect_usage("sweep --model tiny,", "--model tiny,: empty entry in the list");
    expect_usage("sweep --gpus ,1", "--gpus ,1: empty entry in the list");
    expect_usage("comm-bench --sizes 1M,,4M", "--sizes 1M,,4M: empty entry in the list");
}

static void test_parse(void)
{
    uint64_t b;
    EXPECT(dps_parse_bytes("4096", &b) == 0 && b == 4096);
    EXPECT(dps_parse_bytes("2K", &b) == 0 && b == 2048);
    EXPECT(dps_parse_bytes("3MiB", &b) == 0 && b == 3u << 20);
    EXPECT(dps_parse_bytes("1g", &b) == 0 && b == 1u << 30);
    EXPECT(dps_parse_bytes("5GB", &b) == 0 && b == 5ull << 30);
    EXPECT(dps_parse_bytes("-1", &b) == -1);
    EXPECT(dps_parse_bytes("1X", &b) == -1);
    EXPECT(dps_parse_bytes("", &b) == -1);
    EXPECT(dps_parse_bytes("99999999999999999999", &b) == -2);
    EXPECT(dps_parse_bytes("17179869184T", &b) == -2);
    int64_t v;
    EXPECT(dps_parse_i64("12", 0, 20, &v) == 0 && v == 12);
    EXPECT(dps_parse_i64("21", 0, 20, &v) == -2);
    EXPECT(dps_parse_i64(" 1", 0, 20, &v) == -1);
    EXPECT(dps_parse_i64("1 ", 0, 20, &v) == -1);
    EXPECT(dps_parse_i64("0x10", 0, 20, &v) == -1);
}

static void test_presets(void)
{
    /* hand-computed: tiny = 2 * (64*64 + 64) + 64*16 + 16 */
    const model_preset *t = model_find_preset("tiny");
    EXPECT(t && model_param_count(t->shape) == 9360);
    EXPECT(model_matmul_params(t->shape) == 2 * 64 * 64 + 64 * 16);
    struct { const char *name; double params, fwd_gflop; } want[] = {
        {"resnet50", 25.6e6, 8.2}, {"bert-large", 335e6, 343.0}, {"gpt2", 124e6, 254.0},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const model_preset *p = model_find_preset(want[i].name);
        EXPECT(p != NULL);
        if (!p) continue;
        double params = (double)model_param_count(p->shape);
        double gflop = model_fwd_flops_per_sample(p->shape) / 1e9;
        EXPECT(fabs(params / want[i].params - 1.0) < 0.02);
        EXPECT(fabs(gflop / want[i].fwd_gflop - 1.0) < 0.03);
    }
    EXPECT(model_find_preset("nope") == NULL);
    /* the layout tiles the flat buffer exactly */
    model_shape s = {3, 5, 2, 7};
    EXPECT(model_weight_offset(s, 1) == 30 && model_bias_offset(s, 0) == 25);
    EXPECT(model_bias_offset(s, 3) + 7 == model_param_count(s));
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

/* The environment world_from_env reads in test_world: "NAME=value" pairs. */
static const char *const *world_env;

static const char *world_lookup(const char *name)
{
    size_t n = strlen(name);
    for (const char *const *e = world_env; e && *e; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=') return *e + n + 1;
    return NULL;
}

static dps_status world_of(world *w, const char *const *env)
{
    world_env = env;
    return world_from_env(w, world_lookup);
}

static void expect_world_refused(const char *const *env, const char *needle)
{
    world w;
    EXPECT(world_of(&w, env) == DPS_ERR_USAGE);
    EXPECT(strstr(dps_errmsg(), needle) != NULL);
    if (!strstr(dps_errmsg(), needle)) fprintf(stderr, "  message: %s\n", dps_errmsg());
}

/* Each launcher's environment, torchrun inside Slurm, and the variables
 * missing, malformed or inconsistent (refused, the variable named). */
static void test_world(void)
{
    world w;
    static const char *const none[] = {"HOME=/root", NULL};
    EXPECT(world_of(&w, none) == DPS_OK && w.launcher == WORLD_NONE && w.size == 1);
    static const char *const torchrun[] = {
        "RANK=5", "WORLD_SIZE=8", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=4", "GROUP_RANK=1",
        "MASTER_ADDR=node0", "MASTER_PORT=29400", "TORCHELASTIC_USE_AGENT_STORE=True",
        "SLURM_PROCID=1", "SLURM_NTASKS=2", "SLURM_LOCALID=0", NULL}; /* inside srun */
    EXPECT(world_of(&w, torchrun) == DPS_OK && w.launcher == WORLD_TORCHRUN);
    EXPECT(w.rank == 5 && w.size == 8 && w.local_rank == 1 && w.local_size == 4 && w.node == 1);
    EXPECT(!strcmp(w.addr, "node0") && w.port == 29400 + WORLD_PORT_OFFSET); /* not the agent's */
    static const char *const ompi[] = {
        "OMPI_COMM_WORLD_RANK=3", "OMPI_COMM_WORLD_SIZE=4", "OMPI_COMM_WORLD_LOCAL_RANK=3",
        "OMPI_COMM_WORLD_LOCAL_SIZE=4", "MASTER_ADDR=10.0.0.1", "DPSCALE_PORT=4000", NULL};
    EXPECT(world_of(&w, ompi) == DPS_OK && w.launcher == WORLD_OPENMPI && w.rank == 3 &&
           w.local_size == 4 && w.node == -1 && w.port == 4000);
    static const char *const mpich[] = {"PMI_RANK=0", "PMI_SIZE=2", "MPI_LOCALRANKID=0",
                                        "MPI_LOCALNRANKS=1", "MASTER_ADDR=h", NULL};
    EXPECT(world_of(&w, mpich) == DPS_OK && w.launcher == WORLD_MPICH && w.size == 2 &&
           w.port == 29500);
    static const char *const slurm[] = {"SLURM_PROCID=2", "SLURM_NTASKS=4", "SLURM_LOCALID=0",
                                        "SLURM_NODEID=1", "MASTER_ADDR=h", "MASTER_PORT=7", NULL};
    EXPECT(world_of(&w, slurm) == DPS_OK && w.launcher == WORLD_SLURM && w.node == 1 &&
           w.local_size == -1 && w.port == 7);
    static const char *const no_addr[] = {"PMI_RANK=0", "PMI_SIZE=2", "MPI_LOCALRANKID=0", NULL};
    expect_world_refused(no_addr, "MASTER_ADDR is not set: under MPICH, export MASTER_ADDR");
    static const char *const no_size[] = {"RANK=0", "LOCAL_RANK=0", "MASTER_ADDR=h", NULL};
    expect_world_refused(no_size, "WORLD_SIZE is not set, though torchrun's other variables are");
    static const char *const bad[] = {"RANK=1x", "WORLD_SIZE=2", "LOCAL_RANK=0", NULL};
    expect_world_refused(bad, "RANK=1x: expected a whole number");
    static const char *const beyond[] = {"RANK=2", "WORLD_SIZE=2", "LOCAL_RANK=0", NULL};
    expect_world_refused(beyond, "RANK=2 is not below WORLD_SIZE=2");
    static const char *const local[] = {"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=4",
                                        "OMPI_COMM_WORLD_LOCAL_RANK=2",
                                        "OMPI_COMM_WORLD_LOCAL_SIZE=2", NULL};
    expect_world_refused(local, "OMPI_COMM_WORLD_LOCAL_RANK=2 is not below "
                                "OMPI_COMM_WORLD_LOCAL_SIZE=2");
    static const char *const port[] = {"PMI_RANK=0", "PMI_SIZE=1", "MPI_LOCALRANKID=0",
                                       "MASTER_ADDR=h", "MASTER_PORT=70000", NULL};
    expect_world_refused(port, "MASTER_PORT=70000: expected a whole number from 1 to 65534");
}

static int store_keys_not_c0(const store_key *e, const void *ctx)
{
    (void)ctx;
    return strncmp(e->key, "c0/", 3) != 0;
}

/* The key table: found at any count, dropped by a rule, full at its size. */
static void test_store_keys(void)
{
    store_keys t;
    EXPECT(store_keys_init(&t, 1000) == DPS_OK);
    char key[32];
    for (int i = 0; i < 1000; i++) {
        snprintf(key, sizeof key, "c%d/k%d", i % 3, i);
        char *val = malloc(8);
        snprintf(val, 8, "%d", i);
        EXPECT(store_keys_add(&t, key, val, strlen(val), i % 7, 0) != NULL);
    }
    char *extra = malloc(1);
    EXPECT(store_keys_add(&t, "one too many", extra, 0, 0, 0) == NULL);
    free(extra);
    store_key *e = store_keys_find(&t, "c1/k421");
    EXPECT(e && !strcmp(e->val, "421") && e->owner == 421 % 7);
    EXPECT(!store_keys_find(&t, "c1/k1000") && !store_keys_find(&t, ""));
    EXPECT(store_keys_drop(&t, store_keys_not_c0, NULL) == 334 && t.n == 666);
    EXPECT(!store_keys_find(&t, "c0/k0") && store_keys_find(&t, "c2/k998"));
    store_keys_free(&t);
}

/* A frame read as its bytes come, one at a time; values and words held to
 * their limits before anything is allocated; bytes that are no frame. */
static void test_store_reader(void)
{
    int sv[2];
    EXPECT(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    unsigned char h[STORE_HEAD_BYTES];
    store_head(h, ST_SET, 3, 5);
    const char *rest = "keyhello";
    store_reader r = {0};
    store_frame f;
    int rc = 1;
    for (int i = 0; i < STORE_HEAD_BYTES + 8; i++) {
        EXPECT(rc == 1);
        const char *next = i < STORE_HEAD_BYTES ? (const char *)h + i : rest + i - STORE_HEAD_BYTES;
        (void)!write(sv[1], next, 1);
        rc = store_read(sv[0], &r, &f, 5, 1 << 20);
    }
    EXPECT(rc == 0 && f.type == ST_SET && !strcmp(f.key, "key") && f.len == 5 &&
           !strcmp(f.val, "hello") && r.got == 0);
    store_frame_free(&f);
    store_head(h, ST_SET, 1, 1u << 30); /* 1 GiB announced, 64 KiB allowed */
    (void)!write(sv[1], h, sizeof h);
    (void)!write(sv[1], "k", 1);
    EXPECT(store_read(sv[0], &r, &f, 65536, 1 << 20) == -1 && errno == EMSGSIZE &&
           r.f.len == 1u << 30 && !strcmp(r.f.key, "k") && !r.f.val);
    store_reader_free(&r);
    store_head(h, ST_ABORT, 0, STORE_WORDS_MAX + 1); /* words, not a value */
    (void)!write(sv[1], h, sizeof h);
    EXPECT(store_read(sv[0], &r, &f, 1 << 20, 1 << 20) == -1 && errno == EMSGSIZE);
    store_reader_free(&r);
    close(sv[1]);
    EXPECT(store_read(sv[0], &r, &f, 0, 1 << 20) == 2); /* the end, between frames */
    close(sv[0]);
    EXPECT(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    (void)!write(sv[1], "GET / HTTP/1.1\r\n", 16);
    EXPECT(store_read(sv[0], &r, &f, 1 << 20, 1 << 20) == -1 && errno == EPROTO);
    store_reader_free(&r);
    close(sv[1]);
    close(sv[0]);
}

/* A raw connection to the store on 127.0.0.1:port. */
static int store_raw(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    EXPECT(fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
    return fd;
}

/* Everything the store sends fd until it closes it, within ms. */
static size_t store_raw_drain(int fd, char *buf, size_t len, int ms)
{
    size_t n = 0;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    while (n + 1 < len && poll(&p, 1, ms) > 0) {
        ssize_t got = recv(fd, buf + n, len - 1 - n, 0);
        if (got <= 0) break;
        n += (size_t)got;
    }
    buf[n] = '\0';
    for (size_t i = 0; i < n; i++) if (!buf[i]) buf[i] = ' '; /* headers' zeros */
    return n;
}

/* A second process claiming a rank is refused, named, and the job goes
 * on; a peer that stalls mid-frame or says nothing stalls no one and is
 * refused at the timeout. */
static void test_store_peers(void)
{
    store_server *srv;
    EXPECT(store_server_start(0, 2, 600.0, &srv) == DPS_OK);
    int port = store_server_port(srv), slow = store_raw(port), idle = store_raw(port);
    (void)!write(slow, "\x02", 1); /* a frame's first byte, then nothing */
    double t0 = dps_now_ms();
    dps_store *c[3];
    store_member m[2];
    EXPECT(store_connect("127.0.0.1", port, 0, 2, 5000.0, &c[0]) == DPS_OK);
    EXPECT(store_connect("127.0.0.1", port, 1, 2, 5000.0, &c[1]) == DPS_OK);
    EXPECT(store_connect("127.0.0.1", port, 1, 2, 5000.0, &c[2]) == DPS_ERR_RUNTIME);
    EXPECT(strstr(dps_errmsg(), "refused this process: two processes claim rank 1"));
    EXPECT(store_roster(c[1], m, 2) == DPS_OK && dps_now_ms() - t0 < 400.0);
    char buf[2048];
    store_raw_drain(slow, buf, sizeof buf, 2000);
    EXPECT(strstr(buf, "a frame began (1 bytes) and the rest did not come within --timeout 0.6 s"));
    store_raw_drain(idle, buf, sizeof buf, 2000);
    EXPECT(strstr(buf, "it said no hello within --timeout 0.6 s"));
    EXPECT(dps_now_ms() - t0 < 600.0 + 1500.0);
    int asked;
    char why[DPS_ERRMSG_MAX];
    EXPECT(store_server_failure(srv, &asked, why, sizeof why) == DPS_OK); /* the job goes on */
    close(slow);
    close(idle);
    store_close(c[0]);
    store_close(c[1]);
    store_server_stop(srv);
}

/* A raw peer that says hello as rank r of pid 4242, both connections. */
static void store_raw_hello(int ctl, int req, int r)
{
    char hello[64];
    int n = snprintf(hello, sizeof hello, "%d 4242 evil lo", r);
    EXPECT(store_send(ctl, ST_HELLO, "ctl", hello, (size_t)n, 0) == 0);
    EXPECT(store_send(req, ST_HELLO, "req", hello, (size_t)n, 0) == 0);
}

/* A rank's share: keys beyond it, a value over the rendezvous limit and
 * records over the configuration's are refused, the peer named, and the
 * group fails; the keys of configurations before the last two begun are
 * dropped, so that any number of configurations stays within the share. */
static void test_store_bounds(void)
{
    store_server *srv;
    EXPECT(store_server_start(0, 3, 5000.0, &srv) == DPS_OK);
    int port = store_server_port(srv), ctl = store_raw(port), req = store_raw(port);
    store_raw_hello(ctl, req, 1);
    char key[32], why[DPS_ERRMSG_MAX];
    for (int i = 0; i <= STORE_KEYS_PER_RANK; i++) {
        snprintf(key, sizeof key, "k%d", i);
        EXPECT(store_send(req, ST_SET, key, "v", 1, 0) == 0);
    }
    int asked;
    for (int i = 0; i < 200 && !store_server_failure(srv, &asked, why, sizeof why); i++) usleep(5000);
    EXPECT(strstr(why, "refused 127.0.0.1:") && strstr(why, "rank 1's request connection, pid 4242 "
           "on host evil") && strstr(why, "it set key k16 beyond the 16 keys a rank needs"));
    close(ctl);
    close(req);
    store_server_stop(srv);

    EXPECT(store_server_start(0, 2, 5000.0, &srv) == DPS_OK);
    port = store_server_port(srv);
    ctl = store_raw(port);
    req = store_raw(port);
    store_raw_hello(ctl, req, 1);
    size_t big = store_rendezvous_max(2) + 1;
    char *blob = calloc(1, big);
    EXPECT(store_send(req, ST_SET, "addr", blob, big, 0) == 0);
    for (int i = 0; i < 200 && !store_server_failure(srv, &asked, why, sizeof why); i++) usleep(5000);
    EXPECT(strstr(why, "it sent 4609 bytes for key \"addr\" (frame type 2); a key of a 2-rank "
           "world holds 4608 bytes at most"));
    free(blob);
    close(ctl);
    close(req);
    store_server_stop(srv);

    EXPECT(store_server_start(0, 2, 5000.0, &srv) == DPS_OK);
    dps_store *c[2];
    for (int r = 0; r < 2; r++)
        EXPECT(store_connect("127.0.0.1", store_server_port(srv), r, 2, 5000.0, &c[r]) == DPS_OK);
    for (int cfg = 0; cfg < 12; cfg++) { /* 4 keys a configuration: 12 × 4 > 16 */
        char prefix[16];
        snprintf(prefix, sizeof prefix, "c%d/", cfg);
        store_server_begin(srv, prefix, 100);
        store_set_prefix(c[0], prefix);
        store_set_prefix(c[1], prefix);
        for (int k = 0; k < 4; k++) {
            snprintf(key, sizeof key, "k%d", k);
            EXPECT(store_set(c[1], key, "v", 1) == DPS_OK);
        }
        void *val = NULL;
        size_t len = 0;
        EXPECT(store_get(c[0], "k3", 1, &val, &len, 2000.0) == DPS_OK && len == 1);
        free(val);
    }
    EXPECT(store_server_failure(srv, &asked, why, sizeof why) == DPS_OK);
    char rec[101] = {0};
    EXPECT(store_post(c[1], "report", rec, sizeof rec) == DPS_OK);
    for (int i = 0; i < 200 && !store_server_failure(srv, &asked, why, sizeof why); i++) usleep(5000);
    EXPECT(strstr(why, "rank 1's control connection") &&
           strstr(why, "this configuration's records are 100 bytes at most"));
    store_close(c[0]);
    store_close(c[1]);
    store_server_stop(srv);
}

/* A listener whose accept queue is full drops connections' SYNs: a rank
 * gives up at its timeout, not after the kernel's minutes of retries. */
static void test_store_no_accept(void)
{
    int l = socket(AF_INET, SOCK_STREAM, 0), fill[4];
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    EXPECT(bind(l, (struct sockaddr *)&a, sizeof a) == 0 && listen(l, 0) == 0);
    EXPECT(getsockname(l, (struct sockaddr *)&a, &al) == 0);
    for (int i = 0; i < 4; i++) {
        fill[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        (void)!connect(fill[i], (struct sockaddr *)&a, sizeof a);
    }
    usleep(200000);
    dps_store *c = NULL;
    double t0 = dps_now_ms();
    EXPECT(store_connect("127.0.0.1", ntohs(a.sin_port), 1, 2, 400.0, &c) == DPS_ERR_TIMEOUT);
    EXPECT(dps_now_ms() - t0 < 400.0 + 500.0);
    EXPECT(strstr(dps_errmsg(), "within --timeout 0.4 s"));
    for (int i = 0; i < 4; i++) close(fill[i]);
    close(l);
}

/* What a store client's watch saw: the server's word to abort. */
typedef struct store_seen { _Atomic int lost; char why[DPS_ERRMSG_MAX]; } store_seen;

static int store_idle(void *ctx, int *step) { (void)ctx; *step = 1; return 0; }

static void store_lost(void *ctx, const char *why)
{
    store_seen *s = ctx;
    dps_strlcpy(s->why, why, sizeof s->why);
    atomic_store(&s->lost, 1);
}

/* The ranks' store: keys, the roster, a rank that ends without its key
 * (GONE at once, named), a rank whose connection closes without a word
 * (every other rank told to abort, the rank named), and ranks that never
 * arrive (named, within the timeout). */
static void test_store(void)
{
    store_server *srv;
    EXPECT(store_server_start(0, 3, 10000.0, &srv) == DPS_OK);
    int port = store_server_port(srv);
    dps_store *c[3];
    for (int r = 0; r < 3; r++)
        EXPECT(store_connect("127.0.0.1", port, r, 3, 5000.0, &c[r]) == DPS_OK);
    store_member m[3];
    EXPECT(store_roster(c[2], m, 3) == DPS_OK && m[1].pid == (int)getpid());
    EXPECT(!strcmp(m[0].addr, "127.0.0.1"));
    store_set_prefix(c[0], "c0/");
    store_set_prefix(c[1], "c0/");
    EXPECT(store_set(c[0], "k", "hello", 5) == DPS_OK);
    void *val = NULL;
    size_t len = 0;
    EXPECT(store_get(c[1], "k", 0, &val, &len, 1000.0) == DPS_OK && len == 5 && !memcmp(val, "hello", 5));
    free(val);
    EXPECT(store_get(c[2], "k", 0, &val, &len, 200.0) == DPS_ERR_TIMEOUT); /* another prefix */
    store_seen seen = {0};
    EXPECT(store_watch(c[0], store_idle, store_lost, &seen) == DPS_OK);
    store_finish(c[2]);
    store_close(c[2]);
    EXPECT(store_get(c[1], "never", 2, &val, &len, 5000.0) == DPS_ERR_RUNTIME);
    EXPECT(strstr(dps_errmsg(), "rank 2 (pid") && strstr(dps_errmsg(), "ended without setting"));
    store_close(c[1]); /* gone without a word */
    for (int i = 0; i < 300 && !atomic_load(&seen.lost); i++) usleep(10000);
    EXPECT(atomic_load(&seen.lost) && strstr(seen.why, "rank 1 (pid") &&
           strstr(seen.why, "ended without a word"));
    int asked;
    char why[DPS_ERRMSG_MAX];
    EXPECT(store_server_failure(srv, &asked, why, sizeof why) == DPS_ERR_RUNTIME && !asked);
    store_close(c[0]);
    store_server_stop(srv);

    EXPECT(store_server_start(0, 2, 300.0, &srv) == DPS_OK);
    EXPECT(store_connect("127.0.0.1", store_server_port(srv), 0, 2, 300.0, &c[0]) == DPS_OK);
    EXPECT(store_roster(c[0], m, 2) != DPS_OK);
    EXPECT(strstr(dps_errmsg(), "1 of 2 ranks arrived within --timeout 0.3 s; missing: 1"));
    EXPECT(store_server_failure(srv, &asked, why, sizeof why) == DPS_ERR_TIMEOUT);
    store_close(c[0]);
    store_server_stop(srv);
    test_store_keys();
    test_store_reader();
    test_store_peers();
    test_store_bounds();
    test_store_no_accept();
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
 * stretch does not compound, and a copy phase is left alone. */
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
    ptimer_set_slowdown(&t, 0.5);
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

/* The host backend's GELU, its derivative and softmax cross-entropy (its own
 * vectorizable arithmetic) against dps_gelu / dps_gelu_grad (libm's erff and
 * expf, what the GPU kernels run) and a double-precision softmax. */
static void test_host_math(void)
{
    be_options o = {.kind = BE_HOST, .host_devices = 1, .quiet = 1};
    backend *be = NULL;
    EXPECT(be_open(&o, &be) == DPS_OK);
    if (!be) return;
    const float special[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 30.0f, -30.0f, 1e30f, -1e30f, 87.5f,
                             -87.5f, INFINITY, NAN};
    int nsp = (int)(sizeof special / sizeof special[0]), n = 240001 + nsp;
    float *x = malloc((size_t)n * 4), *y = malloc((size_t)n * 4), *bias = calloc((size_t)n, 4);
    float *dh = malloc((size_t)n * 4), *g = malloc((size_t)n * 4);
    for (int i = 0; i < n - nsp; i++) x[i] = -12.0f + 24.0f * (float)i / (float)(n - nsp - 1);
    for (int i = 0; i < nsp; i++) x[n - nsp + i] = special[i];
    for (int i = 0; i < n; i++) dh[i] = 1.0f - (float)(i % 3);
    EXPECT(be->ops->bias_act(be, NULL, 1, n, x, bias, y) == DPS_OK);
    EXPECT(be->ops->gelu_bwd(be, NULL, n, dh, x, g) == DPS_OK);
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
    EXPECT(be->ops->xent(be, NULL, rows, classes, logits, labels, 0.25f, dl, loss) == DPS_OK);
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
    EXPECT(be->ops->xent(be, NULL, 1, classes, logits, labels, 0.25f, dl, loss) == DPS_OK);
    EXPECT(isnan(loss[0]));
    free(x); free(y); free(bias); free(dh); free(g); free(logits); free(dl);
    be_close(be);
}

/* Loss of the model on the host backend, in double for finite differences. */
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
 * the same on every call. */
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
        EXPECT(be->ops->col_sum(be, NULL, rows, cols, x, out) == DPS_OK);
        EXPECT(be->ops->col_sum(be, NULL, rows, cols, x, again) == DPS_OK);
        col_sum_as_gpu(rows, cols, x, gpu);
        EXPECT(memcmp(out, again, (size_t)cols * sizeof(float)) == 0);
        EXPECT(memcmp(out, gpu, (size_t)cols * sizeof(float)) == 0);
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
    be_close(be);
}

/* The autocast ops on the host backend (an exact emulation): casts as
 * elementwise.h rounds; a bf16 GEMM is the fp32 GEMM of the rounded
 * operands, its bf16 output rounded once; Linear + GELU and GELU's
 * backward per element; bf16 bias gradients in col_sum's order. */
static void test_autocast_ops(void)
{
    be_options o = {.kind = BE_HOST, .host_devices = 1, .quiet = 1};
    backend *be = NULL;
    EXPECT(be_open(&o, &be) == DPS_OK);
    if (!be) return;
    const be_ops *op = be->ops;
    enum { M = 37, N = 45, K = 29 };
    float a[M * K], b[K * N], ar[M * K], br[K * N], want[M * N], got[M * N], c0[M * N];
    uint16_t a16[M * K], b16[K * N], c16[M * N];
    for (int i = 0; i < M * K; i++) a[i] = dps_uniform(11, 1, (uint64_t)i);
    for (int i = 0; i < K * N; i++) b[i] = dps_uniform(11, 2, (uint64_t)i);
    for (int i = 0; i < M * N; i++) c0[i] = dps_uniform(11, 3, (uint64_t)i);
    EXPECT(op->cast(be, NULL, M * K, a, BE_F32, a16, BE_BF16) == DPS_OK);
    EXPECT(op->cast(be, NULL, K * N, b, BE_F32, b16, BE_BF16) == DPS_OK);
    EXPECT(op->cast(be, NULL, M * K, a16, BE_BF16, ar, BE_F32) == DPS_OK);
    EXPECT(op->cast(be, NULL, K * N, b16, BE_BF16, br, BE_F32) == DPS_OK);
    EXPECT(a16[5] == dps_f32_to_bf16(a[5]) && ar[5] == dps_bf16_to_f32(a16[5]));
    memcpy(want, c0, sizeof want);
    EXPECT(op->gemm(be, NULL, 0, 0, M, N, K, 1.0f, ar, K, br, N, 0.5f, want, N) == DPS_OK);
    memcpy(got, c0, sizeof got);
    EXPECT(op->gemm_ex(be, NULL, 0, 0, M, N, K, 1.0f, a16, BE_BF16, K, b16, BE_BF16, N, 0.5f, got,
                       BE_F32, N) == DPS_OK);
    EXPECT(memcmp(got, want, sizeof got) == 0);
    memcpy(got, c0, sizeof got); /* an fp32 A beside a bf16 B is rounded first */
    EXPECT(op->gemm_ex(be, NULL, 0, 0, M, N, K, 1.0f, a, BE_F32, K, b16, BE_BF16, N, 0.5f, got,
                       BE_F32, N) == DPS_OK);
    EXPECT(memcmp(got, want, sizeof got) == 0);
    EXPECT(op->cast(be, NULL, M * N, c0, BE_F32, c16, BE_BF16) == DPS_OK);
    for (int i = 0; i < M * N; i++) want[i] = dps_bf16_to_f32(c16[i]);
    EXPECT(op->gemm(be, NULL, 0, 0, M, N, K, 1.0f, ar, K, br, N, 1.0f, want, N) == DPS_OK);
    EXPECT(op->gemm_ex(be, NULL, 0, 0, M, N, K, 1.0f, a16, BE_BF16, K, b16, BE_BF16, N, 1.0f, c16,
                       BE_BF16, N) == DPS_OK);
    int rounded_once = 1;
    for (int i = 0; i < M * N; i++) rounded_once &= c16[i] == dps_f32_to_bf16(want[i]);
    EXPECT(rounded_once);
    EXPECT(op->gemm_ex(be, NULL, 0, 0, M, N, K, 1.0f, a, BE_F32, K, b, BE_F32, N, 0.0f, c16,
                       BE_BF16, N) == DPS_ERR_RUNTIME && strstr(dps_errmsg(), "cast A or B"));
    /* Linear + GELU, GELU's backward, the bias gradient */
    uint16_t bias[N], pre[M * N], post[M * N], dpre[M * N];
    for (int c = 0; c < N; c++) bias[c] = dps_f32_to_bf16(dps_uniform(11, 4, (uint64_t)c));
    EXPECT(op->bias_act_bf16(be, NULL, M, N, c0, bias, pre, post) == DPS_OK);
    uint16_t p1, q1;
    dps_bias_act_bf16(c0[N + 3], bias[3], &p1, &q1);
    EXPECT(pre[N + 3] == p1 && post[N + 3] == q1);
    EXPECT(pre[7] == dps_f32_to_bf16(c0[7] + dps_bf16_to_f32(bias[7])));
    EXPECT(op->gelu_bwd_bf16(be, NULL, M * N, post, pre, dpre) == DPS_OK);
    EXPECT(dpre[9] == dps_gelu_bwd_bf16(post[9], pre[9]));
    float sums[N], sums_wide[N];
    EXPECT(op->cast(be, NULL, M * N, dpre, BE_BF16, got, BE_F32) == DPS_OK);
    EXPECT(op->col_sum(be, NULL, M, N, got, sums_wide) == DPS_OK);
    EXPECT(op->col_sum_bf16(be, NULL, M, N, dpre, sums) == DPS_OK);
    EXPECT(memcmp(sums, sums_wide, sizeof sums) == 0);
    be_close(be);
}

/* DDP's bucket copy: one pass, the same bits as a copy then a scale, in place too. */
static void test_scale_copy(void)
{
    be_options o = {.kind = BE_HOST, .host_devices = 1, .quiet = 1};
    backend *be = NULL;
    EXPECT(be_open(&o, &be) == DPS_OK);
    if (!be) return;
    enum { N = 1001 };
    float g[N], two_pass[N], one_pass[N], in_place[N];
    for (int i = 0; i < N; i++) in_place[i] = g[i] = dps_uniform(5, 1, (uint64_t)i) * 7.0f;
    const float a = 1.0f / 3.0f;
    EXPECT(be->ops->copy(be, NULL, two_pass, 0, g, 0, sizeof g) == DPS_OK);
    EXPECT(be->ops->scale(be, NULL, N, two_pass, a) == DPS_OK);
    EXPECT(be->ops->scale_copy(be, NULL, N, one_pass, g, a) == DPS_OK);
    EXPECT(be->ops->scale_copy(be, NULL, N, in_place, in_place, a) == DPS_OK);
    EXPECT(memcmp(one_pass, two_pass, sizeof g) == 0 && memcmp(in_place, two_pass, sizeof g) == 0);
    EXPECT(be->ops->scale_copy(be, NULL, 0, NULL, NULL, a) == DPS_OK);
    EXPECT(dps_scale_copy(3.0f, 0.5f) == 1.5f);
    be_close(be);
}

/* The batches made on the helper thread, ahead of each step or when asked:
 * model_make_batch's own, bit for bit, step after step. */
static void test_batches(void)
{
    be_options o = {.kind = BE_HOST, .host_devices = 1, .quiet = 1};
    backend *be = NULL;
    EXPECT(be_open(&o, &be) == DPS_OK);
    if (!be) return;
    model_shape s = {2, 64, 4, 16};
    enum { ROWS = 12, STEPS = 5 };
    float want_x[ROWS * 64];
    int32_t want_y[ROWS];
    for (int ahead = 0; ahead < 2; ahead++) {
        batches b;
        EXPECT(batches_start(&b, be, s, 1234, 7, ROWS, STEPS, ahead) == DPS_OK);
        for (int k = 0; k < STEPS; k++) {
            const float *x = NULL;
            const int32_t *y = NULL;
            batches_get(&b, k, &x, &y);
            model_make_batch(s, 1234, k, 7, ROWS, want_x, want_y);
            EXPECT(memcmp(x, want_x, sizeof want_x) == 0 && memcmp(y, want_y, sizeof want_y) == 0);
        }
        batches_stop(&b);
        batches_stop(&b); /* twice: nothing left to end or free */
    }
    batches zeroed;
    memset(&zeroed, 0, sizeof zeroed);
    batches_stop(&zeroed);
    be_close(be);
}

static double host_loss(backend *be, model_shape s, float *params, model_acts *a, int rows,
                        const float *x, const int32_t *labels, float *logits, float *dl, float *rl)
{
    EXPECT(model_forward(be, NULL, s, params, a, rows, x, logits) == DPS_OK);
    EXPECT(be->ops->xent(be, NULL, rows, s.classes, logits, labels, 1.0f / rows, dl, rl) == DPS_OK);
    double sum = 0;
    for (int r = 0; r < rows; r++) sum += rl[r];
    return sum / rows;
}

static void test_gradients(void)
{
    be_options o = {.kind = BE_HOST, .host_devices = 1};
    backend *be = NULL;
    EXPECT(be_open(&o, &be) == DPS_OK);
    model_shape s = {2, 6, 3, 5};
    int rows = 4 * s.tokens;
    size_t n = model_param_count(s);
    float *p = malloc(n * 4), *g = malloc(n * 4), *x = malloc((size_t)rows * s.width * 4);
    float *logits = malloc((size_t)rows * s.classes * 4), *dl = malloc((size_t)rows * s.classes * 4);
    float *rl = malloc((size_t)rows * 4);
    int32_t *labels = malloc((size_t)rows * 4);
    model_init_params(s, 3, p);
    for (size_t i = 0; i < n; i++) p[i] *= 3.0f; /* larger weights: visible GELU curvature */
    model_make_batch(s, 3, 0, 0, rows, x, labels);
    model_acts a;
    EXPECT(model_acts_alloc(be, 0, s, rows, PREC_FP32, &a) == DPS_OK);
    host_loss(be, s, p, &a, rows, x, labels, logits, dl, rl);
    EXPECT(model_backward(be, NULL, s, p, &a, rows, x, dl, g, NULL, NULL) == DPS_OK);
    double worst = 0;
    for (size_t i = 0; i < n; i += 3) {
        float keep = p[i];
        double h = 1e-2;
        p[i] = keep + (float)h;
        double up = host_loss(be, s, p, &a, rows, x, labels, logits, dl, rl);
        p[i] = keep - (float)h;
        double down = host_loss(be, s, p, &a, rows, x, labels, logits, dl, rl);
        p[i] = keep;
        double num = (up - down) / (2 * h);
        double err = fabs(num - g[i]) / (fabs(num) + fabs(g[i]) + 1e-3);
        if (err > worst) worst = err;
    }
    EXPECT(worst < 2e-2);
    if (worst >= 2e-2) fprintf(stderr, "worst relative gradient error %.3g\n", worst);
    model_acts_free(be, &a);
    EXPECT(be->mem[0].in_use == 0);
    be_close(be);
    free(p); free(g); free(x); free(logits); free(dl); free(rl); free(labels);
}

/* The model as under autocast (acts made for PREC_BF16), on the host
 * backend's exact emulation of the bf16 ops: logits are bf16 values and
 * near the fp32 model's; the gradients near the fp32 ones; the layers'
 * hooks come in the same order; every buffer is freed. */
static int bf16_hooks[8], bf16_nhooks;
static dps_status bf16_hook(void *ctx, int layer)
{
    (void)ctx;
    if (bf16_nhooks < 8) bf16_hooks[bf16_nhooks++] = layer;
    return DPS_OK;
}

static void test_model_bf16(void)
{
    be_options o = {.kind = BE_HOST, .host_devices = 1, .quiet = 1};
    backend *be = NULL;
    EXPECT(be_open(&o, &be) == DPS_OK);
    if (!be) return;
    model_shape s = {3, 32, 4, 24};
    int rows = 5 * s.tokens;
    size_t n = model_param_count(s), nl = (size_t)rows * s.classes;
    float *p = malloc(n * 4), *g32 = malloc(n * 4), *g16 = malloc(n * 4);
    float *x = malloc((size_t)rows * s.width * 4), *l32 = malloc(nl * 4), *l16 = malloc(nl * 4);
    float *dl = malloc(nl * 4), *rl = malloc((size_t)rows * 4);
    int32_t *labels = malloc((size_t)rows * 4);
    model_init_params(s, 5, p);
    model_make_batch(s, 5, 0, 0, rows, x, labels);
    model_acts a32, a16;
    EXPECT(model_acts_alloc(be, 0, s, rows, PREC_FP32, &a32) == DPS_OK && !a32.bf16);
    EXPECT(model_acts_alloc(be, 0, s, rows, PREC_BF16, &a16) == DPS_OK && a16.bf16);
    EXPECT(model_forward(be, NULL, s, p, &a32, rows, x, l32) == DPS_OK);
    EXPECT(model_forward(be, NULL, s, p, &a16, rows, x, l16) == DPS_OK);
    double worst = 0, top = 0;
    int representable = 1;
    for (size_t i = 0; i < nl; i++) {
        representable &= dps_bf16_to_f32(dps_f32_to_bf16(l16[i])) == l16[i];
        worst = fmax(worst, fabs(l16[i] - l32[i]));
        top = fmax(top, fabs(l32[i]));
    }
    EXPECT(representable && worst <= 0.03 * top + 1e-3);
    EXPECT(be->ops->xent(be, NULL, rows, s.classes, l32, labels, 1.0f / rows, dl, rl) == DPS_OK);
    EXPECT(model_backward(be, NULL, s, p, &a32, rows, x, dl, g32, NULL, NULL) == DPS_OK);
    EXPECT(model_backward(be, NULL, s, p, &a16, rows, x, dl, g16, bf16_hook, NULL) == DPS_OK);
    worst = top = 0;
    for (size_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs(g16[i] - g32[i]));
        top = fmax(top, fabs(g32[i]));
    }
    EXPECT(top > 0 && worst <= 0.03 * top);
    if (worst > 0.03 * top) fprintf(stderr, "bf16 gradients off by %.3g of %.3g\n", worst, top);
    EXPECT(bf16_nhooks == 4 && bf16_hooks[0] == 3 && bf16_hooks[3] == 0);
    model_acts_free(be, &a16);
    model_acts_free(be, &a32);
    EXPECT(be->mem[0].in_use == 0);
    be_close(be);
    free(p); free(g32); free(g16); free(x); free(l32); free(l16); free(dl); free(rl); free(labels);
}

/* dp over 2 host devices for 3 steps of a small model, in fp32 or as
 * under autocast (the host backend's exact bf16 emulation); NULL if it
 * failed to run. */
static train_result *dp_two_devices(int bf16)
{
    be_options o = {.kind = BE_HOST, .host_devices = 2, .quiet = 1};
    backend *be = NULL;
    if (be_open(&o, &be) != DPS_OK || !be) return NULL;
    dps_config c;
    config_defaults(&c);
    c.mode = MODE_DP;
    c.shape = (model_shape){2, 64, 4, 48};
    c.ngpus = 2;
    c.devices[0] = 0;
    c.devices[1] = 1;
    c.global_batch = 6;
    c.warmup = 0;
    c.steps = 3;
    c.trace_steps = 0;
    c.precision = bf16 ? PREC_BF16 : PREC_FP32;
    static train_result res[2];
    train_result *r = &res[bf16];
    dps_status rc = train_result_init(r, &c, c.ngpus);
    if (!rc) rc = dp_train(&c, be, r);
    if (!rc) {
        footprint fp;
        footprint_of(&c, BE_HOST, &fp);
        for (int i = 0; i < 2; i++) EXPECT(r->dev[i].alloc_peak == fp.device[i]);
        for (int i = 0; i < 2; i++) EXPECT(be->mem[i].in_use == 0);
    }
    be_close(be);
    if (rc) fprintf(stderr, "dp %s: %s\n", bf16 ? "bf16" : "fp32", dps_errmsg());
    return rc ? NULL : r;
}

/* dp under autocast gathers bf16 logits and scatters their bf16 gradient,
 * as DataParallel does: half the logits' bytes between the devices, losses
 * within 3 % of fp32's, memory as footprint.c says. */
static void test_dp_bf16(void)
{
    train_result *f32 = dp_two_devices(0), *b16 = dp_two_devices(1);
    EXPECT(f32 && b16);
    if (!f32 || !b16) return;
    for (int k = 0; k < 3; k++) EXPECT(fabs(b16->loss[k] - f32->loss[k]) <= 0.03 * f32->loss[k]);
    /* device 1: 3 samples of 4 tokens, 48 classes: its logits sent, their gradient received */
    double half = 3 * 4 * 48 * 2.0;
    EXPECT(b16->dev[1].link_bytes[LINK_P2P_SENT] == f32->dev[1].link_bytes[LINK_P2P_SENT] - half);
    EXPECT(b16->dev[1].link_bytes[LINK_P2P_RECV] == f32->dev[1].link_bytes[LINK_P2P_RECV] - half);
    train_result_free(f32);
    train_result_free(b16);
}

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
        EXPECT(run_gemm_reference(be, 0, s, 32, bf16 ? PREC_BF16 : PREC_FP32, &tflops) == DPS_OK &&
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

static void test_buckets(void)
{
    /* model order; reverse order is 5, 50, 10, 100, 10, 100 elements (4 bytes) */
    size_t counts[] = {100, 10, 100, 10, 50, 5};
    bucket b[16];
    int n = bucket_assign(counts, 6, 4, 200, 400, b, 16);
    EXPECT(n == 3);
    /* first bucket closes at >= 200 bytes: params 5 and 4 */
    EXPECT(b[0].first_param == 4 && b[0].nparams == 2 && b[0].lo == 220 && b[0].hi == 275);
    EXPECT(b[1].first_param == 2 && b[1].nparams == 2 && b[1].lo == 110 && b[1].hi == 220);
    EXPECT(b[2].first_param == 0 && b[2].nparams == 2 && b[2].lo == 0 && b[2].hi == 110);
    /* a cap above the total: one bucket for all */
    n = bucket_assign(counts, 6, 4, 1 << 20, 1 << 20, b, 16);
    EXPECT(n == 1 && b[0].lo == 0 && b[0].hi == 275 && b[0].nparams == 6);
    /* a cap below every parameter: one bucket per parameter, last parameter first */
    n = bucket_assign(counts, 6, 4, 1, 1, b, 16);
    EXPECT(n == 6);
    for (int i = 0; i < n && n == 6; i++) EXPECT(b[i].first_param == 5 - i && b[i].nparams == 1);
    /* the first bucket's cap differs from the others' */
    n = bucket_assign(counts, 6, 4, 1, 100000, b, 16);
    EXPECT(n == 2 && b[0].nparams == 1 && b[1].nparams == 5);
    EXPECT(bucket_assign(counts, 6, 4, 1, 1, b, 3) == -1);
    /* buckets tile the parameters in reverse order for the model too */
    model_shape s = {3, 300, 4, 1000};
    size_t mc[16];
    int np = bucket_model_params(s, mc, 16);
    EXPECT(np == 8);
    n = bucket_assign(mc, np, 4, 1 << 20, 1 << 20, b, 16);
    size_t hi = model_param_count(s);
    for (int i = 0; i < n; i++) {
        EXPECT(b[i].hi == hi);
        hi = b[i].lo;
    }
    EXPECT(hi == 0);
    int sizes[4];
    ddp_shard_sizes(10, 4, sizes);
    EXPECT(sizes[0] == 3 && sizes[1] == 3 && sizes[2] == 2 && sizes[3] == 2);
}

static float ring_value(int rank, size_t i) { return (float)((rank * 7 + (int)(i % 13)) % 19); }

typedef struct ring_case {
    size_t n;
    comm_dtype dt;
    int bcast;           /* broadcast from rank 1 instead of all-reduce */
} ring_case;

/* Every case of one group of ranks, run in one set of rank processes. */
typedef struct ring_cases {
    comm_shared *sh;
    ring_case c[32];
    int n;
} ring_cases;

/* A rank's comm on a host backend of nranks emulated devices. */
static dps_status open_rank(comm_shared *sh, int rank, backend **be, comm **c)
{
    be_options bo = {.kind = BE_HOST, .host_devices = sh->nranks, .quiet = 1};
    DPS_TRY(be_open(&bo, be));
    comm_params cp = {sh, rank, *be, rank, 20000.0, NULL, NULL};
    return comm_open(&cp, c);
}

static int ring_check(const ring_case *k, int nranks, int rank, const char *buf)
{
    for (size_t i = 0; i < k->n; i++) {
        float want = 0.0f;
        if (k->bcast) want = ring_value(9, i);
        else
            for (int r = 0; r < nranks; r++) want += ring_value(r, i);
        float got = k->dt == COMM_F32 ? ((const float *)buf)[i]
                                      : dps_bf16_to_f32(((const uint16_t *)buf)[i]);
        if (got != want) {
            fprintf(stderr, "rank %d/%d n=%zu %s: [%zu] = %g, expected %g\n", rank, nranks, k->n,
                    k->bcast ? "broadcast" : k->dt == COMM_F32 ? "f32" : "bf16", i, got, want);
            return 1;
        }
    }
    return 0;
}

/* One case: all-reduce (or broadcast) n elements and compare with the exact result. */
static int ring_one(comm *c, const ring_case *k, int rank)
{
    char *buf = malloc(k->n * comm_dtype_bytes(k->dt) + 1);
    if (!buf) return 1;
    for (size_t i = 0; i < k->n; i++) {
        float v = k->bcast ? (rank == 1 ? ring_value(9, i) : -1.0f) : ring_value(rank, i);
        if (k->dt == COMM_F32) ((float *)buf)[i] = v;
        else ((uint16_t *)buf)[i] = dps_f32_to_bf16(v);
    }
    dps_status rc = k->bcast ? comm_broadcast(c, buf, k->n * comm_dtype_bytes(k->dt), 1)
                             : comm_allreduce(c, buf, k->n, k->dt);
    int bad = rc != DPS_OK || ring_check(k, c->nranks, rank, buf);
    free(buf);
    return bad;
}

static int ring_rank(void *ctx, int rank, rank_beat *beat)
{
    const ring_cases *a = ctx;
    backend *be = NULL;
    comm *c = NULL;
    int bad = open_rank(a->sh, rank, &be, &c) != DPS_OK;
    for (int k = 0; !bad && k < a->n; k++) {
        ranks_beat_step(beat, k);
        bad = ring_one(c, &a->c[k], rank);
    }
    comm_close(c);
    if (be) be_close(be);
    return bad;
}

static void run_ranks(int nranks, int (*rank_main)(void *, int, rank_beat *), void *ctx,
                      const char *what)
{
    ranks_spec spec = {.nranks = nranks, .rank_main = rank_main, .ctx = ctx, .timeout_s = 60};
    if (ranks_run(&spec) != DPS_OK) {
        fprintf(stderr, "%s with %d ranks: %s\n", what, nranks, dps_errmsg());
        failures++;
    }
}

static void add_case(ring_cases *a, size_t n, comm_dtype dt, int bcast)
{
    if (a->n < (int)(sizeof a->c / sizeof a->c[0])) a->c[a->n++] = (ring_case){n, dt, bcast};
    else failures++;
}

/* Counts around the ring's chunk and slot boundaries, f32 and bf16, and
 * broadcasts, for 1 to 5 ranks: one group of rank processes per count. */
static void test_ring(void)
{
    size_t slot = COMM_SLOT_BYTES / 4;
    size_t counts[] = {0, 1, 2, 3, 5, 7, 1000, 4099, slot - 1, slot + 5, 3 * slot + 1};
    for (int nr = 1; nr <= 5; nr++) {
        size_t bytes = comm_shared_bytes(nr);
        ring_cases *a = calloc(1, sizeof *a);
        comm_shared *sh = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        EXPECT(a && sh != MAP_FAILED);
        if (!a || sh == MAP_FAILED) return;
        comm_shared_init(sh, nr);
        a->sh = sh;
        for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
            add_case(a, counts[i], COMM_F32, 0);
            if (counts[i] < 5000) add_case(a, counts[i], COMM_BF16, 0);
        }
        if (nr == 3) add_case(a, 2 * slot + 3, COMM_BF16, 0); /* bf16 pieces cross slots */
        if (nr >= 2 && nr <= 4) {
            add_case(a, 1, COMM_F32, 1);
            add_case(a, 3 * slot + 7, COMM_F32, 1);
        }
        run_ranks(nr, ring_rank, a, "ring");
        munmap(sh, bytes);
        free(a);
    }
}

static const char *write_tmp(const char *name, const void *data, size_t len)
{
    static char path[256];
    snprintf(path, sizeof path, "/tmp/dpscale-suite-%d-%s", (int)getpid(), name);
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(data, 1, len, f);
        fclose(f);
    }
    return path;
}

/* A loader of a text file the tests refuse: suite, machine, workload, calibration. */
typedef dps_status (*file_loader)(const char *path);

/* data (len bytes) in a file that `load` refuses with "<path><needle>". */
static void expect_data_refused(file_loader load, const char *data, size_t len, const char *needle)
{
    const char *path = write_tmp("bad", data, len);
    dps_status rc = load(path);
    char want[520];
    snprintf(want, sizeof want, "%.255s%.255s", path, needle);
    if (rc != DPS_ERR_USAGE || !strstr(dps_errmsg(), want)) {
        fprintf(stderr, "file '%.40s...': rc %d, message '%s', expected '%s'\n", data, rc,
                dps_errmsg(), want);
        failures++;
    }
    unlink(path);
}

static void expect_file_refused(file_loader load, const char *text, const char *needle)
{
    expect_data_refused(load, text, strlen(text), needle);
}

static dps_status load_suite_host(const char *path)
{
    suite s;
    return suite_load(path, BE_HOST, &s);
}

/* A suite file refused at "<path>:<needle>". */
static void expect_suite_error(const char *text, size_t len, const char *needle)
{
    char colon[256];
    snprintf(colon, sizeof colon, ":%s", needle);
    expect_data_refused(load_suite_host, text, len, colon);
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
    static const char bom[] = "\xEF\xBB\xBFmodels = tiny\nsteps = 3\n";
    path = write_tmp("bom", bom, sizeof bom - 1);
    EXPECT(suite_load(path, BE_HOST, &s) == DPS_OK && s.steps == 3); /* a BOM is skipped */
    unlink(path);
    EXPECT(suite_load("/dev/null", BE_HOST, &s) == DPS_ERR_USAGE); /* not a regular file */
    EXPECT(strstr(dps_errmsg(), "not a regular file") != NULL);
    EXPECT(suite_load("/nonexistent/x.suite", BE_HOST, &s) == DPS_ERR_USAGE);
    EXPECT(strstr(dps_errmsg(), "/nonexistent/x.suite: cannot read the suite file") != NULL);
}

/* Every entry is complete, its default lies in its range and reads back. */
static void expect_entry_consistent(int id)
{
    const settings_entry *e = &settings_table[id];
    settings_value v;
    settings_error err;
    char text[64] = "";
    if (!e->help || !(e->flag || e->key) || (e->key && settings_find_key(e->key) != id) ||
        ((e->type == SETTINGS_WORD || e->type == SETTINGS_FAULT) && e->nwords < 2)) {
        fprintf(stderr, "settings entry %d (--%s, key %s): incomplete\n", id, e->flag, e->key);
        failures++;
    }
    /* an option names the subcommands that take it, a list those that take a list */
    EXPECT(!e->flag == !e->cmds && (e->list_cmds & ~e->cmds) == 0);
    EXPECT(!e->list_cmds == (e->cli_max < 2));
    /* a flag twice only for disjoint subcommands (--gpus: predict's own range) */
    for (int j = 0; e->flag && j < id; j++)
        EXPECT(!settings_table[j].flag || strcmp(settings_table[j].flag, e->flag) != 0 ||
               (settings_table[j].cmds & e->cmds) == 0);
    if (!e->has_default) return;
    if (e->def_text) snprintf(text, sizeof text, "%s", e->def_text);
    else if (e->type == SETTINGS_WORD) snprintf(text, sizeof text, "%s", e->words[e->def.i]);
    else if (e->type == SETTINGS_NUMBER) snprintf(text, sizeof text, "%.17g", e->def.x);
    else snprintf(text, sizeof text, "%lld", (long long)e->def.i);
    int back = settings_value_parse((settings_id)id, 1, text, &v, &err) == 0;
    if (!back || (e->type == SETTINGS_NUMBER ? v.v[0].x != e->def.x : !e->def_text && v.v[0].i != e->def.i)) {
        fprintf(stderr, "settings entry %d: default '%s' does not read back (%s)\n", id, text, err.what);
        failures++;
    }
}

/* The command line and a suite file refuse the same value with the same words. */
static void expect_same_refusal(const char *option, const char *suite_line)
{
    static cli_args a;
    char msg[DPS_ERRMSG_MAX];
    EXPECT(parse(option, &a) == DPS_ERR_USAGE);
    const char *what = strstr(dps_errmsg(), ": ");
    snprintf(msg, sizeof msg, "%s", what ? what + 2 : "(no message)");
    suite s;
    const char *path = write_tmp("same", suite_line, strlen(suite_line));
    if (suite_load(path, BE_HOST, &s) != DPS_ERR_USAGE || !strstr(dps_errmsg(), msg)) {
        fprintf(stderr, "'%s' refused with '%s'; suite '%s': '%s'\n", option, msg, suite_line,
                dps_errmsg());
        failures++;
    }
    unlink(path);
}

static void test_settings(void)
{
    for (int id = 0; id < SET_COUNT; id++) expect_entry_consistent(id);
    expect_same_refusal("run --steps 0", "steps = 0\n");
    expect_same_refusal("run --warmup x", "warmup = x\n");
    expect_same_refusal("run --gpus 65", "gpus = 65\n");
    expect_same_refusal("run --batch 0", "global_batch = 0\n");
    expect_same_refusal("run --batch-per-gpu 16777217", "batch_per_gpu = 16777217\n");
    expect_same_refusal("run --precision fp8", "precisions = fp8\n");
    expect_same_refusal("run --optimizer lion", "optimizers = lion\n");
    expect_same_refusal("sweep --mode fsdp", "modes = fsdp\n");
    expect_same_refusal("sweep --mode dp,dp", "modes = dp, dp\n");
    expect_same_refusal("sweep --gpus 2,2", "gpus = 2, 2\n");
    expect_same_refusal("sweep --model tiny,tiny", "models = tiny, tiny\n");
    expect_same_refusal("sweep --model ,tiny", "models = ,tiny\n");
    expect_same_refusal("run --model huge", "models = huge\n");
    expect_same_refusal("run --bucket-mb 65537", "bucket_mb = 65537\n");
    expect_same_refusal("run --device-mem 0", "device_mem = 0\n");
    expect_same_refusal("run --device-mem 2048T", "device_mem = 2048T\n");

    settings_value v;
    settings_error err;
    EXPECT(settings_value_parse(SET_MODE, 2, "ddp , dp", &v, &err) == 0 && v.n == 2 &&
           v.v[0].i == MODE_DDP && v.v[1].i == MODE_DP);
    EXPECT(settings_value_parse(SET_GPUS, 2, "1,2,4", &v, &err) == -1 &&
           strcmp(err.what, "too many values (at most 2)") == 0 && !err.item[0]);
    EXPECT(settings_value_parse(SET_GPUS, 16, "1,x,4", &v, &err) == -1 && strcmp(err.item, "x") == 0);
    EXPECT(settings_value_parse(SET_SIZES, 16, "1K,6", &v, &err) == -1 &&
           strcmp(err.item, "6") == 0 && strstr(err.what, "from 4 to 16G, a multiple of 4"));
    EXPECT(settings_value_parse(SET_INJECT_FAULT, 1, "2:7:hang", &v, &err) == 0 &&
           v.v[0].i == 2 && v.v[1].i == 7 && v.v[2].i == FAULT_HANG);
    char buf[32];
    EXPECT(strcmp(dps_fmt_bytes_suffix((uint64_t)1 << 34, buf, sizeof buf), "16G") == 0);
    EXPECT(strcmp(dps_fmt_bytes_suffix(1536 * 1024, buf, sizeof buf), "1536K") == 0);
    EXPECT(strcmp(dps_fmt_bytes_suffix(4, buf, sizeof buf), "4") == 0);

    /* --help renders the table's range and default; config_defaults takes them */
    char *help = NULL, want[96];
    size_t len = 0;
    FILE *f = open_memstream(&help, &len);
    if (f) {
        settings_print_options(f);
        fclose(f);
    }
    const settings_entry *steps = &settings_table[SET_STEPS];
    snprintf(want, sizeof want, " [%lld..%lld; default %lld] {run, sweep, comm-bench, links}\n",
             (long long)steps->lo, (long long)steps->hi, (long long)steps->def.i);
    EXPECT(help && strstr(help, "  --steps N ") && strstr(help, want));
    EXPECT(help && strstr(help, " {sweep}\n") && strstr(help, "show this help\n"));
    EXPECT(help && strstr(help, "  --backend auto|host|cuda ") && !strstr(help, "--overlap"));
    free(help);
    dps_config c;
    config_defaults(&c);
    EXPECT(c.steps == steps->def.i && c.timeout_s == settings_table[SET_TIMEOUT].def.x);
    EXPECT(strcmp(c.out_dir, settings_table[SET_OUT].def_text) == 0 && c.overlap == 1);
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

/* Rank 1 aborts the group; rank 0's collective in flight fails, and so does
 * every later one (blocking and async), with the same message. */
static int abort_rank(void *ctx, int rank, rank_beat *beat)
{
    (void)beat;
    comm_shared *sh = ctx;
    if (rank == 1) {
        comm_shared_abort(sh);
        return 0;
    }
    backend *be = NULL;
    comm *c = NULL;
    float buf[64] = {0};
    char first[DPS_ERRMSG_MAX];
    if (open_rank(sh, rank, &be, &c)) return 1;
    int bad = comm_allreduce(c, buf, 64, COMM_F32) == DPS_OK;
    dps_strlcpy(first, dps_errmsg(), sizeof first);
    bad |= strstr(first, "aborted") == NULL;
    /* the flag cleared, only the comm's own memory of the failure stops the
     * calls below (without it they would wait and time out differently) */
    atomic_store(&sh->abort, 0);
    c->timeout_ms = 100.0;
    bad |= comm_allreduce(c, buf, 64, COMM_F32) == DPS_OK || strcmp(dps_errmsg(), first) != 0;
    bad |= comm_broadcast(c, buf, sizeof buf, 0) == DPS_OK || strcmp(dps_errmsg(), first) != 0;
    bad |= comm_barrier(c) == DPS_OK;
    be_event *ev = NULL;
    be_stream *st = NULL;
    bad |= be->ops->event_create(be, 0, &ev) != DPS_OK || be->ops->stream_create(be, 0, &st) != DPS_OK;
    bad |= comm_allreduce_async(c, buf, 64, COMM_F32, ev) == DPS_OK;
    double busy = 0.0;
    bad |= comm_wait_async(c, st) == DPS_OK || strcmp(dps_errmsg(), first) != 0;
    bad |= comm_sync(c, st, &busy) == DPS_OK || strcmp(dps_errmsg(), first) != 0;
    if (bad) fprintf(stderr, "comm_abort: a collective after the abort did not fail with '%s'\n", first);
    if (ev) be->ops->event_destroy(be, ev);
    if (st) be->ops->stream_destroy(be, st);
    comm_close(c);
    be_close(be);
    return bad;
}

/* Every async all-reduce issued before a wait is done after it, in order;
 * the step's sync hands out the time they ran. */
static int async_rank(void *ctx, int rank, rank_beat *beat)
{
    (void)beat;
    comm_shared *sh = ctx;
    backend *be = NULL;
    comm *c = NULL;
    be_event *ev = NULL;
    be_stream *st = NULL;
    float buf[3][100];
    if (open_rank(sh, rank, &be, &c) || be->ops->event_create(be, rank, &ev) ||
        be->ops->stream_create(be, rank, &st))
        return 1;
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 100; i++) buf[k][i] = (float)(rank + k * i);
    int bad = 0;
    for (int k = 0; k < 3; k++) bad |= comm_allreduce_async(c, buf[k], 100, COMM_F32, ev) != DPS_OK;
    double busy = 0.0;
    bad |= comm_wait_async(c, st) != DPS_OK;
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 100; i++) bad |= buf[k][i] != (float)(0 + 1 + 2 * k * i);
    double waited = c->waited_ms;
    bad |= comm_sync(c, st, &busy) != DPS_OK || !(waited >= 0.0) || busy != waited;
    bad |= c->waited_ms != 0.0; /* handed out once */
    be->ops->event_destroy(be, ev);
    be->ops->stream_destroy(be, st);
    comm_close(c);
    be_close(be);
    return bad;
}

/* One made-up span of rank r in traced step t. */
static void put_span(timeline *tl, int t, int r, int i, double begin_ms, double ms, uint64_t bytes)
{
    timeline_spans(tl, t, r)[i] = (tl_span){begin_ms, ms, bytes, i, 0.0};
    if (*timeline_nspans(tl, t, r) <= i) *timeline_nspans(tl, t, r) = i + 1;
}

/* A step's all-reduce time from the ranks' spans: per bucket the last
 * rank's end minus the last rank's begin, on the clock the references
 * align; rank 0 waits 2 ms in bucket 0 for rank 1, which the slowest
 * rank's own sum (4 ms) would count as transfer. */
static void test_busbw(void)
{
    timeline tl;
    EXPECT(timeline_alloc(&tl, 2, 2, 4) == DPS_OK);
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

/* A fake of what comm_watch watches: collectives that report an error
 * after `fail_at` checks (0: never), and a device wait that ends when its
 * work is done (done_ms after it began; 0: never) or when aborted. */
typedef struct fake_coll {
    _Atomic int checks, aborts;
    int fail_at;
} fake_coll;

static dps_status fake_check(void *ctx, char *why, size_t len)
{
    fake_coll *f = ctx;
    int n = atomic_fetch_add(&f->checks, 1) + 1;
    if (!f->fail_at || n < f->fail_at) return DPS_OK;
    snprintf(why, len, "fake asynchronous error");
    return DPS_ERR_RUNTIME;
}

static void fake_abort(void *ctx) { atomic_fetch_add(&((fake_coll *)ctx)->aborts, 1); }

/* The host's blocking wait; how long it took. */
static double fake_wait(fake_coll *f, double done_ms)
{
    double t0 = dps_now_ms();
    while (!atomic_load(&f->aborts) && (done_ms <= 0 || dps_now_ms() - t0 < done_ms)) {
        struct timespec ts = {0, 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return dps_now_ms() - t0;
}

/* One armed wait of the fake: its status, why, the wait's length. */
static dps_status watched(comm_watch *w, fake_coll *f, double timeout_ms, double done_ms,
                          char *why, double *ms)
{
    comm_watch_arm(w, timeout_ms);
    *ms = fake_wait(f, done_ms);
    return comm_watch_disarm(w, why, DPS_ERRMSG_MAX);
}

/* The watchdog ends a wait on a timeout, an error the collectives report or
 * the group's abort, each by aborting them once; a wait that ends in time
 * is left alone, and nothing is looked at while the host does not wait. */
static void test_comm_watch(void)
{
    static const comm_watch_ops ops = {fake_check, fake_abort};
    char why[DPS_ERRMSG_MAX];
    double ms = 0.0;
    _Atomic int flag = 0;
    fake_coll f = {0, 0, 0};
    comm_watch *w = NULL;
    EXPECT(comm_watch_start(&w, &ops, &f, &flag) == DPS_OK);
    if (!w) return;
    EXPECT(watched(w, &f, 10000.0, 20.0, why, &ms) == DPS_OK); /* done in time */
    EXPECT(atomic_load(&f.aborts) == 0 && atomic_load(&f.checks) >= 1);
    atomic_store(&flag, 1); /* while nobody waits: not looked at */
    struct timespec pause = {0, 30 * 1000 * 1000};
    nanosleep(&pause, NULL);
    EXPECT(atomic_load(&f.aborts) == 0 && !comm_watch_aborted(w));
    EXPECT(watched(w, &f, 0.0, 0.0, why, &ms) == DPS_ERR_RUNTIME);
    EXPECT(strstr(why, "group was aborted") != NULL && atomic_load(&f.aborts) == 1);
    EXPECT(comm_watch_aborted(w) && ms < 5000.0);
    comm_watch_stop(w);

    f = (fake_coll){0, 0, 0};
    EXPECT(comm_watch_start(&w, &ops, &f, NULL) == DPS_OK);
    if (!w) return;
    EXPECT(watched(w, &f, 50.0, 0.0, why, &ms) == DPS_ERR_TIMEOUT);
    EXPECT(strstr(why, "--timeout") != NULL && atomic_load(&f.aborts) == 1);
    EXPECT(ms >= 50.0 && ms < 5000.0);
    EXPECT(watched(w, &f, 50.0, 1.0, why, &ms) == DPS_ERR_TIMEOUT); /* the first failure kept */
    comm_watch_fail(w, DPS_ERR_RUNTIME, "seen by the host");
    EXPECT(atomic_load(&f.aborts) == 1); /* aborted once */
    comm_watch_stop(w);

    f = (fake_coll){0, 0, 3};
    EXPECT(comm_watch_start(&w, &ops, &f, NULL) == DPS_OK);
    if (!w) return;
    EXPECT(watched(w, &f, 0.0, 0.0, why, &ms) == DPS_ERR_RUNTIME);
    EXPECT(strcmp(why, "fake asynchronous error") == 0 && atomic_load(&f.checks) == 3);
    EXPECT(atomic_load(&f.aborts) == 1);
    comm_watch_stop(w);

    f = (fake_coll){0, 0, 0};
    EXPECT(comm_watch_start(&w, &ops, &f, NULL) == DPS_OK);
    if (!w) return;
    comm_watch_fail(w, DPS_ERR_OOM, "a failure the host saw");
    EXPECT(atomic_load(&f.aborts) == 1 && comm_watch_aborted(w));
    EXPECT(watched(w, &f, 0.0, 1.0, why, &ms) == DPS_ERR_OOM && strstr(why, "host saw") != NULL);
    comm_watch_stop(w);
    comm_watch_stop(NULL);

    /* last: the process stays escalated (its grace's alarm taken back) */
    f = (fake_coll){0, 0, 0};
    EXPECT(comm_watch_start(&w, &ops, &f, NULL) == DPS_OK);
    if (!w) return;
    dps_install_interrupt_handlers();
    raise(SIGINT);
    nanosleep(&(struct timespec){0, 150 * 1000 * 1000}, NULL); /* not the same ^C again */
    raise(SIGINT);
    alarm(0);
    EXPECT(dps_escalated());
    EXPECT(watched(w, &f, 0.0, 0.0, why, &ms) == DPS_ERR_RUNTIME);
    EXPECT(strstr(why, "second SIGINT") != NULL && atomic_load(&f.aborts) == 1);
    comm_watch_stop(w);
}

static void test_comm_abort(void)
{
    size_t bytes = comm_shared_bytes(2);
    comm_shared *sh = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    EXPECT(sh != MAP_FAILED);
    if (sh == MAP_FAILED) return;
    comm_shared_init(sh, 2);
    run_ranks(2, async_rank, sh, "async all-reduce");
    comm_shared_init(sh, 2);
    run_ranks(2, abort_rank, sh, "abort");
    munmap(sh, bytes);
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
            g->rc = g->be->ops->gemm(g->be, NULL, t & 1, t >> 1, g->n, g->n, g->n, 1.0f, a, g->n,
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
    EXPECT(be->ops->gemm(be, NULL, ta, tb, m, n, k, 0.75f, a, lda, b, ldb, beta, c, ldc) == DPS_OK);
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
}

/* k = 0: C = beta C (zeros from NaN when beta is 0); m = 0 or n = 0: nothing */
static void gemm_edges(backend *be)
{
    float a1 = 1.0f, b1 = 1.0f, c2[2] = {NAN, NAN}, c3[2] = {4.0f, -2.0f};
    EXPECT(be->ops->gemm(be, NULL, 0, 0, 1, 2, 0, 1.0f, &a1, 1, &b1, 2, 0.0f, c2, 2) == DPS_OK);
    EXPECT(c2[0] == 0.0f && c2[1] == 0.0f);
    EXPECT(be->ops->gemm(be, NULL, 1, 0, 1, 2, 0, 1.0f, &a1, 1, &b1, 2, 0.5f, c3, 2) == DPS_OK);
    EXPECT(c3[0] == 2.0f && c3[1] == -1.0f);
    c2[0] = NAN;
    EXPECT(be->ops->gemm(be, NULL, 0, 0, 0, 2, 1, 1.0f, &a1, 1, &b1, 2, 0.0f, c2, 2) == DPS_OK);
    EXPECT(be->ops->gemm(be, NULL, 0, 0, 1, 0, 1, 1.0f, &a1, 1, &b1, 1, 0.0f, c2, 1) == DPS_OK);
    EXPECT(isnan(c2[0]));
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
    /* two device threads one after the other, GEMMs big enough to be split */
    for (int i = 0; i < 2; i++) {
        int before = thread_count();
        gemm_thread_args g = {.be = be, .n = 384};
        pthread_t th;
        EXPECT(pthread_create(&th, NULL, gemm_thread, &g) == 0);
        pthread_join(th, NULL);
        EXPECT(g.rc == DPS_OK);
        if (g.threads != before + 1)
            fprintf(stderr, "a GEMM thread saw %d threads, %d before it started\n", g.threads,
                    before);
        EXPECT(g.threads == before + 1);
    }
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
        EXPECT(be->ops->gemm(be, NULL, r & 1, (r >> 1) & 1, N, N, N, 1.0f, a, N, b, N, 0.0f, c,
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
    be_close(be);
}

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

/* A results file looked up by column: quoted cells, numbers, damage named by line. */
static void test_csv_table(void)
{
    const char *path;
    const char *csv = "a,b,c\n1,\"x,\ny\",2.5\n3,z,oops\n";
    path = write_tmp("t.csv", csv, strlen(csv));
    csv_table t;
    int col;
    char cell[64];
    double x;
    EXPECT(csv_table_load(path, "hint", &t) == DPS_OK && t.nrows == 2 && t.ncols == 3);
    EXPECT(csv_table_col(&t, "b", &col) == DPS_OK && col == 1);
    EXPECT(strcmp(csv_table_cell(&t, 0, 1, cell, sizeof cell), "x,\ny") == 0);
    EXPECT(csv_table_num(&t, 0, 2, 0, 0, &x) == DPS_OK && x == 2.5);
    EXPECT(csv_table_num(&t, 1, 2, 0, 0, &x) == DPS_ERR_USAGE && strstr(dps_errmsg(), ":4: c = 'oops'"));
    EXPECT(csv_table_col(&t, "d", &col) == DPS_ERR_USAGE && strstr(dps_errmsg(), "no column 'd'"));
    csv_table_free(&t);
    unlink(path);
    path = write_tmp("cut.csv", "a,b\n1,\"2\n", 9);
    EXPECT(csv_table_load(path, "hint", &t) == DPS_ERR_USAGE && strstr(dps_errmsg(), ":2: the file ends inside a record"));
    unlink(path);
    EXPECT(csv_table_load("/nonexistent/x.csv", "run X", &t) == DPS_ERR_USAGE && strstr(dps_errmsg(), "missing or empty (run X)"));
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

int main(int argc, char **argv)
{
    static const struct { const char *name; void (*fn)(void); } groups[] = {
        {"chunk", test_chunk}, {"stats", test_stats}, {"csv", test_csv}, {"cli", test_cli},
        {"parse", test_parse}, {"presets", test_presets}, {"elementwise", test_elementwise},
        {"gradients", test_gradients}, {"rel_diff", test_rel_diff},
        {"accounting", test_accounting}, {"buckets", test_buckets}, {"ring", test_ring},
        {"suite", test_suite}, {"settings", test_settings}, {"nvml", test_nvml},
        {"nvml_fields", test_nvml_fields}, {"nvml_stub", test_nvml_stub}, {"backend_auto", test_backend_auto},
        {"comm_abort", test_comm_abort}, {"comm_watch", test_comm_watch},
        {"busbw", test_busbw}, {"context", test_context}, {"versions", test_versions},
        {"gemm", test_gemm}, {"gemm_signals", test_gemm_signals}, {"host_math", test_host_math}, {"scale_copy", test_scale_copy},
        {"col_sum", test_col_sum}, {"autocast_ops", test_autocast_ops},
        {"model_bf16", test_model_bf16}, {"dp_bf16", test_dp_bf16}, {"gemm_reference", test_gemm_reference}, {"batches", test_batches},
        {"slowdown", test_slowdown}, {"world", test_world}, {"store", test_store},
        {"predict_files", test_predict_files}, {"predict_consts", test_predict_consts},
        {"csv_table", test_csv_table}, {"predict_model", test_predict_model},
        {"predict_configs", test_predict_configs},
    };
    int ran = 0;
    for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++)
        if (argc < 2 || strcmp(argv[1], groups[i].name) == 0) {
            groups[i].fn();
            ran++;
        }
    if (!ran) {
        fprintf(stderr, "test_unit: no group named '%s'\n", argc > 1 ? argv[1] : "");
        return 2;
    }
    if (failures) fprintf(stderr, "%d expectation(s) failed\n", failures);
    return failures ? 1 : 0;
}
