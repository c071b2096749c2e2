/* The optimizer's hyper-parameters as the backend's sgd and adamw take them
 * (be_ops in backend.h), by value down to the kernels; plain C, so that it
 * compiles as C11 and as CUDA C++ (kernels/elementwise.h includes it). */
#ifndef DPS_OPT_HPARAMS_H
#define DPS_OPT_HPARAMS_H

typedef struct dps_opt_hparams {
    float lr;
    float momentum;     /* SGD */
    float beta1, beta2; /* AdamW */
    float eps;
    float weight_decay;
    int step;           /* 1-based step count, for AdamW bias correction */
} dps_opt_hparams;

#endif
