/* The two-signal rule's handlers (see err.h): async-signal-safe,
 * they count the signals in lock-free atomics and set the graces' alarms. */
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/err.h"

#define TEXT_OF(x) #x
#define TEXT(x) TEXT_OF(x)
#define GRACE_TEXT TEXT(DPS_ESCALATE_GRACE_S)
#define STEP_GRACE_TEXT TEXT(DPS_STEP_GRACE_S)

/* A second signal this soon after the first is the same one again: a
 * terminal's ^C reaches a sweep and its child, which the sweep passes it on
 * to, and `timeout` sends it to its child and to the child's group. */
#define SAME_SIGNAL_NS 100000000LL

static _Atomic int first_signal; /* lock-free on every target: safe in a handler */
static _Atomic int signal_count;
static _Atomic int escalated_by_grace; /* the step outlived the first signal's grace */
static _Atomic long long first_ns;     /* CLOCK_MONOTONIC of the first */

static void say(const char *msg, size_t len)
{
    ssize_t ignored = write(STDERR_FILENO, msg, len);
    (void)ignored;
}

static long long monotonic_ns(void) /* clock_gettime: async-signal-safe */
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void on_interrupt(int sig)
{
    int none = 0;
    long long now = monotonic_ns();
    if (atomic_compare_exchange_strong(&first_signal, &none, sig)) atomic_store(&first_ns, now);
    int before = atomic_load(&signal_count);
    if (before == 1 && now - atomic_load(&first_ns) < SAME_SIGNAL_NS) return;
    before = atomic_fetch_add(&signal_count, 1);
    if (before == 0) alarm(DPS_STEP_GRACE_S);
    if (before == 1) alarm(DPS_ESCALATE_GRACE_S);
}

/* The first signal's grace is over with the step still running: it is cut
 * short as a second signal would cut it. The second's grace is over: the
 * process ends now, without what it was writing. */
static void on_grace_over(int sig)
{
    (void)sig;
    int one = 1;
    if (atomic_compare_exchange_strong(&signal_count, &one, 2)) {
        static const char step[] = "dpscale: the running step did not end within "
                                   STEP_GRACE_TEXT " s of the signal: cutting it short (the steps "
                                   "before it are kept)\n";
        atomic_store(&escalated_by_grace, 1);
        say(step, sizeof step - 1);
        alarm(DPS_ESCALATE_GRACE_S);
        return;
    }
    static const char msg[] = "dpscale: still running " GRACE_TEXT " s after the second SIGINT or "
                              "SIGTERM: exiting now, without the running configuration's row "
                              "(continue with --resume)\n";
    say(msg, sizeof msg - 1);
    int first = atomic_load(&first_signal);
    _exit(128 + (first ? first : SIGINT));
}

static void install(int sig, void (*fn)(int))
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = fn;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGINT);
    sigaddset(&sa.sa_mask, SIGTERM);
    sigaction(sig, &sa, NULL);
}

void dps_install_interrupt_handlers(void)
{
    _Static_assert(ATOMIC_INT_LOCK_FREE == 2, "the handlers need lock-free int atomics");
    install(SIGINT, on_interrupt);
    install(SIGTERM, on_interrupt);
    install(SIGALRM, on_grace_over);
}

int dps_interrupted(void) { return atomic_load(&first_signal); }

int dps_escalated(void) { return atomic_load(&signal_count) >= 2; }

int dps_escalated_by_grace(void) { return atomic_load(&escalated_by_grace); }

const char *dps_escalation_cause(void)
{
    return dps_escalated_by_grace() ? "the signal's " STEP_GRACE_TEXT " s grace"
                                    : "a second signal";
}

dps_status dps_fail_escalated(const char *what)
{
    return dps_fail(DPS_ERR_RUNTIME, "%s not done: %s after %s ends the running step at once "
                    "(the steps before it are kept)", what, dps_escalation_cause(),
                    dps_signal_name(dps_interrupted()));
}

dps_status dps_fail_cut_in_setup(const char *prefix)
{
    return dps_fail(DPS_ERR_RUNTIME, "%sinterrupted by %s in set-up, before step 0, which %s cut "
                    "short", prefix, dps_signal_name(dps_interrupted()), dps_escalation_cause());
}
