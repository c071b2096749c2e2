/* The group's shared region (see comm_shared.h): layout, abort, who waits
 * in a collective, and the rendezvous of rank 0's id. */
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm_shared.h"
#include "core/util.h"

static size_t header_bytes(void) { return (sizeof(comm_shared) + 63) & ~(size_t)63; }

size_t comm_shared_bytes(int nranks)
{
    return header_bytes() + (size_t)nranks * COMM_SLOTS * COMM_SLOT_BYTES;
}

void comm_shared_init(comm_shared *sh, int nranks)
{
    memset(sh, 0, sizeof *sh);
    sh->nranks = nranks;
    sh->data_offset = header_bytes();
    for (int r = 0; r < DPS_MAX_DEVICES; r++) atomic_store(&sh->box[r].cpu, -1);
}

int comm_shared_abort(comm_shared *sh)
{
    int was = atomic_exchange(&sh->abort, 1);
    for (int r = 0; r < sh->nranks; r++) {
        syscall(SYS_futex, &sh->box[r].seq, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
        syscall(SYS_futex, &sh->box[r].ack, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
    }
    return was;
}

void comm_shared_explain_waiting(comm_shared *sh, const char *const *labels, char *buf, size_t len)
{
    char stuck[256] = "", waiting[256] = "";
    for (int r = 0; r < sh->nranks; r++) {
        char *list = atomic_load(&sh->box[r].waiting) ? waiting : stuck;
        size_t n = strlen(list);
        const char *label = labels ? labels[r] : NULL;
        snprintf(list + n, 256 - n, "%s%d%s%s%s", n ? ", " : "", r, label ? " (" : "",
                 label ? label : "", label ? ")" : "");
    }
    snprintf(buf, len, "ranks not in a collective: %s; waiting in a collective: %s",
             stuck[0] ? stuck : "none", waiting[0] ? waiting : "none");
}

void comm_shared_waiting(comm_shared *sh, int rank, int on)
{
    atomic_store(&sh->box[rank].waiting, on);
}

int comm_shared_is_waiting(comm_shared *sh, int rank) { return atomic_load(&sh->box[rank].waiting); }

dps_status comm_shared_exchange_id(comm_shared *sh, int rank, void *id, size_t bytes,
                                   double timeout_ms)
{
    if (bytes > COMM_ID_BYTES)
        return dps_fail(DPS_ERR_RUNTIME, "a rendezvous id of %zu bytes does not fit the %d-byte slot",
                        bytes, COMM_ID_BYTES);
    if (rank == 0) {
        memcpy(sh->id, id, bytes);
        atomic_store(&sh->id_ready, 1);
        return DPS_OK;
    }
    double start = dps_now_ms();
    while (!atomic_load(&sh->id_ready)) {
        if (atomic_load(&sh->abort))
            return dps_fail(DPS_ERR_RUNTIME, "rank %d: aborted while waiting for rank 0's id", rank);
        if (timeout_ms > 0 && dps_now_ms() - start > timeout_ms)
            return dps_fail(DPS_ERR_TIMEOUT, "rank %d: no id from rank 0 within %.0f ms", rank,
                            timeout_ms);
        struct timespec ts = {0, 200 * 1000};
        nanosleep(&ts, NULL);
    }
    memcpy(id, sh->id, bytes);
    return DPS_OK;
}
