//! Opening a store's connections: URLs, the command connection (one server,
//! a cluster, or the primary behind Sentinel), the release subscription
//! started and the scripts loaded up front, before the store is handed
//! out; and the time bound of each call.

use std::sync::Arc;
use std::time::Duration;

use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use ::redis::cluster::ClusterClient;
use ::redis::{AsyncConnectionConfig, Client, RedisError};
use tokio::sync::mpsc::UnboundedReceiver;

use super::acked::{AckedPool, Opener};
use super::config::{RedisConfig, STORE};
use super::scripts::Scripts;
use super::sentinel::{SentinelConnection, SentinelUrl};
use super::sharded::ShardedListener;
use super::shared::{Connection, Shared};
use super::wakeups::{Listener, Nodes};
use crate::store::kit::{
    Background, CallError, Deadline, StoreUrl, TLS_WORDS, Tls, Waiters, Watch, invalid_url, scrub,
    scrub_all, secrets, tls_explained,
};
use crate::{Error, Result};


/// The store's deadline for one call.
pub(super) fn deadline(config: &RedisConfig) -> Deadline {
    Deadline::after(config.timeout, "RedisConfig::timeout")
}

/// The deadline of a call that writes a lease: with
/// [`replica_acks`](RedisConfig::replica_acks), the time the replicas have
/// to acknowledge it on top.
pub(super) fn write_deadline(config: &RedisConfig) -> Deadline {
    match config.acks {
        Some(acks) => Deadline::after(
            config.timeout.saturating_add(acks.timeout),
            "RedisConfig::timeout (plus the replica_acks timeout)",
        ),
        None => deadline(config),
    }
}

/// How a valid URL of one server looks, for the errors.
const EXAMPLE: &str = "use a URL like redis://[user:password@]host:6379[/db], rediss://... for TLS, or redis+unix:///path/to/socket";

/// `url` read, and the certificates its `sslrootcert`, `sslcert` and
/// `sslkey` name over `configured`, those words taken out of it.
pub(super) fn read(url: &str, configured: &Tls) -> Result<(StoreUrl, Tls)> {
    let mut parsed = StoreUrl::parse(url).map_err(|why| invalid_url(url, format!("{why}; {EXAMPLE}")))?;
    let words = parsed.take_settings(&TLS_WORDS);
    let named = Tls::from_words(
        words
            .iter()
            .map(|(word, value)| (word.as_str(), value.as_str())),
    )
    .map_err(|why| Error::invalid_config(STORE, why))?;
    Ok((parsed, configured.clone().overridden_by(named)))
}

/// A client for the one server `url` names, with `configured`
/// certificates, or an error that says what a valid URL looks like (and
/// never shows the URL's password).
pub(super) fn open_client(url: &str, configured: &Tls) -> Result<Client> {
    let (parsed, tls) = read(url, configured)?;
    if parsed.hosts().len() > 1 {
        return Err(invalid_url(
            url,
            format!(
                "a {}:// URL names one server; for a cluster write redis+cluster://host:port,host:port, or several URLs separated by commas",
                parsed.scheme()
            ),
        ));
    }
    // The client reads the URL as written again from what was read here,
    // so that it takes the password `url` was read to hold.
    let client_url = parsed.to_client_url();
    if !tls.is_empty() {
        return tls_client(url, &client_url, &tls);
    }
    Client::open(client_url.as_str()).map_err(|e| {
        let why = if e.to_string().contains("TLS") || parsed.scheme().starts_with("rediss") {
            format!(
                "{e}; `rediss://` URLs need lock-core's `redis-tls` feature, and the URL must be valid"
            )
        } else {
            format!("{e}; {EXAMPLE}")
        };
        invalid_url(url, scrub(&why, url))
    })
}

/// A client for the `rediss://` server `client_url` (read from `url`)
/// that trusts `tls`'s CA and presents its client certificate.
#[cfg(feature = "redis-tls")]
fn tls_client(url: &str, client_url: &str, tls: &Tls) -> Result<Client> {
    let refused = |why: String| Error::invalid_config(STORE, why);
    if !client_url.starts_with("rediss://") {
        return Err(invalid_url(
            url,
            "a CA or client certificate (sslrootcert, sslcert, sslkey, or a Tls) is for TLS: write the URL as rediss://",
        ));
    }
    let root_cert = tls.ca_bytes().map_err(refused)?.map(|ca| ca.into_owned());
    let client_tls = tls
        .identity_bytes()
        .map_err(refused)?
        .map(|(cert, key)| ::redis::ClientTlsConfig {
            client_cert: cert.into_owned(),
            client_key: key.into_owned(),
        });
    Client::build_with_tls(
        client_url,
        ::redis::TlsCertificates {
            client_tls,
            root_cert,
        },
    )
    .map_err(|e| {
        refused(scrub(
            &format!("{e}; check the CA and client certificate files (PEM)"),
            url,
        ))
    })
}

