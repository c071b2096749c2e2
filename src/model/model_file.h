/* Model files (docs/model-file.md): a PyTorch model's parameter tensors in
 * model.parameters() order with the order their gradients become ready, and
 * its forward as a sequence of ops with their GEMM shapes and activation
 * bytes; read whole and checked, every refusal "FILE:LINE: what". */
#ifndef DPS_MODEL_FILE_H
#define DPS_MODEL_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

#define MF_FORMAT 1
#define MF_NAME_MAX 128
#define MF_MAX_DIMS 8
#define MF_INPUT (-1) /* an op's `in` or `from`: the model's input */

typedef enum mf_kind { MF_GEMM, MF_RESAMPLE, MF_NORM, MF_ACT, MF_ADD, MF_EMBEDDING, MF_MUL,
                      MF_CAT, MF_ATTN, MF_KIND_COUNT } mf_kind;
typedef enum mf_fn {
    MF_RELU, MF_GELU, MF_SOFTMAX, MF_TANH, MF_SIGMOID, MF_RELU6, MF_SILU, MF_HARDSWISH,
    MF_HARDSIGMOID, MF_MISH, MF_FN_COUNT
} mf_fn;

extern const char *const mf_kind_names[MF_KIND_COUNT];
extern const char *const mf_fn_names[MF_FN_COUNT];

/* A resample's window: a convolution's im2col or a pooling, over each
 * sample's h x w pixels of c channels held pixel by pixel, a pixel's c
 * channels together (the layout of a gemm's output: m rows of n columns).
 * im2col's output is a row per output pixel of kh x kw x c columns, in
 * (g, kh, kw, c/g) order for the convolution of g groups that reads it
 * (groups: its gemm's g; (kh, kw, c) order when g = 1), zeros where the
 * window meets the padding (cuDNN's NHWC input with a KRSC filter, group j
 * of the gemm's contiguous k/g columns the window over channels
 * j c/g .. (j+1) c/g - 1, as cuDNN's grouped convolution); a pooling's a row per output pixel of c
 * channels. c == 0: the file gives no window, and the resample is
 * y[i] = x[i mod n_in]. */
typedef enum mf_pool { MF_POOL_NONE, MF_POOL_MAX, MF_POOL_AVG } mf_pool;
typedef struct mf_window {
    int64_t c, h, w; /* the input's channels, rows and columns of pixels */
    int64_t kh, kw;  /* the window */
    int64_t sh, sw;  /* its stride */
    int64_t ph, pw;  /* padding on each side */
    int64_t dh, dw;  /* dilation */
    mf_pool pool;    /* MF_POOL_NONE: im2col */
    int64_t groups;  /* an im2col's groups: the g of the gemm reading it (1 when not grouped) */
} mf_window;

typedef struct mf_tensor {
    char name[MF_NAME_MAX];
    int ndims;
    int64_t dims[MF_MAX_DIMS];
    size_t numel;
    int ready;     /* its place in the first backward's gradient-ready order */
    int first_op;  /* the first op that names it: its gradient is complete after that op's backward */
    int line;
} mf_tensor;

typedef struct mf_op {
    mf_kind kind;
    char name[MF_NAME_MAX];
    int in, from;            /* op indices, or MF_INPUT; from: add's, mul's and cat's other operand */
    int64_t m, k, n, b, c;   /* the keys its kind takes (0 when not given) */
    int64_t g;               /* a gemm's groups: g GEMMs of k/g by n/g (1 when not given) */
    int64_t pixels;          /* a mul's or cat's operands as pixels of channels (1 when not given) */
    mf_fn fn;
    mf_window win;           /* a resample's window (win.c == 0 when none) */
    int64_t heads, t, d;     /* an attn's heads, rows (tokens) and head dimension */
    int causal;              /* an attn's causal mask: 1 on, 0 off */
    int weight, bias;        /* tensor indices, -1 when none */
    size_t in_elems, out_elems; /* per sample */
    uint64_t saved, moved;   /* bytes per sample: kept for backward, moved by an element-wise op */
    int line;
} mf_op;

typedef struct model_file {
    char name[MF_NAME_MAX];
    size_t input;   /* elements of one sample's input */
    int classes;
    mf_tensor *tensors;
    int ntensors;
    mf_op *ops;
    int nops;
} model_file;

/* Reads and checks path; on failure nothing is left to free. */
dps_status model_file_read(const char *path, model_file *mf) DPS_MUST_USE;
void model_file_free(model_file *mf);

size_t model_file_params(const model_file *mf);
/* Forward FLOPs of one sample: mf_op_flops summed over the ops. */
double model_file_fwd_flops(const model_file *mf);
/* An op's forward FLOPs of one sample: a gemm's 2·b·m·k·n/g, an attn's
 * 4·heads·t·t·d (its two products, causal or not, as
 * torch.utils.flop_counter counts scaled_dot_product_attention); 0 for
 * the other kinds. */
double mf_op_flops(const mf_op *o);
/* Whether op i is a convolution lowered to its im2col GEMM: a gemm with a
 * weight whose input is a resample named "<its name>.im2col", as
 * scripts/model_export.py writes a Conv2d (PyTorch runs it through cuDNN,
 * whose TF32 flag is another than a Linear's). */
int model_file_is_conv(const model_file *mf, int i);
/* Rows of the loss per sample: the last op's output over classes. */
size_t model_file_rows(const model_file *mf);
/* The tensors' indices in ready order (order[0] is ready first). */
void model_file_ready_order(const model_file *mf, int *order);
/* The tensors' indices in the order bucket_assign takes them and the flat
 * parameter buffer holds them: the reverse of ready order (order[0] is
 * ready last), so that every bucket is one range. */
void model_file_bucket_order(const model_file *mf, int *order);

#endif
