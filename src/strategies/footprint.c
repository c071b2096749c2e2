/* A configuration's memory before it runs (see footprint.h): the buffers
 * dp.c and ddp.c allocate, summed here in the same order and sizes. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "core/util.h"
#include "model/net.h"
#include "strategies/ddp.h"
#include "strategies/ddp_shared.h"
#include "strategies/dp.h"
#include "strategies/footprint.h"
#include "strategies/sharded.h"
#include "core/strategy.h"

#define F4 ((uint64_t)sizeof(float))

/* net_acts_alloc of `samples` samples. The MLP's (model_acts_alloc):
 * pre-activations and activations of every layer, two activation
 * gradients; under autocast those in the half type, and the cast parameters
 * and input, the half logits and a layer's half parameter gradients. A
 * file's: graph_acts_bytes (its autocast buffers included; its convolutions
 * direct where be has conv ops). */
static uint64_t acts_bytes(const dps_config *c, const backend *be, const net *n, uint64_t samples)
{
    if (net_is_file(n)) return graph_acts_bytes(&n->file, samples, c->precision, graph_direct_convs(be));
    model_shape s = c->shape;
    uint64_t rows = samples * (uint64_t)s.tokens, layer = rows * (uint64_t)s.width;
    if (!dps_precision_is_half(c->precision)) return layer * F4 * (2 * (uint64_t)s.layers + 2);
    return layer * 2 * (2 * (uint64_t)s.layers + 3) + (uint64_t)model_param_count(s) * 2 +
           rows * (uint64_t)s.classes * 2 + (uint64_t)model_half_grad_elems(s) * 2;
}

/* The GEMM library's workspace of the stream that runs device i's GEMMs
 * (dp's slot i, ddp's rank i: its compute stream, the only one that runs
 * GEMMs): made on its first GEMM, kept to the end (backend.h,
 * be_gemm_workspace_bytes; the probe's compute capability of the device). */
static uint64_t gemm_workspace(const dps_config *c, const backend *be, int i)
{
    return be ? (uint64_t)be_gemm_workspace_bytes(be, c->devices[i]) : 0;
}

static uint64_t optimizer_bytes(const dps_config *c, uint64_t pbytes)
{
    return pbytes * (c->optimizer == OPT_ADAMW ? 2 : 1);
}

/* The loss's fp32 logits and their gradient (nc bytes each): one buffer
 * under torch's autocast (dp.c's and ddp.c's alloc_loss_logits). */
static uint64_t loss_logits_bytes(const dps_config *c, int torch, uint64_t nc)
{
    return dps_precision_is_half(c->precision) && torch ? nc : 2 * nc;
}

/* dp_setup's buffers (alloc_slot, alloc_primary, alloc_torch), by slot;
 * returns the host's (input, labels, loss, the final parameters). */
static uint64_t dp_devices(const dps_config *c, const backend *be, const net *m, uint64_t *dev)
{
    int samples[DPS_MAX_DEVICES], micro = c->global_batch / c->accum;
    int nslots = dp_chunk_sizes(micro, c->ngpus, samples);
    uint64_t pbytes = (uint64_t)m->params * F4, n = (uint64_t)micro * (uint64_t)m->rows;
    uint64_t X = (uint64_t)m->input * F4, C = (uint64_t)m->classes * F4;
    uint64_t xall = (uint64_t)micro * X, accum = (uint64_t)c->accum;
    int torch = c->dp_impl == DPIMPL_TORCH, coalesced = torch && nslots > 1;
    uint64_t group = (uint64_t)dp_largest_group_floats(m) * F4;
    int half = dps_precision_is_half(c->precision);
    for (int i = 0; i < nslots; i++) {
        uint64_t rows = (uint64_t)samples[i] * (uint64_t)m->rows;
        dev[i] = 2 * pbytes + acts_bytes(c, be, m, (uint64_t)samples[i]) + gemm_workspace(c, be, i);
        /* slot 0's: device 0's batch and dlogits; under autocast the model's half logits */
        if (i) dev[i] += (uint64_t)samples[i] * X + (half ? 0 : rows * C);
        if (coalesced) dev[i] += group;
    }
    dev[0] += optimizer_bytes(c, pbytes) + xall + loss_logits_bytes(c, torch, n * C) + n * F4 +
              n * F4 + accum * F4;
    if (nslots > 1) dev[0] += coalesced ? group : (pbytes < DP_COALESCE_BYTES ? pbytes : DP_COALESCE_BYTES);
    if (torch) dev[0] += 2 * n * C;
    if (half && nslots > 1) /* the gathered half logits, slot 0's own rows among them */
        dev[0] += (n - (uint64_t)samples[0] * (uint64_t)m->rows) * (uint64_t)m->classes * 2;
    if (coalesced) dev[0] += pbytes;
    if (c->accum > 1) dev[0] += pbytes;           /* the accumulated gradients */
    if (config_scaler(c)) dev[0] += F4;           /* GradScaler's inf flag */
    uint64_t step = (uint64_t)c->global_batch;    /* batches.h: a whole step's, two of them */
    return 2 * (step * X + step * (uint64_t)m->rows * F4) + accum * F4 + pbytes;
}

