/* Model files (see model_file.h): records read through core/keyfile, each
 * checked as it comes, then what the file promises as a whole. */
#include <stdlib.h>
#include <string.h>

#include "core/keyfile.h"
#include "core/util.h"
#include "model/model_file.h"

const char *const mf_kind_names[MF_KIND_COUNT] = {"gemm", "resample", "norm", "act", "add",
                                                  "embedding", "mul", "cat"};
const char *const mf_fn_names[MF_FN_COUNT] = {"relu", "gelu", "softmax", "tanh", "sigmoid", "relu6",
                                              "silu", "hardswish", "hardsigmoid", "mish"};

#define WORDS_MAX 32
#define DIM_MAX ((int64_t)1 << 31)
#define ELEMS_MAX ((uint64_t)1 << 40) /* elements of one tensor or one sample's activation */
#define HOWTO "(docs/model-file.md)"
#define NO_OP (-2)    /* find_op: none of that name */
#define UNSET (-3)    /* an op's in or from not given */

/* What one op line may say: the keys of its kind, beside in, saved, moved. */
static const char *const kind_keys[MF_KIND_COUNT] = {
    [MF_GEMM] = "m k n b g weight bias", [MF_RESAMPLE] = "n", [MF_NORM] = "c weight bias",
    [MF_ACT] = "fn", [MF_ADD] = "from", [MF_EMBEDDING] = "m weight",
    [MF_MUL] = "from", [MF_CAT] = "from weight",
};

typedef struct reader {
    model_file *mf;
    int tcap, ocap;
    int format_line, name_line, input_line, classes_line;
} reader;

static int split(char *rec, char **w)
{
    int n = 0;
    char *save = NULL;
    for (char *t = strtok_r(rec, " \t\r", &save); t; t = strtok_r(NULL, " \t\r", &save)) {
        if (n == WORDS_MAX) return -1;
        w[n++] = t;
    }
    return n;
}

static int good_name(const char *s)
{
    size_t n = strlen(s);
    if (!n || n >= MF_NAME_MAX) return 0;
    for (const char *c = s; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              strchr("_.:/-[]", *c)))
            return 0;
    return 1;
}

static dps_status whole(const char *path, int line, const char *key, const char *v, int64_t lo,
                        int64_t hi, int64_t *out)
{
    if (dps_parse_i64(v, lo, hi, out) == 0) return DPS_OK;
    return keyfile_fail(path, line, "%s=%s: expected a whole number from %lld to %lld %s", key, v,
                        (long long)lo, (long long)hi, HOWTO);
}

static int find_tensor(const model_file *mf, const char *name)
{
    for (int i = 0; i < mf->ntensors; i++)
        if (strcmp(mf->tensors[i].name, name) == 0) return i;
    return -1;
}

static int find_op(const model_file *mf, const char *name)
{
    for (int i = 0; i < mf->nops; i++)
        if (strcmp(mf->ops[i].name, name) == 0) return i;
    return NO_OP;
}

static dps_status grow(void **p, int *cap, int n, size_t size)
{
    if (n < *cap) return DPS_OK;
    int c = *cap ? 2 * *cap : 64;
    void *q = realloc(*p, (size_t)c * size);
    if (!q) return dps_fail(DPS_ERR_RUNTIME, "out of host memory reading a model file");
    *p = q;
    *cap = c;
    return DPS_OK;
}

/* `64x3x7x7` into t's dims and element count. */
static dps_status parse_shape(const char *path, int line, char *s, mf_tensor *t)
{
    char *save = NULL, copy[256];
    dps_strlcpy(copy, s, sizeof copy);
    t->numel = 1;
    for (char *d = strtok_r(copy, "x", &save); d; d = strtok_r(NULL, "x", &save)) {
        int64_t v;
        if (t->ndims == MF_MAX_DIMS)
            return keyfile_fail(path, line, "tensor shape %s: more than 8 dimensions %s", s, HOWTO);
        DPS_TRY(whole(path, line, "shape", d, 1, DIM_MAX, &v));
        t->dims[t->ndims++] = v;
        if ((uint64_t)t->numel * (uint64_t)v > ELEMS_MAX)
            return keyfile_fail(path, line, "tensor shape %s: more than 2^40 elements", s);
        t->numel *= (size_t)v;
    }
    if (!t->ndims) return keyfile_fail(path, line, "tensor shape '%s': expected dimensions as 64x3x7x7 %s", s, HOWTO);
    return DPS_OK;
}

