/* Where this process stands in a job that a launcher started: its rank,
 * the world's size, its rank and the rank count on its node, its node, and
 * where the group meets, read from the launcher's environment (torchrun,
 * Open MPI, MPICH/PMI, Slurm; checked in that order, since torchrun inside
 * srun leaves SLURM_PROCID naming the node, not the worker); and, once the
 * ranks have joined, the hosts they run on (world_nodes). */
#ifndef DPS_WORLD_H
#define DPS_WORLD_H

#include "backend/backend.h"
#include "core/err.h"

typedef enum world_launcher {
    WORLD_NONE,     /* no launcher's variables: dpscale forks its own ranks */
    WORLD_TORCHRUN, /* RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK */
    WORLD_OPENMPI,  /* OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE */
    WORLD_MPICH,    /* PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS */
    WORLD_SLURM,    /* SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID */
} world_launcher;

/* dpscale's own port when the launcher serves MASTER_PORT itself (torchrun's
 * agent store): DPSCALE_PORT, else MASTER_PORT + this. */
#define WORLD_PORT_OFFSET 1
#define WORLD_ADDR_MAX 256

typedef struct world {
    world_launcher launcher;
    int rank, size;             /* global */
    int local_rank, local_size; /* on this node; local_size -1: not said */
    int node;                   /* -1: not said */
    char addr[WORLD_ADDR_MAX];  /* MASTER_ADDR: where global rank 0 listens */
    int port;                   /* the port dpscale's rendezvous uses */
} world;

/* The joined ranks' hosts, as meta.json's "nodes" lists them: per rank
 * where it runs, and the collectives the last configuration ran. Plain data,
 * filled by the layer that joined the ranks, read by meta.json's writer. */
#define WORLD_HOST_MAX 64
typedef struct world_place {
    int node;                   /* its host: 0, 1, ... in order of first appearance */
    char host[WORLD_HOST_MAX];  /* that host's name */
    char addr[64];              /* the address rank 0's store saw it at */
    char nic[32];               /* that address's interface ("eth0"; "unknown") */
    char device[128];           /* its device as its records named it; "": none did */
} world_place;

typedef struct world_nodes {
    int nranks, nnodes;
    world_place rank[DPS_MAX_DEVICES];
    char collectives[16];       /* --comm the last configuration resolved to; "": none ran */
} world_nodes;

/* The environment as a lookup (getenv, or a table in the tests). */
typedef const char *(*world_getenv)(const char *name);

/* The world from the environment. No launcher's variables: w->launcher is
 * WORLD_NONE and DPS_OK. A variable missing, not a whole number, out of
 * range or inconsistent with another: DPS_ERR_USAGE naming it. */
dps_status world_from_env(world *w, world_getenv get) DPS_MUST_USE;

const char *world_launcher_name(world_launcher l);

#endif
