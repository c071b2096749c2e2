/* The configurations a results folder holds, and --resume's clean-up of it
 * (see results_ids.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/csv.h"
#include "core/csv_read.h"
#include "core/util.h"
#include "results/results_ids.h"

/* Appends a copy of id; the array doubles when full (its capacity is the
 * power of two at or above n), so n ids are appended in O(n). */
static dps_status ids_add(results_ids *s, const char *id)
{
    int full = (s->n & (s->n - 1)) == 0; /* 0, 1, 2, 4, ...: as many as it holds */
    char **more = full ? realloc(s->ids, (size_t)(s->n ? 2 * s->n : 1) * sizeof *more) : s->ids;
    char *copy = strdup(id);
    if (more) s->ids = more;
    if (!more || !copy) {
        free(copy);
        return dps_fail(DPS_ERR_RUNTIME, "out of host memory reading the results folder");
    }
    s->ids[s->n++] = copy;
    return DPS_OK;
}

/* FNV-1a: where an id's search begins among the hash index's slots. */
static size_t id_hash(const char *id)
{
    uint64_t h = 14695981039346656037ULL;
    for (; *id; id++) h = (h ^ (unsigned char)*id) * 1099511628211ULL;
    return (size_t)h;
}

/* The slot holding id, or the empty one where it would go (open addressing,
 * linear probing; the index is never more than half full). */
static const char **id_slot(results_ids *s, const char *id)
{
    size_t mask = (size_t)s->nslots - 1, i = id_hash(id) & mask;
    for (s->probes++; s->slots[i] && strcmp(s->slots[i], id) != 0; s->probes++)
        i = (i + 1) & mask;
    return &s->slots[i];
}

/* Indexes the ids appended since the last call, the index grown to twice
 * the ids or more; 0 when out of memory (the caller scans them instead). */
static int ids_index(results_ids *s)
{
    if (!s->slots || 2 * s->n > s->nslots) {
        int nslots = s->nslots ? s->nslots : 64;
        while (2 * s->n > nslots) nslots *= 2;
        const char **slots = calloc((size_t)nslots, sizeof *slots);
        if (!slots) return 0;
        free(s->slots);
        s->slots = slots;
        s->nslots = nslots;
        s->indexed = 0;
    }
    for (; s->indexed < s->n; s->indexed++) *id_slot(s, s->ids[s->indexed]) = s->ids[s->indexed];
    return 1;
}

/* Whether id is among s's ids while they are appended in file order (not
 * yet sorted): a hash lookup, so a runs.csv of n rows is read in O(n). */
static int ids_has_unsorted(results_ids *s, const char *id)
{
    if (ids_index(s)) return *id_slot(s, id) != NULL;
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->ids[i], id) == 0) return 1;
    return 0;
}

