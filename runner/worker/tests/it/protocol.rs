//! Frames, handshake, multiplexing, events and disconnects over in-memory streams.

use super::{Req, Resp, handler};
use codespace_runner_worker::frame::{codec, decode_body, encode_body};
use codespace_runner_worker::{Client, Identity, Secret, WorkerError, serve_stream};
use futures_util::{SinkExt, StreamExt};
use tokio::io::AsyncReadExt;
use tokio_util::codec::Framed;

type C = Client<Req, Resp, u32>;

fn bytes(v: Vec<u8>) -> bytes::Bytes {
    bytes::Bytes::from(v)
}

/// A frame after the handshake (MessagePack) from its JSON picture.
fn body(v: serde_json::Value) -> bytes::Bytes {
    bytes(encode_body(&v).unwrap())
}

/// The JSON picture of a frame after the handshake.
fn unbody(b: &[u8]) -> serde_json::Value {
    decode_body(b).unwrap()
}

fn id(build: &str) -> Identity {
    Identity {
        protocol: 3,
        build: build.into(),
    }
}

/// A served in-memory connection: the client and the server task.
async fn pair(
    secret: &Secret,
    server_secret: &Secret,
    me: Identity,
    worker: Identity,
) -> (
    Result<(C, codespace_runner_worker::EventReceiver<u32>), WorkerError>,
    tokio::task::JoinHandle<Result<(), WorkerError>>,
) {
    let (a, b) = tokio::io::duplex(64 * 1024);
    let (h, s) = (handler(), server_secret.clone());
    let server = tokio::spawn(async move { serve_stream(b, h, &s, &worker).await });
    let (r, w) = tokio::io::split(a);
    (C::handshake(r, w, secret, &me).await, server)
}

