/* NVML through dlopen (see nvml.h). The few types used are declared with
 * NVML's layout (nvml_field in nvml.h), so no NVML header is needed to build. */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/nvml.h"
#include "core/util.h"

typedef void *nvml_dev;

enum { FI_NVLINK_TX = 138, FI_NVLINK_RX = 139, FI_PCIE_TX = 197, FI_PCIE_RX = 198, CLOCK_SM = 1 };
#define NVML_NVLINK_ALL UINT_MAX   /* scope_id of a field summed over every link */
#define NVML_NVLINK_MAX_LINKS 18   /* NVML_NVLINK_MAX_LINKS in nvml.h */

static struct {
    const char *path;     /* the library: libnvidia-ml.so.1, or a test's */
    void *lib;            /* dlopen'ed, symbols resolved (survives fork) */
    pid_t pid;            /* the process in which nvmlInit_v2 succeeded; 0: none */
    char why[256];
    int (*init)(void);
    int (*by_bus)(const char *, nvml_dev *);
    int (*count)(unsigned *);
    int (*fields)(nvml_dev, int, nvml_field *);
    int (*clock)(nvml_dev, int, unsigned *);
    int (*reasons)(nvml_dev, unsigned long long *);
    int (*pcie_gen)(nvml_dev, unsigned *);
    int (*pcie_width)(nvml_dev, unsigned *);
    int (*link_state)(nvml_dev, unsigned, int *);
    int (*link_remote)(nvml_dev, unsigned, int *);
    int (*ancestor)(nvml_dev, nvml_dev, int *);
} nv = {.path = "libnvidia-ml.so.1"};

/* Held while NVML is loaded and initialised, and across fork, so that a
 * child never inherits it locked. */
static pthread_mutex_t nv_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t nv_atfork_once = PTHREAD_ONCE_INIT;

static void nv_prepare(void) { pthread_mutex_lock(&nv_lock); }
static void nv_parent(void) { pthread_mutex_unlock(&nv_lock); }
static void nv_child(void) { pthread_mutex_unlock(&nv_lock); }
static void nv_atfork(void) { pthread_atfork(nv_prepare, nv_parent, nv_child); }

void nvml_use_library(const char *path) { nv.path = path; }

static void *sym(const char *name) { return nv.lib ? dlsym(nv.lib, name) : NULL; }

/* dlopen and the symbols, once per address space (a fork keeps them). */
static int open_library(void)
{
    if (nv.lib) return 1;
    nv.lib = dlopen(nv.path, RTLD_NOW | RTLD_LOCAL);
    if (!nv.lib) {
        snprintf(nv.why, sizeof nv.why, "%s not loaded: %s", nv.path, dlerror());
        return 0;
    }
    *(void **)&nv.init = sym("nvmlInit_v2");
    *(void **)&nv.by_bus = sym("nvmlDeviceGetHandleByPciBusId_v2");
    *(void **)&nv.count = sym("nvmlDeviceGetCount_v2");
    *(void **)&nv.fields = sym("nvmlDeviceGetFieldValues");
    *(void **)&nv.clock = sym("nvmlDeviceGetClockInfo");
    *(void **)&nv.reasons = sym("nvmlDeviceGetCurrentClocksEventReasons");
    if (!nv.reasons) *(void **)&nv.reasons = sym("nvmlDeviceGetCurrentClocksThrottleReasons");
    *(void **)&nv.pcie_gen = sym("nvmlDeviceGetCurrPcieLinkGeneration");
    *(void **)&nv.pcie_width = sym("nvmlDeviceGetCurrPcieLinkWidth");
    *(void **)&nv.link_state = sym("nvmlDeviceGetNvLinkState");
    *(void **)&nv.link_remote = sym("nvmlDeviceGetNvLinkRemoteDeviceType");
    *(void **)&nv.ancestor = sym("nvmlDeviceGetTopologyCommonAncestor");
    if (nv.init && nv.by_bus) return 1;
    snprintf(nv.why, sizeof nv.why, "%s has no nvmlInit_v2 or nvmlDeviceGetHandleByPciBusId_v2; "
             "NVML's counters stay empty (a driver older than R450?)", nv.path);
    dlclose(nv.lib);
    nv.lib = NULL;
    return 0;
}

/* NVML initialised in the calling process: a child forked after its parent
 * initialised it (a sweep's configuration, after meta.json's topology)
 * initialises it again, as NVML's state is the process's. */
int nvml_available(char *why, size_t len)
{
    pthread_once(&nv_atfork_once, nv_atfork);
    pthread_mutex_lock(&nv_lock);
    pid_t me = getpid();
    if (nv.pid != me && open_library()) {
        int rc = nv.init();
        if (rc == 0) nv.pid = me;
        else snprintf(nv.why, sizeof nv.why, "nvmlInit_v2 failed (NVML error %d) in process %d; "
                      "NVML's counters stay empty", rc, (int)me);
    }
    int ok = nv.pid == me;
    if (why) dps_strlcpy(why, ok ? "" : nv.why, len);
    pthread_mutex_unlock(&nv_lock);
    return ok;
}

