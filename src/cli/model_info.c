/* `dpscale info --model FILE`: a model file's summary and the buckets DDP
 * makes of its gradients, in the order backward readies them. */
#include <stdio.h>
#include <stdlib.h>

#include "cli/commands.h"
#include "core/util.h"
#include "model/bucket.h"
#include "model/model_file.h"

#define MIB 1048576.0

static void print_summary(const char *path, const model_file *mf)
{
    char bytes[32];
    size_t params = model_file_params(mf);
    dps_fmt_bytes((uint64_t)params * sizeof(float), bytes, sizeof bytes);
    uint64_t saved = 0;
    for (int i = 0; i < mf->nops; i++) saved += mf->ops[i].saved;
    char act[32];
    dps_fmt_bytes(saved, act, sizeof act);
    printf("# dpscale info: model file %s\n", path);
    printf("# %s: %d tensors, %zu parameters (%s in fp32), %d ops, %.4g GFLOP a sample forward "
           "(GEMMs), %zu x %d logits a sample, %s of activations kept a sample\n",
           mf->name, mf->ntensors, params, bytes, mf->nops, model_file_fwd_flops(mf) / 1e9,
           model_file_rows(mf), mf->classes, act);
}

/* The tensors as bucket_assign takes them (model_file_bucket_order). */
static int print_buckets(const model_file *mf, double first_mb, double mb)
{
    int n = mf->ntensors, *order = malloc((size_t)n * sizeof *order);
    size_t *counts = malloc((size_t)n * sizeof *counts);
    bucket *b = malloc((size_t)n * sizeof *b);
    if (!order || !counts || !b) {
        free(order), free(counts), free(b);
        fprintf(stderr, "dpscale: out of host memory\n");
        return 1;
    }
    model_file_bucket_order(mf, order);
    for (int i = 0; i < n; i++) counts[i] = mf->tensors[order[i]].numel;
    int nb = bucket_assign(counts, n, sizeof(float), (size_t)(first_mb * MIB), (size_t)(mb * MIB), b, n);
    printf("# ddp buckets of fp32 gradients (--first-bucket-mb %g, --bucket-mb %g), as DDP rebuilds "
           "them after the first step: %d\n", first_mb, mb, nb);
    printf("# %6s %8s %14s  %s\n", "bucket", "tensors", "bytes", "first ready .. last ready");
    for (int i = 0; i < nb; i++) {
        int last = b[i].first_param, first = last + b[i].nparams - 1; /* ready first: highest place */
        printf("  %6d %8d %14zu  %s .. %s\n", i, b[i].nparams, (b[i].hi - b[i].lo) * sizeof(float),
               mf->tensors[order[first]].name, mf->tensors[order[last]].name);
    }
    free(order), free(counts), free(b);
    return 0;
}

int cmd_model_info(cli_args *a)
{
    model_file mf;
    dps_status rc = model_file_read(a->model_file, &mf);
    if (rc) {
        fprintf(stderr, "dpscale: %s\n", dps_errmsg());
        return rc == DPS_ERR_USAGE ? 2 : 1; /* a file refused is a usage error, as cmd_usage_error's */
    }
    print_summary(a->model_file, &mf);
    int status = print_buckets(&mf, a->cfg.first_bucket_mb, a->cfg.bucket_mb);
    model_file_free(&mf);
    return status;
}
