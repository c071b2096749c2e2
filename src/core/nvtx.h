/* NVTX ranges in the "dpscale" domain: one colour per phase, a range per
 * step carrying its index. Compiled out when NVTX is not built in
 * (-Dnvtx=disabled or no toolkit headers). */
#ifndef DPS_NVTX_H
#define DPS_NVTX_H

#include <stdint.h>

#include "build_config.h"
#include "core/names.h"

/* --no-nvtx: ranges off at run time (to measure what they cost). */
void nvtx_set_enabled(int on);

#ifdef DPS_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>

void nvtx_init(void);
void nvtx_push_phase(dps_phase ph);
void nvtx_push_step(int step);
/* an all-reduce of one bucket: category = bucket index, payload = bytes */
void nvtx_push_bucket(int bucket, uint64_t bytes);
void nvtx_pop(void);
void nvtx_name_thread(const char *name);
#else
static inline void nvtx_init(void) {}
static inline void nvtx_push_phase(dps_phase ph) { (void)ph; }
static inline void nvtx_push_step(int step) { (void)step; }
static inline void nvtx_push_bucket(int index, uint64_t bytes) { (void)index; (void)bytes; }
static inline void nvtx_pop(void) {}
static inline void nvtx_name_thread(const char *name) { (void)name; }
#endif

#endif
