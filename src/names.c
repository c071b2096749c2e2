/* The names of the phases and links (see names.h), as results columns and
 * NVTX ranges spell them. */
#include "names.h"

const char *const dps_phase_names[PH_COUNT] = {
    "load", "replicate", "scatter", "forward", "gather", "loss",
    "backward", "reduce", "allreduce", "allreduce_exposed", "optimizer",
};

const char *const dps_link_names[LINK_COUNT] = {"h2d", "d2h", "p2p_sent", "p2p_recv"};
