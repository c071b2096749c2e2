/* meta.json's "plan" read back (see results_plan.h): a JSON array of
 * strings as dps_json_str writes them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/csv_read.h"
#include "config/config.h"
#include "core/util.h"
#include "results/results_plan.h"

/* One \uXXXX's code point at s (4 hex digits); -1 when not hex. */
static long hex4(const char *s)
{
    long v = 0;
    for (int i = 0; i < 4; i++) {
        int c = (unsigned char)s[i], d = c >= '0' && c <= '9' ? c - '0'
                                       : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                       : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* The code point u as UTF-8 at out; returns its length. */
static int put_utf8(long u, char *out)
{
    if (u < 0x80) { out[0] = (char)u; return 1; }
    if (u < 0x800) { out[0] = (char)(0xc0 | u >> 6); out[1] = (char)(0x80 | (u & 0x3f)); return 2; }
    out[0] = (char)(0xe0 | u >> 12);
    out[1] = (char)(0x80 | ((u >> 6) & 0x3f));
    out[2] = (char)(0x80 | (u & 0x3f));
    return 3;
}

/* The JSON string at *s (past its opening quote) decoded in place at *out;
 * *s ends past its closing quote. 0 when it is damaged. */
static int decode_string(char **s, char **out)
{
    char *p = *s, *o = *out;
    while (*p && *p != '"') {
        if (*p != '\\') { *o++ = *p++; continue; }
        char e = p[1];
        const char *plain = strchr("\"\\/bfnrt", e);
        if (e && plain) {
            *o++ = "\"\\/\b\f\n\r\t"[plain - "\"\\/bfnrt"];
            p += 2;
        } else if (e == 'u' && hex4(p + 2) >= 0) {
            o += put_utf8(hex4(p + 2), o); /* dps_json_str writes no surrogate pairs */
            p += 6;
        } else {
            return 0;
        }
    }
    if (*p != '"') return 0;
    *o++ = '\0';
    *s = p + 1;
    *out = o;
    return 1;
}

/* The array of strings after "key": in text, decoded in place; -1 when absent or damaged. */
static int parse_array(char *text, const char *key, char **argv, int max)
{
    char pat[32];
    snprintf(pat, sizeof pat, "\"%s\": [", key);
    char *p = strstr(text, pat), *out;
    if (!p) return -1;
    p += strlen(pat);
    out = p;
    int n = 0;
    for (;;) {
        while (*p == ' ' || *p == ',' || *p == '\n') p++;
        if (*p == ']') return n;
        if (*p != '"' || n == max) return -1;
        argv[n] = out;
        p++;
        if (!decode_string(&p, &out)) return -1;
        n++;
    }
}

/* Seconds since 1970 of the "key": "YYYY-MM-DDTHH:MM:SSZ" in text (dps_utc_iso8601's
 * form); -1 when absent or in another form. */
static double iso8601_at(const char *text, const char *key)
{
    char pat[32];
    snprintf(pat, sizeof pat, "\"%s\": \"", key);
    const char *p = strstr(text, pat);
    return p ? dps_parse_utc_iso8601(p + strlen(pat)) : -1;
}

dps_status results_plan_read(const char *dir, results_plan *p)
{
    char path[DPS_PATH_MAX + 32];
    memset(p, 0, sizeof p[0]);
    snprintf(path, sizeof path, "%s/meta.json", dir);
    size_t len = 0;
    dps_status rc = csv_read_file(path, &p->text, &len);
    if (rc || !p->text)
        return dps_fail(DPS_ERR_USAGE, "--resume: %s%s; give the suite file or the --mode, "
                        "--gpus and --model lists the folder was planned with",
                        rc ? dps_errmsg() : path, rc ? "" : ": missing");
    double start = iso8601_at(p->text, "start_time"), end = iso8601_at(p->text, "end_time");
    p->duration_s = start >= 0 && end >= start ? end - start : 0;
    size_t max = len / 4 + 2; /* each string takes at least "", */
    p->argv = calloc(max, sizeof *p->argv);
    int n = p->argv ? parse_array(p->text, "plan", p->argv, (int)max - 1) : -1;
    if (n < 0 && p->argv) n = parse_array(p->text, "command_line", p->argv, (int)max - 1);
    if (n < 2) {
        results_plan_free(p);
        return dps_fail(DPS_ERR_USAGE, "--resume: %s holds no readable \"plan\" or "
                        "\"command_line\"; give the suite file or the --mode, --gpus and "
                        "--model lists the folder was planned with", path);
    }
    p->argc = n;
    return DPS_OK;
}

void results_plan_free(results_plan *p)
{
    free(p->argv);
    free(p->text);
    memset(p, 0, sizeof p[0]);
}
