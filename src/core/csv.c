/* CSV writer (see csv.h). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/csv.h"
#include "core/util.h"

void csv_init(csv_buf *b) { memset(b, 0, sizeof *b); }

void csv_free(csv_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}

static void put(csv_buf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1) cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d) {
            b->oom = 1;
            return;
        }
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

static void sep(csv_buf *b)
{
    if (b->col++) put(b, ",", 1);
}

/* The bytes one character of s stands for in a text cell (csv_clean_text's
 * rule) into out (at most 3); *used: the bytes of s it took. */
static size_t clean_char(const char *s, char *out, int *used)
{
    static const char replacement[] = "\xef\xbf\xbd"; /* U+FFFD */
    unsigned char ch = (unsigned char)*s;
    int n = ch < 0x80 ? 1 : dps_utf8_len(s);
    *used = n ? n : 1;
    if (ch == '\t' || ch == '\n' || ch == '\r') {
        out[0] = ' ';
        return 1;
    }
    int control = ch < 0x20 || ch == 0x7f || (ch == 0xc2 && (unsigned char)s[1] < 0xa0);
    if (!n || control) {
        memcpy(out, replacement, 3);
        return 3;
    }
    memcpy(out, s, (size_t)n);
    return (size_t)n;
}

size_t csv_clean_text(const char *s, char *out)
{
    size_t k = 0;
    for (int used; *s; s += used) k += clean_char(s, out + k, &used);
    out[k] = '\0';
    return k;
}

/* s quoted as RFC 4180 wants it, when it needs to be. */
static void put_quoted(csv_buf *b, const char *s, size_t n)
{
    int quote = n && (s[0] == ' ' || s[n - 1] == ' ');
    for (size_t i = 0; i < n && !quote; i++)
        if (s[i] == ',' || s[i] == '"' || s[i] == '\n' || s[i] == '\r') quote = 1;
    if (!quote) {
        put(b, s, n);
        return;
    }
    put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '"') put(b, "\"", 1);
        put(b, &s[i], 1);
    }
    put(b, "\"", 1);
}

void csv_str(csv_buf *b, const char *s)
{
    sep(b);
    if (!s || b->oom) return;
    char *clean = malloc(3 * strlen(s) + 1);
    if (!clean) {
        b->oom = 1;
        return;
    }
    put_quoted(b, clean, csv_clean_text(s, clean));
    free(clean);
}

