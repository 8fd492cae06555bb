//! `[gateway]` and `[[gateway.servers]]`: the servers the gateway mirrors and its bounds
//! (docs/Gateway.md, docs/Configuration.md, docs/Limits.md).

use serde::{Deserialize, Serialize};

/// Most `[[gateway.servers]]` entries.
pub const SERVERS_MAX: usize = 64;
/// Most nodes the gateway mirrors in all (every server's nodes and the types they need).
pub const NODES_MAX: u32 = 4_000_000;
/// Most monitored items the gateway keeps on the servers it mirrors, in all.
pub const ITEMS_MAX: u32 = 4_000_000;
/// The longest demand and forwarding queues.
pub const QUEUE_MAX: u32 = 1 << 20;
/// The longest server name (it is a BrowseName and part of NodeIds and namespace URIs).
pub const NAME_LEN_MAX: usize = 64;

/// `[gateway]`: the bounds of the whole gateway, and its servers.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct GatewayConfig {
    /// Nodes mirrored in all, over every server (1 to 4,000,000). The address space keeps
    /// room for them (`operation_limits.max_run_time_nodes` is raised to it when smaller).
    pub max_nodes: u32,
    /// Monitored items on the mirrored servers in all (1 to 4,000,000): one per mirrored
    /// Variable someone monitors here, however many items monitor it.
    pub max_items: u32,
    /// Demand signals (the shards telling the gateway that items on a mirrored Variable
    /// came, changed or went) waiting for the gateway thread (16 to 1,048,576). A shard whose
    /// signal finds it full offers it again 10 ms later.
    pub demand_queue: u32,
    /// Reads, Writes and Calls forwarded to the mirrored servers and not yet sent (16 to
    /// 1,048,576); one more is answered BadResourceUnavailable at once.
    pub forward_queue: u32,
    /// Operations per Browse, Read, CreateMonitoredItems, … request to a mirrored server
    /// (1 to 10,000); a server that announces a smaller MaxNodesPer… gets that.
    pub operations_per_request: u32,
    /// How long a request to a mirrored server may take, ms (100 to 600,000): past it the
    /// connection is taken for broken (closed, and dialed again).
    pub request_timeout_ms: u32,
    /// The servers.
    pub servers: Vec<ServerConfig>,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            max_nodes: 200_000,
            max_items: 200_000,
            demand_queue: 65_536,
            forward_queue: 4_096,
            operations_per_request: 1_000,
            request_timeout_ms: 10_000,
            servers: Vec::new(),
        }
    }
}

/// What a mirrored Variable's value becomes while its server is away.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum WhileAway {
    /// No value, status BadNotConnected (the default).
    #[default]
    BadNotConnected,
    /// The last value with status UncertainLastUsableValue.
    UncertainLastUsableValue,
}

/// What a forwarded Write, Call, HistoryRead or HistoryUpdate of a caller no `identities` entry matches
/// runs as.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Unmapped {
    /// The server entry's own identity (`user`), the one the gateway's main session logs in
    /// as (the default).
    #[default]
    GatewayUser,
    /// Refused here with BadUserAccessDenied; nothing is sent to the server.
    Refuse,
}

/// One `[[gateway.servers.identities]]` entry: the callers it matches (a user name here, or
/// a role here) and the identity their forwarded Writes, Calls, HistoryReads and HistoryUpdates run as on
/// the server (docs/Gateway.md "Identity mapping").
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct IdentityMap {
    /// The caller's user name here (a UserName token's name, an X.509 user's CN).
    pub upstream_user: String,
    /// A role of the caller here (a well-known role name: Anonymous, AuthenticatedUser,
    /// Observer, Operator, Engineer, Supervisor, ConfigureAdmin, SecurityAdmin). Exactly one
    /// of `upstream_user` and `upstream_role`.
    pub upstream_role: String,
    /// The user on the server; empty: anonymous.
    pub user: String,
    /// Its password (with `user`); `password_file` reads it from a file instead.
    pub password: String,
    /// A file whose first line is the password; read at load (a missing file is an error)
    /// and again at each login.
    pub password_file: String,
}

