//! Kubelet's check of a registering plugin's resource name (`IsExtendedResourceName`).
//!
//! A device plugin may only advertise an *extended* resource: a domain-prefixed name outside
//! the `kubernetes.io/` namespace that still forms a valid quota name once `requests.` is put
//! in front of it.

const REQUESTS_PREFIX: &str = "requests.";
const NATIVE_NAMESPACE: &str = "kubernetes.io/";
const NAME_MAX_LEN: usize = 63;
const SUBDOMAIN_MAX_LEN: usize = 253;

/// Whether kubelet accepts `name` as a device plugin resource.
pub fn is_extended_resource_name(name: &str) -> bool {
    let native = !name.contains('/') || name.contains(NATIVE_NAMESPACE);
    if native || name.starts_with(REQUESTS_PREFIX) {
        return false;
    }
    is_qualified_name(&format!("{REQUESTS_PREFIX}{name}"))
}

/// `[prefix "/"] name` with a DNS-1123 subdomain prefix and a name of at most 63
/// characters matching `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`.
fn is_qualified_name(value: &str) -> bool {
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if !is_dns1123_subdomain(prefix) {
                return false;
            }
            *name
        }
        _ => return false,
    };
    is_qualified_name_part(name)
}

fn is_qualified_name_part(name: &str) -> bool {
    let bytes = name.as_bytes();
    let (Some(first), Some(last)) = (bytes.first(), bytes.last()) else {
        return false;
    };
    name.len() <= NAME_MAX_LEN
        && first.is_ascii_alphanumeric()
        && last.is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

fn is_dns1123_subdomain(value: &str) -> bool {
    !value.is_empty() && value.len() <= SUBDOMAIN_MAX_LEN && value.split('.').all(is_dns1123_label)
}

fn is_dns1123_label(label: &str) -> bool {
    let bytes = label.as_bytes();
    let (Some(first), Some(last)) = (bytes.first(), bytes.last()) else {
        return false;
    };
    let lower_alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    lower_alnum(first) && lower_alnum(last) && bytes.iter().all(|b| lower_alnum(b) || *b == b'-')
}

#[cfg(test)]
mod tests {
    use super::is_extended_resource_name as ok;

    #[test]
    fn accepts_vendor_resources() {
        for name in [
            "nvidia.com/gpu",
            "hami.io/vgpu",
            "example.com/a_b.c-d",
            "a/b",
            "x.y-z.io/Foo9",
        ] {
            assert!(ok(name), "{name}");
        }
    }

    #[test]
    fn refuses_native_unprefixed_and_malformed_names() {
        for name in [
            "gpu",
            "cpu",
            "kubernetes.io/gpu",
            "foo.kubernetes.io/gpu",
            "requests.nvidia.com/gpu",
            "nvidia.com/",
            "/gpu",
            "nvidia.com/gpu/extra",
            "Nvidia.com/gpu",
            "nvidia..com/gpu",
            "-nvidia.com/gpu",
            "nvidia.com/-gpu",
            "nvidia.com/gpu-",
            "nvidia.com/g pu",
            "",
        ] {
            assert!(!ok(name), "{name}");
        }
        assert!(ok(&format!("a.io/{}", "x".repeat(63))));
        assert!(!ok(&format!("a.io/{}", "x".repeat(64))));
    }
}
