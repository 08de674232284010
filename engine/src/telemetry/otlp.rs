//! OpenTelemetry export (`export.otlp`): decision rows and operation events as OTLP logs (their
//! body an OCSF event, `ocsf.rs`), and one span per tool call whose parent is the request's W3C
//! `traceparent`, sent over OTLP/HTTP protobuf (`<endpoint>/v1/logs`, `<endpoint>/v1/traces`) by
//! `opentelemetry-otlp`'s exporters.
//!
//! A call never waits for the export, nor does its work: it pushes a small job (a copy of the
//! row's fields, or a span's tool, parent and times) into a bounded queue (`export.otlp.queue`,
//! per signal) with a non-blocking send; a full queue drops the job and counts it
//! (`codespace_otlp_dropped_total`). One thread per signal takes the jobs in batches (up to
//! [`BATCH`] or [`DELAY`]), builds the records through the SDK's logger and tracer there (the
//! OCSF JSON included), and exports them on its own single-threaded runtime, each request
//! bounded by `export.otlp.timeout_ms`; a failed batch is counted
//! (`codespace_otlp_export_failures_total`). `scripts/bench-otlp-dead.py` measures `read` with
//! a dead collector against the export off.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use opentelemetry::InstrumentationScope;
use opentelemetry::logs::{AnyValue, LogRecord as _, Logger as _, LoggerProvider as _, Severity};
use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt as _, TraceFlags, TraceId,
    TraceState, Tracer as _, TracerProvider as _,
};
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::logs::{
    LogBatch, LogExporter as _, LogProcessor, SdkLogRecord, SdkLogger, SdkLoggerProvider,
};
use opentelemetry_sdk::trace::{
    SdkTracer, SdkTracerProvider, SpanData, SpanExporter as _, SpanProcessor,
};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::wire::{OtlpInfo, OtlpSignalInfo};

/// Records per export batch.
const BATCH: usize = 512;
/// The longest a queued record waits for its batch.
const DELAY: Duration = Duration::from_millis(500);

/// `export`: where the server sends telemetry.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Export")]
pub struct ExportConfig {
    /// OpenTelemetry export over OTLP/HTTP protobuf. Absent: nothing is exported.
    #[serde(default)]
    pub otlp: Option<OtlpConfig>,
}

/// `export.otlp`: the OTLP/HTTP collector.
#[derive(Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "OtlpExport")]
pub struct OtlpConfig {
    /// The collector's base URL (`http://` or `https://`), e.g. `http://127.0.0.1:4318`: logs go
    /// to `<endpoint>/v1/logs`, spans to `<endpoint>/v1/traces`.
    pub endpoint: String,
    /// Extra HTTP headers of every export request (e.g. an API key). Never logged or shown.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// How long one export request may take, in milliseconds (default 3000).
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Records queued per signal before new ones are dropped (default 10000).
    #[serde(default = "default_queue")]
    pub queue: usize,
}

impl std::fmt::Debug for OtlpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Header values are credentials: only their names are shown.
        f.debug_struct("OtlpConfig")
            .field("endpoint", &self.endpoint)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("timeout_ms", &self.timeout_ms)
            .field("queue", &self.queue)
            .finish()
    }
}

fn default_timeout_ms() -> u64 {
    3000
}

fn default_queue() -> usize {
    10_000
}

impl OtlpConfig {
    /// The config's problems, if any (checked when the config loads).
    pub fn check(&self) -> Result<(), String> {
        let e = self.endpoint.trim();
        let rest = e
            .strip_prefix("http://")
            .or_else(|| e.strip_prefix("https://"))
            .ok_or_else(|| {
                format!(
                    "export.otlp.endpoint must be an http:// or https:// URL, got {:?}",
                    self.endpoint
                )
            })?;
        let host = rest.split('/').next().unwrap_or_default();
        if host.is_empty()
            || e.bytes()
                .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
        {
            return Err(format!(
                "export.otlp.endpoint is not a valid URL: {:?}",
                self.endpoint
            ));
        }
        for name in self.headers.keys() {
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
                return Err(format!("export.otlp.headers: bad header name {name:?}"));
            }
        }
        if self.queue == 0 || self.timeout_ms == 0 {
            return Err("export.otlp.queue and export.otlp.timeout_ms must be at least 1".into());
        }
        Ok(())
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.endpoint.trim().trim_end_matches('/'))
    }
}

