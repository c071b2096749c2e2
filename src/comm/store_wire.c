/* Reading and writing the store's frames whole on a TCP connection, with
 * a deadline (see store_wire.h). */
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

/* 0: all read; 1: end of stream before any byte; -1: error. */
static int recv_all(int fd, void *buf, size_t len, double deadline_ms)
{
    char *p = buf;
    size_t got = 0;
    while (got < len) {
        if (wait_ready(fd, POLLIN, deadline_ms) != 0) return -1;
        ssize_t n = recv(fd, p + got, len - got, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (n < 0) return -1;
        if (n == 0) return got == 0 ? 1 : (errno = ECONNRESET, -1);
        got += (size_t)n;
    }
    return 0;
}

int store_send(int fd, store_type type, const char *key, const void *val, size_t len,
               double deadline_ms)
{
    size_t klen = key ? strlen(key) : 0;
    if (klen >= STORE_KEY_MAX || len > STORE_VAL_MAX) return errno = EMSGSIZE, -1;
    unsigned char h[8] = {(unsigned char)type, 0};
    uint16_t k = htons((uint16_t)klen);
    uint32_t v = htonl((uint32_t)len);
    memcpy(h + 2, &k, 2);
    memcpy(h + 4, &v, 4);
    if (send_all(fd, h, sizeof h, deadline_ms) != 0) return -1;
    if (klen && send_all(fd, key, klen, deadline_ms) != 0) return -1;
    return len ? send_all(fd, val, len, deadline_ms) : 0;
}

int store_recv(int fd, store_frame *f, double deadline_ms)
{
    unsigned char h[8];
    memset(f, 0, sizeof *f);
    int rc = recv_all(fd, h, sizeof h, deadline_ms);
    if (rc != 0) return rc;
    uint16_t k;
    uint32_t v;
    memcpy(&k, h + 2, 2);
    memcpy(&v, h + 4, 4);
    size_t klen = ntohs(k);
    f->type = (store_type)h[0];
    f->len = ntohl(v);
    if (klen >= STORE_KEY_MAX || f->len > STORE_VAL_MAX || f->type < ST_HELLO || f->type > ST_ABORT)
        return errno = EPROTO, -1;
    rc = recv_all(fd, f->key, klen, deadline_ms);
    if (rc != 0) return errno = rc == 1 ? ECONNRESET : errno, -1; /* 1: ended mid-frame */
    f->key[klen] = '\0';
    f->val = malloc(f->len + 1);
    if (!f->val) return errno = ENOMEM, -1;
    f->val[f->len] = '\0';
    rc = recv_all(fd, f->val, f->len, deadline_ms);
    if (rc == 0) return 0;
    int err = rc == 1 ? ECONNRESET : errno;
    store_frame_free(f);
    return errno = err, -1;
}

void store_frame_free(store_frame *f)
{
    free(f->val);
    f->val = NULL;
}
