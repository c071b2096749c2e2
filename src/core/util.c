/* Helpers shared by the harness (see util.h). */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/util.h"

int dps_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    if (!s || !*s || isspace((unsigned char)*s)) return -1;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end) return -1;
    if (errno == ERANGE || v < lo || v > hi) return -2;
    *out = v;
    return 0;
}

int dps_parse_f64(const char *s, double *out)
{
    if (!s || !*s || isspace((unsigned char)*s)) return -1;
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno == ERANGE || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

int dps_parse_bytes(const char *s, uint64_t *out)
{
    if (!s || !isdigit((unsigned char)*s)) return -1;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno == ERANGE) return -2;
    int shift = 0;
    switch (toupper((unsigned char)*end)) {
    case '\0': break;
    case 'K': shift = 10; break;
    case 'M': shift = 20; break;
    case 'G': shift = 30; break;
    case 'T': shift = 40; break;
    default: return -1;
    }
    if (shift) {
        end++;
        if (*end == 'i') end++;
        if (toupper((unsigned char)*end) == 'B') end++;
    } else if (toupper((unsigned char)*end) == 'B') {
        end++;
    }
    if (*end) return -1;
    if (shift && v > (UINT64_MAX >> shift)) return -2;
    *out = (uint64_t)v << shift;
    return 0;
}

const char *dps_fmt_bytes(uint64_t bytes, char *buf, size_t len)
{
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    if (u == 0) snprintf(buf, len, "%" PRIu64 " B", bytes);
    else snprintf(buf, len, "%.2f %s", v, units[u]);
    return buf;
}

const char *dps_fmt_bytes_suffix(uint64_t bytes, char *buf, size_t len)
{
    static const char suffix[] = "KMGT";
    int s = 0;
    while (s < 4 && bytes && bytes % 1024 == 0) {
        bytes /= 1024;
        s++;
    }
    if (s) snprintf(buf, len, "%" PRIu64 "%c", bytes, suffix[s - 1]);
    else snprintf(buf, len, "%" PRIu64, bytes);
    return buf;
}

