//! A `/metrics` page as a list of chunks, plain or gzip.
//!
//! A gzip stream may consist of several members, each with its own header and trailer,
//! decoded as the concatenation of their contents (RFC 1952, section 2.2: "A gzip file
//! consists of a series of members"); Go's `compress/gzip` Reader, which Prometheus
//! scrapes with, reads such multistream input by default (`Reader.Multistream`, enabled
//! by `NewReader` and `Reset`). So a page can be gzipped piece by piece: a collector
//! with a large, mostly unchanged page keeps its pieces compressed and hands them over
//! as they are ([`splice`]); only the rest of the page is compressed per scrape
//! (`docs/extender.md#metrics`).

use std::cell::RefCell;
use std::fmt;
use std::io::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use flate2::Compression;
use flate2::write::GzEncoder;
use hyper::header::HeaderValue;
use prometheus_client::registry::Registry;

/// How a page's chunks are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PageEncoding {
    Plain,
    /// Each chunk one gzip member.
    Gzip,
}

impl PageEncoding {
    /// What a request's `Accept-Encoding` allows: gzip when it names `gzip` (or `*`)
    /// without `q=0`, else plain.
    pub fn negotiate(accept_encoding: Option<&HeaderValue>) -> Self {
        let Some(value) = accept_encoding.and_then(|v| v.to_str().ok()) else {
            return PageEncoding::Plain;
        };
        let gzip = value.split(',').any(|item| {
            let mut parts = item.split(';').map(str::trim);
            let coding = parts.next().unwrap_or_default();
            let refused = parts.any(|p| {
                p.strip_prefix("q=")
                    .is_some_and(|q| q.parse::<f32>().is_ok_and(|q| q <= 0.0))
            });
            (coding.eq_ignore_ascii_case("gzip") || coding == "*") && !refused
        });
        if gzip {
            PageEncoding::Gzip
        } else {
            PageEncoding::Plain
        }
    }

    /// The `Content-Encoding` of a page in this encoding.
    pub fn content_encoding(self) -> Option<&'static str> {
        match self {
            PageEncoding::Plain => None,
            PageEncoding::Gzip => Some("gzip"),
        }
    }

    /// `text` as a chunk in this encoding (no text, no chunk: not even an empty gzip
    /// member).
    pub fn chunk(self, text: &[u8]) -> std::io::Result<Bytes> {
        if text.is_empty() {
            return Ok(Bytes::new());
        }
        match self {
            PageEncoding::Plain => Ok(Bytes::copy_from_slice(text)),
            PageEncoding::Gzip => gzip_member(text),
        }
    }
}

/// `data` as one gzip member. Compressed fast: metrics text still shrinks about
/// tenfold, and a page is compressed while a scrape waits.
pub fn gzip_member(data: &[u8]) -> std::io::Result<Bytes> {
    let mut encoder = GzEncoder::new(Vec::with_capacity(data.len() / 8 + 64), Compression::fast());
    encoder.write_all(data)?;
    Ok(Bytes::from(encoder.finish()?))
}

/// Largest text written between two spliced pieces on the last page: the next one's
/// starting capacity (a page of a binary that splices nothing can be megabytes, and
/// growing a buffer by doubling copies it several times over).
static LAST_TEXT_LEN: AtomicUsize = AtomicUsize::new(0);

/// The page being encoded on this thread.
struct PageBuilder {
    encoding: PageEncoding,
    chunks: Vec<Bytes>,
    /// Written by the registry's encoder since the last chunk.
    text: String,
    longest_text: usize,
    /// Why a piece could not be encoded (the page is then answered with an error).
    failed: Option<String>,
}

impl PageBuilder {
    fn flush(&mut self) {
        if self.text.is_empty() {
            return;
        }
        self.longest_text = self.longest_text.max(self.text.len());
        match self.encoding.chunk(self.text.as_bytes()) {
            Ok(chunk) => self.chunks.push(chunk),
            Err(e) => {
                self.failed
                    .get_or_insert_with(|| format!("compressing the page failed: {e}"));
            }
        }
        self.text.clear();
    }
}

thread_local! {
    static PAGE: RefCell<Option<PageBuilder>> = const { RefCell::new(None) };
}

/// Writes into the page being encoded on this thread.
struct PageWriter;

impl fmt::Write for PageWriter {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        PAGE.with_borrow_mut(|page| match page {
            Some(page) => {
                page.text.push_str(s);
                Ok(())
            }
            None => Err(fmt::Error),
        })
    }
}

