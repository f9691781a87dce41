//! Finding the primary of a service behind Sentinel, through every
//! sentinel before giving up.
//!
//! The redis crate's discovery ([`SentinelClient`]) reads each sentinel's
//! list of primaries (`SENTINEL MASTERS`) and takes the first entry for the
//! service that is not flagged down and answers `ROLE` as a master. Right
//! after a failover that list misleads: the sentinel that ran the failover
//! keeps the old primary there, flagged down, until it has reconfigured the
//! replicas, while it already answers `SENTINEL GET-MASTER-ADDR-BY-NAME`
//! with the promoted replica; the other sentinels name the old primary
//! until word reaches them. A connect made then found no primary in any
//! list and failed ("Master with given name not found in sentinel"), with
//! the new primary up and named.
//!
//! ```text
//! primary killed, sentinels agree it is down, the leader promotes R
//! leader:  MASTERS -> old (o_down)   GET-MASTER-ADDR-BY-NAME -> R
//! others:  MASTERS -> old (o_down)   GET-MASTER-ADDR-BY-NAME -> old
//! ...      the leader has reconfigured the replicas: MASTERS -> R
//! ```
//!
//! So when the lists name none, each sentinel is asked in turn, as
//! Sentinel's client guidelines say, for the address of the service's
//! primary, and the first address that answers `ROLE` as a master is the
//! primary. Only when none does is the connect refused, saying what each
//! sentinel answered.

use ::redis::sentinel::SentinelClient;
use ::redis::{
    AsyncConnectionConfig, Client, ConnectionAddr, ConnectionInfo, ErrorKind,
    IntoConnectionInfo as _, RedisConnectionInfo, RedisError, RedisResult, Value,
};

use crate::store::BoxFuture;

/// Everything needed to ask the sentinels for the primary's address
/// ourselves, and to reach the node they name.
pub(super) struct Asking {
    /// Each sentinel, in the URL's order, with its credentials and TLS.
    pub(super) sentinels: Vec<ConnectionInfo>,
    /// The name the sentinels monitor the primary under.
    pub(super) service: String,
    /// Whether the data nodes are reached over TLS.
    pub(super) tls: bool,
    /// The database and credentials of the data nodes.
    pub(super) node: RedisConnectionInfo,
}

/// A client for the primary the sentinels name: through `client`'s lists
/// of primaries, else through each sentinel's answer for the service (see
/// the [module docs](self)).
///
/// Boxed: the redis crate's discovery is a deep state machine, and nested
/// into the store's own futures it overflows the compiler's query depth in
/// the crates that call them.
pub(super) fn primary<'a>(
    client: &'a mut SentinelClient,
    asking: &'a Asking,
    config: &'a AsyncConnectionConfig,
) -> BoxFuture<'a, RedisResult<Client>> {
    Box::pin(async move {
        let listed = match client.async_get_client().await {
            Ok(primary) => return Ok(primary),
            Err(listed) => listed,
        };
        let mut answers = Vec::with_capacity(asking.sentinels.len());
        for sentinel in &asking.sentinels {
            match asking.named_by(sentinel, config).await {
                Ok(primary) => return Ok(primary),
                Err(why) => answers.push(format!("{}: {why}", sentinel.addr())),
            }
        }
        Err(RedisError::from((
            listed.kind(),
            "no sentinel names a primary for the service that answers as one",
            format!(
                "{listed}; asked each for the address of `{}`: {}",
                asking.service,
                answers.join("; ")
            ),
        )))
    })
}

impl Asking {
    /// A client for the node `sentinel` names as the service's primary,
    /// once that node answers as a primary.
    async fn named_by(
        &self,
        sentinel: &ConnectionInfo,
        config: &AsyncConnectionConfig,
    ) -> RedisResult<Client> {
        let mut asked = Client::open(sentinel.clone())?
            .get_multiplexed_async_connection_with_config(config)
            .await?;
        let named: Option<(String, u16)> = ::redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(&self.service)
            .query_async(&mut asked)
            .await?;
        let Some((host, port)) = named else {
            return Err(RedisError::from((
                ErrorKind::MasterNameNotFoundBySentinel,
                "it monitors no such service",
            )));
        };
        let addr = if self.tls {
            ConnectionAddr::TcpTls {
                host,
                port,
                insecure: false,
                tls_params: None,
            }
        } else {
            ConnectionAddr::Tcp(host, port)
        };
        let info = addr
            .into_connection_info()?
            .set_redis_settings(self.node.clone());
        let primary = Client::open(info)?;
        let mut reached = primary
            .get_multiplexed_async_connection_with_config(config)
            .await?;
        // `ROLE`, or `INFO replication` for a user allowed only that, as
        // the redis crate's own check does.
        let is_primary = match ::redis::cmd("ROLE")
            .query_async::<Vec<Value>>(&mut reached)
            .await
        {
            Ok(role) => matches!(role.first(), Some(Value::BulkString(word)) if word == b"master"),
            Err(refused) if !refused.is_io_error() => {
                let info: String = ::redis::cmd("INFO")
                    .arg("replication")
                    .query_async(&mut reached)
                    .await?;
                info.lines().any(|line| line.trim() == "role:master")
            }
            Err(broken) => return Err(broken),
        };
        if is_primary {
            Ok(primary)
        } else {
            Err(RedisError::from((
                ErrorKind::MasterNameNotFoundBySentinel,
                "the node it names does not answer as a primary",
                primary.get_connection_info().addr().to_string(),
            )))
        }
    }
}
