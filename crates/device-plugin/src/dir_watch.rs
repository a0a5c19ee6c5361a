//! One inotify instance per process, shared by every directory watch in it.
//!
//! inotify instances are a scarce per-user resource (`fs.inotify.max_user_instances`, 128
//! by default, and a container or CI runner cannot raise it) while watches are plentiful
//! (`max_user_watches`). A production device plugin runs one plugin per process and gets
//! one instance, as before; a process that runs many plugins (the demo cluster runs one
//! per emulated node, each on a fake backend that watches its device file) would run out
//! of instances with one watcher each. So every watch goes through one [`DirWatcher`]
//! (per process: [`DirWatcher::shared`]) that watches each directory once and hands its
//! events to the subscribers of that directory.
//!
//! Events only say "look again": a subscriber re-reads what it cares about. An event the
//! watcher cannot route (the kernel's queue overflowed, the watcher reported an error)
//! goes to every subscriber.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use notify::event::Flag;
use notify::{Event, EventKind, RecursiveMode, Watcher};

/// What the watcher calls with every event.
pub type Handler = Box<dyn FnMut(notify::Result<Event>) + Send>;
/// Builds the watcher around its handler (tests build one that fails or is scripted).
pub type WatcherFactory =
    Box<dyn Fn(Handler) -> notify::Result<Box<dyn Watcher + Send>> + Send + Sync>;
/// A subscriber's callback; it runs on the watcher's thread, so it must not block.
type Callback = Arc<dyn Fn(&Event) + Send + Sync>;

/// Watches directories for every subscriber of a process through one watcher.
#[derive(Clone)]
pub struct DirWatcher {
    inner: Arc<Inner>,
}

struct Inner {
    factory: WatcherFactory,
    /// Created on the first subscription (again after a failed attempt). Locked before
    /// `routes` and never while the watcher's thread waits on `routes`: the handler takes
    /// `routes` only.
    watcher: Mutex<Option<Box<dyn Watcher + Send>>>,
    routes: Arc<Mutex<Routes>>,
}

#[derive(Default)]
struct Routes {
    next_id: u64,
    by_dir: HashMap<PathBuf, Vec<(u64, Callback)>>,
}

impl std::fmt::Debug for DirWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dirs = lock(&self.inner.routes).by_dir.len();
        f.debug_struct("DirWatcher")
            .field("dirs", &dirs)
            .finish_non_exhaustive()
    }
}

/// A directory could not be watched.
#[derive(Debug, thiserror::Error)]
#[error("cannot watch {dir}: {source}{}", self.hint())]
pub struct WatchError {
    dir: String,
    source: notify::Error,
}

impl WatchError {
    /// The per-user inotify limit (instances or watches) is reached.
    pub fn limit_reached(&self) -> bool {
        match &self.source.kind {
            notify::ErrorKind::MaxFilesWatch => true,
            notify::ErrorKind::Io(e) => matches!(
                rustix::io::Errno::from_io_error(e),
                Some(rustix::io::Errno::MFILE | rustix::io::Errno::NOSPC)
            ),
            _ => false,
        }
    }

    fn hint(&self) -> &'static str {
        if self.limit_reached() {
            " (the per-user inotify limit is reached: fs.inotify.max_user_instances or max_user_watches)"
        } else {
            ""
        }
    }
}

