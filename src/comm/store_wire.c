/* Reading and writing the store's frames on a TCP connection: whole with
 * a deadline (the ranks' side), or as the bytes come (the server's), each
 * held to its limits before anything is allocated (see store_wire.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "comm/store_wire.h"
#include "core/util.h"

/* Waits until fd is ready for events; -1 with ETIMEDOUT past the deadline. */
static int wait_ready(int fd, short events, double deadline_ms)
{
    for (;;) {
        int ms = -1;
        if (deadline_ms > 0) {
            double left = deadline_ms - dps_now_ms();
            if (left <= 0) return errno = ETIMEDOUT, -1;
            ms = left >= INT_MAX - 1 ? INT_MAX - 1 : (int)left + 1;
        }
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, ms);
        if (n > 0) return 0;
        if (n < 0 && errno != EINTR) return -1;
    }
}

static int send_all(int fd, const void *buf, size_t len, double deadline_ms)
{
    const char *p = buf;
    while (len > 0) {
        if (wait_ready(fd, POLLOUT, deadline_ms) != 0) return -1;
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (n < 0) return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

void store_head(unsigned char h[STORE_HEAD_BYTES], store_type type, size_t klen, size_t len)
{
    uint16_t k = htons((uint16_t)klen);
    uint32_t v = htonl((uint32_t)len);
    h[0] = (unsigned char)type;
    h[1] = 0;
    memcpy(h + 2, &k, 2);
    memcpy(h + 4, &v, 4);
}

int store_send(int fd, store_type type, const char *key, const void *val, size_t len,
               double deadline_ms)
{
    size_t klen = key ? strlen(key) : 0;
    if (klen >= STORE_KEY_MAX || len > STORE_VAL_MAX) return errno = EMSGSIZE, -1;
    unsigned char h[STORE_HEAD_BYTES];
    store_head(h, type, klen, len);
    if (send_all(fd, h, sizeof h, deadline_ms) != 0) return -1;
    if (klen && send_all(fd, key, klen, deadline_ms) != 0) return -1;
    return len ? send_all(fd, val, len, deadline_ms) : 0;
}

/* The header whole: its type and key length checked. */
static int take_head(store_reader *r)
{
    uint16_t k;
    uint32_t v;
    memcpy(&k, r->head + 2, 2);
    memcpy(&v, r->head + 4, 4);
    r->klen = ntohs(k);
    r->f.type = (store_type)r->head[0];
    r->f.len = ntohl(v);
    if (r->klen >= STORE_KEY_MAX || r->f.type < ST_HELLO || r->f.type > ST_ABORT)
        return errno = EPROTO, -1;
    return 0;
}

/* The key whole: the value held to its limit before its room is made. */
static int take_key(store_reader *r, size_t val_max)
{
    size_t limit = r->f.type == ST_SET || r->f.type == ST_VAL ? val_max : STORE_WORDS_MAX;
    r->f.key[r->klen] = '\0';
    if (r->f.len > limit || r->f.len > STORE_VAL_MAX) return errno = EMSGSIZE, -1;
    r->f.val = malloc(r->f.len + 1);
    if (!r->f.val) return errno = ENOMEM, -1;
    r->f.val[r->f.len] = '\0';
    return 0;
}

/* Where the next bytes of r's frame go, and how many; 0 when it is whole. */
static size_t next_part(store_reader *r, char **dst)
{
    size_t h = STORE_HEAD_BYTES, k = h + r->klen;
    if (r->got < h) {
        *dst = (char *)r->head + r->got;
        return h - r->got;
    }
    if (r->got < k) {
        *dst = r->f.key + (r->got - h);
        return k - r->got;
    }
    *dst = r->f.val + (r->got - k);
    return r->f.len - (r->got - k);
}

/* After bytes came: the header, then the key, taken as each becomes whole. */
static int advance(store_reader *r, size_t val_max, size_t before)
{
    size_t h = STORE_HEAD_BYTES;
    if (before < h && r->got == h && take_head(r) != 0) return -1;
    if (r->got >= h && !r->f.val && r->got == h + r->klen) return take_key(r, val_max);
    return 0;
}

int store_read(int fd, store_reader *r, store_frame *out, size_t val_max, size_t budget)
{
    size_t taken = 0;
    for (;;) {
        char *dst;
        size_t want = next_part(r, &dst);
        if (want == 0) { /* whole */
            *out = r->f;
            memset(r, 0, sizeof *r);
            return 0;
        }
        if (taken >= budget) return 1;
        ssize_t n = recv(fd, dst, want, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK ? 1 : -1;
        if (n == 0) return r->got == 0 ? 2 : (errno = ECONNRESET, -1);
        size_t before = r->got;
        r->got += (size_t)n;
        taken += (size_t)n;
        if (advance(r, val_max, before) != 0) return -1;
    }
}

void store_reader_free(store_reader *r)
{
    free(r->f.val);
    memset(r, 0, sizeof *r);
}

int store_recv(int fd, store_frame *f, size_t val_max, double deadline_ms)
{
    store_reader r = {0};
    memset(f, 0, sizeof *f);
    for (;;) {
        int rc = store_read(fd, &r, f, val_max, SIZE_MAX);
        if (rc == 0) return 0;
        if (rc == 2) return 1;
        if (rc == 1 && wait_ready(fd, POLLIN, deadline_ms) == 0) continue;
        int err = errno;
        free(r.f.val);
        r.f.val = NULL;
        *f = r.f; /* what came, for the message */
        return errno = err, -1;
    }
}

void store_frame_free(store_frame *f)
{
    free(f->val);
    f->val = NULL;
}

size_t store_rendezvous_max(int nranks) { return 4096 + 256 * (size_t)(nranks > 0 ? nranks : 1); }

size_t store_roster_max(int nranks)
{
    return STORE_ROSTER_LINE_MAX * (size_t)(nranks > 0 ? nranks : 1);
}
