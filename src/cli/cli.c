/* Command-line parsing (see cli.h): getopt_long's array and the usage text
 * come from the settings table; each value is read by settings_value_parse
 * and stored where the command reads it. */
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "core/strategy.h"
#include "core/nvtx.h"
#include "core/util.h"
#include "model/net.h"

#define CLI_ID_BASE 256 /* getopt_long's value of a long option: CLI_ID_BASE + its settings_id */
#define CLI_ID_NO_TRACE (CLI_ID_BASE + SET_COUNT) /* --no-trace, --no-nvtx's old name */

void cli_usage(FILE *f)
{
    fprintf(f, "usage: dpscale run   [options]   train one configuration\n"
               "       dpscale sweep [SUITE] [options]\n"
               "                                 every configuration of a suite file (or of the\n"
               "                                 --mode, --gpus and --model lists), each in its\n"
               "                                 own process\n"
               "       dpscale info  [options]   backend, devices, presets\n"
               "       dpscale comm-bench [options]\n"
               "                                 the host all-reduce alone (busbw)\n"
               "       dpscale links [options]   bandwidth and latency between host and devices\n"
               "       dpscale predict --machine FILE --workload FILE --gpus LIST [options]\n"
               "                                 dp and ddp step times predicted for a machine\n"
               "       dpscale predict --measure --model M --gpus LIST [options]\n"
               "                                 the same from runs of M measured here first\n"
               "       dpscale --help | --version\n\noptions:\n");
    settings_print_options(f);
    fprintf(f, "\n{...}: the commands that take the option (the others refuse it)\n"
               "exit status: 0 ok, 1 a configuration failed (oom, error, timeout), 2 bad input\n");
}

static dps_status bad(settings_id id, const char *val, const char *what)
{
    return dps_fail(DPS_ERR_USAGE, "--%s %s: %s", settings_table[id].flag, *val ? val : "''", what);
}

/* The settings bit of a subcommand; 0 before one is known. */
static unsigned cmd_bit(cli_cmd cmd)
{
    return cmd >= CMD_RUN && cmd <= CMD_PREDICT ? 1u << (cmd - CMD_RUN) : 0;
}

/* Whether subcommand cmd takes option id, and a list of n values of it (the table says). */
static dps_status check_command(cli_cmd cmd, settings_id id, const char *arg, int n)
{
    const settings_entry *e = &settings_table[id];
    unsigned bit = cmd_bit(cmd);
    char who[96], what[160];
    if (!bit) return DPS_OK; /* no subcommand: refused as such after the options */
    const char *name = settings_cmd_names[cmd - CMD_RUN];
    if (!(e->cmds & bit)) {
        settings_join_cmds(settings_flag_cmds(id), ", ", " and ", who, sizeof who);
        return dps_fail(DPS_ERR_USAGE, "--%s: not an option of `dpscale %s` (only of %s)", e->flag,
                        name, who);
    }
    if (n < 2 || (e->list_cmds & bit)) return DPS_OK;
    settings_join_cmds(e->list_cmds, ", ", " and ", who, sizeof who);
    snprintf(what, sizeof what, "one value for `dpscale %s` (lists are for %s)", name, who);
    return bad(id, arg, what);
}

/* --mode, --modes, --gpus, --devices, --model. */
static void store_list(cli_args *a, settings_id id, const settings_value *v)
{
    for (int i = 0; i < v->n; i++) {
        int x = (int)v->v[i].i;
        switch (id) {
        case SET_MODE: case SET_MODES: a->sweep_modes[i] = (dps_mode)x; break;
        case SET_GPUS: case SET_PREDICT_GPUS: a->sweep_ngpus[i] = x; break;
        case SET_DEVICES: a->cfg.devices[i] = x; break;
        default: dps_strlcpy(a->sweep_models[i], settings_value_item(v, i), DPS_PATH_MAX); break;
        }
    }
    switch (id) {
    case SET_MODE: case SET_MODES: a->sweep_modes_n = v->n; a->cfg.mode = a->sweep_modes[0]; break;
    case SET_GPUS: case SET_PREDICT_GPUS: a->sweep_ngpus_n = v->n; a->cfg.ngpus = a->sweep_ngpus[0]; a->gpus_set = 1; break;
    case SET_DEVICES: a->cfg.ngpus = v->n; a->devices_set = 1; break;
    default: a->sweep_models_n = v->n; break;
    }
}

