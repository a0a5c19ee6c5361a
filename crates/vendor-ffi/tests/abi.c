/* The C side of tests/abi.rs: the layouts hami-vendor-ffi declares in Rust, as the
 * vendor headers declare them (vendor_abi.h, the declarations the fakes use too),
 * printed as "<name> <value>" lines for the Rust test to compare. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "vendor_abi.h"

/* amdsmi_asic_info_t of the oldest release (64-byte name); the newest is in vendor_abi.h. */
typedef struct {
    char market_name[64];
    uint32_t family;
    uint32_t vendor_id;
    uint32_t subvendor_id;
    uint64_t device_id;
    uint32_t rev_id;
    char asic_serial[32];
} asic_info_oldest;

static void bdf(uint64_t domain, uint64_t bus, uint64_t device, uint64_t function) {
    amdsmi_bdf_t b;
    b.as_uint = 0;
    b.domain_number = domain;
    b.bus_number = bus;
    b.device_number = device;
    b.function_number = function;
    printf("bdf %04llx:%02llx:%02llx.%llx %llu\n", (unsigned long long)domain,
           (unsigned long long)bus, (unsigned long long)device, (unsigned long long)function,
           (unsigned long long)b.as_uint);
}

int main(void) {
    printf("amdsmi_bdf_t.size %zu\n", sizeof(amdsmi_bdf_t));
    bdf(0, 0x19, 0, 0);
    bdf(0, 0xc, 0, 0);
    bdf(0x10, 0xde, 0x1f, 7);
    bdf(0xabcd, 0x3d, 0x02, 1);
    printf("asic_oldest.size %zu\n", sizeof(asic_info_oldest));
    printf("asic_oldest.align %zu\n", _Alignof(asic_info_oldest));
    printf("asic_oldest.market_name %zu\n", offsetof(asic_info_oldest, market_name));
    printf("asic_newest.size %zu\n", sizeof(amdsmi_asic_info_t));
    printf("asic_newest.align %zu\n", _Alignof(amdsmi_asic_info_t));
    printf("asic_newest.market_name %zu\n", offsetof(amdsmi_asic_info_t, market_name));
    printf("asic_newest.market_name.size %zu\n", sizeof(((amdsmi_asic_info_t *)0)->market_name));
    printf("info_device.max_engine_clock %zu\n", offsetof(struct drm_amdgpu_info_device, max_engine_clock));
    printf("info_device.max_memory_clock %zu\n", offsetof(struct drm_amdgpu_info_device, max_memory_clock));
    printf("info_device.cu_active_number %zu\n", offsetof(struct drm_amdgpu_info_device, cu_active_number));
    printf("info_device.cu_bitmap %zu\n", offsetof(struct drm_amdgpu_info_device, cu_bitmap));
    printf("memory_info.size %zu\n", sizeof(struct drm_amdgpu_memory_info));
    printf("memory_info.align %zu\n", _Alignof(struct drm_amdgpu_memory_info));
    printf("memory_info.vram.total_heap_size %zu\n", offsetof(struct drm_amdgpu_memory_info, vram.total_heap_size));
    printf("memory_info.gtt %zu\n", offsetof(struct drm_amdgpu_memory_info, gtt));
    return 0;
}
