//! `redisync doctor`: ping, server version and the settings check.

use std::process::ExitCode;

use redisync::Reply;
use redisync::{Client, ObjectKind, Severity};
use serde_json::json;

use crate::inspect::{semaphore_waiters, unset_semaphore_note};
use crate::{Failure, Outcome, Target, ms_json, print_json};

/// Runs `doctor`: exit status 1 when a finding is a [`Severity::Danger`]
/// or threads wait on a semaphore whose permits were never set.
pub(crate) fn run(target: &Target) -> Outcome {
    let client = target.client()?;
    let round_trip = client.ping()?;
    let report = client.check_server()?;
    let unset = unset_semaphores(&client)?;
    let danger = report.worst() == Some(Severity::Danger) || !unset.is_empty();
    if target.json {
        let findings: Vec<_> = report
            .findings()
            .iter()
            .map(|finding| {
                json!({
                    "severity": finding.severity.to_string(),
                    "server": finding.server,
                    "setting": finding.setting,
                    "found": finding.found,
                    "why": finding.why,
                    "fix": finding.fix,
                })
            })
            .collect();
        print_json(&json!({
            "ping_ms": ms_json(round_trip),
            "servers": report.servers,
            "findings": findings,
            "unset_semaphores": unset
                .iter()
                .map(|(name, waiters)| json!({ "name": name, "waiters": waiters }))
                .collect::<Vec<_>>(),
            "ok": report.is_ok(),
            "danger": danger,
        }));
    } else {
        println!("ping      {:.2} ms", round_trip.as_secs_f64() * 1000.0);
        for server in &report.servers {
            println!("server    {server}");
        }
        if report.findings().is_empty() {
            println!("findings  none");
        }
        for finding in report.findings() {
            println!(
                "\n[{}] {}: {} on {}\n  why: {}\n  fix: {}",
                finding.severity,
                finding.setting,
                finding.found,
                finding.server,
                finding.why,
                finding.fix
            );
        }
        for (name, waiters) in &unset {
            println!("\n{}", unset_semaphore_note(name, *waiters));
        }
        let settings = if report.worst() == Some(Severity::Danger) {
            "locks are at risk on this deployment (see the danger findings above)"
        } else if report.is_ok() {
            "ok"
        } else {
            "usable, with warnings (see above)"
        };
        if unset.is_empty() {
            println!("\nverdict   {settings}");
        } else {
            println!(
                "\nverdict   {settings}; threads wait forever on semaphores nobody set (see above)"
            );
        }
    }
    Ok(if danger {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// The semaphores (by name, without the name prefix) that connections wait
/// on while nothing is stored under their name: permits never set, or
/// deleted. Found from the semaphore channels with subscribers (plain and
/// sharded pub/sub).
fn unset_semaphores(client: &Client) -> Result<Vec<(String, i64)>, Failure> {
    let pattern = format!("redisson_sc:{}*", glob_escape(client.name_prefix()));
    let mut names = std::collections::BTreeSet::new();
    for command in ["CHANNELS", "SHARDCHANNELS"] {
        for answer in client
            .backend()
            .server_command(&["PUBSUB", command, &pattern])?
        {
            let Reply::Array(channels) = &answer.reply else {
                continue;
            };
            for channel in channels.iter().filter_map(Reply::as_text) {
                let Some(store_name) = channel.strip_prefix("redisson_sc:") else {
                    continue;
                };
                // `{name}` unless the name has a hash tag of its own.
                let store_name = store_name
                    .strip_prefix('{')
                    .and_then(|inner| inner.strip_suffix('}'))
                    .filter(|inner| !inner.contains(['{', '}']))
                    .unwrap_or(store_name);
                if let Some(name) = store_name.strip_prefix(client.name_prefix()) {
                    names.insert(name.to_owned());
                }
            }
        }
    }
    let mut unset = Vec::new();
    for name in names {
        if client.inspect(&name)?.kind == ObjectKind::Absent {
            let waiters = semaphore_waiters(client, &name)?;
            if waiters > 0 {
                unset.push((name, waiters));
            }
        }
    }
    Ok(unset)
}

/// `text` with the glob characters of a `PUBSUB CHANNELS` pattern escaped.
fn glob_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}
