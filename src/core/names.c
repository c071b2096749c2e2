/* The shared words (see names.h): phases, links and a configuration's
 * choices, as results, NVTX ranges and the command line spell them. */
#include <stddef.h>

#include "core/names.h"

const char *const dps_phase_names[PH_COUNT] = {
    "load", "replicate", "scatter", "forward", "gather", "loss",
    "backward", "reduce", "allreduce", "allreduce_exposed", "unscale", "optimizer",
};

const char *const dps_link_names[LINK_COUNT] = {"h2d", "d2h", "p2p_sent", "p2p_recv"};

const char *const dps_mode_names[MODE_COUNT] = {"dp", "ddp", "zero1", "zero2", "fsdp"};
const char *const dps_precision_names[PREC_COUNT] = {"fp32", "bf16", "fp16"};
const char *const dps_optimizer_names[OPT_COUNT] = {"sgd", "adamw"};
const char *const dps_fault_names[FAULT_COUNT] = {"exit", "hang"};
const char *const dps_dp_comm_names[DPCOMM_COUNT] = {"auto", "nccl", "p2p"};
const char *const dps_dp_impl_names[DPIMPL_COUNT] = {"torch", "lean"};
const char *const dps_tf32_names[TF32_COUNT] = {"default", "on", "off"};
const char *const dps_launch_names[LAUNCH_COUNT] = {"auto", "fork", "env"};
const char *const dps_comm_names[DPS_COMM_COUNT] = {"auto", "shm", "gloo", "nccl"};

const char *dps_comm_impl(dps_comm c)
{
    return c != DPS_COMM_AUTO && (unsigned)c < DPS_COMM_COUNT ? dps_comm_names[c] : NULL;
}
const char *const dps_scaling_names[2] = {"weak", "strong"};

const char *dps_mode_name(dps_mode m) { return dps_mode_names[m]; }
const char *dps_precision_name(dps_precision p) { return dps_precision_names[p]; }
const char *dps_optimizer_name(dps_optimizer o) { return dps_optimizer_names[o]; }
