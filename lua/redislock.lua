#!lua name=redislock
-- redislock: the redis-lock contract (docs/contract.md, "Without the module") as one Lua
-- library, for servers that cannot load the module.
--
-- Two ways to load this same file:
--   * Redis 7.0+ / Valkey: `FUNCTION LOAD [REPLACE] <this file>`, then
--     `FCALL lock_acquire 1 key owner ttl [SHARED | LIMIT n]` and so on.
--   * Redis 6.2, or an ACL without FUNCTION: `SCRIPT LOAD <this file without its
--     first line>` (Lua 5.1 does not skip a `#!` line), then
--     `EVALSHA sha 1 key <function name> <arguments...>`: the function name is the
--     first argument after the keys, the rest is what FCALL would take.
--
-- Keys (docs/PROTOCOL.md gives the whole design), each read and written with the
-- lookups a call needs, never loaded whole, so a call costs O(1) in the common
-- cases and O(log n) in holders and waiters otherwise:
--   * the lock key K: a hash with the format's version (`redislock`, FORMAT) and
--     either `x` = "<format> <token>[g] <owner>" (the exclusive holding, which
--     lives as long as K) or one `h:<owner>` = "<token>[g] <expires-at>[ <limit>]"
--     per shared holding. `g` marks a grant pushed to a waiter and not collected
--     yet. K expires with the holding that ends last, so DEL K force-releases;
--   * `side(K, ':lockh')`: a sorted set of the shared holdings by expiry;
--   * `side(K, ':lockm')`: the token mark, the last token handed out, that expires
--     MARK_KEEP_MS after the last grant;
--   * the queue, while somebody waits: `side(K, ':lockq')`, a hash of the format,
--     the arrival counter (`seq`), when the queue keys expire (`until`) and one
--     `w:<owner>` = "<lease> <ttl> <x or s> <limit or 0> <queued-at>" per place;
--     `side(K, ':lockw')`, the places by arrival; `side(K, ':lockl')`, the places
--     by the time their lease lapses;
--   * one grant list per waiter, `side(K, ':lockg:' .. owner)`, that the waiter
--     BLPOPs; it expires with the grant or the place it was pushed for.
-- Side keys share K's hash slot and start with K (so `~jobs:*` ACL patterns cover
-- them); see `side`. Data of versions 1 and 2 (K and the queue hash only, read
-- whole) is upgraded to this layout by the first call that writes the lock.
--
-- Time comes from TIME where a call needs it (functions and scripts replicate
-- their effects, so replicas and the AOF get absolute expiry times, never a clock
-- reading; on Redis 7 a relative PEXPIRE is replicated as PEXPIREAT too).

-- The version of this library and of its waiting protocol (`lock_version`).
-- Every change of the stored format or of any reply makes a new version
-- (docs/PROTOCOL.md, "Versions").
local VERSION = 3
-- The version of the stored format, written in the field `redislock` of the lock
-- hash and of the queue hash, and at the head of `x`: the library version that
-- introduced it. Data of an older format is upgraded; a newer one is refused,
-- naming both versions, before anything is written: this library cannot know
-- what a newer one stores.
local FORMAT = 3
local FORMAT_TEXT = '3'
local FORMAT_FIELD = 'redislock'

-- contract.md "Commands": TTLs and timeouts up to 2^62 ms (i64::MAX / 2, as the module).
local MAX_DURATION = '4611686018427387903'
-- The module's default `lock.max-owner-len` (the library has no configs).
local MAX_OWNER_LEN = 256
-- contract.md "LOCK.ACQUIRE": LIMIT n, 1 <= n <= 2^31.
local MAX_LIMIT = 2147483648
-- Lua numbers are doubles: absolute times are kept below 2^53 ms (year 287,000),
-- where they are exact. A longer TTL is accepted and ends there.
local EXACT = 9007199254740992
-- A TTL up to this is set as it is (PEXPIRE), ending well before EXACT.
local RELATIVE_MAX = 4503599627370496
-- Tokens per millisecond of the clock floor, as the module's.
local TOKENS_PER_MS = 1000
-- A queue place's lease when the waiter names none, and the largest it may name.
-- The lease is both how often a waiter renews its place (one lock_wait and one
-- BLPOP per lease: one command a second by default, contract.md "Without the module") and
-- how long a grant pushed to it stays uncollected (at most the lease).
local DEFAULT_LEASE_MS = 2000
local DEFAULT_LEASE_TEXT = '2000'
local MAX_LEASE_MS = 60000
-- A place outlives its renewal by a quarter of its lease, so a renewal that comes a
-- little late keeps it: BLPOP times out in the event loop, up to 1000/hz ms late
-- (100 ms at the default hz 10), and the waiter's own machine may be slow to run it.
local PLACE_GRACE_DIVISOR = 4
-- How long the token mark lives after the last grant; after that the clock floor
-- covers every token it handed out.
local MARK_KEEP_MS = 3600000
local MARK_KEEP_TEXT = '3600000'
-- The queue keys expire this long after the lease of the last place written, so
-- that a renewal rarely has to move their expiry.
local QUEUE_KEEP_MS = 600000
-- At most this many lapsed holdings or places are removed by one call (the next
-- call removes more); counts of live ones never depend on it.
local SWEEP = 1000
-- Arguments per command when a call writes many fields or members (Lua 5.1's
-- unpack is bounded by its C stack).
local CHUNK = 512
-- ---------------------------------------------------------------------------
-- The fast paths: the common calls on an exclusive lock, each in as few
-- commands as the rules allow, ahead of the full path (below). Each answers what
-- the full path would, or declines (false) and leaves the call to it; the full
-- path checks the call again. Those of a release, an extend and an acquire take
-- their arguments from `args[o + 1]` on (`o`: 0 through FCALL, 1 through EVALSHA,
-- whose first argument is the name).
--
-- Through EVALSHA the whole file runs on every call, and each function it
-- defines costs about 1,000 instructions to make and collect, more than most of a
-- fast call's own work: so the fast paths come in stages (a release, an extend,
-- an acquire), each after what it needs and before what it does not, and a call
-- that its stage answers returns there, before the rest is defined.

-- The scripts path (`EVALSHA sha 1 key name arg...`): the name of the function
-- called; nil when the file is loaded by FUNCTION LOAD.
local script_name, script_hand_off
if not redis.register_function then
    -- Redis 6.2 replicates a script verbatim unless told to replicate its effects;
    -- it must be asked before the first write (a no-op on Redis 7).
    redis.replicate_commands()
    script_name = ARGV[1]
end

-- The reply for an error raised in a call (by `entry`, and by the scripts path's
-- stages, which call a fast path under pcall). Our `fail` raises a table. A
-- redis.call that fails raises a table on Redis 7 (text once pcall catches it),
-- text on Redis 6.2, which may also put the script's position before the server's
-- error and keep its wire form: "@user_script: 354: -OOM command not allowed
-- ...\r\n". Either way an error that starts with an error code (ours, or the
-- server's: OOM, READONLY, NOPERM ...) is the reply, with that code; anything else
-- is a bug, raised as it is.
local function error_reply(result)
    if type(result) == 'table' and result.err then
        result = result.err
    end
    if type(result) == 'string' then
        local text = string.gsub(result, '^@[%w_]+: ?%d+: ', '')
        text = string.gsub(string.gsub(text, '^%-', ''), '[\r\n]+$', '')
        if string.find(text, '^[A-Z]+ ') then
            return redis.error_reply(text)
        end
    end
    error(result, 0)
end

