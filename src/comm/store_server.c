/* The store's server (see store.h): global rank 0 runs it on a thread that
 * polls every connection and never waits on one: it reads each frame as
 * its bytes come and queues what it answers. It keeps the keys, answers
 * the ranks waiting for one, and turns a rank's closed control connection
 * into the group's failure, told to every other rank. What any peer can
 * make it hold is bounded by the world's size and what it waits for by
 * --timeout (docs/DESIGN.md, "The store's bounds"); a peer past a bound is
 * refused, named, and a rank's own connection refused fails the group. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend.h"
#include "comm/store_keys.h"
#include "comm/store_wire.h"
#include "core/util.h"

#define MAX_CONNS (2 * DPS_MAX_DEVICES + STORE_CONNS_SPARE)
#define READ_BUDGET ((size_t)1 << 20) /* bytes read from one connection a round */
#define FRAMES_A_ROUND 64             /* frames taken from one connection a round */
#define CLOSE_GRACE_MS 1000.0         /* for a refused peer to read why */
#define REFUSALS_SHOWN 16             /* on stderr; the rest counted */

typedef struct member {
    int arrived, finished, gone, pid, step, waiting, ctl_fd, req_fd, nkeys, nrecords;
    char host[STORE_HOST_MAX], addr[64], nic[32];
} member;

typedef struct waiter { int fd, owner; char key[STORE_KEY_MAX]; } waiter;

typedef struct conn {
    int fd, rank, ctl; /* rank -1 until its hello */
    int dead;          /* to close at the end of the round */
    int closing;       /* refused: its last word leaves, then it is closed */
    int waits;         /* a GET of it waits for its key */
    char peer[80];     /* "address:port" */
    double since_ms;   /* accepted; a refused one: refused */
    double frame_ms;   /* when the frame being read began */
    double out_ms;     /* when queued output last moved (or was queued) */
    store_reader in;
    char *out;         /* queued output: out_off..out_len not yet sent */
    size_t out_len, out_off, out_cap;
} conn;

struct store_server {
    int listen_fd, wake[2], nranks, narrived, port, max_conns, refusals;
    double arrive_by, timeout_s, limit_ms; /* limit_ms: --timeout, or none */
    pthread_t thread;
    int serving;         /* the thread runs (store_server_serve) */
    pthread_mutex_t mu;  /* failure, why, members and what begin sets, for the caller's thread */
    dps_status failure;
    int failure_asked;   /* a rank asked for the abort (the others: the server saw it) */
    char why[DPS_ERRMSG_MAX];
    member m[DPS_MAX_DEVICES];
    conn conns[MAX_CONNS];
    int nconns;
    store_keys keys;
    waiter waiters[MAX_CONNS]; /* one a connection at most */
    int nwaiters;
    size_t records_max[2];  /* a record's limit: this configuration's, the one before */
    char begun[32];         /* the prefix store_server_begin gave last */
    int begin_pending;
    char live[2][32];       /* the prefixes whose keys are kept: last begun, the one before */
};

static conn *conn_of(store_server *s, int fd)
{
    for (int i = 0; i < s->nconns; i++)
        if (s->conns[i].fd == fd) return &s->conns[i];
    return NULL;
}

/* A record's limit: the larger of this configuration's and the last one's. */
static size_t records_limit(store_server *s)
{
    pthread_mutex_lock(&s->mu);
    size_t r = s->records_max[0] > s->records_max[1] ? s->records_max[0] : s->records_max[1];
    pthread_mutex_unlock(&s->mu);
    return r;
}

/* The most answers a peer may leave unread: one value and a few words
 * (a rank asks for one key at a time). */
static size_t out_max(store_server *s)
{
    size_t v = store_rendezvous_max(s->nranks), r = store_roster_max(s->nranks);
    size_t rec = records_limit(s);
    v = r > v ? r : v;
    v = rec > v ? rec : v;
    return v + 4 * (STORE_HEAD_BYTES + STORE_KEY_MAX + STORE_WORDS_MAX);
}

/* src's printable part, for a message about what a peer sent. */
static void printable(char *dst, size_t len, const char *src, size_t n)
{
    size_t i = 0;
    for (; i < n && i + 1 < len; i++) {
        unsigned char ch = (unsigned char)src[i];
        dst[i] = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
    }
    dst[i] = '\0';
}

/* Sends what c has queued, as far as its peer takes it now; a refused
 * one's end follows its last word. */
static void flush(conn *c)
{
    while (c->out_off < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (n <= 0) {
            c->dead = 1;
            return;
        }
        c->out_off += (size_t)n;
        c->out_ms = dps_now_ms();
    }
    c->out_off = c->out_len = 0;
    if (c->out_cap > ((size_t)1 << 16)) { /* a record's room given back */
        free(c->out);
        c->out = NULL;
        c->out_cap = 0;
    }
    if (c->closing) shutdown(c->fd, SHUT_WR);
}

