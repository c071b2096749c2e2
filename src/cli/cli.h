/* Command line: options from the settings table (settings.h) into cli_args,
 * one-line errors, the usage text, and validation of a configuration against
 * the opened backend. */
#ifndef DPS_CLI_H
#define DPS_CLI_H

#include <stdio.h>

#include "backend/backend.h"
#include "config/config.h"
#include "config/settings.h"

/* CMD_RUN to CMD_PREDICT in the order of settings_cmd_names. */
typedef enum cli_cmd {
    CMD_NONE, CMD_RUN, CMD_SWEEP, CMD_INFO, CMD_COMM_BENCH, CMD_LINKS, CMD_PREDICT, CMD_HELP,
    CMD_VERSION
} cli_cmd;

#define CLI_MAX_LIST SETTINGS_MAX_LIST

typedef struct cli_args {
    cli_cmd cmd;
    dps_config cfg;
    int gpus_set, devices_set, out_set, batch_set, batch_per_gpu, lr_set, name_set, warmup_set;
    int shape_override[4];           /* layers, width, tokens, classes given */
    unsigned char given[SET_COUNT];  /* the options on the command line */
    int plan_argc;                   /* the command line that chose the configurations: */
    char **plan_argv;                /* argv, or on --resume the folder's (not owned) */
    model_shape shape_values;
    /* sweep: lists */
    int sweep_ngpus[CLI_MAX_LIST], sweep_ngpus_n;
    char sweep_models[CLI_MAX_LIST][DPS_PATH_MAX]; /* presets or model files' paths */
    dps_mode sweep_modes[MODE_COUNT];
    int sweep_modes_n;
    int sweep_models_n;
    double bucket_mbs[CLI_MAX_LIST]; /* --bucket-mb's list (sweep, predict --from) */
    int bucket_mbs_n;
    /* sweep */
    char suite_path[DPS_PATH_MAX];
    int resume, dry_run, steps_set, no_links;
    dps_launch launcher;             /* --launcher */
    struct ddp_world *dw;            /* under a launcher: the joined ranks; NULL: none */
    int local_rank;                  /* --local-rank: torch.distributed.launch's; -1: none */
    char filter[SETTINGS_PATTERN_MAX];
    double config_timeout_s;
    /* comm-bench: message sizes in bytes; --op's collectives (comm_op's
     * order, none given: all-reduce) and --comm's implementation (0 shm, 1 gloo) */
    uint64_t sizes[CLI_MAX_LIST];
    int nsizes;
    int bench_ops[3], nbench_ops, bench_comm;
    /* links, sweep's link matrix: --link-min-bytes, --link-max-bytes (0: the
     * command's default), --link-factor */
    uint64_t link_min, link_max;
    int link_factor;
    /* predict: the files; the modes are sweep_modes */
    char machine_path[DPS_PATH_MAX], workload_path[DPS_PATH_MAX];
    char from_dir[DPS_PATH_MAX], calibrate_dir[DPS_PATH_MAX], calibration_path[DPS_PATH_MAX];
    int measure;                     /* --measure: the runs predicted from taken first */
    /* info: a model file to describe */
    char model_file[DPS_PATH_MAX];
} cli_args;

/* Parses argv; DPS_ERR_USAGE with a one-line message on bad input. */
dps_status cli_parse(int argc, char **argv, cli_args *a);
/* Applies the preset, mode and overrides and checks the configuration against
 * the backend (device count, precision, sizes). DPS_ERR_USAGE on bad input. */
dps_status cli_finish_config(cli_args *a, const char *model, dps_mode mode, int ngpus,
                             const backend *be, dps_config *out);
void cli_usage(FILE *f);

/* DPS_ERR_USAGE "--FLAG: why" for the first of ids[0..n) given on the
 * command line; DPS_OK when none was. */
dps_status cli_refuse_given(const cli_args *a, const settings_id *ids, size_t n, const char *why);

/* A folder name under OUT made from text, as --name accepts it: a byte other than
 * a letter, a digit, '-', '_' or a '.' after the first becomes '_'. */
void cli_folder_name(const char *text, char *buf, size_t len);

#endif
