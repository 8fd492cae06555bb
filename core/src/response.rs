//! What every answer starts with: the ResponseHeader, the ServiceFault, and [`Deferred`], a
//! response produced after its request was handled. Below every layer that answers requests
//! (the subscription engine, the services, the connection), so that none of them reaches up
//! to another for a header.

use crate::generated::messages::Response;
use crate::generated::types::{ResponseHeader, ServiceFault};
use crate::time::Now;
use crate::types::StatusCode;

/// A ResponseHeader with Good, the request handle and `now`'s UTC time.
pub fn response_header(request_handle: u32, now: Now) -> ResponseHeader {
    ResponseHeader {
        timestamp: now.utc,
        request_handle,
        ..ResponseHeader::default()
    }
}

/// A ServiceFault with `status`.
pub fn fault(request_handle: u32, status: StatusCode, now: Now) -> Response {
    Response::ServiceFault(Box::new(ServiceFault {
        response_header: ResponseHeader {
            service_result: status,
            ..response_header(request_handle, now)
        },
    }))
}

/// A response produced after its request was handled (a Publish).
#[derive(Debug)]
pub enum Deferred {
    /// A response to encode like any other.
    Response(Response),
    /// A response the host already encoded (type id + body) into a pooled buffer; the
    /// connection chunks it and hands the buffer back (`ConnectionHost::recycle_buffer`).
    /// `max_size`: the session's MaxResponseMessageSize (0 = none), applied with the
    /// channel's limit.
    Encoded {
        request_handle: u32,
        body: Vec<u8>,
        max_size: u32,
    },
}

impl Deferred {
    /// The response as a structure (decodes an encoded one; for tests and diagnostics).
    pub fn to_response(&self) -> Result<Response, StatusCode> {
        match self {
            Deferred::Response(r) => Ok(r.clone()),
            Deferred::Encoded { body, .. } => {
                use crate::encoding::{Decode, Decoder};
                let mut d = Decoder::new(body, crate::DecodeLimits::default());
                let t = crate::types::NodeId::decode(&mut d).map_err(|e| e.status)?;
                Response::decode_body(&t, &mut d)
                    .map_err(|e| e.status)?
                    .ok_or(StatusCode::BadDecodingError)
            }
        }
    }
}