impl IdentityMap {
    /// Does it match a caller of user name `user` (empty: anonymous) and `roles`?
    pub fn matches(&self, user: &str, roles: uaring_core::roles::Roles) -> bool {
        if !self.upstream_user.is_empty() {
            return !user.is_empty() && self.upstream_user == user;
        }
        uaring_core::roles::WellKnownRole::from_name(&self.upstream_role)
            .is_some_and(|r| roles.contains(r))
    }

    /// The password: `password`, or the first line of `password_file`.
    pub fn password(&self) -> Result<String, String> {
        password_of(&self.password, &self.password_file)
    }

    /// What the logs name it by.
    pub fn describe(&self) -> String {
        let from = if self.upstream_user.is_empty() {
            format!("role {}", self.upstream_role)
        } else {
            format!("user {}", self.upstream_user)
        };
        let to = if self.user.is_empty() {
            "anonymous".to_string()
        } else {
            format!("user {}", self.user)
        };
        format!("{from} as {to}")
    }
}

fn password_of(password: &str, file: &str) -> Result<String, String> {
    if file.is_empty() {
        return Ok(password.to_string());
    }
    let text = std::fs::read_to_string(file).map_err(|e| format!("password_file {file:?}: {e}"))?;
    Ok(text.lines().next().unwrap_or_default().to_string())
}

/// Most `identities` entries of one server.
pub const IDENTITIES_MAX: usize = 256;
/// Most sessions per server for mapped identities.
pub const IDENTITY_SESSIONS_MAX: u32 = 64;

