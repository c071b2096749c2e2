/* Device buffers for the unit tests' operands (dev_buf.h): be_buf_alloc on
 * the test's device, copies from and to DPS_HOST on its stream. */
#include <stdlib.h>

#include "dev_buf.h"
#include "expect.h"

dev_bufs dev_bufs_on(backend *be, be_stream *st, int dev)
{
    dev_bufs d = {.be = be, .st = st, .dev = dev};
    return d;
}

void *dev_zeros(dev_bufs *d, size_t bytes)
{
    if (d->n == DEV_BUFS_MAX) {
        fprintf(stderr, "dev_zeros: more than %d test buffers; raise DEV_BUFS_MAX in "
                "tests/unit/dev_buf.h\n", DEV_BUFS_MAX);
        failures++;
        return NULL;
    }
    dps_buf *b = &d->buf[d->n];
    if (be_buf_alloc(d->be, d->dev, bytes ? bytes : 1, "test operands", b) != DPS_OK) {
        fprintf(stderr, "dev_zeros: %zu bytes on device %d: %s\n", bytes, d->dev, dps_errmsg());
        failures++;
        return NULL;
    }
    d->n++;
    EXPECT(d->be->ops->memset0(d->be, d->st, b->ptr, bytes) == DPS_OK);
    return b->ptr;
}

void *dev_put(dev_bufs *d, const void *src, size_t bytes)
{
    void *p = dev_zeros(d, bytes);
    if (p) dev_set(d, p, src, bytes);
    return p;
}

void dev_set(dev_bufs *d, void *dst, const void *src, size_t bytes)
{
    EXPECT(dst && d->be->ops->copy(d->be, d->st, dst, d->dev, src, DPS_HOST, bytes) == DPS_OK);
}

void dev_get(dev_bufs *d, void *dst, const void *src, size_t bytes)
{
    EXPECT(d->be->ops->stream_sync(d->be, d->st) == DPS_OK);
    EXPECT(src && d->be->ops->copy(d->be, d->st, dst, DPS_HOST, src, d->dev, bytes) == DPS_OK);
}

const void *dev_read(dev_bufs *d, const void *src, size_t bytes)
{
    void *h = d->nread < DEV_BUFS_MAX ? malloc(bytes ? bytes : 1) : NULL;
    if (!h) {
        fprintf(stderr, "dev_read: no host copy of %zu bytes (%d held, at most %d in "
                "tests/unit/dev_buf.h)\n", bytes, d->nread, DEV_BUFS_MAX);
        failures++;
        return NULL;
    }
    d->read[d->nread++] = h;
    dev_get(d, h, src, bytes);
    return h;
}

void dev_bufs_free(dev_bufs *d)
{
    while (d->nread > 0) free(d->read[--d->nread]);
    if (d->n) EXPECT(d->be->ops->stream_sync(d->be, d->st) == DPS_OK);
    while (d->n > 0) be_buf_free(d->be, &d->buf[--d->n]);
}
