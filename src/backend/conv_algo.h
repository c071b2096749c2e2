/* The choice of a convolution's algorithm as PyTorch makes it under
 * torch.backends.cudnn.benchmark = True: every algorithm timed once per
 * shape, type and direction (cudnnFind*AlgorithmEx), the fastest that
 * succeeded within the workspace kept for the rest of the run. Plain C,
 * no cuDNN: backend/conv_cudnn.c fills in the timings. */
#ifndef DPS_CONV_ALGO_H
#define DPS_CONV_ALGO_H

#include <stddef.h>

#include "backend/backend.h"

typedef enum conv_dir { CONV_FWD, CONV_BWD_DATA, CONV_BWD_FILTER } conv_dir;

/* What a choice is made for: the convolution (its type and TF32 included)
 * and the direction. */
typedef struct conv_key {
    be_conv cv;
    conv_dir dir;
} conv_key;

/* One algorithm's timed run (cudnnConvolution*AlgoPerf_t): its number, its
 * math type (cudnnMathType_t), whether it ran, its time and workspace. */
typedef struct conv_perf {
    int algo, math;
    int ok;
    float ms;
    size_t bytes;
} conv_perf;

typedef struct conv_choice {
    int algo, math;
    size_t bytes;   /* the workspace it needs */
} conv_choice;

typedef struct conv_cache {
    conv_key *key;
    conv_choice *choice;
    int n, cap;
} conv_cache;

/* Whether a and b are one convolution in one direction. */
int conv_key_eq(const conv_key *a, const conv_key *b);
/* The index in perf[0..n) of the fastest that ran and needs at most
 * limit bytes of workspace (the first of equal times, cuDNN's order);
 * -1 when none did. */
int conv_algo_pick(const conv_perf *perf, int n, size_t limit);
/* The workspace that Find gets: the largest of need[0..n) (each
 * algorithm's, SIZE_MAX for one that cannot run) no larger than free_bytes,
 * as PyTorch's getMaxWorkspaceSize sizes it by the largest free block. */
size_t conv_find_workspace(const size_t *need, int n, size_t free_bytes);

/* The choice made for key, NULL when none is. */
const conv_choice *conv_cache_find(const conv_cache *c, const conv_key *key);
/* Keeps choice for key (replacing an earlier one). */
dps_status conv_cache_put(conv_cache *c, const conv_key *key, conv_choice choice) DPS_MUST_USE;
/* The largest workspace of the choices kept. */
size_t conv_cache_max_bytes(const conv_cache *c);
void conv_cache_free(conv_cache *c);

#endif