static void refuse(store_server *s, conn *c, int say, const char *what);

/* Queues one frame to c and sends what its peer takes now. */
static void reply(store_server *s, conn *c, store_type type, const char *key, const void *val,
                  size_t len)
{
    if (!c || c->dead || (c->closing && type != ST_ABORT)) return;
    if (c->out_off) { /* what was sent makes room */
        memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
        c->out_len -= c->out_off;
        c->out_off = 0;
    }
    size_t klen = strlen(key), need = c->out_len + STORE_HEAD_BYTES + klen + len;
    if (need > out_max(s)) {
        char what[160];
        snprintf(what, sizeof what, "it leaves %zu bytes of answers unread (a rank reads each "
                 "answer before it asks again)", need);
        if (c->closing) c->dead = 1;
        else refuse(s, c, 0, what);
        return;
    }
    if (need > c->out_cap) {
        char *grown = realloc(c->out, need);
        if (!grown) {
            c->dead = 1;
            return;
        }
        c->out = grown;
        c->out_cap = need;
    }
    store_head((unsigned char *)c->out + c->out_len, type, klen, len);
    memcpy(c->out + c->out_len + STORE_HEAD_BYTES, key, klen);
    if (len) memcpy(c->out + c->out_len + STORE_HEAD_BYTES + klen, val, len);
    if (c->out_len == 0) c->out_ms = dps_now_ms(); /* the clock of an unread answer starts */
    c->out_len = need;
    flush(c);
}

static void reply_fd(store_server *s, int fd, store_type type, const char *key, const void *val,
                     size_t len)
{
    reply(s, conn_of(s, fd), type, key, val, len);
}

static void drop_waiter(store_server *s, int i)
{
    conn *c = conn_of(s, s->waiters[i].fd);
    if (c) c->waits = 0;
    s->waiters[i] = s->waiters[--s->nwaiters];
}

/* Answers the waiters that `done` selects with type and val. */
static void answer(store_server *s, int (*done)(const waiter *, const void *), const void *arg,
                   store_type type, const char *val, size_t len)
{
    for (int i = 0; i < s->nwaiters;)
        if (done(&s->waiters[i], arg)) {
            reply_fd(s, s->waiters[i].fd, type, s->waiters[i].key, val, len);
            drop_waiter(s, i);
        } else i++;
}

static int wants_key(const waiter *w, const void *key) { return strcmp(w->key, key) == 0; }
static int owned_by(const waiter *w, const void *rank) { return w->owner == *(const int *)rank; }
static int ownerless(const waiter *w, const void *arg) { (void)arg; return w->owner < 0; }

/* A key's value no longer counted against the rank that set it. */
static void uncount(store_server *s, const store_key *e)
{
    if (e->owner < 0) return;
    if (e->record) s->m[e->owner].nrecords--;
    else s->m[e->owner].nkeys--;
}

static void count(store_server *s, const store_key *e)
{
    if (e->owner < 0) return;
    if (e->record) s->m[e->owner].nrecords++;
    else s->m[e->owner].nkeys++;
}

/* key set to val (taken) for owner, its waiters answered; -1 when the
 * table is full (val freed). */
static int put_key(store_server *s, const char *key, char *val, size_t len, int owner, int record)
{
    store_key *e = store_keys_find(&s->keys, key);
    if (e) {
        uncount(s, e);
        free(e->val);
        *e = (store_key){.val = val, .len = len, .owner = owner, .record = record};
        dps_strlcpy(e->key, key, sizeof e->key);
    } else if (!(e = store_keys_add(&s->keys, key, val, len, owner, record))) {
        free(val);
        return -1;
    }
    count(s, e);
    answer(s, wants_key, key, ST_VAL, e->val, e->len);
    return 0;
}

/* The group's first failure: recorded, and every rank's control connection
 * but except_fd told to abort. */
static void group_fail(store_server *s, dps_status code, const char *why, int except_fd)
{
    pthread_mutex_lock(&s->mu);
    int first = !s->failure;
    if (first) {
        s->failure = code;
        s->failure_asked = except_fd >= 0;
        dps_strlcpy(s->why, why, sizeof s->why);
    }
    pthread_mutex_unlock(&s->mu);
    if (!first) return;
    for (int r = 0; r < s->nranks; r++)
        if (s->m[r].ctl_fd >= 0 && s->m[r].ctl_fd != except_fd)
            reply_fd(s, s->m[r].ctl_fd, ST_ABORT, "", why, strlen(why));
    answer(s, ownerless, NULL, ST_GONE, why, strlen(why));
}

