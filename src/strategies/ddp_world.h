/* The ranks a launcher started, joined for the whole process: global rank
 * 0 serves the store (comm/store.h), every rank connects, says where it
 * runs and gets the roster (which rank on which host), and a thread
 * watches the group: a rank gone on any host aborts every other rank's
 * collectives. Each configuration then trains in it (ddp_launched_shm.c on
 * one host's shared memory, ddp_launched_store.c through the store and Gloo
 * or NCCL). */
#ifndef DPS_DDP_WORLD_H
#define DPS_DDP_WORLD_H

#include <pthread.h>

#include "comm/comm.h"
#include "comm/store.h"
#include "config/config.h"
#include "config/world.h"
#include "launch/ranks.h"

typedef struct ddp_world {
    world w;
    store_server *server;   /* global rank 0's; NULL elsewhere */
    dps_store *store;
    store_member members[DPS_MAX_DEVICES];
    int nnodes;             /* distinct hosts in the roster */
    int node_of[DPS_MAX_DEVICES]; /* each rank's host, in order of first appearance */
    int runs;               /* configurations trained so far (their keys' prefix) */
    char comm_used[16];     /* --comm the last of them resolved to ("shm", "gloo", "nccl") */
    char device[DPS_MAX_DEVICES][128]; /* each rank's device, as its records named it */
    int joined;             /* 1 joined, -1 failed to (join_why says why) */
    dps_status join_rc;
    char join_why[DPS_ERRMSG_MAX];
    rank_beat beat;         /* the step this rank runs, sent to rank 0 */
    pthread_mutex_t mu;     /* guards comm */
    comm *comm;             /* the running configuration's collectives */
    comm_shared *opening;   /* theirs while they are set up (comm_open), or NULL */
    int ended_waiting;      /* the last ones ended with this rank blocked in one */
    _Atomic int ended;      /* this rank's work is done: the watch need not end it */
    _Atomic int lost;       /* the group is over (why in lost_why) */
    _Atomic int told_interrupt; /* a SIGINT/SIGTERM here was told to the group */
    char lost_why[DPS_ERRMSG_MAX];
} ddp_world;

/* The world w describes, not joined yet. */
dps_status ddp_world_new(const world *w, ddp_world **out) DPS_MUST_USE;
/* Joins the ranks (the first configuration does, so that a rank that never
 * comes is that configuration's failure): waits for every rank up to
 * timeout_s. Once joined, DPS_OK at once; once failed, that failure. */
dps_status ddp_world_join(ddp_world *dw, double timeout_s) DPS_MUST_USE;
/* Each rank's device name from the records rank 0 collected (rank 0). */
void ddp_world_note_devices(ddp_world *dw, const dev_stats *dev);
/* Every rank on one host. */
int ddp_world_one_host(const ddp_world *dw);
/* Where the joined ranks run, for meta.json (results_write_meta); 0 (and
 * *out untouched) when dw is NULL or has not joined. */
int ddp_world_nodes(const ddp_world *dw, world_nodes *out);
/* The running configuration's collectives, for the watch to abort (NULL: none). */
void ddp_world_set_comm(ddp_world *dw, comm *c);
/* The region of the collectives being set up (before ddp_world_set_comm):
 * the watch raises its abort flag, which their set-up polls, so that a
 * peer lost before the collectives exist ends this rank's set-up too. */
void ddp_world_opening(ddp_world *dw, comm_shared *sh);
/* This rank is done; rank 0 waits for the others (up to timeout_s), then
 * ends the store. NULL is a no-op. */
void ddp_world_leave(ddp_world *dw, double timeout_s);

#endif
