/* A model file's activations and gradients placed by when they are alive (see graph_plan.h). */
#include <stdlib.h>
#include <string.h>

#include "elementwise.h"
#include "model/graph_conv.h"
#include "model/graph_plan.h"

typedef struct range { size_t lo, hi; } range;

/* One thing to place: its elements a sample, the times it is alive, and
 * whether its offset is even (int64 elements, 8-byte aligned at any
 * sample count). */
typedef struct item { size_t size; int from, to, even; } item;

static int by_lo(const void *a, const void *b)
{
    const range *x = a, *y = b;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

/* The lowest offset (even when even is set) where size elements fit between the taken ranges. */
static size_t first_fit(range *taken, int n, size_t size, int even)
{
    qsort(taken, (size_t)n, sizeof *taken, by_lo);
    size_t at = 0;
    for (int k = 0; k < n; k++) {
        if (taken[k].lo >= at + size) break;
        if (taken[k].hi > at) at = taken[k].hi + (even && taken[k].hi % 2);
    }
    return at;
}

/* items[0..n) placed into at[]; returns the arena's size, (size_t)-1 out of host memory. */
static size_t place(const item *items, int n, size_t *at)
{
    int *order = malloc((size_t)(n > 0 ? n : 1) * sizeof *order);
    range *taken = malloc((size_t)(n > 0 ? n : 1) * sizeof *taken);
    size_t arena = 0;
    if (!order || !taken) arena = (size_t)-1;
    for (int i = 0; order && i < n; i++) { /* insertion by size, the largest first */
        int k = i;
        for (; k > 0 && items[order[k - 1]].size < items[i].size; k--) order[k] = order[k - 1];
        order[k] = i;
    }
    for (int k = 0; taken && order && k < n; k++) {
        const item *it = &items[order[k]];
        int nt = 0;
        for (int q = 0; q < k; q++) { /* those placed that are alive with it */
            const item *p = &items[order[q]];
            if (p->from <= it->to && it->from <= p->to)
                taken[nt++] = (range){at[order[q]], at[order[q]] + p->size};
        }
        at[order[k]] = first_fit(taken, nt, it->size, it->even);
        if (at[order[k]] + it->size > arena) arena = at[order[k]] + it->size;
    }
    free(order);
    free(taken);
    return arena;
}

/* Whether op j's backward reads its output (an act whose function's
 * backward does, as autograd saves relu's, tanh's and sigmoid's result). */
static int rereads_output(const mf_op *o)
{
    return (o->kind == MF_ACT && dps_act_keeps_output((int)o->fn)) || o->kind == MF_ATTN;
}

/* Whether op j's backward reads its input again; the last op's output is
 * the caller's, so an act there that reads its output makes it again from
 * its input (graph_act_saved). */
static int rereads_input(const mf_op *o, int last)
{
    return o->kind == MF_GEMM || (o->kind == MF_ACT && (last || !rereads_output(o))) ||
           o->kind == MF_MUL || (o->kind == MF_NORM && o->weight >= 0) || o->kind == MF_ATTN;
}

/* What op j reads as its input: for a direct convolution, its resample's input. */
static int input_of(const model_file *mf, const int *direct, int j)
{
    return direct[j] ? mf->ops[mf->ops[j].in].in : mf->ops[j].in;
}

/* Whether op j, a gemm with weight, recomputes its input from a resample's input. */
static int recomputes(const model_file *mf, int j)
{
    const mf_op *o = &mf->ops[j];
    return o->kind == MF_GEMM && o->weight >= 0 && o->in >= 0 && mf->ops[o->in].kind == MF_RESAMPLE;
}

/* Whether op j is a max pool, which keeps its indices for its backward. */
static int keeps_indices(const mf_op *o)
{
    return o->kind == MF_RESAMPLE && o->win.c && o->win.pool == MF_POOL_MAX;
}

/* An attn's log-sum-exp, alive from its forward to its backward, at
 * items[count] (lse_of[j]); as the last op, the output its backward makes
 * again (again_of[j]). Returns the new count. */
static int attn_alive(const model_file *mf, int j, item *items, int count, int *again_of,
                      int *lse_of)
{
    const mf_op *o = &mf->ops[j];
    int n = mf->nops, back = 2 * n - 1 - j;
    lse_of[j] = count;
    items[count++] = (item){(size_t)(o->heads * o->t), j, back, 0};
    if (j != n - 1) return count;
    again_of[j] = count;
    items[count++] = (item){o->out_elems, back, back, 0};
    return count;
}

/* The ops' outputs (items[0 .. nops-1)), then the recomputed inputs, max
 * pools' indices and attns' log-sum-exps (one a recomputing op, max pool or
 * attn, again_of[j], idx_of[j] and lse_of[j] its index): when each is alive
 * (a skipped resample's output: none). */
static int outputs_alive(const model_file *mf, const graph_plan *p, item *items, int *again_of,
                         int *idx_of, int *lse_of)
{
    int n = mf->nops, last = n - 1, count = last;
    for (int i = 0; i < last; i++) items[i] = (item){p->skip[i] ? 0 : mf->ops[i].out_elems, i, i, 0};
    for (int j = 0; j < n; j++)
        if (keeps_indices(&mf->ops[j])) {
            idx_of[j] = count;
            items[count++] = (item){2 * mf->ops[j].out_elems, j, 2 * n - 1 - j, 1};
        }
    for (int j = 0; j < n; j++) {
        const mf_op *o = &mf->ops[j];
        int back = 2 * n - 1 - j, srcs[2] = {input_of(mf, p->direct, j), o->from};
        for (int k = 0; k < 2; k++)
            if (srcs[k] >= 0 && j > items[srcs[k]].to) items[srcs[k]].to = j;
        if (o->kind == MF_MUL && o->from >= 0 && back > items[o->from].to) items[o->from].to = back;
        if (j < last && rereads_output(o) && back > items[j].to) items[j].to = back;
        if (o->kind == MF_ATTN) count = attn_alive(mf, j, items, count, again_of, lse_of);
        if (o->in < 0 || !rereads_input(o, j == last)) continue;
        int keep = input_of(mf, p->direct, j);
        if (!p->direct[j] && recomputes(mf, j)) { /* the resample's input kept instead, and room for its output */
            keep = mf->ops[o->in].in;
            again_of[j] = count;
            items[count++] = (item){mf->ops[o->in].out_elems, back, back, 0};
        }
        if (keep >= 0 && back > items[keep].to) items[keep].to = back;
    }
    return count;
}

/* Op i's gradient, alive from its first writer's backward to its own (a
 * skipped resample's: none, and it writes none). */
static item gradient_of(const model_file *mf, const graph_plan *p, int i, int *writer)
{
    int n = mf->nops;
    *writer = i;
    for (int j = n - 1; j > i && *writer == i; j--)
        if (!p->skip[j] && (input_of(mf, p->direct, j) == i || mf->ops[j].from == i)) *writer = j;
    return (item){p->skip[i] ? 0 : mf->ops[i].out_elems, 2 * n - 1 - *writer, 2 * n - 1 - i, 0};
}

/* items[0..n) grouped by key[], keeping their order within a group: the
 * group of key g is (*list)[(*at)[g] .. (*at)[g + 1]); 0, or -1 out of host memory. */
static int group_by(const int *key, const int *items, int n, int nkeys, int **at, int **list)
{
    *at = calloc((size_t)nkeys + 1, sizeof **at);
    *list = malloc((size_t)(n > 0 ? n : 1) * sizeof **list);
    int *fill = calloc((size_t)nkeys + 1, sizeof *fill);
    int ok = *at && *list && fill;
    for (int i = 0; ok && i < n; i++) (*at)[key[i] + 1]++;
    for (int g = 0; ok && g < nkeys; g++) (*at)[g + 1] += (*at)[g];
    for (int i = 0; ok && i < n; i++) (*list)[(*at)[key[i]] + fill[key[i]]++] = items[i];
    free(fill);
    return ok ? 0 : -1;
}

/* The tensors each op's backward completes (ready order), and the
 * gradients each op's backward begins (writer[k]: the op that begins op k's). */
static int backward_lists(const model_file *mf, const int *writer, graph_plan *p)
{
    int t = mf->ntensors, n = mf->nops - 1, nb = 0;
    size_t nt = (size_t)(t > 0 ? t : 1), no = (size_t)(n > 0 ? n : 1);
    int *ready = malloc(nt * sizeof *ready), *first = malloc(nt * sizeof *first);
    int *ops = malloc(no * sizeof *ops), *by = malloc(no * sizeof *by);
    int rc = ready && first && ops && by ? 0 : -1;
    if (!rc) {
        model_file_ready_order(mf, ready);
        for (int r = 0; r < t; r++) first[r] = mf->tensors[ready[r]].first_op;
        for (int k = 0; k < n; k++) /* a skipped resample's gradient is none to zero */
            if (!p->skip[k]) {
                ops[nb] = k;
                by[nb++] = writer[k];
            }
        rc = group_by(first, ready, t, mf->nops, &p->completes_at, &p->completes);
    }
    if (!rc) rc = group_by(by, ops, nb, mf->nops, &p->begins_at, &p->begins);
    free(ready);
    free(first);
    free(ops);
    free(by);
    return rc;
}

/* Which convolutions run directly and which resamples they skip. */
static void direct_ops(const model_file *mf, int direct_convs, graph_plan *p)
{
    for (int j = 0; direct_convs && j < mf->nops; j++) {
        p->direct[j] = graph_conv_direct(mf, j);
        if (p->direct[j]) p->skip[mf->ops[j].in] = 1;
    }
}

dps_status graph_plan_make(const model_file *mf, int direct_convs, graph_plan *p)
{
    int n = mf->nops - 1; /* the last op's output and gradient are the caller's */
    size_t count = (size_t)mf->nops * 4;
    memset(p, 0, sizeof *p);
    p->out_at = calloc(count, sizeof *p->out_at);
    p->grad_at = calloc(count, sizeof *p->grad_at);
    p->recompute = calloc(count, sizeof *p->recompute);
    p->again_at = calloc(count, sizeof *p->again_at);
    p->direct = calloc(count, sizeof *p->direct);
    p->skip = calloc(count, sizeof *p->skip);
    p->idx_at = calloc(count, sizeof *p->idx_at);
    p->lse_at = calloc(count, sizeof *p->lse_at);
    int *again_of = calloc(count, sizeof *again_of), *writer = calloc(count, sizeof *writer);
    int *idx_of = calloc(count, sizeof *idx_of), *lse_of = calloc(count, sizeof *lse_of);
    item *outs = malloc(count * sizeof *outs), *grads = malloc(count * sizeof *grads);
    int ok = p->out_at && p->grad_at && p->recompute && p->again_at && p->idx_at && p->lse_at &&
             p->direct && p->skip && again_of && idx_of && lse_of && writer && outs && grads;
    if (ok) {
        direct_ops(mf, direct_convs, p);
        int nouts = outputs_alive(mf, p, outs, again_of, idx_of, lse_of);
        for (int i = 0; i < n; i++) grads[i] = gradient_of(mf, p, i, &writer[i]);
        p->out_elems = place(outs, nouts, p->out_at);
        p->grad_elems = place(grads, n, p->grad_at);
        for (int j = 0; j < mf->nops; j++) {
            const mf_op *o = &mf->ops[j];
            p->recompute[j] = !p->direct[j] && recomputes(mf, j);
            if (p->recompute[j] || (o->kind == MF_ATTN && j == mf->nops - 1))
                p->again_at[j] = p->out_at[again_of[j]];
            if (keeps_indices(o)) p->idx_at[j] = p->out_at[idx_of[j]];
            if (o->kind == MF_ATTN) p->lse_at[j] = p->out_at[lse_of[j]];
        }
        ok = p->out_elems != (size_t)-1 && p->grad_elems != (size_t)-1 &&
             backward_lists(mf, writer, p) == 0;
    }
    free(again_of);
    free(idx_of);
    free(lse_of);
    free(writer);
    free(outs);
    free(grads);
    if (ok) return DPS_OK;
    graph_plan_free(p);
    return dps_fail(DPS_ERR_RUNTIME, "out of host memory planning %s's activations", mf->name);
}

void graph_plan_free(graph_plan *p)
{
    free(p->recompute);
    free(p->again_at);
    free(p->direct);
    free(p->skip);
    free(p->idx_at);
    free(p->lse_at);
    free(p->out_at);
    free(p->grad_at);
    free(p->begins_at);
    free(p->begins);
    free(p->completes_at);
    free(p->completes);
    memset(p, 0, sizeof *p);
}
