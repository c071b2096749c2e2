/* The shared-memory collectives, "shm" (--comm shm; see comm_impl.h):
 * between rank processes on one machine through mailboxes in the group's
 * region, with NCCL's ring algorithm (the ring_* functions). All-reduce is
 * reduce-scatter then all-gather over nranks chunks, each step sending one
 * chunk to the next rank; those two halves are collectives of their own
 * too, each rank's chunk its own (comm_chunk_range). Messages are at most COMM_SLOT_BYTES and go
 * through two slots per rank (double buffering); a rank waits on a futex
 * for its predecessor's next message or its successor's acknowledgement.
 * Buffers are host memory: the host backend's devices. */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "elementwise.h"
#include "comm/comm_impl.h"
#include "core/util.h"

typedef struct ring {
    uint32_t sent, received;   /* messages this rank published / consumed */
} ring;

static ring *ring_of(comm *c) { return c->impl; }

static char *slot(comm *c, int rank, uint32_t msg)
{
    return (char *)c->sh + c->sh->data_offset + ((size_t)rank * 2 + (msg & 1)) * COMM_SLOT_BYTES;
}

/* Waits until *w >= target (wrapping counters), spinning briefly first. */
static dps_status wait_ge(comm *c, _Atomic uint32_t *w, uint32_t target, const char *what)
{
    for (int spin = 0; spin < 256; spin++)
        if ((int32_t)(atomic_load_explicit(w, memory_order_acquire) - target) >= 0) return DPS_OK;
    comm_shared_waiting(c->sh, c->rank, 1);
    double start = dps_now_ms();
    dps_status rc = DPS_OK;
    for (;;) {
        uint32_t cur = atomic_load_explicit(w, memory_order_acquire);
        if ((int32_t)(cur - target) >= 0) break;
        if (atomic_load(&c->sh->abort)) {
            rc = dps_fail(DPS_ERR_RUNTIME, "rank %d: collective aborted while waiting for %s",
                          c->rank, what);
            break;
        }
        if (c->timeout_ms > 0 && dps_now_ms() - start > c->timeout_ms) {
            rc = dps_fail(DPS_ERR_TIMEOUT, "rank %d: no %s within %.0f ms", c->rank, what,
                          c->timeout_ms);
            break;
        }
        struct timespec ts = {0, 50 * 1000 * 1000};
        syscall(SYS_futex, w, FUTEX_WAIT, cur, &ts, NULL, 0);
    }
    comm_shared_waiting(c->sh, c->rank, 0);
    return rc;
}

