/* CSV rows built in memory and appended to a file in one write, so a
 * configuration's rows land whole or not at all. RFC 4180 quoting. */
#ifndef DPS_CSV_H
#define DPS_CSV_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

typedef struct csv_buf {
    char *data;
    size_t len, cap;
    int col;     /* fields in the current row */
    int oom;     /* an allocation failed: the buffer is unusable */
} csv_buf;

void csv_init(csv_buf *b);
void csv_free(csv_buf *b);
void csv_str(csv_buf *b, const char *s);      /* csv_clean_text's, quoted when needed */
void csv_int(csv_buf *b, long long v);
void csv_u64(csv_buf *b, uint64_t v);
void csv_num(csv_buf *b, double v, int decimals); /* NaN -> empty */
void csv_empty(csv_buf *b);
void csv_end_row(csv_buf *b);
void csv_raw(csv_buf *b, const char *s, size_t n); /* bytes as they are, e.g. a record read back */

/* The one rule of every text cell (csv_str) and of the same text shown on a
 * terminal: a byte that does not begin valid UTF-8 becomes U+FFFD, a tab or
 * line end a space, any other control character (C0, DEL, C1: a terminal's
 * escape sequences) U+FFFD; so a file stays UTF-8 that the readers take.
 * out holds at least 3 x strlen(s) + 1 bytes; returns the length written. */
size_t csv_clean_text(const char *s, char *out);

/* Header line from column names (no newline in the result's last char). */
void csv_header(csv_buf *b, const char *const *cols, int n);

/* Replaces path by the bytes of rows (dps_replace_file). */
dps_status csv_replace(const char *path, const csv_buf *rows) DPS_MUST_USE;
/* Appends rows to path: writes the header first into a new or empty file,
 * refuses a file whose header differs, writes everything with one write(2)
 * on an O_APPEND descriptor, then fsync. */
dps_status csv_append(const char *path, const char *const *cols, int ncols, const csv_buf *rows) DPS_MUST_USE;

/* DPS_OK when path is missing, empty or starts with the header of cols;
 * DPS_ERR_USAGE, naming the file, otherwise. */
dps_status csv_check_header_path(const char *path, const char *const *cols, int ncols) DPS_MUST_USE;

/* The same three for the file `name` of the folder open at dirfd (`shown`:
 * its path, for messages), never through a symbolic link and only into a
 * regular file (dps_openat_file). */
dps_status csv_replace_at(int dirfd, const char *name, const char *shown, const csv_buf *rows)
    DPS_MUST_USE;
dps_status csv_append_at(int dirfd, const char *name, const char *shown, const char *const *cols,
                         int ncols, const csv_buf *rows) DPS_MUST_USE;
dps_status csv_check_header_at(int dirfd, const char *name, const char *shown,
                               const char *const *cols, int ncols) DPS_MUST_USE;

#endif
