/* The fork launcher of the ddp mode (see ddp.h). The parent maps the shared
 * region, forks one process per device, and watches them: a rank that exits
 * non-zero or is killed, a step (or the set-up) longer than --timeout, or
 * SIGINT/SIGTERM to the parent ends every rank. The parent never opens a
 * device; it reaps every child and the anonymous mapping leaves nothing in
 * /dev/shm. Then it turns the ranks' records into one train_result. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ddp.h"
#include "util.h"

static size_t align64(size_t x) { return (x + 63) & ~(size_t)63; }

void ddp_shared_layout(const dps_config *cfg, ddp_shared *sh)
{
    memset(sh, 0, sizeof *sh);
    sh->nranks = cfg->ngpus;
    sh->steps = cfg->steps;
    sh->warmup = cfg->warmup;
    sh->nparams = model_param_count(cfg->shape);
    size_t n = (size_t)cfg->ngpus, off = align64(sizeof *sh);
    sh->off_step_ms = off;
    off = align64(off + n * (size_t)cfg->steps * sizeof(double));
    sh->off_phase_ms = off;
    off = align64(off + n * (size_t)cfg->steps * PH_COUNT * sizeof(float));
    sh->off_loss = off;
    off = align64(off + n * (size_t)(cfg->steps + cfg->warmup) * sizeof(double));
    sh->off_params = off;
    off = align64(off + sh->nparams * sizeof(float));
    sh->off_comm = off;
    sh->total = off + comm_shared_bytes(cfg->ngpus);
}

double *ddp_step_ms(ddp_shared *sh, int r)
{
    return (double *)((char *)sh + sh->off_step_ms) + (size_t)r * sh->steps;
}

float *ddp_phase_ms(ddp_shared *sh, int r)
{
    return (float *)((char *)sh + sh->off_phase_ms) + (size_t)r * sh->steps * PH_COUNT;
}

double *ddp_loss_sum(ddp_shared *sh, int r)
{
    return (double *)((char *)sh + sh->off_loss) + (size_t)r * (sh->steps + sh->warmup);
}

float *ddp_final_params(ddp_shared *sh) { return (float *)((char *)sh + sh->off_params); }
comm_shared *ddp_comm(ddp_shared *sh) { return (comm_shared *)((char *)sh + sh->off_comm); }

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* In the child: die with the parent, leave SIGINT to the parent (which
 * forwards it), run the rank, exit. */
static void rank_process(const dps_config *cfg, ddp_shared *sh, int rank, pid_t parent)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_DFL);
    dps_status rc = ddp_rank_main(cfg, sh, rank);
    exit(rc ? 1 : 0); /* exit, not _exit: leak checkers see the rank too */
}

typedef struct group {
    const dps_config *cfg;
    ddp_shared *sh;
    pid_t pid[DPS_MAX_DEVICES];
    int alive;
    dps_status status;        /* first failure seen */
    char error[DPS_ERRMSG_MAX];
} group;

static void fail(group *g, dps_status st, const char *msg)
{
    if (g->status) return;
    g->status = st;
    dps_strlcpy(g->error, msg, sizeof g->error);
}

static void kill_all(group *g)
{
    comm_abort(ddp_comm(g->sh));
    for (int r = 0; r < g->cfg->ngpus; r++)
        if (g->pid[r] > 0) kill(g->pid[r], SIGKILL);
}

static void describe_exit(group *g, int r, int ws, char *buf, size_t len)
{
    const dps_config *c = g->cfg;
    int step = atomic_load(&g->sh->rank[r].step);
    char where[64];
    if (step < 0) snprintf(where, sizeof where, "during set-up");
    else snprintf(where, sizeof where, "during step %d", step);
    const char *inj = "";
    char injbuf[96];
    if (c->fault_rank == r && c->fault_kind == FAULT_EXIT && c->fault_step == step) {
        snprintf(injbuf, sizeof injbuf, " (injected by --inject-fault %d:%d:exit)", r, step);
        inj = injbuf;
    }
    if (WIFSIGNALED(ws))
        snprintf(buf, len, "rank %d was killed by signal %d (%s) %s%s", r, WTERMSIG(ws),
                 dps_signal_name(WTERMSIG(ws)), where, inj);
    else
        snprintf(buf, len, "rank %d exited with status %d %s%s", r, WEXITSTATUS(ws), where, inj);
}

/* A rank whose step began more than --timeout ago: names it and what the
 * others are doing. */
static void check_timeout(group *g)
{
    const dps_config *c = g->cfg;
    int64_t now = now_us(), limit = (int64_t)(c->timeout_s * 1e6);
    int late = -1;
    for (int r = 0; r < c->ngpus && late < 0; r++)
        if (atomic_load(&g->sh->rank[r].state) == RANK_RUNNING &&
            now - atomic_load(&g->sh->rank[r].beat_us) > limit)
            late = r;
    if (late < 0) return;
    comm_shared *cs = ddp_comm(g->sh);
    char stuck[256] = "", waiting[256] = "";
    for (int r = 0; r < c->ngpus; r++) {
        char *list = atomic_load(&cs->box[r].waiting) ? waiting : stuck;
        size_t n = strlen(list);
        snprintf(list + n, 256 - n, "%s%d (%s)", n ? ", " : "", r,
                 dps_phase_names[atomic_load(&g->sh->rank[r].phase)]);
    }
    int step = atomic_load(&g->sh->rank[late].step);
    char msg[DPS_ERRMSG_MAX];
    snprintf(msg, sizeof msg, "%s %d exceeded --timeout %g s; ranks not in a collective: %s; "
             "waiting in a collective: %s", step < 0 ? "set-up of rank" : "step",
             step < 0 ? late : step, c->timeout_s, stuck[0] ? stuck : "none",
             waiting[0] ? waiting : "none");
    fail(g, DPS_ERR_TIMEOUT, msg);
}