static void publish(_Atomic uint32_t *w, uint32_t value)
{
    atomic_store_explicit(w, value, memory_order_release);
    syscall(SYS_futex, w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* Next message slot of this rank, once the successor has freed it. */
static dps_status send_begin(comm *c, char **dst)
{
    uint32_t k = ring_of(c)->sent;
    if (k >= 2) DPS_TRY(wait_ge(c, &c->sh->box[c->rank].ack, k - 1, "acknowledgement from the next rank"));
    *dst = slot(c, c->rank, k);
    return DPS_OK;
}

static void send_end(comm *c, size_t bytes)
{
    ring_of(c)->sent++;
    c->bytes_sent += bytes;
    publish(&c->sh->box[c->rank].seq, ring_of(c)->sent);
}

static dps_status recv_begin(comm *c, const char **src)
{
    int prev = (c->rank + c->nranks - 1) % c->nranks;
    DPS_TRY(wait_ge(c, &c->sh->box[prev].seq, ring_of(c)->received + 1, "data from the previous rank"));
    *src = slot(c, prev, ring_of(c)->received);
    return DPS_OK;
}

static void recv_end(comm *c, size_t bytes)
{
    int prev = (c->rank + c->nranks - 1) % c->nranks;
    ring_of(c)->received++;
    c->bytes_received += bytes;
    publish(&c->sh->box[prev].ack, ring_of(c)->received);
}

static void add_into(void *dst, const void *src, size_t n, comm_dtype dt)
{
    if (dt == COMM_F32) {
        float *d = dst;
        const float *s = src;
        for (size_t i = 0; i < n; i++) d[i] += s[i];
    } else {
        uint16_t *d = dst;
        const uint16_t *s = src;
        for (size_t i = 0; i < n; i++)
            d[i] = dps_f32_to_bf16(dps_bf16_to_f32(d[i]) + dps_bf16_to_f32(s[i]));
    }
}

/* One ring step: send chunk `out`, receive chunk `in` from the previous
 * rank and add it (reduce) or copy it (gather), piece by piece. Every rank
 * uses the same piece count, so the message pattern matches around the ring. */
static dps_status ring_step(comm *c, char *buf, size_t n, comm_dtype dt, int out, int in,
                            int reduce)
{
    size_t es = comm_dtype_bytes(dt), per = COMM_SLOT_BYTES / es;
    size_t longest = (n + (size_t)c->nranks - 1) / (size_t)c->nranks;
    size_t pieces = (longest + per - 1) / per;
    size_t ob, oe, ib, ie;
    comm_chunk_range(n, c->nranks, out, &ob, &oe);
    comm_chunk_range(n, c->nranks, in, &ib, &ie);
    for (size_t p = 0; p < pieces; p++) {
        size_t o0 = ob + p * per, i0 = ib + p * per;
        size_t olen = o0 < oe ? (oe - o0 < per ? oe - o0 : per) : 0;
        size_t ilen = i0 < ie ? (ie - i0 < per ? ie - i0 : per) : 0;
        char *dst;
        const char *src;
        DPS_TRY(send_begin(c, &dst));
        if (olen) memcpy(dst, buf + o0 * es, olen * es);
        send_end(c, olen * es);
        DPS_TRY(recv_begin(c, &src));
        if (ilen && reduce) add_into(buf + i0 * es, src, ilen, dt);
        else if (ilen) memcpy(buf + i0 * es, src, ilen * es);
        recv_end(c, ilen * es);
    }
    return DPS_OK;
}

static dps_status ring_allreduce(comm *c, void *buf, size_t n, comm_dtype dt)
{
    int N = c->nranks, r = c->rank;
    if (N == 1 || n == 0) return DPS_OK;
    for (int s = 0; s < N - 1; s++) /* reduce-scatter */
        DPS_TRY(ring_step(c, buf, n, dt, (r - s + 2 * N) % N, (r - s - 1 + 2 * N) % N, 1));
    for (int s = 0; s < N - 1; s++) /* all-gather */
        DPS_TRY(ring_step(c, buf, n, dt, (r + 1 - s + 2 * N) % N, (r - s + 2 * N) % N, 0));
    return DPS_OK;
}

/* Reduce-scatter alone: the all-reduce's first half shifted by one chunk,
 * so that the sum of chunk r ends on rank r. */
static dps_status ring_reduce_scatter(comm *c, void *buf, size_t n, comm_dtype dt)
{
    int N = c->nranks, r = c->rank;
    if (N == 1 || n == 0) return DPS_OK;
    for (int s = 0; s < N - 1; s++)
        DPS_TRY(ring_step(c, buf, n, dt, (r - s - 1 + 2 * N) % N, (r - s - 2 + 2 * N) % N, 1));
    return DPS_OK;
}

/* All-gather alone: each rank starts from its own chunk r. */
static dps_status ring_all_gather(comm *c, void *buf, size_t n, comm_dtype dt)
{
    int N = c->nranks, r = c->rank;
    if (N == 1 || n == 0) return DPS_OK;
    for (int s = 0; s < N - 1; s++)
        DPS_TRY(ring_step(c, buf, n, dt, (r - s + 2 * N) % N, (r - s - 1 + 2 * N) % N, 0));
    return DPS_OK;
}

/* Pipelined ring broadcast: each rank but the last forwards every piece. */
static dps_status ring_broadcast(comm *c, void *buf, size_t bytes, int root)
{
    int N = c->nranks;
    if (N == 1 || bytes == 0) return DPS_OK;
    int last = (root + N - 1) % N;
    for (size_t off = 0; off < bytes; off += COMM_SLOT_BYTES) {
        size_t len = bytes - off < COMM_SLOT_BYTES ? bytes - off : COMM_SLOT_BYTES;
        char *p = (char *)buf + off;
        if (c->rank != root) {
            const char *src;
            DPS_TRY(recv_begin(c, &src));
            memcpy(p, src, len);
            recv_end(c, len);
        }
        if (c->rank != last) {
            char *dst;
            DPS_TRY(send_begin(c, &dst));
            memcpy(dst, p, len);
            send_end(c, len);
        }
    }
    return DPS_OK;
}

/* Every rank sends one empty message around the ring and gets one back. */
static dps_status ring_barrier(comm *c)
{
    float token = 0.0f;
    return ring_allreduce(c, &token, 1, COMM_F32);
}

static void ring_destroy(comm *c)
{
    free(c->impl);
    c->impl = NULL;
}

static const comm_ops ring_ops = {
    .name = "shm",
    .allreduce = ring_allreduce,
    .broadcast = ring_broadcast,
    .barrier = ring_barrier,
    .reduce_scatter = ring_reduce_scatter,
    .all_gather = ring_all_gather,
    .destroy = ring_destroy,
};

static int ring_suits(const backend *be) { return be->kind == BE_HOST; }

static dps_status ring_open(comm *c)
{
    c->impl = calloc(1, sizeof(ring));
    if (!c->impl) return dps_fail(DPS_ERR_RUNTIME, "rank %d: out of host memory for the ring", c->rank);
    c->ops = &ring_ops;
    return DPS_OK;
}

const comm_impl comm_shm_impl = {"shm", ring_suits, ring_open, 0};