int nvml_device_count(void)
{
    unsigned n = 0;
    if (!nvml_available(NULL, 0) || !nv.count || nv.count(&n) != 0) return -1;
    return (int)n;
}

int nvml_field_u64(const nvml_field *f, unsigned long long *v, int *bits)
{
    if (f->ret != 0) return 0;
    switch (f->value_type) {
    case NVML_VALUE_UINT: *v = f->value.u; *bits = 32; return 1;
    case NVML_VALUE_ULONG: *v = f->value.ul; *bits = (int)(8 * sizeof(unsigned long)); return 1;
    case NVML_VALUE_ULONGLONG: *v = f->value.ull; *bits = 64; return 1;
    case NVML_VALUE_SLONGLONG: *v = (unsigned long long)f->value.sll; *bits = 64; return 1;
    default: return 0;
    }
}

unsigned long long nvml_counter_delta(unsigned long long before, unsigned long long now, int bits)
{
    unsigned long long d = now - before; /* modulo 2^64 */
    return bits < 64 ? d & ((1ull << bits) - 1) : d;
}

unsigned long long nvml_links_total(const unsigned long long *per_link, int n)
{
    unsigned long long sum = 0;
    int same = n > 1;
    for (int l = 0; l < n; l++) {
        sum += per_link[l];
        if (per_link[l] != per_link[0]) same = 0;
    }
    return same ? per_link[0] : sum;
}

/* A counter read through nvmlDeviceGetFieldValues, and what it had read before. */
typedef struct nvml_count {
    int have, bits;
    unsigned long long last;
} nvml_count;

struct nvml_sampler {
    int n, period_ms, stop;
    nvml_dev dev[DPS_MAX_DEVICES];
    nvml_counters c[DPS_MAX_DEVICES];
    nvml_count pcie[DPS_MAX_DEVICES][2];   /* TX, RX: bytes, may wrap */
    unsigned long long nvlink0[DPS_MAX_DEVICES][2];
    pthread_t thread;
    pthread_mutex_t mu;
};

/* TX and RX KiB of NVLink field reads with scope_id `scope` (a link, or
 * NVML_NVLINK_ALL for the sum over links). */
static int nvlink_read(nvml_dev d, unsigned scope, unsigned long long out[2])
{
    nvml_field f[2];
    memset(f, 0, sizeof f);
    f[0].field_id = FI_NVLINK_TX;
    f[1].field_id = FI_NVLINK_RX;
    f[0].scope_id = f[1].scope_id = scope;
    int bits;
    return nv.fields && nv.fields(d, 2, f) == 0 && nvml_field_u64(&f[0], &out[0], &bits) &&
           nvml_field_u64(&f[1], &out[1], &bits);
}

/* Data KiB over every NVLink of the device (an H100 or H200 has 18): the
 * aggregate scope where the driver has it, else the active links one by
 * one (nvml_links_total: a driver that answers each link with the
 * GPU-wide total is counted once). */
static int nvlink_kib(nvml_dev d, unsigned long long out[2])
{
    if (nvlink_read(d, NVML_NVLINK_ALL, out)) return 1;
    unsigned long long tx[NVML_NVLINK_MAX_LINKS], rx[NVML_NVLINK_MAX_LINKS], link[2];
    int n = 0;
    for (unsigned l = 0; nv.link_state && l < NVML_NVLINK_MAX_LINKS; l++) {
        int on = 0;
        if (nv.link_state(d, l, &on) != 0 || !on || !nvlink_read(d, l, link)) continue;
        tx[n] = link[0];
        rx[n++] = link[1];
    }
    out[0] = nvml_links_total(tx, n);
    out[1] = nvml_links_total(rx, n);
    return n > 0;
}

/* The cumulative PCIe TX and RX byte counters (NVML_FI_DEV_PCIE_COUNT_*,
 * drivers R550 and later): each read's difference from the one before,
 * modulo the counter's width, added to the device's bytes. Read every
 * period, so a 32-bit counter wraps at most once between two reads. */
static void pcie_read(nvml_sampler *s, int i)
{
    nvml_field f[2];
    memset(f, 0, sizeof f);
    f[0].field_id = FI_PCIE_TX;
    f[1].field_id = FI_PCIE_RX;
    if (!nv.fields || nv.fields(s->dev[i], 2, f) != 0) return;
    double *bytes[2] = {&s->c[i].pcie_tx_bytes, &s->c[i].pcie_rx_bytes};
    for (int k = 0; k < 2; k++) {
        nvml_count *n = &s->pcie[i][k];
        unsigned long long v;
        int bits;
        if (!nvml_field_u64(&f[k], &v, &bits)) continue;
        if (n->have) *bytes[k] += (double)nvml_counter_delta(n->last, v, n->bits);
        *n = (nvml_count){1, bits, v};
    }
    s->c[i].have_pcie = s->pcie[i][0].have && s->pcie[i][1].have;
}

