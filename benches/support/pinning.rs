//! Pinning the bench and its servers to CPU 0 (`taskset` by PID).

#[allow(unused_imports)]
use crate::*;

pub(crate) fn pin_self() -> bool {
    if std::env::var_os("REDISYNC_BENCH_NO_PIN").is_some_and(|v| v != "0") {
        eprintln!("bench: REDISYNC_BENCH_NO_PIN set: not pinning");
        return false;
    }
    // -a: every thread of the process; threads started later inherit it.
    taskset(std::process::id(), "bench process")
}

/// A node's `role:` from `INFO replication` (`master` or `slave`), for the
/// log line.
#[cfg(feature = "cluster")]
pub(crate) fn node_role(node: &TestServer) -> String {
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut node.connection())
        .unwrap_or_default();
    info.lines()
        .find_map(|l| l.strip_prefix("role:"))
        .map_or_else(|| "?".to_owned(), |r| r.trim().to_owned())
}

pub(crate) fn pin_server(pid: u32) -> bool {
    taskset(pid, "redis-server")
}

/// `taskset -a -cp 0 <pid>`: pins one process we started (or ourselves).
pub(crate) fn taskset(pid: u32, what: &str) -> bool {
    match Command::new("taskset")
        .args(["-a", "-cp", "0", &pid.to_string()])
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) if out.status.success() => true,
        Ok(out) => {
            eprintln!(
                "bench: pinning skipped: `taskset -a -cp 0 {pid}` ({what}) failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
            false
        }
        Err(e) => {
            eprintln!("bench: pinning skipped: cannot run taskset (util-linux) for {what}: {e}");
            false
        }
    }
}

/// `Cpus_allowed_list` from `/proc/<pid>/status`, for the log line.
pub(crate) fn cpus_allowed(pid: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .map(|v| v.trim().to_owned())
        })
        .unwrap_or_else(|| "?".to_owned())
}

// ---------------------------------------------------------------- cluster --
