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

static volatile sig_atomic_t interrupt_signal;

static void on_interrupt(int sig) { interrupt_signal = sig; }

void dps_install_interrupt_handlers(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int dps_interrupted(void) { return interrupt_signal; }

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

const char *dps_status_name(dps_status code)
{
    switch (code) {
    case DPS_OK: return "ok";
    case DPS_ERR_OOM: return "oom";
    case DPS_ERR_TIMEOUT: return "timeout";
    case DPS_ERR_USAGE: return "usage";
    case DPS_SKIPPED: return "skipped";
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
