//! Commands on the server rather than a key: PUBLISH, PUBSUB NUMSUB, TIME.

use super::*;

pub(super) fn publish(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let channel = String::from_utf8_lossy(args[0]);
    let payload = String::from_utf8_lossy(args[1]);
    Ok(count(store.subscribers.lock().publish(&channel, &payload)))
}

/// `PUBSUB NUMSUB channel...` (the only form a script uses): each channel
/// and its count of subscribed connections.
pub(super) fn pubsub(store: &mut Store, args: &[&[u8]]) -> Outcome {
    if !args[0].eq_ignore_ascii_case(b"numsub") {
        return Err(error(
            "ERR unknown PUBSUB subcommand (MemoryBackend implements only NUMSUB)",
        ));
    }
    let subscribers = store.subscribers.lock();
    let mut reply = Vec::with_capacity(2 * (args.len() - 1));
    for channel in &args[1..] {
        reply.push(Reply::Bulk(channel.to_vec()));
        reply.push(count(subscribers.numsub(&String::from_utf8_lossy(channel))));
    }
    Ok(Reply::Array(reply))
}

pub(super) fn time(store: &mut Store, _: &[&[u8]]) -> Outcome {
    Ok(Reply::Array(vec![
        Reply::Bulk(store.wall.as_secs().to_string().into_bytes()),
        Reply::Bulk(store.wall.subsec_micros().to_string().into_bytes()),
    ]))
}
