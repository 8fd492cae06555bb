//! Known-answer tests against public vectors: the TLS 1.2 P_SHA256 vector from the IETF TLS list,
//! S2OPC's Basic256Sha256 P_SHA256 outputs, key sets, AES-256-CBC and HMAC-SHA256 vectors, and
//! ASNeG's P_SHA1 (Basic128Rsa15) vector.

mod common;
use common::hex;
use uaring_crypto::{
    derive_channel_keys, derive_keys, p_sha1, p_sha256, status, PolicyId, SecurityMode,
    SymmetricKeys,
};

#[test]
fn p_sha256_tls12_prf_vector() {
    let secret = hex("9bbe436ba940f017b17652849a71db35");
    let mut seed = b"test label".to_vec();
    seed.extend_from_slice(&hex("a0ba9f936cda311827a6f796ffd5198c"));
    let mut out = [0u8; 100];
    p_sha256(&secret, &seed, &mut out);
    assert_eq!(
        out.to_vec(),
        hex(
            "e3f229ba727be17b8d122620557cd453c2aab21d07c3d495329b52d4e61edb5a\
             6b301791e90d35c9c9a46b4e14baf9af0fa022f7077def17abfd3797c0564bab\
             4fbc91666e9def9b97fce34f796789baa48082d122ee42c5a72e5a5110fff701\
             87347b66"
        )
    );
    // Shorter outputs are prefixes.
    let mut short = [0u8; 33];
    p_sha256(&secret, &seed, &mut short);
    assert_eq!(&short[..], &out[..33]);
}

#[test]
fn p_sha256_s2opc_64_and_80_bytes() {
    let mut out = [0u8; 64];
    p_sha256(
        &hex("8bcc1010ba96bc055c1168cf84167410893d6cc4cff090f6ded0eb476b118e17"),
        &hex("8c4584155b3df8aba84ede20a3a3778e087f0cf40d850f395b356345b0426614"),
        &mut out,
    );
    assert_eq!(
        out.to_vec(),
        hex(
            "5a6cee5d3f4881816d4d5fa890ea9333a0ccb47998efa8c3c1f7e04ffd778b0a\
             b71c5bc89bb418031ae54e34c6ab78a8e7a39113d72d7446ff5e54738d9d1d7e"
        )
    );
    let mut out = [0u8; 80];
    p_sha256(
        &hex("6bc8af2863fcc9e7e1d4441d8d87ae0dc42d9f62155bca420703537b05c53756"),
        &hex("c33f3f15ae9537c4d1e618dff2260ad0f6757c0201073fc265281e60b939a322"),
        &mut out,
    );
    assert_eq!(
        out.to_vec(),
        hex(
            "ba523f60d02e153670604816cbb25301ce8cc27a04f2be01163f3dd517c2b7f6\
             36a08d3ca6ed5811d65a9605efcaf5fd137984ac4a7efc141a181f5dacaac1bd\
             249a8e6424ad5133efd751b2c418160f"
        )
    );
}

