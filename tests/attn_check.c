/* A backend's attention on given operands, for tests/test_attention.py to
 * compare with PyTorch: reads samples·t rows of q, k, v and of dout as fp32
 * from a file, rounds them to the type under test, runs the backend's attn
 * and attn_bwd on its device 0 (the host backend's, src/backend/host_attn.c,
 * by default; the cuda backend's, kernels/attention.cu, with `cuda`), and
 * writes out, lse and dqkv as fp32.
 * Usage: attn_check [host|cuda] SAMPLES HEADS T D CAUSAL f32|bf16|f16 IN OUT
 * Exit 0 done, 1 failed, 77 (meson's skip) when the cuda backend cannot
 * open (no CUDA device, or a build without CUDA), saying why. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "elementwise.h"
#include "backend/backend.h"
#include "core/err.h"

#define USAGE "usage: attn_check [host|cuda] SAMPLES HEADS T D CAUSAL f32|bf16|f16 IN OUT"
#define SKIP 77

static int fail(const char *what)
{
    fprintf(stderr, "attn_check: %s\n", what);
    return 1;
}

static int rw(FILE *f, float *x, size_t n, int writing)
{
    return (writing ? fwrite(x, sizeof *x, n, f) : fread(x, sizeof *x, n, f)) == n;
}

/* x (fp32) into buf of type t, rounded; and back */
static void to_type(const float *x, size_t n, int t, void *buf)
{
    for (size_t i = 0; i < n; i++) dps_store_as(buf, (int64_t)i, t, x[i]);
}

static void from_type(const void *buf, size_t n, int t, float *x)
{
    for (size_t i = 0; i < n; i++) x[i] = dps_load_as(buf, (int64_t)i, t);
}

/* The operands in device 0's memory, as a GPU's kernels need them (strict
 * mode refuses host memory there): [0] qkv, [1] dout, [2] o, [3] dqkv, [4] lse. */
enum { QKV, DOUT, O, DQKV, LSE, NBUF };

/* host[i] (bytes[i]) to device buffer i (to_dev), or back, the host waiting. */
static dps_status move(backend *be, be_stream *st, dps_buf *dev, void **host, const size_t *bytes,
                       int first, int last, int to_dev)
{
    for (int i = first; i <= last; i++) {
        if (to_dev) DPS_TRY(be->ops->copy(be, st, dev[i].ptr, 0, host[i], DPS_HOST, bytes[i]));
        else DPS_TRY(be->ops->copy(be, st, host[i], DPS_HOST, dev[i].ptr, 0, bytes[i]));
    }
    return be->ops->stream_sync(be, st);
}

/* attn and attn_bwd on be's device 0 over the host operands host[]. */
static dps_status on_device(backend *be, const be_attn *a, void **host, const size_t *bytes)
{
    be_stream *st = NULL;
    dps_buf dev[NBUF] = {0};
    dps_status rc = be->ops->set_device(be, 0);
    if (!rc) rc = be->ops->stream_create(be, 0, &st);
    for (int i = 0; !rc && i < NBUF; i++) rc = be_buf_alloc(be, 0, bytes[i], "activations", &dev[i]);
    if (!rc) rc = move(be, st, dev, host, bytes, QKV, DOUT, 1);
    if (!rc) rc = be->ops->attn(be, st, a, dev[QKV].ptr, dev[O].ptr, dev[LSE].ptr);
    if (!rc) rc = be->ops->attn_bwd(be, st, a, dev[QKV].ptr, dev[O].ptr, dev[LSE].ptr,
                                    dev[DOUT].ptr, dev[DQKV].ptr);
    if (!rc) rc = move(be, st, dev, host, bytes, O, LSE, 0);
    for (int i = 0; i < NBUF; i++)
        if (dev[i].ptr) be_buf_free(be, &dev[i]);
    if (st) be->ops->stream_destroy(be, st);
    return rc;
}

static int run(backend *be, const be_attn *a, FILE *in, FILE *out)
{
    size_t n3 = (size_t)a->samples * (size_t)a->t * 3 * (size_t)a->heads * (size_t)a->d;
    size_t n1 = n3 / 3, nl = (size_t)a->samples * (size_t)a->heads * (size_t)a->t;
    size_t bytes[NBUF] = {n3 * 4, n1 * 4, n1 * 4, n3 * 4, nl * sizeof(float)};
    float *f = malloc((n3 + n1) * sizeof *f);
    void *host[NBUF];
    int ok = f != NULL;
    for (int i = 0; i < NBUF; i++) ok = (host[i] = malloc(bytes[i])) != NULL && ok;
    ok = ok && rw(in, f, n3 + n1, 0);
    if (!ok) fprintf(stderr, "attn_check: short input or out of memory\n");
    if (ok) {
        to_type(f, n3, (int)a->dt, host[QKV]);
        to_type(f + n3, n1, (int)a->dt, host[DOUT]);
        if (on_device(be, a, host, bytes) != DPS_OK) {
            fprintf(stderr, "attn_check: the %s backend's attention failed: %s\n",
                    be_kind_names[be->kind], dps_errmsg());
            ok = 0;
        }
    }
    if (ok) {
        from_type(host[O], n1, (int)a->dt, f);
        ok = rw(out, f, n1, 1) && rw(out, host[LSE], nl, 1);
        from_type(host[DQKV], n3, (int)a->dt, f);
        ok = ok && rw(out, f, n3, 1);
        if (!ok) fprintf(stderr, "attn_check: writing the output file failed\n");
    }
    free(f);
    for (int i = 0; i < NBUF; i++) free(host[i]);
    return ok ? 0 : 1;
}

/* The backend named by kind ("host" or "cuda"), with one device; NULL
 * after saying why when it cannot open. */
static backend *open_backend(be_kind kind)
{
    be_options opt = {.kind = kind, .host_devices = 1, .quiet = 1};
    backend *be = NULL;
    if (be_open(&opt, &be) == DPS_OK) return be;
    fprintf(stderr, "attn_check: the %s backend cannot open%s: %s\n", be_kind_names[kind],
            kind == BE_CUDA ? ", so its attention is not run (exit 77, a skip)" : "", dps_errmsg());
    return NULL;
}

int main(int argc, char **argv)
{
    be_kind kind = BE_HOST;
    if (argc == 10) {
        if (strcmp(argv[1], "host") && strcmp(argv[1], "cuda")) return fail(USAGE);
        kind = !strcmp(argv[1], "cuda") ? BE_CUDA : BE_HOST;
        argv++;
        argc--;
    }
    if (argc != 9) return fail(USAGE);
    be_attn a = {.samples = atoll(argv[1]), .heads = atoi(argv[2]), .t = atoi(argv[3]),
                 .d = atoi(argv[4]), .causal = atoi(argv[5])};
    a.dt = !strcmp(argv[6], "bf16") ? BE_BF16 : !strcmp(argv[6], "f16") ? BE_F16 : BE_F32;
    if (a.dt == BE_F32 && strcmp(argv[6], "f32")) return fail("the type must be f32, bf16 or f16");
    if (a.samples < 1 || a.heads < 1 || a.t < 1 || a.d < 1) return fail("sizes must be positive");
    backend *be = open_backend(kind);
    if (!be) return kind == BE_CUDA ? SKIP : 1;
    FILE *in = fopen(argv[7], "rb"), *out = fopen(argv[8], "wb");
    int rc = in && out ? run(be, &a, in, out) : fail("cannot open IN or OUT");
    if (in) fclose(in);
    if (out && fclose(out)) rc = fail("cannot write OUT");
    be_close(be);
    return rc;
}
