/* The accounting shared by every backend: each allocation counts against
 * its device (in use, peak, capacity), so alloc_peak_bytes is exact and an
 * out-of-memory names the device and the sizes; the device's own used
 * memory is sampled into its peak and its baseline; and the size of the
 * GEMM library's workspace a stream holds, which the CUDA backend allocates
 * and strategies/footprint.c predicts. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/host_devmem.h"
#include "core/util.h"

/* The category of `what` on m, added if new; the last slot takes the rest. */
static int category(be_mem *m, const char *what)
{
    for (int i = 0; i < m->ncat; i++)
        if (strcmp(m->cat[i].what, what) == 0) return i;
    if (m->ncat == BE_MEM_CATEGORIES - 1) {
        m->cat[m->ncat++].what = "other";
        return m->ncat - 1;
    }
    if (m->ncat == BE_MEM_CATEGORIES) return m->ncat - 1;
    m->cat[m->ncat].what = what;
    return m->ncat++;
}

/* At a new allocation peak: what each category holds. Lock held. */
static void snapshot(be_mem *m)
{
    m->peak = m->in_use;
    m->peak_phase_on = atomic_load(&m->phase_on);
    for (int i = 0; i < m->ncat; i++) m->cat[i].at_peak = m->cat[i].in_use;
}

/* On every phase of every step: a store, no lock (the allocation that
 * reaches a peak reads it under the lock). */
void be_mem_phase(backend *be, int dev, int phase)
{
    atomic_store_explicit(&be->mem[dev].phase_on, phase + 1, memory_order_relaxed);
}

const char *be_mem_kind(const char *what)
{
    static const struct { const char *part, *kind; } kinds[] = { /* the first that matches */
        {"bf16", "workspace"}, {"GEMM", "workspace"}, {"workspace", "workspace"},
        {"optimizer", "optimizer state"},
        {"bucket", "communication"}, {"coalescing", "communication"},
        {"reduce", "communication"}, {"staging", "communication"},
        {"logits gradient", "loss buffers"}, {"log-prob", "loss buffers"},
        {"loss", "loss buffers"}, {"logits", "outputs"}, {"activation", "activations"},
        {"input", "inputs"}, {"labels", "inputs"}, {"parameters", "parameters"},
        {"gradients", "gradients"},
    };
    for (size_t i = 0; what && i < sizeof kinds / sizeof kinds[0]; i++)
        if (strstr(what, kinds[i].part)) return kinds[i].kind;
    return "other";
}

/* A ":SIZE:COUNT" pair of decimal numbers at p: the byte after it, or NULL. */
static const char *workspace_pair(const char *p, size_t *size, size_t *count)
{
    size_t v[2] = {0, 0};
    for (int i = 0; i < 2; i++) {
        if (*p++ != ':' || *p < '0' || *p > '9') return NULL;
        for (; *p >= '0' && *p <= '9'; p++)
            v[i] = v[i] > (SIZE_MAX - 9) / 10 ? SIZE_MAX : v[i] * 10 + (size_t)(*p - '0');
    }
    *size = v[0];
    *count = v[1];
    return p;
}

static size_t saturating_mul(size_t a, size_t b) { return a && b > SIZE_MAX / a ? SIZE_MAX : a * b; }

/* PyTorch reads the pairs as the matches of the regex ":([0-9]+):([0-9]+)",
 * each found after the last, and sums SIZE * 1024 * COUNT. */
size_t be_cublas_workspace_bytes(int cc_major, const char *config)
{
    int big = cc_major == 9 || cc_major == 10 || cc_major == 12;
    size_t fallback = big ? (size_t)4096 * 8 * 1024 : (size_t)4096 * 1024 * 2 + (size_t)16 * 1024 * 8;
    size_t total = 0;
    int pairs = 0;
    for (const char *p = config; p && *p;) {
        size_t size, count;
        const char *next = workspace_pair(p, &size, &count);
        if (!next) {
            p++;
            continue;
        }
        size_t bytes = saturating_mul(saturating_mul(size, 1024), count);
        total = total > SIZE_MAX - bytes ? SIZE_MAX : total + bytes;
        pairs++;
        p = next;
    }
    return pairs ? total : fallback;
}

