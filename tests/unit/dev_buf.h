/* Device memory for the unit tests' operands, as a CUDA program gives its
 * kernels theirs: allocated on the test's device, filled by copies from
 * host memory, read back by copies after the stream's work, so that strict
 * mode (DPSCALE_STRICT=1) accepts the ops and the host never touches
 * device memory. */
#ifndef DPS_TESTS_DEV_BUF_H
#define DPS_TESTS_DEV_BUF_H

#include <stddef.h>

#include "backend/backend.h"

#define DEV_BUFS_MAX 64

/* A test's device buffers on one device, freed together. */
typedef struct dev_bufs {
    backend *be;
    be_stream *st; /* the copies' stream, of device dev */
    int dev;
    int n, nread;
    dps_buf buf[DEV_BUFS_MAX];
    void *read[DEV_BUFS_MAX]; /* dev_read's host copies */
} dev_bufs;

/* Buffers on device dev whose copies run on st (a stream of dev). */
dev_bufs dev_bufs_on(backend *be, be_stream *st, int dev);
/* bytes of device memory, zeroed (memset0 on the stream); NULL, with a
 * failed expectation, when it cannot be had. */
void *dev_zeros(dev_bufs *d, size_t bytes);
/* bytes of device memory filled from host memory src. */
void *dev_put(dev_bufs *d, const void *src, size_t bytes);
/* Host memory src copied into device memory dst. */
void dev_set(dev_bufs *d, void *dst, const void *src, size_t bytes);
/* Device memory src copied into host memory dst once the stream's work is done. */
void dev_get(dev_bufs *d, void *dst, const void *src, size_t bytes);
/* A host copy of bytes of device memory src once the stream's work is
 * done, freed with the buffers (NULL, with a failed expectation, when it
 * cannot be had). */
const void *dev_read(dev_bufs *d, const void *src, size_t bytes);
/* The stream's work waited for and every buffer and host copy freed. */
void dev_bufs_free(dev_bufs *d);

#endif