/// What the export has done so far, per signal (workspace_info and the doctor show it).
#[derive(Debug, Default)]
pub(crate) struct Counts {
    queued: AtomicU64,
    dropped: AtomicU64,
    exported: AtomicU64,
    failed: AtomicU64,
}

impl Counts {
    fn snapshot(&self) -> OtlpSignalInfo {
        OtlpSignalInfo {
            queued: self.queued.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            exported: self.exported.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
        }
    }
}

/// A record on its way to a queue, or a request to flush it.
enum Msg<T> {
    Item(T),
    Flush(std::sync::mpsc::Sender<()>),
}

/// The producer side of one signal's queue: never blocks.
#[derive(Debug)]
struct Queue<T> {
    tx: SyncSender<Msg<T>>,
    counts: Arc<Counts>,
    signal: &'static str,
}

impl<T> Queue<T> {
    fn push(&self, item: T) {
        match self.tx.try_send(Msg::Item(item)) {
            Ok(()) => {
                self.counts.queued.fetch_add(1, Ordering::Relaxed);
            }
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                if self.counts.dropped.fetch_add(1, Ordering::Relaxed) == 0 {
                    tracing::warn!(
                        signal = self.signal,
                        "OTLP export queue full: records are dropped (counted in codespace_otlp_dropped_total)"
                    );
                }
                super::metrics::count_otlp_dropped(self.signal, 1);
            }
        }
    }

    /// Waits (at most `within`) until everything queued before the call was exported or failed.
    fn flush(&self, within: Duration) {
        let (ack_tx, ack_rx) = std::sync::mpsc::channel();
        let deadline = Instant::now() + within;
        let mut msg = Msg::Flush(ack_tx);
        loop {
            match self.tx.try_send(msg) {
                Ok(()) => break,
                Err(TrySendError::Disconnected(_)) => return,
                Err(TrySendError::Full(m)) => {
                    if Instant::now() >= deadline {
                        return;
                    }
                    msg = m;
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
        let _ = ack_rx.recv_timeout(deadline.saturating_duration_since(Instant::now()));
    }
}

/// Drains `rx` in batches and hands each to `export` (on a current-thread runtime of the
/// thread) until the senders are gone. `export` returns how many records the batch held and
/// the export's outcome.
fn drain<T: Send + 'static, F, Fut>(
    name: &str,
    rx: Receiver<Msg<T>>,
    counts: Arc<Counts>,
    signal: &'static str,
    export: F,
) -> std::io::Result<()>
where
    F: Fn(Vec<T>) -> Option<(u64, Fut)> + Send + 'static,
    Fut: std::future::Future<Output = OTelSdkResult>,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let mut batch: Vec<T> = Vec::new();
            let mut acks = Vec::new();
            let mut since: Option<Instant> = None;
            loop {
                let wait = since.map_or(Duration::from_secs(3600), |t| {
                    (t + DELAY).saturating_duration_since(Instant::now())
                });
                let mut closed = false;
                match rx.recv_timeout(wait) {
                    Ok(Msg::Item(item)) => {
                        batch.push(item);
                        since.get_or_insert_with(Instant::now);
                    }
                    Ok(Msg::Flush(ack)) => acks.push(ack),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => closed = true,
                }
                let due = since.is_some_and(|t| t.elapsed() >= DELAY);
                if batch.len() >= BATCH || due || !acks.is_empty() || closed {
                    if let Some((n, fut)) = export(std::mem::take(&mut batch)) {
                        match rt.block_on(fut) {
                            Ok(()) => {
                                counts.exported.fetch_add(n, Ordering::Relaxed);
                            }
                            Err(e) => {
                                if counts.failed.fetch_add(n, Ordering::Relaxed) == 0 {
                                    tracing::warn!(signal, error = %e, "OTLP export failed (counted in codespace_otlp_export_failures_total)");
                                }
                                super::metrics::count_otlp_export_failures(signal, n);
                            }
                        }
                    }
                    since = None;
                    for ack in acks.drain(..) {
                        let _ = ack.send(());
                    }
                }
                if closed {
                    return;
                }
            }
        })?;
    Ok(())
}

