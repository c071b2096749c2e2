/* The store's server (see store.h): global rank 0 runs it on a thread that
 * polls every connection, keeps the keys, answers the ranks waiting for
 * one, and turns a rank's closed control connection into the group's
 * failure, told to every other rank. */
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
#include "comm/store_wire.h"
#include "core/util.h"

#define MAX_CONNS (2 * DPS_MAX_DEVICES + 8)
#define MAX_WAITERS (4 * DPS_MAX_DEVICES)
#define FRAME_MS 30000.0 /* a frame that has begun arrives whole within this */

typedef struct member {
    int arrived, finished, gone, pid, step, waiting, ctl_fd;
    char host[STORE_HOST_MAX], addr[64], nic[32];
} member;

typedef struct kv { char key[STORE_KEY_MAX]; char *val; size_t len; } kv;
typedef struct waiter { int fd, owner; char key[STORE_KEY_MAX]; } waiter;
typedef struct conn { int fd, rank, ctl; } conn;

struct store_server {
    int listen_fd, wake[2], nranks, narrived, port;
    double arrive_by, timeout_s;
    pthread_t thread;
    pthread_mutex_t mu;  /* failure, why and members, for the caller's thread */
    dps_status failure;
    int failure_asked;   /* a rank asked for the abort (the others: the server saw it) */
    char why[DPS_ERRMSG_MAX];
    member m[DPS_MAX_DEVICES];
    conn conns[MAX_CONNS];
    int nconns;
    kv *kvs;
    int nkv, cap_kv;
    waiter waiters[MAX_WAITERS];
    int nwaiters;
};

static kv *find_kv(store_server *s, const char *key)
{
    for (int i = 0; i < s->nkv; i++)
        if (strcmp(s->kvs[i].key, key) == 0) return &s->kvs[i];
    return NULL;
}

static void reply(int fd, store_type type, const char *key, const void *val, size_t len)
{
    (void)store_send(fd, type, key, val, len, dps_now_ms() + FRAME_MS); /* a dead reader is seen by poll */
}

static void drop_waiter(store_server *s, int i) { s->waiters[i] = s->waiters[--s->nwaiters]; }

/* Answers the waiters that `done` selects with type and val. */
static void answer(store_server *s, int (*done)(const waiter *, const void *), const void *arg,
                   store_type type, const char *val, size_t len)
{
    for (int i = 0; i < s->nwaiters;)
        if (done(&s->waiters[i], arg)) {
            reply(s->waiters[i].fd, type, s->waiters[i].key, val, len);
            drop_waiter(s, i);
        } else i++;
}

static int wants_key(const waiter *w, const void *key) { return strcmp(w->key, key) == 0; }
static int owned_by(const waiter *w, const void *rank) { return w->owner == *(const int *)rank; }
static int ownerless(const waiter *w, const void *arg) { (void)arg; return w->owner < 0; }

static int set_kv(store_server *s, const char *key, const char *val, size_t len)
{
    kv *e = find_kv(s, key);
    if (!e) {
        if (s->nkv == s->cap_kv) {
            int cap = s->cap_kv ? 2 * s->cap_kv : 16;
            kv *grown = realloc(s->kvs, (size_t)cap * sizeof *grown);
            if (!grown) return -1;
            s->kvs = grown;
            s->cap_kv = cap;
        }
        e = &s->kvs[s->nkv++];
        dps_strlcpy(e->key, key, sizeof e->key);
        e->val = NULL;
    }
    char *copy = malloc(len + 1);
    if (!copy) return -1;
    memcpy(copy, val, len);
    free(e->val);
    e->val = copy;
    e->len = len;
    answer(s, wants_key, key, ST_VAL, val, len);
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
            reply(s->m[r].ctl_fd, ST_ABORT, "", why, strlen(why));
    answer(s, ownerless, NULL, ST_GONE, why, strlen(why));
}

