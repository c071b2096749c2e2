/* Strict device memory of the host backend (host_devmem.h): the two views
 * of one memfd, the registry of live allocations in address order, and the
 * fault handler that names the allocation a host dereference touched. The
 * registry is read by the handler without the lock (a signal cannot wait
 * for it): entries are plain data in a static array, so a read racing an
 * allocation at worst names a neighbour. */
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/host_devmem.h"

uintptr_t host_devmem_base, host_devmem_span, host_devmem_delta;

typedef struct devmem_entry {
    uintptr_t lo;       /* device address */
    size_t bytes, span; /* asked for; held (whole pages and a spare page after them) */
    int dev;
    const char *what;
} devmem_entry;

#define DEVMEM_MAX 65536 /* live allocations */
#define DEVMEM_FREED 64  /* recent frees remembered for a use after free */
static devmem_entry live[DEVMEM_MAX], freed[DEVMEM_FREED];
static _Atomic int nlive, nfreed;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int memfd = -1;
static size_t page;
static struct sigaction old_segv, old_bus;

/* Async-signal-safe formatting into a fixed buffer. */
typedef struct sbuf { char *p; size_t n, len; } sbuf;

static void put_s(sbuf *b, const char *s)
{
    for (; s && *s && b->n + 1 < b->len; s++) b->p[b->n++] = *s;
    if (b->len) b->p[b->n] = '\0';
}

static void put_u(sbuf *b, uintptr_t v, unsigned base)
{
    char d[24];
    int k = 0;
    do d[k++] = "0123456789abcdef"[v % base]; while ((v /= base) && k < 23);
    char s[26];
    int n = 0;
    if (base == 16) { s[n++] = '0'; s[n++] = 'x'; }
    while (k) s[n++] = d[--k];
    s[n] = '\0';
    put_s(b, s);
}

static void put_entry(sbuf *b, const devmem_entry *e)
{
    put_s(b, "device ");
    put_u(b, (uintptr_t)e->dev, 10);
    put_s(b, "'s \"");
    put_s(b, e->what ? e->what : "unnamed");
    put_s(b, "\" (");
    put_u(b, e->bytes, 10);
    put_s(b, " bytes)");
}

/* The live entry holding a, else the one before it (*inside 0), else NULL. */
static const devmem_entry *find(uintptr_t a, int *inside)
{
    int n = atomic_load(&nlive);
    const devmem_entry *below = NULL;
    for (int i = 0; i < n && i < DEVMEM_MAX && live[i].lo <= a; i++) below = &live[i];
    *inside = below && a - below->lo < below->bytes;
    return below;
}

static const devmem_entry *find_freed(uintptr_t a)
{
    int n = atomic_load(&nfreed);
    for (int k = 1; k <= DEVMEM_FREED && k <= n; k++) {
        const devmem_entry *e = &freed[(n - k) % DEVMEM_FREED];
        if (a - e->lo < e->bytes) return e;
    }
    return NULL;
}

static void describe(uintptr_t a, sbuf *b)
{
    int inside;
    const devmem_entry *e = find(a, &inside), *f = inside ? NULL : find_freed(a);
    if (inside || f) {
        put_u(b, a - (inside ? e : f)->lo, 10);
        put_s(b, inside ? " bytes into " : " bytes into a freed allocation, ");
        put_entry(b, inside ? e : f);
        return;
    }
    put_s(b, "device ");
    put_u(b, (a - host_devmem_base) / HOST_DEVMEM_DEV_SPAN, 10);
    put_s(b, "'s memory outside every live allocation");
    if (e && (a - host_devmem_base) / HOST_DEVMEM_DEV_SPAN == (uintptr_t)e->dev) {
        put_s(b, ", ");
        put_u(b, a - e->lo - e->bytes, 10);
        put_s(b, " bytes past the end of ");
        put_entry(b, e);
    }
}

void host_devmem_describe(const void *p, char *buf, size_t len)
{
    sbuf b = {buf, 0, len};
    put_s(&b, "");
    if (host_dev_of(p) < 0) put_s(&b, "not device memory");
    else describe((uintptr_t)p, &b);
}

/* SIGSEGV or SIGBUS: in the device view, the message and exit; elsewhere
 * the previous handler is put back and the access, run again, reaches it. */
static void on_fault(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    uintptr_t a = (uintptr_t)si->si_addr;
    if (a - host_devmem_base >= host_devmem_span) {
        sigaction(sig, sig == SIGBUS ? &old_bus : &old_segv, NULL);
        return;
    }
    char msg[768];
    sbuf b = {msg, 0, sizeof msg};
    put_s(&b, "dpscale: strict device memory (DPSCALE_STRICT=1): the host dereferenced a device "
              "pointer, address ");
    put_u(&b, a, 16);
    put_s(&b, ", ");
    describe(a, &b);
    put_s(&b, sig == SIGBUS ? " (SIGBUS)" : " (SIGSEGV)");
    put_s(&b, "; on a GPU the host cannot read or write device memory: copy it to host memory "
              "first (be_ops.copy to DPS_HOST) or give it to a backend operation. Where "
              "(innermost first; addr2line -f -e BINARY +OFFSET names a frame):\n");
    if (write(2, msg, b.n) < 0) _exit(HOST_DEVMEM_EXIT);
    void *frames[32];
    backtrace_symbols_fd(frames, backtrace(frames, 32), 2);
    _exit(HOST_DEVMEM_EXIT);
}

