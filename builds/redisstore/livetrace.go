package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobapi/jobapi/builds"
)

var _ builds.LiveTraces = (*Store)(nil)

// A live log is two keys in one hash slot (the build id is the hash tag, so the Lua scripts
// may touch both on a cluster):
//
//	trace:{id}       hash: st (running, canceling, closing while a finish commits, or the
//	                 final status), base (offset of
//	                 the first live byte), due (unix ms when the state must be checked
//	                 against Postgres again), seen (unix ms of the last 416), fenced
//	                 (unix ms of the last fence)
//	trace:{id}:data  string: the live bytes from base on
func (s *Store) traceKeys(id int64) []string {
	k := s.prefix + "trace:{" + strconv.FormatInt(id, 10) + "}"
	return []string{k, k + ":data"}
}

const (
	// liveTraceTTL bounds how long a live log outlives its last state check: long enough for
	// any job and for its archive's retries, short enough that a log nobody archived does
	// not stay in memory for ever.
	liveTraceTTL = 7 * 24 * time.Hour
	// closedTraceTTL is how long a dropped log's closed state stays, refusing the appends of
	// a runner that has not heard its job ended.
	closedTraceTTL = 24 * time.Hour
	// staleFence is the age after which a closing state whose build Postgres still has on
	// its runner is taken for a finish that failed, and reopened.
	staleFence = 30 * time.Second
)

// appendScript appends ARGV[2] at offset ARGV[1] when the state allows it. It answers
// {outcome, state, size, base}.
var appendScript = redis.NewScript(`
local h = redis.call('HMGET', KEYS[1], 'st', 'base', 'due')
if not h[1] then return {'missing', '', 0, 0} end
local base = tonumber(h[2])
local size = base + redis.call('STRLEN', KEYS[2])
if h[1] == 'closing' then return {'fenced', h[1], size, base} end
if h[1] ~= 'running' and h[1] ~= 'canceling' then return {'closed', h[1], size, base} end
if tonumber(h[3]) <= tonumber(ARGV[3]) then return {'check', h[1], size, base} end
if size ~= tonumber(ARGV[1]) then
  -- A write, so that a Redis refusing writes fails this answer too: its tail may be behind
  -- what Postgres took meanwhile, and the runner must hear one size, not two in turn.
  redis.call('HSET', KEYS[1], 'seen', ARGV[3])
  return {'range', h[1], size, base}
end
if #ARGV[2] > 0 then
  local n = redis.call('APPEND', KEYS[2], ARGV[2])
  if n == #ARGV[2] then
    local ttl = redis.call('PTTL', KEYS[1])
    if ttl > 0 then redis.call('PEXPIRE', KEYS[2], ttl) end
  end
  size = base + n
end
return {'ok', h[1], size, base}
`)

// trimLua drops the live bytes below durable (ARGV[1] of the scripts that use it).
const trimLua = `
local function trim(durable)
  local base = tonumber(redis.call('HGET', KEYS[1], 'base'))
  if durable <= base then return end
  local len = redis.call('STRLEN', KEYS[2])
  if durable >= base + len then
    redis.call('DEL', KEYS[2])
  else
    redis.call('SET', KEYS[2], redis.call('GETRANGE', KEYS[2], durable - base, -1), 'KEEPTTL')
  end
  redis.call('HSET', KEYS[1], 'base', durable)
end
`

// armScript: ARGV = status, durable size, due (unix ms), TTL seconds, now (unix ms), age
// (ms) after which a closing state is stale. It answers the state.
var armScript = redis.NewScript(trimLua + armLua)

// releaseArmScript is armScript after deleting the build's ack key, KEYS[3]: the ack's
// Redis work in one round trip.
var releaseArmScript = redis.NewScript(trimLua + "redis.call('DEL', KEYS[3])\n" + armLua)

const armLua = `
local cur = redis.call('HGET', KEYS[1], 'st')
local final = ARGV[1] ~= 'running' and ARGV[1] ~= 'canceling'
if cur == 'closing' and not final then
  -- A fence whose finish did not commit (a conflict, an error) is reopened once it is older
  -- than any finish takes; a younger one may belong to a finish still committing.
  local fenced = tonumber(redis.call('HGET', KEYS[1], 'fenced') or 0)
  if tonumber(ARGV[5]) - fenced < tonumber(ARGV[6]) then return cur end
  cur = 'running'
end
if cur and cur ~= 'running' and cur ~= 'canceling' and cur ~= 'closing' then return cur end
local durable = tonumber(ARGV[2])
if not cur then
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[1], 'base', durable)
else
  trim(durable)
end
local st = ARGV[1]
if cur == 'canceling' and st == 'running' then st = cur end
redis.call('HSET', KEYS[1], 'st', st, 'due', ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('EXPIRE', KEYS[2], ARGV[4])
return st
`