static void set_roster(store_server *s)
{
    char buf[DPS_MAX_DEVICES * (STORE_HOST_MAX + 192)];
    size_t n = 0;
    for (int r = 0; r < s->nranks; r++)
        n += (size_t)snprintf(buf + n, sizeof buf - n, "%d %d %s %s %s\n", r, s->m[r].pid,
                              s->m[r].host, s->m[r].addr, s->m[r].nic);
    if (set_kv(s, STORE_ROSTER_KEY, buf, n) != 0)
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

/* HELLO "rank pid host" on a new connection; 0, or -1 when malformed. */
static int on_hello(store_server *s, conn *c, const store_frame *f)
{
    int rank, pid;
    char host[STORE_HOST_MAX], nic[32], why[DPS_ERRMSG_MAX];
    if (sscanf(f->val, "%d %d %63s %31s", &rank, &pid, host, nic) != 4 || rank < 0 ||
        rank >= s->nranks)
        return -1;
    int ctl = strcmp(f->key, "ctl") == 0;
    member *m = &s->m[rank];
    if (ctl && m->arrived) { /* two processes claim one rank: refuse the newcomer alone */
        snprintf(why, sizeof why, "two processes claim rank %d: pid %d on host %s and pid %d on "
                 "host %s (two jobs on one port? set DPSCALE_PORT apart)", rank, m->pid, m->host,
                 pid, host);
        reply(c->fd, ST_ABORT, "", why, strlen(why));
        return -1;
    }
    if (ctl && s->failure) { /* too late: the group is over */
        reply(c->fd, ST_ABORT, "", s->why, strlen(s->why));
        return -1;
    }
    c->rank = rank;
    c->ctl = ctl;
    if (!c->ctl) return 0;
    pthread_mutex_lock(&s->mu);
    *m = (member){.arrived = 1, .pid = pid, .step = -1, .ctl_fd = c->fd};
    dps_strlcpy(m->host, host, sizeof m->host);
    dps_strlcpy(m->nic, nic, sizeof m->nic);
    peer_addr(c->fd, m->addr, sizeof m->addr);
    pthread_mutex_unlock(&s->mu);
    if (++s->narrived == s->nranks) set_roster(s);
    return 0;
}

/* GET's answer: the value, why it will never come, or a place in the queue. */
static void on_get(store_server *s, int fd, const store_frame *f)
{
    int owner = atoi(f->val);
    kv *e = find_kv(s, f->key);
    char why[DPS_ERRMSG_MAX] = "";
    if (e) {
        reply(fd, ST_VAL, f->key, e->val, e->len);
        return;
    }
    if (owner >= 0 && owner < s->nranks && (s->m[owner].gone || s->m[owner].finished))
        snprintf(why, sizeof why, "rank %d (pid %d on host %s) ended without setting %s", owner,
                 s->m[owner].pid, s->m[owner].host, f->key);
    else if (owner < 0 && s->failure) dps_strlcpy(why, s->why, sizeof why);
    else if (s->nwaiters == MAX_WAITERS)
        snprintf(why, sizeof why, "store: more than %d ranks wait for keys", MAX_WAITERS);
    if (why[0]) {
        reply(fd, ST_GONE, f->key, why, strlen(why));
        return;
    }
    waiter *w = &s->waiters[s->nwaiters++];
    *w = (waiter){.fd = fd, .owner = owner};
    dps_strlcpy(w->key, f->key, sizeof w->key);
}

/* A rank that has ended (BYE) or is gone: its keys will never come. */
static void rank_ended(store_server *s, int rank, const char *why)
{
    answer(s, owned_by, &rank, ST_GONE, why, strlen(why));
}

static void on_lost(store_server *s, conn *c)
{
    member *m = &s->m[c->rank];
    if (!c->ctl || m->finished || m->gone) return;
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

/* One frame from c; -1 when c is to be closed. */
static int on_frame(store_server *s, conn *c, store_frame *f)
{
    if (c->rank < 0) return f->type == ST_HELLO ? on_hello(s, c, f) : -1;
    member *m = &s->m[c->rank];
    switch (f->type) {
    case ST_SET:
        if (set_kv(s, f->key, f->val, f->len) != 0)
            group_fail(s, DPS_ERR_RUNTIME, "store: out of host memory for a key", -1);
        return 0;
    case ST_GET: on_get(s, c->fd, f); return 0;
    case ST_BEAT:
        pthread_mutex_lock(&s->mu);
        if (sscanf(f->val, "%d %d", &m->step, &m->waiting) != 2) m->waiting = 0;
        pthread_mutex_unlock(&s->mu);
        return 0;
    case ST_BYE: {
        char why[DPS_ERRMSG_MAX];
        pthread_mutex_lock(&s->mu);
        m->finished = 1;
        pthread_mutex_unlock(&s->mu);
        snprintf(why, sizeof why, "rank %d (pid %d on host %s) ended without setting the key "
                 "asked for (its own output says why)", c->rank, m->pid, m->host);
        rank_ended(s, c->rank, why);
        return 0;
    }
    case ST_ABORT: group_fail(s, DPS_ERR_RUNTIME, f->val, c->fd); return 0;
    default: return -1;
    }
}

static void close_conn(store_server *s, int i)
{
    conn *c = &s->conns[i];
    if (c->rank >= 0) on_lost(s, c);
    if (c->rank >= 0 && c->ctl && s->m[c->rank].ctl_fd == c->fd) {
        pthread_mutex_lock(&s->mu);
        s->m[c->rank].ctl_fd = -1; /* nothing is sent to that number once it is closed */
        pthread_mutex_unlock(&s->mu);
    }
    for (int w = 0; w < s->nwaiters;)
        if (s->waiters[w].fd == c->fd) drop_waiter(s, w);
        else w++;
    close(c->fd);
    s->conns[i] = s->conns[--s->nconns];
}

static void accept_one(store_server *s)
{
    int fd = accept(s->listen_fd, NULL, NULL);
    if (fd < 0) return;
    if (s->nconns == MAX_CONNS) {
        close(fd);
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    s->conns[s->nconns++] = (conn){.fd = fd, .rank = -1};
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

/* Serves one poll round; 0 to go on, 1 when woken to stop. */
static int serve_round(store_server *s)
{
    struct pollfd p[MAX_CONNS + 2] = {{.fd = s->wake[0], .events = POLLIN},
                                      {.fd = s->listen_fd, .events = POLLIN}};
    int n = s->nconns;
    for (int i = 0; i < n; i++) p[i + 2] = (struct pollfd){.fd = s->conns[i].fd, .events = POLLIN};
    if (poll(p, (nfds_t)n + 2, 100) < 0) return errno == EINTR ? 0 : 1;
    if (p[0].revents) return 1;
    for (int i = n - 1; i >= 0; i--) { /* backwards: close_conn moves the last one into i */
        if (!p[i + 2].revents) continue;
        store_frame f;
        int rc = store_recv(s->conns[i].fd, &f, dps_now_ms() + FRAME_MS);
        if (rc == 0) rc = on_frame(s, &s->conns[i], &f);
        if (rc != 0) close_conn(s, i);
        store_frame_free(&f);
    }
    if (p[1].revents) accept_one(s);
    check_arrivals(s);
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

dps_status store_server_start(int port, int nranks, double timeout_ms, store_server **out)
{
    store_server *s = calloc(1, sizeof *s);
    if (!s) return dps_fail(DPS_ERR_RUNTIME, "rank 0: out of host memory for the store");
    *s = (store_server){.nranks = nranks, .wake = {-1, -1}, .timeout_s = timeout_ms / 1e3,
                        .arrive_by = dps_now_ms() + (timeout_ms > 0 ? timeout_ms : 1e12)};
    for (int r = 0; r < DPS_MAX_DEVICES; r++) s->m[r].ctl_fd = -1;
    pthread_mutex_init(&s->mu, NULL);
    s->listen_fd = listen_on(port);
    if (s->listen_fd < 0) {
        int err = errno;
        free(s);
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
    if (pipe(s->wake) != 0 || pthread_create(&s->thread, NULL, serve, s) != 0) {
        close(s->listen_fd);
        free(s);
        return dps_fail(DPS_ERR_RUNTIME, "rank 0: cannot start the store's thread");
    }
    *out = s;
    return DPS_OK;
}

int store_server_port(const store_server *s) { return s->port; }

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
    (void)!write(s->wake[1], "x", 1);
    pthread_join(s->thread, NULL);
    for (int i = 0; i < s->nconns; i++) close(s->conns[i].fd);
    for (int i = 0; i < s->nkv; i++) free(s->kvs[i].val);
    free(s->kvs);
    close(s->listen_fd);
    close(s->wake[0]);
    close(s->wake[1]);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