/* Polls the ranks until all have exited; ends the group on the first failure. */
static void watch(group *g)
{
    char first_exit[DPS_ERRMSG_MAX] = "";
    while (g->alive > 0) {
        for (int r = 0; r < g->cfg->ngpus; r++) {
            int ws;
            if (g->pid[r] <= 0 || waitpid(g->pid[r], &ws, WNOHANG) != g->pid[r]) continue;
            g->pid[r] = 0;
            g->alive--;
            int clean = WIFEXITED(ws) && WEXITSTATUS(ws) == 0;
            if (!clean && !first_exit[0] && !g->status)
                describe_exit(g, r, ws, first_exit, sizeof first_exit);
            if (!clean) kill_all(g);
        }
        if (g->alive == 0) break;
        if (!g->status && dps_interrupted()) {
            char msg[96];
            snprintf(msg, sizeof msg, "interrupted by %s during step %d",
                     dps_signal_name(dps_interrupted()), atomic_load(&g->sh->rank[0].step));
            fail(g, DPS_ERR_RUNTIME, msg);
        }
        if (!g->status) check_timeout(g);
        if (g->status) kill_all(g);
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (g->status) return;
    /* the rank that failed first and said why, else the first that died */
    for (int r = 0; r < g->cfg->ngpus; r++) {
        ddp_report *rep = &g->sh->rank[r];
        if (rep->status && !rep->secondary) {
            fail(g, rep->status, rep->error);
            return;
        }
    }
    if (first_exit[0]) fail(g, DPS_ERR_RUNTIME, first_exit);
}

/* The ranks' records as one result: a step's time is the slowest rank's,
 * a step's loss the global mean over every rank's rows. */
static void collect(group *g, train_result *res)
{
    const dps_config *c = g->cfg;
    ddp_shared *sh = g->sh;
    int n = c->ngpus, steps = c->steps, losses = c->steps + c->warmup;
    for (int r = 0; r < n; r++) {
        if (sh->rank[r].steps_done < steps) steps = sh->rank[r].steps_done;
        if (sh->rank[r].losses_done < losses) losses = sh->rank[r].losses_done;
        res->dev[r] = sh->rank[r].dev;
        res->dev[r].dev = c->devices[r];
    }
    for (int k = 0; k < steps; k++) {
        res->step_ms[k] = 0.0;
        for (int r = 0; r < n; r++) {
            double ms = ddp_step_ms(sh, r)[k];
            res->rank_step_ms[(size_t)k * n + r] = ms;
            if (ms > res->step_ms[k]) res->step_ms[k] = ms;
            memcpy(train_result_phases(res, k, r), ddp_phase_ms(sh, r) + (size_t)k * PH_COUNT,
                   PH_COUNT * sizeof(float));
        }
    }
    double rows = (double)c->global_batch * c->shape.tokens;
    for (int k = 0; k < losses; k++) {
        double sum = 0.0;
        for (int r = 0; r < n; r++) sum += ddp_loss_sum(sh, r)[k];
        res->loss[k] = (float)(sum / rows);
    }
    res->steps_done = steps;
    res->losses_done = losses;
    res->allreduce_bytes = sh->rank[0].allreduce_bytes;
}

static dps_status copy_params(ddp_shared *sh, train_result *res)
{
    res->nparams = sh->nparams;
    res->final_params = malloc(sh->nparams * sizeof(float));
    if (!res->final_params)
        return dps_fail(DPS_ERR_RUNTIME, "out of host memory for the final parameters");
    memcpy(res->final_params, ddp_final_params(sh), sh->nparams * sizeof(float));
    return DPS_OK;
}

static void start_ranks(group *g)
{
    pid_t parent = getpid();
    fflush(NULL); /* children must not flush the parent's buffers again */
    for (int r = 0; r < g->cfg->ngpus; r++) {
        pid_t pid = fork();
        if (pid == 0) rank_process(g->cfg, g->sh, r, parent);
        if (pid < 0) {
            char msg[160];
            snprintf(msg, sizeof msg, "cannot start rank %d: fork: %s", r, strerror(errno));
            fail(g, DPS_ERR_RUNTIME, msg);
            kill_all(g);
            return;
        }
        g->pid[r] = pid;
        g->alive++;
    }
}

dps_status ddp_train(const dps_config *cfg, train_result *res)
{
    ddp_shared layout;
    ddp_shared_layout(cfg, &layout);
    void *mem = mmap(NULL, layout.total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED)
        return dps_fail(DPS_ERR_RUNTIME, "cannot map %zu bytes of shared memory for the ranks: %s",
                        layout.total, strerror(errno));
    ddp_shared *sh = mem;
    *sh = layout;
    comm_shared_init(ddp_comm(sh), cfg->ngpus);
    for (int r = 0; r < cfg->ngpus; r++) {
        atomic_store(&sh->rank[r].step, -1);
        atomic_store(&sh->rank[r].beat_us, now_us());
    }
    group g = {.cfg = cfg, .sh = sh};
    start_ranks(&g);
    watch(&g);
    collect(&g, res);
    dps_status rc = g.status;
    if (!rc) rc = copy_params(sh, res);
    else dps_strlcpy(res->error, g.error, sizeof res->error);
    munmap(mem, layout.total);
    return rc ? dps_fail_copy(rc, res->error[0] ? res->error : dps_errmsg()) : DPS_OK;
}
