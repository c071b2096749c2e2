/* A convolution's algorithm chosen once per shape, as cudnn.benchmark does (see conv_algo.h). */
#include <stdint.h>
#include <stdlib.h>

#include "backend/conv_algo.h"

int conv_key_eq(const conv_key *a, const conv_key *b)
{
    const be_conv *x = &a->cv, *y = &b->cv;
    return a->dir == b->dir && x->n == y->n && x->c == y->c && x->h == y->h && x->w == y->w &&
           x->k == y->k && x->r == y->r && x->s == y->s && x->pad_h == y->pad_h &&
           x->pad_w == y->pad_w && x->str_h == y->str_h && x->str_w == y->str_w &&
           x->dil_h == y->dil_h && x->dil_w == y->dil_w && x->groups == y->groups &&
           x->t == y->t && (x->tf32 != 0) == (y->tf32 != 0);
}

int conv_algo_pick(const conv_perf *perf, int n, size_t limit)
{
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (!perf[i].ok || perf[i].bytes > limit || perf[i].ms < 0) continue;
        if (best < 0 || perf[i].ms < perf[best].ms) best = i;
    }
    return best;
}

size_t conv_find_workspace(const size_t *need, int n, size_t free_bytes)
{
    size_t ws = 0;
    for (int i = 0; i < n; i++)
        if (need[i] != SIZE_MAX && need[i] <= free_bytes && need[i] > ws) ws = need[i];
    return ws;
}

const conv_choice *conv_cache_find(const conv_cache *c, const conv_key *key)
{
    for (int i = 0; i < c->n; i++)
        if (conv_key_eq(&c->key[i], key)) return &c->choice[i];
    return NULL;
}

dps_status conv_cache_put(conv_cache *c, const conv_key *key, conv_choice choice)
{
    for (int i = 0; i < c->n; i++)
        if (conv_key_eq(&c->key[i], key)) {
            c->choice[i] = choice;
            return DPS_OK;
        }
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 16;
        conv_key *k = realloc(c->key, (size_t)cap * sizeof *k);
        if (k) c->key = k;
        conv_choice *ch = k ? realloc(c->choice, (size_t)cap * sizeof *ch) : NULL;
        if (!ch)
            return dps_fail(DPS_ERR_RUNTIME, "out of host memory keeping the algorithm of "
                            "convolution %d of the run", c->n + 1);
        c->choice = ch;
        c->cap = cap;
    }
    c->key[c->n] = *key;
    c->choice[c->n++] = choice;
    return DPS_OK;
}

size_t conv_cache_max_bytes(const conv_cache *c)
{
    size_t most = 0;
    for (int i = 0; i < c->n; i++)
        if (c->choice[i].bytes > most) most = c->choice[i].bytes;
    return most;
}

void conv_cache_free(conv_cache *c)
{
    free(c->key);
    free(c->choice);
    c->key = NULL;
    c->choice = NULL;
    c->n = c->cap = 0;
}