/// A log record to build on the export thread (the call only queues it).
type LogJob = Box<dyn FnOnce(&SdkLogger) + Send>;
/// A span to build on the export thread.
type SpanJob = Box<dyn FnOnce(&SdkTracer) + Send>;

/// Records the SDK hands its processors on the export thread, taken by the batch's export.
type Collected<T> = Arc<std::sync::Mutex<Vec<T>>>;

fn take<T>(c: &Collected<T>) -> Vec<T> {
    std::mem::take(&mut *c.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
}

/// The log processor of the export thread's logger: collects the records the jobs emit.
#[derive(Debug)]
struct CollectLogs(Collected<(SdkLogRecord, InstrumentationScope)>);

impl LogProcessor for CollectLogs {
    fn emit(&self, data: &mut SdkLogRecord, instrumentation: &InstrumentationScope) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((data.clone(), instrumentation.clone()));
    }
    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }
    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// The span processor of the export thread's tracer: collects the ended spans.
#[derive(Debug)]
struct CollectSpans(Collected<SpanData>);

impl SpanProcessor for CollectSpans {
    fn on_start(&self, _span: &mut opentelemetry_sdk::trace::Span, _cx: &opentelemetry::Context) {}
    fn on_end(&self, span: SpanData) {
        if span.span_context.is_sampled() {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(span);
        }
    }
    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }
    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// The running export: the calls' side of its two queues.
pub(crate) struct Export {
    endpoint: String,
    timeout: Duration,
    log_queue: Queue<LogJob>,
    span_queue: Queue<SpanJob>,
}

impl std::fmt::Debug for Export {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Export")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

static EXPORT: OnceLock<Export> = OnceLock::new();

/// The running export, if one was started.
pub(crate) fn export() -> Option<&'static Export> {
    EXPORT.get()
}

/// Why the export did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The exporter could not be built.
    #[error("OTLP exporter: {0}")]
    Exporter(String),
    /// A thread or runtime could not be started.
    #[error("OTLP export thread: {0}")]
    Thread(#[from] std::io::Error),
}

