/* Strict mode's view of the collectives (comm_strict.c): their accesses
 * declared on a stream of the group's, ordered by events as NCCL's are.
 * Each call returns at once when the backend is not strict. */
#ifndef DPS_COMM_STRICT_H
#define DPS_COMM_STRICT_H

#include "comm/comm.h"

/* The collectives' stream, after the implementation opened. */
dps_status comm_strict_open(comm *c) DPS_MUST_USE;
void comm_strict_close(comm *c);
/* Async collective op (its name) number ticket of the step: after `after`, it writes buf's bytes. */
dps_status comm_strict_async(comm *c, const char *op, void *buf, size_t bytes, be_event *after,
                             int ticket) DPS_MUST_USE;
/* Stream s waits for the step's collective number ticket (and the earlier ones). */
dps_status comm_strict_wait(comm *c, be_stream *s, int ticket) DPS_MUST_USE;
/* A blocking collective op on buf's bytes: after the host's work, before the host goes on. */
dps_status comm_strict_blocking(comm *c, const char *op, void *buf, size_t bytes) DPS_MUST_USE;
/* The host waits for every collective (comm_sync). */
dps_status comm_strict_sync(comm *c) DPS_MUST_USE;

#endif
