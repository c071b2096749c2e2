/* Device memory the host cannot touch: the host backend's strict mode
 * (host_strict.h). Each emulated device's allocations lie in a range of
 * addresses mapped PROT_NONE, so that the harness dereferencing a device
 * pointer faults as it would on a GPU; the same bytes are mapped again,
 * read-write, at a fixed distance, and the backend's operations and the
 * host collectives reach them through host_dev_rw. A fault in the device
 * range ends the process with a message naming the allocation. Outside
 * strict mode there is no such range and host_dev_rw returns its argument. */
#ifndef DPS_HOST_DEVMEM_H
#define DPS_HOST_DEVMEM_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

/* The device view: [base, base + span), device d's memory from base + d *
 * HOST_DEVMEM_DEV_SPAN; delta is the read-write alias's address minus the
 * device address (modulo 2^64). span is 0 until strict mode's first device
 * allocation, and always outside strict mode. */
extern uintptr_t host_devmem_base, host_devmem_span, host_devmem_delta;
#define HOST_DEVMEM_DEV_SPAN ((uintptr_t)64 << 30) /* address space per emulated device */
#define HOST_DEVMEM_EXIT 70 /* exit status after a host dereference of device memory */

/* The address a host operation reads or writes for p: its read-write alias
 * when p is strict device memory, else p itself. */
static inline void *host_dev_rw(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    return (void *)(a - host_devmem_base < host_devmem_span ? a + host_devmem_delta : a);
}

/* The device whose strict device memory holds p; -1 for any other memory. */
static inline int host_dev_of(const void *p)
{
    uintptr_t off = (uintptr_t)p - host_devmem_base;
    return off < host_devmem_span ? (int)(off / HOST_DEVMEM_DEV_SPAN) : -1;
}

/* bytes of device dev's memory in the device view (strict mode); the first
 * call maps the views and installs the SIGSEGV and SIGBUS handlers. */
dps_status host_devmem_alloc(int dev, size_t bytes, void **p) DPS_MUST_USE;
/* Frees p when it is strict device memory (its pages returned) and says so. */
int host_devmem_free(void *p);
/* Names p's allocation (be_buf_alloc's `what`, a string literal) for the
 * fault's message; nothing when p is not strict device memory. */
void host_devmem_name(const void *p, const char *what);
/* What p is, for a message: "12 bytes into device 1's \"gradients\"
 * (4096 bytes)", or where it lies outside any live allocation. */
void host_devmem_describe(const void *p, char *buf, size_t len);

#endif
