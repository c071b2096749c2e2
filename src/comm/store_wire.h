/* The store's frames on a TCP connection (store_server.c, store_client.c):
 * an 8-byte header (type, key length, value length, in network order),
 * then the key and the value. */
#ifndef DPS_STORE_WIRE_H
#define DPS_STORE_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "comm/store.h"

/* Largest value a frame carries (a rank's records of a long run fit). */
#define STORE_VAL_MAX ((size_t)1 << 30)

typedef enum store_type {
    ST_HELLO = 1, /* client: key "ctl" or "req", value "rank pid host" */
    ST_SET,       /* client: key, value */
    ST_GET,       /* client: key, value the owner rank ("-1": none) */
    ST_VAL,       /* server: the value asked for */
    ST_GONE,      /* server: the value's owner ended without it; value: why */
    ST_BEAT,      /* client, control: value the step begun */
    ST_BYE,       /* client, control: this rank has ended */
    ST_ABORT,     /* either way, control: value why */
} store_type;

typedef struct store_frame {
    store_type type;
    char key[STORE_KEY_MAX];
    char *val;     /* malloc'd, NUL-terminated after len bytes */
    size_t len;
} store_frame;

/* Writes one frame whole; -1 with errno when the connection failed or
 * stayed full for deadline_ms (0: no limit). */
int store_send(int fd, store_type type, const char *key, const void *val, size_t len,
               double deadline_ms);
/* Reads one frame; 0 and f filled, 1 at end of stream before a frame, -1
 * with errno on an error, a malformed frame (EPROTO) or the deadline
 * (ETIMEDOUT; deadline_ms is dps_now_ms()-based, 0: no limit). */
int store_recv(int fd, store_frame *f, double deadline_ms);
void store_frame_free(store_frame *f);

#endif