/// One `[[gateway.servers]]` entry.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Its name (required, unique): the folder `Objects/<name>` that holds its nodes, and
    /// part of its NodeIds and namespace URIs. Letters, digits, `_`, `-` and `.`, at most 64.
    pub name: String,
    /// `opc.tcp://HOST:PORT[/path]` (required).
    pub endpoint: String,
    /// The SecurityPolicy of the channel: `None`, `Basic256Sha256`, `Aes128_Sha256_RsaOaep`
    /// or `Aes256_Sha256_RsaPss`.
    pub security_policy: String,
    /// `None`, `Sign` or `SignAndEncrypt` (`None` exactly with the None policy).
    pub security_mode: String,
    /// The user the gateway's main session logs in as; empty: anonymous. Reads,
    /// subscriptions and browsing run as this user; forwarded Writes, Calls and
    /// HistoryReads too, unless an `identities` entry matches the caller (docs/Gateway.md).
    pub user: String,
    /// The user's password (with `user`); `password_file` reads it from a file instead.
    pub password: String,
    /// A file whose first line is the password (kept out of the configuration file).
    pub password_file: String,
    /// With a secured policy: the server's certificate (DER or PEM) the gateway trusts; the
    /// one the server presents must be this one.
    pub server_certificate: String,
    /// What to mirror: NodeIds of the server (`ns=2;s=Line1`, `nsu=urn:plc;i=5`) or browse
    /// paths from its Objects folder (`/Line1/Drive`, a segment `2:Drive` names the
    /// namespace too). Empty: everything under its Objects folder (its Server object aside).
    pub mirror: Vec<String>,
    /// Variables kept monitored on the server from the start, whatever the demand here
    /// (docs/Gateway.md "Always monitored"): NodeIds (`ns=2;s=Line1.Temp`,
    /// `nsu=urn:plc;s=Temp`) or browse paths from its Objects folder with each segment's
    /// namespace index (`/2:Line1/2:Temp`). They must be mirrored Variables.
    pub monitor: Vec<String>,
    /// The sampling interval of those items on the server, ms (0: the server's fastest).
    pub monitor_sampling_interval_ms: u32,
    /// Most nodes mirrored of this server (1 to `gateway.max_nodes`); past it the mirror
    /// stops there and says so in its status.
    pub max_nodes: u32,
    /// Browse the server again this often, ms (0: only when it raises a model change event).
    pub refresh_interval_ms: u64,
    /// Forward clients' Writes of mirrored Variables (else the mirror is read-only).
    pub writes: bool,
    /// Forward clients' Calls of mirrored Methods (else they are not executable here).
    pub calls: bool,
    /// Pass the server's events on (raised here with the mirrored source), and watch them
    /// for model changes.
    pub events: bool,
    /// Forward clients' HistoryRead (raw, modified, at-time, processed) of mirrored
    /// Variables whose history the server keeps (HistoryRead in its AccessLevel and in the
    /// gateway user's UserAccessLevel), and event reads of mirrored notifiers whose events
    /// it keeps (HistoryRead in their EventNotifier); else neither shows HistoryRead here.
    pub history: bool,
    /// With `history`, also forward clients' HistoryUpdate (UpdateDataDetails,
    /// DeleteRawModifiedDetails, DeleteAtTimeDetails of mirrored Variables whose
    /// AccessLevel there has HistoryWrite for the gateway's user; UpdateEventDetails and
    /// DeleteEventDetails of mirrored notifiers whose EventNotifier there has HistoryWrite):
    /// they then show HistoryWrite here. Off by default: an update changes the plant's
    /// record on the server, so a gateway offers it only when asked to.
    pub history_updates: bool,
    /// The mirrored Variables' values while the server is away.
    pub while_away: WhileAway,
    /// The publishing interval of the gateway's subscription on the server, ms.
    pub publishing_interval_ms: u32,
    /// The session timeout asked of the server, ms.
    pub session_timeout_ms: u32,
    /// Bound of one connect attempt (name resolution and TCP handshake), ms.
    pub connect_timeout_ms: u64,
    /// Back-off after a failed or lost connection: first wait, ms, doubling up to
    /// `reconnect_max_ms`.
    pub reconnect_min_ms: u64,
    pub reconnect_max_ms: u64,
    /// Callers here mapped to identities on the server, first match wins
    /// (`[[gateway.servers.identities]]`).
    pub identities: Vec<IdentityMap>,
    /// What a caller no entry matches gets: `gateway_user` (runs as `user`) or `refuse`
    /// (BadUserAccessDenied).
    pub unmapped: Unmapped,
    /// Most sessions open at once on the server for mapped identities (1 to 64), besides the
    /// main one; one more identity in use takes the place of the one unused longest, or is
    /// answered BadResourceUnavailable when all are busy.
    pub max_identity_sessions: u32,
    /// A mapped identity's session unused this long is closed, ms (1,000 to 1,800,000; at
    /// most half the session timeout the server granted).
    pub identity_idle_ms: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            name: String::new(),
            endpoint: String::new(),
            security_policy: "None".into(),
            security_mode: "None".into(),
            user: String::new(),
            password: String::new(),
            password_file: String::new(),
            server_certificate: String::new(),
            mirror: Vec::new(),
            monitor: Vec::new(),
            monitor_sampling_interval_ms: 1_000,
            max_nodes: 100_000,
            refresh_interval_ms: 0,
            writes: true,
            calls: true,
            events: true,
            history: true,
            history_updates: false,
            while_away: WhileAway::BadNotConnected,
            publishing_interval_ms: 100,
            session_timeout_ms: 60_000,
            connect_timeout_ms: 5_000,
            reconnect_min_ms: 500,
            reconnect_max_ms: 30_000,
            identities: Vec::new(),
            unmapped: Unmapped::GatewayUser,
            max_identity_sessions: 8,
            identity_idle_ms: 30_000,
        }
    }
}

/// The security policies a mirrored server's channel may use.
pub const POLICIES: [&str; 4] = [
    "None",
    "Basic256Sha256",
    "Aes128_Sha256_RsaOaep",
    "Aes256_Sha256_RsaPss",
];