/* Options without a value. */
static void store_flag(cli_args *a, settings_id id)
{
    switch (id) {
    case SET_NO_OVERLAP: a->cfg.overlap = 0; break;
    case SET_GRAD_VIEW: a->cfg.grad_view = 1; break;
    case SET_CHECK: a->cfg.check = 1; break;
    case SET_GEMM_REF: a->cfg.gemm_ref = 1; break;
    case SET_NO_NVML: a->cfg.no_nvml = 1; break;
    case SET_STRICT: setenv("DPSCALE_STRICT", "1", 1); break; /* read by the host backend's open */
    case SET_NO_NVTX: nvtx_set_enabled(0); break;
    case SET_RESUME: a->resume = 1; break;
    case SET_DRY_RUN: a->dry_run = 1; break;
    case SET_NO_LINKS: a->no_links = 1; break;
    case SET_MEASURE: a->measure = 1; break;
    case SET_HELP: a->cmd = CMD_HELP; break;
    case SET_VERSION: a->cmd = CMD_VERSION; break;
    default: break;
    }
}

/* The training loop's options: accumulation and the GradScaler. */
static void store_loop_value(dps_config *c, settings_id id, int64_t i, double x)
{
    switch (id) {
    case SET_ACCUM: c->accum = (int)i; break;
    case SET_NO_SYNC: c->no_sync = (int)i; break;
    case SET_SCALER: c->scaler = (int)i; break;
    case SET_INIT_SCALE: c->init_scale = x; break;
    case SET_GROWTH_INTERVAL: c->growth_interval = (int)i; break;
    case SET_INJECT_OVERFLOW: c->overflow_step = (int)i; break;
    default: break;
    }
}

/* Options with one value (a list for --sizes). */
/* The micro-benchmarks' options: comm-bench's sizes, collectives and
 * implementation, links' sizes. */
static void store_bench_value(cli_args *a, settings_id id, const settings_value *v)
{
    int64_t i = v->v[0].i;
    switch (id) {
    case SET_SIZES:
        for (int k = 0; k < v->n; k++) a->sizes[k] = (uint64_t)v->v[k].i;
        a->nsizes = v->n;
        break;
    case SET_BENCH_OP:
        for (int k = 0; k < v->n; k++) a->bench_ops[k] = (int)v->v[k].i;
        a->nbench_ops = v->n;
        break;
    case SET_BENCH_COMM: a->bench_comm = (int)i; break;
    case SET_LINK_MIN_BYTES: a->link_min = (uint64_t)i; break;
    case SET_LINK_MAX_BYTES: a->link_max = (uint64_t)i; break;
    case SET_LINK_FACTOR: a->link_factor = (int)i; break;
    default: break;
    }
}

