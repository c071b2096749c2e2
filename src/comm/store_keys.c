/* The store's key table (see store_keys.h): open addressing with linear
 * probing over twice as many slots as keys, rebuilt when keys are dropped
 * (once a configuration), so a lookup costs the same at any count. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm/store_keys.h"
#include "core/util.h"

static uint64_t hash_of(const char *key) /* FNV-1a */
{
    uint64_t h = 1469598103934665603ull;
    for (const unsigned char *p = (const unsigned char *)key; *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    return h;
}

/* The slot of key, or the empty slot where it would go. */
static size_t slot_of(const store_keys *t, const char *key)
{
    size_t mask = t->nslots - 1, i = (size_t)hash_of(key) & mask;
    while (t->slot[i] >= 0 && strcmp(t->keys[t->slot[i]].key, key) != 0) i = (i + 1) & mask;
    return i;
}

dps_status store_keys_init(store_keys *t, int max)
{
    memset(t, 0, sizeof *t);
    t->max = max;
    t->nslots = 16;
    while (t->nslots < 2 * (size_t)max) t->nslots *= 2;
    t->keys = calloc((size_t)max, sizeof *t->keys);
    t->slot = malloc(t->nslots * sizeof *t->slot);
    if (!t->keys || !t->slot) {
        store_keys_free(t);
        return dps_fail(DPS_ERR_RUNTIME, "rank 0: out of host memory for the store's %d keys", max);
    }
    for (size_t i = 0; i < t->nslots; i++) t->slot[i] = -1;
    return DPS_OK;
}

void store_keys_free(store_keys *t)
{
    for (int i = 0; i < t->n; i++) free(t->keys[i].val);
    free(t->keys);
    free(t->slot);
    memset(t, 0, sizeof *t);
}

store_key *store_keys_find(const store_keys *t, const char *key)
{
    int i = t->slot[slot_of(t, key)];
    return i >= 0 ? &t->keys[i] : NULL;
}

store_key *store_keys_add(store_keys *t, const char *key, char *val, size_t len, int owner,
                          int record)
{
    if (t->n == t->max) return NULL;
    store_key *e = &t->keys[t->n];
    *e = (store_key){.val = val, .len = len, .owner = owner, .record = record};
    dps_strlcpy(e->key, key, sizeof e->key);
    t->slot[slot_of(t, key)] = t->n++;
    return e;
}

int store_keys_drop(store_keys *t, int (*keep)(const store_key *, const void *), const void *ctx)
{
    int kept = 0, dropped = 0;
    for (int i = 0; i < t->n; i++) {
        if (keep(&t->keys[i], ctx)) t->keys[kept++] = t->keys[i];
        else {
            free(t->keys[i].val);
            dropped++;
        }
    }
    t->n = kept;
    for (size_t i = 0; i < t->nslots; i++) t->slot[i] = -1;
    for (int i = 0; i < t->n; i++) t->slot[slot_of(t, t->keys[i].key)] = i;
    return dropped;
}
