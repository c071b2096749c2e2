/* Strict mode inside the backend layer: strict.c keeps the registries
 * (allocations, pinned memory, streams, events), checks an op's operands
 * and orders its accesses by vector clocks; strict_ops.c declares each
 * be_ops entry's operands, wraps a backend's table with them and queues
 * each op on its stream's worker (strict_queue.c). */
#ifndef DPS_BACKEND_STRICT_H
#define DPS_BACKEND_STRICT_H

#include "backend/backend.h"
#include "backend/strict_queue.h"

/* Wraps be's table (the host backend's) in strict mode's: from now on
 * every op is checked before the wrapped one runs. */
dps_status strict_wrap(backend *be) DPS_MUST_USE;
/* Registries, empty, around the table inner (NULL: out of memory). */
struct strict_state *strict_state_new(const be_ops *inner);
/* The table strict mode wraps. */
const be_ops *strict_inner(const backend *be);
/* The wrapping table (strict_ops.c), calling strict_inner's ops. */
extern const be_ops strict_ops;

/* An op named op issued on s with operands acc[n]: checks the stream and
 * the operands, orders the accesses against the other streams', and gives
 * the wrapped backend's stream in *inner. */
dps_status strict_issue(backend *be, be_stream *s, const char *op, const be_access *acc, int n,
                        be_stream **inner) DPS_MUST_USE;
/* A copy's stream is of its destination's or its source's device. */
dps_status strict_copy_stream(backend *be, be_stream *s, int dst_dev, int src_dev) DPS_MUST_USE;
/* After a copy was queued up to ticket: when an end is host memory that is
 * not pinned, the host waits for it (a synchronous copy, as
 * cudaMemcpyAsync with pageable memory) and the stream's failure, if any,
 * is returned. */
dps_status strict_copy_sync(backend *be, be_stream *s, uint64_t ticket, const void *dst,
                           int dst_dev, const void *src, int src_dev) DPS_MUST_USE;
/* Queues op (checked by strict_issue) on s's worker: fn runs on inner with
 * a copy of args' bytes; *ticket (may be NULL) is where it completes. */
dps_status strict_enqueue(backend *be, be_stream *s, be_stream *inner, const char *op, sq_fn fn,
                          const void *args, size_t bytes, uint64_t *ticket) DPS_MUST_USE;

/* The lifecycle ops, kept in the registries (strict.c). */
dps_status strict_raw_alloc(backend *be, int dev, size_t bytes, void **p);
void strict_raw_free(backend *be, int dev, void *p);
dps_status strict_host_alloc(backend *be, size_t bytes, void **p);
void strict_host_free(backend *be, void *p);
dps_status strict_stream_create(backend *be, int dev, be_stream **s);
void strict_stream_destroy(backend *be, be_stream *s);
dps_status strict_stream_sync(backend *be, be_stream *s);
void strict_name_stream(backend *be, be_stream *s, const char *name);
void *strict_native_stream(backend *be, be_stream *s);
dps_status strict_event_create(backend *be, int dev, be_event **e);
void strict_event_destroy(backend *be, be_event *e);
dps_status strict_event_record(backend *be, be_event *e, be_stream *s);
dps_status strict_stream_wait(backend *be, be_stream *s, be_event *e);
dps_status strict_event_sync(backend *be, be_event *e);
dps_status strict_event_ms(backend *be, be_event *a, be_event *b, float *ms);
void strict_destroy(backend *be);

#endif
