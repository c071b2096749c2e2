/* The phases of a training step and the links bytes cross: the names every
 * layer shares (timers, NVTX ranges, results columns), with no dependency. */
#ifndef DPS_NAMES_H
#define DPS_NAMES_H

typedef enum dps_phase {
    PH_LOAD, PH_REPLICATE, PH_SCATTER, PH_FORWARD, PH_GATHER, PH_LOSS,
    PH_BACKWARD, PH_REDUCE, PH_ALLREDUCE, PH_ALLREDUCE_EXPOSED, PH_OPTIMIZER, PH_COUNT
} dps_phase;
extern const char *const dps_phase_names[PH_COUNT];

/* Bytes a device moved, by the link they crossed. */
typedef enum dps_link { LINK_H2D, LINK_D2H, LINK_P2P_SENT, LINK_P2P_RECV, LINK_COUNT } dps_link;
extern const char *const dps_link_names[LINK_COUNT];

#endif
