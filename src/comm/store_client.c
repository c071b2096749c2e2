/* A rank's end of the store (see store.h): a request connection for keys
 * and a control connection, watched on a thread, that carries the rank's
 * steps, its end and the server's word to abort. Every connect and every
 * answer is waited for within what is left of --timeout, and every value
 * taken is held to what a world of this size needs (store.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "comm/store_wire.h"
#include "core/util.h"

/* How long past its joining's deadline rank 0 waits for the roster: its
 * server's own deadline, whose message names the missing ranks, is first. */
#define ROSTER_GRACE_MS 500.0

struct dps_store {
    int req_fd, ctl_fd, rank, nranks, port;
    double timeout_ms, join_by_ms; /* join_by_ms: store_connect's start + timeout */
    char server[256], local[64], prefix[32];
    pthread_mutex_t req_mu, ctl_mu;
    pthread_t watch;
    int watching;
    _Atomic int stop, finished;
    store_state_fn state;
    store_lost_fn on_lost;
    void *ctx;
};

static void pause_ms(int ms)
{
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

/* connect() on non-blocking fd, given up at the deadline (a host that
 * drops SYNs would hold a blocking one for the kernel's two minutes of
 * retries); 0, or -1 with errno. */
static int connect_by(int fd, const struct sockaddr *sa, socklen_t len, double deadline)
{
    if (connect(fd, sa, len) == 0) return 0;
    if (errno != EINPROGRESS) return -1;
    for (;;) {
        double left = deadline - dps_now_ms();
        if (left <= 0) return errno = ETIMEDOUT, -1;
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int n = poll(&p, 1, left >= INT_MAX - 1 ? INT_MAX - 1 : (int)left + 1);
        if (n < 0 && errno != EINTR) return -1;
        if (n <= 0) continue;
        int err = 0;
        socklen_t el = sizeof err;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0) return -1;
        return err ? (errno = err, -1) : 0;
    }
}

/* A connection to addr:port made by the deadline (blocking once made):
 * its fd, or -1 with errno. */
static int try_connect(const char *addr, int port, double deadline)
{
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(addr, service, &hints, &res) != 0) return errno = EHOSTUNREACH, -1;
    int fd = -1, err = ECONNREFUSED;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        if (fd >= 0 && connect_by(fd, a->ai_addr, a->ai_addrlen, deadline) != 0) {
            err = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0) return errno = err, -1;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
}

/* The network interface fd's local address is on ("lo", "eth0"); "unknown". */
static void iface_of(int fd, char *buf, size_t len)
{
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    struct ifaddrs *all = NULL;
    dps_strlcpy(buf, "unknown", len);
    if (getsockname(fd, (struct sockaddr *)&sa, &sl) != 0 || getifaddrs(&all) != 0) return;
    const struct in6_addr *v6 = &((struct sockaddr_in6 *)&sa)->sin6_addr;
    struct in_addr v4 = ((struct sockaddr_in *)&sa)->sin_addr;
    if (sa.ss_family == AF_INET6 && IN6_IS_ADDR_V4MAPPED(v6)) memcpy(&v4, &v6->s6_addr[12], 4);
    int want4 = sa.ss_family == AF_INET || IN6_IS_ADDR_V4MAPPED(v6);
    for (struct ifaddrs *i = all; i; i = i->ifa_next) {
        if (!i->ifa_addr) continue;
        int same = want4 ? i->ifa_addr->sa_family == AF_INET &&
                               ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr == v4.s_addr
                         : i->ifa_addr->sa_family == AF_INET6 &&
                               !memcmp(&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, v6,
                                       sizeof *v6);
        if (same) {
            dps_strlcpy(buf, i->ifa_name, len);
            break;
        }
    }
    freeifaddrs(all);
}

