-- INFO lock as metrics for prometheus-redis-exporter (--script): every field of the
-- section, as name/value pairs.
local out = {}
for name, value in string.gmatch(redis.call('INFO', 'lock'), '(lock_[%w_]+):(%-?%d+)') do
  out[#out + 1] = name
  out[#out + 1] = value
end
return out
