/* The store's keys (store_server.c): a table of at most a fixed number of
 * keys, found by hash in constant time, each remembering the rank that
 * set it, so that what one rank may hold is counted. */
#ifndef DPS_STORE_KEYS_H
#define DPS_STORE_KEYS_H

#include <stddef.h>

#include "comm/store.h"
#include "core/err.h"

typedef struct store_key {
    char key[STORE_KEY_MAX];
    char *val; /* malloc'd */
    size_t len;
    int owner;  /* the rank whose connection set it (-1: the server) */
    int record; /* set on a control connection: a rank's records */
} store_key;

typedef struct store_keys {
    store_key *keys; /* max entries, the first n in use */
    int n, max;
    int *slot;       /* nslots hash slots: -1 empty, else an index into keys */
    size_t nslots;   /* a power of two, at least twice max */
} store_keys;

/* A table for at most max keys. */
dps_status store_keys_init(store_keys *t, int max) DPS_MUST_USE;
void store_keys_free(store_keys *t);
/* key's entry; NULL if there is none. */
store_key *store_keys_find(const store_keys *t, const char *key);
/* A new entry for key (not in t) holding val (taken, malloc'd) for owner;
 * NULL when t holds max keys already (val is then still the caller's). */
store_key *store_keys_add(store_keys *t, const char *key, char *val, size_t len, int owner,
                          int record);
/* Removes every key that keep(key, ctx) refuses, its value freed; how many. */
int store_keys_drop(store_keys *t, int (*keep)(const store_key *, const void *), const void *ctx);

#endif
