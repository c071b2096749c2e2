/* A C interface to Gloo (the C++ library PyTorch's CPU backend uses):
 * a full mesh of TCP connections made through the caller's key-value
 * store, and Gloo's all-reduce, reduce-scatter, all-gather, broadcast and
 * barrier on host memory (gloo_shim.cc is the only C++ in dpscale). */
#ifndef DPS_GLOO_SHIM_H
#define DPS_GLOO_SHIM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The rendezvous: set a key, and get one once some rank has set it
 * (malloc'd). Each returns 0, or non-zero with a message in err. */
typedef struct gloo_store_ops {
    int (*set)(void *ctx, const char *key, const void *val, size_t len, char *err, size_t errlen);
    int (*get)(void *ctx, const char *key, void **val, size_t *len, double timeout_ms, char *err,
               size_t errlen);
    void *ctx;
} gloo_store_ops;

typedef struct gloo_shim gloo_shim;

/* What a call returns: done, failed, or past the group's timeout. */
enum { GLOO_SHIM_OK = 0, GLOO_SHIM_ERROR = 1, GLOO_SHIM_TIMEOUT = 2 };

/* Where the ranks exchange Gloo's addresses: the caller's store, or, when
 * dir is not NULL, Gloo's FileStore in that shared folder, each key's file
 * named prefix + key. */
typedef struct gloo_rendezvous {
    const gloo_store_ops *store;
    const char *dir, *prefix;
} gloo_rendezvous;

/* Connects rank to every other of size through Gloo's TCP transport,
 * listening on addr (this host's address its peers reach; iface, if not
 * NULL, names the interface instead). timeout_ms bounds every wait. */
int gloo_shim_open(int rank, int size, const char *addr, const char *iface, double timeout_ms,
                   const gloo_rendezvous *rv, gloo_shim **out, char *err, size_t errlen);
/* Sums n elements in place on every rank (bf16: 2-byte bfloat16, else float). */
int gloo_shim_allreduce(gloo_shim *g, void *buf, size_t n, int bf16, char *err, size_t errlen);
/* In place over n elements in chunks of n*i/size .. n*(i+1)/size
 * (comm_chunk_range's): reduce_scatter leaves in this rank's chunk the sum
 * of every rank's (the rest is scratch); all_gather copies every rank's
 * chunk into every buffer. */
int gloo_shim_reduce_scatter(gloo_shim *g, void *buf, size_t n, int bf16, char *err, size_t errlen);
int gloo_shim_all_gather(gloo_shim *g, void *buf, size_t n, int bf16, char *err, size_t errlen);
int gloo_shim_broadcast(gloo_shim *g, void *buf, size_t bytes, int root, char *err, size_t errlen);
int gloo_shim_barrier(gloo_shim *g, char *err, size_t errlen);
/* From any thread: closes every connection, so that the peers' blocked
 * calls fail at once. This rank's own blocked call is not woken (Gloo
 * wakes it only on a peer's end or its timeout). */
void gloo_shim_abort(gloo_shim *g);
void gloo_shim_close(gloo_shim *g);

#ifdef __cplusplus
}
#endif

#endif
