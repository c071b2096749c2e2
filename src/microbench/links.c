/* Link matrix (see links.h). Every measured copy moves a known pattern and
 * is checked afterwards; a copy is timed by a pair of events on the stream
 * it runs on, and the median of the samples is kept. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/csv.h"
#include "core/strategy.h"
#include "model/net.h"
#include "microbench/links.h"
#include "results/results_txn.h"
#include "strategies/dp.h"
#include "core/stats.h"
#include "core/util.h"

int links_size_list(const links_sizes *s, uint64_t *out)
{
    int n = 0;
    uint64_t x = s->min < 4 ? 4 : s->min;
    for (; x < s->max && n < LINKS_MAX_SIZES - 1; n++) {
        out[n] = x;
        if (s->factor < 2 || x > UINT64_MAX / (uint64_t)s->factor) break;
        x *= (uint64_t)s->factor;
        x -= x % 4; /* whole 4-byte words, as --sizes */
    }
    if (n < LINKS_MAX_SIZES && (!n || out[n - 1] < s->max)) out[n++] = s->max;
    return n;
}

/* per path and size: 2 host paths a device; 4 one-way methods each way and
 * bidir a pair; the latency once a direction. */
int links_max_rows(int ndev, const links_sizes *sizes)
{
    uint64_t list[LINKS_MAX_SIZES];
    int ns = links_size_list(sizes, list);
    return ns * (2 * ndev + 4 * ndev * ndev) + ndev * ndev + 1;
}

static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }
static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

uint64_t links_config_copy_bytes(const dps_config *c)
{
    net own;
    const net *m = NULL;
    if (config_net(c, &own, &m) != DPS_OK) return DP_COALESCE_BYTES;
    uint64_t n = c->ngpus > 0 ? (uint64_t)c->ngpus : 1, sample = (uint64_t)m->input * sizeof(float);
    uint64_t per = ((uint64_t)c->global_batch + n - 1) / n;
    const dps_strategy *st = dps_strategy_of(c->mode);
    uint64_t batch = (st->per_rank ? per : (uint64_t)c->global_batch) * sample;
    uint64_t logits = per * (uint64_t)m->rows * (uint64_t)m->classes * sizeof(float);
    uint64_t params = (uint64_t)m->params * sizeof(float), tensor = 0;
    for (int t = 0; t < m->ntensors; t++) tensor = max_u64(tensor, (uint64_t)m->counts[t] * sizeof(float));
    net_free(&own);
    uint64_t group = min_u64(params, max_u64(DP_COALESCE_BYTES, tensor)); /* dp's coalesced groups */
    if (st->per_rank) { /* a bucket, or a sharded unit (at most the largest tensor's run) */
        uint64_t cap = c->bucket_mb > 0 ? (uint64_t)(c->bucket_mb * (1 << 20)) : tensor;
        group = min_u64(params, max_u64(cap, tensor)) / n; /* the ring moves bucket / n */
    }
    return max_u64(max_u64(batch, logits), n > 1 ? group : 0); /* one device: no peer copy */
}

typedef struct side {
    int dev;
    be_stream *st;
    be_event *ev[2];
    dps_buf buf, buf2;
} side;

static dps_status side_open(backend *be, int dev, uint64_t bytes, side *s)
{
    memset(s, 0, sizeof *s);
    s->dev = dev;
    DPS_TRY(be->ops->stream_create(be, dev, &s->st));
    DPS_TRY(be->ops->event_create(be, dev, &s->ev[0]));
    DPS_TRY(be->ops->event_create(be, dev, &s->ev[1]));
    DPS_TRY(be_buf_alloc(be, dev, bytes, "link test buffer", &s->buf));
    return be_buf_alloc(be, dev, bytes, "link test buffer", &s->buf2);
}

static void side_close(backend *be, side *s)
{
    be_buf_free(be, &s->buf);
    be_buf_free(be, &s->buf2);
    for (int k = 0; k < 2; k++)
        if (s->ev[k]) be->ops->event_destroy(be, s->ev[k]);
    if (s->st) be->ops->stream_destroy(be, s->st);
    memset(s, 0, sizeof *s);
}

