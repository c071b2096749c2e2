/* Small helpers used across the harness: strict number parsing, byte
 * formatting, clocks, file and string utilities. */
#ifndef DPS_UTIL_H
#define DPS_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/err.h"

/* Strict integer: the whole string, base 10, within [lo, hi]. 0 on success,
 * -1 not a number, -2 out of range (overflow included). */
int dps_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);
/* Non-negative double, the whole string, finite. 0 ok, -1 not a number. */
int dps_parse_f64(const char *s, double *out);
/* Bytes with optional K, M, G, T suffix (powers of 1024; "KiB", "MB" and
 * lower case accepted). 0 ok, -1 malformed, -2 overflow. */
int dps_parse_bytes(const char *s, uint64_t *out);
/* "1.50 GiB" style, into buf. */
const char *dps_fmt_bytes(uint64_t bytes, char *buf, size_t len);
/* Exactly, as dps_parse_bytes reads it: the largest of K, M, G, T that
 * divides the count ("16G", "1536K", "4"). */
const char *dps_fmt_bytes_suffix(uint64_t bytes, char *buf, size_t len);

/* Test-only: whether DPSCALE_TEST_PLANT names the defect `name`, planted
 * where this is asked so that strict mode's tests see it caught (the one
 * place the variable is read; never set outside tests/test_strict.py). */
int dps_test_plant(const char *name);
double dps_now_ms(void);          /* monotonic clock, ms */
int64_t dps_now_us(void);         /* monotonic clock, us */
double dps_wall_ms(void);         /* wall clock (CLOCK_REALTIME), ms: the same on every host NTP keeps */
void dps_utc_iso8601(char *buf, size_t len); /* now, "2026-11-30T01:02:03Z" */
/* Seconds since 1970 of text beginning with dps_utc_iso8601's form; -1 in another form. */
double dps_parse_utc_iso8601(const char *text);

/* mkdir -p; DPS_ERR_USAGE with a message when it cannot be created or written. */
dps_status dps_mkdirs(const char *path, const char *option) DPS_MUST_USE;
int dps_file_exists(const char *path);

/* Index of s in words[0..n), or -1; `expected` gets "a, b, c" for messages. */
int dps_match_word(const char *s, const char *const *words, int n, char *expected, size_t len);

/* Strips leading and trailing blanks in place; returns the first non-blank. */
char *dps_trim(char *s);

/* s as a JSON string, quotes included: valid UTF-8 as it is, a byte that is
 * not (from a command line in another encoding) as U+FFFD, so the file stays
 * valid JSON. */
void dps_json_str(FILE *f, const char *s);
/* Replaces path by what put(f, ctx) writes into f, whole or not at all: a
 * temporary file beside it, fsync, rename; a failure names path and why. */
dps_status dps_replace_file(const char *path, void (*put)(FILE *f, void *ctx), void *ctx)
    DPS_MUST_USE;
/* The same for the file `name` of the folder open at dirfd (`shown`: its
 * path, for messages); neither name nor its temporary file is followed if a
 * symbolic link. */
dps_status dps_replace_file_at(int dirfd, const char *name, const char *shown,
                               void (*put)(FILE *f, void *ctx), void *ctx) DPS_MUST_USE;

/* Inside a folder dpscale writes, files are opened by name relative to the
 * folder's descriptor and never through a symbolic link: openat(2) with
 * O_NOFOLLOW and O_CLOEXEC, and only a regular file (a FIFO or a device is
 * refused before it could block or be written). -1 with errno: ELOOP for a
 * symbolic link, EINVAL for another kind of file. */
int dps_openat_file(int dirfd, const char *name, int flags, unsigned mode);
/* The folder that holds path, opened (O_DIRECTORY); *base: path's last
 * component. -1 with errno when it cannot be opened. */
int dps_open_parent(const char *path, const char **base);
/* What an errno from dps_openat_file means, for a message. */
const char *dps_open_strerror(int err);
/* The whole file `name` of the folder at dirfd into *data (NUL-terminated,
 * *len bytes); *data NULL when there is no such file. */
dps_status dps_read_file_at(int dirfd, const char *name, const char *shown, char **data,
                            size_t *len) DPS_MUST_USE;

/* Length of the valid UTF-8 sequence at s (1 to 4), or 0 when s does not
 * start one (a stray or overlong byte, a surrogate, past U+10FFFF). */
int dps_utf8_len(const char *s);
/* Whether the whole string is valid UTF-8. */
int dps_utf8_valid(const char *s);

/* Bounded string copy that always terminates. */
void dps_strlcpy(char *dst, const char *src, size_t len);
/* path's last component: what follows its last '/' (all of it when that is
 * nothing, as "results/"). */
const char *dps_path_base(const char *path);

#endif
