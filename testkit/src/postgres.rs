//! A PostgreSQL server of a test's own (tests/postgres/start: an unprivileged user,
//! a free loopback port, a temporary directory), stopped and removed when dropped,
//! and `psql` against it.
//!
//! ```no_run
//! use redis_lock_testkit::postgres::Postgres;
//!
//! let pg = Postgres::start().expect("PostgreSQL");
//! pg.sql("CREATE TABLE t (v text)").unwrap();
//! assert_eq!(pg.sql("SELECT count(*) FROM t").unwrap(), "0");
//! ```

use std::process::Command;

use tempfile::TempDir;

use crate::workspace_root;

pub struct Postgres {
    url: String,
    dir: TempDir,
}

impl Postgres {
    /// Starts one; the error says why not (no server installed, or its log).
    pub fn start() -> Result<Postgres, String> {
        let dir = tempfile::Builder::new()
            .prefix("redis-lock-pg")
            .tempdir()
            .map_err(|e| format!("a temporary directory: {e}"))?;
        let script = workspace_root().join("tests/postgres/start");
        let output = Command::new(&script)
            .arg(dir.path().join("pg"))
            .output()
            .map_err(|e| format!("{}: {e}", script.display()))?;
        if !output.status.success() {
            return Err(format!(
                "PostgreSQL did not start: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        let url = String::from_utf8_lossy(&output.stdout).trim().to_string();
        Ok(Postgres { url, dir })
    }

    /// `postgres://postgres@127.0.0.1:<port>/postgres`
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Runs `statement` with psql; its output, unaligned and without headers.
    pub fn sql(&self, statement: &str) -> Result<String, String> {
        let output = Command::new("psql")
            .args([
                &self.url,
                "-X",
                "-q",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-c",
                statement,
            ])
            .output()
            .map_err(|e| format!("psql: {e}"))?;
        if !output.status.success() {
            return Err(String::from_utf8_lossy(&output.stderr).trim().to_string());
        }
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = Command::new(workspace_root().join("tests/postgres/stop"))
            .arg(self.dir.path().join("pg"))
            .status();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_starts_answers_and_is_gone_when_dropped() {
        let pg = Postgres::start().unwrap();
        assert_eq!(pg.sql("SELECT 1 + 1").unwrap(), "2");
        let url = pg.url().to_string();
        drop(pg);
        let gone = Command::new("psql")
            .args([url.as_str(), "-X", "-c", "SELECT 1"])
            .output()
            .unwrap();
        assert!(!gone.status.success(), "the server is stopped");
    }
}
