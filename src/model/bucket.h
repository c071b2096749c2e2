/* DDP's gradient buckets, assigned as PyTorch's
 * _compute_bucket_assignment_by_size: parameters in reverse order, the
 * first bucket capped at first_cap bytes and the others at cap bytes, a
 * bucket closing once it reaches its cap. Parameters are never split, so
 * with the flat layout every bucket is one contiguous range of floats. */
#ifndef DPS_BUCKET_H
#define DPS_BUCKET_H

#include <stddef.h>

#include "model/model.h"

#define DPS_MAX_BUCKETS 8192
#define BUCKET_MAX_LAYERS 4097 /* hidden layers (--layers' limit) and the classifier */

typedef struct bucket {
    size_t lo, hi;        /* float range [lo, hi) of the flat parameters */
    int first_param;      /* model-order index of its first (lowest) parameter */
    int nparams;
} bucket;

/* counts[i]: elements of parameter i in model order. Returns the number
 * of buckets (bucket 0 holds the last parameters), or -1 if more than max;
 * out NULL: only counts them. */
int bucket_assign(const size_t *counts, int nparams, size_t elem_bytes, size_t first_cap,
                  size_t cap, bucket *out, int max);

/* The model's parameters in order: per layer the weight, then the bias. */
int bucket_model_params(model_shape s, size_t *counts, int max);

/* The model's fp32 gradients in buckets of first_mb, then mb MiB (DDP's
 * bucket_cap_mb): bucket_assign of bucket_model_params. */
int bucket_model_assign(model_shape s, double first_mb, double mb, bucket *out, int max);

#endif
