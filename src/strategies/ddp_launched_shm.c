/* Launched ranks (torchrun, mpirun, srun), and those on one host through
 * shared memory: the entry points of a launcher's ranks choose the
 * collectives from where the ranks run; with shm (every rank on one host)
 * the ranks meet in a named shared region (shm_open) that global rank 0
 * makes and removes (its name as soon as every rank has mapped it), where
 * they run ddp.c's rank as the forked ranks do in the anonymous one. Rank 0
 * collects every rank's records when all have finished, as the fork
 * launcher's parent does. Ranks that share no memory:
 * ddp_launched_store.c. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/util.h"
#include "strategies/ddp.h"

/* /dpscale-<port>-<the launcher's job id>: one name per job and port. */
static void region_name(const world *w, char *buf, size_t len)
{
    static const char *const ids[] = {"TORCHELASTIC_RUN_ID", "PMIX_NAMESPACE", "SLURM_JOB_ID",
                                      "OMPI_MCA_ess_base_jobid"};
    const char *job = "job";
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        if (getenv(ids[i]) && *getenv(ids[i])) {
            job = getenv(ids[i]);
            break;
        }
    int n = snprintf(buf, len, "/dpscale-%d-", w->port);
    for (size_t i = (size_t)n; *job && i + 1 < len; job++, i++) {
        buf[i] = (*job == '/' || *job == '.') ? '_' : *job;
        buf[i + 1] = '\0';
    }
}

static void pause_ms(int ms)
{
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

/* Rank 0: a fresh region (a stale one of a killed job is replaced). */
static dps_status make_region(const dps_config *cfg, const char *name, ddp_shared **out)
{
    ddp_shared layout;
    ddp_shared_layout(cfg, &layout);
    shm_unlink(name);
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)layout.total) != 0) {
        int err = errno;
        if (fd >= 0) close(fd);
        shm_unlink(name);
        return dps_fail(DPS_ERR_RUNTIME, "ddp rank 0: cannot make the shared region %s of %zu "
                        "bytes: %s", name, layout.total, strerror(err));
    }
    void *mem = mmap(NULL, layout.total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (mem == MAP_FAILED) {
        shm_unlink(name);
        return dps_fail(DPS_ERR_RUNTIME, "ddp rank 0: cannot map %s: %s", name, strerror(errno));
    }
    ddp_shared *sh = mem;
    *sh = layout;
    sh->owner_pid = (int)getpid();
    comm_shared_init(ddp_shared_comm(sh), cfg->ngpus);
    atomic_store(&sh->ready, 1);
    *out = sh;
    return DPS_OK;
}

/* The region rank 0 made, once it is ready and its maker alive; NULL yet. */
static ddp_shared *try_open_region(const char *name, size_t total)
{
    int fd = shm_open(name, O_RDWR, 0);
    struct stat st;
    if (fd < 0) return NULL;
    void *mem = fstat(fd, &st) == 0 && (size_t)st.st_size == total
        ? mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    close(fd);
    if (mem == MAP_FAILED) return NULL;
    ddp_shared *sh = mem;
    if (atomic_load(&sh->ready) && kill(sh->owner_pid, 0) == 0) return sh;
    munmap(mem, total);
    return NULL;
}

static dps_status open_region(const dps_config *cfg, const char *name, ddp_shared **out)
{
    ddp_shared layout;
    ddp_shared_layout(cfg, &layout);
    double end = dps_now_ms() + cfg->timeout_s * 1e3;
    while (!(*out = try_open_region(name, layout.total))) {
        if (dps_escalated()) return dps_fail_escalated("waiting for rank 0's shared region");
        if (dps_now_ms() > end)
            return dps_fail(DPS_ERR_TIMEOUT, "ddp rank %d: rank 0 made no shared region %s within "
                            "--timeout %g s: is rank 0 on this host (the ring needs every rank on "
                            "one) and running the same command?", cfg->world.rank, name,
                            cfg->timeout_s);
        pause_ms(10);
    }
    return DPS_OK;
}

/* A process that runs (one that ended but is not yet reaped does not). */
static int alive(int pid)
{
    char path[64], stat[256] = "";
    if (kill(pid, 0) != 0) return 0;
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return 1;
    size_t n = fread(stat, 1, sizeof stat - 1, f);
    fclose(f);
    stat[n] = '\0';
    const char *end = strrchr(stat, ')'); /* the state follows the command's name */
    return !(end && end[1] == ' ' && (end[2] == 'Z' || end[2] == 'X'));
}

