//! Writes the in-process seed corpus of the fuzz targets (docs/Fuzzing.md):
//! fuzz/corpus/server/gen-*.bin (whole conversations against the `server` target's own
//! deterministic shard), fuzz/corpus/requests/gen-*.bin (one request body each, first byte =
//! its index in REQUEST_IDS) and fuzz/corpus/types/gen-*.bin. Ignored by default:
//! `cargo test -p uaring-core --test fuzz_corpus -- --ignored`.

#[path = "support/corpus.rs"]
mod corpus;
#[path = "support/replay.rs"]
mod replay;

use std::fs;
use std::path::Path;

#[test]
fn recordings_replay_through_the_server_target() {
    // Each conversation is valid input for the `server` target's driver.
    for r in corpus::recordings() {
        replay::run_server(&r.c2s);
    }
}

#[test]
#[ignore]
fn write_seed_corpus() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
    for d in ["server", "requests", "types"] {
        fs::create_dir_all(root.join(d)).unwrap();
    }
    for r in corpus::recordings() {
        fs::write(root.join(format!("server/gen-{}.bin", r.name)), &r.c2s).unwrap();
        for (i, (id, body)) in r.requests.iter().enumerate() {
            let Some(k) = replay::REQUEST_IDS.iter().position(|x| x == id) else {
                continue;
            };
            let mut v = vec![k as u8];
            v.extend_from_slice(body);
            fs::write(root.join(format!("requests/gen-{}-{i}.bin", r.name)), v).unwrap();
        }
    }
    // The types target: first byte = which decoder (see uaring_fuzz::run_types).
    use uaring_core::encoding::Encode;
    use uaring_core::types::*;
    let put = |k: u8, name: &str, enc: &dyn Fn(&mut Vec<u8>)| {
        let mut v = vec![k];
        enc(&mut v);
        fs::write(root.join(format!("types/gen-{name}.bin")), v).unwrap();
    };
    put(0, "nodeid-string", &|o| {
        NodeId::string(1, "Demo.Static").encode(o)
    });
    put(0, "nodeid-guid", &|o| NodeId::guid(1, Guid::NULL).encode(o));
    put(1, "expanded", &|o| {
        ExpandedNodeId::from(NodeId::ns0(85)).encode(o)
    });
    let nested = Variant::Array(Box::new(
        Array::new(
            BuiltinType::Variant,
            vec![Variant::Int32(1), Variant::String("x".into())],
        )
        .unwrap(),
    ));
    put(2, "variant-array", &|o| nested.encode(o));
    let matrix = Array::with_dimensions(
        BuiltinType::Int32,
        (0..6).map(Variant::Int32).collect(),
        vec![2, 3],
    )
    .unwrap();
    put(2, "variant-matrix", &|o| {
        Variant::Array(Box::new(matrix.clone())).encode(o)
    });
    let eo = ExtensionObject::from_struct(&uaring_core::generated::types::AnonymousIdentityToken {
        policy_id: "a".into(),
    });
    put(3, "extension-object", &|o| eo.encode(o));
    put(4, "datavalue", &|o| {
        DataValue {
            value: Variant::Double(1.5),
            status: Some(StatusCode::Good),
            ..Default::default()
        }
        .encode(o)
    });
    put(6, "qualifiedname", &|o| {
        QualifiedName::new(2, "n").encode(o)
    });
    put(7, "localizedtext", &|o| {
        LocalizedText::new("en", "t").encode(o)
    });
}