/// Encodes `registry` as a page of chunks in `encoding`, on this thread. Collectors may
/// hand over prepared chunks meanwhile ([`page_encoding`], [`splice`]).
pub fn encode_page(registry: &Registry, encoding: PageEncoding) -> Result<Vec<Bytes>, String> {
    PAGE.set(Some(PageBuilder {
        encoding,
        chunks: Vec::new(),
        text: String::with_capacity(LAST_TEXT_LEN.load(Ordering::Relaxed)),
        longest_text: 0,
        failed: None,
    }));
    let encoded = prometheus_client::encoding::text::encode(&mut PageWriter, registry);
    let page = PAGE.take();
    encoded.map_err(|e| e.to_string())?;
    let mut page = page.ok_or("the page was taken while it was encoded")?;
    page.flush();
    if let Some(failed) = page.failed {
        return Err(failed);
    }
    LAST_TEXT_LEN.store(
        page.longest_text + page.longest_text / 16,
        Ordering::Relaxed,
    );
    Ok(page.chunks)
}

/// The encoding of the page [`encode_page`] is building on this thread; `None` when the
/// registry is encoded some other way (into a string), where a collector writes its
/// series through the encoder it is given.
pub fn page_encoding() -> Option<PageEncoding> {
    PAGE.with_borrow(|page| page.as_ref().map(|p| p.encoding))
}

/// Appends `chunks`, already in [`page_encoding`]'s encoding, at the page's current
/// position; `false` (and nothing appended) when no page is being built on this thread.
pub fn splice(chunks: impl IntoIterator<Item = Bytes>) -> bool {
    PAGE.with_borrow_mut(|page| match page {
        Some(page) => {
            page.flush();
            page.chunks
                .extend(chunks.into_iter().filter(|c| !c.is_empty()));
            true
        }
        None => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::read::MultiGzDecoder;
    use prometheus_client::collector::Collector;
    use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
    use prometheus_client::metrics::MetricType;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::gauge::ConstGauge;
    use std::io::Read;

    fn header(v: &'static str) -> HeaderValue {
        HeaderValue::from_static(v)
    }

    #[test]
    fn gzip_is_chosen_when_the_client_accepts_it() {
        use PageEncoding::*;
        let cases = [
            (None, Plain),
            (Some("gzip"), Gzip),
            (Some("identity"), Plain),
            (Some("deflate, GZIP;q=0.5"), Gzip),
            (Some("gzip;q=0"), Plain),
            (Some("gzip; q=0.0, identity"), Plain),
            (Some("*"), Gzip),
            (Some("br"), Plain),
        ];
        for (accept, want) in cases {
            let accept = accept.map(header);
            assert_eq!(PageEncoding::negotiate(accept.as_ref()), want, "{accept:?}");
        }
    }

    /// Hands over a prepared piece where a page is built, else encodes it itself.
    #[derive(Debug)]
    struct Prepared;

    const PREPARED: &str =
        "# HELP prepared A prepared family.\n# TYPE prepared gauge\nprepared 7\n";

    impl Collector for Prepared {
        fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
            match page_encoding() {
                Some(encoding) => {
                    assert!(splice([encoding.chunk(PREPARED.as_bytes()).unwrap()]));
                    Ok(())
                }
                None => ConstGauge::new(7i64).encode(encoder.encode_descriptor(
                    "prepared",
                    "A prepared family.",
                    None,
                    MetricType::Gauge,
                )?),
            }
        }
    }

    fn registry() -> Registry {
        let mut registry = Registry::default();
        let before = Counter::<u64>::default();
        before.inc_by(3);
        registry.register("before", "Written before the collector", before);
        registry.register_collector(Box::new(Prepared));
        registry
    }

    fn concat(chunks: &[Bytes]) -> Vec<u8> {
        chunks.iter().flat_map(|c| c.iter().copied()).collect()
    }

    #[test]
    fn a_spliced_page_is_the_registry_encoded_as_text_in_both_encodings() {
        let registry = registry();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(text.contains("prepared 7\n# EOF\n"), "{text}");

        let plain = encode_page(&registry, PageEncoding::Plain).unwrap();
        assert_eq!(
            plain.len(),
            3,
            "text before, the spliced piece, the EOF line"
        );
        assert_eq!(String::from_utf8(concat(&plain)).unwrap(), text);

        let gzip = encode_page(&registry, PageEncoding::Gzip).unwrap();
        assert_eq!(gzip.len(), 3, "one gzip member each");
        let mut decoded = String::new();
        MultiGzDecoder::new(&concat(&gzip)[..])
            .read_to_string(&mut decoded)
            .unwrap();
        assert_eq!(decoded, text);
        assert_eq!(page_encoding(), None, "the page is gone once encoded");
        assert!(!splice([Bytes::from_static(b"x")]));
    }
}
