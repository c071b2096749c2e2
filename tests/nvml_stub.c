/* A stand-in for libnvidia-ml.so.1 that the unit tests load through
 * nvml_use_library: it records which process initialised it and answers
 * the PCIe and NVLink counter fields with values the test sets (nvml_stub_*),
 * so the sampler's arithmetic is checked on a machine without a GPU. Its
 * field struct is written from NVML's documented layout, apart from nvml.h. */
#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct field {  /* nvmlFieldValue_t */
    unsigned field_id, scope_id;
    long long timestamp, latency_us;
    unsigned value_type, ret;
    union { double d; unsigned u; unsigned long ul; unsigned long long ull; long long sll; } value;
} field;

int nvml_stub_inits(void);
int nvml_stub_init_pid(void);
void nvml_stub_set_pcie(unsigned type, unsigned long long tx, unsigned long long rx);
void nvml_stub_set_nvlink(int nlinks, int agg, int ignores, unsigned long long kib);
int nvmlInit_v2(void);
int nvmlDeviceGetHandleByPciBusId_v2(const char *bus, void **dev);
int nvmlDeviceGetNvLinkState(void *dev, unsigned link, int *on);
int nvmlDeviceGetFieldValues(void *dev, int n, field *f);

enum { NOT_SUPPORTED = 3, INVALID_ARGUMENT = 2, UINT_TYPE = 1, ULL_TYPE = 3 };

static _Atomic int inits, init_pid;
static _Atomic unsigned long long pcie_tx, pcie_rx, nvlink_kib;
static _Atomic unsigned pcie_type = ULL_TYPE;
static _Atomic int links, aggregate, ignores_scope;

int nvml_stub_inits(void) { return inits; }
int nvml_stub_init_pid(void) { return init_pid; }
void nvml_stub_set_pcie(unsigned type, unsigned long long tx, unsigned long long rx)
{
    pcie_type = type;
    pcie_tx = tx;
    pcie_rx = rx;
}
/* Every active link's TX KiB is kib * (link + 1), or kib when the driver
 * ignores the link; RX is twice TX; the aggregate scope answers their sum
 * when `agg`, else NVML_ERROR_NOT_SUPPORTED. */
void nvml_stub_set_nvlink(int nlinks, int agg, int ignores, unsigned long long kib)
{
    links = nlinks;
    aggregate = agg;
    ignores_scope = ignores;
    nvlink_kib = kib;
}

int nvmlInit_v2(void)
{
    inits++;
    init_pid = (int)getpid();
    return 0;
}

int nvmlDeviceGetHandleByPciBusId_v2(const char *bus, void **dev)
{
    *dev = (void *)(uintptr_t)(1 + strtoul(bus + 5, NULL, 16)); /* "0000:BB:00.0" */
    return 0;
}

int nvmlDeviceGetNvLinkState(void *dev, unsigned link, int *on)
{
    (void)dev;
    *on = (int)link < links;
    return 0;
}

static unsigned long long nvlink_value(unsigned scope)
{
    unsigned long long kib = nvlink_kib, all = 0;
    if (scope != UINT_MAX) return ignores_scope ? kib : kib * (scope + 1);
    for (int l = 0; l < links; l++) all += kib * (unsigned)(l + 1);
    return all;
}

static void answer(field *f)
{
    f->ret = 0;
    f->value_type = ULL_TYPE;
    if (f->field_id == 197 || f->field_id == 198) {
        unsigned long long v = f->field_id == 197 ? pcie_tx : pcie_rx;
        f->value_type = pcie_type;
        if (pcie_type == UINT_TYPE) f->value.u = (unsigned)v;
        else f->value.ull = v;
    } else if (f->field_id == 138 || f->field_id == 139) {
        if (f->scope_id == UINT_MAX && !aggregate) f->ret = NOT_SUPPORTED;
        else if (f->scope_id != UINT_MAX && (int)f->scope_id >= links) f->ret = INVALID_ARGUMENT;
        else f->value.ull = nvlink_value(f->scope_id) * (f->field_id == 139 ? 2 : 1);
    } else {
        f->ret = NOT_SUPPORTED;
    }
}

int nvmlDeviceGetFieldValues(void *dev, int n, field *f)
{
    (void)dev;
    for (int i = 0; i < n; i++) answer(&f[i]);
    return 0;
}