static dps_status install_handlers(void)
{
    void *warm[1];
    backtrace(warm, 1); /* loads the unwinder now: the handler must not */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSEGV, &sa, &old_segv) != 0 || sigaction(SIGBUS, &sa, &old_bus) != 0)
        return dps_fail(DPS_ERR_RUNTIME, "strict device memory: installing the SIGSEGV and "
                        "SIGBUS handlers failed (%s); run without DPSCALE_STRICT=1",
                        strerror(errno));
    return DPS_OK;
}

/* The two views, once per process. Lock held. */
static dps_status map_views(void)
{
    if (host_devmem_span) return DPS_OK;
    size_t total = (size_t)DPS_MAX_DEVICES * HOST_DEVMEM_DEV_SPAN;
    page = (size_t)sysconf(_SC_PAGESIZE);
    memfd = memfd_create("dpscale-device-memory", MFD_CLOEXEC);
    void *dv = MAP_FAILED, *rw = MAP_FAILED;
    int sized = memfd >= 0 && ftruncate(memfd, (off_t)total) == 0;
    if (sized) {
        dv = mmap(NULL, total, PROT_NONE, MAP_SHARED | MAP_NORESERVE, memfd, 0);
        rw = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, memfd, 0);
    }
    if (dv == MAP_FAILED || rw == MAP_FAILED) {
        /* the file is sized first: a file-size limit (EFBIG) fails there */
        dps_status rc = sized
            ? dps_fail(DPS_ERR_RUNTIME, "strict device memory: mapping %zu GiB of address "
                       "space twice for the emulated devices failed (%s); raise the "
                       "address-space limit (ulimit -v) or run without DPSCALE_STRICT=1",
                       total >> 30, strerror(errno))
            : dps_fail(DPS_ERR_RUNTIME, "strict device memory: making its %zu GiB memory file "
                       "(memfd, sparse) for the emulated devices failed (%s); raise the "
                       "file-size limit (ulimit -f) or run without DPSCALE_STRICT=1",
                       total >> 30, strerror(errno));
        if (dv != MAP_FAILED) munmap(dv, total);
        if (rw != MAP_FAILED) munmap(rw, total);
        if (memfd >= 0) close(memfd);
        memfd = -1;
        return rc;
    }
    host_devmem_delta = (uintptr_t)rw - (uintptr_t)dv;
    host_devmem_base = (uintptr_t)dv;
    host_devmem_span = total;
    return install_handlers();
}

/* The first gap of `span` bytes in dev's range: its device address, 0 if none. */
static uintptr_t first_fit(int dev, size_t span, int *at)
{
    uintptr_t lo = host_devmem_base + (uintptr_t)dev * HOST_DEVMEM_DEV_SPAN;
    uintptr_t end = lo + HOST_DEVMEM_DEV_SPAN, next = lo;
    int n = atomic_load(&nlive), i = 0;
    while (i < n && live[i].lo < lo) i++;
    for (; i < n && live[i].lo < end; i++) {
        if (live[i].lo - next >= span) break;
        next = live[i].lo + live[i].span;
    }
    *at = i;
    return end - next >= span ? next : 0;
}

dps_status host_devmem_alloc(int dev, size_t bytes, void **p)
{
    *p = NULL;
    pthread_mutex_lock(&lock);
    dps_status rc = map_views();
    size_t span = rc ? 0 : ((bytes ? bytes : 1) + page - 1) / page * page + page; /* and a spare page */
    int at = 0, n = atomic_load(&nlive);
    uintptr_t a = rc ? 0 : first_fit(dev, span, &at);
    if (!rc && (!a || n == DEVMEM_MAX))
        rc = dps_fail(DPS_ERR_OOM, "strict device memory: device %d has no room for %zu bytes "
                      "(%s of %zu GiB of address space, %d allocations live); run without "
                      "DPSCALE_STRICT=1 for a device this large", dev, bytes,
                      n == DEVMEM_MAX ? "too many allocations" : "no gap left",
                      (size_t)(HOST_DEVMEM_DEV_SPAN >> 30), n);
    if (!rc) {
        memmove(&live[at + 1], &live[at], (size_t)(n - at) * sizeof live[0]);
        live[at] = (devmem_entry){a, bytes, span, dev, NULL};
        atomic_store(&nlive, n + 1);
        *p = (void *)a;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

int host_devmem_free(void *p)
{
    if (host_dev_of(p) < 0) return 0;
    pthread_mutex_lock(&lock);
    int n = atomic_load(&nlive), i = 0;
    while (i < n && live[i].lo != (uintptr_t)p) i++;
    if (i < n) {
        int f = atomic_load(&nfreed);
        freed[f % DEVMEM_FREED] = live[i];
        atomic_store(&nfreed, f + 1);
        off_t off = (off_t)(live[i].lo - host_devmem_base);
        /* the pages go back to the system; a later allocation there reads zeros */
        if (fallocate(memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, (off_t)live[i].span))
            madvise((char *)host_dev_rw(p), live[i].span, MADV_REMOVE);
        memmove(&live[i], &live[i + 1], (size_t)(n - i - 1) * sizeof live[0]);
        atomic_store(&nlive, n - 1);
    }
    pthread_mutex_unlock(&lock);
    return 1;
}

void host_devmem_name(const void *p, const char *what)
{
    if (host_dev_of(p) < 0) return;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < atomic_load(&nlive); i++)
        if (live[i].lo == (uintptr_t)p) live[i].what = what;
    pthread_mutex_unlock(&lock);
}
