/* Reading back the CSV files dpscale writes: a whole file into memory, its
 * records (a quoted field may hold newlines) and one field of a record. */
#ifndef DPS_CSV_READ_H
#define DPS_CSV_READ_H

#include <stddef.h>

#include "core/err.h"

/* The largest file read (docs/results.md: the Python readers take as much,
 * steps.csv apart, which dpscale does not read back). */
#define CSV_READ_MAX_BYTES (64LL << 20)

/* The whole of path in *data (NUL-terminated, caller frees) and its size;
 * a missing file is empty (*data NULL, *len 0). A folder, a FIFO, a device
 * or a file over CSV_READ_MAX_BYTES is refused (DPS_ERR_USAGE) before it
 * is read. */
dps_status csv_read_file(const char *path, char **data, size_t *len) DPS_MUST_USE;

/* The length of the record at p (its '\n' included) in the n bytes from p;
 * 0 when the record has no end there (the file ends mid-record). */
size_t csv_record_len(const char *p, size_t n);

/* How many fields the record of len bytes at rec has. */
int csv_field_count(const char *rec, size_t len);

/* Field `index` (from 0) of the record of len bytes at rec, unquoted, into
 * out; 0 when the record has fewer fields or the field does not fit. */
int csv_field(const char *rec, size_t len, int index, char *out, size_t outlen);

#endif