static int by_text(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int results_ids_has(const results_ids *s, const char *id)
{
    return s->n && bsearch(&id, s->ids, (size_t)s->n, sizeof *s->ids, by_text) != NULL;
}

void results_ids_free(results_ids *s)
{
    for (int i = 0; i < s->n; i++) free(s->ids[i]);
    free(s->ids);
    free(s->slots); /* ids_has_unsorted's index */
    memset(s, 0, sizeof *s);
}

/* One complete record of a file: its bytes and its first two fields. */
typedef struct record {
    const char *p;
    size_t len;
    char id[256], status[32];
} record;

/* The next complete record from *pos of data (len bytes); 0 at the end or
 * at a record cut short by a crash. */
static int next_record(const char *data, size_t len, size_t *pos, record *rec)
{
    rec->p = data + *pos;
    rec->len = csv_record_len(rec->p, len - *pos);
    if (!rec->len) return 0;
    *pos += rec->len;
    if (!csv_field(rec->p, rec->len, 0, rec->id, sizeof rec->id)) rec->id[0] = '\0';
    if (!csv_field(rec->p, rec->len, 1, rec->status, sizeof rec->status)) rec->status[0] = '\0';
    return 1;
}

static int finished(const char *status)
{
    return !strcmp(status, "ok") || !strcmp(status, "oom") || !strcmp(status, "skipped");
}

/* runs.csv's rows to keep into out (resume: those that finished, once
each, unless their rows repeat in a detail file: in twice); done: their ids,
rerun: the others'. */
static void sort_runs(const char *data, size_t len, int resume, const results_ids *twice,
                      csv_buf *out, results_ids *done, results_ids *rerun, dps_status *rc)
{
    size_t pos = 0;
    record rec;
    for (int row = 0; !*rc && next_record(data, len, &pos, &rec); row++) {
        int keep = !row || !resume || (finished(rec.status) && !ids_has_unsorted(done, rec.id) &&
                                       !results_ids_has(twice, rec.id));
        if (keep) csv_raw(out, rec.p, rec.len);
        if (keep && row) *rc = ids_add(done, rec.id);
        else if (!keep && !ids_has_unsorted(rerun, rec.id)) *rc = ids_add(rerun, rec.id);
    }
}

/* Keeps in one detail file the complete rows of configurations in done. */
static dps_status filter_file(const results_dir *r, const char *name, const results_ids *done)
{
    char *data, path[DPS_PATH_MAX + 32];
    size_t len, pos = 0;
    snprintf(path, sizeof path, "%s/%s", r->dir, name);
    DPS_TRY(dps_read_file_at(r->dir_fd, name, path, &data, &len));
    if (!data) return DPS_OK;
    csv_buf out;
    csv_init(&out);
    record rec;
    for (int row = 0; next_record(data, len, &pos, &rec); row++)
        if (!row || results_ids_has(done, rec.id)) csv_raw(&out, rec.p, rec.len);
    dps_status rc = out.len == len ? DPS_OK : csv_replace_at(r->dir_fd, name, path, &out);
    csv_free(&out);
    free(data);
    return rc;
}

/* A record's key, its first nkey fields joined by a unit separator, into key. */
static void key_of(const record *rec, int nkey, char *key, size_t len)
{
    size_t n = 0;
    key[0] = '\0';
    for (int i = 0; i < nkey && n + 1 < len; i++) {
        if (i) key[n++] = '\x1f';
        if (!csv_field(rec->p, rec->len, i, key + n, len - n)) key[n] = '\0';
        n += strlen(key + n);
    }
}

/* Adds to *twice each configuration of which the file holds two rows with
 * one key (written twice by an earlier dpscale): --resume runs it again. */
static dps_status find_repeats(const results_dir *r, const results_file *f, results_ids *twice)
{
    char *data, path[DPS_PATH_MAX + 32], key[1024];
    size_t len, pos = 0;
    snprintf(path, sizeof path, "%s/%s", r->dir, f->name);
    DPS_TRY(dps_read_file_at(r->dir_fd, f->name, path, &data, &len));
    results_ids keys = {0};
    record rec;
    dps_status rc = DPS_OK;
    for (int row = 0; !rc && data && next_record(data, len, &pos, &rec); row++) {
        key_of(&rec, f->nkey, key, sizeof key);
        if (row) rc = ids_add(&keys, key);
    }
    if (keys.n) qsort(keys.ids, (size_t)keys.n, sizeof *keys.ids, by_text);
    for (int i = 1; !rc && i < keys.n; i++) {
        char id[256];
        dps_strlcpy(id, keys.ids[i], sizeof id);
        id[strcspn(id, "\x1f")] = '\0';
        if (strcmp(keys.ids[i - 1], keys.ids[i]) != 0 || ids_has_unsorted(twice, id)) continue;
        dps_log("--resume: %s holds rows of %s twice (written twice by an earlier dpscale): it is "
                "taken out of the folder, to run again", path, id);
        rc = ids_add(twice, id);
    }
    results_ids_free(&keys);
    free(data);
    return rc;
}

static int count_not_done(const results_ids *rerun, const results_ids *done)
{
    int n = 0;
    for (int i = 0; i < rerun->n; i++) n += !results_ids_has(done, rerun->ids[i]);
    return n;
}

/* runs.csv of the folder at dirfd (dir: its path) read and sorted (see
 * sort_runs); *data holds the file. */
static dps_status read_runs(int dirfd, const char *dir, int resume, const results_ids *twice,
                            char **data, size_t *len, csv_buf *out, results_ids *done,
                            results_ids *again)
{
    int nfiles;
    const results_file *files = results_files(&nfiles);
    const char *name = files[nfiles - 1].name; /* runs.csv */
    char path[DPS_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    memset(done, 0, sizeof *done);
    DPS_TRY(dps_read_file_at(dirfd, name, path, data, len));
    dps_status rc = DPS_OK;
    if (*data) sort_runs(*data, *len, resume, twice, out, done, again, &rc);
    if (done->n) qsort(done->ids, (size_t)done->n, sizeof *done->ids, by_text);
    return rc;
}

dps_status results_tidy(const results_dir *r, int resume, results_ids *done, int *rerun)
{
    *rerun = 0;
    int nfiles;
    const results_file *files = results_files(&nfiles);
    char path[DPS_PATH_MAX + 32], *data = NULL;
    size_t len = 0;
    csv_buf out;
    csv_init(&out);
    results_ids again = {0}, twice = {0};
    dps_status rc = DPS_OK;
    for (int i = 0; resume && !rc && i < nfiles - 1; i++) rc = find_repeats(r, &files[i], &twice);
    if (twice.n) qsort(twice.ids, (size_t)twice.n, sizeof *twice.ids, by_text);
    if (!rc) rc = read_runs(r->dir_fd, r->dir, resume, &twice, &data, &len, &out, done, &again);
    results_ids_free(&twice);
    const char *runs = files[nfiles - 1].name;
    snprintf(path, sizeof path, "%s/%s", r->dir, runs);
    if (!rc && data && out.len != len) rc = csv_replace_at(r->dir_fd, runs, path, &out);
    for (int i = 0; !rc && i < nfiles - 1; i++) rc = filter_file(r, files[i].name, done);
    *rerun = count_not_done(&again, done);
    results_ids_free(&again);
    csv_free(&out);
    free(data);
    if (rc) results_ids_free(done);
    return rc;
}

dps_status results_ids_finished(const char *dir, results_ids *done)
{
    char *data = NULL;
    size_t len = 0;
    csv_buf out;
    csv_init(&out);
    results_ids again = {0};
    memset(done, 0, sizeof *done);
    int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0 && errno == ENOENT) return DPS_OK; /* no folder yet: nothing in it */
    if (dirfd < 0)
        return dps_fail(DPS_ERR_RUNTIME, "%s: cannot open the results folder: %s", dir,
                        strerror(errno));
    results_ids none = {0};
    dps_status rc = read_runs(dirfd, dir, 1, &none, &data, &len, &out, done, &again);
    close(dirfd);
    results_ids_free(&again);
    csv_free(&out);
    free(data);
    if (rc) results_ids_free(done);
    return rc;
}
