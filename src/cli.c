/* Command-line parsing (see cli.h). The table below is the single source of
 * the options: getopt_long's array and the usage text are built from it. */
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "trace.h"
#include "util.h"

enum {
    O_BACKEND = 256, O_MODE, O_GPUS, O_DEVICES, O_MODEL, O_LAYERS, O_WIDTH, O_TOKENS,
    O_CLASSES, O_BATCH, O_BATCH_PER_GPU, O_PRECISION, O_OPTIMIZER, O_LR, O_STEPS, O_WARMUP,
    O_SEED, O_DEVICE_MEM, O_HOST_DEVICES, O_CHECK, O_GEMM_REF, O_OUT, O_NAME, O_BUCKET_MB,
    O_FIRST_BUCKET_MB, O_NO_OVERLAP, O_GRAD_VIEW, O_TIMEOUT, O_INJECT_FAULT, O_SIZES, O_RESUME,
    O_FILTER, O_DRY_RUN, O_CONFIG_TIMEOUT, O_NO_TRACE, O_NO_LINKS, O_PROFILE_STEPS, O_NO_NVML,
    O_DP_COMM,
    O_HELP = 'h',
    O_VERSION = 'V',
};

typedef struct cli_opt {
    const char *name;
    int id;
    const char *metavar; /* NULL: a flag */
    const char *help;
} cli_opt;

static const cli_opt opts[] = {
    {"backend", O_BACKEND, "auto|cuda|host", "device backend (auto: cuda when a GPU is visible, else host)"},
    {"mode", O_MODE, "dp|ddp", "strategy: dp = DataParallel, ddp = DistributedDataParallel (sweep: a list)"},
    {"gpus", O_GPUS, "N", "number of devices, 1..64 (sweep: a list, e.g. 1,2,4)"},
    {"devices", O_DEVICES, "LIST", "device indices, e.g. 0,2,3 (implies --gpus)"},
    {"model", O_MODEL, "PRESET", "model preset, default small (see `dpscale info`; sweep: a list)"},
    {"layers", O_LAYERS, "N", "override: hidden layers, 0..4096"},
    {"width", O_WIDTH, "N", "override: hidden width, 1..65536"},
    {"tokens", O_TOKENS, "N", "override: tokens (rows) per sample, 1..1048576"},
    {"classes", O_CLASSES, "N", "override: classifier outputs, 2..1048576"},
    {"batch", O_BATCH, "N", "global batch in samples (default: preset's per-device batch x gpus)"},
    {"batch-per-gpu", O_BATCH_PER_GPU, "N", "samples per device; global batch = N x gpus"},
    {"precision", O_PRECISION, "fp32|bf16", "compute precision (bf16 needs the cuda backend)"},
    {"optimizer", O_OPTIMIZER, "sgd|adamw", "optimizer (SGD momentum 0.9 lr 0.01; AdamW lr 1e-3 wd 0.01)"},
    {"lr", O_LR, "X", "learning rate (default per optimizer)"},
    {"steps", O_STEPS, "N", "timed steps, 1..10000000 (default 20)"},
    {"warmup", O_WARMUP, "N", "untimed warm-up steps, 0..1000000 (default 3)"},
    {"seed", O_SEED, "N", "seed of initialisation and data (default 1234)"},
    {"device-mem", O_DEVICE_MEM, "BYTES", "host backend: capacity per device, K/M/G/T suffixes"},
    {"host-devices", O_HOST_DEVICES, "N", "host backend: number of emulated devices, 1..64 (default 8)"},
    {"dp-comm", O_DP_COMM, "auto|nccl|p2p", "dp on GPUs: NCCL broadcast/reduce, or peer copies + reduce-add"},
    {"bucket-mb", O_BUCKET_MB, "X", "ddp: gradient bucket cap in MiB (default 25)"},
    {"first-bucket-mb", O_FIRST_BUCKET_MB, "X", "ddp: cap of the first bucket in MiB (default 1)"},
    {"no-overlap", O_NO_OVERLAP, NULL, "ddp: all-reduce after backward instead of during it"},
    {"grad-as-bucket-view", O_GRAD_VIEW, NULL, "ddp: gradients are views into the buckets (no copy)"},
    {"timeout", O_TIMEOUT, "SECONDS", "ddp: end the ranks when a step takes longer (default 300)"},
    {"inject-fault", O_INJECT_FAULT, "R:S:exit|hang", "ddp: rank R exits or hangs at step S (0-based, warm-up included)"},
    {"resume", O_RESUME, NULL, "sweep: skip configurations already in the folder (default folder: OUT/latest)"},
    {"filter", O_FILTER, "PATTERN", "sweep: only configuration ids containing PATTERN (or matching a glob)"},
    {"dry-run", O_DRY_RUN, NULL, "sweep: list the configurations, run nothing"},
    {"no-links", O_NO_LINKS, NULL, "sweep: do not measure the link matrix (links.csv) first"},
    {"config-timeout", O_CONFIG_TIMEOUT, "SECONDS", "sweep: kill a configuration running longer (default 3600)"},
    {"sizes", O_SIZES, "LIST", "comm-bench: message sizes, e.g. 1M,16M,64M; links: the copy size"},
    {"no-trace", O_NO_TRACE, NULL, "no NVTX ranges (to measure what they cost)"},
    {"no-nvml", O_NO_NVML, NULL, "no NVML sampler thread (to measure what it costs)"},
    {"profile-steps", O_PROFILE_STEPS, "A:B", "profiler capture range: steps A to B (0-based, warm-up included)"},
    {"check", O_CHECK, NULL, "compare the final parameters with single-device training"},
    {"gemm-ref", O_GEMM_REF, NULL, "also time the step's GEMMs alone on device 0 (gemm_ref_tflops)"},
    {"out", O_OUT, "DIR", "results root (default results)"},
    {"name", O_NAME, "NAME", "results folder under --out (default <date>-<time>-<host>)"},
    {"help", O_HELP, NULL, "show this help"},
    {"version", O_VERSION, NULL, "show the version"},
};
#define NOPTS ((int)(sizeof opts / sizeof opts[0]))