static void set_roster(store_server *s)
{
    size_t cap = store_roster_max(s->nranks), n = 0;
    char *buf = malloc(cap + 1);
    for (int r = 0; buf && r < s->nranks && n < cap; r++)
        n += (size_t)snprintf(buf + n, cap + 1 - n, "%d %d %s %s %s\n", r, s->m[r].pid,
                              s->m[r].host, s->m[r].addr, s->m[r].nic);
    n = n < cap ? n : cap; /* a line fits STORE_ROSTER_LINE_MAX: never cut */
    if (!buf || put_key(s, STORE_ROSTER_KEY, buf, n, -1, 0) != 0)
        group_fail(s, DPS_ERR_RUNTIME, "store: out of host memory for the roster", -1);
}

static void peer_addr(int fd, char *buf, size_t len)
{
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    buf[0] = '\0';
    if (getpeername(fd, (struct sockaddr *)&sa, &sl) != 0) return;
    if (sa.ss_family == AF_INET)
        inet_ntop(AF_INET, &((struct sockaddr_in *)&sa)->sin_addr, buf, (socklen_t)len);
    else if (sa.ss_family == AF_INET6) {
        const struct in6_addr *a = &((struct sockaddr_in6 *)&sa)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(a)) inet_ntop(AF_INET, &a->s6_addr[12], buf, (socklen_t)len);
        else inet_ntop(AF_INET6, a, buf, (socklen_t)len);
    }
}

/* "address:port" of fd's peer, for the messages that name it. */
static void peer_name(int fd, char *buf, size_t len)
{
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    char addr[64];
    peer_addr(fd, addr, sizeof addr);
    int port = 0;
    if (getpeername(fd, (struct sockaddr *)&sa, &sl) == 0)
        port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                              : ((struct sockaddr_in *)&sa)->sin_port);
    snprintf(buf, len, strchr(addr, ':') ? "[%s]:%d" : "%s:%d", addr[0] ? addr : "?", port);
}

/* The rank c is the connection of, if c is that rank's own. */
static member *member_of(store_server *s, const conn *c)
{
    if (c->rank < 0) return NULL;
    member *m = &s->m[c->rank];
    return m->ctl_fd == c->fd || m->req_fd == c->fd ? m : NULL;
}

static void describe(store_server *s, const conn *c, char *buf, size_t len)
{
    if (c->rank < 0) snprintf(buf, len, "%s (before its hello)", c->peer);
    else snprintf(buf, len, "%s (rank %d's %s connection, pid %d on host %s)", c->peer, c->rank,
                  c->ctl ? "control" : "request", s->m[c->rank].pid, s->m[c->rank].host);
}

/* A rank that has ended (BYE) or is gone: its keys will never come. */
static void rank_ended(store_server *s, int rank, const char *why)
{
    answer(s, owned_by, &rank, ST_GONE, why, strlen(why));
}

/* Refuses c for what it did: said on stderr (the first REFUSALS_SHOWN),
 * to the peer (say: it still reads its answers) and, when c is a rank's
 * own, to the group, which fails; c is closed once that has left. */
static void refuse(store_server *s, conn *c, int say, const char *what)
{
    if (c->dead || c->closing) return;
    char who[192], line[DPS_ERRMSG_MAX];
    describe(s, c, who, sizeof who);
    snprintf(line, sizeof line, "rank 0's store (port %d) refused %s: %s", s->port, who, what);
    if (s->refusals++ < REFUSALS_SHOWN) fprintf(stderr, "dpscale: %s\n", line);
    else if (s->refusals == REFUSALS_SHOWN + 1)
        fprintf(stderr, "dpscale: rank 0's store (port %d): further refusals not shown\n", s->port);
    member *m = member_of(s, c);
    if (m) {
        group_fail(s, DPS_ERR_RUNTIME, line, c->fd);
        pthread_mutex_lock(&s->mu);
        m->gone = 1; /* its end is this refusal, not "without a word" */
        pthread_mutex_unlock(&s->mu);
        rank_ended(s, c->rank, line);
    }
    c->closing = 1;
    c->since_ms = dps_now_ms();
    if (say) reply(s, c, ST_ABORT, "", what, strlen(what));
    else c->dead = 1;
}

static void two_claims(const member *m, int rank, int pid, const char *host, char *what, size_t len)
{
    snprintf(what, len, "two processes claim rank %d: pid %d on host %s, in the job, and pid %d on "
             "host %s, which came later (two jobs on one port? give each its own DPSCALE_PORT)",
             rank, m->pid, m->host, pid, host);
}

/* Why rank's control hello from pid on host is refused ("" when taken). */
static void ctl_refusal(store_server *s, int rank, int pid, const char *host, char *what,
                        size_t len)
{
    const member *m = &s->m[rank];
    what[0] = '\0';
    if (m->arrived) two_claims(m, rank, pid, host, what, len);
    else if (s->failure) /* too late: the group is over */
        dps_strlcpy(what, s->why, len);
}

