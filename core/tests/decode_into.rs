//! `Decode::decode_into` gives exactly what `Decode::decode` gives, whatever the value it
//! decodes into held before, and reuses that value's memory where it can.

use uaring_core::types::Identifier;
use uaring_core::{Decode, DecodeLimits, Decoder, Encode, NodeId};

fn decode_into<T: Decode>(into: &mut T, bytes: &[u8]) {
    let mut d = Decoder::new(bytes, DecodeLimits::default());
    into.decode_into(&mut d).expect("decode_into");
    assert_eq!(d.remaining(), 0);
}

#[test]
fn node_id_of_every_kind_into_every_kind() {
    let ids = [
        NodeId::numeric(0, 7),
        NodeId::numeric(3, 70_000),
        NodeId::string(2, "a string id"),
        NodeId::byte_string(0, vec![9u8; 32]),
        NodeId::byte_string(5, vec![1, 2, 3]),
        NodeId::byte_string(1, Vec::new()),
    ];
    for before in &ids {
        for value in &ids {
            let mut into = before.clone();
            decode_into(&mut into, &value.to_bytes());
            assert_eq!(&into, value, "{before:?} ← {value:?}");
        }
    }
}

#[test]
fn byte_string_node_id_reuses_its_buffer() {
    let mut into = NodeId::byte_string(0, vec![0u8; 32]);
    let Identifier::ByteString(v) = &into.identifier else { unreachable!() };
    let before = v.as_ptr();
    decode_into(&mut into, &NodeId::byte_string(0, vec![7u8; 32]).to_bytes());
    let Identifier::ByteString(v) = &into.identifier else { panic!("kind changed") };
    assert_eq!(v.as_ptr(), before, "the token's buffer was reallocated");
    assert_eq!(v, &vec![7u8; 32]);
}

#[test]
fn arrays_shrink_grow_and_become_null() {
    let long: Vec<NodeId> = (0..5).map(|i| NodeId::byte_string(0, vec![i as u8; 4])).collect();
    let short: Vec<NodeId> = vec![NodeId::numeric(0, 1), NodeId::string(1, "x")];
    let mut into = long.clone();
    decode_into(&mut into, &short.to_bytes());
    assert_eq!(into, short);
    decode_into(&mut into, &long.to_bytes());
    assert_eq!(into, long);
    decode_into(&mut into, &(-1i32).to_bytes());
    assert!(into.is_empty());
}

#[test]
fn limits_hold_as_for_decode() {
    let ids: Vec<u32> = (0..11).collect();
    let bytes = ids.to_bytes();
    let limits = DecodeLimits { max_array_len: 10, ..DecodeLimits::default() };
    let mut into: Vec<u32> = Vec::new();
    let e = into.decode_into(&mut Decoder::new(&bytes, limits)).unwrap_err();
    assert_eq!(e.status, Vec::<u32>::from_bytes(&bytes, limits).unwrap_err().status);
    // A truncated encoding fails just as decode does.
    assert!(into.decode_into(&mut Decoder::new(&bytes[..20], DecodeLimits::default())).is_err());
}
