/* C interface to the cross-entropy loss's kernels (loss.cu), used by the
 * CUDA backend: nn.CrossEntropyLoss's three steps on materialised tensors,
 * and the fused lean loss. Every launcher takes its stream and returns the
 * launch status (cudaGetLastError). */
#ifndef DPS_KERNELS_LOSS_H
#define DPS_KERNELS_LOSS_H

#include <stdint.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* row_loss[r] = cross-entropy of row r; dlogits = (softmax - onehot) * scale;
 * dlogits may be logits */
cudaError_t dps_k_xent(cudaStream_t s, int rows, int classes, const float *logits,
                       const int32_t *labels, float scale, float *dlogits, float *row_loss);
/* logp = log_softmax(logits), one block per row */
cudaError_t dps_k_log_softmax(cudaStream_t s, int rows, int classes, const float *logits,
                              float *logp);
/* row_loss[r] = -logp[r, label]; dlogp = -scale at the label, 0 elsewhere
 * (zeroed, then the labels' entries written, as nll_loss_backward does) */
cudaError_t dps_k_nll(cudaStream_t s, int rows, int classes, const float *logp,
                      const int32_t *labels, float scale, float *row_loss, float *dlogp);
/* dlogits = dlogp - exp(logp) * (row sum of dlogp), one block per row */
cudaError_t dps_k_log_softmax_bwd(cudaStream_t s, int rows, int classes, const float *logp,
                                  const float *dlogp, float *dlogits);

#ifdef __cplusplus
}
#endif
#endif
