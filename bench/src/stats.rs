//! Medians and percentiles of samples, and the server's CPU time.

/// The `q`-quantile (0.0..=1.0) of `samples`, nearest-rank; 0 when empty.
pub fn quantile(samples: &[f64], q: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

pub fn median(samples: &[f64]) -> f64 {
    quantile(samples, 0.5)
}

/// The best throughput ratio any single command could reach against a plain side
/// of `requests` commands that together cost the server `1e6 / rps` µs, of which
/// the commands themselves are `usec_per_call`: the rest (reading, parsing,
/// replying, the event loop) is paid once per request even by a command that costs
/// nothing. An upper bound: a client-bound run gains less still.
pub fn ceiling(rps: f64, usec_per_call: f64, requests: usize) -> f64 {
    let per_op = 1e6 / rps.max(1e-9);
    let rest_per_request = (per_op - usec_per_call) / requests.max(1) as f64;
    if rest_per_request > 0.0 {
        per_op / rest_per_request
    } else {
        f64::INFINITY
    }
}

/// CPU time redis-server has used since it started, in µs (INFO cpu, user + system,
/// main thread and all).
pub fn server_cpu_us(con: &mut redis::Connection) -> redis::RedisResult<f64> {
    let text: String = redis::cmd("INFO").arg("cpu").query(con)?;
    Ok(text
        .lines()
        .filter_map(|line| line.split_once(':'))
        .filter(|(name, _)| matches!(*name, "used_cpu_user" | "used_cpu_sys"))
        .filter_map(|(_, value)| value.trim().parse::<f64>().ok())
        .sum::<f64>()
        * 1e6)
}