/* tensor NAME SHAPE ready=K */
static dps_status tensor_record(reader *r, const char *path, int line, char **w, int n)
{
    model_file *mf = r->mf;
    if (n != 4 || strncmp(w[3], "ready=", 6) != 0)
        return keyfile_fail(path, line, "expected 'tensor NAME SHAPE ready=K' %s", HOWTO);
    if (!good_name(w[1]))
        return keyfile_fail(path, line, "tensor name '%s': expected letters, digits and _.:/-[] %s", w[1], HOWTO);
    if (find_tensor(mf, w[1]) >= 0)
        return keyfile_fail(path, line, "tensor %s given twice", w[1]);
    DPS_TRY(grow((void **)&mf->tensors, &r->tcap, mf->ntensors, sizeof *mf->tensors));
    mf_tensor *t = &mf->tensors[mf->ntensors];
    *t = (mf_tensor){.first_op = -1, .line = line};
    dps_strlcpy(t->name, w[1], sizeof t->name);
    DPS_TRY(parse_shape(path, line, w[2], t));
    int64_t k;
    DPS_TRY(whole(path, line, "ready", w[3] + 6, 0, DIM_MAX - 1, &k));
    t->ready = (int)k;
    mf->ntensors++;
    return DPS_OK;
}

static int allowed(mf_kind kind, const char *key)
{
    if (!strcmp(key, "in") || !strcmp(key, "saved") || !strcmp(key, "moved")) return 1;
    const char *k = kind_keys[kind];
    size_t len = strlen(key);
    for (const char *p = strstr(k, key); p; p = strstr(p + 1, key))
        if ((p == k || p[-1] == ' ') && (p[len] == ' ' || !p[len])) return 1;
    return 0;
}

/* weight=T or bias=T: a tensor defined above; the op is its first user if none came before. */
static dps_status tensor_key(model_file *mf, const char *path, int line, const char *v, int *at)
{
    if (*at >= 0) return keyfile_fail(path, line, "a second tensor %s for one key", v);
    int i = find_tensor(mf, v);
    if (i < 0) return keyfile_fail(path, line, "tensor %s is not given above this op %s", v, HOWTO);
    if (mf->tensors[i].first_op < 0) mf->tensors[i].first_op = mf->nops;
    *at = i;
    return DPS_OK;
}

static dps_status op_key(model_file *mf, mf_op *o, const char *path, int line, char *kv)
{
    char *eq = strchr(kv, '=');
    if (!eq || eq == kv || !eq[1])
        return keyfile_fail(path, line, "'%s': expected key=value %s", kv, HOWTO);
    *eq = '\0';
    const char *key = kv, *v = eq + 1;
    if (!allowed(o->kind, key))
        return keyfile_fail(path, line, "a %s op takes no key '%s' (it takes %s, in, saved, moved) %s",
                            mf_kind_names[o->kind], key, kind_keys[o->kind], HOWTO);
    int64_t x;
    int64_t *num = !strcmp(key, "m") ? &o->m : !strcmp(key, "k") ? &o->k : !strcmp(key, "n") ? &o->n
                 : !strcmp(key, "b") ? &o->b : !strcmp(key, "c") ? &o->c
                 : !strcmp(key, "g") ? &o->g : NULL;
    if (num) {
        if (*num) return keyfile_fail(path, line, "key %s given twice", key);
        return whole(path, line, key, v, 1, DIM_MAX, num);
    }
    if (!strcmp(key, "saved") || !strcmp(key, "moved")) {
        DPS_TRY(whole(path, line, key, v, 0, (int64_t)1 << 50, &x));
        *(key[0] == 's' ? &o->saved : &o->moved) = (uint64_t)x;
        return DPS_OK;
    }
    if (!strcmp(key, "weight")) return tensor_key(mf, path, line, v, &o->weight);
    if (!strcmp(key, "bias")) return tensor_key(mf, path, line, v, &o->bias);
    if (!strcmp(key, "fn")) {
        char expected[160];
        int f = dps_match_word(v, mf_fn_names, MF_FN_COUNT, expected, sizeof expected);
        if (f < 0) return keyfile_fail(path, line, "fn=%s: expected one of %s", v, expected);
        o->fn = (mf_fn)f;
        return DPS_OK;
    }
    int *at = key[0] == 'i' ? &o->in : &o->from;
    if (*at != UNSET) return keyfile_fail(path, line, "key %s given twice", key);
    *at = strcmp(v, "input") == 0 ? MF_INPUT : find_op(mf, v);
    if (*at == NO_OP)
        return keyfile_fail(path, line, "%s: no op of that name above this one (or 'input') %s", v, HOWTO);
    return DPS_OK;
}

