/* Key files (see keyfile.h): the whole file read, then one line at a time. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "run/keyfile.h"
#include "core/util.h"

#define KEYFILE_MAX (1 << 20)

dps_status keyfile_fail(const char *path, int line, const char *fmt, ...)
{
    char what[DPS_ERRMSG_MAX - 128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return dps_fail(DPS_ERR_USAGE, "%s:%d: %s", path, line, what);
}

/* The whole file (at most 1 MiB), NUL-terminated; *text only on success. */
static dps_status slurp(const char *path, const char *what, char **text, size_t *len)
{
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return dps_fail(DPS_ERR_USAGE, "%s: not a regular file (a %s is a text file)", path, what);
    FILE *f = fopen(path, "rb");
    if (!f) return dps_fail(DPS_ERR_USAGE, "%s: cannot read the %s: %s", path, what, strerror(errno));
    char *buf = malloc(KEYFILE_MAX + 2);
    size_t n = buf ? fread(buf, 1, KEYFILE_MAX + 1, f) : 0;
    int bad = ferror(f);
    fclose(f);
    if (!buf) return dps_fail(DPS_ERR_RUNTIME, "out of host memory reading %s", path);
    if (bad || n > KEYFILE_MAX) {
        free(buf);
        return dps_fail(DPS_ERR_USAGE, "%s: %s", path, bad ? "read error" : "larger than 1 MiB");
    }
    buf[n] = '\0';
    *text = buf;
    *len = n;
    return DPS_OK;
}

/* One line, NUL-terminated in place: blank, comment or key = value. */
static dps_status one_line(const char *path, int n, char *line, keyfile_fn fn, void *ctx)
{
    for (char *c = line; *c; c++)
        if ((unsigned char)*c < 0x20 && *c != '\t' && *c != '\r')
            return keyfile_fail(path, n, "not a text line (control characters)");
    char *hash = strchr(line, '#');
    if (hash) *hash = '\0';
    char *t = dps_trim(line);
    if (!*t) return DPS_OK;
    char *eq = strchr(t, '=');
    if (!eq) return keyfile_fail(path, n, "expected key = value, got '%s'", t);
    *eq = '\0';
    char *key = dps_trim(t), *val = dps_trim(eq + 1);
    if (!*key) return keyfile_fail(path, n, "missing key before '='");
    if (!*val) return keyfile_fail(path, n, "empty value for '%s'", key);
    return fn(ctx, path, n, key, val);
}

dps_status keyfile_read(const char *path, const char *what, keyfile_fn fn, void *ctx)
{
    char *text = NULL;
    size_t len = 0;
    DPS_TRY(slurp(path, what, &text, &len));
    dps_status rc = DPS_OK;
    size_t pos = len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0; /* a UTF-8 BOM */
    for (int n = 1; !rc && pos < len; n++) {
        char *line = text + pos, *nl = memchr(line, '\n', len - pos);
        size_t k = nl ? (size_t)(nl - line) : len - pos;
        if (memchr(line, '\0', k)) rc = keyfile_fail(path, n, "not a text file (NUL byte)");
        line[k] = '\0';
        if (!rc) rc = one_line(path, n, line, fn, ctx);
        pos += k + 1;
    }
    free(text);
    return rc;
}
