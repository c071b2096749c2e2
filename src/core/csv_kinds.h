/* What each column of dpscale's CSV files may hold: one table for the C
 * readers (csv_table), generated at build time from scripts/dpstools/results.py's
 * SCHEMA by scripts/csv_kinds.py, so that both readers refuse the same
 * cells; and the check of one cell against its kind. */
#ifndef DPS_CSV_KINDS_H
#define DPS_CSV_KINDS_H

/* A column's cells (dpstools.results.Kind): text (nonempty: not empty), one of
 * `words` ("ok|oom|..."), or numbers: whole ones (digits alone) or decimals
 * (at most 9 places, a '-' only before a negative one), at least `least`
 * (when has_least), above 0 when `positive`; `empty`: may be empty. */
typedef struct csv_kind {
    unsigned char number, whole, positive, has_least, nonempty, empty;
    double least;
    const char *words;
} csv_kind;

typedef struct csv_column_kind {
    const char *file, *column;
    csv_kind kind;
} csv_column_kind;

extern const csv_column_kind csv_column_kinds[]; /* csv_kinds.c, generated */
extern const int csv_ncolumn_kinds;

/* Both in csv_table.c, which checks every cell as it loads a file. */

/* The kind of column `column` of the file named `file` ("runs.csv"), or
 * NULL when the table has none (the cell is not checked). */
const csv_kind *csv_kind_of(const char *file, const char *column);

/* Why `cell` is not what kind k may hold ("is not a number", "is below 1",
 * ...: the words of dpstools/results.py), or NULL when it is. */
const char *csv_cell_problem(const csv_kind *k, const char *cell);

#endif