static size_t out_of(const model_file *mf, int op)
{
    return op == MF_INPUT ? mf->input : mf->ops[op].out_elems;
}

static const char *name_of(const model_file *mf, int op)
{
    return op == MF_INPUT ? "the input" : mf->ops[op].name;
}

/* a*b + c*d, or 0 past ELEMS_MAX */
static size_t elems(int64_t a, int64_t b, int64_t c, int64_t d)
{
    uint64_t x = (uint64_t)a * (uint64_t)b, y = (uint64_t)c * (uint64_t)d;
    return x > ELEMS_MAX || y > ELEMS_MAX || x + y > ELEMS_MAX ? 0 : (size_t)(x + y);
}

static dps_status need_keys(const mf_op *o, const char *path, const char *keys)
{
    for (const char *k = keys; *k; k++) {
        int64_t v = *k == 'm' ? o->m : *k == 'k' ? o->k : *k == 'n' ? o->n : o->c;
        if (!v)
            return keyfile_fail(path, o->line, "a %s op needs %c= %s", mf_kind_names[o->kind], *k, HOWTO);
    }
    return DPS_OK;
}

static dps_status tensor_size(const model_file *mf, const mf_op *o, const char *path, int t,
                              size_t want, const char *what)
{
    if (t < 0 || mf->tensors[t].numel == want) return DPS_OK;
    return keyfile_fail(path, o->line, "%s %s has %zu elements, the op's keys need %zu (%s)",
                        what, mf->tensors[t].name, mf->tensors[t].numel, want, HOWTO);
}

/* A grouped gemm's g: 1 when not given; otherwise it divides k and n, and
 * the gemm has a weight. */
static dps_status gemm_groups(mf_op *o, const char *path)
{
    if (!o->g) {
        o->g = 1;
        return DPS_OK;
    }
    if (o->weight < 0 && o->g > 1)
        return keyfile_fail(path, o->line, "g= is for a gemm with weight %s", HOWTO);
    if (o->k % o->g || o->n % o->g)
        return keyfile_fail(path, o->line, "gemm g=%lld: k=%lld and n=%lld must both be multiples "
                            "of g %s", (long long)o->g, (long long)o->k, (long long)o->n, HOWTO);
    return DPS_OK;
}

/* A gemm: y = x·Wᵀ + b on m rows (by groups: the g GEMMs of each k/g
 * columns of x by its n/g rows of W), or without a weight, the batched
 * GEMM between its input's two halves. Sets what it takes and gives. */
