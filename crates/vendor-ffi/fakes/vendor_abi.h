/* The vendor declarations hami-vendor-ffi binds, as amdsmi.h and the kernel's
 * amdgpu_drm.h declare them (the newest amdsmi_asic_info_t; drm_amdgpu_info_device up to
 * ids_flags). Shared by the fake libraries and tests/abi.c, which checks the Rust
 * layouts against them. */
#ifndef HAMI_VENDOR_ABI_H
#define HAMI_VENDOR_ABI_H

#include <stdint.h>

typedef union {
    struct {
        uint64_t function_number : 3;
        uint64_t device_number : 5;
        uint64_t bus_number : 8;
        uint64_t domain_number : 48;
    };
    uint64_t as_uint;
} amdsmi_bdf_t;

typedef struct {
    char market_name[256];
    uint32_t vendor_id;
    char vendor_name[256];
    uint32_t subvendor_id;
    uint64_t device_id;
    uint32_t rev_id;
    char asic_serial[32];
    uint32_t oam_id;
    uint32_t num_of_compute_units;
    uint64_t target_graphics_version;
    uint32_t subsystem_id;
    uint32_t reserved[21];
} amdsmi_asic_info_t;

struct drm_amdgpu_info_device {
    uint32_t device_id, chip_rev, external_rev, pci_rev, family;
    uint32_t num_shader_engines, num_shader_arrays_per_engine, gpu_counter_freq;
    uint64_t max_engine_clock, max_memory_clock;
    uint32_t cu_active_number, cu_ao_mask;
    uint32_t cu_bitmap[4][4];
    uint32_t enabled_rb_pipes_mask, num_rb_pipes, num_hw_gfx_contexts, pcie_gen;
    uint64_t ids_flags;
};

struct drm_amdgpu_heap_info {
    uint64_t total_heap_size, usable_heap_size, heap_usage, max_allocation;
};

struct drm_amdgpu_memory_info {
    struct drm_amdgpu_heap_info vram, cpu_accessible_vram, gtt;
};

#endif