/* Median ms of `samples` copies issued on `on` (one untimed copy first). */
static dps_status time_copy(backend *be, side *on, void *dst, int dd, const void *src, int sd,
                            size_t bytes, int samples, double *ms)
{
    const be_ops *o = be->ops;
    double t[64];
    if (samples > 64) samples = 64;
    DPS_TRY(o->copy(be, on->st, dst, dd, src, sd, bytes));
    for (int k = 0; k < samples; k++) {
        float e = 0.0f;
        DPS_TRY(o->event_record(be, on->ev[0], on->st));
        DPS_TRY(o->copy(be, on->st, dst, dd, src, sd, bytes));
        DPS_TRY(o->event_record(be, on->ev[1], on->st));
        DPS_TRY(o->stream_sync(be, on->st));
        DPS_TRY(o->event_ms(be, on->ev[0], on->ev[1], &e));
        t[k] = e;
    }
    dps_stats st;
    stats_compute(t, samples, &st);
    *ms = st.median;
    return DPS_OK;
}

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)((i * 131u + seed) >> 3);
}

/* Copies `bytes` of buffer (dev, ptr) to the host and compares with the pattern. */
static dps_status verify(backend *be, side *on, const void *ptr, int dev, size_t bytes,
                         unsigned seed, unsigned char *host, int *ok)
{
    DPS_TRY(be->ops->copy(be, on->st, host, DPS_HOST, ptr, dev, bytes));
    DPS_TRY(be->ops->stream_sync(be, on->st));
    *ok = 1;
    for (size_t i = 0; i < bytes && *ok; i++)
        if (host[i] != (unsigned char)((i * 131u + seed) >> 3)) *ok = 0;
    return DPS_OK;
}

static void put(link_row *r, int src, int dst, const char *method, uint64_t bytes, double ms,
                int ok, int latency)
{
    memset(r, 0, sizeof *r);
    r->src = src;
    r->dst = dst;
    dps_strlcpy(r->method, method, sizeof r->method);
    r->bytes = bytes;
    r->gbps = latency ? NAN : (double)bytes / (ms * 1e-3) / 1e9;
    r->latency_us = latency ? ms * 1e3 : NAN;
    dps_strlcpy(r->status, ok ? "ok" : "FAILED (data differs after the copy)", sizeof r->status);
}

typedef struct ctx {
    backend *be;
    uint64_t bytes, cap; /* this copy's size; the buffers' */
    int samples, latency; /* latency: measure each pair's 4-byte copy (the first size only) */
    unsigned char *pattern, *check; /* pinned host buffers */
    link_row *rows;
    int n;
} ctx;

static dps_status upload(ctx *c, side *s, void *dst)
{
    DPS_TRY(c->be->ops->copy(c->be, s->st, dst, s->dev, c->pattern, DPS_HOST, c->bytes));
    return c->be->ops->stream_sync(c->be, s->st);
}

static dps_status host_size(ctx *c, side *a)
{
    double ms;
    int ok, d = a->dev;
    DPS_TRY(time_copy(c->be, a, a->buf.ptr, d, c->pattern, DPS_HOST, c->bytes, c->samples, &ms));
    DPS_TRY(verify(c->be, a, a->buf.ptr, d, c->bytes, 7, c->check, &ok));
    put(&c->rows[c->n++], DPS_HOST, d, "h2d", c->bytes, ms, ok, 0);
    DPS_TRY(time_copy(c->be, a, c->check, DPS_HOST, a->buf.ptr, d, c->bytes, c->samples, &ms));
    put(&c->rows[c->n++], d, DPS_HOST, "d2h", c->bytes, ms,
        memcmp(c->check, c->pattern, c->bytes) == 0, 0);
    return DPS_OK;
}

/* h2d and d2h of device d at every size. */
static dps_status host_links(ctx *c, int d, const uint64_t *sizes, int ns)
{
    side a;
    dps_status rc = side_open(c->be, d, c->cap, &a);
    for (int k = 0; !rc && k < ns; k++) {
        c->bytes = sizes[k];
        rc = host_size(c, &a);
    }
    side_close(c->be, &a);
    return rc;
}

/* src -> dst with the source's peer access switched off (the copy is staged
 * through the host); WAIVED where there is no peer access to switch. */
