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
-- Keys (docs/PROTOCOL.md gives the whole design):
--   * the lock key K: a hash, the fields `redislock` (its format: FORMAT) and
--     `mode`, and one field `h:<owner>` per holding
--     ("<token> <expires-at-unix-ms>", then " <limit>" for a holding granted with
--     LIMIT); its Redis expiry is that of the holding that
--     ends last, so DEL K force-releases and Redis removes K when all lapsed;
--   * the queue key `side(K, ':lockq')`: a hash of the format (`redislock`), the
--     token mark (`mark`), the arrival counter (`seq`), the queue places (`w:<owner>`) and the grants not yet
--     collected (`g:<owner>`); it expires MARK_KEEP_MS after the lock's last use;
--   * one grant list per waiter, `side(K, ':lockg:' .. owner)`, that the waiter
--     BLPOPs; it expires with the waiter's place.
-- Side keys share K's hash slot and start with K (so `~jobs:*` ACL patterns cover
-- them); see `side`.
--
-- Time comes from TIME (functions and scripts replicate their effects, so replicas
-- and the AOF get the absolute expiry times written here, never a clock reading).

-- The version of this library and of its waiting protocol (`lock_version`).
-- Every change of the stored format or of any reply makes a new version
-- (docs/PROTOCOL.md, "Versions").
local VERSION = 2
-- The version of the stored format, written in the field `redislock` of the lock
-- hash and of the queue hash: the library version that introduced it. Data
-- without the field is version-1 data, which this format extends (it only adds
-- the field). A hash of a newer format is refused, naming both versions, before
-- anything is written: this library cannot know what a newer one stores.
local FORMAT = 2
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
-- Tokens per millisecond of the clock floor, as the module's.
local TOKENS_PER_MS = 1000
-- A queue place's lease when the waiter names none, and the largest it may name.
-- The lease is both how often a waiter renews its place (one lock_wait and one
-- BLPOP per lease: one command a second by default, contract.md "Without the module") and
-- how long a grant pushed to it stays uncollected (at most the lease).
local DEFAULT_LEASE_MS = 2000
local MAX_LEASE_MS = 60000
-- A place outlives its renewal by a quarter of its lease, so a renewal that comes a
-- little late keeps it: BLPOP times out in the event loop, up to 1000/hz ms late
-- (100 ms at the default hz 10), and the waiter's own machine may be slow to run it.
local PLACE_GRACE_DIVISOR = 4
-- How long the token mark outlives the lock's last grant, release or queue change.
local MARK_KEEP_MS = 3600000

local WRONGTYPE = 'WRONGTYPE Operation against a key holding the wrong kind of value'

-- Errors are raised with `error` and turned into the reply by `entry` (an error
-- raised out of a function would get a "script: ..." suffix).
local function fail(text)
    error({ err = text })
end

local function arity(name)
    fail("ERR wrong number of arguments for '" .. name .. "' command")
end

