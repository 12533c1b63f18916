//! `redis-lock stats`: the module's `INFO lock`, and with `--interval` the rates of
//! its counters between two samples.
//!
//! Fields are read generically, so a newer module's fields show without a change
//! here: a field named `<name>_le_<bound>` is a bucket of histogram `<name>`
//! (cumulative, as Prometheus keeps them, with `<name>_sum` and `<name>_count`
//! beside), shown as its count, mean and quantiles; the gauges the module documents
//! show as they are; every other integer is a counter, shown with its rate; any
//! other value is shown as it is. On a Cluster the masters' fields are summed.

use std::collections::BTreeMap;
use std::time::{Instant, SystemTime};

use redis::Value;
use redis_lock_client::{Backend, Error, LockClient};
use serde::Serialize;

use crate::args::StatsArgs;
use crate::events;
use crate::exit;
use crate::info::to_json;
use crate::nodes::Nodes;

/// `INFO lock` fields that are levels, not counts of events.
const GAUGES: [&str; 4] = ["waiters", "locks", "keys_with_waiters", "last_token"];

/// The quantiles shown of each histogram.
const QUANTILES: [(&str, f64); 3] = [("p50", 0.5), ("p90", 0.9), ("p99", 0.99)];

pub async fn stats<K: Nodes>(locks: LockClient<K>, args: StatsArgs) -> i32 {
    match locks.detect_backend().await {
        Ok(Backend::Module) => {}
        Ok(backend) => {
            events::line(format_args!(
                "stats: the {backend} backend (the redislock function library) keeps no \
                 counters: there is no INFO lock without the module \
                 (docs/contract.md \"Without the module\"); load the module to get them"
            ));
            return exit::NO_MODULE;
        }
        Err(error) => return exit::failure(&error, ""),
    }
    let mut before = match sample(&locks).await {
        Ok(sample) => sample,
        Err(error) => return exit::failure(&error, ""),
    };
    let Some(interval) = args.interval else {
        return print(&args, &Report::totals(&before));
    };
    for _ in 0..args.count {
        let next = Instant::now() + interval;
        tokio::time::sleep_until(next.into()).await;
        let after = match sample(&locks).await {
            Ok(sample) => sample,
            Err(error) => return exit::failure(&error, ""),
        };
        let code = print(&args, &Report::rates(&before, &after));
        if code != 0 {
            return code;
        }
        before = after;
    }
    0
}

fn print(args: &StatsArgs, report: &Report) -> i32 {
    let text = if args.json {
        let mut line = to_json(report);
        line.push('\n');
        line
    } else {
        report.text()
    };
    if events::out(&text) {
        0
    } else {
        exit::OUTPUT
    }
}

/// One reading of `INFO lock` (summed over a Cluster's masters).
struct Sample {
    at: Instant,
    wall: SystemTime,
    integers: BTreeMap<String, i64>,
    /// Fields whose values are not integers, as the server wrote them.
    others: BTreeMap<String, String>,
    /// Field names in the server's order, each once.
    order: Vec<String>,
}

