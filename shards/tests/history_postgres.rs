//! History end to end on the PostgreSQL backend, against a PostgreSQL server the test
//! starts (Debian's package; `history_cases/pg.rs`): the cases every backend runs, the
//! tables in the database, and the database going away and coming back.

mod history_cases;

use std::time::{Duration, Instant};

use history_cases::pg::Pg;
use history_cases::*;
use uaring::{DateTime, NodeId, StatusCode, VariableDef};
use uaring_core::generated::types::*;
use uaring_core::ExtensionObject;
use uaring_harness::blocking::Client;

#[test]
fn pushed_and_written_values_are_read_back_raw_at_time_and_processed_and_survive_a_restart() {
    let _serial = serial();
    let dir = Dir::new("pg-e2e");
    let pg = Pg::start("e2e");
    let (level_id, _t0) =
        history_cases::pushed_and_written_values_are_read_back_raw_at_time_and_processed_and_survive_a_restart(
            &dir,
            &Backend::Postgres(&pg),
        );
    // The values are rows of the documented tables.
    let mut c = pg.client().expect("connect");
    let n: i64 = c
        .query_one(
            "SELECT count(*) FROM uaring_history_values v JOIN uaring_history_series s \
             ON s.id = v.series WHERE s.key = $1 AND v.num IS NOT NULL",
            &[&level_id.to_string()],
        )
        .unwrap()
        .get(0);
    assert!(n >= 1000, "{n} rows");
}

#[test]
fn history_update_inserts_replaces_updates_and_deletes_by_role() {
    let _serial = serial();
    let dir = Dir::new("pg-update");
    let pg = Pg::start("update");
    history_cases::history_update_inserts_replaces_updates_and_deletes_by_role(
        &dir,
        &Backend::Postgres(&pg),
    );
    // On the same database (a Variable of its own), rather than starting another PostgreSQL:
    // the request's AggregateConfiguration reaches the engine through this backend's reads too.
    history_cases::processed_reads_honour_the_aggregate_configuration(
        &dir,
        &Backend::Postgres(&pg),
    );
}

#[test]
fn a_run_time_variable_is_historized_until_it_is_deleted() {
    let _serial = serial();
    let dir = Dir::new("pg-run-time");
    let pg = Pg::start("run-time");
    history_cases::a_run_time_variable_is_historized_until_it_is_deleted(
        &dir,
        &Backend::Postgres(&pg),
    );
}

#[test]
fn event_history_is_inserted_replaced_updated_and_deleted() {
    let _serial = serial();
    let dir = Dir::new("pg-events");
    let pg = Pg::start("events");
    history_cases::event_history_is_inserted_replaced_updated_and_deleted(
        &dir,
        &Backend::Postgres(&pg),
    );
}

#[test]
fn values_a_full_queue_drops_are_marked_bad_data_lost() {
    let _serial = serial();
    let dir = Dir::new("pg-lost");
    let pg = Pg::start("lost");
    for on_full in ["drop-newest", "drop-oldest"] {
        lost_values_are_marked(&dir, &Backend::Postgres(&pg), on_full);
    }
}

fn stats(server: &uaring::ServerHandle) -> uaring::history::StoreStats {
    server.history_stats().expect("history")
}

fn up(server: &uaring::ServerHandle) -> bool {
    server.history_database().expect("postgres").up
}

