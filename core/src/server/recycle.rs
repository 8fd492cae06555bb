//! Recycled request and response memory for the hot services (Read, Write, Browse, and the
//! Publish requests a subscription keeps coming), so a steady stream of them allocates
//! nothing on the heap.
//!
//! A shard keeps at most one spare of each boxed message. A request is decoded into the
//! spare with [`Decode::decode_into`], which reuses the arrays' and strings' capacity; the
//! service builds its response in the spare response; after the connection has encoded the
//! response, both go back here. Spares whose arrays grew beyond
//! [`RECYCLE_ELEMENTS_MAX`] elements are dropped instead of kept, so the memory held is
//! bounded (a few KiB per shard) whatever sizes the clients send. A kept Read response keeps
//! its results (so a String or array read into the same slot next time reuses their memory)
//! while their values hold at most [`RECYCLE_VALUE_BYTES_MAX`].
//!
//! CreateSession's serverEndpoints come back too: they depend only on the configuration and
//! the endpoint URL the client asked for, so the next CreateSession for the same URL sends
//! the same descriptions again instead of building them (about forty strings) anew.

use crate::encoding::{Decode, DecodeResult, Decoder};
use crate::generated::messages::{Request, Response};
use crate::generated::node_ids;
use crate::generated::types::{
    BrowseRequest, BrowseResponse, EndpointDescription, PublishRequest, ReadRequest, ReadResponse,
    WriteRequest, WriteResponse,
};
use crate::types::{NodeId, Variant};

/// Spares with more array elements than this are dropped instead of recycled.
pub const RECYCLE_ELEMENTS_MAX: usize = 256;

/// Most heap bytes (about) the values of a kept Read response may hold: more, and its
/// results are dropped before it is kept.
pub const RECYCLE_VALUE_BYTES_MAX: usize = 64 * 1024;

/// About how many heap bytes a value holds (its strings, bytes and elements).
fn heap_bytes(v: &Variant) -> usize {
    match v {
        Variant::String(s) => s.as_str().len(),
        Variant::XmlElement(x) => x.0.as_str().len(),
        Variant::ByteString(b) => b.as_bytes().len(),
        Variant::LocalizedText(t) => 64 + t.text.as_str().len() + t.locale.as_str().len(),
        Variant::ExtensionObject(e) => {
            64 + match &e.body {
                crate::types::ExtensionObjectBody::Binary(b) => b.len(),
                crate::types::ExtensionObjectBody::Xml(x) => x.0.as_str().len(),
                crate::types::ExtensionObjectBody::None => 0,
            }
        }
        Variant::Array(a) => {
            a.values.capacity() * std::mem::size_of::<Variant>()
                + a.values.iter().map(heap_bytes).sum::<usize>()
        }
        Variant::Empty
        | Variant::Boolean(_)
        | Variant::SByte(_)
        | Variant::Byte(_)
        | Variant::Int16(_)
        | Variant::UInt16(_)
        | Variant::Int32(_)
        | Variant::UInt32(_)
        | Variant::Int64(_)
        | Variant::UInt64(_)
        | Variant::Float(_)
        | Variant::Double(_)
        | Variant::DateTime(_)
        | Variant::StatusCode(_) => 0,
        _ => 64,
    }
}
/// A Browse response spare holding more reference descriptions than this (over all its
/// results) is dropped instead of recycled.
pub const RECYCLE_REFERENCES_MAX: usize = 1024;

/// One shard's spare message memory.
#[derive(Debug, Default)]
pub struct Recycler {
    read_request: Option<Box<ReadRequest>>,
    read_response: Option<Box<ReadResponse>>,
    write_request: Option<Box<WriteRequest>>,
    write_response: Option<Box<WriteResponse>>,
    browse_request: Option<Box<BrowseRequest>>,
    browse_response: Option<Box<BrowseResponse>>,
    publish_request: Option<Box<PublishRequest>>,
    /// The serverEndpoints of the last CreateSession response, all under one endpoint URL.
    session_endpoints: Vec<EndpointDescription>,
}

impl Recycler {
    /// Decodes a request body after its type id: Read and Write into the spares, anything
    /// else as [`Request::decode_body`] does. `Ok(None)` is an unknown type id.
    pub fn decode_request(
        &mut self,
        type_id: &NodeId,
        d: &mut Decoder<'_>,
    ) -> DecodeResult<Option<Request>> {
        match type_id.as_ns0() {
            Some(node_ids::ReadRequest_Encoding_DefaultBinary) => {
                let mut r = self.read_request.take().unwrap_or_default();
                r.decode_into(d)?;
                Ok(Some(Request::Read(r)))
            }
            Some(node_ids::BrowseRequest_Encoding_DefaultBinary) => {
                let mut r = self.browse_request.take().unwrap_or_default();
                r.decode_into(d)?;
                Ok(Some(Request::Browse(r)))
            }
            Some(node_ids::WriteRequest_Encoding_DefaultBinary) => {
                let mut r = self.write_request.take().unwrap_or_default();
                r.decode_into(d)?;
                Ok(Some(Request::Write(r)))
            }
            Some(node_ids::PublishRequest_Encoding_DefaultBinary) => {
                let mut r = self.publish_request.take().unwrap_or_default();
                r.decode_into(d)?;
                Ok(Some(Request::Publish(r)))
            }
            _ => Request::decode_body(type_id, d),
        }
    }

    /// Takes back a Read request once its service ran.
    pub fn give_read_request(&mut self, r: Box<ReadRequest>) {
        if r.nodes_to_read.capacity() <= RECYCLE_ELEMENTS_MAX {
            self.read_request = Some(r);
        }
    }