size_t be_gemm_workspace_bytes(const backend *be, int dev)
{
    if (be->kind != BE_CUDA || dev < 0 || dev >= be->ndev) return 0;
    return be_cublas_workspace_bytes(be->info[dev].cc_major, getenv("CUBLAS_WORKSPACE_CONFIG"));
}

dps_status be_buf_alloc(backend *be, int dev, size_t bytes, const char *what, dps_buf *buf)
{
    memset(buf, 0, sizeof *buf);
    buf->dev = dev;
    if (bytes == 0) return DPS_OK;
    be_mem *m = &be->mem[dev];
    pthread_mutex_lock(&be->mem_lock);
    size_t in_use = m->in_use;
    int over = m->capacity && (bytes > m->capacity || in_use > m->capacity - bytes);
    pthread_mutex_unlock(&be->mem_lock);
    char need[32], used[32], cap[32];
    if (over) {
        dps_fmt_bytes(bytes, need, sizeof need);
        dps_fmt_bytes(in_use, used, sizeof used);
        dps_fmt_bytes(m->capacity, cap, sizeof cap);
        return dps_fail(DPS_ERR_OOM, "device %d: out of memory allocating %s for %s "
                        "(%s in use of %s capacity set by --device-mem)",
                        dev, need, what, used, cap);
    }
    dps_status rc = be->ops->raw_alloc(be, dev, bytes, &buf->ptr);
    if (rc != DPS_OK) {
        if (rc != DPS_ERR_OOM) return rc;
        char why[DPS_ERRMSG_MAX]; /* dps_fail writes the buffer dps_errmsg reads */
        dps_strlcpy(why, dps_errmsg(), sizeof why);
        dps_fmt_bytes(bytes, need, sizeof need);
        dps_fmt_bytes(in_use, used, sizeof used);
        return dps_fail(DPS_ERR_OOM, "device %d: out of memory allocating %s for %s "
                        "(%s allocated by dpscale): %s", dev, need, what, used, why);
    }
    buf->bytes = bytes;
    be_strict_label(be, buf->ptr, what);
    host_devmem_name(buf->ptr, what); /* strict device memory's fault names it */
    pthread_mutex_lock(&be->mem_lock);
    buf->cat = category(m, what);
    m->cat[buf->cat].in_use += bytes;
    m->in_use += bytes;
    if (m->in_use > m->peak) snapshot(m);
    pthread_mutex_unlock(&be->mem_lock);
    return DPS_OK;
}

void be_buf_free(backend *be, dps_buf *buf)
{
    if (!buf->ptr) return;
    be->ops->raw_free(be, buf->dev, buf->ptr);
    pthread_mutex_lock(&be->mem_lock);
    be->mem[buf->dev].in_use -= buf->bytes;
    be->mem[buf->dev].cat[buf->cat].in_use -= buf->bytes;
    pthread_mutex_unlock(&be->mem_lock);
    buf->ptr = NULL;
    buf->bytes = 0;
}

dps_status be_sample_mem(backend *be, int dev)
{
    size_t used = 0;
    DPS_TRY(be->ops->mem_used(be, dev, &used));
    pthread_mutex_lock(&be->mem_lock);
    if (used > be->mem[dev].device_peak) be->mem[dev].device_peak = used;
    pthread_mutex_unlock(&be->mem_lock);
    return DPS_OK;
}

dps_status be_mark_baseline(backend *be, int dev)
{
    size_t used = 0;
    DPS_TRY(be->ops->mem_used(be, dev, &used));
    pthread_mutex_lock(&be->mem_lock);
    be->mem[dev].device_base = used >= be->mem[dev].in_use ? used - be->mem[dev].in_use : 0;
    pthread_mutex_unlock(&be->mem_lock);
    return DPS_OK;
}

void be_reset_peaks(backend *be)
{
    pthread_mutex_lock(&be->mem_lock);
    for (int d = 0; d < be->ndev; d++) {
        snapshot(&be->mem[d]);
        be->mem[d].device_peak = 0;
    }
    pthread_mutex_unlock(&be->mem_lock);
}