/* Why rank's request hello is refused ("" when taken): it comes from the
 * process that holds rank's control connection, once. */
static void req_refusal(store_server *s, int rank, int pid, const char *host, char *what,
                        size_t len)
{
    const member *m = &s->m[rank];
    what[0] = '\0';
    if (!m->arrived)
        snprintf(what, len, "its request connection for rank %d came before that rank's control "
                 "connection (a dpscale of another version?)", rank);
    else if (m->pid != pid || strcmp(m->host, host) != 0) two_claims(m, rank, pid, host, what, len);
    else if (m->req_fd >= 0)
        snprintf(what, len, "rank %d (pid %d on host %s) has a request connection already", rank,
                 pid, host);
}

/* A rank's control connection taken: it has arrived. */
static void take_ctl(store_server *s, conn *c, int rank, int pid, const char *host, const char *nic)
{
    member *m = &s->m[rank];
    pthread_mutex_lock(&s->mu);
    *m = (member){.arrived = 1, .pid = pid, .step = -1, .ctl_fd = c->fd, .req_fd = -1};
    dps_strlcpy(m->host, host, sizeof m->host);
    dps_strlcpy(m->nic, nic, sizeof m->nic);
    peer_addr(c->fd, m->addr, sizeof m->addr);
    pthread_mutex_unlock(&s->mu);
}

/* HELLO "rank pid host nic" on a new connection: taken (and said so), or refused. */
static void on_hello(store_server *s, conn *c, const store_frame *f)
{
    int rank, pid, ctl = strcmp(f->key, "ctl") == 0;
    char host[STORE_HOST_MAX], nic[32], what[DPS_ERRMSG_MAX];
    if ((!ctl && strcmp(f->key, "req") != 0) ||
        sscanf(f->val, "%d %d %63s %31s", &rank, &pid, host, nic) != 4 || rank < 0 ||
        rank >= s->nranks) {
        char said[96];
        printable(said, sizeof said, f->val, f->len);
        snprintf(what, sizeof what, "its hello (%s \"%s\") names no rank of this %d-rank world "
                 "(is every rank the same dpscale, started by the same launcher?)",
                 ctl ? "ctl" : "req", said, s->nranks);
        refuse(s, c, 1, what);
        return;
    }
    if (ctl) ctl_refusal(s, rank, pid, host, what, sizeof what);
    else req_refusal(s, rank, pid, host, what, sizeof what);
    if (what[0]) {
        refuse(s, c, 1, what);
        return;
    }
    c->rank = rank;
    c->ctl = ctl;
    if (ctl) take_ctl(s, c, rank, pid, host, nic);
    else s->m[rank].req_fd = c->fd;
    reply(s, c, ST_VAL, f->key, "", 0);
    if (ctl && ++s->narrived == s->nranks) set_roster(s);
}

/* SET from a rank: a rendezvous key on its request connection, a record
 * on its control one, each within the rank's share. */
static void on_set(store_server *s, conn *c, store_frame *f)
{
    member *m = &s->m[c->rank];
    const store_key *e = store_keys_find(&s->keys, f->key);
    int record = c->ctl, same = e && e->owner == c->rank && e->record == record;
    int held = record ? m->nrecords : m->nkeys;
    int cap = record ? STORE_RECORDS_PER_RANK : STORE_KEYS_PER_RANK;
    if (!same && held >= cap) {
        char what[DPS_ERRMSG_MAX], key[96];
        printable(key, sizeof key, f->key, strlen(f->key));
        snprintf(what, sizeof what, "it set %s %s beyond the %d %s a rank needs at most (is "
                 "every rank the same dpscale?)", record ? "record" : "key", key, cap,
                 record ? "records" : "keys");
        refuse(s, c, 1, what);
        return;
    }
    char *val = f->val;
    f->val = NULL; /* the key's now */
    if (put_key(s, f->key, val, f->len, c->rank, record) != 0)
        refuse(s, c, 1, "the store is full (its keys' count is every rank's share)");
}

/* GET's answer: the value, why it will never come, or a place in the queue. */
static void on_get(store_server *s, conn *c, const store_frame *f)
{
    int owner = atoi(f->val);
    const store_key *e = store_keys_find(&s->keys, f->key);
    char why[DPS_ERRMSG_MAX] = "";
    if (c->waits) {
        refuse(s, c, 1, "it asked for a second key before the first came (a rank asks for one "
               "at a time)");
        return;
    }
    if (e) {
        reply(s, c, ST_VAL, f->key, e->val, e->len);
        return;
    }
    if (owner >= 0 && owner < s->nranks && (s->m[owner].gone || s->m[owner].finished))
        snprintf(why, sizeof why, "rank %d (pid %d on host %s) ended without setting %s", owner,
                 s->m[owner].pid, s->m[owner].host, f->key);
    else if (owner < 0 && s->failure) dps_strlcpy(why, s->why, sizeof why);
    else if (s->nwaiters == MAX_CONNS)
        dps_strlcpy(why, "store: every connection waits", sizeof why);
    if (why[0]) {
        reply(s, c, ST_GONE, f->key, why, strlen(why));
        return;
    }
    waiter *w = &s->waiters[s->nwaiters++];
    *w = (waiter){.fd = c->fd, .owner = owner};
    dps_strlcpy(w->key, f->key, sizeof w->key);
    c->waits = 1;
}

