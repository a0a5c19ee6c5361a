/* A fake AMD SMI (libamd_smi.so) for hami-vendor-ffi's tests: the functions the plugin
 * calls, answering from fixture.h (FAKE_GPUS, FAKE_GPU_COUNT, FAKE_INIT_STATUS), with
 * the status codes of amdsmi.h and its struct layouts (vendor_abi.h). */
#include <stdint.h>
#include <string.h>

struct fake_gpu {
    uint64_t domain, bus, device, function;
    const char *uuid;
    const char *market_name;
};

#include "fixture.h"
#include "vendor_abi.h"

enum {
    SUCCESS = 0, INVAL = 1, NOT_SUPPORTED = 2, NOT_INIT = 32,
    INSUFFICIENT_SIZE = 41, ARG_PTR_NULL = 53,
};

static int initialised;
static char socket0;

uint32_t amdsmi_init(uint64_t flags) {
    if (FAKE_INIT_STATUS != 0) return FAKE_INIT_STATUS;
    if (flags != (1 << 1)) return INVAL; /* the plugin asks for AMD GPUs only */
    initialised = 1;
    return SUCCESS;
}

uint32_t amdsmi_shut_down(void) {
    initialised = 0;
    return SUCCESS;
}

uint32_t amdsmi_get_socket_handles(uint32_t *count, void **handles) {
    if (!initialised) return NOT_INIT;
    if (count == NULL) return ARG_PTR_NULL;
    if (handles == NULL) { *count = 1; return SUCCESS; }
    if (*count < 1) return INSUFFICIENT_SIZE;
    handles[0] = &socket0;
    *count = 1;
    return SUCCESS;
}

uint32_t amdsmi_get_processor_handles(void *socket, uint32_t *count, void **handles) {
    if (!initialised) return NOT_INIT;
    if (socket != &socket0 || count == NULL) return INVAL;
    if (handles == NULL) { *count = FAKE_GPU_COUNT; return SUCCESS; }
    if (*count < FAKE_GPU_COUNT) return INSUFFICIENT_SIZE;
    for (uint32_t i = 0; i < FAKE_GPU_COUNT; i++) handles[i] = (void *)&FAKE_GPUS[i];
    *count = FAKE_GPU_COUNT;
    return SUCCESS;
}

static const struct fake_gpu *gpu(void *handle) {
    for (uint32_t i = 0; i < FAKE_GPU_COUNT; i++)
        if (handle == (void *)&FAKE_GPUS[i]) return &FAKE_GPUS[i];
    return NULL;
}

uint32_t amdsmi_get_gpu_device_bdf(void *handle, amdsmi_bdf_t *bdf) {
    const struct fake_gpu *g = gpu(handle);
    if (g == NULL || bdf == NULL) return INVAL;
    bdf->as_uint = 0;
    bdf->function_number = g->function;
    bdf->device_number = g->device;
    bdf->bus_number = g->bus;
    bdf->domain_number = g->domain;
    return SUCCESS;
}

uint32_t amdsmi_get_gpu_device_uuid(void *handle, unsigned int *len, char *uuid) {
    const struct fake_gpu *g = gpu(handle);
    if (g == NULL || len == NULL || uuid == NULL) return INVAL;
    if (g->uuid == NULL) return NOT_SUPPORTED;
    if (*len < 38) return INSUFFICIENT_SIZE;
    strncpy(uuid, g->uuid, *len - 1);
    uuid[*len - 1] = 0;
    *len = (unsigned int)strlen(uuid);
    return SUCCESS;
}

uint32_t amdsmi_get_gpu_asic_info(void *handle, amdsmi_asic_info_t *info) {
    const struct fake_gpu *g = gpu(handle);
    if (g == NULL || info == NULL) return INVAL;
    memset(info, 0xff, sizeof *info); /* fields the plugin must not read */
    if (g->market_name == NULL) return NOT_SUPPORTED;
    strncpy(info->market_name, g->market_name, sizeof info->market_name - 1);
    info->market_name[sizeof info->market_name - 1] = 0;
    return SUCCESS;
}
