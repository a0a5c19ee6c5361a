/* A fake ROCm SMI (librocm_smi64.so) for hami-vendor-ffi's tests: the functions the DCU
 * plugin calls, answering from fixture.h (FAKE_DCUS, FAKE_DCU_COUNT, FAKE_INIT_STATUS;
 * FAKE_OMIT_SERIAL leaves rsmi_dev_serial_number_get out), with rocm_smi.h's status
 * codes. */
#include <stdint.h>
#include <string.h>

struct fake_dcu {
    uint64_t bdfid;
    uint16_t device_id;
    const char *serial;
    uint64_t vram_bytes;
};

#include "fixture.h"

enum { SUCCESS = 0, INVALID_ARGS = 1, NOT_SUPPORTED = 2, INIT_ERROR = 8, INSUFFICIENT_SIZE = 11 };

static int initialised;

uint32_t rsmi_init(uint64_t flags) {
    (void)flags;
    if (FAKE_INIT_STATUS != 0) return FAKE_INIT_STATUS;
    initialised = 1;
    return SUCCESS;
}

uint32_t rsmi_shut_down(void) {
    initialised = 0;
    return SUCCESS;
}

uint32_t rsmi_num_monitor_devices(uint32_t *n) {
    if (!initialised) return INIT_ERROR;
    if (n == NULL) return INVALID_ARGS;
    *n = FAKE_DCU_COUNT;
    return SUCCESS;
}

uint32_t rsmi_dev_pci_id_get(uint32_t i, uint64_t *bdfid) {
    if (i >= FAKE_DCU_COUNT || bdfid == NULL) return INVALID_ARGS;
    *bdfid = FAKE_DCUS[i].bdfid;
    return SUCCESS;
}

uint32_t rsmi_dev_id_get(uint32_t i, uint16_t *id) {
    if (i >= FAKE_DCU_COUNT || id == NULL) return INVALID_ARGS;
    *id = FAKE_DCUS[i].device_id;
    return SUCCESS;
}

#ifndef FAKE_OMIT_SERIAL
uint32_t rsmi_dev_serial_number_get(uint32_t i, char *serial, uint32_t len) {
    if (i >= FAKE_DCU_COUNT || serial == NULL) return INVALID_ARGS;
    if (FAKE_DCUS[i].serial == NULL) return NOT_SUPPORTED;
    if (len < strlen(FAKE_DCUS[i].serial) + 1) return INSUFFICIENT_SIZE;
    strcpy(serial, FAKE_DCUS[i].serial);
    return SUCCESS;
}
#endif

uint32_t rsmi_dev_memory_total_get(uint32_t i, uint32_t type, uint64_t *total) {
    if (i >= FAKE_DCU_COUNT || total == NULL || type != 0) return INVALID_ARGS;
    if (FAKE_DCUS[i].vram_bytes == 0) return NOT_SUPPORTED;
    *total = FAKE_DCUS[i].vram_bytes;
    return SUCCESS;
}