/* The server's answer to kind's hello on fd: taken, or refused and why. */
static dps_status hello_answer(dps_store *s, int fd, const char *kind, double deadline)
{
    store_frame f;
    int rc = store_recv(fd, &f, 0, deadline), err = errno;
    if (rc == 0 && f.type == ST_VAL && strcmp(f.key, kind) == 0) {
        store_frame_free(&f);
        return DPS_OK;
    }
    dps_status code;
    if (rc == 0 && f.type == ST_ABORT)
        code = dps_fail(DPS_ERR_RUNTIME, "rank %d: rank 0's store at %s:%d refused this process: "
                        "%s", s->rank, s->server, s->port, f.val);
    else if (rc != 0 && err == ETIMEDOUT)
        code = dps_fail(DPS_ERR_TIMEOUT, "rank %d: rank 0's store at %s:%d did not answer this "
                        "rank's hello within --timeout %g s (is it dpscale, of the same version, "
                        "and not stalled?)", s->rank, s->server, s->port, s->timeout_ms / 1e3);
    else
        code = dps_fail(DPS_ERR_RUNTIME, "rank %d: rank 0's store at %s:%d answered this rank's "
                        "hello with %s (is it dpscale, of the same version?)", s->rank, s->server,
                        s->port, rc == 0 ? "another frame" : strerror(err));
    if (rc == 0) store_frame_free(&f);
    return code;
}

/* A connection to the server, said hello on as kind ("ctl" or "req"). */
static dps_status open_conn(dps_store *s, const char *kind, double deadline, int *out)
{
    int fd;
    while ((fd = try_connect(s->server, s->port, deadline)) < 0) {
        int err = errno;
        if (dps_now_ms() >= deadline)
            return dps_fail(DPS_ERR_TIMEOUT, "rank %d: no rank 0 listening at %s:%d within "
                            "--timeout %g s (last try: %s): is rank 0 running, and are "
                            "MASTER_ADDR and the port (DPSCALE_PORT) the same for every rank?",
                            s->rank, s->server, s->port, s->timeout_ms / 1e3, strerror(err));
        pause_ms(50);
    }
    char host[STORE_HOST_MAX] = "unknown", nic[32], hello[STORE_HOST_MAX + 64];
    gethostname(host, sizeof host - 1);
    for (char *p = host; *p; p++)
        if (*p == ' ') *p = '_';
    iface_of(fd, nic, sizeof nic);
    int n = snprintf(hello, sizeof hello, "%d %d %s %s", s->rank, (int)getpid(), host, nic);
    if (store_send(fd, ST_HELLO, kind, hello, (size_t)n, deadline) != 0) {
        close(fd);
        return dps_fail(DPS_ERR_RUNTIME, "rank %d: cannot reach rank 0's store at %s:%d: %s",
                        s->rank, s->server, s->port, strerror(errno));
    }
    dps_status rc = hello_answer(s, fd, kind, deadline);
    if (rc) {
        close(fd);
        return rc;
    }
    *out = fd;
    return DPS_OK;
}

static void local_addr(int fd, char *buf, size_t len)
{
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    dps_strlcpy(buf, "127.0.0.1", len);
    if (getsockname(fd, (struct sockaddr *)&sa, &sl) != 0) return;
    if (sa.ss_family == AF_INET)
        inet_ntop(AF_INET, &((struct sockaddr_in *)&sa)->sin_addr, buf, (socklen_t)len);
    else if (sa.ss_family == AF_INET6)
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&sa)->sin6_addr, buf, (socklen_t)len);
}

dps_status store_connect(const char *addr, int port, int rank, int nranks, double timeout_ms,
                         dps_store **out)
{
    dps_store *s = calloc(1, sizeof *s);
    if (!s) return dps_fail(DPS_ERR_RUNTIME, "rank %d: out of host memory", rank);
    *s = (dps_store){.req_fd = -1, .ctl_fd = -1, .rank = rank, .nranks = nranks, .port = port,
                     .timeout_ms = timeout_ms > 0 ? timeout_ms : 1e12};
    dps_strlcpy(s->server, addr, sizeof s->server);
    pthread_mutex_init(&s->req_mu, NULL);
    pthread_mutex_init(&s->ctl_mu, NULL);
    s->join_by_ms = dps_now_ms() + s->timeout_ms;
    dps_status rc = open_conn(s, "ctl", s->join_by_ms, &s->ctl_fd);
    if (!rc) rc = open_conn(s, "req", s->join_by_ms, &s->req_fd);
    if (rc) {
        store_close(s);
        return rc;
    }
    local_addr(s->ctl_fd, s->local, sizeof s->local);
    *out = s;
    return DPS_OK;
}

