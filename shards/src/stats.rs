//! The statistics file: per-shard connection counts as JSON, replaced atomically.

use std::io::Write;
use std::path::Path;

use crate::fleet::Fleet;

/// Renders the fleet's counters as one JSON object.
pub fn render_json(fleet: &Fleet, backend: &str, listen: &str) -> String {
    let snaps = fleet.snapshot();
    let mut s = String::with_capacity(256 + snaps.len() * 200);
    s.push_str(&format!(
        "{{\"backend\":\"{backend}\",\"distribution\":\"{}\",\"listen\":\"{listen}\",\"stopping\":{},\"shards\":[",
        fleet.policy,
        fleet.stopping()
    ));
    let mut total = crate::fleet::StatsSnapshot::default();
    for (i, (sn, link)) in snaps.iter().zip(&fleet.shards).enumerate() {
        if i > 0 {
            s.push(',');
        }
        let cpu = link.cpu.map_or("null".to_string(), |c| c.to_string());
        let modes = link.modes();
        let sqpoll_cpu = modes
            .sqpoll_cpu
            .map_or("null".to_string(), |c| c.to_string());
        s.push_str(&format!(
            "{{\"shard\":{i},\"cpu\":{cpu},\"open\":{},\"accepted\":{},\"closed\":{},\"refused\":{},\"handed_off\":{},\"moved_out\":{},\"moved_in\":{},\"move_refused\":{},\"bytes_in\":{},\"bytes_out\":{},\"loops\":{},\"batch_waits\":{},\"batch_wanted\":{},\"sqpoll\":\"{}\",\"sqpoll_cpu\":{sqpoll_cpu},\"sqpoll_wakeups\":{},\"busy_poll_us\":{},\"busy_polls\":{},\"busy_poll_hits\":{},\"busy_poll_ns\":{},\"fixed_files\":{},\"fixed_file_slots\":{},\"fixed_files_registered\":{},\"zero_copy_send_min\":{},\"zc_sends\":{},\"zc_bytes\":{},\"zc_notifs\":{},\"zc_copied\":{},\"zc_refused\":{},\"recv_bundles\":{},\"bundled_recvs\":{},\"bundled_bufs\":{},\"fixed_send_buffers\":{},\"fixed_send_buffer_bytes\":{},\"fixed_send_plain\":{},\"fixed_buf_sends\":{},\"fixed_buf_exhausted\":{},\"fixed_buf_outgrown\":{},\"fixed_bufs_lent\":{},\"napi_busy_poll_us\":{},\"napi_prefer_busy_poll\":{},\"napi_sockets\":{},\"napi_none\":{}}}",
            sn.open, sn.accepted, sn.closed, sn.refused, sn.handed_off, sn.moved_out, sn.moved_in, sn.move_refused, sn.bytes_in, sn.bytes_out, sn.loops, sn.batch_waits, sn.batch_wanted,
            modes.sqpoll, sn.sqpoll_wakeups, modes.busy_poll_us, sn.busy_polls, sn.busy_poll_hits, sn.busy_poll_ns,
            modes.fixed_files > 0, modes.fixed_files, sn.fixed_files_registered, modes.zero_copy_send_min, sn.zc_sends, sn.zc_bytes, sn.zc_notifs, sn.zc_copied, sn.zc_refused,
            modes.recv_bundles, sn.bundled_recvs, sn.bundled_bufs,
            modes.fixed_send_buffers, modes.fixed_send_buffer_bytes, modes.fixed_send_plain, sn.fixed_buf_sends, sn.fixed_buf_exhausted, sn.fixed_buf_outgrown, sn.fixed_bufs_lent,
            modes.napi_busy_poll_us, modes.napi_prefer_busy_poll, sn.napi_sockets, sn.napi_none
        ));
        total.open += sn.open;
        total.accepted += sn.accepted;
        total.closed += sn.closed;
        total.refused += sn.refused;
    }
    s.push_str(&format!(
        "],\"total\":{{\"open\":{},\"accepted\":{},\"closed\":{},\"refused\":{}}}}}",
        total.open, total.accepted, total.closed, total.refused
    ));
    s
}

/// Writes `json` to `path` through a temporary file and rename, so readers
/// never see a partial file.
pub fn write_atomically(path: &Path, json: &str) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(json.as_bytes())?;
        f.write_all(b"\n")?;
    }
    std::fs::rename(&tmp, path)
}
