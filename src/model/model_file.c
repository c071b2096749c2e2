/* Model files (see model_file.h): records read through core/keyfile, each
 * checked as it comes, then what the file promises as a whole. */
#include <stdlib.h>
#include <string.h>

#include "core/keyfile.h"
#include "core/util.h"
#include "model/model_file.h"
#include "model/window_geom.h"

const char *const mf_kind_names[MF_KIND_COUNT] = {"gemm", "resample", "norm", "act", "add",
                                                  "embedding", "mul", "cat", "attn"};
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
    [MF_GEMM] = "m k n b g weight bias", [MF_RESAMPLE] = "n window kernel stride pad dilation pool", [MF_NORM] = "c weight bias",
    [MF_ACT] = "fn", [MF_ADD] = "from", [MF_EMBEDDING] = "m weight",
    [MF_MUL] = "from pixels", [MF_CAT] = "from weight pixels", [MF_ATTN] = "heads t d causal",
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

/* "AxB" (parts 2) or "AxBxC" (parts 3): whole numbers of at least lo into out[]. */
static dps_status dims_key(const char *path, int line, const char *key, const char *v, int parts,
                           int64_t lo, int64_t *out)
{
    char copy[64];
    int n = 0;
    if (strlen(v) >= sizeof copy) n = -1;
    dps_strlcpy(copy, v, sizeof copy);
    for (char *d = copy, *x; n >= 0 && n < parts; d = x + 1, n++) {
        x = strchr(d, 'x');
        if (x) *x = '\0';
        if ((x != NULL) != (n < parts - 1)) n = -2; /* too few or too many parts */
        else DPS_TRY(whole(path, line, key, d, lo, DIM_MAX, &out[n]));
        if (!x) break;
    }
    if (n == parts - 1) return DPS_OK;
    return keyfile_fail(path, line, "%s=%s: expected %s %s", key, v,
                        parts == 3 ? "CxHxW, as 64x56x56" : "two sizes, as 3x3", HOWTO);
}

/* A resample's window keys: window=CxHxW kernel=KHxKW stride=SHxSW
 * pad=PHxPW dilation=DHxDW pool=max|avg (each once: op_record). */
