-- The Redis type of each key, for the error after a WRONGTYPE reply (which
-- names no key): which of the failed call's keys holds what. Writes nothing.
-- KEYS     the keys of the call that failed
-- Returns  {type of KEYS[1], type of KEYS[2], ...} (none, string, hash, ...)
local types = {}
for i, key in ipairs(KEYS) do
    types[i] = redis.call('type', key)['ok']
end
return types
