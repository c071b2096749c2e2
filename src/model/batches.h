/* The synthetic batches of a run's steps (net_make_batch), made on a
 * helper thread into two pinned host buffers: with `ahead`, step k + 1's
 * while step k runs, so that the devices do not wait for the host between
 * steps; without it, each when it is asked for (the host backend, whose
 * devices are the CPU the thread would take). The data is net_make_batch's
 * either way, bit for bit. */
#ifndef DPS_BATCHES_H
#define DPS_BATCHES_H

#include <pthread.h>
#include <stdint.h>

#include "backend/backend.h"
#include "model/net.h"

typedef struct batches {
    backend *be;
    const net *net;
    uint64_t seed;
    int64_t sample0;
    int samples, steps, ahead;
    int pieces;              /* a step's pieces of `samples` each, stride samples apart */
    int64_t stride;
    float *x[2];             /* step k's in x[k % 2] */
    int32_t *labels[2];
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int asked, made;         /* the last step asked for, and made; -1: none */
    int stop, started;
} batches;

/* Of the global batch of steps 0 .. steps - 1, `pieces` runs of `samples`
 * samples, run p from sample0 + p * stride (a rank's share of each
 * micro-batch), one after another in the step's buffers; with `ahead`,
 * step 0 is made at once. */
dps_status batches_start(batches *b, backend *be, const net *n, uint64_t seed, int64_t sample0,
                         int samples, int pieces, int64_t stride, int steps,
                         int ahead) DPS_MUST_USE;
/* Step `step`'s batch (steps in order), waiting until it is made; with
 * `ahead`, the next step's is begun into the other buffer, the one of step
 * - 1, whose copy to the device must be complete (the step synchronised). */
void batches_get(batches *b, int step, const float **x, const int32_t **labels);
/* Ends the thread (after the batch it is making) and frees the buffers;
 * safe on a zeroed or half-started struct. */
void batches_stop(batches *b);

#endif
