/* An NVTX injection library (NVTX_INJECTION64_PATH) that logs every call dpscale makes to DPSCALE_NVTX_LOG. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#define NVTX_NO_IMPL
#include <nvtx3/nvToolsExt.h> /* with NVTX_NO_IMPL: types and the callback ids only */

#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The handles NVTX hands back to the program are ours: a domain or a
 * registered string is its text, in fixed tables (nothing to free, nothing
 * for a leak checker to report). */
struct nvtxDomainRegistration_st { char name[64]; };
struct nvtxStringRegistration_st { char text[128]; };

static struct nvtxDomainRegistration_st domains[16];
static struct nvtxStringRegistration_st strings[1024];
static atomic_uint ndomains, nstrings;
static int log_fd = -1;

int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table);

/* One line, one write(): O_APPEND keeps lines of threads and processes whole. */
static void log_line(const char *kind, const char *domain, const char *msg, const char *payload,
                     uint32_t category)
{
    if (log_fd < 0) return;
    char line[512];
    int n = snprintf(line, sizeof line, "%ld\t%d\t%s\t%s\t%s\t%s\t%" PRIu32 "\n",
                     (long)syscall(SYS_gettid), (int)getpid(), kind, domain ? domain : "-",
                     msg ? msg : "-", payload ? payload : "-", category);
    if (n > (int)sizeof line - 1) n = (int)sizeof line - 1;
    if (n > 0 && write(log_fd, line, (size_t)n) != n) log_fd = -1;
}

static const char *domain_name(nvtxDomainHandle_t d) { return d ? d->name : "(default)"; }

/* The text of an event's message, ASCII or registered (other kinds: "?"). */
static const char *message_text(const nvtxEventAttributes_t *a)
{
    if (a->messageType == NVTX_MESSAGE_TYPE_ASCII) return a->message.ascii;
    if (a->messageType == NVTX_MESSAGE_TYPE_REGISTERED && a->message.registered)
        return a->message.registered->text;
    return a->messageType == NVTX_MESSAGE_UNKNOWN ? "-" : "?";
}

/* The payload as an integer when it is one, else "-". */
static void payload_text(const nvtxEventAttributes_t *a, char *out, size_t cap)
{
    if (a->payloadType == NVTX_PAYLOAD_TYPE_UNSIGNED_INT64)
        snprintf(out, cap, "%" PRIu64, a->payload.ullValue);
    else if (a->payloadType == NVTX_PAYLOAD_TYPE_INT64)
        snprintf(out, cap, "%" PRId64, a->payload.llValue);
    else if (a->payloadType == NVTX_PAYLOAD_TYPE_UNSIGNED_INT32)
        snprintf(out, cap, "%" PRIu32, a->payload.uiValue);
    else if (a->payloadType == NVTX_PAYLOAD_TYPE_INT32)
        snprintf(out, cap, "%" PRId32, a->payload.iValue);
    else
        snprintf(out, cap, "-");
}

static void log_event(const char *kind, nvtxDomainHandle_t d, const nvtxEventAttributes_t *a)
{
    char payload[32];
    if (!a) {
        log_line(kind, domain_name(d), "?", "-", 0);
        return;
    }
    payload_text(a, payload, sizeof payload);
    log_line(kind, domain_name(d), message_text(a), payload, a->category);
}

static nvtxDomainHandle_t NVTX_API on_domain_create(const char *name)
{
    unsigned i = atomic_fetch_add(&ndomains, 1);
    nvtxDomainHandle_t d = i < sizeof domains / sizeof domains[0] ? &domains[i] : NULL;
    if (d) snprintf(d->name, sizeof d->name, "%s", name ? name : "");
    log_line("domain_create", d ? d->name : "(too many)", name, "-", 0);
    return d;
}

static nvtxStringHandle_t NVTX_API on_register_string(nvtxDomainHandle_t d, const char *text)
{
    unsigned i = atomic_fetch_add(&nstrings, 1);
    nvtxStringHandle_t s = i < sizeof strings / sizeof strings[0] ? &strings[i] : NULL;
    if (s) snprintf(s->text, sizeof s->text, "%s", text ? text : "");
    log_line("register_string", domain_name(d), text, "-", 0);
    return s;
}

