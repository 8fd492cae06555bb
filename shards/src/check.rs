//! `uaring config check FILE`: everything `uaring serve --config FILE` checks before it
//! listens, and the effective configuration printed as TOML.

use std::fmt::Write as _;
use std::path::Path;

use crate::config::FileConfig;
use crate::{security, ua_handler};

/// Checks the file and returns the effective configuration as TOML text (every key, defaults
/// filled in; password hashes left out), followed by the companion models the
/// `[[nodesets]]` load. The checks: TOML syntax and unknown keys, every range of
/// `[runtime]`, `[security]` (policy and mode names, limits) and `[[users]]` (password
/// hashes), `[handshake]`, `[history]`, `[push]`, core's configuration, and the `[[nodesets]]` loaded into an address space.
/// Not checked: that the listen address can be bound, the CPUs exist on this machine, and
/// the PKI directory (it is created on the first start).
pub fn check_file(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read: {e}"))?;
    check_text(&text)
}

/// [`check_file`] on the text of a file.
pub fn check_text(text: &str) -> Result<String, String> {
    let mut file = FileConfig::parse(text)?;
    let (sec, users) = security::take_config(&mut file.server)?;
    security::check(&sec, &users)?;
    let content = crate::content::take_config(&mut file.server, true, false)?;
    let handshake = crate::handshake_pool::take_config(&mut file.server)?;
    let history = crate::history::serve::take_config(&mut file.server)?;
    let push = crate::push::take_config(&mut file.server)?;
    let mut gateway = crate::gateway::config::take_config(&mut file.server)?;
    let hidden = gateway
        .servers
        .iter_mut()
        .filter(|s| !s.password.is_empty())
        .map(|s| s.password.clear())
        .count();
    let config = ua_handler::server_config(&file.server, false)?;
    let files = ua_handler::nodeset_files(&file.server)?;
    let setup = ua_handler::build(&file.server, false)?;
    let ns = setup.shared.address_space.namespace_uris();

    let toml = |v: &dyn erased::Ser| v.to_toml();
    // A section printed under its own name, so that a table inside it (`[history.postgres]`)
    // is printed with its whole path.
    let section = |name: &str, v: &dyn erased::Ser| v.to_toml_section(name);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# The effective configuration: every key with the value in force."
    );
    let _ = writeln!(out, "{}", section("runtime", &file.runtime)?);
    let _ = writeln!(out, "{}", section("metrics", &file.metrics)?);
    let _ = writeln!(out, "{}", section("log", &file.log)?);
    let _ = writeln!(out, "{}", section("security", &sec)?);
    let _ = writeln!(out, "{}", section("handshake", &handshake)?);
    let _ = writeln!(out, "{}", section("history", &history)?);
    let _ = writeln!(out, "{}", section("push", &push)?);
    if hidden > 0 {
        let _ = writeln!(
            out,
            "# [[gateway.servers]]: {hidden} password(s) not shown (printed empty)"
        );
    }
    let _ = writeln!(out, "{}", section("gateway", &gateway)?);
    for u in &users {
        let roles: Vec<&str> = u.granted()?.iter().map(|r| r.name()).collect();
        let _ = writeln!(
            out,
            "[[users]]\nname = {:?}\nroles = {:?}\n# password: an argon2id hash (not shown)\n",
            u.name, roles
        );
    }
    for f in &files {
        let _ = writeln!(out, "[[nodesets]]\nfile = {:?}\n", f.display().to_string());
    }
    for r in &file.reverse_connect {
        let _ = writeln!(out, "[[reverse_connect]]\n{}", toml(r)?);
    }
    let mut core = toml::Table::try_from(&config)
        .map_err(|e| format!("cannot print the configuration: {e}"))?;
    if let Some(c) = &content {
        c.insert_into(&mut core);
    }
    let _ = writeln!(out, "{}", toml(&core)?);
    let _ = writeln!(out, "# NamespaceArray: {}", ns.len());
    for (i, u) in ns.iter().enumerate() {
        let _ = writeln!(out, "#   {i}: {u}");
    }
    let _ = writeln!(
        out,
        "# Address space: {} nodes (namespace 0 and the NodeSets; `uaring serve` adds its Demo \
         folder and benchmark variables on top)",
        setup.shared.address_space.len()
    );
    Ok(out)
}

