//! `Decode::decode_into` gives exactly what `Decode::decode` gives, whatever the value it
//! decodes into held before, and reuses that value's memory where it can.

use uaring_core::types::{
    ExtensionObject, ExtensionObjectBody, Guid, Identifier, UaString, XmlElement,
};
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
        NodeId::numeric(2, 300),
        NodeId::numeric(3, 70_000),
        NodeId::guid(
            1,
            Guid {
                data1: 1,
                data2: 2,
                data3: 3,
                data4: [4; 8],
            },
        ),
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
    let Identifier::ByteString(v) = &into.identifier else {
        unreachable!()
    };
    let before = v.as_ptr();
    decode_into(&mut into, &NodeId::byte_string(0, vec![7u8; 32]).to_bytes());
    let Identifier::ByteString(v) = &into.identifier else {
        panic!("kind changed")
    };
    assert_eq!(v.as_ptr(), before, "the token's buffer was reallocated");
    assert_eq!(v, &vec![7u8; 32]);
}

#[test]
fn arrays_shrink_grow_and_become_null() {
    let long: Vec<NodeId> = (0..5)
        .map(|i| NodeId::byte_string(0, vec![i as u8; 4]))
        .collect();
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
    let limits = DecodeLimits {
        max_array_len: 10,
        ..DecodeLimits::default()
    };
    let mut into: Vec<u32> = Vec::new();
    let e = into
        .decode_into(&mut Decoder::new(&bytes, limits))
        .unwrap_err();
    assert_eq!(
        e.status,
        Vec::<u32>::from_bytes(&bytes, limits).unwrap_err().status
    );
    // A truncated encoding fails just as decode does.
    assert!(into
        .decode_into(&mut Decoder::new(&bytes[..20], DecodeLimits::default()))
        .is_err());
}

#[test]
fn extension_object_of_every_kind_into_every_kind() {
    let objects = [
        ExtensionObject::null(),
        ExtensionObject {
            type_id: NodeId::numeric(0, 321),
            body: ExtensionObjectBody::None,
        },
        ExtensionObject {
            type_id: NodeId::numeric(0, 324),
            body: ExtensionObjectBody::Binary(vec![1, 2, 3, 4]),
        },
        ExtensionObject {
            type_id: NodeId::string(2, "t"),
            body: ExtensionObjectBody::Binary(Vec::new()),
        },
        ExtensionObject {
            type_id: NodeId::numeric(0, 325),
            body: ExtensionObjectBody::Xml(XmlElement(UaString::from("<a/>"))),
        },
    ];
    for before in &objects {
        for value in &objects {
            let bytes = value.to_bytes();
            assert_eq!(
                ExtensionObject::from_bytes(&bytes, DecodeLimits::default()).as_ref(),
                Ok(value)
            );
            let mut into = before.clone();
            decode_into(&mut into, &bytes);
            assert_eq!(&into, value, "{before:?} ← {value:?}");
        }
    }
    // A binary body reuses the body's buffer.
    let mut into = objects[2].clone();
    let ExtensionObjectBody::Binary(b) = &into.body else {
        unreachable!()
    };
    let before = b.as_ptr();
    decode_into(&mut into, &objects[2].to_bytes());
    let ExtensionObjectBody::Binary(b) = &into.body else {
        panic!("kind changed")
    };
    assert_eq!(b.as_ptr(), before);
    // An encoding byte that is none of 0, 1, 2 fails as decode does.
    let mut bad = ExtensionObject::null().to_bytes();
    bad[2] = 3;
    assert!(ExtensionObject::null()
        .decode_into(&mut Decoder::new(&bad, DecodeLimits::default()))
        .is_err());
}