var trimScript = redis.NewScript(trimLua + `
if redis.call('EXISTS', KEYS[1]) == 1 then trim(tonumber(ARGV[1])) end
return 1
`)

// fenceScript: a finish is about to commit. A missing state is created closing too (the
// finish may be racing a PATCH that found Redis empty).
var fenceScript = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], 'st')
if not cur then
  redis.call('HSET', KEYS[1], 'st', 'closing', 'base', 0, 'fenced', ARGV[2])
  redis.call('EXPIRE', KEYS[1], ARGV[1])
elseif cur == 'running' or cur == 'canceling' or cur == 'closing' then
  redis.call('HSET', KEYS[1], 'st', 'closing', 'fenced', ARGV[2])
end
return 1
`)

var cancelScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'st') == 'running' then redis.call('HSET', KEYS[1], 'st', 'canceling') end
return 1
`)

// closeScript: ARGV = final status, TTL seconds of a state created here (no live bytes).
var closeScript = redis.NewScript(`
if redis.call('HSETNX', KEYS[1], 'base', 0) == 1 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
redis.call('HSET', KEYS[1], 'st', ARGV[1])
return 1
`)

var dropScript = redis.NewScript(`
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[1], 'st', ARGV[1], 'base', 0)
redis.call('EXPIRE', KEYS[1], ARGV[2])
return 1
`)

// sealScript closes a finished build's live log for its archive and reads it, in one round
// trip: closeScript, then tailScript, and when every live byte is below ARGV[3] (the size
// Postgres holds, which a finished build's log no longer passes) dropScript too, as nothing
// is left here that the archive needs. It answers {base, data, dropped}.
var sealScript = redis.NewScript(`
if redis.call('HSETNX', KEYS[1], 'base', 0) == 1 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
redis.call('HSET', KEYS[1], 'st', ARGV[1])
local base = tonumber(redis.call('HGET', KEYS[1], 'base'))
local data = redis.call('GET', KEYS[2]) or ''
if base + #data <= tonumber(ARGV[3]) then
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[1], 'base', 0)
  redis.call('EXPIRE', KEYS[1], ARGV[2])
  return {base, '', 1}
end
return {base, data, 0}
`)

var tailScript = redis.NewScript(`
local base = redis.call('HGET', KEYS[1], 'base')
if not base then return false end
return {base, redis.call('GET', KEYS[2]) or ''}
`)

// errScript says a script answered something it never answers (a bug, or another program
// writing our keys).
var errScript = errors.New("unexpected live trace script reply")

// Append appends data at offset to build id's live log (one round trip).
func (s *Store) Append(ctx context.Context, id, offset int64, data []byte, now time.Time) (builds.LiveAppend, error) {
	ctx, cancel := callCtx(ctx)
	defer cancel()
	v, err := appendScript.Run(ctx, s.rdb, s.traceKeys(id), offset, data, now.UnixMilli()).Slice()
	if err != nil {
		return builds.LiveAppend{}, unavailable(err)
	}
	if len(v) != 4 {
		return builds.LiveAppend{}, errScript
	}
	outcome, _ := v[0].(string)
	st, _ := v[1].(string)
	size, _ := v[2].(int64)
	base, _ := v[3].(int64)
	r := builds.LiveAppend{Status: builds.Status(st), Size: size, Base: base}
	switch outcome {
	case "ok":
		r.Outcome = builds.LiveAppended
	case "range":
		r.Outcome = builds.LiveRange
	case "closed":
		r.Outcome = builds.LiveClosed
	case "fenced":
		r.Outcome = builds.LiveFenced
	case "missing":
		r.Outcome = builds.LiveMissing
	case "check":
		r.Outcome = builds.LiveCheckDue
	default:
		return builds.LiveAppend{}, fmt.Errorf("%w: %q", errScript, outcome)
	}
	return r, nil
}

// Arm records build id's state as Postgres has it.
func (s *Store) Arm(ctx context.Context, id int64, status builds.Status, durable int64, checkAt time.Time) (builds.Status, error) {
	ctx, cancel := callCtx(ctx)
	defer cancel()
	st, err := armScript.Run(ctx, s.rdb, s.traceKeys(id), string(status), durable, checkAt.UnixMilli(),
		int64(liveTraceTTL.Seconds()), time.Now().UnixMilli(), staleFence.Milliseconds()).Text()
	return builds.Status(st), unavailable(err)
}

