/* The shared-memory collectives, "shm" (--comm shm; see comm_impl.h):
 * between rank processes on one machine through mailboxes in the group's
 * region, with NCCL's ring algorithm (ring_run). All-reduce is
 * reduce-scatter then all-gather over nranks chunks, fused where they meet;
 * those two halves are collectives of their own too, each rank's chunk its
 * own (comm_chunk_range). Each chunk goes in pieces of COMM_SLOT_BYTES, and
 * every piece runs through all the steps before the next one starts (as
 * NCCL's ring loops), so a piece stays in cache from its first step to its
 * last and a message is read where its sender wrote it (no copy out of a
 * slot before a reduce). A rank runs up to COMM_SLOTS messages ahead of its
 * successor; it waits for its predecessor's next message or its
 * successor's acknowledgement by spinning, yielding, then on a futex.
 * Buffers are host memory: the host backend's devices. */
#include <errno.h>
#include <limits.h>
#include <sched.h>
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
    uint64_t sent, received;   /* messages this rank published / consumed (the
                                * shared counters are their low 32 bits) */
} ring;

static ring *ring_of(comm *c) { return c->impl; }

static char *slot(comm *c, int rank, uint64_t msg)
{
    size_t i = (size_t)rank * COMM_SLOTS + (msg & (COMM_SLOTS - 1));
    return (char *)c->sh + c->sh->data_offset + i * COMM_SLOT_BYTES;
}