static void putf(csv_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(csv_buf *b, const char *fmt, ...)
{
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0) put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

void csv_int(csv_buf *b, long long v)
{
    sep(b);
    putf(b, "%lld", v);
}

void csv_u64(csv_buf *b, uint64_t v)
{
    sep(b);
    putf(b, "%" PRIu64, v);
}

void csv_num(csv_buf *b, double v, int decimals)
{
    sep(b);
    if (isfinite(v)) putf(b, "%.*f", decimals, v);
}

void csv_empty(csv_buf *b) { sep(b); }

void csv_raw(csv_buf *b, const char *s, size_t n) { put(b, s, n); }

void csv_end_row(csv_buf *b)
{
    put(b, "\n", 1);
    b->col = 0;
}

void csv_header(csv_buf *b, const char *const *cols, int n)
{
    for (int i = 0; i < n; i++) csv_str(b, cols[i]);
}

static dps_status check_header(int fd, const char *path, const char *want)
{
    size_t n = strlen(want);
    char *got = malloc(n + 2);
    if (!got) return dps_fail(DPS_ERR_RUNTIME, "out of host memory reading %s", path);
    ssize_t r = pread(fd, got, n + 1, 0);
    int same = r == (ssize_t)(n + 1) && memcmp(got, want, n) == 0 && got[n] == '\n';
    free(got);
    if (!same)
        return dps_fail(DPS_ERR_USAGE, "%s: its header differs from the columns this version "
                        "writes; write to a new folder (--name) or move the file away", path);
    return DPS_OK;
}

dps_status csv_check_header_at(int dirfd, const char *name, const char *shown,
                               const char *const *cols, int ncols)
{
    int fd = dps_openat_file(dirfd, name, O_RDONLY, 0);
    if (fd < 0 && errno == ENOENT) return DPS_OK;
    if (fd < 0) return dps_fail(DPS_ERR_USAGE, "%s: cannot read: %s", shown, dps_open_strerror(errno));
    csv_buf head;
    csv_init(&head);
    csv_header(&head, cols, ncols);
    dps_status rc = head.oom ? dps_fail(DPS_ERR_RUNTIME, "out of host memory reading %s", shown)
                  : lseek(fd, 0, SEEK_END) > 0 ? check_header(fd, shown, head.data) : DPS_OK;
    close(fd);
    csv_free(&head);
    return rc;
}

dps_status csv_check_header_path(const char *path, const char *const *cols, int ncols)
{
    const char *base;
    int dirfd = dps_open_parent(path, &base);
    if (dirfd < 0 && errno == ENOENT) return DPS_OK;
    if (dirfd < 0) return dps_fail(DPS_ERR_USAGE, "%s: cannot read: %s", path, strerror(errno));
    dps_status rc = csv_check_header_at(dirfd, base, path, cols, ncols);
    close(dirfd);
    return rc;
}

static dps_status write_all(int fd, const char *path, const char *data, size_t len)
{
    while (len) {
        ssize_t w = write(fd, data, len);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return dps_fail(DPS_ERR_RUNTIME, "%s: write failed: %s", path, strerror(errno));
        data += w;
        len -= (size_t)w;
    }
    return DPS_OK;
}

/* What a file of size `size` gets: the header and the rows when it is new
 * or empty (one write, so it is never header-only by accident), else the
 * rows after a check of its header. */
static dps_status append_fd(int fd, off_t size, const char *shown, const csv_buf *head,
                            const csv_buf *rows)
{
    if (size > 0) {
        DPS_TRY(check_header(fd, shown, head->data));
        return rows->len ? write_all(fd, shown, rows->data, rows->len) : DPS_OK;
    }
    csv_buf first;
    csv_init(&first);
    csv_raw(&first, head->data, head->len);
    csv_end_row(&first);
    csv_raw(&first, rows->data ? rows->data : "", rows->len);
    dps_status rc = first.oom ? dps_fail(DPS_ERR_RUNTIME, "out of host memory formatting %s", shown)
                              : write_all(fd, shown, first.data, first.len);
    csv_free(&first);
    return rc;
}

dps_status csv_append_at(int dirfd, const char *name, const char *shown, const char *const *cols,
                         int ncols, const csv_buf *rows)
{
    if (rows->oom) return dps_fail(DPS_ERR_RUNTIME, "out of host memory formatting %s", shown);
    csv_buf head;
    csv_init(&head);
    csv_header(&head, cols, ncols);
    if (head.oom) {
        csv_free(&head);
        return dps_fail(DPS_ERR_RUNTIME, "out of host memory formatting %s", shown);
    }
    int fd = dps_openat_file(dirfd, name, O_RDWR | O_APPEND | O_CREAT, 0666);
    if (fd < 0) {
        csv_free(&head);
        return dps_fail(DPS_ERR_RUNTIME, "%s: cannot open for appending: %s", shown,
                        dps_open_strerror(errno));
    }
    dps_status rc = append_fd(fd, lseek(fd, 0, SEEK_END), shown, &head, rows);
    if (!rc && fsync(fd) != 0 && errno != EINVAL)
        rc = dps_fail(DPS_ERR_RUNTIME, "%s: fsync failed: %s", shown, strerror(errno));
    close(fd);
    csv_free(&head);
    return rc;
}

dps_status csv_append(const char *path, const char *const *cols, int ncols, const csv_buf *rows)
{
    const char *base;
    int dirfd = dps_open_parent(path, &base);
    if (dirfd < 0)
        return dps_fail(DPS_ERR_RUNTIME, "%s: cannot open for appending: %s", path, strerror(errno));
    dps_status rc = csv_append_at(dirfd, base, path, cols, ncols, rows);
    close(dirfd);
    return rc;
}

static void put_bytes(FILE *f, void *ctx)
{
    const csv_buf *b = ctx;
    fwrite(b->data, 1, b->len, f);
}

dps_status csv_replace(const char *path, const csv_buf *rows)
{
    if (rows->oom) return dps_fail(DPS_ERR_RUNTIME, "%s: cannot write: out of host memory", path);
    return dps_replace_file(path, put_bytes, (void *)rows);
}

dps_status csv_replace_at(int dirfd, const char *name, const char *shown, const csv_buf *rows)
{
    if (rows->oom) return dps_fail(DPS_ERR_RUNTIME, "%s: cannot write: out of host memory", shown);
    return dps_replace_file_at(dirfd, name, shown, put_bytes, (void *)rows);
}