void cli_usage(FILE *f)
{
    fprintf(f, "usage: dpscale run   [options]   train one configuration\n"
               "       dpscale sweep [SUITE] [options]\n"
               "                                 every configuration of a suite file (or of the\n"
               "                                 --mode, --gpus and --model lists), each in its\n"
               "                                 own process\n"
               "       dpscale info  [options]   backend, devices, presets\n"
               "       dpscale comm-bench [--gpus LIST] [--sizes LIST] [--steps N]\n"
               "                                 the host all-reduce alone (busbw)\n"
               "       dpscale links [--gpus N] [--sizes BYTES] [--steps SAMPLES]\n"
               "                                 bandwidth and latency between host and devices\n"
               "       dpscale --help | --version\n\noptions:\n");
    for (int i = 0; i < NOPTS; i++) {
        char left[64];
        snprintf(left, sizeof left, "--%s%s%s", opts[i].name, opts[i].metavar ? " " : "",
                 opts[i].metavar ? opts[i].metavar : "");
        fprintf(f, "  %-28s %s\n", left, opts[i].help);
    }
    fprintf(f, "\nexit status: 0 ok, 1 a configuration failed (oom, error, timeout), 2 bad input\n");
}

static const cli_opt *find_opt(int id)
{
    for (int i = 0; i < NOPTS; i++)
        if (opts[i].id == id) return &opts[i];
    return NULL;
}

static dps_status bad(int id, const char *val, const char *what)
{
    const cli_opt *o = find_opt(id);
    return dps_fail(DPS_ERR_USAGE, "--%s %s: %s", o ? o->name : "?", val, what);
}

static dps_status int_arg(int id, const char *val, int64_t lo, int64_t hi, int *out)
{
    int64_t v;
    int rc = dps_parse_i64(val, lo, hi, &v);
    if (rc) {
        char what[96];
        snprintf(what, sizeof what, "expected an integer from %" PRId64 " to %" PRId64 "%s",
                 lo, hi, rc == -2 ? " (out of range)" : "");
        return bad(id, val, what);
    }
    *out = (int)v;
    return DPS_OK;
}

/* Comma-separated integers in [lo, hi]. */
static dps_status int_list(int id, const char *val, int64_t lo, int64_t hi, int *out, int max,
                           int *n)
{
    char buf[512];
    if (strlen(val) >= sizeof buf) return bad(id, "...", "list too long");
    dps_strlcpy(buf, val, sizeof buf);
    *n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (*n >= max) return bad(id, val, "too many entries");
        DPS_TRY(int_arg(id, tok, lo, hi, &out[(*n)++]));
    }
    if (*n == 0 || val[0] == ',' || val[strlen(val) - 1] == ',' || strstr(val, ",,"))
        return bad(id, val, "expected a comma-separated list of integers");
    return DPS_OK;
}