static dps_status gemm_sizes(const model_file *mf, mf_op *o, const char *path, size_t *need)
{
    DPS_TRY(need_keys(o, path, "mkn"));
    DPS_TRY(gemm_groups(o, path));
    if (o->weight < 0) {
        if (o->bias >= 0) return keyfile_fail(path, o->line, "a gemm without weight takes no bias %s", HOWTO);
        if (!o->b) o->b = 1;
        *need = elems(o->b, elems(o->m, o->k, o->k, o->n), 0, 0);
        o->out_elems = elems(o->b, elems(o->m, o->n, 0, 0), 0, 0);
        return DPS_OK;
    }
    if (o->b > 1) return keyfile_fail(path, o->line, "b= is for a gemm without weight %s", HOWTO);
    o->b = 1;
    *need = elems(o->m, o->k, 0, 0);
    o->out_elems = elems(o->m, o->n, 0, 0);
    DPS_TRY(tensor_size(mf, o, path, o->weight, elems(o->n, o->k / o->g, 0, 0), "weight"));
    return tensor_size(mf, o, path, o->bias, (size_t)o->n, "bias");
}

/* What o takes and gives per sample, from its kind and keys; need 0: any. */
static dps_status op_sizes(const model_file *mf, mf_op *o, const char *path, size_t have, size_t *need)
{
    *need = have;
    o->out_elems = have;
    switch (o->kind) {
    case MF_GEMM: return gemm_sizes(mf, o, path, need);
    case MF_RESAMPLE:
        DPS_TRY(need_keys(o, path, "n"));
        o->out_elems = (size_t)o->n;
        return DPS_OK;
    case MF_NORM:
        DPS_TRY(need_keys(o, path, "c"));
        if (have % (size_t)o->c)
            return keyfile_fail(path, o->line, "norm c=%lld: its input's %zu elements are not rows of c %s",
                                (long long)o->c, have, HOWTO);
        DPS_TRY(tensor_size(mf, o, path, o->weight, (size_t)o->c, "weight"));
        return tensor_size(mf, o, path, o->bias, (size_t)o->c, "bias");
    case MF_ACT:
        if (o->fn == MF_FN_COUNT) return keyfile_fail(path, o->line, "an act op needs fn= %s", HOWTO);
        return DPS_OK;
    case MF_ADD:
        if (o->from == UNSET) return keyfile_fail(path, o->line, "an add op needs from=OP %s", HOWTO);
        *need = out_of(mf, o->from);
        return DPS_OK;
    case MF_MUL:
        if (o->from == UNSET) return keyfile_fail(path, o->line, "a mul op needs from=OP %s", HOWTO);
        if (!out_of(mf, o->from) || have % out_of(mf, o->from))
            return keyfile_fail(path, o->line, "mul: %s's %zu elements per sample do not divide its "
                                "input's %zu %s", name_of(mf, o->from), out_of(mf, o->from), have, HOWTO);
        return DPS_OK;
    case MF_CAT:
        if ((o->from == UNSET) == (o->weight < 0))
            return keyfile_fail(path, o->line, "a cat op needs from=OP or weight=T, one of them %s", HOWTO);
        o->out_elems = have + (o->weight >= 0 ? mf->tensors[o->weight].numel : out_of(mf, o->from));
        return DPS_OK;
    case MF_EMBEDDING:
        DPS_TRY(need_keys(o, path, "m"));
        if (o->weight < 0 || mf->tensors[o->weight].ndims != 2)
            return keyfile_fail(path, o->line, "an embedding op needs weight=T of two dimensions %s", HOWTO);
        *need = o->out_elems = elems(o->m, mf->tensors[o->weight].dims[1], 0, 0);
        return DPS_OK;
    case MF_KIND_COUNT: break;
    }
    return DPS_OK;
}