impl ServerConfig {
    /// A server mirrored whole with the defaults (`uaring serve --gateway URL`): named after
    /// its host and port.
    pub fn quick(endpoint: &str) -> ServerConfig {
        let name = crate::reverse::parse_client_url(endpoint)
            .map(|(h, p)| format!("{h}_{p}"))
            .unwrap_or_else(|_| "server".into())
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        ServerConfig {
            name,
            endpoint: endpoint.to_string(),
            ..Default::default()
        }
    }

    /// Checks the entry against the gateway's bounds; `Err` names the key.
    pub fn validate(&self, gw: &GatewayConfig) -> Result<(), String> {
        let at = |k: &str| format!("gateway.servers {:?}: {k}", self.name);
        if self.name.is_empty() {
            return Err("[[gateway.servers]]: name is required".into());
        }
        if self.name.len() > NAME_LEN_MAX
            || !self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        {
            return Err(format!(
                "{}: letters, digits, '_', '-' and '.', at most {NAME_LEN_MAX}",
                at("name")
            ));
        }
        if self.endpoint.is_empty() {
            return Err(format!(
                "{}: required (opc.tcp://HOST:PORT)",
                at("endpoint")
            ));
        }
        crate::reverse::parse_client_url(&self.endpoint)
            .map_err(|e| format!("{}: {e}", at("endpoint")))?;
        if !POLICIES.contains(&self.security_policy.as_str()) {
            return Err(format!(
                "{} = {:?}: one of {}",
                at("security_policy"),
                self.security_policy,
                POLICIES.join(", ")
            ));
        }
        match (self.security_policy.as_str(), self.security_mode.as_str()) {
            ("None", "None") => {}
            ("None", m) => {
                return Err(format!(
                    "{} = {m:?}: the None policy has mode None",
                    at("security_mode")
                ))
            }
            (_, "Sign" | "SignAndEncrypt") => {
                if self.server_certificate.is_empty() {
                    return Err(format!(
                        "{}: required with security_policy {:?} (the certificate the server must present)",
                        at("server_certificate"),
                        self.security_policy
                    ));
                }
            }
            (_, m) => {
                return Err(format!(
                    "{} = {m:?}: Sign or SignAndEncrypt with security_policy {:?}",
                    at("security_mode"),
                    self.security_policy
                ))
            }
        }
        if self.user.is_empty() && !(self.password.is_empty() && self.password_file.is_empty()) {
            return Err(format!("{}: a password without a user", at("password")));
        }
        if !self.password.is_empty() && !self.password_file.is_empty() {
            return Err(format!(
                "{}: give password or password_file, not both",
                at("password_file")
            ));
        }
        for m in &self.mirror {
            parse_root(m).map_err(|e| format!("{} {m:?}: {e}", at("mirror")))?;
        }
        if self.mirror.len() > 1024 {
            return Err(format!("{}: at most 1024 entries", at("mirror")));
        }
        for m in &self.monitor {
            match parse_root(m).map_err(|e| format!("{} {m:?}: {e}", at("monitor")))? {
                Root::Path(p) if p.iter().any(|(ns, _)| ns.is_none()) => {
                    return Err(format!(
                        "{} {m:?}: name each segment's namespace index (/2:Line1/2:Temp)",
                        at("monitor")
                    ))
                }
                _ => {}
            }
        }
        if self.monitor.len() > 10_000 {
            return Err(format!("{}: at most 10000 entries", at("monitor")));
        }
        if self.monitor_sampling_interval_ms > 3_600_000 {
            return Err(format!(
                "{}: 0 to 3600000",
                at("monitor_sampling_interval_ms")
            ));
        }
        if !(1..=gw.max_nodes).contains(&self.max_nodes) {
            return Err(format!(
                "{}: 1 to gateway.max_nodes ({})",
                at("max_nodes"),
                gw.max_nodes
            ));
        }
        if self.refresh_interval_ms != 0
            && !(1_000..=86_400_000).contains(&self.refresh_interval_ms)
        {
            return Err(format!(
                "{}: 0 (model change events only) or 1000 to 86400000",
                at("refresh_interval_ms")
            ));
        }
        if !(10..=3_600_000).contains(&self.publishing_interval_ms) {
            return Err(format!("{}: 10 to 3600000", at("publishing_interval_ms")));
        }
        if !(10_000..=3_600_000).contains(&self.session_timeout_ms) {
            return Err(format!("{}: 10000 to 3600000", at("session_timeout_ms")));
        }
        if !(10..=120_000).contains(&self.connect_timeout_ms) {
            return Err(format!("{}: 10 to 120000", at("connect_timeout_ms")));
        }
        if !(10..=3_600_000).contains(&self.reconnect_min_ms)
            || !(self.reconnect_min_ms..=3_600_000).contains(&self.reconnect_max_ms)
        {
            return Err(format!(
                "{}: reconnect_min_ms 10 to 3600000, reconnect_max_ms reconnect_min_ms to 3600000",
                at("reconnect_min_ms")
            ));
        }
        if self.identities.len() > IDENTITIES_MAX {
            return Err(format!(
                "{}: at most {IDENTITIES_MAX} entries",
                at("identities")
            ));
        }
        for (i, m) in self.identities.iter().enumerate() {
            let at = |k: &str| at(&format!("identities[{i}].{k}"));
            match (m.upstream_user.is_empty(), m.upstream_role.is_empty()) {
                (true, true) | (false, false) => {
                    return Err(format!(
                        "{}: give exactly one of upstream_user and upstream_role",
                        at("upstream_user")
                    ))
                }
                (true, false) => {
                    if uaring_core::roles::WellKnownRole::from_name(&m.upstream_role).is_none() {
                        return Err(format!(
                            "{} = {:?}: not a role (one of {})",
                            at("upstream_role"),
                            m.upstream_role,
                            uaring_core::roles::WellKnownRole::ALL
                                .iter()
                                .map(|r| r.name())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ));
                    }
                }
                (false, true) => {}
            }
            if m.user.is_empty() && !(m.password.is_empty() && m.password_file.is_empty()) {
                return Err(format!("{}: a password without a user", at("password")));
            }
            if !m.password.is_empty() && !m.password_file.is_empty() {
                return Err(format!(
                    "{}: give password or password_file, not both",
                    at("password_file")
                ));
            }
            if !m.password_file.is_empty() {
                m.password()
                    .map_err(|e| format!("{}: {e}", at("password_file")))?;
            }
        }
        if !(1..=IDENTITY_SESSIONS_MAX).contains(&self.max_identity_sessions) {
            return Err(format!(
                "{}: 1 to {IDENTITY_SESSIONS_MAX}",
                at("max_identity_sessions")
            ));
        }
        if !(1_000..=1_800_000).contains(&self.identity_idle_ms) {
            return Err(format!("{}: 1000 to 1800000", at("identity_idle_ms")));
        }
        Ok(())
    }

