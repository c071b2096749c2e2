/* The launcher's environment read into a world (see world.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "config/world.h"

/* The variables of one launcher; NULL: that launcher does not say. */
typedef struct launcher_vars {
    world_launcher id;
    const char *rank, *size, *local_rank, *local_size, *node;
} launcher_vars;

static const launcher_vars launchers[] = {
    {WORLD_TORCHRUN, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK"},
    {WORLD_OPENMPI, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE", NULL},
    {WORLD_MPICH, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", NULL},
    {WORLD_SLURM, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE",
     "SLURM_NODEID"},
};
#define NLAUNCHERS ((int)(sizeof launchers / sizeof launchers[0]))

const char *world_launcher_name(world_launcher l)
{
    static const char *const names[] = {"fork", "torchrun", "Open MPI", "MPICH", "Slurm"};
    return names[l];
}

/* name's whole number in [lo, hi] into *out; a missing variable is -1 when
 * optional, else refused. */
static dps_status read_int(world_getenv get, world_launcher l, const char *name, int lo, int hi,
                           int required, int *out)
{
    const char *text = name ? get(name) : NULL;
    *out = -1;
    if (!text && !required) return DPS_OK;
    if (!text)
        return dps_fail(DPS_ERR_USAGE, "%s is not set, though %s's other variables are: start "
                        "dpscale with the launcher itself, or unset them to let dpscale fork its "
                        "ranks", name, world_launcher_name(l));
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (!*text || *end || errno || v < lo || v > hi)
        return dps_fail(DPS_ERR_USAGE, "%s=%s: expected a whole number from %d to %d", name, text,
                        lo, hi);
    *out = (int)v;
    return DPS_OK;
}

static dps_status read_ranks(world *w, const launcher_vars *v, world_getenv get)
{
    DPS_TRY(read_int(get, v->id, v->size, 1, 1 << 20, 1, &w->size));
    DPS_TRY(read_int(get, v->id, v->rank, 0, 1 << 20, 1, &w->rank));
    DPS_TRY(read_int(get, v->id, v->local_size, 1, 1 << 20, 0, &w->local_size));
    DPS_TRY(read_int(get, v->id, v->local_rank, 0, 1 << 20, 1, &w->local_rank));
    DPS_TRY(read_int(get, v->id, v->node, 0, 1 << 20, 0, &w->node));
    if (w->rank >= w->size)
        return dps_fail(DPS_ERR_USAGE, "%s=%d is not below %s=%d", v->rank, w->rank, v->size,
                        w->size);
    if (w->local_size > w->size)
        return dps_fail(DPS_ERR_USAGE, "%s=%d is above %s=%d", v->local_size, w->local_size,
                        v->size, w->size);
    if (w->local_size > 0 && w->local_rank >= w->local_size)
        return dps_fail(DPS_ERR_USAGE, "%s=%d is not below %s=%d", v->local_rank, w->local_rank,
                        v->local_size, w->local_size);
    return DPS_OK;
}

/* MASTER_ADDR, and the port dpscale binds: DPSCALE_PORT, else MASTER_PORT
 * (29500, PyTorch's, when not set), moved by WORLD_PORT_OFFSET when
 * torchrun's agent serves MASTER_PORT itself. */
static dps_status read_address(world *w, world_getenv get)
{
    const char *addr = get("MASTER_ADDR");
    if (!addr || !*addr)
        return dps_fail(DPS_ERR_USAGE, "MASTER_ADDR is not set: under %s, export MASTER_ADDR=<the "
                        "host of rank 0> (and MASTER_PORT) to every rank",
                        world_launcher_name(w->launcher));
    if (strlen(addr) >= sizeof w->addr)
        return dps_fail(DPS_ERR_USAGE, "MASTER_ADDR: longer than %d characters", WORLD_ADDR_MAX - 1);
    dps_strlcpy(w->addr, addr, sizeof w->addr);
    if (get("DPSCALE_PORT")) return read_int(get, w->launcher, "DPSCALE_PORT", 1, 65535, 1, &w->port);
    const char *agent = get("TORCHELASTIC_USE_AGENT_STORE");
    int served = agent && (strcmp(agent, "True") == 0 || strcmp(agent, "true") == 0 ||
                           strcmp(agent, "1") == 0);
    if (!get("MASTER_PORT")) {
        w->port = 29500 + (served ? WORLD_PORT_OFFSET : 0);
        return DPS_OK;
    }
    DPS_TRY(read_int(get, w->launcher, "MASTER_PORT", 1, 65535 - WORLD_PORT_OFFSET, 1, &w->port));
    w->port += served ? WORLD_PORT_OFFSET : 0;
    return DPS_OK;
}

dps_status world_from_env(world *w, world_getenv get)
{
    memset(w, 0, sizeof *w);
    w->launcher = WORLD_NONE;
    w->local_size = w->node = -1;
    for (int i = 0; i < NLAUNCHERS; i++) {
        const launcher_vars *v = &launchers[i];
        if (!get(v->rank) && !get(v->local_rank)) continue;
        w->launcher = v->id;
        DPS_TRY(read_ranks(w, v, get));
        return read_address(w, get);
    }
    w->size = 1;
    return DPS_OK;
}
