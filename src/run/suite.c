/* Suite files (see suite.h): a strict line parser whose keys, limits and
 * words come from the settings table, and the expansion into configurations.
 * Every error names the file and line. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "run/suite.h"
#include "core/strategy.h"
#include "core/util.h"

typedef struct parse_ctx {
    const char *path;
    int line;
    suite *s;                        /* where the keys go: main, or an added sweep */
    suite *main;
    int section;                     /* 0: common, 1: [host], 2: [cuda], 3 + k: added sweep k */
    int sections;                    /* added sweeps seen, every backend's */
    int key_line[3 + SUITE_MAX_ADDED][SET_COUNT]; /* where each key was given, per section */
    int settings;                    /* keys given, every section */
} parse_ctx;

static dps_status perr(const parse_ctx *p, const char *what, const char *val)
{
    return dps_fail(DPS_ERR_USAGE, "%s:%d: %s%s%s%s", p->path, p->line, what,
                    val ? " '" : "", val ? val : "", val ? "'" : "");
}

/* A refused value, in the command line's words ("--gpus x: what"): "FILE:LINE: gpus = x: what". */
static dps_status bad_value(const parse_ctx *p, const char *key, const char *val, const char *what)
{
    return dps_fail(DPS_ERR_USAGE, "%s:%d: %s = %s: %s", p->path, p->line, key, val, what);
}

static dps_status unknown_key(const parse_ctx *p, const char *key)
{
    char what[320] = "unknown key (";
    const char *sep = "";
    for (int id = 0; id < SET_COUNT; id++) {
        if (!settings_table[id].key) continue;
        size_t used = strlen(what);
        snprintf(what + used, sizeof what - used, "%s%s", sep, settings_table[id].key);
        sep = ", ";
    }
    strncat(what, ")", sizeof what - strlen(what) - 1);
    return perr(p, what, key);
}

/* Where a list key's length goes; NULL for a single value. */
static int *list_count(suite *s, settings_id id)
{
    switch (id) {
    case SET_MODE: return &s->nmodes;
    case SET_GPUS: return &s->ngpus;
    case SET_MODEL: return &s->nmodels;
    case SET_SCALING: return &s->npolicies;
    case SET_PRECISION: return &s->nprecisions;
    case SET_OPTIMIZER: return &s->noptimizers;
    case SET_BUCKET_MB: return &s->nbucket_mb;
    case SET_OVERLAP: return &s->noverlap;
    case SET_DP_IMPL: return &s->ndp_impls;
    case SET_DDP_IMPL: return &s->nddp_impls;
    case SET_ACCUM: return &s->naccum;
    case SET_NO_SYNC: return &s->nno_sync;
    default: return NULL;
    }
}

static void store(suite *s, settings_id id, const settings_value *v)
{
    for (int i = 0; i < v->n; i++) {
        int64_t n = v->v[i].i;
        switch (id) {
        case SET_MODE: s->modes[i] = (dps_mode)n; break;
        case SET_GPUS: s->gpus[i] = (int)n; break;
        case SET_MODEL: dps_strlcpy(s->models[i], settings_value_item(v, i), DPS_PATH_MAX); break;
        case SET_SCALING: s->policies[i] = (int)n; break;
        case SET_PRECISION: s->precisions[i] = (dps_precision)n; break;
        case SET_OPTIMIZER: s->optimizers[i] = (dps_optimizer)n; break;
        case SET_BUCKET_MB: s->bucket_mb[i] = v->v[i].x; break;
        case SET_OVERLAP: s->overlap[i] = (int)n; break;
        case SET_DP_IMPL: s->dp_impls[i] = (dps_dp_impl)n; break;
        case SET_DDP_IMPL: s->ddp_impls[i] = (dps_dp_impl)n; break;
        case SET_ACCUM: s->accum[i] = (int)n; break;
        case SET_NO_SYNC: s->no_sync[i] = (int)n; break;
        case SET_BATCH_PER_GPU: s->batch_per_gpu = (int)n; break;
        case SET_BATCH: s->global_batch = (int)n; break;
        case SET_STEPS: s->steps = (int)n; break;
        case SET_WARMUP: s->warmup = (int)n; break;
        case SET_DEVICE_MEM: s->device_mem = (uint64_t)n; break;
        default: break;
        }
    }
    int *count = list_count(s, id);
    if (count) *count = v->n;
    if (id == SET_GPUS) s->gpus_all = 0;
}