/* A rank that arrived and is gone without getting to its end. */
static int silent_death(ddp_shared *sh, int n)
{
    for (int r = 0; r < n; r++) {
        ddp_report *rep = &sh->rank[r];
        if (rep->pid && !atomic_load(&rep->ended) && !alive(rep->pid)) return 1;
    }
    return 0;
}

/* After a second SIGINT or SIGTERM, how long the others are waited for. */
#define ESCALATED_WAIT_MS 1000.0

/* Waits until every rank has done what *counter counts, or one of them is
 * gone without a word (first_failure then names it); after a second signal
 * no more than ESCALATED_WAIT_MS. */
static dps_status wait_all(const dps_config *cfg, ddp_shared *sh, _Atomic int *counter,
                           const char *what)
{
    double end = dps_now_ms() + cfg->timeout_s * 1e3, cut = 0.0;
    while (atomic_load(counter) < cfg->world.size && !silent_death(sh, cfg->world.size)) {
        if (dps_escalated() && !cut) cut = dps_now_ms() + ESCALATED_WAIT_MS;
        if (cut && dps_now_ms() > cut) return dps_fail_escalated("waiting for every rank");
        if (dps_now_ms() > end)
            return dps_fail(DPS_ERR_TIMEOUT, "ddp rank %d: %d of %d ranks %s within --timeout %g s "
                            "(%s started them)", cfg->world.rank, atomic_load(counter),
                            cfg->world.size, what, cfg->timeout_s,
                            world_launcher_name(cfg->world.launcher));
        pause_ms(5);
    }
    return DPS_OK;
}

/* Beside a rank: a SIGINT/SIGTERM (a launcher ending the job) or another
 * rank gone without a word aborts the group's collectives, so that this
 * rank ends now, its failure recorded, instead of waiting out --timeout. */
typedef struct rank_watch {
    ddp_shared *sh;
    int n;
    _Atomic int stop;
    pthread_t thread;
    int started;
} rank_watch;

static void *watch_main(void *arg)
{
    rank_watch *w = arg;
    while (!atomic_load(&w->stop)) {
        if (dps_interrupted() || silent_death(w->sh, w->n)) {
            comm_shared_abort(ddp_shared_comm(w->sh));
            break;
        }
        pause_ms(10);
    }
    return NULL;
}

/* This process's rank, from arrival to its records in the region. Rank 0
 * removes the region's name (`name`; NULL on the others) once every rank
 * has mapped it, so that a rank 0 killed later leaves nothing in /dev/shm. */
static dps_status run_rank(const dps_config *cfg, ddp_world *dw, ddp_shared *sh, const char *name)
{
    ddp_report *me = &sh->rank[cfg->world.rank];
    me->pid = (int)getpid();
    atomic_fetch_add(&sh->arrived, 1);
    dps_status rc = wait_all(cfg, sh, &sh->arrived, "arrived");
    if (!rc && name) shm_unlink(name);
    rank_watch w = {.sh = sh, .n = cfg->world.size};
    w.started = !rc && pthread_create(&w.thread, NULL, watch_main, &w) == 0;
    dw->runs++;
    if (!rc) rc = ddp_rank_main(cfg, sh, cfg->world.rank, &dw->beat, dw);
    atomic_store(&w.stop, 1);
    if (w.started) pthread_join(w.thread, NULL);
    if (rc) comm_shared_abort(ddp_shared_comm(sh));
    atomic_store(&me->ended, 1);
    atomic_fetch_add(&sh->finished, 1);
    return rc;
}

/* The collectives for where the ranks run: --comm, or for auto NCCL on
 * GPUs, the shared-memory ring on one host, Gloo across hosts. */