/* op KIND NAME key=value ... */
static dps_status op_record(reader *r, const char *path, int line, char **w, int n)
{
    model_file *mf = r->mf;
    char expected[96];
    if (n < 3) return keyfile_fail(path, line, "expected 'op KIND NAME key=value ...' %s", HOWTO);
    int kind = dps_match_word(w[1], mf_kind_names, MF_KIND_COUNT, expected, sizeof expected);
    if (kind < 0) return keyfile_fail(path, line, "op kind %s: expected one of %s", w[1], expected);
    if (!good_name(w[2]) || !strcmp(w[2], "input"))
        return keyfile_fail(path, line, "op name '%s': expected letters, digits and _.:/-[], not 'input' %s",
                            w[2], HOWTO);
    if (find_op(mf, w[2]) != NO_OP) return keyfile_fail(path, line, "op %s given twice", w[2]);
    if (!r->input_line) return keyfile_fail(path, line, "an op before the 'input N' record %s", HOWTO);
    DPS_TRY(grow((void **)&mf->ops, &r->ocap, mf->nops, sizeof *mf->ops));
    mf_op *o = &mf->ops[mf->nops];
    *o = (mf_op){.kind = (mf_kind)kind, .in = UNSET, .from = UNSET, .weight = -1, .bias = -1,
                  .fn = MF_FN_COUNT, .line = line};
    dps_strlcpy(o->name, w[2], sizeof o->name);
    for (int i = 3; i < n; i++) DPS_TRY(op_key(mf, o, path, line, w[i]));
    if (o->in == UNSET) o->in = mf->nops ? mf->nops - 1 : MF_INPUT;
    size_t have = out_of(mf, o->in), need = 0;
    o->in_elems = have;
    DPS_TRY(op_sizes(mf, o, path, have, &need));
    if (!o->out_elems || !need)
        return keyfile_fail(path, line, "op %s: more than 2^40 elements per sample", o->name);
    if (need != have)
        return keyfile_fail(path, line, "op %s takes %zu elements per sample, but its input (%s) gives %zu: "
                            "put a resample op between them %s", o->name, need, name_of(mf, o->in), have, HOWTO);
    mf->nops++;
    return DPS_OK;
}

/* name, input, classes: once each, before the ops. */
static dps_status header_record(reader *r, const char *path, int line, char **w, int n)
{
    model_file *mf = r->mf;
    int *at = !strcmp(w[0], "name") ? &r->name_line : !strcmp(w[0], "input") ? &r->input_line
                                                                              : &r->classes_line;
    if (n != 2) return keyfile_fail(path, line, "expected '%s VALUE' %s", w[0], HOWTO);
    if (*at) return keyfile_fail(path, line, "'%s' given again (first at line %d)", w[0], *at);
    if (mf->nops) return keyfile_fail(path, line, "'%s' after the first op %s", w[0], HOWTO);
    *at = line;
    int64_t v;
    if (w[0][0] == 'n') {
        if (!good_name(w[1]))
            return keyfile_fail(path, line, "name '%s': expected letters, digits and _.:/-[] %s", w[1], HOWTO);
        dps_strlcpy(mf->name, w[1], sizeof mf->name);
    } else if (w[0][0] == 'i') {
        DPS_TRY(whole(path, line, "input", w[1], 1, (int64_t)ELEMS_MAX, &v));
        mf->input = (size_t)v;
    } else {
        DPS_TRY(whole(path, line, "classes", w[1], 2, DIM_MAX, &v));
        mf->classes = (int)v;
    }
    return DPS_OK;
}

static dps_status record(void *ctx, const char *path, int line, char *rec)
{
    reader *r = ctx;
    char *w[WORDS_MAX] = {0};
    int n = split(rec, w);
    if (n <= 0) return keyfile_fail(path, line, "more than %d words %s", WORDS_MAX, HOWTO);
    if (!r->format_line) {
        if (n != 2 || strcmp(w[0], "dpscale-model") != 0)
            return keyfile_fail(path, line, "expected 'dpscale-model %d' as the first record: "
                                "not a model file %s", MF_FORMAT, HOWTO);
        if (strcmp(w[1], "1") != 0)
            return keyfile_fail(path, line, "model file format %s: this dpscale reads format %d; "
                                "export the model again with its scripts/model_export.py", w[1], MF_FORMAT);
        r->format_line = line;
        return DPS_OK;
    }
    if (!strcmp(w[0], "tensor")) return tensor_record(r, path, line, w, n);
    if (!strcmp(w[0], "op")) return op_record(r, path, line, w, n);
    if (!strcmp(w[0], "name") || !strcmp(w[0], "input") || !strcmp(w[0], "classes"))
        return header_record(r, path, line, w, n);
    return keyfile_fail(path, line, "unknown record '%s' (expected dpscale-model, name, input, "
                        "classes, tensor or op) %s", w[0], HOWTO);
}