const char *store_local_addr(const dps_store *s) { return s->local; }

static int loopback(const char *addr)
{
    return strncmp(addr, "127.", 4) == 0 || strcmp(addr, "::1") == 0;
}

/* The local address the kernel would send from to reach addr (a UDP
 * socket's connect sends nothing); 0 when found. */
static int route_to(const char *addr, char *buf, size_t len)
{
    struct addrinfo hints = {.ai_socktype = SOCK_DGRAM, .ai_flags = AI_NUMERICHOST}, *res = NULL;
    if (getaddrinfo(addr, "9", &hints, &res) != 0) return -1;
    int fd = socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0), rc = -1;
    if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
        local_addr(fd, buf, len);
        rc = 0;
    }
    if (fd >= 0) close(fd);
    freeaddrinfo(res);
    return rc;
}

void store_route_past_loopback(dps_store *s, const store_member *members, int nranks)
{
    if (!loopback(s->local)) return;
    for (int r = 0; r < nranks; r++)
        if (!loopback(members[r].addr) && route_to(members[r].addr, s->local, sizeof s->local) == 0)
            return;
}

void store_set_prefix(dps_store *s, const char *prefix)
{
    dps_strlcpy(s->prefix, prefix, sizeof s->prefix);
}

/* key with this rank's prefix (the roster's is the server's own). */
static const char *full_key(const dps_store *s, const char *key, char *buf, size_t len)
{
    if (strcmp(key, STORE_ROSTER_KEY) == 0) return key;
    snprintf(buf, len, "%s%s", s->prefix, key);
    return buf;
}

/* Sets key on fd (under mu): the request or the control connection. */
static dps_status set_on(dps_store *s, int fd, pthread_mutex_t *mu, const char *key,
                         const void *val, size_t len)
{
    char name[STORE_KEY_MAX];
    pthread_mutex_lock(mu);
    int rc = store_send(fd, ST_SET, full_key(s, key, name, sizeof name), val, len,
                        dps_now_ms() + s->timeout_ms);
    pthread_mutex_unlock(mu);
    if (rc == 0) return DPS_OK;
    return dps_fail(DPS_ERR_RUNTIME, "rank %d: cannot send %s to rank 0's store at %s:%d: %s "
                    "(rank 0 ended?)", s->rank, key, s->server, s->port, strerror(errno));
}

dps_status store_set(dps_store *s, const char *key, const void *val, size_t len)
{
    return set_on(s, s->req_fd, &s->req_mu, key, val, len);
}

/* Why no answer to the GET of key came (err: store_recv's errno; f: what came). */
static dps_status no_reply(dps_store *s, const char *key, const store_frame *f, size_t max_len,
                           int err)
{
    if (err == ETIMEDOUT)
        return dps_fail(DPS_ERR_TIMEOUT, "rank %d: %s did not come from rank 0's store at %s:%d "
                        "within --timeout %g s", s->rank, key, s->server, s->port,
                        s->timeout_ms / 1e3);
    if (err == EMSGSIZE)
        return dps_fail(DPS_ERR_RUNTIME, "rank %d: rank 0's store at %s:%d sent %zu bytes for %s, "
                        "and this rank takes %zu at most for it (is rank 0 dpscale, the same "
                        "version with the same options?)", s->rank, s->server, s->port, f->len,
                        key, f->type == ST_VAL ? max_len : STORE_WORDS_MAX);
    if (err == EPROTO)
        return dps_fail(DPS_ERR_RUNTIME, "rank %d: rank 0's store at %s:%d sent bytes that are no "
                        "store frame while this rank waited for %s (is it dpscale, of the same "
                        "version?)", s->rank, s->server, s->port, key);
    return dps_fail(DPS_ERR_RUNTIME, "rank %d: rank 0's store at %s:%d is gone while waiting for "
                    "%s (rank 0 ended or its host is unreachable)", s->rank, s->server, s->port,
                    key);
}

