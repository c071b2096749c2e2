/* The settings: one table of every command-line option and suite-file key
 * (type, range, words, default, subcommands, metavar, help) read by the
 * command line, the suite parser, --help and config_defaults; values are read
 * in settings_value.c. */
#ifndef DPS_SETTINGS_H
#define DPS_SETTINGS_H

#include <stdint.h>
#include <stdio.h>

#include "backend/backend.h"

#define SETTINGS_MAX_LIST 16              /* entries of a list: --gpus 1,2,4, models = ... */
#define SETTINGS_MAX_VALUES DPS_MAX_DEVICES /* the longest list, --devices */
#define SETTINGS_PATTERN_MAX 128          /* --filter's buffer, NUL included */

/* One per entry of settings_table, in the order of --help. */
typedef enum settings_id {
    SET_BACKEND, SET_MODE, SET_GPUS, SET_DEVICES, SET_MODEL, SET_LAYERS, SET_WIDTH, SET_TOKENS,
    SET_CLASSES, SET_BATCH, SET_BATCH_PER_GPU, SET_SCALING, SET_ACCUM, SET_NO_SYNC, SET_PRECISION,
    SET_SCALER, SET_INIT_SCALE, SET_GROWTH_INTERVAL, SET_TF32, SET_OPTIMIZER, SET_LR,
    SET_STEPS, SET_WARMUP, SET_SEED, SET_DEVICE_MEM, SET_HOST_DEVICES, SET_DP_COMM, SET_DP_IMPL, SET_BUCKET_MB,
    SET_FIRST_BUCKET_MB, SET_NO_OVERLAP, SET_OVERLAP, SET_GRAD_VIEW, SET_DDP_IMPL, SET_TIMEOUT, SET_INJECT_FAULT,
    SET_INJECT_SLOWDOWN, SET_INJECT_OVERFLOW, SET_LAUNCHER, SET_COMM, SET_LOCAL_RANK,
    SET_RESUME, SET_FILTER, SET_DRY_RUN, SET_NO_LINKS, SET_CONFIG_TIMEOUT, SET_SIZES,
    SET_BENCH_OP, SET_BENCH_COMM,
    SET_LINK_MIN_BYTES, SET_LINK_MAX_BYTES, SET_LINK_FACTOR, SET_NO_NVTX,
    SET_NO_NVML, SET_STRICT, SET_PROFILE_STEPS, SET_TRACE_STEPS, SET_CHECK, SET_SAVE_PARAMS, SET_GEMM_REF, SET_MACHINE,
    SET_WORKLOAD, SET_FROM, SET_CALIBRATE, SET_CALIBRATION, SET_MEASURE, SET_PREDICT_GPUS, SET_MODES, SET_MODEL_FILE, SET_OUT, SET_NAME, SET_HELP,
    SET_VERSION, SET_COUNT
} settings_id;

/* The subcommands, as bits of settings_entry.cmds: bit i is settings_cmd_names[i]. */
enum {
    SETTINGS_RUN = 1 << 0, SETTINGS_SWEEP = 1 << 1, SETTINGS_INFO = 1 << 2,
    SETTINGS_COMM_BENCH = 1 << 3, SETTINGS_LINKS = 1 << 4, SETTINGS_PREDICT = 1 << 5,
};
#define SETTINGS_NCMDS 6
extern const char *const settings_cmd_names[SETTINGS_NCMDS]; /* "run", "sweep", ... */

typedef enum settings_type {
    SETTINGS_FLAG,        /* no value: the option alone */
    SETTINGS_INT,         /* an integer from lo to hi */
    SETTINGS_NUMBER,      /* a number above lo and at most hi */
    SETTINGS_BYTES,       /* a byte count (K/M/G/T suffixes) from lo to hi, a multiple of
                           * `multiple` */
    SETTINGS_WORD,        /* one of words[] */
    SETTINGS_PRESET,      /* the name of a model preset (i its index), or a model file's
                           * path (i -1; settings_is_model_file) */
    SETTINGS_TEXT,        /* text of 1 to hi characters */
    SETTINGS_FOLDER_NAME, /* TEXT without '/' that does not start with '.' */
    SETTINGS_STEP_RANGE,  /* FIRST:LAST, steps from lo to hi, FIRST <= LAST */
    SETTINGS_FAULT,       /* RANK:STEP:WORD, a device's rank, a step from lo to hi, one of words[] */
    SETTINGS_SLOWDOWN,    /* PCT or PCT@RANK: a number above lo and at most hi (x), and a
                             device's rank (i of the second item; -1: every device) */
} settings_type;

