/* Suite files (see suite.h): a strict line parser and the expansion into
 * configurations. Every error names the file and line. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "suite.h"
#include "util.h"

typedef struct parse_ctx {
    const char *path;
    int line;
    suite *s;
} parse_ctx;

static dps_status perr(const parse_ctx *p, const char *what, const char *val)
{
    return dps_fail(DPS_ERR_USAGE, "%s:%d: %s%s%s%s", p->path, p->line, what,
                    val ? " '" : "", val ? val : "", val ? "'" : "");
}

static char *trim(char *t)
{
    while (isspace((unsigned char)*t)) t++;
    char *e = t + strlen(t);
    while (e > t && isspace((unsigned char)e[-1])) *--e = '\0';
    return t;
}

/* Splits a comma list in place; empty entries are errors. */
static dps_status split(const parse_ctx *p, char *v, char **items, int max, int *n)
{
    *n = 0;
    for (char *t = v;;) {
        char *comma = strchr(t, ',');
        if (comma) *comma = '\0';
        char *item = trim(t);
        if (!*item) return perr(p, "empty entry in the list", NULL);
        if (*n >= max) return perr(p, "too many entries (at most 16)", NULL);
        items[(*n)++] = item;
        if (!comma) break;
        t = comma + 1;
    }
    return DPS_OK;
}

static dps_status parse_int(const parse_ctx *p, const char *v, int64_t lo, int64_t hi, int *out)
{
    int64_t x;
    if (dps_parse_i64(v, lo, hi, &x)) {
        char what[96];
        snprintf(what, sizeof what, "expected an integer from %lld to %lld, got",
                 (long long)lo, (long long)hi);
        return perr(p, what, v);
    }
    *out = (int)x;
    return DPS_OK;
}

static dps_status word(const parse_ctx *p, const char *v, const char *const *words, int n,
                       int *out)
{
    char list[128], what[176];
    *out = dps_match_word(v, words, n, list, sizeof list);
    if (*out >= 0) return DPS_OK;
    snprintf(what, sizeof what, "expected one of %s; got", list);
    return perr(p, what, v);
}

/* A list of at most two distinct words from a pair (dp/ddp, fp32/bf16, ...). */
static dps_status words(const parse_ctx *p, char **it, int n, const char *const *choices,
                        int *out, int *nout)
{
    if (n > 2) return perr(p, "at most two values", NULL);
    for (int i = 0; i < n; i++) DPS_TRY(word(p, it[i], choices, 2, &out[i]));
    if (n == 2 && out[0] == out[1]) return perr(p, "listed twice:", it[1]);
    *nout = n;
    return DPS_OK;
}

static dps_status set_gpus(parse_ctx *p, char **it, int n)
{
    suite *s = p->s;
    s->gpus_all = n == 1 && strcmp(it[0], "all") == 0;
    s->ngpus = 0;
    for (int i = 0; !s->gpus_all && i < n; i++)
        DPS_TRY(parse_int(p, it[i], 1, DPS_MAX_DEVICES, &s->gpus[s->ngpus++]));
    return DPS_OK;
}

static dps_status set_models(parse_ctx *p, char **it, int n)
{
    for (int i = 0; i < n; i++) {
        if (!model_find_preset(it[i])) return perr(p, "unknown preset (see dpscale info)", it[i]);
        dps_strlcpy(p->s->models[i], it[i], DPS_NAME_MAX);
    }
    p->s->nmodels = n;
    return DPS_OK;
}