#[test]
fn p_sha256_s2opc_1024_bytes() {
    let expected = hex(
        "addbefdaf4e8c0b14fa7ac19e302bf45e908910ee833975c3328bfa6b7a464c8ced5976887a9fd98b824da473eb88cf1c\
         a24c17268da6e6176cc8023c120e1d1\
         60f3755cb017b1bb67127dc9ceef24647a313ac230e68cd91b57115c60b55af8bde0c37667291678f2cd874ce2b5a8722\
         3b048e43f32319dea5c9d421c29ecb7\
         dd15630f5b11feaffd7d4facd49995a6cb1c6d95002045870474868815d13fb9159697b09859e8ca720c50754655bfb1b\
         07aea7522af545393cd178e1be80959\
         84b353958d6ce3a9da7ef03bd839f19dd400e513ff14ea3f0b6e39d9682d8f3d5f11ff202d3577ac2f5f5cce02b225a83\
         9a70a2b6d060527a900377f151f286f\
         33a8adfe8b3cc7874e7188ea0a949d9b67de6adecdce269b0e473f14600c800d53bed6e0ee879495668ee10a036fafdf0\
         15ea655f870e7d8630e055ac6f6fce2\
         e9dfb467439007be895461ef6910db1ccdec32b1f0640a856e961a743358a459b89f60f3089b41607bc0d111512c5a7b1\
         bd3ce955254b6393110ccf0f646b26d\
         399407fdc9983656b6c9e3cb81c2aae5b73d43d456145e5db3c1d84dddef0da42c1f9f6994b53bd7bb01392fae0882fe2\
         05be759d5bbea87f4f2a3d3e0b17585\
         7114419a37f4f83bb35ec87a008dddf04300f670818c7ff70d4d5b2de4bcee563b676c05edc4de5f7077d2d92f825e1a2\
         03cb9e37b8732e338b4aa188bb00dfb\
         fa35223936cee77bfab4e0fee46b23f0397700a81ae257cb144594ee241c5eb5ffde74132b505e7f8f85b6b140b743403\
         714f28eb4a1082f2b8536bf068ba0ad\
         0b49b873323881a0bba915d678f2548fb7e4424d42ced72d9f7b818b11da8ef1fcd698da53521cfcd02e559f0ae9ee85c\
         e046f47ae2215baaf9b08b0ef8733cb\
         78a00aae90b8dda614db5e647f690c4d310cd71dbb95c092ab2a2d5d036c1bf4f160c59ce099f185a9c638f09fa1d3332\
         8d5827bda760c258f3957d954147324\
         e678202b2fe791926f914d099c715f9eec751f526134ec84c4ba26c4fcbafc29b0d5cef8b35d0422c3c8835fe0f11dbbb\
         a31970c0c7f6b94767ba9b4b24fa53f\
         eda6e2453122a4a7fc28ddc77424740287d34e85971c87ead468496774ad6d6883768f4de4ce30c604395822262d7fabe\
         2cf3147f1f95dc603038f7d088140df\
         190e143720b19cf65b8a67d725dc1d043f9b2a168bfcef2c4f086f3966aca72b56a308e3a3c2eb7fcf8e6f6804065041a\
         e8fd65072a3f7913acde01ff387cde9\
         336574782a7dd28baf983e359a1afd6d0513809d1a83ec9f0a2a2a8a8fb1686635e068c4bce4bee77bb817662335a9131\
         2920063dbca5a23adb064bc6e3dad65\
         c53fe61599241d26c9615562b9456ede80587da078e639a66a160066241d9dabc8bde9c8c16d46ebb3ff5bc2698dd56a9\
         a8b924ef20eb0b67fa679f6fd41bdc6",
    );
    assert_eq!(expected.len(), 1024);
    let mut out = vec![0u8; 1024];
    p_sha256(
        &hex("d53d3776ecf8540fe1f579f6278f90cec832a19de09c915cd7ccb7bd942377a5"),
        &hex("87f48b64bffff0a20efeb62347fa995e574aad63c7371a5dac4b3fe2ae689b65"),
        &mut out,
    );
    assert_eq!(out, expected);
}

#[test]
fn p_sha1_asneg_basic128rsa15_vector() {
    let mut out = [0u8; 48];
    p_sha1(&[0x01; 16], &[0x02; 16], &mut out);
    assert_eq!(
        out.to_vec(),
        hex(
            "306505906ad66ce8510e76ceda07ecfcd90802c961646b1aa3694de3f096081e\
             18459aa73ef7aedcb8efaa4230c97201"
        )
    );
    // The same through the policy: Basic128Rsa15 derives 16 + 16 + 16 bytes with P_SHA1.
    let keys = derive_keys(PolicyId::Basic128Rsa15, &[0x01; 16], &[0x02; 16]).unwrap();
    assert_eq!(keys.signing_key(), &out[..16]);
    assert_eq!(keys.encrypting_key(), &out[16..32]);
    assert_eq!(&keys.iv()[..], &out[32..48]);
}

