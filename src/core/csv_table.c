/* CSV files looked up by column name (see csv_table.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/csv_read.h"
#include "core/csv_table.h"
#include "core/util.h"

static dps_status index_records(csv_table *t, size_t len)
{
    int cap = 0, line = 1;
    for (size_t pos = 0, n; pos < len; pos += n) {
        n = csv_record_len(t->data + pos, len - pos);
        if (!n) return dps_fail(DPS_ERR_USAGE, "%s:%d: the file ends inside a record (cut short; "
                                "run the command that writes it again)", t->path, line);
        if (t->nrows == cap) {
            cap = cap ? 2 * cap : 64;
            const char **rec = realloc(t->rec, (size_t)cap * sizeof *rec);
            size_t *rl = rec ? realloc(t->rec_len, (size_t)cap * sizeof *rl) : NULL;
            int *ln = rl ? realloc(t->line, (size_t)cap * sizeof *ln) : NULL;
            if (rec) t->rec = rec;
            if (rl) t->rec_len = rl;
            if (!ln) return dps_fail(DPS_ERR_RUNTIME, "out of host memory reading %s", t->path);
            t->line = ln;
        }
        t->rec[t->nrows] = t->data + pos;
        t->rec_len[t->nrows] = n;
        t->line[t->nrows++] = line;
        for (size_t i = 0; i < n; i++) line += t->data[pos + i] == '\n';
    }
    return DPS_OK;
}

static dps_status read_header(csv_table *t)
{
    const char *h = t->rec[0];
    size_t n = t->rec_len[0];
    while (t->ncols < CSV_TABLE_COLS &&
           csv_field(h, n, t->ncols, t->cols[t->ncols], sizeof t->cols[0]) && t->cols[t->ncols][0])
        t->ncols++;
    t->nrows--; /* rows after the header: record r + 1 */
    return DPS_OK;
}

dps_status csv_table_load(const char *path, const char *hint, csv_table *t)
{
    size_t len = 0;
    memset(t, 0, sizeof *t);
    dps_strlcpy(t->path, path, sizeof t->path);
    DPS_TRY(csv_read_file(path, &t->data, &len));
    if (!t->data || !len) {
        csv_table_free(t);
        return dps_fail(DPS_ERR_USAGE, "%s: missing or empty (%s)", path, hint);
    }
    dps_status rc = index_records(t, len);
    if (!rc) rc = read_header(t);
    if (rc) csv_table_free(t);
    return rc;
}

dps_status csv_table_open(const char *dir, const char *file, const char *hint, csv_table *t)
{
    char path[sizeof t->path];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    return csv_table_load(path, hint, t);
}

dps_status csv_table_open_optional(const char *dir, const char *file, csv_table *t, int *present)
{
    char path[sizeof t->path];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    *present = dps_file_exists(path);
    return *present ? csv_table_load(path, "written with the configurations' rows", t) : DPS_OK;
}

void csv_table_free(csv_table *t)
{
    free(t->rec);
    free(t->rec_len);
    free(t->line);
    free(t->data);
    memset(t, 0, sizeof *t);
}

dps_status csv_table_col(const csv_table *t, const char *name, int *col)
{
    for (*col = 0; *col < t->ncols; (*col)++)
        if (strcmp(t->cols[*col], name) == 0) return DPS_OK;
    return dps_fail(DPS_ERR_USAGE, "%s: no column '%s' (not dpscale's file, or from another "
                    "version: run the command that writes it again)", t->path, name);
}

const char *csv_table_cell(const csv_table *t, int r, int col, char *buf, size_t len)
{
    if (!csv_field(t->rec[r + 1], t->rec_len[r + 1], col, buf, len)) buf[0] = '\0';
    return buf;
}

dps_status csv_table_num(const csv_table *t, int r, int col, int empty_ok, double empty,
                         double *out)
{
    char cell[CSV_TABLE_CELL];
    csv_table_cell(t, r, col, cell, sizeof cell);
    if (!cell[0] && empty_ok) {
        *out = empty;
        return DPS_OK;
    }
    if (dps_parse_f64(cell, out) == 0 && isfinite(*out)) return DPS_OK;
    return dps_fail(DPS_ERR_USAGE, "%s:%d: %s = '%s': expected a number (the file is damaged; run "
                    "the command that writes it again)", t->path, t->line[r + 1], t->cols[col], cell);
}
