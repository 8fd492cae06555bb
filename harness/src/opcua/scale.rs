//! The workloads of the plant-scale scenarios ([`crate::scale`]): Reads and Browses of plant
//! variables spread over all N (`scale-nodes`), and one CreateMonitoredItems of many items on
//! a blocking session, timed (`scale-items`).

use std::time::Instant;

use super::*;
use crate::push::{k_of, namespace_index, plant_node, NAMESPACE_ARRAY, PLANT_NAMESPACE_URI};

/// What one `scale-nodes` operation asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeService {
    /// Read of the Value of `--nodes` K variables.
    Read,
    /// Browse of K variables, both directions, every reference type, ResultMask 63.
    Browse,
}

impl NodeService {
    pub fn parse(s: &str) -> Result<NodeService, String> {
        match s {
            "read" => Ok(NodeService::Read),
            "browse" => Ok(NodeService::Browse),
            other => Err(format!("--service {other:?}: read or browse")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            NodeService::Read => "read",
            NodeService::Browse => "browse",
        }
    }
}

/// A step through 0..n that visits every index once in n steps and jumps far each time, so
/// that consecutive operations touch variables far apart in the server's store (no locality
/// to hide a cost that grows with N): the first number from n × 0.618… (the golden ratio's
/// fraction) on that shares no factor with n.
pub fn spread_stride(n: usize) -> usize {
    fn gcd(a: usize, b: usize) -> usize {
        if b == 0 {
            a
        } else {
            gcd(b, a % b)
        }
    }
    if n <= 2 {
        return 1 % n.max(1);
    }
    let mut s = ((n as f64) * 0.618_033_988_75) as usize;
    while gcd(s, n) != 1 {
        s += 1;
    }
    s
}

/// The Read NamespaceArray request of a plant session's first setup step.
pub(super) fn namespace_array_read() -> Request {
    Request::Read(Box::new(ReadRequest {
        max_age: 0.0,
        timestamps_to_return: TimestampsToReturn::Neither,
        nodes_to_read: vec![read_value_id(NodeId::ns0(NAMESPACE_ARRAY), attr::VALUE)],
        ..Default::default()
    }))
}

/// The plant namespace's index from the answer to [`namespace_array_read`].
pub(super) fn plant_namespace(prev: Option<&Response>) -> Result<u16, String> {
    let Some(Response::Read(r)) = prev else {
        return Err("NamespaceArray: no Read answer".into());
    };
    let dv = r.results.first().ok_or("NamespaceArray: no result")?;
    if dv.status_code().is_bad() {
        return Err(format!("NamespaceArray: {}", status_name(dv.status_code())));
    }
    namespace_index(&dv.value, PLANT_NAMESPACE_URI)
}

/// `scale-nodes`: Reads or Browses of `per_request` plant variables `s=Plant.V<i>` per
/// request, closed loop with `inflight` out, i stepping by [`spread_stride`] over all `n`
/// from this connection's own offset. A Read result must be Good and a whole Double ≥ 0 (the
/// plant contract's k); a Browse result Good with at least the variable's two references
/// (HasTypeDefinition and the folder's Organizes).
pub struct SpreadWork {
    pub service: NodeService,
    pub n: usize,
    pub per_request: usize,
    pub inflight: usize,
    stride: usize,
    next: usize,
    ns: Option<u16>,
}

impl SpreadWork {
    pub fn new(
        service: NodeService,
        n: usize,
        per_request: usize,
        inflight: usize,
        offset: usize,
    ) -> SpreadWork {
        let n = n.max(1);
        SpreadWork {
            service,
            n,
            per_request: per_request.max(1),
            inflight,
            stride: spread_stride(n),
            next: offset % n,
            ns: None,
        }
    }

    /// The variable index of the next node and the step past it.
    fn take(&mut self) -> usize {
        let i = self.next;
        self.next = (self.next + self.stride) % self.n;
        i
    }

