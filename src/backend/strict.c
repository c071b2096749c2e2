/* Strict mode's registries and race detector (DPSCALE_STRICT=1): every live
 * allocation (device or pinned, with be_buf_alloc's label), stream and
 * event of the wrapped backend; an op's stream and operands checked as CUDA
 * checks them; each stream a vector clock (slot 0 the host's) that
 * event_record captures, stream_wait joins and the synchronisations join
 * into the host's, so that two accesses of one allocation's bytes that
 * nothing orders are reported as compute-sanitizer's racecheck reports
 * them, and a free before a stream's last use as synccheck would. The
 * streams' work runs on their workers (strict_queue.c); events,
 * waits and synchronisations are points of their queues. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/host_strict.h"
#include "backend/strict.h"
#include "backend/strict_queue.h"
#include "core/util.h"

#define STRICT_MAX_STREAMS 256 /* live at once; slot 0 is the host */
#define STRICT_EVENT_MAGIC 0x5e7e47u

typedef struct vclock { uint32_t t[STRICT_MAX_STREAMS]; } vclock;

/* A stream as strict mode hands it out: the wrapped backend's inside. */
typedef struct sstream {
    be_stream *inner;
    int dev, live;
    vclock vc;
    char name[40];
    squeue *q;          /* the slot's worker, kept while the slot is reused */
} sstream;

typedef struct sevent {
    unsigned magic;
    be_event *inner;
    int dev, live, recorded;
    int sid;            /* the stream it was last recorded on */
    vclock vc;          /* that stream's clock at the record */
    squeue *q;          /* that stream's queue, and the record's point in it */
    uint64_t ticket;
    struct sevent *next_free;
} sevent;

/* One access kept on an allocation: bytes [lo, hi) by op number seq of stream sid. */
typedef struct srec {
    size_t lo, hi;
    int sid, write;
    uint32_t seq;
    const char *op;
} srec;

typedef struct salloc {
    char *base;
    size_t bytes;
    int dev;            /* DPS_HOST: pinned */
    const char *label;
    srec *r;
    int nr, cap;
} salloc;

typedef struct strict_state strict_state;
struct strict_state {
    const be_ops *inner;
    pthread_mutex_t mu;
    vclock host;
    sstream st[STRICT_MAX_STREAMS];
    char stream_names[STRICT_MAX_STREAMS][40];  /* kept after a destroy, for messages */
    salloc *a;          /* sorted by base */
    int na, acap;
    sevent **ev;        /* every event made, freed at the end */
    int nev, evcap;
    sevent *free_ev;
    int failed;
    int refused;        /* an op was refused: the teardown after it frees what streams hold */
    char sticky[DPS_ERRMSG_MAX];
};

static void drain_all(strict_state *S);

int be_strict_wanted(void) { return host_strict(); }

int be_strict_on(const backend *be) { return be && be->strict; }

const be_ops *strict_inner(const backend *be) { return be->strict->inner; }

strict_state *strict_state_new(const be_ops *inner)
{
    strict_state *S = calloc(1, sizeof *S);
    if (!S) return NULL;
    S->inner = inner;
    pthread_mutex_init(&S->mu, NULL);
    return S;
}

void strict_destroy(backend *be)
{
    strict_state *S = be->strict;
    drain_all(S); /* first, so that no worker still waits on a queue stopped before its own */
    for (int i = 1; i < STRICT_MAX_STREAMS; i++) sq_stop(S->st[i].q);
    for (int i = 0; i < S->na; i++) free(S->a[i].r);
    for (int i = 0; i < S->nev; i++) free(S->ev[i]);
    free(S->a);
    free(S->ev);
    const be_ops *inner = S->inner;
    pthread_mutex_destroy(&S->mu);
    free(S);
    be->strict = NULL;
    be->ops = inner;
    inner->destroy(be);
}

/* ---- messages ---- */

/* "stream 3 "compute" of device 0", or "the host" (slot 0). */
static const char *stream_desc(strict_state *S, int sid, char *buf, size_t len)
{
    if (sid == 0) snprintf(buf, len, "the host");
    else if (S->stream_names[sid][0])
        snprintf(buf, len, "stream %d \"%s\" of device %d", sid, S->stream_names[sid],
                 S->st[sid].dev);
    else snprintf(buf, len, "stream %d of device %d", sid, S->st[sid].dev);
    return buf;
}

