/* The two-signal rule's handlers (see err.h): async-signal-safe,
 * they count the signals in lock-free atomics and set the grace's alarm. */
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "core/err.h"

#define TEXT_OF(x) #x
#define TEXT(x) TEXT_OF(x)
#define GRACE_TEXT TEXT(DPS_ESCALATE_GRACE_S)

static _Atomic int first_signal; /* lock-free on every target: safe in a handler */
static _Atomic int signal_count;

static void on_interrupt(int sig)
{
    int none = 0;
    atomic_compare_exchange_strong(&first_signal, &none, sig);
    if (atomic_fetch_add(&signal_count, 1) == 1) alarm(DPS_ESCALATE_GRACE_S);
}

/* The grace is over: the process ends now, without what it was writing. */
static void on_grace_over(int sig)
{
    (void)sig;
    static const char msg[] = "dpscale: still running " GRACE_TEXT " s after the second SIGINT or "
                              "SIGTERM: exiting now, without the running configuration's row "
                              "(continue with --resume)\n";
    ssize_t ignored = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)ignored;
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

dps_status dps_fail_escalated(const char *what)
{
    return dps_fail(DPS_ERR_RUNTIME, "%s not done: a second %s ends the running step at once "
                    "(the steps before it are kept)", what, dps_signal_name(dps_interrupted()));
}