    /// The plant namespace's index (else read in the setup).
    pub(super) fn set_namespace(&mut self, ns: u16) {
        self.ns = Some(ns);
    }

    pub(super) fn request(&mut self) -> Request {
        let ns = self.ns.unwrap_or(0);
        let nodes: Vec<NodeId> = (0..self.per_request)
            .map(|_| plant_node(ns, self.take()))
            .collect();
        match self.service {
            NodeService::Read => Request::Read(Box::new(ReadRequest {
                max_age: 0.0,
                timestamps_to_return: TimestampsToReturn::Neither,
                nodes_to_read: nodes
                    .into_iter()
                    .map(|n| read_value_id(n, attr::VALUE))
                    .collect(),
                ..Default::default()
            })),
            NodeService::Browse => Request::Browse(Box::new(BrowseRequest {
                requested_max_references_per_node: 0,
                nodes_to_browse: nodes
                    .into_iter()
                    .map(|node_id| BrowseDescription {
                        node_id,
                        browse_direction: BrowseDirection::Both,
                        reference_type_id: NodeId::NULL,
                        include_subtypes: true,
                        node_class_mask: 0,
                        result_mask: 63,
                    })
                    .collect(),
                ..Default::default()
            })),
        }
    }

    /// Checks an answer of `per_request` results.
    pub fn check(&self, resp: &Response) -> Result<(), String> {
        let sr = service_result(resp);
        if sr.is_bad() {
            return Err(format!("{} answered {}", resp.name(), status_name(sr)));
        }
        match (self.service, resp) {
            (NodeService::Read, Response::Read(r)) => {
                if r.results.len() != self.per_request {
                    return Err(format!(
                        "Read: {} results for {} nodes",
                        r.results.len(),
                        self.per_request
                    ));
                }
                for dv in &r.results {
                    if dv.status_code().is_bad() {
                        return Err(format!("Read: {}", status_name(dv.status_code())));
                    }
                    k_of(&dv.value)?;
                }
                Ok(())
            }
            (NodeService::Browse, Response::Browse(r)) => {
                if r.results.len() != self.per_request {
                    return Err(format!(
                        "Browse: {} results for {} nodes",
                        r.results.len(),
                        self.per_request
                    ));
                }
                for b in &r.results {
                    if b.status_code.is_bad() || b.references.len() < 2 {
                        return Err(format!(
                            "Browse: {} with {} references (a plant variable has its type definition and its folder)",
                            status_name(b.status_code),
                            b.references.len()
                        ));
                    }
                }
                Ok(())
            }
            (s, other) => Err(format!(
                "{} answered with {}",
                if s == NodeService::Read {
                    "Read"
                } else {
                    "Browse"
                },
                other.name()
            )),
        }
    }
}

impl Workload for SpreadWork {
    fn setup(&mut self, step: usize, prev: Option<&Response>) -> Result<Option<Request>, String> {
        match step {
            0 => Ok(Some(namespace_array_read())),
            _ => {
                self.ns = Some(plant_namespace(prev)?);
                Ok(None)
            }
        }
    }
    fn initial(&self) -> usize {
        self.inflight
    }
    fn next(&mut self, _now: u64) -> Option<Request> {
        Some(self.request())
    }
    fn on_response(
        &mut self,
        _id: u32,
        resp: &Response,
        sent: u64,
        now: u64,
        ctx: &mut Ctx,
    ) -> Result<(), String> {
        self.check(resp)?;
        ctx.complete(now.saturating_sub(sent));
        Ok(())
    }
}

/// What [`create_items_once`] measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CreateTiming {
    /// The CreateMonitoredItems request built and sent → its answer decoded, ms.
    pub create_ms: f64,
    /// CloseSession (deleting the subscription and its items) sent → answered, ms.
    pub delete_ms: f64,
    pub items: usize,
}