/* Rank r's parameters, gradients and optimizer state, whole or sharded
 * (ddp.c's alloc_buffers, sharded.c's shard_open): a sharded level's own
 * chunks, and two units' gathered parameters and gradients. */
static uint64_t model_states(const dps_config *c, const net *m, int r)
{
    uint64_t pbytes = (uint64_t)m->params * F4, unit = (uint64_t)net_unit_max(m) * F4;
    shard_level level = shard_level_of(c->mode);
    uint64_t own = (uint64_t)shard_floats(m, c->ngpus, r) * F4;
    uint64_t opt = optimizer_bytes(c, level ? own : pbytes);
    if (level >= SHARD_GRADIENTS) opt += own + 2 * unit; /* gradient shard, unit gradients */
    if (level == SHARD_PARAMETERS) return opt + own + 2 * unit;
    if (level == SHARD_GRADIENTS) return opt + pbytes;
    return opt + (c->grad_view ? 2 : 3) * pbytes + (c->accum > 1 ? pbytes : 0);
}

/* A rank's buffers (ddp.c's alloc_rank), by rank; returns the host's: every
 * rank's input, labels and initial parameters, the shared region, the
 * parent's copy of the final parameters. */
static uint64_t ddp_devices(const dps_config *c, const backend *be, const net *m, uint64_t *dev)
{
    int shard[DPS_MAX_DEVICES];
    ddp_shard_sizes(c->global_batch / c->accum, c->ngpus, shard); /* one micro-batch's */
    uint64_t pbytes = (uint64_t)m->params * F4, host = pbytes, accum = (uint64_t)c->accum;
    uint64_t X = (uint64_t)m->input * F4, C = (uint64_t)m->classes * F4;
    int torch = c->ddp_impl == DPIMPL_TORCH;
    for (int r = 0; r < c->ngpus; r++) {
        uint64_t rows = (uint64_t)shard[r] * (uint64_t)m->rows, x = (uint64_t)shard[r] * X;
        dev[r] = model_states(c, m, r) + x + loss_logits_bytes(c, torch, rows * C) +
                 2 * rows * F4 + accum * F4 + acts_bytes(c, be, m, (uint64_t)shard[r]) +
                 gemm_workspace(c, be, r);
        if (torch) dev[r] += 2 * rows * C; /* log-probabilities, gradient */
        if (config_scaler(c)) dev[r] += F4;        /* GradScaler's inf flag */
        host += 2 * accum * (x + rows * F4) + accum * F4 + pbytes; /* two steps' shards (batches.h) */
    }
    ddp_shared sh;
    ddp_shared_layout(c, &sh);
    return host + sh.total;
}

/* One run's bytes: its devices, and its host's with the step records. */
static void one_run(const dps_config *c, const backend *be, const net *m, footprint *fp)
{
    memset(fp, 0, sizeof *fp);
    uint64_t steps = (uint64_t)c->steps, ranks = (uint64_t)c->ngpus;
    fp->host = dps_strategy_of(c->mode)->per_rank ? ddp_devices(c, be, m, fp->device)
                                                  : dp_devices(c, be, m, fp->device);
    fp->host += steps * (sizeof(double) + sizeof(step_scaler) +
                         ranks * (sizeof(double) + PH_COUNT * sizeof(float))) +
                (steps + (uint64_t)c->warmup) * sizeof(float);
    for (int i = 0; i < c->ngpus; i++) fp->devices += fp->device[i];
    fp->total = fp->host + (be && be->kind == BE_HOST ? fp->devices : 0);
}

void footprint_of(const dps_config *cfg, const backend *be, footprint *fp)
{
    net own;
    const net *m = NULL;
    if (config_net(cfg, &own, &m) != DPS_OK) { /* no host memory for the MLP's tensor list */
        memset(fp, 0, sizeof *fp);
        fp->total = UINT64_MAX;
        return;
    }
    one_run(cfg, be, m, fp);
    if (cfg->check) {
        dps_config ref = *cfg; /* run_check: device 0 alone, after the run, beside its parameters */
        ref.mode = MODE_DP;
        ref.ngpus = 1;
        ref.check = 0;
        footprint r;
        one_run(&ref, be, m, &r);
        uint64_t kept = (uint64_t)m->params * F4;
        if (r.total + kept > fp->total) fp->total = r.total + kept;
    }
    net_free(&own);
}

/* A "Key:  N kB" line of a /proc file, in bytes; 0 when absent. */
static uint64_t proc_kb(const char *file, const char *key)
{
    FILE *f = fopen(file, "r");
    char line[256];
    uint64_t kb = 0;
    size_t len = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, key, len) == 0 && line[len] == ':') {
            sscanf(line + len + 1, "%" SCNu64, &kb);
            break;
        }
    if (f) fclose(f);
    return kb * 1024;
}

