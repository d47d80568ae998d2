-- Health of every kind of every group under example.org (a wildcard folder, as Argo CD's
-- _.crossplane.io/_): status.phase decides; without a status there is no verdict, so the
-- next rules decide.
if obj.status == nil or obj.status.phase == nil then
  return nil
end
local phase = obj.status.phase
if phase == "Ready" then
  return { status = "Healthy", message = obj.kind .. " " .. obj.metadata.name .. " is ready" }
end
if phase == "Error" then
  return { status = "Degraded", message = obj.status.error or "failed without a message" }
end
return { status = "Progressing", message = "Phase " .. phase }