static void sample(nvml_sampler *s, int i)
{
    nvml_counters *c = &s->c[i];
    unsigned mhz;
    pcie_read(s, i);
    if (nv.clock && nv.clock(s->dev[i], CLOCK_SM, &mhz) == 0) {
        if (!c->have_clock || mhz < c->sm_clock_min_mhz) c->sm_clock_min_mhz = mhz;
        if (mhz > c->sm_clock_max_mhz) c->sm_clock_max_mhz = mhz;
        c->have_clock = 1;
    }
    unsigned long long r;
    if (nv.reasons && nv.reasons(s->dev[i], &r) == 0) c->throttle_reasons |= r;
}

static void *sampler_main(void *arg)
{
    nvml_sampler *s = arg;
    for (;;) {
        struct timespec ts = {0, (long)s->period_ms * 1000000L};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&s->mu);
        int stop = s->stop;
        for (int i = 0; i < s->n; i++) sample(s, i);
        pthread_mutex_unlock(&s->mu);
        if (stop) return NULL;
    }
}

nvml_sampler *nvml_start(const backend *be, const int *devs, int n, int period_ms)
{
    if (be->kind != BE_CUDA || !nvml_available(NULL, 0)) return NULL;
    nvml_sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->n = n;
    s->period_ms = period_ms;
    for (int i = 0; i < n; i++) {
        if (nv.by_bus(be->info[devs[i]].bus_id, &s->dev[i]) != 0) {
            free(s);
            return NULL;
        }
        s->c[i].have_nvlink = nvlink_kib(s->dev[i], s->nvlink0[i]);
        pcie_read(s, i); /* the counters' starting values */
    }
    pthread_mutex_init(&s->mu, NULL);
    if (pthread_create(&s->thread, NULL, sampler_main, s) != 0) {
        pthread_mutex_destroy(&s->mu);
        free(s);
        return NULL;
    }
    return s;
}

void nvml_stop(nvml_sampler *s, nvml_counters *out)
{
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1; /* the thread's last sample reads the counters' final values */
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    for (int i = 0; i < s->n; i++) {
        unsigned long long now[2];
        if (s->c[i].have_nvlink && nvlink_kib(s->dev[i], now)) {
            s->c[i].nvlink_tx_bytes = (double)(now[0] - s->nvlink0[i][0]) * 1024.0;
            s->c[i].nvlink_rx_bytes = (double)(now[1] - s->nvlink0[i][1]) * 1024.0;
        } else {
            s->c[i].have_nvlink = 0;
        }
        out[i] = s->c[i];
    }
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* nvmlGpuTopologyLevel_t as nvidia-smi topo -m prints it. */
static const char *level_name(int level)
{
    switch (level) {
    case 0: return "X";      /* the same board */
    case 10: return "PIX";   /* one PCIe switch */
    case 20: return "PXB";   /* several PCIe switches */
    case 30: return "PHB";   /* a PCIe host bridge */
    case 40: return "NODE";  /* host bridges within a NUMA node */
    case 50: return "SYS";   /* across NUMA nodes */
    default: return "?";
    }
}

static const char *remote_name(int type)
{
    return type == 0 ? "gpu" : type == 2 ? "switch" : type == 1 ? "npu" : "unknown";
}

static void device_json(nvml_dev d, FILE *f)
{
    unsigned gen = 0, width = 0;
    int active = 0, remote = -1;
    if (nv.pcie_gen) nv.pcie_gen(d, &gen);
    if (nv.pcie_width) nv.pcie_width(d, &width);
    for (unsigned link = 0; nv.link_state && link < 18; link++) {
        int on = 0;
        if (nv.link_state(d, link, &on) != 0 || !on) continue;
        active++;
        if (remote < 0 && nv.link_remote) nv.link_remote(d, link, &remote);
    }
    fprintf(f, "{\"pcie_gen\": %u, \"pcie_width\": %u, \"nvlinks_active\": %d, "
            "\"nvlink_remote\": \"%s\"}", gen, width, active,
            active ? remote_name(remote) : "none");
}

void nvml_topology_json(const backend *be, FILE *f)
{
    if (!nvml_available(NULL, 0) || be->kind != BE_CUDA) return;
    nvml_dev dev[DPS_MAX_DEVICES];
    for (int i = 0; i < be->ndev; i++)
        if (nv.by_bus(be->info[i].bus_id, &dev[i]) != 0) return;
    fputs(", \"nvml\": {\"devices\": [", f);
    for (int i = 0; i < be->ndev; i++) {
        if (i) fputs(", ", f);
        device_json(dev[i], f);
    }
    fputs("], \"common_ancestor\": [", f);
    for (int i = 0; i < be->ndev; i++) {
        fputs(i ? ", [" : "[", f);
        for (int j = 0; j < be->ndev; j++) {
            int level = i == j ? 0 : -1;
            if (i != j && nv.ancestor) nv.ancestor(dev[i], dev[j], &level);
            fprintf(f, "%s\"%s\"", j ? ", " : "", level_name(level));
        }
        fputs("]", f);
    }
    fputs("]}", f);
}
