/* The results folder's transactions, through its undo journal, and its
 * identity (see results_txn.h). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util.h"
#include "results/results_txn.h"
#include "results/trace_json.h"

#define TXN_MAX_FILES 8
#define JOURNAL_MAGIC "dpscale journal 1"

/* A file's size before the transaction's rows were appended to it. */
typedef struct txn_mark {
    char name[64];
    int existed;
    long long size;
} txn_mark;

/* What the journal holds. */
typedef struct txn_state {
    long pid;
    char what[256], trace[RESULTS_TXN_MAX_TRACES][256];
    int n, ntraces;
    txn_mark m[TXN_MAX_FILES];
} txn_state;

dps_status results_check_folder(const results_dir *r)
{
    struct stat at_path, opened;
    if (fstat(r->dir_fd, &opened) == 0 && stat(r->dir, &at_path) == 0 &&
        at_path.st_dev == opened.st_dev && at_path.st_ino == opened.st_ino)
        return DPS_OK;
    return dps_fail(DPS_ERR_RUNTIME, "%s is no longer the folder this dpscale opened and locked: "
                    "it was moved or deleted meanwhile, so nothing more is written; the rows "
                    "written before went with the folder (put it back, or name where it is now "
                    "with --out/--name, and continue with --resume)", r->dir);
}

/* ---- signals held during a commit --------------------------------------------- */

/* The signals whose default action ends the process; while a commit runs,
 * those left at their default are recorded instead and raised after it. */
static const int held_signals[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGALRM,
                                   SIGPIPE, SIGXCPU, SIGXFSZ, SIGVTALRM, SIGPROF};
#define NHELD ((int)(sizeof held_signals / sizeof held_signals[0]))

static volatile sig_atomic_t held_signal;

static void hold_one(int sig) { held_signal = sig; }

typedef struct sig_hold {
    struct sigaction old[NHELD];
    int replaced[NHELD];
} sig_hold;

static void hold_signals(sig_hold *h)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = hold_one;
    sa.sa_flags = SA_RESTART;
    sigfillset(&sa.sa_mask);
    held_signal = 0;
    for (int i = 0; i < NHELD; i++) {
        sigaction(held_signals[i], NULL, &h->old[i]);
        h->replaced[i] = !(h->old[i].sa_flags & SA_SIGINFO) && h->old[i].sa_handler == SIG_DFL;
        if (h->replaced[i]) sigaction(held_signals[i], &sa, NULL);
    }
}

static void release_signals(const sig_hold *h)
{
    for (int i = 0; i < NHELD; i++)
        if (h->replaced[i]) sigaction(held_signals[i], &h->old[i], NULL);
    if (held_signal) raise(held_signal);
}

/* ---- the journal ----------------------------------------------------------------- */

