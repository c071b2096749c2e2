/* Key files (see keyfile.h): the whole file read, then one line at a time. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/keyfile.h"
#include "core/util.h"

/* A table being read: the keys, the object, where each key was given. */
typedef struct table_ctx {
    const keyfile_key *keys;
    int nkeys;
    char *obj;
    int *line_of;
} table_ctx;

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

/* One line, NUL-terminated in place, checked and without its comment:
 * its trimmed text, empty when blank. */
static dps_status record_of(const char *path, int n, char *line, char **rec)
{
    for (char *c = line; *c; c++)
        if ((unsigned char)*c < 0x20 && *c != '\t' && *c != '\r')
            return keyfile_fail(path, n, "not a text line (control characters)");
    char *hash = strchr(line, '#');
    if (hash) *hash = '\0';
    *rec = dps_trim(line);
    return DPS_OK;
}

/* A key file's record: key = value. */
typedef struct kv_ctx {
    keyfile_fn fn;
    void *ctx;
} kv_ctx;

static dps_status key_value(void *ctx, const char *path, int n, char *t)
{
    const kv_ctx *kv = ctx;
    char *eq = strchr(t, '=');
    if (!eq) return keyfile_fail(path, n, "expected key = value, got '%s'", t);
    *eq = '\0';
    char *key = dps_trim(t), *val = dps_trim(eq + 1);
    if (!*key) return keyfile_fail(path, n, "missing key before '='");
    if (!*val) return keyfile_fail(path, n, "empty value for '%s'", key);
    return kv->fn(kv->ctx, path, n, key, val);
}

dps_status keyfile_read_records(const char *path, const char *what, keyfile_record_fn fn,
                                void *ctx)
{
    char *text = NULL;
    size_t len = 0;
    DPS_TRY(slurp(path, what, &text, &len));
    dps_status rc = DPS_OK;
    size_t pos = len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0; /* a UTF-8 BOM */
    for (int n = 1; !rc && pos < len; n++) {
        char *line = text + pos, *nl = memchr(line, '\n', len - pos), *rec = NULL;
        size_t k = nl ? (size_t)(nl - line) : len - pos;
        if (memchr(line, '\0', k)) rc = keyfile_fail(path, n, "not a text file (NUL byte)");
        line[k] = '\0';
        if (!rc) rc = record_of(path, n, line, &rec);
        if (!rc && *rec) rc = fn(ctx, path, n, rec);
        pos += k + 1;
    }
    free(text);
    return rc;
}

dps_status keyfile_read(const char *path, const char *what, keyfile_fn fn, void *ctx)
{
    kv_ctx kv = {fn, ctx};
    return keyfile_read_records(path, what, key_value, &kv);
}

static dps_status unknown_key(const table_ctx *p, const char *path, int line, const char *key)
{
    char known[512] = "";
    for (int i = 0; i < p->nkeys; i++) {
        size_t used = strlen(known);
        snprintf(known + used, sizeof known - used, "%s%s", i ? ", " : "", p->keys[i].key);
    }
    return keyfile_fail(path, line, "unknown key '%s' (expected %s)", key, known);
}

static dps_status word_value(const keyfile_key *s, char *dst, const char *path, int line,
                             const char *val)
{
    char expected[160];
    int i = dps_match_word(val, s->words, s->nwords, expected, sizeof expected);
    if (i < 0) return keyfile_fail(path, line, "%s = %s: expected one of %s", s->key, val, expected);
    if (s->type == KEY_CHOICE) *(int *)dst = atoi(s->words[i]);
    else *(int *)dst = i;
    return DPS_OK;
}

static dps_status number_value(const keyfile_key *s, char *dst, const char *path, int line,
                               const char *val)
{
    double x;
    int ok = dps_parse_f64(val, &x) == 0 && (s->zero_ok ? x >= s->lo : x > s->lo) && x <= s->hi;
    if (s->type == KEY_INT) {
        int64_t i;
        ok = dps_parse_i64(val, (int64_t)s->lo, (int64_t)s->hi, &i) == 0;
        if (ok) *(int *)dst = (int)i;
        if (!ok)
            return keyfile_fail(path, line, "%s = %s: expected an integer from %.0f to %.0f (%s)",
                                s->key, val, s->lo, s->hi, s->unit);
        return DPS_OK;
    }
    if (!ok)
        return keyfile_fail(path, line, "%s = %s: expected a number %s %g, at most %g (%s)", s->key,
                            val, s->zero_ok ? "from" : "above", s->lo, s->hi, s->unit);
    *(double *)dst = x;
    return DPS_OK;
}

static dps_status set_key(void *ctx, const char *path, int line, const char *key, const char *val)
{
    table_ctx *p = ctx;
    int i = 0;
    while (i < p->nkeys && strcmp(p->keys[i].key, key) != 0) i++;
    if (i == p->nkeys) return unknown_key(p, path, line, key);
    if (p->line_of[i])
        return keyfile_fail(path, line, "'%s' given again (first at line %d)", key, p->line_of[i]);
    p->line_of[i] = line;
    const keyfile_key *s = &p->keys[i];
    char *dst = p->obj + s->off;
    if (s->type == KEY_WORD || s->type == KEY_CHOICE) return word_value(s, dst, path, line, val);
    if (s->type == KEY_CUSTOM) return s->parse(p->obj, path, line, val);
    if (s->type != KEY_TEXT) return number_value(s, dst, path, line, val);
    if (strlen(val) > (size_t)s->hi || !dps_utf8_valid(val))
        return keyfile_fail(path, line, "%s: expected text of at most %.0f characters", key, s->hi);
    dps_strlcpy(dst, val, (size_t)s->hi + 1);
    return DPS_OK;
}

dps_status keyfile_read_keys(const char *path, const char *what, const keyfile_key *keys, int n,
                             void *obj, int *line_of)
{
    memset(line_of, 0, (size_t)n * sizeof *line_of);
    table_ctx p = {keys, n, obj, line_of};
    return keyfile_read(path, what, set_key, &p);
}
