/* Per-thread error messages and stderr logging (see err.h). */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/err.h"

static _Thread_local char errmsg[DPS_ERRMSG_MAX];

dps_status dps_fail(dps_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errmsg, sizeof errmsg, fmt, ap);
    va_end(ap);
    return code;
}

dps_status dps_fail_copy(dps_status code, const char *msg)
{
    if (msg != errmsg) snprintf(errmsg, sizeof errmsg, "%s", msg);
    return code;
}

const char *dps_errmsg(void) { return errmsg; }

const char *dps_signal_name(int sig)
{
    switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGKILL: return "SIGKILL";
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    default: return "a signal";
    }
}

/* runs.csv's five words (docs/results.md): a configuration refused by a
 * check made while it ran (DPS_ERR_USAGE) did not run, as one that failed;
 * and a measurement's waived (links.csv says WAIVED). */
const char *dps_status_name(dps_status code)
{
    switch (code) {
    case DPS_OK: return "ok";
    case DPS_ERR_OOM: return "oom";
    case DPS_ERR_TIMEOUT: return "timeout";
    case DPS_SKIPPED: return "skipped";
    case DPS_WAIVED: return "waived";
    case DPS_ERR_USAGE:
    case DPS_ERR_RUNTIME: break;
    }
    return "error";
}

static void vlog(const char *prefix, const char *fmt, va_list ap)
{
    char line[2048];
    vsnprintf(line, sizeof line, fmt, ap);
    fprintf(stderr, "dpscale: %s%s\n", prefix, line);
}

void dps_log(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog("", fmt, ap);
    va_end(ap);
}

void dps_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog("warning: ", fmt, ap);
    va_end(ap);
}