/// Without TLS in this build: a CA or client certificate is refused.
#[cfg(not(feature = "redis-tls"))]
fn tls_client(_: &str, _: &str, _: &Tls) -> Result<Client> {
    Err(Error::invalid_config(
        STORE,
        "a CA or client certificate (sslrootcert, sslcert, sslkey, or a Tls) needs TLS, and this build has none: enable lock-core's `redis-tls` feature",
    ))
}

/// Refuses a CA or client certificate for a deployment whose TLS clients
/// the store does not build from them (a cluster, the sentinels).
pub(super) fn no_certificates(url: &str, configured: &Tls, deployment: &str) -> Result<()> {
    let (_, tls) = read(url, configured)?;
    if tls.is_empty() {
        Ok(())
    } else {
        Err(Error::invalid_config(
            STORE,
            format!(
                "a CA or client certificate (sslrootcert, sslcert, sslkey, or a Tls) is taken for one Redis server only, not for {deployment}; remove it, and use a server certificate a public CA signed"
            ),
        ))
    }
}

/// Refuses certificates in `config` for a store over a client it did not
/// build, which would leave them unused.
pub(super) fn no_certificates_given(config: &RedisConfig, client: &str) -> Result<()> {
    if config.tls.is_empty() {
        Ok(())
    } else {
        Err(Error::invalid_config(
            STORE,
            format!(
                "RedisConfig::tls names certificates, which {client} does not use: give them to the client (redis::Client::build_with_tls, or the cluster builder's certs)"
            ),
        ))
    }
}

/// A cluster client over the seed `urls`, and plain clients for the same
/// nodes to subscribe through.
pub(super) fn cluster_clients(
    urls: &[&str],
    config: &RedisConfig,
) -> Result<(ClusterClient, Vec<Client>)> {
    if urls.is_empty() {
        return Err(Error::invalid_config(
            STORE,
            "no cluster node URLs were given; pass at least one, for example \"redis://10.0.0.1:6379\"",
        ));
    }
    for url in urls {
        no_certificates(url, &config.tls, "a Redis Cluster")?;
    }
    let subscribers = urls
        .iter()
        .map(|url| open_client(url, &Tls::new()))
        .collect::<Result<Vec<_>>>()?;
    let seeds = urls
        .iter()
        .map(|url| read(url, &Tls::new()).map(|(parsed, _)| parsed.to_client_url()))
        .collect::<Result<Vec<_>>>()?;
    let client = ClusterClient::builder(seeds)
        .connection_timeout(config.timeout)
        .response_timeout(config.timeout)
        .build()
        .map_err(|e| {
            let why = format!("the cluster's node URLs cannot be used: {e}");
            let secrets: Vec<String> = urls.iter().flat_map(|url| secrets(url)).collect();
            Error::invalid_config(STORE, scrub_all(&why, &secrets))
        })?;
    Ok((client, subscribers))
}

/// Everything a store over one server needs, connected.
pub(super) async fn single(client: Client, config: RedisConfig) -> Result<Shared> {
    let node = client.get_connection_info().addr().to_string();
    // No response timeout of the connection's own: every call is already
    // bounded by the store's deadline, and a second timer per call costs
    // measurable client CPU under load.
    let manager_config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(config.timeout))
        .set_response_timeout(None)
        .set_min_delay(Duration::from_millis(50))
        .set_max_delay(Duration::from_secs(1))
        .set_number_of_retries(4);
    let connecting = ConnectionManager::new_with_config(client.clone(), manager_config);
    let manager = deadline(&config)
        .bound(connecting)
        .await
        .map_err(|e| connect_error(&node, e))?;
    let own = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(config.timeout))
        .set_response_timeout(None);
    start(
        Connection::Single(manager),
        Nodes::Fixed(vec![client.clone()]),
        Opener::Single(client, own),
        vec![node],
        config,
    )
    .await
}

/// Everything a store over the primary of a Sentinel-monitored service
/// needs, connected: the sentinels answered and named a primary that
/// answers.
pub(super) async fn sentinel(url: &str, config: RedisConfig) -> Result<Shared> {
    let parsed = SentinelUrl::parse(url).map_err(|why| invalid_url(url, why))?;
    let shown = parsed.shown();
    let connection = SentinelConnection::open(&parsed, config.timeout).await?;
    deadline(&config)
        .bound(connection.connected())
        .await
        .map_err(|e| connect_error(&shown, e))?;
    let own = connection.connection_config();
    start(
        Connection::Sentinel(connection.clone()),
        Nodes::Sentinel(connection.clone()),
        Opener::Sentinel(connection, own),
        vec![shown],
        config,
    )
    .await
}

