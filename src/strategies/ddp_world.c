/* Joining and leaving the ranks a launcher started, and the watch that
 * ends this rank when the group is over (see ddp_world.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/util.h"
#include "strategies/ddp_world.h"

/* Grace for a rank told to abort to end by itself before it is ended. */
#define ABORT_GRACE_MS 3000.0

/* Ends this rank's collectives; dw->mu held. Rank 0 keeps its connections:
 * the others closing theirs is what wakes its blocked collective (closing
 * its own would deafen it to that), so it only marks the group aborted. */
static void abort_comm(ddp_world *dw)
{
    if (!dw->comm) {
        if (dw->opening) comm_shared_abort(dw->opening); /* a set-up polls it */
        return;
    }
    if (dw->w.rank == 0) comm_shared_abort(dw->comm->sh);
    else comm_abort(dw->comm);
}

/* On the watch's thread: the server says the group is over, or is gone. */
static void on_lost(void *ctx, const char *why)
{
    ddp_world *dw = ctx;
    dps_strlcpy(dw->lost_why, why, sizeof dw->lost_why);
    atomic_store(&dw->lost, 1);
    pthread_mutex_lock(&dw->mu);
    abort_comm(dw);
    pthread_mutex_unlock(&dw->mu);
    if (dw->w.rank == 0) return; /* rank 0 records the failure and ends by itself */
    double end = dps_now_ms() + ABORT_GRACE_MS;
    while (!atomic_load(&dw->ended) && dps_now_ms() < end) {
        struct timespec ts = {0, 10000000L};
        nanosleep(&ts, NULL);
    }
    if (atomic_load(&dw->ended)) return;
    fprintf(stderr, "dpscale: rank %d: ending: %s\n", dw->w.rank, why); /* hung in a step */
    _exit(1);
}

/* On the watch's thread: the step this rank runs, whether it waits. */
static int step_state(void *ctx, int *step)
{
    ddp_world *dw = ctx;
    int sig = dps_interrupted();
    if (sig && !atomic_exchange(&dw->told_interrupt, 1)) { /* a launcher ends the job */
        char why[128];
        snprintf(why, sizeof why, "rank %d (pid %d) got %s: the launcher ended the job",
                 dw->w.rank, (int)getpid(), dps_signal_name(sig));
        store_abort(dw->store, why);
        pthread_mutex_lock(&dw->mu);
        abort_comm(dw);
        pthread_mutex_unlock(&dw->mu);
    }
    *step = atomic_load(&dw->beat.step);
    pthread_mutex_lock(&dw->mu);
    int waiting = dw->comm ? comm_shared_is_waiting(dw->comm->sh, dw->w.rank) : dw->ended_waiting;
    pthread_mutex_unlock(&dw->mu);
    return waiting;
}

static void count_nodes(ddp_world *dw)
{
    dw->nnodes = 0;
    for (int r = 0; r < dw->w.size; r++) {
        int n = 0;
        while (n < r && strcmp(dw->members[n].host, dw->members[r].host) != 0) n++;
        dw->node_of[r] = n < r ? dw->node_of[n] : dw->nnodes++;
    }
}

static dps_status join(ddp_world *dw, double timeout_ms)
{
    const world *w = &dw->w;
    if (w->rank == 0) DPS_TRY(store_server_start(w->port, w->size, timeout_ms, &dw->server));
    DPS_TRY(store_connect(w->addr, w->port, w->rank, w->size, timeout_ms, &dw->store));
    DPS_TRY(store_roster(dw->store, dw->members, w->size));
    count_nodes(dw);
    if (dw->nnodes > 1) store_route_past_loopback(dw->store, dw->members, w->size);
    return store_watch(dw->store, step_state, on_lost, dw);
}

dps_status ddp_world_new(const world *w, ddp_world **out)
{
    ddp_world *dw = calloc(1, sizeof *dw);
    if (!dw) return dps_fail(DPS_ERR_RUNTIME, "rank %d: out of host memory", w->rank);
    dw->w = *w;
    pthread_mutex_init(&dw->mu, NULL);
    ranks_beat_step(&dw->beat, -1);
    *out = dw;
    return DPS_OK;
}

dps_status ddp_world_join(ddp_world *dw, double timeout_s)
{
    if (dw->joined > 0) return DPS_OK;
    if (dw->joined < 0) return dps_fail_copy(dw->join_rc, dw->join_why);
    dps_status rc = join(dw, timeout_s * 1e3);
    dw->joined = rc ? -1 : 1;
    if (!rc) return DPS_OK;
    dw->join_rc = rc;
    dps_strlcpy(dw->join_why, dps_errmsg(), sizeof dw->join_why);
    if (dw->server) { /* the failure as the server saw it names the missing ranks */
        int asked;
        char seen_why[DPS_ERRMSG_MAX];
        dps_status seen = store_server_failure(dw->server, &asked, seen_why, sizeof seen_why);
        if (seen) {
            dw->join_rc = seen;
            dps_strlcpy(dw->join_why, seen_why, sizeof dw->join_why);
        }
    }
    return dps_fail_copy(dw->join_rc, dw->join_why);
}

int ddp_world_one_host(const ddp_world *dw) { return dw->nnodes == 1; }

int ddp_world_nodes(const ddp_world *dw, world_nodes *out)
{
    if (!dw || dw->joined <= 0) return 0;
    *out = (world_nodes){.nranks = dw->w.size, .nnodes = dw->nnodes};
    for (int r = 0; r < dw->w.size; r++) {
        world_place *p = &out->rank[r];
        p->node = dw->node_of[r];
        dps_strlcpy(p->host, dw->members[r].host, sizeof p->host);
        dps_strlcpy(p->addr, dw->members[r].addr, sizeof p->addr);
        dps_strlcpy(p->nic, dw->members[r].nic, sizeof p->nic);
        dps_strlcpy(p->device, dw->device[r], sizeof p->device);
    }
    dps_strlcpy(out->collectives, dw->comm_used, sizeof out->collectives);
    return 1;
}

void ddp_world_note_devices(ddp_world *dw, const dev_stats *dev)
{
    for (int r = 0; r < dw->w.size; r++)
        if (dev[r].name[0]) dps_strlcpy(dw->device[r], dev[r].name, sizeof dw->device[r]);
}

void ddp_world_set_comm(ddp_world *dw, comm *c)
{
    pthread_mutex_lock(&dw->mu);
    dw->ended_waiting = !c && dw->comm && comm_shared_is_waiting(dw->comm->sh, dw->w.rank);
    dw->comm = c;
    dw->opening = NULL;
    if (atomic_load(&dw->lost)) abort_comm(dw); /* the word to abort came while it was opened */
    pthread_mutex_unlock(&dw->mu);
}

void ddp_world_opening(ddp_world *dw, comm_shared *sh)
{
    pthread_mutex_lock(&dw->mu);
    dw->opening = sh;
    if (atomic_load(&dw->lost)) abort_comm(dw);
    pthread_mutex_unlock(&dw->mu);
}

void ddp_world_leave(ddp_world *dw, double timeout_s)
{
    if (!dw) return;
    atomic_store(&dw->ended, 1);
    if (dw->store) store_finish(dw->store);
    if (dw->server) store_server_wait_ended(dw->server, timeout_s * 1e3);
    store_close(dw->store);
    store_server_stop(dw->server);
    pthread_mutex_destroy(&dw->mu);
    free(dw);
}