static void on_lost(store_server *s, conn *c)
{
    member *m = &s->m[c->rank];
    if (!c->ctl || m->ctl_fd != c->fd || m->finished || m->gone) return;
    pthread_mutex_lock(&s->mu);
    m->gone = 1;
    m->ctl_fd = -1;
    pthread_mutex_unlock(&s->mu);
    char why[DPS_ERRMSG_MAX];
    snprintf(why, sizeof why, "rank %d (pid %d on host %s) ended without a word: it exited or was "
             "killed (its launcher's log says how); the other ranks waited for it in vain",
             c->rank, m->pid, m->host);
    group_fail(s, DPS_ERR_RUNTIME, why, -1);
    rank_ended(s, c->rank, why);
}

static void on_bye(store_server *s, conn *c)
{
    member *m = &s->m[c->rank];
    char why[DPS_ERRMSG_MAX];
    pthread_mutex_lock(&s->mu);
    m->finished = 1;
    pthread_mutex_unlock(&s->mu);
    snprintf(why, sizeof why, "rank %d (pid %d on host %s) ended without setting the key asked "
             "for (its own output says why)", c->rank, m->pid, m->host);
    rank_ended(s, c->rank, why);
}

/* One frame from c, its hello first. */
static void on_frame(store_server *s, conn *c, store_frame *f)
{
    char what[128];
    if (c->rank < 0 && f->type == ST_HELLO) {
        on_hello(s, c, f);
        return;
    }
    member *m = c->rank >= 0 ? &s->m[c->rank] : NULL;
    switch (m ? f->type : 0) {
    case ST_SET: on_set(s, c, f); return;
    case ST_GET: on_get(s, c, f); return;
    case ST_BEAT:
        pthread_mutex_lock(&s->mu);
        if (sscanf(f->val, "%d %d", &m->step, &m->waiting) != 2) m->waiting = 0;
        pthread_mutex_unlock(&s->mu);
        return;
    case ST_BYE: on_bye(s, c); return;
    case ST_ABORT: group_fail(s, DPS_ERR_RUNTIME, f->val, c->fd); return;
    default:
        snprintf(what, sizeof what, "it sent a frame of type %d %s (a dpscale of another "
                 "version?)", (int)f->type, m ? "that a rank does not send" : "before its hello");
        refuse(s, c, 1, what);
    }
}

/* What c's reader refused, said to the peer; a peer gone mid-frame is gone. */
static void read_failed(store_server *s, conn *c, int err)
{
    const store_frame *f = &c->in.f;
    char what[DPS_ERRMSG_MAX], key[96], limit[160];
    printable(key, sizeof key, f->key, strlen(f->key));
    if (err == EMSGSIZE && c->rank < 0)
        snprintf(limit, sizeof limit, "nothing but a hello of at most %zu bytes comes first",
                 STORE_WORDS_MAX);
    else if (err == EMSGSIZE && f->type != ST_SET)
        snprintf(limit, sizeof limit, "a frame of type %d carries at most %zu bytes", (int)f->type,
                 STORE_WORDS_MAX);
    else if (err == EMSGSIZE && c->ctl)
        snprintf(limit, sizeof limit, "this configuration's records are %zu bytes at most (is "
                 "every rank the same dpscale with the same options?)", records_limit(s));
    else if (err == EMSGSIZE)
        snprintf(limit, sizeof limit, "a key of a %d-rank world holds %zu bytes at most",
                 s->nranks, store_rendezvous_max(s->nranks));
    if (err == EMSGSIZE)
        snprintf(what, sizeof what, "it sent %zu bytes for key \"%s\" (frame type %d); %s", f->len,
                 key, (int)f->type, limit);
    else if (err == EPROTO)
        snprintf(what, sizeof what, "it sent bytes that are no store frame (type %d, key length "
                 "%zu; a dpscale of another version, or not dpscale?)", (int)c->in.head[0],
                 c->in.klen);
    else if (err == ENOMEM)
        snprintf(what, sizeof what, "rank 0 is out of host memory for its frame of %zu bytes",
                 f->len);
    else {
        c->dead = 1; /* gone, mid-frame or not: a rank's loss is seen as it closes */
        return;
    }
    refuse(s, c, 1, what);
}

