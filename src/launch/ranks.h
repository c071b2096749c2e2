/* The rank launcher: one way to run a group of processes that work
 * together (ddp's ranks, comm-bench's, the tests'). It forks one child per
 * rank, each dying with the parent, and watches them from the parent: a
 * rank that exits non-zero or is killed, a step (or the set-up) longer than
 * the timeout, or SIGINT/SIGTERM to the parent ends every rank, and one
 * message says which rank and how (an injected fault named as such). It
 * reaps every child. The parent never opens a device. */
#ifndef DPS_RANKS_H
#define DPS_RANKS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/names.h"

typedef enum rank_state { RANK_NEW, RANK_RUNNING, RANK_DONE, RANK_FAILED } rank_state;

/* What a rank tells the launcher as it runs (memory shared with the parent). */
typedef struct rank_beat {
    _Atomic int state;
    _Atomic int step;         /* step being run; -1 while setting up */
    _Atomic int64_t beat_us;  /* dps_now_us() when that step (or the set-up) began */
} rank_beat;

/* In a rank: step `step` begins now. */
void ranks_beat_step(rank_beat *b, int step);

/* A fault to inject (--inject-fault): rank `rank` exits with status 3
 * (FAULT_EXIT) or hangs (FAULT_HANG) at step `step`. */
typedef struct rank_fault {
    int rank, step;
    dps_fault kind;
} rank_fault;

/* In rank `rank` at step `step`: the fault, if it is this rank's and step's
 * (a hang lasts until the launcher ends the group). f may be NULL. */
void ranks_inject_fault(const rank_fault *f, int rank, int step);

typedef struct ranks_spec {
    int nranks;
    /* In rank process `rank`: runs it; the return is its exit status. */
    int (*rank_main)(void *ctx, int rank, rank_beat *beat);
    void *ctx;
    double timeout_s;         /* a step or set-up longer than this ends the group; 0: none */
    /* In the parent (each may be NULL): */
    /* once every rank is forked, before the group is watched: where the
     * parent starts its threads, which no rank may inherit mid-lock */
    dps_status (*started)(void *ctx);
    void (*abort)(void *ctx); /* wakes ranks blocked in collectives before they are killed */
    /* more about a timeout, appended to its message after "; " */
    void (*explain_timeout)(void *ctx, char *buf, size_t len);
    const rank_fault *fault;  /* the fault the ranks inject, named in the message; NULL: none */
    /* the failure a rank reported itself (preferred to an exit status); DPS_OK if none */
    dps_status (*reported)(void *ctx, char *buf, size_t len);
} ranks_spec;

/* Runs the group to the end. DPS_OK when every rank exited 0; otherwise the
 * first failure with a one-line message (dps_errmsg). */
dps_status ranks_run(const ranks_spec *spec) DPS_MUST_USE;

#endif
