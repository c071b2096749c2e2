/* The store's frames on a TCP connection (store_server.c, store_client.c):
 * an 8-byte header (type, key length, value length, in network order),
 * then the key and the value. Every reader bounds what it takes: a frame
 * that is not a value (SET, VAL) carries at most STORE_WORDS_MAX bytes, a
 * value at most the reader's limit (store.h's, from the world's size). */
#ifndef DPS_STORE_WIRE_H
#define DPS_STORE_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "comm/store.h"

/* Largest value the header can announce that any reader considers (a
 * rank's records of a long run fit); each reader's own limit is smaller. */
#define STORE_VAL_MAX ((size_t)1 << 30)
/* Largest value of a frame that is not a value: a hello, an owner, a
 * step, why a rank aborts. */
#define STORE_WORDS_MAX ((size_t)1024)
#define STORE_HEAD_BYTES 8

typedef enum store_type {
    ST_HELLO = 1, /* client: key "ctl" or "req", value "rank pid host nic" */
    ST_SET,       /* client: key, value */
    ST_GET,       /* client: key, value the owner rank ("-1": none) */
    ST_VAL,       /* server: the value asked for; or, key "ctl"/"req", the hello taken */
    ST_GONE,      /* server: the value's owner ended without it; value: why */
    ST_BEAT,      /* client, control: value the step begun */
    ST_BYE,       /* client, control: this rank has ended */
    ST_ABORT,     /* either way: value why (from the server: this connection is refused) */
} store_type;

typedef struct store_frame {
    store_type type;
    char key[STORE_KEY_MAX];
    char *val;     /* malloc'd, NUL-terminated after len bytes */
    size_t len;
} store_frame;

/* A frame read as its bytes come, on a connection that must not block
 * its reader (the server's): zeroed to begin. */
typedef struct store_reader {
    unsigned char head[STORE_HEAD_BYTES];
    size_t got;    /* bytes of this frame read so far; 0: none */
    size_t klen;
    store_frame f; /* type, key and len filled as they come */
} store_reader;

/* The frame's header for type, a key of klen bytes and a value of len. */
void store_head(unsigned char h[STORE_HEAD_BYTES], store_type type, size_t klen, size_t len);
/* Reads what fd holds now (at most about budget bytes), never waiting:
 * 0: a frame is whole, moved to *out (the caller's to free; r is ready
 * for the next); 1: not whole yet; 2: end of stream before a frame began; -1
 * with errno: an error, ECONNRESET (ended mid-frame), EPROTO (not a
 * frame), EMSGSIZE (a value over val_max, or words over STORE_WORDS_MAX:
 * r->f's type, key and len say what came). */
int store_read(int fd, store_reader *r, store_frame *out, size_t val_max, size_t budget);
void store_reader_free(store_reader *r);

/* Writes one frame whole; -1 with errno when the connection failed or
 * stayed full for deadline_ms (0: no limit). */
int store_send(int fd, store_type type, const char *key, const void *val, size_t len,
               double deadline_ms);
/* Reads one frame (a value at most val_max bytes); 0 and f filled, 1 at
 * end of stream before a frame, -1 with errno on an error, a malformed
 * frame (EPROTO), one over the limits (EMSGSIZE: f's type, key and len
 * say what came, f->val NULL) or the deadline (ETIMEDOUT; deadline_ms is
 * dps_now_ms()-based, 0: no limit). */
int store_recv(int fd, store_frame *f, size_t val_max, double deadline_ms);
void store_frame_free(store_frame *f);

#endif
