/* The group's rendezvous across hosts: a small key-value store over TCP
 * that global rank 0 serves (store_server.c) and every rank, rank 0
 * included, reaches as a client (store_client.c). Besides keys (Gloo's
 * address exchange, NCCL's unique id, each rank's records at the end) it
 * keeps the group alive together: each rank holds a control connection on
 * which it says where it runs, which step it began and that it finished;
 * a rank whose connection closes before that is gone, and the server tells
 * every other rank to abort. */
#ifndef DPS_STORE_H
#define DPS_STORE_H

#include <stddef.h>

#include "core/err.h"

#define STORE_HOST_MAX 64
#define STORE_KEY_MAX 256
/* The key the server sets once every rank has arrived: one line per rank,
 * "rank pid host address interface". */
#define STORE_ROSTER_KEY "dpscale/roster"

/* What a world of n ranks can need, and so all the store takes from
 * anyone (docs/DESIGN.md, "The store's bounds"). A configuration's keys
 * are at most 4 a rank (Gloo's host name and addresses, rank 0's file
 * prefix and NCCL id) and one record (a rank's records, on its control
 * connection); at most three configurations' keys are live at once (the
 * two rank 0 began last, and the next one a faster rank began). */
#define STORE_KEYS_PER_RANK 16
#define STORE_RECORDS_PER_RANK 3
/* A roster line: two numbers, a host, an address, an interface, spaces. */
#define STORE_ROSTER_LINE_MAX (2 * 12 + STORE_HOST_MAX + 64 + 32 + 8)
/* Connections beyond a rank's two: newcomers not yet said hello. */
#define STORE_CONNS_SPARE 8
/* The largest value a rendezvous key holds: Gloo's addresses (one of 136
 * bytes a peer at most), NCCL's id, a file prefix. */
size_t store_rendezvous_max(int nranks);
/* The largest roster of nranks. */
size_t store_roster_max(int nranks);

typedef struct store_server store_server;
typedef struct dps_store dps_store;

/* One rank as the roster lists it. */
typedef struct store_member {
    int pid;
    char host[STORE_HOST_MAX];  /* its hostname */
    char addr[64];              /* the address it reached the server from */
    char nic[32];               /* the interface of that address ("eth0"; "unknown") */
} store_member;

/* Rank 0: serves the store on every address at port (0: one the kernel
 * picks, store_server_port says which) for nranks ranks, on a thread of its
 * own; ranks that have not all arrived within timeout_ms fail the group. */
dps_status store_server_start(int port, int nranks, double timeout_ms, store_server **out)
    DPS_MUST_USE;
/* store_server_start in two halves, for a process that forks after the
 * port is known: listen (no thread yet, so a fork copies no thread that
 * may hold a lock), then serve; store_server_stop takes either. */
dps_status store_server_listen(int port, int nranks, double timeout_ms, store_server **out)
    DPS_MUST_USE;
dps_status store_server_serve(store_server *s) DPS_MUST_USE;
int store_server_port(const store_server *s);
/* The group's first failure as the server saw it (a rank gone without a
 * word, ranks that never arrived, or, *asked set, an abort a rank asked
 * for): DPS_OK and "" if none. */
dps_status store_server_failure(store_server *s, int *asked, char *why, size_t len);
/* "rank 0 step 4, rank 1 step 2 (host b, pid 7)": the step each rank began
 * last, for a timeout's message. */
void store_server_explain(store_server *s, char *buf, size_t len);
/* Rank 0, as a configuration whose keys start with prefix begins: a
 * record (a rank's records, set on its control connection) may be up to
 * records_bytes, and the keys of every configuration before the last one
 * begun are dropped (every rank has ended those). */
void store_server_begin(store_server *s, const char *prefix, size_t records_bytes);
/* Waits until every rank has ended or is gone (at most timeout_ms; 0: no limit). */
void store_server_wait_ended(store_server *s, double timeout_ms);
/* Closes every connection (ranks still running then end) and frees s. */
void store_server_stop(store_server *s);

/* Rank `rank` of nranks: connects to the server at addr:port (retrying until timeout_ms,
 * the server may not listen yet; each connect and each answer waited for
 * within what is left of it) and says where it runs; refused (another
 * process has this rank), DPS_ERR_RUNTIME with the server's reason. */
dps_status store_connect(const char *addr, int port, int rank, int nranks, double timeout_ms,
                         dps_store **out) DPS_MUST_USE;
/* Every later key of this rank's is prefix + key ("c2/": the third
 * configuration's), so that one run's keys never meet another's. */
void store_set_prefix(dps_store *s, const char *prefix);
dps_status store_set(dps_store *s, const char *key, const void *val, size_t len) DPS_MUST_USE;
/* The value of key once some rank has set it (malloc'd into *val). owner
 * (-1: none) is the rank that sets it: if that rank is gone or has ended
 * without setting it, DPS_ERR_RUNTIME at once. timeout_ms 0: the store's. */
dps_status store_get(dps_store *s, const char *key, int owner, void **val, size_t *len,
                     double timeout_ms) DPS_MUST_USE;
/* store_get of a value that may be up to max_len bytes (a rank's records;
 * store_get's values are rendezvous keys, store_rendezvous_max). */
dps_status store_get_max(dps_store *s, const char *key, int owner, size_t max_len, void **val,
                         size_t *len, double timeout_ms) DPS_MUST_USE;
/* Every rank's place, once all have arrived (waits until the timeout
 * store_connect began ends; rank 0 half a second more, past its server's). */
dps_status store_roster(dps_store *s, store_member *members, int nranks) DPS_MUST_USE;
/* The address this rank reached the server from: where its peers reach it. */
const char *store_local_addr(const dps_store *s);
/* When that address is a loopback one (rank 0 reaching itself through
 * MASTER_ADDR=$(hostname), which Debian maps to 127.0.1.1) and some rank
 * runs on another host: the local address that routes to that rank
 * instead. members: the roster. */
void store_route_past_loopback(dps_store *s, const store_member *members, int nranks);

/* The control connection, watched on a thread: every 10 ms state(ctx,
 * &step) says the step this rank runs and returns whether it waits in a
 * collective, sent when either changes; on_lost(ctx, why) runs on that
 * thread when the server tells this rank to abort or is gone. */
typedef int (*store_state_fn)(void *ctx, int *step);
typedef void (*store_lost_fn)(void *ctx, const char *why);
dps_status store_watch(dps_store *s, store_state_fn state, store_lost_fn on_lost, void *ctx)
    DPS_MUST_USE;
/* Asks the server to abort every other rank, for why. */
void store_abort(dps_store *s, const char *why);
/* Sets key on the control connection, after everything this rank said
 * there before (its records: they arrive before its end). */
dps_status store_post(dps_store *s, const char *key, const void *val, size_t len) DPS_MUST_USE;
/* Says this rank has ended: the server no longer counts it gone when its
 * connection closes. */
void store_finish(dps_store *s);
/* Stops the watch thread, closes both connections and frees s. */
void store_close(dps_store *s);

#endif
