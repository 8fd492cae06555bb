//! Every input a fuzz target crashed on (fuzz/regressions/TARGET/, one file each, named
//! after the bug) replays here through the same driver as the fuzz target, so a fixed
//! crash stays fixed. docs/Fuzzing.md lists them.

#[path = "support/replay.rs"]
mod replay;

use std::path::Path;

use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::GetEndpointsRequest;

fn inputs(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/regressions")
        .join(target);
    let mut v: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn server_regressions_replay_without_panic() {
    let all = inputs("server");
    assert!(!all.is_empty());
    for (name, data) in all {
        eprintln!("replaying {name} ({} bytes)", data.len());
        replay::run_server(&data);
    }
}

/// Found by the `server` target: GetEndpoints with an EndpointUrl whose byte 10 falls
/// inside a multi-byte character panicked on a str slice. It is not an opc.tcp URL, so
/// the Hello's URL (or the fallback) is advertised.
#[test]
fn get_endpoints_with_a_multibyte_character_at_byte_10() {
    use uaring_core::generated::types::MessageSecurityMode;
    use uaring_core::server::context::RequestContext;
    let mut shard = replay::shard();
    let ctx = RequestContext {
        channel_id: shard.next_channel_id(),
        security_policy_uri: "http://opcfoundation.org/UA/SecurityPolicy#None",
        security_mode: MessageSecurityMode::None,
        client_certificate: None,
        peer: None,
        endpoint_url: "opc.tcp://hel-host:4840/",
    };
    for url in [
        "opc.tcp:/іocalhost:4840/uaring",
        "opc.tcp:/\u{10348}",
        "ééééé",
    ] {
        let req = Request::GetEndpoints(Box::new(GetEndpointsRequest {
            endpoint_url: url.into(),
            ..Default::default()
        }));
        match uaring_core::services::dispatch(&mut shard, &ctx, req, replay::start()) {
            Response::GetEndpoints(r) => {
                assert!(!r.endpoints.is_empty());
                assert_eq!(
                    r.endpoints[0].endpoint_url.as_str(),
                    "opc.tcp://hel-host:4840/"
                );
            }
            other => panic!("{other:?}"),
        }
    }
}