static dps_status word_arg(int id, const char *val, const char *const *words, int n, int *out)
{
    char list[96], what[128];
    *out = dps_match_word(val, words, n, list, sizeof list);
    if (*out >= 0) return DPS_OK;
    snprintf(what, sizeof what, "expected one of: %s", list);
    return bad(id, val, what);
}

static dps_status model_list(cli_args *a, const char *val)
{
    char buf[512];
    if (strlen(val) >= sizeof buf) return bad(O_MODEL, "...", "list too long");
    dps_strlcpy(buf, val, sizeof buf);
    a->sweep_models_n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (!model_find_preset(tok)) {
            char what[256] = "unknown preset; one of:";
            for (int i = 0; i < model_npresets; i++) {
                strncat(what, " ", sizeof what - strlen(what) - 1);
                strncat(what, model_presets[i].name, sizeof what - strlen(what) - 1);
            }
            return bad(O_MODEL, tok, what);
        }
        if (a->sweep_models_n >= CLI_MAX_LIST) return bad(O_MODEL, val, "too many presets");
        dps_strlcpy(a->sweep_models[a->sweep_models_n++], tok, DPS_NAME_MAX);
    }
    if (!a->sweep_models_n) return bad(O_MODEL, val, "expected a preset name");
    return DPS_OK;
}

/* --layers, --width, --tokens, --classes: preset overrides. */
static dps_status shape_opt(cli_args *a, int id, const char *val)
{
    static const struct { int id, lo, hi; } lim[4] = {
        {O_LAYERS, 0, 4096}, {O_WIDTH, 1, 65536}, {O_TOKENS, 1, 1 << 20}, {O_CLASSES, 2, 1 << 20}};
    int *dst = &a->shape_values.layers; /* model_shape: layers, width, tokens, classes */
    for (int i = 0; i < 4; i++)
        if (lim[i].id == id) {
            DPS_TRY(int_arg(id, val, lim[i].lo, lim[i].hi, &dst[i]));
            a->shape_override[i] = 1;
        }
    return DPS_OK;
}

static dps_status device_mem_opt(cli_args *a, int id, const char *val)
{
    uint64_t bytes = 0;
    int v = dps_parse_bytes(val, &bytes);
    if (v == -2 || (v == 0 && bytes > ((uint64_t)1 << 50)))
        return bad(id, val, "too large (at most 1P)");
    if (v || bytes == 0)
        return bad(id, val, "expected a positive byte count with an optional K, M, G or T suffix");
    a->cfg.be.device_mem = (size_t)bytes;
    return DPS_OK;
}

/* --out DIR, --name NAME */
static dps_status output_opt(cli_args *a, int id, const char *val)
{
    dps_config *c = &a->cfg;
    if (id == O_OUT) {
        if (!*val || strlen(val) >= sizeof c->out_dir) return bad(id, "''", "expected a folder path");
        dps_strlcpy(c->out_dir, val, sizeof c->out_dir);
        return DPS_OK;
    }
    if (!*val || strlen(val) >= sizeof c->name || strchr(val, '/') || val[0] == '.')
        return bad(id, val, "expected a folder name without '/' that does not start with '.'");
    dps_strlcpy(c->name, val, sizeof c->name);
    a->name_set = 1;
    return DPS_OK;
}

/* --resume, --dry-run, --filter PATTERN */
static dps_status sweep_opt(cli_args *a, int id, const char *val)
{
    if (id == O_RESUME) a->resume = 1;
    else if (id == O_DRY_RUN) a->dry_run = 1;
    else if (id == O_NO_LINKS) a->no_links = 1;
    else if (!*val || strlen(val) >= sizeof a->filter) return bad(id, val, "expected a pattern");
    else dps_strlcpy(a->filter, val, sizeof a->filter);
    return DPS_OK;
}

/* --mode dp|ddp; a list for sweep. */
static dps_status mode_opt(cli_args *a, int id, const char *val)
{
    char buf[64];
    if (strlen(val) >= sizeof buf) return bad(id, "...", "expected dp, ddp or dp,ddp");
    dps_strlcpy(buf, val, sizeof buf);
    a->sweep_modes_n = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int v = 0;
        if (a->sweep_modes_n >= 2) return bad(id, val, "expected dp, ddp or dp,ddp");
        DPS_TRY(word_arg(id, t, dps_mode_names, MODE_COUNT, &v));
        a->sweep_modes[a->sweep_modes_n++] = (dps_mode)v;
    }
    if (!a->sweep_modes_n) return bad(id, val, "expected dp, ddp or dp,ddp");
    if (a->cmd != CMD_SWEEP && a->sweep_modes_n > 1)
        return bad(id, val, "one mode for `dpscale run` (lists are for `dpscale sweep`)");
    a->cfg.mode = a->sweep_modes[0];
    return DPS_OK;
}