static dps_status set_key(parse_ctx *p, const char *key, char *val)
{
    static const char *const onoff[] = {"off", "on"};
    suite *s = p->s;
    char *it[SUITE_MAX_LIST];
    int n = 0;
    DPS_TRY(split(p, val, it, SUITE_MAX_LIST, &n));
    int scalar = strcmp(key, "batch_per_gpu") == 0 ||
                 strcmp(key, "global_batch") == 0 || strcmp(key, "steps") == 0 ||
                 strcmp(key, "warmup") == 0 || strcmp(key, "device_mem") == 0;
    if (scalar && n != 1) return perr(p, "expected one value for", key);
    int w[2] = {0, 0};
    if (strcmp(key, "modes") == 0) {
        DPS_TRY(words(p, it, n, dps_mode_names, w, &s->nmodes));
        for (int i = 0; i < n; i++) s->modes[i] = (dps_mode)w[i];
    } else if (strcmp(key, "gpus") == 0) {
        return set_gpus(p, it, n);
    } else if (strcmp(key, "models") == 0) {
        return set_models(p, it, n);
    } else if (strcmp(key, "batch") == 0) {
        DPS_TRY(words(p, it, n, dps_scaling_names, s->policies, &s->npolicies));
    } else if (strcmp(key, "batch_per_gpu") == 0) {
        DPS_TRY(parse_int(p, it[0], 1, 1 << 24, &s->batch_per_gpu));
    } else if (strcmp(key, "global_batch") == 0) {
        DPS_TRY(parse_int(p, it[0], 1, 1 << 24, &s->global_batch));
    } else if (strcmp(key, "precisions") == 0) {
        DPS_TRY(words(p, it, n, dps_precision_names, w, &s->nprecisions));
        for (int i = 0; i < n; i++) s->precisions[i] = (dps_precision)w[i];
    } else if (strcmp(key, "optimizers") == 0) {
        DPS_TRY(words(p, it, n, dps_optimizer_names, w, &s->noptimizers));
        for (int i = 0; i < n; i++) s->optimizers[i] = (dps_optimizer)w[i];
    } else if (strcmp(key, "bucket_mb") == 0) {
        for (int i = 0; i < n; i++)
            if (dps_parse_f64(it[i], &s->bucket_mb[i]) || !(s->bucket_mb[i] > 0) || s->bucket_mb[i] > 65536)
                return perr(p, "expected a bucket size in MiB above 0, got", it[i]);
        s->nbucket_mb = n;
    } else if (strcmp(key, "overlap") == 0) {
        DPS_TRY(words(p, it, n, onoff, s->overlap, &s->noverlap));
    } else if (strcmp(key, "steps") == 0) {
        DPS_TRY(parse_int(p, it[0], 1, 10000000, &s->steps));
    } else if (strcmp(key, "warmup") == 0) {
        DPS_TRY(parse_int(p, it[0], 0, 1000000, &s->warmup));
    } else if (strcmp(key, "device_mem") == 0) {
        if (dps_parse_bytes(it[0], &s->device_mem) || !s->device_mem)
            return perr(p, "expected a byte count (K/M/G suffixes), got", it[0]);
    } else {
        return perr(p, "unknown key (modes, gpus, models, batch, batch_per_gpu, global_batch, "
                    "precisions, optimizers, bucket_mb, overlap, steps, warmup, device_mem)", key);
    }
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
    char *t = trim(line);
    if (!*t) return DPS_OK;
    if (*t == '[') {
        if (strcmp(t, "[host]") == 0) *active = kind == BE_HOST;
        else if (strcmp(t, "[cuda]") == 0) *active = kind == BE_CUDA;
        else return perr(p, "unknown section (expected [host] or [cuda])", t);
        return DPS_OK;
    }
    char *eq = strchr(t, '=');
    if (!eq) return perr(p, "expected key = value, got", t);
    *eq = '\0';
    char *key = trim(t), *val = trim(eq + 1);
    if (!*key) return perr(p, "missing key before '='", NULL);
    if (!*val) return perr(p, "empty value for", key);
    if (!*active) { /* still checked, so a typo in the other section is found here too */
        suite scratch = *p->s;
        parse_ctx q = *p;
        q.s = &scratch;
        return set_key(&q, key, val);
    }
    return set_key(p, key, val);
}

static void suite_defaults(suite *s, const char *path)
{
    memset(s, 0, sizeof *s);
    dps_strlcpy(s->path, path, sizeof s->path);
    s->modes[0] = MODE_DP;
    s->modes[1] = MODE_DDP;
    s->nmodes = 2;
    s->gpus_all = 1;
    dps_strlcpy(s->models[0], "small", DPS_NAME_MAX);
    s->nmodels = 1;
    s->precisions[0] = PREC_FP32;
    s->nprecisions = 1;
    s->optimizers[0] = OPT_SGD;
    s->noptimizers = 1;
    s->bucket_mb[0] = 25.0;
    s->nbucket_mb = 1;
    s->overlap[0] = 1;
    s->noverlap = 1;
    s->npolicies = 1; /* weak */
}