static dps_status set_key(parse_ctx *p, const char *key, const char *val)
{
    int id = settings_find_key(key);
    if (id < 0) return unknown_key(p, key);
    int *first = &p->key_line[p->section][id];
    if (*first) {
        char what[96];
        snprintf(what, sizeof what, "given again (first at line %d):", *first);
        return perr(p, what, key);
    }
    *first = p->line;
    p->settings++;
    const settings_entry *e = &settings_table[id];
    if (e->suite_max < 2 && strchr(val, ',')) return bad_value(p, key, val, "expected one value");
    if (id == SET_GPUS && strcmp(val, "all") == 0) {
        p->s->gpus_all = 1;
        p->s->ngpus = 0;
        return DPS_OK;
    }
    settings_value v;
    settings_error err;
    if (settings_value_parse((settings_id)id, e->suite_max, val, &v, &err))
        return bad_value(p, key, err.item[0] ? err.item : val, err.what);
    store(p->s, (settings_id)id, &v);
    return DPS_OK;
}

/* `[+ NAME]`, `[host + NAME]` or `[cuda + NAME]` (t, trimmed): an added
 * sweep, a copy of the main one as it stands, when it applies to backend
 * kind (*active); else its keys are only checked. */
static dps_status added_section(parse_ctx *p, const char *t, be_kind kind, int *active)
{
    const char *plus = strchr(t, '+');
    char where[16] = "", name[SUITE_NAME_MAX + 1];
    size_t wlen = (size_t)(plus - t - 1);
    if (wlen >= sizeof where) return perr(p, "unknown section (expected [host], [cuda] or [+ NAME])", t);
    memcpy(where, t + 1, wlen);
    where[wlen] = '\0';
    const char *w = dps_trim(where);
    if (*w && strcmp(w, "host") && strcmp(w, "cuda"))
        return perr(p, "unknown section (expected [+ NAME], [host + NAME] or [cuda + NAME])", t);
    dps_strlcpy(name, plus + 1, sizeof name);
    char *end = strchr(name, ']');
    if (end) *end = '\0';
    char *n = dps_trim(name);
    if (!*n || strlen(n) >= SUITE_NAME_MAX || strchr(n, '['))
        return perr(p, "an added sweep needs a short name, as [+ accumulation]", t);
    if (p->sections == SUITE_MAX_ADDED) return perr(p, "more added sweeps than 8", t);
    p->section = 3 + p->sections++;
    *active = !*w || kind == (strcmp(w, "host") == 0 ? BE_HOST : BE_CUDA);
    p->s = p->main;
    if (!*active) return DPS_OK;
    suite *m = p->main, *grown = realloc(m->added, (size_t)(m->nadded + 1) * sizeof *grown);
    if (!grown) return dps_fail(DPS_ERR_RUNTIME, "out of host memory reading %s", p->path);
    m->added = grown;
    suite *a = &m->added[m->nadded++];
    *a = *m;
    a->added = NULL;
    a->nadded = 0;
    dps_strlcpy(a->name, n, sizeof a->name);
    p->s = a;
    return DPS_OK;
}

/* One line: blank, comment, [section] or key = value. *active says whether
 * the current section applies to this backend. */
static dps_status parse_line(parse_ctx *p, char *line, be_kind kind, int *active)
{
    for (char *c = line; *c; c++)
        if ((unsigned char)*c < 0x20 && *c != '\t' && *c != '\n' && *c != '\r')
            return perr(p, "not a text line (control characters)", NULL);
    char *hash = strchr(line, '#');
    if (hash) *hash = '\0';
    char *t = dps_trim(line);
    if (!*t) return DPS_OK;
    if (*t == '[') {
        if (strchr(t, '+') && t[strlen(t) - 1] == ']') return added_section(p, t, kind, active);
        if (strcmp(t, "[host]") == 0) p->section = 1;
        else if (strcmp(t, "[cuda]") == 0) p->section = 2;
        else return perr(p, "unknown section (expected [host], [cuda] or [+ NAME])", t);
        *active = kind == (p->section == 1 ? BE_HOST : BE_CUDA);
        p->s = p->main;
        return DPS_OK;
    }
    char *eq = strchr(t, '=');
    if (!eq) return perr(p, "expected key = value, got", t);
    *eq = '\0';
    char *key = dps_trim(t), *val = dps_trim(eq + 1);
    if (!*key) return perr(p, "missing key before '='", NULL);
    if (!*val) return perr(p, "empty value for", key);
    if (!*active) { /* still checked, so a typo in the other section is found here too */
        suite scratch = *p->s;
        suite *mine = p->s;
        p->s = &scratch;
        dps_status rc = set_key(p, key, val);
        p->s = mine;
        return rc;
    }
    return set_key(p, key, val);
}