    /// The identity a forwarded operation of a caller (user name, empty when anonymous;
    /// roles) runs as on the server: `Ok(Some(i))` the `identities` entry `i` (the first
    /// that matches), `Ok(None)` the server entry's own user, `Err` refused here
    /// (BadUserAccessDenied, `unmapped = "refuse"`).
    pub fn identity_for(
        &self,
        user: &str,
        roles: uaring_core::roles::Roles,
    ) -> Result<Option<usize>, uaring_core::StatusCode> {
        match self.identities.iter().position(|m| m.matches(user, roles)) {
            Some(i) => Ok(Some(i)),
            None if self.unmapped == Unmapped::Refuse => {
                Err(uaring_core::StatusCode::BadUserAccessDenied)
            }
            None => Ok(None),
        }
    }

    /// The password: `password`, or the first line of `password_file`.
    pub fn password(&self) -> Result<String, String> {
        password_of(&self.password, &self.password_file)
            .map_err(|e| format!("gateway.servers {:?}: {e}", self.name))
    }

    /// The Variables to keep monitored.
    pub fn monitored(&self) -> Vec<Root> {
        self.monitor
            .iter()
            .filter_map(|m| parse_root(m).ok())
            .collect()
    }

    /// The configured roots to mirror.
    pub fn roots(&self) -> Vec<Root> {
        self.mirror
            .iter()
            .filter_map(|m| parse_root(m).ok())
            .collect()
    }
}

