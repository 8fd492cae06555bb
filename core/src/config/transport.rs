//! Transport and secure-channel limits: one plain struct the server configuration holds
//! (and the client reuses). Every field is a hard cap; `0` is rejected by
//! [`TransportLimits::validate`], never read as "unbounded".

use serde::{Deserialize, Serialize};

use crate::encoding::DecodeLimits;

/// serde mirror of [`DecodeLimits`] (defined in `encoding`, which has no serde).
#[derive(Serialize, Deserialize)]
#[serde(remote = "DecodeLimits", deny_unknown_fields)]
struct DecodeLimitsDef {
    max_string_len: usize,
    max_byte_string_len: usize,
    max_array_len: usize,
    max_depth: u32,
    #[serde(default = "default_max_decoded_size")]
    max_decoded_size: usize,
}

fn default_max_decoded_size() -> usize {
    DecodeLimits::default().max_decoded_size
}

fn default_decode_limits() -> DecodeLimits {
    DecodeLimits::default()
}

/// The smallest chunk buffer Part 6 §7.1.2.3 allows for non-ECC policies, in bytes.
pub const MIN_BUFFER_SIZE: u32 = 8192;
/// The largest chunk buffer we accept in configuration, in bytes (a sanity cap: one
/// chunk is held whole in memory while it is verified).
pub const MAX_BUFFER_SIZE: u32 = 16 * 1024 * 1024;
/// The longest EndpointUrl a Hello may carry (Part 6 §7.1.2.3), in bytes.
pub const MAX_ENDPOINT_URL_LEN: usize = 4096;
/// The longest Reason string of an ERR or abort chunk (Part 6), in bytes.
pub const MAX_REASON_LEN: usize = 4096;

/// Limits of one UA-TCP connection and its secure channel.
///
/// Plain data with public fields and a [`Default`], so a configuration loader (serde or
/// otherwise) can mirror it field for field. Call [`TransportLimits::validate`] after
/// loading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TransportLimits {
    /// Largest chunk we accept, in bytes (the ReceiveBufferSize we offer in ACK/HEL;
    /// negotiated down to the peer's SendBufferSize). At least 8192.
    pub receive_buffer_size: u32,
    /// Largest chunk we send, in bytes (negotiated down to the peer's ReceiveBufferSize).
    /// At least 8192.
    pub send_buffer_size: u32,
    /// Largest message body we accept, in bytes, summed over all its chunks (announced as
    /// MaxMessageSize). Applies once a session has been activated on the connection.
    pub max_message_size: u32,
    /// Largest message body we buffer, in bytes, on a connection that has not yet
    /// activated a session: the per-connection memory budget of an unauthenticated peer
    /// (the classic chunked-message denial of service). At most `max_message_size`.
    pub max_message_size_pre_session: u32,
    /// Most chunks in one received message (announced as MaxChunkCount).
    pub max_chunk_count: u32,
    /// Largest response body we send, in bytes: the client's MaxMessageSize is lowered to
    /// it, and it applies when the client sets none (0). A larger response is answered
    /// with a ServiceFault BadResponseTooLarge. At least 8192.
    pub max_response_message_size: u32,
    /// Longest time, in milliseconds, from accepting a connection to receiving its Hello,
    /// and again from the Hello to a successful OpenSecureChannel.
    pub hello_timeout_ms: u64,
    /// Longest time, in milliseconds, a partly received message (an unfinished chunk or
    /// the first chunks of a multi-chunk message) may stay unfinished.
    pub message_assembly_timeout_ms: u64,
    /// Shortest secure-channel token lifetime we grant, in milliseconds (requests for
    /// less are revised up).
    pub min_token_lifetime_ms: u32,
    /// Longest secure-channel token lifetime we grant, in milliseconds (requests for more,
    /// and requests for 0, are revised to this).
    pub max_token_lifetime_ms: u32,
    /// Most secure channels open at once on one shard; one more is refused with ERR
    /// BadTcpNotEnoughResources.
    pub max_channels_per_shard: u32,
    /// Limits for decoding message bodies (string, byte string and array lengths, nesting).
    #[serde(with = "DecodeLimitsDef", default = "default_decode_limits")]
    pub decode: DecodeLimits,
}