static dps_status nopeer_link(ctx *c, side *s, side *d)
{
    link_row *r = &c->rows[c->n++];
    dps_status rc = c->be->ops->peer_access(c->be, s->dev, d->dev, 0);
    if (rc == DPS_WAIVED) { /* a row that says so; the matrix goes on */
        put(r, s->dev, d->dev, "d2d_nopeer", c->bytes, 1.0, 1, 0);
        r->gbps = NAN;
        snprintf(r->status, sizeof r->status, "WAIVED (no peer access to switch off)");
        return DPS_OK;
    }
    DPS_TRY(rc);
    double ms;
    int ok = 0;
    rc = time_copy(c->be, s, d->buf.ptr, d->dev, s->buf.ptr, s->dev, c->bytes, c->samples, &ms);
    if (!rc) rc = verify(c->be, d, d->buf.ptr, d->dev, c->bytes, 7, c->check, &ok);
    dps_status back = c->be->ops->peer_access(c->be, s->dev, d->dev, 1);
    DPS_TRY(rc);
    DPS_TRY(back);
    put(r, s->dev, d->dev, "d2d_nopeer", c->bytes, ms, ok, 0);
    return DPS_OK;
}

/* src -> dst, issued on the source's stream (write) or the destination's (read). */
static dps_status pair_links(ctx *c, side *s, side *d)
{
    double ms;
    int ok;
    DPS_TRY(upload(c, s, s->buf.ptr));
    side *issuer[2] = {s, d};
    static const char *const names[2] = {"d2d_write", "d2d_read"};
    for (int k = 0; k < 2; k++) {
        DPS_TRY(c->be->ops->memset0(c->be, d->st, d->buf.ptr, c->bytes));
        DPS_TRY(c->be->ops->stream_sync(c->be, d->st));
        DPS_TRY(time_copy(c->be, issuer[k], d->buf.ptr, d->dev, s->buf.ptr, s->dev, c->bytes,
                          c->samples, &ms));
        DPS_TRY(verify(c->be, d, d->buf.ptr, d->dev, c->bytes, 7, c->check, &ok));
        put(&c->rows[c->n++], s->dev, d->dev, names[k], c->bytes, ms, ok, 0);
    }
    if (c->latency) {
        DPS_TRY(time_copy(c->be, s, d->buf.ptr, d->dev, s->buf.ptr, s->dev, 4, 20, &ms));
        put(&c->rows[c->n++], s->dev, d->dev, "latency", 4, ms, 1, 1);
    }
    return nopeer_link(c, s, d);
}

typedef struct bidir_arg {
    ctx *c;
    side *from, *to;
    pthread_barrier_t *start;
    double ms;
    dps_status rc;
} bidir_arg;

static void *bidir_main(void *p)
{
    bidir_arg *a = p;
    a->rc = a->c->be->ops->set_device(a->c->be, a->from->dev);
    pthread_barrier_wait(a->start);
    if (!a->rc)
        a->rc = time_copy(a->c->be, a->from, a->to->buf2.ptr, a->to->dev, a->from->buf.ptr,
                          a->from->dev, a->c->bytes, a->c->samples, &a->ms);
    return NULL;
}

/* Both directions at once, each from its own thread and stream. */
static dps_status bidir_links(ctx *c, side *s, side *d)
{
    DPS_TRY(upload(c, s, s->buf.ptr));
    DPS_TRY(upload(c, d, d->buf.ptr));
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, 2);
    bidir_arg a[2] = {{c, s, d, &start, 0, DPS_OK}, {c, d, s, &start, 0, DPS_OK}};
    pthread_t th;
    int started = pthread_create(&th, NULL, bidir_main, &a[1]) == 0;
    if (started) {
        bidir_main(&a[0]);
        pthread_join(th, NULL);
    }
    pthread_barrier_destroy(&start);
    if (!started) return dps_fail(DPS_ERR_RUNTIME, "links: cannot start a copy thread");
    DPS_TRY(a[0].rc);
    DPS_TRY(a[1].rc);
    int ok0, ok1;
    DPS_TRY(verify(c->be, d, d->buf2.ptr, d->dev, c->bytes, 7, c->check, &ok0));
    DPS_TRY(verify(c->be, s, s->buf2.ptr, s->dev, c->bytes, 7, c->check, &ok1));
    link_row *r = &c->rows[c->n++];
    put(r, s->dev, d->dev, "d2d_bidir", c->bytes, 1.0, ok0 && ok1, 0); /* bytes: each way */
    r->gbps = (double)c->bytes / (a[0].ms * 1e-3) / 1e9 + (double)c->bytes / (a[1].ms * 1e-3) / 1e9;
    return DPS_OK;
}