/// Everything a store over a cluster needs, connected.
pub(super) async fn cluster(
    client: ClusterClient,
    subscribers: Vec<Client>,
    config: RedisConfig,
) -> Result<Shared> {
    if subscribers.is_empty() {
        return Err(Error::invalid_config(
            STORE,
            "no subscriber clients were given; pass a `redis::Client` for at least one cluster node",
        ));
    }
    let nodes: Vec<String> = subscribers
        .iter()
        .map(|c| c.get_connection_info().addr().to_string())
        .collect();
    let connection = deadline(&config)
        .bound(client.get_async_connection())
        .await
        .map_err(|e| connect_error(&nodes.join(","), e))?;
    start(
        Connection::Cluster(connection),
        Nodes::Fixed(subscribers),
        Opener::Cluster(client),
        nodes,
        config,
    )
    .await
}

/// Subscribes, starts the listener, and loads the scripts.
async fn start(
    connection: Connection,
    subscribers: Nodes,
    opener: Opener,
    nodes: Vec<String>,
    config: RedisConfig,
) -> Result<Shared> {
    let joined = nodes.join(",");
    let (waiters, changes) = Waiters::watched();
    let waiters = Arc::new(waiters);
    let (listener, publish) = listen(&connection, subscribers, &config, &waiters, changes)
        .await
        .map_err(|e| {
            Error::store(
                "subscribe",
                joined.clone(),
                format!("could not subscribe to release notifications: {e}"),
            )
        })?;
    // The release scripts announce the way the listener hears.
    let scripts = Scripts::new(publish, &config.channel);
    // From here the listener runs: if loading fails, dropping `shared`
    // stops it.
    let shared = Shared {
        acked: config.acks.map(|_| AckedPool::new(opener)),
        connection,
        scripts,
        waiters,
        config,
        nodes,
        _listener: listener,
        publish,
        reopen: None,
    };
    // Loaded up front so the first acquire costs one round trip; on a
    // cluster, SCRIPT LOAD reaches every primary.
    for script in shared.scripts.all() {
        let mut connection = shared.connection.clone();
        deadline(&shared.config)
            .bound(script.prepare_invoke().load_async(&mut connection))
            .await
            .map_err(|e| connect_error(&joined, e))?;
    }
    // One connection for acknowledged writes opened now, while every node
    // answers: opening one later needs them all on a cluster (a cluster
    // connection reaches every node), and a replica that hangs would hold
    // up the very write that is to find out it does not acknowledge.
    if let Some(pool) = &shared.acked {
        let opened = deadline(&shared.config)
            .bound(pool.checkout())
            .await
            .map_err(|e| connect_error(&joined, e))?;
        opened.done();
    }
    Ok(shared)
}

/// Starts the listener for release announcements, and returns it with the
/// command releases are announced by.
async fn listen(
    connection: &Connection,
    subscribers: Nodes,
    config: &RedisConfig,
    waiters: &Arc<Waiters>,
    changes: UnboundedReceiver<Watch>,
) -> std::result::Result<(Background, &'static str), CallError<RedisError>> {
    let mut listening = Background::new();
    // On a cluster, sharded pub/sub when every node has it (Redis 7): a
    // release's message then stays on the shard that owns the key.
    let changes = match (connection, &subscribers) {
        (Connection::Cluster(_), Nodes::Fixed(clients)) => {
            match ShardedListener::connect(
                clients,
                config.channel.clone(),
                config.timeout,
                Arc::clone(waiters),
                changes,
            )
            .await
            {
                Ok(listener) => {
                    listening.spawn(listener.run());
                    return Ok((listening, "SPUBLISH"));
                }
                Err((error, changes)) => {
                    tracing::info!(
                        %error,
                        "no sharded pub/sub on this cluster (it needs Redis 7 and RESP3); \
                         releases are announced with PUBLISH, which reaches every node"
                    );
                    changes
                }
            }
        }
        _ => changes,
    };
    let listener = Listener {
        subscribers,
        channel: config.channel.clone(),
        timeout: config.timeout,
        waiters: Arc::clone(waiters),
        changes,
    };
    // Connected before returning, so the very first waiter's subscription
    // is one command away.
    let (index, subscription) = listener.subscribe_any(0).await?;
    listening.spawn(listener.run(index, subscription));
    Ok((listening, "PUBLISH"))
}

fn connect_error(node: &str, error: CallError<RedisError>) -> Error {
    Error::store("connect", node, tls_explained(Box::new(error)))
}
