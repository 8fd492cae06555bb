//! OPC UA Binary primitives for the generator (the generator does not link uaring-core,
//! so that a broken checked-in output can always be regenerated).

#[derive(Clone, Debug, PartialEq)]
pub enum Id {
    Numeric(u16, u32),
    String(u16, String),
    Guid(u16, [u8; 16]),
    Bytes(u16, Vec<u8>),
}

impl Id {
    pub const NULL: Id = Id::Numeric(0, 0);
    /// Parses `i=85`, `ns=1;s=x`, `g=…`, `b=…`.
    pub fn parse(s: &str) -> Option<Id> {
        let s = s.trim();
        let (ns, rest) = match s.strip_prefix("ns=") {
            Some(r) => {
                let (n, rest) = r.split_once(';')?;
                (n.parse().ok()?, rest)
            }
            None => (0u16, s),
        };
        let (k, v) = rest.split_at(rest.find('=')? + 1);
        Some(match k {
            "i=" => Id::Numeric(ns, v.parse().ok()?),
            "s=" => Id::String(ns, v.to_owned()),
            "g=" => Id::Guid(ns, parse_guid(v)?),
            "b=" => Id::Bytes(ns, base64(v)?),
            _ => return None,
        })
    }
}

pub fn parse_guid(s: &str) -> Option<[u8; 16]> {
    let s = s.trim().trim_start_matches('{').trim_end_matches('}');
    let hex: String = s.chars().filter(|c| *c != '-').collect();
    if hex.len() != 32 || s.len() != 36 {
        return None;
    }
    let mut b = [0u8; 16];
    for (i, x) in b.iter_mut().enumerate() {
        *x = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(b)
}

pub fn base64(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut acc = 0u32;
    let mut bits = 0;
    for c in s.bytes().filter(|c| !c.is_ascii_whitespace()) {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' => break,
            _ => return None,
        } as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

/// `YYYY-MM-DDTHH:MM:SS[.fffffff]Z` → 100 ns ticks since 1601-01-01.
pub fn parse_datetime(s: &str) -> Option<i64> {
    let s = s.trim().strip_suffix('Z')?;
    let (date, time) = s.split_once('T')?;
    let mut d = date.split('-');
    let (y, mo, da): (i64, i64, i64) = (
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
    );
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let mut t = hms.split(':');
    let (h, mi, se): (i64, i64, i64) = (
        t.next()?.parse().ok()?,
        t.next()?.parse().ok()?,
        t.next()?.parse().ok()?,
    );
    // days from civil (Howard Hinnant)
    let y2 = if mo <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let doy = (153 * (if mo > 2 { mo - 3 } else { mo + 9 }) + 2) / 5 + da - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146097 + doe - 719468;
    let unix = days * 86400 + h * 3600 + mi * 60 + se;
    let mut f = frac.to_owned();
    f.truncate(7);
    while f.len() < 7 {
        f.push('0');
    }
    let frac_ticks: i64 = f.parse().ok()?;
    Some((unix + 11_644_473_600) * 10_000_000 + frac_ticks)
}

#[derive(Default)]
pub struct W {
    pub b: Vec<u8>,
}

impl W {
    pub fn u8(&mut self, v: u8) {
        self.b.push(v);
    }
    pub fn bool(&mut self, v: bool) {
        self.b.push(v as u8);
    }
    pub fn i16(&mut self, v: i16) {
        self.b.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u16(&mut self, v: u16) {
        self.b.extend_from_slice(&v.to_le_bytes());
    }
    pub fn i32(&mut self, v: i32) {
        self.b.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u32(&mut self, v: u32) {
        self.b.extend_from_slice(&v.to_le_bytes());
    }
    pub fn i64(&mut self, v: i64) {
        self.b.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u64(&mut self, v: u64) {
        self.b.extend_from_slice(&v.to_le_bytes());
    }
    pub fn f32(&mut self, v: f32) {
        self.b.extend_from_slice(&v.to_le_bytes());
    }
    pub fn f64(&mut self, v: f64) {
        self.b.extend_from_slice(&v.to_le_bytes());
    }
    pub fn bytes(&mut self, v: Option<&[u8]>) {
        match v {
            None => self.i32(-1),
            Some(v) => {
                self.i32(i32::try_from(v.len()).expect("string too long"));
                self.b.extend_from_slice(v);
            }
        }
    }
    pub fn string(&mut self, v: Option<&str>) {
        self.bytes(v.map(str::as_bytes))
    }
    pub fn guid(&mut self, g: &[u8; 16]) {
        // wire order: Data1 u32 LE, Data2 u16 LE, Data3 u16 LE, Data4 as is
        self.u32(u32::from_be_bytes([g[0], g[1], g[2], g[3]]));
        self.u16(u16::from_be_bytes([g[4], g[5]]));
        self.u16(u16::from_be_bytes([g[6], g[7]]));
        self.b.extend_from_slice(&g[8..]);
    }
    pub fn node_id(&mut self, id: &Id) {
        match id {
            Id::Numeric(0, n) if *n <= 255 => {
                self.u8(0);
                self.u8(*n as u8);
            }
            Id::Numeric(ns, n) if *ns <= 255 && *n <= 65535 => {
                self.u8(1);
                self.u8(*ns as u8);
                self.u16(*n as u16);
            }
            Id::Numeric(ns, n) => {
                self.u8(2);
                self.u16(*ns);
                self.u32(*n);
            }
            Id::String(ns, s) => {
                self.u8(3);
                self.u16(*ns);
                self.string(Some(s));
            }
            Id::Guid(ns, g) => {
                self.u8(4);
                self.u16(*ns);
                self.guid(g);
            }
            Id::Bytes(ns, b) => {
                self.u8(5);
                self.u16(*ns);
                self.bytes(Some(b));
            }
        }
    }
    pub fn qualified_name(&mut self, ns: u16, name: Option<&str>) {
        self.u16(ns);
        self.string(name);
    }
    pub fn localized_text(&mut self, locale: Option<&str>, text: Option<&str>) {
        let mask = locale.is_some() as u8 | (text.is_some() as u8) << 1;
        self.u8(mask);
        if let Some(l) = locale {
            self.string(Some(l));
        }
        if let Some(t) = text {
            self.string(Some(t));
        }
    }
    /// An ExtensionObject with a binary body.
    pub fn extension_object(&mut self, encoding_id: u32, body: &[u8]) {
        self.node_id(&Id::Numeric(0, encoding_id));
        self.u8(1);
        self.bytes(Some(body));
    }
}