/// Starts the export once per process (later calls keep the first).
pub fn start(cfg: &OtlpConfig) -> Result<(), StartError> {
    if EXPORT.get().is_some() {
        return Ok(());
    }
    let timeout = Duration::from_millis(cfg.timeout_ms.max(1));
    let headers: HashMap<String, String> = cfg
        .headers
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let resource = Resource::builder_empty()
        .with_service_name("codespace")
        .with_attributes([opentelemetry::KeyValue::new(
            "service.version",
            env!("CARGO_PKG_VERSION"),
        )])
        .build();

    let mut log_exporter = opentelemetry_otlp::LogExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(cfg.url("/v1/logs"))
        .with_timeout(timeout)
        .with_headers(headers.clone())
        .build()
        .map_err(|e| StartError::Exporter(e.to_string()))?;
    log_exporter.set_resource(&resource);
    let mut span_exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(cfg.url("/v1/traces"))
        .with_timeout(timeout)
        .with_headers(headers)
        .build()
        .map_err(|e| StartError::Exporter(e.to_string()))?;
    span_exporter.set_resource(&resource);

    let cap = cfg.queue.max(1);

    // Logs: jobs build their records through the SDK logger on the export thread.
    let logs_seen: Collected<(SdkLogRecord, InstrumentationScope)> = Arc::default();
    let logs = SdkLoggerProvider::builder()
        .with_resource(resource.clone())
        .with_log_processor(CollectLogs(Arc::clone(&logs_seen)))
        .build();
    let logger = logs.logger("codespace");
    let (log_tx, log_rx) = std::sync::mpsc::sync_channel(cap);
    let log_counts = Arc::new(Counts::default());
    let log_exporter = Arc::new(log_exporter);
    drain(
        "codespace-otlp-logs",
        log_rx,
        Arc::clone(&log_counts),
        "logs",
        move |jobs: Vec<LogJob>| {
            // The provider lives as long as the thread (dropping it shuts its processor down).
            let _keep = &logs;
            for job in jobs {
                job(&logger);
            }
            let batch = take(&logs_seen);
            if batch.is_empty() {
                return None;
            }
            let n = u64::try_from(batch.len()).unwrap_or(u64::MAX);
            let exporter = Arc::clone(&log_exporter);
            Some((n, async move {
                let refs: Vec<(&SdkLogRecord, &InstrumentationScope)> =
                    batch.iter().map(|(r, s)| (r, s)).collect();
                exporter.export(LogBatch::new(&refs)).await
            }))
        },
    )?;

    // Spans: the same, through the SDK tracer.
    let spans_seen: Collected<SpanData> = Arc::default();
    let spans = SdkTracerProvider::builder()
        .with_resource(resource)
        .with_span_processor(CollectSpans(Arc::clone(&spans_seen)))
        .build();
    let tracer = spans.tracer("codespace");
    let (span_tx, span_rx) = std::sync::mpsc::sync_channel(cap);
    let span_counts = Arc::new(Counts::default());
    let span_exporter = Arc::new(span_exporter);
    drain(
        "codespace-otlp-spans",
        span_rx,
        Arc::clone(&span_counts),
        "spans",
        move |jobs: Vec<SpanJob>| {
            let _keep = &spans;
            for job in jobs {
                job(&tracer);
            }
            let batch = take(&spans_seen);
            if batch.is_empty() {
                return None;
            }
            let n = u64::try_from(batch.len()).unwrap_or(u64::MAX);
            let exporter = Arc::clone(&span_exporter);
            Some((n, async move { exporter.export(batch).await }))
        },
    )?;

    let export = Export {
        endpoint: cfg.endpoint.clone(),
        timeout,
        log_queue: Queue {
            tx: log_tx,
            counts: log_counts,
            signal: "logs",
        },
        span_queue: Queue {
            tx: span_tx,
            counts: span_counts,
            signal: "spans",
        },
    };
    if EXPORT.set(export).is_err() {
        tracing::debug!("OTLP export already started");
    }
    Ok(())
}

/// The export's counts for `workspace_info`, `None` when it is off.
pub fn status() -> Option<OtlpInfo> {
    export().map(|x| OtlpInfo {
        endpoint: shown_endpoint(&x.endpoint),
        logs: x.log_queue.counts.snapshot(),
        spans: x.span_queue.counts.snapshot(),
    })
}

/// `scheme://host:port` of an endpoint: user info (a credential) and the path left out.
fn shown_endpoint(endpoint: &str) -> String {
    let e = endpoint.trim();
    let (scheme, rest) = e.split_once("://").unwrap_or(("", e));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    format!("{scheme}://{host}")
}

/// Waits (bounded by the export timeout, twice) until everything queued so far was exported or
/// failed: the server's shutdown.
pub fn flush() {
    if let Some(x) = export() {
        x.log_queue.flush(x.timeout * 2);
        x.span_queue.flush(x.timeout * 2);
    }
}

/// `(trace id, parent span id, flags)` of a W3C `traceparent` (already checked).
fn parse_trace_parent(tp: &str) -> Option<(TraceId, SpanId, TraceFlags)> {
    let mut parts = tp.split('-');
    let _version = parts.next()?;
    let trace = TraceId::from_hex(parts.next()?).ok()?;
    let span = SpanId::from_hex(parts.next()?).ok()?;
    let flags = u8::from_str_radix(parts.next()?, 16).ok()?;
    Some((trace, span, TraceFlags::new(flags)))
}

