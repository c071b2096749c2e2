/* Per-op timing of one traced step by events on its stream (see op_trace.h). */
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "model/op_trace.h"

const char *const op_dir_names[OP_DIR_COUNT] = {"forward", "backward", "update"};

void op_trace_init(op_trace *t, backend *be, int dev, be_stream *st)
{
    memset(t, 0, sizeof *t);
    t->be = be;
    t->dev = dev;
    t->st = st;
    t->open = -1;
}

void op_trace_free(op_trace *t)
{
    for (int i = 0; i < t->cap; i++)
        for (int j = 0; j < 2; j++)
            if (t->mark[i].ev[j]) t->be->ops->event_destroy(t->be, t->mark[i].ev[j]);
    free(t->mark);
    t->mark = NULL;
    t->cap = t->nmarks = 0;
    t->on = 0;
}

void op_trace_start(op_trace *t)
{
    t->on = 1;
    t->nmarks = 0;
    t->open = -1;
    memset(&t->rows, 0, sizeof t->rows);
}

/* The row of (kind, dir), added when new; -1 when the rows are full. */
static int row_of(op_rows *r, const char *kind, op_dir dir)
{
    for (int i = 0; i < r->n; i++)
        if (r->row[i].dir == dir && !strcmp(r->row[i].kind, kind)) return i;
    if (r->n == OP_ROWS_MAX) return -1;
    op_row *w = &r->row[r->n];
    dps_strlcpy(w->kind, kind, sizeof w->kind);
    w->dir = dir;
    return r->n++;
}

/* A free mark, its two events made the first time it is used. */
static dps_status next_mark(op_trace *t, op_mark **m)
{
    if (t->nmarks == t->cap) {
        int cap = t->cap ? 2 * t->cap : 64;
        op_mark *grown = realloc(t->mark, (size_t)cap * sizeof *grown);
        if (!grown) return dps_fail(DPS_ERR_RUNTIME, "out of host memory for %d op marks", cap);
        memset(grown + t->cap, 0, (size_t)(cap - t->cap) * sizeof *grown);
        t->mark = grown;
        t->cap = cap;
    }
    *m = &t->mark[t->nmarks];
    for (int j = 0; j < 2; j++)
        if (!(*m)->ev[j]) DPS_TRY(t->be->ops->event_create(t->be, t->dev, &(*m)->ev[j]));
    return DPS_OK;
}

dps_status op_trace_begin(op_trace *t, const char *kind, op_dir dir, double flop, double bytes)
{
    if (!t || !t->on) return DPS_OK;
    if (t->open >= 0)
        return dps_fail(DPS_ERR_RUNTIME, "op trace: %s %s begun inside another op: end each op "
                        "before the next begins", kind, op_dir_names[dir]);
    int r = row_of(&t->rows, kind, dir);
    if (r < 0)
        return dps_fail(DPS_ERR_RUNTIME, "op trace: more than %d op kinds and directions at %s "
                        "%s: raise OP_ROWS_MAX in model/op_trace.h", OP_ROWS_MAX, kind,
                        op_dir_names[dir]);
    op_mark *m = NULL;
    DPS_TRY(next_mark(t, &m));
    m->row = r;
    t->rows.row[r].calls++;
    t->rows.row[r].flop += flop;
    t->rows.row[r].bytes += bytes;
    t->open = t->nmarks++;
    return t->be->ops->event_record(t->be, m->ev[0], t->st);
}

dps_status op_trace_end(op_trace *t)
{
    if (!t || !t->on) return DPS_OK;
    if (t->open < 0)
        return dps_fail(DPS_ERR_RUNTIME, "op trace: an op ended that did not begin");
    op_mark *m = &t->mark[t->open];
    t->open = -1;
    return t->be->ops->event_record(t->be, m->ev[1], t->st);
}

dps_status op_trace_loss(op_trace *t, int64_t rows, int classes)
{
    return op_trace_begin(t, "loss", OP_FORWARD, 0.0, 8.0 * (double)rows * classes);
}

dps_status op_trace_optimizer(op_trace *t, int adamw, int64_t n)
{
    return op_trace_begin(t, "optimizer", OP_UPDATE, 0.0, 4.0 * (adamw ? 7 : 5) * (double)n);
}

dps_status op_trace_finish(op_trace *t, op_rows *out)
{
    t->on = 0;
    if (t->open >= 0)
        return dps_fail(DPS_ERR_RUNTIME, "op trace: the step ended inside an op of kind %s",
                        t->rows.row[t->mark[t->open].row].kind);
    for (int i = 0; i < t->nmarks; i++) {
        float ms = 0.0f;
        DPS_TRY(t->be->ops->event_ms(t->be, t->mark[i].ev[0], t->mark[i].ev[1], &ms));
        t->rows.row[t->mark[i].row].ms += ms;
    }
    *out = t->rows;
    return DPS_OK;
}

double op_rows_ms(const op_rows *r)
{
    double s = 0.0;
    for (int i = 0; i < r->n; i++) s += r->row[i].ms;
    return s;
}
