//! Hygon's DCU models: the name of each PCI device ID (what `rsmi_dev_id_get` returns,
//! printed `%x`) and the compute units of each model, the tables HAMi's DCU plugin reads
//! through dcu-dcgm (`type2name`, `computeUnitType`). A device ID not listed has no
//! model name (the DCU is then not registered, `docs/device-plugin.md#hygon-dcu`); a
//! model not in the CU table has 0 CUs (no virtual DCUs on it).

/// The model name of PCI device ID `device_id`.
pub fn model_name(device_id: u16) -> Option<&'static str> {
    Some(match device_id {
        0x54b7 => "Z100",
        0x55b7 => "Z100L",
        0x55c7 | 0x55d7 => "Z200SM_71",
        0x61b7 | 0x61d7 | 0x61e7 => "K500SM",
        0x61a7 | 0x61c7 => "K500SM_B",
        0x6210 => "K100_AI",
        0x6211 => "K100_LC_E_AI",
        0x6212 => "K100_LC_AI",
        0x6213 => "K100_AI_i",
        0x62a0 | 0x62b0 => "K500SM_AI",
        0x62b7 => "K100",
        0x62c7 => "K100-LC",
        0x6310 => "BW200",
        0x6311 => "BW200_LC",
        0x6320 => "BW150",
        0x6321 => "BW100_LC",
        0x6370 => "BW100",
        _ => return None,
    })
}

/// The compute units of `model` (0 when the table does not list it).
pub fn compute_units(model: &str) -> u32 {
    match model {
        "K100_AI" | "K100_LC_AI" | "K100" => 120,
        "K100_LC_E_AI" => 128,
        "Z100" | "Z100L" => 60,
        "BW200" | "BW200_LC" | "BW100" | "BW100_LC" => 80,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_device_ids_hami_names() {
        assert_eq!(model_name(0x6210), Some("K100_AI"));
        assert_eq!(model_name(0x54b7), Some("Z100"));
        assert_eq!(model_name(0x55b7), Some("Z100L"));
        assert_eq!(model_name(0x62b7), Some("K100"));
        assert_eq!(model_name(0x1234), None);
        assert_eq!(compute_units("K100_AI"), 120);
        assert_eq!(compute_units("K100_LC_E_AI"), 128);
        assert_eq!(compute_units("Z100"), 60);
        assert_eq!(compute_units("K500SM"), 0);
    }
}