static dps_status get_reply(dps_store *s, const char *key, size_t max_len, void **val, size_t *len,
                            double deadline)
{
    store_frame f;
    /* One GET at a time, and a connection that failed is closed: the reply is this key's */
    int rc = store_recv(s->req_fd, &f, max_len, deadline), err = errno;
    if (rc != 0) { /* a frame may have stopped half-way: the connection is unusable */
        close(s->req_fd);
        s->req_fd = -1;
        return no_reply(s, key, &f, max_len, err);
    }
    if (f.type != ST_VAL || strcmp(f.key, key) != 0) {
        dps_status code =
            f.type == ST_GONE ? dps_fail(DPS_ERR_RUNTIME, "%s", f.val)
            : f.type == ST_ABORT ? dps_fail(DPS_ERR_RUNTIME, "rank %d: rank 0's store at %s:%d "
                                            "refused this rank: %s", s->rank, s->server, s->port,
                                            f.val)
            : dps_fail(DPS_ERR_RUNTIME, "rank %d: rank 0's store answered %s for %s (a store of "
                       "another dpscale version?)", s->rank, f.key, key);
        store_frame_free(&f);
        return code;
    }
    *val = f.val;
    *len = f.len;
    return DPS_OK;
}

dps_status store_get(dps_store *s, const char *key, int owner, void **val, size_t *len,
                     double timeout_ms)
{
    return store_get_max(s, key, owner, store_rendezvous_max(s->nranks), val, len, timeout_ms);
}

dps_status store_get_max(dps_store *s, const char *key, int owner, size_t max_len, void **val,
                         size_t *len, double timeout_ms)
{
    char who[16], name[STORE_KEY_MAX];
    int n = snprintf(who, sizeof who, "%d", owner);
    double deadline = dps_now_ms() + (timeout_ms > 0 ? timeout_ms : s->timeout_ms);
    pthread_mutex_lock(&s->req_mu);
    key = full_key(s, key, name, sizeof name);
    if (s->req_fd < 0) errno = ENOTCONN; /* closed by an earlier answer that failed */
    int asked = s->req_fd >= 0 && store_send(s->req_fd, ST_GET, key, who, (size_t)n, deadline) == 0;
    dps_status rc = asked
        ? get_reply(s, key, max_len, val, len, deadline)
        : dps_fail(DPS_ERR_RUNTIME, "rank %d: cannot ask rank 0's store at %s:%d for %s: %s",
                   s->rank, s->server, s->port, key, strerror(errno));
    pthread_mutex_unlock(&s->req_mu);
    return rc;
}

static int parse_member(const char *line, int nranks, store_member *members)
{
    int r, pid;
    char host[STORE_HOST_MAX], addr[64], nic[32];
    if (sscanf(line, "%d %d %63s %63s %31s", &r, &pid, host, addr, nic) != 5 || r < 0 ||
        r >= nranks)
        return -1;
    members[r].pid = pid;
    dps_strlcpy(members[r].nic, nic, sizeof members[r].nic);
    dps_strlcpy(members[r].host, host, sizeof members[r].host);
    dps_strlcpy(members[r].addr, addr, sizeof members[r].addr);
    return 0;
}

dps_status store_roster(dps_store *s, store_member *members, int nranks)
{
    void *val;
    size_t len;
    double left = s->join_by_ms + (s->rank == 0 ? ROSTER_GRACE_MS : 0.0) - dps_now_ms();
    DPS_TRY(store_get_max(s, STORE_ROSTER_KEY, -1, store_roster_max(nranks), &val, &len,
                          left > 1.0 ? left : 1.0));
    int lines = 0;
    for (char *line = val, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        if (parse_member(line, nranks, members) != 0) break;
        lines++;
    }
    free(val);
    if (lines == nranks) return DPS_OK;
    return dps_fail(DPS_ERR_RUNTIME, "rank %d: rank 0's roster lists %d of %d ranks (is every rank "
                    "the same dpscale with the same options?)", s->rank, lines, nranks);
}

