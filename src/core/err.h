/* Error codes and messages. Functions return a dps_status; the message
 * (what failed, where, what to do) is kept per thread and read by the
 * caller that decides what to do with it. Only main() exits. */
#ifndef DPS_ERR_H
#define DPS_ERR_H

typedef enum dps_status {
    DPS_OK = 0,
    DPS_ERR_RUNTIME,  /* a library call or the harness failed */
    DPS_ERR_OOM,      /* a device ran out of memory */
    DPS_ERR_TIMEOUT,  /* a step or a rank exceeded its time */
    DPS_ERR_USAGE,    /* bad input from the user: exit 2 */
    DPS_SKIPPED,      /* a configuration this machine cannot run (sweeps) */
    DPS_WAIVED,       /* a measurement with nothing to measure on this machine (links'
                       * WAIVED: no peer access to switch off); never a failure */
} dps_status;

#define DPS_ERRMSG_MAX 1024

/* Sets this thread's message and returns code. printf-style. */
dps_status dps_fail(dps_status code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* This thread's last message ("" if none). */
const char *dps_errmsg(void);
/* Copies a message (from another thread) into this thread's slot. */
dps_status dps_fail_copy(dps_status code, const char *msg);
/* Status name as written in runs.csv: ok, oom, timeout, skipped or error
 * (DPS_ERR_USAGE and DPS_ERR_RUNTIME); waived, which no configuration is. */
const char *dps_status_name(dps_status code);

/* On a function returning dps_status: the caller must look at it. */
#define DPS_MUST_USE __attribute__((warn_unused_result))

/* Returns from the calling function when expr fails. */
#define DPS_TRY(expr)                        \
    do {                                     \
        dps_status dps_try_rc_ = (expr);     \
        if (dps_try_rc_ != DPS_OK)           \
            return dps_try_rc_;              \
    } while (0)

/* SIGINT and SIGTERM, by the two-signal rule (core/interrupt.c). The first
 * asks for an orderly stop: the handlers only record it, long loops poll
 * dps_interrupted(), the running configuration ends after its step with its
 * row, and a sweep stops. The second, or DPS_STEP_GRACE_S after the first
 * with the step still running, escalates, as a launcher's SIGKILL would but
 * keeping what finished: dps_escalated() turns true, the step that runs is
 * cut short (device operations not yet begun fail at once, the waits for
 * other processes stop), its row is written with the steps before it and
 * the process exits 128 + the first signal. A process still running
 * DPS_ESCALATE_GRACE_S after escalating exits so from the handler. */
#define DPS_STEP_GRACE_S 5
#define DPS_ESCALATE_GRACE_S 10
/* Installs the handlers of SIGINT, SIGTERM and the graces' SIGALRM. */
void dps_install_interrupt_handlers(void);
int dps_interrupted(void); /* the first signal's number, 0 if none */
int dps_escalated(void);   /* a second one came, or the grace ended: the step ends now */
int dps_escalated_by_grace(void); /* it was the grace, no second signal */
/* What escalated: "a second signal" or "the signal's 5 s grace". */
const char *dps_escalation_cause(void);
/* DPS_ERR_RUNTIME: `what` was not done, as the second signal ended the step. */
dps_status dps_fail_escalated(const char *what) DPS_MUST_USE;
/* DPS_ERR_RUNTIME for a run the escalation ended in its set-up, before
 * its first step: "[PREFIX]interrupted by SIGINT in set-up, before step
 * 0, which a second signal cut short" (prefix: "" or "rank R: "). */
dps_status dps_fail_cut_in_setup(const char *prefix) DPS_MUST_USE;
const char *dps_signal_name(int sig); /* "SIGINT", "SIGTERM", ... */

/* Logging to stderr, prefixed "dpscale: ". */
void dps_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void dps_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