-- The `redislock` field of a lock hash (`what` = 'lock') or a queue hash ('lock
-- queue'), as read: nil (version-1 data) or a format this library reads passes;
-- a newer format is refused; anything else is not ours.
local function check_format(value, what)
    if value == nil or value == false then
        return
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
end

-- An integer as Redis reads it (no exponent, no fraction).
local function int(n)
    return string.format('%d', n)
end

local function now_ms()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- ---------------------------------------------------------------------------
-- Arguments: the checks and texts of core/src/args.rs.

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

-- An option as an error may show it: escaped as Rust's escape_ascii, 64 bytes at most.
local function printable(arg)
    local shown = string.gsub(string.sub(arg, 1, 64), "[\\'\"]", '\\%0')
    local named = { ['\t'] = '\\t', ['\r'] = '\\r', ['\n'] = '\\n' }
    return (string.gsub(shown, '[^ -~]', function(c)
        return named[c] or string.format('\\x%02x', string.byte(c))
    end))
end

-- `owner ttl [SHARED | LIMIT n] [WAIT timeout]` (and `[LEASE ms]` for lock_wait),
-- in any order, each at most once. Returns the request. There is no arity cap:
-- the loop stops at the first repeated or unknown option (so at most five turns),
-- with the module's error for it whatever the count of arguments.
local function parse_request(args, first, lease_allowed)
    local request = {
        owner = parse_owner(args[first]),
        ttl = parse_ttl(args[first + 1]),
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

-- ---------------------------------------------------------------------------
-- Keys.

-- A side key of the lock at `key`, in its hash slot (Cluster) and starting with it
-- (ACL key patterns such as `~jobs:*`): a key without braces gets itself as a
-- hash tag after it (`jobs:1{jobs:1}:lockq`, the slot of `jobs:1`); a key with a
-- hash tag keeps it by taking the suffix alone (`{jobs}:1:lockq`). A key with
-- braces but no valid tag (`a}b`, `{}x`) also takes the suffix alone: the same
-- slot only by chance, so on a Cluster its calls are refused (CROSSSLOT, or the
-- script's own slot check) and change nothing.
local function side(key, suffix)
    if string.find(key, '[{}]') then
        return key .. suffix
    end
    return key .. '{' .. key .. '}' .. suffix
end

local function queue_key(key)
    return side(key, ':lockq')
end

local function grant_key(key, owner)
    return side(key, ':lockg:' .. owner)
end

-- ---------------------------------------------------------------------------
-- State: the lock hash and the queue hash, read once per call.

-- contract.md "Holdings": a holding whose expiry has passed is gone (the module's holds_at).
local function live(expires, now)
    return expires >= now
end

-- The lock at `key`: { mode = 'exclusive' | 'shared' | nil, holders = { {owner,
-- token, expires, persistent}, ... } oldest first (by token: tokens grow in grant
-- order) }.
local function load_lock(key, now)
    -- Whether `key` is a lock, decided in O(1) before reading it all: its format
    -- (a newer library's hash may hold anything), then its mode, which every lock
    -- hash has. A hash without one is not a lock, however large (someone's data,
    -- or the library's own queue hash): reading it whole would hold the server up.
    local head = redis.pcall('HMGET', key, FORMAT_FIELD, 'mode')
    if head.err then
        -- WRONGTYPE, or on a Cluster a key of another slot (a key with braces but no
        -- hash tag): the server's own error, before anything was written.
        fail(head.err)
    end
    check_format(head[1], 'lock')
    if head[2] ~= 'exclusive' and head[2] ~= 'shared' then
        if head[2] or redis.call('EXISTS', key) == 1 then
            fail(WRONGTYPE)
        end
        return { holders = {} }
    end
    local raw = redis.call('HGETALL', key)
    local lock = { holders = {} }
    for i = 1, #raw, 2 do
        local field, value = raw[i], raw[i + 1]
        if field == FORMAT_FIELD then
            -- Checked above.
        elseif field == 'mode' and (value == 'exclusive' or value == 'shared') then
            lock.mode = value
        elseif string.sub(field, 1, 2) == 'h:' and #field > 2 then
            -- "<token> <expires-at>", then " <limit>" for a holding granted with one.
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
            -- A hash that is not a lock.
            fail(WRONGTYPE)
        end
    end
    if #raw > 0 and not lock.mode then
        fail(WRONGTYPE)
    end
    -- An exclusive lock's one holding lives as long as its key, as the module's
    -- (docs/commands.md, "by hand"): PEXPIRE sets its TTL, PERSIST leaves it without one,
    -- held until released or deleted. Shared holdings keep each their own lease:
    -- a key TTL set by hand ends those that would outlive it (with the key), and
    -- lengthens none.
    if lock.mode == 'exclusive' and #lock.holders == 1 then
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

-- The queue at `qkey`: { mark, seq, places = { {owner, seq, lease_until, lease,
-- ttl, shared, limit}, ... } in arrival order, grants = { [owner] = token } }.
local function load_queue(qkey)
    local raw = redis.pcall('HGETALL', qkey)
    if raw.err then
        -- WRONGTYPE, or on a Cluster a key of another slot (a key with braces but no
        -- hash tag): the server's own error, before anything was written.
        fail(raw.err)
    end
    for i = 1, #raw, 2 do
        if raw[i] == FORMAT_FIELD then
            check_format(raw[i + 1], 'lock queue')
        end
    end
    local queue = { mark = 0, seq = 0, places = {}, grants = {} }
    for i = 1, #raw, 2 do
        local field, value = raw[i], raw[i + 1]
        local kind, owner = string.sub(field, 1, 2), string.sub(field, 3)
        if field == 'mark' or field == 'seq' then
            queue[field] = tonumber(value) or 0
        elseif kind == 'w:' then
            -- The arrival time is last: a place stored before it was kept has none.
            local seq, lease_until, lease, ttl, shared, limit, since =
                string.match(value, '^(%d+) (%d+) (%d+) (%d+) ([xs]) (%d+) ?(%d*)$')
            if seq then
                table.insert(queue.places, {
                    owner = owner,
                    seq = tonumber(seq),
                    lease_until = tonumber(lease_until),
                    lease = tonumber(lease),
                    ttl = tonumber(ttl),
                    shared = shared == 's',
                    limit = tonumber(limit) > 0 and tonumber(limit) or nil,
                    since = tonumber(since),
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

-- One call's view of a lock: its keys, its state, and what the call changed.
local function open(key)
    local state = {
        key = key,
        qkey = queue_key(key),
        now = now_ms(),
    }
    state.lock = load_lock(key, state.now)
    state.queue = load_queue(state.qkey)
    return state
end

local function holding_of(state, owner)
    for _, h in ipairs(state.lock.holders) do
        if h.owner == owner then
            return h
        end
    end
    return nil
end

local function live_count(state)
    local n = 0
    for _, h in ipairs(state.lock.holders) do
        if live(h.expires, state.now) then
            n = n + 1
        end
    end
    return n
end

-- The latest expiry of the live holdings, or nil when none lives.
local function last_expiry(state)
    local last = nil
    for _, h in ipairs(state.lock.holders) do
        if live(h.expires, state.now) and (not last or h.expires > last) then
            last = h.expires
        end
    end
    return last
end

-- Writes the lock's holdings back: the key goes when none lives (contract.md "Holdings":
-- nothing of the lock is left), else expires with the holding that ends last.
local function store_lock(state)
    local last = last_expiry(state)
    if not last then
        redis.call('DEL', state.key)
        state.lock = { holders = {} }
        return
    end
    redis.call('PEXPIREAT', state.key, int(last))
end

local function write_holding(state, h)
    local value = int(h.token) .. ' ' .. int(h.expires)
    if h.limit then
        value = value .. ' ' .. int(h.limit)
    end
    redis.call('HSET', state.key, FORMAT_FIELD, FORMAT, 'mode', state.lock.mode,
        'h:' .. h.owner, value)
end

-- Removes lapsed holdings (an exclusive one lapses with its key, but Redis judges
-- that with its own clock reading, which may be a millisecond behind ours).
-- contract.md "Holdings": a lapsed holding is removed, and propagated as removed (by effects here).
local function remove_lapsed(state)
    local kept, lapsed = {}, {}
    for _, h in ipairs(state.lock.holders) do
        if live(h.expires, state.now) then
            table.insert(kept, h)
        else
            table.insert(lapsed, 'h:' .. h.owner)
        end
    end
    if #lapsed == 0 then
        return
    end
    state.lock.holders = kept
    if #kept == 0 then
        redis.call('DEL', state.key)
        state.lock = { holders = {} }
    else
        redis.call('HDEL', state.key, unpack(lapsed))
    end
end

-- contract.md "Waiting": may a request join the live holdings now (queue aside)?
local function fits(state, shared, limit)
    local count = live_count(state)
    if count == 0 then
        return true
    end
    if state.lock.mode == 'exclusive' or not shared then
        return false
    end
    return limit == nil or count < limit
end

-- contract.md "Fencing tokens": greater than every token handed out for this key: the mark
-- kept in the queue key, the live holdings' tokens, and the clock floor (which
-- covers a mark that expired or was lost).
local function mint(state)
    local token = math.max(state.queue.mark + 1, state.now * TOKENS_PER_MS)
    for _, h in ipairs(state.lock.holders) do
        token = math.max(token, h.token + 1)
    end
    if token >= EXACT then
        fail('ERR fencing tokens are exhausted on this server')
    end
    state.queue.mark = token
    return token
end

-- A new holding for `owner` (shared: granted with `limit`, if any); returns it. The
-- caller writes the queue key.
local function grant(state, owner, shared, expires, limit)
    local token = mint(state)
    local h = { owner = owner, token = token, expires = math.min(expires, EXACT) }
    if shared then
        h.limit = limit
    end
    state.lock.mode = shared and 'shared' or 'exclusive'
    table.insert(state.lock.holders, h)
    write_holding(state, h)
    store_lock(state)
    return h
end

-- Writes the queue key back after a change: mark, seq, places, grants; it expires
-- MARK_KEEP_MS after the later of now and the lock's end.
local function store_queue(state, changes)
    local q = state.queue
    local fields = { FORMAT_FIELD, FORMAT, 'mark', int(q.mark), 'seq', int(q.seq) }
    for _, f in ipairs(changes or {}) do
        table.insert(fields, f)
    end
    redis.call('HSET', state.qkey, unpack(fields))
    local until_ms = math.max(last_expiry(state) or state.now, state.now)
    redis.call('PEXPIREAT', state.qkey, int(math.min(until_ms + MARK_KEEP_MS, EXACT)))
end

local function drop_fields(state, fields)
    if #fields > 0 then
        redis.call('HDEL', state.qkey, unpack(fields))
    end
end

-- contract.md "Waiting", "Without the module": the call that frees the lock grants the
-- head of the queue in the same call, then the next, as many as fit; the first
-- that does not fit stops the rest. Places whose lease lapsed leave first (a
-- vanished waiter). A grant is pushed to the waiter's own list; until the waiter
-- collects it, it lasts at most the place's lease, so a grant nobody collects frees
-- within that bound.
local function hand_off(state)
    local places, gone, kept = state.queue.places, {}, {}
    for _, p in ipairs(places) do
        if live(p.lease_until, state.now) then
            table.insert(kept, p)
        else
            table.insert(gone, 'w:' .. p.owner)
        end
    end
    -- Grants that lapsed uncollected, or whose holding is gone, are forgotten.
    for owner, token in pairs(state.queue.grants) do
        local h = holding_of(state, owner)
        if not h or h.token ~= token or not live(h.expires, state.now) then
            table.insert(gone, 'g:' .. owner)
            state.queue.grants[owner] = nil
        end
    end
    drop_fields(state, gone)
    state.queue.places = kept
    local granted = {}
    while #state.queue.places > 0 do
        local p = state.queue.places[1]
        if not fits(state, p.shared, p.limit) then
            break
        end
        table.remove(state.queue.places, 1)
        local h = grant(state, p.owner, p.shared, state.now + math.min(p.ttl, p.lease), p.limit)
        state.queue.grants[p.owner] = h.token
        table.insert(granted, { p = p, h = h })
    end
    if #granted == 0 then
        return
    end
    local changes, removed = {}, {}
    for _, g in ipairs(granted) do
        table.insert(removed, 'w:' .. g.p.owner)
        table.insert(changes, 'g:' .. g.p.owner)
        table.insert(changes, int(g.h.token))
    end
    redis.call('HDEL', state.qkey, unpack(removed))
    store_queue(state, changes)
    for _, g in ipairs(granted) do
        local list = grant_key(state.key, g.p.owner)
        redis.call('DEL', list)
        redis.call('RPUSH', list, int(g.h.token))
        redis.call('PEXPIREAT', list, int(g.h.expires))
    end
end

-- A holding now ends earlier than the head of the queue was told (a refresh or an
-- extend to a shorter TTL): a wake-up ("0", not a token) on the head's list makes
-- it ask again, so it claims the lapse when it happens, not at its next renewal.
local function wake_head(state, before, after)
    local head = state.queue.places[1]
    if head and after < before then
        local list = grant_key(state.key, head.owner)
        -- The wake-up only hastens the head: a key of another type at the list's
        -- name (someone else's) must not fail the call after its writes
        -- (contract.md "Errors"); the head then asks again at its renewal.
        local pushed = redis.pcall('RPUSH', list, '0')
        if type(pushed) == 'number' then
            redis.call('PEXPIREAT', list, int(head.lease_until))
        end
    end
end

-- The owner collected its grant (or holds by a plain acquire): its grant list and
-- note go.
local function collect(state, owner)
    if state.queue.grants[owner] then
        state.queue.grants[owner] = nil
        redis.call('HDEL', state.qkey, 'g:' .. owner)
        redis.call('DEL', grant_key(state.key, owner))
    end
end

local function place_of(state, owner)
    for i, p in ipairs(state.queue.places) do
        if p.owner == owner then
            return p, i
        end
    end
    return nil
end

-- The settling every writing call starts with: lapsed holdings removed, lapsed
-- places dropped, and the queue granted what now fits.
local function settle(state)
    remove_lapsed(state)
    hand_off(state)
end

-- contract.md "LOCK.ACQUIRE": the owner's own live holding in the mode asked for is
-- refreshed with the same token; in the other mode it is an error. Returns the
-- holding refreshed, or nil when the owner holds nothing live here.
local function refresh(state, request)
    local h = holding_of(state, request.owner)
    if not h or not live(h.expires, state.now) then
        return nil
    end
    local mode = request.shared and 'shared' or 'exclusive'
    if state.lock.mode ~= mode then
        fail('ERR mode conflict: owner holds this lock ' .. state.lock.mode
            .. '; release it first (no upgrade or downgrade)')
    end
    local before = h.expires
    h.expires = math.min(state.now + request.ttl, EXACT)
    -- A shared holding holds with the limit last asked, as the module's.
    if request.shared then
        h.limit = request.limit
    end
    write_holding(state, h)
    store_lock(state)
    collect(state, request.owner)
    wake_head(state, before, h.expires)
    return h
end

local function check_owner_len(owner)
    if #owner > MAX_OWNER_LEN then
        fail('ERR invalid owner: ' .. #owner .. ' bytes is longer than lock.max-owner-len ('
            .. MAX_OWNER_LEN .. ')')
    end
end

-- Mode conflict before anything is written (as the module's plan_acquire): a live
-- holding of the owner in the other mode is an error, and nothing changes. So is a
-- live queue place of the owner in the other mode: `settle` may grant that place in
-- this very call, and the conflict would then come after the grant was written
-- (contract.md "Errors": an error changes nothing). A waiter changes its mode by
-- cancelling its place first.
local function check_mode(state, request)
    local mode = request.shared and 'shared' or 'exclusive'
    local h = holding_of(state, request.owner)
    if h and live(h.expires, state.now) then
        if state.lock.mode ~= mode then
            fail('ERR mode conflict: owner holds this lock ' .. state.lock.mode
                .. '; release it first (no upgrade or downgrade)')
        end
        return
    end
    for _, p in ipairs(state.queue.places) do
        if p.owner == request.owner and live(p.lease_until, state.now) then
            local queued = p.shared and 'shared' or 'exclusive'
            if queued ~= mode then
                fail('ERR mode conflict: owner waits for this lock ' .. queued
                    .. '; cancel the wait first (no upgrade or downgrade)')
            end
        end
    end
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
    local request = parse_request(args, 1, false)
    -- The fast miss (the common case under contention): an exclusive holding of
    -- another owner lives while its key does (load_lock), so one read answers,
    -- without the clock or the queue (which could not change the answer). A hash
    -- that is not a lock has no mode and takes the full path to its WRONGTYPE.
    local quick = redis.pcall('HMGET', keys[1], 'mode', 'h:' .. request.owner, FORMAT_FIELD)
    if quick.err then
        fail(quick.err)
    end
    check_format(quick[3], 'lock')
    if not quick[2] then
        check_owner_len(request.owner)
        if quick[1] == 'exclusive' then
            return nil
        end
    end
    local state = open(keys[1])
    check_mode(state, request)
    settle(state)
    local held = refresh(state, request)
    if held then
        return held.token
    end
    if #state.queue.places > 0 or not fits(state, request.shared, request.limit) then
        return nil
    end
    local h = grant(state, request.owner, request.shared, state.now + request.ttl, request.limit)
    store_queue(state)
    return h.token
end

-- FCALL lock_release 1 key owner
-- contract.md "LOCK.RELEASE": 1 when owner's live holding ended, else 0; what it frees goes
-- to the queue in the same call.
local function lock_release(keys, args)
    if #keys ~= 1 or #args ~= 1 then
        arity('lock_release')
    end
    local owner = parse_owner(args[1])
    local state = open(keys[1])
    local h = holding_of(state, owner)
    if not h or not live(h.expires, state.now) then
        -- A miss touches nothing (contract.md "Calls that change nothing": no write, WATCH holds) unless a
        -- lapse waits to be acted on.
        settle(state)
        return 0
    end
    for i, x in ipairs(state.lock.holders) do
        if x == h then
            table.remove(state.lock.holders, i)
            break
        end
    end
    if last_expiry(state) then
        redis.call('HDEL', state.key, 'h:' .. owner)
    end
    store_lock(state)
    collect(state, owner)
    settle(state)
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
    local ttl = parse_ttl(args[2])
    local state = open(keys[1])
    settle(state)
    local h = holding_of(state, owner)
    if not h or not live(h.expires, state.now) then
        return 0
    end
    local before = h.expires
    h.expires = math.min(state.now + ttl, EXACT)
    -- The key's expiry first: Redis 6.2 refuses a script's HSET under OOM only as
    -- its first write, and PEXPIREAT (as DEL, HDEL) it never refuses, so an extend
    -- runs under OOM there too, as LOCK.EXTEND does (Redis 7 has `allow-oom`).
    store_lock(state)
    write_holding(state, h)
    wake_head(state, before, h.expires)
    return 1
end

local function holder_map(h, now)
    -- A lock without TTL (PERSIST by hand) shows -1, as PTTL and LOCK.INFO do.
    local ttl = h.persistent and -1 or math.max(h.expires - now, 0)
    return { map = { owner = h.owner, ttl = ttl, token = h.token, limit = h.limit } }
end

-- How many waiters lock_info describes one by one (as the module's LOCK.INFO).
local QUEUE_SHOWN = 10

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
    local lock = load_lock(key, now)
    local queue = load_queue(queue_key(key))
    local holders = {}
    for _, h in ipairs(lock.holders) do
        if live(h.expires, now) then
            table.insert(holders, holder_map(h, now))
        end
    end
    if #holders == 0 then
        return nil
    end
    local waiters, shown = 0, {}
    for _, p in ipairs(queue.places) do
        if live(p.lease_until, now) then
            waiters = waiters + 1
            if waiters <= QUEUE_SHOWN then
                local w = { owner = p.owner, mode = p.shared and 'shared' or 'exclusive' }
                w.limit = p.limit
                w.waited = math.max(now - (p.since or now), 0)
                table.insert(shown, { map = w })
            end
        end
    end
    local info = { waiters = waiters, mode = lock.mode, holders = holders, queue = shown }
    if lock.mode == 'exclusive' and #holders == 1 then
        local only = holders[1].map
        info.owner, info.ttl, info.token = only.owner, only.ttl, only.token
    end
    return { map = info }
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
local function wake_in(state, place, index)
    local at = state.now + place.lease
    for _, h in ipairs(state.lock.holders) do
        if live(h.expires, state.now) then
            at = math.min(at, h.expires + 1)
        end
    end
    local ahead = state.queue.places[index - 1]
    if ahead then
        at = math.min(at, ahead.lease_until + 1)
    end
    return math.max(at - state.now, 1)
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
    local state = open(keys[1])
    local list = grant_key(state.key, request.owner)
    check_mode(state, request)
    if not holding_of(state, request.owner) then
        check_owner_len(request.owner)
    end
    settle(state)
    local held = refresh(state, request)
    if held then
        if place_of(state, request.owner) then
            drop_fields(state, { 'w:' .. request.owner })
        end
        return { held.token, 0, list }
    end
    local place, index = place_of(state, request.owner)
    if not place and #state.queue.places == 0 and fits(state, request.shared, request.limit) then
        local h = grant(state, request.owner, request.shared, state.now + request.ttl, request.limit)
        store_queue(state)
        return { h.token, 0, list }
    end
    if not place then
        state.queue.seq = state.queue.seq + 1
        place = { owner = request.owner, seq = state.queue.seq, since = state.now }
        table.insert(state.queue.places, place)
        index = #state.queue.places
    end
    place.lease, place.ttl = request.lease, request.ttl
    place.shared, place.limit = request.shared, request.limit
    place.lease_until = state.now + request.lease
        + math.ceil(request.lease / PLACE_GRACE_DIVISOR)
    store_queue(state, {
        'w:' .. request.owner,
        table.concat({ int(place.seq), int(place.lease_until), int(place.lease),
            int(place.ttl), place.shared and 's' or 'x', int(place.limit or 0),
            int(place.since or state.now) }, ' '),
    })
    return { 0, wake_in(state, place, index), list }
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
    local state = open(keys[1])
    local had = false
    local place, index = place_of(state, owner)
    if place then
        table.remove(state.queue.places, index)
        drop_fields(state, { 'w:' .. owner })
        had = true
    end
    local token = state.queue.grants[owner]
    local h = holding_of(state, owner)
    if token and h and h.token == token then
        for i, x in ipairs(state.lock.holders) do
            if x == h then
                table.remove(state.lock.holders, i)
                break
            end
        end
        if last_expiry(state) then
            redis.call('HDEL', state.key, 'h:' .. owner)
        end
        store_lock(state)
        had = true
    end
    collect(state, owner)
    settle(state)
    return had and 1 or 0
end

-- ---------------------------------------------------------------------------
-- Registration: FUNCTION LOAD, or EVALSHA with the function name first.

-- Runs a function, turning a `fail` into its error reply; any other error (a bug)
-- is raised as it is.
local function entry(handler)
    return function(keys, args)
        local ok, result = pcall(handler, keys, args)
        if ok then
            return result
        end
        -- Our `fail` raises a table. A redis.call that fails raises a table on
        -- Redis 7, but text on Redis 6.2, which also puts the script's position
        -- before the server's error and keeps its wire form: "@user_script: 354:
        -- -OOM command not allowed ...\r\n". Either way an error that starts with
        -- an error code (ours, or the server's: OOM, READONLY, ...) is the reply, with
        -- that code; anything else is a bug, raised as it is.
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
end

local FUNCTIONS = {
    { name = 'lock_acquire', fn = lock_acquire, flags = {} },
    { name = 'lock_wait', fn = lock_wait, flags = {} },
    -- As DEL and PEXPIRE: a full server must still free and keep its locks.
    { name = 'lock_release', fn = lock_release, flags = { 'allow-oom' } },
    { name = 'lock_extend', fn = lock_extend, flags = { 'allow-oom' } },
    { name = 'lock_cancel', fn = lock_cancel, flags = { 'allow-oom' } },
    { name = 'lock_info', fn = lock_info, flags = { 'no-writes' } },
    { name = 'lock_version', fn = lock_version, flags = { 'no-writes' } },
}

-- Redis 7.0 runs the load in a bare environment (no ipairs): plain loops here.
if redis.register_function then
    for i = 1, #FUNCTIONS do
        local f = FUNCTIONS[i]
        redis.register_function({ function_name = f.name, callback = entry(f.fn), flags = f.flags })
    end
else
    -- The scripts path: EVALSHA sha numkeys key... name arg...
    -- Redis 6.2 replicates a script verbatim unless told to replicate its effects;
    -- it must be asked before the first write (a no-op on Redis 7).
    redis.replicate_commands()
    local name = ARGV[1]
    for _, f in ipairs(FUNCTIONS) do
        if f.name == name then
            local args = {}
            for i = 2, #ARGV do
                args[i - 1] = ARGV[i]
            end
            return entry(f.fn)(KEYS, args)
        end
    end
    return redis.error_reply("ERR unknown function '" .. printable(name or '') .. "': expected lock_acquire, lock_release, lock_extend, lock_info, lock_version, lock_wait or lock_cancel")
end