// ReleaseArm deletes build id's ack key and arms its live log as Arm does, in one script:
// the build's keys share its hash tag, so they are in one slot on a cluster too. It goes
// through the autopipeliner with the other commands of a busy fleet's request path.
func (s *Store) ReleaseArm(ctx context.Context, id int64, status builds.Status, durable int64, checkAt time.Time) (builds.Status, error) {
	ctx, cancel := callCtx(ctx)
	defer cancel()
	st, err := releaseArmScript.Run(ctx, s.hot, append(s.traceKeys(id), s.ackKey(id)), string(status), durable, checkAt.UnixMilli(),
		int64(liveTraceTTL.Seconds()), time.Now().UnixMilli(), staleFence.Milliseconds()).Text()
	return builds.Status(st), unavailable(err)
}

// Fence stops Redis appends to build id's live log before a finish commits.
func (s *Store) Fence(ctx context.Context, id int64) error {
	ctx, cancel := callCtx(ctx)
	defer cancel()
	// A state created here holds no bytes: it only needs to outlive the finish (a state
	// check that reopens it sets the long TTL).
	return unavailable(fenceScript.Run(ctx, s.rdb, s.traceKeys(id)[:1], int64(closedTraceTTL.Seconds()), time.Now().UnixMilli()).Err())
}

// Cancel moves a running live log to canceling.
func (s *Store) Cancel(ctx context.Context, id int64) error {
	ctx, cancel := callCtx(ctx)
	defer cancel()
	return unavailable(cancelScript.Run(ctx, s.rdb, s.traceKeys(id)[:1]).Err())
}

// Close sets a live log's state to a final status.
func (s *Store) Close(ctx context.Context, id int64, status builds.Status) error {
	ctx, cancel := callCtx(ctx)
	defer cancel()
	return unavailable(closeScript.Run(ctx, s.rdb, s.traceKeys(id)[:1], string(status), int64(closedTraceTTL.Seconds())).Err())
}

// Tail returns where build id's live bytes start and the bytes.
func (s *Store) Tail(ctx context.Context, id int64) (int64, []byte, bool, error) {
	ctx, cancel := callCtx(ctx)
	defer cancel()
	v, err := tailScript.Run(ctx, s.rdb, s.traceKeys(id)).Slice()
	if errors.Is(err, redis.Nil) {
		return 0, nil, false, nil
	}
	if err != nil {
		return 0, nil, false, unavailable(err)
	}
	if len(v) != 2 {
		return 0, nil, false, errScript
	}
	bs, _ := v[0].(string)
	base, err := strconv.ParseInt(bs, 10, 64)
	if err != nil {
		return 0, nil, false, fmt.Errorf("%w: base %q", errScript, bs)
	}
	data, _ := v[1].(string)
	return base, []byte(data), true, nil
}

// Seal closes build id's live log with its final status and returns its live bytes; when
// they all lie below durable it drops them too (dropped, and no data).
func (s *Store) Seal(ctx context.Context, id int64, status builds.Status, durable int64) (int64, []byte, bool, error) {
	ctx, cancel := callCtx(ctx)
	defer cancel()
	v, err := sealScript.Run(ctx, s.rdb, s.traceKeys(id), string(status), int64(closedTraceTTL.Seconds()), durable).Slice()
	if err != nil {
		return 0, nil, false, unavailable(err)
	}
	if len(v) != 3 {
		return 0, nil, false, errScript
	}
	base, ok1 := v[0].(int64)
	data, ok2 := v[1].(string)
	dropped, ok3 := v[2].(int64)
	if !ok1 || !ok2 || !ok3 {
		return 0, nil, false, fmt.Errorf("%w: %v", errScript, v)
	}
	return base, []byte(data), dropped == 1, nil
}

// Trim drops build id's live bytes below durable.
func (s *Store) Trim(ctx context.Context, id, durable int64) error {
	ctx, cancel := callCtx(ctx)
	defer cancel()
	return unavailable(trimScript.Run(ctx, s.rdb, s.traceKeys(id), durable).Err())
}

// Drop deletes build id's live bytes, leaving its closed state for closedTraceTTL.
func (s *Store) Drop(ctx context.Context, id int64, status builds.Status) error {
	ctx, cancel := callCtx(ctx)
	defer cancel()
	return unavailable(dropScript.Run(ctx, s.rdb, s.traceKeys(id), string(status), int64(closedTraceTTL.Seconds())).Err())
}
