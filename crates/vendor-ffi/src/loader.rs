//! `dlopen` and `dlsym` through libloading, with the errors naming the library.

use std::ffi::OsStr;

use crate::{FfiError, LibrarySpec};

/// A loaded library. The function pointers taken from it ([`Loaded::function`]) stay
/// valid while it is alive: every binding keeps them in the same struct as this value
/// and never hands them out.
#[derive(Debug)]
pub(crate) struct Loaded {
    library: libloading::Library,
    spec: LibrarySpec,
    path: String,
}

impl Loaded {
    /// Loads `path` (a file name is looked up on the loader's path, as `dlopen` does).
    pub(crate) fn open(spec: LibrarySpec, path: &OsStr) -> Result<Loaded, FfiError> {
        let shown = path.to_string_lossy().into_owned();
        // SAFETY: loading a library runs its initialisers. The path is the operator's
        // choice of a vendor library (AMD SMI, libdrm, ROCm SMI), whose initialisers
        // only set up their own state; nothing of this process is assumed by them.
        let library = unsafe { libloading::Library::new(path) }.map_err(|e| FfiError::Load {
            library: spec.name,
            path: shown.clone(),
            flag: spec.flag,
            env: spec.env,
            detail: e.to_string(),
        })?;
        Ok(Loaded {
            library,
            spec,
            path: shown,
        })
    }

    pub(crate) fn spec(&self) -> LibrarySpec {
        self.spec
    }

    /// The function `symbol` as a `T`.
    ///
    /// # Safety
    /// `T` must be the `unsafe extern "C" fn` type of the C declaration of `symbol`, and
    /// the pointer must not be called after this `Loaded` is dropped.
    pub(crate) unsafe fn function<T: Copy>(&self, symbol: &'static str) -> Result<T, FfiError> {
        // SAFETY: the caller guarantees `T` is the symbol's C function type; the
        // pointer is copied out of the `Symbol` and kept next to the library.
        let found = unsafe { self.library.get::<T>(symbol.as_bytes()) };
        match found {
            Ok(f) => Ok(*f),
            Err(e) => Err(FfiError::Symbol {
                library: self.spec.name,
                path: self.path.clone(),
                symbol,
                detail: e.to_string(),
            }),
        }
    }
}
