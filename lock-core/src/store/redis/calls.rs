//! Sending one call of a lease operation: a script call by its hash, with
//! the script loaded and the call sent again when the server does not know
//! it, and a lease write followed by `WAIT` when the store waits for
//! replicas (see [`acked`](super::acked)).

use ::redis::{Cmd, ErrorKind, FromRedisValue, Script, ServerErrorKind};

use super::acked::Checked;
use super::config::ReplicaAcks;
use super::connect;
use super::keys::{KeyArg, millis};
use super::scripts::evalsha;
use super::shared::Shared;
use crate::store::kit::{CallError, Deadline, check_key};
use crate::{Error, Result};

/// `WAIT <replicas> <timeout ms>`: what follows each lease write with
/// [`replica_acks`](super::RedisConfig::replica_acks).
fn wait(acks: ReplicaAcks) -> Cmd {
    let mut wait = Cmd::new();
    // Redis reads the timeout as a signed 64-bit count.
    let timeout = millis(acks.timeout).min(i64::MAX.unsigned_abs());
    wait.arg("WAIT").arg(acks.replicas).arg(timeout);
    wait
}

/// `WAIT`'s reply: a count of replicas.
pub(super) fn acked_count(acked: i64) -> u32 {
    u32::try_from(acked.max(0)).unwrap_or(u32::MAX)
}

impl Shared {
    /// One script call on the lease of `key`: `EVALSHA` with `keys` (the
    /// lease key and such of its companions as the script touches), then
    /// the arguments `args` appends.
    pub(super) async fn on_lease<T: FromRedisValue>(
        &self,
        operation: &'static str,
        key: &str,
        script: &Script,
        keys: &[KeyArg<'_>],
        args: impl FnOnce(&mut Cmd),
    ) -> Result<T> {
        check_key(key)?;
        let mut call = evalsha(script, keys);
        args(&mut call);
        let deadline = connect::deadline(&self.config);
        self.invoke(operation, key, script, &call, deadline).await
    }

    /// Runs one script call, built by [`evalsha`], under the operation's
    /// `deadline`; loads the script and retries when the server does not
    /// know it (it restarted, or its script cache was flushed), within what
    /// is left of that deadline.
    async fn invoke<T: FromRedisValue>(
        &self,
        operation: &'static str,
        key: &str,
        script: &Script,
        call: &Cmd,
        deadline: Deadline,
    ) -> Result<T> {
        let mut connection = self.connection.clone();
        let reply = match deadline.bound(call.query_async(&mut connection)).await {
            Err(CallError::Store(error))
                if error.kind() == ErrorKind::Server(ServerErrorKind::NoScript) =>
            {
                let reload = async {
                    script.prepare_invoke().load_async(&mut connection).await?;
                    call.query_async(&mut connection).await
                };
                deadline.bound(reload).await
            }
            reply => reply,
        };
        reply.map_err(|e| Error::store(operation, key, e))
    }

    /// [`invoke`](Shared::invoke) for a script that writes a lease: with
    /// [`replica_acks`](super::RedisConfig::replica_acks), followed on the
    /// same connection, in one pipeline, by `WAIT`, whose count of
    /// acknowledging replicas comes back too.
    pub(super) async fn invoke_write<T: FromRedisValue>(
        &self,
        operation: &'static str,
        key: &str,
        script: &Script,
        call: &Cmd,
        deadline: Deadline,
    ) -> Result<(T, Option<u32>)> {
        let Some(acks) = self.config.acks else {
            let reply = self.invoke(operation, key, script, call, deadline).await?;
            return Ok((reply, None));
        };
        let (reply, acked) = deadline
            .bound(self.acked_write(call.clone(), Some(script), acks))
            .await
            .map_err(|e| Error::store(operation, key, e))?;
        Ok((reply, Some(acked_count(acked))))
    }

    /// `write` and then `WAIT`, in one pipeline on a connection of its own
    /// (see [`acked`](super::acked)): the write's reply and the count of
    /// replicas that acknowledged it. A `script` the server does not know
    /// is loaded and the pipeline sent again. The connection goes back to
    /// the pool only once both were answered.
    pub(super) async fn acked_write<T: FromRedisValue>(
        &self,
        write: Cmd,
        script: Option<&Script>,
        acks: ReplicaAcks,
    ) -> ::redis::RedisResult<(T, i64)> {
        let mut pipeline = ::redis::pipe();
        pipeline.add_command(write).add_command(wait(acks));
        let mut own = self.checkout().await?;
        let connection = own.connection();
        let reply = match (pipeline.query_async(connection).await, script) {
            (Err(error), Some(script))
                if error.kind() == ErrorKind::Server(ServerErrorKind::NoScript) =>
            {
                script.prepare_invoke().load_async(connection).await?;
                pipeline.query_async(connection).await
            }
            (reply, _) => reply,
        }?;
        own.done();
        Ok(reply)
    }

    /// A connection of its own for one write that waits for replicas (see
    /// [`acked`](super::acked)).
    async fn checkout(&self) -> ::redis::RedisResult<Checked<'_>> {
        match &self.acked {
            Some(pool) => pool.checkout().await,
            None => Err(::redis::RedisError::from((
                ErrorKind::Client,
                "no connections for acknowledged writes without replica_acks",
            ))),
        }
    }

    /// An error when a write that took effect (`wrote`) was acknowledged by
    /// fewer replicas than asked (`acked`, from `WAIT`).
    pub(super) fn replicated(&self, wrote: bool, acked: Option<u32>) -> Result<()> {
        match (self.config.acks, acked) {
            (Some(acks), Some(acked)) if wrote && acked < acks.replicas => {
                Err(Error::NotReplicated {
                    acked,
                    wanted: acks.replicas,
                })
            }
            _ => Ok(()),
        }
    }
}