static double clock_ms(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

double dps_now_ms(void) { return clock_ms(CLOCK_MONOTONIC); }

double dps_wall_ms(void) { return clock_ms(CLOCK_REALTIME); }

int64_t dps_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void dps_utc_iso8601(char *buf, size_t len)
{
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

double dps_parse_utc_iso8601(const char *text)
{
    struct tm tm = {0};
    const char *end = strptime(text, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return end ? (double)timegm(&tm) : -1.0;
}

dps_status dps_mkdirs(const char *path, const char *option)
{
    char tmp[4096];
    if (strlen(path) >= sizeof tmp)
        return dps_fail(DPS_ERR_USAGE, "%s %s: path too long", option, path);
    dps_strlcpy(tmp, path, sizeof tmp);
    for (char *p = tmp + 1; ; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            struct stat st;
            if (stat(tmp, &st) != 0) {
                if (mkdir(tmp, 0777) != 0 && errno != EEXIST)
                    return dps_fail(DPS_ERR_USAGE, "%s %s: cannot create folder %s: %s",
                                    option, path, tmp, strerror(errno));
            } else if (!S_ISDIR(st.st_mode)) {
                return dps_fail(DPS_ERR_USAGE, "%s %s: %s exists and is not a folder",
                                option, path, tmp);
            }
            *p = c;
            if (!c) break;
        }
    }
    if (access(path, W_OK | X_OK) != 0)
        return dps_fail(DPS_ERR_USAGE, "%s %s: folder is not writable: %s",
                        option, path, strerror(errno));
    return DPS_OK;
}

int dps_file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

char *dps_trim(char *s)
{
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = '\0';
    return s;
}

int dps_utf8_len(const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    int n = u[0] < 0x80 ? 1 : u[0] >= 0xC2 && u[0] <= 0xDF ? 2 : u[0] >= 0xE0 && u[0] <= 0xEF ? 3
          : u[0] >= 0xF0 && u[0] <= 0xF4 ? 4 : 0;
    for (int i = 1; i < n; i++)
        if ((u[i] & 0xC0) != 0x80) return 0;
    if (n == 3 && ((u[0] == 0xE0 && u[1] < 0xA0) || (u[0] == 0xED && u[1] >= 0xA0))) return 0;
    if (n == 4 && ((u[0] == 0xF0 && u[1] < 0x90) || (u[0] == 0xF4 && u[1] >= 0x90))) return 0;
    return n;
}

int dps_utf8_valid(const char *s)
{
    for (int n; *s; s += n)
        if (!(n = dps_utf8_len(s))) return 0;
    return 1;
}

void dps_strlcpy(char *dst, const char *src, size_t len)
{
    if (!len) return;
    size_t n = strlen(src);
    if (n >= len) n = len - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

int dps_match_word(const char *s, const char *const *words, int n, char *expected, size_t len)
{
    expected[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (strcmp(s, words[i]) == 0) return i;
        size_t used = strlen(expected);
        snprintf(expected + used, len - used, "%s%s", i ? ", " : "", words[i]);
    }
    return -1;
}

void dps_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (int n; *s; s += n) {
        unsigned char ch = (unsigned char)*s;
        n = dps_utf8_len(s);
        if (!n) {
            fputs("\\ufffd", f);
            n = 1;
        } else if (ch == '"' || ch == '\\') {
            fprintf(f, "\\%c", ch);
        } else if (ch == '\n') {
            fputs("\\n", f);
        } else if (ch < 0x20) {
            fprintf(f, "\\u%04x", ch);
        } else {
            fwrite(s, 1, (size_t)n, f);
        }
    }
    fputc('"', f);
}

int dps_openat_file(int dirfd, const char *name, int flags, unsigned mode)
{
    /* O_NONBLOCK: a FIFO opens at once (or fails) rather than wait for a peer */
    int fd = openat(dirfd, name, flags | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, (mode_t)mode);
    if (fd < 0) {
        if (errno == ENXIO) errno = EINVAL; /* a FIFO that nobody reads */
        return -1;
    }
    struct stat st;
    int err = fstat(fd, &st) != 0 ? errno : S_ISREG(st.st_mode) ? 0 : EINVAL;
    if (err) {
        close(fd);
        errno = err;
        return -1;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
}

const char *dps_open_strerror(int err)
{
    if (err == ELOOP)
        return "it is a symbolic link, which dpscale does not follow inside a results folder; "
               "remove the link";
    if (err == EINVAL) return "it is not a regular file; remove it";
    return strerror(err);
}

dps_status dps_read_file_at(int dirfd, const char *name, const char *shown, char **data,
                            size_t *len)
{
    *data = NULL;
    *len = 0;
    int fd = dps_openat_file(dirfd, name, O_RDONLY, 0);
    if (fd < 0 && errno == ENOENT) return DPS_OK;
    if (fd < 0) return dps_fail(DPS_ERR_RUNTIME, "%s: cannot read: %s", shown, dps_open_strerror(errno));
    struct stat st;
    size_t cap = fstat(fd, &st) == 0 ? (size_t)st.st_size + 1 : 4096, n = 0;
    char *buf = malloc(cap + 1);
    ssize_t got = 0;
    while (buf) {
        if (n == cap) { /* the file grew since fstat */
            char *more = realloc(buf, cap * 2 + 1);
            if (!more) break;
            buf = more;
            cap *= 2;
        }
        got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        n += (size_t)got;
    }
    close(fd);
    if (!buf || got < 0 || n == cap) {
        free(buf);
        return dps_fail(DPS_ERR_RUNTIME, "%s: cannot read it into memory", shown);
    }
    buf[n] = '\0';
    *data = buf;
    *len = n;
    return DPS_OK;
}

/* put's output into the new file `tmp` of dirfd, flushed and on disk. */
static int write_tmp(int dirfd, const char *tmp, void (*put)(FILE *f, void *ctx), void *ctx)
{
    unlinkat(dirfd, tmp, 0); /* one left by a process of the same pid */
    int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        int err = errno;
        if (fd >= 0) close(fd);
        errno = err;
        return -1;
    }
    errno = 0;
    put(f, ctx);
    int bad = ferror(f) || fflush(f) != 0 || fsync(fileno(f)) != 0;
    int err = errno ? errno : EIO;
    if (fclose(f) != 0 && !bad) {
        bad = 1;
        err = errno;
    }
    errno = err;
    return bad ? -1 : 0;
}

dps_status dps_replace_file_at(int dirfd, const char *name, const char *shown,
                               void (*put)(FILE *f, void *ctx), void *ctx)
{
    char tmp[512];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%d", name, (int)getpid()) >= (int)sizeof tmp)
        return dps_fail(DPS_ERR_RUNTIME, "%s: name too long to write beside", shown);
    if (write_tmp(dirfd, tmp, put, ctx) == 0 && renameat(dirfd, tmp, dirfd, name) == 0)
        return DPS_OK;
    int err = errno ? errno : EIO;
    unlinkat(dirfd, tmp, 0);
    return dps_fail(DPS_ERR_RUNTIME, "%s: cannot write: %s", shown, strerror(err));
}

int dps_open_parent(const char *path, const char **base)
{
    char dir[4096];
    *base = dps_path_base(path);
    size_t n = (size_t)(*base - path);
    if (n >= sizeof dir) {
        errno = ENAMETOOLONG;
        return -1;
    }
    if (n) dps_strlcpy(dir, path, n + 1);
    else dps_strlcpy(dir, ".", sizeof dir);
    return open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

dps_status dps_replace_file(const char *path, void (*put)(FILE *f, void *ctx), void *ctx)
{
    const char *base;
    int dirfd = dps_open_parent(path, &base);
    if (dirfd < 0) return dps_fail(DPS_ERR_RUNTIME, "%s: cannot write: %s", path, strerror(errno));
    dps_status rc = dps_replace_file_at(dirfd, base, path, put, ctx);
    close(dirfd);
    return rc;
}

const char *dps_path_base(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash && slash[1] ? slash + 1 : path;
}

int dps_test_plant(const char *name)
{
    const char *v = getenv("DPSCALE_TEST_PLANT");
    return v && strcmp(v, name) == 0;
}