-- `x` as the fast paths read it for `owner`, without split_x's pattern where the
-- answer is a miss (they run on every call under contention, and each string
-- function a call makes costs about as much as a small Redis command): false when
-- `owner` does not hold it (one plain find of `owner` at its end, then its first
-- two bytes: no new string); true, the flags and where the head ends (the space
-- before the owner) when `owner` does; nil when the value is not of this format,
-- which split_x then refuses on the full path (as it refuses a token that is no
-- number, which counts as a miss here while `owner` is not at the end).
local X_HEAD = '^' .. FORMAT_TEXT .. ' (%d+)([gq]*) ()'
local FORMAT_BYTE = 48 + FORMAT -- FORMAT_TEXT's one digit
local function x_holder(x, owner)
    if string.find(x, owner, -#owner, true) then
        local _, flags, at = string.match(x, X_HEAD)
        if not flags then
            return nil
        end
        -- Not where the owner starts: another owner that ends with ` <owner>`.
        return at == #x - #owner + 1, flags, at - 1
    end
    local format, space = string.byte(x, 1, 2)
    if format ~= FORMAT_BYTE or space ~= 32 then
        return nil
    end
    return false
end

-- Errors are raised with `error` and turned into the reply by `entry` (an error
-- raised out of a function would get a "script: ..." suffix).
local function fail(text)
    error({ err = text })
end

-- `arg` as an error shows it: escaped as Rust's escape_ascii, `limit` bytes at most.
local function escaped(arg, limit)
    local shown = string.gsub(string.sub(arg, 1, limit), "[\\'\"]", '\\%0')
    local named = { ['\t'] = '\\t', ['\r'] = '\\r', ['\n'] = '\\n' }
    return (string.gsub(shown, '[^ -~]', function(c)
        return named[c] or string.format('\\x%02x', string.byte(c))
    end))
end

-- ---------------------------------------------------------------------------
-- lock_guard (contract.md "Fenced writes"): `FCALL lock_guard numkeys key [key ...]
-- token command [arg ...]` runs the command only while the holding of KEYS[1] with
-- that token lives, in the same call as the check; KEYS[2..] are the keys the
-- command touches. One function, first through EVALSHA (every other call defines
-- it, at about 1,000 instructions): it needs nothing after it for an exclusive
-- lock of this format, and declines (false) to the full path otherwise.

-- The largest token, 2^63 - 1, as the module's LOCK.GUARD takes it.
local MAX_TOKEN = '9223372036854775807'
-- Commands whose one key is their first argument (lower case, between spaces):
-- the guard knows their key without asking COMMAND GETKEYS (one command less).
local FIRST_KEY_ONLY = ' set get getset getdel getex setex psetex setnx append incr incrby'
    .. ' incrbyfloat decr decrby strlen setrange getrange hset hsetnx hget hmset hmget hdel'
    .. ' hincrby hincrbyfloat hgetall hexists hlen hkeys hvals lpush rpush lpushx rpushx lpop'
    .. ' rpop llen lrange lindex lset lrem ltrim sadd srem smembers sismember scard spop zadd'
    .. ' zrem zincrby zscore zrange zcard expire pexpire expireat pexpireat persist ttl pttl'
    .. ' type xadd pfadd setbit getbit json.set json.get json.del '

-- What fast_guard answers when it leaves the call to the full path (a table: no
-- reply of the command can be it).
local GUARD_FULL = {}

-- Loaded by FUNCTION LOAD, the library makes a table of them at its first guarded
-- call (FIRST_KEY, both cases; Redis 7.0 loads a library without the string
-- library), kept as the constant it is, so a call looks its command up; through
-- EVALSHA, where the file runs on every call, the string is searched instead.
local FIRST_KEY
local function first_key(command)
    if script_name then
        return string.find(FIRST_KEY_ONLY, ' ' .. string.lower(command) .. ' ', 1, true)
    end
    if not FIRST_KEY then
        FIRST_KEY = {}
        for name in string.gmatch(FIRST_KEY_ONLY, '%S+') do
            FIRST_KEY[name] = true
            FIRST_KEY[string.upper(name)] = true
        end
    end
    return FIRST_KEY[command] or FIRST_KEY[string.lower(command)]
end

-- A guarded call's error, after the token's own check: a bad token is the error
-- whatever else is wrong, as with LOCK.GUARD.
local function refuse(token, text)
    if not string.find(token, '^[1-9]%d*$') or #token > #MAX_TOKEN
        or (#token == #MAX_TOKEN and token > MAX_TOKEN) then
        fail('ERR invalid token: expected a positive integer')
    end
    fail(text)
end

local LOCK_COMMAND = 'ERR LOCK.GUARD does not run lock commands: guard a command on your data'
local LOCK_KEY = 'ERR LOCK.GUARD does not run a command on its lock key: the lock changes only through lock commands'

local function fast_guard(keys, args, o)
    local key, token, command = keys[1], args[o + 1], args[o + 2]
    if not key or not command then
        fail("ERR wrong number of arguments for 'lock_guard' command")
    end
    -- `lock.` is five bytes, the fifth a dot: only such a name is looked at.
    if string.byte(command, 5) == 46 and string.lower(string.sub(command, 1, 5)) == 'lock.' then
        refuse(token, LOCK_COMMAND)
    end
    -- The command's keys: each one declared, none the lock key.
    for j = 2, #keys do
        if keys[j] == key then
            refuse(token, LOCK_KEY)
        end
    end
    -- Its one key, or those COMMAND GETKEYS finds.
    local touched = { args[o + 3] }
    if not first_key(command) then
        touched = redis.pcall('COMMAND', 'GETKEYS', command, unpack(args, o + 3))
        if type(touched) ~= 'table' or touched.err then
            -- No keys, or no such command or arity, which its own call answers.
            touched = {}
        end
    end
    for i = 1, #touched do
        local name = touched[i]
        if name == key then
            refuse(token, LOCK_KEY)
        end
        local declared = false
        for j = 2, #keys do
            if keys[j] == name then
                declared = true
                break
            end
        end
        if not declared then
            refuse(token, 'ERR lock_guard: the command touches the key ' .. escaped(name, 64)
                .. ', which is not declared: name every key it touches after the lock key')
        end
    end
    -- The check: an exclusive holding lives while K does. Its value starts with
    -- the format, a space and the token, which this token must be whole.
    local x = redis.call('HGET', key, 'x')
    local n = #token
    if not x then
        if redis.call('EXISTS', key) == 1 then
            -- Shared holdings, an older format, or not a lock: the full path.
            return GUARD_FULL
        end
    elseif string.byte(x, 1) ~= FORMAT_BYTE or string.byte(x, 2) ~= 32 then
        return GUARD_FULL
    elseif string.find(x, token, 3, true) == 3 then
        -- The token ends with a digit and the stored one with it: the same number
        -- (the flags `g`, `q` follow the digits).
        local last, after = string.byte(token, n), string.byte(x, 3 + n)
        if last >= 48 and last <= 57 and after and (after < 48 or after > 57) then
            -- Replies as the command gives them, read as RESP2: a null inside an
            -- array stays in place (RESP3 would make it a Lua nil, which ends the
            -- array there), and a map is a flat array, in either protocol.
            return redis.call(command, unpack(args, o + 3))
        end
    end
    local held = x and string.match(x, X_HEAD)
    local shown = escaped(key, 128) .. (#key > 128 and '...' or '')
    refuse(token, 'FENCED token ' .. token .. ' does not hold ' .. shown .. ': '
        .. (held and ('it is held with token ' .. held) or 'the lock is free'))
end

-- Before the scripts path's stages (below): lock_guard's.
if script_name == 'lock_guard' then
    local ok, reply = pcall(fast_guard, KEYS, ARGV, 1)
    if not ok then
        return error_reply(reply)
    end
    if reply ~= GUARD_FULL then
        return reply
    end
end

-- lock_release by the exclusive holder, its grant collected, nobody waiting; with
-- a queue, HAND_OFF: fast_hand_off (below) may grant its head.
local HAND_OFF = 'hand off'
local function fast_release(keys, args, o)
    local owner, key = args[o + 1], keys[1]
    if #keys ~= 1 or #args ~= o + 1 or owner == '' then
        return false
    end
    local x = redis.call('HGET', key, 'x')
    if not x then
        return false
    end
    local holds, flags = x_holder(x, owner)
    if holds == false then
        -- A miss touches nothing (contract.md "Calls that change nothing": no write, WATCH holds).
        return 0
    end
    if holds and flags == '' then
        redis.call('DEL', key)
        return 1
    end
    if holds and flags == 'q' then
        return HAND_OFF
    end
    return false
end

-- The scripts path's first stage. A fast path's error is the call's reply, as
-- `entry` gives it through FCALL.
if script_name == 'lock_release' then
    local ok, reply = pcall(fast_release, KEYS, ARGV, 1)
    if not ok then
        return error_reply(reply)
    end
    script_hand_off = reply == HAND_OFF
    if reply ~= false and not script_hand_off then
        return reply
    end
end

-- Redis 7 replicates a relative PEXPIRE as PEXPIREAT; 6.2 as it is, so there the
-- library sets absolute times only. (Asked when called: Redis 7.0 loads a library
-- in an environment without most globals.)
local function relative_expiry()
    return (redis.REDIS_VERSION_NUM or 0) >= 0x070000
end

local function now_ms()
    local t = redis.call('TIME')
    -- Arithmetic on the reply's texts converts them (no library call: a fast path
    -- takes the clock).
    local us = t[2] + 0
    return t[1] * 1000 + (us - us % 1000) / 1000
end

-- Sets the expiry of `key` `ttl` ms from `now` (`ttl` as written, checked; `now`
-- the clock when the call read it already): a TTL of up to 15 digits as it is,
-- else an absolute time, which is then returned. Returns the clock too.
local function expire_key(key, ttl, now)
    if #ttl <= 15 and relative_expiry() then
        redis.call('PEXPIRE', key, ttl)
        return nil, now
    end
    now = now or now_ms()
    local at = math.min(now + tonumber(ttl), EXACT)
    redis.call('PEXPIREAT', key, string.format('%d', at))
    return at, now
end

-- `owner ttl`, the common form, for the fast paths: an owner that is not empty and
-- a ttl of up to 18 digits (no range to check), the ttl kept as written; nil for
-- anything else, which the full path reads (and refuses as it must).
local function plain_pair(owner, ttl)
    if owner == '' or #ttl >= #MAX_DURATION or not string.find(ttl, '^[1-9]%d*$') then
        return nil
    end
    return owner, ttl
end

-- lock_extend by the exclusive holder, nobody waiting.
local function fast_extend(keys, args, o)
    if #keys ~= 1 or #args ~= o + 2 then
        return false
    end
    local owner, ttl = plain_pair(args[o + 1], args[o + 2])
    if not owner then
        return false
    end
    local key = keys[1]
    local x = redis.call('HGET', key, 'x')
    if not x then
        return false
    end
    local holds, flags = x_holder(x, owner)
    if holds == false then
        return 0
    end
    if holds and (flags == '' or flags == 'g') then
        expire_key(key, ttl)
        return 1
    end
    return false
end

-- The scripts path's second stage.
if script_name == 'lock_extend' then
    local ok, reply = pcall(fast_extend, KEYS, ARGV, 1)
    if not ok then
        return error_reply(reply)
    elseif reply ~= false then
        return reply
    end
end

-- What every side key of the lock at `key` starts with, before its suffix
-- (`:lockq`, ...): each is in K's hash slot (Cluster) and starts with K (ACL key
-- patterns such as `~jobs:*`): a key without braces gets itself as a hash tag
-- after it (`jobs:1{jobs:1}:lockq`, the slot of `jobs:1`); a key with a hash tag
-- keeps it by taking the suffix alone (`{jobs}:1:lockq`). A key with
-- braces but no valid tag (`a}b`, `{}x`) also takes the suffix alone: the same
-- slot only by chance, so on a Cluster its calls are refused (CROSSSLOT, or the
-- script's own slot check) and change nothing.
local function base_of(key)
    if string.find(key, '[{}]') then
        return key
    end
    return key .. '{' .. key .. '}'
end

-- lock_acquire for `owner ttl`: an exclusive holding of another owner lives while
-- its key does (the common case under contention: one read, no clock); its holder
-- refreshes it when nobody waits and its grant was collected (no flags); a key
-- without an exclusive holding is granted by grant_free (below) when nobody
-- waits. Through EVALSHA the third stage runs this before grant_free is defined
-- (a busy acquire or a refresh needs no token): such a key is then FREE, for the
-- fourth stage.
local FREE = 'free'
local grant_free
local function fast_acquire(keys, args, o)
    if #keys ~= 1 or #args ~= o + 2 then
        return false
    end
    local owner, ttl = plain_pair(args[o + 1], args[o + 2])
    -- The library's owners are never longer (it has no config to lower the
    -- limit): the full path refuses a longer one.
    if not owner or #owner > MAX_OWNER_LEN then
        return false
    end
    local key = keys[1]
    local x = redis.call('HGET', key, 'x')
    if x then
        local holds, flags, head = x_holder(x, owner)
        if holds == false then
            return nil
        end
        if holds and flags == '' then
            expire_key(key, ttl)
            return tonumber(string.sub(x, 3, head - 1))
        end
        return false
    end
    if not grant_free then
        return FREE
    end
    return grant_free(key, base_of(key), owner, ttl)
end

-- A script may always make its first write, unless that write is one Redis
-- refuses under OOM (after any write it refuses none). A call that would not run
-- under OOM as a function (no `allow-oom`) starts with such a write that changes
-- nothing, LPUSHX of a list never made: under OOM it is refused before anything is
-- written (a grant pushed is not collected, as FCALL refuses lock_wait), and on a
-- replica answered READONLY, as FCALL is there.
local function refuse_as_fcall(keys)
    redis.call('LPUSHX', base_of(keys[1]) .. ':lockoom', '')
end

-- The scripts path's third stage. `script_refused`: the call passed
-- refuse_as_fcall already (the full path need not ask again); `script_free`: the
-- key has no exclusive holding, for the fourth stage.
local script_refused, script_free = false, false
if script_name == 'lock_acquire' and KEYS[1] then
    local refused, err = pcall(refuse_as_fcall, KEYS)
    if not refused then
        return error_reply(err)
    end
    script_refused = true
    local ok, reply = pcall(fast_acquire, KEYS, ARGV, 1)
    if not ok then
        return error_reply(reply)
    end
    script_free = reply == FREE
    if reply ~= false and not script_free then
        return reply
    end
end

local WRONGTYPE = 'WRONGTYPE Operation against a key holding the wrong kind of value'
local EXHAUSTED = 'ERR fencing tokens are exhausted on this server'


-- An integer as Redis reads it (no exponent, no fraction).
local function int(n)
    return string.format('%d', n)
end

-- contract.md "Fencing tokens": `count` tokens for this key, each greater than every
-- token handed out or seen for it before: above the mark (the last token handed
-- out, a key of its own), above `above` (a holding's token the call knows of), and
-- at least the clock floor. The floor is taken on every grant, not only when the
-- mark is missing: a mark that fell behind (a failover that lost the last writes
-- of the old master, a restore of an older RDB) must not hand out again the tokens
-- it lost. Returns the first, the last as text, and the clock (`now`, read when
-- nil).
local function mint_at(base, now, count, above)
    local mkey = base .. ':lockm'
    now = now or now_ms()
    -- The floor to the microsecond (TOKENS_PER_MS to the millisecond): two masters
    -- granting at once after a failover (the old one not demoted yet) mint the same
    -- token only in the same microsecond, not in the same millisecond.
    local t = redis.call('TIME')
    local last = t[1] * 1000000 + t[2] - 1
    if last < now * TOKENS_PER_MS - 1 then
        last = now * TOKENS_PER_MS - 1
    end
    if above and above > last then
        last = above
    end
    last = last + count
    if last >= EXACT then
        fail(EXHAUSTED)
    end
    local text = int(last)
    -- Redis 7 replicates a SET with PX as PXAT; 6.2 gets the absolute time.
    local unit, keep = 'PX', MARK_KEEP_TEXT
    if not relative_expiry() then
        unit, keep = 'PXAT', int(now + MARK_KEEP_MS)
    end
    -- The mark is written as the read (SET ... GET, one command): the clock floor
    -- is ahead of it unless grants outrun the clock, and it is written again
    -- above the mark when it is not.
    local mark = redis.pcall('SET', mkey, text, unit, keep, 'GET')
    if type(mark) == 'table' and mark.err then
        -- A key of another kind at the mark's name (not the library's) is
        -- replaced; any other refusal (an ACL) is the call's error, nothing written.
        if not string.find(mark.err, 'WRONGTYPE', 1, true) then
            fail(mark.err)
        end
        redis.call('SET', mkey, text, unit, keep)
        return last - count + 1, text, now
    end
    local seen = tonumber(mark)
    if seen and seen > last - count then
        if seen + count >= EXACT then
            -- Only a mark written by hand gets here (the clock floor reaches
            -- EXACT in the year 2255): it is put back as it was, its TTL aside.
            redis.call('SET', mkey, mark, 'KEEPTTL')
            fail(EXHAUSTED)
        end
        last = seen + count
        text = int(last)
        redis.call('SET', mkey, text, unit, keep)
    end
    return last - count + 1, text, now
end

-- A free key nobody waits for, granted to `owner` exclusively at once (its token
-- minted); false when K, the queue or a shared holdings' index is there.
grant_free = function(key, base, owner, ttl)
    if redis.call('EXISTS', key, base .. ':lockq', base .. ':lockh') ~= 0 then
        return false
    end
    local token, text, now = mint_at(base, nil, 1)
    redis.call('HSET', key, FORMAT_FIELD, FORMAT_TEXT, 'x', FORMAT_TEXT .. ' ' .. text
        .. ' ' .. owner)
    expire_key(key, ttl, now)
    return token
end

-- The scripts path's fourth stage: a free key's grant.
if script_free then
    local key = KEYS[1]
    local ok, reply = pcall(grant_free, key, base_of(key), ARGV[2], ARGV[3])
    if not ok then
        return error_reply(reply)
    elseif reply ~= false then
        return reply
    end
end

-- Runs a function, turning a `fail` into its error reply; any other error (a bug)
-- is raised as it is.
local function entry(handler)
    return function(keys, args)
        local ok, result = pcall(handler, keys, args)
        if ok then
            return result
        end
        return error_reply(result)
    end
end

-- ---------------------------------------------------------------------------
-- The waiting protocol's fast paths: lock_wait's common calls, and a release
-- that hands an exclusive lock to the head of its queue. Apart from the fast
-- paths above, so that through EVALSHA a call those answer does not define these.

-- lock_wait's `owner ttl [SHARED | LIMIT n] [LEASE ms]` as clients send it (options
-- in capitals, each at most once) for the fast paths: the owner, the ttl as
-- written, the request's mode (`shared`) and lease as the full path reads them,
-- and the middle of its place's value (w_value): "<lease> <ttl> <x or s> <limit or
-- 0>"; nil for anything else, which the full path reads.
local function wait_args(args)
    local n = #args
    if n < 2 or n > 6 then
        return nil
    end
    local owner, ttl = plain_pair(args[1], args[2])
    if not owner then
        return nil
    end
    local shared, limit, lease, i = false, '0', nil, 3
    while i <= n do
        local name, value = args[i], args[i + 1]
        if name == 'SHARED' and not shared then
            shared, i = true, i + 1
        elseif name == 'LIMIT' and limit == '0' and value and #value <= 10
            and string.find(value, '^[1-9]%d*$') then
            if tonumber(value) > MAX_LIMIT then
                return nil
            end
            shared, limit, i = true, value, i + 2
        elseif name == 'LEASE' and not lease and value and #value <= 6
            and string.find(value, '^[1-9]%d*$') then
            if tonumber(value) > MAX_LEASE_MS then
                return nil
            end
            lease, i = value, i + 2
        else
            return nil
        end
    end
    lease = lease or DEFAULT_LEASE_TEXT
    -- A ttl of up to 15 digits is exact as a Lua number: kept as written.
    local text = lease .. ' ' .. (#ttl <= 15 and ttl or int(tonumber(ttl)))
        .. (shared and ' s ' or ' x ') .. limit
    return owner, ttl, shared, tonumber(lease), text
end

-- When a place lapses unless renewed: a lease and a grace after its renewal.
local function lease_until(now, lease)
    return now + lease + math.ceil(lease / PLACE_GRACE_DIVISOR)
end

-- `text` pushed to the grant list `list`, which then expires at `expires` (as
-- written): a token granted, or a wake-up. A key of another type at the list's
-- name (not the library's) is replaced.
local function push_to(list, text, expires)
    if type(redis.pcall('RPUSH', list, text)) ~= 'number' then
        redis.call('DEL', list)
        redis.call('RPUSH', list, text)
    end
    redis.call('PEXPIREAT', list, expires)
end

-- The queue keys (hash, places by arrival, by lapse) expire at `at` (as written).
local function expire_queue(qkey, wkey, lkey, at)
    redis.call('PEXPIREAT', qkey, at)
    redis.call('PEXPIREAT', wkey, at)
    redis.call('PEXPIREAT', lkey, at)
end

-- The hand-off of lock_release (see hand_off) when the releasing exclusive holder
-- has a queue behind it whose head is a live exclusive place and no place lapsed:
-- the place leaves the queue and its waiter is granted the lock, its token pushed
-- to its grant list. Declines (before any write) anything else.
local function fast_hand_off(key)
    local base = base_of(key)
    local qkey, wkey, lkey = base .. ':lockq', base .. ':lockw', base .. ':lockl'
    local now = now_ms()
    if redis.call('ZRANGEBYSCORE', lkey, '-inf', '(' .. int(now), 'LIMIT', 0, 1)[1] then
        return false
    end
    -- The head, and whether anyone waits behind it.
    local heads = redis.call('ZRANGE', wkey, 0, 1)
    local head = heads[1]
    if not head then
        return false
    end
    local q = redis.call('HMGET', qkey, FORMAT_FIELD, 'w:' .. head)
    -- An exclusive place (parse_w's format): its lease and ttl.
    local lease, ttl = string.match(q[2] or '', '^%d+ (%d+) (%d+) x %d+ %d+$')
    -- Its lease lapses at or after `now`: no place lapsed.
    if q[1] ~= FORMAT_TEXT or not lease or not redis.call('ZSCORE', lkey, head) then
        return false
    end
    -- The place goes first: on Redis 6.2 a script's first write may not be one that
    -- Redis refuses under OOM (the mark's SET), and a release must run there too.
    if heads[2] then
        redis.call('ZREM', wkey, head)
        redis.call('ZREM', lkey, head)
        redis.call('HDEL', qkey, 'w:' .. head)
    else
        redis.call('DEL', qkey, wkey, lkey)
    end
    local _, text = mint_at(base, now, 1)
    -- Until its waiter collects it, a grant lasts at most the place's lease.
    local expires = int(math.min(now + math.min(tonumber(ttl), tonumber(lease)), EXACT))
    redis.call('HSET', key, 'x', FORMAT_TEXT .. ' ' .. text .. (heads[2] and 'gq ' or 'g ')
        .. head)
    redis.call('PEXPIREAT', key, expires)
    push_to(base .. ':lockg:' .. head, text, expires)
    return 1
end

-- wake_in (below) for the fast paths of lock_wait: a place behind an exclusive
-- holding of another owner is asked for again at its renewal (`lease` from
-- `now`), at the holding's expiry, or when the place ahead of it lapses unless
-- renewed, whichever comes first: that place's lapse `ahead` when known, else
-- looked up (the place before arrival `seq` in `wkey`) when `seq` is given.
local function wake_fast(key, now, lease, wkey, lkey, seq, ahead)
    local at = now + lease
    local pttl = redis.call('PTTL', key)
    if pttl >= 0 then
        at = math.min(at, now + pttl + 1)
    end
    if seq then
        local before = redis.call('ZREVRANGEBYSCORE', wkey, '(' .. seq, '-inf',
            'LIMIT', 0, 1)[1]
        ahead = before and tonumber(redis.call('ZSCORE', lkey, before))
    end
    if ahead then
        at = math.min(at, ahead + 1)
    end
    return math.max(at - now, 1)
end

-- The common calls of the waiting protocol (lock_wait, see below), without the
-- full path: a free key nobody waits for granted at once; the owner of a grant
-- pushed to it collecting it (its TTL no shorter than what is left); and, behind
-- another owner's exclusive holding with no place lapsed, a waiter renewing its
-- place unchanged (the queue keys' expiry far enough) or taking a new place at the
-- end of the queue, made when there is none. Each does what the full path would;
-- anything else takes it (false), declined before any write.
local function fast_wait(keys, args)
    local owner, ttl, shared, lease, text = wait_args(args)
    if #keys ~= 1 or not owner or #owner > MAX_OWNER_LEN then
        return false
    end
    local key = keys[1]
    local base = base_of(key)
    local list = base .. ':lockg:' .. owner
    local x = redis.call('HGET', key, 'x')
    if not x then
        local token = not shared and grant_free(key, base, owner, ttl)
        return token and { token, 0, list }
    end
    local holds, flags, head = x_holder(x, owner)
    if holds then
        if shared or not string.find(flags, 'g', 1, true) or #ttl > 15
            or not relative_expiry() then
            return false
        end
        local token = string.sub(x, 3, head - 1 - #flags)
        local pttl = redis.call('PTTL', key)
        if pttl < 0 or tonumber(ttl) < pttl then
            return false
        end
        -- The expiry after the write (gone_at_once, below: an expiry of 1 ms may
        -- delete K at once; written after that, K would stay without one). No
        -- OOM order to keep here: lock_wait is refused under OOM before it runs.
        redis.call('HSET', key, 'x', FORMAT_TEXT .. ' ' .. token
            .. (string.find(flags, 'q', 1, true) and 'q ' or ' ') .. owner)
        redis.call('PEXPIRE', key, ttl)
        redis.call('DEL', list)
        return { tonumber(token), 0, list }
    elseif holds == nil then
        return false
    end
    local xtoken, xflags, at = string.match(x, X_HEAD)
    if not xtoken then
        return false
    end
    local qkey, wkey, lkey = base .. ':lockq', base .. ':lockw', base .. ':lockl'
    local q = redis.call('HMGET', qkey, FORMAT_FIELD, 'seq', 'until', 'w:' .. owner)
    local now = now_ms()
    local renewed = lease_until(now, lease)
    if q[1] ~= FORMAT_TEXT then
        -- The first place. (A deleted queue hash leaves its other keys: they go.)
        if q[1] or q[2] or q[3] or q[4] then
            return false
        end
        local until_ms = int(renewed + QUEUE_KEEP_MS)
        redis.call('DEL', wkey, lkey)
        redis.call('ZADD', wkey, 1, owner)
        redis.call('HSET', qkey, FORMAT_FIELD, FORMAT_TEXT, 'seq', 1, 'w:' .. owner,
            '1 ' .. text .. ' ' .. int(now), 'until', until_ms)
        redis.call('ZADD', lkey, int(renewed), owner)
        expire_queue(qkey, wkey, lkey, until_ms)
        if not string.find(xflags, 'q', 1, true) then
            -- The holding's `q`: somebody may wait.
            redis.call('HSET', key, 'x', FORMAT_TEXT .. ' ' .. xtoken .. xflags .. 'q '
                .. string.sub(x, at))
        end
        return { 0, wake_fast(key, now, lease), list }
    end
    -- A queue whose holding does not say so was made by hand (RENAME, COPY): the
    -- full path marks it.
    if not string.find(xflags, 'q', 1, true) or redis.call('ZRANGEBYSCORE', lkey, '-inf',
        '(' .. int(now), 'LIMIT', 0, 1)[1] then
        return false
    end
    local queue_until = tonumber(q[3]) or 0
    if q[4] then
        -- A renewal, the place unchanged: its lease runs again.
        local seq, same = string.match(q[4], '^(%d+) (.*) %d+$')
        if same ~= text or queue_until < renewed or not redis.call('ZSCORE', lkey, owner) then
            return false
        end
        redis.call('ZADD', lkey, int(renewed), owner)
        return { 0, wake_fast(key, now, lease, wkey, lkey, seq), list }
    end
    -- A new place at the end of the queue, behind the last one (the queue keys all
    -- there, or the full path drops the queue).
    local seq_text = int((tonumber(q[2]) or 0) + 1)
    local last = redis.call('ZREVRANGEBYSCORE', wkey, '(' .. seq_text, '-inf', 'LIMIT', 0, 1)[1]
    -- The caller itself last (its place's field deleted by hand): the full path
    -- moves it behind the one before.
    local ahead = last and last ~= owner and redis.call('ZSCORE', lkey, last)
    if not ahead then
        return false
    end
    redis.call('ZADD', wkey, seq_text, owner)
    local value = seq_text .. ' ' .. text .. ' ' .. int(now)
    if queue_until < renewed then
        local until_ms = int(renewed + QUEUE_KEEP_MS)
        redis.call('HSET', qkey, 'seq', seq_text, 'w:' .. owner, value, 'until', until_ms)
        expire_queue(qkey, wkey, lkey, until_ms)
    else
        redis.call('HSET', qkey, 'seq', seq_text, 'w:' .. owner, value)
    end
    redis.call('ZADD', lkey, int(renewed), owner)
    return { 0, wake_fast(key, now, lease, nil, nil, nil, tonumber(ahead)), list }
end

-- The scripts path's fifth stage: lock_wait's fast paths, and the hand-off of a
-- release that the first stage left to them. From here on a call's arguments are
-- `script_args`, as FCALL would pass them.
local script_args
if script_name then
    script_args = {}
    for i = 2, #ARGV do
        script_args[i - 1] = ARGV[i]
    end
end
if script_name == 'lock_wait' or script_hand_off then
    local fast = fast_wait
    if script_hand_off then
        fast = function(keys)
            return fast_hand_off(keys[1])
        end
    elseif KEYS[1] then
        fast = function(keys, args)
            refuse_as_fcall(keys)
            script_refused = true
            return fast_wait(keys, args)
        end
    end
    local reply = entry(fast)(KEYS, script_args)
    if reply ~= false then
        return reply
    end
end

-- ---------------------------------------------------------------------------
-- The full path: every rule, for the calls the fast paths decline and for the
-- functions that have none.

-- Arguments: the checks and texts of core/src/args.rs.

local function arity(name)
    fail("ERR wrong number of arguments for '" .. name .. "' command")
end

-- A positive integer written as Redis writes it; returns its value, or 'range' for
-- one over MAX_DURATION (also past i64: out of range, not malformed), or nil.
local function duration(arg)
    if not string.find(arg, '^[1-9]%d*$') then
        return nil
    end
    if #arg > #MAX_DURATION or (#arg == #MAX_DURATION and arg > MAX_DURATION) then
        return 'range'
    end
    return tonumber(arg)
end

local function parse_owner(arg)
    if arg == '' then
        fail('ERR invalid owner: must not be empty')
    end
    return arg
end

local function parse_ttl(arg)
    local ttl = duration(arg)
    if ttl == 'range' then
        fail('ERR invalid ttl: out of range, at most ' .. MAX_DURATION .. ' ms')
    elseif not ttl then
        fail('ERR invalid ttl: expected a positive integer of milliseconds')
    end
    return ttl
end

-- An option as an error may show it: escaped as Rust's escape_ascii, 64 bytes at most.
local function printable(arg)
    return escaped(arg, 64)
end

local function check_owner_len(owner)
    if #owner > MAX_OWNER_LEN then
        fail('ERR invalid owner: ' .. #owner .. ' bytes is longer than lock.max-owner-len ('
            .. MAX_OWNER_LEN .. ')')
    end
end

-- The format a hash or a value says it is in, as read: nil (none: version-1
-- data) or the version; a newer format than this library's is refused, and
-- anything that is no version is not ours.
local function check_format(value, what)
    if value == FORMAT_TEXT then
        return FORMAT
    end
    if value == nil or value == false then
        return nil
    end
    local found = string.find(value, '^[1-9]%d?%d?$') and tonumber(value)
    if not found then
        fail(WRONGTYPE)
    end
    if found > FORMAT then
        fail('ERR ' .. what .. ' written by redislock library version ' .. found
            .. '; this server runs version ' .. VERSION .. ': load version ' .. found
            .. ' or newer (redis-lock functions load)')
    end
    return found
end

-- `command key item...` for many items, CHUNK arguments at a time.
local function call_chunked(command, key, items)
    local i = 1
    while i <= #items do
        local last = math.min(i + CHUNK - 1, #items)
        redis.call(command, key, unpack(items, i, last))
        i = last + 1
    end
end

local function parse_timeout(arg)
    if arg == '0' then
        return 0
    end
    local ms = duration(arg)
    if ms == 'range' then
        fail('ERR invalid timeout: out of range, at most ' .. MAX_DURATION .. ' ms')
    elseif not ms then
        fail('ERR invalid timeout: expected 0 (no limit) or a positive integer of milliseconds')
    end
    return ms
end

local function parse_limit(arg)
    local n = string.find(arg, '^[1-9]%d*$') and #arg <= 10 and tonumber(arg)
    if not n or n > MAX_LIMIT then
        fail('ERR invalid limit: expected an integer from 1 to ' .. MAX_LIMIT)
    end
    return n
end

local function parse_lease(arg)
    local n = string.find(arg, '^[1-9]%d*$') and #arg <= 6 and tonumber(arg)
    if not n or n > MAX_LEASE_MS then
        fail('ERR invalid lease: expected an integer of milliseconds from 1 to ' .. MAX_LEASE_MS)
    end
    return n
end

-- `owner ttl [SHARED | LIMIT n] [WAIT timeout]` (and `[LEASE ms]` for lock_wait),
-- in any order, each at most once. Returns the request. There is no arity cap:
-- the loop stops at the first repeated or unknown option (so at most five turns),
-- with the module's error for it whatever the count of arguments.
local function parse_request(args, first, lease_allowed)
    local request = {
        owner = parse_owner(args[first]),
        ttl = parse_ttl(args[first + 1]),
        ttl_arg = args[first + 1],
        shared = false,
        limit = nil,
        lease = DEFAULT_LEASE_MS,
    }
    local seen = {}
    local i = first + 2
    while i <= #args do
        local name = string.upper(args[i])
        if name == 'SHARED' then
            if seen.SHARED then
                fail('ERR syntax error: option SHARED given more than once')
            end
            seen.SHARED, request.shared = true, true
            i = i + 1
        elseif name == 'WAIT' or name == 'LIMIT' or (name == 'LEASE' and lease_allowed) then
            local value = args[i + 1]
            if value == nil then
                fail('ERR syntax error: ' .. name .. ' needs a value')
            end
            if seen[name] then
                fail('ERR syntax error: option ' .. name .. ' given more than once')
            end
            seen[name] = true
            if name == 'WAIT' then
                -- Checked as the module checks it; a function cannot block, so an
                -- acquire with WAIT behaves as without (as LOCK.ACQUIRE in a script).
                parse_timeout(value)
            elseif name == 'LIMIT' then
                request.limit = parse_limit(value)
                request.shared = true
            else
                request.lease = parse_lease(value)
            end
            i = i + 2
        else
            fail("ERR syntax error: unknown option '" .. printable(args[i]) .. "'")
        end
    end
    return request
end

-- The grant list of `owner`, a waiter of the lock of `st`.
local function grant_key(st, owner)
    return st.base .. ':lockg:' .. owner
end

-- ---------------------------------------------------------------------------
-- Values.

-- contract.md "Holdings": a holding whose expiry has passed is gone (the module's holds_at).
local function live(expires, now)
    return expires >= now
end

-- `x`, the exclusive holding: "<format> <token>[g][q] <owner>", as the token's
-- text, its flags and the owner. `g`: a grant pushed to a waiter, not collected
-- yet; `q`: somebody may wait (a queue was there when it was last written), so
-- a release, an extend or a refresh takes the full path, which hands off and
-- wakes; without it they take the fast one. Any format but this one is refused
-- (a newer) or not ours.
local function split_x(value)
    local format, token, flags, owner = string.match(value, '^(%d+) (%d+)([gq]*) (.*)$')
    if format ~= FORMAT_TEXT then
        check_format(format or 'x', 'lock')
        fail(WRONGTYPE)
    end
    return token, flags, owner
end

local function parse_x(value)
    local token, flags, owner = split_x(value)
    return {
        owner = owner,
        token = tonumber(token),
        granted = string.find(flags, 'g', 1, true) ~= nil,
        queued = string.find(flags, 'q', 1, true) ~= nil,
        exclusive = true,
    }
end

local function x_value(h)
    return FORMAT_TEXT .. ' ' .. int(h.token) .. (h.granted and 'g' or '')
        .. (h.queued and 'q ' or ' ') .. h.owner
end

-- `h:<owner>`, a shared holding: "<token>[g] <expires-at>[ <limit>]" (the form of
-- versions 1 and 2, which had no `g`).
local function parse_h(owner, value)
    local token, granted, expires, limit = string.match(value, '^(%d+)(g?) (%d+) ?(%d*)$')
    if not token then
        fail(WRONGTYPE)
    end
    return {
        owner = owner,
        token = tonumber(token),
        granted = granted == 'g',
        expires = tonumber(expires),
        limit = tonumber(limit),
    }
end

local function h_value(h)
    local value = int(h.token) .. (h.granted and 'g ' or ' ') .. int(h.expires)
    if h.limit then
        value = value .. ' ' .. int(h.limit)
    end
    return value
end

-- `w:<owner>`, a queue place: "<arrival> <lease> <ttl> <x or s> <limit or 0>
-- <queued-at>" (the arrival is its score in the places by arrival).
local function parse_w(owner, value)
    local seq, lease, ttl, shared, limit, since =
        string.match(value or '', '^(%d+) (%d+) (%d+) ([xs]) (%d+) (%d+)$')
    if not seq then
        return nil
    end
    limit = tonumber(limit)
    return {
        owner = owner,
        seq = tonumber(seq),
        lease = tonumber(lease),
        ttl = tonumber(ttl),
        shared = shared == 's',
        limit = limit > 0 and limit or nil,
        since = tonumber(since),
    }
end

local function w_value(p)
    return int(p.seq) .. ' ' .. int(p.lease) .. ' ' .. int(p.ttl) .. ' '
        .. (p.shared and 's ' or 'x ') .. int(p.limit or 0) .. ' ' .. int(p.since)
end

-- ---------------------------------------------------------------------------
-- Versions 1 and 2: K and the queue hash, read whole (the code of version 2).

-- The holdings of a lock hash of versions 1 and 2, oldest first, as version 2
-- read them: an exclusive holding lives as long as K.
local function read_old_lock(key, mode, now)
    local raw = redis.call('HGETALL', key)
    local lock = { mode = mode, holders = {} }
    for i = 1, #raw, 2 do
        local field, value = raw[i], raw[i + 1]
        if field == FORMAT_FIELD or field == 'mode' then
            -- Checked before.
        elseif string.sub(field, 1, 2) == 'h:' and #field > 2 then
            local token, expires, limit = string.match(value, '^(%d+) (%d+) ?(%d*)$')
            if not token then
                fail(WRONGTYPE)
            end
            table.insert(lock.holders, {
                owner = string.sub(field, 3),
                token = tonumber(token),
                expires = tonumber(expires),
                limit = tonumber(limit),
            })
        else
            fail(WRONGTYPE)
        end
    end
    if mode == 'exclusive' and #lock.holders == 1 then
        local h = lock.holders[1]
        local pttl = redis.call('PTTL', key)
        if pttl == -1 then
            h.expires, h.persistent = EXACT, true
        elseif pttl >= 0 then
            h.expires = math.min(now + pttl, EXACT)
        end
    end
    table.sort(lock.holders, function(a, b)
        return a.token < b.token
    end)
    return lock
end

-- The queue hash of versions 1 and 2: { mark, seq, places = { {owner, seq,
-- lease_until, lease, ttl, shared, limit, since}, ... } in arrival order, grants
-- = { [owner] = token } }. A place of six parts (before the arrival time was
-- kept) shows as waiting since `now`.
local function read_old_queue(qkey, now)
    local raw = redis.call('HGETALL', qkey)
    local queue = { mark = 0, seq = 0, places = {}, grants = {} }
    for i = 1, #raw, 2 do
        local field, value = raw[i], raw[i + 1]
        local kind, owner = string.sub(field, 1, 2), string.sub(field, 3)
        if field == 'mark' or field == 'seq' then
            queue[field] = tonumber(value) or 0
        elseif kind == 'w:' then
            local seq, until_ms, lease, ttl, shared, limit, since =
                string.match(value, '^(%d+) (%d+) (%d+) (%d+) ([xs]) (%d+) ?(%d*)$')
            if seq then
                table.insert(queue.places, {
                    owner = owner,
                    seq = tonumber(seq),
                    lease_until = tonumber(until_ms),
                    lease = tonumber(lease),
                    ttl = tonumber(ttl),
                    shared = shared == 's',
                    limit = tonumber(limit) > 0 and tonumber(limit) or nil,
                    since = tonumber(since) or now,
                })
            end
        elseif kind == 'g:' then
            queue.grants[owner] = tonumber(value)
        end
    end
    table.sort(queue.places, function(a, b)
        return a.seq < b.seq
    end)
    return queue
end

-- ---------------------------------------------------------------------------
-- One call's view of a lock, read piece by piece as the call needs it.

-- The format's version at the head of the lock hash and what kind of lock it is:
-- 'exclusive' (with `x`), 'shared', 'old' (versions 1 and 2: `mode`) or nil
-- (free). A hash that is none of these is not a lock, decided in O(1) whatever its
-- size: WRONGTYPE.
local function classify(key)
    local head = redis.call('HMGET', key, FORMAT_FIELD, 'x', 'mode')
    local format = check_format(head[1], 'lock')
    if format == FORMAT then
        if head[2] then
            return 'exclusive', parse_x(head[2])
        end
        return 'shared'
    end
    if head[3] == 'exclusive' or head[3] == 'shared' then
        return 'old', head[3]
    end
    if format or head[3] or redis.call('EXISTS', key) == 1 then
        fail(WRONGTYPE)
    end
    return nil
end

-- The state of a lock for a call that may write: kind, the exclusive holding, the
-- queue (nil when nobody waits), the clock. Data of versions 1 and 2 is
-- upgraded first.
local upgrade

local function open(key, owner)
    local base = base_of(key)
    local st = { key = key, base = base, qkey = base .. ':lockq', hkey = base .. ':lockh',
        places = {}, found = {} }
    local kind, detail = classify(key)
    -- The queue hash's head, and the caller's place in it (read with it).
    local place = 'w:' .. (owner or '')
    local qhead = redis.call('HMGET', st.qkey, FORMAT_FIELD, 'seq', 'until', place)
    local qformat = check_format(qhead[1], 'lock queue')
    st.now = now_ms()
    if kind == 'old' or (qformat ~= FORMAT and qhead[2]) then
        upgrade(st, kind == 'old' and detail or nil, qformat ~= FORMAT and qhead[2])
        kind, detail = classify(key)
        qhead = redis.call('HMGET', st.qkey, FORMAT_FIELD, 'seq', 'until', place)
    end
    st.kind, st.x = kind, detail
    if qhead[1] then
        st.queue = { seq = tonumber(qhead[2]) or 0, until_ms = tonumber(qhead[3]) or 0 }
        if owner then
            st.places[owner] = qhead[4] or false
        end
        -- A queue missing one of its keys (deleted by hand) is dropped (by
        -- `settle`); each waiter queues again at its next renewal.
        if redis.call('EXISTS', base .. ':lockw', base .. ':lockl') ~= 2 then
            st.queue, st.places, st.broken = nil, {}, true
        end
    end
    if kind == 'shared' then
        -- The holdings' index must list every holding of K: a RENAME or COPY of K,
        -- or an index deleted or expired by hand, leaves it short. Rebuilt from K.
        local fields = redis.call('HLEN', key)
        if redis.call('ZCARD', st.hkey) ~= fields - 1 then
            local raw = redis.call('HGETALL', key)
            local index = {}
            for i = 1, #raw, 2 do
                if string.sub(raw[i], 1, 2) == 'h:' then
                    local h = parse_h(string.sub(raw[i], 3), raw[i + 1])
                    table.insert(index, int(h.expires))
                    table.insert(index, h.owner)
                end
            end
            redis.call('DEL', st.hkey)
            call_chunked('ZADD', st.hkey, index)
        end
    end
    return st
end

-- The exclusive holding's expiry (its key's), for a view that needs it: EXACT
-- when K has no TTL (PERSIST by hand).
local function x_expires(st)
    local h = st.x
    if not h.expires then
        local pttl = redis.call('PTTL', st.key)
        if pttl == -1 then
            h.expires, h.persistent = EXACT, true
        else
            h.expires = math.min(st.now + math.max(pttl, 0), EXACT)
        end
    end
    return h.expires
end

-- `owner`'s holding, live or not, or nil.
local function holding_of(st, owner)
    if st.kind == 'exclusive' then
        if st.x.owner == owner then
            x_expires(st)
            return st.x
        end
    elseif st.kind == 'shared' then
        local value = redis.call('HGET', st.key, 'h:' .. owner)
        if value then
            return parse_h(owner, value)
        end
    end
    return nil
end

-- How many holdings live.
local function live_count(st)
    if st.kind == 'exclusive' then
        return 1
    elseif st.kind == 'shared' then
        return redis.call('ZCOUNT', st.hkey, st.now, '+inf')
    end
    return 0
end

-- contract.md "Waiting": may a request join the live holdings now (queue aside)?
local function fits(st, shared, limit, count)
    if count == 0 then
        return true
    end
    if st.kind == 'exclusive' or not shared then
        return false
    end
    return limit == nil or count < limit
end

-- K and the holdings' index expire with the shared holding that ends last; both
-- go when none is left (contract.md "Holdings": nothing of the lock is left).
local function store_shared_expiry(st)
    local last = redis.call('ZRANGE', st.hkey, -1, -1, 'WITHSCORES')
    if #last == 0 then
        redis.call('DEL', st.key, st.hkey)
        st.kind = nil
        return
    end
    redis.call('PEXPIREAT', st.key, last[2])
    redis.call('PEXPIREAT', st.hkey, last[2])
end

-- Removes shared holdings whose expiry passed (contract.md "Holdings": a lapsed holding is removed,
-- and propagated as removed, by effects here). An exclusive one lapses with K.
local function remove_lapsed(st)
    if st.kind ~= 'shared' then
        return
    end
    local lapsed = redis.call('ZRANGEBYSCORE', st.hkey, '-inf', '(' .. int(st.now),
        'LIMIT', 0, SWEEP)
    if #lapsed == 0 then
        return
    end
    local fields = {}
    for i, owner in ipairs(lapsed) do
        fields[i] = 'h:' .. owner
    end
    call_chunked('HDEL', st.key, fields)
    call_chunked('ZREM', st.hkey, lapsed)
    store_shared_expiry(st)
end

-- Before an exclusive grant on a shared lock whose holdings all lapsed (more than
-- one call removes): K starts afresh.
local function clear_lapsed(st)
    if st.kind == 'shared' then
        redis.call('DEL', st.key, st.hkey)
        st.kind = nil
    end
end

-- mint, for the lock of `st`: the clock read is kept in it.
local function mint(st, count, above)
    local first, text, now = mint_at(st.base, st.now, count, above)
    st.now = now
    return first, text
end

-- ---------------------------------------------------------------------------
-- The queue.

-- The queue keys: the hash (`st.qkey`), the places by arrival and by lapse.
local function wkey(st)
    st.wkey = st.wkey or st.base .. ':lockw'
    return st.wkey
end

local function lkey(st)
    st.lkey = st.lkey or st.base .. ':lockl'
    return st.lkey
end

-- The exclusive holding's `q` says whether a queue exists (see `split_x`).
local function mark_queued(st)
    if st.kind == 'exclusive' and (st.x.queued or false) ~= (st.queue ~= nil) then
        st.x.queued = st.queue ~= nil
        redis.call('HSET', st.key, 'x', x_value(st.x))
    end
end

-- The queue keys go when the last place does.
local function drop_places(st, owners)
    if #owners == 0 then
        return
    end
    call_chunked('ZREM', wkey(st), owners)
    for _, owner in ipairs(owners) do
        st.found[owner] = false
    end
    if redis.call('EXISTS', wkey(st)) == 0 then
        redis.call('DEL', st.qkey, lkey(st))
        st.queue = nil
        mark_queued(st)
        return
    end
    call_chunked('ZREM', lkey(st), owners)
    local fields = {}
    for i, owner in ipairs(owners) do
        fields[i] = 'w:' .. owner
    end
    call_chunked('HDEL', st.qkey, fields)
end

-- Places whose lease lapsed leave (a vanished waiter).
local function remove_lapsed_places(st)
    if not st.queue then
        return
    end
    local lapsed = redis.call('ZRANGEBYSCORE', lkey(st), '-inf', '(' .. int(st.now),
        'LIMIT', 0, SWEEP)
    drop_places(st, lapsed)
end

-- `owner`'s place, live or not, or nil: its details, arrival and lapse time.
local function place_of(st, owner)
    if not st.queue then
        return nil
    end
    local p = st.found[owner]
    if p ~= nil then
        return p or nil
    end
    local value = st.places[owner]
    if value == nil then
        value = redis.call('HGET', st.qkey, 'w:' .. owner)
    end
    p = parse_w(owner, value)
    if p then
        p.lease_until = tonumber(redis.call('ZSCORE', lkey(st), owner))
    end
    st.found[owner] = p and p.lease_until and p or false
    return st.found[owner] or nil
end

-- The live places among `count` of the queue from arrival rank `from` (count at
-- most CHUNK), in arrival order, and how many places were looked at.
local function places_from(st, from, count)
    local places = {}
    if not st.queue then
        return places, 0
    end
    local owners = redis.call('ZRANGE', wkey(st), from, from + count - 1)
    if #owners == 0 then
        return places, 0
    end
    local fields = {}
    for i, owner in ipairs(owners) do
        fields[i] = 'w:' .. owner
    end
    local values = redis.call('HMGET', st.qkey, unpack(fields))
    local lapses = redis.call('ZMSCORE', lkey(st), unpack(owners))
    for i, owner in ipairs(owners) do
        local p = parse_w(owner, values[i])
        if p and lapses[i] then
            p.lease_until = tonumber(lapses[i])
            if live(p.lease_until, st.now) then
                table.insert(places, p)
            end
        end
    end
    return places, #owners
end

-- The live places among the first `count` (at most CHUNK), in arrival order.
local function first_places(st, count)
    return (places_from(st, 0, count))
end

-- The holdings granted to waiters are pushed to their lists (push_to): the token,
-- which lasts as long as the grant does.
local function push_grant(st, owner, token, expires)
    push_to(grant_key(st, owner), int(token), int(expires))
end

-- New holdings for the places `granted` (all exclusive: one), each with a token,
-- and a lease of min(ttl, place lease) until the waiter collects it.
local function grant_places(st, granted)
    local first = mint(st, #granted, st.x and st.x.token)
    if not granted[1].shared then
        local p = granted[1]
        clear_lapsed(st)
        st.kind = 'exclusive'
        st.x = { owner = p.owner, token = first, granted = true, queued = st.queue ~= nil,
            exclusive = true, expires = math.min(st.now + math.min(p.ttl, p.lease), EXACT) }
        redis.call('HSET', st.key, FORMAT_FIELD, FORMAT_TEXT, 'x', x_value(st.x))
        redis.call('PEXPIREAT', st.key, int(st.x.expires))
        push_grant(st, p.owner, first, st.x.expires)
        return
    end
    if st.kind ~= 'shared' then
        -- A fresh shared lock: an index left by a DEL of K goes.
        redis.call('DEL', st.hkey)
        st.kind = 'shared'
    end
    local fields, index = { FORMAT_FIELD, FORMAT_TEXT }, {}
    for i, p in ipairs(granted) do
        local h = { owner = p.owner, token = first + i - 1, granted = true,
            expires = math.min(st.now + math.min(p.ttl, p.lease), EXACT), limit = p.limit }
        p.holding = h
        table.insert(fields, 'h:' .. p.owner)
        table.insert(fields, h_value(h))
        table.insert(index, int(h.expires))
        table.insert(index, p.owner)
    end
    call_chunked('HSET', st.key, fields)
    call_chunked('ZADD', st.hkey, index)
    store_shared_expiry(st)
    for _, p in ipairs(granted) do
        push_grant(st, p.owner, p.holding.token, p.holding.expires)
    end
end

-- contract.md "Waiting", "Without the module": the call that frees the lock grants the
-- head of the queue in the same call, then the next, as many as fit; the first
-- that does not fit stops the rest. Places whose lease lapsed leave first (a
-- vanished waiter). A grant is pushed to the waiter's own list; until the waiter
-- collects it, it lasts at most the place's lease, so a grant nobody collects frees
-- within that bound.
local function hand_off(st)
    remove_lapsed_places(st)
    if not st.queue or st.kind == 'exclusive' then
        return
    end
    local count = live_count(st)
    local granted, from, batch, done = {}, 0, 16, false
    while not done do
        local places, scanned = places_from(st, from, batch)
        from = from + scanned
        for _, p in ipairs(places) do
            if not fits(st, p.shared, p.limit, count) or not p.shared then
                done = true
                if fits(st, p.shared, p.limit, count) then
                    table.insert(granted, p)
                end
                break
            end
            table.insert(granted, p)
            count = count + 1
        end
        done = done or scanned < batch
        batch = math.min(batch * 4, CHUNK)
    end
    if #granted == 0 then
        return
    end
    local owners = {}
    for i, p in ipairs(granted) do
        owners[i] = p.owner
    end
    drop_places(st, owners)
    grant_places(st, granted)
end

-- The head of the queue, when a holding now ends earlier than it was told (a
-- refresh or an extend to a shorter TTL): a wake-up ("0", not a token) on its list
-- makes it ask again, so it claims the lapse when it happens, not at its next
-- renewal.
local function wake_head(st, before, after)
    if not st.queue or not after or after >= before then
        return
    end
    local head = first_places(st, 1)[1]
    if head then
        local list = grant_key(st, head.owner)
        -- The wake-up only hastens the head: a key of another type at the list's
        -- name (someone else's) must not fail the call after its writes (contract.md
        -- "Errors"); the head then asks again at its renewal.
        local pushed = redis.pcall('RPUSH', list, '0')
        if type(pushed) == 'number' then
            redis.call('PEXPIREAT', list, int(head.lease_until))
        end
    end
end

-- The owner collected its grant (or holds by a plain acquire): its holding loses
-- the mark of an uncollected grant, and its grant list goes.
local function collect(st, h)
    if h.granted then
        h.granted = false
        redis.call('DEL', grant_key(st, h.owner))
        return true
    end
    return false
end

-- The settling every writing call starts with: lapsed holdings removed, lapsed
-- places dropped, and the queue granted what now fits.
local function settle(st)
    if st.broken then
        redis.call('DEL', st.qkey, wkey(st), lkey(st))
        st.broken = nil
    end
    remove_lapsed(st)
    hand_off(st)
    mark_queued(st)
end

-- Ends `h` (live or not): K goes with its last holding.
local function remove_holding(st, h)
    if st.kind == 'exclusive' then
        redis.call('DEL', st.key)
        st.kind, st.x = nil, nil
        return
    end
    redis.call('HDEL', st.key, 'h:' .. h.owner)
    redis.call('ZREM', st.hkey, h.owner)
    store_shared_expiry(st)
end

-- expire_key for the exclusive holding of `st` (its clock kept), `ttl` from now:
-- the absolute time, when it is set as one.
local function expire_in(st, ttl)
    local at, now = expire_key(st.key, ttl, st.now)
    st.now = now
    return at
end

-- Whether K went when given the expiry just set: Redis 6.2 and 7.0 compare it with
-- their clock as it is then, which may be past it already (the call's clock is
-- whole milliseconds, read before; a relative one on 7.0 adds to one reading of
-- the clock and compares with the next), and then delete the key at once: with a
-- TTL of 1 ms, a few times in a thousand under load. The holdings then lapsed at
-- once: written again, K would stay without an expiry, held until a DEL. (Redis
-- 7.2 reads one clock for the whole call.)
local function gone_at_once(st)
    if redis.call('EXISTS', st.key) == 0 then
        st.kind, st.x = nil, nil
        return true
    end
    return false
end

-- Writes `h`, a holding of `st` whose expiry or grant mark changed.
local function store_holding(st, h, ttl)
    if h.exclusive then
        -- The key's expiry first: Redis 6.2 refuses a script's HSET under OOM only
        -- as its first write, and PEXPIREAT (as DEL, HDEL) it never refuses, so an
        -- extend runs under OOM there too, as LOCK.EXTEND does.
        if ttl then
            local at = expire_in(st, ttl)
            h.expires = at or math.min(st.now + tonumber(ttl), EXACT)
            h.persistent = nil
            if gone_at_once(st) then
                return
            end
        end
        if h.rewrite then
            redis.call('HSET', st.key, 'x', x_value(h))
        end
        return
    end
    if ttl then
        -- The key's expiry first (as above): it ends with the holding that ends
        -- last, this one's new expiry counted.
        h.expires = math.min(st.now + tonumber(ttl), EXACT)
        local last = h.expires
        local top = redis.call('ZREVRANGE', st.hkey, 0, 1, 'WITHSCORES')
        for i = 1, #top, 2 do
            if top[i] ~= h.owner then
                last = math.max(last, tonumber(top[i + 1]))
            end
        end
        redis.call('PEXPIREAT', st.key, int(last))
        if gone_at_once(st) then
            redis.call('DEL', st.hkey)
            return
        end
        -- The index's expiry after its write: set before it, it could go at once
        -- where K's did not (that clock runs on), and the ZADD make it again
        -- without one.
        redis.call('ZADD', st.hkey, int(h.expires), h.owner)
        redis.call('PEXPIREAT', st.hkey, int(last))
    end
    redis.call('HSET', st.key, 'h:' .. h.owner, h_value(h))
end

-- contract.md "LOCK.ACQUIRE": the owner's own live holding in the mode asked for is
-- refreshed with the same token; in the other mode it is an error. Returns the
-- holding refreshed, or nil when the owner holds nothing live here.
local function refresh(st, request)
    local h = holding_of(st, request.owner)
    if not h or not live(h.expires, st.now) then
        return nil
    end
    local mode = request.shared and 'shared' or 'exclusive'
    if st.kind ~= mode then
        fail('ERR mode conflict: owner holds this lock ' .. st.kind
            .. '; release it first (no upgrade or downgrade)')
    end
    local before = h.expires
    -- A shared holding holds with the limit last asked, as the module's.
    if request.shared then
        h.limit = request.limit
    end
    h.rewrite = collect(st, h)
    store_holding(st, h, request.ttl_arg)
    wake_head(st, before, h.expires)
    return h
end

-- Mode conflict before anything is written (as the module's plan_acquire): a live
-- holding of the owner in the other mode is an error, and nothing changes. So is a
-- live queue place of the owner in the other mode: `settle` may grant that place in
-- this very call, and the conflict would then come after the grant was written
-- (contract.md "Errors": an error changes nothing). A waiter changes its mode by
-- cancelling its place first. Returns the owner's holding, if it lives.
local function check_mode(st, request)
    local mode = request.shared and 'shared' or 'exclusive'
    local h = holding_of(st, request.owner)
    if h and live(h.expires, st.now) then
        if st.kind ~= mode then
            fail('ERR mode conflict: owner holds this lock ' .. st.kind
                .. '; release it first (no upgrade or downgrade)')
        end
        return h
    end
    local p = place_of(st, request.owner)
    if p and live(p.lease_until, st.now) then
        local queued = p.shared and 'shared' or 'exclusive'
        if queued ~= mode then
            fail('ERR mode conflict: owner waits for this lock ' .. queued
                .. '; cancel the wait first (no upgrade or downgrade)')
        end
    end
    return nil
end

-- A new holding of `owner`, granted at once (not through the queue).
local function grant_now(st, request)
    local token = mint(st, 1, st.x and st.x.token)
    if not request.shared then
        clear_lapsed(st)
        st.x = { owner = request.owner, token = token, exclusive = true,
            queued = st.queue ~= nil }
        st.kind = 'exclusive'
        redis.call('HSET', st.key, FORMAT_FIELD, FORMAT_TEXT, 'x', x_value(st.x))
        expire_in(st, request.ttl_arg)
        return token
    end
    st.now = st.now or now_ms()
    if st.kind ~= 'shared' and not st.fresh then
        -- A fresh shared lock: an index left by a DEL of K goes.
        redis.call('DEL', st.hkey)
    end
    st.kind = 'shared'
    local h = { owner = request.owner, token = token, limit = request.limit,
        expires = math.min(st.now + request.ttl, EXACT) }
    redis.call('HSET', st.key, FORMAT_FIELD, FORMAT_TEXT, 'h:' .. h.owner, h_value(h))
    redis.call('ZADD', st.hkey, int(h.expires), h.owner)
    store_shared_expiry(st)
    return token
end

-- The queue keys expire QUEUE_KEEP_MS after the lease of the last place written
-- (moved only when a place would outlive them).
local function keep_queue(st, until_ms)
    if st.queue.until_ms >= until_ms then
        return
    end
    st.queue.until_ms = until_ms + QUEUE_KEEP_MS
    local at = int(st.queue.until_ms)
    redis.call('HSET', st.qkey, 'until', at)
    expire_queue(st.qkey, wkey(st), lkey(st), at)
end

-- ---------------------------------------------------------------------------
-- Upgrade: data of versions 1 and 2 to this layout, all of a lock in one call.

upgrade = function(st, mode, old_queue)
    local lock = mode and read_old_lock(st.key, mode, st.now) or { holders = {} }
    local queue = old_queue and read_old_queue(st.qkey, st.now)
        or { mark = 0, seq = 0, places = {}, grants = {} }
    local mark = queue.mark
    local live_holders = {}
    for _, h in ipairs(lock.holders) do
        mark = math.max(mark, h.token)
        if live(h.expires, st.now) then
            h.granted = queue.grants[h.owner] == h.token
            table.insert(live_holders, h)
        end
    end
    if mode then
        -- K's own expiry stays (HSET and HDEL keep it).
        local gone = { 'mode' }
        for _, h in ipairs(lock.holders) do
            table.insert(gone, 'h:' .. h.owner)
        end
        if #live_holders == 0 then
            redis.call('DEL', st.key)
        elseif mode == 'exclusive' then
            call_chunked('HDEL', st.key, gone)
            local h = live_holders[1]
            h.exclusive = true
            for _, p in ipairs(queue.places) do
                h.queued = h.queued or live(p.lease_until, st.now)
            end
            redis.call('HSET', st.key, FORMAT_FIELD, FORMAT_TEXT, 'x', x_value(h))
        else
            call_chunked('HDEL', st.key, gone)
            local fields, index = { FORMAT_FIELD, FORMAT_TEXT }, {}
            for _, h in ipairs(live_holders) do
                table.insert(fields, 'h:' .. h.owner)
                table.insert(fields, h_value(h))
                table.insert(index, int(h.expires))
                table.insert(index, h.owner)
            end
            call_chunked('HSET', st.key, fields)
            redis.call('DEL', st.hkey)
            call_chunked('ZADD', st.hkey, index)
            local last = redis.call('ZRANGE', st.hkey, -1, -1, 'WITHSCORES')
            redis.call('PEXPIREAT', st.hkey, last[2])
        end
    end
    -- The mark: above every token the old keys knew.
    local mkey = st.base .. ':lockm'
    local current = tonumber(redis.call('GET', mkey)) or 0
    if mark > current then
        redis.call('SET', mkey, int(mark), 'PXAT', int(st.now + MARK_KEEP_MS))
    end
    if old_queue then
        redis.call('DEL', st.qkey, wkey(st), lkey(st))
        local fields, arrivals, lapses, last = { FORMAT_FIELD, FORMAT_TEXT, 'seq', int(queue.seq) }, {}, {}, 0
        for _, p in ipairs(queue.places) do
            if live(p.lease_until, st.now) then
                table.insert(fields, 'w:' .. p.owner)
                table.insert(fields, w_value(p))
                table.insert(arrivals, int(p.seq))
                table.insert(arrivals, p.owner)
                table.insert(lapses, int(p.lease_until))
                table.insert(lapses, p.owner)
                last = math.max(last, p.lease_until)
            end
        end
        if #arrivals > 0 then
            local until_ms = last + QUEUE_KEEP_MS
            table.insert(fields, 'until')
            table.insert(fields, int(until_ms))
            call_chunked('HSET', st.qkey, fields)
            call_chunked('ZADD', wkey(st), arrivals)
            call_chunked('ZADD', lkey(st), lapses)
            expire_queue(st.qkey, wkey(st), lkey(st), int(until_ms))
        end
    end
end

-- Whether a live place waits in the queue.
local function waiting(st)
    return st.queue ~= nil and redis.call('ZCOUNT', lkey(st), st.now, '+inf') > 0
end

-- ---------------------------------------------------------------------------
-- The functions.

-- FCALL lock_acquire 1 key owner ttl [SHARED | LIMIT n] [WAIT timeout]
-- contract.md "LOCK.ACQUIRE": the token of a new or refreshed holding, or nil. A newcomer
-- never goes ahead of a waiter with a live place. WAIT is checked and ignored: a
-- function cannot block (lock_wait is the waiting form).
local function lock_acquire(keys, args)
    if #keys ~= 1 or #args < 2 then
        arity('lock_acquire')
    end
    local key = keys[1]
    local request = parse_request(args, 1, false)
    -- The library's owners are never longer (it has no config to lower the
    -- limit), so a longer one never holds.
    check_owner_len(request.owner)
    local st = open(key)
    check_mode(st, request)
    settle(st)
    local held = refresh(st, request)
    if held then
        return held.token
    end
    if waiting(st) or not fits(st, request.shared, request.limit, live_count(st)) then
        return nil
    end
    return grant_now(st, request)
end

-- FCALL lock_release 1 key owner
-- contract.md "LOCK.RELEASE": 1 when owner's live holding ended, else 0; what it frees goes
-- to the queue in the same call.
local function lock_release(keys, args)
    if #keys ~= 1 or #args ~= 1 then
        arity('lock_release')
    end
    local owner = parse_owner(args[1])
    local key = keys[1]
    local st = open(key)
    local h = holding_of(st, owner)
    if not h or not live(h.expires, st.now) then
        -- A miss touches nothing unless a lapse waits to be acted on.
        settle(st)
        return 0
    end
    remove_holding(st, h)
    collect(st, h)
    settle(st)
    return 1
end

-- FCALL lock_extend 1 key owner ttl
-- contract.md "LOCK.EXTEND": 1 when owner's live holding now ends ttl from now (same
-- token), else 0; never re-creates an expired holding.
local function lock_extend(keys, args)
    if #keys ~= 1 or #args ~= 2 then
        arity('lock_extend')
    end
    local owner = parse_owner(args[1])
    parse_ttl(args[2])
    local ttl, key = args[2], keys[1]
    local st = open(key)
    settle(st)
    local h = holding_of(st, owner)
    if not h or not live(h.expires, st.now) then
        return 0
    end
    local before = h.expires
    store_holding(st, h, ttl)
    wake_head(st, before, h.expires)
    return 1
end

local function holder_map(h, now)
    -- A lock without TTL (PERSIST by hand) shows -1, as PTTL and LOCK.INFO do.
    local ttl = h.persistent and -1 or math.max(h.expires - now, 0)
    return { map = { owner = h.owner, ttl = ttl, token = h.token, limit = h.limit } }
end

-- How many waiters lock_info describes one by one (as the module's LOCK.INFO).
local QUEUE_SHOWN = 10

-- The live holdings of the lock at `key`, oldest first, and its mode; reads every
-- format, writes nothing.
local function info_holders(key, now)
    local head = redis.call('HMGET', key, FORMAT_FIELD, 'x', 'mode')
    local format = check_format(head[1], 'lock')
    local mode, holders = nil, {}
    if format == FORMAT and head[2] then
        local h = parse_x(head[2])
        local pttl = redis.call('PTTL', key)
        h.persistent = pttl == -1
        h.expires = now + math.max(pttl, 0)
        return 'exclusive', { h }
    elseif format == FORMAT then
        mode = 'shared'
        local raw = redis.call('HGETALL', key)
        for i = 1, #raw, 2 do
            if string.sub(raw[i], 1, 2) == 'h:' then
                table.insert(holders, parse_h(string.sub(raw[i], 3), raw[i + 1]))
            end
        end
    elseif head[3] == 'exclusive' or head[3] == 'shared' then
        mode = head[3]
        holders = read_old_lock(key, mode, now).holders
    elseif format or head[3] or redis.call('EXISTS', key) == 1 then
        fail(WRONGTYPE)
    end
    local alive = {}
    for _, h in ipairs(holders) do
        if live(h.expires, now) then
            table.insert(alive, h)
        end
    end
    table.sort(alive, function(a, b)
        return a.token < b.token
    end)
    return mode, alive
end

-- The live places of the queue of `key`: how many, and the first QUEUE_SHOWN.
local function info_queue(key, now)
    local base = base_of(key)
    local st = { key = key, base = base, qkey = base .. ':lockq', now = now }
    local head = redis.call('HMGET', st.qkey, FORMAT_FIELD, 'seq', 'mark')
    local format = check_format(head[1], 'lock queue')
    if format == FORMAT then
        st.queue = {}
        local count = redis.call('ZCOUNT', lkey(st), now, '+inf')
        local shown, asked = {}, QUEUE_SHOWN
        while true do
            shown = first_places(st, asked)
            if #shown >= QUEUE_SHOWN or #shown >= count or asked >= CHUNK
                or asked >= redis.call('ZCARD', wkey(st)) then
                break
            end
            asked = math.min(asked * 4, CHUNK)
        end
        while #shown > QUEUE_SHOWN do
            table.remove(shown)
        end
        return count, shown
    elseif head[2] or head[3] then
        local shown, count = {}, 0
        for _, p in ipairs(read_old_queue(st.qkey, now).places) do
            if live(p.lease_until, now) then
                count = count + 1
                if count <= QUEUE_SHOWN then
                    table.insert(shown, p)
                end
            end
        end
        return count, shown
    end
    return 0, {}
end

-- FCALL_RO lock_info 1 key (no-writes: runs on replicas)
-- contract.md "LOCK.INFO": nil when free; else mode, holders oldest first, waiters (live
-- queue places), queue (the first QUEUE_SHOWN of them: owner, mode, limit with
-- LIMIT, waited ms), and for an exclusive lock its owner, ttl and token.
local function lock_info(keys, args)
    if #keys ~= 1 or #args ~= 0 then
        arity('lock_info')
    end
    local key = keys[1]
    local now = now_ms()
    local mode, alive = info_holders(key, now)
    if #alive == 0 then
        return nil
    end
    local holders = {}
    for i, h in ipairs(alive) do
        holders[i] = holder_map(h, now)
    end
    local waiters, places = info_queue(key, now)
    local shown = {}
    for i, p in ipairs(places) do
        local w = { owner = p.owner, mode = p.shared and 'shared' or 'exclusive' }
        w.limit = p.limit
        w.waited = math.max(now - (p.since or now), 0)
        shown[i] = { map = w }
    end
    local info = { waiters = waiters, mode = mode, holders = holders, queue = shown }
    if mode == 'exclusive' and #holders == 1 then
        local only = holders[1].map
        info.owner, info.ttl, info.token = only.owner, only.ttl, only.token
    end
    return { map = info }
end

-- The full path of lock_guard, for what fast_guard leaves to it (after its checks
-- of the arguments and keys): shared holdings, whose tokens it finds among the live
-- ones, and data of an older format; anything else at K is WRONGTYPE.
local function full_guard(keys, args)
    local key, token = keys[1], args[1]
    local _, alive = info_holders(key, now_ms())
    local others = {}
    for _, h in ipairs(alive) do
        if int(h.token) == token then
            return redis.call(args[2], unpack(args, 3))
        end
        others[#others + 1] = int(h.token)
    end
    local why = 'the lock is free'
    if #others == 1 then
        why = 'it is held with token ' .. others[1]
    elseif #others > 1 then
        local listed = table.concat(others, ', ', 1, math.min(#others, 3))
        why = 'it is held with tokens ' .. listed
        if #others > 3 then
            why = why .. ' and ' .. (#others - 3) .. ' more'
        end
    end
    fail('FENCED token ' .. token .. ' does not hold ' .. escaped(key, 128)
        .. (#key > 128 and '...' or '') .. ': ' .. why)
end

-- FCALL lock_guard numkeys key [key ...] token command [arg ...]
local function lock_guard(keys, args)
    local reply = fast_guard(keys, args, 0)
    if reply == GUARD_FULL then
        return full_guard(keys, args)
    end
    return reply
end

-- FCALL lock_version 0: the library's version, which a client compares with its own.
local function lock_version(keys, args)
    if #keys ~= 0 or #args ~= 0 then
        arity('lock_version')
    end
    return VERSION
end

-- When the caller, queued, should call lock_wait again at the latest: at its
-- renewal (one lease from now; its place lasts a grace longer), at the first
-- holding's expiry (to claim the lapsed lock), or when the place ahead of it lapses
-- unless renewed (a vanished waiter). At least 1 ms.
local function wake_in(st, place)
    local at = st.now + place.lease
    if st.kind == 'exclusive' then
        at = math.min(at, x_expires(st) + 1)
    elseif st.kind == 'shared' then
        local first = redis.call('ZRANGEBYSCORE', st.hkey, st.now, '+inf',
            'WITHSCORES', 'LIMIT', 0, 1)
        if first[2] then
            at = math.min(at, tonumber(first[2]) + 1)
        end
    end
    local ahead = redis.call('ZREVRANGEBYSCORE', wkey(st), '(' .. int(place.seq), '-inf',
        'LIMIT', 0, 1)[1]
    if ahead then
        local lapse = tonumber(redis.call('ZSCORE', lkey(st), ahead))
        if lapse then
            at = math.min(at, lapse + 1)
        end
    end
    return math.max(at - st.now, 1)
end

-- FCALL lock_wait 1 key owner ttl [SHARED | LIMIT n] [LEASE ms]
-- The waiting form of lock_acquire (docs/PROTOCOL.md). Replies {token, 0, list}
-- when the owner holds the lock (granted now, refreshed, or a pushed grant
-- collected), else {0, ms, list}: the owner has a place in the queue, whose lease
-- (LEASE, 2000 ms by default) now runs again, and should BLPOP `list` (its grant
-- list) for at most `ms` before calling lock_wait again.
local function lock_wait(keys, args)
    if #keys ~= 1 or #args < 2 then
        arity('lock_wait')
    end
    local request = parse_request(args, 1, true)
    local st = open(keys[1], request.owner)
    local list = grant_key(st, request.owner)
    if not check_mode(st, request) then
        check_owner_len(request.owner)
    end
    settle(st)
    local held = refresh(st, request)
    if held then
        if place_of(st, request.owner) then
            drop_places(st, { request.owner })
        end
        return { held.token, 0, list }
    end
    local place = place_of(st, request.owner)
    if place and not live(place.lease_until, st.now) then
        drop_places(st, { request.owner })
        place = nil
    end
    if not place and not waiting(st)
        and fits(st, request.shared, request.limit, live_count(st)) then
        return { grant_now(st, request), 0, list }
    end
    local fields
    if not place then
        if not st.queue then
            -- A new queue: what a deleted queue hash left behind goes.
            redis.call('DEL', wkey(st), lkey(st))
            st.queue = { seq = 0, until_ms = 0 }
        end
        st.queue.seq = st.queue.seq + 1
        place = { owner = request.owner, seq = st.queue.seq, since = st.now }
        fields = { FORMAT_FIELD, FORMAT_TEXT, 'seq', int(place.seq) }
        redis.call('ZADD', wkey(st), int(place.seq), place.owner)
    elseif place.lease ~= request.lease or place.ttl ~= request.ttl
        or place.shared ~= request.shared or place.limit ~= request.limit then
        fields = {}
    end
    place.lease, place.ttl = request.lease, request.ttl
    place.shared, place.limit = request.shared, request.limit
    place.lease_until = lease_until(st.now, request.lease)
    if fields then
        table.insert(fields, 'w:' .. place.owner)
        table.insert(fields, w_value(place))
        redis.call('HSET', st.qkey, unpack(fields))
    end
    redis.call('ZADD', lkey(st), int(place.lease_until), place.owner)
    keep_queue(st, place.lease_until)
    mark_queued(st)
    return { 0, wake_in(st, place), list }
end

-- FCALL lock_cancel 1 key owner
-- A waiter gives up (its own timeout): its place goes, and a grant pushed to it but
-- not collected is released (handed on), so a timed-out waiter never holds the
-- lock (contract.md "Waiting"). 1 when there was a place or a grant, else 0.
local function lock_cancel(keys, args)
    if #keys ~= 1 or #args ~= 1 then
        arity('lock_cancel')
    end
    local owner = parse_owner(args[1])
    local st = open(keys[1], owner)
    local had = false
    if place_of(st, owner) then
        drop_places(st, { owner })
        had = true
    end
    local h = holding_of(st, owner)
    if h and h.granted then
        remove_holding(st, h)
        collect(st, h)
        had = true
    end
    settle(st)
    return had and 1 or 0
end

-- ---------------------------------------------------------------------------
-- Registration: FUNCTION LOAD, or the scripts path's second part.

local FUNCTIONS = {
    { name = 'lock_acquire', fast = fast_acquire, full = lock_acquire, flags = {} },
    { name = 'lock_wait', fast = fast_wait, full = lock_wait, flags = {} },
    -- As DEL and PEXPIRE: a full server must still free and keep its locks.
    { name = 'lock_release', fast = function(keys, args)
        local reply = fast_release(keys, args, 0)
        if reply == HAND_OFF then
            return fast_hand_off(keys[1])
        end
        return reply
    end, full = lock_release, flags = { 'allow-oom' } },
    { name = 'lock_extend', fast = fast_extend, full = lock_extend, flags = { 'allow-oom' } },
    { name = 'lock_cancel', full = lock_cancel, flags = { 'allow-oom' } },
    { name = 'lock_info', full = lock_info, flags = { 'no-writes' } },
    { name = 'lock_version', full = lock_version, flags = { 'no-writes' } },
    -- Refused under OOM as a whole through FCALL (a function that may write is,
    -- unless flagged allow-oom, which would let its command write under OOM).
    -- Through EVALSHA the server refuses only a command it denies under OOM, as
    -- the module does: no LPUSHX first (`own_oom`).
    { name = 'lock_guard', full = lock_guard, flags = {}, own_oom = true },
}

-- Redis 7.0 runs the load in a bare environment (no ipairs): plain loops here.
if redis.register_function then
    for i = 1, #FUNCTIONS do
        local f = FUNCTIONS[i]
        local fn = f.full
        if f.fast then
            -- The fast path, then, where it declines, the full path.
            local fast, full = f.fast, f.full
            fn = function(keys, args)
                local reply = fast(keys, args, 0)
                if reply ~= false then
                    return reply
                end
                return full(keys, args)
            end
        end
        redis.register_function({ function_name = f.name, callback = entry(fn), flags = f.flags })
    end
else
    -- The full path of a call that no fast path answered.
    local name = ARGV[1]
    for _, f in ipairs(FUNCTIONS) do
        if f.name == name then
            local fn = f.full
            if #f.flags == 0 and KEYS[1] and not script_refused and not f.own_oom then
                fn = function(keys, args)
                    refuse_as_fcall(keys)
                    return f.full(keys, args)
                end
            end
            return entry(fn)(KEYS, script_args)
        end
    end
    return redis.error_reply("ERR unknown function '" .. printable(name or '') .. "': expected lock_acquire, lock_release, lock_extend, lock_info, lock_version, lock_wait, lock_cancel or lock_guard")
end