static dps_status resolve_comm(const dps_config *cfg, ddp_world *dw, dps_config *out)
{
    *out = *cfg;
    if (out->comm == DPS_COMM_AUTO)
        out->comm = cfg->be.kind == BE_CUDA ? DPS_COMM_NCCL
                    : ddp_world_one_host(dw) ? DPS_COMM_SHM : DPS_COMM_GLOO;
    dps_strlcpy(dw->comm_used, dps_comm_names[out->comm], sizeof dw->comm_used);
    if (out->comm != DPS_COMM_SHM || ddp_world_one_host(dw)) return DPS_OK;
    return dps_fail(DPS_ERR_USAGE, "--comm shm: the %d ranks run on %d hosts (rank 0 on %s, rank "
                    "%d on %s), and the shared-memory ring needs one: use --comm gloo (or auto)",
                    dw->w.size, dw->nnodes, dw->members[0].host, dw->w.size - 1,
                    dw->members[dw->w.size - 1].host);
}

static dps_status shm_rank(const dps_config *cfg, ddp_world *dw)
{
    char name[128];
    region_name(&cfg->world, name, sizeof name);
    ddp_shared *sh;
    DPS_TRY(open_region(cfg, name, &sh));
    size_t total = sh->total;
    dps_status rc = run_rank(cfg, dw, sh, NULL);
    munmap(sh, total);
    return rc;
}

/* A rank that ended without a word (exited or was killed: the others then
 * waited for it in vain); else the first rank that failed and said why. */
static dps_status first_failure(ddp_shared *sh, int n, char *buf, size_t len)
{
    for (int r = 0; r < n; r++) {
        ddp_report *rep = &sh->rank[r];
        if (atomic_load(&rep->ended) || !rep->pid || alive(rep->pid)) continue;
        snprintf(buf, len, "rank %d (pid %d on this host) ended without a word: it exited or was "
                 "killed (its launcher's log says how); the other ranks waited for it in vain",
                 r, rep->pid);
        return DPS_ERR_RUNTIME;
    }
    for (int r = 0; r < n; r++)
        if (sh->rank[r].status && !sh->rank[r].secondary) {
            dps_strlcpy(buf, sh->rank[r].error, len);
            return sh->rank[r].status;
        }
    return DPS_OK;
}

static dps_status shm_train(const dps_config *cfg, ddp_world *dw, train_result *res)
{
    char name[128];
    region_name(&cfg->world, name, sizeof name);
    ddp_shared *sh;
    DPS_TRY(make_region(cfg, name, &sh));
    dps_status rc = run_rank(cfg, dw, sh, name);
    if (rc) dps_strlcpy(res->error, dps_errmsg(), sizeof res->error);
    if (atomic_load(&sh->arrived) >= cfg->world.size) { /* the others ran: wait for their end */
        dps_status all = wait_all(cfg, sh, &sh->finished, "finished");
        if (!rc && all) dps_strlcpy(res->error, dps_errmsg(), sizeof res->error);
        if (!rc) rc = all;
    }
    char why[DPS_ERRMSG_MAX];
    dps_status first = first_failure(sh, cfg->ngpus, why, sizeof why);
    if (first) { /* the rank that failed first says why, not those it took down */
        rc = first;
        dps_strlcpy(res->error, why, sizeof res->error);
    }
    ddp_collect(cfg, sh, res);
    ddp_world_note_devices(dw, res->dev);
    if (!rc) rc = ddp_scalers_agree(sh, res->steps_done);
    if (!rc) rc = ddp_copy_params(sh, res);
    size_t total = sh->total;
    munmap(sh, total);
    shm_unlink(name);
    return rc ? dps_fail_copy(rc, res->error) : DPS_OK;
}

dps_status ddp_launched_rank(const dps_config *cfg, ddp_world *dw)
{
    dps_config c;
    DPS_TRY(ddp_world_join(dw, cfg->timeout_s));
    dps_status rc = resolve_comm(cfg, dw, &c);
    if (rc) {
        store_abort(dw->store, dps_errmsg()); /* the others would wait for this rank */
        return rc;
    }
    return c.comm == DPS_COMM_SHM ? shm_rank(&c, dw) : ddp_launched_store_rank(&c, dw);
}

dps_status ddp_launched_train(const dps_config *cfg, ddp_world *dw, train_result *res)
{
    dps_config c;
    dps_status rc = ddp_world_join(dw, cfg->timeout_s);
    if (!rc) rc = resolve_comm(cfg, dw, &c);
    if (rc) {
        dps_strlcpy(res->error, dps_errmsg(), sizeof res->error);
        return rc;
    }
    return c.comm == DPS_COMM_SHM ? shm_train(&c, dw, res) : ddp_launched_store_train(&c, dw, res);
}