#[tokio::test]
async fn a_long_poll_does_not_hold_up_a_ping_and_answers_match_their_calls() {
    let s = Secret::generate().unwrap();
    let (c, _server) = pair(&s, &s, id("a"), id("a")).await;
    let (c, _ev) = c.unwrap();
    let c = std::sync::Arc::new(c);
    let c2 = c.clone();
    let waiting = tokio::spawn(async move { c2.call(&Req::Wait).await });
    // The wait is in flight (or about to be): pings still answer.
    for _ in 0..3 {
        assert_eq!(c.call(&Req::Ping).await.unwrap(), Resp::Pong);
    }
    assert!(!waiting.is_finished());
    // Release until the waiter has been woken (a release can come before it waits).
    loop {
        assert_eq!(c.call(&Req::Release).await.unwrap(), Resp::Done);
        if waiting.is_finished() {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(waiting.await.unwrap().unwrap(), Resp::Released);
}

#[tokio::test]
async fn events_arrive_in_order_before_the_answer_of_the_call_that_pushed_them() {
    let s = Secret::generate().unwrap();
    let (c, _server) = pair(&s, &s, id("a"), id("a")).await;
    let (c, mut ev) = c.unwrap();
    for n in 0..5 {
        assert_eq!(c.call(&Req::Emit(n)).await.unwrap(), Resp::Done);
    }
    for n in 0..5 {
        assert_eq!(ev.recv().await, Some(n));
    }
    assert_eq!(ev.dropped(), 0);
}

#[tokio::test]
async fn a_version_or_build_mismatch_names_both_sides() {
    let s = Secret::generate().unwrap();
    let (c, server) = pair(&s, &s, id("abc"), id("def")).await;
    let e = c.err().unwrap();
    assert_eq!(
        e.to_string(),
        "worker protocol mismatch: gateway 3/abc met worker 3/def"
    );
    let e = server.await.unwrap().unwrap_err();
    assert_eq!(
        e.to_string(),
        "worker protocol mismatch: gateway 3/abc met worker 3/def"
    );
    let other = Identity {
        protocol: 2,
        build: "abc".into(),
    };
    let (c, _) = pair(&s, &s, id("abc"), other).await;
    assert!(
        c.err()
            .unwrap()
            .to_string()
            .contains("gateway 3/abc met worker 2/abc")
    );
}

/// A gateway of protocol 1 (JSON frames throughout) still reads this worker's `ack`: the
/// handshake is JSON in every version, so the mismatch is named, not a decoding error.
#[tokio::test]
async fn a_protocol_1_gateway_reads_the_json_ack_and_the_worker_names_the_mismatch() {
    let s = Secret::generate().unwrap();
    let (a, b) = tokio::io::duplex(64 * 1024);
    let (h, s2) = (handler(), s.clone());
    let me = Identity::this_build();
    let server = tokio::spawn(async move { serve_stream(b, h, &s2, &me).await });
    let mut framed = Framed::new(a, codec());
    let hello =
        serde_json::json!({"t": "hello", "protocol": 1, "build": "old", "secret": s.expose()});
    framed
        .send(bytes(serde_json::to_vec(&hello).unwrap()))
        .await
        .unwrap();
    let ack: serde_json::Value =
        serde_json::from_slice(&framed.next().await.unwrap().unwrap()).unwrap();
    assert_eq!(ack["t"], "ack", "{ack}");
    assert_eq!(ack["protocol"], codespace_runner_worker::PROTOCOL_VERSION);
    assert_eq!(codespace_runner_worker::PROTOCOL_VERSION, 2);
    let e = server.await.unwrap().err().unwrap();
    assert!(
        e.to_string().contains(&format!(
            "gateway 1/old met worker {}",
            Identity::this_build().label()
        )),
        "{e}"
    );
}

#[tokio::test]
async fn a_wrong_secret_gets_no_byte_back() {
    let (right, wrong) = (Secret::generate().unwrap(), Secret::generate().unwrap());
    let (a, b) = tokio::io::duplex(64 * 1024);
    let (h, s) = (handler(), right.clone());
    let server = tokio::spawn(async move { serve_stream(b, h, &s, &id("a")).await });
    let mut framed = Framed::new(a, codec());
    let hello =
        serde_json::json!({"t": "hello", "protocol": 3, "build": "a", "secret": wrong.expose()});
    framed
        .send(bytes(serde_json::to_vec(&hello).unwrap()))
        .await
        .unwrap();
    assert!(server.await.unwrap().is_err());
    let mut a = framed.into_inner();
    let mut rest = Vec::new();
    a.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty(), "the worker wrote {rest:?}");
    // And the client's view of the same refusal.
    let (c, _) = pair(&wrong, &right, id("a"), id("a")).await;
    assert!(matches!(c.err().unwrap(), WorkerError::Handshake(_)));
}

/// Sends a good hello over a raw framed stream and reads the ack.
async fn raw_after_handshake() -> (
    Framed<tokio::io::DuplexStream, tokio_util::codec::LengthDelimitedCodec>,
    tokio::task::JoinHandle<Result<(), WorkerError>>,
) {
    let s = Secret::generate().unwrap();
    let (a, b) = tokio::io::duplex(64 * 1024);
    let (h, s2) = (handler(), s.clone());
    let server = tokio::spawn(async move { serve_stream(b, h, &s2, &id("a")).await });
    let mut framed = Framed::new(a, codec());
    let hello =
        serde_json::json!({"t": "hello", "protocol": 3, "build": "a", "secret": s.expose()});
    framed
        .send(bytes(serde_json::to_vec(&hello).unwrap()))
        .await
        .unwrap();
    let ack: serde_json::Value =
        serde_json::from_slice(&framed.next().await.unwrap().unwrap()).unwrap();
    assert_eq!(ack["t"], "ack");
    assert_eq!(ack["protocol"], 3);
    (framed, server)
}

#[tokio::test]
async fn a_malformed_frame_gets_an_error_frame_and_the_connection_closes() {
    for bad in [
        b"not a frame".to_vec(),
        encode_body(&serde_json::json!({"request": {"id": 1, "body": "NoSuchCall"}})).unwrap(),
        encode_body(&serde_json::json!({"request": {"body": "Ping"}})).unwrap(),
        // A second hello (JSON) after the handshake.
        br#"{"t":"hello","protocol":3,"build":"a","secret":"x"}"#.to_vec(),
    ] {
        let (mut framed, server) = raw_after_handshake().await;
        // A good request first: it is answered.
        framed
            .send(body(
                serde_json::json!({"request": {"id": 7, "body": "Ping"}}),
            ))
            .await
            .unwrap();
        let r = unbody(&framed.next().await.unwrap().unwrap());
        assert_eq!(
            r,
            serde_json::json!({"response": {"id": 7, "body": "Pong"}})
        );
        framed.send(bytes(bad)).await.unwrap();
        let e = unbody(&framed.next().await.unwrap().unwrap());
        assert!(e["error"]["message"].is_string(), "{e}");
        assert!(framed.next().await.is_none(), "the connection stays open");
        assert!(matches!(
            server.await.unwrap(),
            Err(WorkerError::Protocol(_))
        ));
    }
}

#[tokio::test]
async fn an_oversized_length_prefix_is_refused_before_its_bytes_are_buffered() {
    let (framed, server) = raw_after_handshake().await;
    let mut a = framed.into_inner();
    tokio::io::AsyncWriteExt::write_all(&mut a, &[0xff, 0xff, 0xff, 0xff])
        .await
        .unwrap();
    let mut framed = Framed::new(a, codec());
    let e = unbody(&framed.next().await.unwrap().unwrap());
    assert!(e["error"]["message"].is_string(), "{e}");
    assert!(matches!(
        server.await.unwrap(),
        Err(WorkerError::Protocol(_))
    ));
}

#[tokio::test]
async fn in_flight_calls_fail_disconnected_when_the_worker_goes_and_later_ones_too() {
    let s = Secret::generate().unwrap();
    let (c, server) = pair(&s, &s, id("a"), id("a")).await;
    let (c, _ev) = c.unwrap();
    let c = std::sync::Arc::new(c);
    let c2 = c.clone();
    let waiting = tokio::spawn(async move { c2.call(&Req::Wait).await });
    assert_eq!(c.call(&Req::Ping).await.unwrap(), Resp::Pong);
    server.abort();
    let e = waiting.await.unwrap().unwrap_err();
    assert!(matches!(e, WorkerError::Disconnected(_)), "{e}");
    assert!(!c.closed().await.is_empty());
    assert!(matches!(
        c.call(&Req::Ping).await,
        Err(WorkerError::Disconnected(_))
    ));
}