/* What the file promises as a whole: every tensor used, ready 0..T-1 once
 * each, the last op's output whole rows of classes. */
static dps_status whole_file(const reader *r, const char *path, int last_line)
{
    const model_file *mf = r->mf;
    if (!r->format_line) return keyfile_fail(path, 1, "empty: not a model file %s", HOWTO);
    if (!r->name_line || !r->classes_line || !mf->nops || !mf->ntensors)
        return keyfile_fail(path, last_line, "a model file needs name, input, classes, tensors and "
                            "ops %s", HOWTO);
    int *seen = calloc((size_t)mf->ntensors + 1, sizeof *seen);
    if (!seen) return dps_fail(DPS_ERR_RUNTIME, "out of host memory reading %s", path);
    dps_status rc = DPS_OK;
    for (int i = 0; i < mf->ntensors && !rc; i++) {
        const mf_tensor *t = &mf->tensors[i];
        if (t->first_op < 0)
            rc = keyfile_fail(path, t->line, "tensor %s: no op names it %s", t->name, HOWTO);
        else if (t->ready >= mf->ntensors || seen[t->ready]++)
            rc = keyfile_fail(path, t->line, "tensor %s: ready=%d, but the ready values must be 0 to %d, "
                              "once each %s", t->name, t->ready, mf->ntensors - 1, HOWTO);
    }
    free(seen);
    const mf_op *last = &mf->ops[mf->nops - 1];
    if (!rc && last->out_elems % (size_t)mf->classes)
        rc = keyfile_fail(path, last->line, "the last op's output (%zu elements per sample) is not rows "
                          "of classes %d %s", last->out_elems, mf->classes, HOWTO);
    return rc;
}

void model_file_free(model_file *mf)
{
    free(mf->tensors);
    free(mf->ops);
    memset(mf, 0, sizeof *mf);
}

dps_status model_file_read(const char *path, model_file *mf)
{
    memset(mf, 0, sizeof *mf);
    reader r = {.mf = mf};
    dps_status rc = keyfile_read_records(path, "model file", record, &r);
    int last = mf->nops ? mf->ops[mf->nops - 1].line : r.format_line;
    if (!rc) rc = whole_file(&r, path, last ? last : 1);
    if (rc) model_file_free(mf);
    return rc;
}

size_t model_file_params(const model_file *mf)
{
    size_t n = 0;
    for (int i = 0; i < mf->ntensors; i++) n += mf->tensors[i].numel;
    return n;
}

double mf_op_flops(const mf_op *o)
{
    if (o->kind != MF_GEMM) return 0;
    return 2.0 * (double)o->b * (double)o->m * (double)o->k * (double)o->n / (double)o->g;
}

double model_file_fwd_flops(const model_file *mf)
{
    double f = 0;
    for (int i = 0; i < mf->nops; i++) f += mf_op_flops(&mf->ops[i]);
    return f;
}

int model_file_is_conv(const model_file *mf, int i)
{
    const mf_op *o = &mf->ops[i];
    if (o->kind != MF_GEMM || o->weight < 0 || o->in < 0) return 0;
    const mf_op *src = &mf->ops[o->in];
    size_t len = strlen(o->name);
    return src->kind == MF_RESAMPLE && strncmp(src->name, o->name, len) == 0 &&
           strcmp(src->name + len, ".im2col") == 0;
}

size_t model_file_rows(const model_file *mf)
{
    return mf->ops[mf->nops - 1].out_elems / (size_t)mf->classes;
}

void model_file_ready_order(const model_file *mf, int *order)
{
    for (int i = 0; i < mf->ntensors; i++) order[mf->tensors[i].ready] = i;
}

void model_file_bucket_order(const model_file *mf, int *order)
{
    for (int i = 0; i < mf->ntensors; i++) order[mf->ntensors - 1 - mf->tensors[i].ready] = i;
}