/* The two pinned host buffers of the copies to and from the host, the pattern filled. */
static dps_status host_buffers(ctx *c)
{
    dps_status rc = c->be->ops->host_alloc(c->be, c->cap, (void **)&c->pattern);
    if (!rc) rc = c->be->ops->host_alloc(c->be, c->cap, (void **)&c->check);
    if (!rc) {
        fill(c->pattern, c->cap, 7);
        return DPS_OK;
    }
    char why[DPS_ERRMSG_MAX], size[32]; /* dps_fail writes the buffer dps_errmsg reads */
    dps_strlcpy(why, dps_errmsg(), sizeof why);
    return dps_fail(rc, "links: the two host buffers of %s (the largest copy): %s; give a "
                    "smaller --link-max-bytes (or --sizes)",
                    dps_fmt_bytes_suffix(c->cap, size, sizeof size), why);
}

/* Every path between devices s and d, both ways, at every size. */
static dps_status pair_sizes(ctx *c, int s, int d, const uint64_t *sizes, int ns)
{
    side a = {0}, b = {0};
    dps_status rc = side_open(c->be, s, c->cap, &a);
    if (!rc) rc = side_open(c->be, d, c->cap, &b);
    for (int k = 0; !rc && k < ns; k++) {
        c->bytes = sizes[k];
        c->latency = k == 0;
        rc = pair_links(c, &a, &b);
        if (!rc) rc = pair_links(c, &b, &a);
        if (!rc) rc = bidir_links(c, &a, &b);
    }
    side_close(c->be, &a);
    side_close(c->be, &b);
    return rc;
}

dps_status links_measure(backend *be, int ndev, const links_sizes *sizes, int samples,
                         link_row *rows, int *nrows)
{
    uint64_t list[LINKS_MAX_SIZES];
    int ns = links_size_list(sizes, list);
    ctx c = {.be = be, .cap = list[ns - 1], .samples = samples, .rows = rows};
    dps_status rc = host_buffers(&c);
    for (int d = 0; !rc && d < ndev; d++) rc = host_links(&c, d, list, ns);
    for (int s = 0; !rc && s < ndev; s++)
        for (int d = s + 1; !rc && d < ndev; d++) rc = pair_sizes(&c, s, d, list, ns);
    if (c.pattern) be->ops->host_free(be, c.pattern);
    if (c.check) be->ops->host_free(be, c.check);
    *nrows = c.n;
    return rc;
}

static void endpoint(int dev, char *buf, size_t len)
{
    if (dev == DPS_HOST) snprintf(buf, len, "host");
    else snprintf(buf, len, "dev%d", dev);
}

/* links.csv's columns, in the order links_write writes them. */
static const char *const links_cols[] = {"src", "dst", "method", "bytes", "bw_gbps", "latency_us",
                                         "status", "backend", "emulated"};
static const results_table links_table = {
    "links.csv", links_cols, (int)(sizeof links_cols / sizeof links_cols[0]), "the link matrix"};

dps_status links_check_header(const results_dir *rd)
{
    return results_check_header(rd, links_table.name, links_table.cols, links_table.ncols);
}

dps_status links_write(const results_dir *rd, const backend *be, const link_row *rows, int n)
{
    csv_buf b;
    csv_init(&b);
    for (int i = 0; i < n; i++) {
        char s[16], d[16];
        endpoint(rows[i].src, s, sizeof s);
        endpoint(rows[i].dst, d, sizeof d);
        csv_str(&b, s);
        csv_str(&b, d);
        csv_str(&b, rows[i].method);
        csv_u64(&b, rows[i].bytes);
        csv_num(&b, rows[i].gbps, 3);
        csv_num(&b, rows[i].latency_us, 2);
        csv_str(&b, rows[i].status);
        csv_str(&b, be->ops->name);
        csv_int(&b, be->emulated);
        csv_end_row(&b);
    }
    dps_status rc = results_commit_table(rd, &links_table, &b);
    csv_free(&b);
    return rc;
}