static void store_value(cli_args *a, settings_id id, const settings_value *v)
{
    dps_config *c = &a->cfg;
    int64_t i = v->v[0].i;
    double x = v->v[0].x;
    switch (id) {
    case SET_BACKEND: c->be.kind = (be_kind)i; break;
    case SET_PRECISION: c->precision = (dps_precision)i; break;
    case SET_TF32: c->tf32 = (dps_tf32)i; break;
    case SET_ACCUM: case SET_NO_SYNC: case SET_SCALER: case SET_INIT_SCALE:
    case SET_GROWTH_INTERVAL: case SET_INJECT_OVERFLOW:
        store_loop_value(c, id, i, x);
        break;
    case SET_OPTIMIZER: c->optimizer = (dps_optimizer)i; break;
    case SET_DP_COMM: c->dp_comm = (dps_dp_comm)i; break;
    case SET_DP_IMPL: c->dp_impl = (dps_dp_impl)i; break;
    case SET_DDP_IMPL: c->ddp_impl = (dps_dp_impl)i; break;
    case SET_LAUNCHER: a->launcher = (dps_launch)i; break;
    case SET_COMM: c->comm = (dps_comm)i; break;
    case SET_LOCAL_RANK: a->local_rank = (int)i; break;
    case SET_LR: c->hp.lr = (float)x; a->lr_set = 1; break;
    case SET_STEPS: c->steps = (int)i; a->steps_set = 1; break;
    case SET_WARMUP: c->warmup = (int)i; a->warmup_set = 1; break;
    case SET_SEED: c->seed = (uint64_t)i; break;
    case SET_BATCH: c->global_batch = (int)i; a->batch_set = 1; break;
    case SET_BATCH_PER_GPU: a->batch_per_gpu = (int)i; break;
    case SET_LAYERS: case SET_WIDTH: case SET_TOKENS: case SET_CLASSES:
        (&a->shape_values.layers)[id - SET_LAYERS] = (int)i; /* model_shape's order */
        a->shape_override[id - SET_LAYERS] = 1;
        break;
    case SET_DEVICE_MEM: c->be.device_mem = (size_t)i; break;
    case SET_HOST_DEVICES: c->be.host_devices = (int)i; break;
    case SET_BUCKET_MB:
        c->bucket_mb = x;
        for (int k = 0; k < v->n; k++) a->bucket_mbs[k] = v->v[k].x;
        a->bucket_mbs_n = v->n;
        break;
    case SET_FIRST_BUCKET_MB: c->first_bucket_mb = x; break;
    case SET_TIMEOUT: c->timeout_s = x; break;
    case SET_CONFIG_TIMEOUT: a->config_timeout_s = x; break;
    case SET_INJECT_SLOWDOWN:
        c->inject_slowdown_pct = x;
        c->slowdown_rank = (int)v->v[1].i;
        break;
    case SET_INJECT_FAULT:
        c->fault_rank = (int)i;
        c->fault_step = (int)v->v[1].i;
        c->fault_kind = (dps_fault)v->v[2].i;
        break;
    case SET_TRACE_STEPS: c->trace_steps = (int)i; break;
    case SET_PROFILE_STEPS: c->profile_first = (int)i; c->profile_last = (int)v->v[1].i; break;
    case SET_SIZES: case SET_BENCH_OP: case SET_BENCH_COMM: case SET_LINK_MIN_BYTES:
    case SET_LINK_MAX_BYTES: case SET_LINK_FACTOR:
        store_bench_value(a, id, v);
        break;
    case SET_OUT: dps_strlcpy(c->out_dir, v->text, sizeof c->out_dir); a->out_set = 1; break;
    case SET_MACHINE: dps_strlcpy(a->machine_path, v->text, sizeof a->machine_path); break;
    case SET_WORKLOAD: dps_strlcpy(a->workload_path, v->text, sizeof a->workload_path); break;
    case SET_MODEL_FILE: dps_strlcpy(a->model_file, v->text, sizeof a->model_file); break;
    case SET_FROM: dps_strlcpy(a->from_dir, v->text, sizeof a->from_dir); break;
    case SET_CALIBRATE: dps_strlcpy(a->calibrate_dir, v->text, sizeof a->calibrate_dir); break;
    case SET_CALIBRATION:
        dps_strlcpy(a->calibration_path, v->text, sizeof a->calibration_path);
        break;
    case SET_SAVE_PARAMS: dps_strlcpy(c->save_params, v->text, sizeof c->save_params); break;
    case SET_NAME: dps_strlcpy(c->name, v->text, sizeof c->name); a->name_set = 1; break;
    case SET_FILTER: dps_strlcpy(a->filter, v->text, sizeof a->filter); break;
    default: break;
    }
}

