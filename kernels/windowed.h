/* A model file's windowed resamples (model_file.h's mf_window: a
 * convolution's im2col or a pooling) one element at a time, shared by the
 * CUDA kernels (windowed.cu) and the host backend so that both compute the
 * same values in the same order; compiles as C11 and as CUDA C++.
 * A sample is h x w pixels of c channels held pixel by pixel, a pixel's c
 * channels together; im2col's output is a row per output pixel of
 * kh x kw x c columns in (g, kh, kw, c/g) order for a convolution of g
 * groups, zeros in the padding (cuDNN's NHWC input, KRSC filter: group j's
 * kh kw c/g columns are the window over its channels j c/g .. (j+1) c/g - 1,
 * and g = 1 is (kh, kw, c) order); a pooling's a row per output pixel of c
 * channels. Each function is PyTorch's CPU kernel's arithmetic, in its
 * order: max_pool2d_with_indices (padding as -inf, the first largest value
 * kept, a NaN taken), avg_pool2d (count_include_pad, ceil_mode off: the sum
 * of the window's elements inside the input over kh kw), col2im. */
#ifndef DPS_WINDOWED_H
#define DPS_WINDOWED_H

#include <stdint.h>

#include "elementwise.h"

#define DPS_POOL_NONE 0 /* im2col */
#define DPS_POOL_MAX 1
#define DPS_POOL_AVG 2

typedef struct dps_window {
    int64_t c, h, w;   /* the input's channels, rows and columns of pixels */
    int64_t kh, kw;    /* the window */
    int64_t sh, sw;    /* its stride */
    int64_t ph, pw;    /* padding on each side */
    int64_t dh, dw;    /* dilation */
    int pool;          /* DPS_POOL_* */
    int64_t groups;    /* im2col's groups g, dividing c (0 or 1: none) */
} dps_window;

/* The channels of one of im2col's groups, c/g. */
DPS_HD int64_t dps_window_cg(const dps_window *w)
{
    return w->groups > 1 ? w->c / w->groups : w->c;
}

/* im2col's column col of an output pixel as (ky, kx, ch): group col / (kh
 * kw c/g), then its window position and its channel within the group. */
DPS_HD void dps_window_col(const dps_window *w, int64_t col, int64_t *ky, int64_t *kx, int64_t *ch)
{
    int64_t cg = dps_window_cg(w), per = w->kh * w->kw * cg, r = col % per;
    *ky = r / (w->kw * cg);
    *kx = r / cg % w->kw;
    *ch = col / per * cg + r % cg;
}

/* The column of (ky, kx, ch): dps_window_col's inverse. */
DPS_HD int64_t dps_window_col_of(const dps_window *w, int64_t ky, int64_t kx, int64_t ch)
{
    int64_t cg = dps_window_cg(w);
    return ch / cg * (w->kh * w->kw * cg) + (ky * w->kw + kx) * cg + ch % cg;
}

/* Output rows and columns of pixels, PyTorch's floor((h + 2p - d (k - 1) - 1) / s) + 1. */
DPS_HD int64_t dps_window_oh(const dps_window *w)
{
    return (w->h + 2 * w->ph - w->dh * (w->kh - 1) - 1) / w->sh + 1;
}

DPS_HD int64_t dps_window_ow(const dps_window *w)
{
    return (w->w + 2 * w->pw - w->dw * (w->kw - 1) - 1) / w->sw + 1;
}

/* Columns of an output pixel: kh kw c for im2col, c for a pooling. */
DPS_HD int64_t dps_window_cols(const dps_window *w)
{
    return w->pool == DPS_POOL_NONE ? w->kh * w->kw * w->c : w->c;
}

DPS_HD int64_t dps_window_in_elems(const dps_window *w) { return w->h * w->w * w->c; }

DPS_HD int64_t dps_window_out_elems(const dps_window *w)
{
    return dps_window_oh(w) * dps_window_ow(w) * dps_window_cols(w);
}

/* Element t of one sample's output from its input x of type xt (0: fp32,
 * 1: bf16, 2: fp16, as dps_load_as); a max pool sets *arg to its value's
 * index in the input plane, iy w + ix, as max_pool2d_with_indices. */
DPS_HD float dps_window_at(const dps_window *w, const void *x, int xt, int64_t t, int64_t *arg)
{
    int64_t cols = dps_window_cols(w), p = t / cols, col = t % cols, ow = dps_window_ow(w);
    int64_t oy = p / ow, ox = p % ow, ch = col % w->c;
    int64_t y0 = oy * w->sh - w->ph, x0 = ox * w->sw - w->pw;
    if (w->pool == DPS_POOL_NONE) {
        int64_t ky, kx;
        dps_window_col(w, col, &ky, &kx, &ch);
        int64_t iy = y0 + ky * w->dh, ix = x0 + kx * w->dw;
        if (iy < 0 || iy >= w->h || ix < 0 || ix >= w->w) return 0.0f;
        return dps_load_as(x, (iy * w->w + ix) * w->c + ch, xt);
    }
    float best = -INFINITY, sum = 0.0f;
    int64_t at = -1;
    for (int64_t ky = 0; ky < w->kh; ky++) {
        int64_t iy = y0 + ky * w->dh;
        if (iy < 0 || iy >= w->h) continue;
        for (int64_t kx = 0; kx < w->kw; kx++) {
            int64_t ix = x0 + kx * w->dw;
            if (ix < 0 || ix >= w->w) continue;
            float v = dps_load_as(x, (iy * w->w + ix) * w->c + ch, xt);
            if (at < 0) at = iy * w->w + ix;
            if (v > best || v != v) {
                best = v;
                at = iy * w->w + ix;
            }
            sum += v;
        }
    }
    if (w->pool == DPS_POOL_AVG) return sum / (float)(w->kh * w->kw);
    *arg = at;
    return best;
}

/* Element j of one sample's input gradient from its output gradient dy
 * (and a max pool's indices arg): the sum of what element j fed, the
 * outputs it fed in PyTorch's order: im2col's columns (ky, kx) in order,
 * as col2im adds them; a pooling's output pixels in order, each adding
 * dy / (kh kw) (avg) or dy where its index is j's pixel (max). */
DPS_HD float dps_window_grad_at(const dps_window *w, const float *dy, const int64_t *arg, int64_t j)
{
    int64_t ch = j % w->c, pix = j / w->c, iy = pix / w->w, ix = pix % w->w;
    int64_t oh = dps_window_oh(w), ow = dps_window_ow(w), cols = dps_window_cols(w);
    int im2col = w->pool == DPS_POOL_NONE;
    float acc = 0.0f, div = (float)(w->kh * w->kw);
    for (int64_t a = 0; a < w->kh; a++) {
        int64_t ky = im2col ? a : w->kh - 1 - a, ny = iy + w->ph - ky * w->dh;
        if (ny < 0 || ny % w->sh || ny / w->sh >= oh) continue;
        for (int64_t b = 0; b < w->kw; b++) {
            int64_t kx = im2col ? b : w->kw - 1 - b, nx = ix + w->pw - kx * w->dw;
            if (nx < 0 || nx % w->sw || nx / w->sw >= ow) continue;
            int64_t o = (ny / w->sh * ow + nx / w->sw) * cols;
            if (im2col) acc += dy[o + dps_window_col_of(w, ky, kx, ch)];
            else if (w->pool == DPS_POOL_AVG) acc += dy[o + ch] / div;
            else if (arg[o + ch] == pix) acc += dy[o + ch];
        }
    }
    return acc;
}

#endif
