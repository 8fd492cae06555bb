//! The Demo folder's writable Int32 (`ns=1;s=Demo.Static.Int32`) over the blocking client:
//! write, read, a 20 ms exception-based subscription on it, and the values it delivers.

use std::time::{Duration, Instant};

use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::*;
use uaring_core::ExtensionObject;
use uaring_core::{NodeId, StatusCode, Variant};
use uaring_harness::blocking::{Client, ClientError};

/// How long a value may take to arrive.
pub const T: Duration = Duration::from_secs(10);

pub fn int32() -> NodeId {
    NodeId::string(1, "Demo.Static.Int32")
}

pub fn write(c: &mut Client, v: i32) {
    let r = c.write(&[WriteValue {
        node_id: int32(),
        attribute_id: 13,
        value: uaring_core::DataValue::new(Variant::Int32(v)),
        ..Default::default()
    }]);
    assert_eq!(r.expect("write"), vec![StatusCode::Good]);
}

pub fn read(c: &mut Client) -> i32 {
    let v = c.read_values(&[int32()]).expect("read");
    match v[0].value {
        Variant::Int32(x) => x,
        ref other => panic!("Int32 expected, got {other:?}"),
    }
}

/// A 20 ms subscription on the Int32 variable; returns its id.
pub fn subscribe(c: &mut Client) -> u32 {
    let Response::CreateSubscription(s) = c
        .call(Request::CreateSubscription(Box::new(
            CreateSubscriptionRequest {
                requested_publishing_interval: 20.0,
                requested_lifetime_count: 3000,
                requested_max_keep_alive_count: 10,
                publishing_enabled: true,
                ..Default::default()
            },
        )))
        .expect("CreateSubscription")
    else {
        panic!("not a CreateSubscription response")
    };
    let item = MonitoredItemCreateRequest {
        item_to_monitor: ReadValueId {
            node_id: int32(),
            attribute_id: 13,
            ..Default::default()
        },
        monitoring_mode: MonitoringMode::Reporting,
        requested_parameters: MonitoringParameters {
            client_handle: 5,
            sampling_interval: 0.0,
            queue_size: 100,
            discard_oldest: false,
            ..Default::default()
        },
    };
    let Response::CreateMonitoredItems(m) = c
        .call(Request::CreateMonitoredItems(Box::new(
            CreateMonitoredItemsRequest {
                subscription_id: s.subscription_id,
                timestamps_to_return: TimestampsToReturn::Both,
                items_to_create: vec![item],
                ..Default::default()
            },
        )))
        .expect("CreateMonitoredItems")
    else {
        panic!("not a CreateMonitoredItems response")
    };
    assert!(m.results[0].status_code.is_good());
    s.subscription_id
}

/// Publishes (acknowledging what it got) until `want` arrived; returns the values seen.
pub fn collect_until(
    c: &mut Client,
    acks: &mut Vec<SubscriptionAcknowledgement>,
    want: i32,
) -> Vec<i32> {
    let mut got = Vec::new();
    let deadline = Instant::now() + T;
    while !got.contains(&want) {
        assert!(
            Instant::now() < deadline,
            "value {want} not delivered; got {got:?}"
        );
        let r = c
            .call(Request::Publish(Box::new(PublishRequest {
                subscription_acknowledgements: std::mem::take(acks),
                ..Default::default()
            })))
            .expect("Publish");
        let Response::Publish(p) = r else {
            panic!("{r:?}")
        };
        for n in &p.notification_message.notification_data {
            if let Some(Ok(dc)) =
                n.decode_as::<DataChangeNotification>(uaring_core::DecodeLimits::default())
            {
                for m in dc.monitored_items {
                    if let Variant::Int32(v) = m.value.value {
                        got.push(v);
                    }
                }
            }
        }
        if !p.notification_message.notification_data.is_empty() {
            acks.push(SubscriptionAcknowledgement {
                subscription_id: p.subscription_id,
                sequence_number: p.notification_message.sequence_number,
            });
        }
    }
    got
}

/// ActivateSession with an anonymous token on `c`'s channel.
pub fn activate(c: &mut Client) -> Result<Response, ClientError> {
    c.call(Request::ActivateSession(Box::new(ActivateSessionRequest {
        user_identity_token: ExtensionObject::from_struct(&AnonymousIdentityToken {
            policy_id: "anonymous".into(),
        }),
        ..Default::default()
    })))
}

/// A new connection resuming the session of `token`; retried while the server answers
/// BadResourceUnavailable (its move queue to the owner was full).
pub fn resume(url: &str, token: &NodeId) -> Client {
    let deadline = Instant::now() + T;
    loop {
        let mut c = Client::connect(url, T).expect("connect");
        c.connection().set_authentication_token(token.clone());
        match activate(&mut c) {
            Ok(Response::ActivateSession(_)) => return c,
            Err(ClientError::Status(StatusCode::BadResourceUnavailable))
                if Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            other => panic!("ActivateSession on a new channel: {other:?}"),
        }
    }
}
