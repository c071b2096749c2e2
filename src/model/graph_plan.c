/* A model file's activations and gradients placed by when they are alive (see graph_plan.h). */
#include <stdlib.h>
#include <string.h>

#include "elementwise.h"
#include "model/graph_plan.h"

typedef struct range { size_t lo, hi; } range;

/* One thing to place: its elements a sample and the times it is alive. */
typedef struct item { size_t size; int from, to; } item;

static int by_lo(const void *a, const void *b)
{
    const range *x = a, *y = b;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

/* The lowest offset where size elements fit between the taken ranges. */
static size_t first_fit(range *taken, int n, size_t size)
{
    qsort(taken, (size_t)n, sizeof *taken, by_lo);
    size_t at = 0;
    for (int k = 0; k < n; k++) {
        if (taken[k].lo >= at + size) break;
        if (taken[k].hi > at) at = taken[k].hi;
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
        at[order[k]] = first_fit(taken, nt, it->size);
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
    return o->kind == MF_ACT && dps_act_keeps_output((int)o->fn);
}

/* Whether op j's backward reads its input again; the last op's output is
 * the caller's, so an act there that reads its output makes it again from
 * its input (graph_act_saved). */
static int rereads_input(const mf_op *o, int last)
{
    return o->kind == MF_GEMM || (o->kind == MF_ACT && (last || !rereads_output(o))) ||
           o->kind == MF_MUL || (o->kind == MF_NORM && o->weight >= 0);
}

/* Whether op j, a gemm with weight, recomputes its input from a resample's input. */
static int recomputes(const model_file *mf, int j)
{
    const mf_op *o = &mf->ops[j];
    return o->kind == MF_GEMM && o->weight >= 0 && o->in >= 0 && mf->ops[o->in].kind == MF_RESAMPLE;
}

/* The ops' outputs (items[0 .. nops-1)) and the recomputed inputs (after
 * them, one a recomputing op, again_of[j] its index): when each is alive. */
static int outputs_alive(const model_file *mf, item *items, int *again_of)
{
    int n = mf->nops, last = n - 1, count = last;
    for (int i = 0; i < last; i++) items[i] = (item){mf->ops[i].out_elems, i, i};
    for (int j = 0; j < n; j++) {
        const mf_op *o = &mf->ops[j];
        int back = 2 * n - 1 - j, srcs[2] = {o->in, o->from};
        for (int k = 0; k < 2; k++)
            if (srcs[k] >= 0 && j > items[srcs[k]].to) items[srcs[k]].to = j;
        if (o->kind == MF_MUL && o->from >= 0 && back > items[o->from].to) items[o->from].to = back;
        if (j < last && rereads_output(o) && back > items[j].to) items[j].to = back;
        if (o->in < 0 || !rereads_input(o, j == last)) continue;
        int keep = o->in;
        if (recomputes(mf, j)) { /* the resample's input kept instead, and room for its output */
            keep = mf->ops[o->in].in;
            again_of[j] = count;
            items[count++] = (item){mf->ops[o->in].out_elems, back, back};
        }
        if (keep >= 0 && back > items[keep].to) items[keep].to = back;
    }
    return count;
}

/* Op i's gradient, alive from its first writer's backward to its own. */
static item gradient_of(const model_file *mf, int i, int *writer)
{
    int n = mf->nops;
    *writer = i;
    for (int j = n - 1; j > i && *writer == i; j--)
        if (mf->ops[j].in == i || mf->ops[j].from == i) *writer = j;
    return (item){mf->ops[i].out_elems, 2 * n - 1 - *writer, 2 * n - 1 - i};
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
    int t = mf->ntensors, n = mf->nops - 1;
    size_t nt = (size_t)(t > 0 ? t : 1), no = (size_t)(n > 0 ? n : 1);
    int *ready = malloc(nt * sizeof *ready), *first = malloc(nt * sizeof *first);
    int *ops = malloc(no * sizeof *ops);
    int rc = ready && first && ops ? 0 : -1;
    if (!rc) {
        model_file_ready_order(mf, ready);
        for (int r = 0; r < t; r++) first[r] = mf->tensors[ready[r]].first_op;
        for (int k = 0; k < n; k++) ops[k] = k;
        rc = group_by(first, ready, t, mf->nops, &p->completes_at, &p->completes);
    }
    if (!rc) rc = group_by(writer, ops, n, mf->nops, &p->begins_at, &p->begins);
    free(ready);
    free(first);
    free(ops);
    return rc;
}

dps_status graph_plan_make(const model_file *mf, graph_plan *p)
{
    int n = mf->nops - 1; /* the last op's output and gradient are the caller's */
    size_t count = (size_t)mf->nops * 2;
    memset(p, 0, sizeof *p);
    p->out_at = calloc(count, sizeof *p->out_at);
    p->grad_at = calloc(count, sizeof *p->grad_at);
    p->recompute = calloc(count, sizeof *p->recompute);
    p->again_at = calloc(count, sizeof *p->again_at);
    int *again_of = calloc(count, sizeof *again_of), *writer = calloc(count, sizeof *writer);
    item *outs = malloc(count * sizeof *outs), *grads = malloc(count * sizeof *grads);
    int ok = p->out_at && p->grad_at && p->recompute && p->again_at && again_of && writer && outs &&
             grads;
    if (ok) {
        int nouts = outputs_alive(mf, outs, again_of);
        for (int i = 0; i < n; i++) grads[i] = gradient_of(mf, i, &writer[i]);
        p->out_elems = place(outs, nouts, p->out_at);
        p->grad_elems = place(grads, n, p->grad_at);
        for (int j = 0; j < mf->nops; j++) {
            p->recompute[j] = recomputes(mf, j);
            if (p->recompute[j]) p->again_at[j] = p->out_at[again_of[j]];
        }
        ok = p->out_elems != (size_t)-1 && p->grad_elems != (size_t)-1 &&
             backward_lists(mf, writer, p) == 0;
    }
    free(again_of);
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
    free(p->out_at);
    free(p->grad_at);
    free(p->begins_at);
    free(p->begins);
    free(p->completes_at);
    free(p->completes);
    memset(p, 0, sizeof *p);
}
