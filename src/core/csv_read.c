/* CSV reader for dpscale's own files (see csv_read.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/csv_read.h"

dps_status csv_read_file(const char *path, char **data, size_t *len)
{
    *data = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f && errno == ENOENT) return DPS_OK;
    if (!f) return dps_fail(DPS_ERR_RUNTIME, "%s: cannot read: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0, got;
    char *buf = malloc(cap + 1);
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n < cap) continue;
        char *more = realloc(buf, cap * 2 + 1);
        if (!more) break;
        buf = more;
        cap *= 2;
    }
    int bad = !buf || n == cap || ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return dps_fail(DPS_ERR_RUNTIME, "%s: cannot read it into memory", path);
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

int csv_field(const char *rec, size_t len, int index, char *out, size_t outlen)
{
    size_t i = 0;
    for (int f = 0; f < index; f++)
        if (!(copy_field(rec, len, &i, NULL, 0) & 2)) return 0;
    return copy_field(rec, len, &i, out, outlen) & 1;
}
