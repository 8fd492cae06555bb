//! A blocking client over `std::net::TcpStream`, for tests and tools: one request at a
//! time on top of core's sans-IO [`ClientConnection`], with the process clocks and an
//! OS-seeded random number generator (this is why it lives here and not in core).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use uaring_core::client::{ClientConfig, ClientConnection, ClientState};
use uaring_core::generated::attribute_ids;
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::{
    ActivateSessionRequest, AnonymousIdentityToken, ApplicationDescription, ApplicationType,
    BrowseDescription, BrowseNextRequest, BrowsePath, BrowsePathResult, BrowseRequest,
    BrowseResult, CloseSessionRequest, CreateSessionRequest, CreateSessionResponse,
    EndpointDescription, GetEndpointsRequest, ReadRequest, ReadValueId, TimestampsToReturn,
    TranslateBrowsePathsToNodeIdsRequest, UserTokenType, WriteRequest, WriteValue,
};
use uaring_core::time::Now;
use uaring_core::transport::{ReverseHelloMessage, MESSAGE_HEADER_LEN};
use uaring_core::types::{
    ByteString, DataValue, DateTime, ExtensionObject, NodeId, StatusCode, UaString,
};

/// Why a blocking call failed.
#[derive(Debug)]
pub enum ClientError {
    /// The socket failed.
    Io(std::io::Error),
    /// The server answered with this status (ERR, ServiceFault or a bad ServiceResult),
    /// or the connection closed with it.
    Status(StatusCode),
    /// No answer within the timeout.
    Timeout,
    /// The URL is not `opc.tcp://host:port[/path]`.
    BadUrl(String),
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::Io(e) => write!(f, "I/O error: {e}"),
            ClientError::Status(s) => write!(f, "{s}"),
            ClientError::Timeout => write!(f, "timed out"),
            ClientError::BadUrl(u) => write!(f, "not an opc.tcp URL: {u}"),
        }
    }
}
impl std::error::Error for ClientError {}
impl From<std::io::Error> for ClientError {
    fn from(e: std::io::Error) -> Self {
        if matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ) {
            ClientError::Timeout
        } else {
            ClientError::Io(e)
        }
    }
}
impl From<StatusCode> for ClientError {
    fn from(s: StatusCode) -> Self {
        ClientError::Status(s)
    }
}

pub type ClientResult<T> = Result<T, ClientError>;

/// The current time for core from the process clocks.
pub fn now() -> Now {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let e = *EPOCH.get_or_init(Instant::now);
    let mono_ns = e.elapsed().as_nanos().min(u64::MAX as u128) as u64;
    let utc = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0);
    Now::new(mono_ns, DateTime::from_unix_nanos(utc))
}

/// Reads one whole UACP message from `stream` and decodes it as a ReverseHello.
pub fn read_reverse_hello(
    mut stream: &TcpStream,
    timeout: Duration,
) -> ClientResult<ReverseHelloMessage> {
    stream.set_read_timeout(Some(timeout))?;
    let mut header = [0u8; MESSAGE_HEADER_LEN];
    stream.read_exact(&mut header)?;
    let size = u32::from_le_bytes([header[4], header[5], header[6], header[7]]) as usize;
    if &header[..4] != b"RHEF" || !(MESSAGE_HEADER_LEN..=2 * 4096 + 16).contains(&size) {
        return Err(ClientError::Status(StatusCode::BadTcpMessageTypeInvalid));
    }
    let mut body = vec![0u8; size - MESSAGE_HEADER_LEN];
    stream.read_exact(&mut body)?;
    Ok(ReverseHelloMessage::decode_body(&body)?)
}

/// `opc.tcp://host:port/path` → `host:port`.
pub fn host_port(url: &str) -> Option<String> {
    let rest = url
        .get(..10)
        .filter(|s| s.eq_ignore_ascii_case("opc.tcp://"))
        .map(|_| &url[10..])?;
    let hp = rest.split('/').next()?;
    if hp.is_empty() {
        return None;
    }
    Some(
        if hp
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
            && !hp.ends_with(']')
        {
            hp.to_owned()
        } else {
            format!("{hp}:4840")
        },
    )
}

