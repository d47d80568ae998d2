-- Does not compile: line 4 lacks its `then`.
local hs = {}
hs.status = "Healthy"
if obj.status == nil
  hs.status = "Progressing"
end
return hs