static const char *alloc_desc(const salloc *a, char *buf, size_t len)
{
    if (a->dev == DPS_HOST) snprintf(buf, len, "pinned host allocation \"%s\" (%zu bytes at %p)",
                                     a->label, a->bytes, (void *)a->base);
    else snprintf(buf, len, "device %d's allocation \"%s\" (%zu bytes at %p)", a->dev, a->label,
                  a->bytes, (void *)a->base);
    return buf;
}

/* A misuse where no status can carry it: said now on stderr, and every
 * later op and be_strict_status fail with it, as CUDA's sticky errors. */
static void sticky(strict_state *S, const char *fmt, ...)
{
    if (S->failed) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(S->sticky, sizeof S->sticky, fmt, ap);
    va_end(ap);
    S->failed = 1;
    fprintf(stderr, "dpscale: %s\n", S->sticky);
}

static dps_status sticky_fail(strict_state *S)
{
    return dps_fail(DPS_ERR_RUNTIME, "%s (reported earlier)", S->sticky);
}

dps_status be_strict_status(backend *be)
{
    if (!be || !be->strict) return DPS_OK;
    strict_state *S = be->strict;
    pthread_mutex_lock(&S->mu);
    dps_status rc = S->failed ? sticky_fail(S) : DPS_OK;
    pthread_mutex_unlock(&S->mu);
    return rc;
}

/* ---- clocks ---- */

static void join(vclock *into, const vclock *from)
{
    for (int i = 0; i < STRICT_MAX_STREAMS; i++)
        if (from->t[i] > into->t[i]) into->t[i] = from->t[i];
}

/* Whether the access r happened before the point whose clock is vc. */
static int ordered(const vclock *vc, const srec *r) { return vc->t[r->sid] >= r->seq; }

/* A new op on stream sid: after everything the host did before issuing it. */
static uint32_t advance(strict_state *S, int sid)
{
    sstream *st = &S->st[sid];
    join(&st->vc, &S->host);
    return ++st->vc.t[sid];
}

/* ---- the streams' workers ---- */

/* The failure of an op that ran on stream sid's worker, said at a
 * synchronisation as CUDA reports a kernel's error; DPS_OK when none. */
static dps_status stream_failed(strict_state *S, int sid, int *earlier)
{
    char msg[DPS_ERRMSG_MAX], who[96];
    const char *op = sq_failed(S->st[sid].q, msg, sizeof msg, earlier);
    if (!op) return DPS_OK;
    pthread_mutex_lock(&S->mu);
    stream_desc(S, sid, who, sizeof who);
    pthread_mutex_unlock(&S->mu);
    return dps_fail(DPS_ERR_RUNTIME, "strict mode: %s failed as it ran on %s, after the host "
                    "had gone on (reported at this synchronisation, as CUDA reports an "
                    "asynchronous error; the stream's later ops were skipped): %s", op, who, msg);
}

/* The host waits for every stream's work issued so far (cudaFree's and
 * cudaFreeHost's implicit device synchronisation), so that nothing queued
 * touches memory after it is freed. Lock not held. */
static void drain_all(strict_state *S)
{
    squeue *q[STRICT_MAX_STREAMS];
    uint64_t t[STRICT_MAX_STREAMS];
    int n = 0;
    pthread_mutex_lock(&S->mu);
    for (int i = 1; i < STRICT_MAX_STREAMS; i++)
        if (S->st[i].q) {
            q[n] = S->st[i].q;
            t[n++] = sq_issued(S->st[i].q);
        }
    pthread_mutex_unlock(&S->mu);
    for (int i = 0; i < n; i++) sq_wait(q[i], t[i]);
}

/* An event's record, run by its stream's worker: the timestamp is taken
 * when the stream reaches it. */
static dps_status run_record(backend *be, be_stream *inner, const void *args)
{
    be_event *const *e = args;
    return strict_inner(be)->event_record(be, *e, inner);
}

/* A stream_wait, run by the waiting stream's worker: its later ops start
 * once the event's stream has passed the recorded point. */
typedef struct wait_point { squeue *q; uint64_t ticket; } wait_point;

static dps_status run_wait(backend *be, be_stream *inner, const void *args)
{
    const wait_point *w = args;
    (void)be; (void)inner;
    sq_wait(w->q, w->ticket);
    return DPS_OK;
}

