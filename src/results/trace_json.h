/* A configuration's timeline as a Chrome trace-event JSON file (what
 * Perfetto and chrome://tracing open): RESULTS/NAME/trace/<config_id>.json,
 * written atomically (temporary file, fsync, rename). One process per device
 * (dp) or rank (ddp), tid 1 its compute stream, tid 2 its communication (dp:
 * its copies on device 0's stream; ddp: the all-reduces); a complete event
 * per phase per traced step, lengths the step records' own; ddp's bucket
 * all-reduces with their bytes. */
#ifndef DPS_TRACE_JSON_H
#define DPS_TRACE_JSON_H

#include "config/config.h"
#include "results/results.h"

#define TRACE_JSON_DIR "trace"

/* The file of a configuration that ran all its steps and has a trace
 * (res->tl.steps > 0); DPS_ERR_RUNTIME naming the file when it cannot be
 * written, and then no file is left. */
dps_status trace_json_write(const results_dir *rd, const dps_config *c, const train_result *res,
                            const char *config_id) DPS_MUST_USE;

#endif
