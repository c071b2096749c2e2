/* CSV reader for dpscale's own files (see csv_read.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/csv_read.h"

/* Refuses, by its stat st, what is no regular file of at most
 * CSV_READ_MAX_BYTES (a FIFO would block the reader, /dev/zero never end). */
static dps_status refuse_unreadable(const char *path, const struct stat *st)
{
    if (S_ISDIR(st->st_mode))
        return dps_fail(DPS_ERR_USAGE, "%s: a folder, not a file; restore the file dpscale wrote, "
                        "or run the command that writes it again", path);
    if (!S_ISREG(st->st_mode))
        return dps_fail(DPS_ERR_USAGE, "%s: %s, not a regular file (dpscale writes files); restore "
                        "the file dpscale wrote, or run the command that writes it again", path,
                        S_ISFIFO(st->st_mode) ? "a FIFO" : S_ISSOCK(st->st_mode) ? "a socket"
                                                                     : "a device");
    if (st->st_size > CSV_READ_MAX_BYTES)
        return dps_fail(DPS_ERR_USAGE, "%s: %lld bytes, more than the %lld the readers take "
                        "(docs/results.md); dpscale writes less than that: restore the file as "
                        "it wrote it, or record the configurations in folders of their own "
                        "(--name)", path, (long long)st->st_size, (long long)CSV_READ_MAX_BYTES);
    return DPS_OK;
}

/* path opened for reading once it is known to be a regular file that is not
 * too large (refuse_unreadable), by its name and again by what was opened;
 * NULL with *rc DPS_OK when there is no such file. */
static FILE *open_regular(const char *path, dps_status *rc)
{
    struct stat st;
    *rc = DPS_OK;
    if (stat(path, &st) != 0) {
        if (errno != ENOENT)
            *rc = dps_fail(DPS_ERR_RUNTIME, "%s: cannot read: %s", path, strerror(errno));
        return NULL;
    }
    if ((*rc = refuse_unreadable(path, &st))) return NULL;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        *rc = dps_fail(DPS_ERR_RUNTIME, "%s: cannot read: %s", path, strerror(errno));
        return NULL;
    }
    if (fstat(fd, &st) != 0 || (*rc = refuse_unreadable(path, &st))) {
        if (!*rc) *rc = dps_fail(DPS_ERR_RUNTIME, "%s: cannot read: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        *rc = dps_fail(DPS_ERR_RUNTIME, "%s: cannot read: %s", path, strerror(errno));
        close(fd);
    }
    return f;
}

dps_status csv_read_file(const char *path, char **data, size_t *len)
{
    *data = NULL;
    *len = 0;
    dps_status rc;
    FILE *f = open_regular(path, &rc);
    if (!f) return rc;
    size_t cap = 1 << 16, n = 0, got;
    char *buf = malloc(cap + 1);
    while (buf && (long long)n <= CSV_READ_MAX_BYTES && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n < cap) continue;
        char *more = realloc(buf, cap * 2 + 1);
        if (!more) break;
        buf = more;
        cap *= 2;
    }
    int bad = !buf || n == cap || ferror(f), grew = (long long)n > CSV_READ_MAX_BYTES;
    fclose(f);
    if (bad || grew) {
        free(buf);
        return grew ? dps_fail(DPS_ERR_USAGE, "%s: grew past %lld bytes while it was read; read "
                               "it once nothing writes it", path, (long long)CSV_READ_MAX_BYTES)
                    : dps_fail(DPS_ERR_RUNTIME, "%s: cannot read it into memory", path);
    }
    buf[n] = '\0';
    *data = buf;
    *len = n;
    return DPS_OK;
}

size_t csv_record_len(const char *p, size_t n)
{
    int quoted = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '"') quoted = !quoted;
        else if (p[i] == '\n' && !quoted) return i + 1;
    }
    return 0;
}

/* Copies one field starting at rec[*i] into out (when out is not NULL);
 * *i ends past its comma. */
static int copy_field(const char *rec, size_t len, size_t *i, char *out, size_t outlen)
{
    size_t k = 0;
    int quoted = 0, fits = 1;
    for (; *i < len; (*i)++) {
        char ch = rec[*i];
        if (ch == '"' && quoted && *i + 1 < len && rec[*i + 1] == '"') (*i)++;
        else if (ch == '"') { quoted = !quoted; continue; }
        else if (!quoted && (ch == ',' || ch == '\n' || ch == '\r')) break;
        if (out && k + 1 < outlen) out[k++] = rec[*i];
        else if (out) fits = 0;
    }
    if (out && outlen) out[k] = '\0';
    int more = *i < len && rec[*i] == ',';
    if (more) (*i)++;
    return fits | (more << 1);
}

int csv_field_count(const char *rec, size_t len)
{
    size_t i = 0;
    int n = 1;
    while (copy_field(rec, len, &i, NULL, 0) & 2) n++;
    return n;
}

int csv_field(const char *rec, size_t len, int index, char *out, size_t outlen)
{
    size_t i = 0;
    for (int f = 0; f < index; f++)
        if (!(copy_field(rec, len, &i, NULL, 0) & 2)) return 0;
    return copy_field(rec, len, &i, out, outlen) & 1;
}
