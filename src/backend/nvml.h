/* NVML, loaded with dlopen("libnvidia-ml.so.1") so one binary runs with or
 * without a driver, and initialised in each process that uses it (a forked
 * child again); a sampler thread reads the cumulative PCIe and NVLink
 * traffic counters, SM clocks and throttle reasons while a configuration
 * runs. A missing library or counter leaves its fields empty; it is never
 * an error. */
#ifndef DPS_NVML_H
#define DPS_NVML_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include "backend/backend.h"

typedef struct nvml_counters {
    int have_pcie, have_nvlink, have_clock;
    double pcie_tx_bytes, pcie_rx_bytes;      /* differences of cumulative bytes */
    double nvlink_tx_bytes, nvlink_rx_bytes;  /* differences of cumulative KiB */
    unsigned sm_clock_min_mhz, sm_clock_max_mhz;
    unsigned long long throttle_reasons;      /* OR of every sample */
} nvml_counters;

typedef struct nvml_sampler nvml_sampler;

/* nvmlFieldValue_t, with NVML's layout (no NVML header is needed to build). */
typedef struct nvml_field {
    unsigned field_id, scope_id;
    long long timestamp, latency_us;
    unsigned value_type, ret;
    union { double d; unsigned u; unsigned long ul; unsigned long long ull; long long sll; } value;
} nvml_field;
/* nvmlValueType_t's integer kinds */
enum { NVML_VALUE_UINT = 1, NVML_VALUE_ULONG = 2, NVML_VALUE_ULONGLONG = 3, NVML_VALUE_SLONGLONG = 4 };

/* A field's integer value and its width in bits; 0 when the field failed
 * (ret) or is not an integer. */
int nvml_field_u64(const nvml_field *f, unsigned long long *v, int *bits);
/* now - before for a counter of `bits` bits that may have wrapped (once). */
unsigned long long nvml_counter_delta(unsigned long long before, unsigned long long now, int bits);
/* The device's total from its active links' reads: their sum, or, when
 * every link read the same value, that value once (a driver that ignores
 * the link and answers each with the GPU-wide total). */
unsigned long long nvml_links_total(const unsigned long long *per_link, int n);
/* Tests: the library to load instead of libnvidia-ml.so.1 (a stub), before
 * the first nvml_available. */
void nvml_use_library(const char *path);

/* Loads NVML; returns 0 and says why in `why` when it is not there. */
int nvml_available(char *why, size_t len);
/* The GPUs NVML sees (any process's driver view, CUDA or not); -1 without NVML. */
int nvml_device_count(void);
/* Starts sampling the devices (by PCI bus id) every period_ms; NULL when
 * NVML is not there (nothing to stop then). */
nvml_sampler *nvml_start(const backend *be, const int *devs, int n, int period_ms);
/* Stops and fills out[0..n). */
void nvml_stop(nvml_sampler *s, nvml_counters *out);

/* meta.json's NVML topology, as `, "nvml": {...}`: per device the PCIe
 * generation and width and the active NVLinks with what they reach, per pair
 * the common ancestor as `nvidia-smi topo -m` names it. Nothing without NVML. */
void nvml_topology_json(const backend *be, FILE *f);

#endif
