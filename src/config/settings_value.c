/* Reading a setting's value (see settings.h): one value or a comma list,
 * checked against the table's type, range and words, and on refusal the text
 * of what the setting accepts. */
#include <float.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "model/model.h"
#include "config/settings.h"
#include "core/util.h"


static int refuse(settings_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int refuse(settings_error *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->what, sizeof err->what, fmt, ap);
    va_end(ap);
    return -1;
}

static int read_int(const settings_entry *e, const char *s, settings_item *out, settings_error *err)
{
    int rc = dps_parse_i64(s, e->lo, e->hi, &out->i);
    if (rc == 0) return 0;
    return refuse(err, "expected an integer from %" PRId64 " to %" PRId64 "%s", e->lo, e->hi,
                  rc == -2 ? " (out of range)" : "");
}

static int read_number(const settings_entry *e, const char *s, settings_item *out,
                       settings_error *err)
{
    int ok = dps_parse_f64(s, &out->x) == 0 && out->x > (double)e->lo && out->x <= (double)e->hi;
    if (ok && out->x < FLT_MIN) /* held as a float: it would round to 0 or lose precision */
        return refuse(err, "too small (the smallest is %g)", (double)FLT_MIN);
    if (ok) return 0;
    return refuse(err, "expected a number above %" PRId64 " and at most %" PRId64, e->lo, e->hi);
}

static int read_bytes(const settings_entry *e, const char *s, settings_item *out, settings_error *err)
{
    uint64_t v = 0;
    char lo[32], hi[32], multiple[48] = "";
    int rc = dps_parse_bytes(s, &v);
    dps_fmt_bytes_suffix((uint64_t)e->hi, hi, sizeof hi);
    if (rc == -2 || (rc == 0 && v > (uint64_t)e->hi))
        return refuse(err, "too large (at most %s)", hi);
    if (rc == 0 && v >= (uint64_t)e->lo && (!e->multiple || v % (uint64_t)e->multiple == 0)) {
        out->i = (int64_t)v;
        return 0;
    }
    if (e->multiple) snprintf(multiple, sizeof multiple, ", a multiple of %" PRId64, e->multiple);
    return refuse(err, "expected a byte count from %s to %s%s (K, M, G or T suffix)",
                  dps_fmt_bytes_suffix((uint64_t)e->lo, lo, sizeof lo), hi, multiple);
}

static int read_word(const settings_entry *e, const char *s, settings_item *out, settings_error *err)
{
    char list[256];
    int w = dps_match_word(s, e->words, e->nwords, list, sizeof list);
    if (w >= 0) {
        out->i = w;
        return 0;
    }
    return refuse(err, "expected one of: %s", list);
}

int settings_is_model_file(const char *text)
{
    size_t n = strlen(text);
    return strchr(text, '/') != NULL || (n > 6 && strcmp(text + n - 6, ".model") == 0);
}

const char *settings_value_item(const settings_value *v, int i)
{
    return v->items + v->item_at[i];
}

static int read_preset(const char *s, settings_item *out, settings_error *err)
{
    const model_preset *p = model_find_preset(s);
    if (p) {
        out->i = p - model_presets;
        return 0;
    }
    if (settings_is_model_file(s)) {
        out->i = -1;
        return 0;
    }
    char list[256] = "";
    for (int i = 0; i < model_npresets; i++) {
        size_t used = strlen(list);
        snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", model_presets[i].name);
    }
    return refuse(err, "unknown preset (one of: %s), nor a model file's path (one with a '/' or "
                  "ending in .model: docs/model-file.md)", list);
}

static int read_text(const settings_entry *e, const char *s, settings_error *err)
{
    size_t n = strlen(s);
    if (e->type == SETTINGS_TEXT && n >= 1 && n <= (size_t)e->hi) return 0;
    if (e->type == SETTINGS_TEXT) return refuse(err, "expected 1 to %" PRId64 " characters", e->hi);
    if (!dps_utf8_valid(s)) return refuse(err, "a folder name must be valid UTF-8");
    for (const char *c = s; *c; c++)
        if ((unsigned char)*c < 0x20) return refuse(err, "a folder name has no control characters");
    if (n >= 1 && n <= (size_t)e->hi && !strchr(s, '/') && s[0] != '.') return 0;
    return refuse(err, "expected a folder name of 1 to %" PRId64 " characters without '/' that does "
                  "not start with '.'", e->hi);
}

/* FIRST:LAST into out[0], out[1]. */
static int read_step_range(const settings_entry *e, const char *s, settings_item *out,
                           settings_error *err)
{
    char first[32];
    const char *colon = strchr(s, ':');
    int ok = colon && (size_t)(colon - s) < sizeof first;
    if (ok) {
        memcpy(first, s, (size_t)(colon - s));
        first[colon - s] = '\0';
        ok = !dps_parse_i64(first, e->lo, e->hi, &out[0].i) &&
             !dps_parse_i64(colon + 1, e->lo, e->hi, &out[1].i);
    }
    if (!ok) return refuse(err, "expected FIRST:LAST step numbers, e.g. 5:9");
    if (out[1].i < out[0].i) return refuse(err, "the last step comes before the first");
    return 0;
}

