/* Runs one configuration end to end: the mode's training loop, the
 * optional correctness check and GEMM reference, the statistics, the rows
 * in the results folder and the line on stdout. */
#ifndef DPS_RUN_H
#define DPS_RUN_H

#include "backend/backend.h"
#include "config/config.h"
#include "results/results.h"
#include "strategies/ddp_world.h"

/* Tolerances of --check on the normwise relative difference of the final
 * parameters, max|p - p_ref| / max|p_ref|. In fp32 only the summation order
 * differs between one and several devices (SGD: ~1e-7 measured). AdamW
 * divides every update by its running RMS, which turns the rounding noise
 * of near-zero gradients into updates of up to lr (~2e-5 measured). In
 * half precision each device rounds its own parameters' gradients before
 * they are summed: bf16 (8 bits) ~7e-5 with SGD, fp16 (11 bits) ~5e-6;
 * with AdamW those roundings flip near-zero gradients and the updates move
 * by up to lr in either format (~1.6e-2 measured, 2 steps of tiny on 1-4
 * devices, --accum 1, 2, 4). */
#define DPS_CHECK_TOL_FP32 1e-5
#define DPS_CHECK_TOL_FP32_ADAMW 1e-4
#define DPS_CHECK_TOL_BF16 2e-2
#define DPS_CHECK_TOL_FP16 1e-4
#define DPS_CHECK_TOL_HALF_ADAMW 3e-2

double run_check_tolerance(const dps_config *cfg);

/* Writes n float32 parameters to path as a NumPy .npy file (shape (n,)). */
dps_status run_save_params(const char *path, const float *params, size_t n) DPS_MUST_USE;

/* Returns the configuration's status (DPS_OK, DPS_ERR_OOM, ...) with its
 * message. twin: a configuration the same run stands for (a sweep's, see
 * sweep.h), whose rows, trace and line are written from this run under its
 * own id in the same transaction; NULL: none. dw: under a launcher the
 * joined ranks, which ddp trains in (NULL: dpscale forks them). *written
 * says whether its rows reached the files (and its line the table); when
 * not, the caller records the failure with run_record. */
dps_status run_config(const dps_config *cfg, const dps_config *twin, ddp_world *dw, backend *be,
                      const results_dir *rd, int *written) DPS_MUST_USE;

/* cfg's training for one warm-up and one timed step, writing nothing: a
 * process warmed before the configurations it forks are timed. */
dps_status run_untimed(const dps_config *cfg, backend *be) DPS_MUST_USE;
/* Rows for a configuration that never ran or died without writing them:
 * status (skipped, error, timeout) and why, and the same for its twin
 * (NULL: none) in the same transaction; their lines in the table once they
 * are written. */
dps_status run_record(const dps_config *cfg, const dps_config *twin, const backend *be,
                      const results_dir *rd, dps_status status, const char *why) DPS_MUST_USE;

/* max|a - b| / max|b| over n values (0 when b is all zeros and a == b). */
double run_max_rel_diff(const float *a, const float *b, size_t n);

/* Traced step t's all-reduce time in ms, as nccl-tests times a collective
 * once every rank has joined it: per bucket, the last rank's end minus the
 * last rank's begin (each rank's spans placed by its reference on the wall
 * clock, as the trace places them), summed over the buckets, so that no
 * rank's wait for a slower one counts as transfer; a sharded strategy's
 * reduce-scatters and all-gathers are not all-reduces and are left out. -1
 * when the ranks' spans differ in number or their all-reduces do not add up
 * to `bytes`. */
double run_allreduce_span_ms(const timeline *tl, int t, double bytes);

/* Times the GEMMs of one step on `rows` rows of one device, as the model
 * runs them in precision prec (fp32's in TF32 where tf32 puts Linears):
 * TFLOP/s. */
dps_status run_gemm_reference(backend *be, int dev, model_shape s, int rows, dps_precision prec,
                              dps_tf32 tf32, double *tflops) DPS_MUST_USE;

#endif