/* The row of (s, d, method) at `bytes`, or at its largest size when bytes is 0. */
static const link_row *find(const link_row *rows, int n, int s, int d, const char *method,
                            uint64_t bytes)
{
    const link_row *best = NULL;
    for (int i = 0; i < n; i++)
        if (rows[i].src == s && rows[i].dst == d && strcmp(rows[i].method, method) == 0 &&
            (bytes ? rows[i].bytes == bytes : !best || rows[i].bytes > best->bytes))
            best = &rows[i];
    return best;
}

/* Bandwidth by copy size of device 0's paths (and 0 -> 1's), one line a size. */
static void print_by_size(FILE *f, int ndev, const link_row *rows, int n)
{
    static const char *const methods[] = {"h2d", "d2h", "d2d_write", "d2d_read"};
    fprintf(f, "\nGB/s by copy size  %10s %10s %10s %10s\n", "h2d 0", "d2h 0", "write 0>1",
            "read 0>1");
    for (int i = 0; i < n; i++) {
        if (strcmp(rows[i].method, "h2d") != 0 || rows[i].dst != 0) continue;
        char size[32];
        fprintf(f, "%-18s", dps_fmt_bytes_suffix(rows[i].bytes, size, sizeof size));
        for (int m = 0; m < 4; m++) {
            int s = m == 0 ? DPS_HOST : 0, d = m == 1 ? DPS_HOST : m == 0 ? 0 : 1;
            const link_row *r = m < 2 || ndev > 1 ? find(rows, n, s, d, methods[m], rows[i].bytes) : NULL;
            fprintf(f, " %10.2f", r && strcmp(r->status, "ok") == 0 ? r->gbps : NAN);
        }
        fprintf(f, "\n");
    }
}

/* One matrix per method, source down, destination across; N/A where unmeasured. */
void links_print(FILE *f, const backend *be, int ndev, const link_row *rows, int n)
{
    static const char *const methods[] = {"d2d_write", "d2d_read", "d2d_bidir", "d2d_nopeer",
                                          "latency"};
    fprintf(f, "# dpscale links, %s backend%s\n", be->ops->name,
            be->emulated ? " (emulated devices: memcpy between host arenas, not a GPU link)" : "");
    const link_row *top = find(rows, n, DPS_HOST, 0, "h2d", 0);
    char size[32];
    fprintf(f, "# matrices at the largest copy, %s; the sizes below\n",
            top ? dps_fmt_bytes_suffix(top->bytes, size, sizeof size) : "-");
    fprintf(f, "%-10s", "GB/s");
    for (int d = 0; d < ndev; d++) fprintf(f, " %9s%d", "dev", d);
    fprintf(f, "\n%-10s", "h2d");
    for (int d = 0; d < ndev; d++) {
        const link_row *r = find(rows, n, DPS_HOST, d, "h2d", 0);
        fprintf(f, " %10.2f", r ? r->gbps : NAN);
    }
    fprintf(f, "\n%-10s", "d2h");
    for (int d = 0; d < ndev; d++) {
        const link_row *r = find(rows, n, d, DPS_HOST, "d2h", 0);
        fprintf(f, " %10.2f", r ? r->gbps : NAN);
    }
    fprintf(f, "\n");
    for (size_t m = 0; m < sizeof methods / sizeof methods[0]; m++) {
        int lat = strcmp(methods[m], "latency") == 0;
        fprintf(f, "\n%s (%s), source down, destination across\n", methods[m], lat ? "us" : "GB/s");
        for (int s = 0; s < ndev; s++) {
            fprintf(f, "dev%-7d", s);
            for (int d = 0; d < ndev; d++) {
                const link_row *r = find(rows, n, s, d, methods[m], 0);
                if (!r && strcmp(methods[m], "d2d_bidir") == 0) r = find(rows, n, d, s, methods[m], 0);
                if (!r || strncmp(r->status, "WAIVED", 6) == 0) fprintf(f, " %10s", "N/A");
                else if (strcmp(r->status, "ok") != 0) fprintf(f, " %10s", "FAILED");
                else fprintf(f, " %10.2f", lat ? r->latency_us : r->gbps);
            }
            fprintf(f, "\n");
        }
    }
    print_by_size(f, ndev, rows, n);
}