impl Default for TransportLimits {
    fn default() -> Self {
        TransportLimits {
            receive_buffer_size: 65536,
            send_buffer_size: 65536,
            max_message_size: 64 * 1024 * 1024,
            max_message_size_pre_session: 1024 * 1024,
            // 64 MiB in 64 KiB chunks is 1025 chunks with headers; leave room for smaller
            // negotiated buffers.
            max_chunk_count: 4096,
            max_response_message_size: 64 * 1024 * 1024,
            hello_timeout_ms: 10_000,
            message_assembly_timeout_ms: 60_000,
            min_token_lifetime_ms: 10_000,
            max_token_lifetime_ms: 3_600_000,
            max_channels_per_shard: 4096,
            decode: DecodeLimits::default(),
        }
    }
}

/// A rejected configuration value: the field's name and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitsError {
    pub field: &'static str,
    pub reason: String,
}

impl std::fmt::Display for LimitsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "transport limit `{}`: {}", self.field, self.reason)
    }
}
impl std::error::Error for LimitsError {}

fn err(field: &'static str, reason: impl Into<String>) -> Result<(), LimitsError> {
    Err(LimitsError {
        field,
        reason: reason.into(),
    })
}

impl TransportLimits {
    /// Checks every field: no zero, buffers within [8192, 16 MiB], the pre-session budget
    /// not above the message size, min token lifetime not above max.
    pub fn validate(&self) -> Result<(), LimitsError> {
        for (field, v) in [
            ("receive_buffer_size", self.receive_buffer_size),
            ("send_buffer_size", self.send_buffer_size),
        ] {
            if !(MIN_BUFFER_SIZE..=MAX_BUFFER_SIZE).contains(&v) {
                return err(
                    field,
                    format!("{v} is outside [{MIN_BUFFER_SIZE}, {MAX_BUFFER_SIZE}] bytes"),
                );
            }
        }
        if self.max_message_size < MIN_BUFFER_SIZE {
            return err(
                "max_message_size",
                format!("{} is below {MIN_BUFFER_SIZE} bytes", self.max_message_size),
            );
        }
        if self.max_message_size_pre_session < MIN_BUFFER_SIZE {
            return err(
                "max_message_size_pre_session",
                format!(
                    "{} is below {MIN_BUFFER_SIZE} bytes",
                    self.max_message_size_pre_session
                ),
            );
        }
        if self.max_message_size_pre_session > self.max_message_size {
            return err("max_message_size_pre_session", "is above max_message_size");
        }
        if self.max_response_message_size < MIN_BUFFER_SIZE {
            return err(
                "max_response_message_size",
                format!(
                    "{} is below {MIN_BUFFER_SIZE} bytes (there is no unbounded setting)",
                    self.max_response_message_size
                ),
            );
        }
        if self.max_chunk_count == 0 {
            return err(
                "max_chunk_count",
                "0 is not allowed (it would mean unbounded)",
            );
        }
        if self.hello_timeout_ms == 0 {
            return err("hello_timeout_ms", "0 is not allowed");
        }
        if self.message_assembly_timeout_ms == 0 {
            return err("message_assembly_timeout_ms", "0 is not allowed");
        }
        if self.min_token_lifetime_ms == 0 {
            return err("min_token_lifetime_ms", "0 is not allowed");
        }
        if self.max_token_lifetime_ms < self.min_token_lifetime_ms {
            return err("max_token_lifetime_ms", "is below min_token_lifetime_ms");
        }
        if self.max_channels_per_shard == 0 {
            return err("max_channels_per_shard", "0 is not allowed");
        }
        if self.max_channels_per_shard >= 0xFF_FFFF {
            // Channel ids are 24 bits per shard; a free one must always exist.
            return err("max_channels_per_shard", "must be below 16777215");
        }
        let d = &self.decode;
        if d.max_string_len == 0 || d.max_byte_string_len == 0 || d.max_array_len == 0 {
            return err(
                "decode",
                "string, byte string and array limits must be above 0",
            );
        }
        if d.max_decoded_size < MIN_BUFFER_SIZE as usize {
            return err(
                "decode",
                "max_decoded_size must be at least 8192 bytes (there is no unbounded setting)",
            );
        }
        if d.max_depth < 100 {
            return err("decode", "max_depth must be at least 100 (Part 6)");
        }
        Ok(())
    }

