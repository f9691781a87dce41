//! Reading and freeing a lock from outside its holders: what operators and
//! tests ask of a [`Lock`] (who holds it, whether anybody does, and freeing
//! it whoever does).

use crate::key::permit_key;
use crate::{Holder, Lock, Result};

impl Lock {
    /// Removes the lease whoever holds it (every permit's, for a
    /// semaphore). `Ok(true)` if there was one.
    ///
    /// For operators and tests: the holder is not told, and its work goes on
    /// alongside whoever takes the lock next.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`](crate::Error::InvalidName) for an empty name;
    /// [`Error::Store`](crate::Error::Store) when the
    /// store fails.
    pub async fn force_release(&self) -> Result<bool> {
        self.validate_name()?;
        let store = self.target.manager.store();
        let mut released = false;
        for slot in 0..self.target.options.permits.max(1) {
            released |= store
                .force_release(&permit_key(&self.target.key, slot))
                .await?;
        }
        Ok(released)
    }

    /// Every current holder: one for a held lock, up to
    /// [`permits`](Lock::permits) for a semaphore, none when free; for the
    /// read side ([`read`](Lock::read)), every holder of the name, readers
    /// and writer (from [`LockStore::list`](crate::LockStore::list)).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`](crate::Error::InvalidName) for an empty name;
    /// [`Error::Store`](crate::Error::Store) when the
    /// store fails.
    pub async fn holders(&self) -> Result<Vec<Holder>> {
        self.validate_name()?;
        let store = self.target.manager.store();
        if self.target.options.read {
            // A name's readers share its key: the store lists them all.
            let held = store.list(&self.target.key).await?;
            return Ok(held
                .into_iter()
                .filter(|(key, _)| **key == *self.target.key)
                .map(|(_, holder)| holder)
                .collect());
        }
        let mut holders = Vec::new();
        for slot in 0..self.target.options.permits.max(1) {
            holders.extend(store.holder(&permit_key(&self.target.key, slot)).await?);
        }
        Ok(holders)
    }

    /// Whether anybody holds the lock right now.
    ///
    /// # Errors
    ///
    /// As [`holder`](Lock::holder).
    pub async fn is_held(&self) -> Result<bool> {
        Ok(self.holder().await?.is_some())
    }

    /// Who holds the lock right now, and for how much longer. For a
    /// semaphore, the first holder found ([`holders`](Lock::holders) lists
    /// them all).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`](crate::Error::InvalidName) for an empty name;
    /// [`Error::Store`](crate::Error::Store) when the
    /// store fails.
    pub async fn holder(&self) -> Result<Option<Holder>> {
        if self.target.options.permits > 1 {
            return Ok(self.holders().await?.into_iter().next());
        }
        self.validate_name()?;
        self.target.manager.store().holder(&self.target.key).await
    }
}
