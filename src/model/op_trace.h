/* Where a step's time goes, per op kind and direction: begin and end events
 * on the stream around each op's kernels (a model file's ops, the MLP's
 * Linears and GELUs, the loss, the optimizer), recorded in one traced step
 * and read once its stream is synchronised (nothing inside the step waits
 * for them), with each op's FLOP and bytes. Written to ops.csv. */
#ifndef DPS_OP_TRACE_H
#define DPS_OP_TRACE_H

#include "backend/backend.h"

/* The loss's value and its gradient count as forward; the optimizer's step
 * is an update. */
typedef enum op_dir { OP_FORWARD, OP_BACKWARD, OP_UPDATE, OP_DIR_COUNT } op_dir;
extern const char *const op_dir_names[OP_DIR_COUNT]; /* "forward", "backward", "update" */

#define OP_KIND_MAX 16
#define OP_ROWS_MAX 40

/* One (kind, direction) of the traced step: its ops, their summed time,
 * their FLOP (GEMMs' multiply-adds, 2 each; 0 for other kinds) and bytes
 * (each operand read and each result written once). */
typedef struct op_row {
    char kind[OP_KIND_MAX];
    op_dir dir;
    int calls;
    double ms, flop, bytes;
} op_row;

typedef struct op_rows {
    op_row row[OP_ROWS_MAX];
    int n;
} op_rows;

typedef struct op_mark {
    be_event *ev[2];
    int row;
} op_mark;

typedef struct op_trace {
    backend *be;
    be_stream *st;
    int dev;
    int on;          /* the running step is traced */
    op_mark *mark;   /* the step's ops in issue order; events kept for reuse */
    int nmarks, cap, open;
    op_rows rows;
} op_trace;

void op_trace_init(op_trace *t, backend *be, int dev, be_stream *st);
void op_trace_free(op_trace *t);
/* The next ops are traced until op_trace_finish. */
void op_trace_start(op_trace *t);
/* An op of kind, dir begins on t's stream (t NULL or not started: nothing);
 * its end is the next op_trace_end. */
dps_status op_trace_begin(op_trace *t, const char *kind, op_dir dir, double flop,
                          double bytes) DPS_MUST_USE;
dps_status op_trace_end(op_trace *t) DPS_MUST_USE;
/* The loss over rows x classes logits begins: the logits read and their
 * gradient written once, fp32. */
dps_status op_trace_loss(op_trace *t, int64_t rows, int classes) DPS_MUST_USE;
/* The optimizer's step over n parameters begins: SGD with momentum reads
 * parameters, gradients and momentum and writes two (5 floats each), AdamW
 * reads four and writes three (7). */
dps_status op_trace_optimizer(op_trace *t, int adamw, int64_t n) DPS_MUST_USE;
/* After the stream is synchronised: each op's time summed into its row,
 * the rows into out; tracing stops. */
dps_status op_trace_finish(op_trace *t, op_rows *out) DPS_MUST_USE;
/* The rows' ms summed. */
double op_rows_ms(const op_rows *r);

#endif
