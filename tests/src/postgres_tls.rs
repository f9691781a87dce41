//! A PostgreSQL cluster of the test's own that speaks TLS: made with
//! `initdb` (as the `postgres` user when the tests run as root), started on
//! a free port with `ssl=on` and certificates from
//! [`crate::certs::Certificates`] (made fresh), on 127.0.0.1
//! and 127.0.0.2 (the certificate names only the first and `localhost`).
//!
//! Its `pg_hba.conf` takes TLS connections only: user `postgres` without a
//! password, user `locks` only with a client certificate the CA signed
//! (`cert` authentication, whose name must be `locks`).

use std::io;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::certs::Certificates;
use crate::harness::unavailable;
use crate::server::Server;

/// Makes the cluster in the server's directory, then runs the postmaster
/// in place of the shell (so the watchdog's `kill` reaches it).
const START: &str = r#"
set -e
dir="$1"; port="$2"; bin="$3"; certs="$4"
mkdir -p "$dir/data" "$dir/ssl"
for file in ca.crt server.crt server.key; do
  cp "$certs/$file" "$dir/ssl/$file"
done
chmod 600 "$dir/ssl/server.key"
as=""
if [ "$(id -u)" = 0 ]; then
  chown -R postgres "$dir"
  as="setpriv --reuid=postgres --regid=postgres --init-groups"
fi
$as "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -N >"$dir/initdb.log" 2>&1
cat >"$dir/data/pg_hba.conf" <<HBA
local all all trust
hostssl all locks 127.0.0.0/8 cert
hostssl all all 127.0.0.0/8 trust
hostnossl all all 127.0.0.0/8 reject
HBA
exec $as "$bin/postgres" -D "$dir/data" -p "$port" -k "$dir" \
  -c listen_addresses=127.0.0.1,127.0.0.2 -c ssl=on \
  -c ssl_cert_file="$dir/ssl/server.crt" -c ssl_key_file="$dir/ssl/server.key" \
  -c ssl_ca_file="$dir/ssl/ca.crt" -c fsync=off -c max_connections=200
"#;

/// A running TLS cluster; stopped and removed on drop.
pub struct TlsPostgres {
    server: Server,
    certs: Certificates,
}

impl TlsPostgres {
    /// Starts one, or `None` (after the notice) when PostgreSQL's server
    /// programs or `openssl` are missing.
    pub fn start() -> Option<TlsPostgres> {
        let Some(bin) = server_programs() else {
            return unavailable(
                "the PostgreSQL TLS tests",
                "no PostgreSQL server programs under /usr/lib/postgresql/*/bin (apt-get install postgresql)",
            );
        };
        if !crate::certs::openssl_installed() {
            return unavailable("the PostgreSQL TLS tests", "openssl is not on PATH");
        }
        let certs = Certificates::make().unwrap_or_else(|e| panic!("certificates: {e}"));
        let (bin, made) = (bin.display().to_string(), certs.dir.display().to_string());
        let server = Server::start(
            "sh",
            &["-c", START, "sh", "{dir}", "{port}", &bin, &made],
            ready,
        )
        .unwrap_or_else(|e| panic!("starting a PostgreSQL cluster with TLS: {e}"));
        psql(server.port, "CREATE ROLE locks LOGIN SUPERUSER")
            .map(drop)
            .unwrap_or_else(|e| panic!("creating the role `locks`: {e}"));
        Some(TlsPostgres { server, certs })
    }

    /// The rows `statement` answers as user `postgres`, one line each,
    /// columns separated by `|`.
    pub fn query(&self, statement: &str) -> io::Result<String> {
        psql(self.server.port, statement)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.server.port
    }

    /// The certificates: its CA, another CA, the client's certificate.
    pub fn certs(&self) -> &Certificates {
        &self.certs
    }

    /// A URL for `user` at `host`, with `query` (`sslmode=...&...`) after
    /// it.
    pub fn url(&self, user: &str, host: &str, query: &str) -> String {
        format!(
            "postgres://{user}@{host}:{}/postgres?{query}",
            self.server.port
        )
    }
}

/// `/usr/lib/postgresql/<newest>/bin`, when it holds `initdb`.
fn server_programs() -> Option<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin)
}

/// Answers once the postmaster takes connections (over TLS: plain ones are
/// refused by `pg_hba.conf`, which still says it is up).
fn ready(port: u16) -> io::Result<()> {
    let status = Command::new("pg_isready")
        .args(["-q", "-h", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other("not accepting connections yet"))
    }
}

/// Runs `statement` as `postgres` over TLS; its rows as text.
fn psql(port: u16, statement: &str) -> io::Result<String> {
    let out = Command::new("psql")
        .arg(format!(
            "host=127.0.0.1 port={port} user=postgres dbname=postgres sslmode=require"
        ))
        .args(["-v", "ON_ERROR_STOP=1", "-qtAc", statement])
        .stdin(Stdio::null())
        .output()?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(io::Error::other(
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    }
}
