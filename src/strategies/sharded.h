/* Sharded data parallel, a rank's model states split over the ranks by
 * units (net.h: whole layers), each rank owning chunk `rank` of every unit
 * (comm_chunk_range): ZeRO-1 shards the optimizer state (gradients
 * all-reduced in ddp's buckets, each rank updating its chunks, parameters
 * all-gathered after the step, as ZeroRedundancyOptimizer); ZeRO-2 also the
 * gradients (each unit's reduce-scattered as backward completes it, into
 * a gradient shard); FSDP's full shard also the parameters (each unit
 * all-gathered before its forward and again before its backward, the next
 * unit's backward gather prefetched, as BACKWARD_PRE). ddp.c runs the rank
 * and calls these where ddp's step would all-reduce and update. */
#ifndef DPS_SHARDED_H
#define DPS_SHARDED_H

#include "comm/comm.h"
#include "config/config.h"
#include "model/net.h"

#define SHARD_MAX_SLOTS 16

/* What is sharded: the optimizer state, and the gradients, and the parameters. */
typedef enum shard_level { SHARD_NONE, SHARD_OPTIMIZER, SHARD_GRADIENTS, SHARD_PARAMETERS } shard_level;

/* A buffer of one unit at a time: gathered parameters, or gradients until
 * their reduce-scatter has run. */
typedef struct shard_slot {
    dps_buf buf;
    be_event *ev;      /* recorded before its collective, which starts after it */
    int unit;          /* the unit it holds; -1: none */
    int ticket;        /* its collective's (comm_wait_ticket); -1: none pending */
    int open;          /* gradients: the unit's backward has begun, not yet reduce-scattered */
    int issue;         /* its collective's place in the step's issued list; -1: none */
} shard_slot;

/* One async collective of a step, in issue order, for the trace. */
typedef struct shard_issue {
    int unit;
    int phase;         /* the dps_phase that issued it */
    int micro;         /* the micro-step that issued it */
    int ready_set;     /* ready was recorded this step */
    be_event *ready;   /* on the compute stream: its gradients were ready (reduce-scatter),
                          or the compute needed its parameters (all-gather) */
} shard_issue;

typedef struct shard_rank {
    const dps_config *cfg;
    backend *be;
    be_stream *st;
    comm *comm;
    const net *net;
    int rank, nranks, dev;
    shard_level level;
    size_t *own_lo, *own_hi;  /* per unit: this rank's chunk, offsets into the unit */
    size_t *shard_at;         /* per unit: where its chunk lies in the shards */
    size_t shard_n;           /* floats of this rank's chunks */
    dps_buf param_shard;      /* full shard: the parameters' chunks (else the flat params) */
    dps_buf grad_shard;       /* ZeRO-2 and full shard: the summed gradients' chunks */
    dps_buf opt_state[2];     /* the optimizer state's chunks */
    shard_slot pslot[SHARD_MAX_SLOTS], gslot[SHARD_MAX_SLOTS];
    int npslots, ngslots;
    int next_rs;              /* backward: units at and below it are not reduce-scattered yet */
    int micro;                /* the running micro-step (ddp.c sets it): its first copies
                                 into the gradient shard, later ones add */
    be_event **unit_ev;       /* ZeRO-1 and ZeRO-2: per unit, before its parameters' all-gather */
    net_window window;
    shard_issue *issued;      /* the step's async collectives, in issue order */
    int nissued, max_issued;
} shard_rank;

/* The level of a mode (SHARD_NONE: dp and ddp). */
shard_level shard_level_of(dps_mode m);
/* Floats of rank's chunks of every unit of n, over nranks (its shards' size). */
size_t shard_floats(const net *n, int nranks, int rank);
/* The most async collectives a step of the level issues on a model of
 * nunits units and nbk buckets, accum micro-steps (no_sync: ddp's). */
int shard_max_collectives(shard_level level, int nunits, int nbk, int accum, int no_sync);

/* Lays out the shards and allocates what the level holds; params and
 * grads are the flat buffers ddp.c made (only what the level keeps whole). */
dps_status shard_open(shard_rank *S) DPS_MUST_USE;
void shard_close(shard_rank *S);
/* The initial parameters (host, every rank the same) into the shard. */
dps_status shard_init_params(shard_rank *S, const float *h_params) DPS_MUST_USE;
/* Backward of micro-step `micro` begins (ZeRO-2, full shard). */
void shard_backward_begin(shard_rank *S, int micro);
/* Backward's hook: gradients at offsets >= ready_lo are final: the units
 * above it reduce-scattered (ZeRO-2, full shard). */
dps_status shard_grad_ready(shard_rank *S, size_t ready_lo) DPS_MUST_USE;
/* After backward: the units left reduce-scattered and every reduce-scatter
 * waited for, and the gradient shard complete. */
dps_status shard_grads_done(shard_rank *S) DPS_MUST_USE;
/* The optimizer on this rank's chunks (params and grads: the flat buffers
 * where the level keeps them whole), then ZeRO-1's and ZeRO-2's parameter
 * all-gathers. */
dps_status shard_optimizer(shard_rank *S, float *params, const float *grads, dps_opt_hparams hp)
    DPS_MUST_USE;
/* The step's collectives are done (after comm_sync): no ticket is pending. */
void shard_step_end(shard_rank *S);
/* Full shard: every unit gathered in turn into h_params (collective: every
 * rank calls it; rank 0 copies). */
dps_status shard_gather_all(shard_rank *S, float *h_params) DPS_MUST_USE;

#endif
