/* The results folder's transactions (docs/DESIGN.md, "Results"): a set of
 * appends to the folder's CSV files made whole or taken back, whichever
 * process dies when. Before appending, the writer notes every file's size
 * in an undo journal inside the folder (.dpscale.journal, on disk before
 * the first append) and removes it after the last; a journal found later
 * (by the sweep's parent after a child ended, or by the next writer to
 * open the folder) is rolled back: every file cut back to its size, the
 * configuration's trace removed. Also: whether the folder's path still
 * names the folder that was locked. */
#ifndef DPS_RESULTS_TXN_H
#define DPS_RESULTS_TXN_H

#include "core/csv.h"
#include "results/results.h"

#define RESULTS_JOURNAL_FILE ".dpscale.journal"

/* Rows for one file of the folder. */
typedef struct results_part {
    const char *name;           /* "steps.csv": a file directly in the folder */
    const char *const *cols;    /* its header, written into a new or empty file */
    int ncols;
    const csv_buf *rows;
} results_part;

#define RESULTS_TXN_MAX_TRACES 2 /* a configuration's, and its twin's (sweep.h) */

/* One transaction: whose rows (for messages), the files, and the files of
 * trace/ that go with the rows when they are taken back. */
typedef struct results_txn {
    const char *what;           /* "configuration dp-tiny-fp32-sgd-g1-b8", "links.csv" */
    const char *rows_of;        /* "the configuration's", in "none of ... rows were kept" */
    const char *const *traces;  /* "dp-tiny-fp32-sgd-g1-b8.json", ...; NULL when ntraces is 0 */
    int ntraces;
    const results_part *parts;
    int nparts;
} results_txn;

/* A file of the folder whose rows one command writes in one transaction
 * (links.csv, allreduce.csv): its name, its header and what messages call
 * it ("the link matrix": "the link matrix (links.csv)", "the link
 * matrix's" rows; "the all-reduce timings'"). */
typedef struct results_table {
    const char *name;
    const char *const *cols;
    int ncols;
    const char *what;
} results_table;

/* Appends rows to t's file as one transaction (results_commit's). */
dps_status results_commit_table(const results_dir *r, const results_table *t, const csv_buf *rows)
    DPS_MUST_USE;

/* Appends every part, or on a failure none (each file cut back, the trace
 * removed); the folder must still be the one locked. Signals that would
 * end the process are held until the end, so only SIGKILL (or a crash)
 * can stop it midway, and then the journal stays for results_settle. Sets
 * *r->committed to 1 once every row is in, before the journal goes. */
dps_status results_commit(const results_dir *r, const results_txn *t) DPS_MUST_USE;

/* After a writer of the folder ended, maybe midway (a child process; the
 * previous writer, when the folder is opened): a journal it left is rolled
 * back, unless `committed` says its rows were all in. *rolled_back says
 * whether rows were taken out, *what whose (what_len bytes; may be NULL). */
dps_status results_settle(const results_dir *r, int committed, int *rolled_back, char *what,
                          size_t what_len) DPS_MUST_USE;

/* Removes the folder's trace/NAME, if there is one (a configuration recorded
 * without its timeline). */
void results_drop_trace(const results_dir *r, const char *name);

/* DPS_OK while r->dir still names the folder opened and locked; else
 * DPS_ERR_RUNTIME saying it was moved or deleted: nothing is written then. */
dps_status results_check_folder(const results_dir *r) DPS_MUST_USE;

#endif