/// One subscription and one CreateMonitoredItems of `items` items on it, timed.
struct CreateOnce {
    items: usize,
    n: usize,
    sampling_ms: f64,
    publishing_ms: f64,
    ns: u16,
    sub_id: u32,
    sent: Option<Instant>,
    timing: Arc<std::sync::Mutex<Option<f64>>>,
}

impl Workload for CreateOnce {
    fn setup(&mut self, step: usize, prev: Option<&Response>) -> Result<Option<Request>, String> {
        match step {
            0 => Ok(Some(namespace_array_read())),
            1 => {
                self.ns = plant_namespace(prev)?;
                Ok(Some(Request::CreateSubscription(Box::new(
                    CreateSubscriptionRequest {
                        requested_publishing_interval: self.publishing_ms,
                        requested_lifetime_count: 10_000,
                        requested_max_keep_alive_count: 10,
                        publishing_enabled: true,
                        ..Default::default()
                    },
                ))))
            }
            2 => {
                let Some(Response::CreateSubscription(r)) = prev else {
                    return Err("CreateSubscription: no answer".into());
                };
                self.sub_id = r.subscription_id;
                let items_to_create = (0..self.items)
                    .map(|j| MonitoredItemCreateRequest {
                        item_to_monitor: read_value_id(
                            plant_node(self.ns, j % self.n),
                            attr::VALUE,
                        ),
                        monitoring_mode: MonitoringMode::Reporting,
                        requested_parameters: MonitoringParameters {
                            client_handle: j as u32,
                            sampling_interval: self.sampling_ms,
                            filter: ExtensionObject::null(),
                            queue_size: 1,
                            discard_oldest: true,
                        },
                    })
                    .collect();
                let req = Request::CreateMonitoredItems(Box::new(CreateMonitoredItemsRequest {
                    subscription_id: self.sub_id,
                    timestamps_to_return: TimestampsToReturn::Both,
                    items_to_create,
                    ..Default::default()
                }));
                self.sent = Some(Instant::now());
                Ok(Some(req))
            }
            _ => {
                let elapsed = self.sent.map(|t| t.elapsed().as_secs_f64() * 1e3);
                let Some(Response::CreateMonitoredItems(r)) = prev else {
                    return Err("CreateMonitoredItems: no answer".into());
                };
                if r.results.len() != self.items {
                    return Err(format!(
                        "CreateMonitoredItems: {} results for {} items",
                        r.results.len(),
                        self.items
                    ));
                }
                if let Some((j, bad)) = r
                    .results
                    .iter()
                    .enumerate()
                    .find(|(_, x)| x.status_code.is_bad())
                {
                    return Err(format!(
                        "CreateMonitoredItems: item {j} of {}: {}",
                        self.items,
                        status_name(bad.status_code)
                    ));
                }
                *self.timing.lock().map_err(|_| "timing lock")? = elapsed;
                Ok(None)
            }
        }
    }
    fn initial(&self) -> usize {
        0
    }
    fn next(&mut self, _now: u64) -> Option<Request> {
        None
    }
    fn on_response(
        &mut self,
        _id: u32,
        resp: &Response,
        _sent: u64,
        _now: u64,
        _ctx: &mut Ctx,
    ) -> Result<(), String> {
        Err(format!("unexpected {}", resp.name()))
    }
}

/// What [`create_items_once`] creates.
#[derive(Clone, Copy, Debug)]
pub struct CreateSpec {
    pub items: usize,
    /// The server's plant variables: item j samples `s=Plant.V<j mod variables>`.
    pub variables: usize,
    pub sampling_ms: f64,
    pub publishing_ms: f64,
    /// How long each answer may take.
    pub timeout: Duration,
}