/* RANK:STEP:WORD into out[0..2]. */
static int read_fault(const settings_entry *e, const char *s, settings_item *out, settings_error *err)
{
    char buf[64], unused[128], *c1 = NULL, *c2 = NULL;
    if (strlen(s) < sizeof buf) {
        dps_strlcpy(buf, s, sizeof buf);
        c1 = strchr(buf, ':');
        c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    }
    if (c2) {
        *c1 = *c2 = '\0';
        out[2].i = dps_match_word(c2 + 1, e->words, e->nwords, unused, sizeof unused);
        if (!dps_parse_i64(buf, 0, DPS_MAX_DEVICES - 1, &out[0].i) &&
            !dps_parse_i64(c1 + 1, e->lo, e->hi, &out[1].i) && out[2].i >= 0)
            return 0;
    }
    char forms[160] = "";
    for (int i = 0; i < e->nwords; i++) {
        size_t used = strlen(forms);
        snprintf(forms + used, sizeof forms - used, "%sRANK:STEP:%s", i ? " or " : "", e->words[i]);
    }
    return refuse(err, "expected %s, e.g. 1:3:%s", forms, e->words[0]);
}

/* PCT or PCT@RANK into out[0].x and out[1].i (-1 without a rank). */
static int read_slowdown(const settings_entry *e, const char *s, settings_item *out,
                         settings_error *err)
{
    char pct[64];
    const char *at = strchr(s, '@');
    size_t n = at ? (size_t)(at - s) : strlen(s);
    out[1].i = -1;
    int ok = n < sizeof pct;
    if (ok) {
        memcpy(pct, s, n);
        pct[n] = '\0';
        ok = !dps_parse_f64(pct, &out[0].x) && out[0].x > (double)e->lo &&
             out[0].x <= (double)e->hi && (!at || !dps_parse_i64(at + 1, 0, DPS_MAX_DEVICES - 1,
                                                                  &out[1].i));
    }
    if (ok) return 0;
    return refuse(err, "expected PCT (every device) or PCT@RANK (that rank's device alone), PCT "
                  "above %" PRId64 " and at most %" PRId64 ", RANK 0 to %d, e.g. 50@1", e->lo, e->hi,
                  DPS_MAX_DEVICES - 1);
}

static int read_one(const settings_entry *e, const char *s, settings_item *out, settings_error *err)
{
    switch (e->type) {
    case SETTINGS_FLAG: return 0;
    case SETTINGS_INT: return read_int(e, s, out, err);
    case SETTINGS_NUMBER: return read_number(e, s, out, err);
    case SETTINGS_BYTES: return read_bytes(e, s, out, err);
    case SETTINGS_WORD: return read_word(e, s, out, err);
    case SETTINGS_PRESET: return read_preset(s, out, err);
    case SETTINGS_TEXT: case SETTINGS_FOLDER_NAME: return read_text(e, s, err);
    case SETTINGS_STEP_RANGE: return read_step_range(e, s, out, err);
    case SETTINGS_FAULT: return read_fault(e, s, out, err);
    case SETTINGS_SLOWDOWN: return read_slowdown(e, s, out, err);
    }
    return refuse(err, "internal: setting type %d has no reader", (int)e->type);
}

/* Splits at commas in place, entries trimmed; empty entries are refused. */
static int split(char *text, int max, char **items, int *n, settings_error *err)
{
    *n = 0;
    for (char *t = text;;) {
        char *comma = strchr(t, ',');
        if (comma) *comma = '\0';
        char *item = dps_trim(t);
        if (!*item) return refuse(err, "empty entry in the list");
        if (*n >= max) return refuse(err, "too many values (at most %d)", max);
        items[(*n)++] = item;
        if (!comma) return 0;
        t = comma + 1;
    }
}

/* Whether two entries of a list are the same value (a list names each value once). */
static int same_value(const settings_entry *e, settings_item a, settings_item b, const char *ta,
                      const char *tb)
{
    if (e->type == SETTINGS_PRESET && a.i < 0) return b.i < 0 && strcmp(ta, tb) == 0;
    return e->type == SETTINGS_NUMBER ? a.x == b.x : a.i == b.i;
}

static int read_list(const settings_entry *e, int max, const char *text, settings_value *out,
                     settings_error *err)
{
    char buf[SETTINGS_LIST_CHARS], *items[SETTINGS_MAX_VALUES];
    if (strlen(text) >= sizeof buf)
        return refuse(err, "too long (at most %d characters)", SETTINGS_LIST_CHARS - 1);
    dps_strlcpy(buf, text, sizeof buf);
    if (split(buf, max < SETTINGS_MAX_VALUES ? max : SETTINGS_MAX_VALUES, items, &out->n, err))
        return -1;
    for (int i = 0; i < out->n; i++) {
        if (read_one(e, items[i], &out->v[i], err)) {
            dps_strlcpy(err->item, items[i], sizeof err->item);
            return -1;
        }
        for (int j = 0; !e->repeats && j < i; j++)
            if (same_value(e, out->v[j], out->v[i], items[j], items[i]))
                return refuse(err, "listed twice: '%s'", items[i]);
        out->item_at[i] = (int)(items[i] - buf);
    }
    memcpy(out->items, buf, sizeof buf);
    return 0;
}

int settings_value_parse(settings_id id, int max, const char *text, settings_value *out,
                         settings_error *err)
{
    const settings_entry *e = &settings_table[id];
    err->what[0] = err->item[0] = '\0';
    out->n = 1;
    out->text = text;
    out->item_at[0] = 0;
    dps_strlcpy(out->items, text, sizeof out->items);
    if (max > 1) return read_list(e, max, text, out, err);
    if (read_one(e, text, &out->v[0], err) == 0) return 0;
    dps_strlcpy(err->item, text, sizeof err->item);
    return -1;
}