/* What a refused peer still sends is read and dropped, until its end. */
static void discard(conn *c)
{
    char buf[65536];
    for (size_t taken = 0; taken < READ_BUDGET;) {
        ssize_t n = recv(c->fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR) continue;
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) c->dead = 1;
        if (n <= 0) return;
        taken += (size_t)n;
    }
}

/* The largest value c may send: nothing before its hello, a record on a
 * control connection, a rendezvous key on a request one. */
static size_t value_limit(store_server *s, const conn *c)
{
    if (c->rank < 0) return 0;
    return c->ctl ? records_limit(s) : store_rendezvous_max(s->nranks);
}

/* Takes the frames c has sent, as far as they have come. */
static void read_conn(store_server *s, conn *c)
{
    if (c->closing) discard(c);
    for (int k = 0; k < FRAMES_A_ROUND && !c->dead && !c->closing; k++) {
        int fresh = c->in.got == 0;
        store_frame f;
        int rc = store_read(c->fd, &c->in, &f, value_limit(s, c), READ_BUDGET);
        if (fresh && c->in.got > 0) c->frame_ms = dps_now_ms();
        if (rc == 1) return;
        if (rc == 2) c->dead = 1;
        if (rc < 0) read_failed(s, c, errno);
        if (rc != 0) return;
        on_frame(s, c, &f);
        store_frame_free(&f);
    }
}

/* A peer that says no hello, stalls in a frame or reads no answer within
 * --timeout is refused; a refused one is closed once its grace is over. */
static void check_conns(store_server *s)
{
    double now = dps_now_ms();
    char what[DPS_ERRMSG_MAX];
    for (int i = 0; i < s->nconns; i++) {
        conn *c = &s->conns[i];
        if (c->dead) continue;
        if (c->closing) {
            if (now - c->since_ms > CLOSE_GRACE_MS) c->dead = 1;
        } else if (c->out_len > c->out_off && now - c->out_ms > s->limit_ms) {
            snprintf(what, sizeof what, "it read none of its %zu bytes of answers within "
                     "--timeout %g s", c->out_len - c->out_off, s->timeout_s);
            refuse(s, c, 0, what);
        } else if (c->in.got > 0 && now - c->frame_ms > s->limit_ms) {
            snprintf(what, sizeof what, "a frame began (%zu bytes) and the rest did not come "
                     "within --timeout %g s (a rank sends a frame whole at once)", c->in.got,
                     s->timeout_s);
            refuse(s, c, 1, what);
        } else if (c->rank < 0 && now - c->since_ms > s->limit_ms) {
            snprintf(what, sizeof what, "it said no hello within --timeout %g s", s->timeout_s);
            refuse(s, c, 1, what);
        }
    }
}

static void close_conn(store_server *s, int i)
{
    conn *c = &s->conns[i];
    if (c->rank >= 0) on_lost(s, c);
    member *m = c->rank >= 0 ? &s->m[c->rank] : NULL;
    if (m && (m->ctl_fd == c->fd || m->req_fd == c->fd)) {
        pthread_mutex_lock(&s->mu);
        if (m->ctl_fd == c->fd) m->ctl_fd = -1; /* nothing is sent to that number once closed */
        if (m->req_fd == c->fd) m->req_fd = -1;
        pthread_mutex_unlock(&s->mu);
    }
    for (int w = 0; w < s->nwaiters;)
        if (s->waiters[w].fd == c->fd) drop_waiter(s, w);
        else w++;
    close(c->fd);
    store_reader_free(&c->in);
    free(c->out);
    s->conns[i] = s->conns[--s->nconns];
}

/* Closes the connections this round marked. */
static void reap(store_server *s)
{
    for (int i = s->nconns - 1; i >= 0; i--)
        if (s->conns[i].dead) close_conn(s, i);
}

/* Room for a newcomer when every connection is taken: the oldest that
 * has said no hello goes. */
static int make_room(store_server *s)
{
    int oldest = -1;
    for (int i = 0; i < s->nconns; i++) {
        const conn *c = &s->conns[i];
        if (c->rank < 0 && (oldest < 0 || c->since_ms < s->conns[oldest].since_ms)) oldest = i;
    }
    if (oldest < 0) return -1;
    refuse(s, &s->conns[oldest], 0, "every connection the store takes is in use: the oldest "
           "that said no hello goes");
    close_conn(s, oldest);
    return 0;
}