/* A number in a cgroup v2 file of this process's group; 0 when absent or "max". */
static uint64_t cgroup_value(const char *name)
{
    char path[320], group[256] = "";
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (f) { /* "0::/path" */
        if (fscanf(f, "0::%255s", group) != 1) group[0] = '\0';
        fclose(f);
    }
    snprintf(path, sizeof path, "/sys/fs/cgroup%s/%s", strcmp(group, "/") ? group : "", name);
    uint64_t v = 0;
    f = fopen(path, "r");
    if (f) {
        if (fscanf(f, "%" SCNu64, &v) != 1) v = 0;
        fclose(f);
    }
    return v;
}

static uint64_t least(uint64_t a, uint64_t b) { return !a ? b : (!b || a < b ? a : b); }

uint64_t footprint_available(void)
{
    uint64_t avail = proc_kb("/proc/meminfo", "MemAvailable"), max = cgroup_value("memory.max");
    if (max) {
        uint64_t used = cgroup_value("memory.current");
        avail = least(avail, max > used ? max - used : 1);
    }
    const struct { int limit; const char *used; } limits[] = {{RLIMIT_DATA, "VmData"},
                                                              {RLIMIT_AS, "VmSize"}};
    for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
        struct rlimit rl;
        if (getrlimit(limits[i].limit, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) continue;
        uint64_t used = proc_kb("/proc/self/status", limits[i].used);
        avail = least(avail, rl.rlim_cur > used ? (uint64_t)rl.rlim_cur - used : 1);
    }
    return avail;
}

/* Whether a footprint leaves room in `available` for what no buffer
 * accounts for: the GEMM library's workspaces, threads' stacks, the
 * process's own pages (a tenth, and 64 MiB). */
static int room_for(uint64_t total, uint64_t available)
{
    return total + total / 10 + ((uint64_t)64 << 20) <= available;
}

/* The largest value of *knob in [1, *knob) with which cfg fits; 0: none. */
static int fitting(dps_config *c, int *knob, const backend *be, uint64_t available)
{
    int lo = 0, hi = *knob, keep = *knob;
    while (hi - lo > 1) { /* fits(lo) or lo = 0; !fits(hi) */
        *knob = lo + (hi - lo) / 2;
        footprint fp;
        footprint_of(c, be, &fp);
        if (room_for(fp.total, available)) lo = *knob;
        else hi = *knob;
    }
    *knob = keep;
    return lo;
}

/* A batch fitting's result rounded down to one --accum takes (a multiple
 * of devices x micro-steps); 0 when none is left. */
static int whole_micro_batches(const dps_config *c, int batch)
{
    int unit = c->accum > 1 ? c->ngpus * c->accum : 1;
    return batch - batch % unit;
}

/* " --tokens N fits" (else --batch, else --layers; a model file: --batch), or why none does. */
static void suggest(const dps_config *cfg, const backend *be, uint64_t available, char *buf, size_t len)
{
    dps_config c = *cfg;
    if (c.net_file) { /* a model file's shapes are its own: only the batch moves */
        int b = c.global_batch > c.ngpus ? fitting(&c, &c.global_batch, be, available) : 0;
        b = whole_micro_batches(&c, b);
        if (b >= c.ngpus) snprintf(buf, len, "--batch %d fits", b);
        else snprintf(buf, len, "even one sample a device does not fit; use fewer --gpus or a "
                      "smaller model");
        return;
    }
    int v = fitting(&c, &c.shape.tokens, be, available);
    if (v) { snprintf(buf, len, "--tokens %d fits", v); return; }
    c.shape.tokens = 1;
    v = c.global_batch > c.ngpus ? whole_micro_batches(&c, fitting(&c, &c.global_batch, be, available)) : 0;
    if (v >= c.ngpus) { snprintf(buf, len, "--tokens 1 --batch %d fits", v); return; }
    c.global_batch = c.accum > 1 ? c.ngpus * c.accum : c.ngpus;
    v = fitting(&c, &c.shape.layers, be, available);
    if (v) snprintf(buf, len, "--tokens 1 --batch %d --layers %d fits", c.global_batch, v);
    else snprintf(buf, len, "even one layer, token and sample a device does not fit; use fewer --gpus");
}

dps_status footprint_check(const dps_config *cfg, const backend *be, uint64_t available)
{
    footprint fp;
    footprint_of(cfg, be, &fp);
    if (!available || room_for(fp.total, available)) return DPS_OK;
    char need[24], devs[24], host[24], have[24], fix[160];
    dps_fmt_bytes(fp.total, need, sizeof need);
    dps_fmt_bytes(be->kind == BE_HOST ? fp.devices : 0, devs, sizeof devs);
    dps_fmt_bytes(fp.host, host, sizeof host);
    dps_fmt_bytes(available, have, sizeof have);
    suggest(cfg, be, available, fix, sizeof fix);
    return dps_fail(DPS_ERR_OOM, "host memory: this configuration needs about %s (emulated "
                    "devices %s, host buffers %s) and a tenth more for libraries and threads, "
                    "and %s is available; refused before allocating; %s", need, devs, host,
                    have, fix);
}
