//! What the handles of the waiting primitives without a lock (the latch,
//! both semaphores, the barrier) hold alike, written once: the client, the
//! object's name as the store knows it, the channel its waiters listen on
//! and the token that ends this handle's waits; and the one way they wait
//! on that channel.

use std::fmt;

use crate::pubsub::Wake;
use crate::telemetry::Primitive;
use crate::wait::{Attempt, Wait};
use crate::{CancellationToken, Client, Result};

/// The common part of a primitive's handle (cloned with the handle).
#[derive(Clone)]
pub(crate) struct HandleCore {
    pub(crate) client: Client,
    /// The mapped name: the key of the object (the client's prefix included).
    pub(crate) name: String,
    /// Where its waiters listen.
    pub(crate) channel: String,
    /// Ends this handle's waits from another thread (see `cancellable`).
    cancel: Option<CancellationToken>,
}

impl HandleCore {
    pub(crate) fn new(client: Client, name: String, channel: String) -> HandleCore {
        HandleCore {
            client,
            name,
            channel,
            cancel: None,
        }
    }

    /// This core, with its waits ended by `token` (the handles'
    /// `cancellable`).
    pub(crate) fn cancellable(&self, token: &CancellationToken) -> HandleCore {
        HandleCore {
            cancel: Some(token.clone()),
            ..self.clone()
        }
    }

    /// Checks the name before a call: see [`crate::names::check_name`].
    pub(crate) fn check_name(&self) -> Result<()> {
        crate::names::check_name(&self.name)
    }

    /// The client's store, as the operations take it.
    pub(crate) fn store(&self) -> &dyn crate::LockBackend {
        self.client.store()
    }

    /// The name as given to the client (less its name prefix): the
    /// handles' `name()`.
    pub(crate) fn unmapped_name(&self) -> &str {
        self.client.unmap(&self.name)
    }

    /// The start of the handle's `Debug` form: `kind { name }` (a handle
    /// shows neither its client nor its keys).
    pub(crate) fn debug<'a, 'b>(
        &self,
        f: &'a mut fmt::Formatter<'b>,
        kind: &str,
    ) -> fmt::DebugStruct<'a, 'b> {
        let mut debug = f.debug_struct(kind);
        debug.field("name", &self.name);
        debug
    }

    /// Runs `attempt` until it is done or `wait` runs out, woken by `wake`
    /// messages on this object's channel and ended early by this handle's
    /// cancellation token (see [`Client::wait_on`]).
    pub(crate) fn wait_on<T>(
        &self,
        wake: Wake,
        wait: Wait,
        primitive: Primitive,
        attempt: impl FnMut() -> Result<Attempt<T>>,
    ) -> Result<Option<T>> {
        let waiting = self
            .client
            .waiting(&self.channel, wake, wait, primitive, &self.name)
            .cancellable(self.cancel.as_ref());
        self.client.wait_on(waiting, attempt)
    }
}