static void accept_one(store_server *s)
{
    int fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    if (s->nconns == s->max_conns && make_room(s) != 0) {
        close(fd); /* every connection is a rank's own */
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    conn *c = &s->conns[s->nconns++];
    *c = (conn){.fd = fd, .rank = -1, .since_ms = dps_now_ms()};
    peer_name(fd, c->peer, sizeof c->peer);
}

static void check_arrivals(store_server *s)
{
    if (s->narrived == s->nranks || s->failure || dps_now_ms() < s->arrive_by) return;
    char why[DPS_ERRMSG_MAX];
    size_t n = (size_t)snprintf(why, sizeof why, "%d of %d ranks arrived within --timeout %g s; "
                                "missing:", s->narrived, s->nranks, s->timeout_s);
    for (int r = 0; r < s->nranks && n < sizeof why; r++)
        if (!s->m[r].arrived) n += (size_t)snprintf(why + n, sizeof why - n, " %d", r);
    if (n < sizeof why)
        snprintf(why + n, sizeof why - n, " (are they started, with the same MASTER_ADDR and "
                 "port, and can they reach rank 0's host?)");
    group_fail(s, DPS_ERR_TIMEOUT, why, -1);
}

static int prefixed(const char *key, const char *prefix)
{
    return strncmp(key, prefix, strlen(prefix)) == 0;
}

static int is_live(const store_key *e, const void *arg)
{
    const store_server *s = arg;
    return e->owner < 0 || prefixed(e->key, s->live[0]) || prefixed(e->key, s->live[1]);
}

/* What store_server_begin asked for, on the server's thread: the keys of
 * configurations before the last two begun dropped, the shares recounted. */
static void take_begin(store_server *s)
{
    pthread_mutex_lock(&s->mu);
    int pending = s->begin_pending;
    s->begin_pending = 0;
    if (pending) {
        memcpy(s->live[1], s->live[0], sizeof s->live[1]);
        memcpy(s->live[0], s->begun, sizeof s->live[0]);
    }
    pthread_mutex_unlock(&s->mu);
    if (!pending || !store_keys_drop(&s->keys, is_live, s)) return;
    for (int r = 0; r < s->nranks; r++) s->m[r].nkeys = s->m[r].nrecords = 0;
    for (int i = 0; i < s->keys.n; i++) count(s, &s->keys.keys[i]);
}

/* Serves one poll round; 0 to go on, 1 when woken to stop. */
static int serve_round(store_server *s)
{
    struct pollfd p[MAX_CONNS + 2] = {{.fd = s->wake[0], .events = POLLIN},
                                      {.fd = s->listen_fd, .events = POLLIN}};
    int n = s->nconns;
    for (int i = 0; i < n; i++) {
        const conn *c = &s->conns[i];
        short out = c->out_len > c->out_off ? POLLOUT : 0;
        p[i + 2] = (struct pollfd){.fd = c->fd, .events = (short)(POLLIN | out)};
    }
    if (poll(p, (nfds_t)n + 2, 100) < 0 && errno != EINTR) return 1;
    if (p[0].revents) return 1;
    take_begin(s);
    for (int i = 0; i < n; i++) { /* nothing is closed before reap: i stays i */
        if (p[i + 2].revents & POLLOUT) flush(&s->conns[i]);
        if (p[i + 2].revents & ~POLLOUT) read_conn(s, &s->conns[i]);
    }
    check_conns(s);
    check_arrivals(s);
    reap(s);
    if (p[1].revents) accept_one(s);
    return 0;
}

static void *serve(void *arg)
{
    store_server *s = arg;
    while (serve_round(s) == 0) {}
    return NULL;
}

static int listen_on(int port)
{
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1, zero = 0;
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port),
                              .sin6_addr = IN6ADDR_ANY_INIT};
    if (fd >= 0) { /* one socket for IPv4 and IPv6 */
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
        if (bind(fd, (struct sockaddr *)&a6, sizeof a6) == 0 && listen(fd, 128) == 0) return fd;
        close(fd);
    }
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_ANY)};
    if (fd < 0) return -1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&a4, sizeof a4) == 0 && listen(fd, 128) == 0) return fd;
    int err = errno;
    close(fd);
    return errno = err, -1;
}

static store_server *server_new(int nranks, double timeout_ms)
{
    store_server *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    *s = (store_server){.nranks = nranks, .wake = {-1, -1}, .timeout_s = timeout_ms / 1e3,
                        .limit_ms = timeout_ms > 0 ? timeout_ms : 1e12,
                        .arrive_by = dps_now_ms() + (timeout_ms > 0 ? timeout_ms : 1e12),
                        .max_conns = 2 * nranks + STORE_CONNS_SPARE};
    for (int r = 0; r < DPS_MAX_DEVICES; r++) s->m[r].ctl_fd = s->m[r].req_fd = -1;
    pthread_mutex_init(&s->mu, NULL);
    int max_keys = nranks * (STORE_KEYS_PER_RANK + STORE_RECORDS_PER_RANK) + 1; /* + the roster */
    if (store_keys_init(&s->keys, max_keys) != DPS_OK) {
        pthread_mutex_destroy(&s->mu);
        free(s);
        return NULL;
    }
    return s;
}