/* The whole file (at most 1 MiB), NUL-terminated. */
static dps_status read_file(const char *path, char **text, size_t *len)
{
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
    parse_ctx p = {.path = path, .s = s};
    int active = 1;
    dps_status rc = DPS_OK;
    for (size_t pos = 0; !rc && pos < len;) {
        char *line = text + pos, *nl = memchr(line, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - line) : len - pos;
        p.line++;
        if (memchr(line, '\0', n)) rc = perr(&p, "not a text file (NUL byte)", NULL);
        line[n] = '\0';
        if (!rc) rc = parse_line(&p, line, kind, &active);
        pos += n + 1;
    }
    free(text);
    return rc;
}

/* gpus = all: 1, 2, 4, ... up to the devices present (4 emulated at most). */
static int gpu_counts(const suite *s, const backend *be, int *out)
{
    if (!s->gpus_all) {
        memcpy(out, s->gpus, sizeof s->gpus);
        return s->ngpus;
    }
    int n = 0, top = be->emulated && be->ndev > 4 ? 4 : be->ndev;
    for (int g = 1; g <= top; g *= 2) out[n++] = g;
    if (n && out[n - 1] != top) out[n++] = top; /* e.g. 6 GPUs: 1, 2, 4, 6 */
    return n;
}

static void fill(const suite *s, const dps_config *base, const backend *be, int model,
                 int strong, int g, int maxg, sweep_item *it)
{
    dps_config *c = &it->cfg;
    *c = *base;
    const model_preset *p = model_find_preset(s->models[model]);
    dps_strlcpy(c->model, p->name, sizeof c->model);
    c->shape = p->shape;
    c->ngpus = g;
    for (int i = 0; i < g; i++) c->devices[i] = i;
    int per = s->batch_per_gpu ? s->batch_per_gpu : p->batch_per_gpu;
    c->global_batch = strong ? (s->global_batch ? s->global_batch : per * maxg) : per * g;
    c->strong = strong;
    if (s->steps) c->steps = s->steps;
    if (s->warmup) c->warmup = s->warmup;
    if (s->device_mem && be->kind == BE_HOST) c->be.device_mem = s->device_mem;
    /* a fault injected for the sweep applies where its rank exists */
    if (c->mode == MODE_DP || c->fault_rank >= g || c->fault_step >= c->warmup + c->steps)
        c->fault_rank = -1;
    if (config_check(c, be) != DPS_OK) dps_strlcpy(it->skip, dps_errmsg(), sizeof it->skip);
}

dps_status suite_expand(const suite *s, const dps_config *base, const backend *be,
                        double lr_override, sweep_item **items, int *n)
{
    int gpus[SUITE_MAX_LIST + 1];
    int ng = gpu_counts(s, be, gpus), maxg = 1;
    for (int i = 0; i < ng; i++)
        if (gpus[i] > maxg) maxg = gpus[i];
    size_t most = (size_t)s->nmodels * s->nprecisions * s->noptimizers * s->nmodes * ng *
                  s->nbucket_mb * s->noverlap * s->npolicies;
    *items = calloc(most ? most : 1, sizeof **items);
    if (!*items) return dps_fail(DPS_ERR_RUNTIME, "out of host memory for %zu configurations", most);
    *n = 0;
    for (int m = 0; m < s->nmodels; m++)
        for (int pr = 0; pr < s->nprecisions; pr++)
            for (int o = 0; o < s->noptimizers; o++)
                for (int k = 0; k < s->nmodes; k++)
                    for (int pol = 0; pol < s->npolicies; pol++)
                        for (int g = 0; g < ng; g++)
                            for (int b = 0; b < s->nbucket_mb; b++)
                                for (int v = 0; v < s->noverlap; v++) {
                                    /* dp has no buckets: one entry, not one per size */
                                    if (s->modes[k] == MODE_DP && (b || v)) continue;
                                    dps_config c = *base;
                                    c.mode = s->modes[k];
                                    c.precision = s->precisions[pr];
                                    c.optimizer = s->optimizers[o];
                                    config_optimizer_defaults(&c);
                                    if (lr_override > 0) c.hp.lr = (float)lr_override;
                                    c.bucket_mb = s->bucket_mb[b];
                                    c.overlap = s->overlap[v];
                                    sweep_item *it = &(*items)[*n];
                                    fill(s, &c, be, m, s->policies[pol], gpus[g], maxg, it);
                                    (*n)++;
                                }
    return DPS_OK;
}