static void suite_defaults(suite *s, const char *path)
{
    memset(s, 0, sizeof *s);
    dps_strlcpy(s->path, path, sizeof s->path);
    const settings_entry *t = settings_table;
    s->nmodes = dps_strategies_compared(s->modes); /* dp and ddp; a sharded one when asked for */
    s->gpus_all = 1;
    dps_strlcpy(s->models[0], t[SET_MODEL].def_text, DPS_NAME_MAX);
    s->nmodels = 1;
    s->precisions[0] = (dps_precision)t[SET_PRECISION].def.i;
    s->nprecisions = 1;
    s->optimizers[0] = (dps_optimizer)t[SET_OPTIMIZER].def.i;
    s->noptimizers = 1;
    s->bucket_mb[0] = t[SET_BUCKET_MB].def.x;
    s->nbucket_mb = 1;
    s->overlap[0] = (int)t[SET_OVERLAP].def.i;
    s->noverlap = 1;
    s->ndp_impls = s->nddp_impls = 0; /* none given: the command line's */
    s->naccum = s->nno_sync = 0;
    s->policies[0] = (int)t[SET_SCALING].def.i;
    s->npolicies = 1;
}

/* The whole file (at most 1 MiB), NUL-terminated. */
static dps_status read_file(const char *path, char **text, size_t *len)
{
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return dps_fail(DPS_ERR_USAGE, "%s: not a regular file (a suite is a text file)", path);
    FILE *f = fopen(path, "rb");
    if (!f) return dps_fail(DPS_ERR_USAGE, "%s: cannot read the suite file: %s", path, strerror(errno));
    size_t cap = (1 << 20) + 1;
    *text = malloc(cap + 1);
    if (!*text) {
        fclose(f);
        return dps_fail(DPS_ERR_RUNTIME, "out of host memory reading %s", path);
    }
    *len = fread(*text, 1, cap, f);
    int bad = ferror(f);
    fclose(f);
    (*text)[*len] = '\0';
    if (bad || *len == cap) {
        free(*text);
        return dps_fail(DPS_ERR_USAGE, "%s: %s", path, bad ? "read error" : "larger than 1 MiB");
    }
    return DPS_OK;
}

dps_status suite_load(const char *path, be_kind kind, suite *s)
{
    suite_defaults(s, path);
    char *text = NULL;
    size_t len = 0;
    DPS_TRY(read_file(path, &text, &len));
    parse_ctx *p = calloc(1, sizeof *p);
    if (!p) {
        free(text);
        return dps_fail(DPS_ERR_RUNTIME, "out of host memory reading %s", path);
    }
    *p = (parse_ctx){.path = path, .s = s, .main = s};
    int active = 1;
    dps_status rc = DPS_OK;
    size_t pos = len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0; /* a UTF-8 BOM */
    for (; !rc && pos < len;) {
        char *line = text + pos, *nl = memchr(line, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - line) : len - pos;
        p->line++;
        if (memchr(line, '\0', n)) rc = perr(p, "not a text file (NUL byte)", NULL);
        line[n] = '\0';
        if (!rc) rc = parse_line(p, line, kind, &active);
        pos += n + 1;
    }
    if (!rc && !p->settings)
        rc = dps_fail(DPS_ERR_USAGE, "%s: no settings (an empty suite would run the whole default "
                      "sweep; give at least one key, e.g. models = small)", path);
    free(p);
    free(text);
    if (rc) suite_free(s);
    return rc;
}

void suite_free(suite *s)
{
    free(s->added);
    s->added = NULL;
    s->nadded = 0;
}

/* gpus = all: 1, 2, 4, ... up to the devices present; emulated, up to the
 * cores that run them (at least 2, at most 4): more would measure the CPU's
 * oversubscription, not the strategies. */
static int gpu_counts(const suite *s, const backend *be, int *out)
{
    if (!s->gpus_all) {
        memcpy(out, s->gpus, sizeof s->gpus);
        return s->ngpus;
    }
    int top = be->ndev;
    if (be->emulated) {
        int cores = be->host_cores < 2 ? 2 : be->host_cores > 4 ? 4 : be->host_cores;
        top = top < cores ? top : cores;
    }
    int n = 0;
    for (int g = 1; g <= top; g *= 2) out[n++] = g;
    if (n && out[n - 1] != top) out[n++] = top; /* e.g. 6 GPUs: 1, 2, 4, 6 */
    return n;
}

/* The folder of a suite file, where its model files' relative paths
 * start; "" (the working directory) for a bare file name. */
