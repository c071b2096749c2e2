/* NVTX ranges (see nvtx.h): a domain, registered phase names, one colour
 * per phase. Built only with NVTX. */
#include "core/nvtx.h"

static int enabled = 1;

void nvtx_set_enabled(int on) { enabled = on; }

#ifdef DPS_HAVE_NVTX
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

static nvtxDomainHandle_t domain;
static nvtxStringHandle_t phase_str[PH_COUNT], step_str;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static const uint32_t phase_color[PH_COUNT] = {
    0xff9e9e9e, 0xffe53935, 0xfffb8c00, 0xff43a047, 0xff8e24aa,
    0xfffdd835, 0xff1e88e5, 0xffd81b60, 0xff00897b, 0xff80cbc4, 0xff6d4c41,
};

static void init_once(void)
{
    domain = nvtxDomainCreateA("dpscale");
    for (int p = 0; p < PH_COUNT; p++)
        phase_str[p] = nvtxDomainRegisterStringA(domain, dps_phase_names[p]);
    step_str = nvtxDomainRegisterStringA(domain, "step");
}

void nvtx_init(void) { pthread_once(&once, init_once); }

static void push(nvtxStringHandle_t name, uint32_t color, int64_t payload, int has_payload,
                 uint32_t category)
{
    nvtxEventAttributes_t a = {0};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.colorType = NVTX_COLOR_ARGB;
    a.color = color;
    a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    a.message.registered = name;
    a.category = category;
    if (has_payload) {
        a.payloadType = NVTX_PAYLOAD_TYPE_INT64;
        a.payload.llValue = payload;
    }
    nvtxDomainRangePushEx(domain, &a);
}

void nvtx_push_phase(dps_phase ph)
{
    if (!enabled) return;
    nvtx_init();
    push(phase_str[ph], phase_color[ph], 0, 0, 0);
}

void nvtx_push_step(int step)
{
    if (!enabled) return;
    nvtx_init();
    push(step_str, 0xff546e7a, step, 1, 0);
}

void nvtx_push_bucket(int bucket, uint64_t bytes)
{
    if (!enabled) return;
    nvtx_init();
    push(phase_str[PH_ALLREDUCE], phase_color[PH_ALLREDUCE], (int64_t)bytes, 1, (uint32_t)bucket);
}

void nvtx_pop(void)
{
    if (enabled) nvtxDomainRangePop(domain);
}

void nvtx_name_thread(const char *name)
{
    if (enabled) nvtxNameOsThreadA((uint32_t)syscall(SYS_gettid), name);
}
#endif
