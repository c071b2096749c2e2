/* Launched ranks that share no memory (--comm gloo across hosts, or nccl
 * under a launcher): each rank trains in a private region, ranks other
 * than 0 send their records to global rank 0 through the store when they
 * end, and rank 0 collects them as the fork launcher's parent does (see
 * ddp_world.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/util.h"
#include "strategies/ddp.h"

static dps_status make_private(const dps_config *cfg, ddp_shared **out)
{
    ddp_shared layout;
    ddp_shared_layout(cfg, &layout);
    void *mem = mmap(NULL, layout.total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED)
        return dps_fail(DPS_ERR_RUNTIME, "rank %d: out of host memory for its records (%zu bytes)",
                        cfg->world.rank, layout.total);
    ddp_shared *sh = mem;
    *sh = layout;
    comm_shared_init(ddp_shared_comm(sh), cfg->ngpus);
    *out = sh;
    return DPS_OK;
}

/* This rank's part of the configuration, its keys apart from the others'. */
static dps_status train_here(const dps_config *cfg, ddp_world *dw, ddp_shared *sh)
{
    char prefix[32];
    snprintf(prefix, sizeof prefix, "c%d/", dw->runs++);
    store_set_prefix(dw->store, prefix);
    if (dw->server) /* rank 0: the records it takes now, the keys it may drop */
        store_server_begin(dw->server, prefix, ddp_shared_pack_bytes(sh));
    dps_status rc = ddp_rank_main(cfg, sh, dw->w.rank, &dw->beat, dw);
    ddp_report *me = &sh->rank[dw->w.rank];
    if (rc && !me->secondary) store_abort(dw->store, me->error); /* the others wait for it */
    return rc;
}

/* Where rank r's records go in the store. */
static void report_key(int r, char *buf, size_t len) { snprintf(buf, len, "report/%d", r); }

dps_status ddp_launched_store_rank(const dps_config *cfg, ddp_world *dw)
{
    ddp_shared *sh;
    dps_status made = make_private(cfg, &sh);
    if (made) {
        store_abort(dw->store, dps_errmsg()); /* the others would wait for this rank */
        return made;
    }
    dps_status rc = train_here(cfg, dw, sh);
    char why[DPS_ERRMSG_MAX], key[32];
    dps_strlcpy(why, dps_errmsg(), sizeof why);
    size_t len;
    void *packed = ddp_shared_pack(sh, dw->w.rank, &len);
    report_key(dw->w.rank, key, sizeof key);
    dps_status sent = packed ? store_post(dw->store, key, packed, len)
                             : dps_fail(DPS_ERR_RUNTIME, "rank %d: out of host memory for its "
                                        "records", dw->w.rank);
    free(packed);
    munmap(sh, sh->total);
    if (!rc && sent) store_abort(dw->store, dps_errmsg()); /* rank 0 waits for these records */
    return rc ? dps_fail_copy(rc, why) : sent;
}

/* Rank r's records into rank 0's region. */
static dps_status fetch_report(ddp_world *dw, ddp_shared *sh, int r, double timeout_ms)
{
    char key[32];
    report_key(r, key, sizeof key);
    void *val;
    size_t len;
    DPS_TRY(store_get_max(dw->store, key, r, ddp_shared_pack_bytes(sh), &val, &len, timeout_ms));
    dps_status rc = ddp_shared_unpack(sh, r, val, len);
    free(val);
    return rc;
}

/* The failure that explains the run: a rank gone or never arrived (the
 * server saw it), else the first rank that failed on its own, else rank
 * 0's, else a rank whose records did not come; DPS_OK if none. */
static dps_status first_failure(ddp_world *dw, ddp_shared *sh, dps_status own, dps_status missing,
                                const char *missing_why, char *why, size_t len)
{
    int asked = 0;
    dps_status seen = store_server_failure(dw->server, &asked, why, len);
    if (seen && !asked) return seen;
    for (int r = 0; r < dw->w.size; r++)
        if (sh->rank[r].status && !sh->rank[r].secondary) {
            dps_strlcpy(why, sh->rank[r].error, len);
            return sh->rank[r].status;
        }
    if (own) {
        dps_strlcpy(why, sh->rank[0].error, len);
        return own;
    }
    if (missing) dps_strlcpy(why, missing_why, len);
    return missing ? missing : seen;
}

/* A timeout's message ends with the step each rank began last. */
static void explain(ddp_world *dw, dps_status code, char *why, size_t len)
{
    if (code != DPS_ERR_TIMEOUT) return;
    size_t n = strlen(why);
    const char *head = "; last step begun: ";
    if (n + strlen(head) + 40 >= len) return;
    memcpy(why + n, head, strlen(head) + 1);
    n += strlen(head);
    store_server_explain(dw->server, why + n, len - n);
}

dps_status ddp_launched_store_train(const dps_config *cfg, ddp_world *dw, train_result *res)
{
    ddp_shared *sh;
    DPS_TRY(make_private(cfg, &sh));
    dps_status own = train_here(cfg, dw, sh), missing = DPS_OK;
    char missing_why[DPS_ERRMSG_MAX] = "";
    /* the others end about when rank 0 does, one told to abort within seconds:
     * one deadline for all of them */
    double end = dps_now_ms() + (cfg->timeout_s > 0 ? cfg->timeout_s * 1e3 : 1e12);
    for (int r = 1; r < dw->w.size; r++) {
        double left = end - dps_now_ms();
        dps_status got = fetch_report(dw, sh, r, left > 1.0 ? left : 1.0);
        if (got && !missing) {
            missing = got;
            dps_strlcpy(missing_why, dps_errmsg(), sizeof missing_why);
        }
    }
    char why[DPS_ERRMSG_MAX];
    dps_status rc = first_failure(dw, sh, own, missing, missing_why, why, sizeof why);
    explain(dw, rc, why, sizeof why);
    ddp_collect(cfg, sh, res);
    ddp_world_note_devices(dw, res->dev);
    if (rc) {
        dps_strlcpy(res->error, why, sizeof res->error);
        munmap(sh, sh->total);
        return dps_fail_copy(rc, why);
    }
    rc = ddp_scalers_agree(sh, res->steps_done);
    if (!rc) rc = ddp_copy_params(sh, res);
    munmap(sh, sh->total);
    return rc;
}