static const char *folder_of(const char *path, char *buf, size_t len)
{
    dps_strlcpy(buf, path, len);
    char *slash = strrchr(buf, '/');
    if (!slash) buf[0] = '\0';
    else if (slash == buf) buf[1] = '\0';
    else *slash = '\0';
    return buf;
}

/* One configuration of the suite into *it: skipped (it->skip says why) when
 * this machine cannot run it; a value no machine can run is bad input, the
 * same refusal (exit 2) as on the command line. */
static dps_status fill(const suite *s, const dps_config *base, const backend *be, int model,
                       int strong, int g, int maxg, sweep_item *it)
{
    dps_config *c = &it->cfg;
    *c = *base;
    char dir[DPS_PATH_MAX], why[DPS_ERRMSG_MAX];
    int per = 0;
    if (config_set_model(c, s->models[model], folder_of(s->path, dir, sizeof dir), &per) != DPS_OK) {
        dps_strlcpy(why, dps_errmsg(), sizeof why);
        return dps_fail(DPS_ERR_USAGE, "%s: models = %s: %s", s->path, s->models[model], why);
    }
    c->ngpus = g;
    for (int i = 0; i < g; i++) c->devices[i] = i;
    if (s->batch_per_gpu) per = s->batch_per_gpu;
    c->global_batch = strong ? (s->global_batch ? s->global_batch : per * maxg) : per * g;
    c->strong = strong;
    if (s->steps) c->steps = s->steps;
    if (s->warmup) c->warmup = s->warmup;
    if (s->device_mem && be->kind == BE_HOST) c->be.device_mem = s->device_mem;
    /* a fault injected for the sweep applies where its rank exists */
    if (!dps_strategy_of(c->mode)->per_rank || c->fault_rank >= g || c->fault_step >= c->warmup + c->steps)
        c->fault_rank = -1;
    if (config_check_values(c) != DPS_OK) {
        char id[192];
        config_id(c, id, sizeof id);
        dps_strlcpy(why, dps_errmsg(), sizeof why);
        return dps_fail(DPS_ERR_USAGE, "%s: configuration %s: %s (no machine runs it: change the "
                        "suite's values)", s->path, id, why);
    }
    if (config_check(c, be) != DPS_OK) dps_strlcpy(it->skip, dps_errmsg(), sizeof it->skip);
    return DPS_OK;
}

/* The dimensions of a suite, outermost first (suite.h's order). */
enum { D_MODEL, D_PRECISION, D_OPTIMIZER, D_MODE, D_POLICY, D_GPUS, D_BUCKET, D_OVERLAP,
       D_DP_IMPL, D_DDP_IMPL, D_ACCUM, D_NO_SYNC, D_COUNT };

/* Advances the index vector (an odometer over the dimensions); 0 when done. */
static int next_index(int *idx, const int *count)
{
    for (int d = D_COUNT - 1; d >= 0; d--) {
        if (++idx[d] < count[d]) return 1;
        idx[d] = 0;
    }
    return 0;
}

/* dp has no buckets, no ddp implementation and no no_sync, ddp no dp
 * implementation, one micro-step nothing to sync but the step: one entry,
 * not one each. */
static int redundant(const suite *s, const int *idx, int accum)
{
    const dps_strategy *st = dps_strategy_of(s->modes[idx[D_MODE]]);
    if (idx[D_NO_SYNC] && (accum == 1 || !st->buckets)) return 1;
    if (!st->per_rank) return idx[D_BUCKET] || idx[D_OVERLAP] || idx[D_DDP_IMPL];
    if (!st->buckets && (idx[D_BUCKET] || idx[D_OVERLAP])) return 1;
    return idx[D_DP_IMPL] != 0;
}

