/* Collectives between ranks on device buffers: broadcast, reduce and
 * all-reduce (sum). The host implementation (comm_host.c) moves data
 * between rank processes through mailboxes in shared memory, with NCCL's
 * ring algorithm; a GPU build adds an NCCL one behind the same calls. */
#ifndef DPS_COMM_H
#define DPS_COMM_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"

typedef enum comm_dtype { COMM_F32, COMM_BF16 } comm_dtype;

/* Bytes of one mailbox slot; messages larger than this are pipelined. */
#define COMM_SLOT_BYTES ((size_t)1 << 20)

/* Lives in memory shared by every rank (MAP_SHARED, set up before fork):
 * rank r publishes messages into its two slots, rank r + 1 consumes them. */
typedef struct comm_shared {
    int nranks;
    _Atomic int abort;                   /* set by anyone: every wait returns */
    struct {
        _Atomic uint32_t seq;            /* messages published by this rank */
        _Atomic uint32_t ack;            /* of those, consumed by the next rank */
        _Atomic int waiting;             /* blocked in a collective (for the watchdog) */
        char pad[52];
    } box[DPS_MAX_DEVICES];
    _Atomic int nccl_id_ready;           /* rank 0 has written nccl_id */
    unsigned char nccl_id[128];          /* ncclUniqueId, shared before ncclCommInitRank */
    size_t data_offset;                  /* from this struct to the slots */
} comm_shared;

/* Bytes to reserve (header included) for nranks. */
size_t comm_shared_bytes(int nranks);
void comm_shared_init(comm_shared *sh, int nranks);

typedef struct comm {
    comm_shared *sh;
    int rank, nranks;
    uint32_t sent, received;   /* messages this rank published / consumed */
    double wait_timeout_ms;    /* 0: wait until abort */
    uint64_t bytes_sent, bytes_received;
    void *nccl;                /* ncclComm_t when the collectives run on GPUs (comm_nccl.c) */
    void *nccl_stream;         /* its cudaStream_t */
} comm;

void comm_init(comm *c, comm_shared *sh, int rank);
/* GPU collectives: one NCCL rank per process on device `dev`, the unique id
 * from rank 0 through the shared region; buffers are then device pointers. */
dps_status comm_nccl_init(comm *c, int dev, double timeout_ms);
void comm_nccl_free(comm *c);
dps_status comm_nccl_allreduce(comm *c, void *buf, size_t n, comm_dtype dt);
dps_status comm_nccl_broadcast(comm *c, void *buf, size_t bytes, int root);
/* Sum over ranks, in place, n elements. */
dps_status comm_allreduce(comm *c, void *buf, size_t n, comm_dtype dt);
/* root's bytes to every rank, in place. */
dps_status comm_broadcast(comm *c, void *buf, size_t bytes, int root);
/* Sum onto root (other ranks' buffers hold the sum too afterwards). */
dps_status comm_reduce(comm *c, void *buf, size_t n, comm_dtype dt, int root);
/* Tells every rank to stop waiting (their collectives return an error). */
void comm_abort(comm_shared *sh);

/* dp's single-process communicator over several GPUs (ncclCommInitAll):
 * broadcast from and reduce onto the first device, each device's part on its
 * own stream (native cudaStream_t handles). */
typedef struct comm_group comm_group;
dps_status comm_group_init(comm_group **g, const int *devs, int n);
void comm_group_free(comm_group *g);
dps_status comm_group_broadcast(comm_group *g, void *const *bufs, size_t count,
                                void *const *streams);
dps_status comm_group_reduce(comm_group *g, void *const *bufs, size_t count,
                             void *const *streams);

#endif
