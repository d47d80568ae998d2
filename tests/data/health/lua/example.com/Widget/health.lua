-- Health of example.com/Widget, a made-up kind for driftless's tests, in Argo CD's
-- health.lua format: the object is the global `obj`; the script returns {status, message}.
local os = require("os")

local hs = {}

-- spec.pausedUntil (Unix seconds) still ahead: the widget is suspended on purpose.
if obj.spec ~= nil and obj.spec.pausedUntil ~= nil and obj.spec.pausedUntil > os.time() then
  hs.status = "Suspended"
  hs.message = "Paused until " .. os.date("!%Y-%m-%d", obj.spec.pausedUntil)
  return hs
end

if obj.status == nil or obj.status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the widget to report its conditions"
  return hs
end

local failures = {}
local ready = nil
for _, condition in ipairs(obj.status.conditions) do
  if condition.type == "Ready" then
    ready = condition
  elseif string.find(condition.type, "Failed$") ~= nil and condition.status == "True" then
    table.insert(failures, condition.type .. ": " .. (condition.message or "no message"))
  end
end

if #failures > 0 then
  hs.status = "Degraded"
  hs.message = table.concat(failures, "; ")
  return hs
end

if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = ready.message or ""
  return hs
end

hs.status = "Progressing"
if ready ~= nil and ready.reason ~= nil then
  hs.message = "Not ready yet: " .. ready.reason
else
  hs.message = "Waiting for the widget to become ready"
end
return hs