static int reached(_Atomic uint32_t *w, uint32_t target)
{
    return (int32_t)(atomic_load_explicit(w, memory_order_acquire) - target) >= 0;
}

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Spin, then yield: a peer that is a message behind usually arrives within
 * microseconds (Open MPI's shared-memory transport polls too), unless it
 * last ran on this very CPU (more ranks than free cores): then spinning only
 * delays it, and the rank yields at once. */
#define SPIN_MS 0.005
#define YIELD_MS 0.1

/* Waits until *w >= target (wrapping counters), which rank `peer` moves:
 * spins, yields, then sleeps on the futex, counted in *sleepers so that the
 * publisher wakes it. */
static dps_status wait_ge(comm *c, int peer, _Atomic uint32_t *w, _Atomic uint32_t *sleepers,
                          uint32_t target, const char *what)
{
    if (reached(w, target)) return DPS_OK;
    int cpu = sched_getcpu();
    atomic_store_explicit(&c->sh->box[c->rank].cpu, cpu, memory_order_relaxed);
    int shared = cpu >= 0 &&
                 atomic_load_explicit(&c->sh->box[peer].cpu, memory_order_relaxed) == cpu;
    double start = dps_now_ms(), now = start;
    for (; !shared && now - start < SPIN_MS; now = dps_now_ms())
        for (int i = 0; i < 64; i++) {
            if (reached(w, target)) return DPS_OK;
            cpu_relax();
        }
    for (; now - start < YIELD_MS; now = dps_now_ms()) {
        if (reached(w, target)) return DPS_OK;
        if (atomic_load(&c->sh->abort)) break;
        sched_yield();
    }
    comm_shared_waiting(c->sh, c->rank, 1);
    dps_status rc = DPS_OK;
    for (;;) {
        atomic_fetch_add(sleepers, 1);
        uint32_t cur = atomic_load(w);
        if ((int32_t)(cur - target) >= 0) {
            atomic_fetch_sub(sleepers, 1);
            break;
        }
        if (atomic_load(&c->sh->abort)) {
            atomic_fetch_sub(sleepers, 1);
            rc = dps_fail(DPS_ERR_RUNTIME, "rank %d: collective aborted while waiting for %s",
                          c->rank, what);
            break;
        }
        if (c->timeout_ms > 0 && dps_now_ms() - start > c->timeout_ms) {
            atomic_fetch_sub(sleepers, 1);
            rc = dps_fail(DPS_ERR_TIMEOUT, "rank %d: no %s within %.0f ms", c->rank, what,
                          c->timeout_ms);
            break;
        }
        struct timespec ts = {0, 50 * 1000 * 1000};
        syscall(SYS_futex, w, FUTEX_WAIT, cur, &ts, NULL, 0);
        atomic_fetch_sub(sleepers, 1);
    }
    comm_shared_waiting(c->sh, c->rank, 0);
    return rc;
}

/* Sequentially consistent store then load, against the waiter's increment
 * then load: either the waiter sees the value or this sees the sleeper. */
static void publish(_Atomic uint32_t *w, _Atomic uint32_t *sleepers, uint32_t value)
{
    atomic_store(w, value);
    if (atomic_load(sleepers)) syscall(SYS_futex, w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* Next message slot of this rank, once the successor has consumed the
 * message that used it COMM_SLOTS messages ago. */
static dps_status send_begin(comm *c, char **dst)
{
    uint64_t k = ring_of(c)->sent;
    comm_box *b = &c->sh->box[c->rank];
    if (k >= COMM_SLOTS)
        DPS_TRY(wait_ge(c, (c->rank + 1) % c->nranks, &b->ack, &b->ack_sleepers,
                        (uint32_t)(k - COMM_SLOTS + 1), "acknowledgement from the next rank"));
    *dst = slot(c, c->rank, k);
    return DPS_OK;
}

static void send_end(comm *c, size_t bytes)
{
    comm_box *b = &c->sh->box[c->rank];
    ring_of(c)->sent++;
    c->bytes_sent += bytes;
    publish(&b->seq, &b->seq_sleepers, (uint32_t)ring_of(c)->sent);
}

static comm_box *prev_box(comm *c) { return &c->sh->box[(c->rank + c->nranks - 1) % c->nranks]; }

static dps_status recv_begin(comm *c, const char **src)
{
    int prev = (c->rank + c->nranks - 1) % c->nranks;
    comm_box *b = &c->sh->box[prev];
    DPS_TRY(wait_ge(c, prev, &b->seq, &b->seq_sleepers, (uint32_t)(ring_of(c)->received + 1),
                    "data from the previous rank"));
    *src = slot(c, prev, ring_of(c)->received);
    return DPS_OK;
}

static void recv_end(comm *c, size_t bytes)
{
    comm_box *b = prev_box(c);
    ring_of(c)->received++;
    c->bytes_received += bytes;
    publish(&b->ack, &b->ack_sleepers, (uint32_t)ring_of(c)->received);
}

/* The element-wise kernels of a step, plain loops over restrict pointers
 * that the compiler vectorises: d = a + b (a partial sum passed on), or
 * d += b in place and, when d2 is not NULL, d2 = d as well (the last reduce,
 * sent on); with AVX2 where the processor has it (a third faster on pieces
 * in L2 than SSE2). Float addition commutes, so which operand is the rank's
 * own does not change the sum. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define VECTOR_CLONES
#endif

VECTOR_CLONES static void sum_f32(float *restrict d, const float *restrict a, const float *restrict b,
                    size_t n)
{
    for (size_t i = 0; i < n; i++) d[i] = a[i] + b[i];
}

VECTOR_CLONES static void add_f32(float *restrict d, float *restrict d2, const float *restrict b, size_t n)
{
    if (d2)
        for (size_t i = 0; i < n; i++) d2[i] = d[i] = d[i] + b[i];
    else
        for (size_t i = 0; i < n; i++) d[i] += b[i];
}

static uint16_t bf16_sum(uint16_t a, uint16_t b)
{
    return dps_f32_to_bf16(dps_bf16_to_f32(a) + dps_bf16_to_f32(b));
}

VECTOR_CLONES static void sum_bf16(uint16_t *restrict d, const uint16_t *restrict a,
                     const uint16_t *restrict b, size_t n)
{
    for (size_t i = 0; i < n; i++) d[i] = bf16_sum(a[i], b[i]);
}

VECTOR_CLONES static void add_bf16(uint16_t *restrict d, uint16_t *restrict d2, const uint16_t *restrict b,
                     size_t n)
{
    if (d2)
        for (size_t i = 0; i < n; i++) d2[i] = d[i] = bf16_sum(d[i], b[i]);
    else
        for (size_t i = 0; i < n; i++) d[i] = bf16_sum(d[i], b[i]);
}

/* The reduce of a step: out = own + in when the sum is only passed on,
 * else own += in, and out = own when out is not NULL. */
static void reduce(char *own, char *out, const char *in, size_t len, comm_dtype dt, int copy)
{
    size_t n = len / comm_dtype_bytes(dt);
    if (dt == COMM_F32 && copy) add_f32((float *)own, (float *)out, (const float *)in, n);
    else if (dt == COMM_F32) sum_f32((float *)out, (const float *)own, (const float *)in, n);
    else if (copy) add_bf16((uint16_t *)own, (uint16_t *)out, (const uint16_t *)in, n);
    else sum_bf16((uint16_t *)out, (const uint16_t *)own, (const uint16_t *)in, n);
}

/* What a step does with the message it receives (if any) and the rank's
 * own piece, as NCCL's ring primitives name it. */
enum {
    STEP_RECV = 1,    /* a message comes from the previous rank */
    STEP_REDUCE = 2,  /* ... and is added to the own piece */
    STEP_SEND = 4,    /* the result (or the own piece) goes to the next rank */
    STEP_COPY = 8,    /* the result is written to the own piece */
};

/* One message of the ring over `len` bytes of the own piece `own`: send
 * (own to the slot), recvReduceSend, recvReduceCopy(Send), recvCopy(Send).
 * The received message is read where the previous rank wrote it. */
static dps_status ring_msg(comm *c, char *own, size_t len, comm_dtype dt, int kind)
{
    const char *in = NULL;
    char *out = NULL;
    if (kind & STEP_RECV) DPS_TRY(recv_begin(c, &in));
    if (kind & STEP_SEND) DPS_TRY(send_begin(c, &out));
    if (!(kind & STEP_RECV)) memcpy(out, own, len);
    else if (kind & STEP_REDUCE) reduce(own, out, in, len, dt, kind & STEP_COPY);
    else {
        memcpy(own, in, len); /* recvCopy(Send): a step without a reduce copies */
        if (out) memcpy(out, in, len);
    }
    if (kind & STEP_SEND) send_end(c, len);
    if (kind & STEP_RECV) recv_end(c, len);
    return DPS_OK;
}

/* A ring collective as NCCL runs it: the buffer in nranks chunks, each
 * chunk in pieces of one slot, and for each piece the steps kinds[0..n)
 * in turn, step k on chunk (rank + shift - k) mod nranks; what a rank
 * sends at step k its successor receives at step k + 1, on the same chunk.
 * Every rank uses the same piece count (the longest chunk's), so the
 * message pattern matches around the ring; a piece past a short chunk's
 * end is an empty message. */
static dps_status ring_run(comm *c, char *buf, size_t n, comm_dtype dt, int shift,
                           const int *kinds, int nsteps)
{
    int N = c->nranks;
    size_t es = comm_dtype_bytes(dt), per = COMM_SLOT_BYTES / es;
    size_t longest = (n + (size_t)N - 1) / (size_t)N;
    for (size_t p0 = 0; p0 < longest; p0 += per)
        for (int k = 0; k < nsteps; k++) {
            size_t b, e;
            comm_chunk_range(n, N, ((c->rank + shift - k) % N + 2 * N) % N, &b, &e);
            size_t i0 = b + p0 < e ? b + p0 : e, i1 = e - i0 < per ? e : i0 + per;
            DPS_TRY(ring_msg(c, buf + i0 * es, (i1 - i0) * es, dt, kinds[k]));
        }
    return DPS_OK;
}

#define RS_STEP (STEP_RECV | STEP_REDUCE | STEP_SEND)
#define AG_STEP (STEP_RECV | STEP_SEND | STEP_COPY)

/* Reduce-scatter then all-gather, fused where they meet: the last reduce
 * writes the sum to the buffer and sends it on (recvReduceCopySend). With
 * two ranks this is the direct algorithm: each reduces half, reading the
 * peer's half where the peer wrote it, and copies the other half back. */
static dps_status ring_allreduce(comm *c, void *buf, size_t n, comm_dtype dt)
{
    int N = c->nranks, kinds[2 * DPS_MAX_DEVICES];
    if (N == 1 || n == 0) return DPS_OK;
    kinds[0] = STEP_SEND;
    for (int k = 1; k < N - 1; k++) kinds[k] = RS_STEP;
    kinds[N - 1] = RS_STEP | STEP_COPY;
    for (int k = N; k < 2 * N - 2; k++) kinds[k] = AG_STEP;
    kinds[2 * N - 2] = STEP_RECV | STEP_COPY;
    return ring_run(c, buf, n, dt, 0, kinds, 2 * N - 1);
}

/* Reduce-scatter alone: the all-reduce's first half shifted by one chunk,
 * so that the sum of chunk r ends on rank r (recvReduceCopy). */
static dps_status ring_reduce_scatter(comm *c, void *buf, size_t n, comm_dtype dt)
{
    int N = c->nranks, kinds[DPS_MAX_DEVICES];
    if (N == 1 || n == 0) return DPS_OK;
    kinds[0] = STEP_SEND;
    for (int k = 1; k < N - 1; k++) kinds[k] = RS_STEP;
    kinds[N - 1] = STEP_RECV | STEP_REDUCE | STEP_COPY;
    return ring_run(c, buf, n, dt, -1, kinds, N);
}

/* All-gather alone: each rank starts from its own chunk r. */
static dps_status ring_all_gather(comm *c, void *buf, size_t n, comm_dtype dt)
{
    int N = c->nranks, kinds[DPS_MAX_DEVICES];
    if (N == 1 || n == 0) return DPS_OK;
    kinds[0] = STEP_SEND;
    for (int k = 1; k < N - 1; k++) kinds[k] = AG_STEP;
    kinds[N - 1] = STEP_RECV | STEP_COPY;
    return ring_run(c, buf, n, dt, 0, kinds, N);
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
