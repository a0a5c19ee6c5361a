/* A fake libdrm_amdgpu (libdrm_amdgpu.so.1) for hami-vendor-ffi's tests. The "device"
 * is whatever file the fd names: it holds "<vram MiB> <active CUs>", or "fail <errno>"
 * to make amdgpu_device_initialize fail with -errno. amdgpu_query_info copies
 * min(size, its struct) bytes, as the kernel does. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vendor_abi.h"

struct fake_device {
    uint64_t vram_bytes;
    uint32_t cus;
};

int amdgpu_device_initialize(int fd, uint32_t *major, uint32_t *minor, void **handle) {
    char text[128];
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    if (n < 0) return -errno;
    text[n] = 0;
    int err;
    if (sscanf(text, "fail %d", &err) == 1) return -err;
    unsigned long long mib;
    unsigned cus;
    if (sscanf(text, "%llu %u", &mib, &cus) != 2) return -ENODEV;
    struct fake_device *d = malloc(sizeof *d);
    if (d == NULL) return -ENOMEM;
    d->vram_bytes = (uint64_t)mib << 20;
    d->cus = cus;
    *major = 3;
    *minor = 57;
    *handle = d;
    return 0;
}

int amdgpu_device_deinitialize(void *handle) {
    free(handle);
    return 0;
}

int amdgpu_query_info(void *handle, unsigned info_id, unsigned size, void *value) {
    struct fake_device *d = handle;
    if (d == NULL || value == NULL) return -EINVAL;
    if (info_id == 0x16) {
        struct drm_amdgpu_info_device info;
        memset(&info, 0xff, sizeof info);
        info.device_id = 0x74a1;
        info.cu_active_number = d->cus;
        memcpy(value, &info, size < sizeof info ? size : sizeof info);
        return 0;
    }
    if (info_id == 0x19) {
        struct drm_amdgpu_memory_info mem;
        memset(&mem, 0, sizeof mem);
        mem.vram.total_heap_size = d->vram_bytes;
        mem.vram.usable_heap_size = d->vram_bytes - (512ull << 20);
        mem.gtt.total_heap_size = 1ull << 40;
        memcpy(value, &mem, size < sizeof mem ? size : sizeof mem);
        return 0;
    }
    return -EINVAL;
}
