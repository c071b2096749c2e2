/* Key files: `key = value` lines with `#` comments, as suite files but
 * without sections (the predictor's MACHINE and WORKLOAD files). The reader
 * checks the text (no NUL or control bytes, at most 1 MiB, a UTF-8 BOM
 * skipped) and hands each key and value, trimmed, to a callback; every error
 * is DPS_ERR_USAGE with "FILE:LINE: what". */
#ifndef DPS_KEYFILE_H
#define DPS_KEYFILE_H

#include "core/err.h"

/* Called once per `key = value` line; returns DPS_OK or a failure made with
 * keyfile_fail. */
typedef dps_status (*keyfile_fn)(void *ctx, const char *path, int line, const char *key,
                                 const char *val);

/* Reads path line by line; `what` names the file's kind in messages
 * ("machine file"). */
dps_status keyfile_read(const char *path, const char *what, keyfile_fn fn, void *ctx) DPS_MUST_USE;

/* DPS_ERR_USAGE with "path:line: " and the formatted text. */
dps_status keyfile_fail(const char *path, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