    /// Takes back a Write request once its service ran.
    pub fn give_write_request(&mut self, r: Box<WriteRequest>) {
        if r.nodes_to_write.capacity() <= RECYCLE_ELEMENTS_MAX {
            self.write_request = Some(r);
        }
    }

    /// Takes back a Publish request once the subscription engine has read it (it keeps
    /// what it needs of a queued request, not the request).
    pub fn give_publish_request(&mut self, r: Box<PublishRequest>) {
        if r.subscription_acknowledgements.capacity() <= RECYCLE_ELEMENTS_MAX {
            self.publish_request = Some(r);
        }
    }

    /// Takes back a Browse request once its service ran.
    pub fn give_browse_request(&mut self, r: Box<BrowseRequest>) {
        if r.nodes_to_browse.capacity() <= RECYCLE_ELEMENTS_MAX {
            self.browse_request = Some(r);
        }
    }

    /// A Browse response whose results and descriptions still hold their memory (the
    /// service overwrites them; `view::browse`).
    pub fn browse_response(&mut self) -> Box<BrowseResponse> {
        self.browse_response.take().unwrap_or_default()
    }

    /// An empty Read response (results emptied, capacity kept).
    pub fn read_response(&mut self) -> Box<ReadResponse> {
        self.read_response.take().unwrap_or_default()
    }

    /// An empty Write response (results emptied, capacity kept).
    pub fn write_response(&mut self) -> Box<WriteResponse> {
        self.write_response.take().unwrap_or_default()
    }

    /// The serverEndpoints a CreateSession response carried under `endpoint_url`, if the last
    /// one given back was for that URL (the caller built them for this shard's configuration,
    /// which does not change while the shard runs).
    pub fn session_endpoints(&mut self, endpoint_url: &str) -> Option<Vec<EndpointDescription>> {
        let same_url = |e: &EndpointDescription| e.endpoint_url.as_str() == endpoint_url;
        if !self.session_endpoints.is_empty() && self.session_endpoints.iter().all(same_url) {
            Some(std::mem::take(&mut self.session_endpoints))
        } else {
            None
        }
    }

    /// Takes back a response after it was encoded; Read and Write responses are kept
    /// (emptied) for the next request of their kind, CreateSession's serverEndpoints for the
    /// next CreateSession.
    pub fn give_response(&mut self, response: Response) {
        match response {
            Response::CreateSession(mut r) if r.server_endpoints.len() <= RECYCLE_ELEMENTS_MAX => {
                self.session_endpoints = std::mem::take(&mut r.server_endpoints);
            }
            Response::Read(mut r) if r.results.capacity() <= RECYCLE_ELEMENTS_MAX => {
                // The results stay (the next Read overwrites them in place, reusing their
                // strings' and arrays' memory) while what they hold is small.
                if r.results
                    .iter()
                    .map(|d| heap_bytes(&d.value))
                    .sum::<usize>()
                    > RECYCLE_VALUE_BYTES_MAX
                {
                    r.results.clear();
                }
                r.diagnostic_infos.clear();
                r.response_header = Default::default();
                self.read_response = Some(r);
            }
            Response::Write(mut r) if r.results.capacity() <= RECYCLE_ELEMENTS_MAX => {
                r.results.clear();
                r.diagnostic_infos.clear();
                r.response_header = Default::default();
                self.write_response = Some(r);
            }
            Response::Browse(r)
                if r.results.capacity() <= RECYCLE_ELEMENTS_MAX
                    && r.results
                        .iter()
                        .map(|b| b.references.capacity())
                        .sum::<usize>()
                        <= RECYCLE_REFERENCES_MAX =>
            {
                // Kept as they are: the next Browse overwrites the descriptions in place.
                self.browse_response = Some(r);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generated::types::CreateSessionResponse;

    fn endpoints(url: &str, n: usize) -> Vec<EndpointDescription> {
        (0..n)
            .map(|_| EndpointDescription {
                endpoint_url: url.into(),
                ..Default::default()
            })
            .collect()
    }

    fn given_back(r: &mut Recycler, server_endpoints: Vec<EndpointDescription>) {
        r.give_response(Response::CreateSession(Box::new(CreateSessionResponse {
            server_endpoints,
            ..Default::default()
        })));
    }

    #[test]
    fn session_endpoints_come_back_only_for_the_url_they_were_built_for() {
        let mut r = Recycler::default();
        assert_eq!(
            r.session_endpoints("opc.tcp://a:4840"),
            None,
            "nothing given back yet"
        );
        given_back(&mut r, endpoints("opc.tcp://a:4840", 3));
        assert_eq!(
            r.session_endpoints("opc.tcp://b:4840"),
            None,
            "another URL builds its own"
        );
        assert_eq!(
            r.session_endpoints("opc.tcp://a:4840"),
            Some(endpoints("opc.tcp://a:4840", 3))
        );
        assert_eq!(
            r.session_endpoints("opc.tcp://a:4840"),
            None,
            "taken: the next response brings them back"
        );
        // A list under several URLs, an empty one, or one too long to keep is never handed out.
        let mut mixed = endpoints("opc.tcp://a:4840", 2);
        mixed.extend(endpoints("opc.tcp://b:4840", 1));
        given_back(&mut r, mixed);
        assert_eq!(r.session_endpoints("opc.tcp://a:4840"), None);
        given_back(&mut r, Vec::new());
        assert_eq!(r.session_endpoints(""), None);
        given_back(
            &mut r,
            endpoints("opc.tcp://a:4840", RECYCLE_ELEMENTS_MAX + 1),
        );
        assert_eq!(r.session_endpoints("opc.tcp://a:4840"), None);
    }
}