/// On a session of its own: one subscription, one CreateMonitoredItems of `spec.items` items
/// of queue size 1, every result Good, timed from the request's send to its decoded answer;
/// then CloseSession (which deletes them), timed too.
pub fn create_items_once(
    addr: std::net::SocketAddr,
    url: &str,
    sec: Option<Arc<Security>>,
    spec: &CreateSpec,
) -> Result<CreateTiming, String> {
    let timing: Arc<std::sync::Mutex<Option<f64>>> = Arc::default();
    let items = spec.items;
    let work = CreateOnce {
        items,
        n: spec.variables.max(1),
        sampling_ms: spec.sampling_ms,
        publishing_ms: spec.publishing_ms,
        ns: 0,
        sub_id: 0,
        sent: None,
        timing: timing.clone(),
    };
    let mut d = UaDriver::new(url, Box::new(work), 4, sec);
    let s = BlockingSession::open_waiting(addr, &mut d, UaDriver::is_running, spec.timeout)?;
    let create_ms = timing
        .lock()
        .map_err(|_| "timing lock")?
        .ok_or("CreateMonitoredItems: not timed")?;
    let t = Instant::now();
    s.close(&mut d)?;
    let delete_ms = t.elapsed().as_secs_f64() * 1e3;
    match d.close_result() {
        Some(r) if r.is_bad() => Err(format!("CloseSession: {}", status_name(r))),
        _ => Ok(CreateTiming {
            create_ms,
            delete_ms,
            items,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stride_visits_every_variable_once() {
        for n in [1usize, 2, 100, 1000, 7919, 10_000, 999_983 * 2] {
            let s = spread_stride(n);
            if n <= 10_000 {
                let mut seen = vec![false; n];
                let mut i = 0;
                for _ in 0..n {
                    assert!(!seen[i], "n {n}: {i} twice");
                    seen[i] = true;
                    i = (i + s) % n;
                }
            }
            assert!(n == 1 || s > 0, "n {n}");
        }
        // Far apart: more than a cache line of a store's entries between neighbours.
        assert!(spread_stride(1_000_000) > 1000);
    }

    #[test]
    fn requests_spread_and_answers_are_checked() {
        let mut w = SpreadWork::new(NodeService::Read, 100, 3, 2, 5);
        w.ns = Some(2);
        let Request::Read(r) = w.request() else {
            panic!()
        };
        let ids: Vec<String> = r
            .nodes_to_read
            .iter()
            .map(|x| x.node_id.to_string())
            .collect();
        assert_eq!(ids.len(), 3);
        assert_eq!(ids[0], plant_node(2, 5).to_string());
        assert_eq!(
            ids[1],
            plant_node(2, 66).to_string(),
            "stride 61 modulo 100"
        );
        let good = |v: Variant| DataValue::new(v);
        let resp = |vals: Vec<DataValue>| {
            Response::Read(Box::new(ReadResponse {
                results: vals,
                ..Default::default()
            }))
        };
        assert_eq!(
            w.check(&resp(vec![
                good(Variant::Double(0.0)),
                good(Variant::Double(4.0)),
                good(Variant::Double(1.0))
            ])),
            Ok(())
        );
        assert!(w.check(&resp(vec![good(Variant::Double(0.0))])).is_err());
        assert!(w
            .check(&resp(vec![
                good(Variant::Int32(0)),
                good(Variant::Double(0.0)),
                good(Variant::Double(0.0))
            ]))
            .is_err());
        let mut b = SpreadWork::new(NodeService::Browse, 10, 1, 1, 0);
        b.ns = Some(2);
        assert!(matches!(b.request(), Request::Browse(_)));
        let one = |refs: usize| {
            Response::Browse(Box::new(BrowseResponse {
                results: vec![BrowseResult {
                    references: vec![ReferenceDescription::default(); refs],
                    ..Default::default()
                }],
                ..Default::default()
            }))
        };
        assert_eq!(b.check(&one(2)), Ok(()));
        assert!(b.check(&one(1)).unwrap_err().contains("1 references"));
        assert!(b.check(&resp(vec![])).is_err(), "a Read answer to a Browse");
    }
}