static dps_status window_key(mf_window *w, const char *path, int line, const char *key, const char *v)
{
    int64_t d[3];
    if (!strcmp(key, "pool")) {
        if (strcmp(v, "max") && strcmp(v, "avg"))
            return keyfile_fail(path, line, "pool=%s: expected max or avg (none: an im2col) %s", v, HOWTO);
        w->pool = v[0] == 'm' ? MF_POOL_MAX : MF_POOL_AVG;
        return DPS_OK;
    }
    int cwh = !strcmp(key, "window"), pad = !strcmp(key, "pad");
    DPS_TRY(dims_key(path, line, key, v, cwh ? 3 : 2, pad ? 0 : 1, d));
    int64_t *a = cwh ? &w->c : !strcmp(key, "kernel") ? &w->kh : !strcmp(key, "stride") ? &w->sh
               : pad ? &w->ph : &w->dh;
    int64_t *b = cwh ? &w->h : a == &w->kh ? &w->kw : a == &w->sh ? &w->sw : pad ? &w->pw : &w->dw;
    *a = d[0];
    *b = d[1];
    if (cwh) w->w = d[2];
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
                 : !strcmp(key, "g") ? &o->g : !strcmp(key, "pixels") ? &o->pixels
                 : !strcmp(key, "heads") ? &o->heads : !strcmp(key, "t") ? &o->t
                 : !strcmp(key, "d") ? &o->d : NULL;
    if (num) {
        if (*num) return keyfile_fail(path, line, "key %s given twice", key);
        return whole(path, line, key, v, 1, DIM_MAX, num);
    }
    if (!strcmp(key, "causal")) {
        if (o->causal >= 0) return keyfile_fail(path, line, "key causal given twice");
        DPS_TRY(whole(path, line, key, v, 0, 1, &x));
        o->causal = (int)x;
        return DPS_OK;
    }
    if (!strcmp(key, "saved") || !strcmp(key, "moved")) {
        DPS_TRY(whole(path, line, key, v, 0, (int64_t)1 << 50, &x));
        *(key[0] == 's' ? &o->saved : &o->moved) = (uint64_t)x;
        return DPS_OK;
    }
    if (o->kind == MF_RESAMPLE && strcmp(key, "n") && allowed(MF_RESAMPLE, key) &&
        strcmp(key, "in") && strcmp(key, "saved") && strcmp(key, "moved"))
        return window_key(&o->win, path, line, key, v);
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
        int64_t v = *k == 'm' ? o->m : *k == 'k' ? o->k : *k == 'n' ? o->n : *k == 'c' ? o->c
                  : *k == 'h' ? o->heads : *k == 't' ? o->t : o->d;
        if (*k == 'h' && !v)
            return keyfile_fail(path, o->line, "a %s op needs heads= %s", mf_kind_names[o->kind], HOWTO);
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

/* The first output position along one axis (n_in input positions, kernel
 * k, stride s, pad p, dilation d, n_out outputs) whose window lies wholly
 * in the padding, or -1: there a max pool has no element to take. */
static int64_t axis_all_padding(int64_t n_in, int64_t k, int64_t s, int64_t p, int64_t d,
                                int64_t n_out)
{
    for (int64_t o = 0; o < n_out; o++) {
        int64_t j = 0;
        while (j < k && (o * s - p + j * d < 0 || o * s - p + j * d >= n_in)) j++;
        if (j == k) return o;
    }
    return -1;
}

/* A max pool whose every window holds an input element: one wholly in the
 * padding is -inf in PyTorch's max_pool2d, and its backward scatters to an
 * index outside the input. */
static dps_status max_pool_windows(const mf_op *o, const char *path, const dps_window *g)
{
    const mf_window *w = &o->win;
    int64_t oy = axis_all_padding(w->h, w->kh, w->sh, w->ph, w->dh, dps_window_oh(g));
    int64_t ox = axis_all_padding(w->w, w->kw, w->sw, w->pw, w->dw, dps_window_ow(g));
    if (w->pool != MF_POOL_MAX || (oy < 0 && ox < 0)) return DPS_OK;
    return keyfile_fail(path, o->line, "pool=max: the window of output %s %lld lies wholly in the "
                        "padding (kernel %lldx%lld, stride %lldx%lld, pad %lldx%lld, dilation "
                        "%lldx%lld on %lldx%lld pixels), where max_pool2d has no element to take: "
                        "give a smaller pad= or dilation= %s", oy >= 0 ? "row" : "column",
                        (long long)(oy >= 0 ? oy : ox), (long long)w->kh, (long long)w->kw,
                        (long long)w->sh, (long long)w->sw, (long long)w->ph, (long long)w->pw,
                        (long long)w->dh, (long long)w->dw, (long long)w->h, (long long)w->w, HOWTO);
}

/* A resample's window, when it has one: window= and kernel= together
 * (stride and dilation 1 and pad 0 when not given), a pooling's padding at
 * most half its kernel and an average pooling undilated (as PyTorch's),
 * its input the window's c h w, its n the geometry's output, and a max
 * pool's every window over an input element. */
static dps_status window_sizes(mf_op *o, const char *path, size_t have)
{
    mf_window *w = &o->win;
    if (!w->c) {
        if (w->kh || w->sh || w->dh || w->ph || w->pw || w->pool != MF_POOL_NONE)
            return keyfile_fail(path, o->line, "kernel=, stride=, pad=, dilation= and pool= describe "
                                "a window: give window=CxHxW too %s", HOWTO);
        return DPS_OK;
    }
    if (!w->kh) return keyfile_fail(path, o->line, "window= needs kernel=KHxKW %s", HOWTO);
    w->groups = 1; /* a convolution's gemm sets its g (conv_sizes) */
    if (!w->sh) w->sh = w->sw = 1;
    if (!w->dh) w->dh = w->dw = 1;
    if (w->pool != MF_POOL_NONE && (2 * w->ph > w->kh || 2 * w->pw > w->kw))
        return keyfile_fail(path, o->line, "pad=%lldx%lld: a pooling's padding is at most half its "
                            "kernel %lldx%lld, as PyTorch's %s", (long long)w->ph, (long long)w->pw,
                            (long long)w->kh, (long long)w->kw, HOWTO);
    if (w->pool == MF_POOL_AVG && (w->dh > 1 || w->dw > 1))
        return keyfile_fail(path, o->line, "pool=avg takes no dilation (avg_pool2d has none) %s", HOWTO);
    if (w->h + 2 * w->ph < w->dh * (w->kh - 1) + 1 || w->w + 2 * w->pw < w->dw * (w->kw - 1) + 1)
        return keyfile_fail(path, o->line, "the kernel %lldx%lld (dilated) is larger than the padded "
                            "input %lldx%lld %s", (long long)w->kh, (long long)w->kw,
                            (long long)(w->h + 2 * w->ph), (long long)(w->w + 2 * w->pw), HOWTO);
    dps_window g = mf_window_geom(w);
    if ((uint64_t)dps_window_in_elems(&g) != have)
        return keyfile_fail(path, o->line, "window=%lldx%lldx%lld holds %lld elements, but its input "
                            "gives %zu a sample %s", (long long)w->c, (long long)w->h, (long long)w->w,
                            (long long)dps_window_in_elems(&g), have, HOWTO);
    if (dps_window_out_elems(&g) != o->n)
        return keyfile_fail(path, o->line, "n=%lld, but the window gives %lldx%lld output pixels of "
                            "%lld columns, %lld elements %s", (long long)o->n, (long long)dps_window_oh(&g),
                            (long long)dps_window_ow(&g), (long long)dps_window_cols(&g),
                            (long long)dps_window_out_elems(&g), HOWTO);
    return max_pool_windows(o, path, &g);
}

/* A grouped gemm reading an im2col (a resample with a window, no pool=)
 * is that im2col's convolution: it is named NAME and the im2col NAME.im2col. */
static dps_status grouped_im2col(const model_file *mf, const mf_op *o, const char *path)
{
    const mf_op *src = &mf->ops[o->in];
    if (o->g < 2 || src->kind != MF_RESAMPLE || !src->win.c || src->win.pool != MF_POOL_NONE)
        return DPS_OK;
    return keyfile_fail(path, o->line, "gemm %s g=%lld reads the im2col %s: a grouped convolution's "
                        "im2col is named after its gemm, %s.im2col, so that it orders its columns "
                        "group by group %s", o->name, (long long)o->g, src->name, o->name, HOWTO);
}

/* A convolution (a gemm reading its NAME.im2col) whose im2col has a window:
 * m its output pixels, k its columns, its g the im2col's groups (dividing
 * the window's channels). */
static dps_status conv_sizes(model_file *mf, const mf_op *o, const char *path)
{
    if (o->kind != MF_GEMM || o->in < 0) return DPS_OK;
    if (!model_file_is_conv(mf, mf->nops)) return grouped_im2col(mf, o, path);
    mf_window *w = &mf->ops[o->in].win;
    if (!w->c) return DPS_OK;
    if (w->pool != MF_POOL_NONE)
        return keyfile_fail(path, o->line, "gemm %s reads %s, a pooling: a convolution's im2col has no "
                            "pool= %s", o->name, mf->ops[o->in].name, HOWTO);
    if (w->c % o->g)
        return keyfile_fail(path, o->line, "gemm %s g=%lld: its im2col %s has c=%lld channels, which g "
                            "groups do not split evenly; give g a divisor of c %s", o->name,
                            (long long)o->g, mf->ops[o->in].name, (long long)w->c, HOWTO);
    w->groups = o->g;
    dps_window g = mf_window_geom(w);
    if (o->m != dps_window_oh(&g) * dps_window_ow(&g) || o->k != dps_window_cols(&g))
        return keyfile_fail(path, o->line, "gemm %s: m=%lld k=%lld, but its im2col gives %lld output "
                            "pixels (m) of %lld columns (k = kh kw c) %s", o->name, (long long)o->m,
                            (long long)o->k, (long long)(dps_window_oh(&g) * dps_window_ow(&g)),
                            (long long)dps_window_cols(&g), HOWTO);
    return DPS_OK;
}

/* An attn: t rows of q, k and v of its heads (3·heads·d columns) in, t
 * rows of heads·d out; causal 0 unless given. */
static dps_status attn_sizes(mf_op *o, const char *path, size_t *need)
{
    DPS_TRY(need_keys(o, path, "htd"));
    if (o->causal < 0) o->causal = 0;
    *need = elems(o->t, elems(3, elems(o->heads, o->d, 0, 0), 0, 0), 0, 0);
    o->out_elems = elems(o->t, elems(o->heads, o->d, 0, 0), 0, 0);
    return DPS_OK;
}

/* A mul's pixels=P (1 when not given): its input P pixels of the channels
 * its scale gives, one scale a channel of every pixel. */
static dps_status mul_pixels(const model_file *mf, mf_op *o, const char *path, size_t have)
{
    if (!o->pixels) o->pixels = 1;
    if (o->pixels == 1 || (size_t)o->pixels * out_of(mf, o->from) == have) return DPS_OK;
    return keyfile_fail(path, o->line, "mul pixels=%lld: its input's %zu elements are not %lld pixels "
                        "of the %zu channels %s scales; give pixels= the input's pixels (H·W) %s",
                        (long long)o->pixels, have, (long long)o->pixels, out_of(mf, o->from),
                        name_of(mf, o->from), HOWTO);
}

/* A cat's pixels=P (1 when not given): both operands P pixels, from=OP's. */
static dps_status cat_pixels(const model_file *mf, mf_op *o, const char *path, size_t have)
{
    if (!o->pixels) o->pixels = 1;
    if (o->pixels == 1) return DPS_OK;
    if (o->weight >= 0)
        return keyfile_fail(path, o->line, "cat pixels= is for a cat with from=OP, not weight=T %s", HOWTO);
    size_t p = (size_t)o->pixels;
    if (have % p || out_of(mf, o->from) % p)
        return keyfile_fail(path, o->line, "cat pixels=%lld: its input's %zu elements and %s's %zu are "
                            "not both whole pixels; give pixels= their pixels (H·W) %s",
                            (long long)o->pixels, have, name_of(mf, o->from), out_of(mf, o->from), HOWTO);
    return DPS_OK;
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
        return window_sizes(o, path, have);
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
        return mul_pixels(mf, o, path, have);
    case MF_CAT:
        if ((o->from == UNSET) == (o->weight < 0))
            return keyfile_fail(path, o->line, "a cat op needs from=OP or weight=T, one of them %s", HOWTO);
        o->out_elems = have + (o->weight >= 0 ? mf->tensors[o->weight].numel : out_of(mf, o->from));
        return cat_pixels(mf, o, path, have);
    case MF_EMBEDDING:
        DPS_TRY(need_keys(o, path, "m"));
        if (o->weight < 0 || mf->tensors[o->weight].ndims != 2)
            return keyfile_fail(path, o->line, "an embedding op needs weight=T of two dimensions %s", HOWTO);
        *need = o->out_elems = elems(o->m, mf->tensors[o->weight].dims[1], 0, 0);
        return DPS_OK;
    case MF_ATTN: return attn_sizes(o, path, need);
    case MF_KIND_COUNT: break;
    }
    return DPS_OK;
}

/* Each key of an op line once. */
static dps_status keys_once(const char *path, int line, char **kv, int n)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++) {
            size_t a = strcspn(kv[i], "="), b = strcspn(kv[j], "=");
            if (a == b && strncmp(kv[i], kv[j], a) == 0)
                return keyfile_fail(path, line, "key %.*s given twice", (int)a, kv[i]);
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
                  .fn = MF_FN_COUNT, .causal = -1, .line = line};
    dps_strlcpy(o->name, w[2], sizeof o->name);
    DPS_TRY(keys_once(path, line, w + 3, n - 3));
    for (int i = 3; i < n; i++) DPS_TRY(op_key(mf, o, path, line, w[i]));
    if (o->in == UNSET) o->in = mf->nops ? mf->nops - 1 : MF_INPUT;
    size_t have = out_of(mf, o->in), need = 0;
    o->in_elems = have;
    DPS_TRY(op_sizes(mf, o, path, have, &need));
    DPS_TRY(conv_sizes(mf, o, path));
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
    if (o->kind == MF_ATTN) return 4.0 * (double)o->heads * (double)o->t * (double)o->t * (double)o->d;
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
