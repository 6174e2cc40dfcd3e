//! `redisync doctor`: ping, server version and the settings check.

use std::process::ExitCode;

use redisync::Severity;
use serde_json::json;

use crate::{Outcome, Target, print_json};

/// Runs `doctor`: exit status 1 when a finding is a [`Severity::Danger`].
pub(crate) fn run(target: &Target) -> Outcome {
    let client = target.client()?;
    let round_trip = client.ping()?;
    let report = client.check_server()?;
    let danger = report.worst() == Some(Severity::Danger);
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
            "ping_ms": round_trip.as_secs_f64() * 1000.0,
            "servers": report.servers,
            "findings": findings,
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
        let verdict = if danger {
            "locks are at risk on this deployment (see the danger findings above)"
        } else if report.is_ok() {
            "ok"
        } else {
            "usable, with warnings (see above)"
        };
        println!("\nverdict   {verdict}");
    }
    Ok(if danger {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