/* Option id of subcommand cmd with value arg (NULL for a flag) into a. */
static dps_status apply_opt(cli_args *a, cli_cmd cmd, settings_id id, const char *arg)
{
    if (cmd_bit(cmd)) id = settings_entry_for(id, cmd_bit(cmd)); /* this subcommand's entry */
    const settings_entry *e = &settings_table[id];
    settings_value v;
    settings_error err;
    DPS_TRY(check_command(cmd, id, arg, 1));
    a->given[id] = 1;
    if (e->type == SETTINGS_FLAG) {
        store_flag(a, id);
        return DPS_OK;
    }
    if (settings_value_parse(id, e->cli_max, arg, &v, &err))
        return bad(id, err.item[0] ? err.item : arg, err.what);
    DPS_TRY(check_command(cmd, id, arg, v.n));
    if (id == SET_MODE || id == SET_MODES || id == SET_GPUS || id == SET_PREDICT_GPUS ||
        id == SET_DEVICES || id == SET_MODEL)
        store_list(a, id, &v);
    else
        store_value(a, id, &v);
    return DPS_OK;
}

/* Options that only some strategies read: those of one process (dp's),
 * those of a process a device, those of DDP's buckets. */
typedef enum reader { READ_ONE_PROCESS, READ_RANKS, READ_BUCKETS } reader;
static const struct { settings_id id; reader by; } mode_options[] = {
    {SET_DP_IMPL, READ_ONE_PROCESS}, {SET_DP_COMM, READ_ONE_PROCESS},
    {SET_BUCKET_MB, READ_BUCKETS},   {SET_FIRST_BUCKET_MB, READ_BUCKETS},
    {SET_NO_OVERLAP, READ_BUCKETS},  {SET_GRAD_VIEW, READ_BUCKETS},
    {SET_COMM, READ_RANKS},          {SET_DDP_IMPL, READ_RANKS},
    {SET_NO_SYNC, READ_BUCKETS},
};

static int reads(dps_mode m, reader by)
{
    const dps_strategy *s = dps_strategy_of(m);
    return by == READ_ONE_PROCESS ? !s->per_rank : by == READ_RANKS ? s->per_rank : s->buckets;
}

/* A strategy that reads it, for the message: the first in the table. */
static const char *a_reader(reader by)
{
    for (int m = 0; m < MODE_COUNT; m++)
        if (reads((dps_mode)m, by)) return dps_mode_name((dps_mode)m);
    return "?";
}

/* run and sweep: an option no configuration's mode reads, or --batch beside
 * --batch-per-gpu, is a mistake (a suite file's modes are its own). */
static dps_status check_given(const cli_args *a)
{
    if (a->cmd != CMD_RUN && a->cmd != CMD_SWEEP) return DPS_OK;
    if (a->batch_set && a->batch_per_gpu)
        return dps_fail(DPS_ERR_USAGE, "--batch %d and --batch-per-gpu %d: give one (--batch is "
                        "the global batch; --batch-per-gpu N makes it N x the device count)",
                        a->cfg.global_batch, a->batch_per_gpu);
    if (a->cmd == CMD_SWEEP && a->suite_path[0]) return DPS_OK;
    int runs[MODE_COUNT] = {0};
    if (a->cmd == CMD_RUN) runs[a->cfg.mode] = 1;
    for (int i = 0; i < a->sweep_modes_n; i++) runs[a->sweep_modes[i]] = 1;
    dps_mode compared[MODE_COUNT];
    int ncompared = a->cmd == CMD_SWEEP && !a->sweep_modes_n ? dps_strategies_compared(compared) : 0;
    for (int i = 0; i < ncompared; i++) runs[compared[i]] = 1;
    for (size_t k = 0; k < sizeof mode_options / sizeof mode_options[0]; k++) {
        int read = 0;
        for (int m = 0; m < MODE_COUNT; m++) read |= runs[m] && reads((dps_mode)m, mode_options[k].by);
        if (!a->given[mode_options[k].id] || read) continue;
        const char *name = a_reader(mode_options[k].by);
        static const char *const whose[] = {"the one-process strategy (dp)",
                                            "the strategies of a process a device",
                                            "the strategies with DDP's buckets (ddp, zero1)"};
        return dps_fail(DPS_ERR_USAGE, "--%s: only %s read%s it, and no configuration here runs "
                        "one; drop it, or add --mode %s", settings_table[mode_options[k].id].flag,
                        whose[mode_options[k].by], mode_options[k].by ? "" : "s", name);
    }
    return DPS_OK;
}