/// TOML of any serializable configuration part.
mod erased {
    pub trait Ser {
        fn to_toml(&self) -> Result<String, String>;
        /// `[name]` with this value's keys, and its tables as `[name.table]`.
        fn to_toml_section(&self, name: &str) -> Result<String, String>;
    }
    impl<T: serde::Serialize> Ser for T {
        fn to_toml(&self) -> Result<String, String> {
            toml::to_string(self).map_err(|e| format!("cannot print the configuration: {e}"))
        }
        fn to_toml_section(&self, name: &str) -> Result<String, String> {
            let value = toml::Value::try_from(self)
                .map_err(|e| format!("cannot print the configuration: {e}"))?;
            let mut outer = toml::Table::new();
            outer.insert(name.to_string(), value);
            let text = toml::to_string(&outer)
                .map_err(|e| format!("cannot print the configuration: {e}"))?;
            // An empty section is still printed, as a header.
            Ok(if text.trim().is_empty() {
                format!("[{name}]\n")
            } else {
                text
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `[handshake]` and `[history]` are sections of the file like any other (the check
    /// refused both before), and what it prints is itself a valid configuration.
    #[test]
    fn the_runtime_sections_are_checked_and_printed() {
        let text = "[handshake]\nthreads = 1\n[history]\ndir = \"/var/lib/uaring/history\"\nflush_interval_ms = 250\nnodes = [\"ns=0;i=2255\"]\n";
        let out = check_text(text).expect("valid");
        let handshake = out
            .split("[handshake]\n")
            .nth(1)
            .expect("a [handshake] section");
        let handshake = handshake.split("\n[").next().unwrap_or("");
        assert!(handshake.contains("threads = 1\n"), "{out}");
        // Tables inside a section keep their path, so the printed file reads back.
        assert!(out.contains("[history.postgres]\n"), "{out}");
        assert!(out.contains("flush_interval_ms = 250"), "{out}");
        check_text(&out).expect("the printed configuration is valid");
        let e = check_text("[history]\nflush_interval_ms = 0\n").unwrap_err();
        assert!(e.contains("history.flush_interval_ms"), "{e}");
        let e = check_text("[history]\nsize = 3\n").unwrap_err();
        assert!(e.contains("[history]"), "{e}");
    }

    #[test]
    fn reverse_connect_entries_are_checked_and_printed() {
        let out =
            check_text("[[reverse_connect]]\nurl = \"opc.tcp://scada:4844\"\n").expect("valid");
        assert!(
            out.contains("[[reverse_connect]]\nurl = \"opc.tcp://scada:4844\""),
            "{out}"
        );
        assert!(
            out.contains("idle_connections = 1"),
            "every key printed: {out}"
        );
        check_text(&out).expect("the printed configuration is valid");
        let e =
            check_text("[[reverse_connect]]\nurl = \"opc.tcp://scada:4844\"\nretry_min_ms = 5\n")
                .unwrap_err();
        assert!(e.contains("retry_min_ms"), "{e}");
    }

    #[test]
    fn gateway_servers_are_checked_and_printed_without_their_passwords() {
        let out = check_text(
            "[gateway]\nmax_items = 5000\n[[gateway.servers]]\nname = \"plc\"\n\
             endpoint = \"opc.tcp://10.0.0.7:4840\"\nuser = \"gw\"\npassword = \"s3cret\"\n",
        )
        .expect("valid");
        assert!(out.contains("max_items = 5000"), "{out}");
        assert!(out.contains("[[gateway.servers]]\n"), "{out}");
        assert!(out.contains("name = \"plc\"\n"), "{out}");
        assert!(
            out.contains("publishing_interval_ms = 100"),
            "every key: {out}"
        );
        assert!(!out.contains("s3cret"), "{out}");
        check_text(&out).expect("the printed configuration is valid");
        let e = check_text("[[gateway.servers]]\nname = \"plc\"\n").unwrap_err();
        assert!(e.contains("endpoint"), "{e}");
    }
}