static int NVTX_API on_domain_push(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a)
{
    log_event("push", d, a);
    return 0;
}

static int NVTX_API on_domain_pop(nvtxDomainHandle_t d)
{
    log_line("pop", domain_name(d), "-", "-", 0);
    return 0;
}

static void NVTX_API on_domain_mark(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a)
{
    log_event("mark", d, a);
}

static int NVTX_API on_push(const nvtxEventAttributes_t *a) { return on_domain_push(NULL, a); }

static int NVTX_API on_push_a(const char *msg)
{
    log_line("push", domain_name(NULL), msg, "-", 0);
    return 0;
}

static int NVTX_API on_pop(void) { return on_domain_pop(NULL); }

static void NVTX_API on_mark_a(const char *msg) { log_line("mark", domain_name(NULL), msg, "-", 0); }

static void NVTX_API on_name_thread(uint32_t tid, const char *name)
{
    char id[16];
    snprintf(id, sizeof id, "%" PRIu32, tid);
    log_line("name_thread", "-", name, id, 0);
}

typedef struct { unsigned id; NvtxFunctionPointer fn; } handler;

static const handler core_handlers[] = {
    {NVTX_CBID_CORE_MarkA, (NvtxFunctionPointer)on_mark_a},
    {NVTX_CBID_CORE_RangePushEx, (NvtxFunctionPointer)on_push},
    {NVTX_CBID_CORE_RangePushA, (NvtxFunctionPointer)on_push_a},
    {NVTX_CBID_CORE_RangePop, (NvtxFunctionPointer)on_pop},
    {NVTX_CBID_CORE_NameOsThreadA, (NvtxFunctionPointer)on_name_thread},
};

static const handler core2_handlers[] = {
    {NVTX_CBID_CORE2_DomainMarkEx, (NvtxFunctionPointer)on_domain_mark},
    {NVTX_CBID_CORE2_DomainRangePushEx, (NvtxFunctionPointer)on_domain_push},
    {NVTX_CBID_CORE2_DomainRangePop, (NvtxFunctionPointer)on_domain_pop},
    {NVTX_CBID_CORE2_DomainRegisterStringA, (NvtxFunctionPointer)on_register_string},
    {NVTX_CBID_CORE2_DomainCreateA, (NvtxFunctionPointer)on_domain_create},
};

/* Our handlers into one module's table; 0 when it is missing or too short. */
static int install(const NvtxExportTableCallbacks *cb, NvtxCallbackModule module,
                   const handler *h, size_t n)
{
    NvtxFunctionTable table = NULL;
    unsigned int size = 0;
    if (!cb->GetModuleFunctionTable(module, &table, &size) || !table) return 0;
    for (size_t i = 0; i < n; i++) {
        if (h[i].id >= size || !table[h[i].id]) return 0;
        *table[h[i].id] = h[i].fn;
    }
    return 1;
}

/* NVTX's entry point: open the log, install the handlers; 0 declines the injection. */
int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table)
{
    const char *path = getenv("DPSCALE_NVTX_LOG");
    if (!path || !*path) return 0;
    log_fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (log_fd < 0) return 0;
    const NvtxExportTableCallbacks *cb = get_export_table(NVTX_ETID_CALLBACKS);
    if (!cb || cb->struct_size < sizeof *cb) return 0;
    if (!install(cb, NVTX_CB_MODULE_CORE, core_handlers,
                 sizeof core_handlers / sizeof core_handlers[0]) ||
        !install(cb, NVTX_CB_MODULE_CORE2, core2_handlers,
                 sizeof core2_handlers / sizeof core2_handlers[0])) {
        log_line("init_failed", "-", "GetModuleFunctionTable", "-", 0);
        return 0;
    }
    log_line("init", "-", "-", "-", 0);
    return 1;
}