/// Keeps a directory watched for one subscriber; dropping it unsubscribes, and the last
/// subscriber of a directory gone ends its watch.
#[must_use = "the subscription ends when dropped"]
pub struct Subscription {
    inner: Arc<Inner>,
    dir: PathBuf,
    id: u64,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A callback that panicked leaves the routes consistent (it runs outside the lock).
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl DirWatcher {
    /// The process's watcher (the platform's recommended one: inotify on Linux).
    pub fn shared() -> DirWatcher {
        static SHARED: OnceLock<DirWatcher> = OnceLock::new();
        SHARED
            .get_or_init(|| {
                DirWatcher::with_factory(Box::new(|handler| {
                    notify::recommended_watcher(handler)
                        .map(|w| Box::new(w) as Box<dyn Watcher + Send>)
                }))
            })
            .clone()
    }

    /// A watcher built by `factory` on the first subscription.
    pub fn with_factory(factory: WatcherFactory) -> DirWatcher {
        DirWatcher {
            inner: Arc::new(Inner {
                factory,
                watcher: Mutex::new(None),
                routes: Arc::new(Mutex::new(Routes::default())),
            }),
        }
    }

    /// Calls `on_event` with every event in `dir` (not recursive) until the subscription
    /// is dropped. `on_event` runs on the watcher's thread and must not block.
    pub fn subscribe(
        &self,
        dir: &Path,
        on_event: impl Fn(&Event) + Send + Sync + 'static,
    ) -> Result<Subscription, WatchError> {
        let fail = |source| WatchError {
            dir: dir.display().to_string(),
            source,
        };
        // The watcher reports absolute paths: route by the same.
        let dir = std::path::absolute(dir).map_err(|e| fail(notify::Error::io(e)))?;
        let mut slot = lock(&self.inner.watcher);
        let watcher = match slot.take() {
            Some(w) => w,
            None => (self.inner.factory)(self.handler()).map_err(fail)?,
        };
        let watcher = slot.insert(watcher);
        let (id, first) = {
            let mut routes = lock(&self.inner.routes);
            let id = routes.next_id;
            routes.next_id += 1;
            let subscribers = routes.by_dir.entry(dir.clone()).or_default();
            subscribers.push((id, Arc::new(on_event)));
            (id, subscribers.len() == 1)
        };
        if first && let Err(e) = watcher.watch(&dir, RecursiveMode::NonRecursive) {
            lock(&self.inner.routes).by_dir.remove(&dir);
            return Err(fail(e));
        }
        Ok(Subscription {
            inner: self.inner.clone(),
            dir,
            id,
        })
    }

    /// Routes each event to the subscribers of the directory it happened in (or of the
    /// directory it is about).
    fn handler(&self) -> Handler {
        let routes = self.inner.routes.clone();
        Box::new(move |event: notify::Result<Event>| {
            let event = event.unwrap_or_else(|e| {
                tracing::debug!(error = %e, "directory watch error; every subscriber looks again");
                Event::new(EventKind::Other).set_flag(Flag::Rescan)
            });
            let callbacks: Vec<Callback> = {
                let routes = lock(&routes);
                if event.paths.is_empty() {
                    routes
                        .by_dir
                        .values()
                        .flatten()
                        .map(|(_, c)| c.clone())
                        .collect()
                } else {
                    let mut ids = Vec::new();
                    let mut callbacks = Vec::new();
                    let dirs = event
                        .paths
                        .iter()
                        .flat_map(|p| [Some(p.as_path()), p.parent()])
                        .flatten();
                    for (id, c) in dirs.filter_map(|d| routes.by_dir.get(d)).flatten() {
                        if !ids.contains(id) {
                            ids.push(*id);
                            callbacks.push(c.clone());
                        }
                    }
                    callbacks
                }
            };
            for c in callbacks {
                c(&event);
            }
        })
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut watcher = lock(&self.inner.watcher);
        let last = {
            let mut routes = lock(&self.inner.routes);
            let Some(subscribers) = routes.by_dir.get_mut(&self.dir) else {
                return;
            };
            subscribers.retain(|(id, _)| *id != self.id);
            let last = subscribers.is_empty();
            if last {
                routes.by_dir.remove(&self.dir);
            }
            last
        };
        if last && let Some(w) = watcher.as_mut() {
            // The directory may be gone already (its watch went with it).
            if let Err(e) = w.unwatch(&self.dir) {
                tracing::debug!(dir = %self.dir.display(), error = %e, "unwatching a directory");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use notify::event::{CreateKind, ModifyKind};

    use super::*;

    /// A watcher the test drives: it records watch and unwatch calls and hands out its
    /// handler so the test can deliver events.
    #[derive(Default, Clone)]
    struct Script {
        calls: Arc<Mutex<Vec<String>>>,
        handler: Arc<Mutex<Option<Handler>>>,
        created: Arc<AtomicUsize>,
    }

    struct ScriptedWatcher(Script);

    impl Watcher for ScriptedWatcher {
        fn new<F: notify::EventHandler>(_: F, _: notify::Config) -> notify::Result<Self> {
            Err(notify::Error::generic("built through the script"))
        }
        fn watch(&mut self, path: &Path, _: RecursiveMode) -> notify::Result<()> {
            if path.ends_with("unwatchable") {
                return Err(notify::Error::new(notify::ErrorKind::MaxFilesWatch));
            }
            lock(&self.0.calls).push(format!("watch {}", path.display()));
            Ok(())
        }
        fn unwatch(&mut self, path: &Path) -> notify::Result<()> {
            lock(&self.0.calls).push(format!("unwatch {}", path.display()));
            Ok(())
        }
        fn kind() -> notify::WatcherKind {
            notify::WatcherKind::NullWatcher
        }
    }

    impl Script {
        fn watcher(&self) -> DirWatcher {
            let script = self.clone();
            DirWatcher::with_factory(Box::new(move |handler| {
                script.created.fetch_add(1, Ordering::SeqCst);
                *lock(&script.handler) = Some(handler);
                Ok(Box::new(ScriptedWatcher(script.clone())))
            }))
        }
        fn send(&self, event: Event) {
            (lock(&self.handler).as_mut().unwrap())(Ok(event));
        }
        fn calls(&self) -> Vec<String> {
            lock(&self.calls).clone()
        }
    }

    fn counter() -> (Arc<AtomicUsize>, impl Fn(&Event) + Send + Sync + 'static) {
        let n = Arc::new(AtomicUsize::new(0));
        let m = n.clone();
        (n, move |_: &Event| {
            m.fetch_add(1, Ordering::SeqCst);
        })
    }

    fn modified(path: &str) -> Event {
        Event::new(EventKind::Modify(ModifyKind::Any)).add_path(PathBuf::from(path))
    }

    #[test]
    fn events_reach_the_subscribers_of_their_directory_only() {
        let script = Script::default();
        let w = script.watcher();
        let (a1, on_a1) = counter();
        let (a2, on_a2) = counter();
        let (b, on_b) = counter();
        let sa1 = w.subscribe(Path::new("/nodes/a"), on_a1).unwrap();
        let _sa2 = w.subscribe(Path::new("/nodes/a"), on_a2).unwrap();
        let _sb = w.subscribe(Path::new("/nodes/b"), on_b).unwrap();
        assert_eq!(script.created.load(Ordering::SeqCst), 1, "one watcher");
        assert_eq!(
            script.calls(),
            ["watch /nodes/a", "watch /nodes/b"],
            "each directory watched once"
        );

        script.send(modified("/nodes/a/devices.yaml"));
        assert_eq!(
            [a1.load(Ordering::SeqCst), a2.load(Ordering::SeqCst)],
            [1, 1]
        );
        assert_eq!(b.load(Ordering::SeqCst), 0);
        // An event about the directory itself.
        script.send(modified("/nodes/b"));
        assert_eq!(b.load(Ordering::SeqCst), 1);
        // A rename across both directories reaches each subscriber once.
        script.send(
            Event::new(EventKind::Modify(ModifyKind::Any))
                .add_path(PathBuf::from("/nodes/a/x"))
                .add_path(PathBuf::from("/nodes/a/y"))
                .add_path(PathBuf::from("/nodes/b/x")),
        );
        assert_eq!(
            [
                a1.load(Ordering::SeqCst),
                a2.load(Ordering::SeqCst),
                b.load(Ordering::SeqCst)
            ],
            [2, 2, 2]
        );
        // Elsewhere: nobody.
        script.send(modified("/nodes/c/devices.yaml"));
        script.send(modified("/nodes/a/deeper/file"));
        assert_eq!(a1.load(Ordering::SeqCst), 2);

        // An unroutable event (queue overflow) or a watcher error: everyone looks again.
        script.send(Event::new(EventKind::Other).set_flag(Flag::Rescan));
        (lock(&script.handler).as_mut().unwrap())(Err(notify::Error::generic("broken")));
        assert_eq!(
            [
                a1.load(Ordering::SeqCst),
                a2.load(Ordering::SeqCst),
                b.load(Ordering::SeqCst)
            ],
            [4, 4, 4]
        );

        // The first subscriber of /nodes/a gone: the directory stays watched for the other.
        drop(sa1);
        assert_eq!(script.calls().len(), 2);
        script.send(Event::new(EventKind::Create(CreateKind::File)).add_path("/nodes/a/f".into()));
        assert_eq!(
            [a1.load(Ordering::SeqCst), a2.load(Ordering::SeqCst)],
            [4, 5]
        );
    }

    #[test]
    fn the_last_subscriber_gone_ends_the_watch() {
        let script = Script::default();
        let w = script.watcher();
        let s1 = w.subscribe(Path::new("/d"), |_: &Event| {}).unwrap();
        let s2 = w.subscribe(Path::new("/d"), |_: &Event| {}).unwrap();
        drop(s1);
        drop(s2);
        assert_eq!(script.calls(), ["watch /d", "unwatch /d"]);
        let _s3 = w.subscribe(Path::new("/d"), |_: &Event| {}).unwrap();
        assert_eq!(script.calls(), ["watch /d", "unwatch /d", "watch /d"]);
        assert_eq!(script.created.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_failed_watch_leaves_no_subscriber_behind() {
        let script = Script::default();
        let w = script.watcher();
        let e = w
            .subscribe(Path::new("/x/unwatchable"), |_: &Event| {})
            .unwrap_err();
        assert!(e.limit_reached());
        assert!(
            e.to_string().contains("max_user_watches"),
            "the message names the limit: {e}"
        );
        assert!(lock(&w.inner.routes).by_dir.is_empty());
    }

    #[test]
    fn the_instance_limit_is_reported_as_such_and_creation_tried_again() {
        let tries = Arc::new(AtomicUsize::new(0));
        let t = tries.clone();
        // What inotify_init answers past fs.inotify.max_user_instances.
        let w = DirWatcher::with_factory(Box::new(move |_| {
            t.fetch_add(1, Ordering::SeqCst);
            Err(notify::Error::io(std::io::Error::from_raw_os_error(
                rustix::io::Errno::MFILE.raw_os_error(),
            )))
        }));
        let e = w.subscribe(Path::new("/d"), |_: &Event| {}).unwrap_err();
        assert!(e.limit_reached(), "{e}");
        let text = e.to_string();
        assert!(
            text.starts_with("cannot watch /d: ") && text.contains("max_user_instances"),
            "{text}"
        );
        assert!(w.subscribe(Path::new("/d"), |_: &Event| {}).is_err());
        assert_eq!(tries.load(Ordering::SeqCst), 2, "tried again, not cached");

        let other = WatchError {
            dir: "/d".into(),
            source: notify::Error::path_not_found(),
        };
        assert!(!other.limit_reached());
        assert!(!other.to_string().contains("limit"), "{other}");
    }

    /// The number of inotify instances this process holds.
    fn inotify_instances() -> usize {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|target| target.to_string_lossy().contains("inotify"))
            .count()
    }

    #[test]
    fn many_directories_share_one_inotify_instance() {
        // More directories than the default per-user instance limit (128).
        let root = tempfile::tempdir().unwrap();
        let w = DirWatcher::with_factory(Box::new(|handler| {
            notify::recommended_watcher(handler).map(|w| Box::new(w) as Box<dyn Watcher + Send>)
        }));
        let before = inotify_instances();
        let (tx, rx) = std::sync::mpsc::channel::<PathBuf>();
        let subscriptions: Vec<Subscription> = (0..200)
            .map(|i| {
                let dir = root.path().join(format!("node-{i:03}"));
                std::fs::create_dir(&dir).unwrap();
                let tx = std::sync::Mutex::new(tx.clone());
                let me = dir.clone();
                w.subscribe(&dir, move |_: &Event| {
                    let _ = lock(&tx).send(me.clone());
                })
                .unwrap()
            })
            .collect();
        assert_eq!(inotify_instances(), before + 1);

        std::fs::write(root.path().join("node-137").join("devices.yaml"), "x").unwrap();
        let seen = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(seen, root.path().join("node-137"));
        while let Ok(other) = rx.recv_timeout(Duration::from_millis(200)) {
            assert_eq!(other, root.path().join("node-137"), "only its subscriber");
        }
        drop(subscriptions);
    }
}