static void server_free(store_server *s)
{
    store_keys_free(&s->keys);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

dps_status store_server_listen(int port, int nranks, double timeout_ms, store_server **out)
{
    if (nranks < 1 || nranks > DPS_MAX_DEVICES)
        return dps_fail(DPS_ERR_USAGE, "rank 0: a store for %d ranks: 1 to %d", nranks,
                        DPS_MAX_DEVICES);
    store_server *s = server_new(nranks, timeout_ms);
    if (!s) return dps_fail(DPS_ERR_RUNTIME, "rank 0: out of host memory for the store");
    s->listen_fd = listen_on(port);
    if (s->listen_fd < 0) {
        int err = errno;
        server_free(s);
        return dps_fail(DPS_ERR_RUNTIME, "rank 0: cannot listen on port %d for the ranks' "
                        "rendezvous: %s (another job on it? set DPSCALE_PORT to a free port)",
                        port, strerror(err));
    }
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    s->port = port;
    if (getsockname(s->listen_fd, (struct sockaddr *)&sa, &sl) == 0)
        s->port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                                 : ((struct sockaddr_in *)&sa)->sin_port);
    s->wake[0] = s->wake[1] = -1;
    *out = s;
    return DPS_OK;
}

dps_status store_server_serve(store_server *s)
{
    if (pipe(s->wake) != 0) {
        s->wake[0] = s->wake[1] = -1;
        return dps_fail(DPS_ERR_RUNTIME, "rank 0: cannot make the store's wake-up pipe: %s",
                        strerror(errno));
    }
    if (pthread_create(&s->thread, NULL, serve, s) != 0) {
        close(s->wake[0]);
        close(s->wake[1]);
        s->wake[0] = s->wake[1] = -1;
        return dps_fail(DPS_ERR_RUNTIME, "rank 0: cannot start the store's thread");
    }
    s->serving = 1;
    return DPS_OK;
}

dps_status store_server_start(int port, int nranks, double timeout_ms, store_server **out)
{
    DPS_TRY(store_server_listen(port, nranks, timeout_ms, out));
    dps_status rc = store_server_serve(*out);
    if (rc) {
        store_server_stop(*out);
        *out = NULL;
    }
    return rc;
}

int store_server_port(const store_server *s) { return s->port; }

void store_server_begin(store_server *s, const char *prefix, size_t records_bytes)
{
    pthread_mutex_lock(&s->mu);
    dps_strlcpy(s->begun, prefix, sizeof s->begun);
    s->begin_pending = 1;
    s->records_max[1] = s->records_max[0];
    s->records_max[0] = records_bytes;
    pthread_mutex_unlock(&s->mu);
}

dps_status store_server_failure(store_server *s, int *asked, char *why, size_t len)
{
    pthread_mutex_lock(&s->mu);
    dps_status code = s->failure;
    *asked = s->failure_asked;
    dps_strlcpy(why, s->why, len);
    pthread_mutex_unlock(&s->mu);
    return code;
}

void store_server_explain(store_server *s, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    pthread_mutex_lock(&s->mu);
    for (int r = 0; r < s->nranks && n < len; r++) {
        const member *m = &s->m[r];
        char at[64] = "setting up";
        if (m->step >= 0) snprintf(at, sizeof at, "step %d", m->step);
        if (m->waiting) dps_strlcpy(at + strlen(at), ", waiting in a collective", sizeof at - strlen(at));
        else if (m->arrived && !m->finished) dps_strlcpy(at + strlen(at), ", not in a collective", sizeof at - strlen(at));
        n += (size_t)snprintf(buf + n, len - n, "%srank %d %s (host %s, pid %d)", r ? ", " : "",
                              r, m->arrived ? at : "never arrived", m->host, m->pid);
    }
    pthread_mutex_unlock(&s->mu);
}

void store_server_wait_ended(store_server *s, double timeout_ms)
{
    double end = dps_now_ms() + (timeout_ms > 0 ? timeout_ms : 1e12); /* 0: no limit */
    for (;;) {
        int open = 0;
        pthread_mutex_lock(&s->mu);
        for (int r = 0; r < s->nranks; r++) open += s->m[r].arrived && !s->m[r].finished && !s->m[r].gone;
        pthread_mutex_unlock(&s->mu);
        if (!open || dps_now_ms() > end) return;
        struct timespec ts = {0, 5000000L};
        nanosleep(&ts, NULL);
    }
}

void store_server_stop(store_server *s)
{
    if (!s) return;
    if (s->serving) {
        (void)!write(s->wake[1], "x", 1);
        pthread_join(s->thread, NULL);
    }
    for (int i = 0; i < s->nconns; i++) {
        close(s->conns[i].fd);
        store_reader_free(&s->conns[i].in);
        free(s->conns[i].out);
    }
    close(s->listen_fd);
    if (s->wake[0] >= 0) close(s->wake[0]);
    if (s->wake[1] >= 0) close(s->wake[1]);
    server_free(s);
}