static cli_cmd parse_command(const char *s)
{
    for (int i = 0; i < SETTINGS_NCMDS; i++)
        if (strcmp(s, settings_cmd_names[i]) == 0) return (cli_cmd)(CMD_RUN + i);
    return CMD_NONE;
}

/* getopt_long's array (value CLI_ID_BASE + id) and optstring (":hV") from the table. */
static void long_options(struct option *lo, char *letters)
{
    int n = 0, k = 0;
    letters[k++] = ':';
    for (int id = 0; id < SET_COUNT; id++) {
        const settings_entry *e = &settings_table[id];
        if (!e->flag || !settings_flag_first((settings_id)id)) continue; /* apply_opt picks */
        int has_arg = e->type == SETTINGS_FLAG ? no_argument : required_argument;
        lo[n++] = (struct option){e->flag, has_arg, NULL, CLI_ID_BASE + id};
        if (id == SET_LOCAL_RANK) /* as torch.distributed.launch before PyTorch 2.0 spells it */
            lo[n++] = (struct option){"local_rank", has_arg, NULL, CLI_ID_BASE + id};
        if (id == SET_NO_NVTX) /* the old name, which said trace but meant NVTX ranges */
            lo[n++] = (struct option){"no-trace", no_argument, NULL, CLI_ID_NO_TRACE};
        if (e->letter) letters[k++] = e->letter;
        if (e->letter && has_arg == required_argument) letters[k++] = ':';
    }
    memset(&lo[n], 0, sizeof lo[n]);
    letters[k] = '\0';
}

/* The option of a short letter (getopt_long returns only the table's letters). */
static settings_id id_of_letter(int letter)
{
    int id = 0;
    while (settings_table[id].letter != letter) id++;
    return (settings_id)id;
}

dps_status cli_parse(int argc, char **argv, cli_args *a)
{
    memset(a, 0, sizeof *a);
    config_defaults(&a->cfg);
    a->config_timeout_s = settings_table[SET_CONFIG_TIMEOUT].def.x;
    a->link_min = (uint64_t)settings_table[SET_LINK_MIN_BYTES].def.i;
    a->link_factor = (int)settings_table[SET_LINK_FACTOR].def.i;
    a->local_rank = -1;
    struct option lo[SET_COUNT + 3]; /* two aliases */
    char letters[2 * SET_COUNT + 2];
    long_options(lo, letters);
    int first = 1;
    if (argc > 1 && argv[1][0] != '-') {
        a->cmd = parse_command(argv[1]);
        if (a->cmd == CMD_NONE)
            return dps_fail(DPS_ERR_USAGE, "unknown command '%s': expected run, sweep, info, links, comm-bench or predict "
                            "(see dpscale --help)", argv[1]);
        first = 2;
    }
    cli_cmd cmd = a->cmd;
    opterr = 0;
    optind = first;
    int id;
    while ((id = getopt_long(argc, argv, letters, lo, NULL)) != -1) {
        if (id == '?')
            return dps_fail(DPS_ERR_USAGE, "unknown option '%s' (see dpscale --help)",
                            argv[optind - 1]);
        if (id == ':')
            return dps_fail(DPS_ERR_USAGE, "option '%s' needs a value (see dpscale --help)",
                            argv[optind - 1]);
        if (id == CLI_ID_NO_TRACE) {
            static int warned;
            if (!warned)
                dps_warn("--no-trace is now --no-nvtx (NVTX ranges; the timeline is --trace-steps)");
            warned = 1;
            id = CLI_ID_BASE + SET_NO_NVTX;
        }
        settings_id sid = id >= CLI_ID_BASE ? (settings_id)(id - CLI_ID_BASE) : id_of_letter(id);
        DPS_TRY(apply_opt(a, cmd, sid, optarg));
    }
    if (optind < argc && cmd == CMD_SWEEP && !argv[optind][0])
        return dps_fail(DPS_ERR_USAGE, "sweep '': an empty suite path; give a suite file, or none "
                        "for the --mode, --gpus and --model lists");
    if (optind < argc && cmd == CMD_SWEEP && strlen(argv[optind]) < sizeof a->suite_path)
        dps_strlcpy(a->suite_path, argv[optind++], sizeof a->suite_path);
    if (optind < argc)
        return dps_fail(DPS_ERR_USAGE, "unexpected argument '%s' (see dpscale --help)", argv[optind]);
    if (a->cmd != CMD_HELP && a->cmd != CMD_VERSION) a->cmd = cmd;
    if (a->cmd == CMD_NONE)
        return dps_fail(DPS_ERR_USAGE, "no command: expected run, sweep or info (see dpscale --help)");
    DPS_TRY(check_given(a));
    if (a->gpus_set && a->devices_set && a->cfg.ngpus != a->sweep_ngpus[0])
        return dps_fail(DPS_ERR_USAGE, "--gpus %d and --devices (%d devices) disagree; give one",
                        a->sweep_ngpus[0], a->cfg.ngpus);
    float lr = a->cfg.hp.lr; /* optimizer defaults, then an explicit --lr on top */
    config_optimizer_defaults(&a->cfg);
    if (a->lr_set) a->cfg.hp.lr = lr;
    return DPS_OK;
}