/* A name directly in the folder: no '/', not "." or "..". */
static int plain_name(const char *s)
{
    return s[0] && !strchr(s, '/') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

static void journal_path(const results_dir *r, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s", r->dir, RESULTS_JOURNAL_FILE);
}

/* One line of text: a newline in it would end the journal's line. */
static void copy_line(char *dst, const char *src, size_t len)
{
    dps_strlcpy(dst, src ? src : "", len);
    for (char *p = dst; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
}

/* Every part's file noted (its size, or that it is new) before anything is
 * written; a part that cannot be written is refused here. */
static dps_status mark_files(const results_dir *r, const results_txn *x, txn_state *t)
{
    memset(t, 0, sizeof *t);
    t->pid = (long)getpid();
    copy_line(t->what, x->what, sizeof t->what);
    if (x->ntraces > RESULTS_TXN_MAX_TRACES)
        return dps_fail(DPS_ERR_RUNTIME, "%s: %d trace files in one transaction, at most %d",
                        x->what, x->ntraces, RESULTS_TXN_MAX_TRACES);
    for (; t->ntraces < x->ntraces; t->ntraces++)
        copy_line(t->trace[t->ntraces], x->traces[t->ntraces], sizeof t->trace[0]);
    if (x->nparts > TXN_MAX_FILES)
        return dps_fail(DPS_ERR_RUNTIME, "%s: %d files in one transaction, at most %d",
                        x->what, x->nparts, TXN_MAX_FILES);
    for (int i = 0; i < x->nparts; i++) {
        txn_mark *m = &t->m[t->n++];
        struct stat st;
        dps_strlcpy(m->name, x->parts[i].name, sizeof m->name);
        if (x->parts[i].rows->oom)
            return dps_fail(DPS_ERR_RUNTIME, "out of host memory formatting %s", m->name);
        if (fstatat(r->dir_fd, m->name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            if (errno != ENOENT)
                return dps_fail(DPS_ERR_RUNTIME, "%s/%s: cannot read its size: %s", r->dir,
                                m->name, strerror(errno));
            continue;
        }
        if (!S_ISREG(st.st_mode))
            return dps_fail(DPS_ERR_RUNTIME, "%s/%s: cannot append to it: %s", r->dir, m->name,
                            dps_open_strerror(S_ISLNK(st.st_mode) ? ELOOP : EINVAL));
        m->existed = 1;
        m->size = (long long)st.st_size;
    }
    return DPS_OK;
}

/* The journal's text into buf; its length, or -1 when it does not fit. */
static int journal_format(const txn_state *t, char *buf, size_t len)
{
    int n = snprintf(buf, len, JOURNAL_MAGIC "\npid %ld\nwhat %s\n", t->pid, t->what);
    for (int i = 0; i < t->ntraces && n > 0 && (size_t)n < len; i++)
        n += snprintf(buf + n, len - (size_t)n, "trace %s\n", t->trace[i]);
    for (int i = 0; i < t->n && n > 0 && (size_t)n < len; i++)
        n += snprintf(buf + n, len - (size_t)n, "file %d %lld %s\n", t->m[i].existed,
                      t->m[i].size, t->m[i].name);
    if (n > 0 && (size_t)n < len) n += snprintf(buf + n, len - (size_t)n, "end\n");
    return n > 0 && (size_t)n < len ? n : -1;
}

/* The journal, new, written and on disk (the folder's entry too) before any
 * row is appended. */
static dps_status journal_write(const results_dir *r, const txn_state *t)
{
    char path[DPS_PATH_MAX + 32], text[4096];
    journal_path(r, path, sizeof path);
    int n = journal_format(t, text, sizeof text);
    if (n < 0) return dps_fail(DPS_ERR_RUNTIME, "%s: the journal of %s is too long", path, t->what);
    int fd = openat(r->dir_fd, RESULTS_JOURNAL_FILE,
                    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0 && errno == EEXIST)
        return dps_fail(DPS_ERR_RUNTIME, "%s: rows of an earlier write are still to be taken back, "
                        "so %s is not written: make the folder writable and run dpscale on it "
                        "again (it takes them back first)", path, t->what);
    if (fd < 0)
        return dps_fail(DPS_ERR_RUNTIME, "%s: cannot write the journal of %s: %s; none of its rows "
                        "were written", path, t->what, strerror(errno));
    ssize_t w = write(fd, text, (size_t)n);
    int err = w < 0 ? errno : w < n ? ENOSPC : fsync(fd) == 0 || errno == EINVAL ? 0 : errno;
    close(fd);
    if (!err && (fsync(r->dir_fd) == 0 || errno == EINVAL)) return DPS_OK;
    err = err ? err : errno;
    unlinkat(r->dir_fd, RESULTS_JOURNAL_FILE, 0);
    return dps_fail(DPS_ERR_RUNTIME, "%s: cannot write the journal of %s: %s; none of its rows were "
                    "written", path, t->what, strerror(err));
}

static void journal_remove(const results_dir *r, const char *what)
{
    if (unlinkat(r->dir_fd, RESULTS_JOURNAL_FILE, 0) == 0 || errno == ENOENT) return;
    char path[DPS_PATH_MAX + 32];
    journal_path(r, path, sizeof path);
    dps_warn("%s: cannot remove it (%s): the next dpscale to open the folder takes the rows of %s "
             "back out, and --resume runs it again", path, strerror(errno), what);
}

/* A "trace NAME" line's name into t (an empty one: none); *bad when it is
 * not a plain name of trace/ or one too many. */
static void trace_line(txn_state *t, const char *name, int *bad)
{
    if (!name[0]) return;
    if (!plain_name(name) || t->ntraces == RESULTS_TXN_MAX_TRACES) *bad = 1;
    else dps_strlcpy(t->trace[t->ntraces++], name, sizeof t->trace[0]);
}

/* The journal's lines into t; *complete when it ends with "end" (it was
 * all on disk before the first append). */
static void journal_parse(char *text, txn_state *t, int *complete)
{
    char *save = NULL;
    int line = 0, bad = 0;
    for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save), line++) {
        txn_mark *m = &t->m[t->n];
        int at = 0;
        if (line == 0 && strcmp(l, JOURNAL_MAGIC) != 0) return;
        if (!strncmp(l, "pid ", 4)) t->pid = strtol(l + 4, NULL, 10);
        else if (!strncmp(l, "what ", 5)) dps_strlcpy(t->what, l + 5, sizeof t->what);
        else if (!strncmp(l, "trace ", 6)) trace_line(t, l + 6, &bad);
        else if (!strcmp(l, "end")) *complete = 1;
        else if (t->n < TXN_MAX_FILES && sscanf(l, "file %d %lld %n", &m->existed, &m->size, &at) == 2 &&
                 at && plain_name(l + at)) {
            dps_strlcpy(m->name, l + at, sizeof m->name);
            t->n++;
        }
    }
    if (bad) *complete = 0; /* not a journal dpscale wrote */
}

/* 1 with the journal in t, 0 when there is none, -1 (a message) when it
 * cannot be read. */
static int journal_read(const results_dir *r, txn_state *t, int *complete)
{
    char path[DPS_PATH_MAX + 32], *text = NULL;
    size_t len = 0;
    memset(t, 0, sizeof *t);
    *complete = 0;
    journal_path(r, path, sizeof path);
    if (dps_read_file_at(r->dir_fd, RESULTS_JOURNAL_FILE, path, &text, &len)) return -1;
    if (!text) return 0;
    journal_parse(text, t, complete);
    free(text);
    return 1;
}

/* ---- taking rows back ------------------------------------------------------------ */

/* One file cut back to its mark (removed if it is new): 0, or -1 with errno. */
static int take_back_file(int dirfd, const txn_mark *m)
{
    struct stat st;
    if (fstatat(dirfd, m->name, &st, AT_SYMLINK_NOFOLLOW) != 0) return errno == ENOENT ? 0 : -1;
    if (!S_ISREG(st.st_mode)) {
        errno = S_ISLNK(st.st_mode) ? ELOOP : EINVAL;
        return -1;
    }
    if (!m->existed) return unlinkat(dirfd, m->name, 0) == 0 || errno == ENOENT ? 0 : -1;
    if ((long long)st.st_size <= m->size) return 0; /* nothing of the transaction's in it */
    int fd = dps_openat_file(dirfd, m->name, O_WRONLY, 0);
    if (fd < 0) return -1;
    int rc = ftruncate(fd, (off_t)m->size) == 0 && (fsync(fd) == 0 || errno == EINVAL) ? 0 : -1;
    int err = errno;
    close(fd);
    errno = err;
    return rc;
}

/* Every file of t cut back and its traces removed; how many files could
 * not be, each named in a warning. */
static int roll_back(const results_dir *r, const txn_state *t)
{
    int bad = 0;
    for (int i = 0; i < t->n; i++) {
        if (take_back_file(r->dir_fd, &t->m[i]) == 0) continue;
        bad++;
        dps_warn("%s/%s: cannot take back the rows of %s appended to it (%s); %s keeps what to "
                 "take back: once the folder can be written, any dpscale run on it does", r->dir,
                 t->m[i].name, t->what, dps_open_strerror(errno), RESULTS_JOURNAL_FILE);
    }
    for (int i = 0; i < t->ntraces; i++) results_drop_trace(r, t->trace[i]);
    return bad;
}

void results_drop_trace(const results_dir *r, const char *name)
{
    int tfd = openat(r->dir_fd, TRACE_JSON_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (tfd < 0) return;
    if (fstatat(tfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && unlinkat(tfd, name, 0) != 0)
        dps_warn("%s/%s/%s: cannot remove the timeline of a configuration whose rows are not in "
                 "the folder (%s); remove it by hand", r->dir, TRACE_JSON_DIR, name, strerror(errno));
    close(tfd);
}

/* ---- commit and settle ----------------------------------------------------------- */

/* Every part appended; on a failure every file is cut back and, when that
 * worked, the journal removed. */
static dps_status append_parts(const results_dir *r, const results_txn *x, const txn_state *t)
{
    for (int i = 0; i < x->nparts; i++) {
        const results_part *p = &x->parts[i];
        char shown[DPS_PATH_MAX + 80];
        snprintf(shown, sizeof shown, "%s/%s", r->dir, p->name);
        dps_status rc = csv_append_at(r->dir_fd, p->name, shown, p->cols, p->ncols, p->rows);
        if (!rc) continue;
        char why[DPS_ERRMSG_MAX];
        dps_strlcpy(why, dps_errmsg(), sizeof why);
        int bad = roll_back(r, t);
        if (!bad) journal_remove(r, t->what);
        return dps_fail(rc, "%s; none of %s rows were kept%s", why, x->rows_of,
                        bad ? " (but some could not be taken back, see above)" : "");
    }
    return DPS_OK;
}

dps_status results_commit(const results_dir *r, const results_txn *x)
{
    txn_state t;
    DPS_TRY(results_check_folder(r));
    DPS_TRY(mark_files(r, x, &t));
    sig_hold h;
    hold_signals(&h);
    dps_status rc = journal_write(r, &t);
    if (!rc) rc = append_parts(r, x, &t);
    if (!rc) {
        if (r->committed) *r->committed = 1;
        journal_remove(r, t.what);
    }
    release_signals(&h);
    return rc;
}

dps_status results_commit_table(const results_dir *r, const results_table *t, const csv_buf *rows)
{
    char what[160], rows_of[160];
    snprintf(what, sizeof what, "%s (%s)", t->what, t->name);
    size_t n = strlen(t->what);
    snprintf(rows_of, sizeof rows_of, "%s%s", t->what, n && t->what[n - 1] == 's' ? "'" : "'s");
    results_part part = {t->name, t->cols, t->ncols, rows};
    results_txn x = {what, rows_of, NULL, 0, &part, 1};
    return results_commit(r, &x);
}

dps_status results_settle(const results_dir *r, int committed, int *rolled_back, char *what,
                          size_t what_len)
{
    txn_state t;
    int complete;
    *rolled_back = 0;
    int present = journal_read(r, &t, &complete);
    if (present <= 0) return present < 0 ? DPS_ERR_RUNTIME : DPS_OK;
    if (complete && !committed) {
        if (roll_back(r, &t)) {
            char path[DPS_PATH_MAX + 32];
            journal_path(r, path, sizeof path);
            return dps_fail(DPS_ERR_RUNTIME, "%s: the rows of %s, left half-written by process %ld, "
                            "could not all be taken back (see above); nothing is written to the "
                            "folder until they are: make it writable and run dpscale on it again",
                            path, t.what, t.pid);
        }
        *rolled_back = 1;
        if (what) dps_strlcpy(what, t.what, what_len);
    }
    journal_remove(r, t.what);
    return DPS_OK;
}
