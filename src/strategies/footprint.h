/* What a configuration will allocate, known before it allocates: every
 * device's buffers as dp.c and ddp.c ask for them, the host's, and whether
 * this machine's free memory holds them (the host backend's devices are
 * host memory). */
#ifndef DPS_FOOTPRINT_H
#define DPS_FOOTPRINT_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "config/config.h"

typedef struct footprint {
    uint64_t device[DPS_MAX_DEVICES]; /* by slot (dp) or rank (ddp) */
    uint64_t devices;                 /* their sum */
    uint64_t host;                    /* host buffers, the ranks' region, result records */
    uint64_t total;                   /* what the machine holds: devices (host backend) + host */
} footprint;

/* The bytes cfg allocates on be (the larger of the run and its --check
 * reference, which runs after it): its kind (the host backend's devices are
 * host memory) and, on the cuda backend, each stream's GEMM workspace
 * (be_gemm_workspace_bytes); be NULL: neither. */
void footprint_of(const dps_config *cfg, const backend *be, footprint *fp);

/* The host memory this process may still take: the least of the kernel's
 * MemAvailable, the cgroup's headroom and RLIMIT_DATA/RLIMIT_AS. 0 when
 * none of them can be read. */
uint64_t footprint_available(void);

/* DPS_ERR_OOM when cfg needs more than `available` (0: unknown, never
 * refused) with a tenth and 64 MiB to spare, with the estimate and a
 * --tokens (else --batch, else --layers) that fits in the message. */
dps_status footprint_check(const dps_config *cfg, const backend *be, uint64_t available) DPS_MUST_USE;

#endif