/// A root of what a server's mirror holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Root {
    /// A NodeId with the server's namespace index.
    Id(uaring_core::NodeId),
    /// A NodeId in the namespace with this URI.
    UriId(String, uaring_core::NodeId),
    /// Browse names from the Objects folder: (namespace index, if given; name).
    Path(Vec<(Option<u16>, String)>),
}

/// Parses one `mirror` entry.
pub fn parse_root(s: &str) -> Result<Root, String> {
    if let Some(path) = s.strip_prefix('/') {
        let mut segments = Vec::new();
        for seg in path.split('/') {
            if seg.is_empty() {
                return Err("an empty browse path segment".into());
            }
            let seg = match seg.split_once(':') {
                Some((ns, name)) if !ns.is_empty() && ns.bytes().all(|b| b.is_ascii_digit()) => {
                    let ns = ns
                        .parse::<u16>()
                        .map_err(|_| format!("namespace index {ns:?} out of range"))?;
                    (Some(ns), name.to_string())
                }
                _ => (None, seg.to_string()),
            };
            segments.push(seg);
        }
        if segments.len() > 32 {
            return Err("at most 32 browse path segments".into());
        }
        return Ok(Root::Path(segments));
    }
    if let Some(rest) = s.strip_prefix("nsu=") {
        let (uri, id) = rest
            .split_once(';')
            .ok_or("nsu=URI;… needs an identifier after ';'")?;
        let id = uaring_core::NodeId::parse(id).ok_or("not an identifier (i=, s=, g=, b=)")?;
        if uri.is_empty() {
            return Err("an empty namespace URI".into());
        }
        return Ok(Root::UriId(uri.to_string(), id));
    }
    uaring_core::NodeId::parse(s).map(Root::Id).ok_or_else(|| {
        "neither a NodeId (ns=2;s=Line1, nsu=URI;i=5) nor a browse path (/Line1/Drive)".into()
    })
}

impl GatewayConfig {
    /// Checks the bounds and every server; `Err` names the key.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=NODES_MAX).contains(&self.max_nodes) {
            return Err(format!("gateway.max_nodes: 1 to {NODES_MAX}"));
        }
        if !(1..=ITEMS_MAX).contains(&self.max_items) {
            return Err(format!("gateway.max_items: 1 to {ITEMS_MAX}"));
        }
        for (k, v) in [
            ("demand_queue", self.demand_queue),
            ("forward_queue", self.forward_queue),
        ] {
            if !(16..=QUEUE_MAX).contains(&v) {
                return Err(format!("gateway.{k}: 16 to {QUEUE_MAX}"));
            }
        }
        if !(1..=10_000).contains(&self.operations_per_request) {
            return Err("gateway.operations_per_request: 1 to 10000".into());
        }
        if !(100..=600_000).contains(&self.request_timeout_ms) {
            return Err("gateway.request_timeout_ms: 100 to 600000".into());
        }
        if self.servers.len() > SERVERS_MAX {
            return Err(format!(
                "[[gateway.servers]]: {} entries, at most {SERVERS_MAX}",
                self.servers.len()
            ));
        }
        for (i, s) in self.servers.iter().enumerate() {
            s.validate(self)?;
            if self.servers[..i].iter().any(|o| o.name == s.name) {
                return Err(format!(
                    "[[gateway.servers]]: the name {:?} is used twice",
                    s.name
                ));
            }
        }
        Ok(())
    }

    /// Is anything mirrored?
    pub fn is_on(&self) -> bool {
        !self.servers.is_empty()
    }
}