/* --bucket-mb, --first-bucket-mb, --timeout: positive numbers. */
static dps_status positive_opt(cli_args *a, int id, const char *val)
{
    double d;
    double hi = id == O_TIMEOUT || id == O_CONFIG_TIMEOUT ? 1e6 : 65536.0;
    if (dps_parse_f64(val, &d) || !(d > 0.0) || d > hi) {
        char what[64];
        snprintf(what, sizeof what, "expected a number above 0 and at most %g", hi);
        return bad(id, val, what);
    }
    if (id == O_BUCKET_MB) a->cfg.bucket_mb = d;
    else if (id == O_FIRST_BUCKET_MB) a->cfg.first_bucket_mb = d;
    else if (id == O_CONFIG_TIMEOUT) a->config_timeout_s = d;
    else a->cfg.timeout_s = d;
    return DPS_OK;
}

/* --sizes: byte counts with suffixes, multiples of 4. */
static dps_status sizes_opt(cli_args *a, int id, const char *val)
{
    char buf[512];
    if (strlen(val) >= sizeof buf) return bad(id, "...", "list too long");
    dps_strlcpy(buf, val, sizeof buf);
    a->nsizes = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        uint64_t v = 0;
        if (a->nsizes >= CLI_MAX_LIST) return bad(id, val, "at most 16 sizes");
        if (dps_parse_bytes(t, &v) || v == 0 || v % 4 || v > ((uint64_t)1 << 34))
            return bad(id, t, "expected a byte count from 4 to 16G, a multiple of 4 (K/M/G suffixes)");
        a->sizes[a->nsizes++] = v;
    }
    if (!a->nsizes) return bad(id, val, "expected a list of sizes");
    return DPS_OK;
}

/* --profile-steps A:B */
static dps_status profile_opt(cli_args *a, int id, const char *val)
{
    char buf[64];
    int64_t first, last;
    const char *colon = strchr(val, ':');
    if (!colon || (size_t)(colon - val) >= sizeof buf)
        return bad(id, val, "expected FIRST:LAST step numbers, e.g. 5:9");
    memcpy(buf, val, (size_t)(colon - val));
    buf[colon - val] = '\0';
    if (dps_parse_i64(buf, 0, 100000000, &first) || dps_parse_i64(colon + 1, 0, 100000000, &last))
        return bad(id, val, "expected FIRST:LAST step numbers, e.g. 5:9");
    if (last < first) return bad(id, val, "the last step comes before the first");
    a->cfg.profile_first = (int)first;
    a->cfg.profile_last = (int)last;
    return DPS_OK;
}

