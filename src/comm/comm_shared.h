/* The region every rank of a group shares, made before the ranks start
 * (an anonymous MAP_SHARED mapping before fork): the group's abort flag,
 * what each rank is waiting for, an implementation's rendezvous id, and the
 * shared-memory ring's mailboxes. */
#ifndef DPS_COMM_SHARED_H
#define DPS_COMM_SHARED_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

/* Bytes of one mailbox slot: the ring's message, the piece of a chunk it
 * pipelines. Measured on 2 ranks (2-core Zen 4): 512 KiB pieces all-reduce
 * 1 MiB in half the time that 128 KiB pieces take, and 64 MiB no slower. */
#define COMM_SLOT_BYTES ((size_t)512 << 10)
/* Slots per rank, a FIFO (a power of two): a rank runs this many messages
 * ahead of its successor before it waits for an acknowledgement. */
#define COMM_SLOTS 4
/* Bytes of the rendezvous id rank 0 publishes (an ncclUniqueId fits). */
#define COMM_ID_BYTES 128

/* One rank's mailbox counters (futex words), each on a cache line of its
 * own, as the rank that writes it differs: seq by this rank, ack by the next.
 * A waiter that goes to sleep on one counts itself in its *_sleepers, so
 * that a publisher makes the wake-up system call only when someone sleeps. */
typedef struct comm_box {
    _Alignas(64) _Atomic uint32_t seq;   /* messages published by this rank */
    _Atomic uint32_t seq_sleepers;
    _Alignas(64) _Atomic uint32_t ack;   /* of those, consumed by the next rank */
    _Atomic uint32_t ack_sleepers;
    _Alignas(64) _Atomic int waiting;    /* blocked in a collective (for the watchdog) */
    _Atomic int cpu;                     /* where this rank last waited (-1: not yet) */
} comm_box;

typedef struct comm_shared {
    int nranks;
    _Atomic int abort;                   /* set by anyone: every wait returns */
    comm_box box[DPS_MAX_DEVICES];
    _Atomic int id_ready;                /* rank 0 has written id */
    unsigned char id[COMM_ID_BYTES];
    size_t data_offset;                  /* from this struct to the slots */
} comm_shared;

/* Bytes to reserve (header included) for nranks. */
size_t comm_shared_bytes(int nranks);
void comm_shared_init(comm_shared *sh, int nranks);
/* Tells every rank to stop waiting; returns whether it was already set. */
int comm_shared_abort(comm_shared *sh);
/* Marks rank as blocked in a collective (1) or not (0), for the watchdog. */
void comm_shared_waiting(comm_shared *sh, int rank, int on);
/* Whether rank is blocked in a collective. */
int comm_shared_is_waiting(comm_shared *sh, int rank);
/* For a timeout's message: "ranks not in a collective: 1 (forward); waiting
 * in a collective: 0 (backward), 2 (backward)"; labels[r] (NULL: none) is
 * what rank r was doing, labels may be NULL. */
void comm_shared_explain_waiting(comm_shared *sh, const char *const *labels, char *buf, size_t len);
/* Rank 0 publishes id; the others wait for it (abort and timeout_ms end the
 * wait; 0: no timeout). */
dps_status comm_shared_exchange_id(comm_shared *sh, int rank, void *id, size_t bytes,
                                   double timeout_ms) DPS_MUST_USE;

#endif
