//! [`EventLoop`]: one shard's loop on whichever backend could be set up.
//!
//! ```no_run
//! use uaring::{EchoHandler, EventLoop, Fleet, IoBackend, LoopConfig};
//! let wiring = Fleet::standalone().unwrap();
//! let mut lp = EventLoop::new(IoBackend::Auto, EchoHandler::default(), wiring, LoopConfig::default()).unwrap();
//! let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
//! lp.add_listener(listener).unwrap();
//! lp.run().unwrap(); // until the fleet is stopped or the handler's keep_running says no
//! ```

use std::fmt;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};

use crate::config::IoBackend;
use crate::epoll::EpollLoop;
use crate::fleet::ShardWiring;
use crate::handler::{ConnId, Handler};
use crate::loop_core::LoopConfig;
use crate::uring::{Features, SetupError, UringLoop};

/// A shard's event loop (one per thread, so the size difference does not matter).
#[allow(clippy::large_enum_variant)]
pub enum EventLoop<H: Handler> {
    Uring(UringLoop<H>),
    Epoll(EpollLoop<H>),
}

/// Why no loop could be built.
#[derive(Debug)]
pub enum LoopError {
    /// io_uring was required and could not be set up.
    Uring(SetupError),
    /// epoll could not be set up either (or was required and failed).
    Epoll(io::Error),
}

impl fmt::Display for LoopError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoopError::Uring(e) => write!(f, "{e}"),
            LoopError::Epoll(e) => write!(f, "epoll setup failed: {e}"),
        }
    }
}

impl std::error::Error for LoopError {}

impl<H: Handler> EventLoop<H> {
    /// Builds the loop on the calling thread (the one that will call [`EventLoop::run`]).
    /// `Auto` tries io_uring and falls back to epoll with one log line.
    pub fn new(
        backend: IoBackend,
        handler: H,
        wiring: ShardWiring,
        cfg: LoopConfig,
    ) -> Result<EventLoop<H>, LoopError> {
        match backend {
            IoBackend::Epoll => EpollLoop::new(handler, wiring, cfg)
                .map(EventLoop::Epoll)
                .map_err(LoopError::Epoll),
            IoBackend::Uring => UringLoop::new(handler, wiring, cfg)
                .map(EventLoop::Uring)
                .map_err(LoopError::Uring),
            IoBackend::Auto => match crate::uring::uring_loop::ring_options(&cfg, &wiring)
                .and_then(|o| crate::uring::setup_ring_with(cfg.ring_entries, &o))
            {
                Ok((ring, features)) => {
                    UringLoop::try_with_ring(ring, features, handler, wiring, cfg)
                        .map(EventLoop::Uring)
                        .map_err(LoopError::Uring)
                }
                // An io_uring mode that was asked for is never traded for epoll silently.
                Err(e) if cfg.needs_uring() => Err(LoopError::Uring(e)),
                Err(e) => {
                    tracing::warn!(
                        shard = wiring.index,
                        "io_uring unavailable ({e}); using the epoll backend"
                    );
                    EpollLoop::new(handler, wiring, cfg)
                        .map(EventLoop::Epoll)
                        .map_err(LoopError::Epoll)
                }
            },
        }
    }

    pub fn backend(&self) -> IoBackend {
        match self {
            EventLoop::Uring(_) => IoBackend::Uring,
            EventLoop::Epoll(_) => IoBackend::Epoll,
        }
    }

    /// io_uring features in use (`None` on epoll).
    pub fn features(&self) -> Option<Features> {
        match self {
            EventLoop::Uring(l) => Some(l.features()),
            EventLoop::Epoll(_) => None,
        }
    }

    pub fn add_listener(&mut self, listener: TcpListener) -> io::Result<()> {
        match self {
            EventLoop::Uring(l) => {
                l.add_listener(listener);
                Ok(())
            }
            EventLoop::Epoll(l) => l.add_listener(listener),
        }
    }

    /// Opens an outgoing connection (blocking connect) and drives it with the handler
    /// (`Handler::open` is called with `Origin::Connected`).
    pub fn connect(&mut self, addr: SocketAddr) -> io::Result<ConnId> {
        match self {
            EventLoop::Uring(l) => l.connect(addr),
            EventLoop::Epoll(l) => l.connect(addr),
        }
    }

    /// Adds an already connected socket.
    pub fn adopt(&mut self, stream: TcpStream) -> io::Result<ConnId> {
        match self {
            EventLoop::Uring(l) => l.adopt(stream),
            EventLoop::Epoll(l) => l.adopt(stream),
        }
    }

    pub fn handler(&self) -> &H {
        match self {
            EventLoop::Uring(l) => l.handler(),
            EventLoop::Epoll(l) => l.handler(),
        }
    }

    pub fn handler_mut(&mut self) -> &mut H {
        match self {
            EventLoop::Uring(l) => l.handler_mut(),
            EventLoop::Epoll(l) => l.handler_mut(),
        }
    }

    /// Runs until stopped (fleet stop or `Handler::keep_running` returning false)
    /// and all connections are closed (graceful, bounded by `shutdown_grace_ms`).
    pub fn run(&mut self) -> io::Result<()> {
        match self {
            EventLoop::Uring(l) => l.run(),
            EventLoop::Epoll(l) => l.run(),
        }
    }
}