/* --inject-fault RANK:STEP:exit|hang */
static dps_status fault_opt(cli_args *a, int id, const char *val)
{
    char buf[64], kind[16];
    int64_t rank, step;
    int n = 0;
    if (strlen(val) < sizeof buf) dps_strlcpy(buf, val, sizeof buf);
    else buf[0] = '\0';
    char *c1 = strchr(buf, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (c1 && c2) {
        *c1 = *c2 = '\0';
        n = !dps_parse_i64(buf, 0, DPS_MAX_DEVICES - 1, &rank) &&
            !dps_parse_i64(c1 + 1, 0, 100000000, &step) && strlen(c2 + 1) < sizeof kind;
        if (n) dps_strlcpy(kind, c2 + 1, sizeof kind);
    }
    char list[64];
    int k = n ? dps_match_word(kind, dps_fault_names, FAULT_COUNT, list, sizeof list) : -1;
    if (k < 0) return bad(id, val, "expected RANK:STEP:exit or RANK:STEP:hang, e.g. 1:3:exit");
    a->cfg.fault_rank = (int)rank;
    a->cfg.fault_step = (int)step;
    a->cfg.fault_kind = (dps_fault)k;
    return DPS_OK;
}

static dps_status apply_opt(cli_args *a, int id, const char *val)
{
    dps_config *c = &a->cfg;
    int v = 0;
    int64_t v64;
    double d;
    switch (id) {
    case O_BACKEND: DPS_TRY(word_arg(id, val, be_kind_names, BE_KIND_COUNT, &v)); c->be.kind = (be_kind)v; break;
    case O_MODE: return mode_opt(a, id, val);
    case O_GPUS:
        DPS_TRY(int_list(id, val, 1, DPS_MAX_DEVICES, a->sweep_ngpus, CLI_MAX_LIST, &a->sweep_ngpus_n));
        if (a->cmd != CMD_SWEEP && a->cmd != CMD_COMM_BENCH && a->sweep_ngpus_n > 1)
            return bad(id, val, "expected one integer from 1 to 64 (lists are for `dpscale sweep`)");
        c->ngpus = a->sweep_ngpus[0];
        a->gpus_set = 1;
        break;
    case O_DEVICES:
        DPS_TRY(int_list(id, val, 0, DPS_MAX_DEVICES - 1, c->devices, DPS_MAX_DEVICES, &c->ngpus));
        a->devices_set = 1;
        break;
    case O_MODEL: DPS_TRY(model_list(a, val)); break;
    case O_LAYERS: case O_WIDTH: case O_TOKENS: case O_CLASSES: return shape_opt(a, id, val);
    case O_BATCH: DPS_TRY(int_arg(id, val, 1, 1 << 24, &c->global_batch)); a->batch_set = 1; a->batch_per_gpu = 0; break;
    case O_BATCH_PER_GPU: DPS_TRY(int_arg(id, val, 1, 1 << 24, &a->batch_per_gpu)); a->batch_set = 0; break;
    case O_PRECISION: DPS_TRY(word_arg(id, val, dps_precision_names, PREC_COUNT, &v)); c->precision = (dps_precision)v; break;
    case O_OPTIMIZER: DPS_TRY(word_arg(id, val, dps_optimizer_names, OPT_COUNT, &v)); c->optimizer = (dps_optimizer)v; break;
    case O_DP_COMM: DPS_TRY(word_arg(id, val, dps_dp_comm_names, DPCOMM_COUNT, &v)); c->dp_comm = (dps_dp_comm)v; break;
    case O_LR:
        if (dps_parse_f64(val, &d) || d <= 0.0 || d > 10.0)
            return bad(id, val, "expected a number in (0, 10]");
        c->hp.lr = (float)d;
        a->lr_set = 1;
        break;
    case O_DEVICE_MEM: return device_mem_opt(a, id, val);
    case O_STEPS: DPS_TRY(int_arg(id, val, 1, 10000000, &c->steps)); a->steps_set = 1; break;
    case O_WARMUP: DPS_TRY(int_arg(id, val, 0, 1000000, &c->warmup)); a->warmup_set = 1; break;
    case O_RESUME: case O_DRY_RUN: case O_FILTER: case O_NO_LINKS: return sweep_opt(a, id, val);
    case O_SEED:
        if (dps_parse_i64(val, 0, INT64_MAX, &v64))
            return bad(id, val, "expected an integer from 0 to 9223372036854775807");
        c->seed = (uint64_t)v64;
        break;
    case O_HOST_DEVICES: DPS_TRY(int_arg(id, val, 1, DPS_MAX_DEVICES, &c->be.host_devices)); break;
    case O_BUCKET_MB: case O_FIRST_BUCKET_MB: case O_TIMEOUT: case O_CONFIG_TIMEOUT:
        return positive_opt(a, id, val);
    case O_NO_OVERLAP: c->overlap = 0; break;
    case O_GRAD_VIEW: c->grad_view = 1; break;
    case O_INJECT_FAULT: return fault_opt(a, id, val);
    case O_SIZES: return sizes_opt(a, id, val);
    case O_PROFILE_STEPS: return profile_opt(a, id, val);
    case O_CHECK: c->check = 1; break;
    case O_NO_TRACE: trace_set_enabled(0); break;
    case O_NO_NVML: c->no_nvml = 1; break;
    case O_GEMM_REF: c->gemm_ref = 1; break;
    case O_OUT: case O_NAME: return output_opt(a, id, val);
    case O_HELP: a->cmd = CMD_HELP; break;
    case O_VERSION: a->cmd = CMD_VERSION; break;
    default: return dps_fail(DPS_ERR_USAGE, "internal: unhandled option %d", id);
    }
    return DPS_OK;
}

static cli_cmd parse_command(const char *s)
{
    if (strcmp(s, "run") == 0) return CMD_RUN;
    if (strcmp(s, "sweep") == 0) return CMD_SWEEP;
    if (strcmp(s, "info") == 0) return CMD_INFO;
    if (strcmp(s, "comm-bench") == 0) return CMD_COMM_BENCH;
    if (strcmp(s, "links") == 0) return CMD_LINKS;
    return CMD_NONE;
}

dps_status cli_parse(int argc, char **argv, cli_args *a)
{
    memset(a, 0, sizeof *a);
    config_defaults(&a->cfg);
    struct option lo[NOPTS + 1];
    for (int i = 0; i < NOPTS; i++)
        lo[i] = (struct option){opts[i].name, opts[i].metavar ? required_argument : no_argument,
                                NULL, opts[i].id};
    memset(&lo[NOPTS], 0, sizeof lo[NOPTS]);
    int first = 1;
    if (argc > 1 && argv[1][0] != '-') {
        a->cmd = parse_command(argv[1]);
        if (a->cmd == CMD_NONE)
            return dps_fail(DPS_ERR_USAGE, "unknown command '%s': expected run, sweep, info, links or comm-bench "
                            "(see dpscale --help)", argv[1]);
        first = 2;
    }
    cli_cmd cmd = a->cmd;
    opterr = 0;
    optind = first;
    int id;
    while ((id = getopt_long(argc, argv, ":hV", lo, NULL)) != -1) {
        if (id == '?')
            return dps_fail(DPS_ERR_USAGE, "unknown option '%s' (see dpscale --help)",
                            argv[optind - 1]);
        if (id == ':')
            return dps_fail(DPS_ERR_USAGE, "option '%s' needs a value (see dpscale --help)",
                            argv[optind - 1]);
        DPS_TRY(apply_opt(a, id, optarg));
    }
    if (optind < argc && cmd == CMD_SWEEP && strlen(argv[optind]) < sizeof a->suite_path)
        dps_strlcpy(a->suite_path, argv[optind++], sizeof a->suite_path);
    if (optind < argc)
        return dps_fail(DPS_ERR_USAGE, "unexpected argument '%s' (see dpscale --help)", argv[optind]);
    if (!a->config_timeout_s) a->config_timeout_s = 3600.0;
    if (a->cmd != CMD_HELP && a->cmd != CMD_VERSION) a->cmd = cmd;
    if (a->cmd == CMD_NONE)
        return dps_fail(DPS_ERR_USAGE, "no command: expected run, sweep or info (see dpscale --help)");
    if (a->cmd != CMD_SWEEP && a->sweep_models_n > 1)
        return bad(O_MODEL, "list", "one preset for `dpscale run` (lists are for `dpscale sweep`)");
    if (a->gpus_set && a->devices_set && a->cfg.ngpus != a->sweep_ngpus[0])
        return dps_fail(DPS_ERR_USAGE, "--gpus %d and --devices (%d devices) disagree; give one",
                        a->sweep_ngpus[0], a->cfg.ngpus);
    float lr = a->cfg.hp.lr; /* optimizer defaults, then an explicit --lr on top */
    config_optimizer_defaults(&a->cfg);
    if (a->lr_set) a->cfg.hp.lr = lr;
    return DPS_OK;
}

dps_status cli_finish_config(cli_args *a, const char *model, dps_mode mode, int ngpus,
                             const backend *be, dps_config *out)
{
    dps_config c = a->cfg;
    c.mode = mode;
    const model_preset *p = model_find_preset(model);
    dps_strlcpy(c.model, p->name, sizeof c.model);
    c.shape = p->shape;
    int *sv = &a->shape_values.layers;
    int *cv = &c.shape.layers;
    for (int i = 0; i < 4; i++)
        if (a->shape_override[i]) cv[i] = sv[i];
    if (a->shape_override[0] || a->shape_override[1] || a->shape_override[2] || a->shape_override[3])
        snprintf(c.model, sizeof c.model, "%s:%dx%dx%dx%d", p->name, c.shape.layers,
                 c.shape.width, c.shape.tokens, c.shape.classes);
    if (!a->devices_set) {
        c.ngpus = ngpus;
        for (int i = 0; i < ngpus; i++) c.devices[i] = i;
    }
    if (a->batch_per_gpu) c.global_batch = a->batch_per_gpu * c.ngpus;
    else if (!a->batch_set) c.global_batch = p->batch_per_gpu * c.ngpus;
    DPS_TRY(config_check(&c, be));
    *out = c;
    return DPS_OK;
}