struct KeySetVector {
    client_nonce: &'static str,
    server_nonce: &'static str,
    client: [&'static str; 3],
    server: [&'static str; 3],
}

const S2OPC_KEYSETS: [KeySetVector; 2] = [
    KeySetVector {
        client_nonce: "3d3b4768f275d5023c2145cbe3a4a592fb843643d791f7bd7fce75ff25128b68",
        server_nonce: "ccee418cbc77c2ebb38d5ffac9d2a9d0a6821fa211798e71b2d65b3abb6aec8f",
        client: [
            "86842427475799fa782efa5c63f5eb6f0b6dbf8a549dd5452247feaa5021714b",
            "d8de10ac4fb579f2718ddcb50ea68d1851c76644b26454e3f9339958d23429d5",
            "4167de62880e0bdc023aa133965c34ff",
        ],
        server: [
            "f6db2ad48ad3776f83086b47e9f905ee00193f87e85ccde0c3bf7eb8650e236e",
            "2c86aecfd5629ee05c49345bce3b2a7ca959a0bf4c9c281b8516a369650dbc4e",
            "39a4f596bcbb99e0b48114f60fc6af21",
        ],
    },
    KeySetVector {
        client_nonce: "d821ea93a6a48a4ef49b36c5e7d1bae6c49ccb2b2ddb07c99dcf046e2225617f",
        server_nonce: "00a8cb99446410a70bf221d5c498d0d0b3e968a306f1a4dc5d1acbe7a37644da",
        client: [
            "185e860da28d3a224729926ba5b5b800214b2f74257ed39e694596520e67e574",
            "7a6c2cdc20a842a0e2039075935b14a07f578c157091328adc9d52bbb8ef727d",
            "dcf97c356f5ef87b7049900f74355c13",
        ],
        server: [
            "105b1805ecc3a25de8e2eaa5c9e94504b355990243c6163c2c8b95c1f5681694",
            "2439bdd8fc365b0fe7b7e2cfcefee67ea7bdea6c157d0b23092f0abc015792d5",
            "005a70781b43979940c77368677718cd",
        ],
    },
];

#[test]
fn basic256sha256_key_sets_s2opc() {
    for v in &S2OPC_KEYSETS {
        let keys = derive_channel_keys(
            PolicyId::Basic256Sha256,
            &hex(v.client_nonce),
            &hex(v.server_nonce),
        )
        .unwrap();
        for (set, want) in [(&keys.client, &v.client), (&keys.server, &v.server)] {
            assert_eq!(set.signing_key(), &hex(want[0])[..]);
            assert_eq!(set.encrypting_key(), &hex(want[1])[..]);
            assert_eq!(&set.iv()[..], &hex(want[2])[..]);
        }
    }
}

#[test]
fn aes128_and_aes256_policies_split_the_same_derivation() {
    // Aes128_Sha256_RsaOaep derives 32 + 16 + 16 bytes; Aes256_Sha256_RsaPss the Basic256Sha256
    // layout. Both are prefixes of the same P_SHA256 stream.
    let v = &S2OPC_KEYSETS[0];
    let (c, s) = (hex(v.client_nonce), hex(v.server_nonce));
    let mut stream = [0u8; 80];
    p_sha256(&s, &c, &mut stream);
    let k128 = derive_channel_keys(PolicyId::Aes128Sha256RsaOaep, &c, &s).unwrap();
    assert_eq!(k128.client.signing_key(), &stream[..32]);
    assert_eq!(k128.client.encrypting_key(), &stream[32..48]);
    assert_eq!(&k128.client.iv()[..], &stream[48..64]);
    let k256 = derive_channel_keys(PolicyId::Aes256Sha256RsaPss, &c, &s).unwrap();
    assert_eq!(k256.client.encrypting_key(), &hex(v.client[1])[..]);
}

#[test]
fn wrong_nonce_lengths_are_rejected() {
    assert_eq!(
        derive_channel_keys(PolicyId::Basic256Sha256, &[0u8; 31], &[0u8; 32]).unwrap_err(),
        status::BAD_NONCE_INVALID
    );
    assert_eq!(
        derive_channel_keys(PolicyId::Aes128Sha256RsaOaep, &[0u8; 32], &[]).unwrap_err(),
        status::BAD_NONCE_INVALID
    );
}

fn aes256_keys(key: &str, iv: &str) -> SymmetricKeys {
    SymmetricKeys::new(PolicyId::Basic256Sha256, &[0u8; 32], &hex(key), &hex(iv)).unwrap()
}

#[test]
fn aes256_cbc_s2opc_single_block_vectors() {
    let zero_iv = "00000000000000000000000000000000";
    let zero_key = "0000000000000000000000000000000000000000000000000000000000000000";
    // (key, iv, plaintext, ciphertext)
    let cases = [
        (
            zero_key,
            zero_iv,
            "00000000000000000000000000000000",
            "dc95c078a2408989ad48a21492842087",
        ),
        (
            "c47b0294dbbbee0fec4757f22ffeee3587ca4730c3d33b691df38bab076bc558",
            zero_iv,
            "00000000000000000000000000000000",
            "46f2fb342d6f0ab477476fc501242c5f",
        ),
        (
            "ccd1bc3c659cd3c59bc437484e3c5c724441da8d6e90ce556cd57d0752663bbc",
            zero_iv,
            "00000000000000000000000000000000",
            "304f81ab61a80c2e743b94d5002a126b",
        ),
        (
            zero_key,
            zero_iv,
            "0b24af36193ce4665f2825d7b4749c98",
            "a9ff75bd7cf6613d3731c77c3b6d0c04",
        ),
        (
            "458b67bf212d20f3a57fce392065582dcefbf381aa22949f8338ab9052260e1d",
            "4c12effc5963d40459602675153e9649",
            "256fd73ce35ae3ea9c25dd2a9454493e",
            "90b7b9630a2378f53f501ab7beff0391",
        ),
        (
            "28d46cffa158533194214a91e712fc2b45b518076675affd910edeca5f41ac64",
            zero_iv,
            "00000000000000000000000000000000",
            "4bf3b0a69aeb6657794f2901b1440ad4",
        ),
        (
            "07eb03a08d291d1b07408bf3512ab40c91097ac77461aad4bb859647f74f00ee",
            zero_iv,
            "00000000000000000000000000000000",
            "47cb030da2ab051dfc6c4bf6910d12bb",
        ),
        (
            zero_key,
            zero_iv,
            "761c1fe41a18acf20d241650611d90f1",
            "623a52fcea5d443e48d9181ab32c7421",
        ),
    ];
    for (key, iv, plain, cipher) in cases {
        let k = aes256_keys(key, iv);
        let mut buf = hex(plain);
        k.encrypt_in_place(&mut buf).unwrap();
        assert_eq!(buf, hex(cipher), "encrypt with key {key}");
        k.decrypt_in_place(&mut buf).unwrap();
        assert_eq!(buf, hex(plain), "decrypt with key {key}");
    }
}

#[test]
fn aes256_cbc_s2opc_multi_block_vector() {
    let k = aes256_keys(
        "458b67bf212d20f3a57fce392065582dcefbf381aa22949f8338ab9052260e1d",
        "4c12effc5963d40459602675153e9649",
    );
    let plain = hex(
        "256fd73ce35ae3ea9c25dd2a9454493e96d8633fe633b56176dce8785ce5dbbb84dbf2c8a2eeb1e96b51899605e4f1\
         3bbc11b93bf6f39b3469be14858b5b720d\
         4a522d36feed7a329c9b1e852c9280c47db8039c17c4921571a07d1864128330e09c308ddea1694e95c84500f1a61e\
         614197e86a30ecc28df64ccb3ccf5437aa",
    );
    let cipher = hex(
        "90b7b9630a2378f53f501ab7beff039155008071bc8438e789932cfd3eb1299195465e6633849463fdb44375278e2fdb1\
         310821e6492cf80ff15cb772509fb42\
         6f3aeee27bd4938882fd2ae6b5bd9d91fa4a43b17bb439ebbe59c042310163a82a5fe5388796eee35a181a1271f00be29\
         b852d8fa759bad01ff4678f010594cd",
    );
    assert_eq!(plain.len(), 128);
    let mut buf = plain.clone();
    k.encrypt_in_place(&mut buf).unwrap();
    assert_eq!(buf, cipher);
    // Every call starts from the derived IV again: no chaining across chunks.
    let mut again = plain.clone();
    k.encrypt_in_place(&mut again).unwrap();
    assert_eq!(again, cipher);
    k.decrypt_in_place(&mut buf).unwrap();
    assert_eq!(buf, plain);
    // Lengths that are not block multiples are refused, not truncated.
    assert!(k.encrypt_in_place(&mut [0u8; 15]).is_err());
    assert_eq!(
        k.decrypt_in_place(&mut [0u8; 17]).unwrap_err(),
        status::BAD_SECURITY_CHECKS_FAILED
    );
}

#[test]
fn hmac_sha256_s2opc_vector_and_tampering() {
    let keys = SymmetricKeys::new(
        PolicyId::Basic256Sha256,
        &hex("7203d5e504eafe00e5dd77519eb640de3bbac660ec781166c4d460362a94c372"),
        &[0u8; 32],
        &[0u8; 16],
    )
    .unwrap();
    let data = hex(
        "ec7b07fb4f3a6b87ca8cff06ba9e0ec619a34a2d9618dc2a02bde67709ded8b4\
         e7069d582665f23a361324d1f84807e30d2227b266c287cc342980d62cb53017",
    );
    let mut sig = [0u8; 32];
    keys.sign(&data, &mut sig).unwrap();
    assert_eq!(
        sig.to_vec(),
        hex("e4185b6d49f06e8b94a552ad950983852ef20b58ee75f2c448fea587728d94db")
    );
    assert!(keys.verify(&data, &sig));
    sig[1] ^= 0x20;
    assert!(!keys.verify(&data, &sig));
    sig[1] ^= 0x20;
    sig[31] = 0x04;
    assert!(!keys.verify(&data, &sig));
    assert!(!keys.verify(&data, &sig[..31]));
    assert!(keys.sign(&data, &mut [0u8; 31]).is_err());
}

#[test]
fn seal_and_open_chunks_for_every_supported_policy() {
    let client_nonce = [0x11u8; 32];
    let server_nonce = [0x22u8; 32];
    for policy in [
        PolicyId::Basic256Sha256,
        PolicyId::Aes128Sha256RsaOaep,
        PolicyId::Aes256Sha256RsaPss,
    ] {
        let keys = derive_channel_keys(policy, &client_nonce, &server_nonce).unwrap();
        let (client_send, client_recv) = keys.client_role();
        let (server_send, server_recv) = keys.server_role();
        assert_eq!(client_send.signing_key(), server_recv.signing_key());
        assert_eq!(server_send.signing_key(), client_recv.signing_key());
        assert_ne!(client_send.signing_key(), server_send.signing_key());

        for mode in [SecurityMode::Sign, SecurityMode::SignAndEncrypt] {
            // header (16 bytes, not encrypted) + body + padding + signature.
            let header = 16;
            let body = 1000;
            let sig = policy.symmetric_signature_len();
            let pad = if mode == SecurityMode::SignAndEncrypt {
                uaring_crypto::padding_len(body, sig, 16, false)
            } else {
                0
            };
            let mut chunk = vec![0u8; header + body + pad + sig];
            for (i, b) in chunk[..header + body].iter_mut().enumerate() {
                *b = i as u8;
            }
            uaring_crypto::write_padding(&mut chunk[header + body..header + body + pad], false);
            let original = chunk.clone();
            client_send.seal_chunk(&mut chunk, header, mode).unwrap();
            if mode == SecurityMode::SignAndEncrypt {
                assert_ne!(
                    &chunk[header..header + body],
                    &original[header..header + body]
                );
                assert_eq!((chunk.len() - header) % 16, 0);
            } else {
                assert_eq!(&chunk[..header + body], &original[..header + body]);
            }
            let mut received = chunk.clone();
            let len = server_recv.open_chunk(&mut received, header, mode).unwrap();
            assert_eq!(len, header + body + pad);
            assert_eq!(&received[..len], &original[..len]);
            if mode == SecurityMode::SignAndEncrypt {
                assert_eq!(
                    uaring_crypto::check_padding(&received[header..len], false),
                    Some(pad)
                );
            }
            // A flipped bit anywhere fails; so do the wrong direction's keys.
            for pos in [0, header, header + body / 2, chunk.len() - 1] {
                let mut bad = chunk.clone();
                bad[pos] ^= 1;
                assert_eq!(
                    server_recv.open_chunk(&mut bad, header, mode).unwrap_err(),
                    status::BAD_SECURITY_CHECKS_FAILED
                );
            }
            let mut wrong = chunk.clone();
            assert!(client_recv.open_chunk(&mut wrong, header, mode).is_err());
        }
    }
}

#[test]
fn padding_helpers() {
    use uaring_crypto::{check_padding, padding_len, write_padding};
    for plain in 0..64 {
        for sig in [0, 20, 32] {
            let n = padding_len(plain, sig, 16, false);
            assert!((1..=16).contains(&n));
            assert_eq!((plain + n + sig) % 16, 0);
            let mut buf = vec![0xEEu8; plain];
            buf.resize(plain + n, 0);
            write_padding(&mut buf[plain..], false);
            assert_eq!(check_padding(&buf, false), Some(n));
        }
    }
    // Asymmetric, 4096-bit OAEP-SHA256: block 446 > 256, so the extra byte is used.
    let block = PolicyId::Aes256Sha256RsaPss.asym_plain_block_size(512);
    assert_eq!(block, 446);
    assert!(PolicyId::Aes256Sha256RsaPss.asym_has_extra_padding_byte(512));
    assert!(!PolicyId::Basic256Sha256.asym_has_extra_padding_byte(256));
    let n = padding_len(10, 512, block, true);
    assert_eq!((10 + n + 512) % block, 0);
    assert!(n > 256);
    let mut buf = vec![7u8; 10 + n];
    write_padding(&mut buf[10..], true);
    assert_eq!(check_padding(&buf, true), Some(n));
    // Inconsistent padding is detected.
    let last = buf.len() - 3;
    buf[last] ^= 1;
    assert_eq!(check_padding(&buf, true), None);
    assert_eq!(check_padding(&[5u8, 5, 5], false), None);
}

#[test]
fn policy_table() {
    for p in PolicyId::ALL {
        assert_eq!(PolicyId::from_uri(p.uri()), Some(p));
    }
    assert_eq!(
        PolicyId::from_uri("http://opcfoundation.org/UA/SecurityPolicy#Nope"),
        None
    );
    assert_eq!(PolicyId::Basic256Sha256.nonce_len(), 32);
    assert_eq!(
        PolicyId::Aes128Sha256RsaOaep.symmetric_key_lens(),
        (32, 16, 16)
    );
    assert_eq!(
        PolicyId::Aes256Sha256RsaPss.symmetric_key_lens(),
        (32, 32, 16)
    );
    assert_eq!(PolicyId::Basic256.symmetric_key_lens(), (24, 32, 16));
    assert_eq!(PolicyId::Basic256Sha256.asym_plain_block_size(256), 214);
    assert_eq!(PolicyId::Aes256Sha256RsaPss.asym_plain_block_size(256), 190);
    assert_eq!(PolicyId::Basic128Rsa15.asym_plain_block_size(256), 245);
    assert_eq!(
        PolicyId::Aes256Sha256RsaPss.asym_signature_algorithm_uri(),
        Some("http://opcfoundation.org/UA/security/rsa-pss-sha2-256")
    );
    assert_eq!(
        PolicyId::Basic256Sha256.asym_encryption_algorithm_uri(),
        Some("http://www.w3.org/2001/04/xmlenc#rsa-oaep")
    );
    assert!(PolicyId::RECOMMENDED
        .iter()
        .all(|p| p.is_supported() && !p.is_deprecated()));
    assert!(!PolicyId::Basic128Rsa15.is_supported());
    assert_eq!(
        SecurityMode::from_u32(3),
        Some(SecurityMode::SignAndEncrypt)
    );
    assert_eq!(SecurityMode::from_u32(0), None);
}