/// Queues one OTLP log record, built on the export thread: `event_name`, `body` (an OCSF event
/// as JSON text, `body()` called there too), the attributes, the trace context of
/// `trace_parent`. Never blocks: a full queue drops it (counted).
pub(crate) fn emit_log(
    event_name: &'static str,
    at: SystemTime,
    severity: Severity,
    body: impl FnOnce() -> String + Send + 'static,
    attributes: Vec<(&'static str, AnyValue)>,
    trace_parent: Option<String>,
) {
    let Some(x) = export() else { return };
    x.log_queue.push(Box::new(move |logger: &SdkLogger| {
        let mut rec = logger.create_log_record();
        rec.set_event_name(event_name);
        rec.set_timestamp(at);
        rec.set_observed_timestamp(SystemTime::now());
        rec.set_severity_number(severity);
        rec.set_body(AnyValue::String(body().into()));
        for (k, v) in attributes {
            rec.add_attribute(k, v);
        }
        if let Some((trace, span, flags)) = trace_parent.as_deref().and_then(parse_trace_parent) {
            rec.set_trace_context(trace, span, Some(flags));
        }
        logger.emit(rec);
    }));
}

/// A tool call being timed for its span; [`CallSpan::end`] queues the span (built on the export
/// thread with the call's start and end times).
pub(crate) struct CallSpan {
    tool: &'static str,
    trace_parent: Option<Arc<str>>,
    start: SystemTime,
}

/// Starts timing the span of one `tools/call` of `tool`, a child of `trace_parent` when given;
/// `None` when the export is off.
pub(crate) fn start_call_span(
    tool: &'static str,
    trace_parent: Option<Arc<str>>,
) -> Option<CallSpan> {
    export()?;
    Some(CallSpan {
        tool,
        trace_parent,
        start: SystemTime::now(),
    })
}

impl CallSpan {
    /// Queues the span with the call's outcome (`error_code`: the wire error code of a failed
    /// call).
    pub(crate) fn end(self, error_code: Option<&'static str>) {
        let Some(x) = export() else { return };
        let end = SystemTime::now();
        let CallSpan {
            tool,
            trace_parent,
            start,
        } = self;
        x.span_queue.push(Box::new(move |tracer: &SdkTracer| {
            let parent = match trace_parent.as_deref().and_then(parse_trace_parent) {
                Some((trace, span, flags)) => opentelemetry::Context::new()
                    .with_remote_span_context(SpanContext::new(
                        trace,
                        span,
                        flags,
                        true,
                        TraceState::default(),
                    )),
                None => opentelemetry::Context::new(),
            };
            let mut span = tracer
                .span_builder(format!("tools/call {tool}"))
                .with_kind(SpanKind::Server)
                .with_start_time(start)
                .with_attributes([
                    opentelemetry::KeyValue::new("mcp.method.name", "tools/call"),
                    opentelemetry::KeyValue::new("gen_ai.tool.name", tool),
                ])
                .start_with_context(tracer, &parent);
            if let Some(code) = error_code {
                span.set_attribute(opentelemetry::KeyValue::new("error.type", code));
                span.set_status(Status::error(code));
            }
            span.end_with_timestamp(end);
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(endpoint: &str) -> OtlpConfig {
        OtlpConfig {
            endpoint: endpoint.into(),
            headers: BTreeMap::from([("x-api-key".to_string(), "s3cret".to_string())]),
            timeout_ms: 3000,
            queue: 10,
        }
    }

    #[test]
    fn endpoints_are_checked_and_header_values_never_shown() {
        assert!(cfg("http://127.0.0.1:4318").check().is_ok());
        assert!(cfg("https://otel.example:4318/").check().is_ok());
        assert!(cfg("127.0.0.1:4318").check().is_err());
        assert!(cfg("ftp://x").check().is_err());
        assert!(cfg("http://").check().is_err());
        assert_eq!(
            cfg("http://h:1/").url("/v1/logs"),
            "http://h:1/v1/logs".to_string()
        );
        assert!(!format!("{:?}", cfg("http://h")).contains("s3cret"));
        assert_eq!(
            shown_endpoint("https://u:pw@h:4318/otlp?x"),
            "https://h:4318"
        );
    }

    #[test]
    fn a_trace_parent_parses_into_ids() {
        let (t, s, f) =
            parse_trace_parent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        assert_eq!(format!("{t}"), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(format!("{s}"), "00f067aa0ba902b7");
        assert!(f.is_sampled());
    }

    #[test]
    fn a_full_queue_drops_and_counts_without_blocking() {
        let (tx, _rx) = std::sync::mpsc::sync_channel(2);
        let q = Queue {
            tx,
            counts: Arc::new(Counts::default()),
            signal: "logs",
        };
        for i in 0..5 {
            q.push(i);
        }
        let c = q.counts.snapshot();
        assert_eq!((c.queued, c.dropped), (2, 3));
    }
}