/// Takes `[gateway]` out of the file's table (defaults when absent) and checks it.
pub fn take_config(table: &mut toml::Table) -> Result<GatewayConfig, String> {
    let c = match table.remove("gateway") {
        Some(v) => v
            .try_into::<GatewayConfig>()
            .map_err(|e| format!("[gateway]: {e}"))?,
        None => GatewayConfig::default(),
    };
    c.validate()?;
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<GatewayConfig, String> {
        let mut t: toml::Table = text.parse().map_err(|e: toml::de::Error| e.to_string())?;
        take_config(&mut t)
    }

    #[test]
    fn servers_parse_with_their_defaults_and_are_checked() {
        let c = parse(
            "[gateway]\nmax_items = 5000\n[[gateway.servers]]\nname = \"plc1\"\nendpoint = \"opc.tcp://10.0.0.7:4840\"\n\
             mirror = [\"ns=2;s=Line1\", \"/Line2/2:Drive\", \"nsu=urn:plc;i=5\"]\n",
        )
        .unwrap();
        assert_eq!(c.max_items, 5000);
        let s = &c.servers[0];
        assert_eq!(s.security_policy, "None");
        assert!(s.writes && s.calls && s.events && s.history && !s.history_updates);
        assert!(s.monitor.is_empty());
        assert_eq!(
            s.roots(),
            vec![
                Root::Id(uaring_core::NodeId::string(2, "Line1")),
                Root::Path(vec![(None, "Line2".into()), (Some(2), "Drive".into())]),
                Root::UriId("urn:plc".into(), uaring_core::NodeId::numeric(0, 5)),
            ]
        );
        for (bad, says) in [
            ("name = \"a b\"\nendpoint = \"opc.tcp://h:1\"", "name"),
            ("name = \"a\"", "endpoint"),
            ("name = \"a\"\nendpoint = \"opc.tcp://h\"", "port"),
            (
                "name = \"a\"\nendpoint = \"opc.tcp://h:1\"\nsecurity_policy = \"Basic128Rsa15\"",
                "security_policy",
            ),
            (
                "name = \"a\"\nendpoint = \"opc.tcp://h:1\"\nsecurity_policy = \"Basic256Sha256\"\nsecurity_mode = \"Sign\"",
                "server_certificate",
            ),
            (
                "name = \"a\"\nendpoint = \"opc.tcp://h:1\"\nsecurity_mode = \"Sign\"",
                "security_mode",
            ),
            (
                "name = \"a\"\nendpoint = \"opc.tcp://h:1\"\npassword = \"x\"",
                "without a user",
            ),
            ("name = \"a\"\nendpoint = \"opc.tcp://h:1\"\nmirror = [\"q=1\"]", "mirror"),
            ("name = \"a\"\nendpoint = \"opc.tcp://h:1\"\nmax_nodes = 0", "max_nodes"),
            (
                "name = \"a\"\nendpoint = \"opc.tcp://h:1\"\nmonitor = [\"/Line1/2:Temp\"]",
                "each segment's namespace",
            ),
            (
                "name = \"a\"\nendpoint = \"opc.tcp://h:1\"\nmonitor_sampling_interval_ms = 4000000",
                "monitor_sampling_interval_ms",
            ),
            (
                "name = \"a\"\nendpoint = \"opc.tcp://h:1\"\nrefresh_interval_ms = 5",
                "refresh_interval_ms",
            ),
            (
                "name = \"a\"\nendpoint = \"opc.tcp://h:1\"\nreconnect_max_ms = 1",
                "reconnect_min_ms",
            ),
            ("name = \"a\"\nendpoint = \"opc.tcp://h:1\"\nbogus = 1", "unknown field"),
        ] {
            let e = parse(&format!("[[gateway.servers]]\n{bad}\n")).unwrap_err();
            assert!(e.contains(says), "{bad}: {says:?} in {e}");
        }
        let e = parse(
            "[[gateway.servers]]\nname = \"a\"\nendpoint = \"opc.tcp://h:1\"\n\
             [[gateway.servers]]\nname = \"a\"\nendpoint = \"opc.tcp://h:2\"\n",
        )
        .unwrap_err();
        assert!(e.contains("used twice"), "{e}");
        assert!(parse("[gateway]\nmax_nodes = 0\n").is_err());
        assert!(parse("[gateway]\ndemand_queue = 1\n").is_err());
        assert!(!parse("").unwrap().is_on());
    }

    #[test]
    fn identities_are_checked_and_the_first_match_wins() {
        use uaring_core::roles::{Roles, WellKnownRole};
        let dir = std::env::temp_dir().join(format!("uaring-gwid-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pw = dir.join("op.pw");
        std::fs::write(&pw, "secret\nignored\n").unwrap();
        let head = "[[gateway.servers]]\nname = \"a\"\nendpoint = \"opc.tcp://h:1\"\n";
        let c = parse(&format!(
            "{head}unmapped = \"refuse\"\nmax_identity_sessions = 2\n\
             [[gateway.servers.identities]]\nupstream_user = \"alice\"\nuser = \"op\"\npassword_file = {:?}\n\
             [[gateway.servers.identities]]\nupstream_role = \"Operator\"\nuser = \"eng\"\npassword = \"x\"\n\
             [[gateway.servers.identities]]\nupstream_role = \"Anonymous\"\n",
            pw.display().to_string()
        ))
        .unwrap();
        let s = &c.servers[0];
        assert_eq!(s.identities[0].password().unwrap(), "secret");
        let auth = Roles::NONE.and(WellKnownRole::AuthenticatedUser);
        // alice matches by name before her role.
        assert_eq!(
            s.identity_for("alice", auth.and(WellKnownRole::Operator)),
            Ok(Some(0))
        );
        assert_eq!(
            s.identity_for("bob", auth.and(WellKnownRole::Operator)),
            Ok(Some(1))
        );
        assert_eq!(
            s.identity_for("", Roles::NONE.and(WellKnownRole::Anonymous)),
            Ok(Some(2))
        );
        assert_eq!(
            s.identity_for("carol", auth),
            Err(uaring_core::StatusCode::BadUserAccessDenied)
        );
        let open = parse(&format!(
            "{head}[[gateway.servers.identities]]\nupstream_user = \"alice\"\nuser = \"op\"\n"
        ))
        .unwrap();
        assert_eq!(open.servers[0].identity_for("carol", auth), Ok(None));
        for (bad, says) in [
            ("[[gateway.servers.identities]]\nuser = \"op\"", "exactly one"),
            (
                "[[gateway.servers.identities]]\nupstream_user = \"a\"\nupstream_role = \"Operator\"",
                "exactly one",
            ),
            (
                "[[gateway.servers.identities]]\nupstream_role = \"Operators\"",
                "not a role",
            ),
            (
                "[[gateway.servers.identities]]\nupstream_user = \"a\"\nuser = \"op\"\npassword_file = \"/nonexistent/uaring.pw\"",
                "identities[0].password_file",
            ),
            (
                "[[gateway.servers.identities]]\nupstream_user = \"a\"\npassword = \"x\"",
                "without a user",
            ),
            (
                "[[gateway.servers.identities]]\nupstream_user = \"a\"\nbogus = 1",
                "unknown field",
            ),
        ] {
            let e = parse(&format!("{head}{bad}\n")).unwrap_err();
            assert!(e.contains(says), "{bad}: {says:?} in {e}");
        }
        for (bad, says) in [
            ("max_identity_sessions = 0", "max_identity_sessions"),
            ("identity_idle_ms = 999", "identity_idle_ms"),
            ("unmapped = \"drop\"", "unmapped"),
        ] {
            let e = parse(&format!("{head}{bad}\n")).unwrap_err();
            assert!(e.contains(says), "{bad}: {says:?} in {e}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_quick_entry_is_named_after_host_and_port() {
        let s = ServerConfig::quick("opc.tcp://127.0.0.1:4841");
        assert_eq!(s.name, "127.0.0.1_4841");
        s.validate(&GatewayConfig::default()).unwrap();
    }
}
