/* NVTX ranges in the "dpscale" domain: one colour per phase, a range per
 * step carrying its index. Compiled out when NVTX is not built in
 * (-Dnvtx=disabled or no toolkit headers). */
#ifndef DPS_TRACE_H
#define DPS_TRACE_H

#include <stdint.h>

#include "dps_config.h"
#include "core/names.h"

/* --no-trace: ranges off at run time (to measure what they cost). */
void trace_set_enabled(int on);

#ifdef DPS_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>

void trace_init(void);
void trace_push_phase(dps_phase ph);
void trace_push_step(int step);
/* an all-reduce of one bucket: category = bucket index, payload = bytes */
void trace_push_bucket(int bucket, uint64_t bytes);
void trace_pop(void);
void trace_name_thread(const char *name);
#else
static inline void trace_init(void) {}
static inline void trace_push_phase(dps_phase ph) { (void)ph; }
static inline void trace_push_step(int step) { (void)step; }
static inline void trace_push_bucket(int index, uint64_t bytes) { (void)index; (void)bytes; }
static inline void trace_pop(void) {}
static inline void trace_name_thread(const char *name) { (void)name; }
#endif

#endif
