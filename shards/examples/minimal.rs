//! The smallest server of one's own data: one Double variable under Objects, pushed by an
//! application thread once a second. `minimal [--listen HOST:PORT]` (default 127.0.0.1:4840).
use std::time::Duration;

use uaring::{Server, VariableDef};

fn main() -> Result<(), uaring::Error> {
    let args: Vec<String> = std::env::args().collect();
    let listen = match args.iter().position(|a| a == "--listen") {
        Some(i) => args.get(i + 1).cloned().unwrap_or_default(),
        None => "127.0.0.1:4840".to_string(),
    };
    let mut builder = Server::builder().listen(&listen);
    let ns = builder.namespace("urn:uaring:example:minimal");
    let temperature =
        builder.add_variable(VariableDef::new(ns.id("Temperature"), "Temperature", 20.0));
    let server = builder.start()?;
    server.print_listening();
    std::thread::spawn(move || {
        for step in 0u64.. {
            let value = 20.0 + (step % 10) as f64 / 10.0;
            if temperature.set(value).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    server.run_until_signal()
}
