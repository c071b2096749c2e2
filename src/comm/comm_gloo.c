/* Gloo's TCP collectives between CPU ranks on any hosts, behind the comm
 * table (see comm_impl.h): the ranks meet through the group's store
 * (store.h) and Gloo (gloo_shim.h) moves the host backend's buffers. Gloo
 * has nothing stream-ordered: comm_async.c runs the async ones on its thread. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm_impl.h"
#include "comm/gloo_shim.h"
#include "comm/store.h"
#include "core/util.h"

static int shim_set(void *ctx, const char *key, const void *val, size_t len, char *err,
                    size_t errlen)
{
    if (!store_set(ctx, key, val, len)) return 0;
    snprintf(err, errlen, "%s", dps_errmsg());
    return 1;
}

static int shim_get(void *ctx, const char *key, void **val, size_t *len, double timeout_ms,
                    char *err, size_t errlen)
{
    if (!store_get(ctx, key, -1, val, len, timeout_ms)) return 0;
    snprintf(err, errlen, "%s", dps_errmsg());
    return 1;
}

/* A shim call's outcome as the comm layer's status. A failed call leaves
 * the rank marked as waiting: it was blocked in the collective until then. */
static dps_status status_of(comm *c, int rc, const char *what, const char *err)
{
    if (rc == GLOO_SHIM_OK) comm_shared_waiting(c->sh, c->rank, 0);
    if (rc == GLOO_SHIM_OK) return DPS_OK;
    return dps_fail(rc == GLOO_SHIM_TIMEOUT ? DPS_ERR_TIMEOUT : DPS_ERR_RUNTIME,
                    "%s over Gloo failed: %s", what, err);
}

static dps_status gloo_allreduce(comm *c, void *buf, size_t n, comm_dtype dt)
{
    comm_shared_waiting(c->sh, c->rank, 1); /* for a timeout's message */
    char err[DPS_ERRMSG_MAX] = "";
    int rc = gloo_shim_allreduce(c->impl, buf, n, dt == COMM_BF16, err, sizeof err);
    if (!rc) c->bytes_sent += 2 * n * comm_dtype_bytes(dt) * (size_t)(c->nranks - 1) / (size_t)c->nranks;
    return status_of(c, rc, "all-reduce", err);
}

/* A reduce-scatter or all-gather moves (n - 1) / n of the buffer each way
 * (nccl-tests' bus bytes), as the ring does. */
static void count_sharded(comm *c, size_t n, comm_dtype dt)
{
    c->bytes_sent += n * comm_dtype_bytes(dt) * (size_t)(c->nranks - 1) / (size_t)c->nranks;
}

static dps_status gloo_reduce_scatter(comm *c, void *buf, size_t n, comm_dtype dt)
{
    comm_shared_waiting(c->sh, c->rank, 1); /* for a timeout's message */
    char err[DPS_ERRMSG_MAX] = "";
    int rc = gloo_shim_reduce_scatter(c->impl, buf, n, dt == COMM_BF16, err, sizeof err);
    if (!rc) count_sharded(c, n, dt);
    return status_of(c, rc, "reduce-scatter", err);
}

static dps_status gloo_all_gather(comm *c, void *buf, size_t n, comm_dtype dt)
{
    comm_shared_waiting(c->sh, c->rank, 1); /* for a timeout's message */
    char err[DPS_ERRMSG_MAX] = "";
    int rc = gloo_shim_all_gather(c->impl, buf, n, dt == COMM_BF16, err, sizeof err);
    if (!rc) count_sharded(c, n, dt);
    return status_of(c, rc, "all-gather", err);
}

static dps_status gloo_broadcast(comm *c, void *buf, size_t bytes, int root)
{
    comm_shared_waiting(c->sh, c->rank, 1); /* for a timeout's message */
    char err[DPS_ERRMSG_MAX] = "";
    return status_of(c, gloo_shim_broadcast(c->impl, buf, bytes, root, err, sizeof err),
                     "broadcast", err);
}

static dps_status gloo_barrier(comm *c)
{
    comm_shared_waiting(c->sh, c->rank, 1); /* for a timeout's message */
    char err[DPS_ERRMSG_MAX] = "";
    return status_of(c, gloo_shim_barrier(c->impl, err, sizeof err), "barrier", err);
}

static void gloo_abort(comm *c)
{
    if (c->impl) gloo_shim_abort(c->impl);
}

static void gloo_destroy(comm *c)
{
    if (c->impl) gloo_shim_close(c->impl);
    c->impl = NULL;
}

static const comm_ops gloo_ops = {
    .name = "gloo",
    .allreduce = gloo_allreduce,
    .broadcast = gloo_broadcast,
    .barrier = gloo_barrier,
    .reduce_scatter = gloo_reduce_scatter,
    .all_gather = gloo_all_gather,
    .abort = gloo_abort,
    .destroy = gloo_destroy,
};

static int gloo_suits(const backend *be) { return be->kind == BE_HOST; }

/* The interface Gloo listens on: DPSCALE_GLOO_IFACE, else PyTorch's
 * GLOO_SOCKET_IFNAME, else the address this rank reached rank 0 from. */
static const char *gloo_iface(void)
{
    const char *v = getenv("DPSCALE_GLOO_IFACE");
    if (!v || !*v) v = getenv("GLOO_SOCKET_IFNAME");
    return v && *v ? v : NULL;
}

/* With DPSCALE_STORE_DIR: a prefix no other run's files have (rank 0's
 * pid and clock, through the store), for Gloo's files in that folder. */
static dps_status file_prefix(comm *c, char *buf, size_t len)
{
    if (c->rank == 0) {
        snprintf(buf, len, "dpscale-%d-%.0f-", (int)getpid(), dps_now_ms());
        return store_set(c->store, "gloo-files", buf, strlen(buf) + 1);
    }
    void *val;
    size_t n;
    DPS_TRY(store_get(c->store, "gloo-files", 0, &val, &n, c->timeout_ms));
    snprintf(buf, len, "%.*s", (int)n, (char *)val);
    free(val);
    return DPS_OK;
}

static dps_status gloo_open(comm *c)
{
    if (!c->store)
        return dps_fail(DPS_ERR_USAGE, "rank %d: --comm gloo needs the ranks' rendezvous: start "
                        "ddp under a launcher (torchrun, mpirun, srun)", c->rank);
    gloo_store_ops ops = {shim_set, shim_get, c->store};
    const char *dir = getenv("DPSCALE_STORE_DIR");
    char prefix[96] = "";
    gloo_rendezvous rv = {&ops, dir && *dir ? dir : NULL, prefix};
    if (rv.dir) DPS_TRY(file_prefix(c, prefix, sizeof prefix));
    char err[DPS_ERRMSG_MAX] = "";
    gloo_shim *g = NULL;
    int rc = gloo_shim_open(c->rank, c->nranks, store_local_addr(c->store), gloo_iface(),
                            c->timeout_ms, &rv, &g, err, sizeof err);
    if (rc && rv.dir)
        return status_of(c, rc, "connecting to every rank through DPSCALE_STORE_DIR", err);
    if (rc) return status_of(c, rc, "connecting to every rank", err);
    c->impl = g;
    c->ops = &gloo_ops;
    return DPS_OK;
}

const comm_impl comm_gloo_impl = {"gloo", gloo_suits, gloo_open, 1};
