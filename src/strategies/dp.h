/* The dp mode: torch.nn.DataParallel's step in one process, one host thread
 * per device, scatter/gather through device 0 (docs/DESIGN.md, "The dp step"). */
#ifndef DPS_DP_H
#define DPS_DP_H

#include "backend/backend.h"
#include "config/config.h"
#include "model/net.h"

/* Coalescing unit of replicate and reduce, as PyTorch's 10 MiB buffers. */
#define DP_COALESCE_BYTES ((size_t)10 << 20)

/* torch.chunk along dim 0: every chunk ceil(batch / n) samples, the last
 * smaller, possibly fewer chunks than devices. Fills sizes[0..n) (zeros for
 * devices left without a chunk) and returns the number of chunks. */
int dp_chunk_sizes(int batch, int n, int *sizes);

/* The floats of the largest of replicate's and reduce's coalescing groups
 * (torch): a tensor over 10 MiB is a group alone, so every buffer a group
 * passes through holds this many. */
size_t dp_largest_group_floats(const net *n);

/* Trains cfg->warmup + cfg->steps steps, filling res (timings, losses, memory,
 * bytes moved and the final parameters). Returns the run's status; on
 * failure res->error says what failed. */
dps_status dp_train(const dps_config *cfg, backend *be, train_result *res) DPS_MUST_USE;

#endif