/// A connected client with an open secure channel (and, after `create_session` /
/// `activate_session_anonymous`, a session).
pub struct Client {
    stream: TcpStream,
    conn: ClientConnection,
    out: Vec<u8>,
    rbuf: Vec<u8>,
    timeout: Duration,
    endpoint_url: String,
    session: Option<CreateSessionResponse>,
}

impl Client {
    /// Connects, exchanges HEL/ACK and opens a SecurityPolicy None channel.
    pub fn connect(url: &str, timeout: Duration) -> ClientResult<Client> {
        Client::connect_with(ClientConfig::new(url), timeout)
    }

    pub fn connect_with(config: ClientConfig, timeout: Duration) -> ClientResult<Client> {
        let url = config.endpoint_url.clone();
        let hp = host_port(&url).ok_or_else(|| ClientError::BadUrl(url.clone()))?;
        let addr = hp
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| ClientError::BadUrl(url.clone()))?;
        let stream = TcpStream::connect_timeout(&addr, timeout)?;
        Client::over(stream, config, timeout)
    }

    /// Reverse Connect (Part 6 §7.1.3), the client's side: accepts the next connection a
    /// server dials to `listener`, reads its ReverseHello (the first message; anything else is
    /// `Status(BadTcpMessageTypeInvalid)`), then says Hello with the ReverseHello's
    /// EndpointUrl and opens a SecurityPolicy None channel on that socket, as
    /// [`Client::connect`] does on one it dialed itself. Returns the ReverseHello too.
    pub fn accept_reverse(
        listener: &TcpListener,
        timeout: Duration,
    ) -> ClientResult<(Client, ReverseHelloMessage)> {
        Client::accept_reverse_with(listener, timeout, ClientConfig::new)
    }

    /// [`Client::accept_reverse`] with the channel's configuration made by `config` from the
    /// ReverseHello's EndpointUrl (a secured policy, say).
    pub fn accept_reverse_with(
        listener: &TcpListener,
        timeout: Duration,
        config: impl FnOnce(&str) -> ClientConfig,
    ) -> ClientResult<(Client, ReverseHelloMessage)> {
        let (stream, _) = listener.accept()?;
        let rhe = read_reverse_hello(&stream, timeout)?;
        let c = Client::over(stream, config(rhe.endpoint_url.as_str()), timeout)?;
        Ok((c, rhe))
    }

    /// Hello and a secure channel on an already connected socket.
    fn over(stream: TcpStream, config: ClientConfig, timeout: Duration) -> ClientResult<Client> {
        stream.set_nodelay(true)?;
        let url = config.endpoint_url.clone();
        let mut c = Client {
            stream,
            conn: ClientConnection::new(config, Box::new(uaring::random::os_seeded()?)),
            out: Vec::with_capacity(8192),
            rbuf: vec![0u8; 65536],
            timeout,
            endpoint_url: url,
            session: None,
        };
        c.conn.start(now(), &mut c.out);
        c.flush()?;
        let deadline = Instant::now() + timeout;
        while !c.conn.is_open() {
            c.pump(deadline)?;
        }
        Ok(c)
    }

    /// The sans-IO connection underneath.
    pub fn connection(&mut self) -> &mut ClientConnection {
        &mut self.conn
    }

    pub fn endpoint_url(&self) -> &str {
        &self.endpoint_url
    }

    fn flush(&mut self) -> ClientResult<()> {
        if !self.out.is_empty() {
            self.stream.write_all(&self.out)?;
            self.out.clear();
        }
        Ok(())
    }

    /// Reads once (until `deadline`) and feeds the connection.
    fn pump(&mut self, deadline: Instant) -> ClientResult<()> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ClientError::Timeout);
        }
        self.stream.set_read_timeout(Some(left))?;
        let n = self.stream.read(&mut self.rbuf)?;
        if n == 0 {
            return Err(match self.conn.state() {
                ClientState::Closed(s) => ClientError::Status(s),
                _ => ClientError::Status(StatusCode::BadConnectionClosed),
            });
        }
        let r = self.conn.on_recv(now(), &self.rbuf[..n], &mut self.out);
        self.flush()?;
        r.map_err(ClientError::Status)
    }

    /// Sends one request and waits for its response. A ServiceFault is
    /// `Err(Status(service_result))`.
    pub fn call(&mut self, req: Request) -> ClientResult<Response> {
        let t = now();
        self.conn.on_timer(t, &mut self.out)?;
        let id = self.conn.send_request(req, t, &mut self.out)?;
        self.flush()?;
        let deadline = Instant::now() + self.timeout;
        loop {
            while let Some((rid, resp)) = self.conn.poll_response() {
                if rid == id {
                    if let Response::ServiceFault(f) = &resp {
                        return Err(ClientError::Status(f.response_header.service_result));
                    }
                    return Ok(resp);
                }
            }
            self.pump(deadline)?;
        }
    }

    fn check(resp: &Response) -> ClientResult<()> {
        let s = resp.response_header().service_result;
        if s.is_bad() {
            return Err(ClientError::Status(s));
        }
        Ok(())
    }

    /// GetEndpoints for this connection's URL.
    pub fn get_endpoints(&mut self) -> ClientResult<Vec<EndpointDescription>> {
        let req = GetEndpointsRequest {
            endpoint_url: self.endpoint_url.as_str().into(),
            ..Default::default()
        };
        match self.call(Request::GetEndpoints(Box::new(req)))? {
            Response::GetEndpoints(r) => {
                Self::check(&Response::GetEndpoints(r.clone()))?;
                Ok(r.endpoints)
            }
            _ => Err(ClientError::Status(StatusCode::BadUnknownResponse)),
        }
    }

    /// CreateSession; the authentication token is used for every later request.
    pub fn create_session(&mut self) -> ClientResult<&CreateSessionResponse> {
        let req = CreateSessionRequest {
            client_description: ApplicationDescription {
                application_uri: "urn:uaring:client".into(),
                product_uri: "urn:uaring".into(),
                application_name: uaring_core::types::LocalizedText::text("uaring client"),
                application_type: ApplicationType::Client,
                ..Default::default()
            },
            endpoint_url: self.endpoint_url.as_str().into(),
            session_name: "uaring".into(),
            client_nonce: ByteString::from(uaring_core::random::bytes(self.conn.random(), 32)),
            requested_session_timeout: 60_000.0,
            max_response_message_size: 0,
            ..Default::default()
        };
        match self.call(Request::CreateSession(Box::new(req)))? {
            Response::CreateSession(r) => {
                if r.response_header.service_result.is_bad() {
                    return Err(ClientError::Status(r.response_header.service_result));
                }
                self.conn
                    .set_authentication_token(r.authentication_token.clone());
                Ok(&*self.session.insert(*r))
            }
            _ => Err(ClientError::Status(StatusCode::BadUnknownResponse)),
        }
    }

    /// ActivateSession with an AnonymousIdentityToken (the policy id announced by the
    /// server's endpoint, else "anonymous"). Creates the session first if needed.
    pub fn activate_session_anonymous(&mut self) -> ClientResult<()> {
        if self.session.is_none() {
            self.create_session()?;
        }
        let policy_id = self
            .session
            .as_ref()
            .and_then(|s| {
                s.server_endpoints
                    .iter()
                    .flat_map(|e| e.user_identity_tokens.iter())
                    .find(|p| p.token_type == UserTokenType::Anonymous)
            })
            .map(|p| p.policy_id.clone())
            .unwrap_or_else(|| UaString::from("anonymous"));
        let token = AnonymousIdentityToken { policy_id };
        let req = ActivateSessionRequest {
            user_identity_token: ExtensionObject::from_struct(&token),
            locale_ids: vec!["en".into()],
            ..Default::default()
        };
        let resp = self.call(Request::ActivateSession(Box::new(req)))?;
        Self::check(&resp)
    }

    /// Read any attributes.
    pub fn read(&mut self, nodes: &[ReadValueId]) -> ClientResult<Vec<DataValue>> {
        let req = ReadRequest {
            max_age: 0.0,
            timestamps_to_return: TimestampsToReturn::Both,
            nodes_to_read: nodes.to_vec(),
            ..Default::default()
        };
        match self.call(Request::Read(Box::new(req)))? {
            Response::Read(r) if r.response_header.service_result.is_good() => Ok(r.results),
            r => Err(ClientError::Status(Self::bad_or_unknown(&r))),
        }
    }

    /// Read the Value attribute of each node.
    pub fn read_values(&mut self, nodes: &[NodeId]) -> ClientResult<Vec<DataValue>> {
        let ids: Vec<ReadValueId> = nodes
            .iter()
            .map(|n| ReadValueId {
                node_id: n.clone(),
                attribute_id: attribute_ids::Value,
                ..Default::default()
            })
            .collect();
        self.read(&ids)
    }

    pub fn write(&mut self, values: &[WriteValue]) -> ClientResult<Vec<StatusCode>> {
        let req = WriteRequest {
            nodes_to_write: values.to_vec(),
            ..Default::default()
        };
        match self.call(Request::Write(Box::new(req)))? {
            Response::Write(r) if r.response_header.service_result.is_good() => Ok(r.results),
            r => Err(ClientError::Status(Self::bad_or_unknown(&r))),
        }
    }

    pub fn browse(&mut self, nodes: &[BrowseDescription]) -> ClientResult<Vec<BrowseResult>> {
        let req = BrowseRequest {
            nodes_to_browse: nodes.to_vec(),
            ..Default::default()
        };
        match self.call(Request::Browse(Box::new(req)))? {
            Response::Browse(r) if r.response_header.service_result.is_good() => Ok(r.results),
            r => Err(ClientError::Status(Self::bad_or_unknown(&r))),
        }
    }

    pub fn browse_next(
        &mut self,
        release: bool,
        continuation_points: &[ByteString],
    ) -> ClientResult<Vec<BrowseResult>> {
        let req = BrowseNextRequest {
            release_continuation_points: release,
            continuation_points: continuation_points.to_vec(),
            ..Default::default()
        };
        match self.call(Request::BrowseNext(Box::new(req)))? {
            Response::BrowseNext(r) if r.response_header.service_result.is_good() => Ok(r.results),
            r => Err(ClientError::Status(Self::bad_or_unknown(&r))),
        }
    }

    pub fn translate(&mut self, paths: &[BrowsePath]) -> ClientResult<Vec<BrowsePathResult>> {
        let req = TranslateBrowsePathsToNodeIdsRequest {
            browse_paths: paths.to_vec(),
            ..Default::default()
        };
        match self.call(Request::TranslateBrowsePathsToNodeIds(Box::new(req)))? {
            Response::TranslateBrowsePathsToNodeIds(r)
                if r.response_header.service_result.is_good() =>
            {
                Ok(r.results)
            }
            r => Err(ClientError::Status(Self::bad_or_unknown(&r))),
        }
    }

    fn bad_or_unknown(r: &Response) -> StatusCode {
        let s = r.response_header().service_result;
        if s.is_bad() {
            s
        } else {
            StatusCode::BadUnknownResponse
        }
    }

    /// CloseSession (when a session exists), then CloseSecureChannel, then the socket.
    pub fn close(mut self) -> ClientResult<()> {
        let mut result = Ok(());
        if self.session.take().is_some() {
            let req = CloseSessionRequest {
                delete_subscriptions: true,
                ..Default::default()
            };
            result = self.call(Request::CloseSession(Box::new(req))).map(|_| ());
        }
        self.conn.close(now(), &mut self.out);
        let _ = self.flush();
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
        result
    }
}
