/* Unit tests of config/: the launchers' world and the settings table. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "config/settings.h"
#include "config/world.h"
#include "core/util.h"
#include "model/net.h"
#include "run/suite.h"

#include "expect.h"

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
    expect_same_refusal("sweep --mode zero4", "modes = zero4\n");
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
    snprintf(want, sizeof want, " [%lld..%lld; default %lld] {run, sweep, comm-bench, links, predict}\n",
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

/* A model file as a configuration's model: its name, shapes and parameters
 * from the file (read once: a second set shares it), the preset's batch
 * default or 8 samples a device, and bf16, --gemm-ref and an oversized
 * batch refused by the values' check. */
static void test_model_files(void)
{
    static const char text[] = "dpscale-model 1\nname twolayer\ninput 6\nclasses 3\n"
        "tensor a.weight 4x3 ready=1\ntensor b.weight 3x4 ready=0\n"
        "op gemm a m=2 k=3 n=4 weight=a.weight\nop act r fn=relu\nop gemm b m=2 k=4 n=3 weight=b.weight\n";
    const char *path = write_tmp("twolayer.model", text, sizeof text - 1);
    dps_config c, d;
    int per = 0;
    config_defaults(&c);
    EXPECT(config_set_model(&c, path, NULL, &per) == DPS_OK && c.net_file);
    d = c;
    EXPECT(config_set_model(&d, path, NULL, &per) == DPS_OK && d.net_file == c.net_file);
    unlink(path);
    if (!c.net_file) return;
    EXPECT(strcmp(c.model, "twolayer") == 0 && per == CONFIG_FILE_BATCH_PER_GPU);
    EXPECT(config_params(&c) == 24 && c.shape.tokens == 2 && c.shape.classes == 3 && c.shape.layers == 3);
    EXPECT(config_fwd_flops(&c) == 2.0 * (2 * 3 * 4 + 2 * 4 * 3));
    c.global_batch = 8;
    EXPECT(config_check_values(&c) == DPS_OK);
    c.precision = PREC_BF16;
    EXPECT(config_check_values(&c) == DPS_OK); /* a file runs under autocast too */
    c.precision = PREC_FP32;
    c.gemm_ref = 1;
    EXPECT(config_check_values(&c) == DPS_ERR_USAGE && strstr(dps_errmsg(), "--gemm-ref"));
    c.gemm_ref = 0;
    c.global_batch = 1 << 24;
    c.ngpus = 1;
    EXPECT(config_check_values(&c) == DPS_OK);
    EXPECT(config_set_model(&c, "small", NULL, &per) == DPS_OK && !c.net_file && per == 16);
    net_unload_all();
}

EXPECT_GROUPS(GROUP(world), GROUP(settings), GROUP(model_files));
