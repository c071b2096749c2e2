/* Key files: `key = value` lines with `#` comments, as suite files but
 * without sections (the predictor's MACHINE, WORKLOAD and calibration
 * files), read line by line or through a table of typed keys, and files of
 * records of words (model files). The reader checks the text (no NUL or
 * control bytes, at most 1 MiB, a UTF-8 BOM skipped) and hands each record,
 * or key and value, trimmed, to a callback; every error is DPS_ERR_USAGE
 * with "FILE:LINE: what". */
#ifndef DPS_KEYFILE_H
#define DPS_KEYFILE_H

#include <stddef.h>

#include "core/err.h"

/* Called once per `key = value` line; returns DPS_OK or a failure made with
 * keyfile_fail. */
typedef dps_status (*keyfile_fn)(void *ctx, const char *path, int line, const char *key,
                                 const char *val);

/* Reads path line by line; `what` names the file's kind in messages
 * ("machine file"). */
dps_status keyfile_read(const char *path, const char *what, keyfile_fn fn, void *ctx) DPS_MUST_USE;

/* Called once per record: a line without its comment, trimmed, not empty;
 * the text may be changed in place. */
typedef dps_status (*keyfile_record_fn)(void *ctx, const char *path, int line, char *record);

/* Reads path's records, as keyfile_read does but without the `key = value`
 * form (model files: docs/model-file.md). */
dps_status keyfile_read_records(const char *path, const char *what, keyfile_record_fn fn,
                                void *ctx) DPS_MUST_USE;

/* One key of a table: its type, range, unit and where its value goes in
 * the object the table fills. */
typedef enum keyfile_type {
    KEY_TEXT,   /* at most hi characters, into a char[hi + 1] */
    KEY_INT,    /* an integer from lo to hi, into an int */
    KEY_NUM,    /* a number above lo (at least lo when zero_ok), at most hi, into a double */
    KEY_WORD,   /* one of words, its index into an int */
    KEY_CHOICE, /* one of words, which are integers, its value into an int */
    KEY_CUSTOM, /* parse(obj, ...) reads the value */
} keyfile_type;

typedef struct keyfile_key {
    const char *key;
    keyfile_type type;
    double lo, hi;
    int zero_ok;
    size_t off;                 /* where the value goes in the object */
    const char *const *words;
    int nwords;
    const char *unit;           /* after the range in a refusal: "GB/s" */
    dps_status (*parse)(void *obj, const char *path, int line, const char *val);
} keyfile_key;

/* Table entries: the key, where its value goes (offsetof), its range and unit. */
#define KEYFILE_TEXT(k, at, max_chars) \
    {.key = (k), .type = KEY_TEXT, .hi = (max_chars), .off = (at), .unit = "characters"}
#define KEYFILE_INT(k, at, lo_, hi_, unit_) \
    {.key = (k), .type = KEY_INT, .lo = (lo_), .hi = (hi_), .off = (at), .unit = (unit_)}
#define KEYFILE_ABOVE(k, at, lo_, hi_, unit_) /* lo < x <= hi */ \
    {.key = (k), .type = KEY_NUM, .lo = (lo_), .hi = (hi_), .off = (at), .unit = (unit_)}
#define KEYFILE_FROM(k, at, lo_, hi_, unit_) /* lo <= x <= hi */ \
    {.key = (k), .type = KEY_NUM, .lo = (lo_), .hi = (hi_), .zero_ok = 1, .off = (at), \
     .unit = (unit_)}
#define KEYFILE_WORD(k, at, w) \
    {.key = (k), .type = KEY_WORD, .off = (at), .words = (w), .nwords = KEYFILE_COUNT(w)}
#define KEYFILE_CHOICE(k, at, w) \
    {.key = (k), .type = KEY_CHOICE, .off = (at), .words = (w), .nwords = KEYFILE_COUNT(w)}
#define KEYFILE_CUSTOM(k, at, fn, unit_) \
    {.key = (k), .type = KEY_CUSTOM, .off = (at), .unit = (unit_), .parse = (fn)}
#define KEYFILE_COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* Reads path into obj through keys[0..n): unknown keys, a key given twice
 * and bad values are FILE:LINE refusals. line_of[i] (n of them): the line
 * key i was given on, 0 when it was not. */
dps_status keyfile_read_keys(const char *path, const char *what, const keyfile_key *keys, int n,
                             void *obj, int *line_of) DPS_MUST_USE;

/* DPS_ERR_USAGE with "path:line: " and the formatted text. */
dps_status keyfile_fail(const char *path, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
