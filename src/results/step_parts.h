/* Where a step's time went, from the records that time the phases: the
 * partition of each rank's step into parts that sum to the step, and each
 * traced collective split into waiting for the last peer and moving bytes,
 * with its ready mark's lateness against the other ranks' (stragglers).
 * Read by the CSV writers (partition.csv, buckets.csv) and the trace. */
#ifndef DPS_STEP_PARTS_H
#define DPS_STEP_PARTS_H

#include "config/config.h"

/* The parts of one rank's step, in partition.csv's order; they sum to the
 * step (step_ms: the slowest rank's, which every rank's next step waits for). */
typedef enum {
    PART_COMPUTE,       /* forward, loss, backward, unscale, optimizer: no collective running */
    PART_OVERLAP,       /* compute while a collective ran beside it */
    PART_COMM_EXPOSED,  /* the collectives' wait after backward; dp's replicate and reduce */
    PART_COPIES,        /* the batch's load; dp's scatter and gather */
    PART_WAIT_PEER,     /* idle: ddp, waiting for the slowest rank to end the step; dp, a
                           replica's device waiting for device 0's serial part (its gather,
                           loss, unscale and optimizer; at most the replica's idle time) */
    PART_IDLE_HOST,     /* idle: the rest, no phase on the device (the host's gaps) */
    PART_COUNT
} step_part;

extern const char *const step_part_names[PART_COUNT]; /* "compute", ..., "idle_host" */

/* Timed step k of rank: its parts in ms, summing to res->step_ms[k]. */
void step_partition(const dps_config *c, const train_result *res, int k, int rank,
                    double out[PART_COUNT]);

/* A traced collective: span i of traced step t on rank, against the same
 * span on every rank. Ranks leave a collective together, so the rank that
 * arrived last ran it the shortest: that is the transfer; a rank's excess
 * over it is its wait for the last peer. late_ms: how much later than the
 * other ranks' median this rank's bucket was ready, each time after its own
 * step began (the previous step's collectives end every rank's step
 * together). NaN on one rank, or where another rank has no span i. */
typedef struct span_parts {
    double wait_ms, transfer_ms, late_ms;
    double ready_step_ms; /* when the bucket was ready after this rank's step began */
} span_parts;

span_parts step_span_parts(const timeline *tl, int t, int rank, int i);

#endif
