-- Delete a count-down latch (so its count can be set again).
-- KEYS[1]  the latch
-- KEYS[2]  its channel
-- ARGV[1]  the new-count message (1)
-- Returns  1 when it existed (and the message was published); 0 otherwise.
if redis.call('del', KEYS[1]) == 1 then
    redis.call('publish', KEYS[2], ARGV[1])
    return 1
end
return 0
