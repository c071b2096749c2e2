/* CSV files looked up by column name (see csv_table.h), every cell checked
 * as it is loaded against its column's kind (csv_kinds.h), by the grammar
 * scripts/dpstools/results.py holds. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/csv_kinds.h"
#include "core/csv_read.h"
#include "core/csv_table.h"
#include "core/util.h"

/* What to do about a file that is not as dpscale writes it. */
#define TABLE_FIX "restore the file as dpscale wrote it, or run the command that writes it again"

const csv_kind *csv_kind_of(const char *file, const char *column)
{
    for (int i = 0; i < csv_ncolumn_kinds; i++)
        if (strcmp(csv_column_kinds[i].file, file) == 0 &&
            strcmp(csv_column_kinds[i].column, column) == 0)
            return &csv_column_kinds[i].kind;
    return NULL;
}

/* Whether s is a number as dpscale writes it (core/csv.c: csv_int, csv_u64,
 * csv_num): whole ones 0|[1-9][0-9]*, others -?(0|[1-9][0-9]*)(.[0-9]{1,9})?,
 * dpstools/results.py's WHOLE and DECIMAL. */
static int written_number(const char *s, int whole)
{
    if (!whole && *s == '-') s++;
    if (*s == '0') s++;
    else if (*s >= '1' && *s <= '9') while (*s >= '0' && *s <= '9') s++;
    else return 0;
    if (whole || *s != '.') return *s == '\0';
    int places = 0;
    for (s++; *s >= '0' && *s <= '9'; s++) places++;
    return *s == '\0' && places >= 1 && places <= 9;
}

/* A message for csv_cell_problem that names a value. */
static const char *problem_text(const char *fmt, double x)
{
    static _Thread_local char why[96];
    snprintf(why, sizeof why, fmt, x);
    return why;
}

/* What a number cell dpscale would not write holds instead. */
static const char *unwritten_problem(const csv_kind *k, const char *cell)
{
    char *end;
    if (k->whole && written_number(cell, 0)) {
        double x = strtod(cell, NULL);
        return k->has_least && x < k->least ? problem_text("is below %g", k->least)
                                            : "is not a whole number (dpscale writes those in "
                                              "digits alone)";
    }
    double x = strtod(cell, &end);
    if (end == cell || *end) return "is not a number";
    if (!isfinite(x)) return "is not finite";
    return "is not a number as dpscale writes them (digits, a '.' and at most 9 decimals, a '-' "
           "only before a negative number: no '+', exponent, space, '_' or leading zero)";
}

static const char *number_problem(const csv_kind *k, const char *cell)
{
    if (!written_number(cell, k->whole)) return unwritten_problem(k, cell);
    errno = 0;
    double x = k->whole ? (double)strtoull(cell, NULL, 10) : strtod(cell, NULL);
    /* a whole number is exact below 2^64 (strtoull's range), x only near it */
    int beyond = k->whole ? errno == ERANGE : x != 0 && !(fabs(x) >= 1e-9 && fabs(x) < 0x1p64);
    if (beyond) return "is out of range (non-zero values lie between 1e-09 and 2^64)";
    if (k->has_least && x < k->least) return problem_text("is below %g", k->least);
    if (k->positive && x <= 0) return "is not above 0";
    return NULL;
}

/* Whether cell is one of the '|'-separated words. */
static int is_word(const char *words, const char *cell)
{
    size_t n = strlen(cell);
    for (const char *w = words; *w; w += strcspn(w, "|") + (w[strcspn(w, "|")] == '|'))
        if (strcspn(w, "|") == n && strncmp(w, cell, n) == 0) return 1;
    return 0;
}

const char *csv_cell_problem(const csv_kind *k, const char *cell)
{
    if (!cell[0]) return !k->empty && (k->number || k->words || k->nonempty) ? "is empty" : NULL;
    if (k->words) {
        if (is_word(k->words, cell)) return NULL;
        static _Thread_local char why[160];
        snprintf(why, sizeof why, "is not one of %s", k->words);
        for (char *bar = strchr(why, '|'); bar; bar = strchr(bar, '|')) *bar = ',';
        return why;
    }
    return k->number ? number_problem(k, cell) : NULL;
}

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

/* Record r + 1 (row r): as many fields as the header, and each cell of a
 * column with a kind (kinds[c], NULL: any) what that kind may hold. */
static dps_status check_row(const csv_table *t, int r, const csv_kind *const *kinds)
{
    const char *rec = t->rec[r + 1];
    size_t len = t->rec_len[r + 1];
    if (csv_field_count(rec, len) != t->ncols)
        return dps_fail(DPS_ERR_USAGE, "%s:%d: wrong number of fields (the header has %d); %s",
                        t->path, t->line[r + 1], t->ncols, TABLE_FIX);
    char cell[CSV_TABLE_CELL];
    for (int c = 0; c < t->ncols; c++) {
        if (!kinds[c]) continue;
        int fits = csv_field(rec, len, c, cell, sizeof cell);
        const char *why = fits ? csv_cell_problem(kinds[c], cell)
                        : kinds[c]->number || kinds[c]->words ? "is longer than its values" : NULL;
        if (why)
            return dps_fail(DPS_ERR_USAGE, "%s:%d: column %s %s: '%.40s'; %s", t->path,
                            t->line[r + 1], t->cols[c], why, cell, TABLE_FIX);
    }
    return DPS_OK;
}

/* Every row checked (check_row) against the kinds of the file's name. */
static dps_status check_rows(const csv_table *t)
{
    const char *file = dps_path_base(t->path);
    const csv_kind *kinds[CSV_TABLE_COLS];
    for (int c = 0; c < t->ncols; c++) kinds[c] = csv_kind_of(file, t->cols[c]);
    for (int r = 0; r < t->nrows; r++) DPS_TRY(check_row(t, r, kinds));
    return DPS_OK;
}

/* The text is UTF-8 (a leading byte-order mark, which the readers skip,
 * taken out): the Python readers refuse any other. */
static dps_status check_text(csv_table *t, size_t *len)
{
    if (*len >= 3 && memcmp(t->data, "\xef\xbb\xbf", 3) == 0) {
        memmove(t->data, t->data + 3, *len - 3 + 1);
        *len -= 3;
    }
    int line = 1;
    for (size_t i = 0; i < *len;) {
        unsigned char ch = (unsigned char)t->data[i];
        int n = ch < 0x80 ? 1 : dps_utf8_len(t->data + i);
        if (!n)
            return dps_fail(DPS_ERR_USAGE, "%s:%d: not UTF-8 (byte 0x%02x); %s", t->path, line,
                            ch, TABLE_FIX);
        line += ch == '\n';
        i += (size_t)n;
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
    dps_status rc = check_text(t, &len);
    if (!rc) rc = index_records(t, len);
    if (!rc) rc = read_header(t);
    if (!rc) rc = check_rows(t);
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