static dps_status expand_one(const suite *s, const dps_config *base, const backend *be,
                             double lr_override, sweep_item **items, int *n)
{
    int gpus[SUITE_MAX_LIST + 1];
    int ng = gpu_counts(s, be, gpus), maxg = 1;
    for (int i = 0; i < ng; i++)
        if (gpus[i] > maxg) maxg = gpus[i];
    int count[D_COUNT] = {s->nmodels, s->nprecisions, s->noptimizers, s->nmodes, s->npolicies,
                          ng, s->nbucket_mb, s->noverlap, s->ndp_impls ? s->ndp_impls : 1,
                          s->nddp_impls ? s->nddp_impls : 1, s->naccum ? s->naccum : 1,
                          s->nno_sync ? s->nno_sync : 1};
    size_t most = 1;
    for (int d = 0; d < D_COUNT; d++) most *= (size_t)count[d];
    *items = calloc(most ? most : 1, sizeof **items);
    if (!*items) return dps_fail(DPS_ERR_RUNTIME, "out of host memory for %zu configurations", most);
    *n = 0;
    int idx[D_COUNT] = {0};
    for (int more = most > 0; more; more = next_index(idx, count)) {
        int accum = s->naccum ? s->accum[idx[D_ACCUM]] : base->accum;
        if (redundant(s, idx, accum)) continue;
        dps_config c = *base;
        c.accum = accum;
        if (s->nno_sync) c.no_sync = s->no_sync[idx[D_NO_SYNC]];
        c.mode = s->modes[idx[D_MODE]];
        if (c.accum == 1 || !dps_strategy_of(c.mode)->buckets) c.no_sync = 1; /* nothing to sync but the step */
        c.precision = s->precisions[idx[D_PRECISION]];
        c.optimizer = s->optimizers[idx[D_OPTIMIZER]];
        config_optimizer_defaults(&c);
        if (lr_override > 0) c.hp.lr = (float)lr_override;
        if (s->nddp_impls) c.ddp_impl = s->ddp_impls[idx[D_DDP_IMPL]];
        c.bucket_mb = s->bucket_mb[idx[D_BUCKET]];
        c.overlap = s->overlap[idx[D_OVERLAP]];
        if (s->ndp_impls) c.dp_impl = s->dp_impls[idx[D_DP_IMPL]];
        sweep_item *it = &(*items)[(*n)++];
        dps_status rc = fill(s, &c, be, idx[D_MODEL], s->policies[idx[D_POLICY]],
                             gpus[idx[D_GPUS]], maxg, it);
        if (rc) {
            free(*items);
            *items = NULL;
            return rc;
        }
    }
    return DPS_OK;
}

/* The index of cfg's id in items[0..n), or -1. */
static int find_config(const sweep_item *items, int n, const dps_config *cfg)
{
    char id[192], other[192];
    config_id(cfg, id, sizeof id);
    for (int i = 0; i < n; i++) {
        config_id(&items[i].cfg, other, sizeof other);
        if (strcmp(id, other) == 0) return i;
    }
    return -1;
}

/* An added sweep's configuration that the sweep has already: the same one
 * (it runs once), unless it asks for other steps, warm-up or capacity, which
 * no id tells apart. */
static dps_status same_config(const sweep_item *had, const dps_config *c)
{
    const dps_config *h = &had->cfg;
    if (h->steps == c->steps && h->warmup == c->warmup && h->be.device_mem == c->be.device_mem)
        return DPS_OK;
    char id[192];
    config_id(c, id, sizeof id);
    return dps_fail(DPS_ERR_USAGE, "configuration %s is in the sweep already with other steps, "
                    "warmup or device_mem (%d, %d, %zu against %d, %d, %zu); an id names one "
                    "run: give the added sweep another model, batch or count", id, h->steps,
                    h->warmup, h->be.device_mem, c->steps, c->warmup, c->be.device_mem);
}

/* The added sweep a's configurations after the n in *items, but those already there. */
static dps_status append_added(const suite *a, const dps_config *base, const backend *be,
                               double lr_override, sweep_item **items, int *n)
{
    sweep_item *more = NULL;
    int nmore = 0;
    DPS_TRY(expand_one(a, base, be, lr_override, &more, &nmore));
    sweep_item *grown = realloc(*items, (size_t)(*n + nmore + 1) * sizeof *grown);
    if (!grown) {
        free(more);
        return dps_fail(DPS_ERR_RUNTIME, "out of host memory for %d configurations", *n + nmore);
    }
    *items = grown;
    dps_status rc = DPS_OK;
    for (int i = 0; !rc && i < nmore; i++) {
        int had = find_config(*items, *n, &more[i].cfg);
        if (had < 0) (*items)[(*n)++] = more[i];
        else rc = same_config(&(*items)[had], &more[i].cfg);
    }
    free(more);
    return rc;
}

dps_status suite_expand(const suite *s, const dps_config *base, const backend *be,
                        double lr_override, sweep_item **items, int *n)
{
    DPS_TRY(expand_one(s, base, be, lr_override, items, n));
    for (int k = 0; k < s->nadded; k++) {
        dps_status rc = append_added(&s->added[k], base, be, lr_override, items, n);
        if (rc) {
            char why[DPS_ERRMSG_MAX];
            dps_strlcpy(why, dps_errmsg(), sizeof why);
            free(*items);
            *items = NULL;
            return dps_fail(rc, "[+ %s]: %s", s->added[k].name, why);
        }
    }
    return DPS_OK;
}
