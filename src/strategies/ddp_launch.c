/* The parent's side of the ddp mode (see ddp.h): maps the shared region,
 * runs the ranks through the rank launcher, explains a timeout by what
 * each rank was doing, and turns the ranks' records into one train_result.
 * The anonymous mapping leaves nothing in /dev/shm. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "strategies/ddp.h"
#include "core/util.h"

typedef struct ddp_group {
    const dps_config *cfg;
    ddp_shared *sh;
} ddp_group;

static int rank_entry(void *ctx, int rank, rank_beat *beat)
{
    ddp_group *g = ctx;
    return ddp_rank_main(g->cfg, g->sh, rank, beat, NULL) ? 1 : 0;
}

static void abort_group(void *ctx)
{
    ddp_group *g = ctx;
    comm_shared_abort(ddp_shared_comm(g->sh));
}

/* Which ranks wait in a collective and which do not, with their phases. */
static void explain_timeout(void *ctx, char *buf, size_t len)
{
    ddp_group *g = ctx;
    const char *phases[DPS_MAX_DEVICES];
    for (int r = 0; r < g->cfg->ngpus; r++)
        phases[r] = dps_phase_names[atomic_load(&g->sh->rank[r].phase)];
    comm_shared_explain_waiting(ddp_shared_comm(g->sh), phases, buf, len);
}

/* The rank that failed first and said why (not one that failed because of it). */
static dps_status reported(void *ctx, char *buf, size_t len)
{
    ddp_group *g = ctx;
    for (int r = 0; r < g->cfg->ngpus; r++) {
        ddp_report *rep = &g->sh->rank[r];
        if (rep->status && !rep->secondary) {
            dps_strlcpy(buf, rep->error, len);
            return rep->status;
        }
    }
    return DPS_OK;
}

dps_status ddp_train(const dps_config *cfg, ddp_world *dw, train_result *res)
{
    if (cfg->world.launcher != WORLD_NONE && !dw)
        return dps_fail(DPS_ERR_RUNTIME, "ddp under %s: ddp_train got no joined world "
                        "(cli_join_world makes it): dpscale's bug, please report it",
                        world_launcher_name(cfg->world.launcher));
    if (cfg->world.launcher != WORLD_NONE) return ddp_launched_train(cfg, dw, res);
    ddp_shared layout;
    ddp_shared_layout(cfg, &layout);
    void *mem = mmap(NULL, layout.total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED)
        return dps_fail(DPS_ERR_RUNTIME, "cannot map %zu bytes of shared memory for the ranks: %s",
                        layout.total, strerror(errno));
    ddp_shared *sh = mem;
    *sh = layout;
    comm_shared_init(ddp_shared_comm(sh), cfg->ngpus);
    ddp_group g = {cfg, sh};
    rank_fault fault = {cfg->fault_rank, cfg->fault_step, cfg->fault_kind};
    ranks_spec spec = {.nranks = cfg->ngpus, .rank_main = rank_entry, .ctx = &g,
                       .timeout_s = cfg->timeout_s, .abort = abort_group,
                       .explain_timeout = explain_timeout, .reported = reported,
                       .fault = cfg->fault_rank >= 0 ? &fault : NULL};
    dps_status rc = ranks_run(&spec);
    if (rc) dps_strlcpy(res->error, dps_errmsg(), sizeof res->error);
    ddp_collect(cfg, sh, res);
    if (!rc) rc = ddp_scalers_agree(sh, res->steps_done);
    if (!rc) rc = ddp_copy_params(sh, res);
    munmap(mem, layout.total);
    return rc ? dps_fail_copy(rc, res->error[0] ? res->error : dps_errmsg()) : DPS_OK;
}