async fn sample<K: Nodes>(locks: &LockClient<K>) -> Result<Sample, Error> {
    let mut sample = Sample {
        at: Instant::now(),
        wall: SystemTime::now(),
        integers: BTreeMap::new(),
        others: BTreeMap::new(),
        order: Vec::new(),
    };
    for mut node in locks.connector().masters().await? {
        let mut info = redis::cmd("INFO");
        info.arg("lock");
        let text = match node.query(info).await? {
            Value::BulkString(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Value::VerbatimString { text, .. } | Value::SimpleString(text) => text,
            other => redis::from_redis_value::<String>(other)
                .map_err(|e| Error::UnexpectedReply(format!("INFO lock: {e}")))?,
        };
        sample.add(&text);
    }
    Ok(sample)
}

impl Sample {
    /// Adds the fields of one server's `INFO lock` text.
    fn add(&mut self, text: &str) {
        for line in text.lines() {
            let Some((name, value)) = line.trim().split_once(':') else {
                continue; // the `# lock` heading, blank lines
            };
            let name = name.strip_prefix("lock_").unwrap_or(name).to_string();
            if !self.order.contains(&name) {
                self.order.push(name.clone());
            }
            match value.parse::<i64>() {
                Ok(n) => {
                    let total = self.integers.entry(name).or_insert(0);
                    *total = total.saturating_add(n);
                }
                Err(_) => {
                    self.others.insert(name, value.to_string());
                }
            }
        }
    }
}

/// What `stats` prints for one sample, or for the interval between two.
#[derive(Serialize)]
struct Report {
    /// When the (last) sample was taken, RFC 3339 in UTC.
    at: String,
    /// The interval the rates are over; absent for totals.
    #[serde(skip_serializing_if = "Option::is_none")]
    interval_s: Option<f64>,
    counters: Vec<Counter>,
    gauges: Vec<Gauge>,
    histograms: Vec<Histogram>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    other: BTreeMap<String, String>,
}

#[derive(Serialize)]
struct Counter {
    name: String,
    total: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    per_s: Option<f64>,
}

#[derive(Serialize)]
struct Gauge {
    name: String,
    value: i64,
}

/// A histogram's observations (since the module loaded, or over the interval).
#[derive(Serialize)]
struct Histogram {
    name: String,
    count: i64,
    sum: Option<i64>,
    /// `(upper bound, cumulative count)`; the last bound is `inf`.
    buckets: Vec<(String, i64)>,
    /// `p50`, `p90`, `p99`: the bucket bound each falls under (`None` if nothing
    /// was observed).
    quantiles: BTreeMap<&'static str, Option<String>>,
}

/// `wait_ms_le_500` → (`wait_ms`, `500`).
fn bucket_of(name: &str) -> Option<(&str, &str)> {
    name.rsplit_once("_le_")
}

impl Report {
    fn totals(sample: &Sample) -> Report {
        Report::build(sample, None)
    }

    fn rates(before: &Sample, after: &Sample) -> Report {
        Report::build(after, Some(before))
    }

    fn build(after: &Sample, before: Option<&Sample>) -> Report {
        let seconds = before.map(|b| after.at.duration_since(b.at).as_secs_f64());
        let delta = |name: &str| {
            let now = after.integers.get(name).copied().unwrap_or(0);
            match before {
                Some(b) => now.saturating_sub(b.integers.get(name).copied().unwrap_or(0)),
                None => now,
            }
        };
        let histogram_names: Vec<&str> = after
            .order
            .iter()
            .filter_map(|name| bucket_of(name).map(|(histogram, _)| histogram))
            .fold(Vec::new(), |mut names, name| {
                if !names.contains(&name) {
                    names.push(name);
                }
                names
            });
        let in_histogram = |name: &str| {
            histogram_names.iter().any(|h| {
                name.strip_prefix(h).is_some_and(|rest| {
                    rest.starts_with("_le_") || rest == "_sum" || rest == "_count"
                })
            })
        };
        let mut report = Report {
            at: humantime::format_rfc3339_millis(after.wall).to_string(),
            interval_s: seconds,
            counters: Vec::new(),
            gauges: Vec::new(),
            histograms: Vec::new(),
            other: after.others.clone(),
        };
        for name in &after.order {
            let Some(&value) = after.integers.get(name) else {
                continue;
            };
            if in_histogram(name) {
                continue;
            }
            if GAUGES.contains(&name.as_str()) {
                report.gauges.push(Gauge {
                    name: name.clone(),
                    value,
                });
            } else {
                report.counters.push(Counter {
                    name: name.clone(),
                    total: value,
                    per_s: seconds.map(|s| delta(name) as f64 / s.max(1e-3)),
                });
            }
        }
        for histogram in histogram_names {
            let buckets: Vec<(String, i64)> = after
                .order
                .iter()
                .filter_map(|name| {
                    let (of, bound) = bucket_of(name)?;
                    (of == histogram).then(|| (bound.to_string(), delta(name)))
                })
                .collect();
            let count = buckets.last().map_or(0, |(_, n)| *n);
            let sum_name = format!("{histogram}_sum");
            let sum = after
                .integers
                .contains_key(&sum_name)
                .then(|| delta(&sum_name));
            let quantiles = QUANTILES
                .iter()
                .map(|&(name, q)| (name, quantile(&buckets, count, q)))
                .collect();
            report.histograms.push(Histogram {
                name: histogram.to_string(),
                count,
                sum,
                buckets,
                quantiles,
            });
        }
        report
    }

    fn text(&self) -> String {
        let mut text = match self.interval_s {
            Some(seconds) => format!("INFO lock at {}, over {seconds:.1} s:\n", self.at),
            None => format!(
                "INFO lock at {} (counts since the module loaded):\n",
                self.at
            ),
        };
        let width = self
            .counters
            .iter()
            .map(|c| c.name.len())
            .chain(self.gauges.iter().map(|g| g.name.len()))
            .chain(self.other.keys().map(String::len))
            .max()
            .unwrap_or(0);
        text.push_str("counters:\n");
        for counter in &self.counters {
            match counter.per_s {
                Some(rate) => text.push_str(&format!(
                    "  {:width$}  {rate:>10.1}/s  (total {})\n",
                    counter.name, counter.total
                )),
                None => text.push_str(&format!(
                    "  {:width$}  {:>10}\n",
                    counter.name, counter.total
                )),
            }
        }
        text.push_str("now:\n");
        for gauge in &self.gauges {
            text.push_str(&format!("  {:width$}  {:>10}\n", gauge.name, gauge.value));
        }
        for (name, value) in &self.other {
            text.push_str(&format!("  {name:width$}  {value:>10}\n"));
        }
        for histogram in &self.histograms {
            text.push_str(&histogram.text(self.interval_s.is_some()));
        }
        text
    }
}

impl Histogram {
    fn text(&self, over_interval: bool) -> String {
        let unit = if self.name.ends_with("_ms") {
            " ms"
        } else {
            ""
        };
        let when = if over_interval {
            "in the interval"
        } else {
            "so far"
        };
        let mut text = format!("{}: {} {when}", self.name, self.count);
        if let (Some(sum), true) = (self.sum, self.count > 0) {
            text.push_str(&format!(
                ", mean {:.1}{unit}",
                sum as f64 / self.count as f64
            ));
        }
        for (name, bound) in &self.quantiles {
            if let Some(bound) = bound {
                text.push_str(&format!(", {name} ≤ {bound}{unit}"));
            }
        }
        text.push('\n');
        if self.count == 0 {
            return text;
        }
        // The buckets, as a bar each of its own (not cumulative) share.
        let mut below = 0;
        for (bound, cumulative) in &self.buckets {
            let own = cumulative - below;
            below = *cumulative;
            let bar = "#".repeat(usize::try_from(own * 40 / self.count).unwrap_or(0));
            text.push_str(&format!("  ≤ {bound:>6}{unit}  {own:>8}  {bar}\n"));
        }
        text
    }
}

/// The bound of the first bucket holding the `q` quantile of `count` observations
/// (cumulative buckets), or `None` if there were none.
fn quantile(buckets: &[(String, i64)], count: i64, q: f64) -> Option<String> {
    if count <= 0 {
        return None;
    }
    let rank = (q * count as f64).ceil() as i64;
    buckets
        .iter()
        .find(|(_, cumulative)| *cumulative >= rank.max(1))
        .map(|(bound, _)| bound.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn sample(text: &str) -> Sample {
        let mut sample = Sample {
            at: Instant::now(),
            wall: SystemTime::now(),
            integers: BTreeMap::new(),
            others: BTreeMap::new(),
            order: Vec::new(),
        };
        sample.add(text);
        sample
    }

    #[test]
    fn any_le_field_is_a_histogram_bucket_and_unknown_fields_are_kept() {
        let sample = sample(
            "# lock\r\nlock_acquisitions:10\r\nlock_waiters:2\r\nlock_new_thing:7\r\n\
             lock_hold_ms_le_1:1\r\nlock_hold_ms_le_10:3\r\nlock_hold_ms_le_inf:4\r\n\
             lock_hold_ms_sum:40\r\nlock_hold_ms_count:4\r\nlock_mood:calm\r\n",
        );
        let report = Report::totals(&sample);
        let counters: Vec<&str> = report.counters.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(counters, ["acquisitions", "new_thing"]);
        assert_eq!(report.gauges[0].name, "waiters");
        assert_eq!(report.histograms.len(), 1);
        let hold = &report.histograms[0];
        assert_eq!(
            (hold.name.as_str(), hold.count, hold.sum),
            ("hold_ms", 4, Some(40))
        );
        assert_eq!(hold.quantiles["p50"].as_deref(), Some("10"));
        assert_eq!(hold.quantiles["p99"].as_deref(), Some("inf"));
        assert_eq!(report.other["mood"], "calm");
        let text = report.text();
        assert!(
            text.contains("hold_ms: 4 so far, mean 10.0 ms, p50 ≤ 10 ms"),
            "{text}"
        );
    }

    #[test]
    fn rates_are_the_counters_change_per_second() {
        let mut before =
            sample("lock_acquisitions:10\nlock_waiters:5\nlock_x_le_1:1\nlock_x_le_inf:1\n");
        let after =
            sample("lock_acquisitions:30\nlock_waiters:1\nlock_x_le_1:1\nlock_x_le_inf:3\n");
        before.at = after.at - Duration::from_secs(2);
        let report = Report::rates(&before, &after);
        assert_eq!(report.counters[0].per_s, Some(10.0));
        assert_eq!(report.counters[0].total, 30);
        assert_eq!(report.gauges[0].value, 1, "a gauge as it is");
        assert_eq!(report.histograms[0].count, 2, "what the interval observed");
        assert_eq!(
            report.histograms[0].quantiles["p50"].as_deref(),
            Some("inf")
        );
    }
}