/* --layers, --width, --tokens and --classes on an MLP preset, named in the
 * model's name ("small:4x256x16x128"); a model file has its own shapes. */
static dps_status override_shape(const cli_args *a, dps_config *c)
{
    const int *given = a->shape_override;
    if (!given[0] && !given[1] && !given[2] && !given[3]) return DPS_OK;
    if (c->net_file)
        return dps_fail(DPS_ERR_USAGE, "--layers, --width, --tokens and --classes shape an MLP "
                        "preset; %s is a model file, whose shapes are its own (export another "
                        "with scripts/model_export.py)", c->net_file->path);
    const int *sv = &a->shape_values.layers;
    int *cv = &c->shape.layers;
    for (int i = 0; i < 4; i++)
        if (given[i]) cv[i] = sv[i];
    char base[DPS_NAME_MAX];
    dps_strlcpy(base, c->model, sizeof base);
    snprintf(c->model, sizeof c->model, "%.80s:%dx%dx%dx%d", base, c->shape.layers,
             c->shape.width, c->shape.tokens, c->shape.classes);
    return DPS_OK;
}

dps_status cli_finish_config(cli_args *a, const char *model, dps_mode mode, int ngpus,
                             const backend *be, dps_config *out)
{
    dps_config c = a->cfg;
    c.mode = mode;
    if (!dps_strategy_of(mode)->buckets) c.no_sync = 1; /* a sweep's --no-sync off is its bucketed
                                                           configurations' */
    int per_gpu = 0;
    DPS_TRY(config_set_model(&c, model, NULL, &per_gpu));
    DPS_TRY(override_shape(a, &c));
    if (!a->devices_set) {
        c.ngpus = ngpus;
        for (int i = 0; i < ngpus; i++) c.devices[i] = i;
    }
    if (a->batch_per_gpu) c.global_batch = a->batch_per_gpu * c.ngpus;
    else if (!a->batch_set) c.global_batch = per_gpu * c.ngpus;
    DPS_TRY(config_check(&c, be));
    *out = c;
    return DPS_OK;
}

dps_status cli_refuse_given(const cli_args *a, const settings_id *ids, size_t n, const char *why)
{
    for (size_t i = 0; i < n; i++)
        if (a->given[ids[i]])
            return dps_fail(DPS_ERR_USAGE, "--%s: %s", settings_table[ids[i]].flag, why);
    return DPS_OK;
}

void cli_folder_name(const char *text, char *buf, size_t len)
{
    dps_strlcpy(buf, text, len);
    for (char *p = buf; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || (c == '.' && p != buf)))
            *p = '_';
    }
}
