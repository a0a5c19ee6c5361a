//! Exponential backoff for retried API writes and registrations.

use std::time::Duration;

/// Doubles from `initial` up to `max`; `reset` after a success.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Self {
        Backoff {
            initial,
            max,
            next: initial,
        }
    }

    /// The next delay.
    pub fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        d
    }

    pub fn reset(&mut self) {
        self.next = self.initial;
    }
}

/// Runs `op` up to `attempts` times, sleeping with backoff between failures that `retry`
/// accepts.
pub(crate) async fn retry<T, E, F, Fut>(
    attempts: usize,
    mut backoff: Backoff,
    retry: impl Fn(&E) -> bool,
    mut op: F,
) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let mut tries = 0;
    loop {
        tries += 1;
        match op().await {
            Ok(v) => return Ok(v),
            Err(e) if tries < attempts && retry(&e) => {
                tokio::time::sleep(backoff.next_delay()).await;
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(300));
        let got: Vec<u128> = (0..4).map(|_| b.next_delay().as_millis()).collect();
        assert_eq!(got, [100, 200, 300, 300]);
        b.reset();
        assert_eq!(b.next_delay(), Duration::from_millis(100));
    }

    #[tokio::test]
    async fn retries_only_what_it_should() {
        let fast = || Backoff::new(Duration::from_millis(1), Duration::from_millis(1));
        let mut n = 0;
        let r: Result<(), u32> = retry(
            3,
            fast(),
            |_| true,
            || {
                n += 1;
                async move { Err(n) }
            },
        )
        .await;
        assert_eq!(r, Err(3));
        let mut n = 0;
        let r: Result<(), u32> = retry(
            3,
            fast(),
            |e| *e != 1,
            || {
                n += 1;
                async move { Err(n) }
            },
        )
        .await;
        assert_eq!(r, Err(1), "not retried");
    }
}