static void ctl_send(dps_store *s, store_type type, const char *key, const void *val, size_t len)
{
    pthread_mutex_lock(&s->ctl_mu);
    (void)store_send(s->ctl_fd, type, key, val, len, dps_now_ms() + s->timeout_ms);
    pthread_mutex_unlock(&s->ctl_mu);
}

/* One read of the control connection: 1 when the watch is over. */
static int watch_read(dps_store *s)
{
    store_frame f;
    int rc = store_recv(s->ctl_fd, &f, 0, dps_now_ms() + s->timeout_ms), err = errno;
    if (atomic_load(&s->finished)) return rc == 0 ? (store_frame_free(&f), 0) : 1;
    char why[DPS_ERRMSG_MAX];
    if (rc == 0 && f.type != ST_ABORT) {
        store_frame_free(&f);
        return 0;
    }
    if (rc == 0) dps_strlcpy(why, f.val, sizeof why);
    else if (rc < 0 && err != ECONNRESET)
        snprintf(why, sizeof why, "rank 0's store at %s:%d is gone (%s): rank 0 ended, its host "
                 "is unreachable, or it is not dpscale", s->server, s->port,
                 err == ETIMEDOUT ? "a frame stalled past --timeout" : strerror(err));
    else snprintf(why, sizeof why, "rank 0's store at %s:%d is gone: rank 0 ended or its host is "
                  "unreachable", s->server, s->port);
    if (rc == 0) store_frame_free(&f);
    s->on_lost(s->ctx, why);
    return 1;
}

static void *watch_main(void *arg)
{
    dps_store *s = arg;
    int sent_step = -2, sent_waiting = -1;
    while (!atomic_load(&s->stop)) {
        int step = -1, waiting = s->state(s->ctx, &step);
        if ((step != sent_step || waiting != sent_waiting) && !atomic_load(&s->finished)) {
            char v[32];
            int n = snprintf(v, sizeof v, "%d %d", step, waiting);
            ctl_send(s, ST_BEAT, "", v, (size_t)n);
            sent_step = step;
            sent_waiting = waiting;
        }
        struct pollfd p = {.fd = s->ctl_fd, .events = POLLIN};
        if (poll(&p, 1, 10) > 0 && watch_read(s)) break;
    }
    return NULL;
}

dps_status store_watch(dps_store *s, store_state_fn state, store_lost_fn on_lost, void *ctx)
{
    s->state = state;
    s->on_lost = on_lost;
    s->ctx = ctx;
    if (pthread_create(&s->watch, NULL, watch_main, s) != 0)
        return dps_fail(DPS_ERR_RUNTIME, "rank %d: cannot start the thread that watches the group",
                        s->rank);
    s->watching = 1;
    return DPS_OK;
}

void store_abort(dps_store *s, const char *why)
{
    ctl_send(s, ST_ABORT, "", why, strlen(why));
}

dps_status store_post(dps_store *s, const char *key, const void *val, size_t len)
{
    return set_on(s, s->ctl_fd, &s->ctl_mu, key, val, len);
}

void store_finish(dps_store *s)
{
    atomic_store(&s->finished, 1);
    ctl_send(s, ST_BYE, "", "", 0);
}

void store_close(dps_store *s)
{
    if (!s) return;
    atomic_store(&s->stop, 1);
    if (s->watching) pthread_join(s->watch, NULL);
    if (s->req_fd >= 0) close(s->req_fd);
    if (s->ctl_fd >= 0) close(s->ctl_fd);
    pthread_mutex_destroy(&s->req_mu);
    pthread_mutex_destroy(&s->ctl_mu);
    free(s);
}
