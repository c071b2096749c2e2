/* Suite files: a sweep written down (the .suite files of bench/). Lines `key = value`
 * or `key = v1, v2, ...`, `#` comments, [host] / [cuda] sections whose
 * keys apply only on that backend (they override the common ones), and
 * added sweeps, `[+ NAME]` (or `[host + NAME]`, `[cuda + NAME]`: on that
 * backend only): each starts from every setting above it that applies
 * here, its keys override those, and its configurations join the main
 * sweep's (one already there is not run twice). */
#ifndef DPS_SUITE_H
#define DPS_SUITE_H

#include "backend/backend.h"
#include "config/config.h"
#include "config/settings.h"

#define SUITE_MAX_LIST SETTINGS_MAX_LIST
#define SUITE_MAX_ADDED 8   /* added sweeps a file */
#define SUITE_NAME_MAX 48

typedef struct suite {
    char path[DPS_PATH_MAX];
    dps_mode modes[MODE_COUNT];
    int nmodes;
    int gpus[SUITE_MAX_LIST], ngpus;   /* gpus_all: 1, 2, 4, ... up to the devices */
    int gpus_all;
    char models[SUITE_MAX_LIST][DPS_PATH_MAX]; /* presets, or model files from the suite's folder */
    int nmodels;
    int policies[2], npolicies;        /* batch = weak, strong (1 = strong: global batch fixed) */
    int batch_per_gpu, global_batch;   /* 0: from the preset */
    dps_precision precisions[PREC_COUNT];
    int nprecisions;
    dps_optimizer optimizers[OPT_COUNT];
    int noptimizers;
    double bucket_mb[SUITE_MAX_LIST];
    int nbucket_mb;
    int overlap[2], noverlap;
    int accum[SUITE_MAX_LIST], naccum;  /* 0 entries: the command line's */
    int no_sync[2], nno_sync;          /* 0 entries: the command line's */
    dps_dp_impl dp_impls[DPIMPL_COUNT];
    int ndp_impls;
    dps_dp_impl ddp_impls[DPIMPL_COUNT];
    int nddp_impls;
    int steps, warmup;                 /* 0: the CLI's */
    uint64_t device_mem;               /* host capacity, 0: the CLI's */
    char name[SUITE_NAME_MAX];         /* an added sweep's; "" for the main one */
    struct suite *added;               /* the main one's added sweeps that apply here */
    int nadded;
} suite;

/* Reads a suite for backend `kind` (BE_HOST or BE_CUDA). DPS_ERR_USAGE with
 * "FILE:LINE: what" on a bad file. */
dps_status suite_load(const char *path, be_kind kind, suite *s);
/* Frees what suite_load allocated (the added sweeps); safe after a failed load. */
void suite_free(suite *s);

/* One entry of a sweep: the configuration, or why it cannot run here. */
typedef struct sweep_item {
    dps_config cfg;
    char skip[256];   /* non-empty: recorded as status skipped */
    int twin;         /* sweep_pair: a later item this one's run stands for too; -1: none */
    int same_as;      /* sweep_pair: the earlier item whose run stands for this one; -1: none */
} sweep_item;

/* Every configuration of the suite on top of `base` (the CLI's options), in
 * the order models x precisions x optimizers x modes x scaling x gpus x buckets x
 * overlap x dp implementations x ddp implementations.
 * lr_override > 0 replaces every optimizer's default learning rate. */
dps_status suite_expand(const suite *s, const dps_config *base, const backend *be,
                        double lr_override, sweep_item **items, int *n);

#endif
