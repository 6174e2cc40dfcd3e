//! The bench's parts: setup, the groups, what they time, the summary.

pub(crate) mod barging;
pub(crate) mod env;
pub(crate) mod floor;
pub(crate) mod groups;
pub(crate) mod pinning;
pub(crate) mod redisson_scripts;
pub(crate) mod summary;
pub(crate) mod work;