/* One value: i for INT, BYTES, WORD and PRESET (the index), x for NUMBER. */
typedef union settings_item {
    int64_t i;
    double x;
} settings_item;

typedef struct settings_entry {
    const char *flag;         /* long option without "--"; NULL: suite files only */
    char letter;              /* short option, 0: none */
    const char *key;          /* suite-file key; NULL: command line only */
    settings_type type;
    int64_t lo, hi;           /* the range (see settings_type) */
    int64_t multiple;         /* BYTES: a multiple of this; 0: any count */
    const char *const *words; /* WORD, FAULT: nwords words */
    int nwords;
    int cli_max, suite_max;   /* values in a comma list; 1: a single value */
    int repeats;              /* a list may name a value twice (--devices 0,0) */
    unsigned cmds;            /* the subcommands that take the option (SETTINGS_RUN, ...) */
    unsigned list_cmds;       /* those of them that take a list of cli_max values; the others one */
    int has_default;          /* def (or def_text) is the default */
    settings_item def;        /* INT, BYTES, WORD (the index), NUMBER */
    const char *def_text;     /* PRESET, TEXT */
    const char *metavar;      /* after the flag in --help; the words are appended */
    const char *help;
} settings_entry;

extern const settings_entry settings_table[SET_COUNT];

/* The id of the setting with suite key `key`, or -1. */
int settings_find_key(const char *key);

/* A flag may have one entry per set of subcommands (--gpus: predict's has
 * its own range). The entry with id's flag that subcommand bit `cmd` takes
 * (id when none does); the subcommands of all of them; whether id is the
 * first entry of its flag (the one getopt is told of). */
settings_id settings_entry_for(settings_id id, unsigned cmd);
unsigned settings_flag_cmds(settings_id id);
int settings_flag_first(settings_id id);
/* words[] joined by sep, e.g. "dp|ddp", into buf. */
void settings_join_words(const settings_entry *e, const char *sep, char *buf, size_t len);
/* The subcommands of `cmds` by name, separated by sep and the last by last:
 * "run, sweep and links". */
void settings_join_cmds(unsigned cmds, const char *sep, const char *last, char *buf, size_t len);
/* The options part of --help: one line per option with its range, default and
 * the subcommands that take it. */
void settings_print_options(FILE *f);

#define SETTINGS_LIST_CHARS 1024 /* the longest comma list, NUL included */

/* A value read by settings_value_parse. */
typedef struct settings_value {
    int n;                                /* values: 1, or a list's length */
    settings_item v[SETTINGS_MAX_VALUES]; /* STEP_RANGE: first, last; FAULT: rank, step, word */
    const char *text;                     /* TEXT, FOLDER_NAME: the text given */
    char items[SETTINGS_LIST_CHARS];      /* each entry's text, trimmed (settings_value_item) */
    int item_at[SETTINGS_MAX_VALUES];
} settings_value;

/* Entry i's text as given (trimmed). */
const char *settings_value_item(const settings_value *v, int i);
/* Whether a PRESET entry names a model file rather than a preset: it has
 * a '/' or ends in ".model". */
int settings_is_model_file(const char *text);

/* Why a value was refused, for a one-line message. */
typedef struct settings_error {
    char what[320];   /* e.g. "expected an integer from 1 to 64" */
    char item[256];   /* the list entry refused; "" when it is the whole text */
} settings_error;

/* Reads `text` as setting `id`: a comma list of at most `max` values (entries
 * trimmed of blanks, none empty, none the same value as another unless the
 * entry repeats) when max > 1,
 * else one value. 0 ok; -1 refused, with
 * *err filled for the caller's message (item: the value refused, "" when the
 * list as a whole is malformed). */
int settings_value_parse(settings_id id, int max, const char *text, settings_value *out,
                         settings_error *err);

#endif