    /// Revises a requested token lifetime (ms) into [min, max]; 0 asks for the maximum.
    pub fn revise_token_lifetime_ms(&self, requested_ms: u32) -> u32 {
        if requested_ms == 0 {
            return self.max_token_lifetime_ms;
        }
        requested_ms.clamp(
            self.min_token_lifetime_ms,
            self.max_token_lifetime_ms.max(self.min_token_lifetime_ms),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid() {
        TransportLimits::default().validate().unwrap();
    }

    #[test]
    fn zeros_are_rejected() {
        let d = TransportLimits::default();
        let cases: Vec<TransportLimits> = vec![
            TransportLimits {
                receive_buffer_size: 0,
                ..d
            },
            TransportLimits {
                send_buffer_size: 8191,
                ..d
            },
            TransportLimits {
                max_message_size: 0,
                ..d
            },
            TransportLimits {
                max_message_size_pre_session: 0,
                ..d
            },
            TransportLimits {
                max_chunk_count: 0,
                ..d
            },
            TransportLimits {
                max_response_message_size: 0,
                ..d
            },
            TransportLimits {
                hello_timeout_ms: 0,
                ..d
            },
            TransportLimits {
                message_assembly_timeout_ms: 0,
                ..d
            },
            TransportLimits {
                min_token_lifetime_ms: 0,
                ..d
            },
            TransportLimits {
                max_token_lifetime_ms: 1,
                ..d
            },
            TransportLimits {
                max_channels_per_shard: 0,
                ..d
            },
            TransportLimits {
                decode: DecodeLimits {
                    max_array_len: 0,
                    ..d.decode
                },
                ..d
            },
            TransportLimits {
                decode: DecodeLimits {
                    max_decoded_size: 0,
                    ..d.decode
                },
                ..d
            },
            TransportLimits {
                max_message_size_pre_session: d.max_message_size + 1,
                ..d
            },
        ];
        for c in cases {
            assert!(c.validate().is_err(), "{c:?}");
        }
    }

    #[test]
    fn serde_roundtrip_defaults_and_unknown_fields() {
        let d = TransportLimits::default();
        let j = serde_json::to_string(&d).unwrap();
        assert_eq!(serde_json::from_str::<TransportLimits>(&j).unwrap(), d);
        let partial: TransportLimits = serde_json::from_str(r#"{"max_chunk_count": 10, "decode": {"max_string_len": 5, "max_byte_string_len": 6, "max_array_len": 7, "max_depth": 100}}"#).unwrap();
        assert_eq!(partial.max_chunk_count, 10);
        assert_eq!(partial.decode.max_array_len, 7);
        assert_eq!(partial.receive_buffer_size, d.receive_buffer_size);
        assert!(serde_json::from_str::<TransportLimits>(r#"{"max_chunks": 10}"#).is_err());
        let e = crate::secure_channel::EndpointSecurity::none();
        let j = serde_json::to_string(&e).unwrap();
        assert!(j.contains(r#""mode":"None""#), "{j}");
        assert_eq!(
            serde_json::from_str::<crate::secure_channel::EndpointSecurity>(&j).unwrap(),
            e
        );
        assert!(
            serde_json::from_str::<crate::secure_channel::EndpointSecurity>(
                r#"{"policy_uri":"x","mode":"Invalid"}"#
            )
            .is_err()
        );
    }

    #[test]
    fn token_lifetime_is_revised() {
        let d = TransportLimits::default();
        assert_eq!(d.revise_token_lifetime_ms(0), d.max_token_lifetime_ms);
        assert_eq!(d.revise_token_lifetime_ms(1), d.min_token_lifetime_ms);
        assert_eq!(
            d.revise_token_lifetime_ms(u32::MAX),
            d.max_token_lifetime_ms
        );
        assert_eq!(d.revise_token_lifetime_ms(60_000), 60_000);
    }
}