dps_status strict_enqueue(backend *be, be_stream *s, be_stream *inner, const char *op, sq_fn fn,
                          const void *args, size_t bytes, uint64_t *ticket)
{
    const sstream *st = (const sstream *)(const void *)s; /* checked by strict_issue */
    return sq_push(st->q, op, fn, inner, st->dev, args, bytes, ticket);
}

/* ---- the allocation registry ---- */

/* The index of the first allocation whose base is above p. */
static int upper(strict_state *S, const void *p)
{
    int lo = 0, hi = S->na;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (S->a[mid].base <= (const char *)p) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* The live allocation holding p, or NULL. */
static salloc *find(strict_state *S, const void *p)
{
    int i = upper(S, p) - 1;
    if (i < 0) return NULL;
    salloc *a = &S->a[i];
    return (const char *)p < a->base + (a->bytes ? a->bytes : 1) ? a : NULL;
}

static dps_status add_alloc(strict_state *S, void *p, size_t bytes, int dev, const char *label)
{
    if (S->na == S->acap) {
        int cap = S->acap ? 2 * S->acap : 64;
        salloc *a = realloc(S->a, (size_t)cap * sizeof *a);
        if (!a) return dps_fail(DPS_ERR_RUNTIME, "out of host memory for strict mode's "
                                "allocation registry");
        S->a = a;
        S->acap = cap;
    }
    int i = upper(S, p);
    memmove(&S->a[i + 1], &S->a[i], (size_t)(S->na - i) * sizeof *S->a);
    S->a[i] = (salloc){.base = p, .bytes = bytes, .dev = dev, .label = label};
    S->na++;
    return DPS_OK;
}

void be_strict_label(backend *be, const void *p, const char *what)
{
    if (!be->strict || !p) return;
    strict_state *S = be->strict;
    pthread_mutex_lock(&S->mu);
    salloc *a = find(S, p);
    if (a && a->base == p) a->label = what;
    pthread_mutex_unlock(&S->mu);
}

/* A free by the host of the allocation at p, made on dev: p must be an
 * allocation's start, of dev, and every access to it ordered before the
 * host's free (synccheck's use after free). */
static void remove_alloc(strict_state *S, void *p, int dev, const char *op)
{
    salloc *a = find(S, p);
    char where[160], who[96];
    if (!a || a->base != p) {
        sticky(S, "strict mode: %s of %p, which is not the start of a live allocation "
               "(freed twice, or never allocated here); free what raw_alloc or host_alloc "
               "returned, once", op, p);
        return;
    }
    if (a->dev != dev) {
        sticky(S, "strict mode: %s on device %d of %s; free it on its own device", op, dev,
               alloc_desc(a, where, sizeof where));
        return;
    }
    for (int i = 0; !S->refused && i < a->nr; i++) {
        if (ordered(&S->host, &a->r[i])) continue;
        sticky(S, "strict mode: %s of %s while %s may still %s it (%s, op %u of that stream, "
               "bytes [%zu, %zu)): nothing made the host wait for it; synchronise the stream "
               "(stream_sync or an event_sync after it) before freeing",
               op, alloc_desc(a, where, sizeof where), stream_desc(S, a->r[i].sid, who, sizeof who),
               a->r[i].write ? "write" : "read", a->r[i].op, a->r[i].seq, a->r[i].lo, a->r[i].hi);
        break;
    }
    free(a->r);
    int i = (int)(a - S->a);
    memmove(&S->a[i], &S->a[i + 1], (size_t)(S->na - i - 1) * sizeof *S->a);
    S->na--;
}

dps_status strict_raw_alloc(backend *be, int dev, size_t bytes, void **p)
{
    strict_state *S = be->strict;
    DPS_TRY(S->inner->raw_alloc(be, dev, bytes, p));
    pthread_mutex_lock(&S->mu);
    dps_status rc = add_alloc(S, *p, bytes, dev, "raw_alloc (not through be_buf_alloc)");
    pthread_mutex_unlock(&S->mu);
    return rc;
}

void strict_raw_free(backend *be, int dev, void *p)
{
    strict_state *S = be->strict;
    if (!p) return;
    pthread_mutex_lock(&S->mu);
    remove_alloc(S, p, dev, "raw_free");
    pthread_mutex_unlock(&S->mu);
    drain_all(S);
    S->inner->raw_free(be, dev, p);
}

dps_status strict_host_alloc(backend *be, size_t bytes, void **p)
{
    strict_state *S = be->strict;
    DPS_TRY(S->inner->host_alloc(be, bytes, p));
    pthread_mutex_lock(&S->mu);
    dps_status rc = add_alloc(S, *p, bytes, DPS_HOST, "host_alloc (pinned)");
    pthread_mutex_unlock(&S->mu);
    return rc;
}

void strict_host_free(backend *be, void *p)
{
    strict_state *S = be->strict;
    if (!p) return;
    pthread_mutex_lock(&S->mu);
    remove_alloc(S, p, DPS_HOST, "host_free");
    pthread_mutex_unlock(&S->mu);
    drain_all(S);
    S->inner->host_free(be, p);
}

/* ---- streams ---- */

/* The stream slot s names, live and made here, or 0 with the failure in *rc. */
static int stream_sid(strict_state *S, const be_stream *s, const char *op, dps_status *rc)
{
    const sstream *x = (const sstream *)(const void *)s;
    if (!s) {
        *rc = dps_fail(DPS_ERR_RUNTIME, "strict mode: %s called with no stream (NULL); issue it "
                       "on a stream of its device (be_ops.stream_create), as the cuda backend "
                       "requires", op);
        return 0;
    }
    if (x < &S->st[1] || x >= &S->st[STRICT_MAX_STREAMS]) {
        *rc = dps_fail(DPS_ERR_RUNTIME, "strict mode: %s called with stream %p, which this "
                       "backend did not create; use a stream of be_ops.stream_create", op,
                       (const void *)s);
        return 0;
    }
    int sid = (int)(x - S->st);
    if (!x->live) {
        char who[96];
        *rc = dps_fail(DPS_ERR_RUNTIME, "strict mode: %s called on %s after it was destroyed; "
                       "destroy a stream only once its work is issued", op,
                       stream_desc(S, sid, who, sizeof who));
        return 0;
    }
    return sid;
}

dps_status strict_stream_create(backend *be, int dev, be_stream **s)
{
    strict_state *S = be->strict;
    be_stream *inner;
    DPS_TRY(S->inner->stream_create(be, dev, &inner));
    pthread_mutex_lock(&S->mu);
    int sid = 1;
    while (sid < STRICT_MAX_STREAMS && S->st[sid].live) sid++;
    if (sid == STRICT_MAX_STREAMS) {
        pthread_mutex_unlock(&S->mu);
        S->inner->stream_destroy(be, inner);
        return dps_fail(DPS_ERR_RUNTIME, "strict mode tracks at most %d live streams; destroy "
                        "streams no longer used", STRICT_MAX_STREAMS - 1);
    }
    sstream *st = &S->st[sid];
    if (!st->q) st->q = sq_start(be, S->inner);
    if (!st->q) {
        pthread_mutex_unlock(&S->mu);
        S->inner->stream_destroy(be, inner);
        return DPS_ERR_RUNTIME;
    }
    uint32_t mine = st->vc.t[sid]; /* a slot used again keeps counting: its old ops stay ordered */
    st->vc = S->host;
    st->vc.t[sid] = mine > st->vc.t[sid] ? mine : st->vc.t[sid];
    st->inner = inner;
    st->dev = dev;
    st->live = 1;
    S->stream_names[sid][0] = '\0';
    *s = (be_stream *)(void *)st;
    pthread_mutex_unlock(&S->mu);
    return DPS_OK;
}

void strict_stream_destroy(backend *be, be_stream *s)
{
    strict_state *S = be->strict;
    dps_status rc = DPS_OK;
    pthread_mutex_lock(&S->mu);
    int sid = stream_sid(S, s, "stream_destroy", &rc);
    be_stream *inner = sid ? S->st[sid].inner : NULL;
    if (!sid) sticky(S, "%s", dps_errmsg());
    pthread_mutex_unlock(&S->mu);
    if (!inner) return;
    squeue *q = S->st[sid].q;
    sq_wait(q, sq_issued(q)); /* its work done before the stream goes (cudaStreamDestroy) */
    int earlier = 1;
    if (stream_failed(S, sid, &earlier) && !earlier) { /* never reported: said now, and sticky */
        pthread_mutex_lock(&S->mu);
        sticky(S, "%s", dps_errmsg());
        pthread_mutex_unlock(&S->mu);
    }
    sq_clear(q);
    pthread_mutex_lock(&S->mu);
    S->st[sid].live = 0;
    pthread_mutex_unlock(&S->mu);
    S->inner->stream_destroy(be, inner);
}

dps_status strict_stream_sync(backend *be, be_stream *s)
{
    strict_state *S = be->strict;
    dps_status rc = DPS_OK;
    pthread_mutex_lock(&S->mu);
    int sid = stream_sid(S, s, "stream_sync", &rc);
    if (sid) join(&S->host, &S->st[sid].vc);
    be_stream *inner = sid ? S->st[sid].inner : NULL;
    uint64_t t = sid ? sq_issued(S->st[sid].q) : 0;
    pthread_mutex_unlock(&S->mu);
    if (!sid) return rc;
    sq_wait(S->st[sid].q, t);
    DPS_TRY(stream_failed(S, sid, NULL));
    return S->inner->stream_sync(be, inner);
}

void strict_name_stream(backend *be, be_stream *s, const char *name)
{
    strict_state *S = be->strict;
    dps_status rc = DPS_OK;
    pthread_mutex_lock(&S->mu);
    int sid = stream_sid(S, s, "name_stream", &rc);
    if (sid) dps_strlcpy(S->stream_names[sid], name ? name : "", sizeof S->stream_names[sid]);
    be_stream *inner = sid ? S->st[sid].inner : NULL;
    pthread_mutex_unlock(&S->mu);
    if (inner) S->inner->name_stream(be, inner, name);
}

void *strict_native_stream(backend *be, be_stream *s)
{
    strict_state *S = be->strict;
    dps_status rc = DPS_OK;
    pthread_mutex_lock(&S->mu);
    int sid = stream_sid(S, s, "native_stream", &rc);
    be_stream *inner = sid ? S->st[sid].inner : NULL;
    pthread_mutex_unlock(&S->mu);
    return inner ? S->inner->native_stream(be, inner) : NULL;
}

/* ---- events ---- */

static sevent *event_of(strict_state *S, be_event *e, const char *op, dps_status *rc)
{
    sevent *x = (sevent *)(void *)e;
    if (!e || x->magic != STRICT_EVENT_MAGIC) {
        *rc = dps_fail(DPS_ERR_RUNTIME, "strict mode: %s called with event %p, which this "
                       "backend did not create (or NULL); use one of be_ops.event_create",
                       op, (void *)e);
        return NULL;
    }
    if (!x->live) {
        *rc = dps_fail(DPS_ERR_RUNTIME, "strict mode: %s called with an event of device %d "
                       "after event_destroy", op, x->dev);
        return NULL;
    }
    (void)S;
    return x;
}

static sevent *new_event(strict_state *S)
{
    if (S->free_ev) {
        sevent *x = S->free_ev;
        S->free_ev = x->next_free;
        return x;
    }
    if (S->nev == S->evcap) {
        int cap = S->evcap ? 2 * S->evcap : 64;
        sevent **ev = realloc(S->ev, (size_t)cap * sizeof *ev);
        if (!ev) return NULL;
        S->ev = ev;
        S->evcap = cap;
    }
    sevent *x = malloc(sizeof *x);
    if (x) S->ev[S->nev++] = x;
    return x;
}

dps_status strict_event_create(backend *be, int dev, be_event **e)
{
    strict_state *S = be->strict;
    be_event *inner;
    DPS_TRY(S->inner->event_create(be, dev, &inner));
    pthread_mutex_lock(&S->mu);
    sevent *x = new_event(S);
    if (x) {
        memset(x, 0, sizeof *x);
        *x = (sevent){.magic = STRICT_EVENT_MAGIC, .inner = inner, .dev = dev, .live = 1};
    }
    pthread_mutex_unlock(&S->mu);
    if (!x) {
        S->inner->event_destroy(be, inner);
        return dps_fail(DPS_ERR_RUNTIME, "out of host memory for strict mode's event registry");
    }
    *e = (be_event *)(void *)x;
    return DPS_OK;
}

void strict_event_destroy(backend *be, be_event *e)
{
    strict_state *S = be->strict;
    dps_status rc = DPS_OK;
    pthread_mutex_lock(&S->mu);
    sevent *x = event_of(S, e, "event_destroy", &rc);
    be_event *inner = x ? x->inner : NULL;
    squeue *q = x && x->recorded ? x->q : NULL;
    uint64_t t = q ? x->ticket : 0;
    if (x) {
        x->live = 0;
        x->next_free = S->free_ev;
        S->free_ev = x;
    } else sticky(S, "%s", dps_errmsg());
    pthread_mutex_unlock(&S->mu);
    if (q) sq_wait(q, t); /* its record has run: the worker no longer touches it */
    if (inner) S->inner->event_destroy(be, inner);
}

dps_status strict_event_record(backend *be, be_event *e, be_stream *s)
{
    strict_state *S = be->strict;
    dps_status rc = S->failed ? sticky_fail(S) : DPS_OK;
    pthread_mutex_lock(&S->mu);
    int sid = rc ? 0 : stream_sid(S, s, "event_record", &rc);
    sevent *x = sid ? event_of(S, e, "event_record", &rc) : NULL;
    if (x && x->dev != S->st[sid].dev) {
        char who[96];
        rc = dps_fail(DPS_ERR_RUNTIME, "strict mode: event_record of an event of device %d on "
                      "%s (CUDA: cudaErrorInvalidResourceHandle); record it on a stream of its "
                      "device", x->dev, stream_desc(S, sid, who, sizeof who));
        x = NULL;
    }
    be_event *ie = x ? x->inner : NULL;
    if (x) rc = sq_push(S->st[sid].q, "event_record", run_record, S->st[sid].inner,
                        S->st[sid].dev, &ie, sizeof ie, &x->ticket);
    if (x && !rc) {
        advance(S, sid);
        x->vc = S->st[sid].vc;
        x->sid = sid;
        x->q = S->st[sid].q;
        x->recorded = 1;
    }
    pthread_mutex_unlock(&S->mu);
    return rc;
}

dps_status strict_stream_wait(backend *be, be_stream *s, be_event *e)
{
    strict_state *S = be->strict;
    dps_status rc = S->failed ? sticky_fail(S) : DPS_OK;
    pthread_mutex_lock(&S->mu);
    int sid = rc ? 0 : stream_sid(S, s, "stream_wait", &rc);
    sevent *x = sid ? event_of(S, e, "stream_wait", &rc) : NULL;
    if (x && x->recorded) { /* CUDA: waiting for an event never recorded waits for nothing */
        wait_point w = {x->q, x->ticket};
        rc = sq_push(S->st[sid].q, "stream_wait", run_wait, S->st[sid].inner, S->st[sid].dev,
                     &w, sizeof w, NULL);
    }
    if (x && !rc) {
        advance(S, sid);
        if (x->recorded) join(&S->st[sid].vc, &x->vc);
    }
    pthread_mutex_unlock(&S->mu);
    return rc;
}

dps_status strict_event_sync(backend *be, be_event *e)
{
    strict_state *S = be->strict;
    dps_status rc = DPS_OK;
    pthread_mutex_lock(&S->mu);
    sevent *x = event_of(S, e, "event_sync", &rc);
    if (x && x->recorded) join(&S->host, &x->vc);
    be_event *ie = x ? x->inner : NULL;
    squeue *q = x && x->recorded ? x->q : NULL;
    uint64_t t = q ? x->ticket : 0;
    int sid = q ? x->sid : 0;
    pthread_mutex_unlock(&S->mu);
    if (!x) return rc;
    if (q) {
        sq_wait(q, t);
        DPS_TRY(stream_failed(S, sid, NULL));
    }
    return S->inner->event_sync(be, ie);
}

dps_status strict_event_ms(backend *be, be_event *a, be_event *b, float *ms)
{
    strict_state *S = be->strict;
    dps_status rc = DPS_OK;
    pthread_mutex_lock(&S->mu);
    sevent *x = event_of(S, a, "event_ms", &rc);
    sevent *y = x ? event_of(S, b, "event_ms", &rc) : NULL;
    be_event *ia = x ? x->inner : NULL, *ib = y ? y->inner : NULL;
    for (int k = 0; y && k < 2; k++) {
        const sevent *v = k ? y : x;
        char who[96];
        if (!v->recorded || sq_reached(v->q, v->ticket)) continue;
        rc = dps_fail(DPS_ERR_RUNTIME, "strict mode: event_ms of an event (the %s) that %s has "
                      "not reached yet (CUDA: cudaErrorNotReady); synchronise it first "
                      "(event_sync, or stream_sync of its stream)", k ? "end" : "start",
                      stream_desc(S, v->sid, who, sizeof who));
        y = NULL;
    }
    pthread_mutex_unlock(&S->mu);
    return y ? S->inner->event_ms(be, ia, ib, ms) : rc;
}

/* ---- an op's operands ---- */

/* Operand x of op on stream sid checked as CUDA would: a size that is not
 * negative, a pointer inside a live allocation of the device it is said
 * to be on, the bytes touched inside it. *out: the allocation whose
 * accesses are ordered (NULL: none, pageable host memory or no bytes). */
static dps_status check_operand(strict_state *S, const char *op, int sid, int k,
                                const be_access *x, salloc **out)
{
    char who[96], where[160];
    int dev = x->dev == BE_ON_STREAM ? S->st[sid].dev : x->dev;
    *out = NULL;
    stream_desc(S, sid, who, sizeof who);
    if (x->bytes < 0)
        return dps_fail(DPS_ERR_RUNTIME, "strict mode: %s on %s: operand %d has a negative size "
                        "(%lld bytes); pass sizes of zero or more", op, who, k, (long long)x->bytes);
    if (x->bytes == 0) return DPS_OK;
    if (!x->p)
        return dps_fail(DPS_ERR_RUNTIME, "strict mode: %s on %s: operand %d is NULL with %lld "
                        "bytes to touch; pass the buffer", op, who, k, (long long)x->bytes);
    salloc *a = find(S, x->p);
    if (dev == DPS_HOST && (!a || a->dev == DPS_HOST)) {
        if (!a) return DPS_OK; /* pageable host memory: the copy is synchronous */
    } else if (!a) {
        return dps_fail(DPS_ERR_RUNTIME, "strict mode: %s on %s: operand %d (%p, %lld bytes) is "
                        "not inside any live allocation of device %d (freed, host memory, or "
                        "never allocated); pass device %d's memory", op, who, k, x->p,
                        (long long)x->bytes, dev, dev);
    } else if (a->dev != dev) {
        return dps_fail(DPS_ERR_RUNTIME, "strict mode: %s on %s: operand %d (%p) lies in %s, "
                        "but the op touches %s memory; pass memory of device %d, or issue the op "
                        "on a stream of the memory's device", op, who, k, x->p,
                        alloc_desc(a, where, sizeof where), dev == DPS_HOST ? "host" : "device",
                        dev);
    }
    size_t off = (size_t)((const char *)x->p - a->base);
    if ((uint64_t)x->bytes > a->bytes - off)
        return dps_fail(DPS_ERR_RUNTIME, "strict mode: %s on %s: operand %d touches bytes [%zu, "
                        "%zu) of %s, past its end; fix the size or the offset", op, who, k, off,
                        off + (size_t)x->bytes, alloc_desc(a, where, sizeof where));
    *out = a;
    return DPS_OK;
}

/* The first access kept on a that conflicts with bytes [lo, hi) of an
 * access (write or not) by stream sid at clock vc: on another stream, one
 * of the two a write, and not ordered before; NULL when none. */
static const srec *conflict(const salloc *a, size_t lo, size_t hi, int write, int sid,
                            const vclock *vc)
{
    for (int i = 0; i < a->nr; i++) {
        const srec *r = &a->r[i];
        if (r->sid == sid || r->hi <= lo || hi <= r->lo || !(write || r->write)) continue;
        if (!ordered(vc, r)) return r;
    }
    return NULL;
}

static dps_status race(strict_state *S, const salloc *a, const srec *r, const char *op, int sid,
                       int write, size_t lo, size_t hi)
{
    char mine[96], theirs[96], where[160];
    return dps_fail(DPS_ERR_RUNTIME, "strict mode: race on %s: %s on %s %s bytes [%zu, %zu), "
                    "and %s on %s %s bytes [%zu, %zu) (its op %u) with nothing ordering the two; "
                    "record an event after the first and make the second's stream wait for it "
                    "(stream_wait), or synchronise the host between them",
                    alloc_desc(a, where, sizeof where), r->op,
                    stream_desc(S, r->sid, theirs, sizeof theirs), r->write ? "wrote" : "read",
                    r->lo, r->hi, op, stream_desc(S, sid, mine, sizeof mine),
                    write ? "writes" : "reads", lo, hi, r->seq);
}

/* Keeps the access on a, dropping those it supersedes: by its own stream
 * or ordered before it, inside its bytes, and reads unless it writes. */
static dps_status keep(salloc *a, const srec *n, const vclock *vc)
{
    int j = 0;
    for (int i = 0; i < a->nr; i++) {
        const srec *r = &a->r[i];
        int inside = n->lo <= r->lo && r->hi <= n->hi;
        if (inside && ordered(vc, r) && (n->write || !r->write)) continue;
        a->r[j++] = *r;
    }
    a->nr = j;
    if (a->nr == a->cap) {
        int cap = a->cap ? 2 * a->cap : 8;
        srec *r = realloc(a->r, (size_t)cap * sizeof *r);
        if (!r) return dps_fail(DPS_ERR_RUNTIME, "out of host memory for strict mode's "
                                "access records");
        a->r = r;
        a->cap = cap;
    }
    a->r[a->nr++] = *n;
    return DPS_OK;
}

/* Checks every operand, then orders and keeps each access. Lock held. */
static dps_status issue_locked(strict_state *S, int sid, const char *op, const be_access *acc,
                               int n)
{
    salloc *al[16];
    if (n > 16) return dps_fail(DPS_ERR_RUNTIME, "strict mode: %s declares %d operands, more "
                                "than the 16 kept", op, n);
    for (int k = 0; k < n; k++) DPS_TRY(check_operand(S, op, sid, k, &acc[k], &al[k]));
    uint32_t seq = advance(S, sid);
    const vclock *vc = &S->st[sid].vc;
    for (int k = 0; k < n; k++) {
        if (!al[k]) continue;
        size_t lo = (size_t)((const char *)acc[k].p - al[k]->base), hi = lo + (size_t)acc[k].bytes;
        const srec *r = conflict(al[k], lo, hi, acc[k].write, sid, vc);
        if (r) return race(S, al[k], r, op, sid, acc[k].write, lo, hi);
    }
    for (int k = 0; k < n; k++) {
        if (!al[k]) continue;
        size_t lo = (size_t)((const char *)acc[k].p - al[k]->base);
        srec rec = {lo, lo + (size_t)acc[k].bytes, sid, acc[k].write, seq, op};
        DPS_TRY(keep(al[k], &rec, vc));
    }
    return DPS_OK;
}

dps_status strict_issue(backend *be, be_stream *s, const char *op, const be_access *acc, int n,
                        be_stream **inner)
{
    strict_state *S = be->strict;
    dps_status rc = DPS_OK;
    pthread_mutex_lock(&S->mu);
    int sid = S->failed ? 0 : stream_sid(S, s, op, &rc);
    if (S->failed) rc = sticky_fail(S);
    if (sid) rc = issue_locked(S, sid, op, acc, n);
    if (rc) S->refused = 1;
    if (sid && !rc) *inner = S->st[sid].inner;
    pthread_mutex_unlock(&S->mu);
    return rc;
}

dps_status be_strict_op(backend *be, be_stream *s, const char *op, const be_access *acc, int n)
{
    if (!be->strict) return DPS_OK;
    be_stream *inner;
    return strict_issue(be, s, op, acc, n, &inner);
}

dps_status strict_copy_sync(backend *be, be_stream *s, uint64_t ticket, const void *dst,
                           int dst_dev, const void *src, int src_dev)
{
    strict_state *S = be->strict;
    sstream *st = (sstream *)(void *)s;
    pthread_mutex_lock(&S->mu);
    int to_pageable = dst_dev == DPS_HOST && !find(S, dst);
    int from_pageable = src_dev == DPS_HOST && !find(S, src);
    if (to_pageable) join(&S->host, &st->vc);
    pthread_mutex_unlock(&S->mu);
    if (!to_pageable && !from_pageable) return DPS_OK;
    sq_wait(st->q, ticket);
    return stream_failed(S, (int)(st - S->st), NULL);
}

dps_status strict_copy_stream(backend *be, be_stream *s, int dst_dev, int src_dev)
{
    strict_state *S = be->strict;
    dps_status rc = DPS_OK;
    char who[96], from[24], to[24];
    snprintf(from, sizeof from, src_dev == DPS_HOST ? "host memory" : "device %d", src_dev);
    snprintf(to, sizeof to, dst_dev == DPS_HOST ? "host memory" : "device %d", dst_dev);
    pthread_mutex_lock(&S->mu);
    int sid = stream_sid(S, s, "copy", &rc), dev = sid ? S->st[sid].dev : 0;
    if (sid && dev != dst_dev && dev != src_dev && (dst_dev != DPS_HOST || src_dev != DPS_HOST))
        rc = dps_fail(DPS_ERR_RUNTIME, "strict mode: copy from %s to %s issued on %s, a "
                      "stream of neither end; issue it on a stream of the source's or the "
                      "destination's device", from, to, stream_desc(S, sid, who, sizeof who));
    pthread_mutex_unlock(&S->mu);
    return rc;
}