/// Waits (bounded by TIMEOUT) until `ok` holds.
fn until(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + TIMEOUT;
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn raw(c: &mut Client, node: &NodeId, start: DateTime, end: DateTime) -> HistoryReadResult {
    let r = history_read(
        c,
        ExtensionObject::from_struct(&ReadRawModifiedDetails {
            start_time: start,
            end_time: end,
            ..Default::default()
        }),
        vec![HistoryReadValueId {
            node_id: node.clone(),
            ..Default::default()
        }],
    );
    r.results.into_iter().next().expect("one result")
}

/// The database stops under a running server and comes back: reads answer
/// Bad_DataUnavailable and updates Bad_ResourceUnavailable while it is away, the shards go
/// on serving, the writer keeps the batch it holds, the queue's overflow is dropped,
/// counted and marked Bad_DataLost; once it is back (reconnected by the back-off) every
/// value that was not dropped is there, in order, with the mark where the gap is. A server
/// started while the database is away starts, and serves history once it is back.
#[test]
fn the_database_going_away_and_coming_back() {
    let _serial = serial();
    let dir = Dir::new("pg-away");
    let mut pg = Pg::start("away");
    let t0 = t0();
    let mut b = builder(&dir, &Backend::Postgres(&pg))
        .set("history", "queue_capacity", 100i64.into())
        .set("history", "on_full", "drop-newest".into());
    let ns = b.namespace("urn:test:history");
    let level = b.add_variable(VariableDef::new(ns.id("Level"), "Level", 0.0).historize());
    let server = b.start().expect("start");
    let nsi = server.namespace_index("urn:test:history").unwrap();
    let id = NodeId::string(nsi, "Level");
    for i in 0..10 {
        level.set_with(dv(at(t0, i as f64), i as f64)).unwrap();
    }
    let mut c = session(&server.endpoint_url());
    let end = at(t0, 3000.0);
    wait_for(&mut c, &id, t0, end, 10);
    until("everything taken is committed", || {
        let s = stats(&server);
        s.durable == s.appended
    });
    assert!(up(&server));
    let before = stats(&server).durable;

    pg.stop();
    // Reads: the pooled connection is found dead, a new one fails: Bad_DataUnavailable.
    let r = raw(&mut c, &id, t0, end);
    assert_eq!(r.status_code, StatusCode::BadDataUnavailable);
    assert!(!up(&server), "the metrics say it is away");
    let u = history_update(
        &mut c,
        vec![ExtensionObject::from_struct(&UpdateDataDetails {
            node_id: id.clone(),
            perform_insert_replace: PerformUpdateType::Insert,
            update_values: vec![dv(at(t0, 50.0), 50.0)],
        })],
    );
    assert_eq!(u[0].status_code, StatusCode::BadResourceUnavailable);
    // The shards go on: a Read of the Variable answers.
    let v = c.read_values(std::slice::from_ref(&id)).expect("Read");
    assert!(v[0].status.is_none_or(|s| s.is_good()), "{v:?}");
    // 1,000 values while it is away: the writer holds what it took, the queue (100) fills,
    // the rest is dropped and counted.
    let n = 1000;
    for i in 0..n {
        level
            .set_with(dv(at(t0, 100.0 + i as f64), 100.0 + i as f64))
            .unwrap();
    }
    let dropped = stats(&server).dropped;
    assert!(dropped > 0 && dropped < n, "{dropped} dropped");

    pg.run();
    let accepted = n - dropped;
    until("the held values are committed after the reconnect", || {
        stats(&server).durable >= before + accepted
    });
    assert!(up(&server));
    assert!(server.history_database().unwrap().reconnects >= 1);
    // The next value of the series carries the mark of the gap before it.
    let last = at(t0, 2000.0);
    level.set_with(dv(last, -1.0)).unwrap();
    let mut v = Vec::new();
    until("the value after the gap is read back", || {
        let r = raw(&mut c, &id, t0, end);
        if !r.status_code.is_good() {
            return false;
        }
        v = data(&r);
        v.last().and_then(|d| d.source_timestamp) == Some(last)
    });
    let secs = |d: &uaring::DataValue| (d.source_timestamp.unwrap().0 - t0.0) / 10_000_000;
    assert!(v.windows(2).all(|w| secs(&w[0]) <= secs(&w[1])), "in order");
    let good: std::collections::BTreeSet<i64> =
        v.iter().filter(|d| d.status.is_none()).map(secs).collect();
    let marks: std::collections::BTreeSet<i64> = v
        .iter()
        .filter(|d| d.status == Some(StatusCode::BadDataLost))
        .map(secs)
        .collect();
    assert_eq!(good.len() + marks.len(), v.len(), "nothing else: {v:?}");
    assert!((0..10).all(|t| good.contains(&t)), "the values before");
    assert!(good.contains(&2000), "the value after");
    // The values taken while it was away (each writer's batch, the queue) are all there;
    // every gap begins with a mark at its first missing time, and every mark stands at a
    // missing time (a gap whose mark was itself pushed out may carry a second one).
    let away: Vec<i64> = (100..100 + n as i64).collect();
    let kept = away.iter().filter(|t| good.contains(t)).count() as u64;
    assert_eq!(kept, accepted, "every value not dropped is written");
    assert!(!marks.is_empty());
    assert!(marks.iter().all(|m| !good.contains(m)), "{marks:?}");
    for &t in &away {
        let gap_start = !good.contains(&t) && (t == 100 || good.contains(&(t - 1)));
        assert!(
            !gap_start || marks.contains(&t),
            "no mark at {t}: {marks:?}"
        );
    }
    let expect = v.len();
    let _ = c.close();
    drop(level);
    server.shutdown().unwrap();

    // A server started while the database is away starts, answers reads
    // Bad_DataUnavailable, and serves its history once the database is back.
    pg.stop();
    let mut b = builder(&dir, &Backend::Postgres(&pg));
    let ns = b.namespace("urn:test:history");
    b.add_variable(VariableDef::new(ns.id("Level"), "Level", 0.0).historize());
    let server = b.start().expect("starts without its database");
    let mut c = session(&server.endpoint_url());
    assert_eq!(
        raw(&mut c, &id, t0, end).status_code,
        StatusCode::BadDataUnavailable
    );
    pg.run();
    until("reads answer again", || {
        let r = raw(&mut c, &id, t0, end);
        r.status_code.is_good() && data(&r).len() == expect
    });
    let _ = c.close();
    server.shutdown().unwrap();
}

#[path = "common/mod.rs"]
mod common;

/// The real `uaring` binary with `backend = "postgres"` in its configuration file: its
/// Demo.History values (set every second) reach the database and are read back with
/// HistoryRead; `uaring config check` refuses a password in the connection string, and
/// says nothing of the password it was given in a file.
#[test]
fn the_binary_keeps_its_demo_history_in_postgres() {
    let _serial = serial();
    let dir = Dir::new("pg-bin");
    let pg = Pg::start("bin");
    let file = dir.0.join("uaring.toml");
    std::fs::write(&file, pg.history_toml()).unwrap();
    let check = std::process::Command::new(common::bin())
        .args(["config", "check"])
        .arg(&file)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&check.stdout).to_string()
        + &String::from_utf8_lossy(&check.stderr);
    assert!(check.status.success(), "{out}");
    let password = std::fs::read_to_string(&pg.password_file).unwrap();
    assert!(!out.contains(password.trim()), "the password is not shown");
    let bad = dir.0.join("bad.toml");
    std::fs::write(
        &bad,
        pg.history_toml().replace(
            "user=uaring",
            &format!("user=uaring password={}", password.trim()),
        ),
    )
    .unwrap();
    let check = std::process::Command::new(common::bin())
        .args(["config", "check"])
        .arg(&bad)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&check.stderr).to_string();
    assert!(!check.status.success());
    assert!(err.contains("password_file"), "{err}");
    assert!(
        !err.contains(password.trim()),
        "the password is not shown: {err}"
    );

    let server = common::Server::start_with(&["--config", file.to_str().unwrap()], |c| {
        c.current_dir(&dir.0);
    });
    let mut c = session(&server.url());
    let count = NodeId::string(1, "Demo.History.Count");
    let now = uaring::clock::utc_now();
    let (from, to) = (at(now, -60.0), at(now, 600.0));
    let mut got = Vec::new();
    until("two Demo.History.Count values read back", || {
        got = read_all(&mut c, &count, from, to, 0).0;
        got.len() >= 2
    });
    assert!(got
        .windows(2)
        .all(|w| w[0].source_timestamp < w[1].source_timestamp));
    let mut db = pg.client().unwrap();
    let rows: i64 = db
        .query_one(
            "SELECT count(*) FROM uaring_history_values v JOIN uaring_history_series s \
             ON s.id = v.series WHERE s.key = 'ns=1;s=Demo.History.Count'",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(rows >= 2, "{rows} rows");
    let _ = c.close();
    let (code, _, stderr) = server.terminate();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        !stderr.contains(password.trim()),
        "the password is not logged"
    );
}
