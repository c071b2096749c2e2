/* A CSV file of dpscale's read whole for lookups by column name: the
 * header, then each record's cells on demand. Every error is DPS_ERR_USAGE
 * naming FILE (and FILE:LINE for a cell). */
#ifndef DPS_CSV_TABLE_H
#define DPS_CSV_TABLE_H

#include <stddef.h>

#include "core/err.h"

#define CSV_TABLE_COLS 128
#define CSV_TABLE_CELL 256

typedef struct csv_table {
    char path[4096];
    char *data;
    int ncols, nrows;  /* nrows: records after the header */
    char cols[CSV_TABLE_COLS][64];
    const char **rec;  /* [nrows + 1]: the header, then row r at r + 1 */
    size_t *rec_len;
    int *line;         /* the line each record starts on */
} csv_table;

/* path read whole; a missing or empty file is an error naming `hint`
 * (what makes the file). */
dps_status csv_table_load(const char *path, const char *hint, csv_table *t) DPS_MUST_USE;
void csv_table_free(csv_table *t);

/* DIR/FILE, as csv_table_load. */
dps_status csv_table_open(const char *dir, const char *file, const char *hint, csv_table *t)
    DPS_MUST_USE;
/* DIR/FILE, which a folder may lack (older versions, options that leave it
 * out): *present 0 and DPS_OK when it does not exist; one that exists and
 * is damaged is an error. */
dps_status csv_table_open_optional(const char *dir, const char *file, csv_table *t, int *present)
    DPS_MUST_USE;

/* The index of column `name`, or a failure naming the file and column. */
dps_status csv_table_col(const csv_table *t, const char *name, int *col) DPS_MUST_USE;

/* Row r's cell of column col, unquoted; "" when the record is short. */
const char *csv_table_cell(const csv_table *t, int r, int col, char *buf, size_t len);

/* Row r's cell as a number; an empty cell is `empty` when allowed (empty_ok),
 * anything else not a finite number is a failure with FILE:LINE. */
dps_status csv_table_num(const csv_table *t, int r, int col, int empty_ok, double empty,
                         double *out) DPS_MUST_USE;

#endif
